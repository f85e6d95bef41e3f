/* Indexing kernels: index_select, gather, scatter_add, index_add, index_add_,
 * masked_select, masked_scatter. The argument checks are those of the CPU plugin
 * (plugins/common/opc_index.h); in particular every index is checked before anything is
 * written (a min/max pass over the index, read back to the host: one synchronisation
 * per call), so a failing call leaves its outputs and an in-place self untouched and
 * nothing is read or written outside the views.
 *
 * scatter_add and index_add accumulate with atomicAdd (f32, f64, i64 wrapping), so
 * floating sums over repeated indices are not bitwise reproducible from run to run;
 * their f16 and bf16 accumulate in f32 scratch, rounded once.
 * masked_select and masked_scatter count the true mask elements per chunk, prefix-sum
 * the counts on the host (which needs the total anyway: it sizes masked_select's
 * output through host->alloc_output and is checked against masked_scatter's source),
 * then write in row-major order with a block-level scan inside each chunk. */
#include "gpu_common.cuh"
#include "../common/opc_index.h"

#include <stdlib.h>
#include <vector>

namespace {

/* ------------------------------------------------------------------ helpers */

GK_DEV int64_t wrap_index(int64_t v, int64_t size) { return v < 0 ? v + size : v; }

/* Order-preserving map of i64 onto u64 (for atomicMin/atomicMax on unsigned). */
GK_DEV unsigned long long ord_u64(int64_t v) { return (unsigned long long)v ^ (1ull << 63); }

__global__ void k_index_minmax(int64_t n, gk_geom g, const int64_t *p, unsigned long long *mm)
{
    __shared__ unsigned long long smin[GK_THREADS], smax[GK_THREADS];
    unsigned long long lo = ~0ull, hi = 0;
    GK_LOOP(i, n)
    {
        int64_t off[1];
        gk_offsets<1>(g, i, off);
        const unsigned long long u = ord_u64(p[off[0]]);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    const int tid = threadIdx.x;
    smin[tid] = lo;
    smax[tid] = hi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            if (smin[tid + s] < smin[tid]) smin[tid] = smin[tid + s];
            if (smax[tid + s] > smax[tid]) smax[tid] = smax[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        atomicMin(&mm[0], smin[0]);
        atomicMax(&mm[1], smax[0]);
    }
}

/* Fails unless every value of the i64 view `index` lies in [-size, size)
 * (opc_index_in_range). */
int check_indices(const gk_ctx *k, const opr_tensor_view *index, int32_t dim, int64_t size)
{
    if (index->numel == 0) return OPR_OK;
    int64_t mn, mx;
    int rc = gk_index_range(k, index, &mn, &mx);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    return opc_index_in_range(k->op, mn, mx, dim, size, why, sizeof why) ? OPR_OK : GK_FAIL(k->call, OPR_ERR_INVALID, "%s", why);
}

/* A geometry that also yields the coordinate along one dim (not coalesced). */
struct dim_geom {
    int32_t ndim, dim;
    int64_t shape[GK_MAXD];
    int64_t st[2][GK_MAXD];
};

GK_DEV void dim_offsets(const dim_geom &g, int64_t i, int64_t *off, int64_t *coord)
{
    off[0] = off[1] = 0;
    *coord = 0;
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
        const int64_t n = g.shape[d];
        const int64_t q = i / n, idx = i - q * n;
        i = q;
        off[0] += idx * g.st[0][d];
        off[1] += idx * g.st[1][d];
        if (d == g.dim) *coord = idx;
    }
}

dim_geom dim_geom_make(int32_t ndim, const int64_t *shape, int32_t dim, const int64_t *st0, const int64_t *st1)
{
    dim_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = ndim;
    g.dim = dim;
    for (int32_t d = 0; d < ndim; d++) {
        g.shape[d] = shape[d];
        g.st[0][d] = st0[d];
        g.st[1][d] = st1[d];
    }
    return g;
}

/* Selects the device for call c of op and reads its tensors: self (argument 0), argument
 * ia into *a and, where b is given, argument ib into *b. Fails when one is missing,
 * naming them all (names, e.g. "self, index and src"). */
int begin_tensors(const opr_kernel_call *c, const char *op, const char *names, gk_ctx *k, const opr_tensor_view **x,
                  int ia, const opr_tensor_view **a, int ib = -1, const opr_tensor_view **b = nullptr)
{
    int rc = gk_begin(c, op, k);
    if (rc) return rc;
    *x = gk_arg_t(c, 0);
    *a = gk_arg_t(c, ia);
    const bool have_b = !b || (*b = gk_arg_t(c, ib));
    if (!*x || !*a || !have_b) return GK_FAIL(c, OPR_ERR_INVALID, "%s: %s must be tensors", op, names);
    return OPR_OK;
}

/* v's strides with 0 at dim, where the kernels add the indexed position themselves (all
 * zero for a 0-d v). */
void strides_but_dim(const opr_tensor_view *v, int32_t dim, int64_t *st)
{
    memset(st, 0, GK_MAXD * sizeof *st);
    if (!v->ndim) return;
    memcpy(st, v->strides, (size_t)v->ndim * sizeof *st);
    st[dim] = 0;
}

/* Calls f with a value of the unsigned type of es bytes (1, 2, 4, else 8): the kernels
 * that only move elements are instantiated per element size, not per dtype. */
template <class F> void by_elem_size(size_t es, F &&f)
{
    switch (es) {
    case 1: f(uint8_t()); break;
    case 2: f(uint16_t()); break;
    case 4: f(uint32_t()); break;
    default: f((unsigned long long)0); break;
    }
}

/* Calls f with a value of the element type of an accumulating op's dtype (f32, f64,
 * i32, else i64; check_accumulates has refused the others). */
template <class F> void by_accum_type(opr_dtype dt, F &&f)
{
    switch (dt) {
    case OPR_F32: f(0.0f); break;
    case OPR_F64: f(0.0); break;
    case OPR_I32: f((int32_t)0); break;
    default: f((int64_t)0); break;
    }
}

/* scatter_add and index_add accumulate with atomicAdd, which exists for f32, f64, i32
 * and (as unsigned) i64 only. */
int check_accumulates(const opr_kernel_call *c, const char *op, opr_dtype dt)
{
    if (dt == OPR_F32 || dt == OPR_F64 || dt == OPR_I64 || dt == OPR_I32) return OPR_OK;
    return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(dt), GPU_NAME);
}

