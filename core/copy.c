/* Copies between tensors of any layout, on one device or across devices. Device
 * memory is moved with the device's contiguous copy functions; layouts are fixed up
 * on the host side, or on the device through ctx->device_strided_copy. */
#include "core.h"
#include "../plugins/common/opc_strided_copy.h"

#include <stdlib.h>
#include <string.h>

/* Strided copy between two CPU tensors of equal shape and dtype (one thread: the
 * CPU plugin's copy_ kernel is the parallel one). */
static void host_strided_copy(opr_tensor *dst, const opr_tensor *src)
{
    size_t es = opr_dtype_size(src->m.dtype);
    if (opr_tensor_is_contiguous(dst) && opr_tensor_is_contiguous(src)) {
        memmove(opr_tensor_data(dst), opr_tensor_data(src), (size_t)src->m.numel * es);
        return;
    }
    opc_copy_strided(es, src->m.ndim, src->m.shape, opr_tensor_data(dst), dst->m.strides, opr_tensor_data(src),
                     src->m.strides);
}

static int device_copy(opr_tensor *dst, const opr_tensor *src)
{
    opr_ctx *ctx = dst->ctx;
    opr_device sd = src->storage->dev, dd = dst->storage->dev;
    size_t n = (size_t)src->m.numel * opr_dtype_size(src->m.dtype);
    if (sd.type == dd.type && sd.index == dd.index) {
        if (opr_tensor_is_contiguous(dst) && opr_tensor_is_contiguous(src)) {
            opr_device_entry *e = opr_dev_entry(ctx, sd);
            return e->desc.copy_device(e->desc.data, sd.index, opr_tensor_data(dst), opr_tensor_data(src), n);
        }
        if (!ctx->device_strided_copy)
            return opr_fail(OPR_ERR_UNSUPPORTED, "strided copy on this device needs its copy_ kernel");
        return ctx->device_strided_copy(ctx, dst, src);
    }
    /* Across devices: stage through a contiguous tensor on each side as needed. */
    opr_tensor *s = (opr_tensor *)src, *d = dst;
    int rc = OPR_OK;
    if (!opr_tensor_is_contiguous(src)) {
        s = opr_tensor_empty(ctx, src->m.dtype, src->m.ndim, src->m.shape, sd);
        if (!s) return OPR_ERR_NOMEM;
        if ((rc = device_copy(s, src))) goto out;
    }
    if (!opr_tensor_is_contiguous(dst)) {
        d = opr_tensor_empty(ctx, dst->m.dtype, dst->m.ndim, dst->m.shape, dd);
        if (!d) { rc = OPR_ERR_NOMEM; goto out; }
    }
    if (n) {
        if (sd.type == 0) {
            opr_device_entry *e = opr_dev_entry(ctx, dd);
            rc = e->desc.copy_from_host(e->desc.data, dd.index, opr_tensor_data(d), opr_tensor_data(s), n);
        } else if (dd.type == 0) {
            opr_device_entry *e = opr_dev_entry(ctx, sd);
            rc = e->desc.copy_to_host(e->desc.data, sd.index, opr_tensor_data(d), opr_tensor_data(s), n);
        } else {
            /* two different accelerators: bounce through host memory */
            opr_tensor *h = opr_tensor_empty(ctx, src->m.dtype, src->m.ndim, src->m.shape, OPR_CPU);
            if (!h) { rc = OPR_ERR_NOMEM; goto out; }
            if (!(rc = device_copy(h, s))) rc = device_copy(d, h);
            opr_tensor_release(h);
        }
        if (rc && !opr_last_error()[0]) rc = opr_fail(rc, "device copy failed");
    }
    if (!rc && d != dst) rc = device_copy(dst, d);
out:
    if (s != src) opr_tensor_release(s);
    if (d != dst) opr_tensor_release(d);
    return rc;
}

int opr_tensor_copy_into(opr_tensor *dst, const opr_tensor *src)
{
    if (opr_layout_refuse(dst, "copy") || opr_layout_refuse(src, "copy")) return opr_error_status();
    if (dst->m.dtype != src->m.dtype || dst->m.ndim != src->m.ndim ||
        memcmp(dst->m.shape, src->m.shape, (size_t)src->m.ndim * sizeof(int64_t)))
        return opr_fail(OPR_ERR_INVALID, "copy: shapes or dtypes differ");
    if (src->storage->dev.type == 0 && dst->storage->dev.type == 0) {
        host_strided_copy(dst, src);
        return OPR_OK;
    }
    return device_copy(dst, src);
}

opr_tensor *opr_tensor_contiguous(opr_tensor *t)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_contiguous: NULL tensor"); return NULL; }
    if (t->bt_phys) { opr_batched_refuse(t, "opr_tensor_contiguous"); return NULL; }
    if (opr_tensor_is_contiguous(t)) return opr_tensor_retain(t);
    if (t->ragged) { /* contiguous values, the same structure */
        opr_tensor *v = opr_tensor_contiguous(t->jag_values);
        opr_tensor *j = v ? opr_jagged_wrap(v, t->ragged) : NULL;
        opr_tensor_release(v);
        return j;
    }
    opr_tensor *c = opr_tensor_empty(t->ctx, t->m.dtype, t->m.ndim, t->m.shape, t->storage->dev);
    if (c && opr_tensor_copy_into(c, t)) { opr_tensor_release(c); return NULL; }
    return c;
}

/* A jagged tensor on another device: its values and a structure of its own there. */
static opr_tensor *jagged_to(opr_tensor *t, opr_device dev)
{
    const opr_ragged *r = t->ragged;
    opr_tensor *v = opr_tensor_to(t->jag_values, dev);
    opr_ragged *moved = v ? opr_ragged_from_host(t->ctx, r->host, r->batch, r->total, dev, "opr_tensor_to") : NULL;
    opr_tensor *j = moved ? opr_jagged_wrap(v, moved) : NULL;
    opr_tensor_release(v);
    opr_ragged_release(moved);
    return j;
}

opr_tensor *opr_tensor_to(opr_tensor *t, opr_device dev)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_to: NULL tensor"); return NULL; }
    if (!opr_dev_entry(t->ctx, dev)) {
        opr_fail(OPR_ERR_INVALID, "opr_tensor_to: unknown device (type %d, ordinal %d)", dev.type, dev.index);
        return NULL;
    }
    opr_device cur = t->storage->dev;
    if (cur.type == dev.type && cur.index == dev.index) return opr_tensor_retain(t);
    if (t->ragged) return jagged_to(t, dev);
    if (opr_layout_refuse(t, "opr_tensor_to")) return NULL;
    opr_tensor *c = opr_tensor_empty(t->ctx, t->m.dtype, t->m.ndim, t->m.shape, dev);
    if (c && opr_tensor_copy_into(c, t)) { opr_tensor_release(c); return NULL; }
    return c;
}
