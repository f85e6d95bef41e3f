/* opr_call with batched arguments (opr_vmap): the op's batching rule (yaml_batch.c, or
 * its view kind) turns the per-sample call into one call on the physical tensors
 * (batch at dim 0), or, without a rule, one call per sample. The physical calls go
 * through opr_call, so autograd records them for gradients from outside the vmap; the
 * call itself is recorded as one per-sample node on the batched tensors, whose
 * formulas run batched in turn (per-sample gradients inside the callback).
 *
 * The results are checked against the op's own shape expression on the per-sample
 * arguments, and reshaped to it where a rule leaves a dim of 1 (keepdim, 0-d): a rule
 * that does not fit fails, it does not answer wrongly. */
#include "composite.h"
#include "vmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vcall {
    const opr_op *op;
    opr_ctx *ctx;
    opr_value vals[OPR_MAX_ARGS];   /* the physical arguments (defaults filled in) */
    const opr_value *logical;       /* the arguments as given */
    int nargs;                      /* given */
    int64_t level, n;               /* the level batched here, its batch size */
    bool batched[OPR_MAX_ARGS];     /* argument i is batched at this level (vals[i] has the batch at 0) */
    int64_t lists[OPR_MAX_ARGS][OPR_MAX_DIMS]; /* rewritten int[] arguments */
    vtemps tmp;
} vcall;

static int per_sample_rank(const vcall *v, int i)
{
    const opr_tensor *t = v->vals[i].u.t;
    return v->batched[i] ? t->m.ndim - 1 : t->m.ndim;
}

static bool is_tensor(const vcall *v, int i) { return v->vals[i].kind == OPR_V_TENSOR && v->vals[i].u.t; }

/* Batched argument i [N, S...] as [N, 1, .., 1, S...] of per-sample rank r. */
static int pad_rank(vcall *v, int i, int r)
{
    opr_tensor *t = v->vals[i].u.t;
    const int have = t->m.ndim - 1;
    if (have >= r) return OPR_OK;
    if (r + 1 > OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "%s: too many dims under opr_vmap", v->op->name);
    int64_t shape[OPR_MAX_DIMS];
    shape[0] = t->m.shape[0];
    for (int d = 1; d <= r; d++) shape[d] = d <= r - have ? 1 : t->m.shape[d - (r - have)];
    opr_value a[2] = {opr_v_tensor(t), opr_v_ints(shape, r + 1)};
    opr_tensor *out;
    int rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_RESHAPE, a, 2, &out);
    if (!rc) v->vals[i] = opr_v_tensor(out);
    return rc;
}

/* Unbatched argument i [S...] as [N, S...] (a view). */
static int expand_arg(vcall *v, int i)
{
    opr_tensor *out;
    int rc = vm_expand_batch(v->ctx, &v->tmp, v->vals[i].u.t, v->n, &out);
    if (!rc) { v->vals[i] = opr_v_tensor(out); v->batched[i] = true; }
    return rc;
}

/* A per-sample dim d of a rank-r tensor, as a physical dim (past the batch). */
static int shift_dim(const vcall *v, int64_t d, int r, int64_t *out)
{
    const int n = r > 0 ? r : 1;
    if (d < -n || d >= n)
        return opr_fail(OPR_ERR_INVALID, "%s: dim %lld out of range for a %d-d tensor", v->op->name, (long long)d, r);
    *out = (d < 0 ? d + n : d) + 1;
    return OPR_OK;
}

/* ------------------------------------------------------------------ the rules */

/* 1: done; 0: this rule does not apply to these arguments (loop instead). */
enum { RULE_LOOP = 0, RULE_DONE = 1 };

static int rule_elementwise(vcall *v)
{
    int r = 0;
    for (int i = 0; i < v->op->nargs; i++)
        if (is_tensor(v, i) && per_sample_rank(v, i) > r) r = per_sample_rank(v, i);
    for (int i = 0; i < v->op->nargs; i++)
        if (is_tensor(v, i) && v->batched[i]) {
            int rc = pad_rank(v, i, r);
            if (rc) return rc;
        }
    return RULE_DONE;
}

