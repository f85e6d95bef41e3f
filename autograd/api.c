/* Public autograd helpers: gradients of leaves, detaching, plan introspection. */
#include "autograd.h"

#include <stdio.h>
#include <string.h>

/* .grad is read and replaced under the leaf's lock (leaf_lock.c): a backward pass on
 * another thread may be accumulating into it. */
opr_tensor *opr_grad(const opr_tensor *t)
{
    if (!t) return NULL;
    ag_leaf_lock(t);
    opr_tensor *g = t->grad;
    ag_leaf_unlock(t);
    return g;
}

int opr_zero_grad(opr_tensor *t)
{
    if (!t) return opr_fail(OPR_ERR_INVALID, "opr_zero_grad: NULL tensor");
    ag_leaf_lock(t);
    opr_tensor *g = t->grad;
    t->grad = NULL;
    ag_leaf_unlock(t);
    opr_tensor_release(g);
    return OPR_OK;
}

opr_tensor *opr_tensor_detach(opr_tensor *t)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_detach: NULL tensor"); return NULL; }
    return opr_tensor_make_view(t, t->m.ndim, t->m.shape, t->strides, t->offset);
}

/* The op's slots (arguments and outputs) as metadata, for planning without running:
 * the arguments checked exactly as opr_call checks them. */
static int meta_slots(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_meta *outs,
                      opr_device *dev)
{
    opr_dtype dt;
    int rc = dispatch_validate(op, args, nargs, slots, dev, &dt);
    if (rc) return rc;
    for (int k = 0; k < op->nout; k++) {
        mval shape;
        if (!op->shapes[k]) { /* data-dependent (masked_select): plan for the largest it can be */
            shape.k = MV_LIST;
            shape.n = 1;
            shape.u.l[0] = slots[0].k == MV_TENSOR ? slots[0].u.t->numel : 1;
        } else if ((rc = expr_eval(op->shapes[k], slots, &shape))) {
            return opr_fail_wrap(rc, "%s", op->name);
        }
        if (shape.k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "%s: shape expression did not give a list", op->name);
        outs[k] = (opr_meta){.dtype = op->out_dtype[k] >= 0 ? (opr_dtype)op->out_dtype[k] : dt, .ndim = shape.n};
        memcpy(outs[k].shape, shape.u.l, sizeof shape.u.l);
        if ((rc = opr_shape_check(outs[k].shape, shape.n, &outs[k].numel, op->name))) return rc;
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
    if (!buf || !len) return opr_fail(OPR_ERR_INVALID, "opr_plan_explain: NULL or empty buffer");
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
