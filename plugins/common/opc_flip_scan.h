/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument
 * checks of flip (registry/ops/shape.yaml) and cumsum (registry/ops/reduction.yaml), in
 * the order both plugins apply them, and flip's source layout. The host has already
 * checked the schema, dtypes and shapes; these keep a kernel from reading or writing
 * outside its views when it is called some other way. Each writes its message into
 * why (opc_why.h). */
#ifndef OPREG_OPC_FLIP_SCAN_H
#define OPREG_OPC_FLIP_SCAN_H

#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* flip(x, dims) into out (x's shape and dtype): the strides `st` and the element
 * offset `*base` (from x's data) of the view that reads x backwards along every dim of
 * dims, so that flip is a strided copy of that view. dims: each in range, at most once. */
static inline bool opc_flip_view(const char *op, const opr_tensor_view *x, const opr_kernel_arg *dims,
                                 const opr_tensor_view *out, int64_t *st, int64_t *base, char *why, size_t why_size)
{
    bool flip[OPR_MAX_DIMS] = {false};
    if (!opc_same_shape(x->ndim, x->shape, out) || out->dtype != x->dtype) {
        snprintf(why, why_size, "%s: the output must have self's shape and dtype", op);
        return false;
    }
    if (dims->kind != OPR_ARG_INT_LIST) {
        snprintf(why, why_size, "%s: dims must be an int list", op);
        return false;
    }
    for (int i = 0; i < dims->u.il.n; i++) {
        int32_t d;
        if (!opc_dim_arg(op, dims->u.il.items[i], x->ndim, &d, why, why_size)) return false;
        if (x->ndim > 0 && flip[d]) {
            snprintf(why, why_size, "%s: dim %d appears multiple times in the list of dims", op, (int)d);
            return false;
        }
        flip[d] = true;
    }
    *base = 0;
    for (int32_t d = 0; d < x->ndim; d++) {
        st[d] = flip[d] ? -x->strides[d] : x->strides[d];
        if (flip[d] && x->shape[d] > 0) *base += (x->shape[d] - 1) * x->strides[d];
    }
    return true;
}

/* cumsum(x, dim) into out (x's shape and dtype): the wrapped dim in *d (-1 for a 0-d
 * x, a single element). */
static inline bool opc_cumsum_args(const char *op, const opr_tensor_view *x, int64_t dim, const opr_tensor_view *out,
                                   int32_t *d, char *why, size_t why_size)
{
    /* i32 sums into i64, as PyTorch's cumsum of int32 (the YAML's dtype: acc(T)) */
    if (!opc_same_shape(x->ndim, x->shape, out) || out->dtype != (x->dtype == OPR_I32 ? OPR_I64 : x->dtype)) {
        snprintf(why, why_size, "%s: the output must have self's shape and dtype (i64 for i32)", op);
        return false;
    }
    if (!opc_dim_arg(op, dim, x->ndim, d, why, why_size)) return false;
    if (x->ndim == 0) *d = -1;
    return true;
}

#endif
