/* Elementwise CPU kernels: arithmetic, where, lerp, addcmul, comparisons and unary math.
 *
 * The loop templates and the driver are shared with cpu_pointwise.c through cpu_ew.h.
 * Every op is split in two layers:
 *  - a *loop*: a function that applies the op to n elements of 1-d strided operands.
 *    Loops are stamped out per dtype by the EW_*_LOOP macros, so each op is written once
 *    as an expression over `x` (and `y`, `c`) plus the scalar arguments A and B.
 *  - the *driver* (ew_apply): turns n-d broadcast operands into calls of the loop. It
 *    merges dimensions the operands traverse alike, so a transposed or broadcast input
 *    still runs long inner loops, and splits large outputs into blocks for OpenMP.
 *
 * Inputs arrive with their own shapes (not expanded) and arbitrary strides; the output is
 * preallocated by the host with the broadcast shape. The common case (every operand
 * contiguous with the output's element count) goes straight to one loop call with no
 * set-up, because dispatch-overhead benchmarks run these ops on tiny tensors. */
#include "cpu_common.h"
#include "cpu_ew.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <tgmath.h> /* exp(x) etc. pick the float or double version from x's type */

#define EW_VMATH_FLOAT(op, CALL_F32, CALL_F64)         \
    EW_VMATH_LOOP(op##_f32, float, f32, CALL_F32)      \
    EW_VMATH_LOOP(op##_f64, double, f64, CALL_F64)

/* pow with the exponents whose result needs no pow at all: x^0 = 1 (NaN included, as
 * in C and PyTorch) and x^1 = x. Norm gradients hit x^0 (p = 2). */
#define EW_VPOW(name, T, VPOW)                                                             \
    static inline void name(int64_t n, const T *x, T e, T *y)                              \
    {                                                                                      \
        if (e == 0) for (int64_t i = 0; i < n; i++) y[i] = 1;                              \
        else if (e == 1) for (int64_t i = 0; i < n; i++) y[i] = x[i];                      \
        else VPOW(n, x, e, y);                                                             \
    }
EW_VPOW(ew_vpow_f32, float, cpu_vm.pow_f32)
EW_VPOW(ew_vpow_f64, double, cpu_vm.pow_f64)

/* ------------------------------------------------------------------ the loops */

/* add/sub: self + alpha * other. A == 1 costs one exact multiply, not worth a branch. */
EW_BINARY_FLOAT(add, x + A * y)
EW_BINARY_LOOP(add_i64, int64_t, int64_t, i64, WADD(x, WMUL(A, y)))
EW_BINARY_LOOP(add_i32, int32_t, int32_t, i32, WADD32(x, WMUL32(A, y)))
EW_BINARY_FLOAT(sub, x - A * y)
EW_BINARY_LOOP(sub_i64, int64_t, int64_t, i64, WSUB(x, WMUL(A, y)))
EW_BINARY_LOOP(sub_i32, int32_t, int32_t, i32, WSUB32(x, WMUL32(A, y)))
EW_BINARY_FLOAT(mul, x * y)
EW_BINARY_LOOP(mul_i64, int64_t, int64_t, i64, WMUL(x, y))
EW_BINARY_LOOP(mul_i32, int32_t, int32_t, i32, WMUL32(x, y))
EW_BINARY_FLOAT(div, x / y)

/* lerp(self, end, weight) = self + weight * (end - self); addcmul = self + A * t1 * t2 */
EW_TERNARY_LOOP(lerp_f32, float, x + z * (y - x))
EW_TERNARY_LOOP(lerp_f64, double, x + z * (y - x))
EW_TERNARY_LOOP(addcmul_f32, float, x + A * y * z)
EW_TERNARY_LOOP(addcmul_f64, double, x + A * y * z)

EW_WHERE_LOOP(where_f32, float)
EW_WHERE_LOOP(where_f64, double)
EW_WHERE_LOOP(where_i64, int64_t)
EW_WHERE_LOOP(where_i32, int32_t)

/* IEEE comparisons: anything against NaN is false except ne. */
EW_COMPARE(eq, x == y)
EW_BINARY_LOOP(eq_b8, uint8_t, uint8_t, b8, (x != 0) == (y != 0))
EW_COMPARE(ne, x != y)
EW_BINARY_LOOP(ne_b8, uint8_t, uint8_t, b8, (x != 0) != (y != 0))
EW_COMPARE(gt, x > y)
EW_COMPARE(lt, x < y)
EW_COMPARE(ge, x >= y)
EW_COMPARE(le, x <= y)

EW_UNARY_FLOAT(neg, -x)
EW_UNARY_LOOP(neg_i64, int64_t, int64_t, i64, WNEG(x))
EW_UNARY_LOOP(neg_i32, int32_t, int32_t, i32, WNEG32(x))
/* fabs, not x < 0 ? -x : x, so that abs(-0.0) is +0.0. */
EW_UNARY_FLOAT(abs, fabs(x))
EW_UNARY_LOOP(abs_i64, int64_t, int64_t, i64, x < 0 ? WNEG(x) : x)
EW_UNARY_LOOP(abs_i32, int32_t, int32_t, i32, x < 0 ? WNEG32(x) : x)
EW_VMATH_FLOAT(exp, cpu_vm.exp_f32(N, X, Y), cpu_vm.exp_f64(N, X, Y))
EW_VMATH_FLOAT(log, cpu_vm.log_f32(N, X, Y), cpu_vm.log_f64(N, X, Y))
EW_VMATH_FLOAT(sqrt, cpu_vm.sqrt_f32(N, X, Y), cpu_vm.sqrt_f64(N, X, Y))
/* pow: A is the exponent. Squares are common enough (norms, losses) for their own loop;
 * exponent 0.5 reuses sqrt, like PyTorch. */
EW_VMATH_FLOAT(pow, ew_vpow_f32(N, X, A, Y), ew_vpow_f64(N, X, A, Y))
EW_UNARY_FLOAT(square, x * x)
/* Written so that NaN propagates: NaN < 0 is false, so NaN comes out unchanged. */
EW_VMATH_FLOAT(relu, cpu_vm.relu_f32(N, X, Y), cpu_vm.relu_f64(N, X, Y))
EW_UNARY_LOOP(relu_i64, int64_t, int64_t, i64, x < 0 ? 0 : x)
EW_UNARY_LOOP(relu_i32, int32_t, int32_t, i32, x < 0 ? 0 : x)
/* 1 / (1 + e^-x): for very negative x, e^-x is inf and the result a correct 0. */
EW_VMATH_FLOAT(sigmoid, cpu_vm.sigmoid_f32(N, X, Y), cpu_vm.sigmoid_f64(N, X, Y))
EW_VMATH_FLOAT(tanh, cpu_vm.tanh_f32(N, X, Y), cpu_vm.tanh_f64(N, X, Y))
/* clamp: A = min, B = max; a missing bound is -inf/+inf (i64: INT64_MIN/MAX). As in
 * PyTorch, NaN propagates and min > max gives max everywhere. */
EW_UNARY_FLOAT(clamp, (x < A ? A : x) > B ? B : (x < A ? A : x))
EW_UNARY_LOOP(clamp_i64, int64_t, int64_t, i64, (x < A ? A : x) > B ? B : (x < A ? A : x))
EW_UNARY_LOOP(clamp_i32, int32_t, int32_t, i32, (x < A ? A : x) > B ? B : (x < A ? A : x))

static const ew_table add_tab = EW_TABLE_FI(add), sub_tab = EW_TABLE_FI(sub),
                      mul_tab = EW_TABLE_FI(mul), div_tab = EW_TABLE_F(div),
                      where_tab = EW_TABLE_FI(where), lerp_tab = EW_TABLE_F(lerp),
                      addcmul_tab = EW_TABLE_F(addcmul);
static const ew_table eq_tab = {[OPR_F32] = eq_f32, [OPR_F64] = eq_f64, [OPR_I64] = eq_i64, [OPR_I32] = eq_i32,
                              [OPR_BOOL] = eq_b8},
                      ne_tab = {[OPR_F32] = ne_f32, [OPR_F64] = ne_f64, [OPR_I64] = ne_i64, [OPR_I32] = ne_i32,
                              [OPR_BOOL] = ne_b8},
                      gt_tab = EW_TABLE_FI(gt), lt_tab = EW_TABLE_FI(lt),
                      ge_tab = EW_TABLE_FI(ge), le_tab = EW_TABLE_FI(le);
static const ew_table neg_tab = EW_TABLE_FI(neg), abs_tab = EW_TABLE_FI(abs),
                      exp_tab = EW_TABLE_F(exp), log_tab = EW_TABLE_F(log),
                      sqrt_tab = EW_TABLE_F(sqrt), pow_tab = EW_TABLE_F(pow),
                      square_tab = EW_TABLE_F(square), relu_tab = EW_TABLE_FI(relu),
                      sigmoid_tab = EW_TABLE_F(sigmoid), tanh_tab = EW_TABLE_F(tanh),
                      clamp_tab = EW_TABLE_FI(clamp);

uint32_t ew_mask(const ew_table t)
{
    uint32_t m = 0;
    for (int d = 0; d < OPR_DTYPE_COUNT; d++)
        if (t[d]) m |= OPR_DTYPE_BIT(d);
    return m;
}

/* ------------------------------------------------------------------ driver */

/* A coalesced iteration space shared by the operands of one call. */
typedef struct ew_space {
    int32_t ndim, nops;
    int64_t shape[OPR_MAX_DIMS];
    int64_t st[4][OPR_MAX_DIMS]; /* element strides, operand 0 = output */
    char *base[4];
    size_t esz[4];
} ew_space;

/* Runs `fn` over the row-major output positions [start, end): a walker over the outer
 * dims, and one loop call per stretch of the innermost dim. */
static void ew_range(const ew_space *sp, ew_loop_fn fn, const ew_params *p, int64_t start,
                     int64_t end)
{
    const int32_t in = sp->ndim - 1; /* innermost dim */
    const int64_t len = sp->shape[in];
    cpu_walk w;
    w.ndim = in;
    w.nops = sp->nops;
    w.shape = sp->shape;
    int64_t step[4];
    for (int k = 0; k < sp->nops; k++) {
        for (int32_t d = 0; d < in; d++) w.strides[k][d] = sp->st[k][d];
        step[k] = sp->st[k][in];
    }
    cpu_walk_seek(&w, start / len);
    int64_t i = start, j = start % len; /* j: position in the innermost dim */
    while (i < end) {
        const int64_t seg = len - j < end - i ? len - j : end - i;
        char *ptr[4];
        for (int k = 0; k < sp->nops; k++)
            ptr[k] = sp->base[k] + (w.off[k] + j * step[k]) * (int64_t)sp->esz[k];
        fn(seg, ptr, step, p);
        i += seg;
        j = 0;
        cpu_walk_next(&w);
    }
}

/* Contiguous operands, parallel: each thread runs the loop once over its own range of
 * whole blocks (a loop over cpu_vmath.h sees the whole range, and streams its stores
 * when that range is large). */
static void ew_contig_par(int64_t n, int nops, char *const *base, const size_t *esz,
                          ew_loop_fn fn, const ew_params *p)
{
    static const int64_t unit[4] = {1, 1, 1, 1};
    const int64_t nblk = (n + EW_BLOCK - 1) / EW_BLOCK;
#pragma omp parallel
    {
        int64_t b0, b1;
        cpu_thread_range(nblk, &b0, &b1);
        const int64_t lo = b0 * EW_BLOCK, hi = b1 * EW_BLOCK < n ? b1 * EW_BLOCK : n;
        char *ptr[4];
        for (int k = 0; k < nops; k++) ptr[k] = base[k] + lo * (int64_t)esz[k];
        if (hi > lo) fn(hi - lo, ptr, unit, p);
    }
}

/* Computes out = op(in[0], ..., in[nin-1]) with broadcasting. The caller has checked
 * dtypes; this checks shapes (an input must broadcast to the output). */
int ew_apply(const opr_kernel_call *c, const char *op, const opr_tensor_view *out, int nin,
             const opr_tensor_view *const *in, ew_loop_fn fn, const ew_params *p)
{
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK; /* empty: data pointers must not be touched */
    if (!out->data) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: output is not allocated", op);
    const int nops = nin + 1;
    char *base[4];
    size_t esz[4];
    base[0] = (char *)out->data;
    esz[0] = cpu_dtype_size(out->dtype);
    bool contig = cpu_is_contiguous(out);
    for (int k = 0; k < nin; k++) {
        base[k + 1] = (char *)in[k]->data;
        esz[k + 1] = cpu_dtype_size(in[k]->dtype);
        /* Same element count and broadcastable means the same row-major order. */
        contig = contig && in[k]->numel == n && cpu_is_contiguous(in[k]);
    }
    if (contig) {
        static const int64_t unit[4] = {1, 1, 1, 1};
        if (n < CPU_PAR_THRESHOLD) fn(n, base, unit, p); /* the tiny-tensor hot path */
        else ew_contig_par(n, nops, base, esz, fn, p);
        return OPR_OK;
    }

    if (out->ndim > OPR_MAX_DIMS)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %d-d output exceeds %d dims", op, out->ndim,
                        OPR_MAX_DIMS);
    ew_space sp;
    sp.ndim = out->ndim;
    sp.nops = nops;
    for (int32_t d = 0; d < out->ndim; d++) {
        sp.shape[d] = out->shape[d];
        sp.st[0][d] = out->strides[d];
    }
    for (int k = 0; k < nin; k++)
        if (!opc_bcast_strides(in[k], out->ndim, out->shape, sp.st[k + 1]))
            return CPU_FAIL(c, OPR_ERR_INVALID,
                            "%s: input %d (%d-d) does not broadcast to the %d-d output", op,
                            k, in[k]->ndim, out->ndim);
    sp.ndim = cpu_coalesce(sp.ndim, sp.shape, nops, sp.st);
    for (int k = 0; k < nops; k++) {
        sp.base[k] = base[k];
        sp.esz[k] = esz[k];
    }

    if (n < CPU_PAR_THRESHOLD) {
        ew_range(&sp, fn, p, 0, n);
    } else {
        const int64_t nblk = (n + EW_BLOCK - 1) / EW_BLOCK;
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nblk; b++) {
            const int64_t lo = b * EW_BLOCK;
            ew_range(&sp, fn, p, lo, lo + EW_BLOCK < n ? lo + EW_BLOCK : n);
        }
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ kernels */

/* Checks arity, the dtype of each input and of the output, and picks the loop. The
 * tensor inputs are args[0..nin), all of the common dtype T (where passes a call whose
 * args start after its bool condition). */
static int ew_prepare(const opr_kernel_call *c, const char *op, int nargs, int nin,
                      const ew_table table, bool bool_out, ew_loop_fn *fn,
                      const opr_tensor_view **in)
{
    if (c->nargs < nargs || c->nout < 1 || nin < 1 || nin > 3)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected %d arguments and 1 output, got %d and %d",
                        op, nargs, c->nargs, c->nout);
    for (int k = 0; k < nin; k++)
        if (!(in[k] = cpu_arg_t(c, k)))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: argument %d is not a tensor", op, k);
    const opr_dtype t = in[0]->dtype;
    for (int k = 1; k < nin; k++)
        if (in[k]->dtype != t)
            return CPU_FAIL(c, OPR_ERR_INVALID,
                            "%s: dtype mismatch: argument 0 is %s, argument %d is %s", op,
                            cpu_dtype_name(t), k, cpu_dtype_name(in[k]->dtype));
    if ((unsigned)t >= OPR_DTYPE_COUNT || !(*fn = table[t]))
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s", op,
                        cpu_dtype_name(t));
    const opr_dtype want = bool_out ? OPR_BOOL : t;
    if (c->outputs[0]->dtype != want)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: output dtype is %s, expected %s", op,
                        cpu_dtype_name(c->outputs[0]->dtype), cpu_dtype_name(want));
    return OPR_OK;
}

