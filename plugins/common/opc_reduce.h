/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument
 * checks of the reductions (sum, mean, prod, max, min, max.dim, min.dim, norm) and of
 * softmax / log_softmax, in the order both plugins apply them. Each writes its message
 * into why (opc_why.h); those that return a status tell an invalid call
 * (OPR_ERR_INVALID) from a dtype the plugin has no kernel for (OPR_ERR_UNSUPPORTED). */
#ifndef OPREG_OPC_REDUCE_H
#define OPREG_OPC_REDUCE_H

#include "opc_dtype.h"
#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Wraps dim argument d of reduction op on an ndim-d input (opc_wrap_dim). Returns false
 * with the message in why. */
static inline bool opc_reduce_dim(const char *op, int64_t d, int32_t ndim, int32_t *out, char *why, size_t why_size)
{
    if (opc_wrap_dim(d, ndim, out)) return true;
    snprintf(why, why_size, "%s: dim %lld out of range for %d-d tensor", op, (long long)d, (int)ndim);
    return false;
}

/* Argument ai of call c, `int[]? dim` (sum, mean) or `int? dim` (prod), as a mask of the
 * reduced dims of an ndim-d input: NONE or an empty list reduces every dim, a dim may
 * appear only once. Returns false with the message in why. */
static inline bool opc_reduce_dim_mask(const opr_kernel_call *c, int ai, const char *op, int32_t ndim, uint32_t *mask,
                                       char *why, size_t why_size)
{
    const opr_kernel_arg *a = c->args[ai];
    const int64_t *dims = NULL;
    int32_t n = 0;
    if (a->kind == OPR_ARG_INT) {
        dims = &a->u.i;
        n = 1;
    } else if (a->kind == OPR_ARG_INT_LIST) {
        dims = a->u.il.items;
        n = a->u.il.n;
    } else if (a->kind != OPR_ARG_NONE) {
        snprintf(why, why_size, "%s: dim must be an int or a list of ints", op);
        return false;
    }
    if (n == 0) {
        *mask = ndim > 0 ? (1u << ndim) - 1 : 0;
        return true;
    }
    *mask = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t d;
        if (!opc_reduce_dim(op, dims[i], ndim, &d, why, why_size)) return false;
        if (*mask & (1u << d)) {
            snprintf(why, why_size, "%s: dim %lld appears more than once", op, (long long)dims[i]);
            return false;
        }
        *mask |= 1u << d;
    }
    return true;
}

/* Whether the plugin has a kernel (dtypes: an OPR_DTYPE_BIT mask) for an input of
 * dtype t; device names the plugin in the message. */
static inline bool opc_reduce_dtype_supported(const char *op, opr_dtype t, uint32_t dtypes, const char *device,
                                              char *why, size_t why_size)
{
    if ((unsigned)t < OPR_DTYPE_COUNT && (dtypes & OPR_DTYPE_BIT(t))) return true;
    snprintf(why, why_size, "%s: no %s kernel for dtype %s", op, device, opc_dtype_name(t));
    return false;
}

/* The dtype of the values output of reduction op on a t input: t, except that sum and
 * prod of i32 give i64 (PyTorch's integer accumulation; the YAML's `dtype: acc(T)`). */
static inline opr_dtype opc_reduce_out_dtype(const char *op, opr_dtype t)
{
    return t == OPR_I32 && (!strcmp(op, "sum") || !strcmp(op, "prod")) ? OPR_I64 : t;
}

/* A reduction call c of op: at least nargs arguments and nout outputs, a tensor input
 * *in (argument 0) of a dtype in dtypes, and outputs of opc_reduce_out_dtype (values)
 * then i64 (indices). Returns OPR_OK, or an error status with the message in why. */
static inline int opc_reduce_begin(const opr_kernel_call *c, const char *op, int nargs, int nout, uint32_t dtypes,
                                   const char *device, const opr_tensor_view **in, char *why, size_t why_size)
{
    if (c->nargs < nargs || c->nout < nout) {
        snprintf(why, why_size, "%s: expected %d arguments and %d outputs, got %d and %d", op, nargs, nout,
                 (int)c->nargs, (int)c->nout);
        return OPR_ERR_INVALID;
    }
    *in = c->args[0]->kind == OPR_ARG_TENSOR ? c->args[0]->u.t : NULL;
    if (!*in) {
        snprintf(why, why_size, "%s: argument 0 is not a tensor", op);
        return OPR_ERR_INVALID;
    }
    const opr_dtype t = (*in)->dtype;
    if (!opc_reduce_dtype_supported(op, t, dtypes, device, why, why_size)) return OPR_ERR_UNSUPPORTED;
    for (int j = 0; j < nout; j++) {
        const opr_dtype want = j == 0 ? opc_reduce_out_dtype(op, t) : OPR_I64;
        if (c->outputs[j]->dtype != want) {
            snprintf(why, why_size, "%s: output %d dtype is %s, expected %s", op, j,
                     opc_dtype_name(c->outputs[j]->dtype), opc_dtype_name(want));
            return OPR_ERR_INVALID;
        }
    }
    return OPR_OK;
}

/* softmax / log_softmax(self, dim) call c of op: a tensor input *in of a dtype in dtypes,
 * its dim wrapped into *dim, and an allocated output *out of its dtype and shape (an
 * empty input needs no output memory). Returns OPR_OK, or an error status with the
 * message in why. */
static inline int opc_softmax_begin(const opr_kernel_call *c, const char *op, uint32_t dtypes, const char *device,
                                    const opr_tensor_view **in, const opr_tensor_view **out, int32_t *dim, char *why,
                                    size_t why_size)
{
    if (c->nargs < 2 || c->nout < 1) {
        snprintf(why, why_size, "%s: expected 2 arguments and 1 output", op);
        return OPR_ERR_INVALID;
    }
    const opr_tensor_view *x = *in = c->args[0]->kind == OPR_ARG_TENSOR ? c->args[0]->u.t : NULL;
    const opr_tensor_view *o = *out = c->outputs[0];
    if (!x) {
        snprintf(why, why_size, "%s: argument 0 is not a tensor", op);
        return OPR_ERR_INVALID;
    }
    if (!opc_reduce_dtype_supported(op, x->dtype, dtypes, device, why, why_size)) return OPR_ERR_UNSUPPORTED;
    if (o->dtype != x->dtype) {
        snprintf(why, why_size, "%s: output dtype is %s, expected %s", op, opc_dtype_name(o->dtype),
                 opc_dtype_name(x->dtype));
        return OPR_ERR_INVALID;
    }
    const opr_kernel_arg *a = c->args[1];
    const int64_t dim_arg = a->kind == OPR_ARG_INT ? a->u.i : a->kind == OPR_ARG_DOUBLE ? (int64_t)a->u.d : 0;
    if (!opc_reduce_dim(op, dim_arg, x->ndim, dim, why, why_size)) return OPR_ERR_INVALID;
    if (x->ndim > OPR_MAX_DIMS || !opc_same_shape(x->ndim, x->shape, o)) {
        snprintf(why, why_size, "%s: output shape differs from the input's", op);
        return OPR_ERR_INVALID;
    }
    if (x->numel > 0 && !o->data) {
        snprintf(why, why_size, "%s: output is not allocated", op);
        return OPR_ERR_INVALID;
    }
    return OPR_OK;
}

#endif
