/* Native fused backward kernels: mm_backward, bmm_backward, matmul_backward,
 * linear_backward and addmm_backward (f32 and f64, OpenBLAS GEMM).
 *
 * Calling convention (include/opreg/plugin.h, above opr_kernel_fn): args are the
 * gradient of each forward output, then the forward arguments in schema order (tensors
 * the plan did not save are OPR_ARG_NONE), then the forward outputs; outputs are the
 * gradients of the inputs the entry covers, in the order of its YAML key, contiguous,
 * with data NULL where grad_input_mask does not ask for them. An input that was not
 * saved is always one whose gradient is asked for (see `needs:` in core.yaml), so its
 * shape is that of the corresponding output.
 *
 * Every product is one "reducing batched GEMM": C[c] = alpha * sum over the batch
 * positions b that map to c of A[b] @ B[b]. Operands are strided matrices handed to
 * BLAS with the transpose flag (a transposed operand is never copied); only a matrix
 * without a unit stride is packed. Batch dims that are summed over fold into the inner
 * dimension of a single GEMM when the operands' strides allow it, and batch dims of a
 * product whose right operand is shared fold into its rows: the weight gradient of
 * linear on [..., in] input is one [out, N] @ [N, in] GEMM over all N leading rows,
 * and nothing of batch size is ever materialised and then summed. */
#include "cpu_common.h"
#include "cpu_blas.h"
#include "cpu_kernels.h"

#include <stdlib.h>


/* A strided matrix operand: element (i, j) of batch position b at
 * data + (sum_d idx_d * bst[d] + i * rs + j * cs) * element size. */
typedef struct {
    const char *data;
    int64_t rows, cols, rs, cs;
    int64_t bst[OPR_MAX_DIMS];
} bmat;

static bmat bmat_t(bmat m) /* the transpose, as strides */
{
    bmat t = m;
    t.rows = m.cols;
    t.cols = m.rows;
    t.rs = m.cs;
    t.cs = m.rs;
    return t;
}

/* ------------------------------------------------------------------ reducing batched GEMM */

typedef struct {
    const char *op;
    opr_dtype dt;
    int32_t nb;                    /* batch dims of the product */
    int64_t bshape[OPR_MAX_DIMS];
    bool reduced[OPR_MAX_DIMS];    /* summed over: C has no extent there */
    int64_t cst[OPR_MAX_DIMS];     /* C's batch strides (elements) on the other dims */
    char *c;                       /* C: row-major A.rows x B.cols matrices, ldc = B.cols */
    double alpha;
} rgemm;

/* Folds reduced batch dim d into the inner dimension k (A's cols, B's rows) when both
 * operands continue their k run there. */
static bool fold_inner(const rgemm *j, bmat *a, bmat *b, int32_t d)
{
    const int64_t size = j->bshape[d];
    bmat fa = *a, fb = *b;
    if (a->bst[d] == 0 || b->bst[d] == 0) return false; /* broadcast operand: would repeat it */
    if (fa.cols == 1) fa.cs = a->bst[d];
    if (fb.rows == 1) fb.rs = b->bst[d];
    if (a->bst[d] != fa.cols * fa.cs || b->bst[d] != fb.rows * fb.rs) return false;
    fa.cols *= size;
    fb.rows *= size;
    if (fa.cols > BLAS_INT_MAX) return false;
    /* only when BLAS still reads both in place (else the fold would pack a big matrix) */
    if (layout_of(a->rows, a->cols, a->rs, a->cs).direct && !layout_of(fa.rows, fa.cols, fa.rs, fa.cs).direct) return false;
    if (layout_of(b->rows, b->cols, b->rs, b->cs).direct && !layout_of(fb.rows, fb.cols, fb.rs, fb.cs).direct) return false;
    *a = fa;
    *b = fb;
    return true;
}

/* Folds kept batch dim d into the rows of A and C when B is the same for every index
 * of d and A and C continue their row runs there. */
