/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): a double scalar
 * argument (fill_, masked_fill_, full) as one element of a tensor's dtype. */
#ifndef OPREG_OPC_SCALAR_H
#define OPREG_OPC_SCALAR_H

#include "opc_dtype.h"
#include "opc_why.h"

#include <opreg/opreg.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Doubles at or beyond 2^63 in magnitude (and NaN) have no i64 value: converting them
 * is undefined behaviour in C and C++, so they are refused instead. */
static inline bool opc_fits_i64(double v)
{
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

/* Writes v converted to dtype dt (f32, f64, i64, i32 or bool; the way fill_ converts) into
 * the first bytes of elem (8 bytes of room). Returns OPR_OK, or an error status with
 * the message for host->set_error in why: OPR_ERR_INVALID for a value i64 (i32) cannot
 * hold (in PyTorch's words: "value cannot be converted to type int64_t without overflow"),
 * OPR_ERR_UNSUPPORTED for another dtype (device names the plugin's device). */
static inline int opc_encode_scalar(const char *op, opr_dtype dt, double v, void *elem, const char *device, char *why,
                                    size_t why_size)
{
    switch (dt) {
    case OPR_F32: {
        const float f = (float)v;
        memcpy(elem, &f, sizeof f);
        return OPR_OK;
    }
    case OPR_F64: memcpy(elem, &v, sizeof v); return OPR_OK;
    case OPR_I64: {
        if (!opc_fits_i64(v)) {
            snprintf(why, why_size, "%s: value cannot be converted to type int64_t without overflow: %g", op, v);
            return OPR_ERR_INVALID;
        }
        const int64_t i = (int64_t)v;
        memcpy(elem, &i, sizeof i);
        return OPR_OK;
    }
    case OPR_I32: {
        if (!(v >= -2147483648.0 && v < 2147483648.0)) {
            snprintf(why, why_size, "%s: value cannot be converted to type int32_t without overflow: %g", op, v);
            return OPR_ERR_INVALID;
        }
        const int32_t i = (int32_t)v;
        memcpy(elem, &i, sizeof i);
        return OPR_OK;
    }
    case OPR_BOOL: *(unsigned char *)elem = v != 0; return OPR_OK;
    default:
        snprintf(why, why_size, "%s: dtype %s is not supported on %s", op, opc_dtype_name(dt), device);
        return OPR_ERR_UNSUPPORTED;
    }
}

#endif
