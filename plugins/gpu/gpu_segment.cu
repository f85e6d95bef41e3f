/* Segment kernels, behind the ops on jagged tensors: segment_sum, segment_expand,
 * segment_softmax, segment_log_softmax, jagged_to_padded and padded_to_jagged
 * (registry/ops/core.yaml, "segments"). The values are rows [total, inner] cut into B
 * segments by i64 offsets [B + 1].
 *
 * The offsets are copied to the host and checked (plugins/common/opc_segment.h) before
 * any kernel runs, exactly as on the CPU: a bad offset is an error, never an
 * out-of-bounds access. That copy waits for the stream: the price of the check, small
 * next to the rows these ops move. Strided inputs are made contiguous first. */
#include "gpu_common.cuh"

#include "../common/opc_segment.h"

#include <stdlib.h>

/* The call's offsets, contiguous on the device (d) and checked on the host (h). */
struct seg_offsets {
    gk_buf dbuf;
    const int64_t *d = nullptr;
    int64_t *h = nullptr;
    int64_t nseg = 0;
    ~seg_offsets() { free(h); }
};

static int seg_offsets_get(const gk_ctx *k, const opr_tensor_view *o, int64_t total, int64_t max_len, seg_offsets *s)
{
    const int64_t n = o->shape[0];
    if (n < 1) return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: offsets need at least one entry", k->op);
    s->nseg = n - 1;
    int64_t st[1];
    int rc = OPR_OK;
    if (gk_is_contiguous(o)) s->d = (const int64_t *)o->data;
    else if ((rc = gk_contiguous_copy(k, o, &s->dbuf, st))) return rc;
    else s->d = s->dbuf.as<int64_t>();
    if (!(s->h = (int64_t *)malloc((size_t)n * sizeof(int64_t))))
        return GK_FAIL(k->call, OPR_ERR_NOMEM, "%s: out of memory", k->op);
    if ((rc = gk_to_host(k, s->h, s->d, (size_t)n * sizeof(int64_t)))) return rc;
    char why[OPC_WHY_SIZE];
    if (!opc_offsets_check(k->op, s->h, s->nseg, total, max_len, why, sizeof why))
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

static int64_t seg_inner(const opr_tensor_view *v, int lead)
{
    int64_t n = 1;
    for (int32_t d = lead; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* The segment of row r: the last b with o[b] <= r (binary search over o[0..nseg]). */
GK_DEV int64_t seg_of_row(const int64_t *o, int64_t nseg, int64_t r)
{
    int64_t lo = 0, hi = nseg; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (o[mid] <= r) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* ------------------------------------------------------------------ segment_sum, segment_expand */

/* One thread per (segment, column), summing the segment's rows in double. */
template <class T>
__global__ void k_seg_sum(int64_t nseg, int64_t inner, const int64_t *o, const T *x, T *out, bool mean)
{
    GK_LOOP(i, nseg * inner)
    {
        const int64_t b = i / inner, j = i - b * inner;
        double acc = 0;
        for (int64_t r = o[b]; r < o[b + 1]; r++) acc += (double)x[r * inner + j];
        out[i] = (T)(mean ? acc / (double)(o[b + 1] - o[b]) : acc);
    }
}

template <class T>
__global__ void k_seg_expand(int64_t total, int64_t nseg, int64_t inner, const int64_t *o, const T *x, T *out, bool mean)
{
    GK_LOOP(i, total * inner)
    {
        const int64_t r = i / inner, j = i - r * inner, b = seg_of_row(o, nseg, r);
        const T v = x[b * inner + j];
        out[i] = mean ? (T)(v / (T)(o[b + 1] - o[b])) : v;
    }
}

static int segment_sum_like(const opr_kernel_call *c, const char *op, bool expand)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *offs = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const bool mean = gk_arg_b(c, expand ? 3 : 2);
    const int64_t rows = expand ? out->shape[0] : x->shape[0];
    seg_offsets o;
    if ((rc = seg_offsets_get(&k, offs, rows, -1, &o))) return rc;
    if (out->numel == 0) return OPR_OK;
    gk_buf xb;
    const void *xd;
    if ((rc = gk_dense(&k, x, &xb, &xd))) return rc;
    const int64_t inner = seg_inner(x, 1), n = out->numel;
    if (x->dtype == OPR_F32) {
        if (expand) gk_launch(k_seg_expand<float>, gk_blocks(n), GK_THREADS, 0, k.stream, rows, o.nseg, inner, o.d, (const float *)xd, (float *)out->data, mean);
        else gk_launch(k_seg_sum<float>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const float *)xd, (float *)out->data, mean);
    } else {
        if (expand) gk_launch(k_seg_expand<double>, gk_blocks(n), GK_THREADS, 0, k.stream, rows, o.nseg, inner, o.d, (const double *)xd, (double *)out->data, mean);
        else gk_launch(k_seg_sum<double>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const double *)xd, (double *)out->data, mean);
    }
    return gk_launched(&k, expand ? "segment_expand kernel" : "segment_sum kernel");
}

static int k_segment_sum(const opr_kernel_call *c) { return segment_sum_like(c, "segment_sum", false); }
static int k_segment_expand(const opr_kernel_call *c) { return segment_sum_like(c, "segment_expand", true); }

/* ------------------------------------------------------------------ segment (log_)softmax */

GK_DEV float seg_exp(float x) { return expf(x); }
GK_DEV double seg_exp(double x) { return exp(x); }

/* One thread per (segment, column): the max, the sum of exp in double, the outputs
 * (a NaN in the column makes it all NaN, as the CPU kernel). */
template <class T, bool LOG>
__global__ void k_seg_softmax(int64_t nseg, int64_t inner, const int64_t *o, const T *x, T *out)
{
    GK_LOOP(i, nseg * inner)
    {
        const int64_t b = i / inner, j = i - b * inner;
        T m = -(T)INFINITY;
        for (int64_t r = o[b]; r < o[b + 1]; r++) {
            const T v = x[r * inner + j];
            if (v > m || v != v) m = v;
        }
        double sum = 0;
        for (int64_t r = o[b]; r < o[b + 1]; r++) sum += (double)seg_exp((T)(x[r * inner + j] - m));
        if (LOG) {
            const T lse = (T)log(sum);
            for (int64_t r = o[b]; r < o[b + 1]; r++) out[r * inner + j] = x[r * inner + j] - m - lse;
        } else {
            const T inv = (T)(1 / sum);
            for (int64_t r = o[b]; r < o[b + 1]; r++) out[r * inner + j] = seg_exp((T)(x[r * inner + j] - m)) * inv;
        }
    }
}

static int segment_softmax_like(const opr_kernel_call *c, const char *op, bool log_)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *offs = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    seg_offsets o;
    if ((rc = seg_offsets_get(&k, offs, x->shape[0], -1, &o))) return rc;
    if (out->numel == 0) return OPR_OK;
    gk_buf xb;
    const void *xd;
    if ((rc = gk_dense(&k, x, &xb, &xd))) return rc;
    const int64_t inner = seg_inner(x, 1), n = o.nseg * inner;
    if (x->dtype == OPR_F32) {
        if (log_) gk_launch(k_seg_softmax<float, true>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const float *)xd, (float *)out->data);
        else gk_launch(k_seg_softmax<float, false>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const float *)xd, (float *)out->data);
    } else {
        if (log_) gk_launch(k_seg_softmax<double, true>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const double *)xd, (double *)out->data);
        else gk_launch(k_seg_softmax<double, false>, gk_blocks(n), GK_THREADS, 0, k.stream, o.nseg, inner, o.d, (const double *)xd, (double *)out->data);
    }
    return gk_launched(&k, "segment softmax kernel");
}

