/* Portability layer shared by the CUDA and ROCm plugins.
 *
 * The kernels in plugins/gpu/ are written once against the gpu* names below and
 * compiled either with nvcc (CUDA, cuBLAS) or with hipcc (HIP; plugins/rocm). Only
 * what the plugin uses is mapped. Kernels stay clear of warp-size assumptions (no
 * shuffles, block sizes multiple of 64) so that AMD's 64-wide wavefronts work too.
 *
 *   GPU_BACKEND_HIP   defined when compiling with hipcc
 *   GPU_BACKEND_EMU   defined for the CPU emulation (tests/gpu_emu, OPR_GPU_EMULATE)
 *   GPU_HAVE_BLAS     1 when a vendor BLAS (cuBLAS) backs the GEMMs, 0 when the tiled
 *                     GEMM kernel in gpu_gemm_tiled.cuh does every product
 *   GPU_NAME          "cuda" or "rocm": the device name
 *   GPU_PLUGIN_NAME   the plugin name: GPU_NAME, or "cuda-emu" for the emulation
 *   GPU_BLAS_HEADER   the BLAS header to include where GPU_HAVE_BLAS is 1
 *   GPU_HAVE_NCCL     defined by the build where NCCL's header is found (CUDA, and the
 *                     emulation's stand-in); GPU_NCCL_HEADER is then the one to include
 *   GPU_DYNAMIC_SHARED(T, name)  declares the block's dynamic shared memory as T name[]
 *   gk_launch(kernel, grid, block, smem, stream, args...)  launches a kernel; the one
 *                     launch syntax all three builds understand
 */
#ifndef OPREG_GPU_PORT_H
#define OPREG_GPU_PORT_H

#if defined(OPR_GPU_EMULATE)
#define GPU_BACKEND_EMU 1
#elif defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(OPR_GPU_FORCE_HIP)
#define GPU_BACKEND_HIP 1
#endif

#ifdef GPU_BACKEND_EMU
/* ------------------------------------------------------------------ CPU emulation */
#include "gpu_emu.h" /* tests/gpu_emu, on the emulated build's include path */

#define GPU_NAME "cuda"
#define GPU_PLUGIN_NAME "cuda-emu"
#define GPU_RUNTIME_NAME "emulated CUDA"
#define GPU_BLAS_HEADER "gpu_emu_blas.h"
#define GPU_NCCL_HEADER "gpu_emu_nccl.h" /* over MPI: tests/gpu_emu/gpu_emu_nccl.c */

typedef gpuemu_error gpuError_t;
typedef gpuemu_stream_t gpuStream_t;
typedef gpuemu_f16 gpu_f16;
typedef gpuemu_bf16 gpu_bf16;

#define gpuSuccess gpuemuSuccess
#define gpuErrorMemoryAllocation gpuemuErrorMemoryAllocation
#define gpuGetErrorString gpuemuGetErrorString
#define gpuGetLastError gpuemuGetLastError
#define gpuGetDeviceCount gpuemuGetDeviceCount
#define gpuSetDevice gpuemuSetDevice
#define gpuGetDevice gpuemuGetDevice
#define gpuDeviceGetAttribute gpuemuDeviceGetAttribute
#define gpuDeviceSynchronize gpuemuDeviceSynchronize
#define gpuMalloc gpuemuMalloc
#define gpuFree gpuemuFree
#define gpuMemcpyAsync gpuemuMemcpyAsync
#define gpuMemsetAsync gpuemuMemsetAsync
#define gpuMemcpyHostToDevice gpuemuMemcpyHostToDevice
#define gpuMemcpyDeviceToHost gpuemuMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice gpuemuMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags gpuemuStreamCreateWithFlags
#define gpuStreamNonBlocking 1u
#define gpuStreamSynchronize gpuemuStreamSynchronize
#define gpuStreamQuery gpuemuStreamQuery
/* A vendor library's call that moves device memory (NCCL: its stand-in does the work
 * in the call, on the host): device memory is opened around it. */
#define gpu_library_access_begin gpuemu_device_access_begin
#define gpu_library_access_end gpuemu_device_access_end
#define gpuErrorNotReady gpuemuErrorNotReady
#define gpuStreamDestroy gpuemuStreamDestroy
#define gpuDevAttrMultiProcessorCount gpuemuDevAttrMultiProcessorCount
#define gpuDevAttrClockRate gpuemuDevAttrClockRate
#define gpuDevAttrMemoryClockRate gpuemuDevAttrMemoryClockRate
#define gpuDevAttrGlobalMemoryBusWidth gpuemuDevAttrGlobalMemoryBusWidth
#define gpuDevAttrComputeCapabilityMajor gpuemuDevAttrComputeCapabilityMajor
#define gpuDevAttrComputeCapabilityMinor gpuemuDevAttrComputeCapabilityMinor

#define GPU_DYNAMIC_SHARED(T, name) T *name = (T *)gpuemu_dynamic_shared()

static inline float gpu_bf16_to_float(gpu_bf16 v) { return gpuemu_bf16_to_float(v); }
static inline gpu_bf16 gpu_float_to_bf16(float v) { return gpuemu_float_to_bf16(v); }
static inline float gpu_f16_to_float(gpu_f16 v) { return gpuemu_f16_to_float(v); }
static inline gpu_f16 gpu_float_to_f16(float v) { return gpuemu_float_to_f16(v); }

#ifndef GPU_HAVE_BLAS
#define GPU_HAVE_BLAS 1
#endif

template <class... P, class... A>
static inline void gk_launch(void (*kern)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s, A &&...args)
{
    gpuemu_launch_kernel(kern, grid, block, smem, s, std::forward<A>(args)...);
}

#elif defined(GPU_BACKEND_HIP)
/* ------------------------------------------------------------------ HIP */
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

#define GPU_NAME "rocm"
#define GPU_PLUGIN_NAME "rocm"
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
#define GPU_PLUGIN_NAME "cuda"
#define GPU_RUNTIME_NAME "CUDA"
#define GPU_BLAS_HEADER "gpu_cublas.h" /* cuBLAS loaded at first use, not linked */
#define GPU_NCCL_HEADER <nccl.h>       /* where GPU_HAVE_NCCL; NCCL too is loaded at first use */

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
#define gpuStreamQuery cudaStreamQuery
static inline void gpu_library_access_begin(void) {}
static inline void gpu_library_access_end(void) {}
#define gpuErrorNotReady cudaErrorNotReady
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

#ifndef GPU_BACKEND_EMU
static __host__ __device__ inline float gpu_f16_to_float(gpu_f16 v) { return __half2float(v); }
static __host__ __device__ inline gpu_f16 gpu_float_to_f16(float v) { return __float2half(v); }

#define GPU_DYNAMIC_SHARED(T, name) extern __shared__ T name[]

#ifdef __cplusplus
template <class... P, class... A>
static inline void gk_launch(void (*kern)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s, A &&...args)
{
    kern<<<grid, block, smem, s>>>(static_cast<P>(args)...);
}
#endif
#endif

#endif /* OPREG_GPU_PORT_H */
