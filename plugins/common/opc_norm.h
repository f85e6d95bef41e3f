/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the argument
 * checks of layer_norm, layer_norm_backward, gelu and gelu_backward, shared by the CPU
 * and GPU plugins so both refuse the same calls with the same words. The host has
 * already checked what the YAML `check:` expressions say; these add what they cannot
 * (normalized_shape equal to the trailing dims, not merely broadcastable to them). */
#ifndef OPREG_OPC_NORM_H
#define OPREG_OPC_NORM_H

#include "opc_shape.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The rows x cols view of a layer_norm problem: normalized_shape (ns, nns entries) must
 * be the last nns dims of shape (ndim dims); cols is their product, rows the product of
 * the leading dims. Returns false with the message in why. */
static inline bool opc_layer_norm_geometry(const char *op, int32_t ndim, const int64_t *shape, const int64_t *ns,
                                           int32_t nns, int64_t *rows, int64_t *cols, char *why, size_t why_size)
{
    if (nns < 1) {
        snprintf(why, why_size, "%s: normalized_shape must have at least one dim", op);
        return false;
    }
    if (nns > ndim) {
        snprintf(why, why_size, "%s: normalized_shape has %d dims but input only %d", op, (int)nns, (int)ndim);
        return false;
    }
    int64_t r = 1, c = 1;
    for (int32_t d = 0; d < ndim - nns; d++) r *= shape[d];
    for (int32_t k = 0; k < nns; k++) {
        const int64_t have = shape[ndim - nns + k];
        if (have != ns[k]) {
            snprintf(why, why_size, "%s: normalized_shape[%d] is %lld but input's dim %d is %lld (normalized_shape must be the trailing dims of input)",
                     op, (int)k, (long long)ns[k], (int)(ndim - nns + k), (long long)have);
            return false;
        }
        c *= ns[k];
    }
    *rows = r;
    *cols = c;
    return true;
}

/* weight or bias (`what`), when given (v not NULL), must have exactly normalized_shape. */
static inline bool opc_layer_norm_param(const char *op, const char *what, const opr_tensor_view *v, const int64_t *ns,
                                        int32_t nns, char *why, size_t why_size)
{
    if (!v || opc_same_shape(nns, ns, v)) return true;
    snprintf(why, why_size, "%s: %s must have the shape normalized_shape", op, what);
    return false;
}

/* gelu's `approximate`: "none" (erf) or "tanh". Sets *use_tanh; false with the message
 * in why for anything else. */
static inline bool opc_gelu_mode(const char *op, const char *approximate, bool *use_tanh, char *why, size_t why_size)
{
    if (approximate && strcmp(approximate, "none") == 0) *use_tanh = false;
    else if (approximate && strcmp(approximate, "tanh") == 0) *use_tanh = true;
    else {
        snprintf(why, why_size, "%s: approximate must be \"none\" or \"tanh\", not \"%s\"", op,
                 approximate ? approximate : "(null)");
        return false;
    }
    return true;
}

/* The constants of gelu: 1 / sqrt(2), 1 / sqrt(2 pi), sqrt(2 / pi) and the cubic term of
 * the tanh form. */
#define OPC_GELU_M_SQRT1_2 0.70710678118654752440
#define OPC_GELU_M_1_SQRT_2PI 0.39894228040143267794
#define OPC_GELU_M_SQRT_2_PI 0.79788456080286535588
#define OPC_GELU_CUBIC 0.044715

#endif
