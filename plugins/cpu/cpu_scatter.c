/* The scatter family of registry/ops/indexing.yaml: slice_scatter, scatter (src and
 * value), scatter_reduce, and nonzero (a result sized by the data).
 *
 * Each kernel first copies self into out, then walks the index: every index element
 * has its own position in out along dim and the index's own position elsewhere, so the
 * "rows" of the index (its elements that differ only along dim) write disjoint parts of
 * out. Rows run in parallel, each row in order, so repeated indices resolve as on
 * PyTorch's CPU (the last write wins, reductions in index order). Every index is
 * checked before anything is written. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_scatter.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ helpers */

/* min and max of a non-empty i64 view, checked against [0, size). */
static int check_scatter_index(const opr_kernel_call *c, const char *op, const opr_tensor_view *index, int32_t dim,
                               int64_t size)
{
    if (index->numel == 0) return OPR_OK;
    int64_t mn, mx;
    cpu_minmax_i64(index, &mn, &mx);
    char why[OPC_WHY_SIZE];
    return opc_scatter_index_ok(op, mn, mx, dim, size, why, sizeof why) ? OPR_OK
                                                                         : CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

/* One walk over the index rows: ops out (its stride at dim zeroed), src, index, over
 * the index's shape with dim set to 1. */
typedef struct {
    cpu_walk rows;
    int64_t nrows, len, out_sd, src_sd, idx_sd;
} rows_job;

static void rows_init(rows_job *j, const opr_tensor_view *out, const opr_tensor_view *src,
                      const opr_tensor_view *index, int32_t dim, int64_t *rshape)
{
    memset(j, 0, sizeof *j);
    memcpy(rshape, index->shape, (size_t)index->ndim * sizeof *rshape);
    rshape[dim] = 1;
    j->rows.ndim = index->ndim;
    j->rows.nops = 3;
    j->rows.shape = rshape;
    j->len = index->shape[dim];
    j->out_sd = out->strides[dim];
    j->src_sd = src ? src->strides[dim] : 0;
    j->idx_sd = index->strides[dim];
    j->nrows = j->len ? index->numel / j->len : 0;
    for (int32_t d = 0; d < index->ndim; d++) {
        j->rows.strides[0][d] = d == dim ? 0 : out->strides[d];
        j->rows.strides[1][d] = d == dim || !src ? 0 : src->strides[d];
        j->rows.strides[2][d] = d == dim ? 0 : index->strides[d];
    }
}

/* ------------------------------------------------------------------ slice_scatter */

/* slice_scatter(self, src, dim, start, end, step): self with the slice replaced by src. */
static int k_slice_scatter(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *src = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    int64_t first, count;
    if (!opc_slice_scatter_args(x, src, out, cpu_arg_i(c, 2), cpu_arg_given(c, 3), cpu_arg_i(c, 3), cpu_arg_given(c, 4),
                                cpu_arg_i(c, 4), cpu_arg_i(c, 5), &dim, &first, &count, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = cpu_dtype_size(x->dtype);
    cpu_copy_strided(es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    if (src->numel == 0) return OPR_OK;
    int64_t st[OPR_MAX_DIMS];
    memcpy(st, out->strides, (size_t)out->ndim * sizeof *st);
    st[dim] *= cpu_arg_i(c, 5);
    char *base = (char *)out->data + first * out->strides[dim] * (int64_t)es;
    cpu_copy_strided(es, src->ndim, src->shape, base, st, src->data, src->strides);
    return OPR_OK;
}

/* ------------------------------------------------------------------ scatter */

/* out = self, then out[.., index, ..] = src (or the one element `value`) along dim. */
static int scatter_impl(const opr_kernel_call *c, bool has_src)
{
    const char *op = "scatter";
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2), *src = has_src ? cpu_arg_t(c, 3) : NULL;
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (x->ndim == 0) return CPU_FAIL(c, OPR_ERR_INVALID, "scatter: self must have at least one dim");
    if (!opc_scatter_args(op, x, index, src, out, cpu_arg_i(c, 1), &dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int rc = check_scatter_index(c, op, index, dim, x->shape[dim]);
    if (rc) return rc;
    const size_t es = cpu_dtype_size(x->dtype);
    char value[8] = {0};
    if (!has_src) {
        const opr_kernel_arg *a = c->args[3];
        const double v = a->kind == OPR_ARG_BOOL ? (double)a->u.b : cpu_arg_d(c, 3);
        const int erc = opc_encode_scalar(op, x->dtype, v, value, "cpu", why, sizeof why);
        if (erc) return CPU_FAIL(c, erc, "%s", why);
    }
    cpu_copy_strided(es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    rows_job j;
    int64_t rshape[OPR_MAX_DIMS];
    rows_init(&j, out, src, index, dim, rshape);
    if (j.nrows == 0) return OPR_OK;
    char *o = out->data;
    const char *s = src ? src->data : NULL;
    const int64_t *ip = index->data;
#pragma omp parallel if (j.nrows > 1 && index->numel >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(j.nrows, &lo, &hi);
        cpu_walk w = j.rows;
        cpu_walk_seek(&w, lo);
        for (int64_t r = lo; r < hi; r++, cpu_walk_next(&w))
            for (int64_t i = 0; i < j.len; i++) {
                const int64_t oo = w.off[0] + ip[w.off[2] + i * j.idx_sd] * j.out_sd;
                memcpy(o + oo * (int64_t)es, s ? s + (w.off[1] + i * j.src_sd) * (int64_t)es : value, es);
            }
    }
    return OPR_OK;
}

static int k_scatter_src(const opr_kernel_call *c) { return scatter_impl(c, true); }
static int k_scatter_value(const opr_kernel_call *c) { return scatter_impl(c, false); }

/* ------------------------------------------------------------------ scatter_reduce */

/* scatter_reduce's traversal of the index: a row (the elements that differ only along
 * dim) is folded in its order, rows independently (they reach disjoint parts of out).
 * When dim is the index's last dim a row is contiguous and rows are taken one after the
 * other; otherwise rows are taken in blocks of SCATTER_COLS neighbours along the last
 * dim, and a block steps along dim over all of them at once, which reads index, src and
 * out in memory order while every row still sees its elements in order. */
#define SCATTER_COLS 256 /* 1 or 2 KiB of each row of src and index: whole cache lines */
typedef struct {
    rows_job j;
    /* blocked traversal (dim is not the last dim): the last dim, and a walker over the
     * rest with dim and the last dim at 1 */
    bool blocked;
    int64_t ncols, out_sc, src_sc, idx_sc, ngroups;
    cpu_walk groups;
    int64_t gshape[OPR_MAX_DIMS];
} scatter_plan;

static void scatter_plan_init(scatter_plan *sp, const opr_tensor_view *out, const opr_tensor_view *src,
                              const opr_tensor_view *index, int32_t dim, int64_t *rshape)
{
    rows_init(&sp->j, out, src, index, dim, rshape);
    const int32_t q = index->ndim - 1;
    sp->blocked = dim != q && sp->j.nrows > 1;
    if (!sp->blocked) return;
    sp->ncols = index->shape[q];
    sp->out_sc = out->strides[q];
    sp->src_sc = src->strides[q];
    sp->idx_sc = index->strides[q];
    sp->ngroups = sp->j.nrows / sp->ncols;
    memcpy(sp->gshape, rshape, (size_t)index->ndim * sizeof *rshape);
    sp->gshape[q] = 1;
    sp->groups = sp->j.rows;
    sp->groups.shape = sp->gshape;
}

/* The reductions per dtype: FOLD(a, v) folds v into *a; mean sums, then divides by the
 * count of elements that met (floor division for integers, as PyTorch). */
#define SCATTER_FOLDS(T, NAN)                                                                          \
    static inline void fold_sum_##T(T *a, T v) { *a += v; }                                            \
    static inline void fold_prod_##T(T *a, T v) { *a *= v; }                                           \
    static inline void fold_amax_##T(T *a, T v) { if (NAN(v) || v > *a) *a = v; }                     \
    static inline void fold_amin_##T(T *a, T v) { if (NAN(v) || v < *a) *a = v; }

/* Row by row: rows [lo, hi) of the plain traversal. */
#define SCATTER_ROWS(FOLD)                                                                             \
    do {                                                                                               \
        cpu_walk w = j->rows;                                                                          \
        cpu_walk_seek(&w, lo);                                                                         \
        for (int64_t r = lo; r < hi; r++, cpu_walk_next(&w)) {                                         \
            if (!include_self) /* the positions this row reaches start from the identity */           \
                for (int64_t i = 0; i < j->len; i++)                                                   \
                    o[w.off[0] + ip[w.off[2] + i * j->idx_sd] * j->out_sd] = init;                     \
            for (int64_t i = 0; i < j->len; i++) {                                                     \
                const int64_t oo = w.off[0] + ip[w.off[2] + i * j->idx_sd] * j->out_sd;                \
                FOLD(o + oo, s[w.off[1] + i * j->src_sd]);                                             \
                if (count) count[oo]++;                                                                \
            }                                                                                          \
        }                                                                                              \
    } while (0)

/* Blocked: task t is columns [c0, c1) of group g; each step along dim folds one element
 * into each of those rows. */
#define SCATTER_BLOCKS(T, FOLD)                                                                        \
    do {                                                                                               \
        for (int64_t t = lo; t < hi; t++) {                                                            \
            const int64_t g = t / nblk, c0 = t % nblk * SCATTER_COLS;                                  \
            const int64_t c1 = c0 + SCATTER_COLS < sp->ncols ? c0 + SCATTER_COLS : sp->ncols;         \
            cpu_walk w = sp->groups;                                                                   \
            cpu_walk_seek(&w, g);                                                                      \
            const int64_t *irow = ip + w.off[2];                                                       \
            const T *srow = s + w.off[1];                                                              \
            T *orow = o + w.off[0];                                                                    \
            if (!include_self)                                                                         \
                for (int64_t i = 0; i < j->len; i++)                                                   \
                    for (int64_t cc = c0; cc < c1; cc++)                                               \
                        orow[irow[i * j->idx_sd + cc * sp->idx_sc] * j->out_sd + cc * sp->out_sc] = init; \
            for (int64_t i = 0; i < j->len; i++)                                                       \
                for (int64_t cc = c0; cc < c1; cc++) {                                                 \
                    const int64_t oo = irow[i * j->idx_sd + cc * sp->idx_sc] * j->out_sd + cc * sp->out_sc; \
                    FOLD(orow + oo, srow[i * j->src_sd + cc * sp->src_sc]);                            \
                    if (count) count[w.off[0] + oo]++;                                                 \
                }                                                                                      \
        }                                                                                              \
    } while (0)

#define DEF_REDUCE(T, SUF, LOWEST, HIGHEST, DIV)                                                       \
    static void reduce_##SUF(const scatter_plan *sp, opc_reduce red, bool include_self, T *o,          \
                             const T *s, const int64_t *ip, int64_t *count, const opr_tensor_view *out) \
    {                                                                                                  \
        const rows_job *j = &sp->j;                                                                    \
        const T init = red == OPC_RED_PROD ? (T)1 : red == OPC_RED_AMAX ? LOWEST                       \
                     : red == OPC_RED_AMIN ? HIGHEST : (T)0;                                           \
        const int64_t nblk = sp->blocked ? (sp->ncols + SCATTER_COLS - 1) / SCATTER_COLS : 0;          \
        const int64_t ntask = sp->blocked ? sp->ngroups * nblk : j->nrows;                             \
        _Pragma("omp parallel if (ntask > 1 && j->nrows * j->len >= CPU_PAR_THRESHOLD)")              \
        {                                                                                              \
            int64_t lo, hi;                                                                            \
            cpu_thread_range(ntask, &lo, &hi);                                                         \
            switch (red) {                                                                             \
            case OPC_RED_SUM:                                                                          \
            case OPC_RED_MEAN:                                                                         \
                if (sp->blocked) SCATTER_BLOCKS(T, fold_sum_##T); else SCATTER_ROWS(fold_sum_##T);     \
                break;                                                                                 \
            case OPC_RED_PROD:                                                                         \
                if (sp->blocked) SCATTER_BLOCKS(T, fold_prod_##T); else SCATTER_ROWS(fold_prod_##T);   \
                break;                                                                                 \
            case OPC_RED_AMAX:                                                                         \
                if (sp->blocked) SCATTER_BLOCKS(T, fold_amax_##T); else SCATTER_ROWS(fold_amax_##T);   \
                break;                                                                                 \
            case OPC_RED_AMIN:                                                                         \
                if (sp->blocked) SCATTER_BLOCKS(T, fold_amin_##T); else SCATTER_ROWS(fold_amin_##T);   \
                break;                                                                                 \
            }                                                                                          \
        }                                                                                              \
        if (!count) return;                                                                            \
        for (int64_t i = 0; i < out->numel; i++) {                                                     \
            const int64_t n = count[i] + (include_self ? 1 : 0);                                       \
            if (n > 1) o[i] = DIV(o[i], (T)n);                                                         \
        }                                                                                              \
    }

#define FDIV(a, b) ((a) / (b))
static inline int64_t floor_div(int64_t a, int64_t b)
{
    const int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
#define NO_NAN(v) ((void)(v), false)
SCATTER_FOLDS(float, isnan)
SCATTER_FOLDS(double, isnan)
SCATTER_FOLDS(int64_t, NO_NAN)
DEF_REDUCE(float, f32, -INFINITY, INFINITY, FDIV)
DEF_REDUCE(double, f64, -INFINITY, INFINITY, FDIV)
DEF_REDUCE(int64_t, i64, INT64_MIN, INT64_MAX, floor_div)

static int k_scatter_reduce(const opr_kernel_call *c)
{
    const char *op = "scatter_reduce";
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2), *src = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    opc_reduce red;
    if (x->ndim == 0) return CPU_FAIL(c, OPR_ERR_INVALID, "scatter_reduce: self must have at least one dim");
    if (!opc_scatter_args(op, x, index, src, out, cpu_arg_i(c, 1), &dim, why, sizeof why) ||
        !opc_reduce_parse(c->args[4]->kind == OPR_ARG_STRING ? c->args[4]->u.s : NULL, &red, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", op, cpu_dtype_name(x->dtype));
    if (red == OPC_RED_MEAN && !cpu_is_contiguous(out))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: mean needs a contiguous output", op);
    int rc = check_scatter_index(c, op, index, dim, x->shape[dim]);
    if (rc) return rc;
    const bool include_self = cpu_arg_b(c, 5);
    cpu_copy_strided(cpu_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    scatter_plan sp;
    int64_t rshape[OPR_MAX_DIMS];
    scatter_plan_init(&sp, out, src, index, dim, rshape);
    if (sp.j.nrows == 0) return OPR_OK;
    int64_t *count = NULL;
    if (red == OPC_RED_MEAN && !(count = calloc((size_t)out->numel, sizeof *count)))
        return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    switch (x->dtype) {
    case OPR_F32: reduce_f32(&sp, red, include_self, out->data, src->data, index->data, count, out); break;
    case OPR_F64: reduce_f64(&sp, red, include_self, out->data, src->data, index->data, count, out); break;
    default: reduce_i64(&sp, red, include_self, out->data, src->data, index->data, count, out); break;
    }
    free(count);
    return OPR_OK;
}

/* ------------------------------------------------------------------ nonzero */

/* Whether an element is nonzero, by its bytes: a floating zero of either sign is zero
 * (the sign bit aside), NaN is not. */
static bool elem_nonzero(const char *p, opr_dtype dt)
{
    switch (dt) {
    case OPR_F64: { uint64_t u; memcpy(&u, p, 8); return (u << 1) != 0; }
    case OPR_F32: { uint32_t u; memcpy(&u, p, 4); return (u << 1) != 0; }
    case OPR_F16:
    case OPR_BF16: { uint16_t u; memcpy(&u, p, 2); return (uint16_t)(u << 1) != 0; }
    case OPR_BOOL: return *p != 0;
    default: { uint64_t u; memcpy(&u, p, cpu_dtype_size(dt)); return u != 0; }
    }
}

/* nonzero(self): [n, dim(self)] i64 coordinates, row-major; n is counted first and
 * sizes the output. */
static int k_nonzero(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    const size_t es = cpu_dtype_size(x->dtype);
    cpu_walk w = {.ndim = x->ndim, .nops = 1, .shape = x->shape};
    memcpy(w.strides[0], x->strides, (size_t)x->ndim * sizeof(int64_t));
    const char *p = x->data;
    int64_t n = 0;
    cpu_walk_seek(&w, 0);
    for (int64_t i = 0; i < x->numel; i++, cpu_walk_next(&w)) n += elem_nonzero(p + w.off[0] * (int64_t)es, x->dtype);
    const int64_t shape[2] = {n, x->ndim};
    int rc = c->host->alloc_output(c, 0, 2, shape);
    if (rc) return rc;
    const opr_tensor_view *out = c->outputs[0];
    if (n == 0 || x->ndim == 0) return OPR_OK;
    int64_t *o = out->data, k = 0;
    cpu_walk_seek(&w, 0);
    for (int64_t i = 0; i < x->numel; i++, cpu_walk_next(&w)) {
        if (!elem_nonzero(p + w.off[0] * (int64_t)es, x->dtype)) continue;
        for (int32_t d = 0; d < x->ndim; d++) o[k * out->strides[0] + d * out->strides[1]] = w.idx[d];
        k++;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ registration */

int cpu_register_scatter(opr_plugin *self)
{
    const uint32_t num = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64);
    /* slice_scatter and nonzero serve every dtype, the half types included; scatter
     * takes gather's dtypes (its gradient's), scatter.value's number converts to f32,
     * f64, i64, i32 and bool only, as fill_'s */
    const uint32_t i32 = OPR_DTYPE_BIT(OPR_I32);
    const uint32_t any = num | i32 | OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16);
    const struct { const char *op; uint32_t dtypes; opr_kernel_fn fn; } table[] = {
        {"slice_scatter", any, k_slice_scatter}, {"scatter", num | i32 | OPR_DTYPE_BIT(OPR_BOOL), k_scatter_src},
        {"scatter.value", num | i32 | OPR_DTYPE_BIT(OPR_BOOL), k_scatter_value}, {"scatter_reduce", num, k_scatter_reduce},
        {"nonzero", any, k_nonzero},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
