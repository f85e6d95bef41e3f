/* Public autograd helpers: gradients of leaves, detaching, plan introspection. */
#include "autograd.h"
#include "../registry/composite.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* .grad is read and replaced under the leaf's lock (leaf_lock.c): a backward pass on
 * another thread may be accumulating into it. */
opr_tensor *opr_grad(const opr_tensor *t)
{
    if (!t) return NULL;
    const opr_tensor *leaf = opr_jagged_base(t);
    ag_leaf_lock(leaf);
    opr_tensor *g = leaf->grad;
    if (g && t->ragged) { /* the values' gradient with t's structure, made once per gradient */
        opr_tensor *w = atomic_load_explicit(&((opr_tensor *)t)->jag_grad, memory_order_relaxed);
        if (!w || w->jag_values != g) {
            opr_tensor *fresh = opr_jagged_wrap(g, t->ragged);
            if (fresh) {
                atomic_store_explicit(&((opr_tensor *)t)->jag_grad, fresh, memory_order_release);
                opr_tensor_release(w);
            }
            w = fresh;
        }
        g = w;
    }
    ag_leaf_unlock(leaf);
    return g;
}

opr_status opr_zero_grad(opr_tensor *t)
{
    if (!t) return opr_fail(OPR_ERR_INVALID, "opr_zero_grad: NULL tensor");
    opr_tensor *leaf = opr_jagged_base(t);
    ag_leaf_lock(leaf);
    opr_tensor *g = leaf->grad;
    leaf->grad = NULL;
    opr_tensor *w = t->ragged ? atomic_exchange_explicit(&t->jag_grad, NULL, memory_order_acq_rel) : NULL;
    ag_leaf_unlock(leaf);
    opr_tensor_release(g);
    opr_tensor_release(w);
    return OPR_OK;
}

opr_tensor *opr_tensor_detach(opr_tensor *t)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_detach: NULL tensor"); return NULL; }
    if (t->ragged || t->bt_phys) { /* the same layout over the detached values / physical tensor */
        opr_tensor *v = opr_tensor_detach(t->ragged ? t->jag_values : t->bt_phys);
        opr_tensor *j = !v ? NULL : t->ragged ? opr_jagged_wrap(v, t->ragged) : opr_batched_wrap(v, t->bt_level);
        opr_tensor_release(v);
        return j;
    }
    return opr_tensor_make_view(t, t->m.ndim, t->m.shape, t->m.strides, t->m.offset);
}

/* The output slot of an op returning a Tensor[]: its pieces' metadata (*pieces, which
 * the caller frees), from a call without grad (the pieces are views: nothing is
 * computed). */
static int piece_slots(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_meta **pieces)
{
    int n = 0;
    int rc = opr_op_result_count(op, args, nargs, &n);
    if (rc) return rc;
    if (n < 1) return opr_fail(OPR_ERR_INVALID, "%s gives no pieces for these arguments: nothing to differentiate", op->name);
    opr_tensor **ts = calloc((size_t)n, sizeof *ts);
    *pieces = malloc((size_t)n * sizeof **pieces);
    if (!ts || !*pieces) rc = opr_fail(OPR_ERR_NOMEM, "%s: out of memory planning", op->name);
    bool mode = opr_grad_mode_set(false);
    if (!rc) rc = opr_call(op, args, nargs, ts, n);
    opr_grad_mode_set(mode);
    for (int k = 0; k < n && !rc; k++) (*pieces)[k] = ts[k]->m;
    for (int k = 0; k < n; k++) opr_tensor_release(ts[k]);
    free(ts);
    if (rc) { free(*pieces); *pieces = NULL; return rc; }
    slots[op->nargs] = (mval){.k = MV_METAS, .n = n, .u.ms = *pieces};
    return OPR_OK;
}

/* The op's slots (arguments and outputs) as metadata, for planning without running:
 * the arguments checked exactly as opr_call checks them. */