static bool fold_rows(const rgemm *j, bmat *a, const bmat *b, int32_t d, int64_t ncols)
{
    const int64_t size = j->bshape[d];
    bmat fa = *a;
    if (b->bst[d] != 0) return false;
    if (fa.rows == 1) fa.rs = a->bst[d];
    if (a->bst[d] != fa.rows * fa.rs || j->cst[d] != fa.rows * ncols) return false;
    fa.rows *= size;
    if (fa.rows > BLAS_INT_MAX) return false;
    if (layout_of(a->rows, a->cols, a->rs, a->cs).direct && !layout_of(fa.rows, fa.cols, fa.rs, fa.cs).direct) return false;
    *a = fa;
    return true;
}

static int rgemm_run(rgemm *j, bmat a, bmat b)
{
    const size_t es = cpu_dtype_size(j->dt);
    if (a.cols != b.rows)
        return CPU_FAIL(OPR_ERR_INVALID, "%s: inner dimensions differ (%lld vs %lld)", j->op, (long long)a.cols,
                        (long long)b.rows);
    const int64_t n = b.cols;
    int64_t c_mats = 1, red = 1;
    for (int32_t d = 0; d < j->nb; d++) {
        if (j->reduced[d]) red *= j->bshape[d];
        else c_mats *= j->bshape[d];
    }
    const int64_t c_numel = c_mats * a.rows * n;
    if (c_numel == 0) return OPR_OK;
    if (red == 0 || a.cols == 0) { /* an empty sum */
        memset(j->c, 0, (size_t)c_numel * es);
        return OPR_OK;
    }
    /* size-1 batch dims play no part; reduced dims fold into k, kept ones into rows */
    bool gone[OPR_MAX_DIMS] = {false};
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        if (j->bshape[d] == 1) gone[d] = true;
        else if (j->reduced[d] && fold_inner(j, &a, &b, d)) gone[d] = true;
    }
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        if (gone[d] || j->reduced[d]) continue;
        if (!fold_rows(j, &a, &b, d, n)) break;
        gone[d] = true;
    }
    const int64_t m = a.rows, k = a.cols;
    if (m > BLAS_INT_MAX || n > BLAS_INT_MAX || k > BLAS_INT_MAX)
        return CPU_FAIL(OPR_ERR_UNSUPPORTED, "%s: a matrix dimension exceeds what BLAS accepts", j->op);
    /* the remaining dims: kept ones outside, reduced ones inside (accumulating) */
    int32_t outer[OPR_MAX_DIMS], inner[OPR_MAX_DIMS], no = 0, ni = 0;
    int64_t nouter = 1, ninner = 1;
    for (int32_t d = 0; d < j->nb; d++) {
        if (gone[d]) continue;
        if (j->reduced[d]) { inner[ni++] = d; ninner *= j->bshape[d]; }
        else { outer[no++] = d; nouter *= j->bshape[d]; }
    }
    blas_layout la = layout_of(m, k, a.rs, a.cs), lb = layout_of(k, n, b.rs, b.cs);
    const bool pack_a = !la.direct, pack_b = !lb.direct;
    bool a_shared = true, b_shared = true; /* the same matrix at every batch position */
    for (int32_t i = 0; i < no; i++) { a_shared &= a.bst[outer[i]] == 0; b_shared &= b.bst[outer[i]] == 0; }
    for (int32_t i = 0; i < ni; i++) { a_shared &= a.bst[inner[i]] == 0; b_shared &= b.bst[inner[i]] == 0; }
    char *sa = pack_a ? malloc((size_t)(m * k) * es) : NULL;
    char *sb = pack_b ? malloc((size_t)(k * n) * es) : NULL;
    if ((pack_a && !sa) || (pack_b && !sb)) {
        free(sa);
        free(sb);
        return CPU_FAIL(OPR_ERR_NOMEM, "%s: out of memory for a packed operand", j->op);
    }
    if (pack_a) la = (blas_layout){true, false, k};
    if (pack_b) lb = (blas_layout){true, false, n};
    bool packed_a = false, packed_b = false;
    for (int64_t o = 0; o < nouter; o++) {
        int64_t oa = 0, ob = 0, oc = 0, rem = o;
        for (int32_t i = no - 1; i >= 0; i--) {
            const int32_t d = outer[i];
            const int64_t idx = rem % j->bshape[d];
            rem /= j->bshape[d];
            oa += idx * a.bst[d];
            ob += idx * b.bst[d];
            oc += idx * j->cst[d];
        }
        for (int64_t in = 0; in < ninner; in++) {
            int64_t ia = oa, ib = ob;
            rem = in;
            for (int32_t i = ni - 1; i >= 0; i--) {
                const int32_t d = inner[i];
                const int64_t idx = rem % j->bshape[d];
                rem /= j->bshape[d];
                ia += idx * a.bst[d];
                ib += idx * b.bst[d];
            }
            const char *pa = a.data + ia * (int64_t)es, *pb = b.data + ib * (int64_t)es;
            if (pack_a && !(packed_a && a_shared)) { pack(es, pa, m, k, a.rs, a.cs, sa); packed_a = true; }
            if (pack_b && !(packed_b && b_shared)) { pack(es, pb, k, n, b.rs, b.cs, sb); packed_b = true; }
            blas_gemm(j->dt, la, lb, m, n, k, j->alpha, pack_a ? sa : pa, pack_b ? sb : pb, in ? 1.0 : 0.0,
                      j->c + oc * (int64_t)es);
        }
    }
    free(sa);
    free(sb);
    return OPR_OK;
}

