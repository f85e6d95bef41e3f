/* Data movement: the strided copy and fill primitives every family uses, and the ops
 * built only from them: copy_, fill_, masked_fill_, the factories (zeros, ones, full,
 * arange, zeros_like, ones_like, new_zeros), cat, diag, diagonal_scatter,
 * narrow_scatter and diag_backward.
 *
 * Pure data movement treats elements as opaque words of 1, 2, 4 or 8 bytes, so one
 * kernel serves every dtype (f16 and bf16 included). Validation follows
 * plugins/cpu/cpu_index.c, cpu_factory.c and cpu_grad.c. */
#include "gpu_common.cuh"
#include "../common/opc_cat.h"
#include "../common/opc_diagonal.h"
#include "../common/opc_scalar.h"

#include <math.h>

namespace {

template <class E>
__global__ void k_copy(int64_t n, gk_geom g, E *dst, const E *src)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        dst[off[0]] = src[off[1]];
    }
}

template <class E>
__global__ void k_fill(int64_t n, gk_geom g, E *dst, E v)
{
    GK_LOOP(i, n)
    {
        int64_t off[1];
        gk_offsets<1>(g, i, off);
        dst[off[0]] = v;
    }
}

template <class E>
__global__ void k_masked_fill(int64_t n, gk_geom g, E *dst, const uint8_t *mask, E v)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        if (mask[off[1]]) dst[off[0]] = v;
    }
}

template <class E>
int launch_copy(const gk_ctx *k, int64_t n, const gk_geom &g, void *dst, const void *src)
{
    gk_launch(k_copy<E>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (E *)dst, (const E *)src);
    return gk_launched(k, "strided copy kernel");
}

template <class E>
int launch_fill(const gk_ctx *k, int64_t n, const gk_geom &g, void *dst, uint64_t bits)
{
    E v;
    memcpy(&v, &bits, sizeof v); /* little end first: the element's own bytes */
    gk_launch(k_fill<E>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (E *)dst, v);
    return gk_launched(k, "fill kernel");
}

} // namespace

int gk_copy_strided(const gk_ctx *k, size_t es, int32_t ndim, const int64_t *shape, void *dst,
                    const int64_t *dst_st, const void *src, const int64_t *src_st)
{
    const int64_t n = gk_numel(ndim, shape);
    if (n == 0) return OPR_OK;
    gk_geom g;
    const int64_t *st[2] = {dst_st, src_st};
    gk_geom_make(&g, ndim, shape, 2, st);
    if (g.ndim == 0 || (g.ndim == 1 && g.st[0][0] == 1 && g.st[1][0] == 1)) {
        if (dst != src)
            GK_TRY(k, gpuMemcpyAsync(dst, src, (size_t)n * es, gpuMemcpyDeviceToDevice, k->stream));
        return OPR_OK;
    }
    switch (es) {
    case 1: return launch_copy<uint8_t>(k, n, g, dst, src);
    case 2: return launch_copy<uint16_t>(k, n, g, dst, src);
    case 4: return launch_copy<uint32_t>(k, n, g, dst, src);
    case 8: return launch_copy<unsigned long long>(k, n, g, dst, src);
    default: return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: bad element size %zu", k->op, es);
    }
}

int gk_fill(const gk_ctx *k, size_t es, int32_t ndim, const int64_t *shape, void *dst, const int64_t *st,
            uint64_t bits)
{
    const int64_t n = gk_numel(ndim, shape);
    if (n == 0) return OPR_OK;
    gk_geom g;
    gk_geom_make(&g, ndim, shape, 1, &st);
    const bool contig = g.ndim == 0 || (g.ndim == 1 && g.st[0][0] == 1);
    if (contig && (bits == 0 || es == 1)) {
        GK_TRY(k, gpuMemsetAsync(dst, (int)(bits & 0xff), (size_t)n * es, k->stream));
        return OPR_OK;
    }
    switch (es) {
    case 1: return launch_fill<uint8_t>(k, n, g, dst, bits);
    case 2: return launch_fill<uint16_t>(k, n, g, dst, bits);
    case 4: return launch_fill<uint32_t>(k, n, g, dst, bits);
    case 8: return launch_fill<unsigned long long>(k, n, g, dst, bits);
    default: return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: bad element size %zu", k->op, es);
    }
}

