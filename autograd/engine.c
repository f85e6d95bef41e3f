/* The backward engine: runs the recorded nodes in dependency order, each with the
 * candidates of its plan, accumulates gradients (also for tensors used several times),
 * and releases each node's saved tensors as soon as it has run (unless retain_graph).
 * A pass keeps its scratch in the nodes it runs, so passes on several threads must not
 * share nodes; they may share leaves (add_to_leaf_grad). */
#include "autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable list that starts in place: small graphs never touch the heap. */
#define NODE_LIST_INLINE 32
typedef struct node_list {
    opr_node **items;
    int n, cap;
    opr_node *inline_items[NODE_LIST_INLINE];
} node_list;

static void list_init(node_list *l)
{
    l->items = l->inline_items;
    l->n = 0;
    l->cap = NODE_LIST_INLINE;
}

static void list_free(node_list *l)
{
    if (l->items != l->inline_items) free(l->items);
}

static int push(node_list *l, opr_node *n)
{
    if (l->n == l->cap) {
        int cap = l->cap * 2;
        opr_node **items = malloc((size_t)cap * sizeof *items);
        if (!items) return opr_fail(OPR_ERR_NOMEM, "out of memory in backward");
        memcpy(items, l->items, (size_t)l->n * sizeof *items);
        list_free(l);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = n;
    return OPR_OK;
}

/* a + b as a new reference (b is consumed). */
static int accumulate(opr_tensor **slot, opr_tensor *g)
{
    if (!*slot) { *slot = g; return OPR_OK; }
    const opr_op *add = registry_engine_op(g->ctx, ENGINE_OP_ADD);
    opr_value args[2] = {opr_v_tensor(*slot), opr_v_tensor(g)};
    opr_tensor *sum = NULL;
    int rc = add ? opr_call(add, args, 2, &sum, 1) : OPR_ERR_NOT_FOUND;
    opr_tensor_release(g);
    if (rc) return rc;
    opr_tensor_release(*slot);
    *slot = sum;
    return OPR_OK;
}

/* A gradient stored in a leaf's .grad must not alias storage someone else holds. */
static int own_copy(opr_tensor **g)
{
    opr_tensor *t = *g;
    if (atomic_load(&t->refs) == 1 && opr_tensor_is_contiguous(t) && !t->grad_fn) return OPR_OK;
    if (t->grad_fn) return OPR_OK; /* create_graph: keep the history */
    opr_tensor *c = opr_tensor_empty(t->ctx, t->m.dtype, t->m.ndim, t->m.shape, t->storage->dev);
    if (!c) return OPR_ERR_NOMEM;
    int rc = opr_tensor_copy_into(c, t);
    opr_tensor_release(t);
    *g = c;
    return rc;
}

typedef struct capture {
    opr_tensor *const *inputs;
    int n;
    opr_tensor **grads;
} capture;

static int capture_index(const capture *cap, const opr_tensor *t)
{
    for (int i = 0; cap && i < cap->n; i++)
        if (cap->inputs[i] == t) return i;
    return -1;
}

/* Adds g (consumed) to leaf->grad. Backward passes on other threads may add to the
 * same leaf, so .grad is read and replaced under the leaf's lock; the sum itself is
 * computed with no lock held (the add runs a kernel and releases tensors, and a
 * release may take a leaf lock itself). The sum replaces the gradient it was computed
 * from only if no other pass replaced that one meanwhile; otherwise it is computed
 * again from the newer gradient. The gradient read is retained, so it cannot be freed
 * and its address reused in between. */
static int add_to_leaf_grad(opr_tensor *leaf, opr_tensor *g)
{
    opr_tensor *mine = g;
    int rc = own_copy(&mine); /* g may become the gradient itself */
    if (rc) { opr_tensor_release(mine); return rc; }
    for (;;) {
        ag_leaf_lock(leaf);
        opr_tensor *old = leaf->grad;
        if (!old) leaf->grad = mine;
        opr_tensor_retain(old);
        ag_leaf_unlock(leaf);
        if (!old) return OPR_OK;
        opr_tensor *sum = opr_tensor_retain(old);
        rc = accumulate(&sum, opr_tensor_retain(mine));
        if (rc) { opr_tensor_release(sum); opr_tensor_release(old); opr_tensor_release(mine); return rc; }
        ag_leaf_lock(leaf);
        bool current = leaf->grad == old;
        if (current) leaf->grad = sum;
        ag_leaf_unlock(leaf);
        opr_tensor_release(old);
        if (current) {
            opr_tensor_release(old); /* the reference .grad held */
            opr_tensor_release(mine);
            return OPR_OK;
        }
        opr_tensor_release(sum);
    }
}

/* opr_backward_opts.leaf_ready: the edges into each leaf still to deliver in this
 * pass, counted by collect(); a leaf whose count reaches 0 has its whole gradient.
 * Leaves are kept in the order first met (the leftovers' callbacks run in that order,
 * the same on every rank of a data-parallel group, whatever the addresses), found
 * through an open-addressing index of their positions. */
typedef struct leaf_watch {
    opr_tensor **leaves;
    int *left;
    int n, cap;
    opr_ptr_index index; /* of leaves */
    void (*ready)(opr_tensor *leaf, void *user);
    void *user;
} leaf_watch;

static int watch_add(leaf_watch *w, opr_tensor *leaf)
{
    int k = opr_ptr_index_find(&w->index, (void *const *)w->leaves, leaf);
    if (k >= 0) { w->left[k]++; return OPR_OK; }
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        opr_tensor **l = realloc(w->leaves, (size_t)cap * sizeof *l);
        if (l) w->leaves = l;
        int *c = l ? realloc(w->left, (size_t)cap * sizeof *c) : NULL;
        if (c) w->left = c;
        if (!c || opr_ptr_index_build(&w->index, (void *const *)w->leaves, w->n, cap))
            return opr_fail(OPR_ERR_NOMEM, "backward: out of memory watching leaves");
        w->cap = cap;
    }
    w->leaves[w->n] = leaf;
    w->left[w->n] = 1;
    opr_ptr_index_add(&w->index, (void *const *)w->leaves, w->n++);
    return OPR_OK;
}

