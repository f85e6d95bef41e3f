/* Recording: when an op runs with grad mode on and an input requires grad, a node is
 * created with the plan for exactly those inputs, and only what the plan's formulas
 * read is saved. */
#include "autograd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Freed nodes are kept for the next graph instead of going back to malloc: a training
 * step frees a whole graph at once (10^4 nodes of about 2 KiB make 20 MiB), which
 * glibc hands back to the kernel (heap trimming) only to fault it in again on the next
 * step, and the per-op cost then grows with the graph. One list per metadata count, as
 * nodes of one count are interchangeable; at most AG_NODE_CACHE_BYTES are kept (they
 * stay reachable, so leak checkers do not report them). */
#define AG_NODE_CACHE_BYTES ((size_t)32 << 20)
/* Under AddressSanitizer nothing is kept: a node reused at once would hide a use after
 * free from it. */
#if defined(__SANITIZE_ADDRESS__)
#undef AG_NODE_CACHE_BYTES
#define AG_NODE_CACHE_BYTES ((size_t)0)
#endif

static struct {
    pthread_mutex_t lock;
    opr_node *free[AG_TENSOR_SLOTS + 1];
    size_t bytes;
} node_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The node, then nmetas of each: metadata records (metas[]), slots, edges, saved
 * tensors, their versions (every size a multiple of the next one's alignment). */
static size_t node_bytes(int32_t nmetas)
{
    return sizeof(opr_node) +
           (size_t)nmetas * (sizeof(opr_meta) + sizeof(mval) + sizeof(ag_edge) + sizeof(opr_tensor *) + sizeof(uint32_t));
}

static opr_node *node_alloc(int32_t nmetas)
{
    pthread_mutex_lock(&node_cache.lock);
    opr_node *n = node_cache.free[nmetas];
    if (n) {
        node_cache.free[nmetas] = n->free_next;
        node_cache.bytes -= node_bytes(nmetas);
    }
    pthread_mutex_unlock(&node_cache.lock);
    if (!n) n = malloc(node_bytes(nmetas));
    if (n) {
        n->nmetas = nmetas;
        n->slots = (mval *)(void *)(n->metas + nmetas);
        n->next = (ag_edge *)(void *)(n->slots + nmetas);
        n->saved = (opr_tensor **)(void *)(n->next + nmetas);
        n->saved_version = (uint32_t *)(void *)(n->saved + nmetas);
    }
    return n;
}

static void node_free(opr_node *n)
{
    const size_t size = node_bytes(n->nmetas);
    pthread_mutex_lock(&node_cache.lock);
    const bool keep = node_cache.bytes + size <= AG_NODE_CACHE_BYTES;
    if (keep) {
        n->free_next = node_cache.free[n->nmetas];
        node_cache.free[n->nmetas] = n;
        node_cache.bytes += size;
    }
    pthread_mutex_unlock(&node_cache.lock);
    if (!keep) free(n);
}


/* Outputs are saved as views without grad_fn, so that output -> node -> output does
 * not form a reference cycle. */
static opr_tensor *detached_view(opr_tensor *t)
{
    return opr_tensor_alias(t);
}

void ag_node_release(struct opr_node *first)
{
    /* Iterative: a long chain of nodes must not recurse once per node. */
    opr_node *stack[64];
    int top = 0;
    if (first) stack[top++] = first;
    while (top) {
        opr_node *n = stack[--top];
        if (atomic_fetch_sub(&n->refs, 1) != 1) continue;
        for (int s = 0; s < n->nmetas; s++) opr_tensor_release(n->saved[s]);
        for (int k = 0; k < OPR_MAX_OUTS; k++) opr_tensor_release(n->pending[k]);
        const int nargs = n->op->nargs;
        for (int i = 0; i < nargs; i++)
            if (n->slots[i].k == MV_STR) free((char *)n->slots[i].u.s); /* copied by ag_record */
        for (int i = 0; i < nargs + n->nitems; i++) {
            ag_edge *e = i < nargs ? &n->next[i] : &n->items[i - nargs];
            opr_tensor_release(e->leaf);
            opr_node *next = e->node;
            if (!next) continue;
            if (top < 64) stack[top++] = next;
            else ag_node_release(next); /* rare: very wide fan-in */
        }
        for (int k = 0; k < n->npieces; k++) opr_tensor_release(n->piece_pending[k]);
        free(n->piece_pending);
        ag_release_items(n);
        free(n->items);
        node_free(n);
    }
}

void ag_release_items(opr_node *n)
{
    if (!n->item_saved) return;
    for (int j = 0; j < n->nitems; j++) opr_tensor_release(n->item_saved[j]);
    free(n->item_saved); /* with item_saved_version */
    n->item_saved = NULL;
    n->item_saved_version = NULL;
}

/* An edge to where t's gradient goes: its grad_fn, or t itself as a leaf. */
static void edge_to(ag_edge *e, opr_tensor *t)
{
    if (t->grad_fn) {
        atomic_fetch_add(&t->grad_fn->refs, 1);
        e->node = t->grad_fn;
        e->out_nr = t->output_nr;
    } else {
        e->leaf = opr_tensor_retain(t);
    }
}

/* Keeps the items of the Tensor[] argument list_arg (slots[list_arg], borrowed from
 * the call): their metadata, which the node's slot then shows, and an edge for each
 * one that requires grad. The tensors themselves are not kept. */
static int record_items(opr_node *n, int list_arg, const mval *list)
{
    n->list_arg = list_arg;
    size_t edges = (size_t)list->n * sizeof(ag_edge);
    void *block = calloc(1, edges + (size_t)list->n * sizeof(opr_meta) + 1);
    if (!block) return opr_fail(OPR_ERR_NOMEM, "out of memory recording %s", n->op->name);
    n->items = block;
    n->item_metas = (opr_meta *)(void *)((char *)block + edges);
    n->nitems = list->n;
    for (int j = 0; j < list->n; j++) {
        opr_tensor *t = list->u.ts[j];
        if (!t) { /* None in a Tensor?[]: mval_item reads ndim -1 as None */
            n->item_metas[j] = (opr_meta){.ndim = -1};
            continue;
        }
        n->item_metas[j] = t->m;
        if (t->requires_grad) edge_to(&n->items[j], t);
    }
    n->slots[list_arg] = (mval){.k = MV_METAS, .n = list->n, .u.ms = n->item_metas};
    return OPR_OK;
}

/* Keeps the pieces of a list-returning op's call: their metadata, which the output's
 * slot (`result`, `results`) then shows as a list, and a pending gradient for each. */
static int record_pieces(opr_node *n, opr_tensor **pieces, int npieces)
{
    size_t pend = (size_t)npieces * sizeof(opr_tensor *);
    void *block = calloc(1, pend + (size_t)npieces * sizeof(opr_meta));
    if (!block) return opr_fail(OPR_ERR_NOMEM, "out of memory recording %s", n->op->name);
    n->piece_pending = block;
    n->piece_metas = (opr_meta *)(void *)((char *)block + pend);
    n->npieces = npieces;
    for (int k = 0; k < npieces; k++) n->piece_metas[k] = pieces[k]->m;
    n->slots[n->op->nargs] = (mval){.k = MV_METAS, .n = npieces, .u.ms = n->piece_metas};
    return OPR_OK;
}

/* ag_record and ag_record_list: nouts outputs, which are the pieces of a list when
 * op->list_out. */
static int record(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **outs, int nouts,
                  opr_device dev)
{
    uint32_t mask = 0;
    int list_arg = -1;
    for (int i = 0; i < op->nargs; i++) {
        if (tensors[i] && tensors[i]->requires_grad) mask |= 1u << i;
        if (slots[i].k != MV_TENSORS) continue;
        bool wants = false;
        for (int j = 0; j < slots[i].n; j++) /* an op of many items is one node: one bit for them all */
            wants |= slots[i].u.ts[j] && slots[i].u.ts[j]->requires_grad;
        if (wants && list_arg >= 0 && ((mask >> list_arg) & 1))
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: items of two Tensor[] arguments ('%s', '%s') require grad; a "
                            "node follows the items of one", op->name, op->args[list_arg].name, op->args[i].name);
        if (wants || list_arg < 0) list_arg = i;
        if (wants) mask |= 1u << i;
    }
    if (!mask) return OPR_OK;
    if (!op->deriv) {
        /* An op without formulas would silently cut the graph: only ops declared
         * `differentiable: false` (or with no floating output) may do that. */
        bool floating_out = false;
        for (int k = 0; k < nouts; k++) floating_out |= opr_dtype_is_floating(outs[k]->m.dtype);
        if (!floating_out || op->nondifferentiable) return OPR_OK;
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s has no derivative formulas but an input requires grad; add them "
                        "to its YAML entry (or `differentiable: false`), or run it under no_grad", op->name);
    }
    if (op->inplace)
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: in-place ops on tensors that require grad are not recorded by "
                        "autograd; use the out-of-place op", op->name);
    if (mask & ~op->deriv->differentiable) {
        int bad = __builtin_ctz(mask & ~op->deriv->differentiable);
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: no derivative formula for input '%s' (it requires grad)",
                        op->name, op->args[bad].name);
    }
    /* Not calloc: the node is large and only its first nargs + nout slots are used. */
    opr_node *n = node_alloc(op->nargs + op->nout);
    if (!n) return opr_fail(OPR_ERR_NOMEM, "out of memory recording %s", op->name);
    memset(n->next, 0, (size_t)n->nmetas * sizeof *n->next);
    memset(n->saved, 0, (size_t)n->nmetas * sizeof *n->saved);
    memset(n->pending, 0, sizeof n->pending);
    n->list_arg = -1;
    n->nitems = 0;
    n->items = NULL;
    n->item_metas = NULL;
    n->item_saved = NULL;
    n->item_saved_version = NULL;
    n->npieces = 0;
    n->piece_pending = NULL;
    n->piece_metas = NULL;
    n->released = n->queued = false;
    n->deps = 0;
    atomic_init(&n->refs, 1); /* ours until the outputs take it over, below */
    n->op = op;
    n->dev = dev;
    n->mask = mask;
    memcpy(n->slots, slots, (size_t)op->nargs * sizeof *slots);
    /* Borrowed pointers of the call must not outlive it: a Tensor[] is dropped, a str
     * copied (formulas and fused backward kernels read it in backward). */
    for (int i = 0; i < op->nargs; i++) {
        if (n->slots[i].k == MV_TENSORS) n->slots[i].k = MV_NONE;
        if (n->slots[i].k != MV_STR) continue;
        char *copy = strdup(n->slots[i].u.s);
        if (!copy) {
            for (int j = i; j < op->nargs; j++)
                if (n->slots[j].k == MV_STR) n->slots[j].k = MV_NONE; /* not ours to free */
            ag_node_release(n);
            return opr_fail(OPR_ERR_NOMEM, "out of memory recording %s", op->name);
        }
        n->slots[i].u.s = copy;
    }
    for (int i = 0; i < op->nargs; i++)
        if (tensors[i]) {
            n->metas[i] = tensors[i]->m;
            n->slots[i].u.t = &n->metas[i];
        }
    if (list_arg >= 0) {
        int rc = record_items(n, list_arg, &slots[list_arg]);
        if (rc) { ag_node_release(n); return rc; }
    }
    if (op->list_out) { /* the output slot: piece 0's metadata, the slot itself the list */
        int rc = record_pieces(n, outs, nouts);
        if (rc) { ag_node_release(n); return rc; }
        n->metas[op->nargs] = outs[0]->m;
    }
    for (int k = 0; k < op->nout && !op->list_out; k++) {
        n->metas[op->nargs + k] = outs[k]->m;
        n->slots[op->nargs + k].k = MV_TENSOR;
        n->slots[op->nargs + k].u.t = &n->metas[op->nargs + k];
    }
    n->fast = !opr_special_grads_enabled(); /* fixed now, whenever backward runs */
    bool batched = false; /* a node of opr_vmap's per-sample graph runs formulas only */
    for (int i = 0; i < op->nargs && !batched; i++) batched = tensors[i] && tensors[i]->bt_phys;
    for (int k = 0; k < nouts && !batched; k++) batched = outs[k]->bt_phys;
    /* The planner reads a full DERIV_MAX_SLOTS array of slots (it fills the ones after
     * the arguments and outputs for costing), more than the node keeps. */
    mval plan_slots[DERIV_MAX_SLOTS] = {0};
    memcpy(plan_slots, n->slots, (size_t)n->nmetas * sizeof *n->slots);
    n->plan = plan_get(op, mask, dev, plan_slots, (n->fast ? PLAN_FAST : 0) | (batched ? PLAN_FORMULAS_ONLY : 0));
    if (!n->plan) { ag_node_release(n); return opr_fail_wrap(opr_error_status(), "%s: planning the backward", op->name); }
    for (int s = 0; s < op->nargs + op->nout; s++) {
        if (!((n->plan->save >> s) & 1)) continue;
        /* An optional Tensor? argument given as None (layer_norm's weight) has nothing
         * to save: its formulas read it as None, a fused kernel gets OPR_ARG_NONE. */
        if (s < op->nargs && !tensors[s] && n->slots[s].k == MV_NONE) continue;
        if (op->list_out && s >= op->nargs) {
            ag_node_release(n);
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: the plan reads its pieces as tensors; formulas of an op "
                            "returning Tensor[] may read them only through size(), sizes(), dim() or numel()", op->name);
        }
        if (s == n->list_arg) { /* the items themselves (index's indices), next to their metadata */
            const size_t items = ((size_t)n->nitems + 1) * sizeof *n->item_saved;
            if (!(n->item_saved = calloc(1, items + (size_t)n->nitems * sizeof *n->item_saved_version))) {
                ag_node_release(n);
                return opr_fail(OPR_ERR_NOMEM, "out of memory recording %s", op->name);
            }
            n->item_saved_version = (uint32_t *)(void *)((char *)n->item_saved + items);
            for (int j = 0; j < n->nitems; j++) {
                opr_tensor *t = n->item_saved[j] = opr_tensor_retain(slots[s].u.ts[j]);
                if (t) n->item_saved_version[j] = atomic_load_explicit(&t->storage->version, memory_order_relaxed);
            }
            continue;
        }
        n->saved[s] = s < op->nargs ? opr_tensor_retain(tensors[s]) : detached_view(outs[s - op->nargs]);
        if (!n->saved[s]) {
            ag_node_release(n);
            if (s >= op->nargs) return opr_fail_wrap(opr_error_status(), "%s: saving '%s'", op->name, op->deriv->slot_names[s]);
            return opr_fail(OPR_ERR_INVALID, "%s: the plan saves '%s', which was not given", op->name,
                            op->deriv->slot_names[s]);
        }
        n->slots[s].u.t = &n->saved[s]->m;
        n->saved_version[s] = atomic_load_explicit(&n->saved[s]->storage->version, memory_order_relaxed);
    }
    for (int i = 0; i < op->nargs; i++)
        if (((mask >> i) & 1) && tensors[i]) edge_to(&n->next[i], tensors[i]);
    for (int k = 0; k < nouts; k++) {
        if (!opr_dtype_is_floating(outs[k]->m.dtype)) continue; /* indices and masks carry no gradient */
        if ((op->out_nondiff >> k) & 1) continue;                /* nor outputs said to be constants */
        atomic_fetch_add(&n->refs, 1);
        outs[k]->grad_fn = n;
        outs[k]->output_nr = k;
        outs[k]->requires_grad = true;
    }
    ag_node_release(n); /* drop ours: freed here if no output took the node */
    return OPR_OK;
}

int ag_record(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **outs,
              opr_device dev, bool list_requires_grad)
{
    (void)list_requires_grad; /* record() reads the Tensor[] items themselves */
    return record(op, tensors, slots, outs, op->nout, dev);
}

int ag_record_list(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **pieces,
                   int npieces, opr_device dev)
{
    if (!op->list_out || npieces < 1) return opr_fail(OPR_ERR_INVALID, "%s: no pieces to record", op->name);
    return record(op, tensors, slots, pieces, npieces, dev);
}
