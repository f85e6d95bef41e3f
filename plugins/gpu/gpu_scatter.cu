/* The scatter family of registry/ops/indexing.yaml on the GPU: slice_scatter, scatter
 * (src and value), scatter_reduce and nonzero. Argument checks are the CPU plugin's
 * (plugins/common/opc_scatter.h); every index is checked (a min/max pass read back to
 * the host) before anything is written.
 *
 * scatter and scatter_reduce give one thread to each row of the index (its elements
 * that differ only along dim). Rows write disjoint elements of out, so no atomics are
 * needed, and each row runs in index order: repeated indices resolve as on the CPU
 * (the last write wins, reductions in order), so results match it exactly.
 * nonzero counts per chunk of elements, prefix-sums the counts on the host (the total
 * sizes the output through host->alloc_output), then each chunk writes its own part. */
#include "gpu_common.cuh"
#include "../common/opc_scatter.h"

#include <math.h>
#include <vector>

namespace {

/* Fails unless every value of the i64 view `index` lies in [0, size). */
int check_scatter_index(const gk_ctx *k, const opr_tensor_view *index, int32_t dim, int64_t size)
{
    if (index->numel == 0) return OPR_OK;
    int64_t mn, mx;
    int rc = gk_index_range(k, index, &mn, &mx);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    return opc_scatter_index_ok(k->op, mn, mx, dim, size, why, sizeof why) ? OPR_OK
                                                                            : GK_FAIL(k->call, OPR_ERR_INVALID, "%s", why);
}

/* The rows of an index: the geometry over its shape with dim set to 1 (operands out,
 * src, index, each without its stride at dim), their count and length. */
struct rows_geom {
    gk_geom g;
    int64_t nrows, len, out_sd, src_sd, idx_sd;
};

rows_geom rows_make(const opr_tensor_view *out, const opr_tensor_view *src, const opr_tensor_view *index, int32_t dim)
{
    rows_geom r;
    int64_t shape[GK_MAXD], os[GK_MAXD], ss[GK_MAXD], is[GK_MAXD];
    for (int32_t d = 0; d < index->ndim; d++) {
        shape[d] = d == dim ? 1 : index->shape[d];
        os[d] = d == dim ? 0 : out->strides[d];
        ss[d] = d == dim || !src ? 0 : src->strides[d];
        is[d] = d == dim ? 0 : index->strides[d];
    }
    const int64_t *st[3] = {os, ss, is};
    gk_geom_make(&r.g, index->ndim, shape, 3, st);
    r.len = index->shape[dim];
    r.nrows = r.len ? index->numel / r.len : 0;
    r.out_sd = out->strides[dim];
    r.src_sd = src ? src->strides[dim] : 0;
    r.idx_sd = index->strides[dim];
    return r;
}

/* ------------------------------------------------------------------ scatter */

/* src NULL: every written element is `value`. */
template <class E>
__global__ void k_scatter_rows(rows_geom r, E *out, const E *src, E value, const int64_t *index)
{
    GK_LOOP(row, r.nrows)
    {
        int64_t off[3];
        gk_offsets<3>(r.g, row, off);
        for (int64_t i = 0; i < r.len; i++)
            out[off[0] + index[off[2] + i * r.idx_sd] * r.out_sd] = src ? src[off[1] + i * r.src_sd] : value;
    }
}

template <class F> void by_elem_size(size_t es, F &&f)
{
    switch (es) {
    case 1: f(uint8_t()); break;
    case 2: f(uint16_t()); break;
    case 4: f(uint32_t()); break;
    default: f((unsigned long long)0); break;
    }
}

int scatter_impl(const opr_kernel_call *c, bool has_src)
{
    gk_ctx k;
    int rc = gk_begin(c, "scatter", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *index = gk_arg_t(c, 2), *src = has_src ? gk_arg_t(c, 3) : nullptr;
    opr_tensor_view *out = c->outputs[0];
    if (!x || !index || (has_src && !src)) return GK_FAIL(c, OPR_ERR_INVALID, "scatter: self, index and src must be tensors");
    if (x->ndim == 0) return GK_FAIL(c, OPR_ERR_INVALID, "scatter: self must have at least one dim");
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_scatter_args("scatter", x, index, src, out, gk_arg_i(c, 1), &dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = check_scatter_index(&k, index, dim, x->shape[dim]))) return rc;
    uint64_t bits = 0;
    if (!has_src) {
        const opr_kernel_arg *a = c->args[3];
        const double v = a->kind == OPR_ARG_BOOL ? (double)a->u.b : gk_arg_d(c, 3);
        if ((rc = gk_encode_scalar(c, "scatter", x->dtype, v, &bits))) return rc;
    }
    const size_t es = gk_dtype_size(x->dtype);
    if ((rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides))) return rc;
    const rows_geom r = rows_make(out, src, index, dim);
    if (r.nrows == 0) return OPR_OK;
    by_elem_size(es, [&](auto e) {
        using E = decltype(e);
        E value;
        memcpy(&value, &bits, sizeof value);
        gk_launch(k_scatter_rows<E>, gk_blocks(r.nrows), GK_THREADS, 0, k.stream, r, (E *)out->data,
                  src ? (const E *)src->data : nullptr, value, (const int64_t *)index->data);
    });
    return gk_launched(&k, "scatter kernel");
}

