/* opr_call with jagged arguments: the op's `jagged:` rule (yaml_jagged.c) turns the
 * call into calls on the values, through opr_call (so autograd records them as usual),
 * and wraps the results that keep the values' rows with the input's structure. */
#include "deriv.h"
#include "expr_run.h"
#include "vmap.h"

#include <stdio.h>
#include <string.h>

/* One jagged call in progress. */
typedef struct jcall {
    const opr_op *op;
    opr_value vals[OPR_MAX_ARGS];  /* the arguments, jagged ones replaced by their values */
    int nargs;
    const opr_ragged *r;           /* the structure every jagged argument shares */
    int first;                     /* index of the first jagged argument */
    int ndim;                      /* logical ndim of the jagged arguments */
    vtemps tmp;                    /* tensors made here (converted operands), owned */
    int64_t dims[OPR_MAX_DIMS];    /* a shifted int[] dim argument */
} jcall;

/* A dense operand of an elementwise op, made to broadcast against the values
 * [total, D...]: [D...] (fewer dims than the jagged tensor's non-ragged ones) as it
 * is; [1, D...] and [1, 1, D...] without their leading ones; [B, 1, D...] repeated
 * over each sequence's rows (segment_expand, so its gradient sums them back). */
static int dense_operand(jcall *j, int i)
{
    opr_tensor *d = j->vals[i].u.t;
    const int L = j->ndim;
    char a[96];
    if (d->m.ndim <= L - 2) return OPR_OK;
    const bool full = d->m.ndim == L;
    const bool fits = d->m.ndim == L - 1 ? d->m.shape[0] == 1
                    : full && d->m.shape[1] == 1 && (d->m.shape[0] == 1 || d->m.shape[0] == j->r->batch);
    if (!fits)
        return opr_fail(OPR_ERR_INVALID, "%s: dense argument '%s' %s does not broadcast against the jagged argument "
                        "[%lld, ragged, ...]: a dense operand has the non-ragged dims [D...], or [B or 1, 1, D...]",
                        j->op->name, j->op->args[i].name, opr_tensor_describe(d, a, sizeof a), (long long)j->r->batch);
    int lead = full ? 2 : 1;
    int64_t shape[OPR_MAX_DIMS];
    bool per_sequence = full && d->m.shape[0] != 1;
    int n = 0;
    if (per_sequence) shape[n++] = d->m.shape[0];
    for (int k = lead; k < d->m.ndim; k++) shape[n++] = d->m.shape[k];
    opr_value rargs[2] = {opr_v_tensor(d), opr_v_ints(shape, n)};
    opr_tensor *t;
    int rc = vm_call(j->op->ctx, &j->tmp, ENGINE_OP_RESHAPE, rargs, 2, &t);
    if (rc || !per_sequence) { j->vals[i] = opr_v_tensor(t); return rc; }
    opr_value eargs[3] = {opr_v_tensor(t), opr_v_tensor(j->r->offsets), opr_v_int(j->r->total)};
    if ((rc = vm_call(j->op->ctx, &j->tmp, ENGINE_OP_SEGMENT_EXPAND, eargs, 3, &t))) return rc;
    j->vals[i] = opr_v_tensor(t);
    return OPR_OK;
}

static int wrap_dim(const jcall *j, int64_t d, int *out)
{
    if (d < -j->ndim || d >= j->ndim)
        return opr_fail(OPR_ERR_INVALID, "%s: dim %lld out of range for a %d-d jagged tensor", j->op->name, (long long)d,
                        j->ndim);
    *out = (int)(d < 0 ? d + j->ndim : d);
    return OPR_OK;
}

/* JAGGED_DIM: shifts the dims past the ragged one onto the values. *ragged is set when
 * the dims are exactly the ragged one; *all when there are none (every element). */
