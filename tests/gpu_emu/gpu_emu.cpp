/* The CPU emulation of the CUDA runtime and cuBLAS calls the GPU plugin makes: see
 * gpu_emu.h for what is modelled and why. Everything runs on the calling host thread
 * under one lock, so several host threads may use the plugin (their calls serialise). */
/* Fibers switch with _longjmp between stacks, which the fortified longjmp refuses. */
#undef _FORTIFY_SOURCE
#include "gpu_emu.h"
#include "gpu_emu_blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

/* ------------------------------------------------------------------ devices */

std::recursive_mutex g_lock;
thread_local int t_device;
thread_local gpuemu_error t_last = gpuemuSuccess;

int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < lo || v > hi ? dflt : (int)v;
}

int device_count() { return env_int("OPREG_GPUEMU_DEVICES", 1, 1, 16); }

gpuemu_error fail(gpuemu_error e)
{
    t_last = e;
    return e;
}

/* ------------------------------------------------------------------ memory */

struct block {
    char *map;     /* start of the mapping */
    size_t map_len;
    size_t usable; /* bytes before the guard page */
    size_t n;      /* bytes asked for */
    int ordinal;
};

std::map<uintptr_t, block> g_blocks; /* keyed by the pointer handed out */
uint64_t g_used[16];
/* Nesting of device access windows. The SIGSEGV handler reads it on the faulting
 * thread, so its updates must stay where they are around the accesses: atomic, with
 * signal fences in window() (a plain int let clang 14 fold window(true); memmove;
 * window(false) into nothing, as nothing it can see reads the global in between). */
std::atomic<int> g_open;
size_t g_page;

