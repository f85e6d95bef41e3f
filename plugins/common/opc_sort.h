/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument checks
 * of sort, topk and mode and their common geometry: every row of self along dim gives k
 * values and their i64 indices (k = the row's length for sort, the k argument for topk,
 * 1 for mode). Checks write their message into why (opc_why.h). */
#ifndef OPREG_OPC_SORT_H
#define OPREG_OPC_SORT_H

#include "opc_dtype.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The outputs' dim for each dim of an ndim-d self: the same one, or with drop_dim (mode
 * without keepdim) -1 for dim, which the outputs lack, and the later dims one lower. */
static inline void opc_rows_out_dims(int32_t ndim, int32_t dim, bool drop_dim, int32_t *out_dims)
{
    for (int32_t d = 0; d < ndim && d < OPR_MAX_DIMS; d++)
        out_dims[d] = !drop_dim ? d : d < dim ? d : d == dim ? -1 : d - 1;
}

/* topk: k must lie in [0, n], n the length of the rows along dim. */
static inline bool opc_topk_k(int64_t k, int32_t dim, int64_t n, char *why, size_t why_size)
{
    if (k >= 0 && k <= n) return true;
    snprintf(why, why_size, "topk: k %lld out of range for dimension %d of size %lld", (long long)k, (int)dim,
             (long long)n);
    return false;
}

/* mode: rows of length 0 have no mode; with no rows at all there is nothing to do. */
static inline bool opc_mode_rows(const opr_tensor_view *x, int32_t dim, char *why, size_t why_size)
{
    if (!x->ndim || x->shape[dim] != 0) return true;
    int64_t rows = 1;
    for (int32_t d = 0; d < x->ndim; d++) rows *= d == dim ? 1 : x->shape[d];
    if (rows == 0) return true;
    snprintf(why, why_size, "mode: dimension %d has size 0", (int)dim);
    return false;
}

/* The rows of self x along dim and where their results go. */
typedef struct {
    int64_t nrows, n, k; /* rows, elements per row, results per row */
    /* over x's shape with dim set to 1 (one position per row): the strides of x, the
     * values and the indices (0 along the dim the outputs lack) */
    int64_t shape[OPR_MAX_DIMS];
    int64_t x_st[OPR_MAX_DIMS], v_st[OPR_MAX_DIMS], i_st[OPR_MAX_DIMS];
    /* strides along dim: of x, and of the values and indices */
    int64_t x_step, v_step, i_step;
} opc_rows;

/* Checks the outputs of op (values of x's dtype and i64 indices, of x's shape with k at
 * dim, out_dims mapping x's dims to theirs as opc_rows_out_dims gives) and lays out the
 * rows. Returns false with the message in why. */
static inline bool opc_rows_plan(const char *op, const opr_tensor_view *x, const opr_tensor_view *vals,
                                 const opr_tensor_view *idx, int32_t dim, int64_t k, const int32_t *out_dims,
                                 opc_rows *r, char *why, size_t why_size)
{
    if (vals->dtype != x->dtype || idx->dtype != OPR_I64) {
        snprintf(why, why_size, "%s: outputs must be %s values and i64 indices", op, opc_dtype_name(x->dtype));
        return false;
    }
    if (vals->ndim != idx->ndim) {
        snprintf(why, why_size, "%s: values and indices outputs differ in rank", op);
        return false;
    }
    if (x->ndim > OPR_MAX_DIMS) {
        snprintf(why, why_size, "%s: too many dims", op);
        return false;
    }
    int32_t used = 0;
    r->nrows = 1;
    for (int32_t d = 0; d < x->ndim; d++) {
        const int32_t od = out_dims[d];
        const int64_t want = d == dim ? k : x->shape[d];
        r->shape[d] = d == dim ? 1 : x->shape[d];
        r->nrows *= r->shape[d];
        r->x_st[d] = x->strides[d];
        if (od < 0) {
            r->v_st[d] = r->i_st[d] = 0;
            continue;
        }
        if (od >= vals->ndim || vals->shape[od] != want || idx->shape[od] != want) {
            snprintf(why, why_size, "%s: output shape does not match self", op);
            return false;
        }
        r->v_st[d] = vals->strides[od];
        r->i_st[d] = idx->strides[od];
        used++;
    }
    if (used != vals->ndim) {
        snprintf(why, why_size, "%s: output has %d dims, expected %d", op, (int)vals->ndim, (int)used);
        return false;
    }
    const bool along = x->ndim && out_dims[dim] >= 0; /* the outputs have dim */
    r->k = k;
    r->n = x->ndim ? x->shape[dim] : 1;
    r->x_step = x->ndim ? x->strides[dim] : 0;
    r->v_step = along ? vals->strides[out_dims[dim]] : 0;
    r->i_step = along ? idx->strides[out_dims[dim]] : 0;
    return true;
}

#endif
