/* The extrema of the reductions on the CPU: max and min (of everything), max.dim and
 * min.dim (values and the first index of the extreme along one dim), amax and amin
 * (values only, over any dims), on the machinery of cpu_reduce.h. Floating extrema
 * propagate NaN: the first NaN is the extreme max.dim / min.dim report, and a NaN in a
 * slice is amax / amin's value, as in PyTorch. */
#include "cpu_reduce.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <tgmath.h>

/* ------------------------------------------------------------------ op vtables */

#define RED_GT_I(a, b) ((a) > (b))
#define RED_LT_I(a, b) ((a) < (b))

/* Arg-extreme fold: strict comparison keeps the first index on ties. */
#define RED_ARG_FOLD(name, T, F, FT, BEATS)                                               \
    RED_FOLD(name, T, FT b = acc->F; int64_t bi = acc->idx,                               \
             if (bi < 0 || BEATS(v, b)) { b = v; bi = ri; },                              \
             acc->F = b; acc->idx = bi)
#define RED_ARG_MERGE(name, F, BEATS)                                                     \
    static void name(red_acc *a, const red_acc *b)                                        \
    {                                                                                     \
        if (b->idx >= 0 && (a->idx < 0 || BEATS(b->F, a->F))) *a = *b;                    \
    }

/* Floating max/min with index: a contiguous slice is scanned twice, first for its
 * extremum in RED_LANES independent lanes (which the compiler turns into vector
 * max/min) and whether it holds a NaN, then for the first position of the NaN or of the
 * extremum; the same element as the one-pass fold (NaN first, then the first of equal
 * values) at a fraction of its time on long rows (max.dim over a row of 4096: ~10x). */
#define RED_LANES 16
#define RED_ARG_FLOAT_FOLD(name, T, BEATS, PICK, START)                                   \
    static void name(const void *xv, const red_space *rs, int64_t start, int64_t end,     \
                     double p, red_acc *acc)                                              \
    {                                                                                     \
        const T *x = (const T *)xv;                                                       \
        (void)p;                                                                          \
        if (!(rs->ndim == 1 && rs->st[0] == 1 && end > start)) {                          \
            double b = acc->d;                                                            \
            int64_t bi = acc->idx;                                                        \
            RED_FOREACH(T, x, rs, start, end, if (bi < 0 || BEATS(v, b)) { b = v; bi = ri; }); \
            acc->d = b;                                                                   \
            acc->idx = bi;                                                                \
            return;                                                                       \
        }                                                                                 \
        const T *r = x + start;                                                           \
        const int64_t n = end - start;                                                    \
        T m[RED_LANES];                                                                   \
        unsigned char nan[RED_LANES] = {0};                                               \
        for (int k = 0; k < RED_LANES; k++) m[k] = (START);                               \
        int64_t i = 0;                                                                    \
        for (; i + RED_LANES <= n; i += RED_LANES)                                        \
            for (int k = 0; k < RED_LANES; k++) {                                         \
                const T v = r[i + k];                                                     \
                m[k] = PICK(v, m[k]);                                                     \
                nan[k] |= v != v;                                                         \
            }                                                                             \
        for (; i < n; i++) {                                                              \
            m[0] = PICK(r[i], m[0]);                                                      \
            nan[0] |= r[i] != r[i];                                                       \
        }                                                                                 \
        bool any_nan = false;                                                             \
        for (int k = 0; k < RED_LANES; k++) {                                             \
            m[0] = PICK(m[k], m[0]);                                                      \
            any_nan = any_nan || nan[k];                                                  \
        }                                                                                 \
        for (i = 0; i < n - 1; i++)                                                       \
            if (any_nan ? r[i] != r[i] : r[i] == m[0]) break;                             \
        const double v = r[i];                                                            \
        if (acc->idx < 0 || BEATS(v, acc->d)) {                                           \
            acc->d = v;                                                                   \
            acc->idx = start + i;                                                         \
        }                                                                                 \
    }
