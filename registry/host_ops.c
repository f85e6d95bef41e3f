/* The ops the host implements itself, with no kernel: views (new tensor headers over
 * the same storage, registry.h's view kinds) and resize_ (a tensor's own header and,
 * when it grows, its storage). Any device with a copy_ kernel runs them
 * (views_run_on). */
#include "registry.h"

#include <stdio.h>
#include <string.h>

static int to_int(int64_t v, int *out)
{
    if (v < INT32_MIN + 1 || v > INT32_MAX) return OPR_ERR_INVALID;
    *out = (int)v;
    return OPR_OK;
}

/* slice.Tensor(self, dim, start, end, step): the elements start, start + step, ...
 * below end along dim, as a view. Bounds are PyTorch's: None is 0 / the size, a
 * negative one counts from the end, both are then clamped into [0, size] and end to at
 * least start, so any start and end give a (possibly empty) view; step must be > 0. */
static opr_tensor *slice_view(const opr_op *op, opr_tensor *self, const opr_kernel_arg *k)
{
    int nd = self->m.ndim, d = 0;
    /* a YAML entry may say `view: slice` over any schema: read only what slice's has */
    if (op->nargs != 5 || k[1].kind != OPR_ARG_INT || k[4].kind != OPR_ARG_INT ||
        (k[2].kind != OPR_ARG_INT && k[2].kind != OPR_ARG_NONE) || (k[3].kind != OPR_ARG_INT && k[3].kind != OPR_ARG_NONE)) {
        opr_fail(OPR_ERR_INVALID, "%s: a 'slice' view takes (Tensor self, int dim, int? start, int? end, int step)", op->name);
        return NULL;
    }
    if (opr_layout_refuse(self, "slice")) return NULL;
    if (nd == 0) { opr_fail(OPR_ERR_INVALID, "slice: dimension specified as %lld but tensor has no dimensions", (long long)k[1].u.i); return NULL; }
    if (k[1].u.i < -nd || k[1].u.i >= nd) {
        opr_fail(OPR_ERR_INVALID, "slice: dimension %lld out of range (expected to be in range of [%d, %d])", (long long)k[1].u.i, -nd, nd - 1);
        return NULL;
    }
    d = (int)(k[1].u.i < 0 ? k[1].u.i + nd : k[1].u.i);
    const int64_t step = k[4].u.i, size = self->m.shape[d];
    if (step <= 0) { opr_fail(OPR_ERR_INVALID, "slice: slice step must be positive, got %lld", (long long)step); return NULL; }
    int64_t start = k[2].kind == OPR_ARG_NONE ? 0 : k[2].u.i, end = k[3].kind == OPR_ARG_NONE ? size : k[3].u.i;
    if (start < 0) start += size;
    if (end < 0) end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    memcpy(shape, self->m.shape, (size_t)nd * sizeof *shape);
    memcpy(strides, self->m.strides, (size_t)nd * sizeof *strides);
    /* end - start + step - 1 and stride * step overflow for a step near INT64_MAX; the
     * stride is PyTorch's stride * step, except where that overflows: the dim then holds
     * one element or none (a longer one steps inside the storage), which no stride moves */
    shape[d] = end == start ? 0 : (end - start - 1) / step + 1;
    if (__builtin_mul_overflow(strides[d], step, &strides[d])) strides[d] = self->m.strides[d];
    return opr_tensor_make_view(self, nd, shape, strides, self->m.offset + start * self->m.strides[d]);
}

/* "[3, 3]": an int list as PyTorch's messages print it. */
static const char *list_text(const int64_t *v, int n, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
    return buf;
}

/* as_strided(self, size, stride, storage_offset): a view of self's storage with that
 * geometry, storage_offset None meaning self's own. PyTorch's checks in its order (its
 * setStrided), with its messages: as many strides as sizes, none negative, the sizes'
 * storage size not overflowing (a negative size does), the view inside the storage
 * (an empty one fits any), the offset not negative. */
