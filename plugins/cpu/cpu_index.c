/* Indexing and data-movement kernels: diag, index_select, masked_select, gather,
 * index_add(_), scatter_add, cat, diagonal_scatter, masked_scatter, copy_, fill_,
 * masked_fill_.
 *
 * Pure data movement works on elements as opaque bytes, so one code path serves every
 * dtype; only the accumulating ops (index_add, scatter_add) are instantiated per type.
 * Every index is checked before anything is written: an in-place op that fails leaves
 * self untouched, and no kernel reads or writes outside its views. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_cat.h"
#include "../common/opc_diagonal.h"
#include "../common/opc_index.h"
#include "../common/opc_scalar.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ helpers */

/* memcpy with a constant size per case compiles to a single load and store. */
static inline void move_elem(char *dst, const char *src, size_t es)
{
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

static cpu_walk walk_new(int32_t ndim, const int64_t *shape, int32_t nops,
                         const int64_t *const strides[])
{
    cpu_walk w;
    memset(&w, 0, sizeof w);
    w.ndim = ndim;
    w.nops = nops;
    w.shape = shape;
    for (int32_t k = 0; k < nops; k++)
        for (int32_t d = 0; d < ndim; d++) w.strides[k][d] = strides[k][d];
    return w;
}

static int64_t shape_numel(int32_t ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; d++) n *= shape[d];
    return n;
}


/* Byte range [lo, hi) that a view can touch; empty views touch nothing. */
static void byte_range(const opr_tensor_view *v, const char **lo, const char **hi)
{
    int64_t mn = 0, mx = 0;
    for (int32_t d = 0; d < v->ndim; d++) {
        int64_t span = (v->shape[d] - 1) * v->strides[d];
        if (span < 0) mn += span; else mx += span;
    }
    int64_t es = (int64_t)cpu_dtype_size(v->dtype);
    *lo = (const char *)v->data + mn * es;
    *hi = (const char *)v->data + (mx + 1) * es;
}

static bool views_overlap(const opr_tensor_view *a, const opr_tensor_view *b)
{
    if (a->numel == 0 || b->numel == 0) return false;
    const char *alo, *ahi, *blo, *bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* In-place writes through a view that maps several elements onto one address would
 * race between threads and give order-dependent results; PyTorch refuses them too. */
static int check_writable(const opr_kernel_call *c, const char *op, const opr_tensor_view *out)
{
    for (int32_t d = 0; d < out->ndim; d++)
        if (out->shape[d] > 1 && out->strides[d] == 0)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: more than one element of self refers to the same memory location (dim %d is expanded)",
                            op, (int)d);
    return OPR_OK;
}

static int check_dtype(const opr_kernel_call *c, const char *op, const char *what, const opr_tensor_view *v, opr_dtype dt)
{
    char why[OPC_WHY_SIZE];
    return opc_expect_dtype(op, what, v, dt, why, sizeof why) ? OPR_OK : CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

/* Fails unless every value of the i64 view `index` lies in [-size, size)
 * (opc_index_in_range). */
static int check_indices(const opr_kernel_call *c, const char *op, const opr_tensor_view *index, int32_t dim, int64_t size)
{
    if (index->numel == 0) return OPR_OK;
    int64_t mn, mx;
    cpu_minmax_i64(index, &mn, &mx);
    char why[OPC_WHY_SIZE];
    return opc_index_in_range(op, mn, mx, dim, size, why, sizeof why) ? OPR_OK : CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

static inline int64_t wrap_index(int64_t v, int64_t size) { return v < 0 ? v + size : v; }

/* Element offsets along a dim for each entry of a 0-d or 1-d index (already checked). */
static int64_t *index_offsets(const opr_tensor_view *index, int64_t size, int64_t stride)
{
    int64_t n = index->numel;
    int64_t *offs = malloc(n ? (size_t)n * sizeof *offs : 1);
    if (!offs) return NULL;
    const int64_t *p = index->data;
    int64_t is = index->ndim ? index->strides[0] : 0;
    for (int64_t i = 0; i < n; i++) offs[i] = wrap_index(p[i * is], size) * stride;
    return offs;
}

/* Encodes a double as one element of dtype dt, converted the way fill_ converts. */
static int encode_scalar(const opr_kernel_call *c, const char *op, opr_dtype dt, double v, char elem[8])
{
    char why[OPC_WHY_SIZE];
    const int rc = opc_encode_scalar(op, dt, v, elem, "cpu", why, sizeof why);
    return rc ? CPU_FAIL(c, rc, "%s", why) : OPR_OK;
}

/* Masked ops write their output in row-major order of the true positions. To run in
 * parallel, the positions are cut into fixed chunks and the trues of each chunk are
 * counted first; starts[c] is then where chunk c begins writing (starts has nchunks + 1
 * entries, starts[nchunks] is the total). A fixed count rather than the thread count
 * keeps the result independent of OMP_NUM_THREADS. */
enum { MASK_CHUNKS = 64 };

static int64_t mask_chunks(int32_t ndim, const int64_t *shape, int64_t n, const bool *mask,
                           const int64_t *mask_st, int64_t starts[MASK_CHUNKS + 1])
{
    int64_t nchunks = n >= CPU_PAR_THRESHOLD ? MASK_CHUNKS : 1;
    const int64_t *st[] = { mask_st };
    const cpu_walk w0 = walk_new(ndim, shape, 1, st);
    starts[0] = 0;
#pragma omp parallel for if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = cpu_chunk_lo(n, nchunks, c), hi = cpu_chunk_lo(n, nchunks, c + 1), cnt = 0;
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) cnt += mask[w.off[0]] != 0;
        starts[c + 1] = cnt;
    }
    for (int64_t c = 0; c < nchunks; c++) starts[c + 1] += starts[c];
    return nchunks;
}