static int rule_dims(vcall *v)
{
    const batch_rule *b = &v->op->batch;
    /* argument 0 and the `expand` ones get the batch; any other batched tensor (a
     * per-sample index of index_select) leaves the call to the loop */
    for (int i = 1; i < v->op->nargs; i++)
        if (is_tensor(v, i) && v->batched[i] && !((b->expand_args >> i) & 1)) return RULE_LOOP;
    if (!is_tensor(v, 0) || (!v->batched[0] && !((b->expand_args >> 0) & 1))) return RULE_LOOP;
    for (int i = 0; i < v->op->nargs; i++)
        if (is_tensor(v, i) && !v->batched[i] && ((b->expand_args >> i) & 1)) {
            int rc = expand_arg(v, i);
            if (rc) return rc;
        }
    int r = per_sample_rank(v, 0);
    if (r == 0) { /* a 0-d sample: as [1], the result reshaped back */
        int rc = pad_rank(v, 0, 1);
        if (rc) return rc;
        r = 1;
    }
    for (int a = 0; a < v->op->nargs; a++) {
        if (!((b->dim_args >> a) & 1)) continue;
        opr_value *val = &v->vals[a];
        int rc = OPR_OK;
        if (val->kind == OPR_V_INT) {
            int64_t d = 0;
            if (!(rc = shift_dim(v, val->u.i, r, &d))) *val = opr_v_int(d);
        } else if (val->kind == OPR_V_INT_LIST && val->u.il.n > 0) {
            for (int k = 0; k < val->u.il.n && !rc; k++) rc = shift_dim(v, val->u.il.items[k], r, &v->lists[a][k]);
            *val = opr_v_ints(v->lists[a], val->u.il.n);
        } else if (val->kind == OPR_V_INT_LIST || val->kind == OPR_V_NONE) { /* every dim of the sample */
            if (v->op->args[a].type == ARG_INT_LIST) {
                for (int k = 0; k < r; k++) v->lists[a][k] = k + 1;
                *val = opr_v_ints(v->lists[a], r);
            } else { /* an int? dim of None: the sample flattened, reduced over its one dim */
                int64_t flat[2] = {v->n, -1};
                opr_value f[2] = {v->vals[0], opr_v_ints(flat, 2)};
                opr_tensor *t;
                if (!(rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_RESHAPE, f, 2, &t))) {
                    v->vals[0] = opr_v_tensor(t);
                    *val = opr_v_int(1);
                }
            }
        }
        if (rc) return rc;
    }
    return RULE_DONE;
}

static int rule_matmul(vcall *v)
{
    if (v->op->nargs < 2 || !is_tensor(v, 0) || !is_tensor(v, 1)) return RULE_LOOP; /* a rule a YAML entry misapplied */
    for (int i = 0; i < 2; i++) /* a batched vector: a matrix of one row (self) or column (other) */
        if (v->batched[i] && per_sample_rank(v, i) == 1) {
            opr_value u[2] = {v->vals[i], opr_v_int(i == 0 ? 1 : 2)};
            opr_tensor *t;
            int rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_UNSQUEEZE, u, 2, &t);
            if (rc) return rc;
            v->vals[i] = opr_v_tensor(t);
        }
    int r = per_sample_rank(v, 0) > per_sample_rank(v, 1) ? per_sample_rank(v, 0) : per_sample_rank(v, 1);
    for (int i = 0; i < 2; i++)
        if (v->batched[i]) {
            int rc = pad_rank(v, i, r);
            if (rc) return rc;
        }
    return RULE_DONE; /* run as matmul: see run_physical */
}

static int rule_batch_dims(vcall *v)
{
    int r = 0;
    for (int i = 0; i < v->op->nargs; i++)
        if (is_tensor(v, i) && per_sample_rank(v, i) > r) r = per_sample_rank(v, i);
    for (int i = 0; i < v->op->nargs; i++) {
        if (!is_tensor(v, i)) continue;
        int rc = OPR_OK;
        if (!v->batched[i]) { /* [1.., S] of rank r, then the batch in front */
            const opr_tensor *t = v->vals[i].u.t;
            int64_t shape[OPR_MAX_DIMS];
            const int have = t->m.ndim;
            for (int d = 0; d < r; d++) shape[d] = d < r - have ? 1 : t->m.shape[d - (r - have)];
            opr_value a[2] = {v->vals[i], opr_v_ints(shape, r)};
            opr_tensor *p;
            if (!(rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_RESHAPE, a, 2, &p))) {
                v->vals[i] = opr_v_tensor(p);
                rc = expand_arg(v, i);
            }
        } else {
            rc = pad_rank(v, i, r);
        }
        if (rc) return rc;
    }
    return RULE_DONE;
}

