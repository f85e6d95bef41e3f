/* Sorting kernels: sort, topk, mode.
 *
 * All three reduce to "stably sort each row along dim, keeping original positions":
 * sort writes the whole row, topk its first k entries, mode scans the runs of equal
 * values. Rows are independent, so they are spread over threads, each with its own
 * scratch buffer. NaN sorts above every number (PyTorch's order), which keeps the
 * comparison a total order and the sort well defined. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_sort.h"

#include <math.h>
#include <stdlib.h>

typedef enum { ROWS_SORT, ROWS_TOPK, ROWS_MODE } rows_kind;

/* One call's work: geo.nrows rows of geo.n elements, each producing geo.k outputs
 * along dim (n for sort, k for topk, 1 for mode). */
typedef struct {
    rows_kind kind;
    bool desc;
    opc_rows geo;         /* the rows and where their results go (opc_rows_plan) */
    cpu_walk rows;        /* over geo.shape; ops: self, values, indices */
    const void *x;
    void *values;
    int64_t *indices;
} rows_job;

#define LESS_FLOAT(a, b) (!isnan(a) && (isnan(b) || (a) < (b)))
#define LESS_INT(a, b) ((a) < (b))

/* Instantiates, for element type T, a stable merge sort of (value, position) pairs and
 * the row loop. Insertion sort handles short runs, then runs are merged bottom-up,
 * taking from the right run only when strictly before, which keeps equal keys in
 * their original order. */
#define DEF_ROWS(T, SUF, LESS)                                                            \
    typedef struct { T v; int64_t i; } pair_##SUF;                                        \
                                                                                          \
    static void msort_##SUF(pair_##SUF *a, pair_##SUF *tmp, int64_t n, bool desc)         \
    {                                                                                     \
        enum { RUN = 16 };                                                                \
        for (int64_t lo = 0; lo < n; lo += RUN) {                                         \
            int64_t hi = lo + RUN < n ? lo + RUN : n;                                     \
            for (int64_t i = lo + 1; i < hi; i++) {                                       \
                pair_##SUF p = a[i];                                                      \
                int64_t j = i;                                                            \
                while (j > lo && (desc ? LESS(a[j - 1].v, p.v) : LESS(p.v, a[j - 1].v))) {\
                    a[j] = a[j - 1];                                                      \
                    j--;                                                                  \
                }                                                                         \
                a[j] = p;                                                                 \
            }                                                                             \
        }                                                                                 \
        pair_##SUF *src = a, *dst = tmp;                                                  \
        for (int64_t w = RUN; w < n; w *= 2) {                                            \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                   \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n; \
                int64_t l = lo, r = mid, o = lo;                                          \
                while (l < mid && r < hi) {                                               \
                    bool right = desc ? LESS(src[l].v, src[r].v) : LESS(src[r].v, src[l].v); \
                    dst[o++] = right ? src[r++] : src[l++];                               \
                }                                                                         \
                while (l < mid) dst[o++] = src[l++];                                      \
                while (r < hi) dst[o++] = src[r++];                                       \
            }                                                                             \
            pair_##SUF *t = src;                                                          \
            src = dst;                                                                    \
            dst = t;                                                                      \
        }                                                                                 \
        if (src != a) memcpy(a, src, (size_t)n * sizeof *a);                              \
    }                                                                                     \
                                                                                          \
    /* Sorted ascending, runs of equal values are contiguous and each run keeps the   */  \
    /* original positions in order, so its last entry is the last occurrence. Runs   */  \
    /* compare with == as PyTorch does: every NaN counts as a value of its own.       */  \
    static pair_##SUF mode_of_##SUF(const pair_##SUF *a, int64_t n)                       \
    {                                                                                     \
        pair_##SUF best = a[n - 1];                                                       \
        int64_t best_count = 0;                                                           \
        for (int64_t lo = 0, hi; lo < n; lo = hi) {                                       \
            for (hi = lo + 1; hi < n && a[lo].v == a[hi].v; hi++) {}                      \
            if (hi - lo > best_count) {                                                   \
                best_count = hi - lo;                                                     \
                best = a[hi - 1];                                                         \
            }                                                                             \
        }                                                                                 \
        return best;                                                                      \
    }                                                                                     \
                                                                                          \
    static int rows_##SUF(const rows_job *j)                                              \
    {                                                                                     \
        const opc_rows *g = &j->geo;                                                      \
        const bool par = g->nrows > 1 && g->nrows * g->n >= CPU_PAR_THRESHOLD;            \
        int failed = 0;                                                                   \
        _Pragma("omp parallel if (par) reduction(| : failed)")                            \
        {                                                                                 \
            int64_t lo, hi;                                                               \
            cpu_thread_range(g->nrows, &lo, &hi);                                         \
            pair_##SUF *buf = NULL;                                                       \
            if (lo < hi) buf = malloc(2 * (size_t)(g->n ? g->n : 1) * sizeof *buf);       \
            if (lo < hi && !buf) failed = 1;                                              \
            cpu_walk w = j->rows;                                                         \
            cpu_walk_seek(&w, lo);                                                        \
            for (int64_t r = lo; buf && r < hi; r++, cpu_walk_next(&w)) {                \
                const T *x = (const T *)j->x + w.off[0];                                  \
                T *v = (T *)j->values + w.off[1];                                         \
                int64_t *ix = j->indices + w.off[2];                                      \
                for (int64_t i = 0; i < g->n; i++) {                                      \
                    buf[i].v = x[i * g->x_step];                                          \
                    buf[i].i = i;                                                         \
                }                                                                         \
                msort_##SUF(buf, buf + g->n, g->n, j->desc);                              \
                if (j->kind == ROWS_MODE) {                                               \
                    pair_##SUF m = mode_of_##SUF(buf, g->n);                              \
                    *v = m.v;                                                             \
                    *ix = m.i;                                                            \
                    continue;                                                             \
                }                                                                         \
                for (int64_t i = 0; i < g->k; i++) {                                      \
                    v[i * g->v_step] = buf[i].v;                                          \
                    ix[i * g->i_step] = buf[i].i;                                         \
                }                                                                         \
            }                                                                             \
            free(buf);                                                                    \
        }                                                                                 \
        return failed ? OPR_ERR_NOMEM : OPR_OK;                                           \
    }

