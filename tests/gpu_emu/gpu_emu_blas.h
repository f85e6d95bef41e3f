/* The cuBLAS calls the GPU plugin makes, for the CPU emulation (see gpu_emu.h). Same
 * names, argument order and column-major semantics as cuBLAS, and the same argument
 * checks (leading dimensions, sizes), so that a wrong layout fails here as it would
 * on a GPU. The products themselves run on CBLAS. */
#ifndef OPREG_GPU_EMU_BLAS_H
#define OPREG_GPU_EMU_BLAS_H

#include "gpu_emu.h"

typedef struct gpuemu_blas *cublasHandle_t;

typedef enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_64F = 70 } cublasComputeType_t;
typedef enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, gpuemu_stream_t s);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long stride_a, const void *B, cudaDataType_t bt, int ldb,
                                          long long stride_b, const void *beta, void *C, cudaDataType_t ct,
                                          int ldc, long long stride_c, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo);

#endif /* OPREG_GPU_EMU_BLAS_H */