static int rule_size(vcall *v)
{
    const int a = v->op->batch.size_arg;
    if (!v->batched[0]) return RULE_LOOP;
    for (int i = 1; i < v->op->nargs; i++)
        if (is_tensor(v, i) && v->batched[i]) return RULE_LOOP;
    const opr_value *size = &v->vals[a];
    if (size->kind != OPR_V_INT_LIST) return RULE_LOOP;
    const int r = per_sample_rank(v, 0), m = size->u.il.n;
    if (m > r) return RULE_LOOP;
    v->lists[a][0] = v->n; /* [N, 1.., size]: size right-aligned against the sample */
    for (int d = 0; d < r; d++) v->lists[a][d + 1] = d < r - m ? 1 : size->u.il.items[d - (r - m)];
    v->vals[a] = opr_v_ints(v->lists[a], r + 1);
    return RULE_DONE;
}

static int rule_data_dependent(vcall *v)
{
    if (!v->batched[0])
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: under opr_vmap only '%s' may be batched: the output size depends on "
                        "the other arguments, and would differ by sample", v->op->name, v->op->args[0].name);
    int r = 0;
    for (int i = 0; i < v->op->nargs; i++) {
        if (!is_tensor(v, i)) continue;
        if (i && v->batched[i])
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: a batched '%s' under opr_vmap gives each sample its own output "
                            "size, which cannot be batched (docs/vmap.md)", v->op->name, v->op->args[i].name);
        if (per_sample_rank(v, i) > r) r = per_sample_rank(v, i);
    }
    return pad_rank(v, 0, r) ? opr_error_status() : RULE_DONE;
}

