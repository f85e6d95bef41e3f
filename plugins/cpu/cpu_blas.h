/* CBLAS plumbing shared by the forward GEMMs (cpu_linalg.c) and the fused backward
 * kernels (cpu_backward.c): reading strided matrices in place where BLAS can, packing
 * them where it cannot. */
#ifndef OPREG_CPU_BLAS_H
#define OPREG_CPU_BLAS_H

#include "cpu_common.h"
#include "../common/opc_blas_layout.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#define BLAS_INT_MAX ((int64_t)(sizeof(blasint) == 4 ? INT32_MAX : INT64_MAX))

/* How this CBLAS reads a matrix in place (plugins/common/opc_blas_layout.h): every
 * leading dimension must fit its blasint. */
static inline opc_blas_layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    return opc_blas_layout_of(rows, cols, rs, cs, BLAS_INT_MAX);
}

/* Scratch for the operands of an m x k @ k x n product that BLAS cannot read in place
 * (la, lb not direct): *sa / *sb get the buffers (NULL where none is needed) and la / lb
 * the packed row-major layouts. OPR_OK, or OPR_ERR_NOMEM reported for op. */
static inline int cpu_pack_scratch(const opr_kernel_call *c, const char *op, int64_t m, int64_t k, int64_t n, size_t es,
                                   opc_blas_layout *la, opc_blas_layout *lb, char **sa, char **sb)
{
    const bool pack_a = !la->direct, pack_b = !lb->direct;
    *sa = pack_a ? malloc((size_t)(m * k) * es) : NULL;
    *sb = pack_b ? malloc((size_t)(k * n) * es) : NULL;
    if ((pack_a && !*sa) || (pack_b && !*sb)) {
        free(*sa);
        free(*sb);
        return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a packed operand", op);
    }
    if (pack_a) *la = (opc_blas_layout){true, false, k};
    if (pack_b) *lb = (opc_blas_layout){true, false, n};
    return OPR_OK;
}

#define PACK_LOOP(T)                                                                      \
    do {                                                                                  \
        const T *s_ = (const T *)src;                                                     \
        T *d_ = (T *)dst;                                                                 \
        _Pragma("omp parallel for if (par)")                                              \
        for (int64_t i = 0; i < rows; i++)                                                \
            for (int64_t j = 0; j < cols; j++) d_[i * cols + j] = s_[i * rs + j * cs];    \
    } while (0)

/* Copies a strided (possibly broadcast) matrix into a contiguous row-major one. */
static inline void pack(size_t es, const char *src, int64_t rows, int64_t cols, int64_t rs,
                 int64_t cs, char *dst)
{
    const bool par = rows > 1 && rows * cols >= CPU_PAR_THRESHOLD;
    if (cs == 1) { /* whole rows (a bias broadcast over the rows has rs 0) */
        _Pragma("omp parallel for if (par)")
        for (int64_t i = 0; i < rows; i++) memcpy(dst + (size_t)(i * cols) * es, src + i * rs * (int64_t)es, (size_t)cols * es);
        return;
    }
    if (es == 4) PACK_LOOP(float);
    else PACK_LOOP(double);
}

/* C = alpha a b^T for k = 1 (an outer product), in one pass over C: OpenBLAS first
 * zeroes C for beta = 0 and then adds the product, two passes over an output that, for
 * the per-sample weight gradients of opr_vmap ([B, out, in] of k = 1 products), is the
 * whole cost. A(i, 0) and B(0, j) are read through the layouts. */
#define OUTER_LOOP(T)                                                                     \
    do {                                                                                  \
        const T *a_ = (const T *)a, *b_ = (const T *)b;                                   \
        T *c_ = (T *)c;                                                                   \
        const int64_t as = la.trans ? 1 : la.ld, bs = lb.trans ? lb.ld : 1;               \
        _Pragma("omp parallel for if (m > 1 && m * n >= CPU_PAR_THRESHOLD)")              \
        for (int64_t i = 0; i < m; i++) {                                                 \
            const T ai = (T)alpha * a_[i * as];                                           \
            for (int64_t j = 0; j < n; j++) c_[i * n + j] = ai * b_[j * bs];              \
        }                                                                                 \
    } while (0)

static inline void blas_gemm(opr_dtype dt, opc_blas_layout la, opc_blas_layout lb, int64_t m, int64_t n,
                      int64_t k, double alpha, const void *a, const void *b, double beta,
                      void *c)
{
    if (k == 1 && beta == 0) {
        if (dt == OPR_F32) OUTER_LOOP(float);
        else OUTER_LOOP(double);
        return;
    }
    const enum CBLAS_TRANSPOSE ta = la.trans ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = lb.trans ? CblasTrans : CblasNoTrans;
    if (dt == OPR_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, (float)alpha,
                    a, (blasint)la.ld, b, (blasint)lb.ld, (float)beta, c, (blasint)n);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, alpha,
                    a, (blasint)la.ld, b, (blasint)lb.ld, beta, c, (blasint)n);
}

#endif