void protect(const block &b, bool open)
{
    (void)mprotect(b.map, b.usable, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

bool protecting()
{
    static const bool on = env_int("OPREG_GPUEMU_PROTECT", 1, 0, 1) != 0;
    return on;
}

/* Device memory is opened lazily: inside a window (a kernel or a runtime copy) the
 * first touch of a block faults, and the handler opens that block for the rest of the
 * window. Outside a window, or on a guard page, the fault is a bug being caught. */
std::vector<const block *> g_opened;
std::atomic_flag g_opened_lock = ATOMIC_FLAG_INIT; /* the handler may run on any thread */
struct sigaction g_prev_segv;

void open_block(const block *b)
{
    while (g_opened_lock.test_and_set(std::memory_order_acquire)) {
    }
    if (std::find(g_opened.begin(), g_opened.end(), b) == g_opened.end()) {
        protect(*b, true);
        g_opened.push_back(b);
    }
    g_opened_lock.clear(std::memory_order_release);
}

/* The block whose mapping holds address a (its guard page included), or NULL. */
const block *mapping_of(uintptr_t a)
{
    auto in = [a](const block &b) { return a >= (uintptr_t)b.map && a < (uintptr_t)b.map + b.map_len; };
    auto it = g_blocks.upper_bound(a); /* keys are the pointers handed out, inside the mappings */
    if (it != g_blocks.end() && in(it->second)) return &it->second;
    if (it == g_blocks.begin()) return nullptr;
    --it;
    return in(it->second) ? &it->second : nullptr;
}

void on_segv(int sig, siginfo_t *info, void *uctx)
{
    const uintptr_t a = (uintptr_t)info->si_addr;
    const block *b = mapping_of(a);
    if (b && a < (uintptr_t)b->map + b->usable && g_open > 0) {
        open_block(b);
        return;
    }
    if (b) {
        const uintptr_t user = (uintptr_t)b->map + b->usable - (b->n + 255) / 256 * 256;
        if (a >= (uintptr_t)b->map + b->usable)
            fprintf(stderr, "emulated CUDA: device memory access %zu bytes past the end of a %zu-byte allocation "
                            "(in a kernel or a runtime copy)\n", (size_t)(a - user - b->n), b->n);
        else
            fprintf(stderr, "emulated CUDA: host code accessed device memory at offset %zd of a %zu-byte "
                            "allocation\n", (ssize_t)(a - user), b->n);
        abort();
    }
    /* Not device memory: let the previous handler (or the default action) have it. */
    (void)sigaction(SIGSEGV, &g_prev_segv, nullptr);
    (void)sig;
    (void)uctx;
}

void install_handler()
{
    static bool done;
    if (done || !protecting()) return;
    done = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGSEGV, &sa, &g_prev_segv);
}

void window(bool open)
{
    if (!open) std::atomic_signal_fence(std::memory_order_seq_cst); /* the window's accesses stay inside */
    const bool nested = open ? g_open++ > 0 : --g_open > 0;
    if (open) std::atomic_signal_fence(std::memory_order_seq_cst);
    if (nested) return;
    if (open) return;
    for (const block *b : g_opened) protect(*b, false);
    g_opened.clear();
}

/* The block holding [p, p + n), or NULL. */
const block *find(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_blocks.upper_bound(a);
    if (it == g_blocks.begin()) return nullptr;
    --it;
    return a + n <= it->first + it->second.n ? &it->second : nullptr;
}

bool is_device(const void *p) { return find(p, 1) != nullptr; }

/* ------------------------------------------------------------------ threads of a block */

const size_t STACK = 128 * 1024;

/* A thread of the emulated block. Fibers persist across blocks and launches: each
 * loops over "run the kernel body for the current thread, then yield". Switches use
 * _setjmp/_longjmp, which (unlike swapcontext) make no system call; ucontext only
 * starts a fiber on its own stack the first time. */
struct fiber {
    ucontext_t ctx;
    jmp_buf jb;
    char *stack = nullptr;
    bool done = false;
    void *asan_fake_stack = nullptr;
};

std::vector<fiber> g_fibers;
ucontext_t g_start_ctx; /* where a new fiber returns to after its first setjmp */
jmp_buf g_sched;
int g_current = -1;     /* fiber running, -1 when a thread runs on the caller's stack */
void (*g_body)(void *);
void *g_arg;
std::vector<unsigned char> g_dyn_shared;

void set_thread(unsigned t)
{
    threadIdx.x = t % blockDim.x;
    threadIdx.y = t / blockDim.x % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* AddressSanitizer must be told about every stack switch (as QEMU's coroutines do):
 * start_switch before leaving a stack, finish_switch on arriving. Without ASan these
 * do nothing. The caller's stack is whichever host thread launched the kernel; each
 * arrival on a fiber learns its bounds. */
#ifdef __SANITIZE_ADDRESS__
const void *g_caller_stack;
size_t g_caller_stack_size;
void *g_caller_fake_stack;
void asan_to_fiber(const fiber &f) { __sanitizer_start_switch_fiber(&g_caller_fake_stack, f.stack + g_page, STACK); }
void asan_on_fiber(fiber &f) { __sanitizer_finish_switch_fiber(f.asan_fake_stack, &g_caller_stack, &g_caller_stack_size); }
void asan_to_caller(fiber &f) { __sanitizer_start_switch_fiber(&f.asan_fake_stack, g_caller_stack, g_caller_stack_size); }
void asan_on_caller() { __sanitizer_finish_switch_fiber(g_caller_fake_stack, nullptr, nullptr); }
#else
void asan_to_fiber(const fiber &) {}
void asan_on_fiber(fiber &) {}
void asan_to_caller(fiber &) {}
void asan_on_caller() {}
#endif

/* Back to the scheduler; returns when the scheduler resumes this fiber. */
void fiber_yield(fiber &f)
{
    asan_to_caller(f);
    if (!_setjmp(f.jb)) _longjmp(g_sched, 1);
    asan_on_fiber(f);
}

void fiber_main()
{
    fiber &self = g_fibers[(size_t)g_current];
    asan_on_fiber(self);
    asan_to_caller(self);
    if (!_setjmp(self.jb)) setcontext(&g_start_ctx); /* parked until the first resume */
    asan_on_fiber(self);
    for (;;) {
        fiber &f = g_fibers[(size_t)g_current];
        g_body(g_arg);
        f.done = true;
        fiber_yield(f);
    }
}

void fiber_create(unsigned t)
{
    fiber &f = g_fibers[t];
    /* A guard page below each stack turns an overflow into a fault. */
    f.stack = (char *)mmap(nullptr, STACK + g_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f.stack == MAP_FAILED) {
        fprintf(stderr, "emulated CUDA: cannot map a thread stack\n");
        abort();
    }
    (void)mprotect(f.stack, g_page, PROT_NONE);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack + g_page;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
    g_current = (int)t;
    asan_to_fiber(f);
    swapcontext(&g_start_ctx, &f.ctx);
    asan_on_caller();
    g_current = -1;
}

/* Runs thread t's fiber until its next barrier or the end of the kernel body. */
void fiber_resume(unsigned t)
{
    if (!g_fibers[t].stack) fiber_create(t);
    set_thread(t);
    g_current = (int)t;
    asan_to_fiber(g_fibers[t]);
    if (!_setjmp(g_sched)) _longjmp(g_fibers[t].jb, 1);
    asan_on_caller();
    g_current = -1;
}

/* OPREG_GPUEMU_ORDER=reverse runs the blocks of a grid and the threads of a block in
 * reverse order: a kernel whose result depends on the order (a race between barriers,
 * a block reading another block's output) then gives a different answer. */
bool reversed()
{
    static const bool on = getenv("OPREG_GPUEMU_ORDER") && !strcmp(getenv("OPREG_GPUEMU_ORDER"), "reverse");
    return on;
}

/* The i-th of n threads or blocks to run. */
unsigned nth(unsigned i, unsigned n) { return reversed() ? n - 1 - i : i; }

/* One block: its first thread first, on a fiber. A kernel that gave that thread no
 * barrier has none for the others either (barriers are block-uniform in CUDA), so they
 * run straight through; otherwise every thread becomes a fiber and each round
 * advances all of them to their next barrier. */
void run_block(unsigned nthreads)
{
    g_fibers.reserve(1024); /* never moves: parked fibers hold references into it */
    if (g_fibers.size() < nthreads) g_fibers.resize(nthreads);
    for (unsigned t = 0; t < nthreads; t++) g_fibers[t].done = false;
    const unsigned first = nth(0, nthreads);
    fiber_resume(first);
    if (g_fibers[first].done) {
        for (unsigned i = 1; i < nthreads; i++) {
            set_thread(nth(i, nthreads));
            g_body(g_arg);
        }
        return;
    }
    for (unsigned i = 1; i < nthreads; i++) fiber_resume(nth(i, nthreads));
    for (bool live = true; live;) {
        live = false;
        for (unsigned i = 0; i < nthreads; i++) {
            const unsigned t = nth(i, nthreads);
            if (g_fibers[t].done) continue;
            fiber_resume(t);
            live = live || !g_fibers[t].done;
        }
    }
}

bool config_ok(dim3 grid, dim3 block, size_t smem)
{
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    return threads >= 1 && threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
           grid.x >= 1 && grid.x <= 0x7fffffffu && grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 &&
           grid.z <= 65535 && smem <= 48 * 1024;
}

} // namespace

/* ------------------------------------------------------------------ runtime API */

gpuemu_error gpuemuGetDeviceCount(int *n)
{
    *n = device_count();
    return gpuemuSuccess;
}

gpuemu_error gpuemuSetDevice(int ordinal)
{
    if (ordinal < 0 || ordinal >= device_count()) return fail(gpuemuErrorInvalidDevice);
    t_device = ordinal;
    return gpuemuSuccess;
}

gpuemu_error gpuemuGetDevice(int *ordinal)
{
    *ordinal = t_device;
    return gpuemuSuccess;
}

gpuemu_error gpuemuDeviceGetAttribute(int *value, gpuemu_attr attr, int ordinal)
{
    if (ordinal < 0 || ordinal >= device_count()) return fail(gpuemuErrorInvalidDevice);
    switch (attr) {
    case gpuemuDevAttrMultiProcessorCount: *value = 4; break; /* small grids: quick emulation */
    case gpuemuDevAttrClockRate: *value = 1980000; break;     /* kHz */
    case gpuemuDevAttrMemoryClockRate: *value = 2619000; break;
    case gpuemuDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case gpuemuDevAttrComputeCapabilityMajor: *value = 9; break;
    case gpuemuDevAttrComputeCapabilityMinor: *value = 0; break;
    default: return fail(gpuemuErrorInvalidValue);
    }
    return gpuemuSuccess;
}

gpuemu_error gpuemuDeviceSynchronize(void) { return gpuemuSuccess; }

gpuemu_error gpuemuGetLastError(void)
{
    gpuemu_error e = t_last;
    t_last = gpuemuSuccess;
    return e;
}

const char *gpuemuGetErrorString(gpuemu_error e)
{
    switch (e) {
    case gpuemuSuccess: return "no error";
    case gpuemuErrorInvalidValue: return "invalid argument";
    case gpuemuErrorMemoryAllocation: return "out of memory";
    case gpuemuErrorInvalidConfiguration: return "invalid configuration argument";
    case gpuemuErrorInvalidDevice: return "invalid device ordinal";
    case gpuemuErrorInvalidDevicePointer: return "invalid device pointer";
    case gpuemuErrorLaunchFailure: return "unspecified launch failure";
    case gpuemuErrorNotReady: return "device not ready";
    }
    return "unknown error";
}

gpuemu_error gpuemuMalloc(void **p, size_t n)
{
    std::lock_guard<std::recursive_mutex> g(g_lock);
    *p = nullptr;
    if (n == 0) return gpuemuSuccess;
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    const uint64_t limit = (uint64_t)env_int("OPREG_GPUEMU_MEMORY_MB", 4096, 1, 1 << 20) << 20;
    if (g_used[t_device] + n > limit) return fail(gpuemuErrorMemoryAllocation);
    const size_t padded = (n + 255) / 256 * 256; /* cudaMalloc's alignment */
    const size_t usable = (padded + g_page - 1) / g_page * g_page;
    block b{nullptr, usable + g_page, usable, n, t_device};
    b.map = (char *)mmap(nullptr, b.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b.map == MAP_FAILED) return fail(gpuemuErrorMemoryAllocation);
    char *user = b.map + usable - padded; /* ends at (or within 255 bytes of) the guard page */
    if (!protecting()) protect(b, true);
    install_handler();
    g_blocks[(uintptr_t)user] = b;
    g_used[t_device] += n;
    *p = user;
    return gpuemuSuccess;
}

gpuemu_error gpuemuFree(void *p)
{
    std::lock_guard<std::recursive_mutex> g(g_lock);
    if (!p) return gpuemuSuccess;
    auto it = g_blocks.find((uintptr_t)p);
    if (it == g_blocks.end()) return fail(gpuemuErrorInvalidDevicePointer);
    g_used[it->second.ordinal] -= it->second.n;
    (void)munmap(it->second.map, it->second.map_len);
    g_blocks.erase(it);
    return gpuemuSuccess;
}

gpuemu_error gpuemuMemcpyAsync(void *dst, const void *src, size_t n, gpuemu_memcpy_kind kind, gpuemu_stream_t)
{
    std::lock_guard<std::recursive_mutex> g(g_lock);
    if (n == 0) return gpuemuSuccess;
    const bool dst_dev = find(dst, n) != nullptr, src_dev = find(src, n) != nullptr;
    bool ok = false;
    switch (kind) {
    case gpuemuMemcpyHostToDevice: ok = dst_dev && !is_device(src); break;
    case gpuemuMemcpyDeviceToHost: ok = src_dev && !is_device(dst); break;
    case gpuemuMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    }
    if (!ok) {
        fprintf(stderr, "emulated CUDA: memcpy of %zu bytes %p -> %p does not match its direction %d\n", n, src,
                dst, (int)kind);
        return fail(gpuemuErrorInvalidValue);
    }
    window(true);
    memmove(dst, src, n);
    window(false);
    return gpuemuSuccess;
}

gpuemu_error gpuemuMemsetAsync(void *dst, int value, size_t n, gpuemu_stream_t)
{
    std::lock_guard<std::recursive_mutex> g(g_lock);
    if (n == 0) return gpuemuSuccess;
    if (!find(dst, n)) return fail(gpuemuErrorInvalidValue);
    window(true);
    memset(dst, value, n);
    window(false);
    return gpuemuSuccess;
}

struct gpuemu_stream {
    int ordinal;
};

gpuemu_error gpuemuStreamCreateWithFlags(gpuemu_stream_t *s, unsigned)
{
    *s = new gpuemu_stream{t_device};
    return gpuemuSuccess;
}

gpuemu_error gpuemuStreamSynchronize(gpuemu_stream_t s)
{
    return s ? gpuemuSuccess : fail(gpuemuErrorInvalidValue);
}

gpuemu_error gpuemuStreamQuery(gpuemu_stream_t s)
{
    return s ? gpuemuSuccess : fail(gpuemuErrorInvalidValue);
}

gpuemu_error gpuemuStreamDestroy(gpuemu_stream_t s)
{
    delete s;
    return gpuemuSuccess;
}

void gpuemu_device_access_begin(void)
{
    g_lock.lock();
    window(true);
}

void gpuemu_device_access_end(void)
{
    window(false);
    g_lock.unlock();
}

void gpuemu_launch(dim3 grid, dim3 block, size_t smem, gpuemu_stream_t s, void (*body)(void *), void *arg)
{
    if (!s || !config_ok(grid, block, smem)) {
        fail(gpuemuErrorInvalidConfiguration);
        return;
    }
    std::lock_guard<std::recursive_mutex> g(g_lock);
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    window(true);
    gridDim = grid;
    blockDim = block;
    g_body = body;
    g_arg = arg;
    g_dyn_shared.assign(smem + 16, 0xa5); /* shared memory starts undefined */
    const unsigned nthreads = block.x * block.y * block.z;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t i = 0; i < nblocks; i++) {
        const uint64_t b = reversed() ? nblocks - 1 - i : i;
        blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y)};
        run_block(nthreads);
    }
    window(false);
}

