/* as_strided_scatter (registry/ops/shape.yaml), whose arguments every backend checks
 * alike. Header-only, as the rest of plugins/common. */
#ifndef OPREG_OPC_AS_STRIDED_H
#define OPREG_OPC_AS_STRIDED_H

#include "opc_shape.h"

/* as_strided_scatter(self x, src, size, stride, storage_offset, accumulate) into out:
 * out holds x's elements in row-major order (PyTorch's clone of a contiguous self),
 * then the view of out with that geometry takes src, or adds it (accumulate). Checks
 * that size and stride have one length and no negative item, the offset (None: 0) is
 * not negative, src has x's dtype and the shape `size`, the view stays within x's
 * elements and out has x's shape. Gives the offset. */
static inline bool opc_as_strided_scatter_args(const opr_tensor_view *x, const opr_tensor_view *src,
                                               const opr_tensor_view *out, const opr_kernel_arg *size,
                                               const opr_kernel_arg *stride, const opr_kernel_arg *offset, int64_t *off,
                                               char *why, size_t why_size)
{
    const char *op = "as_strided_scatter";
    if (!x || !src || size->kind != OPR_ARG_INT_LIST || stride->kind != OPR_ARG_INT_LIST ||
        (offset->kind != OPR_ARG_INT && offset->kind != OPR_ARG_NONE)) {
        snprintf(why, why_size, "%s: takes (Tensor self, Tensor src, int[] size, int[] stride, int? storage_offset, "
                 "bool accumulate)", op);
        return false;
    }
    const int32_t n = size->u.il.n;
    const int64_t *sz = size->u.il.items, *st = stride->u.il.items;
    *off = offset->kind == OPR_ARG_INT ? offset->u.i : 0;
    if (stride->u.il.n != n) {
        snprintf(why, why_size, "%s: mismatch in length of strides and shape", op);
        return false;
    }
    if (src->dtype != x->dtype) {
        snprintf(why, why_size, "%s: src must have self's dtype", op);
        return false;
    }
    if (*off < 0) {
        snprintf(why, why_size, "%s: invalid storage offset %lld", op, (long long)*off);
        return false;
    }
    bool same = src->ndim == n, nonempty = true;
    int64_t last = *off;
    for (int32_t d = 0; d < n; d++) {
        if (sz[d] < 0 || st[d] < 0) {
            snprintf(why, why_size, "%s: negative size or stride (%lld, %lld) in dimension %d", op, (long long)sz[d],
                     (long long)st[d], (int)d);
            return false;
        }
        same = same && src->shape[d] == sz[d];
        nonempty = nonempty && sz[d] > 0;
    }
    if (!same) {
        snprintf(why, why_size, "%s: expected src to have a size equal to the slice of self (the %d sizes given)", op,
                 (int)n);
        return false;
    }
    bool wrapped = false;
    for (int32_t d = 0; d < n && nonempty; d++) {
        int64_t reach;
        wrapped |= __builtin_mul_overflow(sz[d] - 1, st[d], &reach) || __builtin_add_overflow(last, reach, &last);
    }
    if (nonempty && (wrapped || last >= x->numel)) {
        snprintf(why, why_size, "%s: the view at storage offset %lld reaches past self's %lld elements", op,
                 (long long)*off, (long long)x->numel);
        return false;
    }
    if (!opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "%s: output shape must equal self's", op);
        return false;
    }
    return true;
}

#endif