/* The accumulating ops write self's elements into out: its dtype must be self's (the
 * CPU plugin leaves this to the host). Reported like a wrong output shape. */
int check_out_dtype(const opr_kernel_call *c, const char *op, const opr_tensor_view *out, const opr_tensor_view *x)
{
    return out->dtype == x->dtype ? OPR_OK : GK_FAIL(c, OPR_ERR_INVALID, "%s: output shape must equal self's", op);
}

/* ------------------------------------------------------------------ index_select */

template <class E>
__global__ void k_index_select(int64_t n, dim_geom g, E *out, const E *x, const int64_t *index, int64_t is,
                               int64_t size, int64_t xsd)
{
    GK_LOOP(i, n)
    {
        int64_t off[2], coord;
        dim_offsets(g, i, off, &coord);
        out[off[0]] = x[off[1] + wrap_index(index[coord * is], size) * xsd];
    }
}

int k_index_select_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x, *index;
    int rc = begin_tensors(c, "index_select", "self and index", &k, &x, 2, &index);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_index_select_args(x, index, gk_arg_i(c, 1), &dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "index_select: output dtype differs from self's");
    const int64_t size = opc_size_at(x, dim);
    if ((rc = check_indices(&k, index, dim, size))) return rc;
    if (!opc_index_select_out(x, index, dim, out, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->numel == 0) return OPR_OK;
    const size_t es = gk_dtype_size(x->dtype);
    if (x->ndim == 0) { /* one element, which every index (0 or -1) selects */
        static const int64_t zero[GK_MAXD] = {0};
        return gk_copy_strided(&k, es, out->ndim, out->shape, out->data, out->strides, x->data, zero);
    }
    int64_t xs[GK_MAXD];
    strides_but_dim(x, dim, xs);
    const dim_geom g = dim_geom_make(out->ndim, out->shape, dim, out->strides, xs);
    const int64_t n = out->numel, is = index->ndim ? index->strides[0] : 0, xsd = x->strides[dim];
    const int64_t *ip = (const int64_t *)index->data;
    by_elem_size(es, [&](auto e) {
        using E = decltype(e);
        gk_launch(k_index_select<E>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (E *)out->data, (const E *)x->data,
                  ip, is, size, xsd);
    });
    return gk_launched(&k, "index_select kernel");
}