/* Host views: their dim arguments shifted, shapes given the batch. */
static int rule_view(vcall *v, int *op_which)
{
    const int r = per_sample_rank(v, 0);
    opr_value *a = v->vals;
    int64_t *l = v->lists[1];
    int rc = OPR_OK;
    *op_which = -1;
    switch (v->op->view) {
    case VIEW_T:
        if (r < 2) { *op_which = ENGINE_OP_CONTIGUOUS; return RULE_DONE; } /* t of a vector is itself */
        *op_which = ENGINE_OP_TRANSPOSE;
        a[1] = opr_v_int(1);
        a[2] = opr_v_int(2);
        return RULE_DONE;
    case VIEW_TRANSPOSE:
    case VIEW_NARROW:
    case VIEW_SLICE:
    case VIEW_DIAGONAL: {
        /* transpose(dim0, dim1), narrow(dim, ..), diagonal(offset, dim1, dim2) */
        const int first = v->op->view == VIEW_DIAGONAL ? 2 : 1, last = v->op->view == VIEW_NARROW || v->op->view == VIEW_SLICE ? 1 : first + 1;
        if (r == 0) return RULE_LOOP;
        for (int k = first; k <= last && !rc; k++) {
            int64_t d = 0;
            if (!(rc = shift_dim(v, a[k].u.i, r, &d))) a[k] = opr_v_int(d);
        }
        return rc ? rc : RULE_DONE;
    }
    case VIEW_PERMUTE:
        if (a[1].kind != OPR_V_INT_LIST || a[1].u.il.n != r) return RULE_LOOP;
        l[0] = 0;
        for (int k = 0; k < r && !rc; k++) rc = shift_dim(v, a[1].u.il.items[k], r, &l[k + 1]);
        a[1] = opr_v_ints(l, r + 1);
        return rc ? rc : RULE_DONE;
    case VIEW_RESHAPE:
    case VIEW_EXPAND: {
        const int m = a[1].u.il.n;
        if (a[1].kind != OPR_V_INT_LIST || m + 1 > OPR_MAX_DIMS || (v->op->view == VIEW_EXPAND && m < r)) return RULE_LOOP;
        if (v->op->view == VIEW_EXPAND && (rc = pad_rank(v, 0, m))) return rc;
        l[0] = v->n;
        memcpy(l + 1, a[1].u.il.items, (size_t)m * sizeof *l);
        a[1] = opr_v_ints(l, m + 1);
        return RULE_DONE;
    }
    case VIEW_UNSQUEEZE: {
        int64_t d = a[1].u.i;
        if (d < -(r + 1) || d > r)
            return opr_fail(OPR_ERR_INVALID, "unsqueeze: dim %lld out of range for a %d-d tensor", (long long)d, r);
        a[1] = opr_v_int((d < 0 ? d + r + 1 : d) + 1);
        return RULE_DONE;
    }
    case VIEW_SQUEEZE: {
        if (a[1].kind == OPR_V_INT) {
            if (r == 0) { *op_which = ENGINE_OP_CONTIGUOUS; return RULE_DONE; }
            int64_t d = 0;
            if ((rc = shift_dim(v, a[1].u.i, r, &d))) return rc;
            a[1] = opr_v_int(d);
            return RULE_DONE;
        }
        /* every dim of size 1 of the sample: a reshape, so that a batch of 1 stays */
        const opr_tensor *t = a[0].u.t;
        int n = 0;
        l[n++] = v->n;
        for (int d = 1; d < t->m.ndim; d++)
            if (t->m.shape[d] != 1) l[n++] = t->m.shape[d];
        a[1] = opr_v_ints(l, n);
        *op_which = ENGINE_OP_RESHAPE;
        return RULE_DONE;
    }
    case VIEW_CONTIGUOUS: return RULE_DONE;
    case VIEW_AS_STRIDED: {
        /* functorch's rule: sample i is the view at storage_offset + i * (the batch dim's
         * stride), or at its own offset when storage_offset is None: one view of the
         * physical tensor with the batch dim in front */
        const int m = a[1].u.il.n;
        if (a[1].kind != OPR_V_INT_LIST || a[2].kind != OPR_V_INT_LIST || a[2].u.il.n != m || m + 1 > OPR_MAX_DIMS)
            return RULE_LOOP;
        int64_t *st = v->lists[2];
        l[0] = v->n;
        st[0] = a[0].u.t->m.strides[0];
        memcpy(l + 1, a[1].u.il.items, (size_t)m * sizeof *l);
        memcpy(st + 1, a[2].u.il.items, (size_t)m * sizeof *st);
        a[1] = opr_v_ints(l, m + 1);
        a[2] = opr_v_ints(st, m + 1);
        return RULE_DONE;
    }
    default: return RULE_LOOP;
    }
}

/* ------------------------------------------------------------------ running */

/* The loop's limit: past it a batch costs too much time and memory (every sample's
 * results, and their graphs, live until they are stacked), so it is refused, not run. */
#define VMAP_LOOP_MAX_SAMPLES 16384

