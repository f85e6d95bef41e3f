/* cuBLAS for the CUDA plugin, through function pointers loaded with dlopen when a
 * device is first set up (gk_cublas_load), not linked: loading libcublas takes about a
 * third of a second (and its constructors ~30k allocations), which every process that
 * makes an opreg context would otherwise pay on machines where the probe then finds no
 * CUDA device. The calls keep their cuBLAS names (the macros below), so the kernels
 * read the same on every backend; only the six functions the plugin calls are here.
 * Plain C and C++ (cuda_cublas.c loads it; the .cu files call through it). */
#ifndef OPREG_GPU_CUBLAS_H
#define OPREG_GPU_CUBLAS_H

#include <cublas_v2.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gk_cublas_api {
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                              const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                              cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo);
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t handle, cublasOperation_t transa,
                                              cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                              const void *A, cudaDataType Atype, int lda, long long int strideA,
                                              const void *B, cudaDataType Btype, int ldb, long long int strideB,
                                              const void *beta, void *C, cudaDataType Ctype, int ldc,
                                              long long int strideC, int batchCount,
                                              cublasComputeType_t computeType, cublasGemmAlgo_t algo);
    const char *(*status_string)(cublasStatus_t status);
} gk_cublas_api;

/* Valid once gk_cublas_load has returned 0. */
extern gk_cublas_api gk_cublas;

/* Loads libcublas and its functions, once per process (later calls return the first
 * result; safe from several threads). 0 on success; otherwise -1 with the reason in why. */
int gk_cublas_load(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#define cublasCreate gk_cublas.create
#define cublasDestroy gk_cublas.destroy
#define cublasSetStream gk_cublas.set_stream
#define cublasGemmEx gk_cublas.gemm_ex
#define cublasGemmStridedBatchedEx gk_cublas.gemm_strided_batched_ex
#define cublasGetStatusString gk_cublas.status_string

#endif