/* One edge into leaf delivered: the callback when it was the last. */
static void watch_delivered(leaf_watch *w, opr_tensor *leaf)
{
    int k = w ? opr_ptr_index_find(&w->index, (void *const *)w->leaves, leaf) : -1;
    if (k >= 0 && --w->left[k] == 0) w->ready(leaf, w->user);
}

/* Gradient g (consumed) arriving at a leaf. */
static int deliver_leaf(opr_tensor *leaf, opr_tensor *g, const capture *cap, leaf_watch *watch)
{
    int ci = capture_index(cap, leaf);
    if (ci >= 0) return accumulate(&cap->grads[ci], g);
    if (cap) { opr_tensor_release(g); return OPR_OK; } /* autograd_grad leaves .grad alone */
    if (g->bt_phys && !leaf->bt_phys) { /* a per-sample gradient must not outlive its opr_vmap in .grad */
        opr_tensor_release(g);
        return opr_fail(OPR_ERR_UNSUPPORTED, "backward inside opr_vmap into a tensor from outside it: use "
                        "opr_autograd_grad for per-sample gradients and return them from the callback");
    }
    int rc = add_to_leaf_grad(leaf, g);
    if (!rc) watch_delivered(watch, leaf);
    return rc;
}

/* item: the item of the node's Tensor[] argument arg, or -1 for a plain argument. */
static int check_grad_shape(const opr_node *n, int arg, int item, const opr_tensor *g)
{
    const opr_meta *want = item >= 0 ? &n->item_metas[item] : &n->metas[arg];
    if (g->m.ndim == want->ndim && !memcmp(g->m.shape, want->shape, (size_t)want->ndim * sizeof(int64_t)) &&
        g->m.dtype == want->dtype)
        return OPR_OK;
    char got[96], which[32] = "";
    if (item >= 0) snprintf(which, sizeof which, "[%d]", item);
    return opr_fail(OPR_ERR_INVALID, "backward of %s: the gradient for '%s%s' is %s but the input is %d-d %s "
                    "(formula bug: reduce broadcast dims with sum_to)", n->op->name, n->op->args[arg].name, which,
                    opr_tensor_describe(g, got, sizeof got), want->ndim, opr_dtype_name(want->dtype));
}

/* Sends g (consumed) along edge e: into a leaf, or into the pending gradient of the
 * node it leads to, which becomes ready when this was its last edge. */
static int send(ag_edge *e, opr_tensor *g, const capture *cap, leaf_watch *watch, node_list *ready)
{
    if (e->leaf) return deliver_leaf(e->leaf, g, cap, watch);
    if (!e->node) { opr_tensor_release(g); return OPR_OK; }
    int rc = accumulate(ag_pending(e->node, e->out_nr), g);
    if (!rc && --e->node->deps == 0) rc = push(ready, e->node);
    return rc;
}

