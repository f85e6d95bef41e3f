/* The CPU device's allocator. Large blocks are kept after free and handed out again
 * for the same rounded size: a training loop allocates the same shapes every step,
 * and fresh large blocks come from mmap, whose first touch of every page costs more
 * than the arithmetic of many ops. Small blocks go straight to the C allocator. The
 * cache is per context, bounded, and emptied when the context is freed; memory
 * statistics report tensors (current) and tensors plus this cache (reserved).
 * OPREG_CPU_NO_CACHE=1 when a context is made leaves its cache off: every freed block
 * goes back to the C allocator, so that what a tool counts there (a malloc counter, as
 * bench/finetune.c's) is the tensors in use. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

#define CPU_ALIGN 64
#define CACHE_MIN ((size_t)64 << 10)   /* below this, malloc is fast enough */
#define CACHE_MAX_BLOCK ((size_t)1 << 30)
#define CACHE_MAX_TOTAL ((size_t)1 << 30)
#define CACHE_BINS 64

typedef struct cached_block { struct cached_block *next; } cached_block;

typedef struct cpu_cache {
    pthread_mutex_t lock;
    struct { size_t size; cached_block *head; } bins[CACHE_BINS];
    _Atomic size_t cached;
    bool off; /* OPREG_CPU_NO_CACHE=1 */
} cpu_cache;

static size_t round_size(size_t n)
{
    size_t unit = n >= CACHE_MIN ? 4096 : CPU_ALIGN; /* whole pages for cached blocks */
    n = (n + unit - 1) / unit * unit;
    return n ? n : CPU_ALIGN;
}

void *cpu_cache_new(void)
{
    cpu_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->lock, NULL);
    const char *no = getenv("OPREG_CPU_NO_CACHE");
    c->off = no && !strcmp(no, "1");
    return c;
}

void cpu_cache_free(void *data)
{
    cpu_cache *c = data;
    if (!c) return;
    for (int i = 0; i < CACHE_BINS; i++)
        for (cached_block *b = c->bins[i].head, *next; b; b = next) { next = b->next; free(b); }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void *cpu_cache_alloc(void *data, int32_t ordinal, size_t nbytes)
{
    (void)ordinal;
    cpu_cache *c = data;
    size_t size = round_size(nbytes);
    void *p = NULL;
    if (!c->off && size >= CACHE_MIN && size <= CACHE_MAX_BLOCK) {
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < CACHE_BINS && !p; i++)
            if (c->bins[i].size == size && c->bins[i].head) {
                cached_block *b = c->bins[i].head;
                c->bins[i].head = b->next;
                c->cached -= size;
                p = b;
            }
        pthread_mutex_unlock(&c->lock);
        if (p) return p;
    }
    return aligned_alloc(CPU_ALIGN, size);
}

void cpu_cache_release(void *data, int32_t ordinal, void *ptr, size_t nbytes)
{
    (void)ordinal;
    cpu_cache *c = data;
    size_t size = round_size(nbytes);
    if (!c->off && size >= CACHE_MIN && size <= CACHE_MAX_BLOCK) {
        pthread_mutex_lock(&c->lock);
        int slot = -1;
        for (int i = 0; i < CACHE_BINS && slot < 0; i++)
            if (c->bins[i].size == size) slot = i;
        for (int i = 0; i < CACHE_BINS && slot < 0; i++)
            if (!c->bins[i].head) { slot = i; c->bins[i].size = size; }
        bool keep = slot >= 0 && c->cached + size <= CACHE_MAX_TOTAL;
        if (keep) {
            cached_block *b = ptr;
            b->next = c->bins[slot].head;
            c->bins[slot].head = b;
            c->cached += size;
        }
        pthread_mutex_unlock(&c->lock);
        if (keep) return;
    }
    free(ptr);
}

uint64_t cpu_cache_cached(void *data)
{
    return data ? atomic_load(&((cpu_cache *)data)->cached) : 0;
}
