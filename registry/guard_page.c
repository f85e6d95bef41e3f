/* Guard pages (kernel_guard.c): on a device whose memory is host memory, a guarded
 * output is placed at the end of its own mapping, right before inaccessible pages, so
 * that a kernel reaching far past it faults at once instead of corrupting the heap. The
 * bytes between the data and those pages are canary, as on other devices. A fixed table
 * of live guard regions lets a fault handler tell such a fault from any other
 * (opr_kernel_guard_overrun). */
#define _GNU_SOURCE
#include "registry.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Inaccessible pages after each guarded output: address space only, no memory. */
#define GUARD_PAGES 16
/* Guarded outputs alive at once (each is two mappings, and the kernel limits those);
 * past this, outputs get canaries only. */
#define GUARD_SLOTS 1024

typedef struct guard_slot {
    _Atomic uintptr_t guard;    /* first inaccessible byte; 0: slot free */
    _Atomic uintptr_t data_end; /* one past the output's last data byte; 0: slot free */
} guard_slot;

static guard_slot slots[GUARD_SLOTS];
static atomic_uint slot_hint;
static size_t page_size; /* set before the first slot is filled */

typedef struct guard_map {
    DLManagedTensor owner; /* first: the storage's deleter is given its address */
    void *base;
    size_t len;
    int slot;
} guard_map;

size_t guard_after_bytes(size_t data_bytes) { return GUARD_BYTES + (GUARD_BYTES - data_bytes % GUARD_BYTES) % GUARD_BYTES; }

static void guard_map_free(DLManagedTensor *m)
{
    guard_map *g = (guard_map *)m;
    atomic_store(&slots[g->slot].guard, 0);
    atomic_store(&slots[g->slot].data_end, 0);
    munmap(g->base, g->len);
    free(g);
}

static int slot_claim(void)
{
    unsigned start = atomic_fetch_add_explicit(&slot_hint, 1, memory_order_relaxed);
    for (unsigned i = 0; i < GUARD_SLOTS; i++) {
        guard_slot *s = &slots[(start + i) % GUARD_SLOTS];
        uintptr_t free_end = 0;
        /* 1 marks the slot taken while its region is being made */
        if (atomic_compare_exchange_strong(&s->data_end, &free_end, (uintptr_t)1)) return (int)(s - slots);
    }
    return -1;
}

opr_tensor *guard_page_output(opr_ctx *ctx, opr_device dev, opr_dtype dtype, int ndim, const int64_t *shape,
                              int64_t numel)
{
    if (!page_size) {
        long p = sysconf(_SC_PAGESIZE);
        if (p <= 0) return NULL;
        page_size = (size_t)p;
    }
    const size_t es = opr_elem_size(dtype), bytes = (size_t)numel * es, after = guard_after_bytes(bytes);
    const size_t body = (GUARD_BYTES + bytes + after + page_size - 1) / page_size * page_size;
    const size_t len = body + GUARD_PAGES * page_size;
    guard_map *g = calloc(1, sizeof *g);
    int slot = g ? slot_claim() : -1;
    if (slot < 0) { free(g); return NULL; }
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + body, GUARD_PAGES * page_size, PROT_NONE)) {
        if (base != MAP_FAILED) munmap(base, len);
        atomic_store(&slots[slot].data_end, 0);
        free(g);
        return NULL;
    }
    char *data = base + body - after - bytes; /* GUARD_BYTES-aligned: body and bytes + after are */
    memset(data - GUARD_BYTES, GUARD_FILL, GUARD_BYTES);
    memset(data + bytes, GUARD_FILL, after);
    *g = (guard_map){.owner = {.deleter = guard_map_free}, .base = base, .len = len, .slot = slot};
    /* the storage starts at the front canary, as opr_tensor_empty's would */
    opr_tensor *t = opr_tensor_over_memory(ctx, dev, data - GUARD_BYTES, dtype, ndim, shape, NULL,
                                           GUARD_BYTES / (int64_t)es, &g->owner);
    if (!t) { guard_map_free(&g->owner); return NULL; }
    atomic_store(&slots[slot].guard, (uintptr_t)(base + body));
    atomic_store(&slots[slot].data_end, (uintptr_t)(data + bytes));
    return t;
}

int64_t opr_kernel_guard_overrun(const void *addr)
{
    const uintptr_t a = (uintptr_t)addr, span = GUARD_PAGES * page_size;
    for (int i = 0; i < GUARD_SLOTS && span; i++) {
        uintptr_t guard = atomic_load_explicit(&slots[i].guard, memory_order_relaxed);
        if (guard && a >= guard && a - guard < span) {
            uintptr_t end = atomic_load_explicit(&slots[i].data_end, memory_order_relaxed);
            if (end > 1 && a >= end) return (int64_t)(a - end);
        }
    }
    return -1;
}
