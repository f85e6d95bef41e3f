/* Linear algebra: mm, bmm, matmul, linear, addmm (f32, f64, f16, bf16), cdist (any p; f32,
 * f64), and the fused backward kernels mm_backward, bmm_backward, matmul_backward,
 * linear_backward, addmm_backward (f32, f64).
 *
 * Every product goes through one driver, the "reducing batched GEMM" that the CPU
 * plugin runs too (planned by plugins/common/opc_rgemm.h): C[c] = alpha * sum over the batch positions b that map
 * to c of A[b] @ B[b] (+ beta * C on the first term). Operands are strided matrices
 * handed to cuBLAS with transpose flags, so a transposed view costs no copy; only a
 * matrix with no unit stride is packed (on the device). Batch dims that are summed
 * fold into the inner dimension when the strides allow, kept batch dims fold into the
 * rows when the right operand is shared (linear on [..., in] runs as one GEMM), the
 * innermost remaining kept batch dim becomes the batch of one strided-batched call,
 * and anything left is a host loop of calls (summed dims accumulate with beta = 1).
 * f16/bf16 products accumulate in f32 (CUBLAS_COMPUTE_32F); f32 does not use TF32.
 *
 * Without cuBLAS (GPU_HAVE_BLAS == 0, ROCm) or with OPREG_CUDA_TILED_GEMM=1 the same
 * driver calls the tiled kernel of gpu_gemm_tiled.cuh instead, which reads any
 * strides and never packs. */
#include "gpu_common.cuh"
#include "gpu_gemm_tiled.cuh"
#include "../common/opc_matmul_grad.h"
#include "../common/opc_dist.h"

#if GPU_HAVE_BLAS
#include GPU_BLAS_HEADER
#endif

#include <limits.h>

namespace {

#define BLAS_INT_MAX ((int64_t)INT_MAX)

/* How cuBLAS reads a matrix in place (plugins/common/opc_blas_layout.h): every leading
 * dimension must fit an int. */
opc_blas_layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    return opc_blas_layout_of(rows, cols, rs, cs, BLAS_INT_MAX);
}

bool use_tiled() { return !GPU_HAVE_BLAS || gk_force_tiled_gemm; }

/* One operand of a single (strided-batched) call. */
struct gop {
    const char *p;
    int64_t rs, cs, bs;
};

/* C[b] (m x n, row stride n, batch stride c_bs) = alpha * A[b] @ B[b] + beta * C[b]
 * for b < count. On the BLAS path both operands must be directly readable. */