void *gpuemu_dynamic_shared(void)
{
    uintptr_t p = (uintptr_t)g_dyn_shared.data();
    return (void *)((p + 15) & ~(uintptr_t)15);
}

void __syncthreads(void)
{
    if (g_current < 0) {
        fprintf(stderr, "emulated CUDA: thread (%u,%u,%u) of block (%u,%u,%u) reached __syncthreads() where "
                        "the block's first thread reached none (a barrier in divergent code)\n",
                threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
        abort();
    }
    fiber_yield(g_fibers[(size_t)g_current]);
}

/* ------------------------------------------------------------------ cuBLAS */

struct gpuemu_blas {
    gpuemu_stream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new gpuemu_blas{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, gpuemu_stream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "unknown cuBLAS status";
}

namespace {

size_t type_size(cudaDataType_t t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

float half_to_float(cudaDataType_t t, const void *p)
{
    if (t == CUDA_R_16F) return gpuemu_f16_to_float(*(const gpuemu_f16 *)p);
    return gpuemu_bf16_to_float(*(const gpuemu_bf16 *)p);
}

void float_to_half(cudaDataType_t t, float v, void *p)
{
    if (t == CUDA_R_16F) *(gpuemu_f16 *)p = gpuemu_float_to_f16(v);
    else *(gpuemu_bf16 *)p = gpuemu_float_to_bf16(v);
}

/* Column-major rows x cols matrix with leading dimension ld lies in device memory.
 * Its block is opened now: CBLAS may read it from its own worker threads. */
bool in_device(const void *p, cudaDataType_t t, int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0) return true;
    const block *b = find(p, ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * type_size(t));
    if (b && protecting()) open_block(b);
    return b != nullptr;
}

/* Half operands: widened to float, multiplied with sgemm, C narrowed back. */
void gemm_half(cudaDataType_t t, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
               const char *A, int ar, int ac, int lda, const char *B, int br, int bc, int ldb, float beta, char *C,
               int ldc)
{
    std::vector<float> a((size_t)ar * ac), b((size_t)br * bc), c((size_t)m * n, 0.0f);
    for (int j = 0; j < ac; j++)
        for (int i = 0; i < ar; i++) a[(size_t)j * ar + i] = half_to_float(t, A + ((size_t)j * lda + i) * 2);
    for (int j = 0; j < bc; j++)
        for (int i = 0; i < br; i++) b[(size_t)j * br + i] = half_to_float(t, B + ((size_t)j * ldb + i) * 2);
    if (beta != 0.0f)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) c[(size_t)j * m + i] = half_to_float(t, C + ((size_t)j * ldc + i) * 2);
    cblas_sgemm(CblasColMajor, ta, tb, m, n, k, alpha, a.data(), ar > 1 ? ar : 1, b.data(), br > 1 ? br : 1, beta,
                c.data(), m > 1 ? m : 1);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) float_to_half(t, c[(size_t)j * m + i], C + ((size_t)j * ldc + i) * 2);
}

cublasStatus_t gemm_one(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, const void *alpha,
                        const void *A, int lda, const void *B, int ldb, const void *beta, void *C, int ldc,
                        cudaDataType_t t)
{
    const int ar = opa == CUBLAS_OP_N ? m : k, ac = opa == CUBLAS_OP_N ? k : m;
    const int br = opb == CUBLAS_OP_N ? k : n, bc = opb == CUBLAS_OP_N ? n : k;
    if (!in_device(C, t, m, n, ldc) || (k > 0 && (!in_device(A, t, ar, ac, lda) || !in_device(B, t, br, bc, ldb)))) {
        fprintf(stderr, "emulated cuBLAS: a GEMM operand (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d) is not in device memory\n",
                m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const CBLAS_TRANSPOSE ta = opa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
    const CBLAS_TRANSPOSE tb = opb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
    switch (t) {
    case CUDA_R_32F:
        cblas_sgemm(CblasColMajor, ta, tb, m, n, k, *(const float *)alpha, (const float *)A, lda, (const float *)B, ldb,
                    *(const float *)beta, (float *)C, ldc);
        break;
    case CUDA_R_64F:
        cblas_dgemm(CblasColMajor, ta, tb, m, n, k, *(const double *)alpha, (const double *)A, lda, (const double *)B,
                    ldb, *(const double *)beta, (double *)C, ldc);
        break;
    default:
        gemm_half(t, ta, tb, m, n, k, *(const float *)alpha, (const char *)A, ar, ac, lda, (const char *)B, br, bc, ldb,
                  *(const float *)beta, (char *)C, ldc);
        break;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The checks cuBLAS makes before it runs anything. */
cublasStatus_t gemm_check(cublasHandle_t h, cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k,
                          cudaDataType_t at, int lda, cudaDataType_t bt, int ldb, cudaDataType_t ct, int ldc,
                          cublasComputeType_t compute)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (at != bt || at != ct) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((at == CUDA_R_64F) != (compute == CUBLAS_COMPUTE_64F)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const int arows = opa == CUBLAS_OP_N ? m : k, brows = opb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t)
{
    cublasStatus_t s = gemm_check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    gpuemu_device_access_begin();
    s = gemm_one(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, at);
    gpuemu_device_access_end();
    return s;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long stride_a, const void *B, cudaDataType_t bt, int ldb,
                                          long long stride_b, const void *beta, void *C, cudaDataType_t ct,
                                          int ldc, long long stride_c, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t)
{
    cublasStatus_t s = gemm_check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s == CUBLAS_STATUS_SUCCESS && batch < 0) s = CUBLAS_STATUS_INVALID_VALUE;
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const long long es = (long long)type_size(at);
    gpuemu_device_access_begin();
    for (int i = 0; i < batch && s == CUBLAS_STATUS_SUCCESS; i++)
        s = gemm_one(ta, tb, m, n, k, alpha, (const char *)A + i * stride_a * es, lda,
                     (const char *)B + i * stride_b * es, ldb, beta, (char *)C + i * stride_c * es, ldc, at);
    gpuemu_device_access_end();
    return s;
}

/* ------------------------------------------------------------------ probe */

#include <opreg/plugin.h>

extern "C" OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    if (why && why_len) snprintf(why, why_len, "CPU emulation of the CUDA kernels, for tests");
    return 1;
}
