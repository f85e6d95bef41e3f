/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument and
 * shape checks of the indexing ops index_select, gather, scatter_add and index_add(_),
 * in the order both plugins apply them. Each writes its message into why (opc_why.h).
 *
 * A plugin may check more between the steps (the GPU plugin refuses dtypes it cannot
 * accumulate, and output dtypes, where the CPU plugin relies on the host), which is why
 * scatter_add and index_add come in two steps. The range of the index values is the
 * plugin's to compute (a parallel pass on the CPU, a kernel on the device);
 * opc_index_in_range judges it. */
#ifndef OPREG_OPC_INDEX_H
#define OPREG_OPC_INDEX_H

#include "opc_dtype.h"
#include "opc_scalar.h"
#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A 0-d tensor behaves as one element along dim 0, as in PyTorch. */
static inline int64_t opc_size_at(const opr_tensor_view *v, int32_t d) { return v->ndim ? v->shape[d] : 1; }
static inline int64_t opc_stride_at(const opr_tensor_view *v, int32_t d) { return v->ndim ? v->strides[d] : 0; }

/* Whether index values between min and max (those of a non-empty index) all lie in
 * [-size, size) of dimension dim; negative ones are later wrapped like Python
 * indices. */
static inline bool opc_index_in_range(const char *op, int64_t min, int64_t max, int32_t dim, int64_t size, char *why,
                                      size_t why_size)
{
    if (max < size && min >= -size) return true;
    snprintf(why, why_size, "%s: index %lld out of range for dimension %d of size %lld", op,
             (long long)(max >= size ? max : min), (int)dim, (long long)size);
    return false;
}

/* Whether the dim argument wraps on self and the index is i64. */
static inline bool opc_index_dim_and_dtype(const char *op, const opr_tensor_view *x, const opr_tensor_view *index,
                                           int64_t dim_arg, int32_t *dim, char *why, size_t why_size)
{
    return opc_dim_arg(op, dim_arg, x->ndim, dim, why, why_size) &&
           opc_expect_dtype(op, "index", index, OPR_I64, why, why_size);
}

/* index_select and index_add take a list of positions: a 0-d or 1-d index. */
static inline bool opc_index_is_list(const char *op, const opr_tensor_view *index, char *why, size_t why_size)
{
    if (index->ndim <= 1) return true;
    snprintf(why, why_size, "%s: index must be 0-d or 1-d, got %d-d", op, (int)index->ndim);
    return false;
}

/* Whether the index is no longer than `bound` (the size of `what` there) at dim d. */
static inline bool opc_index_fits(const char *op, const opr_tensor_view *index, int32_t d, int64_t bound,
                                  const char *what, char *why, size_t why_size)
{
    if (index->shape[d] <= bound) return true;
    snprintf(why, why_size, "%s: index has size %lld at dim %d but %s has only %lld", op, (long long)index->shape[d],
             (int)d, what, (long long)bound);
    return false;
}

/* ------------------------------------------------------------------ index_select */

/* index_select(self x, dim, index): dim, and a 0-d or 1-d i64 index. */
static inline bool opc_index_select_args(const opr_tensor_view *x, const opr_tensor_view *index, int64_t dim_arg,
                                         int32_t *dim, char *why, size_t why_size)
{
    return opc_index_dim_and_dtype("index_select", x, index, dim_arg, dim, why, why_size) &&
           opc_index_is_list("index_select", index, why, why_size);
}

/* Whether out has self's shape with the index's length at dim (a 0-d self: as many
 * elements as the index). */
static inline bool opc_index_select_out(const opr_tensor_view *x, const opr_tensor_view *index, int32_t dim,
                                        const opr_tensor_view *out, char *why, size_t why_size)
{
    const int64_t size = opc_size_at(x, dim), nidx = index->numel;
    bool shape_ok = out->numel == (x->ndim ? x->numel / (size ? size : 1) * nidx : nidx);
    if (x->ndim) {
        shape_ok = shape_ok && out->ndim == x->ndim;
        for (int32_t d = 0; shape_ok && d < x->ndim; d++)
            shape_ok = out->shape[d] == (d == dim ? nidx : x->shape[d]);
    }
    if (shape_ok) return true;
    snprintf(why, why_size, "index_select: output shape does not match self and index");
    return false;
}

/* ------------------------------------------------------------------ gather */

/* gather(self x, dim, index) into out: an i64 index with self's number of dims, no
 * longer than self except along dim, and out shaped like the index. */
