/* plugins/common (prefix opc_, C11 and C++17, host and device code; see
 * opc_blas_layout.h): the p-norm distance of cdist's kernels, one difference at a time,
 * so that every backend folds the differences alike (in double, in order of m). */
#ifndef OPREG_OPC_DIST_H
#define OPREG_OPC_DIST_H

#include <math.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OPC_DIST_FN __host__ __device__
#else
#define OPC_DIST_FN
#endif

/* acc after one more difference: |diff|^p summed (p = 0 counts the nonzero ones), the
 * largest |diff| for p = inf (a NaN difference stays NaN). Starts from 0. */
OPC_DIST_FN static inline double opc_dist_add(double p, double acc, double diff)
{
    const double a = fabs(diff);
    if (p == 2) return acc + a * a;
    if (p == 1) return acc + a;
    if (p == 0) return acc + (a != 0 ? 1.0 : 0.0);
    if (p == INFINITY) return a > acc || a != a ? a : acc;
    return acc + pow(a, p);
}

/* The distance from the accumulated value: its p-th root (none for p = 0, 1, inf). */
OPC_DIST_FN static inline double opc_dist_finish(double p, double acc)
{
    if (p == 2) return sqrt(acc);
    if (p == 0 || p == 1 || p == INFINITY) return acc;
    return pow(acc, 1.0 / p);
}

#endif /* OPREG_OPC_DIST_H */
