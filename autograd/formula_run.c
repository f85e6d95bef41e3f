/* Runs derivative candidates on real tensors: composite formulas through the
 * dispatcher (so that, under create_graph, they are themselves recorded), kernel
 * entries straight into the backend's fused backward kernel. */
#include "autograd.h"
#include "../registry/expr_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

opr_tensor *ag_zeros(opr_ctx *ctx, const opr_meta *m, opr_device dev)
{
    return opr_tensor_new(ctx, m->dtype, m->ndim, m->shape, dev);
}

/* Slots of node n as real tensors where saved. In create_graph mode a saved output is
 * re-attached to n so that formulas reading `result` stay differentiable. */
static int bind_slots(expr_run *r, opr_node *n, opr_tensor *const *grads_in, bool create_graph, mval *slots,
                      opr_tensor **grads, opr_tensor **results)
{
    const opr_op *op = n->op;
    /* slots has DERIV_MAX_SLOTS entries: the node's, then the formula's own (result,
     * grad, ...), filled below; the rest read as none */
    memcpy(slots, n->slots, (size_t)n->nmetas * sizeof *n->slots);
    memset(slots + n->nmetas, 0, (size_t)(DERIV_MAX_SLOTS - n->nmetas) * sizeof *slots);
    for (int s = 0; s < op->nargs + op->nout; s++) {
        opr_tensor *t = n->saved[s];
        if (!t) continue;
        if (create_graph && s >= op->nargs && !t->grad_fn && opr_dtype_is_floating(t->m.dtype)) {
            opr_tensor *v = opr_tensor_make_view(t, t->m.ndim, t->m.shape, t->m.strides, t->m.offset);
            if (!v || expr_run_keep(r, v)) return OPR_ERR_NOMEM;
            atomic_fetch_add(&n->refs, 1);
            v->grad_fn = n;
            v->output_nr = s - op->nargs;
            v->requires_grad = true;
            t = v;
        }
        r->known[r->nknown++] = t;
        slots[s].k = MV_TENSOR;
        slots[s].u.t = &t->m;
        if (s >= op->nargs) results[s - op->nargs] = t;
    }
    if (n->item_saved) { /* the saved items of the Tensor[] argument, handed to ops as a list */
        slots[n->list_arg] = (mval){.k = MV_TENSORS, .n = n->nitems, .u.ts = n->item_saved};
        r->known_list = n->item_saved;
        r->nknown_list = n->nitems;
    }
    if (n->npieces) { /* an op returning Tensor[]: `grads` is one gradient per piece */
        slots[slot_result(op)] = slots[op->nargs];
        slots[slot_results(op)] = slots[op->nargs];
        slots[slot_grads(op)] = (mval){.k = MV_TENSORS, .n = n->npieces, .u.ts = grads_in};
        r->known_list = grads_in; /* grads[k] may be handed to an op */
        r->nknown_list = n->npieces;
        slots[slot_grad(op)] = (mval){.k = MV_TENSOR, .u.t = &grads_in[0]->m};
        return OPR_OK;
    }
    for (int k = 0; k < op->nout; k++) {
        grads[k] = grads_in[k];
        if (!grads[k] && opr_dtype_is_floating(n->metas[op->nargs + k].dtype)) { /* no gradient flowed into this output: it is zero */
            grads[k] = ag_zeros(r->ctx, &n->metas[op->nargs + k], n->dev);
            if (!grads[k] || expr_run_keep(r, grads[k])) return OPR_ERR_NOMEM;
        }
        r->known[r->nknown++] = grads[k];
    }
    slots[slot_result(op)] = slots[op->nargs];
    if (grads[0]) { slots[slot_grad(op)].k = MV_TENSOR; slots[slot_grad(op)].u.t = &grads[0]->m; }
    else slots[slot_grad(op)].k = MV_NONE;
    slots[slot_grads(op)] = (mval){.k = MV_TENSORS, .n = op->nout, .u.ts = grads};
    slots[slot_results(op)] = (mval){.k = MV_TENSORS, .n = op->nout, .u.ts = results};
    return OPR_OK;
}