/* ------------------------------------------------------------------ gather */

template <class E>
__global__ void k_gather(int64_t n, gk_geom g, E *out, const int64_t *index, const E *x, int64_t size, int64_t xsd)
{
    GK_LOOP(i, n)
    {
        int64_t off[3];
        gk_offsets<3>(g, i, off);
        out[off[0]] = x[off[2] + wrap_index(index[off[1]], size) * xsd];
    }
}

int k_gather_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x, *index;
    int rc = begin_tensors(c, "gather", "self and index", &k, &x, 2, &index);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_gather_args(x, index, out, gk_arg_i(c, 1), &dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "gather: output dtype differs from self's");
    const int64_t size = opc_size_at(x, dim), xsd = opc_stride_at(x, dim);
    if ((rc = check_indices(&k, index, dim, size))) return rc;
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    int64_t xs[GK_MAXD];
    strides_but_dim(x, dim, xs);
    gk_geom g;
    const int64_t *st[3] = {out->strides, index->strides, xs};
    gk_geom_make(&g, out->ndim, out->shape, 3, st);
    const int64_t *ip = (const int64_t *)index->data;
    by_elem_size(gk_dtype_size(x->dtype), [&](auto e) {
        using E = decltype(e);
        gk_launch(k_gather<E>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (E *)out->data, ip, (const E *)x->data,
                  size, xsd);
    });
    return gk_launched(&k, "gather kernel");
}

/* ------------------------------------------------------------------ scatter_add */

template <class T>
__global__ void k_scatter_add(int64_t n, gk_geom g, T *out, const T *src, const int64_t *index, int64_t size,
                              int64_t out_sd)
{
    GK_LOOP(i, n)
    {
        int64_t off[3];
        gk_offsets<3>(g, i, off);
        gk_atomic_add(out + off[0] + wrap_index(index[off[2]], size) * out_sd, src[off[1]]);
    }
}

/* out[..., index[i], ...] += src[i] along dim (out already holds self). */
int scatter_add_into(const gk_ctx *k, opr_tensor_view *out, const opr_tensor_view *src, const opr_tensor_view *index,
                     int32_t dim, int64_t size)
{
    const int64_t n = index->numel;
    if (n == 0) return OPR_OK;
    int64_t os[GK_MAXD];
    strides_but_dim(out, dim, os);
    gk_geom g;
    const int64_t *st[3] = {os, src->strides, index->strides};
    gk_geom_make(&g, index->ndim, index->shape, 3, st);
    const int64_t *ip = (const int64_t *)index->data;
    const int64_t osd = opc_stride_at(out, dim);
    by_accum_type(out->dtype, [&](auto t) {
        using T = decltype(t);
        gk_launch(k_scatter_add<T>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (T *)out->data, (const T *)src->data,
                  ip, size, osd);
    });
    return gk_launched(k, "scatter_add kernel");
}

/* A contiguous f32 copy of half-precision view v in w (its data in buf). */
int widen_f32(const gk_ctx *k, const opr_tensor_view *v, gk_buf *buf, opr_tensor_view *w, int64_t *strides)
{
    int rc = buf->alloc(k, (size_t)v->numel * sizeof(float));
    if (rc) return rc;
    *w = *v;
    opc_contig_strides(v->ndim, v->shape, strides);
    w->strides = strides;
    w->dtype = OPR_F32;
    w->data = buf->p;
    return gk_convert_strided(k, OPR_F32, v->ndim, v->shape, w->data, strides, v->dtype, v->data, v->strides);
}

/* f16 and bf16 accumulate in f32 (there is no portable half atomicAdd): self and src
 * are widened to f32 scratch, summed there, and the sums rounded into out once. */
