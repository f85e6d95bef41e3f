/* Tensors: creation, reference counting, accessors, host data in and out. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t opr_meta_numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) /* saturating, for shapes not checked yet */
        if (__builtin_mul_overflow(n, shape[i], &n)) n = shape[i] ? INT64_MAX : 0;
    return n;
}

int opr_shape_check(const int64_t *shape, int ndim, int64_t *numel, const char *who)
{
    if (ndim < 0 || ndim > OPR_MAX_DIMS)
        return opr_fail(OPR_ERR_INVALID, "%s: ndim %d out of range [0, %d]", who, ndim, OPR_MAX_DIMS);
    if (ndim > 0 && !shape) return opr_fail(OPR_ERR_INVALID, "%s: NULL shape with ndim %d", who, ndim);
    /* The product of the non-zero sizes is bounded too: contiguous strides are that
     * product, and a shape with a zero somewhere must not wrap them either. */
    int64_t span = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return opr_fail(OPR_ERR_INVALID, "%s: negative size %lld in dimension %d", who,
                            (long long)shape[i], i);
        if (shape[i] == 0) { empty = true; continue; }
        if (span > OPR_MAX_NUMEL / shape[i])
            return opr_fail(OPR_ERR_INVALID, "%s: shape too large, too many elements (dimension %d of size %lld "
                            "takes the count past %lld)", who, i, (long long)shape[i], (long long)OPR_MAX_NUMEL);
        span *= shape[i];
    }
    if (numel) *numel = empty ? 0 : span;
    return OPR_OK;
}

void opr_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        /* saturating: a shape not yet checked (what a kernel's supports is shown before
         * the allocation refuses it) must not overflow */
        if (__builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s)) s = INT64_MAX;
    }
}

/* Callers set the shape, strides and storage; only the rest is initialised here (a
 * full calloc of the header shows up in the cost of small ops). */
opr_tensor *opr_tensor_alloc_header(opr_ctx *ctx)
{
    opr_tensor *t = malloc(sizeof *t);
    if (!t) { opr_fail(OPR_ERR_NOMEM, "out of memory allocating a tensor"); return NULL; }
    atomic_init(&t->refs, 1);
    t->ctx = ctx;
    t->m.offset = 0;
    t->requires_grad = false;
    t->grad = NULL;
    t->grad_fn = NULL;
    t->output_nr = 0;
    t->jag_values = NULL;
    t->ragged = NULL;
    atomic_init(&t->jag_grad, NULL);
    t->bt_phys = NULL;
    t->bt_level = 0;
    atomic_fetch_add_explicit(&ctx->live_tensors, 1, memory_order_relaxed);
    return t;
}

opr_tensor *opr_tensor_empty(opr_ctx *ctx, opr_dtype dtype, int ndim, const int64_t *shape,
                             opr_device dev)
{
    int64_t numel;
    if (opr_shape_check(shape, ndim, &numel, "tensor")) return NULL;
    opr_storage *s = opr_storage_new(ctx, dev, (size_t)numel * opr_elem_size(dtype));
    if (!s) return NULL;
    opr_tensor *t = opr_tensor_alloc_header(ctx);
    if (!t) { opr_storage_release(s); return NULL; }
    t->storage = s;
    t->m.dtype = dtype;
    t->m.ndim = ndim;
    t->m.numel = numel;
    if (ndim) memcpy(t->m.shape, shape, (size_t)ndim * sizeof *shape);
    opr_contiguous_strides(shape, ndim, t->m.strides);
    return t;
}

static int check_new_args(opr_ctx *ctx, opr_dtype dtype, int ndim, const int64_t *shape,
                          opr_device dev, const char *who)
{
    if (!ctx) return opr_fail(OPR_ERR_INVALID, "%s: NULL context", who);
    if (!opr_dtype_size(dtype)) return opr_fail(OPR_ERR_INVALID, "%s: invalid dtype %d", who, (int)dtype);
    if (!opr_dev_entry(ctx, dev))
        return opr_fail(OPR_ERR_INVALID, "%s: unknown device (type %d, ordinal %d)", who, dev.type, dev.index);
    return opr_shape_check(shape, ndim, NULL, who);
}

opr_tensor *opr_tensor_new(opr_ctx *ctx, opr_dtype dtype, int ndim, const int64_t *shape,
                           opr_device dev)
{
    if (check_new_args(ctx, dtype, ndim, shape, dev, "opr_tensor_new")) return NULL;
    opr_tensor *t = opr_tensor_empty(ctx, dtype, ndim, shape, dev);
    if (!t) return NULL;
    size_t n = t->storage->nbytes;
    if (dev.type == 0) {
        memset(t->storage->data, 0, n);
    } else if (n) {
        void *zeros = calloc(1, n);
        opr_device_entry *e = opr_dev_entry(ctx, dev);
        int rc = zeros ? e->desc.copy_from_host(e->desc.data, dev.index, t->storage->data, zeros, n)
                       : OPR_ERR_NOMEM;
        free(zeros);
        if (rc) { opr_tensor_release(t); opr_fail(rc, "opr_tensor_new: zero-filling device memory failed"); return NULL; }
    }
    return t;
}

