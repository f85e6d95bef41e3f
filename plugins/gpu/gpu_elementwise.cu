/* Elementwise arithmetic and unary math: add, sub, mul, div, where, neg, abs, exp, log,
 * sqrt, pow, relu, sigmoid, tanh, clamp, clamp_min, sign, lerp, addcmul. f32, f64, f16 and bf16
 * (halves compute in float); i64 where the CPU backend has it (wrapping arithmetic).
 * Semantics follow plugins/cpu/cpu_elementwise.c: NaN propagates through relu and
 * clamp, clamp with min > max gives max, pow(x, 2) is x * x and pow(x, 0.5) is sqrt,
 * i64 clamp bounds round inwards, a fractional alpha is refused for i64. */
#include "gpu_ew.cuh"

namespace {

GK_DEV float gk_neg(float x) { return -x; }
GK_DEV double gk_neg(double x) { return -x; }
GK_DEV int64_t gk_neg(int64_t x) { return (int64_t)(0u - (uint64_t)x); }
GK_DEV float gk_abs(float x) { return fabsf(x); }
GK_DEV double gk_abs(double x) { return fabs(x); }
GK_DEV int64_t gk_abs(int64_t x) { return x < 0 ? gk_neg(x) : x; }
GK_DEV int32_t gk_neg(int32_t x) { return (int32_t)(0u - (uint32_t)x); }
GK_DEV int32_t gk_abs(int32_t x) { return x < 0 ? gk_neg(x) : x; }

GK_BINARY_FN(f_add, C, gk_wadd(x, gk_wmul(a, y)))
GK_BINARY_FN(f_sub, C, gk_wsub(x, gk_wmul(a, y)))
GK_BINARY_FN(f_mul, C, gk_wmul(x, y))
GK_BINARY_FN(f_div, C, x / y)
GK_UNARY_FN(f_neg, C, gk_neg(x))
GK_UNARY_FN(f_abs, C, gk_abs(x))
GK_UNARY_FN(f_exp, C, gk_exp(x))
GK_UNARY_FN(f_log, C, gk_log(x))
GK_UNARY_FN(f_sqrt, C, gk_sqrt(x))
GK_UNARY_FN(f_pow, C, gk_pow(x, a))
GK_UNARY_FN(f_square, C, x * x)
GK_UNARY_FN(f_relu, C, x < (C)0 ? (C)0 : x)
GK_UNARY_FN(f_sigmoid, C, (C)1 / ((C)1 + gk_exp(-x)))
GK_UNARY_FN(f_tanh, C, gk_tanh(x))
GK_UNARY_FN(f_clamp, C, (x < a ? a : x) > b ? b : (x < a ? a : x))
GK_UNARY_FN(f_sign, C, gk_isnan(x) ? x : (C)((x > (C)0) - (x < (C)0)))
/* lerp(self, end, weight) = self + weight * (end - self); addcmul = self + value * t1 * t2 */
GK_TERNARY_FN(f_lerp, C, x + z * (y - x))
GK_TERNARY_FN(f_addcmul, C, x + a * y * z)

const uint32_t FLOATS = GK_FLOATS | GK_HALVES;
const uint32_t NUMS = GK_NUMERIC | GK_I32 | GK_HALVES;

template <template <class> class F, int NIN>
int run_float(const opr_kernel_call *c, const char *op, int nargs, double a, double b)
{
    gk_ctx k;
    gk_ew e;
    int rc = gk_begin(c, op, &k);
    if (!rc) rc = gk_ew_prepare(c, op, nargs, 0, NIN, FLOATS, false, &e);
    return rc ? rc : gk_ew_dispatch<F, false, NIN>(&k, e, a, b);
}

template <template <class> class F, int NIN>
int run_num(const opr_kernel_call *c, const char *op, int nargs, double a, double b)
{
    gk_ctx k;
    gk_ew e;
    int rc = gk_begin(c, op, &k);
    if (!rc) rc = gk_ew_prepare(c, op, nargs, 0, NIN, NUMS, false, &e);
    return rc ? rc : gk_ew_dispatch_int<F, false, NIN>(&k, e, a, b);
}

int k_mul(const opr_kernel_call *c) { return run_num<f_mul, 2>(c, "mul", 2, 0, 0); }
int k_div(const opr_kernel_call *c) { return run_float<f_div, 2>(c, "div", 2, 0, 0); }
int k_neg(const opr_kernel_call *c) { return run_num<f_neg, 1>(c, "neg", 1, 0, 0); }
int k_abs(const opr_kernel_call *c) { return run_num<f_abs, 1>(c, "abs", 1, 0, 0); }
int k_exp(const opr_kernel_call *c) { return run_float<f_exp, 1>(c, "exp", 1, 0, 0); }
int k_log(const opr_kernel_call *c) { return run_float<f_log, 1>(c, "log", 1, 0, 0); }
int k_sqrt(const opr_kernel_call *c) { return run_float<f_sqrt, 1>(c, "sqrt", 1, 0, 0); }
int k_relu(const opr_kernel_call *c) { return run_num<f_relu, 1>(c, "relu", 1, 0, 0); }
int k_sigmoid(const opr_kernel_call *c) { return run_float<f_sigmoid, 1>(c, "sigmoid", 1, 0, 0); }
int k_tanh(const opr_kernel_call *c) { return run_float<f_tanh, 1>(c, "tanh", 1, 0, 0); }
int k_lerp(const opr_kernel_call *c) { return run_float<f_lerp, 3>(c, "lerp", 3, 0, 0); }
int k_addcmul(const opr_kernel_call *c) { return run_float<f_addcmul, 3>(c, "addcmul", 4, gk_arg_d(c, 3), 0); }
int k_sign(const opr_kernel_call *c) { return run_num<f_sign, 1>(c, "sign", 1, 0, 0); }

/* add/sub(self, other, alpha): self (+/-) alpha * other; alpha must be integral for i64 and i32. */
template <template <class> class F>
int add_sub(const opr_kernel_call *c, const char *op)
{
    if (c->nargs < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 arguments", op);
    const double alpha = gk_arg_d(c, 2);
    const opr_tensor_view *self = gk_arg_t(c, 0);
    if (self && (self->dtype == OPR_I64 || self->dtype == OPR_I32) && alpha != floor(alpha))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: alpha must be an integer for %s tensors, got %g", op,
                       gk_dtype_name(self->dtype), alpha);
    return run_num<F, 2>(c, op, 3, alpha, 0);
}
int k_add(const opr_kernel_call *c) { return add_sub<f_add>(c, "add"); }
int k_sub(const opr_kernel_call *c) { return add_sub<f_sub>(c, "sub"); }

int k_pow(const opr_kernel_call *c)
{
    if (c->nargs < 2) return GK_FAIL(c, OPR_ERR_INVALID, "pow: expected 2 arguments");
    const double p = gk_arg_d(c, 1);
    if (p == 2) return run_float<f_square, 1>(c, "pow", 2, p, 0);
    if (p == 0.5) return run_float<f_sqrt, 1>(c, "pow", 2, p, 0);
    return run_float<f_pow, 1>(c, "pow", 2, p, 0);
}

/* clamp bounds: a missing bound is -inf/+inf (i64: saturated); i64 rounds inwards. */
double clamp_lo(const opr_kernel_call *c, int i, bool is_int)
{
    if (!gk_arg_given(c, i)) return -INFINITY;
    return is_int ? ceil(gk_arg_d(c, i)) : gk_arg_d(c, i);
}
double clamp_hi(const opr_kernel_call *c, int i, bool is_int)
{
    if (!gk_arg_given(c, i)) return INFINITY;
    return is_int ? floor(gk_arg_d(c, i)) : gk_arg_d(c, i);
}

int k_clamp(const opr_kernel_call *c)
{
    if (c->nargs < 3) return GK_FAIL(c, OPR_ERR_INVALID, "clamp: expected 3 arguments");
    const opr_tensor_view *self = gk_arg_t(c, 0);
    const bool is_int = self && (self->dtype == OPR_I64 || self->dtype == OPR_I32);
    return run_num<f_clamp, 1>(c, "clamp", 3, clamp_lo(c, 1, is_int), clamp_hi(c, 2, is_int));
}

int k_clamp_min(const opr_kernel_call *c)
{
    if (c->nargs < 2) return GK_FAIL(c, OPR_ERR_INVALID, "clamp_min: expected 2 arguments");
    const opr_tensor_view *self = gk_arg_t(c, 0);
    const bool is_int = self && (self->dtype == OPR_I64 || self->dtype == OPR_I32);
    return run_num<f_clamp, 1>(c, "clamp_min", 2, clamp_lo(c, 1, is_int), INFINITY);
}

/* ------------------------------------------------------------------ where */

template <class E>
__global__ void k_where(int64_t n, gk_geom g, E *o, const uint8_t *cond, const E *x, const E *y)
{
    GK_LOOP(i, n)
    {
        int64_t off[4];
        gk_offsets<4>(g, i, off);
        o[off[0]] = cond[off[1]] ? x[off[2]] : y[off[3]];
    }
}

template <class E>
int launch_where(const gk_ctx *k, int64_t n, const gk_geom &g, void *o, const void *cond, const void *x,
                 const void *y)
{
    gk_launch(k_where<E>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (E *)o, (const uint8_t *)cond, (const E *)x,
                                                             (const E *)y);
    return gk_launched(k, "where kernel");
}

/* where(condition, self, other): T is the dtype of self and other; the bool condition
 * broadcasts like them. Values are moved as words of their size. */
int k_where(const opr_kernel_call *c)
{
    gk_ctx k;
    gk_ew e;
    int rc = gk_begin(c, "where", &k);
    if (rc) return rc;
    if (c->nargs < 3 || c->nout < 1)
        return GK_FAIL(c, OPR_ERR_INVALID, "where: expected 3 arguments and 1 output");
    const opr_tensor_view *cond = gk_arg_t(c, 0);
    if (!cond || cond->dtype != OPR_BOOL)
        return GK_FAIL(c, OPR_ERR_INVALID, "where: condition must be a bool tensor");
    if ((rc = gk_ew_prepare(c, "where", 3, 1, 2, NUMS, false, &e))) return rc;
    const opr_tensor_view *out = e.out;
    int64_t st[4][GK_MAXD];
    for (int32_t d = 0; d < out->ndim; d++) st[0][d] = out->strides[d];
    if (!opc_bcast_strides(cond, out->ndim, out->shape, st[1]))
        return GK_FAIL(c, OPR_ERR_INVALID, "where: input 0 (%d-d) does not broadcast to the %d-d output", cond->ndim,
                       out->ndim);
    opc_bcast_strides(e.in[0], out->ndim, out->shape, st[2]);
    opc_bcast_strides(e.in[1], out->ndim, out->shape, st[3]);
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    gk_geom g;
    const int64_t *sp[4] = {st[0], st[1], st[2], st[3]};
    gk_geom_make(&g, out->ndim, out->shape, 4, sp);
    switch (gk_dtype_size(out->dtype)) {
    case 2: return launch_where<uint16_t>(&k, n, g, out->data, cond->data, e.in[0]->data, e.in[1]->data);
    case 4: return launch_where<uint32_t>(&k, n, g, out->data, cond->data, e.in[0]->data, e.in[1]->data);
    default:
        return launch_where<unsigned long long>(&k, n, g, out->data, cond->data, e.in[0]->data, e.in[1]->data);
    }
}

} // namespace

int gk_register_elementwise(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"add", NUMS, k_add},          {"sub", NUMS, k_sub},
        {"mul", NUMS, k_mul},          {"div", FLOATS, k_div},
        {"where", NUMS, k_where},      {"neg", NUMS, k_neg},
        {"abs", NUMS, k_abs},          {"exp", FLOATS, k_exp},
        {"log", FLOATS, k_log},        {"sqrt", FLOATS, k_sqrt},
        {"pow", FLOATS, k_pow},        {"relu", NUMS, k_relu},
        {"sigmoid", FLOATS, k_sigmoid}, {"tanh", FLOATS, k_tanh},
        {"clamp", NUMS, k_clamp},      {"clamp_min", NUMS, k_clamp_min},
        {"lerp", FLOATS, k_lerp},
        {"addcmul", FLOATS, k_addcmul},
        {"sign", NUMS, k_sign},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
