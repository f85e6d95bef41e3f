/* The loops of cpu_vmath.h, written once and stamped out per ISA: cpu_vmath_sse2.c,
 * cpu_vmath_avx2.c and cpu_vmath_avx512.c define the vector types, their load, store
 * (plain and streaming) and arithmetic and the SLEEF functions of that width (VM_*),
 * then include this file, which defines the table VM_TABLE. Not a normal header:
 * include it only there, once. */
#include "cpu_vmath.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <math.h>

/* y[0..cnt) = EXPR of x[0..cnt), cnt < W, through a zero-padded vector. */
#define VM_MAP_PADDED(T, VT, W, LOAD, STORE, EXPR, xs, ys, cnt)                          \
    do {                                                                                  \
        T buf[W] = {0};                                                                   \
        memcpy(buf, xs, (size_t)(cnt) * sizeof(T));                                       \
        const VT v = LOAD(buf);                                                           \
        STORE(buf, EXPR);                                                                 \
        memcpy(ys, buf, (size_t)(cnt) * sizeof(T));                                       \
    } while (0)

/* A SLEEF loop: full vectors, then the tail through a zero-padded vector, so every
 * element goes through the same code whatever n and its position are. A large output
 * (CPU_VM_STREAM_BYTES) is streamed: its head up to a vector-aligned y goes through the
 * padded vector too, then STREAM (an aligned streaming store), then a fence so that
 * the stores are seen before whatever the caller does next. */
#define VM_MAP(name, T, VT, W, LOAD, STORE, STREAM, EXPR)                                 \
    static void name(int64_t n, const T *x, T *y)                                         \
    {                                                                                     \
        int64_t i = 0;                                                                    \
        const size_t vbytes = (W) * sizeof(T);                                            \
        if (n * (int64_t)sizeof(T) >= CPU_VM_STREAM_BYTES && (uintptr_t)y % sizeof(T) == 0) { \
            i = (int64_t)((vbytes - (uintptr_t)y % vbytes) % vbytes / sizeof(T));         \
            if (i) VM_MAP_PADDED(T, VT, W, LOAD, STORE, EXPR, x, y, i);                   \
            for (; i + (W) <= n; i += (W)) {                                              \
                const VT v = LOAD(x + i);                                                 \
                STREAM(y + i, EXPR);                                                      \
            }                                                                             \
            _mm_sfence();                                                                 \
        } else {                                                                          \
            for (; i + (W) <= n; i += (W)) {                                              \
                const VT v = LOAD(x + i);                                                 \
                STORE(y + i, EXPR);                                                       \
            }                                                                             \
        }                                                                                 \
        if (i < n) VM_MAP_PADDED(T, VT, W, LOAD, STORE, EXPR, x + i, y + i, n - i);       \
    }

/* y[i] = F(x[i], e) for a scalar e (pow: x^e; expsub: exp(x - e)). */
#define VM_MAP_SCALAR(name, T, VT, W, LOAD, STORE, SET1, F)                               \
    static void name(int64_t n, const T *x, T e, T *y)                                    \
    {                                                                                     \
        const VT ve = SET1(e);                                                            \
        int64_t i = 0;                                                                    \
        for (; i + (W) <= n; i += (W)) STORE(y + i, F(LOAD(x + i), ve));                  \
        if (i < n) VM_MAP_PADDED(T, VT, W, LOAD, STORE, F(v, ve), x + i, y + i, n - i);   \
    }

/* The largest x[i] that is not NaN, -inf if there is none: one running maximum per
 * lane of VM_MAX_LANES (independent chains the compiler turns into vector maxima, enough
 * of them to cover the latency of each). */
#define VM_MAX_LANES 64
#define VM_MAX(name, T)                                                                   \
    static T name(int64_t n, const T *x)                                                  \
    {                                                                                     \
        T m[VM_MAX_LANES];                                                                \
        for (int k = 0; k < VM_MAX_LANES; k++) m[k] = -(T)INFINITY;                       \
        int64_t i = 0;                                                                    \
        for (; i + VM_MAX_LANES <= n; i += VM_MAX_LANES)                                  \
            for (int k = 0; k < VM_MAX_LANES; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k]; \
        for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];                              \
        for (int k = 1; k < VM_MAX_LANES; k++) m[0] = m[k] > m[0] ? m[k] : m[0];          \
        return m[0];                                                                      \
    }

