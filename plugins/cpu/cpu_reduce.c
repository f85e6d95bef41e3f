/* Reduction CPU kernels: sum, mean, prod and norm, and the machinery every reduction
 * runs on (cpu_reduce.h says how it works): the plan, the driver and the column path.
 * max, min, max.dim, min.dim, amax and amin: cpu_reduce_extreme.c. */
#include "cpu_reduce.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"
#include "../common/opc_reduce.h"

#include <tgmath.h> /* exp(x) etc. pick the float or double version from x's type */

/* Parts a long slice is cut into when there are too few outputs to share out. */
#define RED_NPART 64
/* ... and the shortest part worth a thread. */
#define RED_PART_MIN 4096

/* ------------------------------------------------------------------ plan */

static inline int64_t red_abs64(int64_t v) { return v < 0 ? -v : v; }

/* Splits `in` into kept and reduced dims (bit d of `mask` = reduce dim d) and matches
 * the kept dims to each output. keepdim only decides whether the output has size-1
 * dims in place of the reduced ones, so size-1 dims are ignored on both sides: this
 * accepts either form and everything the host may compute for a 0-d result. */
static int red_plan_make(const opr_kernel_call *c, const char *op, const opr_tensor_view *in, uint32_t mask, int nout,
                         const opr_tensor_view *const *outs, red_plan *pl)
{
    if (in->ndim > OPR_MAX_DIMS)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %d-d input exceeds %d dims", op, in->ndim,
                        OPR_MAX_DIMS);
    red_space *rs = &pl->rs;
    pl->nops = 1 + nout;
    pl->kndim = 0;
    pl->n_out = 1;
    rs->ndim = 0;
    rs->n = 1;
    int64_t ist[OPR_MAX_DIMS];
    cpu_view_strides(in, ist);
    for (int32_t d = 0; d < in->ndim; d++) {
        const int64_t s = in->shape[d];
        if (mask & (1u << d)) {
            rs->n *= s;
            if (s != 1) { rs->shape[rs->ndim] = s; rs->st[rs->ndim++] = ist[d]; }
        } else {
            pl->n_out *= s;
            if (s != 1) { pl->kshape[pl->kndim] = s; pl->kst[0][pl->kndim++] = ist[d]; }
        }
    }
    for (int j = 0; j < nout; j++) {
        const opr_tensor_view *o = outs[j];
        int64_t ost[OPR_MAX_DIMS];
        int32_t k = 0;
        bool ok = o->ndim <= OPR_MAX_DIMS;
        if (ok) cpu_view_strides(o, ost);
        for (int32_t d = 0; ok && d < o->ndim; d++) {
            if (o->shape[d] == 1) continue;
            ok = k < pl->kndim && o->shape[d] == pl->kshape[k];
            if (ok) pl->kst[1 + j][k++] = ost[d];
        }
        if (!ok || k != pl->kndim)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: output %d has the wrong shape for this reduction",
                            op, j);
        if (pl->n_out && !o->data)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: output %d is not allocated", op, j);
    }
    /* Largest stride first, so that the innermost loop of a slice has the smallest
     * stride (a transposed input is then read along its memory order). Insertion sort:
     * at most 8 dims. */
    for (int32_t i = 1; i < rs->ndim; i++)
        for (int32_t j = i; j > 0 && red_abs64(rs->st[j]) > red_abs64(rs->st[j - 1]); j--) {
            int64_t t = rs->st[j]; rs->st[j] = rs->st[j - 1]; rs->st[j - 1] = t;
            t = rs->shape[j]; rs->shape[j] = rs->shape[j - 1]; rs->shape[j - 1] = t;
        }
    rs->ndim = cpu_coalesce(rs->ndim, rs->shape, 1, &rs->st);
    pl->kndim = cpu_coalesce(pl->kndim, pl->kshape, pl->nops, pl->kst);
    return OPR_OK;
}

/* ------------------------------------------------------------------ op vtables */

/* Floating sums and sums of squares get their own folds: a contiguous slice goes to the
 * vector loops of cpu_vmath.h (16 partial sums, which break the chain of dependent adds
 * and slow the growth of rounding error). */