int gk_encode_scalar(const opr_kernel_call *c, const char *op, opr_dtype dt, double v, uint64_t *bits)
{
    *bits = 0;
    switch (dt) { /* the halves need the device's conversions */
    case OPR_F16: { gpu_f16 h = gpu_float_to_f16((float)v); memcpy(bits, &h, 2); return OPR_OK; }
    case OPR_BF16: { gpu_bf16 h = gpu_float_to_bf16((float)v); memcpy(bits, &h, 2); return OPR_OK; }
    default: break;
    }
    char why[OPC_WHY_SIZE];
    const int rc = opc_encode_scalar(op, dt, v, bits, GPU_NAME, why, sizeof why);
    return rc ? GK_FAIL(c, rc, "%s", why) : OPR_OK;
}

int gk_contiguous_copy(const gk_ctx *k, const opr_tensor_view *v, gk_buf *buf, int64_t *strides)
{
    const size_t es = gk_dtype_size(v->dtype);
    int rc = buf->alloc(k, (size_t)(v->numel ? v->numel : 1) * es);
    if (rc) return rc;
    opc_contig_strides(v->ndim, v->shape, strides);
    return gk_copy_strided(k, es, v->ndim, v->shape, buf->p, strides, v->data, v->strides);
}

int gk_dense(const gk_ctx *k, const opr_tensor_view *v, gk_buf *buf, const void **data)
{
    *data = nullptr;
    if (!v) return OPR_OK;
    if (gk_is_contiguous(v)) {
        *data = v->data;
        return OPR_OK;
    }
    int64_t st[GK_MAXD];
    int rc = gk_contiguous_copy(k, v, buf, st);
    if (!rc) *data = buf->p;
    return rc;
}

namespace {

/* ------------------------------------------------------------------ in place */

int k_copy_(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "copy_", &k);
    if (rc) return rc;
    const opr_tensor_view *src = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!src) return GK_FAIL(c, OPR_ERR_INVALID, "copy_: src is not a tensor");
    rc = gk_check_dtype(c, "copy_", "src", src, out->dtype);
    if (!rc) rc = gk_check_writable(c, "copy_", out);
    if (rc) return rc;
    int64_t ss[GK_MAXD];
    if (out->ndim > GK_MAXD || !opc_bcast_strides(src, out->ndim, out->shape, ss))
        return GK_FAIL(c, OPR_ERR_INVALID, "copy_: src does not broadcast to self");
    if (out->numel == 0) return OPR_OK;
    if (opc_same_view(out, src)) return OPR_OK; /* copying a view onto itself */
    const size_t es = gk_dtype_size(out->dtype);
    if (!gk_views_overlap(out, src))
        return gk_copy_strided(&k, es, out->ndim, out->shape, out->data, out->strides, src->data, ss);
    gk_buf tmp;
    int64_t tmp_st[GK_MAXD];
    if ((rc = gk_contiguous_copy(&k, src, &tmp, tmp_st))) return rc;
    opr_tensor_view tv = *src;
    tv.data = tmp.p;
    tv.strides = tmp_st;
    opc_bcast_strides(&tv, out->ndim, out->shape, ss);
    return gk_copy_strided(&k, es, out->ndim, out->shape, out->data, out->strides, tmp.p, ss);
}

int k_fill_(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "fill_", &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    uint64_t bits;
    rc = gk_encode_scalar(c, "fill_", out->dtype, gk_arg_d(c, 1), &bits);
    if (!rc) rc = gk_check_writable(c, "fill_", out);
    if (rc) return rc;
    return gk_fill(&k, gk_dtype_size(out->dtype), out->ndim, out->shape, out->data, out->strides, bits);
}

