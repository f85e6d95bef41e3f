/* Vector loops of the CPU kernels, chosen once for the CPU the plugin runs on.
 *
 * The transcendental functions come from SLEEF (the vector libm PyTorch uses), not from
 * polynomials of our own. The plugin is built for baseline x86-64 (SSE2) so that one
 * binary runs everywhere; cpu_vmath_avx2.c alone is compiled with -mavx2 -mfma and
 * cpu_vmath_avx512.c with -mavx512f, and their loops are installed only when the CPU
 * (and the OS) support that ISA (cpu_vmath_init).
 *
 * Accuracy, f32 and f64 alike: exp, log, tanh, erf and pow are SLEEF's *_u10 functions, at
 * most 1.0 ULP from the correctly rounded result (so are the f32-only trigonometric,
 * hyperbolic, expm1/log1p/log2/log10 and atan2 loops: pointwise.yaml's ops, whose f64
 * kernels stay on libm; their fmod is exact); sqrt is the hardware instruction
 * (correctly rounded, 0.5 ULP); sigmoid is 1 / (1 + exp(-x)) on top of that exp, at most
 * 3 ULP where the result is normal (0 instead of a subnormal once exp(-x) overflows,
 * like the scalar formula). The three versions agree to those bounds, not bit for bit
 * (AVX2 and AVX-512 use FMA inside SLEEF).
 *
 * The sums use a fixed number of partial sums in a fixed order, written as plain loops
 * that both ISAs vectorise: the result does not depend on the CPU or the thread count. */
#ifndef OPREG_CPU_VMATH_H
#define OPREG_CPU_VMATH_H

#include <stdint.h>

/* Calls writing at least this many bytes of y store with streaming (non-temporal)
 * stores, which go to memory without first reading each line of y into the cache: a
 * third of the memory traffic of y = f(x) saved. An output this large is out of the L2
 * of any core and has mostly left the L3 by the time the next op reads it; smaller ones
 * are stored normally and stay in cache for that op. The values are the same either way. */
#define CPU_VM_STREAM_BYTES ((int64_t)8 << 20)

/* y[i] = f(x[i]) for i < n; x and y may be the same array. */
typedef void (*cpu_vfn_f32)(int64_t n, const float *x, float *y);
typedef void (*cpu_vfn_f64)(int64_t n, const double *x, double *y);
/* y[i] = f(x[i], e) for a scalar e: pow(x[i], e), exp(x[i] - e). */
typedef void (*cpu_vfn1_f32)(int64_t n, const float *x, float e, float *y);
typedef void (*cpu_vfn1_f64)(int64_t n, const double *x, double e, double *y);
/* y[i] = f(a[i], b[i]): atan2, fmod. */
typedef void (*cpu_vfn2_f32)(int64_t n, const float *a, const float *b, float *y);
/* y[i] = f(a[i], b[i]) in f64: maximum, minimum. */
typedef void (*cpu_vfn2_f64)(int64_t n, const double *a, const double *b, double *y);
/* max_*: the largest x[i] that is not NaN; -inf if there is none (n = 0 included).
 * amax_* / amin_*: the largest / smallest x[i], NaN if any x[i] is NaN (PyTorch's
 * amax, amin); -inf / +inf for n = 0. */
typedef float (*cpu_vmax_f32)(int64_t n, const float *x);
typedef double (*cpu_vmax_f64)(int64_t n, const double *x);
/* Sum of x[i] (or of x[i]^2), accumulated in double. */
typedef double (*cpu_vsum_f32)(int64_t n, const float *x);
typedef double (*cpu_vsum_f64)(int64_t n, const double *x);
/* acc[i] += x[i]: one row of a sum over the leading dim. */
typedef void (*cpu_vaddrow_f32)(int64_t n, const float *x, double *acc);
typedef void (*cpu_vaddrow_f64)(int64_t n, const double *x, double *acc);
/* acc[i] += the sum of x[i + k ld] for k < 8, added pairwise ((0 + 1) + (2 + 3)) +
 * ((4 + 5) + (6 + 7)): eight rows ld apart. */
typedef void (*cpu_vaddrow8_f32)(int64_t n, const float *x, int64_t ld, double *acc);
typedef void (*cpu_vaddrow8_f64)(int64_t n, const double *x, int64_t ld, double *acc);

typedef struct cpu_vmath {
    const char *isa; /* "avx512", "avx2" or "sse2" */
    cpu_vfn_f32 exp_f32, log_f32, tanh_f32, erf_f32, sigmoid_f32, sqrt_f32, relu_f32;
    cpu_vfn_f64 exp_f64, log_f64, tanh_f64, erf_f64, sigmoid_f64, sqrt_f64, relu_f64;
    cpu_vfn_f32 sin_f32, cos_f32, tan_f32, asin_f32, acos_f32, atan_f32, sinh_f32, cosh_f32, asinh_f32, acosh_f32,
        atanh_f32, expm1_f32, log1p_f32, log2_f32, log10_f32;
    cpu_vfn2_f32 atan2_f32, fmod_f32;
    /* maximum / minimum: the larger / smaller of a[i] and b[i], NaN where either is NaN,
     * a[i] at a tie (of -0 and +0 too, as PyTorch's scalar std::max); y may be a or b. */
    cpu_vfn2_f32 maximum_f32, minimum_f32;
    cpu_vfn2_f64 maximum_f64, minimum_f64;
    cpu_vfn1_f32 pow_f32, expsub_f32;
    cpu_vfn1_f64 pow_f64, expsub_f64;
    cpu_vmax_f32 max_f32, amax_f32, amin_f32;
    cpu_vmax_f64 max_f64, amax_f64, amin_f64;
    cpu_vsum_f32 sum_f32, sumsq_f32;
    cpu_vsum_f64 sum_f64, sumsq_f64;
    /* y[i] += x[i] (index_put's accumulation): cpu_vfn_* with y read too */
    cpu_vfn_f32 addto_f32;
    cpu_vfn_f64 addto_f64;
    cpu_vaddrow_f32 addrow_f32;
    cpu_vaddrow_f64 addrow_f64;
    cpu_vaddrow8_f32 addrow8_f32;
    cpu_vaddrow8_f64 addrow8_f64;
} cpu_vmath;

/* The loops for this CPU. Valid after cpu_vmath_init (run once per process, with
 * pthread_once, by the plugin init); never changes afterwards. */
extern cpu_vmath cpu_vm;

/* Picks the loops (from opr_plugin_init, before any kernel can run; not thread-safe
 * itself: the plugin runs it once through pthread_once). */
void cpu_vmath_init(void);

/* The sets cpu_vmath_init chooses from (cpu_vmath_sse2.c, cpu_vmath_avx2.c,
 * cpu_vmath_avx512.c). */
extern const cpu_vmath cpu_vmath_sse2;
extern const cpu_vmath cpu_vmath_avx2;
extern const cpu_vmath cpu_vmath_avx512;

#endif /* OPREG_CPU_VMATH_H */