/* The NaN-propagating extremum of x (amax / amin): four vectors of running extrema
 * (PICK: the vector max / min, which passes over a NaN in its first operand) and, apart
 * from them, two vectors collecting whether a NaN went by (UNORD, or-ed in); the tail
 * element by element. Keeping the NaN out of the extrema's chain of dependent
 * operations (one max a vector) lets the loads run far enough ahead to stream rows
 * from memory at PyTorch's rate; a select-based loop that carried the NaN in the
 * extrema ran 1.3x slower. BEATS(v, m): v replaces m. */
#define VM_EXT(name, T, VT, W, LOAD, STORE, SET1, PICK, UNORD, OR, BEATS, EMPTY)          \
    static T name(int64_t n, const T *x)                                                  \
    {                                                                                     \
        VT m0 = SET1(EMPTY), m1 = m0, m2 = m0, m3 = m0, q0 = SET1((T)0), q1 = q0;          \
        int64_t i = 0;                                                                    \
        for (; i + 4 * (W) <= n; i += 4 * (W)) {                                          \
            const VT a = LOAD(x + i), b = LOAD(x + i + (W));                              \
            const VT c = LOAD(x + i + 2 * (W)), d = LOAD(x + i + 3 * (W));                \
            m0 = PICK(a, m0);                                                             \
            m1 = PICK(b, m1);                                                             \
            m2 = PICK(c, m2);                                                             \
            m3 = PICK(d, m3);                                                             \
            q0 = OR(q0, UNORD(a, b));                                                     \
            q1 = OR(q1, UNORD(c, d));                                                     \
        }                                                                                 \
        T m[W], q[W];                                                                     \
        STORE(m, PICK(PICK(m0, m1), PICK(m2, m3)));                                       \
        STORE(q, OR(q0, q1));                                                             \
        bool nan = false;                                                                 \
        for (int k = 0; k < (W); k++) nan = nan || q[k] != 0; /* a NaN is never 0 */      \
        for (int k = 1; k < (W); k++) m[0] = BEATS(m[k], m[0]) ? m[k] : m[0];             \
        for (; i < n; i++) {                                                              \
            nan = nan || x[i] != x[i];                                                    \
            m[0] = BEATS(x[i], m[0]) ? x[i] : m[0];                                       \
        }                                                                                 \
        return nan ? (T)NAN : m[0];                                                       \
    }
#define VM_GT(a, b) ((a) > (b))
#define VM_LT(a, b) ((a) < (b))

/* maximum / minimum of two arrays (cpu_vmath.h says the rule): plain selects, which
 * every ISA's compiler turns into vector compares and blends. */
#define VM_PICK2(name, T, BEATS)                                                          \
    static void name(int64_t n, const T *a, const T *b, T *y)                             \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                 \
            const T u = a[i], v = b[i];                                                   \
            y[i] = u != u ? u : BEATS(v, u) || v != v ? v : u;                            \
        }                                                                                 \
    }

/* Partial sums: element i goes to acc[i % VM_NACC] (the tail to acc[0]), then the
 * partials are added pairwise. Independent accumulators break the chain of dependent
 * adds, and the fixed layout keeps the result the same for every ISA. */
#define VM_NACC 16
#define VM_SUM(name, T, TERM)                                                             \
    static double name(int64_t n, const T *x)                                             \
    {                                                                                     \
        double acc[VM_NACC] = {0};                                                        \
        int64_t i = 0;                                                                    \
        for (; i + VM_NACC <= n; i += VM_NACC)                                            \
            for (int k = 0; k < VM_NACC; k++) {                                           \
                const double v = (double)x[i + k];                                        \
                acc[k] += TERM;                                                           \
            }                                                                             \
        for (; i < n; i++) {                                                              \
            const double v = (double)x[i];                                                \
            acc[0] += TERM;                                                               \
        }                                                                                 \
        for (int w = VM_NACC / 2; w > 0; w /= 2)                                          \
            for (int k = 0; k < w; k++) acc[k] += acc[k + w];                             \
        return acc[0];                                                                    \
    }

#define VM_ADDTO(name, T)                                                                 \
    static void name(int64_t n, const T *x, T *y)                                         \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) y[i] += x[i];                                     \
    }

#define VM_ADDROW(name, T)                                                                \
    static void name(int64_t n, const T *x, double *acc)                                  \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) acc[i] += (double)x[i];                           \
    }

/* Eight rows ld apart at once, added pairwise before they reach acc: an eighth of the
 * accumulator traffic of eight calls of VM_ADDROW (the column sums' limit). */