int ew_run(const opr_kernel_call *c, const char *op, int nargs, int nin, const ew_table table, bool bool_out,
           const ew_params *p)
{
    const opr_tensor_view *in[3] = {NULL, NULL, NULL};
    ew_loop_fn fn;
    int rc = ew_prepare(c, op, nargs, nin, table, bool_out, &fn, in);
    return rc ? rc : ew_apply(c, op, c->outputs[0], nin, in, fn, p);
}

const ew_params ew_none = {0, 0};

/* Ops with no scalar arguments: one line each. */
#define EW_KERNEL(op, nargs, nin, bool_out)                                \
    static int k_##op(const opr_kernel_call *c)                            \
    {                                                                      \
        return ew_run(c, #op, nargs, nin, op##_tab, bool_out, &ew_none);   \
    }

EW_KERNEL(mul, 2, 2, false)
EW_KERNEL(lerp, 3, 3, false)
EW_KERNEL(div, 2, 2, false)
EW_KERNEL(eq, 2, 2, true)
EW_KERNEL(ne, 2, 2, true)
EW_KERNEL(gt, 2, 2, true)
EW_KERNEL(lt, 2, 2, true)
EW_KERNEL(ge, 2, 2, true)
EW_KERNEL(le, 2, 2, true)
EW_KERNEL(neg, 1, 1, false)
EW_KERNEL(abs, 1, 1, false)
EW_KERNEL(exp, 1, 1, false)
EW_KERNEL(log, 1, 1, false)
EW_KERNEL(sqrt, 1, 1, false)
EW_KERNEL(relu, 1, 1, false)
EW_KERNEL(sigmoid, 1, 1, false)
EW_KERNEL(tanh, 1, 1, false)

/* add/sub(self, other, alpha). PyTorch refuses a fractional alpha for integer tensors
 * rather than silently truncating it; so do we. */
static int ew_add_sub(const opr_kernel_call *c, const char *op, const ew_table table)
{
    if (c->nargs < 3) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 arguments", op);
    const ew_params p = {cpu_arg_d(c, 2), 0};
    const opr_tensor_view *self = cpu_arg_t(c, 0);
    if (self && (self->dtype == OPR_I64 || self->dtype == OPR_I32) && p.a != floor(p.a))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: alpha must be an integer for %s tensors, got %g",
                        op, cpu_dtype_name(self->dtype), p.a);
    return ew_run(c, op, 3, 2, table, false, &p);
}
static int k_add(const opr_kernel_call *c) { return ew_add_sub(c, "add", add_tab); }
static int k_sub(const opr_kernel_call *c) { return ew_add_sub(c, "sub", sub_tab); }

