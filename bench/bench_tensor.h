/* Input tensors of the C benchmarks: f32 on the CPU, uniform in [lo, hi] from
 * srand(seed), so that a figure is measured on the same values every run.
 * Header-only (static inline). */
#ifndef OPREG_BENCH_TENSOR_H
#define OPREG_BENCH_TENSOR_H

#include <opreg/opreg.h>

#include <stdlib.h>

/* A new f32 CPU tensor of the shape, or NULL (opr_last_error) on failure. */
static inline opr_tensor *bench_rand_f32(opr_ctx *ctx, int ndim, const int64_t *shape, double lo, double hi,
                                         unsigned seed)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *v = (float *)malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    srand(seed);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * rand() / (double)RAND_MAX);
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, ndim, shape, v, OPR_CPU);
    free(v);
    return t;
}

#endif
