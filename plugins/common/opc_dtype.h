/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): element size and
 * short name of a dtype, as opr_dtype_size / opr_dtype_name give them in libopreg,
 * which a plugin does not link (the installed <opreg/plugin_util.h> has them), and the
 * check of an argument's dtype. */
#ifndef OPREG_OPC_DTYPE_H
#define OPREG_OPC_DTYPE_H

#include "opc_why.h"

#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Bytes of one element; 0 for a value outside the enum (opu_dtype_size). */
static inline size_t opc_dtype_size(opr_dtype t) { return opu_dtype_size(t); }

/* "f32", "f64", "i64", "bool", "f16", "bf16"; "?" for a value outside the enum
 * (opu_dtype_name). */
static inline const char *opc_dtype_name(opr_dtype t) { return opu_dtype_name(t); }

/* Whether tensor argument `what` of op has dtype dt; false with the message in why. */
static inline bool opc_expect_dtype(const char *op, const char *what, const opr_tensor_view *v, opr_dtype dt, char *why,
                                    size_t why_size)
{
    if (v->dtype == dt) return true;
    snprintf(why, why_size, "%s: %s has dtype %s, expected %s", op, what, opc_dtype_name(v->dtype), opc_dtype_name(dt));
    return false;
}

#endif