/* ------------------------------------------------------------------ diag */

static int k_diag(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    const int64_t k = cpu_arg_i(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const size_t es = cpu_dtype_size(x->dtype);
    const int64_t row0 = opc_diagonal_row0(k), col0 = opc_diagonal_col0(k);
    const char *src = x->data;
    char *dst = out->data;

    if (x->ndim == 1) {
        const int64_t n = x->shape[0], size = n + row0 + col0;
        if (out->ndim != 2 || out->shape[0] != size || out->shape[1] != size)
            return CPU_FAIL(c, OPR_ERR_INVALID, "diag: output must be [%lld, %lld]",
                            (long long)size, (long long)size);
        const int64_t zst[2] = { 0, 0 };
        const char zero[8] = { 0 };
        cpu_copy_strided(es, 2, out->shape, dst, out->strides, zero, zst);
        for (int64_t i = 0; i < n; i++)
            move_elem(dst + ((i + row0) * out->strides[0] + (i + col0) * out->strides[1]) * (int64_t)es,
                      src + i * x->strides[0] * (int64_t)es, es);
        return OPR_OK;
    }
    if (x->ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "diag: expected a 1-d or 2-d tensor, got %d-d", (int)x->ndim);
    const int64_t len = opc_diagonal_length(x->shape[0], x->shape[1], k);
    if (out->ndim != 1 || out->shape[0] != len)
        return CPU_FAIL(c, OPR_ERR_INVALID, "diag: output must be [%lld]", (long long)len);
    for (int64_t i = 0; i < len; i++)
        move_elem(dst + i * out->strides[0] * (int64_t)es,
                  src + ((i + row0) * x->strides[0] + (i + col0) * x->strides[1]) * (int64_t)es, es);
    return OPR_OK;
}

/* ------------------------------------------------------------------ index_select */

static int k_index_select(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_index_select_args(x, index, cpu_arg_i(c, 1), &dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t size = opc_size_at(x, dim);
    int rc = check_indices(c, "index_select", index, dim, size);
    if (rc) return rc;
    if (!opc_index_select_out(x, index, dim, out, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->numel == 0) return OPR_OK;

    const size_t es = cpu_dtype_size(x->dtype);
    int64_t *offs = index_offsets(index, size, opc_stride_at(x, dim));
    if (!offs) return CPU_FAIL(c, OPR_ERR_NOMEM, "index_select: out of memory");
    const char *src = x->data;
    char *dst = out->data;
    if (x->ndim == 0) {
        for (int64_t i = 0; i < out->numel; i++)
            move_elem(dst + cpu_offset_of(out, i) * (int64_t)es, src, es);
        free(offs);
        return OPR_OK;
    }
    /* Self is walked with stride 0 at dim; the selected row's offset is added per element. */
    int64_t xs[OPR_MAX_DIMS];
    memcpy(xs, x->strides, (size_t)x->ndim * sizeof *xs);
    xs[dim] = 0;
    const int64_t *st[] = { out->strides, xs };
    const cpu_walk w0 = walk_new(out->ndim, out->shape, 2, st);
    const int64_t n = out->numel;
#pragma omp parallel if (n >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w))
            move_elem(dst + w.off[0] * (int64_t)es, src + (w.off[1] + offs[w.idx[dim]]) * (int64_t)es, es);
    }
    free(offs);
    return OPR_OK;
}

/* ------------------------------------------------------------------ masked_select */

static int k_masked_select(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *mask = cpu_arg_t(c, 1);
    int rc = check_dtype(c, "masked_select", "mask", mask, OPR_BOOL);
    if (rc) return rc;
    int32_t nd;
    int64_t shape[OPR_MAX_DIMS], xs[OPR_MAX_DIMS], ms[OPR_MAX_DIMS];
    if (!opc_broadcast_shape(x, mask, &nd, shape) || !opc_bcast_strides(x, nd, shape, xs) ||
        !opc_bcast_strides(mask, nd, shape, ms))
        return CPU_FAIL(c, OPR_ERR_INVALID, "masked_select: self and mask do not broadcast together");
    const int64_t n = shape_numel(nd, shape);
    int64_t starts[MASK_CHUNKS + 1];
    const int64_t nchunks = n ? mask_chunks(nd, shape, n, mask->data, ms, starts) : 0;
    int64_t total = n ? starts[nchunks] : 0;
    if ((rc = c->host->alloc_output(c, 0, 1, &total)) != OPR_OK) return rc;
    const opr_tensor_view *out = c->outputs[0];
    if (total == 0) return OPR_OK;

    const size_t es = cpu_dtype_size(x->dtype);
    const int64_t os = out->strides[0];
    const char *src = x->data;
    const bool *m = mask->data;
    char *dst = out->data;
    const int64_t *st[] = { xs, ms };
    const cpu_walk w0 = walk_new(nd, shape, 2, st);
#pragma omp parallel for if (nchunks > 1)
    for (int64_t ch = 0; ch < nchunks; ch++) {
        int64_t lo = cpu_chunk_lo(n, nchunks, ch), hi = cpu_chunk_lo(n, nchunks, ch + 1), k = starts[ch];
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w))
            if (m[w.off[1]]) move_elem(dst + k++ * os * (int64_t)es, src + w.off[0] * (int64_t)es, es);
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ gather */

static int k_gather(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_gather_args(x, index, out, cpu_arg_i(c, 1), &dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t size = opc_size_at(x, dim), xsd = opc_stride_at(x, dim);
    const int rc = check_indices(c, "gather", index, dim, size);
    if (rc) return rc;

    const size_t es = cpu_dtype_size(x->dtype);
    int64_t xs[OPR_MAX_DIMS] = { 0 };
    if (x->ndim) {
        memcpy(xs, x->strides, (size_t)x->ndim * sizeof *xs);
        xs[dim] = 0; /* the gathered position is added per element */
    }
    const int64_t *st[] = { out->strides, index->strides, xs };
    const cpu_walk w0 = walk_new(out->ndim, out->shape, 3, st);
    const int64_t n = out->numel;
    const char *src = x->data;
    const int64_t *ip = index->data;
    char *dst = out->data;
#pragma omp parallel if (n >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {
            int64_t j = wrap_index(ip[w.off[1]], size);
            move_elem(dst + w.off[0] * (int64_t)es, src + (w.off[2] + j * xsd) * (int64_t)es, es);
        }
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ index_add, scatter_add */

/* Both accumulate along dim. Work is split over the positions of the other dims
 * ("rows") and each row runs along dim on one thread, so repeated indices never make
 * two threads add into the same element. */
typedef struct {
    cpu_walk rows;        /* over the other dims; ops: out, src, index */
    int64_t nrows, len;   /* rows, and steps along dim per row */
    int64_t out_sd, src_sd, idx_sd, size;
    const int64_t *offs;  /* index_add: out offset per step; NULL for scatter_add */
    char *out;
    const char *src;
    const int64_t *index;
    double alpha;
} accum_job;

#define DEF_ACCUM(T, SUF)                                                                 \
    static void accum_##SUF(const accum_job *j)                                           \
    {                                                                                     \
        T *out = (T *)j->out;                                                             \
        const T *src = (const T *)j->src;                                                 \
        const T alpha = (T)j->alpha;                                                      \
        const bool par = j->nrows > 1 && j->nrows * j->len >= CPU_PAR_THRESHOLD;          \
        _Pragma("omp parallel if (par)")                                                  \
        {                                                                                 \
            int64_t lo, hi;                                                               \
            cpu_thread_range(j->nrows, &lo, &hi);                                             \
            cpu_walk w = j->rows;                                                         \
            cpu_walk_seek(&w, lo);                                                        \
            for (int64_t r = lo; r < hi; r++, cpu_walk_next(&w)) {                        \
                T *o = out + w.off[0];                                                    \
                const T *s = src + w.off[1];                                              \
                for (int64_t i = 0; i < j->len; i++) {                                    \
                    int64_t oo = j->offs ? j->offs[i]                                     \
                                         : wrap_index(j->index[w.off[2] + i * j->idx_sd], \
                                                      j->size) * j->out_sd;               \
                    o[oo] += alpha * s[i * j->src_sd];                                    \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }

DEF_ACCUM(float, f32)
DEF_ACCUM(double, f64)
DEF_ACCUM(int64_t, i64)
DEF_ACCUM(int32_t, i32)

static int run_accum(const opr_kernel_call *c, const char *op, opr_dtype dt, const accum_job *j)
{
    if (j->nrows == 0 || j->len == 0) return OPR_OK;
    switch (dt) {
    case OPR_F32: accum_f32(j); return OPR_OK;
    case OPR_F64: accum_f64(j); return OPR_OK;
    case OPR_I64: accum_i64(j); return OPR_OK;
    case OPR_I32: accum_i32(j); return OPR_OK;
    default: return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on cpu", op, cpu_dtype_name(dt));
    }
}

/* Shape of `v` with dim set to 1 (rows of an accumulation), and its row count. */
static int64_t row_shape(const opr_tensor_view *v, int32_t dim, int64_t *shape)
{
    if (v->ndim) memcpy(shape, v->shape, (size_t)v->ndim * sizeof *shape);
    if (v->ndim) shape[dim] = 1;
    return shape_numel(v->ndim, shape);
}

static int index_add_impl(const opr_kernel_call *c, bool inplace)
{
    const char *op = inplace ? "index_add_" : "index_add";
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2), *source = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_index_add_args(op, x, index, source, cpu_arg_i(c, 1), &dim, why, sizeof why) ||
        !opc_index_add_shapes(op, x, index, source, out, dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int rc;
    if (inplace && (rc = check_writable(c, op, out))) return rc;
    const double alpha = cpu_arg_d(c, 4);
    if (!opc_index_add_alpha(op, x->dtype, alpha, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t size = opc_size_at(out, dim);
    if ((rc = check_indices(c, op, index, dim, size))) return rc;

    int64_t *offs = index_offsets(index, size, opc_stride_at(out, dim));
    if (!offs) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    /* A source sharing memory with self would see its own partial sums. */
    int64_t tmp_st[OPR_MAX_DIMS];
    char *tmp = NULL;
    const char *src = source->data;
    const int64_t *src_st = source->strides;
    if (inplace && views_overlap(out, source)) {
        if (!(tmp = cpu_contiguous_copy(source, tmp_st))) {
            free(offs);
            return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
        }
        src = tmp;
        src_st = tmp_st;
    }
    if (!inplace)
        cpu_copy_strided(cpu_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data, x->strides);

    int64_t rshape[OPR_MAX_DIMS];
    accum_job j = {
        .len = index->numel, .src_sd = x->ndim ? src_st[dim] : 0, .offs = offs,
        .out = out->data, .src = src, .alpha = alpha,
    };
    j.nrows = row_shape(out, dim, rshape);
    const int64_t *st[] = { out->strides, src_st };
    j.rows = walk_new(out->ndim, rshape, 2, st);
    rc = run_accum(c, op, out->dtype, &j);
    free(offs);
    free(tmp);
    return rc;
}

static int k_index_add(const opr_kernel_call *c) { return index_add_impl(c, false); }
static int k_index_add_(const opr_kernel_call *c) { return index_add_impl(c, true); }

static int k_scatter_add(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *index = cpu_arg_t(c, 2), *src = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_scatter_add_args(x, index, src, cpu_arg_i(c, 1), &dim, why, sizeof why) ||
        !opc_scatter_add_shapes(x, index, src, out, dim, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t size = opc_size_at(x, dim);
    const int rc = check_indices(c, "scatter_add", index, dim, size);
    if (rc) return rc;

    cpu_copy_strided(cpu_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    int64_t rshape[OPR_MAX_DIMS];
    accum_job j = {
        .len = opc_size_at(index, dim), .out_sd = opc_stride_at(out, dim), .src_sd = opc_stride_at(src, dim),
        .idx_sd = opc_stride_at(index, dim), .size = size, .out = out->data, .src = src->data,
        .index = index->data, .alpha = 1.0,
    };
    j.nrows = row_shape(index, dim, rshape);
    const int64_t *st[] = { out->strides, src->strides, index->strides };
    j.rows = walk_new(index->ndim, rshape, 3, st);
    return run_accum(c, "scatter_add", out->dtype, &j);
}

/* ------------------------------------------------------------------ cat */

static int k_cat(const opr_kernel_call *c)
{
    char why[OPC_WHY_SIZE];
    opc_cat cat;
    if (!opc_cat_start(c, cpu_arg_i(c, 1), &cat, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = cpu_dtype_size(cat.out->dtype);
    char *const dst = cat.out->data;
    while (opc_cat_next(&cat))
        cpu_copy_strided(es, cat.t->ndim, cat.t->shape, dst + cat.offset * (int64_t)es, cat.out->strides, cat.t->data,
                     cat.t->strides);
    return OPR_OK;
}

/* ------------------------------------------------------------------ diagonal_scatter */

static int k_diagonal_scatter(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *src = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d1, d2;
    if (!opc_diagonal_dims("diagonal_scatter", x->ndim, cpu_arg_i(c, 3), cpu_arg_i(c, 4), &d1, &d2, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int rc = check_dtype(c, "diagonal_scatter", "src", src, x->dtype);
    if (rc) return rc;
    opc_diagonal_view v;
    if (!opc_diagonal_scatter_view(x, src, out, cpu_arg_i(c, 2), d1, d2, &v, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);

    /* self copied, then src over the diagonal */
    const size_t es = cpu_dtype_size(x->dtype);
    cpu_copy_strided(es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    if (src->numel == 0) return OPR_OK;
    cpu_copy_strided(es, v.ndim, v.shape, (char *)out->data + v.offset * (int64_t)es, v.strides, src->data, src->strides);
    return OPR_OK;
}

/* ------------------------------------------------------------------ masked_scatter */

static int k_masked_scatter(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *mask = cpu_arg_t(c, 1), *source = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    int rc = check_dtype(c, "masked_scatter", "mask", mask, OPR_BOOL);
    if (!rc) rc = check_dtype(c, "masked_scatter", "source", source, x->dtype);
    if (rc) return rc;
    int32_t nd;
    int64_t shape[OPR_MAX_DIMS], xs[OPR_MAX_DIMS], ms[OPR_MAX_DIMS];
    if (!opc_broadcast_shape(x, mask, &nd, shape) || !opc_same_shape(nd, shape, out) ||
        !opc_bcast_strides(x, nd, shape, xs) || !opc_bcast_strides(mask, nd, shape, ms))
        return CPU_FAIL(c, OPR_ERR_INVALID, "masked_scatter: self and mask must broadcast to the output shape");
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    int64_t starts[MASK_CHUNKS + 1];
    const int64_t nchunks = mask_chunks(nd, shape, n, mask->data, ms, starts);
    if (starts[nchunks] > source->numel)
        return CPU_FAIL(c, OPR_ERR_INVALID, "masked_scatter: mask has %lld true elements but source has only %lld",
                        (long long)starts[nchunks], (long long)source->numel);

    const size_t es = cpu_dtype_size(x->dtype);
    const bool src_contig = cpu_is_contiguous(source);
    const char *xp = x->data, *sp = source->data;
    const bool *m = mask->data;
    char *dst = out->data;
    const int64_t *st[] = { out->strides, xs, ms };
    const cpu_walk w0 = walk_new(nd, shape, 3, st);
#pragma omp parallel for if (nchunks > 1)
    for (int64_t ch = 0; ch < nchunks; ch++) {
        int64_t lo = cpu_chunk_lo(n, nchunks, ch), hi = cpu_chunk_lo(n, nchunks, ch + 1), k = starts[ch];
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {
            const char *from;
            if (m[w.off[2]]) {
                from = sp + (src_contig ? k : cpu_offset_of(source, k)) * (int64_t)es;
                k++;
            } else {
                from = xp + w.off[1] * (int64_t)es;
            }
            move_elem(dst + w.off[0] * (int64_t)es, from, es);
        }
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ in place */

static int k_copy_(const opr_kernel_call *c)
{
    const opr_tensor_view *src = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    int rc = check_dtype(c, "copy_", "src", src, out->dtype);
    if (!rc) rc = check_writable(c, "copy_", out);
    if (rc) return rc;
    int64_t ss[OPR_MAX_DIMS];
    if (!opc_bcast_strides(src, out->ndim, out->shape, ss))
        return CPU_FAIL(c, OPR_ERR_INVALID, "copy_: src does not broadcast to self");
    if (out->numel == 0) return OPR_OK;
    /* Copying a view onto itself is a no-op; any other overlap goes through a copy so
     * no element is read after it was overwritten. */
    if (opc_same_view(out, src)) return OPR_OK;
    const size_t es = cpu_dtype_size(out->dtype);
    if (!views_overlap(out, src)) {
        cpu_copy_strided(es, out->ndim, out->shape, out->data, out->strides, src->data, ss);
        return OPR_OK;
    }
    int64_t tmp_st[OPR_MAX_DIMS];
    char *tmp = cpu_contiguous_copy(src, tmp_st);
    if (!tmp) return CPU_FAIL(c, OPR_ERR_NOMEM, "copy_: out of memory");
    opr_tensor_view tv = *src;
    tv.data = tmp;
    tv.strides = tmp_st;
    opc_bcast_strides(&tv, out->ndim, out->shape, ss);
    cpu_copy_strided(es, out->ndim, out->shape, out->data, out->strides, tmp, ss);
    free(tmp);
    return OPR_OK;
}

static int k_fill_(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    char elem[8];
    int rc = encode_scalar(c, "fill_", out->dtype, cpu_arg_d(c, 1), elem);
    if (!rc) rc = check_writable(c, "fill_", out);
    if (rc) return rc;
    static const int64_t zero_st[OPR_MAX_DIMS];
    cpu_copy_strided(cpu_dtype_size(out->dtype), out->ndim, out->shape, out->data, out->strides, elem, zero_st);
    return OPR_OK;
}

static int k_masked_fill_(const opr_kernel_call *c)
{
    const opr_tensor_view *mask = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char elem[8];
    int rc = check_dtype(c, "masked_fill_", "mask", mask, OPR_BOOL);
    if (!rc) rc = encode_scalar(c, "masked_fill_", out->dtype, cpu_arg_d(c, 2), elem);
    if (!rc) rc = check_writable(c, "masked_fill_", out);
    if (rc) return rc;
    int64_t ms[OPR_MAX_DIMS];
    if (!opc_bcast_strides(mask, out->ndim, out->shape, ms))
        return CPU_FAIL(c, OPR_ERR_INVALID, "masked_fill_: mask does not broadcast to self");
    const int64_t n = out->numel;
    const size_t es = cpu_dtype_size(out->dtype);
    const bool *m = mask->data;
    char *dst = out->data;
    const int64_t *st[] = { out->strides, ms };
    const cpu_walk w0 = walk_new(out->ndim, out->shape, 2, st);
#pragma omp parallel if (n >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_walk w = w0;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w))
            if (m[w.off[1]]) move_elem(dst + w.off[0] * (int64_t)es, elem, es);
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ registration */

int cpu_register_index(opr_plugin *self)
{
    const uint32_t num = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32);
    const uint32_t all = num | OPR_DTYPE_BIT(OPR_BOOL);
    /* diag, index_select, gather, copy_ and diagonal_scatter move bytes, so they serve
     * the half types as they are; index_add and scatter_add sum them in f32 (cpu_half.c). */
    const uint32_t any = all | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16);
    const struct { const char *op; uint32_t dtypes; opr_kernel_fn fn; bool upcast; } table[] = {
        { "diag", any, k_diag, false },
        { "index_select", any, k_index_select, false },
        { "masked_select", all, k_masked_select, false },
        { "gather", any, k_gather, false },
        { "index_add", num, k_index_add, true },
        { "scatter_add", num, k_scatter_add, true },
        { "cat", all, k_cat, false },
        { "diagonal_scatter", any, k_diagonal_scatter, false },
        { "masked_scatter", all, k_masked_scatter, false },
        { "copy_", any, k_copy_, false },
        { "fill_", all, k_fill_, false },
        { "index_add_", num, k_index_add_, false },
        { "masked_fill_", all, k_masked_fill_, false },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? cpu_register_upcast : cpu_register)(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
