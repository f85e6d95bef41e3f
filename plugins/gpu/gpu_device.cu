/* The GPU device: lazy per-ordinal set-up (stream, BLAS handle), the caching
 * allocator, host/device copies, sync, speed figures, and opr_plugin_init.
 *
 * Caching allocator. Requests are rounded up to a size class (512-byte minimum; four
 * classes per power of two up to 32 MiB; 2 MiB steps above) and freed blocks go onto
 * a free list per class and ordinal instead of back to the driver. Everything a device
 * runs is ordered on its one stream, so a block freed after its last use was enqueued
 * can be handed out again at once (the next user's work is queued behind). When the
 * driver is out of memory, the cache of that ordinal is released and the allocation
 * retried. `reserved` reports every byte the allocator holds (in use plus cached); the
 * host counts the bytes in use itself. OPREG_CUDA_NO_CACHE=1 turns caching off (for
 * compute-sanitizer runs).
 *
 * Several contexts may load the plugin in one process: the state here is shared, and
 * released when the last context shuts the plugin down. */
#include "gpu_common.cuh"

#if GPU_HAVE_BLAS
#include GPU_BLAS_HEADER
#endif

#include <atomic>
#include <map>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

const opr_host_api *gk_host;
bool gk_force_tiled_gemm;

namespace {

struct device_state {
    std::mutex lock;
    std::atomic<bool> ready{false};
    gpuStream_t stream = nullptr;
    int sm_count = 0;
#if GPU_HAVE_BLAS
    cublasHandle_t blas = nullptr;
#endif
    std::map<size_t, std::vector<void *>> cache; /* size class -> free blocks */
    uint64_t held = 0;   /* bytes obtained from the driver and not returned */
    uint64_t cached = 0; /* of which on free lists */
};

device_state g_dev[GK_MAX_ORDINALS];
int g_count;
int g_refs;
std::mutex g_refs_lock;
bool g_no_cache;

size_t size_class(size_t n)
{
    if (n <= 512) return 512;
    if (n >= ((size_t)32 << 20)) {
        const size_t step = (size_t)2 << 20;
        return (n + step - 1) / step * step;
    }
    const int lg = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* floor(log2(n - 1)) */
    const size_t step = (size_t)1 << (lg - 2);
    return (n + step - 1) / step * step;
}

/* Returns every cached block of `d` to the driver. Called with d.lock held. */
void trim_locked(device_state &d)
{
    if (d.ready.load(std::memory_order_acquire)) (void)gpuStreamSynchronize(d.stream);
    for (auto &kv : d.cache) {
        for (void *p : kv.second) (void)gpuFree(p);
        d.held -= (uint64_t)kv.first * kv.second.size();
    }
    d.cache.clear();
    d.cached = 0;
}

/* Makes `ordinal` current on this thread if it is not already. */
gpuError_t use_device(int ordinal)
{
    if (g_count <= 1 && ordinal == 0) return gpuSuccess; /* a thread starts on device 0 */
    int cur = -1;
    gpuError_t e = gpuGetDevice(&cur);
    if (e != gpuSuccess || cur != ordinal) e = gpuSetDevice(ordinal);
    return e;
}

int ensure_ready(const opr_kernel_call *c, int ordinal, const char *op)
{
    device_state &d = g_dev[ordinal];
    if (d.ready.load(std::memory_order_acquire)) return OPR_OK;
    std::lock_guard<std::mutex> lk(d.lock);
    if (d.ready.load(std::memory_order_relaxed)) return OPR_OK;
    gpuError_t e = gpuSetDevice(ordinal);
    if (e == gpuSuccess) e = gpuStreamCreateWithFlags(&d.stream, gpuStreamNonBlocking);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        return GK_FAIL(c, OPR_ERR_BACKEND, "%s: cannot initialise %s device %d: %s", op, GPU_RUNTIME_NAME,
                       ordinal, gpuGetErrorString(e));
    }
    int sms = 0;
    if (gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, ordinal) != gpuSuccess || sms < 1) sms = 1;
    d.sm_count = sms;
#if GPU_HAVE_BLAS && !defined(GPU_BACKEND_EMU)
    char why[512];
    if (gk_cublas_load(why, sizeof why)) {
        (void)gpuStreamDestroy(d.stream);
        d.stream = nullptr;
        return GK_FAIL(c, OPR_ERR_BACKEND, "%s: %s", op, why);
    }