static opr_tensor *as_strided_view(const opr_op *op, opr_tensor *self, const opr_kernel_arg *k)
{
    if (op->nargs != 4 || k[1].kind != OPR_ARG_INT_LIST || k[2].kind != OPR_ARG_INT_LIST ||
        (k[3].kind != OPR_ARG_INT && k[3].kind != OPR_ARG_NONE)) {
        opr_fail(OPR_ERR_INVALID, "%s: an 'as_strided' view takes (Tensor self, int[] size, int[] stride, int? "
                 "storage_offset)", op->name);
        return NULL;
    }
    if (opr_layout_refuse(self, "as_strided")) return NULL;
    const int64_t *size = k[1].u.il.items, *stride = k[2].u.il.items;
    const int n = k[1].u.il.n;
    const int64_t offset = k[3].kind == OPR_ARG_NONE ? self->m.offset : k[3].u.i;
    char a[160], b[160];
    if (n != k[2].u.il.n) { opr_fail(OPR_ERR_INVALID, "as_strided: mismatch in length of strides and shape"); return NULL; }
    for (int d = 0; d < n; d++)
        if (stride[d] < 0) {
            opr_fail(OPR_ERR_INVALID, "as_strided: Negative strides are not supported at the moment, got strides: %s",
                     list_text(stride, n, a, sizeof a));
            return NULL;
        }
    /* bytes from the offset to past the last element (PyTorch's computeStorageNbytes) */
    const int64_t es = (int64_t)opr_elem_size(self->m.dtype);
    int64_t bytes = 1;
    bool empty = false, wrapped = false;
    for (int d = 0; d < n && !empty; d++) {
        int64_t reach;
        if (size[d] == 0) empty = true;
        else wrapped |= size[d] < 0 || __builtin_mul_overflow(stride[d], size[d] - 1, &reach) ||
                        __builtin_add_overflow(bytes, reach, &bytes);
    }
    wrapped |= !empty && __builtin_mul_overflow(bytes, es, &bytes);
    if (wrapped) {
        opr_fail(OPR_ERR_INVALID, "as_strided: Storage size calculation overflowed with sizes=%s and strides=%s",
                 list_text(size, n, a, sizeof a), list_text(stride, n, b, sizeof b));
        return NULL;
    }
    int64_t need;
    if (!empty && (__builtin_mul_overflow(offset, es, &need) || __builtin_add_overflow(need, bytes, &need) ||
                   need > (int64_t)self->storage->nbytes)) {
        opr_fail(OPR_ERR_INVALID, "as_strided: setStorage: sizes %s, strides %s, storage offset %lld, and itemsize %lld "
                 "requiring a storage size of %lld are out of bounds for storage of size %zu", list_text(size, n, a, sizeof a),
                 list_text(stride, n, b, sizeof b), (long long)offset, (long long)es,
                 (long long)(offset * es + bytes), self->storage->nbytes);
        return NULL;
    }
    if (offset < 0) { opr_fail(OPR_ERR_INVALID, "as_strided: Tensor: invalid storage offset %lld", (long long)offset); return NULL; }
    return opr_tensor_make_view(self, n, size, stride, offset);
}

/* resize_(self, size, memory_format) and _resize_output_(self, size, device), the
 * resize of an out= argument (PyTorch's resize_output): that one leaves a tensor of
 * the size alone, says so in the log when it resizes one with elements (PyTorch warns:
 * outputs that are not empty will stop being resized), and checks the device. The
 * result is self itself. */
