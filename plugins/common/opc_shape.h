/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): dim arguments and
 * shape comparisons of tensor views. */
#ifndef OPREG_OPC_SHAPE_H
#define OPREG_OPC_SHAPE_H

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>

/* Wraps a possibly negative dim d into [0, ndim), as PyTorch does; false when it is out
 * of range. A 0-d tensor accepts 0 and -1. */
static inline bool opc_wrap_dim(int64_t d, int32_t ndim, int32_t *out)
{
    const int32_t n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n) return false;
    *out = (int32_t)(d < 0 ? d + n : d);
    return true;
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
