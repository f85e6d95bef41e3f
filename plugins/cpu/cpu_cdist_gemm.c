/* cdist (p = 2) of one batch through a GEMM, for large inputs: d2 = |x1|^2 + |x2|^2 -
 * 2 x1 x2^T, the formulation PyTorch uses when either side has more than 25 rows
 * (its _euclidean_dist). The product does the O(P R M) work at BLAS speed; what is left
 * is O(P R).
 *
 * The identity cancels for points close to each other relative to their norms: d2 then
 * carries an absolute error of about M eps (|x1|^2 + |x2|^2) and, unlike PyTorch's mm
 * path, we do not return it. Every pair with d2 < CDIST_CANCEL (|x1|^2 + |x2|^2) is
 * recomputed from direct differences in double, like the small-input kernel, so
 * identical rows still give exactly 0 and nearby ones their accurate distance. The
 * others lose at most log2(1 / CDIST_CANCEL) bits to the cancellation. */
#include "cpu_common.h"
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <stdlib.h>

/* The cancellation beyond which a pair is recomputed directly: 1/16 keeps at least all
 * but 4 bits of the GEMM's accuracy. Random points in many dims are nowhere near it
 * (their d2 is about |x1|^2 + |x2|^2), so almost nothing is recomputed there. */
#define CDIST_CANCEL 0.0625

#define DEF_CDIST_GEMM(T, SUF, VSUMSQ, VSQRT)                                              \
    static int cdist_gemm_##SUF(opr_dtype dt, int64_t P, int64_t R, int64_t M, const T *x1,  \
                                int64_t rs1, const T *x2, int64_t rs2, T *out)              \
    {                                                                                      \
        T *n1 = malloc((size_t)P * sizeof *n1), *n2 = malloc((size_t)R * sizeof *n2);      \
        if (!n1 || !n2) {                                                                  \
            free(n1);                                                                      \
            free(n2);                                                                      \
            return OPR_ERR_NOMEM;                                                          \
        }                                                                                  \
        for (int64_t p = 0; p < P; p++) n1[p] = (T)VSUMSQ(M, x1 + p * rs1);                \
        for (int64_t r = 0; r < R; r++) n2[r] = (T)VSUMSQ(M, x2 + r * rs2);                \
        const opc_blas_layout la = {true, false, rs1}, lb = {true, true, rs2};              \
        blas_gemm(dt, la, lb, P, R, M, -2.0, x1, x2, 0.0, out); /* out = -2 x1 x2^T */     \
        const bool par = P > 1 && P * R >= CPU_PAR_THRESHOLD;                              \
        _Pragma("omp parallel for if (par) schedule(static)")                              \
        for (int64_t p = 0; p < P; p++) {                                                  \
            T *o = out + p * R;                                                            \
            const T a = n1[p];                                                             \
            int bad = 0;                                                                   \
            for (int64_t r = 0; r < R; r++) {                                              \
                const T d2 = a + n2[r] + o[r];                                             \
                bad |= d2 < (T)CDIST_CANCEL * (a + n2[r]);                                 \
                o[r] = d2 > 0 ? d2 : 0;                                                    \
            }                                                                              \
            if (bad)                                                                       \
                for (int64_t r = 0; r < R; r++) {                                          \
                    if (!(o[r] < (T)CDIST_CANCEL * (a + n2[r]))) continue;                 \
                    const T *u = x1 + p * rs1, *v = x2 + r * rs2;                          \
                    double acc = 0;                                                        \
                    for (int64_t m = 0; m < M; m++) {                                      \
                        const double diff = (double)u[m] - (double)v[m];                   \
                        acc += diff * diff;                                                \
                    }                                                                      \
                    o[r] = (T)acc;                                                         \
                }                                                                          \
            VSQRT(R, o, o);                                                                \
        }                                                                                  \
        free(n1);                                                                          \
        free(n2);                                                                          \
        return OPR_OK;                                                                     \
    }

DEF_CDIST_GEMM(float, f32, cpu_vm.sumsq_f32, cpu_vm.sqrt_f32)
DEF_CDIST_GEMM(double, f64, cpu_vm.sumsq_f64, cpu_vm.sqrt_f64)

bool cpu_cdist_use_gemm(int64_t P, int64_t R, int64_t M, int64_t rs1, int64_t rs2)
{
    /* PyTorch's size rule; below a few columns the direct differences are as cheap as
     * the product. BLAS needs each row's elements in place (unit stride, checked by the
     * caller) and rows at least a row apart. */
    return (P > 25 || R > 25) && M >= 8 && rs1 >= M && rs2 >= M && rs1 <= BLAS_INT_MAX &&
           rs2 <= BLAS_INT_MAX && P <= BLAS_INT_MAX && R <= BLAS_INT_MAX;
}

int cpu_cdist_gemm(opr_dtype dt, int64_t P, int64_t R, int64_t M, const void *x1, int64_t rs1,
                   const void *x2, int64_t rs2, void *out)
{
    if (dt == OPR_F32) return cdist_gemm_f32(dt, P, R, M, x1, rs1, x2, rs2, out);
    return cdist_gemm_f64(dt, P, R, M, x1, rs1, x2, rs2, out);
}
