/* The rest of ATen's pointwise ops on the CPU, through the shared loops of cpu_ew.h:
 * trigonometric and hyperbolic functions, erf, expm1, log10/log1p/log2, reciprocal,
 * rsqrt, rounding, isinf/isnan, fmod, remainder, atan2, pow with a tensor exponent,
 * maximum/minimum, division with a rounding mode, and the bitwise and logical ops.
 *
 * Semantics are PyTorch 1.13's CPU kernels (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp
 * and UnaryOpsKernel.cpp): remainder takes the sign of the divisor, floor division
 * corrects fmod's quotient as PyTorch's div_floor_floating does, maximum/minimum
 * propagate NaN, integer pow by a negative exponent is 0 except for bases 1 and -1,
 * and an integer division by zero (fmod, remainder, div with a rounding mode) is an
 * error ("ZeroDivisionError"), not a crash. Integer arithmetic wraps (WMUL), and the
 * one quotient that overflows, INT64_MIN / -1, wraps to INT64_MIN as on x86 PyTorch.
 * The transcendental functions are SLEEF's vector loops in f32 (cpu_vmath.h, 1.0 ULP,
 * as PyTorch's vectorised CPU kernels) and libm's in f64 (the reference path stays free
 * of vector libraries). */
#include "cpu_common.h"
#include "cpu_ew.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <tgmath.h> /* acos(x) etc. pick the float or double version from x's type */

/* ------------------------------------------------------------------ scalar helpers */

/* remainder: fmod's result moved into the divisor's sign (PyTorch's formula). */
#define PW_REM_F(T, SUF)                                           \
    static inline T pw_rem_##SUF(T a, T b)                         \
    {                                                              \
        T m = fmod(a, b);                                          \
        if (m != 0 && ((b < 0) != (m < 0))) m += b;                \
        return m;                                                  \
    }
PW_REM_F(float, f32)
PW_REM_F(double, f64)

/* Floor division of floats, PyTorch's div_floor_floating: the quotient of a - fmod(a, b)
 * (exact), corrected by one where fmod has the other sign, then floored and rounded
 * to the nearer integer; a zero quotient keeps the sign of a / b. */
#define PW_FLOORDIV_F(T, SUF)                                      \
    static inline T pw_floordiv_##SUF(T a, T b)                    \
    {                                                              \
        if (b == 0) return a / b;                                  \
        const T mod = fmod(a, b);                                  \
        T div = (a - mod) / b;                                     \
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= (T)1;       \
        if (div == 0) return copysign((T)0, a / b);                \
        T fl = floor(div);                                         \
        if (div - fl > (T)0.5) fl += (T)1;                         \
        return fl;                                                 \
    }
PW_FLOORDIV_F(float, f32)
PW_FLOORDIV_F(double, f64)

/* Integer division and remainder for a divisor the kernel has checked is not 0; -1 is
 * taken apart because INT64_MIN / -1 (INT32_MIN / -1) overflows (undefined in C).
 * Integer pow (PyTorch's powi): square-and-multiply, wrapping; a negative exponent
 * gives 0 except for bases 1 and -1. Stamped out for i64 and i32. */