static inline bool opc_gather_args(const opr_tensor_view *x, const opr_tensor_view *index, const opr_tensor_view *out,
                                   int64_t dim_arg, int32_t *dim, char *why, size_t why_size)
{
    if (!opc_index_dim_and_dtype("gather", x, index, dim_arg, dim, why, why_size)) return false;
    if (index->ndim != x->ndim) {
        snprintf(why, why_size, "gather: index has %d dims but self has %d", (int)index->ndim, (int)x->ndim);
        return false;
    }
    for (int32_t d = 0; d < x->ndim; d++)
        if (d != *dim && !opc_index_fits("gather", index, d, x->shape[d], "self", why, why_size)) return false;
    if (!opc_same_shape(index->ndim, index->shape, out)) {
        snprintf(why, why_size, "gather: output shape must equal the index shape");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ scatter_add */

/* scatter_add(self x, dim, index, src), first step: dim, an i64 index and src of
 * self's dtype. */
static inline bool opc_scatter_add_args(const opr_tensor_view *x, const opr_tensor_view *index,
                                        const opr_tensor_view *src, int64_t dim_arg, int32_t *dim, char *why,
                                        size_t why_size)
{
    return opc_index_dim_and_dtype("scatter_add", x, index, dim_arg, dim, why, why_size) &&
           opc_expect_dtype("scatter_add", "src", src, x->dtype, why, why_size);
}

/* Second step: self, index and src with as many dims, the index no longer than src
 * anywhere nor than self except along dim, and out shaped like self. */
static inline bool opc_scatter_add_shapes(const opr_tensor_view *x, const opr_tensor_view *index,
                                          const opr_tensor_view *src, const opr_tensor_view *out, int32_t dim,
                                          char *why, size_t why_size)
{
    if (index->ndim != x->ndim || src->ndim != x->ndim) {
        snprintf(why, why_size, "scatter_add: self, index and src must have the same number of dims (%d, %d, %d)",
                 (int)x->ndim, (int)index->ndim, (int)src->ndim);
        return false;
    }
    for (int32_t d = 0; d < x->ndim; d++) {
        if (!opc_index_fits("scatter_add", index, d, src->shape[d], "src", why, why_size)) return false;
        if (d != dim && !opc_index_fits("scatter_add", index, d, x->shape[d], "self", why, why_size)) return false;
    }
    if (!opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "scatter_add: output shape must equal self's");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ index_add, index_add_ */

/* index_add(self x, dim, index, source, alpha) (op names which of the two), first
 * step: dim, an i64 index and source of self's dtype. */
static inline bool opc_index_add_args(const char *op, const opr_tensor_view *x, const opr_tensor_view *index,
                                      const opr_tensor_view *source, int64_t dim_arg, int32_t *dim, char *why,
                                      size_t why_size)
{
    return opc_index_dim_and_dtype(op, x, index, dim_arg, dim, why, why_size) &&
           opc_expect_dtype(op, "source", source, x->dtype, why, why_size);
}

/* Second step: a 0-d or 1-d index, source shaped like self with the index's length at
 * dim (a 0-d self takes exactly one index), and out shaped like self. */
static inline bool opc_index_add_shapes(const char *op, const opr_tensor_view *x, const opr_tensor_view *index,
                                        const opr_tensor_view *source, const opr_tensor_view *out, int32_t dim,
                                        char *why, size_t why_size)
{
    if (!opc_index_is_list(op, index, why, why_size)) return false;
    if (source->ndim != x->ndim) {
        snprintf(why, why_size, "%s: source has %d dims but self has %d", op, (int)source->ndim, (int)x->ndim);
        return false;
    }
    for (int32_t d = 0; d < x->ndim; d++) {
        const int64_t want = d == dim ? index->numel : x->shape[d];
        if (source->shape[d] != want) {
            snprintf(why, why_size, "%s: source has size %lld at dim %d, expected %lld", op,
                     (long long)source->shape[d], (int)d, (long long)want);
            return false;
        }
    }
    if (x->ndim == 0 && index->numel != 1) {
        snprintf(why, why_size, "%s: a 0-d self needs exactly one index, got %lld", op, (long long)index->numel);
        return false;
    }
    if (!opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "%s: output shape must equal self's", op);
        return false;
    }
    return true;
}

/* Whether alpha scales a tensor of dtype dt exactly: an i64 (i32) tensor needs a whole
 * number that fits in i64 (i32). */
static inline bool opc_index_add_alpha(const char *op, opr_dtype dt, double alpha, char *why, size_t why_size)
{
    if (dt != OPR_I64 && dt != OPR_I32) return true;
    const bool fits = dt == OPR_I64 ? opc_fits_i64(alpha) : alpha >= -2147483648.0 && alpha < 2147483648.0;
    if (fits && alpha == (double)(int64_t)alpha) return true;
    snprintf(why, why_size, "%s: alpha %g must be an integer for an %s tensor", op, alpha, opc_dtype_name(dt));
    return false;
}

#endif
