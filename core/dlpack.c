/* DLPack export and import (dlpack.h v0.6). Both directions are zero-copy. */
#include "core.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

typedef struct export_ctx {
    DLManagedTensor managed;
    opr_tensor *t;            /* reference held until the consumer calls the deleter */
    int64_t shape[OPR_MAX_DIMS];
    int64_t strides[OPR_MAX_DIMS];
} export_ctx;

static void export_deleter(DLManagedTensor *m)
{
    export_ctx *e = m->manager_ctx;
    opr_tensor_release(e->t);
    free(e);
}

static bool dl_dtype_of(opr_dtype dt, DLDataType *out)
{
    switch (dt) {
    case OPR_F32: *out = (DLDataType){kDLFloat, 32, 1}; return true;
    case OPR_F64: *out = (DLDataType){kDLFloat, 64, 1}; return true;
    case OPR_I64: *out = (DLDataType){kDLInt, 64, 1}; return true;
    case OPR_BOOL: *out = (DLDataType){kDLUInt, 8, 1}; return true; /* dlpack 0.6 has no kDLBool */
    case OPR_F16: *out = (DLDataType){kDLFloat, 16, 1}; return true;
    case OPR_BF16: *out = (DLDataType){kDLBfloat, 16, 1}; return true;
    case OPR_I32: *out = (DLDataType){kDLInt, 32, 1}; return true;
    default: return false;
    }
}

static bool opr_dtype_of(DLDataType d, opr_dtype *out)
{
    if (d.lanes != 1) return false;
    if (d.code == kDLFloat && d.bits == 32) *out = OPR_F32;
    else if (d.code == kDLFloat && d.bits == 64) *out = OPR_F64;
    else if (d.code == kDLInt && d.bits == 64) *out = OPR_I64;
    else if (d.code == kDLUInt && d.bits == 8) *out = OPR_BOOL;
    else if (d.code == kDLFloat && d.bits == 16) *out = OPR_F16;
    else if (d.code == kDLBfloat && d.bits == 16) *out = OPR_BF16;
    else if (d.code == kDLInt && d.bits == 32) *out = OPR_I32;
    else return false;
    return true;
}

/* Device type names opreg uses for the DLPack device types it knows. */
static const struct { DLDeviceType type; const char *name; } dl_devices[] = {
    {kDLCPU, "cpu"}, {kDLCUDA, "cuda"}, {kDLROCM, "rocm"},
};

static const char *device_name_of(DLDeviceType t)
{
    for (size_t i = 0; i < sizeof dl_devices / sizeof dl_devices[0]; i++)
        if (dl_devices[i].type == t) return dl_devices[i].name;
    return NULL;
}

static bool device_type_of(const char *name, DLDeviceType *out)
{
    for (size_t i = 0; i < sizeof dl_devices / sizeof dl_devices[0]; i++)
        if (!strcmp(dl_devices[i].name, name)) { *out = dl_devices[i].type; return true; }
    return false;
}

/* Shape, strides, data and offset must describe memory opreg can index: sizes checked
 * like any allocation, data not NULL unless there are no elements, strides not
 * negative, and the furthest element within int64. */
static int check_layout(const DLTensor *d, size_t elem_size)
{
    static const char who[] = "opr_tensor_from_dlpack";
    int64_t numel;
    if (opr_shape_check(d->shape, d->ndim, &numel, who)) return OPR_ERR_INVALID;
    /* every read of the tensor would dereference it */
    if (!d->data && numel)
        return opr_fail(OPR_ERR_INVALID, "%s: NULL data for %lld elements", who, (long long)numel);
    if (d->byte_offset % elem_size)
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: byte_offset not a multiple of the element size", who);
    uint64_t furthest = d->byte_offset / elem_size;
    for (int i = 0; i < d->ndim && d->strides && numel; i++) {
        if (d->strides[i] < 0)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: negative stride %lld in dimension %d", who,
                            (long long)d->strides[i], i);
        uint64_t reach;
        if (__builtin_mul_overflow((uint64_t)(d->shape[i] - 1), (uint64_t)d->strides[i], &reach) ||
            __builtin_add_overflow(furthest, reach, &furthest))
            furthest = UINT64_MAX;
    }
    if (!d->strides && numel) furthest += (uint64_t)numel - 1;
    if (furthest > (uint64_t)OPR_MAX_NUMEL)
        return opr_fail(OPR_ERR_INVALID, "%s: strides and offset reach past %lld elements", who,
                        (long long)OPR_MAX_NUMEL);
    return OPR_OK;
}

/* True when every byte of the bool tensor t is 0 or 1 (read through a host copy, so
 * any device and layout works); otherwise false with the error set. */