#endif
#if GPU_HAVE_BLAS
    cublasStatus_t s = cublasCreate(&d.blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(d.blas, d.stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (d.blas) cublasDestroy(d.blas);
        d.blas = nullptr;
        (void)gpuStreamDestroy(d.stream);
        d.stream = nullptr;
        return GK_FAIL(c, OPR_ERR_BACKEND, "%s: cannot create a cuBLAS handle on device %d (status %d)", op,
                       ordinal, (int)s);
    }
#endif
    d.ready.store(true, std::memory_order_release);
    return OPR_OK;
}

} // namespace

/* ------------------------------------------------------------------ context helpers */

int gk_fail_gpu(const gk_ctx *k, const char *what, gpuError_t e)
{
    (void)gpuGetLastError(); /* clear a non-sticky error so later calls are not blamed */
    return GK_FAIL(k ? k->call : nullptr, OPR_ERR_BACKEND, "%s: %s error on device %d: %s (in %s)", k ? k->op : "?",
                   GPU_RUNTIME_NAME, k ? k->ordinal : -1, gpuGetErrorString(e), what);
}

int gk_begin_ordinal(const opr_kernel_call *c, int ordinal, const char *op, gk_ctx *k)
{
    k->call = c;
    k->op = op;
    k->ordinal = ordinal;
    k->stream = nullptr;
    k->sm_count = 1;
    if (ordinal < 0 || ordinal >= g_count)
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: %s device ordinal %d out of range (%d device(s))", op, GPU_NAME,
                       ordinal, g_count);
    int rc = ensure_ready(c, ordinal, op);
    if (rc) return rc;
    gpuError_t e = use_device(ordinal);
    if (e != gpuSuccess) return gk_fail_gpu(k, "set device", e);
    k->stream = g_dev[ordinal].stream;
    k->sm_count = g_dev[ordinal].sm_count;
    return OPR_OK;
}

int gk_begin(const opr_kernel_call *c, const char *op, gk_ctx *k)
{
    int ordinal = -1;
    for (int i = 0; i < c->nargs && ordinal < 0; i++) {
        const opr_kernel_arg *a = c->args[i];
        if (a->kind == OPR_ARG_TENSOR && a->u.t) ordinal = a->u.t->device.index;
        else if (a->kind == OPR_ARG_TENSOR_LIST) /* the first item present (a Tensor?[] may hold None) */
            for (int j = 0; j < a->u.tl.n && ordinal < 0; j++)
                if (a->u.tl.items[j]) ordinal = a->u.tl.items[j]->device.index;
    }
    if (ordinal < 0) ordinal = c->nout > 0 ? c->outputs[0]->device.index : 0;
    return gk_begin_ordinal(c, ordinal, op, k);
}

#if GPU_HAVE_BLAS
void *gk_blas_handle(int ordinal)
{
    return ordinal >= 0 && ordinal < g_count ? (void *)g_dev[ordinal].blas : nullptr;
}
#endif

int gk_to_host(const gk_ctx *k, void *dst, const void *src, size_t n)
{
    if (!n) return OPR_OK;
    GK_TRY(k, gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToHost, k->stream));
    GK_TRY(k, gpuStreamSynchronize(k->stream));
    return OPR_OK;
}

int gk_from_host(const gk_ctx *k, void *dst, const void *src, size_t n)
{
    if (!n) return OPR_OK;
    GK_TRY(k, gpuMemcpyAsync(dst, src, n, gpuMemcpyHostToDevice, k->stream));
    /* The source may be pinned memory the caller frees or reuses right after: wait. */
    GK_TRY(k, gpuStreamSynchronize(k->stream));
    return OPR_OK;
}

/* ------------------------------------------------------------------ allocator */

void *gk_mem_alloc(int ordinal, size_t nbytes)
{
    if (ordinal < 0 || ordinal >= g_count) return nullptr;
    device_state &d = g_dev[ordinal];
    const size_t c = size_class(nbytes);
    std::lock_guard<std::mutex> lk(d.lock);
    if (!g_no_cache) {
        auto it = d.cache.find(c);
        if (it != d.cache.end() && !it->second.empty()) {
            void *p = it->second.back();
            it->second.pop_back();
            d.cached -= c;
            return p;
        }
    }
    if (use_device(ordinal) != gpuSuccess) {
        (void)gpuGetLastError();
        return nullptr;
    }
    void *p = nullptr;
    gpuError_t e = gpuMalloc(&p, c);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        if (d.cached == 0) return nullptr;
        trim_locked(d);
        p = nullptr;
        if (gpuMalloc(&p, c) != gpuSuccess) {
            (void)gpuGetLastError();
            return nullptr;
        }
    }
    d.held += c;
    return p;
}