int k_scatter_add_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x, *index, *src;
    int rc = begin_tensors(c, "scatter_add", "self, index and src", &k, &x, 2, &index, 3, &src);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_scatter_add_args(x, index, src, gk_arg_i(c, 1), &dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const bool half = x->dtype == OPR_F16 || x->dtype == OPR_BF16;
    if (!half && (rc = check_accumulates(c, "scatter_add", x->dtype))) return rc;
    if (!opc_scatter_add_shapes(x, index, src, out, dim, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = check_out_dtype(c, "scatter_add", out, x))) return rc;
    const int64_t size = opc_size_at(x, dim);
    if ((rc = check_indices(&k, index, dim, size))) return rc;
    if (!half) {
        if ((rc = gk_copy_strided(&k, gk_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data,
                                  x->strides)))
            return rc;
        return scatter_add_into(&k, out, src, index, dim, size);
    }
    gk_buf bx, bs;
    opr_tensor_view wx, ws;
    int64_t sx[GK_MAXD], ss[GK_MAXD];
    if ((rc = widen_f32(&k, x, &bx, &wx, sx)) || (rc = widen_f32(&k, src, &bs, &ws, ss)) ||
        (rc = scatter_add_into(&k, &wx, &ws, index, dim, size)))
        return rc;
    return gk_convert_strided(&k, out->dtype, out->ndim, out->shape, out->data, out->strides, OPR_F32, wx.data, sx);
}

/* ------------------------------------------------------------------ index_add */

GK_DEV float scaled(float a, float v) { return a * v; }
GK_DEV double scaled(double a, double v) { return a * v; }
GK_DEV int64_t scaled(int64_t a, int64_t v) { return (int64_t)((uint64_t)a * (uint64_t)v); }
GK_DEV int32_t scaled(int32_t a, int32_t v) { return (int32_t)((uint32_t)a * (uint32_t)v); }

template <class T>
__global__ void k_index_add(int64_t n, dim_geom g, T *out, const T *src, const int64_t *index, int64_t is,
                            int64_t size, int64_t out_sd, T alpha)
{
    GK_LOOP(i, n)
    {
        int64_t off[2], coord;
        dim_offsets(g, i, off, &coord);
        gk_atomic_add(out + off[0] + wrap_index(index[coord * is], size) * out_sd, scaled(alpha, src[off[1]]));
    }
}

/* out[..., index[i], ...] += alpha * source[..., i, ...] along dim (out already holds
 * self); the source's elements at src with strides src_st. */
int index_add_into(const gk_ctx *k, opr_tensor_view *out, const opr_tensor_view *source, const void *src,
                   const int64_t *src_st, const opr_tensor_view *index, int32_t dim, int64_t size, double alpha)
{
    const int64_t n = source->numel;
    if (n == 0) return OPR_OK;
    int64_t os[GK_MAXD];
    strides_but_dim(out, dim, os);
    const dim_geom g = dim_geom_make(source->ndim, source->shape, source->ndim ? dim : -1, os, src_st);
    const int64_t *ip = (const int64_t *)index->data;
    const int64_t is = index->ndim ? index->strides[0] : 0, osd = opc_stride_at(out, dim);
    by_accum_type(out->dtype, [&](auto t) {
        using T = decltype(t);
        gk_launch(k_index_add<T>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (T *)out->data, (const T *)src, ip, is,
                  size, osd, (T)alpha);
    });
    return gk_launched(k, "index_add kernel");
}

/* f16 and bf16 accumulate in f32 scratch as scatter_add's do (in place too: the sums
 * are rounded back into self). */