static int shift_dims(jcall *j, bool *ragged, bool *all)
{
    const int a = j->op->jagged.dim_arg;
    opr_value *v = &j->vals[a];
    const op_arg *arg = &j->op->args[a];
    int64_t given[OPR_MAX_DIMS];
    int n = 0;
    *ragged = *all = false;
    if (a >= j->nargs || v->kind == OPR_V_NONE) { /* omitted: the default */
        if (arg->has_default && arg->def.kind == OPR_ARG_INT) given[n++] = arg->def.u.i;
        else if (arg->has_default && arg->def.kind == OPR_ARG_INT_LIST)
            for (int k = 0; k < arg->def.u.il.n; k++) given[n++] = arg->def.u.il.items[k];
        else if (!arg->optional && !arg->has_default)
            return opr_fail(OPR_ERR_INVALID, "%s: missing argument '%s'", j->op->name, arg->name);
    } else if (v->kind == OPR_V_INT) {
        given[n++] = v->u.i;
    } else if (v->kind == OPR_V_INT_LIST) {
        if (v->u.il.n < 0 || v->u.il.n > OPR_MAX_DIMS || (v->u.il.n && !v->u.il.items))
            return opr_fail(OPR_ERR_INVALID, "%s: bad list for argument '%s'", j->op->name, arg->name);
        for (int k = 0; k < v->u.il.n; k++) given[n++] = v->u.il.items[k];
    } else {
        return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' expects %s", j->op->name, arg->name,
                        arg->type == ARG_INT ? "an int" : "a list of ints");
    }
    if (!n) { /* every element: on the values, unless the result should keep every (logical) dim */
        for (int i = 0; i < j->op->nargs; i++)
            if (!strcmp(j->op->args[i].name, "keepdim") && i < j->nargs && j->vals[i].kind == OPR_V_BOOL && j->vals[i].u.b)
                return opr_fail(OPR_ERR_UNSUPPORTED, "%s: keepdim over every dim of a jagged tensor is not supported",
                                j->op->name);
        *all = true;
        return OPR_OK;
    }
    int has_ragged = 0;
    for (int k = 0; k < n; k++) {
        int d = 0;
        int rc = wrap_dim(j, given[k], &d);
        if (rc) return rc;
        if (d == 0)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: over dim 0 of a jagged tensor (the batch) is not supported",
                            j->op->name);
        if (d == 1) has_ragged++;
        j->dims[k] = d - 1;
    }
    if (has_ragged) {
        if (n != 1)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: the ragged dim (1) of a jagged tensor together with other dims "
                            "is not supported: reduce them one after the other", j->op->name);
        if (!j->op->jagged.ragged)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: over the ragged dim (1) of a jagged tensor is not supported",
                            j->op->name);
        *ragged = true;
        return OPR_OK;
    }
    if (arg->type == ARG_INT) *v = opr_v_int(j->dims[0]);
    else *v = opr_v_ints(j->dims, n);
    return OPR_OK;
}

/* The rule's expression over the ragged dim, on the values and the offsets. */
static int run_ragged(jcall *j, opr_tensor **out)
{
    const opr_op *op = j->op;
    jagged_rule *rule = (jagged_rule *)&op->jagged;
    int rc = OPR_OK;
    if (!atomic_load_explicit(&rule->linked, memory_order_acquire)) {
        char what[128];
        snprintf(what, sizeof what, "jagged rule of %s", op->name);
        pthread_mutex_lock(&op->ctx->lock);
        rc = deriv_link_calls(op->ctx, op, what, rule->ragged, false);
        if (!rc) atomic_store_explicit(&rule->linked, true, memory_order_release);
        pthread_mutex_unlock(&op->ctx->lock);
        if (rc) return rc;
    }
    opr_tensor *values = j->vals[j->first].u.t;
    expr_run r;
    expr_run_init(&r, op->ctx, values->storage->dev, values->m.dtype);
    mval slots[OPR_MAX_ARGS + 1];
    for (int i = 0; i < op->nargs; i++) {
        const opr_value *v = &j->vals[i];
        mval *m = &slots[i];
        if (i >= j->nargs) { mval_of_kernel_arg(&op->args[i].def, m); continue; }
        switch (v->kind) {
        case OPR_V_TENSOR: *m = (mval){.k = MV_TENSOR, .u.t = &v->u.t->m}; r.known[r.nknown++] = v->u.t; break;
        case OPR_V_INT: *m = (mval){.k = MV_INT, .u.i = v->u.i}; break;
        case OPR_V_DOUBLE: *m = (mval){.k = MV_FLOAT, .u.d = v->u.d}; break;
        case OPR_V_BOOL: *m = (mval){.k = MV_BOOL, .u.b = v->u.b}; break;
        case OPR_V_STRING: *m = (mval){.k = MV_STR, .u.s = v->u.s}; break;
        case OPR_V_INT_LIST:
            if (v->u.il.n < 0 || v->u.il.n > OPR_MAX_DIMS || (v->u.il.n && !v->u.il.items))
                return opr_fail(OPR_ERR_INVALID, "%s: bad list for argument '%s'", op->name, op->args[i].name);
            *m = (mval){.k = MV_LIST, .n = v->u.il.n};
            if (v->u.il.n) memcpy(m->u.l, v->u.il.items, (size_t)v->u.il.n * sizeof(int64_t));
            break;
        default: *m = (mval){.k = MV_NONE}; break;
        }
    }
    slots[op->nargs] = (mval){.k = MV_TENSOR, .u.t = &j->r->offsets->m};
    r.known[r.nknown++] = j->r->offsets;
    mval res;
    rc = expr_run_eval(&r, rule->ragged, slots, &res);
    opr_tensor *t = !rc && res.k == MV_TENSOR ? expr_run_tensor(&r, res.u.t) : NULL;
    if (!rc && !t) rc = opr_fail(OPR_ERR_INVALID, "%s: the jagged rule's ragged expression did not give a tensor", op->name);
    *out = opr_tensor_retain(t);
    expr_run_done(&r);
    return rc;
}

