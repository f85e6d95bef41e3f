/* Frees the loops that backward with create_graph makes through a leaf.
 *
 * With create_graph, the gradient accumulated into a leaf's .grad has a graph of its
 * own, and that graph holds the leaf again (as a saved input, or as the edge that
 * accumulates into it): leaf -> grad -> nodes -> leaf. Reference counts never free
 * such a loop, and several leaves can form one together (the gradient of one weight
 * reads another). So when a reference to a leaf whose grad has a graph is dropped,
 * the objects reachable from the leaf are walked (trial deletion): an object whose
 * count is higher than the references found inside the walk is held from outside and
 * keeps alive everything it reaches. If the leaf is not kept alive that way, nothing
 * outside can reach the loop any more, and dropping the grads of the leaves in it
 * frees it. Only releases of such leaves pay for the walk. */
#include "autograd.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct obj {
    void *p;          /* opr_tensor or opr_node; NULL: free slot */
    bool is_node;
    bool live;        /* reachable from an object held from outside */
    long internal;    /* references to it from inside the walk */
} obj;

typedef struct walk {
    obj *slots;
    size_t cap, n;
    void **stack;     /* objects to visit: tagged pointers, low bit set for nodes */
    size_t top, stack_cap;
    bool nomem;
} walk;

static size_t slot_of(const walk *w, const void *p)
{
    size_t h = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15u;
    for (size_t i = h & (w->cap - 1);; i = (i + 1) & (w->cap - 1))
        if (!w->slots[i].p || w->slots[i].p == p) return i;
}

static bool grow(walk *w)
{
    size_t cap = w->cap ? w->cap * 2 : 256;
    obj *old = w->slots, *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    size_t old_cap = w->cap;
    w->slots = slots;
    w->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].p) w->slots[slot_of(w, old[i].p)] = old[i];
    free(old);
    return true;
}

static bool push(walk *w, void *p, bool is_node)
{
    if (w->top == w->stack_cap) {
        size_t cap = w->stack_cap ? w->stack_cap * 2 : 256;
        void **s = realloc(w->stack, cap * sizeof *s);
        if (!s) return false;
        w->stack = s;
        w->stack_cap = cap;
    }
    w->stack[w->top++] = (void *)((uintptr_t)p | is_node);
    return true;
}

/* Records one reference to p found inside the walk; queues p the first time. */
static void reach(walk *w, void *p, bool is_node)
{
    if (!p || w->nomem) return;
    if ((w->n + 1) * 2 > w->cap && !grow(w)) { w->nomem = true; return; }
    obj *o = &w->slots[slot_of(w, p)];
    if (!o->p) {
        *o = (obj){.p = p, .is_node = is_node};
        w->n++;
        if (!push(w, p, is_node)) { w->nomem = true; return; }
    }
    o->internal++;
}

/* Calls fn for every reference the object holds. */
static void each_ref(void *p, bool is_node, walk *w, void (*fn)(walk *, void *, bool))
{
    if (!is_node) {
        opr_tensor *t = p;
        fn(w, t->grad, false);
        fn(w, t->grad_fn, true);
        return;
    }
    opr_node *n = p;
    for (int s = 0; s < n->nmetas; s++) fn(w, n->saved[s], false);
    for (int k = 0; k < OPR_MAX_OUTS; k++) fn(w, n->pending[k], false);
    for (int k = 0; k < n->npieces; k++) fn(w, n->piece_pending[k], false);
    const int nargs = n->op->nargs;
    for (int i = 0; i < nargs + n->nitems; i++) { /* the arguments, then a Tensor[]'s items */
        const ag_edge *e = i < nargs ? &n->next[i] : &n->items[i - nargs];
        fn(w, e->leaf, false);
        fn(w, e->node, true);
    }
}

static void mark_live(walk *w, void *p, bool is_node)
{
    (void)is_node;
    if (!p) return;
    obj *o = &w->slots[slot_of(w, p)];
    if (o->p && !o->live) {
        o->live = true;
        if (!push(w, p, o->is_node)) w->nomem = true;
    }
}

static long refs_of(const obj *o)
{
    return o->is_node ? atomic_load(&((opr_node *)o->p)->refs) : atomic_load(&((opr_tensor *)o->p)->refs);
}

static _Thread_local bool collecting; /* the grads released below drop leaf references too */

void ag_leaf_cycle_collect(opr_tensor *leaf)
{
    if (collecting) return;
    walk w = {0};
    /* counted as found inside: the caller's reference is the one about to go */
    reach(&w, leaf, false);
    while (!w.nomem && w.top) {
        uintptr_t v = (uintptr_t)w.stack[--w.top];
        each_ref((void *)(v & ~(uintptr_t)1), v & 1, &w, reach);
    }
    for (size_t i = 0; i < w.cap && !w.nomem; i++) {
        obj *o = &w.slots[i];
        if (o->p && !o->live && refs_of(o) > o->internal) {
            o->live = true;
            if (!push(&w, o->p, o->is_node)) w.nomem = true;
            while (!w.nomem && w.top) {
                uintptr_t v = (uintptr_t)w.stack[--w.top];
                each_ref((void *)(v & ~(uintptr_t)1), v & 1, &w, mark_live);
            }
        }
    }
    /* Out of memory while looking: the loop stays, as it would without this walk. */
    if (!w.nomem && !w.slots[slot_of(&w, leaf)].live) {
        /* Garbage: take the grads out of every tensor of the loop first, then drop
         * them, so no release below walks again half-way through. */
        opr_tensor **grads = malloc(w.n * sizeof *grads);
        size_t ng = 0;
        for (size_t i = 0; grads && i < w.cap; i++) {
            obj *o = &w.slots[i];
            opr_tensor *t = o->p;
            if (!o->p || o->is_node || !t->grad) continue;
            grads[ng++] = t->grad;
            t->grad = NULL;
        }
        collecting = true;
        for (size_t i = 0; i < ng; i++) opr_tensor_release(grads[i]);
        collecting = false;
        free(grads);
    }
    free(w.slots);
    free(w.stack);
}