/* where(condition, self, other): the condition is bool and broadcasts like the values;
 * T is the dtype of self and other. */
static int k_where(const opr_kernel_call *c)
{
    if (c->nargs < 3 || c->nout < 1)
        return CPU_FAIL(c, OPR_ERR_INVALID, "where: expected 3 arguments and 1 output");
    const opr_tensor_view *cond = cpu_arg_t(c, 0);
    if (!cond || cond->dtype != OPR_BOOL)
        return CPU_FAIL(c, OPR_ERR_INVALID, "where: condition must be a bool tensor");
    /* Check self/other as if they were the arguments of a binary op. */
    opr_kernel_call sub = *c;
    sub.args = c->args + 1;
    sub.nargs = 2;
    const opr_tensor_view *in[3];
    ew_loop_fn fn;
    int rc = ew_prepare(&sub, "where", 2, 2, where_tab, false, &fn, in + 1);
    if (rc) return rc;
    in[0] = cond;
    return ew_apply(c, "where", c->outputs[0], 3, in, fn, &ew_none);
}

/* addcmul(self, tensor1, tensor2, value) */
static int k_addcmul(const opr_kernel_call *c)
{
    if (c->nargs < 4) return CPU_FAIL(c, OPR_ERR_INVALID, "addcmul: expected 4 arguments");
    const ew_params p = {cpu_arg_d(c, 3), 0};
    return ew_run(c, "addcmul", 4, 3, addcmul_tab, false, &p);
}

