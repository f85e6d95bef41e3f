/* opr_ptr_index (core.h): an open-addressing index from pointers to their positions in
 * a caller's array, which keeps its own order (the backward engine's watched leaves,
 * the data-parallel helper's parameters). Linear probing over a power-of-2 table at
 * least twice the items, hashed on the address. */
#include "core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned home(const opr_ptr_index *ix, const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> 32) & (unsigned)(ix->cap - 1);
}

/* The slot holding p, or the free one where it would go. */
static unsigned slot_of(const opr_ptr_index *ix, void *const *items, const void *p)
{
    unsigned s = home(ix, p);
    while (ix->slots[s] >= 0 && items[ix->slots[s]] != p) s = (s + 1) & (unsigned)(ix->cap - 1);
    return s;
}

int opr_ptr_index_build(opr_ptr_index *ix, void *const *items, int n, int room)
{
    int cap = 16;
    while (cap < 2 * room) cap *= 2;
    int *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots) return opr_fail(OPR_ERR_NOMEM, "out of memory indexing %d items", room);
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    memset(slots, -1, (size_t)cap * sizeof *slots);
    for (int k = 0; k < n; k++) ix->slots[slot_of(ix, items, items[k])] = k;
    return OPR_OK;
}

int opr_ptr_index_find(const opr_ptr_index *ix, void *const *items, const void *p)
{
    return ix->cap ? ix->slots[slot_of(ix, items, p)] : -1;
}

void opr_ptr_index_add(opr_ptr_index *ix, void *const *items, int pos)
{
    ix->slots[slot_of(ix, items, items[pos])] = pos;
}

void opr_ptr_index_free(opr_ptr_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
}
