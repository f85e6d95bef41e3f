/* Shared by every source of the GPU plugin: argument access and validation helpers
 * (the same rules as plugins/cpu/cpu_common.h), the per-call device context, scratch
 * buffers from the caching allocator, strided index geometry for kernels, dtype
 * conversion for device code, and the entry points the kernel families provide to each
 * other (strided copy, fill, sum over dims, batched GEMM).
 *
 * Conventions:
 *  - every kernel entry point starts with gk_begin(), which selects the device of the
 *    call's tensors and gives its stream; all work of a device runs on that one stream,
 *    so freed memory can be reused at once (stream order) and results are ordered;
 *  - every runtime call is checked with GK_TRY and every launch with gk_launched();
 *    failures are reported through host->set_error naming the op, never abort;
 *  - index arithmetic is int64 throughout (tensors may exceed 2^31 elements). */
#ifndef OPREG_CUDA_COMMON_CUH
#define OPREG_CUDA_COMMON_CUH

#include "gpu_port.h"

#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include "../common/opc_dtype.h"
#include "../common/opc_shape.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GK_MAXD OPR_MAX_DIMS
#define GK_THREADS 256
/* The host keeps statistics for at most this many ordinals per device type. */
#define GK_MAX_ORDINALS 16

extern const opr_host_api *gk_host;

/* Reports the detail of call (NULL in device callbacks, which have none) and returns
 * status. */
#define GK_FAIL(call, status, ...) (gk_host->set_error((call), __VA_ARGS__), (status))

/* ------------------------------------------------------------------ arguments */

static inline const opr_tensor_view *gk_arg_t(const opr_kernel_call *c, int i)
{
    return i < c->nargs && c->args[i]->kind == OPR_ARG_TENSOR ? c->args[i]->u.t : NULL;
}
static inline int64_t gk_arg_i(const opr_kernel_call *c, int i)
{
    if (i >= c->nargs) return 0;
    return c->args[i]->kind == OPR_ARG_INT ? c->args[i]->u.i
         : c->args[i]->kind == OPR_ARG_DOUBLE ? (int64_t)c->args[i]->u.d : 0;
}
static inline double gk_arg_d(const opr_kernel_call *c, int i)
{
    if (i >= c->nargs) return 0.0;
    return c->args[i]->kind == OPR_ARG_DOUBLE ? c->args[i]->u.d
         : c->args[i]->kind == OPR_ARG_INT ? (double)c->args[i]->u.i : 0.0;
}
static inline bool gk_arg_b(const opr_kernel_call *c, int i)
{
    if (i >= c->nargs) return false;
    return c->args[i]->kind == OPR_ARG_BOOL ? c->args[i]->u.b : gk_arg_i(c, i) != 0;
}
static inline bool gk_arg_given(const opr_kernel_call *c, int i)
{
    return i < c->nargs && c->args[i]->kind != OPR_ARG_NONE;
}

static inline bool gk_wrap_dim(int64_t d, int32_t ndim, int32_t *out) { return opc_wrap_dim(d, ndim, out); }

static inline size_t gk_dtype_size(opr_dtype t) { return opc_dtype_size(t); }
static inline const char *gk_dtype_name(opr_dtype t) { return opc_dtype_name(t); }

#define GK_BIT(dt) OPR_DTYPE_BIT(dt)
#define GK_FLOATS (GK_BIT(OPR_F32) | GK_BIT(OPR_F64))
#define GK_NUMERIC (GK_FLOATS | GK_BIT(OPR_I64))
#define GK_I32 GK_BIT(OPR_I32) /* added per kernel, where the kernel handles int32_t */
#define GK_HALVES (GK_BIT(OPR_F16) | GK_BIT(OPR_BF16))
#define GK_ALL (GK_NUMERIC | GK_BIT(OPR_BOOL) | GK_HALVES)

/* The host's rule (<opreg/plugin_util.h>): no elements, nothing is out of order. */
static inline bool gk_strides_contiguous(int32_t ndim, const int64_t *shape, const int64_t *st)
{
    return opu_strides_contiguous(ndim, shape, st);
}