/* v if it is larger (smaller) than m, else m: NaN never picked (found by the NaN scan) */
#define RED_PICK_MAX(v, m) ((v) > (m) ? (v) : (m))
#define RED_PICK_MIN(v, m) ((v) < (m) ? (v) : (m))
RED_ARG_FLOAT_FOLD(fold_max_f32, float, RED_GT, RED_PICK_MAX, -INFINITY)
RED_ARG_FLOAT_FOLD(fold_max_f64, double, RED_GT, RED_PICK_MAX, -INFINITY)
RED_ARG_FOLD(fold_max_i64, int64_t, i, int64_t, RED_GT_I)
RED_ARG_FOLD(fold_max_i32, int32_t, i, int64_t, RED_GT_I)
RED_ARG_FLOAT_FOLD(fold_min_f32, float, RED_LT, RED_PICK_MIN, INFINITY)
RED_ARG_FLOAT_FOLD(fold_min_f64, double, RED_LT, RED_PICK_MIN, INFINITY)
RED_ARG_FOLD(fold_min_i64, int64_t, i, int64_t, RED_LT_I)
RED_ARG_FOLD(fold_min_i32, int32_t, i, int64_t, RED_LT_I)
/* amax / amin: the extremum alone (no index to find), NaN winning over everything. A
 * contiguous stretch goes to cpu_vmath.h's vector loop (amax_f32 ...), other layouts
 * are folded element by element under the same rule. */
#define RED_EXT_FLOAT_FOLD(name, T, BEATS, VEXT, EMPTY)                                   \
    static void name(const void *xv, const red_space *rs, int64_t start, int64_t end,     \
                     double p, red_acc *acc)                                              \
    {                                                                                     \
        const T *x = (const T *)xv;                                                       \
        (void)p;                                                                          \
        T m = (EMPTY);                                                                    \
        if (rs->ndim == 1 && rs->st[0] == 1) {                                            \
            m = VEXT(end - start, x + start);                                             \
        } else {                                                                          \
            RED_FOREACH(T, x, rs, start, end, if (BEATS(v, m) || v != v) m = v;);         \
        }                                                                                 \
        if (BEATS(m, acc->d) || m != m) acc->d = m;                                       \
    }
#define RED_BEATS_GT(a, b) ((a) > (b))
#define RED_BEATS_LT(a, b) ((a) < (b))
RED_EXT_FLOAT_FOLD(fold_amax_f32, float, RED_BEATS_GT, cpu_vm.amax_f32, -INFINITY)
RED_EXT_FLOAT_FOLD(fold_amax_f64, double, RED_BEATS_GT, cpu_vm.amax_f64, -INFINITY)
RED_EXT_FLOAT_FOLD(fold_amin_f32, float, RED_BEATS_LT, cpu_vm.amin_f32, INFINITY)
RED_EXT_FLOAT_FOLD(fold_amin_f64, double, RED_BEATS_LT, cpu_vm.amin_f64, INFINITY)
RED_FOLD(fold_amax_i64, int64_t, int64_t m = acc->i, m = v > m ? v : m;, acc->i = m)
RED_FOLD(fold_amin_i64, int64_t, int64_t m = acc->i, m = v < m ? v : m;, acc->i = m)
RED_FOLD(fold_amax_i32, int32_t, int64_t m = acc->i, m = v > m ? v : m;, acc->i = m)
RED_FOLD(fold_amin_i32, int32_t, int64_t m = acc->i, m = v < m ? v : m;, acc->i = m)
/* a NaN in a stays; one in b replaces a */
static void merge_amax_d(red_acc *a, const red_acc *b)
{
    if (b->d > a->d || b->d != b->d) a->d = b->d;
}
static void merge_amin_d(red_acc *a, const red_acc *b)
{
    if (b->d < a->d || b->d != b->d) a->d = b->d;
}
static void merge_amax_i(red_acc *a, const red_acc *b) { a->i = b->i > a->i ? b->i : a->i; }
static void merge_amin_i(red_acc *a, const red_acc *b) { a->i = b->i < a->i ? b->i : a->i; }
RED_ARG_MERGE(merge_max_d, d, RED_GT)
RED_ARG_MERGE(merge_min_d, d, RED_LT)
RED_ARG_MERGE(merge_max_i, i, RED_GT_I)
RED_ARG_MERGE(merge_min_i, i, RED_LT_I)