/* The loop: one call per sample on slices of the batched arguments, results stacked. */
static int run_loop(vcall *v, opr_tensor **res, int nres)
{
    const opr_op *op = v->op;
    if (v->n > VMAP_LOOP_MAX_SAMPLES)
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s has no batching rule, and looping over %lld samples is refused above "
                        "%d: give it a `batch:` rule, or bound the batch with opr_vmap_opts.chunk_size", op->name,
                        (long long)v->n, VMAP_LOOP_MAX_SAMPLES);
    opr_tensor **per = calloc((size_t)(v->n * nres), sizeof *per);
    if (!per) return opr_fail(OPR_ERR_NOMEM, "%s: out of memory under opr_vmap", op->name);
    int rc = OPR_OK;
    opr_tensor *lists[OPR_SAMPLE_MAX_TENSORS];
    for (int64_t s = 0; s < v->n && !rc; s++) {
        vtemps slices = {0}; /* this sample's: released before the next, so memory stays O(results) */
        opr_value a[OPR_MAX_ARGS];
        memcpy(a, v->vals, sizeof a);
        for (int i = 0; i < op->nargs && !rc; i++) {
            if (v->vals[i].kind == OPR_V_TENSOR_LIST) {
                /* a Tensor[] with batched items: each item's sample (at most 16 items) */
                const opr_value *lv = &v->logical[i];
                if (lv->u.tl.n > OPR_SAMPLE_MAX_TENSORS) { rc = opr_fail(OPR_ERR_UNSUPPORTED, "%s: more than %d tensors "
                                                          "in a batched Tensor[]", op->name, OPR_SAMPLE_MAX_TENSORS); break; }
                opr_tensor **items = lists; /* one Tensor[] per op at most */
                for (int k = 0; k < lv->u.tl.n && !rc; k++) {
                    opr_tensor *t = lv->u.tl.items[k];
                    items[k] = t;
                    if (!t || !t->bt_phys || t->bt_level != v->level) continue;
                    opr_value na[4] = {opr_v_tensor(t->bt_phys), opr_v_int(0), opr_v_int(s), opr_v_int(1)};
                    opr_tensor *row, *one;
                    if (!(rc = vm_call(v->ctx, &slices, ENGINE_OP_NARROW, na, 4, &row))) {
                        opr_value ra[2] = {opr_v_tensor(row), opr_v_ints(t->m.shape, t->m.ndim)};
                        if (!(rc = vm_call(v->ctx, &slices, ENGINE_OP_RESHAPE, ra, 2, &one))) items[k] = one;
                    }
                }
                a[i] = opr_v_tensors(items, lv->u.tl.n);
                continue;
            }
            if (!is_tensor(v, i) || !v->batched[i]) continue;
            opr_tensor *p = v->vals[i].u.t, *row, *one;
            opr_value na[4] = {opr_v_tensor(p), opr_v_int(0), opr_v_int(s), opr_v_int(1)};
            if ((rc = vm_call(v->ctx, &slices, ENGINE_OP_NARROW, na, 4, &row))) break;
            opr_value ra[2] = {opr_v_tensor(row), opr_v_ints(p->m.shape + 1, p->m.ndim - 1)};
            if ((rc = vm_call(v->ctx, &slices, ENGINE_OP_RESHAPE, ra, 2, &one))) break;
            a[i] = opr_v_tensor(one);
        }
        if (!rc) rc = opr_call(op, a, op->nargs, per + s * nres, nres);
        vtemps_release(&slices);
    }
    for (int k = 0; k < nres && !rc; k++) {
        opr_tensor **col = malloc((size_t)v->n * sizeof *col);
        if (!col) { rc = opr_fail(OPR_ERR_NOMEM, "%s: out of memory under opr_vmap", op->name); break; }
        for (int64_t s = 0; s < v->n; s++) col[s] = per[s * nres + k];
        rc = vm_stack(v->ctx, col, v->n, 0, &res[k]);
        free(col);
    }
    for (int64_t i = 0; i < v->n * nres; i++) opr_tensor_release(per[i]);
    free(per);
    return rc;
}

/* Applies the rule and runs the physical call(s); res gets physical results, batch at
 * dim 0 (except for an unbatched rule: *wrap false). */
