/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): dim arguments and
 * shape comparisons of tensor views. */
#ifndef OPREG_OPC_SHAPE_H
#define OPREG_OPC_SHAPE_H

#include "opc_why.h"

#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Drops size-1 dims and merges dim d into d+1 wherever every operand steps through the
 * pair as through one dim (stride[d] == stride[d+1] * shape[d+1]): fewer dims, longer
 * inner loops, a cheaper walker. st[k] holds operand k's strides. Returns the new ndim,
 * 0 when a single element is left. */
static inline int32_t opc_coalesce(int32_t nd, int64_t *shape, int nops, int64_t st[][OPR_MAX_DIMS])
{
    int32_t m = 0; /* dims kept so far, in shape[0..m) */
    for (int32_t d = 0; d < nd; d++) {
        if (shape[d] == 1) continue;
        bool merge = m > 0;
        for (int k = 0; k < nops && merge; k++) merge = st[k][m - 1] == st[k][d] * shape[d];
        if (merge) {
            shape[m - 1] *= shape[d];
            for (int k = 0; k < nops; k++) st[k][m - 1] = st[k][d];
        } else {
            shape[m] = shape[d];
            for (int k = 0; k < nops; k++) st[k][m] = st[k][d];
            m++;
        }
    }
    return m;
}

/* Row-major (contiguous) strides of shape, in elements (opu_contiguous_strides). */
static inline void opc_contig_strides(int32_t ndim, const int64_t *shape, int64_t *st)
{
    opu_contiguous_strides(ndim, shape, st);
}

/* Wraps a possibly negative dim d into [0, ndim), as PyTorch does; false when it is out
 * of range. A 0-d tensor accepts 0 and -1. */
static inline bool opc_wrap_dim(int64_t d, int32_t ndim, int32_t *out)
{
    const int32_t n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n) return false;
    *out = (int32_t)(d < 0 ? d + n : d);
    return true;
}

/* opc_wrap_dim for the dim argument of op on an ndim-d tensor. Returns false with the
 * message in why. */
static inline bool opc_dim_arg(const char *op, int64_t d, int32_t ndim, int32_t *out, char *why, size_t why_size)
{
    if (opc_wrap_dim(d, ndim, out)) return true;
    snprintf(why, why_size, "%s: dim %lld out of range for a %d-d tensor", op, (long long)d, (int)ndim);
    return false;
}

/* The shape a and b broadcast to (right-aligned, PyTorch's rule) into ndim and shape
 * (room for OPR_MAX_DIMS); false when they do not broadcast. */
static inline bool opc_broadcast_shape(const opr_tensor_view *a, const opr_tensor_view *b, int32_t *ndim,
                                       int64_t *shape)
{
    const int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (n > OPR_MAX_DIMS) return false;
    for (int32_t d = 0; d < n; d++) {
        const int32_t da = d - (n - a->ndim), db = d - (n - b->ndim);
        const int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        shape[d] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return true;
}

/* Strides that read v as if expanded to out_shape (right-aligned broadcasting; 0 on
 * broadcast dims). Returns false when v does not broadcast to out_shape
 * (opu_broadcast_strides). */
static inline bool opc_bcast_strides(const opr_tensor_view *v, int32_t out_ndim, const int64_t *out_shape,
                                     int64_t *strides)
{
    return opu_broadcast_strides(v, out_ndim, out_shape, strides);
}

/* Whether view v has the shape [shape[0], ..., shape[ndim - 1]]. */
static inline bool opc_same_shape(int32_t ndim, const int64_t *shape, const opr_tensor_view *v)
{
    if (v->ndim != ndim) return false;
    for (int32_t d = 0; d < ndim; d++)
        if (v->shape[d] != shape[d]) return false;
    return true;
}

/* Whether a and b are the same view of the same memory (same data, shape and strides):
 * copying one onto the other changes nothing. */
static inline bool opc_same_view(const opr_tensor_view *a, const opr_tensor_view *b)
{
    if (a->data != b->data || !opc_same_shape(a->ndim, a->shape, b)) return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->strides[d] != b->strides[d]) return false;
    return true;
}

#endif
