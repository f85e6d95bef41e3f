/* Argument rules of the scatter family that every backend shares (registry/ops/
 * indexing.yaml): slice_scatter's bounds, the checks of scatter (src / value) and
 * scatter_reduce, and the index range rule, which unlike index_select's takes no
 * negative index (PyTorch's scatter and gather do not wrap). Header-only, as the rest
 * of plugins/common. */
#ifndef OPREG_OPC_SCATTER_H
#define OPREG_OPC_SCATTER_H

#include "opc_index.h"

#include <string.h>

/* slice's bounds as PyTorch computes them: `given_*` false means None (0 / size); a
 * negative bound counts from the end, then both are clamped into [0, size] and end to
 * at least start. Gives start and the number of elements, ceil((end - start) / step). */
static inline void opc_slice_bounds(int64_t size, bool given_start, int64_t start, bool given_end, int64_t end,
                                    int64_t step, int64_t *first, int64_t *count)
{
    int64_t s = given_start ? start : 0, e = given_end ? end : size;
    if (s < 0) s += size;
    if (e < 0) e += size;
    s = s < 0 ? 0 : s > size ? size : s;
    e = e < s ? s : e > size ? size : e;
    *first = s;
    *count = (e - s + step - 1) / step;
}

/* slice_scatter(self x, src, dim, start, end, step) into out: dim wraps, step > 0, src
 * has self's dtype and shape except `count` at dim, out self's shape. Gives the wrapped
 * dim, the first position and the count. */
static inline bool opc_slice_scatter_args(const opr_tensor_view *x, const opr_tensor_view *src,
                                          const opr_tensor_view *out, int64_t dim_arg, bool given_start, int64_t start,
                                          bool given_end, int64_t end, int64_t step, int32_t *dim, int64_t *first,
                                          int64_t *count, char *why, size_t why_size)
{
    if (x->ndim == 0) {
        snprintf(why, why_size, "slice_scatter: self must have at least one dim");
        return false;
    }
    if (!opc_dim_arg("slice_scatter", dim_arg, x->ndim, dim, why, why_size) ||
        !opc_expect_dtype("slice_scatter", "src", src, x->dtype, why, why_size))
        return false;
    if (step <= 0) {
        snprintf(why, why_size, "slice_scatter: slice step must be positive, got %lld", (long long)step);
        return false;
    }
    opc_slice_bounds(x->shape[*dim], given_start, start, given_end, end, step, first, count);
    bool ok = src->ndim == x->ndim;
    for (int32_t d = 0; ok && d < x->ndim; d++) ok = src->shape[d] == (d == *dim ? *count : x->shape[d]);
    if (!ok) {
        snprintf(why, why_size, "slice_scatter: src must have the shape of the slice (self's, with %lld at dim %d)",
                 (long long)*count, (int)*dim);
        return false;
    }
    if (!opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "slice_scatter: output shape must equal self's");
        return false;
    }
    return true;
}

/* scatter (src: non-NULL) and scatter_reduce, named op: dim wraps, index is i64 with
 * self's number of dims, no larger than src anywhere nor than self but at dim; src of
 * self's dtype; out self's shape and dtype. */
static inline bool opc_scatter_args(const char *op, const opr_tensor_view *x, const opr_tensor_view *index,
                                    const opr_tensor_view *src, const opr_tensor_view *out, int64_t dim_arg,
                                    int32_t *dim, char *why, size_t why_size)
{
    if (!opc_index_dim_and_dtype(op, x, index, dim_arg, dim, why, why_size)) return false;
    if (src && !opc_expect_dtype(op, "src", src, x->dtype, why, why_size)) return false;
    if (index->ndim != x->ndim || (src && src->ndim != x->ndim)) {
        snprintf(why, why_size, "%s: index and %s must have as many dims as self (%d)", op, src ? "src" : "self",
                 (int)x->ndim);
        return false;
    }
    for (int32_t d = 0; d < x->ndim; d++) {
        if (src && !opc_index_fits(op, index, d, src->shape[d], "src", why, why_size)) return false;
        if (d != *dim && !opc_index_fits(op, index, d, x->shape[d], "self", why, why_size)) return false;
    }
    if (!opc_same_shape(x->ndim, x->shape, out) || out->dtype != x->dtype) {
        snprintf(why, why_size, "%s: output shape must equal self's", op);
        return false;
    }
    return true;
}

/* PyTorch's scatter family takes indices in [0, size) only: min and max of a non-empty
 * index. */
static inline bool opc_scatter_index_ok(const char *op, int64_t min, int64_t max, int32_t dim, int64_t size,
                                        char *why, size_t why_size)
{
    if (min >= 0 && max < size) return true;
    snprintf(why, why_size, "%s: index %lld is out of bounds for dimension %d with size %lld", op,
             (long long)(min < 0 ? min : max), (int)dim, (long long)size);
    return false;
}

/* scatter_reduce's reductions. */
typedef enum { OPC_RED_SUM, OPC_RED_PROD, OPC_RED_MEAN, OPC_RED_AMAX, OPC_RED_AMIN } opc_reduce;

static inline bool opc_reduce_parse(const char *s, opc_reduce *r, char *why, size_t why_size)
{
    static const char *const names[] = {"sum", "prod", "mean", "amax", "amin"};
    for (int i = 0; s && i < 5; i++)
        if (!strcmp(s, names[i])) {
            *r = (opc_reduce)i;
            return true;
        }
    snprintf(why, why_size, "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got %s",
             s ? s : "none");
    return false;
}

#endif