#define RED_SUM_FOLD(name, T, VSUM, TERM)                                                 \
    static void name(const void *xv, const red_space *rs, int64_t start, int64_t end,     \
                     double p, red_acc *acc)                                              \
    {                                                                                     \
        const T *x = (const T *)xv;                                                       \
        double s = 0;                                                                     \
        (void)p;                                                                          \
        if (rs->ndim == 1 && rs->st[0] == 1) {                                            \
            s = VSUM(end - start, x + start);                                             \
        } else {                                                                          \
            RED_FOREACH(T, x, rs, start, end, s += TERM;);                                \
        }                                                                                 \
        acc->d += s;                                                                      \
    }

/* i64 sums and products wrap around like PyTorch's instead of overflowing (undefined
 * in C): compute in uint64_t. */
RED_SUM_FOLD(fold_sum_f32, float, cpu_vm.sum_f32, v)
RED_SUM_FOLD(fold_sum_f64, double, cpu_vm.sum_f64, v)
RED_FOLD(fold_sum_i64, int64_t, uint64_t s = (uint64_t)acc->i, s += (uint64_t)v;,
         acc->i = (int64_t)s)
RED_FOLD(fold_prod_f32, float, double q = acc->d, q *= v;, acc->d = q)
RED_FOLD(fold_prod_f64, double, double q = acc->d, q *= v;, acc->d = q)
RED_FOLD(fold_prod_i64, int64_t, uint64_t q = (uint64_t)acc->i, q *= (uint64_t)v;,
         acc->i = (int64_t)q)
/* i32 sums and products accumulate in i64 and are stored as i64 (PyTorch's sum and
 * prod of int32 give int64: the YAML's `dtype: acc(T)`) */
RED_FOLD(fold_sum_i32, int32_t, uint64_t s = (uint64_t)acc->i, s += (uint64_t)(int64_t)v;,
         acc->i = (int64_t)s)
RED_FOLD(fold_prod_i32, int32_t, uint64_t q = (uint64_t)acc->i, q *= (uint64_t)(int64_t)v;,
         acc->i = (int64_t)q)
/* Norms, accumulated in double: sum x^2, sum |x|, sum |x|^p, max |x|. */
#define RED_NORM_FOLDS(SUF, T)                                                            \
    RED_SUM_FOLD(fold_norm2_##SUF, T, cpu_vm.sumsq_##SUF, (double)v * v)                  \
    RED_FOLD(fold_norm1_##SUF, T, double s = acc->d, s += fabs((double)v);, acc->d = s)   \
    RED_FOLD(fold_normp_##SUF, T, double s = acc->d, s += pow(fabs((double)v), p);,       \
             acc->d = s)                                                                  \
    RED_FOLD(fold_normi_##SUF, T, double m = acc->d,                                      \
             const double a = fabs((double)v); if (RED_GT(a, m)) m = a;, acc->d = m)
RED_NORM_FOLDS(f32, float)
RED_NORM_FOLDS(f64, double)

static void merge_sum_d(red_acc *a, const red_acc *b) { a->d += b->d; }
static void merge_sum_i(red_acc *a, const red_acc *b)
{
    a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i);
}
static void merge_prod_d(red_acc *a, const red_acc *b) { a->d *= b->d; }
static void merge_prod_i(red_acc *a, const red_acc *b)
{
    a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i);
}
static void merge_maxabs(red_acc *a, const red_acc *b)
{
    if (RED_GT(b->d, a->d)) a->d = b->d;
}
RED_STORE(store_mean_f32, float, acc->d / (double)prm->n) /* 0/0 = NaN for an empty slice */
RED_STORE(store_mean_f64, double, acc->d / (double)prm->n)
RED_STORE(store_norm2_f32, float, sqrt(acc->d))
RED_STORE(store_norm2_f64, double, sqrt(acc->d))
RED_STORE(store_normp_f32, float, pow(acc->d, 1.0 / prm->p))
RED_STORE(store_normp_f64, double, pow(acc->d, 1.0 / prm->p))