int gemm_call(const gk_ctx *k, opr_dtype dt, int64_t m, int64_t n, int64_t kk, double alpha, gop a, gop b,
              double beta, char *c, int64_t c_bs, int64_t count)
{
    if (use_tiled()) {
        switch (dt) {
        case OPR_F32: return gk_gemm_tiled<float, float>(k, m, n, kk, alpha, a.p, a.rs, a.cs, a.bs, b.p, b.rs, b.cs, b.bs, beta, c, n, c_bs, count);
        case OPR_F64: return gk_gemm_tiled<double, double>(k, m, n, kk, alpha, a.p, a.rs, a.cs, a.bs, b.p, b.rs, b.cs, b.bs, beta, c, n, c_bs, count);
        case OPR_F16: return gk_gemm_tiled<gpu_f16, float>(k, m, n, kk, alpha, a.p, a.rs, a.cs, a.bs, b.p, b.rs, b.cs, b.bs, beta, c, n, c_bs, count);
        case OPR_BF16: return gk_gemm_tiled<gpu_bf16, float>(k, m, n, kk, alpha, a.p, a.rs, a.cs, a.bs, b.p, b.rs, b.cs, b.bs, beta, c, n, c_bs, count);
        default: return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", k->op, gk_dtype_name(dt), GPU_NAME);
        }
    }
#if GPU_HAVE_BLAS
    /* Row-major C = A @ B is column-major C^T = B^T @ A^T: a row-major matrix is its own
     * transpose in column-major terms, so B goes first and no flag changes meaning. */
    const opc_blas_layout la = layout_of(m, kk, a.rs, a.cs), lb = layout_of(kk, n, b.rs, b.cs);
    if (!la.direct || !lb.direct)
        return GK_FAIL(k->call, OPR_ERR_BACKEND, "%s: internal error: operand not readable by cuBLAS", k->op);
    cublasHandle_t h = (cublasHandle_t)gk_blas_handle(k->ordinal);
    const cublasOperation_t opa = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N, opb = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t ty;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    switch (dt) {
    case OPR_F32: ty = CUDA_R_32F; break;
    case OPR_F64: ty = CUDA_R_64F; ct = CUBLAS_COMPUTE_64F; break;
    case OPR_F16: ty = CUDA_R_16F; break;
    case OPR_BF16: ty = CUDA_R_16BF; break;
    default: return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", k->op, gk_dtype_name(dt), GPU_NAME);
    }
    const float af = (float)alpha, bf = (float)beta;
    const void *pa = dt == OPR_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pb = dt == OPR_F64 ? (const void *)&beta : (const void *)&bf;
    const size_t es = gk_dtype_size(dt);
    for (int64_t done = 0; done < count;) {
        const int64_t chunk = count - done < BLAS_INT_MAX ? count - done : BLAS_INT_MAX;
        const char *ap = a.p + done * a.bs * (int64_t)es, *bp = b.p + done * b.bs * (int64_t)es;
        char *cp = c + done * c_bs * (int64_t)es;
        cublasStatus_t s;
        if (chunk == 1)
            s = cublasGemmEx(h, opb, opa, (int)n, (int)m, (int)kk, pa, bp, ty, (int)lb.ld, ap, ty, (int)la.ld, pb, cp, ty,
                             (int)n, ct, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasGemmStridedBatchedEx(h, opb, opa, (int)n, (int)m, (int)kk, pa, bp, ty, (int)lb.ld, (long long)b.bs,
                                           ap, ty, (int)la.ld, (long long)a.bs, pb, cp, ty, (int)n, (long long)c_bs,
                                           (int)chunk, ct, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS)
            return GK_FAIL(k->call, OPR_ERR_BACKEND, "%s: cuBLAS GEMM failed (%s) for m=%lld n=%lld k=%lld batch=%lld", k->op,
                           cublasGetStatusString(s), (long long)m, (long long)n, (long long)kk, (long long)chunk);
        done += chunk;
    }
    return gk_launched(k, "cuBLAS GEMM");
#else
    return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: no BLAS in this build", k->op);
#endif
}

/* ------------------------------------------------------------------ scaling C */

template <class T, class ACC>
__global__ void k_scale(int64_t n, T *c, ACC beta)
{
    GK_LOOP(i, n) c[i] = gk_cvt<T>(beta * gk_cvt<ACC>(c[i]));
}

/* C *= beta over n contiguous elements; beta == 0 writes zeros (C need not be valid). */
int scale_c(const gk_ctx *k, opr_dtype dt, char *c, int64_t n, double beta)
{
    const size_t es = gk_dtype_size(dt);
    if (n == 0 || beta == 1) return OPR_OK;
    if (beta == 0) {
        GK_TRY(k, gpuMemsetAsync(c, 0, (size_t)n * es, k->stream));
        return OPR_OK;
    }
    const unsigned nb = gk_blocks(n);
    switch (dt) {
    case OPR_F32: gk_launch(k_scale<float, float>, nb, GK_THREADS, 0, k->stream, n, (float *)c, (float)beta); break;
    case OPR_F64: gk_launch(k_scale<double, double>, nb, GK_THREADS, 0, k->stream, n, (double *)c, beta); break;
    case OPR_F16: gk_launch(k_scale<gpu_f16, float>, nb, GK_THREADS, 0, k->stream, n, (gpu_f16 *)c, (float)beta); break;
    case OPR_BF16: gk_launch(k_scale<gpu_bf16, float>, nb, GK_THREADS, 0, k->stream, n, (gpu_bf16 *)c, (float)beta); break;
    default: return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", k->op, gk_dtype_name(dt), GPU_NAME);
    }
    return gk_launched(k, "scale kernel");
}

/* ------------------------------------------------------------------ reducing batched GEMM */

/* Copies cnt strided matrices (batch stride bs) into contiguous row-major scratch. */
int pack(const gk_ctx *k, size_t es, const char *src, int64_t cnt, int64_t rows, int64_t cols, int64_t bs, int64_t rs,
         int64_t cs, void *dst)
{
    const int64_t shape[3] = {cnt, rows, cols};
    const int64_t sst[3] = {bs, rs, cs}, dstst[3] = {rows * cols, cols, 1};
    return gk_copy_strided(k, es, 3, shape, dst, dstst, src, sst);
}

/* Runs job j on A and B as planned by plugins/common/opc_rgemm.h: the innermost kept
 * batch dim left after folding is the batch of one strided-batched call, the rest a
 * host loop of calls. On the cuBLAS path an operand it cannot read in place is packed
 * (once when it is the same matrices at every call); the tiled kernel reads any
 * strides. */
int rgemm_run(const gk_ctx *k, const opc_rgemm *j, opc_bmat a, opc_bmat b)
{
    char why[OPC_WHY_SIZE];
    opc_rgemm_plan p;
    if (!opc_rgemm_plan_make(j, a, b, BLAS_INT_MAX, true, &p, why, sizeof why))
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s", why);
    if (p.c_numel == 0) return OPR_OK;
    if (p.empty_sum) return scale_c(k, j->dt, j->c, p.c_numel, j->beta);
    const bool tiled = use_tiled();
    const int64_t m = p.m, n = p.n, kk = p.k, count = p.count;
    if (!tiled && (m > BLAS_INT_MAX || n > BLAS_INT_MAX || kk > BLAS_INT_MAX))
        return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: a matrix dimension exceeds what cuBLAS accepts", j->op);

    const size_t es = gk_dtype_size(j->dt);
    const bool pack_a = !tiled && !layout_of(m, kk, p.a.rs, p.a.cs).direct;
    const bool pack_b = !tiled && !layout_of(kk, n, p.b.rs, p.b.cs).direct;
    const int64_t a_cnt = p.a_bs == 0 ? 1 : count, b_cnt = p.b_bs == 0 ? 1 : count;
    gk_buf sa, sb;
    int rc;
    if (pack_a && (rc = sa.alloc(k, (size_t)(a_cnt * m * kk) * es))) return rc;
    if (pack_b && (rc = sb.alloc(k, (size_t)(b_cnt * kk * n) * es))) return rc;
    bool packed_a = false, packed_b = false;
    for (int64_t s = 0; s < p.nsteps; s++) {
        const opc_rgemm_step st = opc_rgemm_step_at(j, &p, s);
        gop ga = {p.a.data + st.a * (int64_t)es, p.a.rs, p.a.cs, p.a_bs};
        gop gb = {p.b.data + st.b * (int64_t)es, p.b.rs, p.b.cs, p.b_bs};
        if (pack_a) {
            if (!(packed_a && p.a_shared) && (rc = pack(k, es, ga.p, a_cnt, m, kk, p.a_bs, p.a.rs, p.a.cs, sa.p)))
                return rc;
            packed_a = true;
            ga = {(const char *)sa.p, kk, 1, p.a_bs == 0 ? 0 : m * kk};
        }
        if (pack_b) {
            if (!(packed_b && p.b_shared) && (rc = pack(k, es, gb.p, b_cnt, kk, n, p.b_bs, p.b.rs, p.b.cs, sb.p)))
                return rc;
            packed_b = true;
            gb = {(const char *)sb.p, n, 1, p.b_bs == 0 ? 0 : kk * n};
        }
        if ((rc = gemm_call(k, j->dt, m, n, kk, j->alpha, ga, gb, st.first ? j->beta : 1.0, j->c + st.c * (int64_t)es,
                            p.c_bs, count)))
            return rc;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ operands */

const uint32_t GEMM_DTYPES = GK_FLOATS | GK_HALVES;

/* Dtypes must all be the output's and the output a contiguous [batch..., m, n]. */
int check_operands(const opr_kernel_call *c, const opc_rgemm *j, const opr_tensor_view *out, const opr_tensor_view *a, const opr_tensor_view *b,
                   int64_t m, int64_t n)
{
    if (!(GEMM_DTYPES & GK_BIT(out->dtype)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", j->op, gk_dtype_name(out->dtype), GPU_NAME);
    if (a->dtype != out->dtype || b->dtype != out->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: operands must both be %s (got %s and %s)", j->op, gk_dtype_name(out->dtype),
                       gk_dtype_name(a->dtype), gk_dtype_name(b->dtype));
    if (out->numel != opc_rgemm_batch_count(j) * m * n || (out->numel > 0 && !gk_is_contiguous(out)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: output must be a contiguous tensor of %lld elements", j->op,
                       (long long)(opc_rgemm_batch_count(j) * m * n));
    return OPR_OK;
}

/* ------------------------------------------------------------------ forward kernels */

/* A forward product as its op plans it: the job, A and B, the tensors they come from
 * (checked against the output by check_operands) and how many leading batch dims each
 * has; and, where the GEMM accumulates into C (beta != 0), what C starts as. */
struct product {
    opc_rgemm j;
    opc_bmat a, b;
    const opr_tensor_view *x, *y;
    int32_t xb, yb;
    const opr_tensor_view *c0; /* linear's bias, addmm's self */
    int64_t c0_st[2];          /* c0's strides over C's rows and columns (broadcast) */
};

/* An op's own part of a forward product. As its plan: reads the call's tensors into p
 * and fills in the job (batch shape, alpha, beta), A and B. As its late checks: what the
 * op checks only once the output has been (linear's bias). */
typedef int (*product_step)(const opr_kernel_call *c, product *p);

/* Runs a forward product op: selects the device, plans it (plan), sets the batch
 * strides of A and B and a contiguous C, points C at the output and checks the operands
 * against it, runs late_checks where given, writes c0 into C, and runs the GEMMs. */
int run_forward(const opr_kernel_call *c, const char *op, product_step plan, product_step late_checks = nullptr)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    product p;
    memset(&p, 0, sizeof p);
    if ((rc = plan(c, &p))) return rc;
    opc_bmat_set_batch_strides(&p.a, p.j.nb, p.xb, p.x->shape, p.x->strides);
    opc_bmat_set_batch_strides(&p.b, p.j.nb, p.yb, p.y->shape, p.y->strides);
    opc_rgemm_set_c_contiguous(&p.j, p.a.rows, p.b.cols);
    opr_tensor_view *out = c->outputs[0];
    p.j.c = (char *)out->data;
    if ((rc = check_operands(c, &p.j, out, p.x, p.y, p.a.rows, p.b.cols))) return rc;
    if (late_checks && (rc = late_checks(c, &p))) return rc;
    if (p.c0 && p.j.beta != 0 && out->numel > 0) {
        const int64_t shape[2] = {opc_rgemm_batch_count(&p.j) * p.a.rows, p.b.cols}, dst[2] = {p.b.cols, 1};
        if ((rc = gk_copy_strided(&k, gk_dtype_size(p.j.dt), 2, shape, p.j.c, dst, p.c0->data, p.c0_st))) return rc;
    }
    return rgemm_run(&k, &p.j, p.a, p.b);
}

/* A and B as torch.matmul reads x and y: their last two dims, a 1-d x as a row and a
 * 1-d y as a column. */
void set_matrices(product *p)
{
    p->a = opc_bmat_of(p->x->data, p->x->ndim, p->x->shape, p->x->strides, true);
    p->b = opc_bmat_of(p->y->data, p->y->ndim, p->y->shape, p->y->strides, false);
}

int plan_mm(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *x = p->x = gk_arg_t(c, 0), *y = p->y = gk_arg_t(c, 1);
    if (!x || !y || x->ndim != 2 || y->ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "mm: expected 2-d tensors, got %d-d and %d-d", x ? (int)x->ndim : -1,
                       y ? (int)y->ndim : -1);
    p->j = opc_rgemm_job("mm", c->outputs[0]->dtype, 1, 0);
    set_matrices(p);
    return OPR_OK;
}

int plan_bmm(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *x = p->x = gk_arg_t(c, 0), *y = p->y = gk_arg_t(c, 1);
    if (!x || !y || x->ndim != 3 || y->ndim != 3 || x->shape[0] != y->shape[0])
        return GK_FAIL(c, OPR_ERR_INVALID, "bmm: expected 3-d tensors with the same batch size");
    p->j = opc_rgemm_job("bmm", c->outputs[0]->dtype, 1, 0);
    p->j.nb = p->xb = p->yb = 1;
    p->j.bshape[0] = x->shape[0];
    set_matrices(p);
    return OPR_OK;
}

/* torch.matmul: 1-d operands are a row (left) or a column (right), batch dims
 * broadcast; the output's layout is that of [batch..., m, n]. */
int plan_matmul(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *x = p->x = gk_arg_t(c, 0), *y = p->y = gk_arg_t(c, 1);
    if (!x || !y || x->ndim < 1 || y->ndim < 1)
        return GK_FAIL(c, OPR_ERR_INVALID, "matmul: both operands need at least 1 dim");
    opc_rgemm *j = &p->j;
    *j = opc_rgemm_job("matmul", c->outputs[0]->dtype, 1, 0);
    set_matrices(p);
    const int32_t xb = p->xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = p->yb = y->ndim > 2 ? y->ndim - 2 : 0;
    j->nb = xb > yb ? xb : yb;
    if (j->nb > GK_MAXD) return GK_FAIL(c, OPR_ERR_INVALID, "matmul: too many batch dims");
    for (int32_t d = 0; d < j->nb; d++) {
        const int32_t dx = d - (j->nb - xb), dy = d - (j->nb - yb);
        const int64_t sx = dx >= 0 ? x->shape[dx] : 1, sy = dy >= 0 ? y->shape[dy] : 1;
        if (sx != sy && sx != 1 && sy != 1)
            return GK_FAIL(c, OPR_ERR_INVALID, "matmul: batch dims do not broadcast (%lld vs %lld at batch dim %d)",
                           (long long)sx, (long long)sy, (int)d);
        j->bshape[d] = sx == 1 ? sy : sx;
    }
    return OPR_OK;
}

/* input [..., in] @ weight^T (+ bias): the weight's transpose is its strides swapped. */
int plan_linear(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *x = p->x = gk_arg_t(c, 0), *w = p->y = gk_arg_t(c, 1);
    if (!x || !w || x->ndim < 1 || w->ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "linear: expected input with at least 1 dim and a 2-d weight");
    p->j = opc_rgemm_job("linear", c->outputs[0]->dtype, 1, gk_arg_t(c, 2) ? 1 : 0);
    p->a = opc_bmat_of(x->data, x->ndim, x->shape, x->strides, true);
    p->b = opc_bmat_transpose(opc_bmat_of(w->data, 2, w->shape, w->strides, true));
    p->j.nb = p->xb = x->ndim > 2 ? x->ndim - 2 : 0;
    for (int32_t d = 0; d < p->j.nb; d++) p->j.bshape[d] = x->shape[d];
    return OPR_OK;
}

/* The bias, checked once the output is: every output row starts as it and the GEMM
 * accumulates (beta = 1). */
int linear_bias(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *bias = gk_arg_t(c, 2);
    if (!bias) return OPR_OK;
    if (bias->dtype != p->j.dt || !opc_bcast_strides(bias, 1, &p->b.cols, &p->c0_st[1]))
        return GK_FAIL(c, OPR_ERR_INVALID, "linear: bias must be %s and broadcast to [%lld]", gk_dtype_name(p->j.dt),
                       (long long)p->b.cols);
    p->c0 = bias;
    return OPR_OK;
}

/* beta * self + alpha * mat1 @ mat2; with beta == 0 self is not read. */
int plan_addmm(const opr_kernel_call *c, product *p)
{
    const opr_tensor_view *s = gk_arg_t(c, 0), *x = p->x = gk_arg_t(c, 1), *y = p->y = gk_arg_t(c, 2);
    const opr_tensor_view *out = c->outputs[0];
    if (!s || !x || !y || x->ndim != 2 || y->ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "addmm: mat1 and mat2 must be 2-d");
    p->j = opc_rgemm_job("addmm", out->dtype, gk_arg_d(c, 4), gk_arg_d(c, 3));
    set_matrices(p);
    const int64_t shape[2] = {p->a.rows, p->b.cols};
    if (out->ndim != 2 || out->shape[0] != p->a.rows || out->shape[1] != p->b.cols || s->dtype != p->j.dt ||
        !opc_bcast_strides(s, 2, shape, p->c0_st))
        return GK_FAIL(c, OPR_ERR_INVALID, "addmm: self must be %s and broadcast to [%lld, %lld]", gk_dtype_name(p->j.dt),
                       (long long)p->a.rows, (long long)p->b.cols);
    p->c0 = s;
    return OPR_OK;
}

int k_mm(const opr_kernel_call *c) { return run_forward(c, "mm", plan_mm); }
int k_bmm(const opr_kernel_call *c) { return run_forward(c, "bmm", plan_bmm); }
int k_matmul(const opr_kernel_call *c) { return run_forward(c, "matmul", plan_matmul); }
int k_linear(const opr_kernel_call *c) { return run_forward(c, "linear", plan_linear, linear_bias); }
int k_addmm(const opr_kernel_call *c) { return run_forward(c, "addmm", plan_addmm); }

/* ------------------------------------------------------------------ cdist */

/* Direct differences, summed in double (the |x|^2 + |y|^2 - 2xy identity cancels
 * catastrophically for nearby points), for any p >= 0 (opc_dist.h). One thread per
 * output [b, p, r]. */
template <class T>
__global__ void k_cdist(int64_t total, int64_t P, int64_t R, int64_t M, gk_geom bg, const T *x1, int64_t rs1,
                        int64_t ms1, const T *x2, int64_t rs2, int64_t ms2, T *out, double pn)
{
    GK_LOOP(t, total)
    {
        const int64_t r = t % R, q = t / R, p = q % P, b = q / P;
        int64_t off[2];
        gk_offsets<2>(bg, b, off);
        const T *a = x1 + off[0] + p * rs1, *c = x2 + off[1] + r * rs2;
        double acc = 0;
        for (int64_t m = 0; m < M; m++) acc = opc_dist_add(pn, acc, (double)a[m * ms1] - (double)c[m * ms2]);
        out[t] = (T)opc_dist_finish(pn, acc);
    }
}

int k_cdist_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "cdist", &k);
    if (rc) return rc;
    const opr_tensor_view *x1 = gk_arg_t(c, 0), *x2 = gk_arg_t(c, 1);
    const opr_tensor_view *out = c->outputs[0];
    const double p = gk_arg_d(c, 2);
    if (!x1 || !x2) return GK_FAIL(c, OPR_ERR_INVALID, "cdist: x1 and x2 must be tensors");
    if (!(p >= 0)) return GK_FAIL(c, OPR_ERR_INVALID, "cdist: p must be >= 0 (got p=%g)", p);
    const int32_t nd = x1->ndim;
    if (nd < 2 || x2->ndim != nd || x1->shape[nd - 1] != x2->shape[nd - 1] || nd > GK_MAXD)
        return GK_FAIL(c, OPR_ERR_INVALID, "cdist: expected x1 [..., P, M] and x2 [..., R, M] with the same number of dims");
    if (out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "cdist: dtype %s is not supported on %s", gk_dtype_name(out->dtype), GPU_NAME);
    if (x1->dtype != out->dtype || x2->dtype != out->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "cdist: x1 and x2 must both be %s", gk_dtype_name(out->dtype));
    const int32_t nb = nd - 2;
    int64_t bst2[GK_MAXD];
    for (int32_t d = 0; d < nb; d++) {
        if (x2->shape[d] == x1->shape[d]) bst2[d] = x1->shape[d] == 1 ? 0 : x2->strides[d];
        else if (x2->shape[d] == 1) bst2[d] = 0;
        else return GK_FAIL(c, OPR_ERR_INVALID, "cdist: batch dims of x2 must match (or broadcast to) those of x1");
    }
    const int64_t P = x1->shape[nd - 2], R = x2->shape[nd - 2], M = x1->shape[nd - 1];
    const int64_t nbatch = gk_numel(nb, x1->shape);
    if (out->numel != nbatch * P * R || (out->numel > 0 && !gk_is_contiguous(out)))
        return GK_FAIL(c, OPR_ERR_INVALID, "cdist: output must be a contiguous tensor of %lld elements",
                       (long long)(nbatch * P * R));
    if (out->numel == 0) return OPR_OK;
    gk_geom bg;
    const int64_t *st[2] = {x1->strides, bst2};
    gk_geom_make(&bg, nb, x1->shape, 2, st);
    const int64_t total = out->numel;
    const unsigned blocks = gk_blocks(total);
    if (out->dtype == OPR_F32)
        gk_launch(k_cdist<float>, blocks, GK_THREADS, 0, k.stream, total, P, R, M, bg, (const float *)x1->data, x1->strides[nd - 2],
                                                            x1->strides[nd - 1], (const float *)x2->data, x2->strides[nd - 2],
                                                            x2->strides[nd - 1], (float *)out->data, p);
    else
        gk_launch(k_cdist<double>, blocks, GK_THREADS, 0, k.stream, total, P, R, M, bg, (const double *)x1->data, x1->strides[nd - 2],
                                                             x1->strides[nd - 1], (const double *)x2->data, x2->strides[nd - 2],
                                                             x2->strides[nd - 1], (double *)out->data, p);
    return gk_launched(&k, "cdist kernel");
}

/* ------------------------------------------------------------------ fused backward */

bool wanted(const opr_kernel_call *c, int out)
{
    return out < c->nout && ((c->grad_input_mask >> out) & 1) && c->outputs[out]->data;
}

/* Forward argument `arg` when saved, else the shape of gradient output `out`. */
bool operand_of(const opr_kernel_call *c, int arg, int out, opc_matmul_operand *o)
{
    return opc_matmul_operand_of(c, gk_arg_t(c, arg), out, o);
}

/* Starts backward call c: selects the device and checks the dtypes. *g, the gradient of
 * the output (argument 0), must be f32 or f64, and every other tensor argument and every
 * wanted gradient output (contiguous) of its dtype. */
int begin_backward(const opr_kernel_call *c, gk_ctx *k, const opr_tensor_view **g)
{
    int rc = gk_begin(c, c->op, k);
    if (rc) return rc;
    if (!(*g = gk_arg_t(c, 0))) return GK_FAIL(c, OPR_ERR_INVALID, "%s: no gradient of the output was given", c->op);
    const opr_dtype dt = (*g)->dtype;
    if (dt != OPR_F32 && dt != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", c->op, gk_dtype_name(dt), GPU_NAME);
    for (int32_t i = 0; i < c->nargs; i++) {
        const opr_tensor_view *t = gk_arg_t(c, i);
        if (t && t->dtype != dt)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: argument %d is %s, expected %s", c->op, (int)i, gk_dtype_name(t->dtype),
                           gk_dtype_name(dt));
    }
    for (int32_t p = 0; p < c->nout; p++)
        if (wanted(c, p) && (c->outputs[p]->dtype != dt || !gk_is_contiguous(c->outputs[p])))
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: gradient output %d must be a contiguous %s tensor", c->op, (int)p,
                           gk_dtype_name(dt));
    return OPR_OK;
}

/* Gradient output `out` where it is wanted, else NULL. */
opr_tensor_view *wanted_output(const opr_kernel_call *c, int out) { return wanted(c, out) ? c->outputs[out] : NULL; }

/* Whether the wanted gradients (NULL where not wanted) have their inputs' shapes. */
bool grads_fit(const opc_matmul_operand &x, const opr_tensor_view *gx, const opc_matmul_operand &y,
               const opr_tensor_view *gy)
{
    return (!gx || opc_same_shape(x.ndim, x.shape, gx)) && (!gy || opc_same_shape(y.ndim, y.shape, gy));
}

/* An opc_rgemm_run_fn: one product of a backward on the device; ctx is the gk_ctx. */
int run_product(void *ctx, const opc_rgemm_product *pr)
{
    return rgemm_run((const gk_ctx *)ctx, &pr->job, pr->a, pr->b);
}

/* The backward of x @ y (plugins/common/opc_matmul_grad.h) for output gradient g: gx
 * and gy, either NULL when not wanted, or the error when they do not have their
 * inputs' shapes. */
int matmul_bwd(const gk_ctx *k, const opr_kernel_call *c, const opr_tensor_view *g, const opc_matmul_problem *p,
               opr_tensor_view *gx, opr_tensor_view *gy)
{
    if (!grads_fit(p->x, gx, p->y, gy))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    char why[OPC_WHY_SIZE];
    const int rc = opc_matmul_grad_run(c->op, g->dtype, g, p, gx, gy, run_product, (void *)k, why, sizeof why);
    return why[0] ? GK_FAIL(c, rc, "%s", why) : rc;
}

/* mm_backward / bmm_backward / matmul_backward: args (grad, self, other, result);
 * outputs (self, other). */
int mm_family_backward(const opr_kernel_call *c, int need_ndim)
{
    gk_ctx k;
    const opr_tensor_view *g;
    int rc = begin_backward(c, &k, &g);
    if (rc) return rc;
    opc_matmul_operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: an operand is neither saved nor a wanted gradient", c->op);
    if (need_ndim && (x.ndim != need_ndim || y.ndim != need_ndim || (need_ndim == 3 && x.shape[0] != y.shape[0])))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected %d-d self and mat2%s", c->op, need_ndim,
                       need_ndim == 3 ? " with the same batch size" : "");
    const opc_matmul_problem p = {x, y, false, 1.0};
    return matmul_bwd(&k, c, g, &p, wanted_output(c, 0), wanted_output(c, 1));
}

[[maybe_unused]] int k_mm_backward(const opr_kernel_call *c) { return mm_family_backward(c, 2); }
[[maybe_unused]] int k_bmm_backward(const opr_kernel_call *c) { return mm_family_backward(c, 3); }
[[maybe_unused]] int k_matmul_backward(const opr_kernel_call *c) { return mm_family_backward(c, 0); }

/* linear_backward: args (grad, input, weight, bias, result); outputs (input, weight[,
 * bias]). */
[[maybe_unused]] int k_linear_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *g;
    int rc = begin_backward(c, &k, &g);
    if (rc) return rc;
    opr_tensor_view *gx = wanted_output(c, 0), *gw = wanted_output(c, 1), *gb = wanted_output(c, 2);
    if (gb && (rc = gk_sum_to(&k, g, gb, 1.0))) return rc;
    if (!gx && !gw) return OPR_OK;
    opc_matmul_operand x, w;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &w) || x.ndim < 1 || w.ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected input with at least 1 dim and a 2-d weight", c->op);
    const opc_matmul_problem p = {x, w, true, 1.0};
    return matmul_bwd(&k, c, g, &p, gx, gw);
}

