/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): planning the
 * "reducing batched GEMM" that every matrix product of the CPU and GPU plugins runs,
 *
 *     C[c] = alpha * sum over the batch positions b that map to c of A[b] @ B[b]
 *            (+ beta * C[c] on the first term),
 *
 * where A and B are strided opc_bmat operands and C is row-major. The plan is pure
 * index arithmetic: it folds batch dims away where the strides allow (a summed dim into
 * the inner dimension k, a kept dim into the rows when B is shared along it, so that
 * linear on [..., in] is one GEMM), and lists the GEMM calls that remain as steps with
 * element offsets. Each plugin executes the steps itself (CBLAS on the CPU; cuBLAS or
 * the tiled kernel on the GPU) and decides there what to pack. */
#ifndef OPREG_OPC_RGEMM_H
#define OPREG_OPC_RGEMM_H

#include "opc_blas_layout.h"
#include "opc_bmat.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdio.h>
#include <string.h>

/* The job: the product's batch shape and where C is. */
typedef struct {
    const char *op;                /* for error messages */
    opr_dtype dt;
    int32_t nb;                    /* batch dims of the product */
    int64_t bshape[OPR_MAX_DIMS];
    bool reduced[OPR_MAX_DIMS];    /* summed over: C has no extent there */
    int64_t cst[OPR_MAX_DIMS];     /* C's batch strides (elements); 0 on reduced dims */
    char *c;                       /* C: row-major A.rows x B.cols matrices, ldc = B.cols */
    double alpha, beta;            /* beta applies to the first term of each C */
} opc_rgemm;

/* A job without batch dims; set nb and bshape, then C (opc_rgemm_set_c*). */
static inline opc_rgemm opc_rgemm_job(const char *op, opr_dtype dt, double alpha, double beta)
{
    opc_rgemm j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.dt = dt;
    j.alpha = alpha;
    j.beta = beta;
    return j;
}

/* C = a contiguous tensor [cb..., rows, cols] whose cb batch dims are right-aligned to
 * the product's; the product's other batch dims (those C lacks or has as size 1) are
 * summed over. This is how a gradient is reduced over the dims its input was broadcast
 * along. */
static inline void opc_rgemm_set_c(opc_rgemm *j, const opr_tensor_view *out, int32_t cb)
{
    j->c = (char *)out->data;
    int64_t st = 1;
    int64_t cstr[OPR_MAX_DIMS];
    for (int32_t d = out->ndim - 1; d >= 0; d--) {
        cstr[d] = st;
        st *= out->shape[d];
    }
    for (int32_t d = 0; d < j->nb; d++) {
        const int32_t vd = d - (j->nb - cb);
        const bool has = vd >= 0 && out->shape[vd] == j->bshape[d];
        j->reduced[d] = !has && j->bshape[d] != 1;
        j->cst[d] = has ? cstr[vd] : 0;
    }
}

/* C's batch strides for a contiguous [batch..., m, n] output, nothing summed (a forward
 * product); j->c is set by the caller. */
static inline void opc_rgemm_set_c_contiguous(opc_rgemm *j, int64_t m, int64_t n)
{
    int64_t st = m * n;
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        j->reduced[d] = false;
        j->cst[d] = st;
        st *= j->bshape[d];
    }
}

/* Batch positions of the product (reduced ones included). */
static inline int64_t opc_rgemm_batch_count(const opc_rgemm *j)
{
    int64_t n = 1;
    for (int32_t d = 0; d < j->nb; d++) n *= j->bshape[d];
    return n;
}

/* ------------------------------------------------------------------ folding */

/* Folds reduced batch dim d into the inner dimension k (A's cols, B's rows) when both
 * operands continue their k run there. Not when an operand is broadcast along d (the
 * fold would repeat it), when k would exceed int_max, or when the fold would turn an
 * operand BLAS reads in place into one that must be packed (a big copy instead of a
 * loop of calls). */
