/* A tiled GEMM kernel for builds without a vendor BLAS (ROCm on Debian 12 has no
 * rocBLAS) and for OPREG_CUDA_TILED_GEMM=1. It reads A and B through arbitrary
 * row/column strides, so no operand is ever packed, and runs a strided batch:
 *
 *   C[b] = alpha * A[b] @ B[b] + beta * C[b],  beta == 0: C is only written
 *
 * with A[b] at A + b * a_bs (m x k, strides a_rs, a_cs), B[b] at B + b * b_bs (k x n),
 * C[b] at C + b * c_bs (m x n, row stride ldc, unit column stride). 64 x 64 output
 * tiles, 256 threads each computing a 4 x 4 block, k in steps of 16 through shared
 * memory; products accumulate in ACC (float for f32/f16/bf16, double for f64). */
#ifndef OPREG_CUDA_GEMM_TILED_CUH
#define OPREG_CUDA_GEMM_TILED_CUH

#include "gpu_common.cuh"

#define GK_TM 64
#define GK_TN 64
#define GK_TK 16

template <class T, class ACC>
__global__ void __launch_bounds__(256) gk_k_gemm_tiled(int64_t m, int64_t n, int64_t k, ACC alpha, const T *A,
                                                       int64_t a_rs, int64_t a_cs, int64_t a_bs, const T *B,
                                                       int64_t b_rs, int64_t b_cs, int64_t b_bs, ACC beta, T *C,
                                                       int64_t ldc, int64_t c_bs, int64_t count)
{
    __shared__ ACC As[GK_TK][GK_TM + 1]; /* As[kk][i] = A[row0 + i][k0 + kk] */
    __shared__ ACC Bs[GK_TK][GK_TN + 1]; /* Bs[kk][j] = B[k0 + kk][col0 + j] */
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    for (int64_t bi = blockIdx.z; bi < count; bi += gridDim.z) {
        const T *Ab = A + bi * a_bs;
        const T *Bb = B + bi * b_bs;
        T *Cb = C + bi * c_bs;
        for (int64_t row0 = (int64_t)blockIdx.y * GK_TM; row0 < m; row0 += (int64_t)gridDim.y * GK_TM) {
            for (int64_t col0 = (int64_t)blockIdx.x * GK_TN; col0 < n; col0 += (int64_t)gridDim.x * GK_TN) {
                ACC acc[4][4];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[i][j] = (ACC)0;
                for (int64_t k0 = 0; k0 < k; k0 += GK_TK) {
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const int e = tid + 256 * r;
                        const int i = e / GK_TK, kk = e % GK_TK;
                        const int64_t gr = row0 + i, gc = k0 + kk;
                        As[kk][i] = gr < m && gc < k ? gk_cvt<ACC>(Ab[gr * a_rs + gc * a_cs]) : (ACC)0;
                    }
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const int e = tid + 256 * r;
                        const int kk = e / GK_TN, j = e % GK_TN;
                        const int64_t gr = k0 + kk, gc = col0 + j;
                        Bs[kk][j] = gr < k && gc < n ? gk_cvt<ACC>(Bb[gr * b_rs + gc * b_cs]) : (ACC)0;
                    }
                    __syncthreads();
#pragma unroll
                    for (int kk = 0; kk < GK_TK; kk++) {
                        ACC av[4], bv[4];
#pragma unroll
                        for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
#pragma unroll
                        for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
                    }
                    __syncthreads();
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int64_t gr = row0 + ty + 16 * i;
                    if (gr >= m) continue;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int64_t gc = col0 + tx + 16 * j;
                        if (gc >= n) continue;
                        T *cp = Cb + gr * ldc + gc;
                        const ACC v = beta == (ACC)0 ? alpha * acc[i][j] : alpha * acc[i][j] + beta * gk_cvt<ACC>(*cp);
                        *cp = gk_cvt<T>(v);
                    }
                }
            }
        }
    }
}

template <class T, class ACC>
static int gk_gemm_tiled(const gk_ctx *k, int64_t m, int64_t n, int64_t kk, double alpha, const void *A, int64_t a_rs,
                         int64_t a_cs, int64_t a_bs, const void *B, int64_t b_rs, int64_t b_cs, int64_t b_bs, double beta,
                         void *C, int64_t ldc, int64_t c_bs, int64_t count)
{
    const int64_t gx = (n + GK_TN - 1) / GK_TN, gy = (m + GK_TM - 1) / GK_TM;
    dim3 grid((unsigned)(gx < 65535 ? gx : 65535), (unsigned)(gy < 65535 ? gy : 65535),
              (unsigned)(count < 65535 ? count : 65535));
    gk_launch(gk_k_gemm_tiled<T, ACC>, grid, 256, 0, k->stream, m, n, kk, (ACC)alpha, (const T *)A, a_rs, a_cs, a_bs,
                                                         (const T *)B, b_rs, b_cs, b_bs, (ACC)beta, (T *)C, ldc, c_bs,
                                                         count);
    return gk_launched(k, "tiled GEMM kernel");
}

#endif /* OPREG_CUDA_GEMM_TILED_CUH */