static int run_kernel(expr_run *r, opr_node *n, const deriv_cand *c, uint32_t want, opr_tensor *const *grads,
                      opr_tensor **grads_out)
{
    const opr_op *op = n->op;
    /* the planner chose it for the dtype of output 0 (plan.c) */
    const dtype_kernel *k = kernel_for(atomic_load(&c->kernel->kernels[n->dev.type]), n->metas[op->nargs].dtype);
    if (!k) return opr_fail(OPR_ERR_NOT_FOUND, "%s: backend lost kernel %s", op->name, c->kernel->name);
    /* args: the output gradients, then the forward arguments (unsaved tensors as
     * NONE), then the forward outputs (unsaved as NONE) */
    opr_kernel_arg args[2 * OPR_MAX_OUTS + OPR_MAX_ARGS];
    opr_tensor_view views[2 * OPR_MAX_OUTS + OPR_MAX_ARGS];
    int na = 0;
    for (int i = 0; i < op->nout; i++, na++) {
        args[na].struct_size = sizeof args[na];
        if (!grads[i]) { args[na].kind = OPR_ARG_NONE; continue; }
        opr_tensor_fill_view(grads[i], &views[na]);
        args[na] = (opr_kernel_arg){.struct_size = sizeof(opr_kernel_arg), .kind = OPR_ARG_TENSOR, .u.t = &views[na]};
    }
    for (int s = 0; s < op->nargs + op->nout; s++, na++) {
        const mval *v = &n->slots[s];
        args[na].struct_size = sizeof args[na];
        if (s < op->nargs && op->args[s].type != ARG_TENSOR) { /* as in the forward call; a Tensor[]: NONE */
            kernel_arg_of_mval(v, &args[na]);
            continue;
        }
        if (!n->saved[s]) { args[na].kind = OPR_ARG_NONE; continue; }
        opr_tensor_fill_view(n->saved[s], &views[na]);
        args[na] = (opr_kernel_arg){.struct_size = sizeof(opr_kernel_arg), .kind = OPR_ARG_TENSOR, .u.t = &views[na]};
    }
    kcall_frame frame; /* outputs are preallocated: no alloc_output */
    kcall_frame_init(&frame, r->ctx, n->dev, false);
    opr_tensor_view outv[OPR_MAX_ARGS];
    int64_t out_strides[OPR_MAX_ARGS][OPR_MAX_DIMS];
    opr_tensor *outs[OPR_MAX_ARGS] = {NULL};
    uint64_t mask = 0;
    for (int p = 0; p < c->ncover; p++) {
        /* a gradient not wanted stays all zero (plugin.h): kernels of every 2.x minor
         * rely on its numel 0 */
        memset(&outv[p], 0, sizeof outv[p]);
        outv[p].struct_size = sizeof outv[p];
        if (!((want >> c->cover[p]) & 1)) continue;
        /* metadata without data until supports (ABI 2.2) has seen the call */
        opr_meta_fill_view(&n->metas[c->cover[p]], n->dev, out_strides[p], &outv[p]);
        mask |= 1ull << p;
    }
    /* the ABI passes arrays of pointers (the structs may grow) */
    const opr_kernel_arg *arg_ptrs[2 * OPR_MAX_OUTS + OPR_MAX_ARGS];
    opr_tensor_view *out_ptrs[OPR_MAX_ARGS];
    for (int i = 0; i < na; i++) arg_ptrs[i] = &args[i];
    for (int p = 0; p < c->ncover; p++) out_ptrs[p] = &outv[p];
    opr_kernel_call call = {
        .struct_size = sizeof call, .op = c->kernel->name, .args = arg_ptrs, .nargs = na, .outputs = out_ptrs,
        .nout = c->ncover, .grad_input_mask = mask, .host = plugin_host_api(), .host_call = &frame,
        .kernel_data = k->data,
    };
    char why[512];
    const char *refused = kquery_refusal(k, &call, why, sizeof why);
    if (refused) { /* the planner asked on contiguous metadata; these views may be strided */
        opr_fail(OPR_ERR_UNSUPPORTED, "%s (plugin %s) supports: %s", c->kernel->name, k->plugin, refused);
        opr_error_mark_declined();
        return OPR_ERR_UNSUPPORTED;
    }
    for (int p = 0; p < c->ncover; p++) {
        if (!((mask >> p) & 1)) continue;
        const opr_meta *m = &n->metas[c->cover[p]];
        outs[p] = kcall_output_new(&frame, p, m->dtype, m->ndim, m->shape);
        if (!outs[p]) { for (int j = 0; j < p; j++) opr_tensor_release(outs[j]); return OPR_ERR_NOMEM; }
        opr_tensor_fill_view(outs[p], &outv[p]);
    }
    int rc = kcall_run(&frame, k, &call, op, c->cover);
    if (rc) {
        char what[256];
        snprintf(what, sizeof what, "%s (plugin %s)", c->kernel->name, k->plugin);
        rc = kcall_fail(&frame, rc, what);
    }
    for (int p = 0; p < c->ncover; p++) {
        if (rc) opr_tensor_release(outs[p]);
        else if (outs[p]) grads_out[c->cover[p]] = outs[p];
    }
    return rc;
}