static inline bool opc_rgemm_fold_inner(const opc_rgemm *j, opc_bmat *a, opc_bmat *b, int32_t d, int64_t int_max)
{
    const int64_t size = j->bshape[d];
    opc_bmat fa = *a, fb = *b;
    if (a->bst[d] == 0 || b->bst[d] == 0) return false;
    if (fa.cols == 1) fa.cs = a->bst[d];
    if (fb.rows == 1) fb.rs = b->bst[d];
    if (a->bst[d] != fa.cols * fa.cs || b->bst[d] != fb.rows * fb.rs) return false;
    fa.cols *= size;
    fb.rows *= size;
    if (fa.cols > int_max) return false;
    if (opc_blas_layout_of(a->rows, a->cols, a->rs, a->cs, int_max).direct &&
        !opc_blas_layout_of(fa.rows, fa.cols, fa.rs, fa.cs, int_max).direct)
        return false;
    if (opc_blas_layout_of(b->rows, b->cols, b->rs, b->cs, int_max).direct &&
        !opc_blas_layout_of(fb.rows, fb.cols, fb.rs, fb.cs, int_max).direct)
        return false;
    *a = fa;
    *b = fb;
    return true;
}

/* Folds kept batch dim d into the rows of A and C when B is the same for every index of
 * d and A and C continue their row runs there (C has ncols columns); the same limits as
 * opc_rgemm_fold_inner. */
static inline bool opc_rgemm_fold_rows(const opc_rgemm *j, opc_bmat *a, const opc_bmat *b, int32_t d, int64_t ncols,
                                       int64_t int_max)
{
    const int64_t size = j->bshape[d];
    opc_bmat fa = *a;
    if (b->bst[d] != 0) return false;
    if (fa.rows == 1) fa.rs = a->bst[d];
    if (a->bst[d] != fa.rows * fa.rs || j->cst[d] != fa.rows * ncols) return false;
    fa.rows *= size;
    if (fa.rows > int_max) return false;
    if (opc_blas_layout_of(a->rows, a->cols, a->rs, a->cs, int_max).direct &&
        !opc_blas_layout_of(fa.rows, fa.cols, fa.rs, fa.cs, int_max).direct)
        return false;
    *a = fa;
    return true;
}

/* ------------------------------------------------------------------ the plan */

typedef struct {
    opc_bmat a, b;                 /* the operands after folding */
    int64_t m, n, k;               /* of every GEMM call */
    int64_t c_numel;               /* elements of C: 0 means there is nothing to do */
    bool empty_sum;                /* nothing is summed (k or a reduced dim is 0): C = beta * C */
    /* Batched calls (batch_calls): the innermost kept batch dim left after folding is
     * the batch of every call, count matrices apart by a_bs, b_bs, c_bs elements. */
    int64_t count, a_bs, b_bs, c_bs;
    /* The calls: nouter kept positions, for each ninner summed ones (accumulating). */
    int32_t outer[OPR_MAX_DIMS], inner[OPR_MAX_DIMS], nouter_dims, ninner_dims;
    int64_t nouter, ninner, nsteps;
    bool a_shared, b_shared;       /* the same A (B) matrices at every step */
} opc_rgemm_plan;

/* Plans job j on operands a and b. int_max: the largest matrix dimension and leading
 * dimension the GEMM takes (folds stay within it). batch_calls: the executor runs
 * strided-batched calls (count > 1); else count is 1. Returns false, with the message
 * for host->set_error in why, when A's cols and B's rows differ. When c_numel is 0 or
 * empty_sum is set, the rest of the plan is not filled in. */
