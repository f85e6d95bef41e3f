/* Public autograd helpers: gradients of leaves, detaching, plan introspection. */
#include "autograd.h"

#include <stdio.h>
#include <string.h>

int opr_zero_grad(opr_tensor *t)
{
    if (!t) return opr_fail(OPR_ERR_INVALID, "opr_zero_grad: NULL tensor");
    opr_tensor_release(t->grad);
    t->grad = NULL;
    return OPR_OK;
}

opr_tensor *opr_tensor_detach(opr_tensor *t)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_detach: NULL tensor"); return NULL; }
    return opr_tensor_make_view(t, t->m.ndim, t->m.shape, t->strides, t->offset);
}

/* The op's slots (arguments and outputs) as metadata, for planning without running. */
static int meta_slots(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_meta *outs,
                      opr_device *dev)
{
    if (!op) return opr_fail(OPR_ERR_INVALID, "NULL op");
    if (nargs < 0 || nargs > op->nargs || (nargs && !args))
        return opr_fail(OPR_ERR_INVALID, "%s: takes at most %d argument(s)", op->name, op->nargs);
    opr_dtype dt = OPR_F32;
    bool have_dt = false;
    *dev = OPR_CPU;
    for (int i = 0; i < op->nargs; i++) {
        mval *m = &slots[i];
        if (i >= nargs) {
            if (!op->args[i].has_default) return opr_fail(OPR_ERR_INVALID, "%s: missing argument '%s'", op->name, op->args[i].name);
            mval_of_kernel_arg(&op->args[i].def, m);
            continue;
        }
        const opr_value *v = &args[i];
        switch (v->kind) {
        case OPR_V_TENSOR:
            if (!v->u.t) return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' is NULL", op->name, op->args[i].name);
            m->k = MV_TENSOR;
            m->u.t = &v->u.t->m;
            *dev = v->u.t->storage->dev;
            if (!have_dt && op->args[i].fixed_dtype < 0) { dt = v->u.t->m.dtype; have_dt = true; }
            break;
        case OPR_V_INT: m->k = MV_INT; m->u.i = v->u.i; break;
        case OPR_V_DOUBLE: m->k = MV_FLOAT; m->u.d = v->u.d; break;
        case OPR_V_BOOL: m->k = MV_BOOL; m->u.b = v->u.b; break;
        case OPR_V_INT_LIST:
            if (v->u.il.n < 0 || v->u.il.n > OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "%s: list too long", op->name);
            m->k = MV_LIST;
            m->n = v->u.il.n;
            if (m->n) memcpy(m->u.l, v->u.il.items, (size_t)m->n * sizeof(int64_t));
            break;
        default: m->k = MV_NONE; break;
        }
    }
    for (int k = 0; k < op->nout; k++) {
        mval shape;
        if (!op->shapes[k]) { /* data-dependent (masked_select): plan for the largest it can be */
            shape.k = MV_LIST;
            shape.n = 1;
            shape.u.l[0] = slots[0].k == MV_TENSOR ? slots[0].u.t->numel : 1;
        } else {
            int rc = expr_eval(op->shapes[k], slots, &shape);
            if (rc) return opr_fail_wrap(rc, "%s", op->name);
        }
        outs[k] = (opr_meta){.dtype = op->out_dtype[k] >= 0 ? (opr_dtype)op->out_dtype[k] : dt, .ndim = shape.n};
        memcpy(outs[k].shape, shape.u.l, sizeof shape.u.l);
        outs[k].numel = opr_meta_numel(outs[k].shape, shape.n);
        slots[op->nargs + k] = (mval){.k = MV_TENSOR, .u.t = &outs[k]};
    }
    return OPR_OK;
}

static int mask_of(const opr_op *op, const char *const *names, int n, uint32_t *mask)
{
    *mask = 0;
    for (int i = 0; i < n; i++) {
        int a = -1;
        for (int k = 0; k < op->nargs && names && names[i]; k++)
            if (!strcmp(op->args[k].name, names[i])) a = k;
        if (a < 0 || op->args[a].type != ARG_TENSOR)
            return opr_fail(OPR_ERR_INVALID, "%s has no tensor input named '%s'", op->name, names && names[i] ? names[i] : "(null)");
        *mask |= 1u << a;
    }
    if (!*mask) return opr_fail(OPR_ERR_INVALID, "%s: name at least one input that requires grad", op->name);
    return OPR_OK;
}

