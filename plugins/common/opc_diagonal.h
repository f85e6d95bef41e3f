/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): where a diagonal
 * of a tensor lies (diag, diagonal_scatter), and the argument checks of
 * diagonal_scatter. */
#ifndef OPREG_OPC_DIAGONAL_H
#define OPREG_OPC_DIAGONAL_H

#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdio.h>

/* Row and column of the first element of the diagonal at offset (> 0: above the main
 * diagonal, < 0: below it). */
static inline int64_t opc_diagonal_row0(int64_t offset)
{
    return offset < 0 ? (offset == INT64_MIN ? INT64_MAX : -offset) : 0; /* saturated: past any matrix */
}
static inline int64_t opc_diagonal_col0(int64_t offset) { return offset > 0 ? offset : 0; }

/* Length of the diagonal at offset of a rows x cols matrix; 0 when it lies outside. */
static inline int64_t opc_diagonal_length(int64_t rows, int64_t cols, int64_t offset)
{
    int64_t len = rows - opc_diagonal_row0(offset);
    if (cols - opc_diagonal_col0(offset) < len) len = cols - opc_diagonal_col0(offset);
    return len < 0 ? 0 : len;
}

/* Checks diag_backward(self = g, size = out's shape, diagonal = k), the adjoint of
 * diag: a 1-d size [n] needs g of [n + |k|, n + |k|]; a 2-d size needs g as long as
 * that size's diagonal k. Writes the diagonal's length to *len (n for a 1-d size).
 * k may be anywhere in int64. Returns false with the message in why. */
static inline bool opc_diag_backward_shapes(const opr_tensor_view *g, const opr_tensor_view *out, int64_t k,
                                            int64_t *len, char *why, size_t why_size)
{
    if (g->dtype != out->dtype) {
        snprintf(why, why_size, "diag_backward: dtype mismatch");
        return false;
    }
    if (out->ndim == 1) {
        const int64_t n = out->shape[0];
        int64_t s;
        if (__builtin_add_overflow(n, opc_diagonal_row0(k) + opc_diagonal_col0(k), &s)) {
            snprintf(why, why_size, "diag_backward: diagonal %lld out of range", (long long)k);
            return false;
        }
        if (g->ndim != 2 || g->shape[0] != s || g->shape[1] != s) {
            snprintf(why, why_size, "diag_backward: for size [%lld] and diagonal %lld, self must be [%lld, %lld]",
                     (long long)n, (long long)k, (long long)s, (long long)s);
            return false;
        }
        *len = n;
        return true;
    }
    if (out->ndim != 2) {
        snprintf(why, why_size, "diag_backward: size must have 1 or 2 dims, got %d", (int)out->ndim);
        return false;
    }
    *len = opc_diagonal_length(out->shape[0], out->shape[1], k);
    if (g->ndim != 1 || g->shape[0] != *len) {
        snprintf(why, why_size, "diag_backward: for size [%lld, %lld] and diagonal %lld, self must be [%lld]",
                 (long long)out->shape[0], (long long)out->shape[1], (long long)k, (long long)*len);
        return false;
    }
    return true;
}

/* Wraps dim1 and dim2 of op on an ndim-d self into d1 and d2: self needs at least 2 dims
 * and the two must differ. Returns false with the message in why. */
static inline bool opc_diagonal_dims(const char *op, int32_t ndim, int64_t dim1, int64_t dim2, int32_t *d1, int32_t *d2,
                                     char *why, size_t why_size)
{
    if (ndim < 2) {
        snprintf(why, why_size, "%s: self must have at least 2 dims, got %d", op, (int)ndim);
        return false;
    }
    if (!opc_wrap_dim(dim1, ndim, d1) || !opc_wrap_dim(dim2, ndim, d2)) {
        snprintf(why, why_size, "%s: dim1 %lld or dim2 %lld out of range for a %d-d tensor", op, (long long)dim1,
                 (long long)dim2, (int)ndim);
        return false;
    }
    if (*d1 == *d2) {
        snprintf(why, why_size, "%s: dim1 and dim2 must differ (both are %d)", op, (int)*d1);
        return false;
    }
    return true;
}

/* A diagonal as a strided view of its tensor: the other dims in order, then the
 * diagonal (torch.diagonal's layout). Offset and strides are in elements. */
typedef struct {
    int64_t offset;
    int32_t ndim;
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
} opc_diagonal_view;

/* diagonal_scatter(self x, src, offset) on dims d1 != d2 (opc_diagonal_dims) into out:
 * out must have self's shape and src the shape of the diagonal it replaces, which v
 * gives as a view of out. Returns false with the message in why. */
static inline bool opc_diagonal_scatter_view(const opr_tensor_view *x, const opr_tensor_view *src,
                                             const opr_tensor_view *out, int64_t offset, int32_t d1, int32_t d2,
                                             opc_diagonal_view *v, char *why, size_t why_size)
{
    if (!opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "diagonal_scatter: output shape must equal self's");
        return false;
    }
    const int64_t len = opc_diagonal_length(out->shape[d1], out->shape[d2], offset);
    /* an empty diagonal may lie anywhere in int64: it starts nowhere */
    v->offset = len ? opc_diagonal_row0(offset) * out->strides[d1] + opc_diagonal_col0(offset) * out->strides[d2] : 0;
    v->ndim = 0;
    for (int32_t d = 0; d < out->ndim; d++)
        if (d != d1 && d != d2) {
            v->shape[v->ndim] = out->shape[d];
            v->strides[v->ndim++] = out->strides[d];
        }
    v->shape[v->ndim] = len;
    v->strides[v->ndim++] = out->strides[d1] + out->strides[d2];
    if (!opc_same_shape(v->ndim, v->shape, src)) {
        snprintf(why, why_size,
                 "diagonal_scatter: src must have the shape of the selected diagonal (%d-d, diagonal length %lld)",
                 (int)v->ndim, (long long)len);
        return false;
    }
    return true;
}

#endif