/* Under create_graph a fused kernel would cut the graph: use separate formulas that
 * read only what the node saved. */
static const deriv_cand *composite_for(const opr_node *n, int arg)
{
    const deriv_info *d = n->op->deriv;
    for (int i = 0; i < d->ncands; i++) {
        const deriv_cand *c = &d->cands[i];
        if (c->kernel || c->ncover != 1 || c->cover[0] != arg || (c->fast && !n->fast)) continue;
        uint64_t needs = 0, meta = 0;
        deriv_reads(n->op, c, 0, n->slots, &needs, &meta);
        if (!(needs & ~n->plan->save)) return c;
    }
    return NULL;
}

/* The gradient of every piece of a list-returning op's node (new references): what
 * flowed into it, or zeros (the formulas put the pieces together as they are). */
static int piece_grads(opr_node *n, opr_tensor ***out)
{
    opr_tensor **g = calloc((size_t)n->npieces, sizeof *g);
    if (!g) return opr_fail(OPR_ERR_NOMEM, "backward of %s: out of memory", n->op->name);
    for (int k = 0; k < n->npieces; k++) {
        g[k] = n->piece_pending[k] ? opr_tensor_retain(n->piece_pending[k]) : ag_zeros(n->op->ctx, &n->piece_metas[k], n->dev);
        if (!g[k]) {
            for (int j = 0; j < k; j++) opr_tensor_release(g[j]);
            free(g);
            return opr_error_status();
        }
    }
    *out = g;
    return OPR_OK;
}

/* A `tensors[i]:` candidate: its formula once per item that has an edge (an item
 * that does not require grad gets nothing), each item's intermediates freed before the
 * next. */
static int run_per_item(expr_run *r, opr_node *n, const deriv_cand *c, mval *slots, opr_tensor **item_grads)
{
    const opr_op *op = n->op;
    const int mark = r->ntemps;
    for (int j = 0; j < n->nitems; j++) {
        if (!n->items[j].node && !n->items[j].leaf) continue;
        slots[slot_item(op)] = (mval){.k = MV_INT, .u.i = j};
        mval v;
        int rc = expr_run_eval(r, c->formula[0], slots, &v);
        if (rc) return opr_fail_wrap(rc, "item %d", j);
        opr_tensor *g = v.k == MV_TENSOR ? expr_run_tensor(r, v.u.t) : NULL;
        if (!g) return opr_fail(OPR_ERR_INVALID, "%s: the formula for '%s[%d]' did not give a tensor", op->name,
                                op->args[c->cover[0]].name, j);
        item_grads[j] = opr_tensor_retain(g);
        expr_run_rewind(r, mark);
    }
    return OPR_OK;
}

/* Whether every wanted gradient of kernel candidate c has a composite formula that
 * reads only what the node saved. */
static bool composites_cover(const opr_node *n, const deriv_cand *c, uint32_t want)
{
    for (int p = 0; p < c->ncover; p++)
        if ((want >> c->cover[p]) & 1 && !composite_for(n, c->cover[p])) return false;
    return true;
}