static const red_table max_k = {
    [OPR_F32] = {fold_max_f32, merge_max_d, store_d_f32, RED_INIT0},
    [OPR_F64] = {fold_max_f64, merge_max_d, store_d_f64, RED_INIT0},
    [OPR_I64] = {fold_max_i64, merge_max_i, store_i_i64, RED_INIT0},
    [OPR_I32] = {fold_max_i32, merge_max_i, store_i_i32, RED_INIT0},
};
static const red_table min_k = {
    [OPR_F32] = {fold_min_f32, merge_min_d, store_d_f32, RED_INIT0},
    [OPR_F64] = {fold_min_f64, merge_min_d, store_d_f64, RED_INIT0},
    [OPR_I64] = {fold_min_i64, merge_min_i, store_i_i64, RED_INIT0},
    [OPR_I32] = {fold_min_i32, merge_min_i, store_i_i32, RED_INIT0},
};
/* amax / amin start from the identity of the extremum (the slice is never empty) */
static const red_table amax_k = {
    [OPR_F32] = {fold_amax_f32, merge_amax_d, store_d_f32, {-INFINITY, INT64_MIN, -1}},
    [OPR_F64] = {fold_amax_f64, merge_amax_d, store_d_f64, {-INFINITY, INT64_MIN, -1}},
    [OPR_I64] = {fold_amax_i64, merge_amax_i, store_i_i64, {-INFINITY, INT64_MIN, -1}},
    [OPR_I32] = {fold_amax_i32, merge_amax_i, store_i_i32, {-INFINITY, INT64_MIN, -1}},
};
static const red_table amin_k = {
    [OPR_F32] = {fold_amin_f32, merge_amin_d, store_d_f32, {INFINITY, INT64_MAX, -1}},
    [OPR_F64] = {fold_amin_f64, merge_amin_d, store_d_f64, {INFINITY, INT64_MAX, -1}},
    [OPR_I64] = {fold_amin_i64, merge_amin_i, store_i_i64, {INFINITY, INT64_MAX, -1}},
    [OPR_I32] = {fold_amin_i32, merge_amin_i, store_i_i32, {INFINITY, INT64_MAX, -1}},
};
/* ------------------------------------------------------------------ column path */

/* The column path of amax / amin: a row of running extrema, each input row folded in
 * by cpu_vmath.h's elementwise maximum / minimum (NaN sticks). */
#define RED_COLEXT(name, T, ROW, EMPTY)                                                   \
    static void name(const red_job *jb, int64_t g, int64_t c0, int64_t width, bool mean)  \
    {                                                                                     \
        const red_plan *pl = jb->pl;                                                      \
        const int32_t kin = pl->kndim - 1;                                                \
        (void)mean;                                                                       \
        cpu_walk w;                                                                       \
        red_walk_kept(pl, kin, &w);                                                       \
        cpu_walk_seek(&w, g);                                                             \
        const T *x = (const T *)jb->x + w.off[0] + c0;                                    \
        T acc[RED_COLS];                                                                  \
        for (int64_t c = 0; c < width; c++) acc[c] = (EMPTY);                             \
        RED_FOREACH_PTR(T, x, &pl->rs, 0, pl->rs.n, ROW(width, acc, px_, acc););          \
        T *o = (T *)jb->out[0] + w.off[1];                                                \
        const int64_t os = pl->kst[1][kin];                                               \
        for (int64_t c = 0; c < width; c++) o[(c0 + c) * os] = acc[c];                   \
    }
#define RED_ROWMAX_I64(n, a, x, y) for (int64_t c = 0; c < (n); c++) (y)[c] = (x)[c] > (a)[c] ? (x)[c] : (a)[c]
#define RED_ROWMIN_I64(n, a, x, y) for (int64_t c = 0; c < (n); c++) (y)[c] = (x)[c] < (a)[c] ? (x)[c] : (a)[c]
RED_COLEXT(cols_amax_f32, float, cpu_vm.maximum_f32, -INFINITY)
RED_COLEXT(cols_amax_f64, double, cpu_vm.maximum_f64, -INFINITY)
RED_COLEXT(cols_amax_i64, int64_t, RED_ROWMAX_I64, INT64_MIN)
RED_COLEXT(cols_amin_f32, float, cpu_vm.minimum_f32, INFINITY)
RED_COLEXT(cols_amin_f64, double, cpu_vm.minimum_f64, INFINITY)
RED_COLEXT(cols_amin_i64, int64_t, RED_ROWMIN_I64, INT64_MAX)
RED_COLEXT(cols_amax_i32, int32_t, RED_ROWMAX_I64, INT32_MIN)
RED_COLEXT(cols_amin_i32, int32_t, RED_ROWMIN_I64, INT32_MAX)
static const red_cols_fn cols_amax_fns[OPR_DTYPE_COUNT] = {
    [OPR_F32] = cols_amax_f32, [OPR_F64] = cols_amax_f64, [OPR_I64] = cols_amax_i64, [OPR_I32] = cols_amax_i32,
};
static const red_cols_fn cols_amin_fns[OPR_DTYPE_COUNT] = {
    [OPR_F32] = cols_amin_f32, [OPR_F64] = cols_amin_f64, [OPR_I64] = cols_amin_i64, [OPR_I32] = cols_amin_i32,
};

