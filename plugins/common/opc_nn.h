/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument
 * checks of the neural-network ops of registry/ops/nn.yaml (embedding,
 * embedding_backward, triu / tril, argmax / argmin), in the order both plugins apply
 * them. The host has already checked the schema, dtypes and shapes; these keep a kernel
 * from reading or writing outside its views when it is called some other way (a plugin
 * of its own, a fused formula), and judge the index values, which only the data tells.
 * Each writes its message into why (opc_why.h). */
#ifndef OPREG_OPC_NN_H
#define OPREG_OPC_NN_H

#include "opc_dtype.h"
#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* rows [N, D] (weight, or embedding_backward's output), indices i64 of any shape and
 * per_index (embedding's output, or embedding_backward's grad_output), which must be
 * indices.shape + [D] with rows' dtype. */
static inline bool opc_embedding_args(const char *op, const opr_tensor_view *rows, const opr_tensor_view *indices,
                                      const opr_tensor_view *per_index, const char *per_index_name, char *why,
                                      size_t why_size)
{
    if (!opc_expect_dtype(op, "indices", indices, OPR_I64, why, why_size)) return false;
    if (rows->ndim != 2) {
        snprintf(why, why_size, "%s: weight must be 2-d, got %d-d", op, (int)rows->ndim);
        return false;
    }
    bool ok = per_index->dtype == rows->dtype && per_index->ndim == indices->ndim + 1 &&
              per_index->shape[indices->ndim] == rows->shape[1];
    for (int32_t d = 0; ok && d < indices->ndim; d++) ok = per_index->shape[d] == indices->shape[d];
    if (!ok) snprintf(why, why_size, "%s: %s must have shape indices.shape + [%lld] and weight's dtype", op,
                      per_index_name, (long long)rows->shape[1]);
    return ok;
}

/* Whether index values between min and max (those of a non-empty indices) all lie in
 * [0, num_weights): unlike index_select, embedding does not wrap negative ones. */
static inline bool opc_embedding_in_range(const char *op, int64_t min, int64_t max, int64_t num_weights, char *why,
                                          size_t why_size)
{
    if (min >= 0 && max < num_weights) return true;
    snprintf(why, why_size, "%s: index %lld is out of range for a weight of %lld rows (indices must lie in [0, %lld))",
             op, (long long)(min < 0 ? min : max), (long long)num_weights, (long long)num_weights);
    return false;
}

/* triu / tril: self of at least 2 dims, out of its shape and dtype. */
static inline bool opc_triangle_args(const char *op, const opr_tensor_view *x, const opr_tensor_view *out, char *why,
                                     size_t why_size)
{
    if (x->ndim < 2) {
        snprintf(why, why_size, "%s: self must have at least 2 dims, got %d", op, (int)x->ndim);
        return false;
    }
    if (out->dtype != x->dtype || !opc_same_shape(x->ndim, x->shape, out)) {
        snprintf(why, why_size, "%s: output must have self's shape and dtype", op);
        return false;
    }
    return true;
}

/* argmax / argmin: the reduced dim (*dim, or -1 for every dim when dim_given is false)
 * and the output (i64, numel of self without that dim). self must not be empty. */
static inline bool opc_arg_extremum_args(const char *op, const opr_tensor_view *x, bool dim_given, int64_t dim,
                                         const opr_tensor_view *out, int32_t *d, char *why, size_t why_size)
{
    if (x->numel == 0) {
        snprintf(why, why_size, "%s: self is empty (the extremum of no elements is undefined)", op);
        return false;
    }
    *d = -1;
    if (dim_given && x->ndim > 0 && !opc_dim_arg(op, dim, x->ndim, d, why, why_size)) return false;
    if (dim_given && x->ndim == 0 && dim != 0 && dim != -1) {
        snprintf(why, why_size, "%s: dim %lld is out of range for a 0-d tensor", op, (long long)dim);
        return false;
    }
    const int64_t n = *d >= 0 ? x->numel / x->shape[*d] : 1;
    if (!opc_expect_dtype(op, "output", out, OPR_I64, why, why_size)) return false;
    if (out->numel != n) {
        snprintf(why, why_size, "%s: output must have %lld elements", op, (long long)n);
        return false;
    }
    return true;
}

#endif /* OPREG_OPC_NN_H */
