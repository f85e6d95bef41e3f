/* resize_: a tensor takes another shape in place, as PyTorch's resize_ does. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

/* A storage of nbytes on s's device holding s's bytes, the rest zeroed, whose version
 * follows s's (so that a graph node that saved a tensor of s sees the change). */
static opr_storage *storage_grown(opr_storage *s, size_t nbytes, const char *who)
{
    opr_storage *g = opr_storage_new(s->ctx, s->dev, nbytes);
    if (!g) return NULL;
    atomic_store(&g->version, atomic_load(&s->version));
    const size_t tail = nbytes - s->nbytes;
    if (s->dev.type == 0) {
        memcpy(g->data, s->data, s->nbytes);
        memset((char *)g->data + s->nbytes, 0, tail);
        return g;
    }
    opr_device_entry *e = opr_dev_entry(s->ctx, s->dev);
    void *zeros = calloc(1, tail);
    int rc = !zeros ? OPR_ERR_NOMEM
             : s->nbytes ? e->desc.copy_device(e->desc.data, s->dev.index, g->data, s->data, s->nbytes)
                         : OPR_OK;
    if (!rc) rc = e->desc.copy_from_host(e->desc.data, s->dev.index, (char *)g->data + s->nbytes, zeros, tail);
    free(zeros);
    if (rc) {
        opr_storage_release(g);
        opr_fail(rc, "%s: copying the storage into a larger one on %s failed", who, e->name);
        return NULL;
    }
    return g;
}

int opr_tensor_resize(opr_tensor *t, const int64_t *shape, int ndim, const char *who)
{
    if (opr_layout_refuse(t, who)) return opr_error_status();
    int64_t numel;
    if (opr_shape_check(shape, ndim, &numel, who)) return opr_error_status();
    const size_t es = opr_elem_size(t->m.dtype);
    /* the storage must reach the last element (none for an empty tensor, which keeps
     * any storage); its elements stay where they are, in storage order */
    if (numel > 0 && t->m.offset > OPR_MAX_NUMEL - numel)
        return opr_fail(OPR_ERR_INVALID, "%s: storage offset %lld plus %lld elements is too large", who,
                        (long long)t->m.offset, (long long)numel);
    const size_t need = numel > 0 ? (size_t)(t->m.offset + numel) * es : 0;
    opr_storage *s = t->storage;
    if (need > s->nbytes) {
        if (s->borrowed || s->dl_owner)
            return opr_fail(OPR_ERR_INVALID, "%s: trying to resize storage that is not resizable (memory opreg did not "
                            "allocate: caller memory or a DLPack import) from %zu to %zu bytes", who, s->nbytes, need);
        /* Growing replaces the storage; other tensors sharing it (views, maybe used on
         * other threads) would keep the old one and stop sharing, or, if it were
         * replaced under them, read freed memory. PyTorch grows the shared storage in
         * place; here only a storage of one tensor grows. */
        const int refs = atomic_load(&s->refs);
        if (refs > 1)
            return opr_fail(OPR_ERR_INVALID, "%s: the storage must grow from %zu to %zu bytes but %d other tensor(s) "
                            "(views) share it; resize a tensor that has its storage to itself (a clone)", who,
                            s->nbytes, need, refs - 1);
        opr_storage *g = storage_grown(s, need, who);
        if (!g) return opr_error_status();
        t->storage = g;
        opr_storage_release(s);
        s = g;
    }
    t->m.ndim = ndim;
    t->m.numel = numel;
    if (ndim) memcpy(t->m.shape, shape, (size_t)ndim * sizeof *shape);
    opr_contiguous_strides(shape, ndim, t->m.strides);
    atomic_fetch_add_explicit(&s->version, 1, memory_order_relaxed);
    return OPR_OK;
}
