/* Reductions: sum, mean, prod, max, min, max.dim, min.dim, amax, amin, norm, softmax,
 * log_softmax, and sum_to (plus gk_sum_dims / gk_sum_to for the backward kernels, which also sum
 * f16 and bf16, accumulating in double like f32). f32, f64, i64 as
 * on the CPU backend (plugins/cpu/cpu_reduce.c), with the same semantics: f32 sums
 * and products accumulate in double, i64 ones wrap; floating max/min propagate NaN
 * and report the first index of the extreme (the first NaN if any); mean of an empty
 * slice is NaN; softmax slices with a NaN (or all -inf) are NaN.
 *
 * A reduction splits the input's dims into kept dims (one output each) and reduced
 * dims; both sets are coalesced once on the host (red_plan). Kernels:
 *  - block per output: the threads of a block stride through the slice and combine
 *    in a shared-memory tree (no warp shuffles: portable to 64-wide wavefronts);
 *    when there are few outputs and long slices, each slice is cut into up to 64
 *    parts reduced by separate blocks, and a second kernel merges the parts in order;
 *  - thread per output for short slices.
 * Arg-max/min merges break ties towards the smaller index, so the result does not
 * depend on how the slice was cut. */
#include "gpu_common.cuh"
#include "../common/opc_reduce.h"

#include <math.h>
#include <type_traits>