/* pow(self, exponent) */
static int k_pow(const opr_kernel_call *c)
{
    if (c->nargs < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "pow: expected 2 arguments");
    const ew_params p = {cpu_arg_d(c, 1), 0};
    const ew_table *t = p.a == 2 ? &square_tab : p.a == 0.5 ? &sqrt_tab : &pow_tab;
    return ew_run(c, "pow", 2, 1, *t, false, &p);
}

/* Bounds for clamp. An integer tensor with a fractional bound keeps the integers inside
 * [min, max]: the min rounds up and the max down. */
static double ew_lower(const opr_kernel_call *c, int i, bool is_int)
{
    if (!cpu_arg_given(c, i)) return -INFINITY;
    return is_int ? ceil(cpu_arg_d(c, i)) : cpu_arg_d(c, i);
}
static double ew_upper(const opr_kernel_call *c, int i, bool is_int)
{
    if (!cpu_arg_given(c, i)) return INFINITY;
    return is_int ? floor(cpu_arg_d(c, i)) : cpu_arg_d(c, i);
}

/* clamp(self, min?, max?) and clamp_min(self, min) share one loop. */
static int k_clamp(const opr_kernel_call *c)
{
    if (c->nargs < 3) return CPU_FAIL(c, OPR_ERR_INVALID, "clamp: expected 3 arguments");
    const opr_tensor_view *self = cpu_arg_t(c, 0);
    const bool is_int = self && (self->dtype == OPR_I64 || self->dtype == OPR_I32);
    const ew_params p = {ew_lower(c, 1, is_int), ew_upper(c, 2, is_int)};
    return ew_run(c, "clamp", 3, 1, clamp_tab, false, &p);
}
static int k_clamp_min(const opr_kernel_call *c)
{
    if (c->nargs < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "clamp_min: expected 2 arguments");
    const opr_tensor_view *self = cpu_arg_t(c, 0);
    const bool is_int = self && (self->dtype == OPR_I64 || self->dtype == OPR_I32);
    const ew_params p = {ew_lower(c, 1, is_int), INFINITY};
    return ew_run(c, "clamp_min", 2, 1, clamp_tab, false, &p);
}