/* The results that keep the values' rows become jagged with the input's structure. */
static int wrap_results(jcall *j, opr_tensor **res, int nres, bool wrap)
{
    for (int k = 0; k < nres; k++) {
        if (!wrap) continue;
        opr_tensor *v = res[k];
        if (v->m.ndim < 1 || v->m.shape[0] != j->r->total) {
            char a[96];
            return opr_fail(OPR_ERR_INVALID, "%s: on jagged values of %lld rows it gave %s, which is not row for row: "
                            "its `jagged:` rule does not fit the op", j->op->name, (long long)j->r->total,
                            opr_tensor_describe(v, a, sizeof a));
        }
        if (!(res[k] = opr_jagged_wrap(v, (opr_ragged *)j->r))) { res[k] = v; return opr_error_status(); }
        opr_tensor_release(v);
    }
    return OPR_OK;
}

static int check_arguments(jcall *j)
{
    const opr_op *op = j->op;
    j->first = -1;
    for (int i = 0; i < j->nargs; i++) {
        opr_value *v = &j->vals[i];
        if (v->kind == OPR_V_TENSOR_LIST && (layouts_in_args(v, 1) & LAYOUT_JAGGED))
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: jagged tensors in a Tensor[] argument ('%s') are not supported",
                            op->name, i < op->nargs ? op->args[i].name : "?");
        if (v->kind != OPR_V_TENSOR || !v->u.t || !v->u.t->ragged) continue;
        opr_tensor *t = v->u.t;
        const char *name = i < op->nargs ? op->args[i].name : "?";
        if (j->first < 0) {
            j->first = i;
            j->r = t->ragged;
            j->ndim = t->m.ndim;
        } else if (!opr_ragged_equal(j->r, t->ragged)) {
            return opr_ragged_mismatch(op->name, op->args[j->first].name, j->r, name, t->ragged);
        } else if (t->m.ndim != j->ndim) {
            return opr_fail(OPR_ERR_INVALID, "%s: jagged arguments '%s' and '%s' have different numbers of dims (%d and %d)",
                            op->name, op->args[j->first].name, name, j->ndim, t->m.ndim);
        }
        *v = opr_v_tensor(t->jag_values);
    }
    return OPR_OK;
}

int jagged_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    for (int i = 0; results && i < nres; i++) results[i] = NULL;
    if (!results || nres != op->nout)
        return opr_fail(OPR_ERR_INVALID, "%s: %d result slots given, the op has %d outputs", op->name, nres, op->nout);
    if (nargs < 0 || nargs > op->nargs)
        return opr_fail(OPR_ERR_INVALID, "%s: %d arguments given, the op takes at most %d", op->name, nargs, op->nargs);
    jcall j = {.op = op, .nargs = nargs};
    memcpy(j.vals, args, (size_t)nargs * sizeof *args);
    int rc = check_arguments(&j);
    if (rc) return rc;
    const jagged_kind kind = op->jagged.kind;
    if (kind == JAGGED_NONE)
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: does not take jagged tensors (argument '%s' is jagged); `opreg ops "
                        "--jagged` lists the ops that do", op->name, op->args[j.first].name);
    bool wrap = true, ragged = false, all = kind == JAGGED_ALL;
    if (kind == JAGGED_ROWS) {
        if (j.first != 0)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: only argument '%s' may be jagged", op->name, op->args[0].name);
        if (j.ndim < 3)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: a jagged '%s' needs a dim after the ragged one ([B, ragged, D...])",
                            op->name, op->args[0].name);
        for (int i = 1; i < nargs && !rc; i++)
            if (j.vals[i].kind == OPR_V_TENSOR && j.vals[i].u.t && j.vals[i].u.t->m.ndim > 2)
                rc = opr_fail(OPR_ERR_UNSUPPORTED, "%s: with a jagged '%s', '%s' must have at most 2 dims", op->name,
                              op->args[0].name, op->args[i].name);
    } else if (kind == JAGGED_ELEMENTWISE) {
        for (int i = 0; i < nargs && !rc; i++)
            if (j.vals[i].kind == OPR_V_TENSOR && j.vals[i].u.t && !args[i].u.t->ragged) rc = dense_operand(&j, i);
    } else if (kind == JAGGED_DIM) {
        if (j.first != 0)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: only argument '%s' may be jagged", op->name, op->args[0].name);
        rc = shift_dims(&j, &ragged, &all);
    }
    if (all) wrap = false;
    if (!rc) {
        if (ragged) {
            rc = run_ragged(&j, &results[0]);
            wrap = op->jagged.ragged_keeps_rows;
        } else {
            rc = opr_call(op, j.vals, nargs, results, nres);
        }
    }
    if (!rc) rc = wrap_results(&j, results, nres, wrap);
    vtemps_release(&j.tmp);
    if (rc)
        for (int i = 0; i < nres; i++) { opr_tensor_release(results[i]); results[i] = NULL; }
    return rc;
}