/* ------------------------------------------------------------------ operands */

/* The last two dims of a tensor (rows, cols, strides) as a matrix, or a 1-d tensor as
 * a row (left operand of a product) or a column (right operand). */
static bmat mat_of(const char *data, int32_t ndim, const int64_t *shape, const int64_t *strides, bool vec_as_row)
{
    bmat m;
    memset(&m, 0, sizeof m);
    m.data = data;
    if (ndim == 1) {
        m.rows = vec_as_row ? 1 : shape[0];
        m.cols = vec_as_row ? shape[0] : 1;
        m.rs = vec_as_row ? 0 : strides[0];
        m.cs = vec_as_row ? strides[0] : 0;
    } else {
        m.rows = shape[ndim - 2];
        m.cols = shape[ndim - 1];
        m.rs = strides[ndim - 2];
        m.cs = strides[ndim - 1];
    }
    return m;
}

/* Batch strides of a tensor whose first vb dims are batch dims, right-aligned to the
 * product's batch shape (0 where it has no such dim or size 1). */
static void set_bst(bmat *m, int32_t vb, const int64_t *shape, const int64_t *strides, const rgemm *j)
{
    for (int32_t d = 0; d < j->nb; d++) {
        const int32_t vd = d - (j->nb - vb);
        m->bst[d] = vd < 0 || shape[vd] == 1 ? 0 : strides[vd];
    }
}

/* C = a gradient output [cb..., rows, cols] (contiguous), its cb batch dims
 * right-aligned to the product's batch dims; the others are summed over. */