int opr_plan_explain(const opr_op *op, const opr_value *args, int nargs, const char *const *requires_grad,
                     int n_requires_grad, char *buf, size_t len)
{
    mval slots[DERIV_MAX_SLOTS];
    opr_meta outs[OPR_MAX_OUTS];
    opr_device dev;
    uint32_t mask;
    int rc = meta_slots(op, args, nargs, slots, outs, &dev);
    if (!rc) rc = mask_of(op, requires_grad, n_requires_grad, &mask);
    if (!rc) rc = plan_explain(op, mask, dev, slots, buf, len);
    return rc;
}

int opr_plan_saved_bytes(const opr_op *op, const opr_value *args, int nargs, const char *const *requires_grad,
                         int n_requires_grad, uint64_t *bytes)
{
    mval slots[DERIV_MAX_SLOTS];
    opr_meta outs[OPR_MAX_OUTS];
    opr_device dev;
    uint32_t mask;
    if (!bytes) return opr_fail(OPR_ERR_INVALID, "opr_plan_saved_bytes: NULL output");
    int rc = meta_slots(op, args, nargs, slots, outs, &dev);
    if (!rc) rc = mask_of(op, requires_grad, n_requires_grad, &mask);
    if (rc) return rc;
    const ag_plan *p = plan_get(op, mask, dev, slots);
    if (!p) return OPR_ERR_UNSUPPORTED;
    *bytes = p->saved_bytes;
    return OPR_OK;
}

int opr_op_grad_candidate_count(const opr_op *op)
{
    return op && op->deriv ? op->deriv->ncands : 0;
}

const char *opr_op_grad_candidate_label(const opr_op *op, int i)
{
    if (!op || !op->deriv || i < 0 || i >= op->deriv->ncands) return NULL;
    return op->deriv->cands[i].label;
}

int opr_op_force_grad_candidate(const opr_op *op, int i)
{
    if (!op || !op->deriv) return opr_fail(OPR_ERR_INVALID, "op has no derivative candidates");
    if (i < -1 || i >= op->deriv->ncands) return opr_fail(OPR_ERR_INVALID, "%s: no candidate %d", op->name, i);
    op->deriv->forced = i;
    plan_cache_clear(op->deriv);
    return OPR_OK;
}

static void plan_text(const opr_node *n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n->plan->nchosen && used + 1 < len; i++) {
        const deriv_cand *c = &n->op->deriv->cands[n->plan->chosen[i]];
        int k = snprintf(buf + used, len - used, "%s[%s%s%s]", i ? " + " : "", c->label, c->kernel ? " kernel " : "",
                         c->kernel ? c->kernel->name : "");
        if (k > 0) used += (size_t)k;
    }
}

int opr_autograd_walk(const opr_tensor *root, void (*fn)(void *ud, const opr_node_info *info), void *ud)
{
    if (!root || !fn) return opr_fail(OPR_ERR_INVALID, "opr_autograd_walk: NULL argument");
    opr_node *stack[256];
    opr_node *seen[1024];
    int top = 0, nseen = 0;
    if (root->grad_fn) stack[top++] = root->grad_fn;
    while (top) {
        opr_node *n = stack[--top];
        bool dup = false;
        for (int i = 0; i < nseen && !dup; i++) dup = seen[i] == n;
        if (dup) continue;
        if (nseen == 1024) return opr_fail(OPR_ERR_UNSUPPORTED, "opr_autograd_walk: graph larger than 1024 nodes");
        seen[nseen++] = n;
        char plan[256];
        plan_text(n, plan, sizeof plan);
        opr_node_info info = {.struct_size = sizeof info, .op = n->op->name, .plan = plan};
        for (int s = 0; s < AG_TENSOR_SLOTS; s++)
            if (n->saved[s]) info.saved_bytes += (uint64_t)n->saved[s]->m.numel * opr_elem_size(n->saved[s]->m.dtype);
        for (int a = 0; a < n->op->nargs; a++)
            if (n->op->args[a].type == ARG_TENSOR && n->slots[a].k == MV_TENSOR)
                info.all_inputs_bytes += (uint64_t)n->metas[a].numel * opr_elem_size(n->metas[a].dtype);
        fn(ud, &info);
        for (int a = 0; a < n->op->nargs; a++)
            if (n->next[a].node && top < 256) stack[top++] = n->next[a].node;
    }
    return nseen;
}