static int run_physical(vcall *v, opr_tensor **res, int nres, bool *wrap)
{
    const opr_op *op = v->op;
    batch_kind kind = op->batch.kind == BATCH_LOOP && op->view ? BATCH_VIEW : op->batch.kind;
    int which = -1, r = RULE_LOOP;
    *wrap = true;
    bool lists = false;
    for (int i = 0; i < op->nargs; i++) lists |= v->vals[i].kind == OPR_V_TENSOR_LIST;
    if (lists) kind = BATCH_LOOP;
    switch (kind) {
    case BATCH_ELEMENTWISE: r = rule_elementwise(v); break;
    case BATCH_DIMS: r = rule_dims(v); break;
    case BATCH_MATMUL: r = rule_matmul(v); which = ENGINE_OP_MATMUL; break;
    case BATCH_BATCH_DIMS: r = rule_batch_dims(v); break;
    case BATCH_ROWS:
        r = RULE_DONE;
        for (int i = 1; i < op->nargs; i++)
            if (is_tensor(v, i) && v->batched[i]) r = RULE_LOOP;
        if (!v->batched[0]) r = RULE_LOOP;
        break;
    case BATCH_SIZE: r = rule_size(v); break;
    case BATCH_UNBATCHED: r = RULE_DONE; *wrap = false; break;
    case BATCH_DATA_DEPENDENT: r = rule_data_dependent(v); break;
    case BATCH_VIEW: r = rule_view(v, &which); break;
    case BATCH_LOOP: break;
    }
    if (r < 0) return r;
    if (r == RULE_LOOP) { *wrap = true; return run_loop(v, res, nres); }
    if (which >= 0) { /* the rule runs another op of the library (matmul for mm, transpose for t, ...) */
        int n = which == ENGINE_OP_CONTIGUOUS ? 1 : which == ENGINE_OP_TRANSPOSE ? 3 : 2;
        opr_tensor *t;
        int rc = vm_call(v->ctx, &v->tmp, which, v->vals, n, &t);
        if (!rc) res[0] = opr_tensor_retain(t);
        return rc;
    }
    int rc = opr_call(op, v->vals, op->nargs, res, nres);
    if (!rc && kind == BATCH_DATA_DEPENDENT) { /* one flat result of N equal parts */
        int64_t split[2] = {v->n, -1};
        opr_value a[2] = {opr_v_tensor(res[0]), opr_v_ints(split, 2)};
        opr_tensor *t;
        if (!(rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_RESHAPE, a, 2, &t))) {
            opr_tensor_release(res[0]);
            res[0] = opr_tensor_retain(t);
        }
    }
    return rc;
}

/* Physical result k as a batched tensor of the per-sample shape `want`. */
static int wrap_result(vcall *v, opr_tensor **res, int k, const mval *want)
{
    opr_tensor *p = res[k];
    int64_t shape[OPR_MAX_DIMS];
    bool fits = want && want->n + 1 <= OPR_MAX_DIMS;
    if (want && fits) {
        shape[0] = v->n;
        memcpy(shape + 1, want->u.l, (size_t)want->n * sizeof *shape);
        if (p->m.ndim != want->n + 1 || memcmp(p->m.shape, shape, (size_t)(want->n + 1) * sizeof *shape)) {
            if (p->m.numel != opr_meta_numel(shape, want->n + 1)) {
                char a[96];
                return opr_fail(OPR_ERR_INVALID, "%s: under opr_vmap its batching rule gave %s for %lld samples, not "
                                "row for row: the rule does not fit the op", v->op->name,
                                opr_tensor_describe(p, a, sizeof a), (long long)v->n);
            }
            opr_value a[2] = {opr_v_tensor(p), opr_v_ints(shape, want->n + 1)};
            opr_tensor *t;
            int rc = vm_call(v->ctx, &v->tmp, ENGINE_OP_RESHAPE, a, 2, &t);
            if (rc) return rc;
            p = t;
        }
    } else if (p->m.ndim < 1 || p->m.shape[0] != v->n) {
        return opr_fail(OPR_ERR_INVALID, "%s: under opr_vmap its result has no batch dim of %lld", v->op->name,
                        (long long)v->n);
    }
    opr_tensor *w = opr_batched_wrap(p, v->level);
    if (!w) return opr_error_status();
    opr_tensor_release(res[k]);
    res[k] = w;
    return OPR_OK;
}

/* The argument values with every default filled in, so rules can rewrite any of them. */
static void fill_defaults(vcall *v)
{
    for (int i = v->nargs; i < v->op->nargs; i++) v->vals[i] = op_arg_default(&v->op->args[i]);
}

