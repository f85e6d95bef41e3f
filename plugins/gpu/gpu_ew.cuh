/* The generic strided elementwise machinery shared by gpu_elementwise.cu and
 * gpu_compare.cu: one grid-stride kernel per arity, instantiated with a functor over
 * the compute type (float for f16/bf16 storage), reading inputs through broadcast
 * strides (0 on broadcast dims) and writing an output that is contiguous or, for
 * in-place use, strided. Index math is int64. A call whose operands are all contiguous
 * with the output's element count takes a kernel without index math. */
#ifndef OPREG_CUDA_EW_CUH
#define OPREG_CUDA_EW_CUH

#include "gpu_common.cuh"

#include <math.h>
#include <type_traits>

/* Device math overloads (float and double; the compute types). */
GK_DEV float gk_exp(float x) { return expf(x); }
GK_DEV double gk_exp(double x) { return exp(x); }
GK_DEV float gk_log(float x) { return logf(x); }
GK_DEV double gk_log(double x) { return log(x); }
GK_DEV float gk_sqrt(float x) { return sqrtf(x); }
GK_DEV double gk_sqrt(double x) { return sqrt(x); }
GK_DEV float gk_tanh(float x) { return tanhf(x); }
GK_DEV double gk_tanh(double x) { return tanh(x); }
GK_DEV float gk_fabs(float x) { return fabsf(x); }
GK_DEV double gk_fabs(double x) { return fabs(x); }
GK_DEV float gk_pow(float x, float y) { return powf(x, y); }
GK_DEV double gk_pow(double x, double y) { return pow(x, y); }

/* A scalar argument (double on the ABI) in a compute type: i64 and i32 saturate (NaN -> 0),
 * as the CPU kernels convert. */
template <class C> inline C gk_scalar(double v) { return (C)v; }
template <> inline int64_t gk_scalar<int64_t>(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
template <> inline int32_t gk_scalar<int32_t>(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}
template <> inline uint8_t gk_scalar<uint8_t>(double v) { return v != 0; }

/* Functor families: members a, b hold the op's scalar arguments. */
#define GK_UNARY_FN(name, RT, EXPR)                          \
    template <class C> struct name {                         \
        C a, b;                                              \
        GK_DEV RT operator()(C x) const { return (EXPR); }   \
    };
#define GK_BINARY_FN(name, RT, EXPR)                              \
    template <class C> struct name {                              \
        C a, b;                                                   \
        GK_DEV RT operator()(C x, C y) const { return (EXPR); }   \
    };
#define GK_TERNARY_FN(name, RT, EXPR)                                  \
    template <class C> struct name {                                   \
        C a, b;                                                        \
        GK_DEV RT operator()(C x, C y, C z) const { return (EXPR); }   \
    };

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(GPU_BACKEND_EMU)
template <class SO, class SI, class F>
__global__ void gk_k_unary(int64_t n, gk_geom g, SO *o, const SI *x, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        o[off[0]] = gk_cvt<SO>(f(gk_cvt<C>(x[off[1]])));
    }
}

template <class SO, class SI, class F>
__global__ void gk_k_unary_contig(int64_t n, SO *o, const SI *x, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n) o[i] = gk_cvt<SO>(f(gk_cvt<C>(x[i])));
}

template <class SO, class SI, class F>
__global__ void gk_k_binary(int64_t n, gk_geom g, SO *o, const SI *x, const SI *y, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n)
    {
        int64_t off[3];
        gk_offsets<3>(g, i, off);
        o[off[0]] = gk_cvt<SO>(f(gk_cvt<C>(x[off[1]]), gk_cvt<C>(y[off[2]])));
    }
}

template <class SO, class SI, class F>
__global__ void gk_k_binary_contig(int64_t n, SO *o, const SI *x, const SI *y, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n) o[i] = gk_cvt<SO>(f(gk_cvt<C>(x[i]), gk_cvt<C>(y[i])));
}