static const red_table sum_k = {
    [OPR_F32] = {fold_sum_f32, merge_sum_d, store_d_f32, RED_INIT0},
    [OPR_F64] = {fold_sum_f64, merge_sum_d, store_d_f64, RED_INIT0},
    [OPR_I64] = {fold_sum_i64, merge_sum_i, store_i_i64, RED_INIT0},
    [OPR_I32] = {fold_sum_i32, merge_sum_i, store_i_i64, RED_INIT0},
};
static const red_table mean_k = {
    [OPR_F32] = {fold_sum_f32, merge_sum_d, store_mean_f32, RED_INIT0},
    [OPR_F64] = {fold_sum_f64, merge_sum_d, store_mean_f64, RED_INIT0},
};
static const red_table prod_k = {
    [OPR_F32] = {fold_prod_f32, merge_prod_d, store_d_f32, RED_INIT1},
    [OPR_F64] = {fold_prod_f64, merge_prod_d, store_d_f64, RED_INIT1},
    [OPR_I64] = {fold_prod_i64, merge_prod_i, store_i_i64, RED_INIT1},
    [OPR_I32] = {fold_prod_i32, merge_prod_i, store_i_i64, RED_INIT1},
};
static const red_table norm2_k = {
    [OPR_F32] = {fold_norm2_f32, merge_sum_d, store_norm2_f32, RED_INIT0},
    [OPR_F64] = {fold_norm2_f64, merge_sum_d, store_norm2_f64, RED_INIT0},
};
static const red_table norm1_k = {
    [OPR_F32] = {fold_norm1_f32, merge_sum_d, store_d_f32, RED_INIT0},
    [OPR_F64] = {fold_norm1_f64, merge_sum_d, store_d_f64, RED_INIT0},
};
static const red_table normp_k = {
    [OPR_F32] = {fold_normp_f32, merge_sum_d, store_normp_f32, RED_INIT0},
    [OPR_F64] = {fold_normp_f64, merge_sum_d, store_normp_f64, RED_INIT0},
};
static const red_table normi_k = {
    [OPR_F32] = {fold_normi_f32, merge_maxabs, store_d_f32, RED_INIT0},
    [OPR_F64] = {fold_normi_f64, merge_maxabs, store_d_f64, RED_INIT0},
};

/* ------------------------------------------------------------------ driver */

/* Reduces outputs [lo, hi), each slice in one go. */
static void red_outputs(const red_job *jb, int64_t lo, int64_t hi)
{
    const red_plan *pl = jb->pl;
    cpu_walk w;
    red_walk_kept(pl, pl->kndim, &w);
    cpu_walk_seek(&w, lo);
    for (int64_t o = lo; o < hi; o++) {
        red_acc acc = jb->k->init;
        jb->k->fold(jb->x + w.off[0] * (int64_t)jb->esz, &pl->rs, 0, pl->rs.n, jb->prm.p, &acc);
        jb->k->store(jb->out, w.off + 1, &acc, &jb->prm);
        cpu_walk_next(&w);
    }
}

/* Reduces every output, one slice at a time, each cut into `nparts` parts folded in
 * parallel and merged in order. */
static void red_split(const red_job *jb, int64_t nparts)
{
    const red_plan *pl = jb->pl;
    const int64_t n = pl->rs.n;
    cpu_walk w;
    red_walk_kept(pl, pl->kndim, &w);
    cpu_walk_seek(&w, 0);
    for (int64_t o = 0; o < pl->n_out; o++) {
        red_acc part[RED_NPART];
        const char *x = jb->x + w.off[0] * (int64_t)jb->esz;
#pragma omp parallel for schedule(static)
        for (int64_t q = 0; q < nparts; q++) {
            part[q] = jb->k->init;
            jb->k->fold(x, &pl->rs, n * q / nparts, n * (q + 1) / nparts, jb->prm.p, &part[q]);
        }
        for (int64_t q = 1; q < nparts; q++) jb->k->merge(&part[0], &part[q]);
        jb->k->store(jb->out, w.off + 1, &part[0], &jb->prm);
        cpu_walk_next(&w);
    }
}

static void red_run(const red_job *jb)
{
    const int64_t n_out = jb->pl->n_out, n_red = jb->pl->rs.n;
    if (n_out == 0) return;
    if (n_out * n_red < CPU_PAR_THRESHOLD) {
        red_outputs(jb, 0, n_out);
        return;
    }
    int64_t nparts = n_red / RED_PART_MIN;
    if (nparts > RED_NPART) nparts = RED_NPART;
    if (n_out < RED_NPART && nparts >= 2) {
        red_split(jb, nparts);
        return;
    }
    const int64_t nblk = n_out < 1024 ? n_out : 1024;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblk; b++) red_outputs(jb, n_out * b / nblk, n_out * (b + 1) / nblk);
}

/* ------------------------------------------------------------------ column sums */

/* When to take the column path: neighbouring outputs are adjacent in the input and the
 * elements of a slice are not. */
static bool red_use_cols(const red_plan *pl)
{
    const int32_t kin = pl->kndim - 1;
    return pl->n_out > 0 && pl->rs.n > 1 && pl->kst[0][kin] == 1 && pl->kshape[kin] >= 8 &&
           pl->rs.st[pl->rs.ndim - 1] != 1;
}