int k_masked_fill_(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "masked_fill_", &k);
    if (rc) return rc;
    const opr_tensor_view *mask = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!mask) return GK_FAIL(c, OPR_ERR_INVALID, "masked_fill_: mask is not a tensor");
    uint64_t bits;
    rc = gk_check_dtype(c, "masked_fill_", "mask", mask, OPR_BOOL);
    if (!rc) rc = gk_encode_scalar(c, "masked_fill_", out->dtype, gk_arg_d(c, 2), &bits);
    if (!rc) rc = gk_check_writable(c, "masked_fill_", out);
    if (rc) return rc;
    int64_t ms[GK_MAXD];
    if (out->ndim > GK_MAXD || !opc_bcast_strides(mask, out->ndim, out->shape, ms))
        return GK_FAIL(c, OPR_ERR_INVALID, "masked_fill_: mask does not broadcast to self");
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    gk_geom g;
    const int64_t *st[2] = {out->strides, ms};
    gk_geom_make(&g, out->ndim, out->shape, 2, st);
    const uint8_t *m = (const uint8_t *)mask->data;
    const unsigned nb = gk_blocks(n);
    switch (gk_dtype_size(out->dtype)) {
    case 1: gk_launch(k_masked_fill<uint8_t>, nb, GK_THREADS, 0, k.stream, n, g, (uint8_t *)out->data, m, (uint8_t)bits); break;
    case 2: gk_launch(k_masked_fill<uint16_t>, nb, GK_THREADS, 0, k.stream, n, g, (uint16_t *)out->data, m, (uint16_t)bits); break;
    case 4: gk_launch(k_masked_fill<uint32_t>, nb, GK_THREADS, 0, k.stream, n, g, (uint32_t *)out->data, m, (uint32_t)bits); break;
    default:
        gk_launch(k_masked_fill<unsigned long long>, nb, GK_THREADS, 0, k.stream, n, g, (unsigned long long *)out->data, m,
                                                                            (unsigned long long)bits);
        break;
    }
    return gk_launched(&k, "masked_fill_ kernel");
}

/* ------------------------------------------------------------------ factories */

/* Writes v, converted as fill_ converts it, into every element of the (contiguous)
 * output. */
int fill_value(const opr_kernel_call *c, const char *op, double v)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    uint64_t bits;
    if ((rc = gk_encode_scalar(c, op, out->dtype, v, &bits))) return rc;
    return gk_fill(&k, gk_dtype_size(out->dtype), out->ndim, out->shape, out->data, out->strides, bits);
}

int k_zeros(const opr_kernel_call *c) { return fill_value(c, c->op, 0.0); }
int k_ones(const opr_kernel_call *c) { return fill_value(c, c->op, 1.0); }
int k_full(const opr_kernel_call *c) { return fill_value(c, "full", gk_arg_d(c, 1)); }

template <class T>
__global__ void k_arange_f(int64_t n, T *o, double start, double step)
{
    GK_LOOP(i, n) o[i] = (T)(start + (double)i * step);
}

template <class I>
__global__ void k_arange_i(int64_t n, I *o, int64_t start, int64_t step)
{
    GK_LOOP(i, n) o[i] = (I)(start + i * step); /* checked on the host: no overflow, fits I */
}

/* Values start + i * step; floating outputs computed in double and rounded once, i64
 * and i32 outputs from start and step converted to i64 first (PyTorch); values beyond
 * i32 are refused for an i32 output, as on the CPU. */
int k_arange(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "arange", &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    const double start = gk_arg_d(c, 0), end = gk_arg_d(c, 1), step = gk_arg_d(c, 2);
    const int64_t n = out->numel;
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return GK_FAIL(c, OPR_ERR_INVALID, "arange: start, end and step must be finite and step nonzero (got %g, %g, %g)",
                       start, end, step);
    if (n == 0) return OPR_OK;
    const unsigned nb = gk_blocks(n);
    switch (out->dtype) {
    case OPR_F32: gk_launch(k_arange_f<float>, nb, GK_THREADS, 0, k.stream, n, (float *)out->data, start, step); break;
    case OPR_F64: gk_launch(k_arange_f<double>, nb, GK_THREADS, 0, k.stream, n, (double *)out->data, start, step); break;
    case OPR_I64: case OPR_I32: {
        const char *dn = gk_dtype_name(out->dtype);
        if (!opc_fits_i64(start) || !opc_fits_i64(step))
            return GK_FAIL(c, OPR_ERR_INVALID, "arange: start %g or step %g does not fit %s", start, step, dn);
        const int64_t s0 = (int64_t)start, st = (int64_t)step;
        if (st == 0) return GK_FAIL(c, OPR_ERR_INVALID, "arange: step %g truncates to 0 for %s", step, dn);
        int64_t span, last;
        if (__builtin_mul_overflow(n - 1, st, &span) || __builtin_add_overflow(s0, span, &last) ||
            (out->dtype == OPR_I32 && (s0 < INT32_MIN || s0 > INT32_MAX || last < INT32_MIN || last > INT32_MAX)))
            return GK_FAIL(c, OPR_ERR_INVALID, "arange: values overflow %s", dn);
        if (out->dtype == OPR_I32) gk_launch(k_arange_i<int32_t>, nb, GK_THREADS, 0, k.stream, n, (int32_t *)out->data, s0, st);
        else gk_launch(k_arange_i<int64_t>, nb, GK_THREADS, 0, k.stream, n, (int64_t *)out->data, s0, st);
        break;
    }
    default:
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "arange: dtype %s is not supported on %s", gk_dtype_name(out->dtype),
                       GPU_NAME);
    }
    return gk_launched(&k, "arange kernel");
}