/* Kernel candidate c's wanted gradients through composite formulas instead (why: what
 * the error says when one has none). */
static int run_composites(opr_node *n, const deriv_cand *c, uint32_t want, opr_tensor *const *grads_in,
                          opr_tensor **grads_out, bool create_graph, const char *why)
{
    const opr_op *op = n->op;
    for (int p = 0; p < c->ncover; p++) {
        int arg = c->cover[p];
        if (!((want >> arg) & 1)) continue;
        const deriv_cand *alt = composite_for(n, arg);
        if (!alt)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: %s needs a composite formula for '%s' (the plan chose kernel %s)",
                            op->name, why, op->args[arg].name, c->kernel->name);
        int rc = ag_run_candidate(n, alt, 1u << arg, grads_in, grads_out, NULL, create_graph);
        if (rc) return rc;
    }
    return OPR_OK;
}

int ag_run_candidate(opr_node *n, const deriv_cand *c, uint32_t want, opr_tensor *const *grads_in,
                     opr_tensor **grads_out, opr_tensor **item_grads, bool create_graph)
{
    const opr_op *op = n->op;
    if (c->kernel && create_graph) return run_composites(n, c, want, grads_in, grads_out, true, "create_graph");
    expr_run rc_storage;
    expr_run *r = &rc_storage;
    expr_run_init(r, op->ctx, n->dev, n->metas[op->nargs].dtype);
    mval slots[DERIV_MAX_SLOTS];
    opr_tensor *grads[OPR_MAX_OUTS] = {NULL}, *results[OPR_MAX_OUTS] = {NULL};
    opr_tensor **pieces = NULL; /* the pieces' gradients, zeros where none flowed */
    int rc = n->npieces ? piece_grads(n, &pieces) : OPR_OK;
    if (!rc) rc = bind_slots(r, n, pieces ? pieces : grads_in, create_graph, slots, grads, results);
    bool refused = false; /* the fused kernel refused these arguments; formulas stand in */
    if (!rc && c->kernel) {
        rc = run_kernel(r, n, c, want, grads, grads_out);
        if (rc == OPR_ERR_UNSUPPORTED && !atomic_load(&op->ctx->cpu_fallback_off) && composites_cover(n, c, want)) {
            char refusal[1024];
            snprintf(refusal, sizeof refusal, "%s", opr_last_error());
            fallback_log_refusal(op->ctx, c->kernel->name, n->dev.type, refusal,
                                 "computing those gradients with the op's derivative formulas");
            refused = true;
            rc = OPR_OK;
        }
    } else if (!rc && c->per_item) {
        rc = item_grads && n->nitems ? run_per_item(r, n, c, slots, item_grads)
                                     : opr_fail(OPR_ERR_INVALID, "%s: no items to differentiate", op->name);
    } else if (!rc) {
        for (int k = 0; k < c->nlets && !rc; k++) rc = expr_run_eval(r, c->lets[k], slots, &slots[slot_let0(op) + k]);
        for (int p = 0; p < c->ncover && !rc; p++) {
            int arg = c->cover[p];
            if (!((want >> arg) & 1)) continue;
            mval v;
            if ((rc = expr_run_eval(r, c->formula[p], slots, &v))) break;
            opr_tensor *g = v.k == MV_TENSOR ? expr_run_tensor(r, v.u.t) : NULL;
            if (!g) { rc = opr_fail(OPR_ERR_INVALID, "%s: the formula for '%s' did not give a tensor", op->name, op->args[arg].name); break; }
            grads_out[arg] = opr_tensor_retain(g);
        }
    }
    if (rc) rc = opr_fail_wrap(rc, "backward of %s [%s]", op->name, c->label);
    expr_run_done(r);
    for (int k = 0; pieces && k < n->npieces; k++) opr_tensor_release(pieces[k]);
    free(pieces);
    if (refused) rc = run_composites(n, c, want, grads_in, grads_out, false, "a refused fused kernel");
    return rc;
}