#define PW_INT_ARITH(T, SUF, NEG, MUL)                                                      \
    static inline T pw_divt_##SUF(T a, T b) { return b == -1 ? NEG(a) : a / b; }            \
    static inline T pw_fmod_##SUF(T a, T b) { return b == -1 ? 0 : a % b; }                 \
    static inline T pw_divf_##SUF(T a, T b)                                                 \
    {                                                                                       \
        if (b == -1) return NEG(a);                                                         \
        const T q = a / b, r = a % b;                                                       \
        return (r != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;                                \
    }                                                                                       \
    static inline T pw_rem_##SUF(T a, T b)                                                  \
    {                                                                                       \
        if (b == -1) return 0;                                                              \
        const T r = a % b;                                                                  \
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                                \
    }                                                                                       \
    static inline T pw_powi_##SUF(T a, T b)                                                 \
    {                                                                                       \
        if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;                    \
        T r = 1;                                                                            \
        while (b) {                                                                         \
            if (b & 1) r = MUL(r, a);                                                       \
            b /= 2;                                                                         \
            a = MUL(a, a);                                                                  \
        }                                                                                   \
        return r;                                                                           \
    }
PW_INT_ARITH(int64_t, i64, WNEG, WMUL)
PW_INT_ARITH(int32_t, i32, WNEG32, WMUL32)

/* isnan/isinf of an integer or a bool */
static inline uint8_t pw_never(int64_t v)
{
    (void)v;
    return 0;
}

/* maximum/minimum: NaN in either operand gives NaN. */
#define PW_MAX(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) < (y) ? (y) : (x))
#define PW_MIN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (y) < (x) ? (y) : (x))

/* ------------------------------------------------------------------ the loops */

/* atan2 and fmod: SLEEF's vector loop in f32 (a strided or broadcast operand gathered
 * into a buffer, so that every element goes through the same code whatever the layout),
 * libm in f64 */
#define PW_SLEEF_BINARY(op)                                                                \
    EW_BINARY_LOOP(op##_f64, double, double, f64, op(x, y))                                \
    static void op##_f32(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p) \
    {                                                                                      \
        (void)p;                                                                           \
        float *o = (float *)ptr[0];                                                        \
        const float *a = (const float *)ptr[1], *b = (const float *)ptr[2];                \
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {                                      \
            cpu_vm.op##_f32(n, a, b, o);                                                   \
            return;                                                                        \
        }                                                                                  \
        float ab[EW_VMATH_CHUNK], bb[EW_VMATH_CHUNK];                                      \
        for (int64_t i0 = 0; i0 < n; i0 += EW_VMATH_CHUNK) {                               \
            const int64_t m = n - i0 < EW_VMATH_CHUNK ? n - i0 : EW_VMATH_CHUNK;           \
            for (int64_t k = 0; k < m; k++) {                                              \
                ab[k] = a[(i0 + k) * st[1]];                                               \
                bb[k] = b[(i0 + k) * st[2]];                                               \
            }                                                                              \
            cpu_vm.op##_f32(m, ab, bb, ab);                                                \
            for (int64_t k = 0; k < m; k++) o[(i0 + k) * st[0]] = ab[k];                   \
        }                                                                                  \
    }

/* unary math (f32, f64; halves through f32) */
/* f32 through SLEEF's vector loop, f64 through libm */
#define PW_SLEEF_UNARY(op)                                         \
    EW_VMATH_LOOP(op##_f32, float, f32, cpu_vm.op##_f32(N, X, Y))  \
    EW_UNARY_LOOP(op##_f64, double, double, f64, op(x))
PW_SLEEF_UNARY(acos)
PW_SLEEF_UNARY(acosh)
PW_SLEEF_UNARY(asin)
PW_SLEEF_UNARY(asinh)
PW_SLEEF_UNARY(atan)
PW_SLEEF_UNARY(atanh)
PW_SLEEF_UNARY(cos)
PW_SLEEF_UNARY(cosh)
PW_SLEEF_UNARY(sin)
PW_SLEEF_UNARY(sinh)
PW_SLEEF_UNARY(tan)
PW_SLEEF_UNARY(erf)
PW_SLEEF_UNARY(expm1)
PW_SLEEF_UNARY(log10)
PW_SLEEF_UNARY(log1p)
PW_SLEEF_UNARY(log2)
EW_UNARY_FLOAT(reciprocal, 1 / x)
EW_UNARY_FLOAT(rsqrt, 1 / sqrt(x))

/* rounding: integers are already integral (PyTorch 1.13 returns them unchanged); round
 * is to the nearest even integer at halves, as std::nearbyint */
EW_UNARY_FLOAT(ceil, ceil(x))
EW_UNARY_FLOAT(floor, floor(x))
EW_UNARY_FLOAT(round, nearbyint(x))
EW_UNARY_FLOAT(trunc, trunc(x))
EW_UNARY_LOOP(ident_i64, int64_t, int64_t, i64, x)
EW_UNARY_LOOP(ident_i32, int32_t, int32_t, i32, x)

/* classification (bool out; glibc's isinf gives -1 for -inf, hence != 0); integers and bools
 * are never inf or NaN */
EW_UNARY_LOOP(isnan_f32, uint8_t, float, f32, isnan(x) != 0)
EW_UNARY_LOOP(isnan_f64, uint8_t, double, f64, isnan(x) != 0)
EW_UNARY_LOOP(isinf_f32, uint8_t, float, f32, isinf(x) != 0)
EW_UNARY_LOOP(isinf_f64, uint8_t, double, f64, isinf(x) != 0)
EW_UNARY_LOOP(false_i64, uint8_t, int64_t, i64, pw_never(x))
EW_UNARY_LOOP(false_i32, uint8_t, int32_t, i32, pw_never(x))
EW_UNARY_LOOP(false_b8, uint8_t, uint8_t, b8, pw_never(x))

/* binary arithmetic */
PW_SLEEF_BINARY(fmod)
EW_BINARY_LOOP(fmod_i64, int64_t, int64_t, i64, pw_fmod_i64(x, y))
EW_BINARY_LOOP(fmod_i32, int32_t, int32_t, i32, pw_fmod_i32(x, y))
EW_BINARY_LOOP(remainder_f32, float, float, f32, pw_rem_f32(x, y))
EW_BINARY_LOOP(remainder_f64, double, double, f64, pw_rem_f64(x, y))
EW_BINARY_LOOP(remainder_i64, int64_t, int64_t, i64, pw_rem_i64(x, y))
EW_BINARY_LOOP(remainder_i32, int32_t, int32_t, i32, pw_rem_i32(x, y))
PW_SLEEF_BINARY(atan2)
EW_BINARY_FLOAT(powt, pow(x, y))
EW_BINARY_LOOP(powt_i64, int64_t, int64_t, i64, pw_powi_i64(x, y))
EW_BINARY_LOOP(powt_i32, int32_t, int32_t, i32, pw_powi_i32(x, y))
/* maximum/minimum in f32, f64: cpu_vmath.h's loop (the widest vectors the CPU has)
 * where the operands are contiguous, the same rule element by element elsewhere */
#define PW_PICK(op, T, SUF, EXPR)                                                          \
    EW_BINARY_LOOP(op##_ew_##SUF, T, T, SUF, EXPR)                                         \
    static void op##_##SUF(int64_t n, char *const *ptr, const int64_t *st, const ew_params *p) \
    {                                                                                      \
        if (st[0] == 1 && st[1] == 1 && st[2] == 1)                                        \
            cpu_vm.op##_##SUF(n, (const T *)ptr[1], (const T *)ptr[2], (T *)ptr[0]);       \
        else                                                                               \
            op##_ew_##SUF(n, ptr, st, p);                                                  \
    }
PW_PICK(maximum, float, f32, PW_MAX(x, y))
PW_PICK(maximum, double, f64, PW_MAX(x, y))
PW_PICK(minimum, float, f32, PW_MIN(x, y))
PW_PICK(minimum, double, f64, PW_MIN(x, y))
EW_BINARY_LOOP(maximum_i64, int64_t, int64_t, i64, x < y ? y : x)
EW_BINARY_LOOP(maximum_i32, int32_t, int32_t, i32, x < y ? y : x)
EW_BINARY_LOOP(maximum_b8, uint8_t, uint8_t, b8, x | y)
EW_BINARY_LOOP(minimum_i64, int64_t, int64_t, i64, y < x ? y : x)
EW_BINARY_LOOP(minimum_i32, int32_t, int32_t, i32, y < x ? y : x)
EW_BINARY_LOOP(minimum_b8, uint8_t, uint8_t, b8, x & y)

/* div with a rounding mode: one loop per mode (true division is div's own loop) */
EW_BINARY_FLOAT(divtrunc, trunc(x / y))
EW_BINARY_LOOP(divtrunc_i64, int64_t, int64_t, i64, pw_divt_i64(x, y))
EW_BINARY_LOOP(divtrunc_i32, int32_t, int32_t, i32, pw_divt_i32(x, y))
EW_BINARY_LOOP(divfloor_f32, float, float, f32, pw_floordiv_f32(x, y))
EW_BINARY_LOOP(divfloor_f64, double, double, f64, pw_floordiv_f64(x, y))
EW_BINARY_LOOP(divfloor_i64, int64_t, int64_t, i64, pw_divf_i64(x, y))
EW_BINARY_LOOP(divfloor_i32, int32_t, int32_t, i32, pw_divf_i32(x, y))
EW_BINARY_FLOAT(divtrue, x / y)

/* bitwise (i64, i32, bool) */
EW_BINARY_LOOP(band_i64, int64_t, int64_t, i64, x & y)
EW_BINARY_LOOP(band_i32, int32_t, int32_t, i32, x & y)
EW_BINARY_LOOP(band_b8, uint8_t, uint8_t, b8, x & y)
EW_BINARY_LOOP(bor_i64, int64_t, int64_t, i64, x | y)
EW_BINARY_LOOP(bor_i32, int32_t, int32_t, i32, x | y)
EW_BINARY_LOOP(bor_b8, uint8_t, uint8_t, b8, x | y)
EW_BINARY_LOOP(bxor_i64, int64_t, int64_t, i64, x ^ y)
EW_BINARY_LOOP(bxor_i32, int32_t, int32_t, i32, x ^ y)
EW_BINARY_LOOP(bxor_b8, uint8_t, uint8_t, b8, x ^ y)
EW_UNARY_LOOP(bnot_i64, int64_t, int64_t, i64, ~x)
EW_UNARY_LOOP(bnot_i32, int32_t, int32_t, i32, ~x)
EW_UNARY_LOOP(bnot_b8, uint8_t, uint8_t, b8, !x)

/* logical (any dtype in, bool out): a value is true when it is not 0 (NaN is true) */
#define PW_LOGICAL(op, EXPR)                                  \
    EW_BINARY_LOOP(op##_f32, uint8_t, float, f32, EXPR)       \
    EW_BINARY_LOOP(op##_f64, uint8_t, double, f64, EXPR)      \
    EW_BINARY_LOOP(op##_i64, uint8_t, int64_t, i64, EXPR)     \
    EW_BINARY_LOOP(op##_i32, uint8_t, int32_t, i32, EXPR)     \
    EW_BINARY_LOOP(op##_b8, uint8_t, uint8_t, b8, EXPR)
PW_LOGICAL(land, (x != 0) && (y != 0))
PW_LOGICAL(lor, (x != 0) || (y != 0))
PW_LOGICAL(lxor, (x != 0) != (y != 0))
EW_UNARY_LOOP(lnot_f32, uint8_t, float, f32, x == 0)
EW_UNARY_LOOP(lnot_f64, uint8_t, double, f64, x == 0)
EW_UNARY_LOOP(lnot_i64, uint8_t, int64_t, i64, x == 0)
EW_UNARY_LOOP(lnot_i32, uint8_t, int32_t, i32, x == 0)
EW_UNARY_LOOP(lnot_b8, uint8_t, uint8_t, b8, x == 0)

/* ------------------------------------------------------------------ tables */

#define PW_TABLE_R(op) {[OPR_F32] = op##_f32, [OPR_F64] = op##_f64, [OPR_I64] = ident_i64, [OPR_I32] = ident_i32}
#define PW_TABLE_ALL(op) \
    {[OPR_F32] = op##_f32, [OPR_F64] = op##_f64, [OPR_I64] = op##_i64, [OPR_I32] = op##_i32, [OPR_BOOL] = op##_b8}
#define PW_TABLE_BITS(op) {[OPR_I64] = op##_i64, [OPR_I32] = op##_i32, [OPR_BOOL] = op##_b8}

static const ew_table acos_tab = EW_TABLE_F(acos), acosh_tab = EW_TABLE_F(acosh), asin_tab = EW_TABLE_F(asin),
                      asinh_tab = EW_TABLE_F(asinh), atan_tab = EW_TABLE_F(atan), atanh_tab = EW_TABLE_F(atanh),
                      cos_tab = EW_TABLE_F(cos), cosh_tab = EW_TABLE_F(cosh), sin_tab = EW_TABLE_F(sin),
                      sinh_tab = EW_TABLE_F(sinh), tan_tab = EW_TABLE_F(tan), erf_tab = EW_TABLE_F(erf),
                      expm1_tab = EW_TABLE_F(expm1), log10_tab = EW_TABLE_F(log10), log1p_tab = EW_TABLE_F(log1p),
                      log2_tab = EW_TABLE_F(log2), reciprocal_tab = EW_TABLE_F(reciprocal),
                      rsqrt_tab = EW_TABLE_F(rsqrt);
static const ew_table ceil_tab = PW_TABLE_R(ceil), floor_tab = PW_TABLE_R(floor), round_tab = PW_TABLE_R(round),
                      trunc_tab = PW_TABLE_R(trunc);
static const ew_table isnan_tab = {[OPR_F32] = isnan_f32, [OPR_F64] = isnan_f64, [OPR_I64] = false_i64, [OPR_I32] = false_i32,
                                   [OPR_BOOL] = false_b8},
                      isinf_tab = {[OPR_F32] = isinf_f32, [OPR_F64] = isinf_f64, [OPR_I64] = false_i64, [OPR_I32] = false_i32,
                                   [OPR_BOOL] = false_b8};
static const ew_table fmod_tab = EW_TABLE_FI(fmod), remainder_tab = EW_TABLE_FI(remainder),
                      atan2_tab = EW_TABLE_F(atan2), powt_tab = EW_TABLE_FI(powt),
                      maximum_tab = PW_TABLE_ALL(maximum), minimum_tab = PW_TABLE_ALL(minimum);
static const ew_table divtrunc_tab = EW_TABLE_FI(divtrunc), divfloor_tab = EW_TABLE_FI(divfloor),
                      divtrue_tab = EW_TABLE_F(divtrue);
static const ew_table band_tab = PW_TABLE_BITS(band), bor_tab = PW_TABLE_BITS(bor), bxor_tab = PW_TABLE_BITS(bxor),
                      bnot_tab = PW_TABLE_BITS(bnot);
static const ew_table land_tab = PW_TABLE_ALL(land), lor_tab = PW_TABLE_ALL(lor), lxor_tab = PW_TABLE_ALL(lxor),
                      lnot_tab = PW_TABLE_ALL(lnot);

/* ------------------------------------------------------------------ kernels */

#define PW_KERNEL(name, op, tab, nargs, nin, bool_out)                   \
    static int k_##name(const opr_kernel_call *c)                        \
    {                                                                    \
        return ew_run(c, op, nargs, nin, tab, bool_out, &ew_none);       \
    }

PW_KERNEL(acos, "acos", acos_tab, 1, 1, false)
PW_KERNEL(acosh, "acosh", acosh_tab, 1, 1, false)
PW_KERNEL(asin, "asin", asin_tab, 1, 1, false)
PW_KERNEL(asinh, "asinh", asinh_tab, 1, 1, false)
PW_KERNEL(atan, "atan", atan_tab, 1, 1, false)
PW_KERNEL(atanh, "atanh", atanh_tab, 1, 1, false)
PW_KERNEL(cos, "cos", cos_tab, 1, 1, false)
PW_KERNEL(cosh, "cosh", cosh_tab, 1, 1, false)
PW_KERNEL(sin, "sin", sin_tab, 1, 1, false)
PW_KERNEL(sinh, "sinh", sinh_tab, 1, 1, false)
PW_KERNEL(tan, "tan", tan_tab, 1, 1, false)
PW_KERNEL(erf, "erf", erf_tab, 1, 1, false)
PW_KERNEL(expm1, "expm1", expm1_tab, 1, 1, false)
PW_KERNEL(log10, "log10", log10_tab, 1, 1, false)
PW_KERNEL(log1p, "log1p", log1p_tab, 1, 1, false)
PW_KERNEL(log2, "log2", log2_tab, 1, 1, false)
PW_KERNEL(reciprocal, "reciprocal", reciprocal_tab, 1, 1, false)
PW_KERNEL(rsqrt, "rsqrt", rsqrt_tab, 1, 1, false)
PW_KERNEL(ceil, "ceil", ceil_tab, 1, 1, false)
PW_KERNEL(floor, "floor", floor_tab, 1, 1, false)
PW_KERNEL(round, "round", round_tab, 1, 1, false)
PW_KERNEL(trunc, "trunc", trunc_tab, 1, 1, false)
PW_KERNEL(isnan, "isnan", isnan_tab, 1, 1, true)
PW_KERNEL(isinf, "isinf", isinf_tab, 1, 1, true)
PW_KERNEL(atan2, "atan2", atan2_tab, 2, 2, false)
PW_KERNEL(powt, "pow.Tensor_Tensor", powt_tab, 2, 2, false)
PW_KERNEL(maximum, "maximum", maximum_tab, 2, 2, false)
PW_KERNEL(minimum, "minimum", minimum_tab, 2, 2, false)
PW_KERNEL(band, "bitwise_and", band_tab, 2, 2, false)
PW_KERNEL(bor, "bitwise_or", bor_tab, 2, 2, false)
PW_KERNEL(bxor, "bitwise_xor", bxor_tab, 2, 2, false)
PW_KERNEL(bnot, "bitwise_not", bnot_tab, 1, 1, false)
PW_KERNEL(land, "logical_and", land_tab, 2, 2, true)
PW_KERNEL(lor, "logical_or", lor_tab, 2, 2, true)
PW_KERNEL(lxor, "logical_xor", lxor_tab, 2, 2, true)
PW_KERNEL(lnot, "logical_not", lnot_tab, 1, 1, true)

/* An integer divisor (argument 1) with a zero in it: PyTorch raises ZeroDivisionError
 * for integer fmod, remainder and rounded division; so do we, before anything is
 * written. */
static int pw_check_divisor(const opr_kernel_call *c, const char *op)
{
    const opr_tensor_view *a = cpu_arg_t(c, 0), *b = cpu_arg_t(c, 1);
    if (!a || !b || a->dtype != b->dtype || (b->dtype != OPR_I64 && b->dtype != OPR_I32) || !c->nout ||
        c->outputs[0]->numel == 0)
        return OPR_OK; /* ew_run reports malformed calls; an empty output divides nothing */
    for (int64_t i = 0; i < b->numel; i++) {
        const int64_t off = cpu_offset_of(b, i);
        const bool zero = b->dtype == OPR_I64 ? ((const int64_t *)b->data)[off] == 0 : ((const int32_t *)b->data)[off] == 0;
        if (zero) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: ZeroDivisionError", op);
    }
    return OPR_OK;
}

static int k_fmod(const opr_kernel_call *c)
{
    int rc = pw_check_divisor(c, "fmod");
    return rc ? rc : ew_run(c, "fmod", 2, 2, fmod_tab, false, &ew_none);
}
static int k_remainder(const opr_kernel_call *c)
{
    int rc = pw_check_divisor(c, "remainder");
    return rc ? rc : ew_run(c, "remainder", 2, 2, remainder_tab, false, &ew_none);
}

/* div.Tensor_mode(self, other, rounding_mode): None is true division (floats only, as
 * the schema's dtypes say for div), "trunc" and "floor" round the quotient. */
static int k_div_mode(const opr_kernel_call *c)
{
    const char *op = "div.Tensor_mode";
    if (c->nargs < 3) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 arguments", op);
    const opr_kernel_arg *m = c->args[2];
    const ew_loop_fn *tab = divtrue_tab;
    if (m->kind == OPR_ARG_STRING && !strcmp(m->u.s, "trunc")) tab = divtrunc_tab;
    else if (m->kind == OPR_ARG_STRING && !strcmp(m->u.s, "floor")) tab = divfloor_tab;
    else if (m->kind != OPR_ARG_NONE)
        return CPU_FAIL(c, OPR_ERR_INVALID,
                        "%s: div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'", op,
                        m->kind == OPR_ARG_STRING ? m->u.s : "?");
    if (tab != divtrue_tab) {
        int rc = pw_check_divisor(c, "div");
        if (rc) return rc;
    }
    return ew_run(c, op, 3, 2, tab, false, &ew_none);
}

/* ------------------------------------------------------------------ registration */

int cpu_register_pointwise(opr_plugin *self)
{
    static const struct {
        const char *op;
        const ew_loop_fn *table;
        opr_kernel_fn fn;
    } ops[] = {
        {"acos", acos_tab, k_acos},
        {"acosh", acosh_tab, k_acosh},
        {"asin", asin_tab, k_asin},
        {"asinh", asinh_tab, k_asinh},
        {"atan", atan_tab, k_atan},
        {"atanh", atanh_tab, k_atanh},
        {"cos", cos_tab, k_cos},
        {"cosh", cosh_tab, k_cosh},
        {"sin", sin_tab, k_sin},
        {"sinh", sinh_tab, k_sinh},
        {"tan", tan_tab, k_tan},
        {"erf", erf_tab, k_erf},
        {"expm1", expm1_tab, k_expm1},
        {"log10", log10_tab, k_log10},
        {"log1p", log1p_tab, k_log1p},
        {"log2", log2_tab, k_log2},
        {"reciprocal", reciprocal_tab, k_reciprocal},
        {"rsqrt", rsqrt_tab, k_rsqrt},
        {"ceil", ceil_tab, k_ceil},
        {"floor", floor_tab, k_floor},
        {"round", round_tab, k_round},
        {"trunc", trunc_tab, k_trunc},
        {"isnan", isnan_tab, k_isnan},
        {"isinf", isinf_tab, k_isinf},
        {"fmod", fmod_tab, k_fmod},
        {"remainder", remainder_tab, k_remainder},
        {"atan2", atan2_tab, k_atan2},
        {"pow.Tensor_Tensor", powt_tab, k_powt},
        {"maximum", maximum_tab, k_maximum},
        {"minimum", minimum_tab, k_minimum},
        {"div.Tensor_mode", divtrunc_tab, k_div_mode}, /* f32, f64, i64 */
        {"bitwise_and", band_tab, k_band},
        {"bitwise_or", bor_tab, k_bor},
        {"bitwise_xor", bxor_tab, k_bxor},
        {"bitwise_not", bnot_tab, k_bnot},
        {"logical_and", land_tab, k_land},
        {"logical_or", lor_tab, k_lor},
        {"logical_xor", lxor_tab, k_lxor},
        {"logical_not", lnot_tab, k_lnot},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        /* f16 and bf16 through f32 (cpu_half.c) */
        int rc = cpu_register_upcast(self, ops[i].op, ew_mask(ops[i].table), ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