/* ------------------------------------------------------------------ cat */

int k_cat(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "cat", &k);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    opc_cat cat;
    if (!opc_cat_start(c, gk_arg_i(c, 1), &cat, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = gk_dtype_size(cat.out->dtype);
    while (opc_cat_next(&cat)) {
        const opr_tensor_view *t = cat.t;
        char *dst = (char *)cat.out->data + cat.offset * (int64_t)es;
        if ((rc = gk_copy_strided(&k, es, t->ndim, t->shape, dst, cat.out->strides, t->data, t->strides))) return rc;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ diagonals */

int k_diag(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "diag", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    const int64_t kd = gk_arg_i(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "diag: self is not a tensor");
    const size_t es = gk_dtype_size(x->dtype);
    const int64_t row0 = opc_diagonal_row0(kd), col0 = opc_diagonal_col0(kd);
    if (out->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "diag: output dtype differs from self's");
    if (x->ndim == 1) {
        const int64_t n = x->shape[0], size = n + row0 + col0;
        if (out->ndim != 2 || out->shape[0] != size || out->shape[1] != size)
            return GK_FAIL(c, OPR_ERR_INVALID, "diag: output must be [%lld, %lld]", (long long)size, (long long)size);
        if ((rc = gk_fill(&k, es, 2, out->shape, out->data, out->strides, 0))) return rc;
        char *dst = (char *)out->data + (row0 * out->strides[0] + col0 * out->strides[1]) * (int64_t)es;
        const int64_t dst_st = out->strides[0] + out->strides[1];
        return gk_copy_strided(&k, es, 1, &n, dst, &dst_st, x->data, x->strides);
    }
    if (x->ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "diag: expected a 1-d or 2-d tensor, got %d-d", (int)x->ndim);
    int64_t len = opc_diagonal_length(x->shape[0], x->shape[1], kd);
    if (out->ndim != 1 || out->shape[0] != len)
        return GK_FAIL(c, OPR_ERR_INVALID, "diag: output must be [%lld]", (long long)len);
    if (len == 0) return OPR_OK;
    const char *src = (const char *)x->data + (row0 * x->strides[0] + col0 * x->strides[1]) * (int64_t)es;
    const int64_t src_st = x->strides[0] + x->strides[1];
    return gk_copy_strided(&k, es, 1, &len, out->data, out->strides, src, &src_st);
}

int k_diagonal_scatter(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "diagonal_scatter", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *src = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!x || !src) return GK_FAIL(c, OPR_ERR_INVALID, "diagonal_scatter: self and src must be tensors");
    char why[OPC_WHY_SIZE];
    int32_t d1, d2;
    opc_diagonal_view v;
    if (!opc_diagonal_dims("diagonal_scatter", x->ndim, gk_arg_i(c, 3), gk_arg_i(c, 4), &d1, &d2, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = gk_check_dtype(c, "diagonal_scatter", "src", src, x->dtype))) return rc;
    if (!opc_diagonal_scatter_view(x, src, out, gk_arg_i(c, 2), d1, d2, &v, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = gk_dtype_size(x->dtype);
    if ((rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides))) return rc;
    if (src->numel == 0) return OPR_OK;
    char *base = (char *)out->data + v.offset * (int64_t)es;
    return gk_copy_strided(&k, es, v.ndim, v.shape, base, v.strides, src->data, src->strides);
}

/* narrow_scatter(self, src, dim, start): self with narrow(dim, start, size(src, dim))
 * replaced by src; a negative start counts from the end. */
int k_narrow_scatter(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "narrow_scatter", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *src = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    if (!x || !src) return GK_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: self and src must be tensors");
    int32_t dim;
    if (x->ndim == 0 || !gk_wrap_dim(gk_arg_i(c, 2), x->ndim, &dim))
        return GK_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: dim %lld out of range for a %d-d tensor",
                       (long long)gk_arg_i(c, 2), (int)x->ndim);
    if (src->dtype != x->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: src is %s but self is %s", gk_dtype_name(src->dtype),
                       gk_dtype_name(x->dtype));
    const int64_t size = x->shape[dim];
    int64_t start = gk_arg_i(c, 3);
    if (start < 0) start += size;
    bool ok = src->ndim == x->ndim && start >= 0 && start <= size;
    for (int32_t d = 0; ok && d < x->ndim; d++)
        ok = d == dim ? src->shape[d] <= size - start : src->shape[d] == x->shape[d];
    if (!ok)
        return GK_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: src must have self's shape except at dim %d, where it must fit "
                       "from start %lld into size %lld", (int)dim, (long long)gk_arg_i(c, 3), (long long)size);
    if (!gk_same_shape(x->ndim, x->shape, out))
        return GK_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: output shape must equal self's");
    const size_t es = gk_dtype_size(x->dtype);
    if ((rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides))) return rc;
    char *base = (char *)out->data + start * out->strides[dim] * (int64_t)es;
    return gk_copy_strided(&k, es, src->ndim, src->shape, base, out->strides, src->data, src->strides);
}