/* ------------------------------------------------------------------ fused backward entries */

/* sqrt's backward, grad / (2 result), in one pass where the formula makes two; bit for
 * bit the formula's result (y + y is y * 2 exactly). args: grad, self (not saved),
 * result. */
EW_BINARY_FLOAT(sqrt_backward, x / (y + y))
static const ew_table sqrt_backward_tab = EW_TABLE_F(sqrt_backward);

static int k_sqrt_backward(const opr_kernel_call *c)
{
    if (c->nargs < 3 || c->nout < 1) return CPU_FAIL(c, OPR_ERR_INVALID, "sqrt_backward: expected 3 arguments and 1 output");
    const opr_tensor_view *in[2] = {cpu_arg_t(c, 0), cpu_arg_t(c, 2)};
    if (!in[0] || !in[1]) return CPU_FAIL(c, OPR_ERR_INVALID, "sqrt_backward: the gradient and the result must be given");
    const opr_dtype t = c->outputs[0]->dtype;
    ew_loop_fn fn = (unsigned)t < OPR_DTYPE_COUNT ? sqrt_backward_tab[t] : NULL;
    if (in[0]->dtype != t || in[1]->dtype != t)
        return CPU_FAIL(c, OPR_ERR_INVALID, "sqrt_backward: the gradient, the result and the output differ in dtype");
    if (!fn) return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "sqrt_backward: no CPU kernel for dtype %s", cpu_dtype_name(t));
    return ew_apply(c, "sqrt_backward", c->outputs[0], 2, in, fn, &ew_none);
}