namespace {

#define RED_MAX_OUT 2
#define RED_MAX_PARTS 64

enum red_kind { RK_SUM, RK_MEAN, RK_PROD, RK_MAX, RK_MIN, RK_NORM2, RK_NORM1, RK_NORMP, RK_NORMI };

/* d: floating accumulator (and f32/f64 values of max/min); i: i64 accumulator or
 * value; idx: arg index, -1 until an element was seen. */
struct red_acc {
    double d;
    int64_t i;
    int64_t idx;
};

struct red_args {
    gk_geom kg; /* kept dims; st[0] input, st[1] output 0, st[2] output 1 */
    gk_geom rg; /* reduced dims of one slice; st[0] input */
    int64_t n_out, n_red;
    double p, scale;
    const void *x;
    void *out0;
    int64_t *out1;
};

GK_DEV bool gt_nan(double a, double b) { return a > b || (a != a && b == b); }
GK_DEV bool lt_nan(double a, double b) { return a < b || (a != a && b == b); }

template <class T, red_kind K> struct red_op {
    static constexpr bool is_int = std::is_same<T, int64_t>::value || std::is_same<T, int32_t>::value;
    /* the values output: T, except that sum and prod of i32 give i64 (PyTorch's; the
     * YAML's `dtype: acc(T)`, opc_reduce_out_dtype) */
    typedef typename std::conditional<std::is_same<T, int32_t>::value && (K == RK_SUM || K == RK_PROD), int64_t,
                                      T>::type OT;

    static GK_DEV double to_d(T v) { return gk_to_d(v); }
    static GK_DEV T from_d(double d) { return gk_from_d<T>(d); }

    static GK_DEV red_acc init()
    {
        red_acc a;
        a.d = K == RK_PROD ? 1.0 : 0.0;
        a.i = K == RK_PROD ? 1 : 0;
        a.idx = -1;
        return a;
    }

    static GK_DEV void fold(red_acc &a, T v, int64_t ri, double p)
    {
        if constexpr (K == RK_SUM || K == RK_MEAN) {
            if constexpr (is_int) a.i = (int64_t)((uint64_t)a.i + (uint64_t)v);
            else a.d += to_d(v);
        } else if constexpr (K == RK_PROD) {
            if constexpr (is_int) a.i = (int64_t)((uint64_t)a.i * (uint64_t)v);
            else a.d *= to_d(v);
        } else if constexpr (K == RK_MAX || K == RK_MIN) {
            /* strict comparison: the first index wins ties within one thread's run */
            if constexpr (is_int) {
                if (a.idx < 0 || (K == RK_MAX ? v > a.i : v < a.i)) { a.i = v; a.idx = ri; }
            } else {
                const double x = to_d(v);
                if (a.idx < 0 || (K == RK_MAX ? gt_nan(x, a.d) : lt_nan(x, a.d))) { a.d = x; a.idx = ri; }
            }
        } else if constexpr (K == RK_NORM2) {
            a.d += to_d(v) * to_d(v);
        } else if constexpr (K == RK_NORM1) {
            a.d += fabs(to_d(v));
        } else if constexpr (K == RK_NORMP) {
            a.d += pow(fabs(to_d(v)), p);
        } else { /* RK_NORMI */
            const double x = fabs(to_d(v));
            if (gt_nan(x, a.d)) a.d = x;
        }
    }

    /* a = a (+) b. For arg-extremes, b wins when strictly better or equally good with
     * a smaller index: independent of the order partial results arrive in. */
    static GK_DEV void merge(red_acc &a, const red_acc &b)
    {
        if constexpr (K == RK_SUM || K == RK_MEAN) {
            if constexpr (is_int) a.i = (int64_t)((uint64_t)a.i + (uint64_t)b.i);
            else a.d += b.d;
        } else if constexpr (K == RK_PROD) {
            if constexpr (is_int) a.i = (int64_t)((uint64_t)a.i * (uint64_t)b.i);
            else a.d *= b.d;
        } else if constexpr (K == RK_MAX || K == RK_MIN) {
            if (b.idx < 0) return;
            if (a.idx < 0) { a = b; return; }
            bool b_better, a_better;
            if constexpr (is_int) {
                b_better = K == RK_MAX ? b.i > a.i : b.i < a.i;
                a_better = K == RK_MAX ? a.i > b.i : a.i < b.i;
            } else {
                b_better = K == RK_MAX ? gt_nan(b.d, a.d) : lt_nan(b.d, a.d);
                a_better = K == RK_MAX ? gt_nan(a.d, b.d) : lt_nan(a.d, b.d);
            }
            if (b_better || (!a_better && b.idx < a.idx)) a = b;
        } else if constexpr (K == RK_NORMI) {
            if (gt_nan(b.d, a.d)) a.d = b.d;
        } else {
            a.d += b.d;
        }
    }

    static GK_DEV void store(OT *o0, int64_t *o1, const red_acc &a, int64_t n, double p, double scale)
    {
        if constexpr (is_int) {
            *o0 = (OT)a.i;
        } else if constexpr (K == RK_MEAN) {
            *o0 = from_d(a.d / (double)n); /* 0/0 = NaN for an empty slice */
        } else if constexpr (K == RK_NORM2) {
            *o0 = from_d(sqrt(a.d));
        } else if constexpr (K == RK_NORMP) {
            *o0 = from_d(pow(a.d, 1.0 / p));
        } else if constexpr (K == RK_SUM) {
            *o0 = from_d(scale == 1.0 ? a.d : scale * a.d);
        } else {
            *o0 = from_d(a.d);
        }
        if (o1) *o1 = a.idx;
    }
};

/* Offset of element ri of a slice. */
GK_DEV int64_t slice_off(const gk_geom &rg, int64_t ri)
{
    if (rg.ndim == 1) return ri * rg.st[0][0];
    int64_t off[1];
    gk_offsets<1>(rg, ri, off);
    return off[0];
}

/* Folds elements lo, lo + step, ... < hi of the slice at x. */
template <class T, red_kind K>
GK_DEV void fold_range(red_acc &a, const T *x, const gk_geom &rg, int64_t lo, int64_t hi, int64_t step, double p)
{
    typedef red_op<T, K> op;
    if (rg.ndim <= 1) {
        const int64_t s = rg.ndim ? rg.st[0][0] : 0;
        for (int64_t r = lo; r < hi; r += step) op::fold(a, x[r * s], r, p);
    } else {
        for (int64_t r = lo; r < hi; r += step) op::fold(a, x[slice_off(rg, r)], r, p);
    }
}

/* One thread per output. */
template <class T, red_kind K>
__global__ void k_red_thread(red_args a)
{
    typedef red_op<T, K> op;
    GK_LOOP(o, a.n_out)
    {
        int64_t off[3];
        gk_offsets<3>(a.kg, o, off);
        red_acc acc = op::init();
        fold_range<T, K>(acc, (const T *)a.x + off[0], a.rg, 0, a.n_red, 1, a.p);
        op::store((typename op::OT *)a.out0 + off[1], a.out1 ? a.out1 + off[2] : nullptr, acc, a.n_red, a.p, a.scale);
    }
}

/* Block (o, q) reduces part q of output o's slice; with one part it stores the
 * result, else it writes the partial accumulator to parts[o * nparts + q]. */
template <class T, red_kind K>
__global__ void k_red_block(red_args a, red_acc *parts)
{
    typedef red_op<T, K> op;
    __shared__ red_acc sh[GK_THREADS];
    const int tid = threadIdx.x;
    const int64_t nparts = gridDim.y, q = blockIdx.y;
    const int64_t lo = a.n_red * q / nparts, hi = a.n_red * (q + 1) / nparts;
    for (int64_t o = blockIdx.x; o < a.n_out; o += gridDim.x) {
        int64_t off[3];
        gk_offsets<3>(a.kg, o, off);
        red_acc acc = op::init();
        fold_range<T, K>(acc, (const T *)a.x + off[0], a.rg, lo + tid, hi, blockDim.x, a.p);
        sh[tid] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) op::merge(sh[tid], sh[tid + s]);
            __syncthreads();
        }
        if (tid == 0) {
            if (nparts == 1) op::store((typename op::OT *)a.out0 + off[1], a.out1 ? a.out1 + off[2] : nullptr, sh[0], a.n_red, a.p, a.scale);
            else parts[o * nparts + q] = sh[0];
        }
        __syncthreads(); /* sh is reused by the next output */
    }
}