static int k_segment_softmax(const opr_kernel_call *c) { return segment_softmax_like(c, "segment_softmax", false); }
static int k_segment_log_softmax(const opr_kernel_call *c) { return segment_softmax_like(c, "segment_log_softmax", true); }

/* ------------------------------------------------------------------ padded <-> jagged */

/* padded [B, N, inner] from values [total, inner]; E is an unsigned type of the element
 * size (the ops take every dtype), pad the padding's bits. */
template <class E>
__global__ void k_to_padded(int64_t nseg, int64_t n, int64_t inner, const int64_t *o, const E *x, E *out, E pad)
{
    GK_LOOP(i, nseg * n * inner)
    {
        const int64_t row = i / inner, j = i - row * inner, b = row / n, at = row - b * n;
        out[i] = at < o[b + 1] - o[b] ? x[(o[b] + at) * inner + j] : pad;
    }
}

template <class E>
__global__ void k_from_padded(int64_t total, int64_t nseg, int64_t n, int64_t inner, const int64_t *o, const E *p, E *out)
{
    GK_LOOP(i, total * inner)
    {
        const int64_t r = i / inner, j = i - r * inner, b = seg_of_row(o, nseg, r);
        out[i] = p[(b * n + (r - o[b])) * inner + j];
    }
}