/* norm's backward, self |self|^(p-2) grad / norm^(p-1), in one pass over self (the
 * formulas make four to seven). norm_backward gives 0 where self is 0, as the formula's
 * where does (also when the norm is 0: then every element is); norm_backward_fast, the
 * fast mode's, has no test for zeros, so NaN or inf where the norm is 0, or at the zeros
 * of self for p < 2. The scalar factor is computed in double. */
#define NORM_BWD_LOOP(SUF, T, FABS, VPOW)                                                   \
    static void norm_bwd_##SUF(const opr_tensor_view *x, double p, double s, bool exact, T *y, \
                               int64_t lo, int64_t hi)                                      \
    {                                                                                       \
        const T *xd = (const T *)x->data, S = (T)s, E = (T)(p - 2);                         \
        const bool contig = cpu_is_contiguous(x);                                           \
        T xb[EW_VMATH_CHUNK], pb[EW_VMATH_CHUNK];                                           \
        for (int64_t i0 = lo; i0 < hi; i0 += EW_VMATH_CHUNK) {                              \
            const int64_t n = hi - i0 < EW_VMATH_CHUNK ? hi - i0 : EW_VMATH_CHUNK;          \
            const T *xs = xd + i0;                                                          \
            if (!contig) {                                                                  \
                for (int64_t k = 0; k < n; k++) xb[k] = xd[cpu_offset_of(x, i0 + k)];       \
                xs = xb;                                                                    \
            }                                                                               \
            T *yo = y + i0;                                                                 \
            if (E == 0) { /* p = 2: |x|^0 is 1 */                                           \
                for (int64_t k = 0; k < n; k++) yo[k] = xs[k] * S;                          \
            } else {                                                                        \
                for (int64_t k = 0; k < n; k++) pb[k] = FABS(xs[k]);                        \
                VPOW(n, pb, E, pb);                                                         \
                for (int64_t k = 0; k < n; k++) yo[k] = xs[k] * pb[k] * S;                  \
            }                                                                               \
            if (exact)                                                                      \
                for (int64_t k = 0; k < n; k++) yo[k] = xs[k] == 0 ? (T)0 : yo[k];          \
        }                                                                                   \
    }