template <class SO, class SI, class F>
__global__ void gk_k_ternary(int64_t n, gk_geom g, SO *o, const SI *x, const SI *y, const SI *z, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n)
    {
        int64_t off[4];
        gk_offsets<4>(g, i, off);
        o[off[0]] = gk_cvt<SO>(f(gk_cvt<C>(x[off[1]]), gk_cvt<C>(y[off[2]]), gk_cvt<C>(z[off[3]])));
    }
}

template <class SO, class SI, class F>
__global__ void gk_k_ternary_contig(int64_t n, SO *o, const SI *x, const SI *y, const SI *z, F f)
{
    typedef typename gk_acc<SI>::type C;
    GK_LOOP(i, n) o[i] = gk_cvt<SO>(f(gk_cvt<C>(x[i]), gk_cvt<C>(y[i]), gk_cvt<C>(z[i])));
}
#endif

/* A prepared elementwise call: the operands (output first) as a coalesced geometry,
 * or the flag that everything is contiguous. */
struct gk_ew {
    const char *op;
    const opr_tensor_view *out;
    const opr_tensor_view *in[3];
    int nin;
    bool contig;
    gk_geom g;
};

/* Checks arity, that args[first..first+nin) are tensors of one dtype in `dtypes`, the
 * output dtype (bool when bool_out) and the broadcast; fills e. */
static inline int gk_ew_prepare(const opr_kernel_call *c, const char *op, int nargs, int first, int nin,
                                uint32_t dtypes, bool bool_out, gk_ew *e)
{
    if (c->nargs < nargs || c->nout < 1)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected %d arguments and 1 output, got %d and %d", op, nargs,
                       c->nargs, c->nout);
    e->op = op;
    e->nin = nin;
    e->out = c->outputs[0];
    for (int i = 0; i < nin; i++)
        if (!(e->in[i] = gk_arg_t(c, first + i)))
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: argument %d is not a tensor", op, first + i);
    const opr_dtype t = e->in[0]->dtype;
    for (int i = 1; i < nin; i++)
        if (e->in[i]->dtype != t)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: dtype mismatch: argument %d is %s, argument %d is %s", op, first,
                           gk_dtype_name(t), first + i, gk_dtype_name(e->in[i]->dtype));
    if ((unsigned)t >= OPR_DTYPE_COUNT || !(dtypes & GK_BIT(t)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", op, GPU_NAME, gk_dtype_name(t));
    const opr_dtype want = bool_out ? OPR_BOOL : t;
    if (e->out->dtype != want)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: output dtype is %s, expected %s", op, gk_dtype_name(e->out->dtype),
                       gk_dtype_name(want));
    const opr_tensor_view *out = e->out;
    if (out->numel > 0 && !out->data) return GK_FAIL(c, OPR_ERR_INVALID, "%s: output is not allocated", op);
    if (out->ndim > GK_MAXD)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: %d-d output exceeds %d dims", op, out->ndim, GK_MAXD);
    bool contig = gk_is_contiguous(out);
    int64_t st[4][GK_MAXD];
    for (int32_t d = 0; d < out->ndim; d++) st[0][d] = out->strides[d];
    for (int i = 0; i < nin; i++) {
        if (!opc_bcast_strides(e->in[i], out->ndim, out->shape, st[i + 1]))
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: input %d (%d-d) does not broadcast to the %d-d output", op, i,
                           e->in[i]->ndim, out->ndim);
        contig = contig && e->in[i]->numel == out->numel && gk_is_contiguous(e->in[i]);
    }
    e->contig = contig;
    const int64_t *sp[4] = {st[0], st[1], st[2], st[3]};
    gk_geom_make(&e->g, out->ndim, out->shape, nin + 1, sp);
    return OPR_OK;
}

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(GPU_BACKEND_EMU)
template <class SO, class SI, class F>
int gk_ew_unary(const gk_ctx *k, const gk_ew &e, F f)
{
    const int64_t n = e.out->numel;
    if (n == 0) return OPR_OK;
    SO *o = (SO *)e.out->data;
    const SI *x = (const SI *)e.in[0]->data;
    if (e.contig) gk_launch(gk_k_unary_contig<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, o, x, f);
    else gk_launch(gk_k_unary<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, e.g, o, x, f);
    return gk_launched(k, "elementwise kernel");
}

