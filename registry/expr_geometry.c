/* Built-in functions over a tensor's layout in its storage (its strides and storage
 * offset, which opr_meta carries): as_strided's gradient (registry/ops/shape.yaml)
 * scatters into a buffer laid out like the storage its input and output view, as
 * PyTorch's as_strided_backward does. Like every built-in they read metadata only, so a
 * formula that reads a tensor through them keeps its metadata, not the tensor. */
#include "expr.h"

static int want_list(const mval *v, const char *fn, const char *what)
{
    return v->k == MV_LIST ? OPR_OK : opr_fail(OPR_ERR_INVALID, "%s: %s must be an int list", fn, what);
}

/* strides(t): t's strides, in elements. */
int expr_bi_strides(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_TENSOR) return opr_fail(OPR_ERR_INVALID, "strides: expected a tensor argument");
    const opr_meta *t = a[0].u.t;
    out->k = MV_LIST;
    out->n = t->ndim;
    for (int d = 0; d < t->ndim; d++) out->u.l[d] = t->strides[d];
    return OPR_OK;
}

/* storage_offset(t): where t's first element lies in its storage, in elements. */
int expr_bi_storage_offset(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_TENSOR) return opr_fail(OPR_ERR_INVALID, "storage_offset: expected a tensor argument");
    out->k = MV_INT;
    out->u.i = a[0].u.t->offset;
    return OPR_OK;
}

/* min_storage_size(sizes, strides, offset): the elements a storage needs for a view of
 * that geometry, offset + 1 + sum (size - 1) * stride (PyTorch's _min_storage_size);
 * offset when some size is 0. */
int expr_bi_min_storage_size(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_list(&a[0], "min_storage_size", "sizes") || want_list(&a[1], "min_storage_size", "strides"))
        return OPR_ERR_INVALID;
    if (a[2].k != MV_INT) return opr_fail(OPR_ERR_INVALID, "min_storage_size: offset must be an int");
    if (a[0].n != a[1].n)
        return opr_fail(OPR_ERR_INVALID, "min_storage_size: %d sizes but %d strides", a[0].n, a[1].n);
    int64_t size = a[2].u.i;
    bool empty = false, wrapped = __builtin_add_overflow(size, 1, &size);
    for (int d = 0; d < a[0].n; d++) {
        const int64_t s = a[0].u.l[d], st = a[1].u.l[d];
        if (s < 0) return opr_fail(OPR_ERR_INVALID, "min_storage_size: negative size %lld", (long long)s);
        if (s == 0) empty = true;
        int64_t reach;
        if (s > 0) wrapped |= __builtin_mul_overflow(s - 1, st, &reach) || __builtin_add_overflow(size, reach, &size);
    }
    if (wrapped && !empty) return opr_fail(OPR_ERR_INVALID, "min_storage_size: the storage size overflows int64");
    out->k = MV_INT;
    out->u.i = empty ? a[2].u.i : size;
    return OPR_OK;
}

/* maybe_overlap(sizes, strides): whether two elements of a view of that geometry may
 * share a storage element (PyTorch's _maybe_overlapping_memory over the dims of size
 * other than 1): dims taken by increasing stride, each stride must pass the furthest
 * element the smaller ones reach. False for an empty view. */
int expr_bi_maybe_overlap(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_list(&a[0], "maybe_overlap", "sizes") || want_list(&a[1], "maybe_overlap", "strides")) return OPR_ERR_INVALID;
    if (a[0].n != a[1].n) return opr_fail(OPR_ERR_INVALID, "maybe_overlap: %d sizes but %d strides", a[0].n, a[1].n);
    int order[OPR_MAX_DIMS], m = 0;
    bool empty = false;
    for (int d = 0; d < a[0].n; d++) {
        empty |= a[0].u.l[d] == 0;
        if (a[0].u.l[d] == 1) continue;
        int k = m++; /* insertion by stride, stable */
        while (k > 0 && a[1].u.l[order[k - 1]] > a[1].u.l[d]) { order[k] = order[k - 1]; k--; }
        order[k] = d;
    }
    bool overlap = false;
    int64_t reach = 0;
    for (int k = 0; k < m && !overlap && !empty; k++) {
        const int64_t st = a[1].u.l[order[k]], s = a[0].u.l[order[k]];
        int64_t span;
        overlap = st <= reach;
        if (__builtin_mul_overflow(st, s - 1, &span) || __builtin_add_overflow(reach, span, &reach)) reach = INT64_MAX;
    }
    out->k = MV_BOOL;
    out->u.b = overlap;
    return OPR_OK;
}