int k_scatter_src(const opr_kernel_call *c) { return scatter_impl(c, true); }
int k_scatter_value(const opr_kernel_call *c) { return scatter_impl(c, false); }

/* ------------------------------------------------------------------ scatter_reduce */

template <class T> GK_DEV bool is_nan(T v) { return v != v; }
template <> GK_DEV bool is_nan<int64_t>(int64_t) { return false; }

template <class T>
__global__ void k_reduce_rows(rows_geom r, int red, bool include_self, T init, T *out, const T *src,
                              const int64_t *index, int64_t *count)
{
    GK_LOOP(row, r.nrows)
    {
        int64_t off[3];
        gk_offsets<3>(r.g, row, off);
        if (!include_self) /* the positions this row reaches start from the identity */
            for (int64_t i = 0; i < r.len; i++) out[off[0] + index[off[2] + i * r.idx_sd] * r.out_sd] = init;
        for (int64_t i = 0; i < r.len; i++) {
            const int64_t oo = off[0] + index[off[2] + i * r.idx_sd] * r.out_sd;
            const T v = src[off[1] + i * r.src_sd];
            T *a = out + oo;
            switch (red) {
            case OPC_RED_SUM:
            case OPC_RED_MEAN: *a += v; break;
            case OPC_RED_PROD: *a *= v; break;
            case OPC_RED_AMAX: if (is_nan(v) || v > *a) *a = v; break;
            default: if (is_nan(v) || v < *a) *a = v; break;
            }
            if (count) count[oo]++;
        }
    }
}

template <class T> GK_DEV T mean_div(T a, int64_t n) { return a / (T)n; }
template <> GK_DEV int64_t mean_div<int64_t>(int64_t a, int64_t n)
{
    const int64_t q = a / n; /* floor division, as PyTorch's integer mean */
    return (a % n != 0 && ((a < 0) != (n < 0))) ? q - 1 : q;
}

template <class T> __global__ void k_mean_finish(int64_t n, T *out, const int64_t *count, bool include_self)
{
    GK_LOOP(i, n)
    {
        const int64_t m = count[i] + (include_self ? 1 : 0);
        if (m > 1) out[i] = mean_div(out[i], m);
    }
}

