/* Batched tensors of opr_vmap: a header that shows one sample of a physical tensor
 * whose dim 0 is the batch, tagged with the level (the opr_vmap call) that made it.
 * Ops on batched tensors are the registry's (registry/vmap_call.c); this file makes
 * them and keeps the thread's stack of running opr_vmap levels, so that a batched
 * tensor kept past its call is refused instead of read. */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic int64_t next_level = 1;
static _Thread_local int64_t level_stack[OPR_VMAP_MAX_DEPTH];
static _Thread_local int level_depth;

/* Every thread's running levels, only so that a batched tensor used on another thread
 * than its call's is told apart from one kept past its call (the messages differ);
 * freed whenever no opr_vmap runs. */
static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t *running;
static size_t nrunning, running_cap;

int64_t opr_vmap_level_push(void)
{
    if (level_depth == OPR_VMAP_MAX_DEPTH) return 0;
    int64_t level = atomic_fetch_add_explicit(&next_level, 1, memory_order_relaxed);
    pthread_mutex_lock(&running_lock);
    if (nrunning == running_cap) {
        size_t cap = running_cap ? 2 * running_cap : 16;
        int64_t *grown = realloc(running, cap * sizeof *grown);
        if (!grown) { pthread_mutex_unlock(&running_lock); return -1; }
        running = grown;
        running_cap = cap;
    }
    running[nrunning++] = level;
    pthread_mutex_unlock(&running_lock);
    level_stack[level_depth++] = level;
    return level;
}

void opr_vmap_level_pop(void)
{
    if (!level_depth) return;
    const int64_t level = level_stack[--level_depth];
    pthread_mutex_lock(&running_lock);
    for (size_t i = nrunning; i-- > 0;)
        if (running[i] == level) { running[i] = running[--nrunning]; break; }
    if (!nrunning) { free(running); running = NULL; running_cap = 0; }
    pthread_mutex_unlock(&running_lock);
}

bool opr_vmap_level_active(int64_t level)
{
    for (int i = 0; i < level_depth; i++)
        if (level_stack[i] == level) return true;
    return false;
}

const char *opr_vmap_level_gone(int64_t level)
{
    if (opr_vmap_level_active(level)) return NULL;
    pthread_mutex_lock(&running_lock);
    bool elsewhere = false;
    for (size_t i = 0; i < nrunning && !elsewhere; i++) elsewhere = running[i] == level;
    pthread_mutex_unlock(&running_lock);
    return elsewhere ? "an opr_vmap still running on another thread" : "an opr_vmap that has returned";
}

opr_tensor *opr_batched_wrap(opr_tensor *phys, int64_t level)
{
    if (phys->ragged) { opr_jagged_refuse(phys, "opr_vmap"); return NULL; }
    if (phys->m.ndim < 1) { opr_fail(OPR_ERR_INVALID, "opr_vmap: a batched tensor needs a batch dim"); return NULL; }
    opr_tensor *t = opr_tensor_alloc_header(phys->ctx);
    if (!t) return NULL;
    atomic_fetch_add(&phys->storage->refs, 1);
    t->storage = phys->storage;
    t->m.offset = phys->m.offset;
    t->m.dtype = phys->m.dtype;
    t->m.ndim = phys->m.ndim - 1;
    t->m.numel = phys->m.shape[0] ? phys->m.numel / phys->m.shape[0] : opr_meta_numel(phys->m.shape + 1, phys->m.ndim - 1);
    for (int d = 1; d < phys->m.ndim; d++) {
        t->m.shape[d - 1] = phys->m.shape[d];
        t->m.strides[d - 1] = phys->m.strides[d];
    }
    t->bt_phys = opr_tensor_retain(phys);
    t->bt_level = level;
    return t;
}

int opr_batched_refuse(const opr_tensor *t, const char *who)
{
    char buf[128];
    return opr_fail(OPR_ERR_UNSUPPORTED, "%s: not supported on a batched tensor (%s) inside opr_vmap: use the ops "
                    "(opr_call: transpose, reshape, ...), or return it from the callback", who,
                    opr_tensor_describe(t, buf, sizeof buf));
}

opr_tensor *opr_tensor_alias(opr_tensor *t)
{
    if (!t->bt_phys) return opr_tensor_make_view(t, t->m.ndim, t->m.shape, t->m.strides, t->m.offset);
    return opr_batched_wrap(t->bt_phys, t->bt_level);
}

bool opr_tensor_is_batched(const opr_tensor *t) { return t && t->bt_phys; }