/* Drops the gradients accumulated for n's outputs. */
static void release_pending(opr_node *n)
{
    for (int k = 0; k < OPR_MAX_OUTS; k++) { opr_tensor_release(n->pending[k]); n->pending[k] = NULL; }
    for (int k = 0; k < n->npieces; k++) { opr_tensor_release(n->piece_pending[k]); n->piece_pending[k] = NULL; }
}

static int run_node(opr_node *n, const opr_backward_opts *o, const capture *cap, leaf_watch *watch, node_list *ready)
{
    const opr_op *op = n->op;
    if (n->released)
        return opr_fail(OPR_ERR_INVALID, "backward of %s: its saved tensors were already freed by an earlier "
                        "backward; pass retain_graph to run a graph twice", op->name);
    for (int s = 0; s < op->nargs + op->nout; s++) {
        const opr_tensor *t = n->saved[s];
        uint32_t now = t ? atomic_load_explicit(&t->storage->version, memory_order_relaxed) : 0;
        if (t && now != n->saved_version[s])
            return opr_fail(OPR_ERR_INVALID, "backward of %s: '%s', saved for it, was modified in place afterwards "
                            "(version %u when saved, %u now); its gradient would be wrong", op->name,
                            op->deriv->slot_names[s], n->saved_version[s], now);
    }
    for (int j = 0; n->item_saved && j < n->nitems; j++) { /* the saved items of its Tensor[] (index's indices) */
        const opr_tensor *t = n->item_saved[j];
        uint32_t now = t ? atomic_load_explicit(&t->storage->version, memory_order_relaxed) : 0;
        if (t && now != n->item_saved_version[j])
            return opr_fail(OPR_ERR_INVALID, "backward of %s: '%s[%d]', saved for it, was modified in place afterwards "
                            "(version %u when saved, %u now); its gradient would be wrong", op->name,
                            op->args[n->list_arg].name, j, n->item_saved_version[j], now);
    }
    for (int k = 0; cap && k < ag_nouts(n); k++) /* captured non-leaf inputs */
        for (int i = 0; i < cap->n; i++)
            if (cap->inputs[i]->grad_fn == n && cap->inputs[i]->output_nr == k && *ag_pending(n, k)) {
                int rc = accumulate(&cap->grads[i], opr_tensor_retain(*ag_pending(n, k)));
                if (rc) return rc;
            }
    opr_tensor *grads[OPR_MAX_ARGS] = {NULL};
    opr_tensor **item_grads = NULL; /* per item of the Tensor[] argument */
    if (n->nitems && !(item_grads = calloc((size_t)n->nitems, sizeof *item_grads)))
        return opr_fail(OPR_ERR_NOMEM, "backward of %s: out of memory", op->name);
    int rc = OPR_OK;
    const deriv_plan *p = n->plan;
    for (int i = 0; i < p->nchosen && !rc; i++)
        rc = ag_run_candidate(n, &op->deriv->cands[p->chosen[i]], p->chosen_mask[i], n->pending, grads, item_grads,
                              o->create_graph);
    release_pending(n);
    for (int a = 0; a < op->nargs; a++) {
        if (!grads[a]) continue;
        if (!rc) rc = check_grad_shape(n, a, -1, grads[a]);
        if (rc) opr_tensor_release(grads[a]);
        else rc = send(&n->next[a], grads[a], cap, watch, ready);
    }
    for (int j = 0; j < n->nitems; j++) { /* an item given twice gets both gradients, summed */
        if (!item_grads[j]) continue;
        if (!rc) rc = check_grad_shape(n, n->list_arg, j, item_grads[j]);
        if (rc) opr_tensor_release(item_grads[j]);
        else rc = send(&n->items[j], item_grads[j], cap, watch, ready);
    }
    free(item_grads);
    if (!o->retain_graph) {
        for (int s = 0; s < n->nmetas; s++) { opr_tensor_release(n->saved[s]); n->saved[s] = NULL; }
        ag_release_items(n);
        n->released = true;
    }
    return rc;
}

/* Counts, for every node reachable from the roots, how many edges lead into it (and
 * into each leaf, when watched). */
static int collect(node_list *all, opr_node *const *roots, int nroots, leaf_watch *watch)
{
    node_list stack;
    list_init(&stack);
    int rc = OPR_OK;
    for (int i = 0; i < nroots && !rc; i++)
        if (roots[i] && !roots[i]->queued) { roots[i]->queued = true; rc = push(&stack, roots[i]); }
    while (!rc && stack.n) {
        opr_node *n = stack.items[--stack.n];
        if ((rc = push(all, n))) break;
        for (int a = 0; a < n->op->nargs + n->nitems && !rc; a++) {
            const ag_edge *e = a < n->op->nargs ? &n->next[a] : &n->items[a - n->op->nargs];
            if (watch && e->leaf) rc = watch_add(watch, e->leaf);
            opr_node *next = e->node;
            if (!next) continue;
            next->deps++;
            if (!next->queued) { next->queued = true; rc = push(&stack, next); }
        }
    }
    list_free(&stack);
    return rc;
}