/* Kernels count and select with bool bytes as they are (masked_select sums them), so a
 * byte other than 0 or 1 from the caller would be counted as that many elements. Host
 * data for a bool tensor is read through a copy holding 0/1; *copy is what to free. */
static const void *bool_bytes_normalised(opr_dtype dtype, const void *src, size_t n, void **copy)
{
    *copy = NULL;
    if (dtype != OPR_BOOL || !n) return src;
    unsigned char *c = malloc(n);
    if (!c) { opr_fail(OPR_ERR_NOMEM, "out of memory normalising bool data"); return NULL; }
    const unsigned char *b = src;
    for (size_t i = 0; i < n; i++) c[i] = b[i] != 0;
    *copy = c;
    return c;
}

opr_tensor *opr_tensor_from_data(opr_ctx *ctx, opr_dtype dtype, int ndim, const int64_t *shape,
                                 const void *data, opr_device dev)
{
    if (check_new_args(ctx, dtype, ndim, shape, dev, "opr_tensor_from_data")) return NULL;
    int64_t numel = opr_meta_numel(shape, ndim);
    if (!data && numel) { opr_fail(OPR_ERR_INVALID, "opr_tensor_from_data: NULL data"); return NULL; }
    opr_tensor *t = opr_tensor_empty(ctx, dtype, ndim, shape, dev);
    if (!t) return NULL;
    size_t n = t->storage->nbytes;
    void *copy;
    const void *src = bool_bytes_normalised(dtype, data, n, &copy);
    if (!src) { opr_tensor_release(t); return NULL; }
    opr_device_entry *e = opr_dev_entry(ctx, dev);
    int rc = n ? e->desc.copy_from_host(e->desc.data, dev.index, t->storage->data, src, n) : OPR_OK;
    free(copy);
    if (rc) {
        opr_tensor_release(t);
        opr_fail_wrap(OPR_ERR_BACKEND, "opr_tensor_from_data: copy to %s failed", e->name);
        return NULL;
    }
    return t;
}