static void set_c(rgemm *j, const opr_tensor_view *out, int32_t cb)
{
    j->c = out->data;
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

/* Shape (and, when saved, data) of forward argument `arg`, else of gradient output `out`. */
typedef struct {
    const opr_tensor_view *t; /* NULL when not saved */
    int32_t ndim;
    const int64_t *shape;
} operand;

static bool operand_of(const opr_kernel_call *c, int arg, int out, operand *o)
{
    o->t = cpu_arg_t(c, arg);
    if (o->t) {
        o->ndim = o->t->ndim;
        o->shape = o->t->shape;
        return true;
    }
    if (!((c->grad_input_mask >> out) & 1)) return false;
    o->ndim = c->outputs[out].ndim;
    o->shape = c->outputs[out].shape;
    return true;
}

static bool wanted(const opr_kernel_call *c, int out) { return (c->grad_input_mask >> out) & 1 && c->outputs[out].data; }

/* Checks that every wanted output and every given tensor is of the kernel's dtype. */
static int check_dtypes(const opr_kernel_call *c, opr_dtype *dt)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    if (!g) return CPU_FAIL(OPR_ERR_INVALID, "%s: no gradient of the output was given", c->op);
    *dt = g->dtype;
    if (*dt != OPR_F32 && *dt != OPR_F64)
        return CPU_FAIL(OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", c->op, cpu_dtype_name(*dt));
    for (int32_t i = 0; i < c->nargs; i++) {
        const opr_tensor_view *t = cpu_arg_t(c, i);
        if (t && t->dtype != *dt)
            return CPU_FAIL(OPR_ERR_INVALID, "%s: argument %d is %s, expected %s", c->op, (int)i,
                            cpu_dtype_name(t->dtype), cpu_dtype_name(*dt));
    }
    for (int32_t p = 0; p < c->nout; p++)
        if (wanted(c, p) && (c->outputs[p].dtype != *dt ||
                             (c->outputs[p].numel > 0 && !cpu_is_contiguous(&c->outputs[p]))))
            return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient output %d must be a contiguous %s tensor", c->op, (int)p,
                            cpu_dtype_name(*dt));
    return OPR_OK;
}

static rgemm job(const opr_kernel_call *c, opr_dtype dt, double alpha)
{
    rgemm j;
    memset(&j, 0, sizeof j);
    j.op = c->op;
    j.dt = dt;
    j.alpha = alpha;
    return j;
}

/* out = scale * g summed down to out's shape (right-aligned broadcasting), accumulated
 * in double. */
static int sum_to_scaled(const char *op, const opr_tensor_view *g, opr_tensor_view *out, double scale)
{
    int64_t contig[OPR_MAX_DIMS], ost[OPR_MAX_DIMS], s = 1;
    for (int32_t d = out->ndim - 1; d >= 0; d--) {
        contig[d] = s;
        s *= out->shape[d];
    }
    opr_tensor_view as = *out;
    as.strides = contig;
    if (!cpu_bcast_strides(&as, g->ndim, g->shape, ost))
        return CPU_FAIL(OPR_ERR_INVALID, "%s: the gradient does not reduce to a %d-d input of these sizes", op,
                        (int)out->ndim);
    if (cpu_sum_rows(g, out, ost, scale)) return OPR_OK; /* the usual bias case, in parallel */
    double *acc = calloc((size_t)(out->numel ? out->numel : 1), sizeof *acc);
    if (!acc) return CPU_FAIL(OPR_ERR_NOMEM, "%s: out of memory", op);
    cpu_walk w;
    memset(&w, 0, sizeof w);
    w.ndim = g->ndim;
    w.nops = 2;
    w.shape = g->shape;
    memcpy(w.strides[0], g->strides, (size_t)g->ndim * sizeof(int64_t));
    memcpy(w.strides[1], ost, (size_t)g->ndim * sizeof(int64_t));
    cpu_walk_seek(&w, 0);
    if (g->dtype == OPR_F32) {
        const float *in = g->data;
        for (int64_t i = 0; i < g->numel; i++, cpu_walk_next(&w)) acc[w.off[1]] += in[w.off[0]];
        float *o = out->data;
        for (int64_t i = 0; i < out->numel; i++) o[i] = (float)(scale * acc[i]);
    } else {
        const double *in = g->data;
        for (int64_t i = 0; i < g->numel; i++, cpu_walk_next(&w)) acc[w.off[1]] += in[w.off[0]];
        double *o = out->data;
        for (int64_t i = 0; i < out->numel; i++) o[i] = scale * acc[i];
    }
    free(acc);
    return OPR_OK;
}

