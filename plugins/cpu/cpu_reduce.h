/* The reduction machinery of the CPU plugin, shared by cpu_reduce.c (the plan, the
 * driver and the column path; sum, mean, prod, norm) and cpu_reduce_extreme.c (max,
 * min, max.dim, min.dim, amax, amin); softmax and log_softmax are cpu_softmax.c.
 *
 * A reduction splits the input's dims into *kept* dims (one output element per index)
 * and *reduced* dims (folded into that element). red_plan_make does the split once,
 * matches the kept dims to the preallocated output(s) and merges dims that can be walked
 * as one. Each op then provides a small vtable (red_kind): fold a stretch of one slice
 * into an accumulator, merge two accumulators, store the result. The driver (red_run)
 * picks how to spread the work over threads:
 *  - many outputs: blocks of outputs in parallel, each slice folded in order;
 *  - few outputs with long slices (sum of everything): each slice is cut into a fixed
 *    number of parts folded in parallel and merged in order, so the result does not
 *    depend on the number of threads.
 * sum/mean and amax/amin have a third, "column" path for the case where the reduced
 * elements are far apart but neighbouring outputs are adjacent in memory (sum over dim 0
 * of a row-major matrix, i.e. every bias gradient): it folds whole input rows into a row
 * of up to RED_COLS accumulators (red_cols_fn), so the input is read in memory order.
 *
 * f32 is accumulated in double. Floating max/min propagate NaN and report the first
 * index of the extreme (the first NaN if any), like PyTorch. Not an installed header. */
#ifndef OPREG_CPU_REDUCE_H
#define OPREG_CPU_REDUCE_H

#include "cpu_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Outputs accumulated side by side by the column path: at most a row of 4096 (32 KiB of
 * double accumulators, in L1 or L2), at least 256 when the row is cut between threads. */
#define RED_COLS 4096
#define RED_COLS_MIN 256
/* max.dim/min.dim write values and indices. */
#define RED_MAX_OUT 2

/* ------------------------------------------------------------------ plan */

/* The reduced dims of one slice, element strides relative to the slice's start. */
typedef struct red_space {
    int32_t ndim; /* >= 1 */
    int64_t shape[OPR_MAX_DIMS];
    int64_t st[OPR_MAX_DIMS];
    int64_t n; /* elements per slice */
} red_space;

typedef struct red_plan {
    int32_t kndim; /* kept dims, >= 1 */
    int32_t nops;  /* 1 + number of outputs */
    int64_t kshape[OPR_MAX_DIMS];
    int64_t kst[1 + RED_MAX_OUT][OPR_MAX_DIMS]; /* strides of the input, then each output */
    int64_t n_out;                              /* elements per output */
    red_space rs;
} red_plan;

/* A walker over the first `ndim` kept dims (all of them, or all but the innermost). */
static inline void red_walk_kept(const red_plan *pl, int32_t ndim, cpu_walk *w)
{
    w->ndim = ndim;
    w->nops = pl->nops;
    w->shape = pl->kshape;
    for (int k = 0; k < pl->nops; k++)
        for (int32_t d = 0; d < ndim; d++) w->strides[k][d] = pl->kst[k][d];
}

/* Visits elements [start, end) of one slice in row-major order of the reduced space,
 * with `px_` pointing at the element and `ri` its linear index in the slice: a walker
 * over the outer reduced dims and a plain loop over the innermost one. */
#define RED_FOREACH_PTR(T, x, rs, start, end, ...)                                         \
    do {                                                                                   \
        if ((start) >= (end)) break;                                                       \
        cpu_walk w_;                                                                       \
        w_.ndim = (rs)->ndim - 1;                                                          \
        w_.nops = 1;                                                                       \
        w_.shape = (rs)->shape;                                                            \
        for (int32_t d_ = 0; d_ < w_.ndim; d_++) w_.strides[0][d_] = (rs)->st[d_];         \
        const int64_t len_ = (rs)->shape[w_.ndim], s_ = (rs)->st[w_.ndim];                 \
        cpu_walk_seek(&w_, (start) / len_);                                                \
        int64_t ri = (start), j_ = (start) % len_;                                         \
        while (ri < (end)) {                                                               \
            const T *p_ = (x) + w_.off[0] + j_ * s_;                                       \
            const int64_t seg_ = len_ - j_ < (end) - ri ? len_ - j_ : (end) - ri;          \
            for (int64_t k_ = 0; k_ < seg_; k_++, ri++) {                                  \
                const T *px_ = p_ + k_ * s_;                                               \
                __VA_ARGS__                                                                \
            }                                                                              \
            j_ = 0;                                                                        \
            cpu_walk_next(&w_);                                                            \
        }                                                                                  \
    } while (0)

/* Same, binding the element's value `v`. */
#define RED_FOREACH(T, x, rs, start, end, ...) \
    RED_FOREACH_PTR(T, x, rs, start, end, const T v = *px_; __VA_ARGS__)