static inline bool gk_is_contiguous(const opr_tensor_view *v)
{
    return gk_strides_contiguous(v->ndim, v->shape, v->strides);
}

static inline int64_t gk_numel(int32_t ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static inline bool gk_same_shape(int32_t ndim, const int64_t *shape, const opr_tensor_view *v)
{
    return opc_same_shape(ndim, shape, v);
}


/* Byte ranges two views can touch intersect (empty views touch nothing). */
static inline bool gk_views_overlap(const opr_tensor_view *a, const opr_tensor_view *b)
{
    if (a->numel == 0 || b->numel == 0) return false;
    const char *lo[2], *hi[2];
    const opr_tensor_view *v[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        int64_t mn = 0, mx = 0;
        for (int32_t d = 0; d < v[k]->ndim; d++) {
            int64_t span = (v[k]->shape[d] - 1) * v[k]->strides[d];
            if (span < 0) mn += span; else mx += span;
        }
        int64_t es = (int64_t)gk_dtype_size(v[k]->dtype);
        lo[k] = (const char *)v[k]->data + mn * es;
        hi[k] = (const char *)v[k]->data + (mx + 1) * es;
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* In-place writes through a view with an expanded (stride 0) dim would race. */
static inline int gk_check_writable(const opr_kernel_call *c, const char *op, const opr_tensor_view *out)
{
    for (int32_t d = 0; d < out->ndim; d++)
        if (out->shape[d] > 1 && out->strides[d] == 0)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: more than one element of self refers to the same memory location (dim %d is expanded)",
                           op, (int)d);
    return OPR_OK;
}

static inline int gk_check_dtype(const opr_kernel_call *c, const char *op, const char *what, const opr_tensor_view *v, opr_dtype dt)
{
    char why[OPC_WHY_SIZE];
    return opc_expect_dtype(op, what, v, dt, why, sizeof why) ? OPR_OK : GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

/* ------------------------------------------------------------------ device context */

/* What a kernel entry point needs of its device: set by gk_begin. */
typedef struct gk_ctx {
    const opr_kernel_call *call; /* NULL in device callbacks */
    const char *op;
    int ordinal;
    gpuStream_t stream;
    int sm_count;
} gk_ctx;

/* Selects the device of the call (its first tensor argument, else output 0), makes it
 * current on this thread and initialises it on first use. */
int gk_begin(const opr_kernel_call *c, const char *op, gk_ctx *k);
/* Same for an explicit ordinal (device callbacks: c NULL). */
int gk_begin_ordinal(const opr_kernel_call *c, int ordinal, const char *op, gk_ctx *k);

/* Reports a runtime error for the current op; returns OPR_ERR_BACKEND. */
int gk_fail_gpu(const gk_ctx *k, const char *what, gpuError_t e);

#define GK_TRY(k, call)                                               \
    do {                                                              \
        gpuError_t gk_e_ = (call);                                    \
        if (gk_e_ != gpuSuccess) return gk_fail_gpu((k), #call, gk_e_); \
    } while (0)

/* Checks the launch that was just made. */
static inline int gk_launched(const gk_ctx *k, const char *what)
{
    gpuError_t e = gpuGetLastError();
    return e == gpuSuccess ? OPR_OK : gk_fail_gpu(k, what, e);
}

/* Copies n bytes of device memory into host memory; complete on return. */
int gk_to_host(const gk_ctx *k, void *dst, const void *src, size_t n);
/* Copies n bytes of host memory to the device; the host buffer may be reused on return. */
int gk_from_host(const gk_ctx *k, void *dst, const void *src, size_t n);

/* OPREG_CUDA_TILED_GEMM=1: run GEMMs on the tiled kernel even where cuBLAS exists. */
extern bool gk_force_tiled_gemm;
#if GPU_HAVE_BLAS
/* The cuBLAS handle of a ready ordinal, bound to its stream (a cublasHandle_t). */
void *gk_blas_handle(int ordinal);
#endif

/* Caching allocator (gpu_device.cu). NULL on failure (no error set). */
void *gk_mem_alloc(int ordinal, size_t nbytes);
void gk_mem_free(int ordinal, void *ptr, size_t nbytes);

/* Launch size for a grid-stride loop over n items. */
static inline unsigned gk_blocks(int64_t n, int threads = GK_THREADS)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > (1 << 20)) b = 1 << 20;
    return (unsigned)b;
}

#ifdef __cplusplus
/* Device scratch that goes back to the cache when it leaves scope. */
struct gk_buf {
    int ordinal = 0;
    void *p = nullptr;
    size_t n = 0;
    gk_buf() = default;
    gk_buf(const gk_buf &) = delete;
    gk_buf &operator=(const gk_buf &) = delete;
    ~gk_buf() { release(); }
    void release()
    {
        if (p) gk_mem_free(ordinal, p, n);
        p = nullptr;
        n = 0;
    }
    /* Returns OPR_OK, or OPR_ERR_NOMEM after reporting it for k->op. */
    int alloc(const gk_ctx *k, size_t nbytes)
    {
        release();
        ordinal = k->ordinal;
        n = nbytes ? nbytes : 1;
        p = gk_mem_alloc(ordinal, n);
        if (!p) {
            n = 0;
            return GK_FAIL(k->call, OPR_ERR_NOMEM, "%s: out of %s device memory (%zu bytes of scratch)", k->op,
                           GPU_RUNTIME_NAME, nbytes);
        }
        return OPR_OK;
    }
    template <class T> T *as() const { return (T *)p; }
};
#endif

/* ------------------------------------------------------------------ index geometry */

/* Up to 4 operands walked over one shape (operand 0 is usually the output). Passed by
 * value to kernels. */
typedef struct gk_geom {
    int32_t ndim;
    int64_t shape[GK_MAXD];
    int64_t st[4][GK_MAXD];
} gk_geom;

/* Builds a coalesced geometry over `shape` from each operand's strides. */
static inline void gk_geom_make(gk_geom *g, int32_t ndim, const int64_t *shape, int nops,
                                const int64_t *const *strides)
{
    memset(g, 0, sizeof *g);
    g->ndim = ndim;
    for (int32_t d = 0; d < ndim; d++) {
        g->shape[d] = shape[d];
        for (int k = 0; k < nops; k++) g->st[k][d] = strides[k][d];
    }
    g->ndim = opc_coalesce(ndim, g->shape, nops, g->st);
}

#ifdef __CUDACC__
#define GK_DEV __device__ __forceinline__
#elif defined(__HIPCC__)
#define GK_DEV __device__ inline
#else
#define GK_DEV inline
#endif

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(GPU_BACKEND_EMU)
/* Element offsets of row-major position i for the first N operands. */
template <int N>
GK_DEV void gk_offsets(const gk_geom &g, int64_t i, int64_t *off)
{
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
        const int64_t n = g.shape[d];
        const int64_t q = i / n, idx = i - q * n;
        i = q;
#pragma unroll
        for (int k = 0; k < N; k++) off[k] += idx * g.st[k][d];
    }
}

/* Grid-stride loop over [0, n). */
#define GK_LOOP(i, n)                                                                         \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------------ dtype conversion */

/* Compute type of a storage type: halves compute in float. */
template <class S> struct gk_acc { typedef S type; };
template <> struct gk_acc<gpu_f16> { typedef float type; };
template <> struct gk_acc<gpu_bf16> { typedef float type; };

template <class D, class S> struct gk_conv {
    static GK_DEV D run(S v) { return (D)v; }
};
template <> struct gk_conv<float, gpu_f16> {
    static GK_DEV float run(gpu_f16 v) { return gpu_f16_to_float(v); }
};
template <> struct gk_conv<gpu_f16, float> {
    static GK_DEV gpu_f16 run(float v) { return gpu_float_to_f16(v); }
};
template <> struct gk_conv<float, gpu_bf16> {
    static GK_DEV float run(gpu_bf16 v) { return gpu_bf16_to_float(v); }
};
template <> struct gk_conv<gpu_bf16, float> {
    static GK_DEV gpu_bf16 run(float v) { return gpu_float_to_bf16(v); }
};
template <> struct gk_conv<uint8_t, bool> {
    static GK_DEV uint8_t run(bool v) { return v ? 1 : 0; }
};
template <class D, class S> GK_DEV D gk_cvt(S v) { return gk_conv<D, S>::run(v); }

/* F<T>(args...) with T the storage type of dt, which the caller has checked is f32, f64,
 * f16 or bf16. */
#define GK_FLOAT_DISPATCH(dt, F, ...)                        \
    do {                                                     \
        switch (dt) {                                        \
        case OPR_F32: F<float>(__VA_ARGS__); break;          \
        case OPR_F64: F<double>(__VA_ARGS__); break;         \
        case OPR_F16: F<gpu_f16>(__VA_ARGS__); break;        \
        default: F<gpu_bf16>(__VA_ARGS__); break;            \
        }                                                    \
    } while (0)

/* A floating storage element as double, and a double rounded to the storage type
 * (halves through float): kernels that compute in double serve f16 and bf16 with these. */
template <class S> GK_DEV double gk_to_d(S v) { return (double)gk_cvt<typename gk_acc<S>::type>(v); }
template <class S> GK_DEV S gk_from_d(double d) { return gk_cvt<S>((typename gk_acc<S>::type)d); }

/* Wrapping i64 and i32 arithmetic (PyTorch's behaviour; signed overflow is undefined in C++). */
GK_DEV int64_t gk_wadd(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
GK_DEV int64_t gk_wsub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
GK_DEV int64_t gk_wmul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }
GK_DEV int32_t gk_wadd(int32_t x, int32_t y) { return (int32_t)((uint32_t)x + (uint32_t)y); }
GK_DEV int32_t gk_wsub(int32_t x, int32_t y) { return (int32_t)((uint32_t)x - (uint32_t)y); }
GK_DEV int32_t gk_wmul(int32_t x, int32_t y) { return (int32_t)((uint32_t)x * (uint32_t)y); }
GK_DEV float gk_wadd(float x, float y) { return x + y; }
GK_DEV float gk_wsub(float x, float y) { return x - y; }
GK_DEV float gk_wmul(float x, float y) { return x * y; }
GK_DEV double gk_wadd(double x, double y) { return x + y; }
GK_DEV double gk_wsub(double x, double y) { return x - y; }
GK_DEV double gk_wmul(double x, double y) { return x * y; }

/* NaN-aware orderings: NaN above every number. */
GK_DEV bool gk_isnan(float v) { return v != v; }
GK_DEV bool gk_isnan(double v) { return v != v; }
GK_DEV bool gk_isnan(int64_t) { return false; }
GK_DEV bool gk_isnan(int32_t) { return false; }

/* *p += v from any thread: atomicAdd for f32, f64, i64 and i32 (wrapping); a half adds in
 * float through a compare-and-swap of the aligned 32-bit word holding it (atomicAdd on
 * halves needs sm_70 or more, and bf16 has none): the word stays inside the
 * allocation, which device allocators align and pad to more than 4 bytes. */
GK_DEV void gk_atomic_add(float *p, float v) { atomicAdd(p, v); }
GK_DEV void gk_atomic_add(double *p, double v) { atomicAdd(p, v); }
GK_DEV void gk_atomic_add(int64_t *p, int64_t v) { atomicAdd((unsigned long long *)p, (unsigned long long)v); }
GK_DEV void gk_atomic_add(int32_t *p, int32_t v) { atomicAdd(p, v); }
template <class H> GK_DEV void gk_atomic_add_half(H *p, H v)
{
    unsigned int *word = (unsigned int *)((size_t)p & ~(size_t)3);
    const bool high = ((size_t)p & 2) != 0;
    unsigned int old = *word, seen;
    do {
        seen = old;
        const unsigned short bits = (unsigned short)(high ? seen >> 16 : seen & 0xffffu);
        H h, sum;
        unsigned short out;
        memcpy(&h, &bits, sizeof h);
        sum = gk_cvt<H>(gk_cvt<float>(h) + gk_cvt<float>(v));
        memcpy(&out, &sum, sizeof out);
        const unsigned int next = high ? (seen & 0xffffu) | ((unsigned int)out << 16) : (seen & 0xffff0000u) | out;
        old = atomicCAS(word, seen, next);
    } while (old != seen);
}
GK_DEV void gk_atomic_add(gpu_f16 *p, gpu_f16 v) { gk_atomic_add_half(p, v); }
GK_DEV void gk_atomic_add(gpu_bf16 *p, gpu_bf16 v) { gk_atomic_add_half(p, v); }
#endif

/* ------------------------------------------------------------------ shared entry points */

/* Strided copy of `shape` elements of size es (1, 2, 4 or 8) from src to dst; either
 * side may have any strides (0 allowed on the source). Overlap is the caller's
 * business. (gpu_copy.cu) */
int gk_copy_strided(const gk_ctx *k, size_t es, int32_t ndim, const int64_t *shape, void *dst,
                    const int64_t *dst_st, const void *src, const int64_t *src_st);
/* Writes the element whose bytes are `bits` (es bytes, little end) everywhere. */
int gk_fill(const gk_ctx *k, size_t es, int32_t ndim, const int64_t *shape, void *dst,
            const int64_t *st, uint64_t bits);
/* Encodes v as one element of dt the way fill_ converts (bool: v != 0; i64: refuses
 * values out of range). */
int gk_encode_scalar(const opr_kernel_call *c, const char *op, opr_dtype dt, double v, uint64_t *bits);
/* Copies `shape` elements of dtype `from` at src into dtype `to` at dst, either side
 * with any strides, converting as to(self, dtype) does (gpu_convert.cu). */
int gk_convert_strided(const gk_ctx *k, opr_dtype to, int32_t ndim, const int64_t *shape, void *dst,
                       const int64_t *dst_st, opr_dtype from, const void *src, const int64_t *src_st);
/* Copies a view into a new contiguous scratch buffer of the same dtype. */
int gk_contiguous_copy(const gk_ctx *k, const opr_tensor_view *v, gk_buf *buf, int64_t *strides);
/* v's data in row-major order in *data: v's own when it is contiguous, else a copy in
 * buf (gk_contiguous_copy); NULL for an absent v (v NULL). */
int gk_dense(const gk_ctx *k, const opr_tensor_view *v, gk_buf *buf, const void **data);

/* Sum of `in` (f32/f64/f16/bf16) over the dims in `mask` into `out`, whose non-size-1 dims
 * match the kept dims of `in` in order; out strides arbitrary. scale multiplies the
 * result. (gpu_reduce.cu) */
int gk_sum_dims(const gk_ctx *k, const opr_tensor_view *in, uint32_t mask, const opr_tensor_view *out,
                double scale);
/* out = scale * g summed down to out's shape (right-aligned broadcasting), floating dtypes. */
int gk_sum_to(const gk_ctx *k, const opr_tensor_view *g, const opr_tensor_view *out, double scale);

/* The smallest and largest value of the non-empty i64 view `index`, read back to the
 * host (one synchronisation): how the indexing kernels check their indices before
 * anything is written. (gpu_index.cu) */
int gk_index_range(const gk_ctx *k, const opr_tensor_view *index, int64_t *min, int64_t *max);

/* Strided-batched GEMM for kernels outside gpu_linalg.cu: C[b] = alpha * A[b] @ B[b] +
 * beta * C[b] for b < count (beta 0: C is only written). A[b] (m x kk) starts at
 * a + b * a_bs elements, with row stride a_rs and column stride a_cs, one of them 1 (a
 * row-major matrix or the transpose of one: what cuBLAS reads in place); B[b] (kk x n)
 * likewise; C[b] row-major with row stride n at c + b * c_bs. cuBLAS where the build has
 * it, else (or with OPREG_CUDA_TILED_GEMM=1) the tiled kernel. (gpu_linalg.cu) */
int gk_gemm(const gk_ctx *k, opr_dtype dt, int64_t m, int64_t n, int64_t kk, double alpha, const void *a, int64_t a_rs,
            int64_t a_cs, int64_t a_bs, const void *b, int64_t b_rs, int64_t b_cs, int64_t b_bs, double beta, void *c,
            int64_t c_bs, int64_t count);

/* Registration of each kernel family. */
int gk_register(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn);
/* gk_register for an f32 kernel (among dtypes) that also serves f16 and bf16: their
 * tensors are widened to f32 scratch around the call and the outputs rounded back
 * (gpu_half.cu). */
int gk_register_upcast(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn);
/* Same, with a `supports` callback (opr_kernel_desc) that may decline a call. */
int gk_register_supports(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn,
                         bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len));