void gk_mem_free(int ordinal, void *ptr, size_t nbytes)
{
    if (!ptr || ordinal < 0 || ordinal >= g_count) return;
    device_state &d = g_dev[ordinal];
    const size_t c = size_class(nbytes);
    std::lock_guard<std::mutex> lk(d.lock);
    if (g_no_cache) {
        /* gpuFree waits for the work still using the block. */
        if (use_device(ordinal) == gpuSuccess) (void)gpuFree(ptr);
        (void)gpuGetLastError();
        d.held -= c;
        return;
    }
    d.cache[c].push_back(ptr);
    d.cached += c;
}

/* ------------------------------------------------------------------ device callbacks */

namespace {

void *dev_alloc(void *, int32_t ordinal, size_t nbytes)
{
    gk_ctx k;
    if (gk_begin_ordinal(nullptr, ordinal, "alloc", &k)) return nullptr;
    return gk_mem_alloc(ordinal, nbytes);
}

void dev_free(void *, int32_t ordinal, void *ptr, size_t nbytes) { gk_mem_free(ordinal, ptr, nbytes); }

int dev_copy_to_host(void *, int32_t ordinal, void *dst, const void *src, size_t n)
{
    gk_ctx k;
    int rc = gk_begin_ordinal(nullptr, ordinal, "copy to host", &k);
    return rc ? rc : gk_to_host(&k, dst, src, n);
}

int dev_copy_from_host(void *, int32_t ordinal, void *dst, const void *src, size_t n)
{
    gk_ctx k;
    int rc = gk_begin_ordinal(nullptr, ordinal, "copy from host", &k);
    return rc ? rc : gk_from_host(&k, dst, src, n);
}

int dev_copy_device(void *, int32_t ordinal, void *dst, const void *src, size_t n)
{
    gk_ctx k;
    int rc = gk_begin_ordinal(nullptr, ordinal, "device copy", &k);
    if (rc || !n || dst == src) return rc;
    const char *d = (const char *)dst, *s = (const char *)src;
    if (d < s + n && s < d + n) { /* overlapping ranges: memmove semantics via scratch */
        gk_buf tmp;
        if ((rc = tmp.alloc(&k, n))) return rc;
        GK_TRY(&k, gpuMemcpyAsync(tmp.p, src, n, gpuMemcpyDeviceToDevice, k.stream));
        GK_TRY(&k, gpuMemcpyAsync(dst, tmp.p, n, gpuMemcpyDeviceToDevice, k.stream));
        return OPR_OK;
    }
    GK_TRY(&k, gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToDevice, k.stream));
    return OPR_OK;
}

int dev_sync(void *, int32_t ordinal)
{
    if (ordinal < 0 || ordinal >= g_count)
        return GK_FAIL(nullptr, OPR_ERR_INVALID, "sync: %s device ordinal %d out of range", GPU_NAME, ordinal);
    if (!g_dev[ordinal].ready.load(std::memory_order_acquire)) return OPR_OK; /* never used */
    gk_ctx k;
    int rc = gk_begin_ordinal(nullptr, ordinal, "sync", &k);
    if (rc) return rc;
    GK_TRY(&k, gpuStreamSynchronize(k.stream));
    return OPR_OK;
}

uint64_t dev_reserved(void *, int32_t ordinal)
{
    if (ordinal < 0 || ordinal >= g_count) return 0;
    device_state &d = g_dev[ordinal];
    std::lock_guard<std::mutex> lk(d.lock);
    return d.held;
}

/* Speed of ordinal 0 from its attributes (no context is created for these). */
void device_speed(opr_device_desc *desc)
{
    int sms = 0, clk = 0, mem_clk = 0, bus = 0, major = 0, minor = 0;
    (void)gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, 0);
    (void)gpuDeviceGetAttribute(&clk, gpuDevAttrClockRate, 0);
    (void)gpuDeviceGetAttribute(&mem_clk, gpuDevAttrMemoryClockRate, 0);
    (void)gpuDeviceGetAttribute(&bus, gpuDevAttrGlobalMemoryBusWidth, 0);
    (void)gpuDeviceGetAttribute(&major, gpuDevAttrComputeCapabilityMajor, 0);
    (void)gpuDeviceGetAttribute(&minor, gpuDevAttrComputeCapabilityMinor, 0);
    (void)gpuGetLastError();
