/* Linear algebra kernels: mm, bmm, matmul, linear, addmm (OpenBLAS GEMM) and cdist
 * (any p >= 0, direct here; p = 2 through a GEMM for large inputs, cpu_cdist_gemm.c).
 *
 * Every product goes through one batched-GEMM driver. Operands are described by their
 * matrix strides, so a transposed view (t(x)) reaches BLAS as-is with the transpose
 * flag and costs no copy; only a matrix without a unit stride is packed into scratch.
 * When the right operand is shared by every batch and the left one's batches lie back
 * to back, the batches fold into the rows of a single GEMM: the common
 * [..., k] @ [k, n] case of linear and matmul then runs as one large product, which is
 * both faster and lets OpenBLAS thread it well. */
#include "cpu_common.h"
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "../common/opc_dist.h"

#include <math.h>
#include <stdlib.h>

/* The largest dimension or leading dimension BLAS takes (blasint is 32-bit unless
 * OpenBLAS was built with INTERFACE64). */

/* One operand of a batched product. Element (i, j) of batch b lies at
 * data + (boff(b) + i * rs + j * cs) * element size, boff summing bst over the batch
 * index. */
typedef struct {
    const char *data;
    int64_t rows, cols, rs, cs;
    int64_t bst[OPR_MAX_DIMS]; /* strides over the batch shape; 0 where broadcast */
} mat_arg;

/* C[b] = alpha * A[b] @ B[b] + beta * C[b] for every b of the batch shape; C is
 * contiguous [batch..., m, n]. With beta == 0, C is only written (BLAS semantics), so
 * uninitialised outputs are fine. */
typedef struct {
    const char *op;
    opr_dtype dt;
    int32_t nb;
    int64_t bshape[OPR_MAX_DIMS];
    double alpha, beta;
    char *c;
} gemm_job;

static int64_t batch_count(const gemm_job *j)
{
    int64_t n = 1;
    for (int32_t d = 0; d < j->nb; d++) n *= j->bshape[d];
    return n;
}


/* ------------------------------------------------------------------ batched driver */

static bool shared_by_batches(const gemm_job *j, const mat_arg *x)
{
    for (int32_t d = 0; d < j->nb; d++)
        if (j->bshape[d] > 1 && x->bst[d] != 0) return false;
    return true;
}

/* Views A's batch dims plus its rows as one run of rows at a single stride, if they are
 * laid out that way. */
static bool fold_rows(const gemm_job *j, const mat_arg *a, int64_t *rows, int64_t *rs)
{
    int64_t r = a->rows, s = a->rs;
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        const int64_t size = j->bshape[d];
        if (size == 1) continue;
        if (r == 1) s = a->bst[d];
        else if (a->bst[d] != r * s) return false;
        r *= size;
    }
    *rows = r;
    *rs = s;
    return true;
}

/* C = beta * C, the whole product when the inner dimension is empty. */
static void scale_c(const gemm_job *j, int64_t n)
{
    if (j->beta == 0) {
        memset(j->c, 0, (size_t)n * cpu_dtype_size(j->dt));
    } else if (j->beta != 1) {
        if (j->dt == OPR_F32) {
            float *p = (float *)j->c;
            for (int64_t i = 0; i < n; i++) p[i] *= (float)j->beta;
        } else {
            double *p = (double *)j->c;
            for (int64_t i = 0; i < n; i++) p[i] *= j->beta;
        }
    }
}