int index_add_impl(const opr_kernel_call *c, bool inplace)
{
    const char *op = inplace ? "index_add_" : "index_add";
    gk_ctx k;
    const opr_tensor_view *x, *index, *source;
    int rc = begin_tensors(c, op, "self, index and source", &k, &x, 2, &index, 3, &source);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t dim;
    if (!opc_index_add_args(op, x, index, source, gk_arg_i(c, 1), &dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const bool half = x->dtype == OPR_F16 || x->dtype == OPR_BF16;
    if (!half && (rc = check_accumulates(c, op, x->dtype))) return rc;
    if (!opc_index_add_shapes(op, x, index, source, out, dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = check_out_dtype(c, op, out, x))) return rc;
    if (inplace && (rc = gk_check_writable(c, op, out))) return rc;
    const double alpha = gk_arg_d(c, 4);
    if (!opc_index_add_alpha(op, x->dtype, alpha, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t size = opc_size_at(out, dim);
    if ((rc = check_indices(&k, index, dim, size))) return rc;
    if (half) {
        gk_buf bx, bs;
        opr_tensor_view wx, ws;
        int64_t sx[GK_MAXD], ss[GK_MAXD];
        if ((rc = widen_f32(&k, x, &bx, &wx, sx)) || (rc = widen_f32(&k, source, &bs, &ws, ss)) ||
            (rc = index_add_into(&k, &wx, &ws, ws.data, ss, index, dim, size, alpha)))
            return rc;
        return gk_convert_strided(&k, out->dtype, out->ndim, out->shape, out->data, out->strides, OPR_F32, wx.data, sx);
    }

    /* A source sharing memory with self would see its own partial sums. */
    gk_buf tmp;
    int64_t tmp_st[GK_MAXD];
    const void *src = source->data;
    const int64_t *src_st = source->strides;
    if (inplace && gk_views_overlap(out, source)) {
        if ((rc = gk_contiguous_copy(&k, source, &tmp, tmp_st))) return rc;
        src = tmp.p;
        src_st = tmp_st;
    }
    if (!inplace &&
        (rc = gk_copy_strided(&k, gk_dtype_size(x->dtype), x->ndim, x->shape, out->data, out->strides, x->data, x->strides)))
        return rc;
    return index_add_into(&k, out, source, src, src_st, index, dim, size, alpha);
}

int k_index_add_op(const opr_kernel_call *c) { return index_add_impl(c, false); }
int k_index_add_inplace(const opr_kernel_call *c) { return index_add_impl(c, true); }

/* ------------------------------------------------------------------ masked ops */

#define MASK_CHUNK 4096 /* positions per chunk (one block each) */

/* Exclusive prefix of `flag` over the block (blockDim.x a power of two), and the
 * block's total. Every thread of the block must call it. */
__device__ int block_scan(int *sh, int flag, int *total)
{
    const int tid = threadIdx.x;
    sh[tid] = flag;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {
        const int v = tid >= off ? sh[tid - off] : 0;
        __syncthreads();
        sh[tid] += v;
        __syncthreads();
    }
    *total = sh[blockDim.x - 1];
    const int excl = sh[tid] - flag;
    __syncthreads();
    return excl;
}

/* counts[c] = number of true mask positions in chunk c. */
__global__ void k_mask_count(int64_t n, int64_t nchunks, gk_geom g, const uint8_t *mask, int64_t *counts)
{
    __shared__ int64_t sh[GK_THREADS];
    const int tid = threadIdx.x;
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const int64_t lo = c * MASK_CHUNK, hi = lo + MASK_CHUNK < n ? lo + MASK_CHUNK : n;
        int64_t cnt = 0;
        for (int64_t i = lo + tid; i < hi; i += blockDim.x) {
            int64_t off[1];
            gk_offsets<1>(g, i, off);
            cnt += mask[off[0]] != 0;
        }
        sh[tid] = cnt;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) sh[tid] += sh[tid + s];
            __syncthreads();
        }
        if (tid == 0) counts[c] = sh[0];
        __syncthreads();
    }
}

/* The walk both masked kernels make: block b takes chunks b, b + gridDim.x, ...; in each,
 * its threads take consecutive positions (the geometry g's row-major order), read their
 * operand offsets (the mask last of the N) and number the true ones from the chunk's
 * start in starts. visit(off, flag, k) then runs for every position, k being the
 * position's number among the true ones when flag is set. */
template <int N, class Visit>
__device__ void mask_walk(int64_t n, int64_t nchunks, const gk_geom &g, const uint8_t *mask, const int64_t *starts,
                          Visit visit)
{
    __shared__ int sh[GK_THREADS];
    const int tid = threadIdx.x;
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        int64_t base = starts[c];
        const int64_t lo = c * MASK_CHUNK, hi = lo + MASK_CHUNK < n ? lo + MASK_CHUNK : n;
        for (int64_t r = lo; r < hi; r += blockDim.x) {
            const int64_t i = r + tid;
            int64_t off[N] = {0};
            int flag = 0;
            if (i < hi) {
                gk_offsets<N>(g, i, off);
                flag = mask[off[N - 1]] != 0;
            }
            int total;
            const int excl = block_scan(sh, flag, &total);
            if (i < hi) visit(off, flag, base + excl);
            base += total;
        }
    }
}

/* masked_select: geometry operands (x, mask); out[k * os] for the k-th true position. */
template <class E>
__global__ void k_mask_select(int64_t n, int64_t nchunks, gk_geom g, const E *x, const uint8_t *mask,
                              const int64_t *starts, E *out, int64_t os)
{
    mask_walk<2>(n, nchunks, g, mask, starts, [&](const int64_t *off, int flag, int64_t k) {
        if (flag) out[k * os] = x[off[0]];
    });
}

