/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): element size and
 * short name of a dtype, as opr_dtype_size / opr_dtype_name give them in libopreg,
 * which a plugin does not link. */
#ifndef OPREG_OPC_DTYPE_H
#define OPREG_OPC_DTYPE_H

#include <opreg/opreg.h>

#include <stddef.h>

/* Bytes of one element; 0 for a value outside the enum. */
static inline size_t opc_dtype_size(opr_dtype t)
{
    static const unsigned char sizes[] = {4, 8, 8, 1, 2, 2};
    return (unsigned)t < sizeof sizes ? sizes[t] : 0;
}

/* "f32", "f64", "i64", "bool", "f16", "bf16"; "?" for a value outside the enum. */
static inline const char *opc_dtype_name(opr_dtype t)
{
    static const char *const names[] = {"f32", "f64", "i64", "bool", "f16", "bf16"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

#endif