/* One GEMM per batch, packing operands BLAS cannot read in place (once, if shared). */
static int gemm_loop(const opr_kernel_call *c, const gemm_job *j, int32_t nb, const mat_arg *a, const mat_arg *b)
{
    const int64_t m = a->rows, k = a->cols, n = b->cols;
    const size_t es = cpu_dtype_size(j->dt);
    opc_blas_layout la = layout_of(m, k, a->rs, a->cs), lb = layout_of(k, n, b->rs, b->cs);
    const bool pack_a = !la.direct, pack_b = !lb.direct;
    char *sa, *sb;
    const int rc = cpu_pack_scratch(c, j->op, m, k, n, es, &la, &lb, &sa, &sb);
    if (rc) return rc;

    gemm_job one = *j;
    one.nb = nb;
    const bool a_shared = shared_by_batches(&one, a), b_shared = shared_by_batches(&one, b);
    cpu_walk w;
    memset(&w, 0, sizeof w);
    w.ndim = nb;
    w.nops = 2;
    w.shape = j->bshape;
    for (int32_t d = 0; d < nb; d++) {
        w.strides[0][d] = a->bst[d];
        w.strides[1][d] = b->bst[d];
    }
    const int64_t nbatch = batch_count(&one);
    cpu_walk_seek(&w, 0);
    for (int64_t i = 0; i < nbatch; i++, cpu_walk_next(&w)) {
        const char *pa = a->data + w.off[0] * (int64_t)es, *pb = b->data + w.off[1] * (int64_t)es;
        if (pack_a && (i == 0 || !a_shared)) pack(es, pa, m, k, a->rs, a->cs, sa);
        if (pack_b && (i == 0 || !b_shared)) pack(es, pb, k, n, b->rs, b->cs, sb);
        blas_gemm(j->dt, la, lb, m, n, k, j->alpha, pack_a ? sa : pa, pack_b ? sb : pb, j->beta,
                  j->c + i * m * n * (int64_t)es);
    }
    free(sa);
    free(sb);
    return OPR_OK;
}

static int gemm_run(const opr_kernel_call *c, const gemm_job *j, const mat_arg *a, const mat_arg *b)
{
    const int64_t m = a->rows, k = a->cols, n = b->cols, nbatch = batch_count(j);
    if (b->rows != k)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: inner dimensions differ (%lld vs %lld)", j->op,
                        (long long)k, (long long)b->rows);
    if (m == 0 || n == 0 || nbatch == 0) return OPR_OK;
    if (k == 0) {
        scale_c(j, nbatch * m * n);
        return OPR_OK;
    }
    if (m > BLAS_INT_MAX || n > BLAS_INT_MAX || k > BLAS_INT_MAX)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: a matrix dimension exceeds what BLAS accepts", j->op);
    int64_t rows, rs;
    if (nbatch > 1 && shared_by_batches(j, b) && fold_rows(j, a, &rows, &rs) && rows <= BLAS_INT_MAX &&
        layout_of(rows, k, rs, a->cs).direct) {
        mat_arg fa = *a;
        fa.rows = rows;
        fa.rs = rs;
        return gemm_loop(c, j, 0, &fa, b);
    }
    return gemm_loop(c, j, j->nb, a, b);
}

/* ------------------------------------------------------------------ operands */

/* The last two dims of v as a matrix. */
static mat_arg mat_of(const opr_tensor_view *v)
{
    mat_arg m;
    memset(&m, 0, sizeof m);
    m.data = v->data;
    m.rows = v->shape[v->ndim - 2];
    m.cols = v->shape[v->ndim - 1];
    m.rs = v->strides[v->ndim - 2];
    m.cs = v->strides[v->ndim - 1];
    return m;
}

/* A 1-d v as a 1 x n row (left operand) or an n x 1 column (right operand). */
static mat_arg vec_of(const opr_tensor_view *v, bool as_row)
{
    mat_arg m;
    memset(&m, 0, sizeof m);
    m.data = v->data;
    m.rows = as_row ? 1 : v->shape[0];
    m.cols = as_row ? v->shape[0] : 1;
    m.rs = as_row ? 0 : v->strides[0];
    m.cs = as_row ? v->strides[0] : 0;
    return m;
}

/* Batch strides of v (its dims before the last mat_dims) read at the job's batch shape. */
static bool batch_strides(const opr_tensor_view *v, int32_t mat_dims, const gemm_job *j,
                          int64_t *bst)
{
    const int32_t vb = v->ndim > mat_dims ? v->ndim - mat_dims : 0;
    if (vb > j->nb) return false;
    for (int32_t d = 0; d < j->nb; d++) {
        const int32_t vd = d - (j->nb - vb);
        if (vd < 0 || v->shape[vd] == 1) bst[d] = 0;
        else if (v->shape[vd] == j->bshape[d]) bst[d] = v->strides[vd];
        else return false;
    }
    return true;
}

