/* Built-in shape functions of the Core ATen reduction and shape ops (registry/ops/
 * reduction.yaml, shape.yaml): their checks (amax, amin: the reduced elements; flip: its
 * dims) and composites (split_with_sizes, repeat, squeeze.dims) need int lists the
 * expression language cannot build itself, since it has no loops. Like every built-in
 * they read metadata only. */
#include "expr.h"

#include <stdio.h>

static bool int_of(const mval *v, int64_t *out)
{
    if (v->k == MV_INT) { *out = v->u.i; return true; }
    if (v->k == MV_BOOL) { *out = v->u.b; return true; }
    return false;
}

/* The dims of t that `dims` reduces (an int list; [] or None: every dim), into red[];
 * an error for a dim out of range or given twice. A 0-d tensor takes 0 and -1. */
static int reduced_dims(const opr_meta *t, const mval *dims, const char *fn, bool red[OPR_MAX_DIMS])
{
    for (int d = 0; d < OPR_MAX_DIMS; d++) red[d] = false;
    if (dims->k == MV_NONE || (dims->k == MV_LIST && dims->n == 0)) {
        for (int d = 0; d < t->ndim; d++) red[d] = true;
        return OPR_OK;
    }
    if (dims->k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "%s: dims must be an int list", fn);
    const int n = t->ndim > 0 ? t->ndim : 1;
    for (int i = 0; i < dims->n; i++) {
        const int64_t di = dims->u.l[i];
        if (di < -n || di >= n)
            return opr_fail(OPR_ERR_INVALID, "%s: dim %lld out of range for %d dims", fn, (long long)di, t->ndim);
        const int d = (int)(di < 0 ? di + n : di);
        if (red[d]) return opr_fail(OPR_ERR_INVALID, "%s: dim %d appears twice", fn, d);
        red[d] = true;
    }
    return OPR_OK;
}

/* reduce_perm(t, dims): the permutation of t's dims that puts the kept ones first and
 * the reduced ones last, each in order (so that the reduced dims can be flattened into
 * one trailing dim). */
int expr_bi_reduce_perm(const mval *a, int n, mval *out)
{
    (void)n;
    bool red[OPR_MAX_DIMS];
    if (a[0].k != MV_TENSOR) return opr_fail(OPR_ERR_INVALID, "reduce_perm: expected a tensor");
    const opr_meta *t = a[0].u.t;
    int rc = reduced_dims(t, &a[1], "reduce_perm", red);
    if (rc) return rc;
    out->k = MV_LIST;
    out->n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < t->ndim; d++)
            if (red[d] == (pass == 1)) out->u.l[out->n++] = d;
    return OPR_OK;
}

/* reduce_flat(t, dims): the kept sizes of t, then the product of the reduced ones (1
 * when none is reduced, as for a 0-d t): the shape of permute(t, reduce_perm(t, dims))
 * with the reduced dims flattened into the last. */
int expr_bi_reduce_flat(const mval *a, int n, mval *out)
{
    (void)n;
    bool red[OPR_MAX_DIMS];
    if (a[0].k != MV_TENSOR) return opr_fail(OPR_ERR_INVALID, "reduce_flat: expected a tensor");
    const opr_meta *t = a[0].u.t;
    int rc = reduced_dims(t, &a[1], "reduce_flat", red);
    if (rc) return rc;
    int64_t inner = 1;
    out->k = MV_LIST;
    out->n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (red[d]) inner *= t->shape[d]; /* sizes are < 2^63 in product (numel) */
        else out->u.l[out->n++] = t->shape[d];
    }
    if (out->n >= OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "reduce_flat: too many dims");
    out->u.l[out->n++] = inner;
    return OPR_OK;
}

/* list_sum(l) or list_sum(l, k): the sum of the items of the int list l, or of its
 * first k (split_with_sizes: where piece k starts). */
int expr_bi_list_sum(const mval *a, int n, mval *out)
{
    int64_t k = 0;
    if (a[0].k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "list_sum: expected an int list");
    if (n > 1 && !int_of(&a[1], &k)) return opr_fail(OPR_ERR_INVALID, "list_sum: the count must be an int");
    if (n < 2) k = a[0].n;
    if (k < 0 || k > a[0].n)
        return opr_fail(OPR_ERR_INVALID, "list_sum: count %lld out of range for %d items", (long long)k, a[0].n);
    int64_t s = 0;
    for (int i = 0; i < k; i++)
        if (__builtin_add_overflow(s, a[0].u.l[i], &s)) return opr_fail(OPR_ERR_INVALID, "list_sum: overflow");
    out->k = MV_INT;
    out->u.i = s;
    return OPR_OK;
}

/* repeat_shape(t, repeats, stage): the shapes of repeat(t, repeats) as reshape, expand,
 * reshape: with s the sizes of t padded with leading 1s to len(repeats) dims, stage 0
 * gives [1, s0, 1, s1, ...], stage 1 [r0, s0, r1, s1, ...] (the expanded view), stage 2
 * [r0 * s0, r1 * s1, ...] (the result). Stages 0 and 1 need 2 * len(repeats) dims. */
int expr_bi_repeat_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t stage;
    if (a[0].k != MV_TENSOR || a[1].k != MV_LIST || !int_of(&a[2], &stage) || stage < 0 || stage > 2)
        return opr_fail(OPR_ERR_INVALID, "repeat_shape: expected (tensor, int list, 0 | 1 | 2)");
    const opr_meta *t = a[0].u.t;
    const int nr = a[1].n;
    if (nr < t->ndim)
        return opr_fail(OPR_ERR_INVALID, "repeat: the number of repeats (%d) can not be smaller than the number of dims of self (%d)",
                        nr, t->ndim);
    if (stage < 2 && 2 * nr > OPR_MAX_DIMS)
        return opr_fail(OPR_ERR_INVALID, "repeat: %d repeats need %d dims; at most %d are supported", nr, 2 * nr, OPR_MAX_DIMS);
    out->k = MV_LIST;
    out->n = 0;
    for (int d = 0; d < nr; d++) {
        const int64_t s = d < nr - t->ndim ? 1 : t->shape[d - (nr - t->ndim)], r = a[1].u.l[d];
        if (r < 0) return opr_fail(OPR_ERR_INVALID, "repeat: repeats can not be negative (got %lld)", (long long)r);
        if (stage == 2) {
            int64_t p;
            if (__builtin_mul_overflow(r, s, &p)) return opr_fail(OPR_ERR_INVALID, "repeat: size overflows");
            out->u.l[out->n++] = p;
        } else {
            out->u.l[out->n++] = stage == 0 ? 1 : r;
            out->u.l[out->n++] = s;
        }
    }
    return OPR_OK;
}
