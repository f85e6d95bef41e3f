/* Portability layer shared by the CUDA and ROCm plugins.
 *
 * The kernels in plugins/cuda/ are written once against the gpu* names below and
 * compiled either with nvcc (CUDA, cuBLAS) or with hipcc (HIP; plugins/rocm). Only
 * what the plugin uses is mapped. Kernels stay clear of warp-size assumptions (no
 * shuffles, block sizes multiple of 64) so that AMD's 64-wide wavefronts work too.
 *
 *   GPU_BACKEND_HIP   defined when compiling with hipcc
 *   GPU_HAVE_BLAS     1 when a vendor BLAS (cuBLAS) backs the GEMMs, 0 when the tiled
 *                     GEMM kernel in cuda_gemm_tiled.cuh does every product
 *   GPU_NAME          "cuda" or "rocm": the plugin and device name
 */
#ifndef OPREG_GPU_PORT_H
#define OPREG_GPU_PORT_H

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(OPR_GPU_FORCE_HIP)
#define GPU_BACKEND_HIP 1
#endif

#ifdef GPU_BACKEND_HIP
/* ------------------------------------------------------------------ HIP */
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

#define GPU_NAME "rocm"
#define GPU_RUNTIME_NAME "HIP"

typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef __half gpu_f16;
typedef hip_bfloat16 gpu_bf16;

#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamDestroy hipStreamDestroy
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrClockRate hipDeviceAttributeClockRate
#define gpuDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
#define gpuDevAttrGlobalMemoryBusWidth hipDeviceAttributeMemoryBusWidth
#define gpuDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define gpuDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor

static __host__ __device__ inline float gpu_bf16_to_float(gpu_bf16 v) { return (float)v; }
static __host__ __device__ inline gpu_bf16 gpu_float_to_bf16(float v) { return gpu_bf16(v); }

/* No rocBLAS/hipBLAS on Debian 12: every GEMM runs the tiled kernel. */
#ifndef GPU_HAVE_BLAS
#define GPU_HAVE_BLAS 0
#endif

#else
/* ------------------------------------------------------------------ CUDA */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define GPU_NAME "cuda"
#define GPU_RUNTIME_NAME "CUDA"

typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef __half gpu_f16;
typedef __nv_bfloat16 gpu_bf16;

#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamDestroy cudaStreamDestroy
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrClockRate cudaDevAttrClockRate
#define gpuDevAttrMemoryClockRate cudaDevAttrMemoryClockRate
#define gpuDevAttrGlobalMemoryBusWidth cudaDevAttrGlobalMemoryBusWidth
#define gpuDevAttrComputeCapabilityMajor cudaDevAttrComputeCapabilityMajor
#define gpuDevAttrComputeCapabilityMinor cudaDevAttrComputeCapabilityMinor

static __host__ __device__ inline float gpu_bf16_to_float(gpu_bf16 v) { return __bfloat162float(v); }
static __host__ __device__ inline gpu_bf16 gpu_float_to_bf16(float v) { return __float2bfloat16(v); }

#ifndef GPU_HAVE_BLAS
#define GPU_HAVE_BLAS 1
#endif
#endif

static __host__ __device__ inline float gpu_f16_to_float(gpu_f16 v) { return __half2float(v); }
static __host__ __device__ inline gpu_f16 gpu_float_to_f16(float v) { return __float2half(v); }

#endif /* OPREG_GPU_PORT_H */