template <class E>
static void launch_pad(const gk_ctx *k, bool to_padded, int64_t total, int64_t nseg, int64_t n, int64_t inner,
                       const int64_t *o, const void *src, void *dst, uint64_t pad_bits)
{
    if (to_padded) {
        const int64_t count = nseg * n * inner;
        gk_launch(k_to_padded<E>, gk_blocks(count), GK_THREADS, 0, k->stream, nseg, n, inner, o, (const E *)src, (E *)dst, (E)pad_bits);
    } else {
        gk_launch(k_from_padded<E>, gk_blocks(total * inner), GK_THREADS, 0, k->stream, total, nseg, n, inner, o, (const E *)src, (E *)dst);
    }
}

static int pad_like(const opr_kernel_call *c, const char *op, bool to_padded)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *offs = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    /* to_padded: x is the values [total, ...]; else x is the padded [B, N, ...] */
    const int64_t total = to_padded ? x->shape[0] : out->shape[0];
    const int64_t n = to_padded ? gk_arg_i(c, 2) : x->shape[1];
    seg_offsets o;
    if ((rc = seg_offsets_get(&k, offs, total, n, &o))) return rc;
    uint64_t pad = 0;
    if (to_padded && (rc = gk_encode_scalar(c, op, x->dtype, gk_arg_d(c, 3), &pad))) return rc;
    if (out->numel == 0) return OPR_OK;
    gk_buf xb;
    const void *xd;
    if ((rc = gk_dense(&k, x, &xb, &xd))) return rc;
    const int64_t inner = seg_inner(x, to_padded ? 1 : 2);
    switch (gk_dtype_size(x->dtype)) {
    case 1: launch_pad<uint8_t>(&k, to_padded, total, o.nseg, n, inner, o.d, xd, out->data, pad); break;
    case 2: launch_pad<uint16_t>(&k, to_padded, total, o.nseg, n, inner, o.d, xd, out->data, pad); break;
    case 4: launch_pad<uint32_t>(&k, to_padded, total, o.nseg, n, inner, o.d, xd, out->data, pad); break;
    default: launch_pad<uint64_t>(&k, to_padded, total, o.nseg, n, inner, o.d, xd, out->data, pad); break;
    }
    return gk_launched(&k, to_padded ? "jagged_to_padded kernel" : "padded_to_jagged kernel");
}

static int k_jagged_to_padded(const opr_kernel_call *c) { return pad_like(c, "jagged_to_padded", true); }
static int k_padded_to_jagged(const opr_kernel_call *c) { return pad_like(c, "padded_to_jagged", false); }

/* Where the YAML does not define the segment ops, the host skips these kernels with a
 * log line (registrations are optional). */
int gk_register_segment(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t mask;
        opr_kernel_fn fn;
    } ops[] = {
        {"segment_sum", GK_FLOATS, k_segment_sum},
        {"segment_expand", GK_FLOATS, k_segment_expand},
        {"segment_softmax", GK_FLOATS, k_segment_softmax},
        {"segment_log_softmax", GK_FLOATS, k_segment_log_softmax},
        {"jagged_to_padded", GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL), k_jagged_to_padded},
        {"padded_to_jagged", GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL), k_padded_to_jagged},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int rc = gk_register(self, ops[i].op, ops[i].mask, ops[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