/* addmm_backward: args (grad, self, mat1, mat2, beta, alpha, result); outputs (self,
 * mat1, mat2). */
[[maybe_unused]] int k_addmm_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *g;
    int rc = begin_backward(c, &k, &g);
    if (rc) return rc;
    const double beta = gk_arg_d(c, 4), alpha = gk_arg_d(c, 5);
    opr_tensor_view *gs = wanted_output(c, 0), *g1 = wanted_output(c, 1), *g2 = wanted_output(c, 2);
    if (gs && (rc = gk_sum_to(&k, g, gs, beta))) return rc;
    if (!g1 && !g2) return OPR_OK;
    opc_matmul_operand x, y;
    if (!operand_of(c, 2, 1, &x) || !operand_of(c, 3, 2, &y) || x.ndim != 2 || y.ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 2-d mat1 and mat2", c->op);
    const opc_matmul_problem p = {x, y, false, alpha};
    return matmul_bwd(&k, c, g, &p, g1, g2);
}

} // namespace

int gk_gemm(const gk_ctx *k, opr_dtype dt, int64_t m, int64_t n, int64_t kk, double alpha, const void *a, int64_t a_rs,
            int64_t a_cs, int64_t a_bs, const void *b, int64_t b_rs, int64_t b_cs, int64_t b_bs, double beta, void *c,
            int64_t c_bs, int64_t count)
{
    if (m == 0 || n == 0 || count == 0) return OPR_OK;
    if (!use_tiled() && (m > BLAS_INT_MAX || n > BLAS_INT_MAX || kk > BLAS_INT_MAX))
        return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "%s: a matrix dimension exceeds what cuBLAS accepts", k->op);
    const gop ga = {(const char *)a, a_rs, a_cs, a_bs}, gb = {(const char *)b, b_rs, b_cs, b_bs};
    return gemm_call(k, dt, m, n, kk, alpha, ga, gb, beta, (char *)c, c_bs, count);
}

int gk_register_linalg(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"mm", GEMM_DTYPES, k_mm},
        {"bmm", GEMM_DTYPES, k_bmm},
        {"matmul", GEMM_DTYPES, k_matmul},
        {"linear", GEMM_DTYPES, k_linear},
        {"addmm", GEMM_DTYPES, k_addmm},
        {"cdist", GK_FLOATS, k_cdist_op},
#ifdef OPR_GK_MM_BACKWARD
        {"mm_backward", GK_FLOATS, k_mm_backward},
#endif
#ifdef OPR_GK_BMM_BACKWARD
        {"bmm_backward", GK_FLOATS, k_bmm_backward},
#endif
#ifdef OPR_GK_MATMUL_BACKWARD
        {"matmul_backward", GK_FLOATS, k_matmul_backward},
#endif
#ifdef OPR_GK_LINEAR_BACKWARD
        {"linear_backward", GK_FLOATS, k_linear_backward},
#endif
#ifdef OPR_GK_ADDMM_BACKWARD
        {"addmm_backward", GK_FLOATS, k_addmm_backward},
#endif
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