template <class T, red_kind K>
__global__ void k_red_finish(red_args a, const red_acc *parts, int64_t nparts)
{
    typedef red_op<T, K> op;
    GK_LOOP(o, a.n_out)
    {
        int64_t off[3];
        gk_offsets<3>(a.kg, o, off);
        red_acc acc = parts[o * nparts];
        for (int64_t q = 1; q < nparts; q++) op::merge(acc, parts[o * nparts + q]);
        op::store((typename op::OT *)a.out0 + off[1], a.out1 ? a.out1 + off[2] : nullptr, acc, a.n_red, a.p, a.scale);
    }
}

/* ------------------------------------------------------------------ plan */

/* Splits `in` into kept and reduced dims (bit d of mask = reduce dim d) and matches
 * the kept dims to each output, ignoring size-1 dims on both sides (so keepdim either
 * way is accepted). Coalesces both sets. */
int red_plan_make(const opr_kernel_call *c, const char *op, const opr_tensor_view *in, uint32_t mask, int nout, const opr_tensor_view *const *outs,
                  red_args *a)
{
    if (in->ndim > GK_MAXD)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: %d-d input exceeds %d dims", op, in->ndim, GK_MAXD);
    memset(a, 0, sizeof *a);
    int32_t kn = 0, rn = 0;
    int64_t kshape[GK_MAXD], kst[3][GK_MAXD], rshape[GK_MAXD], rst[1][GK_MAXD];
    a->n_out = 1;
    a->n_red = 1;
    for (int32_t d = 0; d < in->ndim; d++) {
        const int64_t s = in->shape[d];
        if (mask & (1u << d)) {
            a->n_red *= s;
            if (s != 1) { rshape[rn] = s; rst[0][rn++] = in->strides[d]; }
        } else {
            a->n_out *= s;
            if (s != 1) { kshape[kn] = s; kst[0][kn++] = in->strides[d]; }
        }
    }
    for (int j = 0; j < 2; j++)
        for (int32_t d = 0; d < kn; d++) kst[1 + j][d] = 0;
    for (int j = 0; j < nout; j++) {
        const opr_tensor_view *o = outs[j];
        int32_t k = 0;
        bool ok = o->ndim <= GK_MAXD;
        for (int32_t d = 0; ok && d < o->ndim; d++) {
            if (o->shape[d] == 1) continue;
            ok = k < kn && o->shape[d] == kshape[k];
            if (ok) kst[1 + j][k++] = o->strides[d];
        }
        if (!ok || k != kn)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: output %d has the wrong shape for this reduction", op, j);
        if (a->n_out && !o->data) return GK_FAIL(c, OPR_ERR_INVALID, "%s: output %d is not allocated", op, j);
    }
    /* largest stride first, so consecutive threads read neighbouring elements */
    for (int32_t i = 1; i < rn; i++)
        for (int32_t j = i; j > 0 && llabs(rst[0][j]) > llabs(rst[0][j - 1]); j--) {
            int64_t t = rst[0][j]; rst[0][j] = rst[0][j - 1]; rst[0][j - 1] = t;
            t = rshape[j]; rshape[j] = rshape[j - 1]; rshape[j - 1] = t;
        }
    const int64_t *kp[3] = {kst[0], kst[1], kst[2]};
    gk_geom_make(&a->kg, kn, kshape, 3, kp);
    const int64_t *rp[1] = {rst[0]};
    gk_geom_make(&a->rg, rn, rshape, 1, rp);
    a->x = in->data;
    a->out0 = outs[0]->data;
    a->out1 = nout > 1 ? (int64_t *)outs[1]->data : nullptr;
    a->scale = 1.0;
    return OPR_OK;
}