opr_tensor *opr_tensor_over_memory(opr_ctx *ctx, opr_device dev, void *data, opr_dtype dtype, int ndim,
                                   const int64_t *shape, const int64_t *strides, int64_t offset,
                                   struct DLManagedTensor *owner)
{
    opr_storage *s = calloc(1, sizeof *s);
    opr_tensor *t = opr_tensor_alloc_header(ctx);
    if (!s || !t) {
        free(s);
        if (t) { atomic_fetch_sub(&ctx->live_tensors, 1); free(t); }
        opr_fail(OPR_ERR_NOMEM, "out of memory wrapping memory in a tensor");
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->data = data;
    s->dev = dev;
    s->ctx = ctx;
    s->dl_owner = owner;
    s->borrowed = !owner;
    t->storage = s;
    t->m.dtype = dtype;
    t->m.ndim = ndim;
    t->m.numel = opr_meta_numel(shape, ndim);
    for (int i = 0; i < ndim && i < OPR_MAX_DIMS; i++) {
        t->m.shape[i] = shape[i];
        if (strides) t->m.strides[i] = strides[i];
    }
    if (!strides) opr_contiguous_strides(shape, ndim, t->m.strides);
    t->m.offset = offset;
    int64_t last = 0; /* the storage spans up to the furthest element */
    for (int i = 0; i < ndim; i++) last += (shape[i] - 1) * (t->m.strides[i] > 0 ? t->m.strides[i] : 0);
    s->nbytes = t->m.numel ? (size_t)(offset + last + 1) * opr_elem_size(dtype) : 0;
    return t;
}

opr_tensor *opr_tensor_make_view(opr_tensor *base, int ndim, const int64_t *shape,
                                 const int64_t *strides, int64_t offset)
{
    /* An expanded view holds more elements than its storage: its count is checked
     * like an allocation's, so that kernels reading it never index past int64. */
    int64_t numel;
    if (opr_shape_check(shape, ndim, &numel, "view")) return NULL;
    opr_tensor *t = opr_tensor_alloc_header(base->ctx);
    if (!t) return NULL;
    atomic_fetch_add(&base->storage->refs, 1);
    t->storage = base->storage;
    t->m.dtype = base->m.dtype;
    t->m.ndim = ndim;
    t->m.numel = numel;
    if (ndim) {
        memcpy(t->m.shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->m.strides, strides, (size_t)ndim * sizeof *strides);
    }
    t->m.offset = offset;
    return t;
}

opr_tensor *opr_tensor_retain(opr_tensor *t)
{
    if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

void opr_tensor_release(opr_tensor *t)
{
    if (!t) return;
    /* backward with create_graph leaves a loop: this leaf -> grad -> graph -> leaf.
     * .grad is read under the leaf's lock: another thread's backward may replace it. */
    const opr_autograd_iface *ag = t->ctx->autograd;
    if (!t->grad_fn && atomic_load_explicit(&t->refs, memory_order_acquire) > 1 && ag->leaf_grad_has_graph(t))
        ag->leaf_cycle_collect(t);
    /* refs == 1 means no other holder exists who could race with us */
    if ((atomic_load_explicit(&t->refs, memory_order_acquire) != 1 &&
               atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1))
        return;
    opr_tensor_release(t->grad);
    if (t->grad_fn) ag->node_release(t->grad_fn);
    if (t->ragged) {
        opr_tensor_release(atomic_load_explicit(&t->jag_grad, memory_order_acquire));
        opr_tensor_release(t->jag_values);
        opr_ragged_release(t->ragged);
    }
    opr_tensor_release(t->bt_phys);
    opr_storage_release(t->storage);
    atomic_fetch_sub_explicit(&t->ctx->live_tensors, 1, memory_order_relaxed);
    free(t);
}

void opr_tensor_fill_view(const opr_tensor *t, opr_tensor_view *v)
{
    v->struct_size = sizeof *v;
    v->data = (char *)t->storage->data + t->m.offset * (int64_t)opr_elem_size(t->m.dtype);
    v->dtype = t->m.dtype;
    v->ndim = t->m.ndim;
    v->shape = t->m.shape;
    v->strides = t->m.strides;
    v->device = t->storage->dev;
    v->numel = t->m.numel;
}

void opr_meta_fill_view(const opr_meta *m, opr_device dev, int64_t *strides, opr_tensor_view *v)
{
    opr_contiguous_strides(m->shape, m->ndim, strides);
    *v = (opr_tensor_view){.struct_size = sizeof *v, .dtype = m->dtype, .ndim = m->ndim, .shape = m->shape,
                           .strides = strides, .device = dev, .numel = m->numel};
}

opr_ctx *opr_tensor_ctx(const opr_tensor *t) { return t ? t->ctx : NULL; }
opr_dtype opr_tensor_dtype(const opr_tensor *t) { return t ? t->m.dtype : OPR_DTYPE_COUNT; }
int opr_tensor_ndim(const opr_tensor *t) { return t ? t->m.ndim : -1; }
const int64_t *opr_tensor_shape(const opr_tensor *t) { return t ? t->m.shape : NULL; }
const int64_t *opr_tensor_strides(const opr_tensor *t) { return t ? t->m.strides : NULL; }
int64_t opr_tensor_offset(const opr_tensor *t) { return t ? t->m.offset : 0; }
int64_t opr_tensor_numel(const opr_tensor *t) { return t ? t->m.numel : 0; }
opr_device opr_tensor_device(const opr_tensor *t) { return t ? t->storage->dev : (opr_device){-1, -1}; }

int64_t opr_tensor_size(const opr_tensor *t, int d)
{
    if (!t) return -1;
    if (d < 0) d += t->m.ndim;
    return d >= 0 && d < t->m.ndim ? t->m.shape[d] : -1;
}

int64_t opr_tensor_stride(const opr_tensor *t, int d)
{
    if (!t) return 0;
    if (d < 0) d += t->m.ndim;
    return d >= 0 && d < t->m.ndim ? t->m.strides[d] : 0;
}

bool opr_tensor_is_contiguous(const opr_tensor *t)
{
    if (!t) return false;
    t = opr_jagged_base(t);
    int64_t expect = 1;
    for (int d = 0; d < t->m.ndim; d++) /* no elements: nothing is out of order (as in PyTorch) */
        if (t->m.shape[d] == 0) return true;
    for (int d = t->m.ndim - 1; d >= 0; d--) {
        if (t->m.shape[d] != 1 && t->m.strides[d] != expect) return false;
        expect *= t->m.shape[d];
    }
    return true;
}

void *opr_tensor_data(const opr_tensor *t)
{
    return t ? (char *)t->storage->data + t->m.offset * (int64_t)opr_dtype_size(t->m.dtype) : NULL;
}

bool opr_tensor_shares_storage(const opr_tensor *a, const opr_tensor *b)
{
    return a && b && a->storage == b->storage;
}

const char *opr_tensor_describe(const opr_tensor *t, char *buf, size_t len)
{
    if (!buf || !len) return "";
    if (!t) { snprintf(buf, len, "(null)"); return buf; }
    size_t n = 0;
    n += (size_t)snprintf(buf + n, len - n, "[");
    for (int d = 0; d < t->m.ndim && n < len; d++) {
        if (t->ragged && d == 1) n += (size_t)snprintf(buf + n, len - n, ", ragged");
        else n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld", (long long)t->m.shape[d]);
    }
    char dev[48];
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "] %s %s", opr_dtype_name(t->m.dtype),
                              opr_device_format(t->ctx, t->storage->dev, dev, sizeof dev));
    if (t->ragged && n < len) snprintf(buf + n, len - n, " jagged (%lld rows)", (long long)t->ragged->total);
    if (t->bt_phys && n < len) snprintf(buf + n, len - n, " batched (%lld samples)", (long long)t->bt_phys->m.shape[0]);
    return buf;
}

opr_status opr_tensor_copy_to_host(const opr_tensor *t, void *dst, size_t nbytes)
{
    if (!t || (!dst && t->m.numel)) return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_to_host: NULL argument");
    if (opr_layout_refuse(t, "opr_tensor_copy_to_host")) return opr_error_status();
    size_t need = (size_t)t->m.numel * opr_dtype_size(t->m.dtype);
    if (nbytes < need)
        return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_to_host: buffer of %zu bytes, need %zu", nbytes, need);
    opr_tensor *host = opr_tensor_over_memory(t->ctx, OPR_CPU, dst, t->m.dtype, t->m.ndim, t->m.shape, NULL, 0, NULL);
    if (!host) return OPR_ERR_NOMEM;
    int rc = opr_tensor_copy_into(host, t);
    opr_tensor_release(host);
    return rc;
}

opr_status opr_tensor_copy_to_host_f64(const opr_tensor *t, double *dst, int64_t n)
{
    if (!t || (!dst && t->m.numel)) return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_to_host_f64: NULL argument");
    if (n < t->m.numel)
        return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_to_host_f64: room for %lld values, need %lld", (long long)n,
                        (long long)t->m.numel);
    const opr_dtype dt = t->m.dtype;
    const size_t es = opr_dtype_size(dt);
    unsigned char *raw = malloc((size_t)(t->m.numel ? t->m.numel : 1) * es);
    if (!raw) return opr_fail(OPR_ERR_NOMEM, "opr_tensor_copy_to_host_f64: out of memory");
    int rc = opr_tensor_copy_to_host(t, raw, (size_t)t->m.numel * es);
    for (int64_t i = 0; !rc && i < t->m.numel; i++) {
        switch (dt) {
        case OPR_F32: dst[i] = ((const float *)raw)[i]; break;
        case OPR_F64: dst[i] = ((const double *)raw)[i]; break;
        case OPR_I64: dst[i] = (double)((const int64_t *)raw)[i]; break;
        case OPR_BOOL: dst[i] = raw[i]; break;
        case OPR_F16: dst[i] = opr_f16_to_float(((const uint16_t *)raw)[i]); break;
        case OPR_BF16: dst[i] = opr_bf16_to_float(((const uint16_t *)raw)[i]); break;
        case OPR_I32: dst[i] = ((const int32_t *)raw)[i]; break;
        default: rc = opr_fail(OPR_ERR_UNSUPPORTED, "opr_tensor_copy_to_host_f64: dtype %s", opr_dtype_name(dt));
        }
    }
    free(raw);
    return rc;
}

opr_status opr_tensor_copy_from_host(opr_tensor *t, const void *src, size_t nbytes)
{
    if (!t || (!src && t->m.numel)) return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_from_host: NULL argument");
    if (opr_layout_refuse(t, "opr_tensor_copy_from_host")) return opr_error_status();
    size_t need = (size_t)t->m.numel * opr_dtype_size(t->m.dtype);
    if (nbytes < need)
        return opr_fail(OPR_ERR_INVALID, "opr_tensor_copy_from_host: buffer of %zu bytes, need %zu", nbytes, need);
    void *copy;
    src = bool_bytes_normalised(t->m.dtype, src, need, &copy);
    if (!src) return OPR_ERR_NOMEM;
    opr_tensor *host = opr_tensor_over_memory(t->ctx, OPR_CPU, (void *)src, t->m.dtype, t->m.ndim, t->m.shape, NULL, 0, NULL);
    if (!host) { free(copy); return OPR_ERR_NOMEM; }
    atomic_fetch_add(&t->storage->version, 1);
    int rc = opr_tensor_copy_into(t, host);
    opr_tensor_release(host);
    free(copy);
    return rc;
}