/* Dtypes must all be the output's and the output a contiguous [batch..., m, n]. */
static int check_operands(const opr_kernel_call *c, const gemm_job *j, const opr_tensor_view *out,
                          const opr_tensor_view *a, const opr_tensor_view *b, int64_t m, int64_t n)
{
    if (out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", j->op,
                        cpu_dtype_name(out->dtype));
    if (a->dtype != out->dtype || b->dtype != out->dtype)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: operands must both be %s (got %s and %s)", j->op,
                        cpu_dtype_name(out->dtype), cpu_dtype_name(a->dtype), cpu_dtype_name(b->dtype));
    if (out->numel != batch_count(j) * m * n || (out->numel > 0 && !cpu_is_contiguous(out)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: output must be a contiguous tensor of %lld elements", j->op,
                        (long long)(batch_count(j) * m * n));
    return OPR_OK;
}

static gemm_job job_for(const opr_kernel_call *c, double alpha, double beta)
{
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.op = c->op;
    j.dt = c->outputs[0]->dtype;
    j.alpha = alpha;
    j.beta = beta;
    j.c = c->outputs[0]->data;
    return j;
}

/* ------------------------------------------------------------------ kernels */

static int k_mm(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *y = cpu_arg_t(c, 1);
    if (x->ndim != 2 || y->ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "mm: expected 2-d tensors, got %d-d and %d-d", (int)x->ndim, (int)y->ndim);
    gemm_job j = job_for(c, 1, 0);
    const mat_arg a = mat_of(x), b = mat_of(y);
    int rc = check_operands(c, &j, c->outputs[0], x, y, a.rows, b.cols);
    return rc ? rc : gemm_run(c, &j, &a, &b);
}

static int k_bmm(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *y = cpu_arg_t(c, 1);
    if (x->ndim != 3 || y->ndim != 3 || x->shape[0] != y->shape[0])
        return CPU_FAIL(c, OPR_ERR_INVALID, "bmm: expected 3-d tensors with the same batch size");
    gemm_job j = job_for(c, 1, 0);
    j.nb = 1;
    j.bshape[0] = x->shape[0];
    mat_arg a = mat_of(x), b = mat_of(y);
    batch_strides(x, 2, &j, a.bst);
    batch_strides(y, 2, &j, b.bst);
    int rc = check_operands(c, &j, c->outputs[0], x, y, a.rows, b.cols);
    return rc ? rc : gemm_run(c, &j, &a, &b);
}

/* torch.matmul: a 1-d left operand is a row and a 1-d right operand a column; the
 * dims that adds are absent from the output, which leaves its memory layout that of
 * [batch..., m, n]. Batch dims broadcast. */
static int k_matmul(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *y = cpu_arg_t(c, 1);
    if (x->ndim < 1 || y->ndim < 1)
        return CPU_FAIL(c, OPR_ERR_INVALID, "matmul: both operands need at least 1 dim (got %d and %d)",
                        (int)x->ndim, (int)y->ndim);
    gemm_job j = job_for(c, 1, 0);
    mat_arg a = x->ndim == 1 ? vec_of(x, true) : mat_of(x);
    mat_arg b = y->ndim == 1 ? vec_of(y, false) : mat_of(y);
    const int32_t xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0;
    j.nb = xb > yb ? xb : yb;
    for (int32_t d = 0; d < j.nb; d++) {
        const int32_t dx = d - (j.nb - xb), dy = d - (j.nb - yb);
        const int64_t sx = dx >= 0 ? x->shape[dx] : 1, sy = dy >= 0 ? y->shape[dy] : 1;
        if (sx != sy && sx != 1 && sy != 1)
            return CPU_FAIL(c, OPR_ERR_INVALID, "matmul: batch dims do not broadcast (%lld vs %lld at batch dim %d)",
                            (long long)sx, (long long)sy, (int)d);
        j.bshape[d] = sx == 1 ? sy : sx;
    }
    batch_strides(x, 2, &j, a.bst);
    batch_strides(y, 2, &j, b.bst);
    int rc = check_operands(c, &j, c->outputs[0], x, y, a.rows, b.cols);
    return rc ? rc : gemm_run(c, &j, &a, &b);
}