static inline bool opc_rgemm_plan_make(const opc_rgemm *j, opc_bmat a, opc_bmat b, int64_t int_max, bool batch_calls,
                                       opc_rgemm_plan *p, char *why, size_t why_size)
{
    memset(p, 0, sizeof *p);
    if (a.cols != b.rows) {
        snprintf(why, why_size, "%s: inner dimensions differ (%lld vs %lld)", j->op, (long long)a.cols,
                 (long long)b.rows);
        return false;
    }
    const int64_t n = b.cols;
    int64_t c_mats = 1, red = 1;
    for (int32_t d = 0; d < j->nb; d++) {
        if (j->reduced[d]) red *= j->bshape[d];
        else c_mats *= j->bshape[d];
    }
    p->c_numel = c_mats * a.rows * n;
    p->empty_sum = red == 0 || a.cols == 0;
    if (p->c_numel == 0 || p->empty_sum) return true;

    /* size-1 batch dims play no part; reduced dims fold into k, kept ones into rows */
    bool gone[OPR_MAX_DIMS] = {false};
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        if (j->bshape[d] == 1) gone[d] = true;
        else if (j->reduced[d] && opc_rgemm_fold_inner(j, &a, &b, d, int_max)) gone[d] = true;
    }
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        if (gone[d] || j->reduced[d]) continue;
        if (!opc_rgemm_fold_rows(j, &a, &b, d, n, int_max)) break;
        gone[d] = true;
    }
    p->a = a;
    p->b = b;
    p->m = a.rows;
    p->n = n;
    p->k = a.cols;

    /* the remaining dims: kept ones outside, reduced ones inside (accumulating) */
    p->ninner = 1;
    for (int32_t d = 0; d < j->nb; d++) {
        if (gone[d]) continue;
        if (j->reduced[d]) {
            p->inner[p->ninner_dims++] = d;
            p->ninner *= j->bshape[d];
        } else {
            p->outer[p->nouter_dims++] = d;
        }
    }
    const int32_t bd = batch_calls && p->nouter_dims > 0 ? p->outer[--p->nouter_dims] : -1;
    p->count = bd >= 0 ? j->bshape[bd] : 1;
    p->a_bs = bd >= 0 ? a.bst[bd] : 0;
    p->b_bs = bd >= 0 ? b.bst[bd] : 0;
    p->c_bs = bd >= 0 ? j->cst[bd] : 0;
    p->nouter = 1;
    for (int32_t i = 0; i < p->nouter_dims; i++) p->nouter *= j->bshape[p->outer[i]];
    p->nsteps = p->nouter * p->ninner;

    p->a_shared = p->b_shared = true;
    for (int32_t i = 0; i < p->nouter_dims; i++) {
        p->a_shared &= a.bst[p->outer[i]] == 0;
        p->b_shared &= b.bst[p->outer[i]] == 0;
    }
    for (int32_t i = 0; i < p->ninner_dims; i++) {
        p->a_shared &= a.bst[p->inner[i]] == 0;
        p->b_shared &= b.bst[p->inner[i]] == 0;
    }
    return true;
}

/* One GEMM call of a plan: element offsets of its first A, B and C matrices from
 * p->a.data, p->b.data and j->c. first: the first term of its C, where beta applies;
 * later terms accumulate (beta 1). */
typedef struct {
    int64_t a, b, c;
    bool first;
} opc_rgemm_step;

/* Adds to st the offsets of position pos of the ndims batch dims listed in dims
 * (row-major over them). C's batch stride is 0 on the reduced ones. */
static inline void opc_rgemm_step_add(const opc_rgemm *j, const opc_rgemm_plan *p, const int32_t *dims, int32_t ndims,
                                      int64_t pos, opc_rgemm_step *st)
{
    for (int32_t i = ndims - 1; i >= 0; i--) {
        const int32_t d = dims[i];
        const int64_t idx = pos % j->bshape[d];
        pos /= j->bshape[d];
        st->a += idx * p->a.bst[d];
        st->b += idx * p->b.bst[d];
        st->c += idx * j->cst[d];
    }
}

/* Step s of 0 .. p->nsteps - 1, in the order the calls must run (the terms of every C
 * consecutive, its first term first). */
static inline opc_rgemm_step opc_rgemm_step_at(const opc_rgemm *j, const opc_rgemm_plan *p, int64_t s)
{
    opc_rgemm_step st = {0, 0, 0, false};
    opc_rgemm_step_add(j, p, p->outer, p->nouter_dims, s / p->ninner, &st);
    opc_rgemm_step_add(j, p, p->inner, p->ninner_dims, s % p->ninner, &st);
    st.first = s % p->ninner == 0;
    return st;
}

#endif
