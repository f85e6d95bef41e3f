/* A CPU stand-in for the part of the CUDA runtime the GPU plugin uses, so that the
 * kernels of plugins/cuda run, unchanged, on machines without a GPU (the emulated
 * plugin, tests/gpu_emu). It is a test double, not a backend: one host thread runs
 * every launch, block after block.
 *
 * What it models, so that host/device mistakes fail here as they would on a GPU:
 *  - device memory is mapped inaccessible except while a kernel or a runtime copy runs
 *    (host code that dereferences a device pointer aborts with a message; inside a
 *    window the first touch of each allocation faults once and opens it), and every
 *    allocation ends at a guard page (reads and writes past its end abort);
 *  - copies check that each side lies in the memory their direction names;
 *  - launch configurations are checked against the CUDA limits;
 *  - the threads of a block are cooperative fibers, so __syncthreads() and __shared__
 *    arrays behave as on a GPU: a block whose first thread reaches no barrier runs its
 *    other threads one after another on the calling stack, the others run as fibers
 *    switched at each barrier.
 * No library provides this for CUDA sources (HIP-CPU would, for HIP, but is not
 * packaged), hence the hand-written runtime in gpu_emu.cpp.
 *
 * Environment: OPREG_GPUEMU_DEVICES (ordinals, default 1), OPREG_GPUEMU_MEMORY_MB
 * (memory per ordinal, default 4096; allocations beyond fail as out of memory),
 * OPREG_GPUEMU_ORDER=reverse (blocks and threads in reverse order, to expose results
 * that depend on the order), OPREG_GPUEMU_PROTECT=0 (device memory left accessible). */
#ifndef OPREG_GPU_EMU_H
#define OPREG_GPU_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <utility>

#include <opreg/plugin_util.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
/* One static array per kernel: blocks run one at a time, so it is the block's own. */
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};

/* Set by the scheduler for the thread that runs. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

typedef enum gpuemu_error {
    gpuemuSuccess = 0,
    gpuemuErrorInvalidValue = 1,
    gpuemuErrorMemoryAllocation = 2,
    gpuemuErrorInvalidConfiguration = 9,
    gpuemuErrorInvalidDevice = 101,
    gpuemuErrorInvalidDevicePointer = 17,
    gpuemuErrorLaunchFailure = 719,
    gpuemuErrorNotReady = 600,
} gpuemu_error;

typedef struct gpuemu_stream *gpuemu_stream_t;

typedef enum gpuemu_memcpy_kind {
    gpuemuMemcpyHostToDevice = 1,
    gpuemuMemcpyDeviceToHost = 2,
    gpuemuMemcpyDeviceToDevice = 3,
} gpuemu_memcpy_kind;

typedef enum gpuemu_attr {
    gpuemuDevAttrMultiProcessorCount,
    gpuemuDevAttrClockRate,
    gpuemuDevAttrMemoryClockRate,
    gpuemuDevAttrGlobalMemoryBusWidth,
    gpuemuDevAttrComputeCapabilityMajor,
    gpuemuDevAttrComputeCapabilityMinor,
} gpuemu_attr;

gpuemu_error gpuemuGetDeviceCount(int *n);
gpuemu_error gpuemuSetDevice(int ordinal);
gpuemu_error gpuemuGetDevice(int *ordinal);
gpuemu_error gpuemuDeviceGetAttribute(int *value, gpuemu_attr attr, int ordinal);
gpuemu_error gpuemuDeviceSynchronize(void);
gpuemu_error gpuemuGetLastError(void);
const char *gpuemuGetErrorString(gpuemu_error e);
gpuemu_error gpuemuMalloc(void **p, size_t n);
gpuemu_error gpuemuFree(void *p);
gpuemu_error gpuemuMemcpyAsync(void *dst, const void *src, size_t n, gpuemu_memcpy_kind kind, gpuemu_stream_t s);
gpuemu_error gpuemuMemsetAsync(void *dst, int value, size_t n, gpuemu_stream_t s);
gpuemu_error gpuemuStreamCreateWithFlags(gpuemu_stream_t *s, unsigned flags);
gpuemu_error gpuemuStreamSynchronize(gpuemu_stream_t s);
/* Work on an emulated stream is done when its call returns: always complete. */
gpuemu_error gpuemuStreamQuery(gpuemu_stream_t s);
gpuemu_error gpuemuStreamDestroy(gpuemu_stream_t s);

/* Runs body(arg) as every thread of a grid (see the file comment). */
void gpuemu_launch(dim3 grid, dim3 block, size_t smem, gpuemu_stream_t s, void (*body)(void *), void *arg);
/* The block's dynamic shared memory (the launch's smem bytes, 16-byte aligned). */
void *gpuemu_dynamic_shared(void);
/* Opens the device memory to the calling code for a runtime call (emulated BLAS). */
void gpuemu_device_access_begin(void);
void gpuemu_device_access_end(void);

void __syncthreads(void);

/* Blocks run one at a time on one host thread: atomics are plain updates. */
template <class T> inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}
template <class T> inline T atomicCAS(T *p, T compare, T v)
{
    T old = *p;
    if (old == compare) *p = v;
    return old;
}
template <class T> inline T atomicMin(T *p, T v)
{
    T old = *p;
    if (v < old) *p = v;
    return old;
}
template <class T> inline T atomicMax(T *p, T v)
{
    T old = *p;
    if (v > old) *p = v;
    return old;
}

/* Half types: both as their bits, with float conversions (<opreg/plugin_util.h>),
 * as storage types that the kernels widen to float for arithmetic (gk_conv), like
 * __half on the device. Not _Float16: clang 14 has none on x86-64. */
struct gpuemu_f16 {
    uint16_t bits;
};
struct gpuemu_bf16 {
    uint16_t bits;
};
inline float gpuemu_f16_to_float(gpuemu_f16 v) { return opu_f16_to_f32(v.bits); }
inline gpuemu_f16 gpuemu_float_to_f16(float f) { return gpuemu_f16{opu_f32_to_f16(f)}; }
inline float gpuemu_bf16_to_float(gpuemu_bf16 v) { return opu_bf16_to_f32(v.bits); }
inline gpuemu_bf16 gpuemu_float_to_bf16(float f) { return gpuemu_bf16{opu_f32_to_bf16(f)}; }

/* Kernel launch: the arguments are converted to the kernel's parameter types once, and
 * each emulated thread calls the kernel with its own copy, as CUDA passes them. */
template <class... P> struct gpuemu_call {
    void (*kern)(P...);
    std::tuple<P...> args;
    static void run(void *self)
    {
        gpuemu_call *c = (gpuemu_call *)self;
        std::apply(c->kern, c->args);
    }
};
template <class... P, class... A>
inline void gpuemu_launch_kernel(void (*kern)(P...), dim3 grid, dim3 block, size_t smem, gpuemu_stream_t s,
                                 A &&...args)
{
    gpuemu_call<P...> c{kern, std::tuple<P...>(std::forward<A>(args)...)};
    gpuemu_launch(grid, block, smem, s, gpuemu_call<P...>::run, &c);
}

#endif /* OPREG_GPU_EMU_H */