NORM_BWD_LOOP(f32, float, fabsf, ew_vpow_f32)
NORM_BWD_LOOP(f64, double, fabs, ew_vpow_f64)

static double scalar_at(const opr_tensor_view *v)
{
    return v->dtype == OPR_F32 ? (double)*(const float *)v->data : *(const double *)v->data;
}

/* norm_backward and norm_backward_fast: args (grad, self, p, result). */
static int norm_backward_common(const opr_kernel_call *c, const char *op, bool exact)
{
    if (c->nargs < 4 || c->nout < 1) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 4 arguments and 1 output", op);
    const opr_tensor_view *g = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *r = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    if (!g || !x || !r) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the gradient, self and the result must be given", op);
    const opr_dtype t = x->dtype;
    if ((t != OPR_F32 && t != OPR_F64) || g->dtype != t || r->dtype != t || out->dtype != t)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: f32 or f64 throughout, got self %s", op, cpu_dtype_name(t));
    if (g->numel != 1 || r->numel != 1 || out->numel != x->numel)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected a 0-d gradient and result", op);
    const double p = cpu_arg_d(c, 2), s = scalar_at(g) / pow(scalar_at(r), p - 1);
    const int64_t n = x->numel;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_THRESHOLD)
    for (int64_t b = 0; b < (n + EW_BLOCK - 1) / EW_BLOCK; b++) {
        const int64_t lo = b * EW_BLOCK, hi = lo + EW_BLOCK < n ? lo + EW_BLOCK : n;
        if (t == OPR_F32) norm_bwd_f32(x, p, s, exact, (float *)out->data, lo, hi);
        else norm_bwd_f64(x, p, s, exact, (double *)out->data, lo, hi);
    }
    return OPR_OK;
}

static int k_norm_backward(const opr_kernel_call *c) { return norm_backward_common(c, "norm_backward", true); }
static int k_norm_backward_fast(const opr_kernel_call *c) { return norm_backward_common(c, "norm_backward_fast", false); }

/* ------------------------------------------------------------------ registration */

int cpu_register_elementwise(opr_plugin *self)
{
    static const struct {
        const char *op;
        const ew_loop_fn *table;
        opr_kernel_fn fn;
    } ops[] = {
        {"add", add_tab, k_add},       {"sub", sub_tab, k_sub},
        {"mul", mul_tab, k_mul},       {"div", div_tab, k_div},
        {"where", where_tab, k_where},
        {"lerp", lerp_tab, k_lerp},    {"addcmul", addcmul_tab, k_addcmul},
        {"eq", eq_tab, k_eq},          {"ne", ne_tab, k_ne},
        {"gt", gt_tab, k_gt},          {"lt", lt_tab, k_lt},
        {"ge", ge_tab, k_ge},          {"le", le_tab, k_le},
        {"neg", neg_tab, k_neg},       {"abs", abs_tab, k_abs},
        {"exp", exp_tab, k_exp},       {"log", log_tab, k_log},
        {"sqrt", sqrt_tab, k_sqrt},    {"pow", pow_tab, k_pow},
        {"relu", relu_tab, k_relu},    {"sigmoid", sigmoid_tab, k_sigmoid},
        {"tanh", tanh_tab, k_tanh},    {"clamp", clamp_tab, k_clamp},
        {"clamp_min", clamp_tab, k_clamp_min},
        {"sqrt_backward", sqrt_backward_tab, k_sqrt_backward},
        {"norm_backward", sqrt_backward_tab, k_norm_backward}, /* f32, f64 as well */
        {"norm_backward_fast", sqrt_backward_tab, k_norm_backward_fast},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        /* f16 and bf16 through f32 (cpu_half.c) */
        int rc = cpu_register_upcast(self, ops[i].op, ew_mask(ops[i].table), ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