/* input [..., in] @ weight^T [in, out] (+ bias). The weight's transpose is just its
 * strides swapped; input's leading dims are the batch and usually fold into rows. */
static int k_linear(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 1), *bias = cpu_arg_t(c, 2);
    if (x->ndim < 1 || w->ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "linear: expected input with at least 1 dim and a 2-d weight (got %d-d and %d-d)",
                        (int)x->ndim, (int)w->ndim);
    gemm_job j = job_for(c, 1, bias ? 1 : 0);
    mat_arg a = x->ndim == 1 ? vec_of(x, true) : mat_of(x), b;
    memset(&b, 0, sizeof b);
    b.data = w->data;
    b.rows = w->shape[1];
    b.cols = w->shape[0];
    b.rs = w->strides[1];
    b.cs = w->strides[0];
    j.nb = x->ndim > 2 ? x->ndim - 2 : 0;
    memcpy(j.bshape, x->shape, (size_t)j.nb * sizeof *j.bshape);
    batch_strides(x, 2, &j, a.bst);
    int rc = check_operands(c, &j, c->outputs[0], x, w, a.rows, b.cols);
    if (rc) return rc;
    if (bias) {
        int64_t bst;
        if (bias->dtype != j.dt || !opc_bcast_strides(bias, 1, &b.cols, &bst))
            return CPU_FAIL(c, OPR_ERR_INVALID, "linear: bias must be %s and broadcast to [%lld]",
                            cpu_dtype_name(j.dt), (long long)b.cols);
        /* Every output row starts as the bias; the GEMM then accumulates (beta = 1). */
        if (b.cols > 0 && bias->numel > 0)
            pack(cpu_dtype_size(j.dt), bias->data, batch_count(&j) * a.rows, b.cols, 0, bst, j.c);
    }
    return gemm_run(c, &j, &a, &b);
}

/* beta * self + alpha * mat1 @ mat2. With beta == 0 self is not read at all, so NaN
 * or Inf in it do not leak into the result (PyTorch's rule). */
static int k_addmm(const opr_kernel_call *c)
{
    const opr_tensor_view *s = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *y = cpu_arg_t(c, 2);
    const opr_tensor_view *out = c->outputs[0];
    if (x->ndim != 2 || y->ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "addmm: mat1 and mat2 must be 2-d (got %d-d and %d-d)", (int)x->ndim, (int)y->ndim);
    gemm_job j = job_for(c, cpu_arg_d(c, 4), cpu_arg_d(c, 3));
    const mat_arg a = mat_of(x), b = mat_of(y);
    const int64_t shape[2] = { a.rows, b.cols };
    int64_t sst[2];
    if (out->ndim != 2 || out->shape[0] != a.rows || out->shape[1] != b.cols ||
        s->dtype != j.dt || !opc_bcast_strides(s, 2, shape, sst))
        return CPU_FAIL(c, OPR_ERR_INVALID, "addmm: self must be %s and broadcast to [%lld, %lld]",
                        cpu_dtype_name(j.dt), (long long)a.rows, (long long)b.cols);
    int rc = check_operands(c, &j, out, x, y, a.rows, b.cols);
    if (rc) return rc;
    if (j.beta != 0 && out->numel > 0) pack(cpu_dtype_size(j.dt), s->data, a.rows, b.cols, sst[0], sst[1], j.c);
    return gemm_run(c, &j, &a, &b);
}

/* ------------------------------------------------------------------ cdist */

/* Small inputs: distances from direct differences, summed in double. Large ones
 * (cpu_cdist_use_gemm) take the |x|^2 + |y|^2 - 2xy GEMM identity, which alone would
 * cancel catastrophically for nearby points (a distance of 1e-4 between points of norm 1
 * comes out as 0 or noise in f32): cpu_cdist_gemm.c recomputes those pairs the direct way. */
typedef struct {
    int32_t nb;
    const int64_t *bshape;
    const int64_t *bst1, *bst2;
    int64_t nbatch, P, R, M, rs1, rs2;
    double p; /* the norm: 2 takes the vectorised loop, any other opc_dist_add */
    const void *x1, *x2;
    void *out;
} cdist_job;