static int backward(opr_tensor *const *outputs, opr_tensor *const *grad_outputs, int n_outputs, const capture *cap,
                    const opr_backward_opts *opts)
{
    opr_backward_opts o;
    int rc = opr_struct_in(&o, sizeof o, opts, OPR_BACKWARD_OPTS_STRUCT_SIZE_0_1, "backward", "opr_backward_opts");
    if (rc) return rc;
    if (o.create_graph) o.retain_graph = true;
    if (n_outputs < 1) return opr_fail(OPR_ERR_INVALID, "backward: no outputs given (%d)", n_outputs);
    /* One seed and one root per output: on the stack for the usual few outputs. */
    opr_tensor *seeds_small[16] = {NULL}, **seeds = seeds_small;
    opr_node *roots_small[16] = {NULL}, **roots = roots_small;
    if (n_outputs > 16) {
        seeds = calloc((size_t)n_outputs, sizeof *seeds);
        roots = calloc((size_t)n_outputs, sizeof *roots);
        if (!seeds || !roots) {
            free(seeds);
            free(roots);
            return opr_fail(OPR_ERR_NOMEM, "backward: out of memory for %d outputs", n_outputs);
        }
    }
    for (int i = 0; i < n_outputs && !rc; i++) {
        opr_tensor *t = outputs[i];
        opr_tensor *g = grad_outputs ? grad_outputs[i] : NULL;
        if (!t) { rc = opr_fail(OPR_ERR_INVALID, "backward: output %d is NULL", i); break; }
        if (!t->requires_grad) {
            rc = opr_fail(OPR_ERR_INVALID, "backward: output %d does not require grad (no input of its graph "
                          "requires grad, or it was computed under no_grad)", i);
            break;
        }
        if (g) {
            if (g->m.ndim != t->m.ndim || memcmp(g->m.shape, t->m.shape, (size_t)t->m.ndim * sizeof(int64_t)) ||
                g->m.dtype != t->m.dtype) {
                char a[96], b[96];
                rc = opr_fail(OPR_ERR_INVALID, "backward: grad %s does not match output %s", opr_tensor_describe(g, a, sizeof a),
                              opr_tensor_describe(t, b, sizeof b));
                break;
            }
            seeds[i] = opr_tensor_retain(g);
        } else {
            if (t->m.numel != 1) {
                rc = opr_fail(OPR_ERR_INVALID, "backward: grad can be omitted only for one-element outputs, "
                              "output %d has %lld elements", i, (long long)t->m.numel);
                break;
            }
            /* the implicit gradient 1 of a one-element output */
            unsigned char one[8];
            opr_dtype_store(t->m.dtype, 1.0, one);
            seeds[i] = opr_tensor_from_data(t->ctx, t->m.dtype, t->m.ndim, t->m.shape, one, t->storage->dev);
            if (!seeds[i]) rc = OPR_ERR_NOMEM;
        }
        roots[i] = t->grad_fn;
    }
    bool prev_mode = opr_grad_mode_set(o.create_graph);
    node_list all, ready;
    list_init(&all);
    list_init(&ready);
    leaf_watch watch_storage = {.ready = o.leaf_ready, .user = o.leaf_ready_user};
    leaf_watch *watch = o.leaf_ready && !cap ? &watch_storage : NULL; /* opr_autograd_grad leaves .grad alone */
    for (int i = 0; i < n_outputs && !rc && watch; i++)
        if (!outputs[i]->grad_fn) rc = watch_add(watch, outputs[i]);
    if (!rc) rc = collect(&all, roots, n_outputs, watch);
    /* seed: gradients of the outputs themselves */
    for (int i = 0; i < n_outputs && !rc; i++) {
        opr_tensor *t = outputs[i];
        opr_tensor *g = seeds[i];
        seeds[i] = NULL;
        if (t->grad_fn) rc = accumulate(ag_pending(t->grad_fn, t->output_nr), g);
        else rc = deliver_leaf(t, g, cap, watch);
    }
    for (int i = 0; i < all.n && !rc; i++)
        if (all.items[i]->deps == 0) rc = push(&ready, all.items[i]);
    while (!rc && ready.n) rc = run_node(ready.items[--ready.n], &o, cap, watch, &ready);
    /* a leaf some edge of which carried no gradient is done too, now */
    for (int i = 0; !rc && watch && i < watch->n; i++)
        if (watch->left[i] > 0) { watch->left[i] = 0; watch->ready(watch->leaves[i], watch->user); }
    if (watch) { free(watch->leaves); free(watch->left); opr_ptr_index_free(&watch->index); }
    for (int i = 0; i < all.n; i++) { /* reset scratch, also after an error */
        opr_node *n = all.items[i];
        n->deps = 0;
        n->queued = false;
        release_pending(n);
    }
    for (int i = 0; i < n_outputs; i++) opr_tensor_release(seeds[i]);
    if (seeds != seeds_small) { free(seeds); free(roots); }
    opr_grad_mode_set(prev_mode);
    list_free(&all);
    list_free(&ready);
    return rc;
}