static int meta_slots(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_meta *outs,
                      opr_device *dev, opr_meta **pieces)
{
    opr_dtype dt;
    *pieces = NULL;
    int rc = dispatch_validate(op, args, nargs, slots, dev, &dt);
    if (rc) return rc;
    if (op->list_out) return piece_slots(op, args, nargs, slots, pieces);
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
        if (a < 0 || (op->args[a].type != ARG_TENSOR && op->args[a].type != ARG_TENSOR_LIST))
            return opr_fail(OPR_ERR_INVALID, "%s has no tensor input named '%s'", op->name, names && names[i] ? names[i] : "(null)");
        *mask |= 1u << a;
    }
    if (!*mask) return opr_fail(OPR_ERR_INVALID, "%s: name at least one input that requires grad", op->name);
    return OPR_OK;
}

/* A composite op without derivative entries whose forward is one call passing its own
 * arguments by name (scaled_dot_product_attention): that call is the node autograd
 * records, so its plan is the one to show. Appends it to buf; nothing for any other
 * forward. */
static int explain_forwarded_call(const opr_op *op, const opr_value *args, int nargs, const char *const *requires_grad,
                                  int n_requires_grad, char *buf, size_t len)
{
    const composite_def *cd = op->composite;
    if (!cd || op->deriv || cd->nlets || cd->result->kind != EXPR_CALL || cd->result->builtin >= 0) return OPR_OK;
    const expr *call = cd->result;
    const opr_op *callee = opr_op_find(op->ctx, call->name);
    if (!callee || !callee->deriv || call->nargs > callee->nargs) return OPR_OK;
    opr_value cargs[OPR_MAX_ARGS];
    int ncargs = 0;
    for (int i = 0; i < call->nargs; i++) {
        const expr *a = call->args[i];
        if (call->kwnames && call->kwnames[i]) return OPR_OK;
        if (a->kind != EXPR_NAME || a->slot < 0 || a->slot >= op->nargs) return OPR_OK;
        if (a->slot >= nargs) break; /* this and the rest: the defaults */
        cargs[ncargs++] = args[a->slot];
    }
    const char *names[OPR_MAX_ARGS];
    int nnames = 0;
    for (int r = 0; r < n_requires_grad && nnames < OPR_MAX_ARGS; r++)
        for (int i = 0; i < call->nargs; i++)
            if (requires_grad[r] && !strcmp(op->args[call->args[i]->slot].name, requires_grad[r]))
                names[nnames++] = callee->args[i].name;
    size_t used = strlen(buf);
    int n = snprintf(buf + used, len - used, "that node is %s:\n", callee->name);
    if (n < 0 || (size_t)n >= len - used) return OPR_OK;
    return opr_plan_explain(callee, cargs, ncargs, names, nnames, buf + used + (size_t)n, len - used - (size_t)n);
}

opr_status opr_plan_explain(const opr_op *op, const opr_value *args, int nargs, const char *const *requires_grad,
                     int n_requires_grad, char *buf, size_t len)
{
    mval slots[DERIV_MAX_SLOTS];
    opr_meta outs[OPR_MAX_OUTS];
    opr_device dev;
    uint32_t mask;
    if (!buf || !len) return opr_fail(OPR_ERR_INVALID, "opr_plan_explain: NULL or empty buffer");
    opr_meta *pieces = NULL;
    int rc = meta_slots(op, args, nargs, slots, outs, &dev, &pieces);
    if (!rc) rc = mask_of(op, requires_grad, n_requires_grad, &mask);
    if (!rc) rc = plan_explain(op, mask, dev, slots, opr_special_grads_enabled() ? 0 : PLAN_FAST, buf, len);
    if (!rc) rc = explain_forwarded_call(op, args, nargs, requires_grad, n_requires_grad, buf, len);
    free(pieces);
    return rc;
}