int gk_register_elementwise(opr_plugin *self); /* gpu_elementwise.cu */
int gk_register_compare(opr_plugin *self);     /* gpu_compare.cu */
int gk_register_reduce(opr_plugin *self);      /* gpu_reduce.cu */
int gk_register_linalg(opr_plugin *self);      /* gpu_linalg.cu */
int gk_register_index(opr_plugin *self);       /* gpu_index.cu */
int gk_register_scatter(opr_plugin *self);     /* gpu_scatter.cu: slice_scatter, scatter, scatter_reduce, nonzero */
int gk_register_adv_index(opr_plugin *self);   /* gpu_adv_index.cu: index.Tensor, index_put(_) */
int gk_register_copy(opr_plugin *self);        /* gpu_copy.cu */
int gk_register_sort(opr_plugin *self);        /* gpu_sort.cu */
int gk_register_segment(opr_plugin *self);     /* gpu_segment.cu: segments of jagged tensors */
int gk_register_convert(opr_plugin *self);     /* gpu_convert.cu: to(self, dtype) */
int gk_register_nn(opr_plugin *self);          /* gpu_nn.cu: embedding, dropout, triu/tril, argmax/argmin */
int gk_register_norm(opr_plugin *self);        /* gpu_norm.cu: layer_norm, gelu */
int gk_register_loss(opr_plugin *self);        /* gpu_loss.cu: nll_loss, cross_entropy */
int gk_register_attention(opr_plugin *self);   /* gpu_attention.cu: scaled dot-product attention */
int gk_register_conv(opr_plugin *self);        /* gpu_conv.cu: convolution and its backward */
int gk_register_pool(opr_plugin *self);        /* gpu_pool.cu: max, average and adaptive average pooling */
int gk_register_batch_norm(opr_plugin *self);  /* gpu_batch_norm.cu: native_batch_norm, native_group_norm */
int gk_register_optim(opr_plugin *self);       /* gpu_optim.cu: sgd_step_, adamw_step_ */
int gk_register_collective(opr_plugin *self);  /* gpu_nccl.cu: all_reduce, ... on NCCL */
int gk_register_pointwise(opr_plugin *self);   /* gpu_pointwise.cu: ATen's other pointwise, bitwise, logical ops */
int gk_register_shape(opr_plugin *self);       /* gpu_shape.cu: flip, as_strided_scatter */
int gk_register_scan(opr_plugin *self);        /* gpu_scan.cu: cumsum */
int gk_register_random(opr_plugin *self);      /* gpu_random.cu: rand, randn, randperm */
int gk_register_embedding_bag(opr_plugin *self); /* gpu_embedding_bag.cu: _embedding_bag and its gradients */
int gk_register_grid_sample(opr_plugin *self); /* gpu_grid_sample.cu: grid_sampler_2d and its backward */
/* Destroys the NCCL communicators (gpu_nccl.cu), with the last context. */
void gk_collective_shutdown(void);

#endif /* OPREG_CUDA_COMMON_CUH */
