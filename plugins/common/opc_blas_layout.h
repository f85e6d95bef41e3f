/* plugins/common: host-side logic that the CPU plugin and the GPU plugin (CUDA, ROCm and
 * its CPU emulation) share. Every name here starts with opc_ ("opreg plugin common").
 * Header-only: plain structs and static inline functions that compile as C11 and as
 * C++17 (g++, nvcc, hipcc), so a plugin needs no extra library and never libopreg.
 *
 * This file: how a BLAS GEMM reads a strided matrix in place. */
#ifndef OPREG_OPC_BLAS_LAYOUT_H
#define OPREG_OPC_BLAS_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

/* How BLAS can read a matrix without a copy: row-major with leading dimension ld, or
 * (trans) as the transpose of a row-major matrix. */
typedef struct {
    bool direct, trans;
    int64_t ld;
} opc_blas_layout;

/* The layout of a rows x cols matrix with row stride rs and column stride cs. Strides of
 * size-1 dims are free. int_max is the largest int the BLAS takes (its ld must fit);
 * it differs between CBLAS builds (32 or 64-bit blasint) and cuBLAS (int). */
static inline opc_blas_layout opc_blas_layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t int_max)
{
    opc_blas_layout l = {false, false, 0};
    const int64_t min_rs = cols > 1 ? cols : 1, min_cs = rows > 1 ? rows : 1;
    if ((cs == 1 || cols == 1) && (rows == 1 || rs >= min_rs)) {
        l.direct = true;
        l.ld = rows == 1 ? min_rs : rs;
    } else if ((rs == 1 || rows == 1) && (cols == 1 || cs >= min_cs)) {
        l.direct = l.trans = true;
        l.ld = cols == 1 ? min_cs : cs;
    }
    if (l.ld > int_max) l.direct = false;
    return l;
}

#endif
