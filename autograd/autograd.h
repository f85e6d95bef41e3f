/* Private definitions of the autograd layer: graph nodes recorded by opr_call, the
 * engine that runs them backward, and the formula runner. */
#ifndef OPREG_AUTOGRAD_H
#define OPREG_AUTOGRAD_H

#include "../registry/deriv.h"

#define AG_TENSOR_SLOTS (OPR_MAX_ARGS + OPR_MAX_OUTS)

/* Where the gradient of one input goes: the node that produced it, or a leaf. */
typedef struct ag_edge {
    struct opr_node *node;   /* owned reference, or NULL */
    int32_t out_nr;
    opr_tensor *leaf;        /* owned reference to a leaf that requires grad, or NULL */
} ag_edge;

typedef struct opr_node {
    _Atomic int refs;
    const opr_op *op;
    const deriv_plan *plan;
    opr_device dev;
    uint32_t mask;                      /* inputs whose gradient flows back */
    /* The arrays below have one entry per argument and output of the op (nmetas; next[]
     * uses the arguments' only) and are stored after metas[], in that order. */
    ag_edge *next;
    /* What the formulas see: scalars of the call and the metadata of every tensor
     * argument and output (in metas[], below); tensors the plan saves are in saved[]. */
    mval *slots;
    opr_tensor **saved;      /* owned; outputs are saved as detached views */
    uint32_t *saved_version; /* storage versions when saved */
    bool released;                      /* saved tensors freed after a backward */
    bool fast;                          /* recorded in fast mode: plan of fast variants */
    /* The items of the op's Tensor[] argument (at most one per op), when the node's
     * mask has it: one edge per item (none for an item that does not require grad) and
     * each item's metadata, which slots[list_arg] shows as MV_METAS. One allocation. */
    int32_t list_arg;                   /* -1: none */
    int32_t nitems;
    ag_edge *items;
    opr_meta *item_metas;
    opr_tensor **item_saved;            /* owned, nitems (NULL for a None item of a
                                           Tensor?[]): the items themselves, when the plan
                                           reads them (index's indices); else NULL */
    uint32_t *item_saved_version;       /* their storage versions when saved (in
                                           item_saved's block) */
    /* The pieces of an op returning a Tensor[] (op->list_out), its outputs here: their
     * accumulated gradients (instead of pending[]) and metadata. One allocation. */
    int32_t npieces;
    opr_tensor **piece_pending;
    opr_meta *piece_metas;
    /* engine scratch, valid during one backward */
    opr_tensor *pending[OPR_MAX_OUTS];  /* accumulated gradient of each output */
    int deps;
    bool queued;
    /* The node is allocated for its op's nargs + nout metadata records, slots, edges
     * and saved tensors only (188 bytes each), not for AG_TENSOR_SLOTS of them: a graph
     * of many small ops stays small enough for the caches. record.c keeps freed nodes
     * for reuse, linked through free_next, by that count. */
    int32_t nmetas;
    struct opr_node *free_next;
    opr_meta metas[];
} opr_node;

/* Called by opr_call after the kernel ran, when grad mode is on and some tensor
 * argument requires grad. tensors[i] is argument i (NULL for non-tensors); slots
 * are the arguments' metadata values. Sets the outputs' grad_fn. */
int ag_record(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **outs,
              opr_device dev, bool list_requires_grad);

/* ag_record for an op returning a Tensor[]: one node whose outputs are the pieces. */
int ag_record_list(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **pieces,
                   int npieces, opr_device dev);

/* Output out_nr's accumulated gradient and the number of outputs of n (its pieces for
 * an op returning a Tensor[]). */
static inline opr_tensor **ag_pending(opr_node *n, int out_nr)
{
    return n->npieces ? &n->piece_pending[out_nr] : &n->pending[out_nr];
}
static inline int ag_nouts(const opr_node *n) { return n->npieces ? n->npieces : n->op->nout; }

/* Runs plan candidate `c` for the inputs in `want`, writing new references into
 * grads_out[arg]. grads_in holds the gradient of each output (NULL: none flowed). A
 * per-item candidate (`tensors[i]:`) writes item_grads[i] instead, for each item of
 * n's Tensor[] argument that has an edge. */
int ag_run_candidate(opr_node *n, const deriv_cand *c, uint32_t want, opr_tensor *const *grads_in,
                     opr_tensor **grads_out, opr_tensor **item_grads, bool create_graph);

/* Zeros of the given metadata on dev. */
opr_tensor *ag_zeros(opr_ctx *ctx, const opr_meta *m, opr_device dev);

/* Drops a reference to a node (record.c). */
void ag_node_release(struct opr_node *n);
/* Drops the Tensor[] items a node saved (item_saved), after its backward or with it. */
void ag_release_items(struct opr_node *n);
/* Called before a reference to a leaf whose grad has a graph is dropped: frees the
 * loop leaf -> grad -> graph -> leaf when nothing else holds it (leaf_cycle.c). */
void ag_leaf_cycle_collect(opr_tensor *leaf);
/* Whether a leaf's grad has a graph, read under the leaf's lock (leaf_lock.c). */
bool ag_leaf_grad_has_graph(const opr_tensor *leaf);

/* Serialise reads and writes of leaf->grad across threads (leaf_lock.c). */
void ag_leaf_lock(const opr_tensor *leaf);
void ag_leaf_unlock(const opr_tensor *leaf);

#endif