template <class T, red_kind K>
int red_launch(const gk_ctx *k, red_args &a)
{
    if (a.n_out == 0) return OPR_OK;
    if (a.n_red <= 16 || (a.n_out >= 4096 && a.n_red <= 64)) {
        gk_launch(k_red_thread<T, K>, gk_blocks(a.n_out), GK_THREADS, 0, k->stream, a);
        return gk_launched(k, "reduction kernel");
    }
    int64_t nparts = 1;
    if (a.n_out < 2 * (int64_t)k->sm_count && a.n_red >= 8192) {
        nparts = a.n_red / 4096;
        const int64_t want = (4 * (int64_t)k->sm_count + a.n_out - 1) / a.n_out;
        if (nparts > want) nparts = want;
        if (nparts > RED_MAX_PARTS) nparts = RED_MAX_PARTS;
        if (nparts < 1) nparts = 1;
    }
    const unsigned gx = (unsigned)(a.n_out < 65535 ? a.n_out : 65535);
    dim3 grid(gx, (unsigned)nparts);
    if (nparts == 1) {
        gk_launch(k_red_block<T, K>, grid, GK_THREADS, 0, k->stream, a, nullptr);
        return gk_launched(k, "reduction kernel");
    }
    gk_buf parts;
    int rc = parts.alloc(k, (size_t)(a.n_out * nparts) * sizeof(red_acc));
    if (rc) return rc;
    gk_launch(k_red_block<T, K>, grid, GK_THREADS, 0, k->stream, a, parts.as<red_acc>());
    if ((rc = gk_launched(k, "reduction kernel"))) return rc;
    gk_launch(k_red_finish<T, K>, gk_blocks(a.n_out), GK_THREADS, 0, k->stream, a, parts.as<red_acc>(), nparts);
    return gk_launched(k, "reduction merge kernel");
}

template <red_kind K>
int red_dispatch(const gk_ctx *k, opr_dtype dt, red_args &a)
{
    switch (dt) {
    case OPR_F32: return red_launch<float, K>(k, a);
    case OPR_F64: return red_launch<double, K>(k, a);
    case OPR_I64:
        if constexpr (K == RK_SUM || K == RK_PROD || K == RK_MAX || K == RK_MIN) return red_launch<int64_t, K>(k, a);
        else return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype i64", k->op, GPU_NAME);
    case OPR_I32:
        if constexpr (K == RK_SUM || K == RK_PROD || K == RK_MAX || K == RK_MIN) return red_launch<int32_t, K>(k, a);
        else return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype i32", k->op, GPU_NAME);
    case OPR_F16: /* sums and means only: sum, mean, and the gradients sum_to and the backward kernels reduce */
        if constexpr (K == RK_SUM || K == RK_MEAN) return red_launch<gpu_f16, K>(k, a);
        else return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype f16", k->op, GPU_NAME);
    case OPR_BF16:
        if constexpr (K == RK_SUM || K == RK_MEAN) return red_launch<gpu_bf16, K>(k, a);
        else return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype bf16", k->op, GPU_NAME);
    default:
        return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", k->op, GPU_NAME, gk_dtype_name(dt));
    }
}

int red_run(const gk_ctx *k, red_kind kind, opr_dtype dt, red_args &a)
{
    switch (kind) {
    case RK_SUM: return red_dispatch<RK_SUM>(k, dt, a);
    case RK_MEAN: return red_dispatch<RK_MEAN>(k, dt, a);
    case RK_PROD: return red_dispatch<RK_PROD>(k, dt, a);
    case RK_MAX: return red_dispatch<RK_MAX>(k, dt, a);
    case RK_MIN: return red_dispatch<RK_MIN>(k, dt, a);
    case RK_NORM2: return red_dispatch<RK_NORM2>(k, dt, a);
    case RK_NORM1: return red_dispatch<RK_NORM1>(k, dt, a);
    case RK_NORMP: return red_dispatch<RK_NORMP>(k, dt, a);
    default: return red_dispatch<RK_NORMI>(k, dt, a);
    }
}