/* diag_backward(self, size, diagonal): the adjoint of diag (see cpu_grad.c). */
int k_diag_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "diag_backward", &k);
    if (rc) return rc;
    const opr_tensor_view *g = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    if (!g) return GK_FAIL(c, OPR_ERR_INVALID, "diag_backward: self is not a tensor");
    const int64_t kd = gk_arg_i(c, 2);
    char why[OPC_WHY_SIZE];
    int64_t len;
    if (!opc_diag_backward_shapes(g, out, kd, &len, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t row0 = opc_diagonal_row0(kd), col0 = opc_diagonal_col0(kd);
    const size_t es = gk_dtype_size(out->dtype);
    if (out->ndim == 1) {
        const int64_t gst = g->strides[0] + g->strides[1];
        const char *src = (const char *)g->data + (row0 * g->strides[0] + col0 * g->strides[1]) * (int64_t)es;
        return gk_copy_strided(&k, es, 1, &len, out->data, out->strides, src, &gst);
    }
    if ((rc = gk_fill(&k, es, 2, out->shape, out->data, out->strides, 0))) return rc;
    if (len == 0) return OPR_OK;
    const int64_t ost = out->strides[0] + out->strides[1];
    char *dst = (char *)out->data + (row0 * out->strides[0] + col0 * out->strides[1]) * (int64_t)es;
    return gk_copy_strided(&k, es, 1, &len, dst, &ost, g->data, g->strides);
}

} // namespace

int gk_register_copy(opr_plugin *self)
{
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"copy_", GK_ALL | GK_I32, k_copy_},
        {"fill_", GK_ALL | GK_I32, k_fill_},
        {"masked_fill_", GK_ALL | GK_I32, k_masked_fill_},
        {"zeros", GK_ALL | GK_I32, k_zeros},
        {"ones", GK_ALL | GK_I32, k_ones},
        {"full", GK_ALL | GK_I32, k_full},
        {"arange", GK_NUMERIC | GK_I32, k_arange},
        {"zeros_like", GK_ALL | GK_I32, k_zeros},
        {"ones_like", GK_ALL | GK_I32, k_ones},
        {"cat", GK_ALL | GK_I32, k_cat},
        {"diag", GK_ALL | GK_I32, k_diag},
        {"diagonal_scatter", GK_ALL | GK_I32, k_diagonal_scatter},
        {"new_zeros", GK_ALL | GK_I32, k_zeros},
        {"narrow_scatter", GK_ALL | GK_I32, k_narrow_scatter},
        {"diag_backward", GK_ALL | GK_I32, k_diag_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
