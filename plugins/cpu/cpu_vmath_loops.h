/* The loops of cpu_vmath.h, written once and stamped out per ISA: cpu_vmath_sse2.c and
 * cpu_vmath_avx2.c define the vector types, their load/store/arithmetic and the SLEEF
 * functions of that width (VM_*), then include this file, which defines the table
 * VM_TABLE. Not a normal header: include it only there, once. */
#include "cpu_vmath.h"

#include <string.h>

/* A SLEEF loop: full vectors, then the tail through a zero-padded vector, so every
 * element goes through the same code whatever n and its position are. */
#define VM_MAP(name, T, VT, W, LOAD, STORE, EXPR)                                         \
    static void name(int64_t n, const T *x, T *y)                                         \
    {                                                                                     \
        int64_t i = 0;                                                                    \
        for (; i + (W) <= n; i += (W)) {                                                  \
            const VT v = LOAD(x + i);                                                     \
            STORE(y + i, EXPR);                                                           \
        }                                                                                 \
        if (i < n) {                                                                      \
            T buf[W] = {0};                                                               \
            memcpy(buf, x + i, (size_t)(n - i) * sizeof(T));                              \
            const VT v = LOAD(buf);                                                       \
            STORE(buf, EXPR);                                                             \
            memcpy(y + i, buf, (size_t)(n - i) * sizeof(T));                              \
        }                                                                                 \
    }

#define VM_POW(name, T, VT, W, LOAD, STORE, SET1, POW)                                    \
    static void name(int64_t n, const T *x, T e, T *y)                                    \
    {                                                                                     \
        const VT ve = SET1(e);                                                            \
        int64_t i = 0;                                                                    \
        for (; i + (W) <= n; i += (W)) STORE(y + i, POW(LOAD(x + i), ve));                \
        if (i < n) {                                                                      \
            T buf[W] = {0};                                                               \
            memcpy(buf, x + i, (size_t)(n - i) * sizeof(T));                              \
            STORE(buf, POW(LOAD(buf), ve));                                               \
            memcpy(y + i, buf, (size_t)(n - i) * sizeof(T));                              \
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

#define VM_ADDROW(name, T)                                                                \
    static void name(int64_t n, const T *x, double *acc)                                  \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) acc[i] += (double)x[i];                           \
    }

/* NaN stays NaN (x < 0 is false for it), like PyTorch's relu. */
#define VM_RELU(name, T)                                                                  \
    static void name(int64_t n, const T *x, T *y)                                         \
    {                                                                                     \
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i];                       \
    }

VM_MAP(vm_exp_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_EXPF(v))
VM_MAP(vm_log_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_LOGF(v))
VM_MAP(vm_tanh_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_TANHF(v))
VM_MAP(vm_erf_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_ERFF(v))
VM_MAP(vm_sqrt_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_SQRTF(v))
VM_MAP(vm_sigmoid_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF,
       VM_DIVF(VM_SET1F(1.0f), VM_ADDF(VM_SET1F(1.0f), VM_EXPF(VM_SUBF(VM_SET1F(0.0f), v)))))
VM_POW(vm_pow_f32, float, VM_VF, VM_WF, VM_LOADF, VM_STOREF, VM_SET1F, VM_POWF)

VM_MAP(vm_exp_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_EXPD(v))
VM_MAP(vm_log_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_LOGD(v))
VM_MAP(vm_tanh_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_TANHD(v))
VM_MAP(vm_erf_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_ERFD(v))
VM_MAP(vm_sqrt_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_SQRTD(v))
VM_MAP(vm_sigmoid_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED,
       VM_DIVD(VM_SET1D(1.0), VM_ADDD(VM_SET1D(1.0), VM_EXPD(VM_SUBD(VM_SET1D(0.0), v)))))
VM_POW(vm_pow_f64, double, VM_VD, VM_WD, VM_LOADD, VM_STORED, VM_SET1D, VM_POWD)

VM_SUM(vm_sum_f32, float, v)
VM_SUM(vm_sumsq_f32, float, v * v)
VM_SUM(vm_sum_f64, double, v)
VM_SUM(vm_sumsq_f64, double, v * v)
VM_ADDROW(vm_addrow_f32, float)
VM_ADDROW(vm_addrow_f64, double)
VM_RELU(vm_relu_f32, float)
VM_RELU(vm_relu_f64, double)

const cpu_vmath VM_TABLE = {
    .isa = VM_ISA,
    .exp_f32 = vm_exp_f32, .log_f32 = vm_log_f32, .tanh_f32 = vm_tanh_f32, .erf_f32 = vm_erf_f32,
    .sigmoid_f32 = vm_sigmoid_f32, .sqrt_f32 = vm_sqrt_f32, .relu_f32 = vm_relu_f32,
    .exp_f64 = vm_exp_f64, .log_f64 = vm_log_f64, .tanh_f64 = vm_tanh_f64, .erf_f64 = vm_erf_f64,
    .sigmoid_f64 = vm_sigmoid_f64, .sqrt_f64 = vm_sqrt_f64, .relu_f64 = vm_relu_f64,
    .pow_f32 = vm_pow_f32, .pow_f64 = vm_pow_f64,
    .sum_f32 = vm_sum_f32, .sumsq_f32 = vm_sumsq_f32,
    .sum_f64 = vm_sum_f64, .sumsq_f64 = vm_sumsq_f64,
    .addrow_f32 = vm_addrow_f32, .addrow_f64 = vm_addrow_f64,
};
