/* Storage: one device allocation, reference counted, counted exactly in the device's
 * memory statistics (the bytes requested, not the allocator's rounding). */
#include "core.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>

static void stats_add(opr_dev_stats *s, uint64_t n)
{
    uint64_t cur = atomic_fetch_add(&s->current, n) + n;
    uint64_t peak = atomic_load(&s->peak);
    while (cur > peak && !atomic_compare_exchange_weak(&s->peak, &peak, cur)) {}
    atomic_fetch_add(&s->n_allocs, 1);
}

/* Small CPU storages keep their data in the same block as the header: one malloc
 * instead of two, which is most of the cost of an op on a handful of elements. The
 * header is padded so the data stays 64-byte aligned relative to the block (which
 * malloc aligns to 16). */
#define INLINE_MAX 1024
#define INLINE_OFFSET 64
_Static_assert(sizeof(opr_storage) <= INLINE_OFFSET, "storage header outgrew its inline padding");

opr_storage *opr_storage_new(opr_ctx *ctx, opr_device dev, size_t nbytes)
{
    opr_device_entry *e = opr_dev_entry(ctx, dev);
    if (!e || !e->desc.alloc) {
        opr_fail(OPR_ERR_INVALID, "cannot allocate on unknown device (type %d, ordinal %d)",
                 dev.type, dev.index);
        return NULL;
    }
    bool small = dev.type == 0 && nbytes <= INLINE_MAX;
    opr_storage *s = malloc(small ? INLINE_OFFSET + nbytes : sizeof *s);
    if (!s) { opr_fail(OPR_ERR_NOMEM, "out of memory allocating a storage header"); return NULL; }
    s->inline_data = small;
    s->data = small ? (char *)s + INLINE_OFFSET : e->desc.alloc(e->desc.data, dev.index, nbytes);
    if (!s->data) {
        free(s);
        opr_fail(OPR_ERR_NOMEM, "%s: out of memory allocating %zu bytes", e->name, nbytes);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->nbytes = nbytes;
    s->dev = dev;
    s->ctx = ctx;
    s->dl_owner = NULL;
    s->borrowed = false;
    atomic_init(&s->version, 0);
    stats_add(&e->stats[dev.index], nbytes);
    return s;
}

void opr_storage_release(opr_storage *s)
{
    /* refs == 1 means no other holder exists who could race with us */
    if (!s || (atomic_load_explicit(&s->refs, memory_order_acquire) != 1 &&
               atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1))
        return;
    opr_device_entry *e = opr_dev_entry(s->ctx, s->dev);
    /* Memory imported through DLPack belongs to the exporting framework: it was never
     * counted here, and goes back through the exporter's deleter. */
    if (s->borrowed) {
        /* caller memory: nothing to free or uncount */
    } else if (s->dl_owner) {
        if (s->dl_owner->deleter) s->dl_owner->deleter(s->dl_owner);
    } else {
        if (!s->inline_data) e->desc.free(e->desc.data, s->dev.index, s->data, s->nbytes);
        atomic_fetch_sub(&e->stats[s->dev.index].current, s->nbytes);
    }
    free(s);
}