/* ------------------------------------------------------------------ kernels */

/* max/min(self): the extreme of all elements, a 0-d value. */
static int red_extreme_all(const opr_kernel_call *c, const char *op, const red_kind *table)
{
    const opr_tensor_view *in;
    const red_kind *k;
    int rc = red_begin(c, op, 1, 1, table, &in, &k);
    if (rc) return rc;
    if (in->numel == 0)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected a non-empty tensor", op);
    return red_go(c, op, in, ~0u, 1, k, 0, NULL, false);
}
static int k_max(const opr_kernel_call *c) { return red_extreme_all(c, "max", max_k); }
static int k_min(const opr_kernel_call *c) { return red_extreme_all(c, "min", min_k); }

/* max.dim/min.dim(self, dim, keepdim) -> (values, i64 indices along dim). */
static int red_extreme_dim(const opr_kernel_call *c, const char *op, const red_kind *table)
{
    const opr_tensor_view *in;
    const red_kind *k;
    int32_t d;
    int rc = red_begin(c, op, 3, 2, table, &in, &k);
    if (!rc) rc = red_wrap(c, op, cpu_arg_i(c, 1), in->ndim, &d);
    if (rc) return rc;
    if (in->ndim > 0 && in->shape[d] == 0)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: dim %d has size 0", op, d);
    return red_go(c, op, in, 1u << d, 2, k, 0, NULL, false);
}
static int k_max_dim(const opr_kernel_call *c) { return red_extreme_dim(c, "max.dim", max_k); }
static int k_min_dim(const opr_kernel_call *c) { return red_extreme_dim(c, "min.dim", min_k); }

/* amax/amin(self, int[1] dim, keepdim): the extremum over dim ([]: every dim), NaN if
 * the slice holds one. Slices along a contiguous dim are scanned with vector extrema;
 * over an outer dim, whole rows are folded into a row of running extrema. */
static int red_ext(const opr_kernel_call *c, const char *op, const red_kind *table, const red_cols_fn *cols)
{
    const opr_tensor_view *in;
    const red_kind *k;
    uint32_t mask;
    int rc = red_begin(c, op, 3, 1, table, &in, &k);
    if (!rc) rc = red_dim_mask(c, 1, op, in->ndim, &mask);
    if (rc) return rc;
    for (int32_t d = 0; d < in->ndim; d++)
        if ((mask & (1u << d)) && in->shape[d] == 0)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: dim %d has size 0 (an empty slice has no extremum)", op, d);
    return red_go(c, op, in, mask, 1, k, 0, cols[in->dtype], false);
}
static int k_amax(const opr_kernel_call *c) { return red_ext(c, "amax", amax_k, cols_amax_fns); }
static int k_amin(const opr_kernel_call *c) { return red_ext(c, "amin", amin_k, cols_amin_fns); }

/* ------------------------------------------------------------------ registration */

int cpu_register_reduce_extreme(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t mask;
        opr_kernel_fn fn;
    } ops[] = {
        {"max", red_mask(max_k), k_max},         {"min", red_mask(min_k), k_min},
        {"max.dim", red_mask(max_k), k_max_dim}, {"min.dim", red_mask(min_k), k_min_dim},
        {"amax", red_mask(amax_k), k_amax},      {"amin", red_mask(amin_k), k_amin},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int rc = cpu_register(self, ops[i].op, ops[i].mask, ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