/* One task: `width` adjacent outputs of the innermost kept dim (from column c0 of row
 * group g), whose slices are folded together by adding whole input rows of `width`
 * contiguous elements into a row of accumulators (eight rows at a time, added pairwise
 * first, where the reduced dims merge into one): the input streams through in memory
 * order. mean divides by the slice length. */
#define RED_COLSUM(name, T, ACC, ADDROW, ADDROW8, FINISH)                                 \
    static void name(const red_job *jb, int64_t g, int64_t c0, int64_t width, bool mean)  \
    {                                                                                     \
        const red_plan *pl = jb->pl;                                                      \
        const int32_t kin = pl->kndim - 1;                                                \
        cpu_walk w; /* over the kept dims outside the innermost */                        \
        red_walk_kept(pl, kin, &w);                                                       \
        cpu_walk_seek(&w, g);                                                             \
        const T *x = (const T *)jb->x + w.off[0] + c0;                                    \
        ACC acc[RED_COLS];                                                                \
        for (int64_t c = 0; c < width; c++) acc[c] = 0;                                   \
        int64_t r0 = 0; /* one reduced dim: its rows eight at a time */                   \
        if (pl->rs.ndim == 1)                                                             \
            for (const int64_t ld = pl->rs.st[0]; r0 + 8 <= pl->rs.n; r0 += 8) {          \
                const T *px_ = x + r0 * ld;                                               \
                ADDROW8;                                                                  \
            }                                                                             \
        RED_FOREACH_PTR(T, x, &pl->rs, r0, pl->rs.n, ADDROW;);                            \
        T *o = (T *)jb->out[0] + w.off[1];                                                \
        const int64_t os = pl->kst[1][kin];                                               \
        const double n = (double)pl->rs.n;                                                \
        (void)mean; (void)n;                                                              \
        for (int64_t c = 0; c < width; c++) o[(c0 + c) * os] = (T)(FINISH);               \
    }

RED_COLSUM(cols_f32, float, double, cpu_vm.addrow_f32(width, px_, acc), cpu_vm.addrow8_f32(width, px_, ld, acc),
           mean ? acc[c] / n : acc[c])
RED_COLSUM(cols_f64, double, double, cpu_vm.addrow_f64(width, px_, acc), cpu_vm.addrow8_f64(width, px_, ld, acc),
           mean ? acc[c] / n : acc[c])
/* wraps, like the i64 fold */
#define RED_ADDROW_I64(px) for (int64_t c = 0; c < width; c++) acc[c] += (uint64_t)(px)[c]
RED_COLSUM(cols_i64, int64_t, uint64_t, RED_ADDROW_I64(px_),
           for (int k = 0; k < 8; k++) RED_ADDROW_I64(px_ + k * ld), acc[c])

static const red_cols_fn cols_fns[OPR_DTYPE_COUNT] = {
    [OPR_F32] = cols_f32, [OPR_F64] = cols_f64, [OPR_I64] = cols_i64,
};

/* Cuts each row of outputs into as many column blocks as there are threads (each as
 * wide as RED_COLS at most and RED_COLS_MIN at least, so a block still streams long
 * rows). Every output is summed in the same order whatever the cut. */
static void red_run_cols(const red_job *jb, red_cols_fn fn, bool mean)
{
    const red_plan *pl = jb->pl;
    const int64_t cols = pl->kshape[pl->kndim - 1], groups = pl->n_out / cols;
    const bool par = pl->n_out * pl->rs.n >= CPU_PAR_THRESHOLD;
    const int64_t width = cpu_col_block(cols, par, RED_COLS_MIN, RED_COLS);
    const int64_t nblk = (cols + width - 1) / width, ntask = groups * nblk;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t t = 0; t < ntask; t++) {
        const int64_t c0 = t % nblk * width;
        fn(jb, t / nblk, c0, cols - c0 < width ? cols - c0 : width, mean);
    }
}

/* ------------------------------------------------------------------ kernels */

/* cpu_reduce.h says what these four do. */
int red_begin(const opr_kernel_call *c, const char *op, int nargs, int nout, const red_kind *table,
              const opr_tensor_view **in, const red_kind **k)
{
    char why[OPC_WHY_SIZE];
    const int rc = opc_reduce_begin(c, op, nargs, nout, red_mask(table), "CPU", in, why, sizeof why);
    if (rc) return CPU_FAIL(c, rc, "%s", why);
    *k = &table[(*in)->dtype];
    return OPR_OK;
}