static opr_tensor *resize(const opr_op *op, opr_tensor *self, const opr_kernel_arg *k)
{
    if (op->nargs != 3 || k[1].kind != OPR_ARG_INT_LIST) {
        opr_fail(OPR_ERR_INVALID, "%s: a resize takes (Tensor self, int[] size, ...)", op->name);
        return NULL;
    }
    const int64_t *size = k[1].u.il.items;
    const int n = k[1].u.il.n;
    if (op->view == VIEW_RESIZE_OUTPUT) {
        opr_device dev;
        if (k[2].kind != OPR_ARG_STRING || opr_device_parse(op->ctx, k[2].u.s, &dev) ||
            dev.type != self->storage->dev.type || dev.index != self->storage->dev.index) {
            opr_fail(OPR_ERR_INVALID, "%s: out Tensor doesn't have the correct device set", op->name);
            return NULL;
        }
        if (self->m.ndim == n && !memcmp(self->m.shape, size, (size_t)n * sizeof *size)) return opr_tensor_retain(self);
        if (self->m.numel) {
            char a[160], b[160];
            opr_log_emit(OPR_LOG_WARN, "opreg", "%s: an output with one or more elements was resized since it had shape "
                         "%s, which does not match the required output shape %s (as in PyTorch, which deprecates it: "
                         "resize an out tensor to zero elements to reuse it without this warning)", op->name,
                         list_text(self->m.shape, self->m.ndim, a, sizeof a), list_text(size, n, b, sizeof b));
        }
    } else if (k[2].kind == OPR_ARG_STRING && strcmp(k[2].u.s, "contiguous_format")) {
        opr_fail(OPR_ERR_UNSUPPORTED, "%s: memory_format '%s' is not supported (a tensor here is laid out contiguous: "
                 "None or contiguous_format)", op->name, k[2].u.s);
        return NULL;
    }
    return opr_tensor_resize(self, size, n, op->name) ? NULL : opr_tensor_retain(self);
}

opr_tensor *host_op_run(const opr_op *op, opr_tensor *self, const opr_kernel_arg *k)
{
    int a = 0, b = 0;
    switch (op->view) {
    case VIEW_T:
        if (self->m.ndim > 2) { opr_fail(OPR_ERR_INVALID, "t: expects a tensor with <= 2 dims, got %d", self->m.ndim); return NULL; }
        return self->m.ndim == 2 ? opr_tensor_transpose(self, 0, 1)
                                 : opr_tensor_make_view(self, self->m.ndim, self->m.shape, self->m.strides, self->m.offset);
    case VIEW_TRANSPOSE:
        if (to_int(k[1].u.i, &a) || to_int(k[2].u.i, &b)) break;
        return opr_tensor_transpose(self, a, b);
    case VIEW_PERMUTE: {
        int dims[OPR_MAX_DIMS];
        for (int i = 0; i < k[1].u.il.n; i++) if (to_int(k[1].u.il.items[i], &dims[i])) goto bad;
        return opr_tensor_permute(self, dims, k[1].u.il.n);
    }
    case VIEW_RESHAPE: return opr_tensor_reshape(self, k[1].u.il.items, k[1].u.il.n);
    case VIEW_EXPAND: return opr_tensor_expand(self, k[1].u.il.items, k[1].u.il.n);
    case VIEW_UNSQUEEZE:
        if (to_int(k[1].u.i, &a)) break;
        return opr_tensor_unsqueeze(self, a);
    case VIEW_SQUEEZE:
        if (k[1].kind == OPR_ARG_NONE) return opr_tensor_squeeze(self, OPR_ALL_DIMS);
        if (to_int(k[1].u.i, &a)) break;
        return opr_tensor_squeeze(self, a);
    case VIEW_NARROW:
        if (to_int(k[1].u.i, &a)) break;
        return opr_tensor_narrow(self, a, k[2].u.i, k[3].u.i);
    case VIEW_DIAGONAL:
        if (to_int(k[2].u.i, &a) || to_int(k[3].u.i, &b)) break;
        return opr_tensor_diagonal(self, k[1].u.i, a, b);
    case VIEW_SLICE: return slice_view(op, self, k);
    case VIEW_CONTIGUOUS: /* a new header even when no copy is needed: autograd records on it */
        return opr_tensor_is_contiguous(self)
                   ? opr_tensor_make_view(self, self->m.ndim, self->m.shape, self->m.strides, self->m.offset)
                   : opr_tensor_contiguous(self);
    case VIEW_AS_STRIDED: return as_strided_view(op, self, k);
    case VIEW_RESIZE:
    case VIEW_RESIZE_OUTPUT: return resize(op, self, k);
    case VIEW_NONE:
    case VIEW_KIND_COUNT: break;
    }
bad:
    opr_fail(OPR_ERR_INVALID, "%s: dimension argument out of range", op->name);
    return NULL;
}