/* ------------------------------------------------------------------ matmul family */

/* The backward of x @ y with torch.matmul semantics: a 1-d x is a row, a 1-d y a
 * column (the dims that adds are absent from g), batch dims broadcast; gx and gy are
 * reduced over the batch dims their operand was broadcast along. x / y may be given as
 * shape only (data NULL) when only the other gradient needs them. y_t says that y is
 * given transposed (linear's weight [out, in] is y^T). */
typedef struct {
    const char *xdata, *ydata;
    int32_t xd, yd;
    const int64_t *xs, *ys, *xst, *yst;
    bool y_t;
    double alpha;
} mm_problem;

static int matmul_bwd(const opr_kernel_call *c, opr_dtype dt, const opr_tensor_view *g, const mm_problem *p,
                      opr_tensor_view *gx, opr_tensor_view *gy)
{
    const int32_t xd = p->xd, yd = p->yd;
    if (xd < 1 || yd < 1) return CPU_FAIL(OPR_ERR_INVALID, "%s: operands need at least 1 dim", c->op);
    rgemm base = job(c, dt, p->alpha);
    const int32_t xb = xd > 2 ? xd - 2 : 0, yb = yd > 2 ? yd - 2 : 0;
    base.nb = xb > yb ? xb : yb;
    for (int32_t d = 0; d < base.nb; d++) {
        const int32_t dx = d - (base.nb - xb), dy = d - (base.nb - yb);
        const int64_t sx = dx >= 0 ? p->xs[dx] : 1, sy = dy >= 0 ? p->ys[dy] : 1;
        if (sx != sy && sx != 1 && sy != 1)
            return CPU_FAIL(OPR_ERR_INVALID, "%s: batch dims do not broadcast", c->op);
        base.bshape[d] = sx == 1 ? sy : sx;
    }
    /* x as [n, K], y as [K, m] (from the shapes; strides are filled where data is) */
    const int64_t n = xd == 1 ? 1 : p->xs[xd - 2], K = p->xs[xd - 1];
    int64_t yk = yd == 1 ? p->ys[0] : p->ys[yd - 2], m = yd == 1 ? 1 : p->ys[yd - 1];
    if (p->y_t) { /* y given as y^T [m, K] (2-d) */
        if (yd != 2) return CPU_FAIL(OPR_ERR_INVALID, "%s: a transposed operand must be 2-d", c->op);
        yk = p->ys[1];
        m = p->ys[0];
    }
    if (yk != K) return CPU_FAIL(OPR_ERR_INVALID, "%s: inner dimensions differ (%lld vs %lld)", c->op, (long long)K, (long long)yk);
    /* g is [batch..., n (if x is not 1-d), m (if y is not 1-d)] */
    const int32_t gd = base.nb + (xd >= 2) + (yd >= 2);
    bool gok = g->ndim == gd;
    for (int32_t d = 0; gok && d < base.nb; d++) gok = g->shape[d] == base.bshape[d];
    if (gok && xd >= 2) gok = g->shape[base.nb] == n;
    if (gok && yd >= 2) gok = g->shape[gd - 1] == m;
    if (!gok) return CPU_FAIL(OPR_ERR_INVALID, "%s: the output gradient has the wrong shape", c->op);
    bmat gm;
    memset(&gm, 0, sizeof gm);
    gm.data = g->data;
    gm.rows = n;
    gm.cols = m;
    gm.rs = xd >= 2 ? g->strides[base.nb] : 0;
    gm.cs = yd >= 2 ? g->strides[gd - 1] : 0;
    set_bst(&gm, base.nb, g->shape, g->strides, &base);

    if (gx) { /* gx = g @ y^T, summed over the dims x was broadcast along */
        if (!p->ydata) return CPU_FAIL(OPR_ERR_INVALID, "%s: the other operand was not saved", c->op);
        bmat y = mat_of(p->ydata, yd, p->ys, p->yst, false);
        set_bst(&y, yb, p->ys, p->yst, &base);
        if (p->y_t) y = bmat_t(y); /* given as y^T [m, K] */
        rgemm j = base;
        set_c(&j, gx, xb);
        int rc = rgemm_run(&j, gm, bmat_t(y));
        if (rc) return rc;
    }
    if (gy) { /* gy = x^T @ g, summed over the dims y was broadcast along */
        if (!p->xdata) return CPU_FAIL(OPR_ERR_INVALID, "%s: the other operand was not saved", c->op);
        bmat x = mat_of(p->xdata, xd, p->xs, p->xst, true);
        set_bst(&x, xb, p->xs, p->xst, &base);
        rgemm j = base;
        set_c(&j, gy, yb);
        /* given as y^T [m, K], its gradient is (x^T @ g)^T = g^T @ x */
        return p->y_t ? rgemm_run(&j, bmat_t(gm), x) : rgemm_run(&j, bmat_t(x), gm);
    }
    return OPR_OK;
}