int red_wrap(const opr_kernel_call *c, const char *op, int64_t d, int32_t ndim, int32_t *out)
{
    char why[OPC_WHY_SIZE];
    return opc_reduce_dim(op, d, ndim, out, why, sizeof why) ? OPR_OK : CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

int red_dim_mask(const opr_kernel_call *c, int ai, const char *op, int32_t ndim, uint32_t *mask)
{
    char why[OPC_WHY_SIZE];
    if (!opc_reduce_dim_mask(c, ai, op, ndim, mask, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

int red_go(const opr_kernel_call *c, const char *op, const opr_tensor_view *in, uint32_t mask, int nout,
           const red_kind *k, double p, red_cols_fn cols, bool mean)
{
    red_plan pl;
    int rc = red_plan_make(c, op, in, mask, nout, (const opr_tensor_view *const *)c->outputs, &pl);
    if (rc) return rc;
    red_job jb = {
        .pl = &pl, .k = k, .prm = {p, pl.rs.n}, .x = (const char *)in->data,
        .esz = cpu_dtype_size(in->dtype),
        .out = {(char *)c->outputs[0]->data, nout > 1 ? (char *)c->outputs[1]->data : NULL},
    };
    if (pl.n_out == 0) return OPR_OK;
    if (cols && red_use_cols(&pl)) red_run_cols(&jb, cols, mean);
    else red_run(&jb);
    return OPR_OK;
}

/* sum/mean(self, int[]? dim, keepdim). keepdim is already reflected in the output
 * shape, which is all it changes. */
static int red_sum_like(const opr_kernel_call *c, const char *op, const red_kind *table,
                        bool mean)
{
    const opr_tensor_view *in;
    const red_kind *k;
    uint32_t mask;
    int rc = red_begin(c, op, 3, 1, table, &in, &k);
    if (!rc) rc = red_dim_mask(c, 1, op, in->ndim, &mask);
    return rc ? rc : red_go(c, op, in, mask, 1, k, 0, cols_fns[in->dtype], mean);
}
static int k_sum(const opr_kernel_call *c) { return red_sum_like(c, "sum", sum_k, false); }
static int k_mean(const opr_kernel_call *c) { return red_sum_like(c, "mean", mean_k, true); }

/* prod(self, int? dim, keepdim) */
static int k_prod(const opr_kernel_call *c)
{
    const opr_tensor_view *in;
    const red_kind *k;
    uint32_t mask;
    int rc = red_begin(c, "prod", 3, 1, prod_k, &in, &k);
    if (!rc) rc = red_dim_mask(c, 1, "prod", in->ndim, &mask);
    return rc ? rc : red_go(c, "prod", in, mask, 1, k, 0, NULL, false);
}

/* norm(self, p): (sum |x|^p)^(1/p) over all elements, with exact special cases for
 * p = 1, 2 and inf (max |x|). */
static int k_norm(const opr_kernel_call *c)
{
    if (c->nargs < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "norm: expected 2 arguments");
    const double p = cpu_arg_d(c, 1);
    if (!(p > 0)) return CPU_FAIL(c, OPR_ERR_INVALID, "norm: p must be > 0, got %g", p);
    const red_kind *table = p == 2 ? norm2_k : p == 1 ? norm1_k : isinf(p) ? normi_k : normp_k;
    const opr_tensor_view *in;
    const red_kind *k;
    int rc = red_begin(c, "norm", 2, 1, table, &in, &k);
    return rc ? rc : red_go(c, "norm", in, ~0u, 1, k, p, NULL, false);
}


/* ------------------------------------------------------------------ registration */

int cpu_register_reduce(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t mask;
        opr_kernel_fn fn;
    } ops[] = {
        {"sum", red_mask(sum_k), k_sum},
        {"mean", red_mask(mean_k), k_mean},
        {"prod", red_mask(prod_k), k_prod},
        /* every p shares the dtypes of p = 2 */
        {"norm", red_mask(norm2_k), k_norm},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        /* sum and mean also in f16 and bf16 (the gradients of the normalizations sum
         * them), summed in f32 and rounded once (cpu_half.c) */
        const bool halves = !strcmp(ops[i].op, "sum") || !strcmp(ops[i].op, "mean");
        int rc = (halves ? cpu_register_upcast : cpu_register)(self, ops[i].op, ops[i].mask, ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
