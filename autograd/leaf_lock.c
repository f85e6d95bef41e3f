/* Locks for leaves' .grad. Backward passes on several threads may add to one leaf's
 * gradient at once, and opr_grad, opr_zero_grad and opr_tensor_release read it: each
 * read or replacement of the pointer happens under the leaf's lock. A fixed set of
 * locks, picked by the leaf's address, needs no field in the tensor and no setup.
 *
 * They are spin locks: every section they guard is a few loads and stores (the sum
 * a backward pass adds is computed outside, see add_to_leaf_grad), and taking one
 * is on the path of every training step, where a mutex's two atomic operations and
 * calls cost more than the section. No code takes a second stripe while holding one,
 * so they cannot deadlock; a waiter yields the CPU in case the holder was preempted. */
#include "autograd.h"

#include <sched.h>
#include <stdint.h>

#define LEAF_STRIPE_BITS 6
#define LEAF_STRIPES (1 << LEAF_STRIPE_BITS)
#define SPINS_BEFORE_YIELD 64

/* One cache line each: threads on different leaves do not share lines. Zero is free. */
static struct {
    _Alignas(64) _Atomic int busy;
} stripes[LEAF_STRIPES];

static _Atomic int *stripe(const opr_tensor *leaf)
{
    /* Fibonacci hashing: tensor headers are malloc'd, so their low bits vary little */
    uint64_t h = (uint64_t)(uintptr_t)leaf * 0x9e3779b97f4a7c15ull;
    return &stripes[h >> (64 - LEAF_STRIPE_BITS)].busy;
}

void ag_leaf_lock(const opr_tensor *leaf)
{
    _Atomic int *busy = stripe(leaf);
    while (atomic_exchange_explicit(busy, 1, memory_order_acquire))
        for (int spins = 0; atomic_load_explicit(busy, memory_order_relaxed); spins++)
            if (spins >= SPINS_BEFORE_YIELD) sched_yield();
}

void ag_leaf_unlock(const opr_tensor *leaf) { atomic_store_explicit(stripe(leaf), 0, memory_order_release); }

bool ag_leaf_grad_has_graph(const opr_tensor *leaf)
{
    ag_leaf_lock(leaf);
    bool has = leaf->grad && leaf->grad->grad_fn;
    ag_leaf_unlock(leaf);
    return has;
}