/* masked_scatter: geometry operands (out, x, mask); source read through sg (its own
 * shape and strides) at the k-th true position. */
template <class E>
__global__ void k_mask_scatter(int64_t n, int64_t nchunks, gk_geom g, E *out, const E *x, const uint8_t *mask,
                               const int64_t *starts, const E *source, gk_geom sg)
{
    mask_walk<3>(n, nchunks, g, mask, starts, [&](const int64_t *off, int flag, int64_t k) {
        if (flag) {
            int64_t so[1];
            gk_offsets<1>(sg, k, so);
            out[off[0]] = source[so[0]];
        } else {
            out[off[0]] = x[off[1]];
        }
    });
}

/* Counts the true positions of `mask` (read through ms over shape) per chunk and
 * returns the chunk starts on the device and the total. */
int mask_starts(const gk_ctx *k, int32_t nd, const int64_t *shape, int64_t n, const opr_tensor_view *mask,
                const int64_t *ms, gk_buf *starts, int64_t *nchunks, int64_t *total)
{
    *nchunks = (n + MASK_CHUNK - 1) / MASK_CHUNK;
    gk_buf counts;
    int rc = counts.alloc(k, (size_t)*nchunks * sizeof(int64_t));
    if (!rc) rc = starts->alloc(k, (size_t)*nchunks * sizeof(int64_t));
    if (rc) return rc;
    gk_geom g;
    const int64_t *st[1] = {ms};
    gk_geom_make(&g, nd, shape, 1, st);
    const unsigned blocks = (unsigned)(*nchunks < 65535 ? *nchunks : 65535);
    gk_launch(k_mask_count, blocks, GK_THREADS, 0, k->stream, n, *nchunks, g, (const uint8_t *)mask->data, counts.as<int64_t>());
    if ((rc = gk_launched(k, "mask count kernel"))) return rc;
    std::vector<int64_t> h((size_t)*nchunks);
    if ((rc = gk_to_host(k, h.data(), counts.p, h.size() * sizeof(int64_t)))) return rc;
    int64_t acc = 0;
    for (size_t i = 0; i < h.size(); i++) {
        const int64_t cnt = h[i];
        h[i] = acc;
        acc += cnt;
    }
    *total = acc;
    return gk_from_host(k, starts->p, h.data(), h.size() * sizeof(int64_t));
}

int k_masked_select_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x, *mask;
    int rc = begin_tensors(c, "masked_select", "self and mask", &k, &x, 1, &mask);
    if (rc) return rc;
    if ((rc = gk_check_dtype(c, "masked_select", "mask", mask, OPR_BOOL))) return rc;
    int32_t nd;
    int64_t shape[GK_MAXD], xs[GK_MAXD], ms[GK_MAXD];
    if (!opc_broadcast_shape(x, mask, &nd, shape) || !opc_bcast_strides(x, nd, shape, xs) ||
        !opc_bcast_strides(mask, nd, shape, ms))
        return GK_FAIL(c, OPR_ERR_INVALID, "masked_select: self and mask do not broadcast together");
    const int64_t n = gk_numel(nd, shape);
    gk_buf starts;
    int64_t nchunks = 0, total = 0;
    if (n && (rc = mask_starts(&k, nd, shape, n, mask, ms, &starts, &nchunks, &total))) return rc;
    if ((rc = c->host->alloc_output(c, 0, 1, &total)) != OPR_OK) return rc;
    const opr_tensor_view *out = c->outputs[0];
    if (total == 0) return OPR_OK;
    if (out->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "masked_select: output dtype differs from self's");
    gk_geom g;
    const int64_t *st[2] = {xs, ms};
    gk_geom_make(&g, nd, shape, 2, st);
    const int64_t os = out->strides[0];
    const int64_t *sp = starts.as<int64_t>();
    const uint8_t *m = (const uint8_t *)mask->data;
    const unsigned blocks = (unsigned)(nchunks < 65535 ? nchunks : 65535);
    by_elem_size(gk_dtype_size(x->dtype), [&](auto e) {
        using E = decltype(e);
        gk_launch(k_mask_select<E>, blocks, GK_THREADS, 0, k.stream, n, nchunks, g, (const E *)x->data, m, sp,
                  (E *)out->data, os);
    });
    return gk_launched(&k, "masked_select kernel");
}

