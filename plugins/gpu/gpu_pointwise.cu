/* The rest of ATen's pointwise ops on the GPU, through the shared elementwise kernels of
 * gpu_ew.cuh: trigonometric and hyperbolic functions, erf, expm1, log10/log1p/log2,
 * reciprocal, rsqrt, rounding, isinf/isnan, fmod, remainder, atan2, pow with a tensor
 * exponent, maximum/minimum, division with a rounding mode, bitwise and logical ops.
 * Semantics follow plugins/cpu/cpu_pointwise.c (PyTorch 1.13's), with one difference:
 * a kernel cannot stop at an integer division by zero, so where the CPU reports
 * ZeroDivisionError the quotient and remainder are 0 here (PyTorch's CUDA kernels give
 * an unspecified value there). f16/bf16 compute in float. */
#include "gpu_ew.cuh"

namespace {

/* ------------------------------------------------------------------ device helpers */

#define PW_MATH1(name, FF, FD)                              \
    GK_DEV float gk_##name(float x) { return FF(x); }       \
    GK_DEV double gk_##name(double x) { return FD(x); }
PW_MATH1(acos, acosf, acos)
PW_MATH1(acosh, acoshf, acosh)
PW_MATH1(asin, asinf, asin)
PW_MATH1(asinh, asinhf, asinh)
PW_MATH1(atan, atanf, atan)
PW_MATH1(atanh, atanhf, atanh)
PW_MATH1(cos, cosf, cos)
PW_MATH1(cosh, coshf, cosh)
PW_MATH1(sin, sinf, sin)
PW_MATH1(sinh, sinhf, sinh)
PW_MATH1(tan, tanf, tan)
PW_MATH1(erf, erff, erf)
PW_MATH1(expm1, expm1f, expm1)
PW_MATH1(log10, log10f, log10)
PW_MATH1(log1p, log1pf, log1p)
PW_MATH1(log2, log2f, log2)
PW_MATH1(ceil, ceilf, ceil)
PW_MATH1(floor, floorf, floor)
PW_MATH1(round, nearbyintf, nearbyint) /* halves to even, as the CPU */
PW_MATH1(trunc, truncf, trunc)
GK_DEV float gk_fmod(float x, float y) { return fmodf(x, y); }
GK_DEV double gk_fmod(double x, double y) { return fmod(x, y); }
GK_DEV float pw_copysign(float x, float y) { return copysignf(x, y); }
GK_DEV double pw_copysign(double x, double y) { return copysign(x, y); }
GK_DEV float gk_atan2(float x, float y) { return atan2f(x, y); }
GK_DEV double gk_atan2(double x, double y) { return atan2(x, y); }

/* rounding of integers: they are integral already */
GK_DEV int64_t gk_ceil(int64_t x) { return x; }
GK_DEV int64_t gk_floor(int64_t x) { return x; }
GK_DEV int64_t gk_round(int64_t x) { return x; }
GK_DEV int64_t gk_trunc(int64_t x) { return x; }
GK_DEV int32_t gk_ceil(int32_t x) { return x; }
GK_DEV int32_t gk_floor(int32_t x) { return x; }
GK_DEV int32_t gk_round(int32_t x) { return x; }
GK_DEV int32_t gk_trunc(int32_t x) { return x; }

GK_DEV bool pw_isinf(float x) { return x == INFINITY || x == -INFINITY; }
GK_DEV bool pw_isinf(double x) { return x == INFINITY || x == -INFINITY; }
template <class T> GK_DEV bool pw_isinf(T) { return false; }
GK_DEV bool pw_isnan(float x) { return x != x; }
GK_DEV bool pw_isnan(double x) { return x != x; }
template <class T> GK_DEV bool pw_isnan(T) { return false; }

/* fmod, remainder (the divisor's sign) and rounded division, as cpu_pointwise.c */
template <class T> GK_DEV T pw_fmod(T a, T b) { return gk_fmod(a, b); }
template <class T> GK_DEV T pw_rem(T a, T b)
{
    T m = gk_fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
}
template <class T> GK_DEV T pw_divtrunc(T a, T b) { return gk_trunc(a / b); }
template <class T> GK_DEV T pw_divfloor(T a, T b)
{
    if (b == 0) return a / b;
    const T mod = gk_fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= (T)1;
    if (div == 0) return pw_copysign((T)0, a / b);
    T fl = gk_floor(div);
    if (div - fl > (T)0.5) fl += (T)1;
    return fl;
}
template <class T> GK_DEV T pw_pow(T a, T b) { return gk_pow(a, b); }
/* The integer versions, for i64 and i32 (I): a kernel cannot stop at a zero divisor, so
 * it gives 0; -1 is taken apart because INT_MIN / -1 overflows. */
#define PW_INT_OPS(I, U)                                                                   \
    GK_DEV I pw_fmod(I a, I b) { return (b == 0 || b == -1) ? 0 : a % b; }                 \
    GK_DEV I pw_rem(I a, I b)                                                              \
    {                                                                                      \
        if (b == 0 || b == -1) return 0;                                                   \
        const I r = a % b;                                                                 \
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                               \
    }                                                                                      \
    GK_DEV I pw_divtrunc(I a, I b) { return b == 0 ? 0 : b == -1 ? (I)(0u - (U)a) : a / b; } \
    GK_DEV I pw_divfloor(I a, I b)                                                         \
    {                                                                                      \
        if (b == 0) return 0;                                                              \
        if (b == -1) return (I)(0u - (U)a);                                                \
        const I q = a / b, r = a % b;                                                      \
        return (r != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;                               \
    }                                                                                      \
    GK_DEV I pw_pow(I a, I b)                                                              \
    {                                                                                      \
        if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;                   \
        I r = 1;                                                                           \
        while (b) {                                                                        \
            if (b & 1) r = gk_wmul(r, a);                                                  \
            b /= 2;                                                                        \
            a = gk_wmul(a, a);                                                             \
        }                                                                                  \
        return r;                                                                          \
    }                                                                                      \
    GK_DEV I pw_not(I x) { return ~x; }
PW_INT_OPS(int64_t, uint64_t)
PW_INT_OPS(int32_t, uint32_t)

/* maximum/minimum propagate NaN; on bool they are or/and */
template <class T> GK_DEV T pw_max(T x, T y) { return pw_isnan(x) ? x : pw_isnan(y) ? y : x < y ? y : x; }
template <class T> GK_DEV T pw_min(T x, T y) { return pw_isnan(x) ? x : pw_isnan(y) ? y : y < x ? y : x; }

GK_DEV uint8_t pw_not(uint8_t x) { return x ? 0 : 1; }

/* ------------------------------------------------------------------ functors */

GK_UNARY_FN(f_acos, C, gk_acos(x))
GK_UNARY_FN(f_acosh, C, gk_acosh(x))
GK_UNARY_FN(f_asin, C, gk_asin(x))
GK_UNARY_FN(f_asinh, C, gk_asinh(x))
GK_UNARY_FN(f_atan, C, gk_atan(x))
GK_UNARY_FN(f_atanh, C, gk_atanh(x))
GK_UNARY_FN(f_cos, C, gk_cos(x))
GK_UNARY_FN(f_cosh, C, gk_cosh(x))
GK_UNARY_FN(f_sin, C, gk_sin(x))
GK_UNARY_FN(f_sinh, C, gk_sinh(x))
GK_UNARY_FN(f_tan, C, gk_tan(x))
GK_UNARY_FN(f_erf, C, gk_erf(x))
GK_UNARY_FN(f_expm1, C, gk_expm1(x))
GK_UNARY_FN(f_log10, C, gk_log10(x))
GK_UNARY_FN(f_log1p, C, gk_log1p(x))
GK_UNARY_FN(f_log2, C, gk_log2(x))
GK_UNARY_FN(f_reciprocal, C, (C)1 / x)
GK_UNARY_FN(f_rsqrt, C, (C)1 / gk_sqrt(x))
GK_UNARY_FN(f_ceil, C, gk_ceil(x))
GK_UNARY_FN(f_floor, C, gk_floor(x))
GK_UNARY_FN(f_round, C, gk_round(x))
GK_UNARY_FN(f_trunc, C, gk_trunc(x))
GK_UNARY_FN(f_isnan, bool, pw_isnan(x))
GK_UNARY_FN(f_isinf, bool, pw_isinf(x))
GK_BINARY_FN(f_fmod, C, pw_fmod(x, y))
GK_BINARY_FN(f_remainder, C, pw_rem(x, y))
GK_BINARY_FN(f_atan2, C, gk_atan2(x, y))
GK_BINARY_FN(f_pow, C, pw_pow(x, y))
GK_BINARY_FN(f_maximum, C, pw_max(x, y))
GK_BINARY_FN(f_minimum, C, pw_min(x, y))
GK_BINARY_FN(f_divtrue, C, x / y)
GK_BINARY_FN(f_divtrunc, C, pw_divtrunc(x, y))
GK_BINARY_FN(f_divfloor, C, pw_divfloor(x, y))
GK_BINARY_FN(f_band, C, (C)(x & y))
GK_BINARY_FN(f_bor, C, (C)(x | y))
GK_BINARY_FN(f_bxor, C, (C)(x ^ y))
GK_UNARY_FN(f_bnot, C, pw_not(x))
GK_BINARY_FN(f_land, bool, (x != 0) && (y != 0))
GK_BINARY_FN(f_lor, bool, (x != 0) || (y != 0))
GK_BINARY_FN(f_lxor, bool, (x != 0) != (y != 0))
GK_UNARY_FN(f_lnot, bool, x == 0)

/* ------------------------------------------------------------------ dispatch */

/* Which dtypes a functor is instantiated for: floats (f32, f64 and the halves in
 * float), i64 and i32, bool. */
enum { PW_F = 1, PW_I = 2, PW_B = 4 };

constexpr uint32_t pw_mask(int kinds)
{
    return ((kinds & PW_F) ? (GK_FLOATS | GK_HALVES) : 0u) | ((kinds & PW_I) ? GK_BIT(OPR_I64) | GK_I32 : 0u) |
           ((kinds & PW_B) ? GK_BIT(OPR_BOOL) : 0u);
}

template <template <class> class F, int KINDS, bool BOOL_OUT, int NIN>
int pw_run(const opr_kernel_call *c, const char *op, int nargs)
{
    gk_ctx k;
    gk_ew e;
    int rc = gk_begin(c, op, &k);
    if (!rc) rc = gk_ew_prepare(c, op, nargs, 0, NIN, pw_mask(KINDS), BOOL_OUT, &e);
    if (rc) return rc;
    const opr_dtype dt = e.in[0]->dtype;
    if constexpr ((KINDS & PW_I) != 0) {
        if (dt == OPR_I64) return gk_ew_run_int<F, BOOL_OUT, NIN, int64_t>(&k, e, 0, 0);
        if (dt == OPR_I32) return gk_ew_run_int<F, BOOL_OUT, NIN, int32_t>(&k, e, 0, 0);
    }
    if constexpr ((KINDS & PW_B) != 0) {
        if (dt == OPR_BOOL) {
            F<uint8_t> f;
            f.a = f.b = 0;
            return gk_ew_run<NIN, uint8_t, uint8_t>(&k, e, f);
        }
    }
    if constexpr ((KINDS & PW_F) != 0) return gk_ew_dispatch<F, BOOL_OUT, NIN>(&k, e, 0, 0);
    return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", op, GPU_NAME, gk_dtype_name(dt));
}

#define PW_KERNEL(name, op, F, KINDS, BOOL_OUT, NIN) \
    int k_##name(const opr_kernel_call *c) { return pw_run<F, KINDS, BOOL_OUT, NIN>(c, op, NIN); }

PW_KERNEL(acos, "acos", f_acos, PW_F, false, 1)
PW_KERNEL(acosh, "acosh", f_acosh, PW_F, false, 1)
PW_KERNEL(asin, "asin", f_asin, PW_F, false, 1)
PW_KERNEL(asinh, "asinh", f_asinh, PW_F, false, 1)
PW_KERNEL(atan, "atan", f_atan, PW_F, false, 1)
PW_KERNEL(atanh, "atanh", f_atanh, PW_F, false, 1)
PW_KERNEL(cos, "cos", f_cos, PW_F, false, 1)
PW_KERNEL(cosh, "cosh", f_cosh, PW_F, false, 1)
PW_KERNEL(sin, "sin", f_sin, PW_F, false, 1)
PW_KERNEL(sinh, "sinh", f_sinh, PW_F, false, 1)
PW_KERNEL(tan, "tan", f_tan, PW_F, false, 1)
PW_KERNEL(erf, "erf", f_erf, PW_F, false, 1)
PW_KERNEL(expm1, "expm1", f_expm1, PW_F, false, 1)
PW_KERNEL(log10, "log10", f_log10, PW_F, false, 1)
PW_KERNEL(log1p, "log1p", f_log1p, PW_F, false, 1)
PW_KERNEL(log2, "log2", f_log2, PW_F, false, 1)
PW_KERNEL(reciprocal, "reciprocal", f_reciprocal, PW_F, false, 1)
PW_KERNEL(rsqrt, "rsqrt", f_rsqrt, PW_F, false, 1)
PW_KERNEL(ceil, "ceil", f_ceil, PW_F | PW_I, false, 1)
PW_KERNEL(floor, "floor", f_floor, PW_F | PW_I, false, 1)
PW_KERNEL(round, "round", f_round, PW_F | PW_I, false, 1)
PW_KERNEL(trunc, "trunc", f_trunc, PW_F | PW_I, false, 1)
PW_KERNEL(isnan, "isnan", f_isnan, PW_F | PW_I | PW_B, true, 1)
PW_KERNEL(isinf, "isinf", f_isinf, PW_F | PW_I | PW_B, true, 1)
PW_KERNEL(fmod, "fmod", f_fmod, PW_F | PW_I, false, 2)
PW_KERNEL(remainder, "remainder", f_remainder, PW_F | PW_I, false, 2)
PW_KERNEL(atan2, "atan2", f_atan2, PW_F, false, 2)
PW_KERNEL(powt, "pow.Tensor_Tensor", f_pow, PW_F | PW_I, false, 2)
PW_KERNEL(maximum, "maximum", f_maximum, PW_F | PW_I | PW_B, false, 2)
PW_KERNEL(minimum, "minimum", f_minimum, PW_F | PW_I | PW_B, false, 2)
PW_KERNEL(band, "bitwise_and", f_band, PW_I | PW_B, false, 2)
PW_KERNEL(bor, "bitwise_or", f_bor, PW_I | PW_B, false, 2)
PW_KERNEL(bxor, "bitwise_xor", f_bxor, PW_I | PW_B, false, 2)
PW_KERNEL(bnot, "bitwise_not", f_bnot, PW_I | PW_B, false, 1)
PW_KERNEL(land, "logical_and", f_land, PW_F | PW_I | PW_B, true, 2)
PW_KERNEL(lor, "logical_or", f_lor, PW_F | PW_I | PW_B, true, 2)
PW_KERNEL(lxor, "logical_xor", f_lxor, PW_F | PW_I | PW_B, true, 2)
PW_KERNEL(lnot, "logical_not", f_lnot, PW_F | PW_I | PW_B, true, 1)

/* div.Tensor_mode(self, other, rounding_mode): None (floats), "trunc", "floor". */
int k_div_mode(const opr_kernel_call *c)
{
    const char *op = "div.Tensor_mode";
    if (c->nargs < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 arguments", op);
    const opr_kernel_arg *m = c->args[2];
    if (m->kind == OPR_ARG_NONE) return pw_run<f_divtrue, PW_F, false, 2>(c, op, 3);
    if (m->kind == OPR_ARG_STRING && !strcmp(m->u.s, "trunc")) return pw_run<f_divtrunc, PW_F | PW_I, false, 2>(c, op, 3);
    if (m->kind == OPR_ARG_STRING && !strcmp(m->u.s, "floor")) return pw_run<f_divfloor, PW_F | PW_I, false, 2>(c, op, 3);
    return GK_FAIL(c, OPR_ERR_INVALID, "%s: div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'",
                   op, m->kind == OPR_ARG_STRING ? m->u.s : "?");
}

} // namespace

int gk_register_pointwise(opr_plugin *self)
{
    const uint32_t F = pw_mask(PW_F), FI = pw_mask(PW_F | PW_I), ALL = pw_mask(PW_F | PW_I | PW_B),
                   BITS = pw_mask(PW_I | PW_B);
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"acos", F, k_acos},         {"acosh", F, k_acosh},
        {"asin", F, k_asin},         {"asinh", F, k_asinh},
        {"atan", F, k_atan},         {"atanh", F, k_atanh},
        {"cos", F, k_cos},           {"cosh", F, k_cosh},
        {"sin", F, k_sin},           {"sinh", F, k_sinh},
        {"tan", F, k_tan},           {"erf", F, k_erf},
        {"expm1", F, k_expm1},       {"log10", F, k_log10},
        {"log1p", F, k_log1p},       {"log2", F, k_log2},
        {"reciprocal", F, k_reciprocal}, {"rsqrt", F, k_rsqrt},
        {"ceil", FI, k_ceil},        {"floor", FI, k_floor},
        {"round", FI, k_round},      {"trunc", FI, k_trunc},
        {"isnan", ALL, k_isnan},     {"isinf", ALL, k_isinf},
        {"fmod", FI, k_fmod},        {"remainder", FI, k_remainder},
        {"atan2", F, k_atan2},       {"pow.Tensor_Tensor", FI, k_powt},
        {"maximum", ALL, k_maximum}, {"minimum", ALL, k_minimum},
        {"div.Tensor_mode", FI, k_div_mode},
        {"bitwise_and", BITS, k_band}, {"bitwise_or", BITS, k_bor},
        {"bitwise_xor", BITS, k_bxor}, {"bitwise_not", BITS, k_bnot},
        {"logical_and", ALL, k_land}, {"logical_or", ALL, k_lor},
        {"logical_xor", ALL, k_lxor}, {"logical_not", ALL, k_lnot},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