/* Jagged outputs and their gradients run backward as their values: a jagged
 * gradient must have its output's structure. */
static int unjag_output(const char *who, int i, opr_tensor **t, opr_tensor **g)
{
    opr_tensor *out = *t, *grad = g ? *g : NULL;
    if (grad && !!grad->ragged != !!out->ragged)
        return opr_fail(OPR_ERR_INVALID, "%s: output %d is %s but its gradient is %s", who, i,
                        out->ragged ? "jagged" : "dense", grad->ragged ? "jagged" : "dense");
    if (grad && out->ragged && !opr_ragged_equal(out->ragged, grad->ragged))
        return opr_ragged_mismatch(who, "output", out->ragged, "gradient", grad->ragged);
    *t = opr_jagged_base(out);
    if (grad) *g = opr_jagged_base(grad);
    return OPR_OK;
}

opr_status opr_backward(opr_tensor *root, opr_tensor *grad, const opr_backward_opts *opts)
{
    if (!root) return opr_fail(OPR_ERR_INVALID, "opr_backward: NULL root");
    opr_tensor *g[1] = {grad};
    int rc = unjag_output("opr_backward", 0, &root, g);
    return rc ? rc : backward(&root, g, 1, NULL, opts);
}

opr_status opr_autograd_grad(opr_tensor *const *outputs, opr_tensor *const *grad_outputs, int n_outputs,
                      opr_tensor *const *inputs, int n_inputs, opr_tensor **grads, const opr_backward_opts *opts)
{
    if (!outputs || !inputs || !grads || n_inputs < 1)
        return opr_fail(OPR_ERR_INVALID, "opr_autograd_grad: NULL argument or no inputs");
    for (int i = 0; i < n_inputs; i++) {
        grads[i] = NULL;
        if (!inputs[i]) return opr_fail(OPR_ERR_INVALID, "opr_autograd_grad: input %d is NULL", i);
    }
    if (n_outputs < 1) return opr_fail(OPR_ERR_INVALID, "opr_autograd_grad: no outputs given (%d)", n_outputs);
    /* jagged outputs, gradients and inputs are replaced by their values */
    opr_tensor **mapped = malloc((size_t)(2 * n_outputs + n_inputs) * sizeof *mapped);
    if (!mapped) return opr_fail(OPR_ERR_NOMEM, "opr_autograd_grad: out of memory");
    opr_tensor **outs = mapped, **gouts = mapped + n_outputs, **ins = mapped + 2 * n_outputs;
    int rc = OPR_OK;
    for (int i = 0; i < n_outputs && !rc; i++) {
        outs[i] = outputs[i];
        gouts[i] = grad_outputs ? grad_outputs[i] : NULL;
        if (outs[i]) rc = unjag_output("opr_autograd_grad", i, &outs[i], &gouts[i]);
    }
    for (int i = 0; i < n_inputs; i++) ins[i] = opr_jagged_base(inputs[i]);
    capture cap = {ins, n_inputs, grads};
    if (!rc) rc = backward(outs, gouts, n_outputs, &cap, opts);
    for (int i = 0; i < n_inputs && !rc; i++) { /* the gradient of a jagged input has its structure */
        if (!inputs[i]->ragged || !grads[i]) continue;
        opr_tensor *j = opr_jagged_wrap(grads[i], inputs[i]->ragged);
        opr_tensor_release(grads[i]);
        grads[i] = j;
        if (!j) rc = opr_error_status();
    }
    free(mapped);
    if (rc)
        for (int i = 0; i < n_inputs; i++) { opr_tensor_release(grads[i]); grads[i] = NULL; }
    return rc;
}