int k_masked_scatter_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x, *mask, *source;
    int rc = begin_tensors(c, "masked_scatter", "self, mask and source", &k, &x, 1, &mask, 2, &source);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    rc = gk_check_dtype(c, "masked_scatter", "mask", mask, OPR_BOOL);
    if (!rc) rc = gk_check_dtype(c, "masked_scatter", "source", source, x->dtype);
    if (rc) return rc;
    int32_t nd;
    int64_t shape[GK_MAXD], xs[GK_MAXD], ms[GK_MAXD];
    if (!opc_broadcast_shape(x, mask, &nd, shape) || !gk_same_shape(nd, shape, out) ||
        !opc_bcast_strides(x, nd, shape, xs) || !opc_bcast_strides(mask, nd, shape, ms) || out->dtype != x->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "masked_scatter: self and mask must broadcast to the output shape");
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    gk_buf starts;
    int64_t nchunks = 0, total = 0;
    if ((rc = mask_starts(&k, nd, shape, n, mask, ms, &starts, &nchunks, &total))) return rc;
    if (total > source->numel)
        return GK_FAIL(c, OPR_ERR_INVALID, "masked_scatter: mask has %lld true elements but source has only %lld",
                       (long long)total, (long long)source->numel);
    if (source->ndim > GK_MAXD) return GK_FAIL(c, OPR_ERR_INVALID, "masked_scatter: source has too many dims");
    gk_geom g, sg;
    const int64_t *st[3] = {out->strides, xs, ms};
    gk_geom_make(&g, nd, shape, 3, st);
    const int64_t *sst[1] = {source->strides};
    gk_geom_make(&sg, source->ndim, source->shape, 1, sst);
    const int64_t *sp = starts.as<int64_t>();
    const uint8_t *m = (const uint8_t *)mask->data;
    const unsigned blocks = (unsigned)(nchunks < 65535 ? nchunks : 65535);
    by_elem_size(gk_dtype_size(x->dtype), [&](auto e) {
        using E = decltype(e);
        gk_launch(k_mask_scatter<E>, blocks, GK_THREADS, 0, k.stream, n, nchunks, g, (E *)out->data, (const E *)x->data,
                  m, sp, (const E *)source->data, sg);
    });
    return gk_launched(&k, "masked_scatter kernel");
}

} // namespace

int gk_register_index(opr_plugin *self)
{
    const uint32_t num = GK_NUMERIC | GK_I32, all = GK_ALL | GK_I32;
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"index_select", all, k_index_select_op},
        {"masked_select", all, k_masked_select_op},
        {"gather", all, k_gather_op},
        {"index_add", num | GK_HALVES, k_index_add_op},
        {"scatter_add", num | GK_HALVES, k_scatter_add_op},
        {"masked_scatter", all, k_masked_scatter_op},
        {"index_add_", num, k_index_add_inplace},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}

int gk_index_range(const gk_ctx *k, const opr_tensor_view *index, int64_t *min, int64_t *max)
{
    const int64_t n = index->numel;
    gk_buf mm;
    int rc = mm.alloc(k, 2 * sizeof(unsigned long long));
    if (rc) return rc;
    GK_TRY(k, gpuMemsetAsync(mm.p, 0xff, sizeof(unsigned long long), k->stream));
    GK_TRY(k, gpuMemsetAsync(mm.as<unsigned long long>() + 1, 0, sizeof(unsigned long long), k->stream));
    gk_geom g;
    const int64_t *st[1] = {index->strides};
    gk_geom_make(&g, index->ndim, index->shape, 1, st);
    unsigned blocks = gk_blocks(n);
    if (blocks > 1024) blocks = 1024;
    gk_launch(k_index_minmax, blocks, GK_THREADS, 0, k->stream, n, g, (const int64_t *)index->data, mm.as<unsigned long long>());
    if ((rc = gk_launched(k, "index check kernel"))) return rc;
    unsigned long long h[2];
    if ((rc = gk_to_host(k, h, mm.p, sizeof h))) return rc;
    *min = (int64_t)(h[0] ^ (1ull << 63));
    *max = (int64_t)(h[1] ^ (1ull << 63));
    return OPR_OK;
}
