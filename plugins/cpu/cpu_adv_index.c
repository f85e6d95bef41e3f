/* Advanced indexing: index.Tensor(self, Tensor?[] indices) and index_put(_)(self,
 * indices, values, accumulate). The layout of the result (where the broadcast index
 * dims go, which dims are taken whole) is opc_adv_index_plan's, shared with the GPU
 * plugin. Every index value is checked before anything is written, so a failing
 * index_put_ leaves self untouched. Pure data movement (index, index_put without
 * accumulate) moves elements as opaque bytes, whole rows with memcpy where they are
 * contiguous; accumulation is typed. index_put takes the indexed rows in order (a thread
 * per column range of them), so that repeated indices sum the same way on every run
 * whatever the thread count. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"
#include "../common/opc_adv_index.h"

#include <string.h>

/* The layout of indexing a tensor of x's shape with strides st (x's own, or those of
 * index_put's output) by argument 1, with every index value checked against its dim. */
static int plan(const opr_kernel_call *c, const char *op, const opr_tensor_view *x, const int64_t *st,
                opc_adv_index *g)
{
    const opr_kernel_arg *list = c->args[1];
    if (list->kind != OPR_ARG_TENSOR_LIST) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: indices must be a tensor list", op);
    char why[OPC_WHY_SIZE];
    if (!opc_adv_index_plan(op, x->ndim, x->shape, st, list->u.tl.items, list->u.tl.n, g, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    for (int32_t k = 0; k < g->nidx; k++) {
        const opr_tensor_view *t = g->idx[k];
        if (t->dtype != OPR_I64)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: tensors used as indices must be long or bool tensors", op);
        if (t->numel == 0) continue;
        int64_t mn, mx;
        cpu_minmax_i64(t, &mn, &mx);
        if (!opc_adv_index_in_range(op, mn, mx, g->idx_dim[k], g->idx_size[k], why, sizeof why))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    }
    return OPR_OK;
}

/* Offsets of the element of the result whose row-major index over its first nd dims is
 * i (the dims after them at 0: nd = ndim - 1 names the start of a row of the last dim):
 * into the indexed tensor, and under the strides ost (the output of index, or values
 * broadcast to the result). The first dim's coordinate is what remains of i, so a row of
 * a 2-d result costs no division. */
static inline void elem_offsets(const opc_adv_index *g, int64_t i, int32_t nd, const int64_t *ost, int64_t *xoff,
                                int64_t *ooff)
{
    int64_t coord[OPR_MAX_DIMS] = {0};
    for (int32_t d = nd - 1; d > 0; d--) {
        coord[d] = i % g->shape[d];
        i /= g->shape[d];
    }
    if (nd > 0) coord[0] = i;
    int64_t x = 0, o = 0;
    for (int32_t d = 0; d < g->ndim; d++) {
        x += coord[d] * g->self_strides[d];
        o += coord[d] * ost[d];
    }
    for (int32_t k = 0; k < g->nidx; k++) {
        int64_t p = 0;
        for (int32_t d = 0; d < g->ndim; d++) p += coord[d] * g->idx_strides[k][d];
        int64_t v = ((const int64_t *)g->idx[k]->data)[p];
        if (v < 0) v += g->idx_size[k];
        x += v * g->idx_self_stride[k];
    }
    *xoff = x;
    *ooff = o;
}

/* The result is walked in rows of its last dim: when that dim is not one of the index
 * dims (no index tensor steps along it), a row is a plain strided run in both operands,
 * so the coordinates are decoded once per row, not once per element. */
static bool rows_are_runs(const opc_adv_index *g)
{
    if (g->ndim == 0) return false;
    for (int32_t k = 0; k < g->nidx; k++)
        if (g->idx_strides[k][g->ndim - 1]) return false;
    return true;
}

/* The offsets (elem_offsets) of the result's rows [lo, hi), each computed AHEAD rows
 * before its turn, when its run in the indexed tensor (`bytes` bytes from base + xo
 * elements; 0: none) is prefetched: indexed rows lie anywhere in memory, and a row of a
 * few hundred elements is done long before its memory would arrive unasked. */
enum { AHEAD = 4, RING = 8 }; /* RING > AHEAD, a power of two */
typedef struct row_ahead {
    const opc_adv_index *g;
    const int64_t *ost;
    int32_t nd; /* rows: dims of the result before the run (elem_offsets) */
    int64_t hi;
    const char *base;
    int64_t es, bytes;
    bool write;
    int64_t xo[RING], oo[RING];
} row_ahead;

static inline void ahead_fetch(row_ahead *a, int64_t r)
{
    if (r >= a->hi) return;
    int64_t *xo = &a->xo[r % RING];
    elem_offsets(a->g, r, a->nd, a->ost, xo, &a->oo[r % RING]);
    const char *p = a->base + *xo * a->es;
    for (int64_t b = 0; b < a->bytes; b += 64) {
        if (a->write) __builtin_prefetch(p + b, 1);
        else __builtin_prefetch(p + b, 0);
    }
}

/* Starts at row lo. */
static inline void ahead_start(row_ahead *a, int64_t lo)
{
    for (int64_t r = lo; r < lo + AHEAD; r++) ahead_fetch(a, r);
}

/* The offsets of row r (the rows taken in order from lo), asking for row r + AHEAD. */
static inline void ahead_next(row_ahead *a, int64_t r, int64_t *xo, int64_t *oo)
{
    *xo = a->xo[r % RING];
    *oo = a->oo[r % RING];
    ahead_fetch(a, r + AHEAD);
}

/* es-byte elements: n of them from src (stride ss) to dst (stride ds), in elements. */
static inline void move_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es)
{
    const int64_t db = ds * (int64_t)es, sb = ss * (int64_t)es;
    if (ds == 1 && ss == 1) { /* x[i] of a contiguous x: whole rows */
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) dst[j * db] = src[j * sb]; break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(dst + j * db, src + j * sb, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(dst + j * db, src + j * sb, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(dst + j * db, src + j * sb, 8); break;
    }
}

/* out = self[indices] */
static int k_index(const opr_kernel_call *c)
{
    const char *op = "index";
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    opc_adv_index g;
    int rc = plan(c, op, x, x->strides, &g);
    if (rc) return rc;
    if (g.ndim != out->ndim || g.numel != out->numel)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the output was sized for another result", op);
    const size_t es = cpu_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out->data;
    if (g.numel == 0) return OPR_OK;
    /* a run per row of the last dim where it is not indexed, else one element per row */
    const int64_t len = rows_are_runs(&g) ? g.shape[g.ndim - 1] : 1, nrows = g.numel / len;
    const int64_t xs = len > 1 ? g.self_strides[g.ndim - 1] : 0, os = len > 1 ? out->strides[g.ndim - 1] : 0;
#pragma omp parallel if (g.numel >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(nrows, &lo, &hi);
        row_ahead a = {.g = &g, .ost = out->strides, .nd = len > 1 ? g.ndim - 1 : g.ndim, .hi = hi, .base = src,
                       .es = (int64_t)es, .bytes = xs == 1 ? len * (int64_t)es : 0, .write = false};
        ahead_start(&a, lo);
        for (int64_t r = lo; r < hi; r++) {
            int64_t xo, oo;
            ahead_next(&a, r, &xo, &oo);
            move_run(dst + oo * (int64_t)es, os, src + xo * (int64_t)es, xs, len, es);
        }
    }
    return OPR_OK;
}

/* dst[j * ds] += src[j * ss] for j < n, in the dtype's arithmetic: cpu_vmath.h's loop
 * for unit-stride f32 and f64, plain loops (the unit-stride one vectorised by the
 * compiler) for the rest. */
#define ADD_RUN(T, ADD)                                                                   \
    do {                                                                                  \
        T *d_ = (T *)(void *)dst;                                                         \
        const T *s_ = (const T *)(const void *)src;                                       \
        if (ds == 1 && ss == 1)                                                           \
            for (int64_t j = 0; j < n; j++) d_[j] = ADD(d_[j], s_[j]);                    \
        else                                                                              \
            for (int64_t j = 0; j < n; j++) d_[j * ds] = ADD(d_[j * ds], s_[j * ss]);     \
    } while (0)
#define ADD_PLAIN(a, b) ((a) + (b))
#define ADD_WRAP(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b))) /* as PyTorch's int64 */
#define ADD_WRAP32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_OR(a, b) ((char)((a) || (b)))
static inline void add_run(opr_dtype dt, char *dst, int64_t ds, const char *src, int64_t ss, int64_t n)
{
    if (ds == 1 && ss == 1 && (dt == OPR_F32 || dt == OPR_F64)) { /* the widest vectors the CPU has */
        if (dt == OPR_F32) cpu_vm.addto_f32(n, (const float *)(const void *)src, (float *)(void *)dst);
        else cpu_vm.addto_f64(n, (const double *)(const void *)src, (double *)(void *)dst);
        return;
    }
    switch (dt) {
    case OPR_F32: ADD_RUN(float, ADD_PLAIN); break;
    case OPR_F64: ADD_RUN(double, ADD_PLAIN); break;
    case OPR_I64: ADD_RUN(int64_t, ADD_WRAP); break;
    case OPR_I32: ADD_RUN(int32_t, ADD_WRAP32); break;
    default: ADD_RUN(char, ADD_OR); break; /* bool */
    }
}

/* out (self, or a copy of it) with out[indices] = values, or += when accumulating. */
static int k_index_put(const opr_kernel_call *c)
{
    const char *op = c->op;
    const opr_tensor_view *x = cpu_arg_t(c, 0), *val = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    const bool acc = cpu_arg_b(c, 3);
    for (int32_t d = 0; d < out->ndim; d++)
        if (out->shape[d] > 1 && out->strides[d] == 0)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: more than one element of self refers to the same memory location "
                            "(dim %d is expanded)", op, (int)d);
    opc_adv_index g;
    int rc = plan(c, op, out, out->strides, &g);
    if (rc) return rc;
    /* values broadcast to the result's shape, right-aligned */
    int64_t vst[OPR_MAX_DIMS];
    if (val->ndim > g.ndim) goto mismatch;
    for (int32_t d = 0; d < g.ndim; d++) {
        const int32_t dv = d - (g.ndim - val->ndim);
        if (dv >= 0 && val->shape[dv] != 1 && val->shape[dv] != g.shape[d]) goto mismatch;
        vst[d] = dv >= 0 && val->shape[dv] != 1 ? val->strides[dv] : 0;
    }
    if (acc && x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64 && x->dtype != OPR_I32 &&
        x->dtype != OPR_BOOL)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: accumulate does not support dtype %d", op, (int)x->dtype);
    const size_t es = cpu_dtype_size(x->dtype);
    if (out->data != x->data) cpu_copy_strided(es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    char *dst = out->data;
    const char *src = val->data;
    if (g.numel == 0) return OPR_OK;
    const int64_t len = rows_are_runs(&g) ? g.shape[g.ndim - 1] : 1, nrows = g.numel / len;
    const int64_t xs = len > 1 ? g.self_strides[g.ndim - 1] : 0, vstep = len > 1 ? vst[g.ndim - 1] : 0;
    /* Rows in order, so that repeated indices sum (or overwrite) alike on every run;
     * long rows are cut into column ranges, one per thread, each thread taking every
     * row in order over its own columns: the same order for every element. */
    const int64_t unit = 16; /* columns a thread's range is a multiple of: whole vectors */
    const bool par = g.numel >= CPU_PAR_THRESHOLD && len >= 2 * unit;
#pragma omp parallel if (par)
    {
        int64_t lo = 0, hi = len;
        if (par) {
            cpu_thread_range((len + unit - 1) / unit, &lo, &hi);
            lo *= unit;
            hi = hi * unit < len ? hi * unit : len;
        }
        row_ahead a = {.g = &g, .ost = vst, .nd = len > 1 ? g.ndim - 1 : g.ndim, .hi = lo < hi ? nrows : 0,
                       .base = dst + lo * (int64_t)es, .es = (int64_t)es,
                       .bytes = xs == 1 ? (hi - lo) * (int64_t)es : 0, .write = true};
        ahead_start(&a, 0);
        for (int64_t r = 0; r < a.hi; r++) {
            int64_t xo, vo;
            ahead_next(&a, r, &xo, &vo);
            char *d = dst + (xo + lo * xs) * (int64_t)es;
            const char *v = src + (vo + lo * vstep) * (int64_t)es;
            if (acc) add_run(x->dtype, d, xs, v, vstep, hi - lo);
            else move_run(d, xs, v, vstep, hi - lo, es);
        }
    }
    return OPR_OK;
mismatch:;
    char vs[192] = "", rs[192] = ""; /* 8 dims of 20 digits and a separator each */
    for (int32_t d = 0, n = 0; d < val->ndim; d++) n += snprintf(vs + n, sizeof vs - (size_t)n, "%s%lld", d ? ", " : "", (long long)val->shape[d]);
    for (int32_t d = 0, n = 0; d < g.ndim; d++) n += snprintf(rs + n, sizeof rs - (size_t)n, "%s%lld", d ? ", " : "", (long long)g.shape[d]);
    return CPU_FAIL(c, OPR_ERR_INVALID, "%s: shape mismatch: value tensor of shape [%s] cannot be broadcast to indexing "
                    "result of shape [%s]", op, vs, rs);
}

int cpu_register_adv_index(opr_plugin *self)
{
    const uint32_t dtypes =
        OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32) |
        OPR_DTYPE_BIT(OPR_BOOL);
    const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"index", k_index}, {"index_put", k_index_put}, {"index_put_", k_index_put},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