static bool bool_bytes_valid(const opr_tensor *t)
{
    size_t n = (size_t)t->m.numel;
    unsigned char *bytes = malloc(n ? n : 1);
    if (!bytes) { opr_fail(OPR_ERR_NOMEM, "opr_tensor_from_dlpack: out of memory"); return false; }
    bool ok = opr_tensor_copy_to_host(t, bytes, n) == OPR_OK;
    for (size_t i = 0; ok && i < n; i++)
        if (bytes[i] > 1) {
            opr_fail(OPR_ERR_INVALID, "opr_tensor_from_dlpack: a uint8 tensor imported as bool holds %u at "
                     "element %zu; bool elements must be 0 or 1", bytes[i], i);
            ok = false;
        }
    free(bytes);
    return ok;
}

DLManagedTensor *opr_tensor_to_dlpack(opr_tensor *t)
{
    if (!t) { opr_fail(OPR_ERR_INVALID, "opr_tensor_to_dlpack: NULL tensor"); return NULL; }
    if (opr_layout_refuse(t, "opr_tensor_to_dlpack")) return NULL;
    export_ctx *e = calloc(1, sizeof *e);
    if (!e) { opr_fail(OPR_ERR_NOMEM, "opr_tensor_to_dlpack: out of memory"); return NULL; }
    DLTensor *d = &e->managed.dl_tensor;
    if (!dl_dtype_of(t->m.dtype, &d->dtype)) {
        free(e);
        opr_fail(OPR_ERR_UNSUPPORTED, "opr_tensor_to_dlpack: dtype %s has no DLPack code", opr_dtype_name(t->m.dtype));
        return NULL;
    }
    const char *dev = t->ctx->devices[t->storage->dev.type].name;
    if (!device_type_of(dev, &d->device.device_type)) { /* a plugin's own device: DLPack cannot name it */
        free(e);
        opr_fail(OPR_ERR_UNSUPPORTED, "opr_tensor_to_dlpack: device %s has no DLPack device type", dev);
        return NULL;
    }
    d->device.device_id = t->storage->dev.index;
    d->data = t->storage->data;
    d->byte_offset = (uint64_t)t->m.offset * opr_dtype_size(t->m.dtype);
    d->ndim = t->m.ndim;
    memcpy(e->shape, t->m.shape, sizeof e->shape);
    memcpy(e->strides, t->m.strides, sizeof e->strides);
    d->shape = e->shape;
    d->strides = e->strides;
    e->t = opr_tensor_retain(t);
    e->managed.manager_ctx = e;
    e->managed.deleter = export_deleter;
    return &e->managed;
}

opr_tensor *opr_tensor_from_dlpack(opr_ctx *ctx, DLManagedTensor *m)
{
    if (!ctx || !m) { opr_fail(OPR_ERR_INVALID, "opr_tensor_from_dlpack: NULL argument"); return NULL; }
    DLTensor *d = &m->dl_tensor;
    opr_dtype dt;
    if (!opr_dtype_of(d->dtype, &dt)) {
        opr_fail(OPR_ERR_UNSUPPORTED, "opr_tensor_from_dlpack: unsupported dtype (code %d, %d bits, %d lanes)",
                 d->dtype.code, d->dtype.bits, d->dtype.lanes);
        return NULL;
    }
    if (check_layout(d, opr_dtype_size(dt))) return NULL;
    const char *name = device_name_of(d->device.device_type);
    int type = name ? opr_device_type_find(ctx, name) : -1;
    if (type < 0) {
        opr_fail(OPR_ERR_NOT_FOUND, "opr_tensor_from_dlpack: no loaded backend for DLPack device type %d",
                 (int)d->device.device_type);
        return NULL;
    }
    opr_device dev = {type, d->device.device_id};
    if (!opr_dev_entry(ctx, dev)) {
        opr_fail(OPR_ERR_NOT_FOUND, "opr_tensor_from_dlpack: %s has no ordinal %d", name, dev.index);
        return NULL;
    }
    size_t es = opr_dtype_size(dt);
    /* Elements are addressed from the storage base, so the byte offset becomes the
     * tensor's storage offset. */
    opr_tensor *t = opr_tensor_over_memory(ctx, dev, d->data, dt, d->ndim, d->shape, d->strides,
                                           (int64_t)(d->byte_offset / es), NULL);
    if (!t) return NULL;
    /* Zero-copy: bytes other than 0/1 cannot be normalised without writing to the
     * exporter's memory, so such a "bool" (uint8) tensor is refused. */
    if (dt == OPR_BOOL && !bool_bytes_valid(t)) {
        opr_tensor_release(t);
        return NULL;
    }
    t->storage->dl_owner = m; /* from here on, freeing the tensor runs m's deleter */
    t->storage->borrowed = false;
    return t;
}