template <class SO, class SI, class F>
int gk_ew_binary(const gk_ctx *k, const gk_ew &e, F f)
{
    const int64_t n = e.out->numel;
    if (n == 0) return OPR_OK;
    SO *o = (SO *)e.out->data;
    const SI *x = (const SI *)e.in[0]->data, *y = (const SI *)e.in[1]->data;
    if (e.contig) gk_launch(gk_k_binary_contig<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, o, x, y, f);
    else gk_launch(gk_k_binary<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, e.g, o, x, y, f);
    return gk_launched(k, "elementwise kernel");
}

template <class SO, class SI, class F>
int gk_ew_ternary(const gk_ctx *k, const gk_ew &e, F f)
{
    const int64_t n = e.out->numel;
    if (n == 0) return OPR_OK;
    SO *o = (SO *)e.out->data;
    const SI *x = (const SI *)e.in[0]->data, *y = (const SI *)e.in[1]->data, *z = (const SI *)e.in[2]->data;
    if (e.contig) gk_launch(gk_k_ternary_contig<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, o, x, y, z, f);
    else gk_launch(gk_k_ternary<SO, SI, F>, gk_blocks(n), GK_THREADS, 0, k->stream, n, e.g, o, x, y, z, f);
    return gk_launched(k, "elementwise kernel");
}

template <int NIN, class SO, class SI, class F>
int gk_ew_run(const gk_ctx *k, const gk_ew &e, F f)
{
    if constexpr (NIN == 1) return gk_ew_unary<SO, SI>(k, e, f);
    else if constexpr (NIN == 2) return gk_ew_binary<SO, SI>(k, e, f);
    else return gk_ew_ternary<SO, SI>(k, e, f);
}

/* Runs functor template F over the prepared call for its dtype: SO is the storage
 * type of the output (the input's, or uint8_t for bool outputs). */
template <template <class> class F, bool BOOL_OUT, int NIN>
int gk_ew_dispatch(const gk_ctx *k, const gk_ew &e, double a, double b)
{
#define GK_EW_CASE(DT, S, C)                                                                      \
    case DT: {                                                                                    \
        F<C> f;                                                                                   \
        f.a = gk_scalar<C>(a);                                                                    \
        f.b = gk_scalar<C>(b);                                                                    \
        typedef typename std::conditional<BOOL_OUT, uint8_t, S>::type SO;                         \
        return gk_ew_run<NIN, SO, S>(k, e, f);                                                  \
    }
    switch (e.in[0]->dtype) {
    GK_EW_CASE(OPR_F32, float, float)
    GK_EW_CASE(OPR_F64, double, double)
    GK_EW_CASE(OPR_F16, gpu_f16, float)
    GK_EW_CASE(OPR_BF16, gpu_bf16, float)
    default:
        return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", e.op, GPU_NAME,
                       gk_dtype_name(e.in[0]->dtype));
    }
#undef GK_EW_CASE
}

/* The same with i64 and i32 as well: F must compile for int64_t and int32_t. */
template <template <class> class F, bool BOOL_OUT, int NIN, class I>
int gk_ew_run_int(const gk_ctx *k, const gk_ew &e, double a, double b)
{
    F<I> f;
    f.a = gk_scalar<I>(a);
    f.b = gk_scalar<I>(b);
    typedef typename std::conditional<BOOL_OUT, uint8_t, I>::type SO;
    return gk_ew_run<NIN, SO, I>(k, e, f);
}
template <template <class> class F, bool BOOL_OUT, int NIN>
int gk_ew_dispatch_int(const gk_ctx *k, const gk_ew &e, double a, double b)
{
    if (e.in[0]->dtype == OPR_I64) return gk_ew_run_int<F, BOOL_OUT, NIN, int64_t>(k, e, a, b);
    if (e.in[0]->dtype == OPR_I32) return gk_ew_run_int<F, BOOL_OUT, NIN, int32_t>(k, e, a, b);
    return gk_ew_dispatch<F, BOOL_OUT, NIN>(k, e, a, b);
}
#endif

#endif /* OPREG_CUDA_EW_CUH */
