/* Factory kernels: zeros, ones, full, arange, zeros_like, ones_like.
 *
 * The host has already allocated outputs[0] with its final dtype and shape, so a
 * factory only writes values; outputs of out-of-place calls are contiguous. */
#include "cpu_common.h"
#include "cpu_kernels.h"

#include <math.h>

/* Doubles at or beyond 2^63 in magnitude have no i64 value; converting them is
 * undefined behaviour in C, so they are refused instead. */
static bool fits_i64(double v)
{
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

#define FILL_LOOP(T, ptr, n, value)                                        \
    do {                                                                   \
        T *p_ = (T *)(ptr);                                                \
        const T v_ = (value);                                              \
        const int64_t n_ = (n);                                            \
        const bool par_ = n_ >= CPU_PAR_THRESHOLD;                         \
        _Pragma("omp parallel for if (par_)")                              \
        for (int64_t i_ = 0; i_ < n_; i_++) p_[i_] = v_;                   \
    } while (0)

/* Writes v, converted to out's dtype as fill_ converts it, into every element. */
static int fill_value(const opr_kernel_call *c, const char *op, opr_tensor_view *out, double v)
{
    if (out->numel == 0) return OPR_OK;
    switch (out->dtype) {
    case OPR_F32: FILL_LOOP(float, out->data, out->numel, (float)v); return OPR_OK;
    case OPR_F64: FILL_LOOP(double, out->data, out->numel, v); return OPR_OK;
    case OPR_I64:
        if (!fits_i64(v))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: value cannot be converted to type int64_t without overflow: %g",
                            op, v);
        FILL_LOOP(int64_t, out->data, out->numel, (int64_t)v);
        return OPR_OK;
    case OPR_I32:
        if (!(v >= -2147483648.0 && v < 2147483648.0))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: value cannot be converted to type int32_t without overflow: %g",
                            op, v);
        FILL_LOOP(int32_t, out->data, out->numel, (int32_t)v);
        return OPR_OK;
    case OPR_BOOL: memset(out->data, v != 0, (size_t)out->numel); return OPR_OK;
    default:
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", op,
                        cpu_dtype_name(out->dtype));
    }
}

static int k_zeros(const opr_kernel_call *c) { return fill_value(c, c->op, c->outputs[0], 0.0); }
static int k_ones(const opr_kernel_call *c) { return fill_value(c, c->op, c->outputs[0], 1.0); }

static int k_full(const opr_kernel_call *c)
{
    return fill_value(c, c->op, c->outputs[0], cpu_arg_d(c, 1));
}

/* Values are start + i * step with the output length the host computed. Like PyTorch,
 * floating outputs are computed in double and rounded once, while integer outputs
 * convert start and step to i64 first (arange(0.5, 3, 1.5, dtype=i64) is [0, 1]); an
 * i32 output refuses values beyond i32 rather than wrapping. */
static int k_arange(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    const double start = cpu_arg_d(c, 0), end = cpu_arg_d(c, 1), step = cpu_arg_d(c, 2);
    const int64_t n = out->numel;
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return CPU_FAIL(c, OPR_ERR_INVALID, "arange: start, end and step must be finite and step nonzero (got %g, %g, %g)",
                        start, end, step);
    if (n == 0) return OPR_OK;
    const bool par = n >= CPU_PAR_THRESHOLD;
    switch (out->dtype) {
    case OPR_F32: {
        float *p = out->data;
#pragma omp parallel for if (par)
        for (int64_t i = 0; i < n; i++) p[i] = (float)(start + (double)i * step);
        return OPR_OK;
    }
    case OPR_F64: {
        double *p = out->data;
#pragma omp parallel for if (par)
        for (int64_t i = 0; i < n; i++) p[i] = start + (double)i * step;
        return OPR_OK;
    }
    case OPR_I64: case OPR_I32: {
        const char *dn = cpu_dtype_name(out->dtype);
        if (!fits_i64(start) || !fits_i64(step))
            return CPU_FAIL(c, OPR_ERR_INVALID, "arange: start %g or step %g does not fit %s", start, step, dn);
        const int64_t s0 = (int64_t)start, st = (int64_t)step;
        if (st == 0)
            return CPU_FAIL(c, OPR_ERR_INVALID, "arange: step %g truncates to 0 for %s", step, dn);
        int64_t span, last;
        if (__builtin_mul_overflow(n - 1, st, &span) || __builtin_add_overflow(s0, span, &last) ||
            (out->dtype == OPR_I32 && (s0 < INT32_MIN || s0 > INT32_MAX || last < INT32_MIN || last > INT32_MAX)))
            return CPU_FAIL(c, OPR_ERR_INVALID, "arange: values overflow %s", dn);
        /* Every value lies between s0 and last, so i * st cannot overflow either. */
        if (out->dtype == OPR_I32) {
            int32_t *p = out->data;
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) p[i] = (int32_t)(s0 + i * st);
        } else {
            int64_t *p = out->data;
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) p[i] = s0 + i * st;
        }
        return OPR_OK;
    }
    default:
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "arange: dtype %s is not supported on cpu",
                        cpu_dtype_name(out->dtype));
    }
}

int cpu_register_factory(opr_plugin *self)
{
    const uint32_t all = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) |
                         OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_I32);
    const uint32_t numeric = all & ~OPR_DTYPE_BIT(OPR_BOOL);
    /* zeros_like and ones_like also in f16 and bf16 (through f32: cpu_half.c) */
    static const struct { const char *op; bool numeric_only; opr_kernel_fn fn; bool upcast; } table[] = {
        { "zeros", false, k_zeros, false },     { "ones", false, k_ones, false },
        { "full", false, k_full, false },       { "arange", true, k_arange, false },
        { "zeros_like", false, k_zeros, true }, { "ones_like", false, k_ones, true },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? cpu_register_upcast : cpu_register)(self, table[i].op,
                                                                        table[i].numeric_only ? numeric : all, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