opr_status opr_plan_saved_bytes(const opr_op *op, const opr_value *args, int nargs, const char *const *requires_grad,
                         int n_requires_grad, uint64_t *bytes)
{
    mval slots[DERIV_MAX_SLOTS];
    opr_meta outs[OPR_MAX_OUTS];
    opr_device dev;
    uint32_t mask;
    if (!bytes) return opr_fail(OPR_ERR_INVALID, "opr_plan_saved_bytes: NULL output");
    opr_meta *pieces = NULL;
    int rc = meta_slots(op, args, nargs, slots, outs, &dev, &pieces);
    if (!rc) rc = mask_of(op, requires_grad, n_requires_grad, &mask);
    if (rc) { free(pieces); return rc; }
    const deriv_plan *p = plan_get(op, mask, dev, slots, opr_special_grads_enabled() ? 0 : PLAN_FAST);
    free(pieces);
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

opr_status opr_op_force_grad_candidate(const opr_op *op, int i)
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
        int k = snprintf(buf + used, len - used, "%s[%s]", i ? " + " : "", c->label); /* names its kernel */
        if (k > 0) used += (size_t)k;
    }
}

/* Nodes already reported by a walk: open addressing on the node's address. */
typedef struct node_set {
    const opr_node **slots;
    size_t cap, n;
} node_set;

/* Adds n; 1 if it was new, 0 if already there, -1 out of memory. */
static int node_set_add(node_set *set, const opr_node *n)
{
    if ((set->n + 1) * 2 > set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        const opr_node **slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->slots[i]) continue;
            size_t h = ((uintptr_t)set->slots[i] >> 4) & (cap - 1);
            while (slots[h]) h = (h + 1) & (cap - 1);
            slots[h] = set->slots[i];
        }
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    size_t h = ((uintptr_t)n >> 4) & (set->cap - 1);
    for (; set->slots[h]; h = (h + 1) & (set->cap - 1))
        if (set->slots[h] == n) return 0;
    set->slots[h] = n;
    set->n++;
    return 1;
}

int opr_autograd_walk(const opr_tensor *root, void (*fn)(void *ud, const opr_node_info *info), void *ud)
{
    if (!root || !fn) return opr_fail(OPR_ERR_INVALID, "opr_autograd_walk: NULL argument");
    node_set seen = {0};
    opr_node **stack = NULL;
    size_t top = 0, cap = 0;
    int rc = OPR_OK, count = 0;
    const opr_node *next = opr_jagged_base(root)->grad_fn;
    while (next || top) {
        const opr_node *n = next ? next : stack[--top];
        next = NULL;
        int fresh = node_set_add(&seen, n);
        if (fresh < 0) { rc = opr_fail(OPR_ERR_NOMEM, "opr_autograd_walk: out of memory"); break; }
        if (!fresh) continue;
        count++;
        char plan[256];
        plan_text(n, plan, sizeof plan);
        opr_node_info info = {.struct_size = sizeof info, .op = n->op->name, .plan = plan, .fast = n->fast};
        for (int s = 0; s < n->nmetas; s++)
            if (n->saved[s]) info.saved_bytes += (uint64_t)n->saved[s]->m.numel * opr_elem_size(n->saved[s]->m.dtype);
        for (int a = 0; a < n->op->nargs; a++)
            if (n->op->args[a].type == ARG_TENSOR && n->slots[a].k == MV_TENSOR)
                info.all_inputs_bytes += (uint64_t)n->metas[a].numel * opr_elem_size(n->metas[a].dtype);
        for (int a = 0; a < n->nitems; a++) /* a Tensor[]'s items */
            info.all_inputs_bytes += (uint64_t)n->item_metas[a].numel * opr_elem_size(n->item_metas[a].dtype);
        fn(ud, &info);
        for (int a = 0; a < n->op->nargs + n->nitems && !rc; a++) {
            opr_node *to = a < n->op->nargs ? n->next[a].node : n->items[a - n->op->nargs].node;
            if (!to) continue;
            if (top == cap) {
                size_t grown_cap = cap ? cap * 2 : 64;
                opr_node **grown = realloc(stack, grown_cap * sizeof *grown);
                if (!grown) { rc = opr_fail(OPR_ERR_NOMEM, "opr_autograd_walk: out of memory"); break; }
                stack = grown;
                cap = grown_cap;
            }
            stack[top++] = to;
        }
        if (rc) break;
    }
    free(seen.slots);
    free(stack);
    return rc ? rc : count;
}