#define VM_ADDROW8(name, T)                                                               \
    static void name(int64_t n, const T *x, int64_t ld, double *acc)                      \
    {                                                                                     \
        const T *r[8];                                                                    \
        for (int k = 0; k < 8; k++) r[k] = x + k * ld;                                    \
        for (int64_t i = 0; i < n; i++) {                                                 \
            const double a = (double)r[0][i] + (double)r[1][i], b = (double)r[2][i] + (double)r[3][i]; \
            const double c = (double)r[4][i] + (double)r[5][i], d = (double)r[6][i] + (double)r[7][i]; \
            acc[i] += (a + b) + (c + d);                                                  \
        }                                                                                 \
    }

/* The maps of one dtype: SUF names the functions (f32, f64), T is the element type and
 * S picks that width's VM_* macros (F or D). */
#define VM_EXPSUBF(v, e) VM_EXPF(VM_SUBF(v, e))
#define VM_EXPSUBD(v, e) VM_EXPD(VM_SUBD(v, e))
#define VM_MAPS(SUF, T, S)                                                                            \
    VM_MAP(vm_exp_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S, VM_EXP##S(v))     \
    VM_MAP(vm_log_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S, VM_LOG##S(v))     \
    VM_MAP(vm_tanh_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S, VM_TANH##S(v))   \
    VM_MAP(vm_erf_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S, VM_ERF##S(v))     \
    VM_MAP(vm_sqrt_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S, VM_SQRT##S(v))   \
    VM_MAP(vm_sigmoid_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S,              \
           VM_DIV##S(VM_SET1##S((T)1), VM_ADD##S(VM_SET1##S((T)1), VM_EXP##S(VM_SUB##S(VM_SET1##S((T)0), v))))) \
    /* max(0, x) is x < 0 ? 0 : x exactly: the vector max returns its second operand */           \
    /* when either is NaN (NaN stays NaN, like PyTorch's relu) and when both are zeros. */         \
    VM_MAP(vm_relu_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_STREAM##S,                 \
           VM_MAX##S(VM_SET1##S((T)0), v))                                                            \
    VM_MAP_SCALAR(vm_pow_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_SET1##S, VM_POW##S)  \
    VM_MAP_SCALAR(vm_expsub_##SUF, T, VM_V##S, VM_W##S, VM_LOAD##S, VM_STORE##S, VM_SET1##S, VM_EXPSUB##S)

VM_MAPS(f32, float, F)
VM_MAPS(f64, double, D)

/* pointwise.yaml's functions, f32 only */
#define VM_MAP_SLEEFF(fn) VM_MAP(vm_##fn##_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_STREAMF, VM_SLEEFF(fn)(v))
VM_MAP_SLEEFF(sin)
VM_MAP_SLEEFF(cos)
VM_MAP_SLEEFF(tan)
VM_MAP_SLEEFF(asin)
VM_MAP_SLEEFF(acos)
VM_MAP_SLEEFF(atan)
VM_MAP_SLEEFF(sinh)
VM_MAP_SLEEFF(cosh)
VM_MAP_SLEEFF(asinh)
VM_MAP_SLEEFF(acosh)
VM_MAP_SLEEFF(atanh)
VM_MAP_SLEEFF(expm1)
VM_MAP_SLEEFF(log1p)
VM_MAP_SLEEFF(log2)
VM_MAP_SLEEFF(log10)

/* y[i] = F(a[i], b[i]) (atan2, fmod): full vectors, then the tail through zero-padded
 * vectors. */
#define VM_MAP2(name, F)                                                                  \
    static void name(int64_t n, const float *a, const float *b, float *y)                 \
    {                                                                                     \
        int64_t i = 0;                                                                    \
        for (; i + VM_WF <= n; i += VM_WF) VM_STOREF(y + i, F(VM_LOADF(a + i), VM_LOADF(b + i))); \
        if (i < n) {                                                                      \
            float ab[VM_WF] = {0}, bb[VM_WF] = {0};                                       \
            for (int k = 0; k < VM_WF; k++) bb[k] = 1; /* no 0 divisor in the padding */   \
            memcpy(ab, a + i, (size_t)(n - i) * sizeof(float));                           \
            memcpy(bb, b + i, (size_t)(n - i) * sizeof(float));                           \
            VM_STOREF(ab, F(VM_LOADF(ab), VM_LOADF(bb)));                                 \
            memcpy(y + i, ab, (size_t)(n - i) * sizeof(float));                           \
        }                                                                                 \
    }
VM_MAP2(vm_atan2_f32, VM_SLEEFF(atan2))
VM_MAP2(vm_fmod_f32, VM_SLEEF_FMODF) /* exact, as libm's */

VM_MAX(vm_max_f32, float)
VM_MAX(vm_max_f64, double)
VM_EXT(vm_amax_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_SET1F, VM_MAXF, VM_UNORDF, VM_ORF, VM_GT, -INFINITY)
VM_EXT(vm_amax_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_SET1D, VM_MAXD, VM_UNORDD, VM_ORD, VM_GT, -INFINITY)
VM_EXT(vm_amin_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_SET1F, VM_MINF, VM_UNORDF, VM_ORF, VM_LT, INFINITY)
VM_EXT(vm_amin_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_SET1D, VM_MIND, VM_UNORDD, VM_ORD, VM_LT, INFINITY)
VM_PICK2(vm_maximum_f32, float, VM_GT)
VM_PICK2(vm_maximum_f64, double, VM_GT)
VM_PICK2(vm_minimum_f32, float, VM_LT)
VM_PICK2(vm_minimum_f64, double, VM_LT)
VM_SUM(vm_sum_f32, float, v)
VM_SUM(vm_sumsq_f32, float, v * v)
VM_SUM(vm_sum_f64, double, v)
VM_SUM(vm_sumsq_f64, double, v * v)
VM_ADDTO(vm_addto_f32, float)
VM_ADDTO(vm_addto_f64, double)
VM_ADDROW(vm_addrow_f32, float)
VM_ADDROW(vm_addrow_f64, double)
VM_ADDROW8(vm_addrow8_f32, float)
VM_ADDROW8(vm_addrow8_f64, double)

const cpu_vmath VM_TABLE = {
    .isa = VM_ISA,
    .exp_f32 = vm_exp_f32, .log_f32 = vm_log_f32, .tanh_f32 = vm_tanh_f32, .erf_f32 = vm_erf_f32,
    .sigmoid_f32 = vm_sigmoid_f32, .sqrt_f32 = vm_sqrt_f32, .relu_f32 = vm_relu_f32,
    .exp_f64 = vm_exp_f64, .log_f64 = vm_log_f64, .tanh_f64 = vm_tanh_f64, .erf_f64 = vm_erf_f64,
    .sigmoid_f64 = vm_sigmoid_f64, .sqrt_f64 = vm_sqrt_f64, .relu_f64 = vm_relu_f64,
    .sin_f32 = vm_sin_f32, .cos_f32 = vm_cos_f32, .tan_f32 = vm_tan_f32, .asin_f32 = vm_asin_f32,
    .acos_f32 = vm_acos_f32, .atan_f32 = vm_atan_f32, .sinh_f32 = vm_sinh_f32, .cosh_f32 = vm_cosh_f32,
    .asinh_f32 = vm_asinh_f32, .acosh_f32 = vm_acosh_f32, .atanh_f32 = vm_atanh_f32, .expm1_f32 = vm_expm1_f32,
    .log1p_f32 = vm_log1p_f32, .log2_f32 = vm_log2_f32, .log10_f32 = vm_log10_f32, .atan2_f32 = vm_atan2_f32,
    .fmod_f32 = vm_fmod_f32,
    .maximum_f32 = vm_maximum_f32, .minimum_f32 = vm_minimum_f32,
    .maximum_f64 = vm_maximum_f64, .minimum_f64 = vm_minimum_f64,
    .pow_f32 = vm_pow_f32, .pow_f64 = vm_pow_f64,
    .expsub_f32 = vm_expsub_f32, .expsub_f64 = vm_expsub_f64,
    .max_f32 = vm_max_f32, .max_f64 = vm_max_f64,
    .amax_f32 = vm_amax_f32, .amax_f64 = vm_amax_f64, .amin_f32 = vm_amin_f32, .amin_f64 = vm_amin_f64,
    .sum_f32 = vm_sum_f32, .sumsq_f32 = vm_sumsq_f32,
    .sum_f64 = vm_sum_f64, .sumsq_f64 = vm_sumsq_f64,
    .addto_f32 = vm_addto_f32, .addto_f64 = vm_addto_f64,
    .addrow_f32 = vm_addrow_f32, .addrow_f64 = vm_addrow_f64,
    .addrow8_f32 = vm_addrow8_f32, .addrow8_f64 = vm_addrow8_f64,
};