/* ------------------------------------------------------------------ kernels */

/* Selects the device, then checks arity, the input and the outputs (opc_reduce_begin). */
int red_begin(const opr_kernel_call *c, const char *op, int nargs, int nout, uint32_t dtypes, gk_ctx *k,
              const opr_tensor_view **in)
{
    int rc = gk_begin(c, op, k);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    rc = opc_reduce_begin(c, op, nargs, nout, dtypes, GPU_NAME, in, why, sizeof why);
    return rc ? GK_FAIL(c, rc, "%s", why) : OPR_OK;
}

/* Wraps a dim argument (opc_reduce_dim). */
int red_wrap(const opr_kernel_call *c, const char *op, int64_t d, int32_t ndim, int32_t *out)
{
    char why[OPC_WHY_SIZE];
    return opc_reduce_dim(op, d, ndim, out, why, sizeof why) ? OPR_OK : GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

/* The dim argument ai as a mask of reduced dims (opc_reduce_dim_mask). */
int red_dim_mask(const opr_kernel_call *c, int ai, const char *op, int32_t ndim, uint32_t *mask)
{
    char why[OPC_WHY_SIZE];
    if (!opc_reduce_dim_mask(c, ai, op, ndim, mask, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

int red_go(const gk_ctx *k, const opr_kernel_call *c, const char *op, const opr_tensor_view *in, uint32_t mask,
           int nout, red_kind kind, double p)
{
    red_args a;
    int rc = red_plan_make(c, op, in, mask, nout, c->outputs, &a);
    if (rc) return rc;
    a.p = p;
    return red_run(k, kind, in->dtype, a);
}

const uint32_t NUM = GK_NUMERIC | GK_I32, FL = GK_FLOATS;

int sum_like(const opr_kernel_call *c, const char *op, red_kind kind, uint32_t dtypes)
{
    gk_ctx k;
    const opr_tensor_view *in;
    uint32_t mask;
    int rc = red_begin(c, op, 3, 1, dtypes, &k, &in);
    if (!rc) rc = red_dim_mask(c, 1, op, in->ndim, &mask);
    return rc ? rc : red_go(&k, c, op, in, mask, 1, kind, 0);
}
int k_sum(const opr_kernel_call *c) { return sum_like(c, "sum", RK_SUM, NUM | GK_HALVES); }
int k_mean(const opr_kernel_call *c) { return sum_like(c, "mean", RK_MEAN, FL | GK_HALVES); }
int k_prod(const opr_kernel_call *c) { return sum_like(c, "prod", RK_PROD, NUM); }

int extreme_all(const opr_kernel_call *c, const char *op, red_kind kind)
{
    gk_ctx k;
    const opr_tensor_view *in;
    int rc = red_begin(c, op, 1, 1, NUM, &k, &in);
    if (rc) return rc;
    if (in->numel == 0) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected a non-empty tensor", op);
    return red_go(&k, c, op, in, ~0u, 1, kind, 0);
}
int k_max(const opr_kernel_call *c) { return extreme_all(c, "max", RK_MAX); }
int k_min(const opr_kernel_call *c) { return extreme_all(c, "min", RK_MIN); }

int extreme_dim(const opr_kernel_call *c, const char *op, red_kind kind)
{
    gk_ctx k;
    const opr_tensor_view *in;
    int32_t d;
    int rc = red_begin(c, op, 3, 2, NUM, &k, &in);
    if (!rc) rc = red_wrap(c, op, gk_arg_i(c, 1), in->ndim, &d);
    if (rc) return rc;
    if (in->ndim > 0 && in->shape[d] == 0) return GK_FAIL(c, OPR_ERR_INVALID, "%s: dim %d has size 0", op, d);
    return red_go(&k, c, op, in, in->ndim > 0 ? 1u << d : 0u, 2, kind, 0);
}
int k_max_dim(const opr_kernel_call *c) { return extreme_dim(c, "max.dim", RK_MAX); }
int k_min_dim(const opr_kernel_call *c) { return extreme_dim(c, "min.dim", RK_MIN); }

/* amax/amin(self, int[1] dim, keepdim): max.dim's fold over any set of dims, with no
 * index output (the index it tracks on the way costs nothing next to the reads). */
int extreme_dims(const opr_kernel_call *c, const char *op, red_kind kind)
{
    gk_ctx k;
    const opr_tensor_view *in;
    uint32_t mask;
    int rc = red_begin(c, op, 3, 1, NUM, &k, &in);
    if (!rc) rc = red_dim_mask(c, 1, op, in->ndim, &mask);
    if (rc) return rc;
    for (int32_t d = 0; d < in->ndim; d++)
        if ((mask & (1u << d)) && in->shape[d] == 0)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: dim %d has size 0 (an empty slice has no extremum)", op, d);
    return red_go(&k, c, op, in, mask, 1, kind, 0);
}
int k_amax(const opr_kernel_call *c) { return extreme_dims(c, "amax", RK_MAX); }
int k_amin(const opr_kernel_call *c) { return extreme_dims(c, "amin", RK_MIN); }

int k_norm(const opr_kernel_call *c)
{
    if (c->nargs < 2) return GK_FAIL(c, OPR_ERR_INVALID, "norm: expected 2 arguments");
    const double p = gk_arg_d(c, 1);
    if (!(p > 0)) return GK_FAIL(c, OPR_ERR_INVALID, "norm: p must be > 0, got %g", p);
    const red_kind kind = p == 2 ? RK_NORM2 : p == 1 ? RK_NORM1 : isinf(p) ? RK_NORMI : RK_NORMP;
    gk_ctx k;
    const opr_tensor_view *in;
    int rc = red_begin(c, "norm", 2, 1, FL, &k, &in);
    return rc ? rc : red_go(&k, c, "norm", in, ~0u, 1, kind, p);
}

/* ------------------------------------------------------------------ softmax */

/* Block tree reductions over blockDim.x (a power of two) values in sh. */
__device__ double block_max_nan(double *sh, double v)
{
    const int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s && gt_nan(sh[tid + s], sh[tid])) sh[tid] = sh[tid + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

__device__ double block_sum(double *sh, double v)
{
    const int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

GK_DEV float sm_exp(float x) { return expf(x); }
GK_DEV double sm_exp(double x) { return exp(x); }

/* One block per slice: max, sum of exp (in double), then the outputs, as the CPU
 * kernel computes them (exp in T, one reciprocal). */
template <class T, bool LOG>
__global__ void k_softmax(int64_t nslice, gk_geom kg, int64_t len, int64_t sx, int64_t so, const T *x, T *o)
{
    __shared__ double sh[GK_THREADS];
    const int tid = threadIdx.x;
    for (int64_t s = blockIdx.x; s < nslice; s += gridDim.x) {
        int64_t off[2];
        gk_offsets<2>(kg, s, off);
        const T *xs = x + off[0];
        T *os = o + off[1];
        double m = -INFINITY;
        for (int64_t j = tid; j < len; j += blockDim.x) {
            const double v = (double)xs[j * sx];
            if (gt_nan(v, m)) m = v;
        }
        const T mt = (T)block_max_nan(sh, m);
        double sum = 0;
        for (int64_t j = tid; j < len; j += blockDim.x) sum += (double)sm_exp((T)(xs[j * sx] - mt));
        sum = block_sum(sh, sum);
        if (LOG) {
            const T lse = (T)log(sum);
            for (int64_t j = tid; j < len; j += blockDim.x) os[j * so] = xs[j * sx] - mt - lse;
        } else {
            const T inv = (T)(1 / sum);
            for (int64_t j = tid; j < len; j += blockDim.x) os[j * so] = sm_exp((T)(xs[j * sx] - mt)) * inv;
        }
    }
}

int softmax_like(const opr_kernel_call *c, const char *op, bool log_)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *in, *out;
    int32_t dim;
    char why[OPC_WHY_SIZE];
    if ((rc = opc_softmax_begin(c, op, FL, GPU_NAME, &in, &out, &dim, why, sizeof why))) return GK_FAIL(c, rc, "%s", why);
    if (in->numel == 0) return OPR_OK;
    const int64_t len = in->ndim ? in->shape[dim] : 1;
    const int64_t sx = in->ndim ? in->strides[dim] : 0, so = in->ndim ? out->strides[dim] : 0;
    int64_t shape[GK_MAXD], st[2][GK_MAXD];
    int32_t nd = 0;
    for (int32_t d = 0; d < in->ndim; d++) {
        if (d == dim) continue;
        shape[nd] = in->shape[d];
        st[0][nd] = in->strides[d];
        st[1][nd++] = out->strides[d];
    }
    gk_geom kg;
    const int64_t *sp[2] = {st[0], st[1]};
    gk_geom_make(&kg, nd, shape, 2, sp);
    const int64_t nslice = in->numel / len;
    const int threads = len <= 64 ? 64 : len <= 128 ? 128 : GK_THREADS;
    const unsigned blocks = (unsigned)(nslice < 65535 ? nslice : 65535);
    if (in->dtype == OPR_F32) {
        if (log_) gk_launch(k_softmax<float, true>, blocks, threads, 0, k.stream, nslice, kg, len, sx, so, (const float *)in->data, (float *)out->data);
        else gk_launch(k_softmax<float, false>, blocks, threads, 0, k.stream, nslice, kg, len, sx, so, (const float *)in->data, (float *)out->data);
    } else {
        if (log_) gk_launch(k_softmax<double, true>, blocks, threads, 0, k.stream, nslice, kg, len, sx, so, (const double *)in->data, (double *)out->data);
        else gk_launch(k_softmax<double, false>, blocks, threads, 0, k.stream, nslice, kg, len, sx, so, (const double *)in->data, (double *)out->data);
    }
    return gk_launched(&k, "softmax kernel");
}
int k_softmax_op(const opr_kernel_call *c) { return softmax_like(c, "softmax", false); }
int k_log_softmax_op(const opr_kernel_call *c) { return softmax_like(c, "log_softmax", true); }

/* ------------------------------------------------------------------ sum_to */

int k_sum_to(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "sum_to", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "sum_to: self is not a tensor");
    if (!((FL | GK_HALVES) & GK_BIT(x->dtype)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "sum_to: no %s kernel for dtype %s", GPU_NAME, gk_dtype_name(x->dtype));
    if (c->outputs[0]->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "sum_to: output dtype differs from self's");
    return gk_sum_to(&k, x, c->outputs[0], 1.0);
}

} // namespace

int gk_sum_dims(const gk_ctx *k, const opr_tensor_view *in, uint32_t mask, const opr_tensor_view *out, double scale)
{
    red_args a;
    int rc = red_plan_make(k->call, k->op, in, mask, 1, &out, &a);
    if (rc) return rc;
    a.scale = scale;
    return red_run(k, RK_SUM, in->dtype, a);
}

int gk_sum_to(const gk_ctx *k, const opr_tensor_view *g, const opr_tensor_view *out, double scale)
{
    int64_t ost[GK_MAXD], shape[GK_MAXD];
    if (g->ndim > GK_MAXD || !opc_bcast_strides(out, g->ndim, g->shape, ost))
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: a tensor of %d dims cannot be summed to %d dims of these sizes", k->op,
                       g->ndim, out->ndim);
    uint32_t mask = 0;
    for (int32_t d = 0; d < g->ndim; d++) {
        const bool red = ost[d] == 0 && g->shape[d] != 1;
        if (red) mask |= 1u << d;
        shape[d] = red ? 1 : g->shape[d];
    }
    /* out read at g's rank: the kept dims of g in order, with out's strides */
    opr_tensor_view ov = *out;
    ov.ndim = g->ndim;
    ov.shape = shape;
    ov.strides = ost;
    return gk_sum_dims(k, g, mask, &ov, scale);
}

int gk_register_reduce(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t mask;
        opr_kernel_fn fn;
    } ops[] = {
        {"sum", NUM | GK_HALVES, k_sum}, {"mean", FL | GK_HALVES, k_mean},         {"prod", NUM, k_prod},
        {"max", NUM, k_max},         {"min", NUM, k_min},          {"max.dim", NUM, k_max_dim},
        {"min.dim", NUM, k_min_dim}, {"amax", NUM, k_amax},        {"amin", NUM, k_amin},
        {"norm", FL, k_norm},        {"softmax", FL, k_softmax_op},
        {"log_softmax", FL, k_log_softmax_op},                     {"sum_to", FL | GK_HALVES, k_sum_to},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int rc = gk_register(self, ops[i].op, ops[i].mask, ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