DEF_ROWS(float, f32, LESS_FLOAT)
DEF_ROWS(double, f64, LESS_FLOAT)
DEF_ROWS(int64_t, i64, LESS_INT)
DEF_ROWS(int32_t, i32, LESS_INT)

/* Validates the outputs (opc_rows_plan) and runs the rows of self along dim, k results
 * each. */
static int run_rows(const opr_kernel_call *c, rows_job *j, int32_t dim, int64_t k, const int32_t *out_dims)
{
    const char *op = c->op;
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    const opr_tensor_view *vals = c->outputs[0], *idx = c->outputs[1];
    char why[OPC_WHY_SIZE];
    opc_rows *g = &j->geo;
    if (!opc_rows_plan(op, x, vals, idx, dim, k, out_dims, g, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (g->nrows == 0 || g->k == 0) return OPR_OK;
    j->x = x->data;
    j->values = vals->data;
    j->indices = idx->data;
    memset(&j->rows, 0, sizeof j->rows);
    j->rows.ndim = x->ndim;
    j->rows.nops = 3;
    j->rows.shape = g->shape;
    for (int32_t d = 0; d < x->ndim; d++) {
        j->rows.strides[0][d] = g->x_st[d];
        j->rows.strides[1][d] = g->v_st[d];
        j->rows.strides[2][d] = g->i_st[d];
    }
    int rc;
    switch (x->dtype) {
    case OPR_F32: rc = rows_f32(j); break;
    case OPR_F64: rc = rows_f64(j); break;
    case OPR_I64: rc = rows_i64(j); break;
    case OPR_I32: rc = rows_i32(j); break;
    default:
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", op, cpu_dtype_name(x->dtype));
    }
    return rc ? CPU_FAIL(c, rc, "%s: out of memory", op) : OPR_OK;
}

/* Wraps dim argument `arg` of the call on self (opc_dim_arg). */
static int wrap_or_fail(const opr_kernel_call *c, int arg, int32_t *dim)
{
    char why[OPC_WHY_SIZE];
    if (!opc_dim_arg(c->op, cpu_arg_i(c, arg), cpu_arg_t(c, 0)->ndim, dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

static int k_sort(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    int32_t dim, out_dims[OPR_MAX_DIMS];
    int rc = wrap_or_fail(c, 1, &dim);
    if (rc) return rc;
    opc_rows_out_dims(x->ndim, dim, false, out_dims);
    rows_job j = { .kind = ROWS_SORT, .desc = cpu_arg_b(c, 2) };
    return run_rows(c, &j, dim, x->ndim ? x->shape[dim] : 1, out_dims);
}

/* A full sort per row, then the first k: simple, stable (ties keep the lower index)
 * and always sorted, which also satisfies sorted=False. */
static int k_topk(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    int32_t dim, out_dims[OPR_MAX_DIMS];
    int rc = wrap_or_fail(c, 2, &dim);
    if (rc) return rc;
    const int64_t k = cpu_arg_i(c, 1);
    char why[OPC_WHY_SIZE];
    if (!opc_topk_k(k, dim, x->ndim ? x->shape[dim] : 1, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opc_rows_out_dims(x->ndim, dim, false, out_dims);
    /* A 0-d self gives a 0-d result holding its element even for k = 0 (PyTorch). */
    rows_job j = { .kind = ROWS_TOPK, .desc = cpu_arg_b(c, 3) };
    return run_rows(c, &j, dim, x->ndim ? k : 1, out_dims);
}

static int k_mode(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    int32_t dim, out_dims[OPR_MAX_DIMS];
    int rc = wrap_or_fail(c, 1, &dim);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    if (!opc_mode_rows(x, dim, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opc_rows_out_dims(x->ndim, dim, !cpu_arg_b(c, 2), out_dims);
    rows_job j = { .kind = ROWS_MODE };
    return run_rows(c, &j, dim, 1, out_dims);
}

int cpu_register_sort(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32);
    int rc;
    if ((rc = cpu_register(self, "sort", dtypes, k_sort)) != OPR_OK) return rc;
    if ((rc = cpu_register(self, "topk", dtypes, k_topk)) != OPR_OK) return rc;
    return cpu_register(self, "mode", dtypes, k_mode);
}