/* Shape checks of an operand whose data we read. */
static bool shape_is(const opr_tensor_view *out, int32_t ndim, const int64_t *shape)
{
    if (out->ndim != ndim) return false;
    for (int32_t d = 0; d < ndim; d++)
        if (out->shape[d] != shape[d]) return false;
    return true;
}

/* mm_backward: args (grad, self, mat2, result); outputs (self, mat2). */
static int k_mm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y) || x.ndim != 2 || y.ndim != 2)
        return CPU_FAIL(OPR_ERR_INVALID, "%s: expected 2-d self and mat2 (given or as gradient outputs)", c->op);
    mm_problem p = {x.t ? x.t->data : NULL, y.t ? y.t->data : NULL, 2, 2, x.shape, y.shape,
                    x.t ? x.t->strides : NULL, y.t ? y.t->strides : NULL, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? &c->outputs[0] : NULL, *gy = wanted(c, 1) ? &c->outputs[1] : NULL;
    if ((gx && !shape_is(gx, 2, x.shape)) || (gy && !shape_is(gy, 2, y.shape)))
        return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* bmm_backward: args (grad, self, mat2, result); outputs (self, mat2). */
static int k_bmm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y) || x.ndim != 3 || y.ndim != 3 || x.shape[0] != y.shape[0])
        return CPU_FAIL(OPR_ERR_INVALID, "%s: expected 3-d self and mat2 with the same batch size", c->op);
    mm_problem p = {x.t ? x.t->data : NULL, y.t ? y.t->data : NULL, 3, 3, x.shape, y.shape,
                    x.t ? x.t->strides : NULL, y.t ? y.t->strides : NULL, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? &c->outputs[0] : NULL, *gy = wanted(c, 1) ? &c->outputs[1] : NULL;
    if ((gx && !shape_is(gx, 3, x.shape)) || (gy && !shape_is(gy, 3, y.shape)))
        return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* matmul_backward: args (grad, self, other, result); outputs (self, other). Handles
 * 1-d operands and broadcast batch dims (gradients summed over them). */
static int k_matmul_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    operand x, y;
    if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &y))
        return CPU_FAIL(OPR_ERR_INVALID, "%s: an operand is neither saved nor a wanted gradient", c->op);
    mm_problem p = {x.t ? x.t->data : NULL, y.t ? y.t->data : NULL, x.ndim, y.ndim, x.shape, y.shape,
                    x.t ? x.t->strides : NULL, y.t ? y.t->strides : NULL, false, 1.0};
    opr_tensor_view *gx = wanted(c, 0) ? &c->outputs[0] : NULL, *gy = wanted(c, 1) ? &c->outputs[1] : NULL;
    if ((gx && !shape_is(gx, x.ndim, x.shape)) || (gy && !shape_is(gy, y.ndim, y.shape)))
        return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
    return matmul_bwd(c, dt, cpu_arg_t(c, 0), &p, gx, gy);
}