int k_scatter_reduce(const opr_kernel_call *c)
{
    gk_ctx k;
    const char *op = "scatter_reduce";
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *index = gk_arg_t(c, 2), *src = gk_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    if (!x || !index || !src) return GK_FAIL(c, OPR_ERR_INVALID, "scatter_reduce: self, index and src must be tensors");
    if (x->ndim == 0) return GK_FAIL(c, OPR_ERR_INVALID, "scatter_reduce: self must have at least one dim");
    char why[OPC_WHY_SIZE];
    int32_t dim;
    opc_reduce red;
    if (!opc_scatter_args(op, x, index, src, out, gk_arg_i(c, 1), &dim, why, sizeof why) ||
        !opc_reduce_parse(c->args[4]->kind == OPR_ARG_STRING ? c->args[4]->u.s : nullptr, &red, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(x->dtype), GPU_NAME);
    if (red == OPC_RED_MEAN && !gk_is_contiguous(out))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: mean needs a contiguous output", op);
    if ((rc = check_scatter_index(&k, index, dim, x->shape[dim]))) return rc;
    const bool include_self = gk_arg_b(c, 5);
    if ((rc = gk_copy_strided(&k, gk_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data,
                              x->strides)))
        return rc;
    const rows_geom r = rows_make(out, src, index, dim);
    if (r.nrows == 0) return OPR_OK;
    gk_buf count;
    if (red == OPC_RED_MEAN) {
        if ((rc = count.alloc(&k, (size_t)out->numel * sizeof(int64_t)))) return rc;
        GK_TRY(&k, gpuMemsetAsync(count.p, 0, (size_t)out->numel * sizeof(int64_t), k.stream));
    }
    int64_t *cp = count.as<int64_t>();
    const int64_t *ip = (const int64_t *)index->data;
    auto run = [&](auto t, auto lowest, auto highest) {
        using T = decltype(t);
        const T init = red == OPC_RED_PROD ? (T)1 : red == OPC_RED_AMAX ? (T)lowest : red == OPC_RED_AMIN ? (T)highest : (T)0;
        gk_launch(k_reduce_rows<T>, gk_blocks(r.nrows), GK_THREADS, 0, k.stream, r, (int)red, include_self, init,
                  (T *)out->data, (const T *)src->data, ip, cp);
        if (cp)
            gk_launch(k_mean_finish<T>, gk_blocks(out->numel), GK_THREADS, 0, k.stream, out->numel, (T *)out->data,
                      (const int64_t *)cp, include_self);
    };
    switch (x->dtype) {
    case OPR_F32: run(0.0f, -INFINITY, INFINITY); break;
    case OPR_F64: run(0.0, -(double)INFINITY, (double)INFINITY); break;
    default: run((int64_t)0, INT64_MIN, INT64_MAX); break;
    }
    return gk_launched(&k, "scatter_reduce kernel");
}

/* ------------------------------------------------------------------ slice_scatter */

int k_slice_scatter(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "slice_scatter", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *src = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!x || !src) return GK_FAIL(c, OPR_ERR_INVALID, "slice_scatter: self and src must be tensors");
    char why[OPC_WHY_SIZE];
    int32_t dim;
    int64_t first, count;
    if (!opc_slice_scatter_args(x, src, out, gk_arg_i(c, 2), gk_arg_given(c, 3), gk_arg_i(c, 3), gk_arg_given(c, 4),
                                gk_arg_i(c, 4), gk_arg_i(c, 5), &dim, &first, &count, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = gk_dtype_size(x->dtype);
    if ((rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides))) return rc;
    if (src->numel == 0) return OPR_OK;
    int64_t st[GK_MAXD];
    memcpy(st, out->strides, (size_t)out->ndim * sizeof *st);
    st[dim] *= gk_arg_i(c, 5);
    char *base = (char *)out->data + first * out->strides[dim] * (int64_t)es;
    return gk_copy_strided(&k, es, src->ndim, src->shape, base, st, src->data, src->strides);
}

/* ------------------------------------------------------------------ nonzero */

#define NZ_CHUNK 1024

/* Whether the element of es bytes at p is nonzero: a floating zero of either sign is
 * zero (its sign bit aside), NaN is not. */
template <class U> GK_DEV bool nz(const U *p, bool floating) { return floating ? (U)(*p << 1) != 0 : *p != 0; }

template <class U>
__global__ void k_nz_count(int64_t n, int64_t nchunks, gk_geom g, const U *x, bool floating, int64_t *counts)
{
    GK_LOOP(ch, nchunks)
    {
        int64_t m = 0;
        const int64_t hi = (ch + 1) * NZ_CHUNK < n ? (ch + 1) * NZ_CHUNK : n;
        for (int64_t i = ch * NZ_CHUNK; i < hi; i++) {
            int64_t off[1];
            gk_offsets<1>(g, i, off);
            m += nz(x + off[0], floating);
        }
        counts[ch] = m;
    }
}

/* Coordinates are computed from the row-major position with x's own (uncoalesced)
 * shape: shape[] is passed in a gk_geom's shape. */
template <class U>
__global__ void k_nz_write(int64_t n, int64_t nchunks, gk_geom g, gk_geom full, const U *x, bool floating,
                           const int64_t *starts, int64_t *out, int64_t os0, int64_t os1)
{
    GK_LOOP(ch, nchunks)
    {
        int64_t k = starts[ch];
        const int64_t hi = (ch + 1) * NZ_CHUNK < n ? (ch + 1) * NZ_CHUNK : n;
        for (int64_t i = ch * NZ_CHUNK; i < hi; i++) {
            int64_t off[1];
            gk_offsets<1>(g, i, off);
            if (!nz(x + off[0], floating)) continue;
            int64_t rest = i;
            for (int32_t d = full.ndim - 1; d >= 0; d--) {
                out[k * os0 + d * os1] = rest % full.shape[d];
                rest /= full.shape[d];
            }
            k++;
        }
    }
}

int k_nonzero(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "nonzero", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "nonzero: self must be a tensor");
    const bool floating = x->dtype != OPR_I64 && x->dtype != OPR_BOOL;
    const int64_t n = x->numel, nchunks = (n + NZ_CHUNK - 1) / NZ_CHUNK;
    gk_geom g;
    const int64_t *st[1] = {x->strides};
    gk_geom_make(&g, x->ndim, x->shape, 1, st);
    std::vector<int64_t> starts((size_t)nchunks + 1, 0);
    gk_buf counts;
    const size_t es = gk_dtype_size(x->dtype);
    if (nchunks) {
        if ((rc = counts.alloc(&k, (size_t)nchunks * sizeof(int64_t)))) return rc;
        by_elem_size(es, [&](auto e) {
            using U = decltype(e);
            gk_launch(k_nz_count<U>, gk_blocks(nchunks), GK_THREADS, 0, k.stream, n, nchunks, g, (const U *)x->data,
                      floating, counts.as<int64_t>());
        });
        if ((rc = gk_launched(&k, "nonzero count kernel"))) return rc;
        if ((rc = gk_to_host(&k, starts.data() + 1, counts.p, (size_t)nchunks * sizeof(int64_t)))) return rc;
        for (int64_t ch = 0; ch < nchunks; ch++) starts[(size_t)ch + 1] += starts[(size_t)ch];
    }
    const int64_t shape[2] = {starts[(size_t)nchunks], x->ndim};
    if ((rc = c->host->alloc_output(c, 0, 2, shape)) != OPR_OK) return rc;
    const opr_tensor_view *out = c->outputs[0];
    if (shape[0] == 0 || x->ndim == 0) return OPR_OK;
    if ((rc = gk_from_host(&k, counts.p, starts.data(), (size_t)nchunks * sizeof(int64_t)))) return rc;
    gk_geom full;
    memset(&full, 0, sizeof full);
    full.ndim = x->ndim;
    for (int32_t d = 0; d < x->ndim; d++) full.shape[d] = x->shape[d];
    by_elem_size(es, [&](auto e) {
        using U = decltype(e);
        gk_launch(k_nz_write<U>, gk_blocks(nchunks), GK_THREADS, 0, k.stream, n, nchunks, g, full, (const U *)x->data,
                  floating, (const int64_t *)counts.p, (int64_t *)out->data, out->strides[0], out->strides[1]);
    });
    return gk_launched(&k, "nonzero kernel");
}

} // namespace

int gk_register_scatter(opr_plugin *self)
{
    const struct { const char *op; uint32_t dtypes; opr_kernel_fn fn; } table[] = {
        {"slice_scatter", GK_ALL | GK_I32, k_slice_scatter}, {"scatter", GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL), k_scatter_src},
        {"scatter.value", GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL), k_scatter_value}, {"scatter_reduce", GK_NUMERIC, k_scatter_reduce},
        {"nonzero", GK_ALL | GK_I32, k_nonzero},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