int vmap_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    for (int i = 0; results && i < nres; i++) results[i] = NULL;
    if (!results || nres != op->nout)
        return opr_fail(OPR_ERR_INVALID, "%s: %d result slots given, the op has %d outputs", op->name, nres, op->nout);
    if (op->inplace)
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: in-place ops on batched tensors are not supported under opr_vmap; use "
                        "the out-of-place op", op->name);
    /* the per-sample call must be valid as it is: shapes, dtypes, checks */
    mval slots[OPR_MAX_ARGS + OPR_MAX_OUTS + 1];
    opr_device dev;
    opr_dtype dt;
    int rc = dispatch_validate(op, args, nargs, slots, &dev, &dt);
    if (rc) return rc;
    vcall v = {.op = op, .ctx = op->ctx, .logical = args, .nargs = nargs};
    memcpy(v.vals, args, (size_t)nargs * sizeof *args);
    fill_defaults(&v);
    /* the innermost level among the arguments is batched here; outer ones ride along */
    bool grad = false, list_grad = false;
    for (int i = 0; i < nargs; i++) {
        const opr_value *a = &args[i];
        const int n = a->kind == OPR_V_TENSOR ? 1 : a->kind == OPR_V_TENSOR_LIST ? a->u.tl.n : 0;
        for (int k = 0; k < n; k++) {
            const opr_tensor *t = a->kind == OPR_V_TENSOR ? a->u.t : a->u.tl.items[k];
            if (!t) continue;
            if (a->kind == OPR_V_TENSOR) grad |= t->requires_grad;
            else list_grad |= t->requires_grad;
            if (!t->bt_phys) continue;
            const char *gone = opr_vmap_level_gone(t->bt_level);
            if (gone)
                return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' is a batched tensor of %s (batched tensors live "
                                "only during their callback, on its thread)", op->name, op->args[i].name, gone);
            if (t->bt_level > v.level) { v.level = t->bt_level; v.n = t->bt_phys->m.shape[0]; }
        }
    }
    for (int i = 0; op->composite && op->has_written && i < nargs; i++) { /* an out= composite (atan2.out) */
        const opr_tensor *w = args[i].kind == OPR_V_TENSOR ? args[i].u.t : NULL;
        if (!op->args[i].written || !w) continue;
        if (!(w->bt_phys && w->bt_level == v.level))
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: argument '%s' is written in place and is not batched while other "
                            "arguments are: every sample would write its result over the others' (batch it too)",
                            op->name, op->args[i].name);
        /* its samples are views of one batched tensor: none can take another shape */
        mval want;
        if (!expr_eval(op->shapes[0], slots, &want) && want.k == MV_LIST &&
            (want.n != w->m.ndim || memcmp(want.u.l, w->m.shape, (size_t)want.n * sizeof *want.u.l)))
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: argument '%s' is written in place and has a shape other than the "
                            "result's: a batched tensor cannot be resized under opr_vmap (give it the result's shape)",
                            op->name, op->args[i].name);
    }
    if (op->composite && op->batch.kind == BATCH_LOOP && !op->has_written) {
        /* a composite runs its forward on the batched tensors: each part by its own rule
         * (and records itself, as one node when it has derivative entries); one that
         * writes an argument (atan2.out) loops instead, each sample writing its slice */
        opr_tensor *tensors[OPR_MAX_ARGS] = {NULL};
        for (int i = 0; i < nargs; i++)
            if (args[i].kind == OPR_V_TENSOR) tensors[i] = args[i].u.t;
        return composite_call(op, tensors, slots, dev, dt, grad && opr_grad_mode_enabled(), &results[0]);
    }
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == OPR_V_TENSOR && args[i].u.t && args[i].u.t->bt_phys && args[i].u.t->bt_level == v.level) {
            v.vals[i] = opr_v_tensor(args[i].u.t->bt_phys);
            v.batched[i] = true;
        }
    bool wrap;
    rc = run_physical(&v, results, nres, &wrap);
    /* per-sample shapes: the op's own, on the per-sample arguments */
    for (int k = 0; k < nres && !rc && wrap; k++) {
        mval want;
        const bool known = op->shapes[k] && !expr_eval(op->shapes[k], slots, &want) && want.k == MV_LIST;
        rc = wrap_result(&v, results, k, known ? &want : NULL);
    }
    vtemps_release(&v.tmp);
    /* one per-sample node for the call, on the batched tensors */
    if (!rc && (grad || list_grad) && opr_grad_mode_enabled()) {
        opr_tensor *tensors[OPR_MAX_ARGS] = {NULL};
        for (int i = 0; i < nargs; i++)
            if (args[i].kind == OPR_V_TENSOR) tensors[i] = args[i].u.t;
        rc = op->ctx->reg->record(op, tensors, slots, results, dev, list_grad);
    }
    if (rc)
        for (int k = 0; k < nres; k++) { opr_tensor_release(results[k]); results[k] = NULL; }
    return rc;
}