#ifdef GPU_BACKEND_HIP
    const int lanes = 64; /* FP32 lanes per compute unit (CDNA/RDNA) */
#else
    /* FP32 lanes per SM: 64 on sm_80 (A100), 128 on sm_86/89/90 and later. */
    const int lanes = major == 8 && minor == 0 ? 64 : major >= 8 ? 128 : 64;
#endif
    /* Sustained rates: ~75% of peak FMA throughput, ~80% of peak bandwidth (DDR). */
    double flops = 0.75 * sms * (clk * 1e3) * lanes * 2.0;
    double bw = 0.8 * 2.0 * (mem_clk * 1e3) * (bus / 8.0);
    desc->flops_per_s = flops > 1e9 ? flops : 20e12;
    desc->bytes_per_s = bw > 1e9 ? bw : 1.5e12;
    desc->launch_ns = 3000;
}

void plugin_shutdown(opr_plugin *)
{
    std::lock_guard<std::mutex> g(g_refs_lock);
    if (--g_refs > 0) return;
    gk_collective_shutdown();
    for (int i = 0; i < GK_MAX_ORDINALS; i++) {
        device_state &d = g_dev[i];
        std::lock_guard<std::mutex> lk(d.lock);
        if (!d.ready.load(std::memory_order_acquire)) continue;
        if (gpuSetDevice(i) != gpuSuccess) {
            (void)gpuGetLastError();
            continue;
        }
        trim_locked(d);
#if GPU_HAVE_BLAS
        if (d.blas) cublasDestroy(d.blas);
        d.blas = nullptr;
#endif
        (void)gpuStreamDestroy(d.stream);
        d.stream = nullptr;
        d.ready.store(false, std::memory_order_release);
        (void)gpuGetLastError();
    }
}

bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

} // namespace

int gk_register(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn)
{
    return gk_register_supports(self, op, dtypes, fn, nullptr);
}

int gk_register_supports(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn,
                         bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len))
{
    opr_kernel_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.op = op;
    d.device = GPU_NAME;
    d.dtypes = dtypes;
    d.fn = fn;
    d.supports = supports;
    return gk_host->register_kernel(self, &d);
}

extern "C" OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = GPU_PLUGIN_NAME;
    self->version = "0.1.0";
    if (host->abi_major != OPR_ABI_MAJOR) return OPR_ERR_ABI;
    gk_host = host;

    int n = 0;
    gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess || n < 1) {
        (void)gpuGetLastError();
        host->set_error(nullptr, "%s: no usable device (%s)", GPU_NAME,
                        e != gpuSuccess ? gpuGetErrorString(e) : "device count is 0");
        return OPR_ERR_UNSUPPORTED;
    }
    if (n > GK_MAX_ORDINALS) n = GK_MAX_ORDINALS;
    {
        std::lock_guard<std::mutex> g(g_refs_lock);
        if (g_refs == 0) {
            g_count = n;
            g_no_cache = env_on("OPREG_CUDA_NO_CACHE");
            gk_force_tiled_gemm = env_on("OPREG_CUDA_TILED_GEMM");
        }
    }

    opr_device_desc dev;
    memset(&dev, 0, sizeof dev);
    dev.struct_size = sizeof dev;
    dev.name = GPU_NAME;
    dev.count = g_count;
    device_speed(&dev);
    dev.alloc = dev_alloc;
    dev.free = dev_free;
    dev.copy_to_host = dev_copy_to_host;
    dev.copy_from_host = dev_copy_from_host;
    dev.copy_device = dev_copy_device;
    dev.sync = dev_sync;
    dev.reserved = dev_reserved;
    int rc = host->register_device(self, &dev);
    if (rc) return rc;
    int (*const families[])(opr_plugin *) = {
        gk_register_elementwise, gk_register_compare, gk_register_reduce, gk_register_linalg,
        gk_register_index, gk_register_copy, gk_register_sort, gk_register_segment, gk_register_convert, gk_register_nn,
        gk_register_norm, gk_register_loss, gk_register_attention, gk_register_conv, gk_register_pool,
        gk_register_batch_norm, gk_register_collective, gk_register_pointwise, gk_register_scatter,
        gk_register_optim, gk_register_shape, gk_register_scan,
        gk_register_random, gk_register_embedding_bag,
        gk_register_grid_sample,
        gk_register_adv_index,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if ((rc = families[i](self)) != OPR_OK) return rc;
    self->shutdown = plugin_shutdown;
    std::lock_guard<std::mutex> g(g_refs_lock);
    g_refs++;
    return OPR_OK;
}