#define DEF_CDIST(T, SUF)                                                                 \
    static void cdist_##SUF(const cdist_job *j)                                           \
    {                                                                                     \
        const bool par = j->nbatch * j->P > 1 &&                                          \
                         j->nbatch * j->P * j->R * (j->M + 1) >= CPU_PAR_THRESHOLD;       \
        _Pragma("omp parallel for if (par)")                                              \
        for (int64_t bi = 0; bi < j->nbatch * j->P; bi++) {                               \
            int64_t rem = bi / j->P, o1 = (bi % j->P) * j->rs1, o2 = 0;                   \
            for (int32_t d = j->nb - 1; d >= 0; d--) {                                    \
                o1 += rem % j->bshape[d] * j->bst1[d];                                    \
                o2 += rem % j->bshape[d] * j->bst2[d];                                    \
                rem /= j->bshape[d];                                                      \
            }                                                                             \
            const T *r1 = (const T *)j->x1 + o1;                                          \
            T *o = (T *)j->out + bi * j->R;                                               \
            for (int64_t r = 0; r < j->R; r++) {                                          \
                const T *r2 = (const T *)j->x2 + o2 + r * j->rs2;                         \
                double acc = 0;                                                           \
                if (j->p == 2) {                                                          \
                    for (int64_t m = 0; m < j->M; m++) {                                  \
                        const double diff = (double)r1[m] - (double)r2[m];                \
                        acc += diff * diff;                                               \
                    }                                                                     \
                } else {                                                                  \
                    for (int64_t m = 0; m < j->M; m++)                                    \
                        acc = opc_dist_add(j->p, acc, (double)r1[m] - (double)r2[m]);     \
                }                                                                         \
                o[r] = (T)opc_dist_finish(j->p, acc);                                     \
            }                                                                             \
        }                                                                                 \
    }

DEF_CDIST(float, f32)
DEF_CDIST(double, f64)

/* Rows must have unit stride for the inner loop to vectorise; a view whose last dim
 * does not is copied to a contiguous buffer first. Returns the buffer to free (NULL if
 * none was needed); *data is the data to read with strides st, or NULL when out of
 * memory. */
static char *unit_rows(const opr_tensor_view *v, int64_t *st, const char **data)
{
    memcpy(st, v->strides, (size_t)v->ndim * sizeof *st);
    *data = v->data;
    if (v->strides[v->ndim - 1] == 1 || v->shape[v->ndim - 1] <= 1 || v->numel == 0) return NULL;
    const size_t es = cpu_dtype_size(v->dtype);
    char *buf = malloc((size_t)v->numel * es);
    if (!buf) {
        *data = NULL;
        return NULL;
    }
    opc_contig_strides(v->ndim, v->shape, st);
    /* Each (batch, row) is one contiguous row of the buffer. */
    const int64_t M = v->shape[v->ndim - 1], nrows = v->numel / M;
    cpu_walk w;
    memset(&w, 0, sizeof w);
    w.ndim = v->ndim - 1;
    w.nops = 1;
    w.shape = v->shape;
    memcpy(w.strides[0], v->strides, (size_t)(v->ndim - 1) * sizeof *st);
    cpu_walk_seek(&w, 0);
    for (int64_t r = 0; r < nrows; r++, cpu_walk_next(&w))
        pack(es, (const char *)v->data + w.off[0] * (int64_t)es, 1, M, 0, v->strides[v->ndim - 1],
             buf + r * M * (int64_t)es);
    *data = buf;
    return buf;
}