/* linear_backward: args (grad, input, weight, bias, result); outputs (input, weight,
 * bias). input [..., in] @ W^T + bias with W [out, in]: W^T is read through W's strides
 * and W's gradient g^T @ input is written straight into W's layout; input's leading
 * dims fold into the rows of single GEMMs where the strides allow (always for
 * contiguous tensors). */
static int k_linear_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    opr_tensor_view *gx = wanted(c, 0) ? &c->outputs[0] : NULL, *gw = wanted(c, 1) ? &c->outputs[1] : NULL;
    opr_tensor_view *gb = c->nout > 2 && wanted(c, 2) ? &c->outputs[2] : NULL;
    /* GEMMs first, the bias sum after: an OpenMP region right before an OpenBLAS call
     * leaves spinning threads that slow the GEMM down on a machine with few cores */
    if (gx || gw) {
        operand x, w;
        if (!operand_of(c, 1, 0, &x) || !operand_of(c, 2, 1, &w) || x.ndim < 1 || w.ndim != 2)
            return CPU_FAIL(OPR_ERR_INVALID, "%s: expected input with at least 1 dim and a 2-d weight", c->op);
        if ((gx && !shape_is(gx, x.ndim, x.shape)) || (gw && !shape_is(gw, 2, w.shape)))
            return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
        mm_problem p = {x.t ? x.t->data : NULL, w.t ? w.t->data : NULL, x.ndim, 2, x.shape, w.shape,
                        x.t ? x.t->strides : NULL, w.t ? w.t->strides : NULL, true, 1.0};
        if ((rc = matmul_bwd(c, dt, g, &p, gx, gw))) return rc;
    }
    return gb ? sum_to_scaled(c->op, g, gb, 1.0) : OPR_OK;
}

/* addmm_backward: args (grad, self, mat1, mat2, beta, alpha, result); outputs (self,
 * mat1, mat2). beta * self (broadcast) + alpha * mat1 @ mat2. */
static int k_addmm_backward(const opr_kernel_call *c)
{
    opr_dtype dt;
    int rc = check_dtypes(c, &dt);
    if (rc) return rc;
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    const double beta = cpu_arg_d(c, 4), alpha = cpu_arg_d(c, 5);
    opr_tensor_view *gs = wanted(c, 0) ? &c->outputs[0] : NULL;
    opr_tensor_view *g1 = wanted(c, 1) ? &c->outputs[1] : NULL, *g2 = wanted(c, 2) ? &c->outputs[2] : NULL;
    if (g1 || g2) { /* GEMMs before the OpenMP reduction, as in linear_backward */
        operand x, y;
        if (!operand_of(c, 2, 1, &x) || !operand_of(c, 3, 2, &y) || x.ndim != 2 || y.ndim != 2)
            return CPU_FAIL(OPR_ERR_INVALID, "%s: expected 2-d mat1 and mat2", c->op);
        if ((g1 && !shape_is(g1, 2, x.shape)) || (g2 && !shape_is(g2, 2, y.shape)))
            return CPU_FAIL(OPR_ERR_INVALID, "%s: gradient outputs must have the inputs' shapes", c->op);
        mm_problem p = {x.t ? x.t->data : NULL, y.t ? y.t->data : NULL, 2, 2, x.shape, y.shape,
                        x.t ? x.t->strides : NULL, y.t ? y.t->strides : NULL, false, alpha};
        if ((rc = matmul_bwd(c, dt, g, &p, g1, g2))) return rc;
    }
    return gs ? sum_to_scaled(c->op, g, gs, beta) : OPR_OK;
}

int cpu_register_backward(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"mm_backward", k_mm_backward},         {"bmm_backward", k_bmm_backward},
        {"matmul_backward", k_matmul_backward}, {"linear_backward", k_linear_backward},
        {"addmm_backward", k_addmm_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