/* ------------------------------------------------------------------ op vtables */

/* Accumulator: d for floating values and sums, i for i64 ones, idx for arg-max/min
 * (-1 while nothing has been seen). */
typedef struct red_acc {
    double d;
    int64_t i;
    int64_t idx;
} red_acc;

typedef struct red_param {
    double p;  /* norm exponent */
    int64_t n; /* elements per slice (mean) */
} red_param;

/* Folds elements [start, end) of the slice at x into *acc. */
typedef void (*red_fold_fn)(const void *x, const red_space *rs, int64_t start, int64_t end,
                            double p, red_acc *acc);
/* *a = *a (+) *b, where b's elements come after a's (matters for first-index ties). */
typedef void (*red_merge_fn)(red_acc *a, const red_acc *b);
/* Writes the result of one slice; out[1] (indices) is NULL unless the op has it. */
typedef void (*red_store_fn)(char *const *out, const int64_t *off, const red_acc *acc,
                             const red_param *prm);

typedef struct red_kind {
    red_fold_fn fold; /* NULL: dtype not supported */
    red_merge_fn merge;
    red_store_fn store;
    red_acc init;
} red_kind;

#define RED_FOLD(name, T, INIT, BODY, FINISH)                                             \
    static void name(const void *xv, const red_space *rs, int64_t start, int64_t end,     \
                     double p, red_acc *acc)                                              \
    {                                                                                     \
        const T *x = (const T *)xv;                                                       \
        (void)p;                                                                          \
        INIT;                                                                             \
        RED_FOREACH(T, x, rs, start, end, BODY);                                          \
        FINISH;                                                                           \
    }

/* a > b for max, with NaN above everything (NaN propagates; the first NaN wins). */
#define RED_GT(a, b) ((a) > (b) || (isnan(a) && !isnan(b)))
#define RED_LT(a, b) ((a) < (b) || (isnan(a) && !isnan(b)))

/* Stores VALUE (an expression of acc and prm) as T, and the index where there is one. */
#define RED_STORE(name, T, VALUE)                                                         \
    static inline void name(char *const *out, const int64_t *off, const red_acc *acc,     \
                            const red_param *prm)                                         \
    {                                                                                     \
        (void)prm;                                                                        \
        ((T *)out[0])[off[0]] = (T)(VALUE);                                               \
        if (out[1]) ((int64_t *)out[1])[off[1]] = acc->idx;                               \
    }

/* the stores of plain values, which most ops share */
RED_STORE(store_d_f32, float, acc->d)
RED_STORE(store_d_f64, double, acc->d)
RED_STORE(store_i_i64, int64_t, acc->i)
RED_STORE(store_i_i32, int32_t, acc->i)

/* Tables indexed by the input dtype; also the source of each op's registered mask. */
typedef red_kind red_table[OPR_DTYPE_COUNT];

#define RED_INIT0 {0, 0, -1}
#define RED_INIT1 {1, 1, -1}

/* The dtypes a table has kernels for, as an OPR_DTYPE_BIT mask. */
static inline uint32_t red_mask(const red_kind *t)
{
    uint32_t m = 0;
    for (int d = 0; d < OPR_DTYPE_COUNT; d++)
        if (t[d].fold) m |= OPR_DTYPE_BIT(d);
    return m;
}

/* ------------------------------------------------------------------ driver */

/* One reduction's plan, op and pointers, as the driver and the column path see it. */
typedef struct red_job {
    const red_plan *pl;
    const red_kind *k;
    red_param prm;
    const char *x; /* input element [0,...,0] */
    size_t esz;    /* input element size */
    char *out[RED_MAX_OUT];
} red_job;

/* The column path of an op: `width` adjacent outputs of the innermost kept dim, from
 * column c0 of row group g (mean: the op divides by the slice length). */
typedef void (*red_cols_fn)(const red_job *jb, int64_t g, int64_t c0, int64_t width, bool mean);

/* Checks arity, the input and the outputs (opc_reduce_begin), and returns the vtable
 * for the input's dtype. */
int red_begin(const opr_kernel_call *c, const char *op, int nargs, int nout, const red_kind *table,
              const opr_tensor_view **in, const red_kind **k);
/* Wraps a dim argument (opc_reduce_dim). */
int red_wrap(const opr_kernel_call *c, const char *op, int64_t d, int32_t ndim, int32_t *out);
/* The dim argument ai as a mask of reduced dims (opc_reduce_dim_mask). */
int red_dim_mask(const opr_kernel_call *c, int ai, const char *op, int32_t ndim, uint32_t *mask);
/* Plans and runs a reduction of `in` over `mask` into the call's first nout outputs
 * (cols: the op's column path for the input's dtype, or NULL; mean: divide by the
 * slice length there). */
int red_go(const opr_kernel_call *c, const char *op, const opr_tensor_view *in, uint32_t mask, int nout,
           const red_kind *k, double p, red_cols_fn cols, bool mean);

#endif /* OPREG_CPU_REDUCE_H */