static int k_cdist(const opr_kernel_call *c)
{
    const opr_tensor_view *x1 = cpu_arg_t(c, 0), *x2 = cpu_arg_t(c, 1);
    const opr_tensor_view *out = c->outputs[0];
    const double p = cpu_arg_d(c, 2);
    if (!(p >= 0)) return CPU_FAIL(c, OPR_ERR_INVALID, "cdist: p must be >= 0 (got p=%g)", p);
    const int32_t nd = x1->ndim;
    if (nd < 2 || x2->ndim != nd || x1->shape[nd - 1] != x2->shape[nd - 1])
        return CPU_FAIL(c, OPR_ERR_INVALID, "cdist: expected x1 [..., P, M] and x2 [..., R, M] with the same number of dims");
    if (out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "cdist: dtype %s is not supported on cpu", cpu_dtype_name(out->dtype));
    if (x1->dtype != out->dtype || x2->dtype != out->dtype)
        return CPU_FAIL(c, OPR_ERR_INVALID, "cdist: x1 and x2 must both be %s", cpu_dtype_name(out->dtype));

    gemm_job batch;
    memset(&batch, 0, sizeof batch);
    batch.nb = nd - 2;
    memcpy(batch.bshape, x1->shape, (size_t)batch.nb * sizeof *batch.bshape);
    int64_t bst1[OPR_MAX_DIMS], bst2[OPR_MAX_DIMS];
    if (!batch_strides(x2, 2, &batch, bst2))
        return CPU_FAIL(c, OPR_ERR_INVALID, "cdist: batch dims of x2 must match (or broadcast to) those of x1");
    cdist_job j = {
        .nb = batch.nb, .bshape = batch.bshape, .bst1 = bst1, .bst2 = bst2,
        .nbatch = batch_count(&batch), .P = x1->shape[nd - 2], .R = x2->shape[nd - 2],
        .M = x1->shape[nd - 1], .p = p, .out = out->data,
    };
    if (out->numel != j.nbatch * j.P * j.R || (out->numel > 0 && !cpu_is_contiguous(out)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "cdist: output must be a contiguous tensor of %lld elements",
                        (long long)(j.nbatch * j.P * j.R));
    if (out->numel == 0) return OPR_OK;

    int64_t st1[OPR_MAX_DIMS], st2[OPR_MAX_DIMS];
    const char *d1, *d2;
    char *buf1 = unit_rows(x1, st1, &d1), *buf2 = unit_rows(x2, st2, &d2);
    if (!d1 || !d2) {
        free(buf1);
        free(buf2);
        return CPU_FAIL(c, OPR_ERR_NOMEM, "cdist: out of memory");
    }
    opr_tensor_view v1 = *x1, v2 = *x2;
    v1.strides = st1;
    v2.strides = st2;
    batch_strides(&v1, 2, &batch, bst1);
    batch_strides(&v2, 2, &batch, bst2);
    j.rs1 = st1[nd - 2];
    j.rs2 = st2[nd - 2];
    j.x1 = d1;
    j.x2 = d2;
    int rc = OPR_OK;
    if (p == 2 && cpu_cdist_use_gemm(j.P, j.R, j.M, j.rs1, j.rs2)) {
        const int64_t es = (int64_t)cpu_dtype_size(out->dtype);
        for (int64_t b = 0; b < j.nbatch && rc == OPR_OK; b++) {
            int64_t rem = b, o1 = 0, o2 = 0;
            for (int32_t d = j.nb - 1; d >= 0; d--) {
                o1 += rem % j.bshape[d] * bst1[d];
                o2 += rem % j.bshape[d] * bst2[d];
                rem /= j.bshape[d];
            }
            rc = cpu_cdist_gemm(out->dtype, j.P, j.R, j.M, d1 + o1 * es, j.rs1, d2 + o2 * es, j.rs2,
                                (char *)out->data + b * j.P * j.R * es);
        }
    } else if (out->dtype == OPR_F32) {
        cdist_f32(&j);
    } else {
        cdist_f64(&j);
    }
    free(buf1);
    free(buf2);
    return rc == OPR_OK ? OPR_OK : CPU_FAIL(c, rc, "cdist: out of memory");
}

int cpu_register_linalg(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    /* the products also in f16 and bf16, through f32 GEMMs (cpu_half.c) */
    const struct { const char *op; opr_kernel_fn fn; bool upcast; } table[] = {
        { "mm", k_mm, true }, { "bmm", k_bmm, true }, { "matmul", k_matmul, true },
        { "linear", k_linear, true }, { "addmm", k_addmm, true }, { "cdist", k_cdist, false },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? cpu_register_upcast : cpu_register)(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
