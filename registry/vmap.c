/* opr_vmap: runs a per-sample callback over a batch (docs/vmap.md). Each batched input
 * is moved to have its batch at dim 0 and wrapped as a batched tensor of a new level;
 * the callback's ops are batched by vmap_call.c; the outputs are unwrapped and their
 * batch moved to out_dims. With a chunk size the callback runs once per chunk and the
 * outputs are stacked. */
#include "vmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most chunks one call runs (see opr_vmap_opts.chunk_size). */
#define VMAP_MAX_CHUNKS 16384

/* ------------------------------------------------------------------ shared steps */

int vtemps_keep(vtemps *tmp, opr_tensor *t)
{
    if (!t) return opr_error_status();
    if (tmp->n == tmp->cap) {
        int cap = tmp->cap ? 2 * tmp->cap : 16;
        opr_tensor **grown = realloc(tmp->t, (size_t)cap * sizeof *grown);
        if (!grown) { opr_tensor_release(t); return opr_fail(OPR_ERR_NOMEM, "opr_vmap: out of memory"); }
        tmp->t = grown;
        tmp->cap = cap;
    }
    tmp->t[tmp->n++] = t;
    return OPR_OK;
}

void vtemps_release(vtemps *tmp)
{
    for (int i = 0; i < tmp->n; i++) opr_tensor_release(tmp->t[i]);
    free(tmp->t);
    *tmp = (vtemps){0};
}

int vm_call(opr_ctx *ctx, vtemps *tmp, int which, const opr_value *args, int nargs, opr_tensor **out)
{
    const opr_op *op = registry_engine_op(ctx, which);
    if (!op) return opr_error_status();
    *out = NULL;
    int rc = opr_call(op, args, nargs, out, 1);
    return rc ? rc : vtemps_keep(tmp, *out);
}

int vm_movedim(opr_ctx *ctx, vtemps *tmp, opr_tensor *t, int from, int to, opr_tensor **out)
{
    if (from == to) { *out = t; return OPR_OK; }
    int64_t perm[OPR_MAX_DIMS];
    for (int d = 0, k = 0; d < t->m.ndim; d++) {
        if (d == to) perm[d] = from;
        else { if (k == from) k++; perm[d] = k++; }
    }
    opr_value a[2] = {opr_v_tensor(t), opr_v_ints(perm, t->m.ndim)};
    return vm_call(ctx, tmp, ENGINE_OP_PERMUTE, a, 2, out);
}

int vm_expand_batch(opr_ctx *ctx, vtemps *tmp, opr_tensor *t, int64_t n, opr_tensor **out)
{
    opr_value u[2] = {opr_v_tensor(t), opr_v_int(0)};
    opr_tensor *one;
    int rc = vm_call(ctx, tmp, ENGINE_OP_UNSQUEEZE, u, 2, &one);
    if (rc) return rc;
    int64_t size[OPR_MAX_DIMS];
    memcpy(size, one->m.shape, sizeof size);
    size[0] = n;
    opr_value e[2] = {opr_v_tensor(one), opr_v_ints(size, one->m.ndim)};
    return vm_call(ctx, tmp, ENGINE_OP_EXPAND, e, 2, out);
}

int vm_concat(opr_ctx *ctx, opr_tensor *const *items, int64_t n, int dim, opr_tensor **out)
{
    const opr_tensor *first = items[0];
    *out = NULL;
    int64_t shape[OPR_MAX_DIMS];
    memcpy(shape, first->m.shape, sizeof shape);
    shape[dim] = 0;
    bool graph = false;
    for (int64_t i = 0; i < n; i++) {
        const opr_tensor *t = items[i];
        bool same = t->m.dtype == first->m.dtype && t->m.ndim == first->m.ndim;
        for (int d = 0; same && d < t->m.ndim; d++) same = d == dim || t->m.shape[d] == first->m.shape[d];
        if (!same) {
            char a[96], b[96];
            return opr_fail(OPR_ERR_UNSUPPORTED, "opr_vmap: the samples' results differ in shape (%s and %s): a "
                            "data-dependent output size cannot be batched", opr_tensor_describe(first, a, sizeof a),
                            opr_tensor_describe(t, b, sizeof b));
        }
        shape[dim] += t->m.shape[dim];
        graph |= t->requires_grad || t->bt_phys; /* batched parts (nested vmap) are only read through ops */
    }
    graph &= opr_grad_mode_enabled();
    vtemps tmp = {0};
    int rc = OPR_OK;
    opr_tensor *acc = NULL;
    if (!graph) { /* plain copies into one tensor */
        acc = opr_tensor_empty(ctx, first->m.dtype, first->m.ndim, shape, first->storage->dev);
        for (int64_t i = 0, at = 0; acc && !rc && i < n; at += items[i]->m.shape[dim], i++) {
            opr_tensor *slot = opr_tensor_narrow(acc, dim, at, items[i]->m.shape[dim]);
            rc = slot ? opr_tensor_copy_into(slot, items[i]) : opr_error_status();
            opr_tensor_release(slot);
        }
        if (!acc) rc = opr_error_status();
    } else if (n == 1) {
        acc = opr_tensor_retain(items[0]);
    } else { /* recorded: the two halves, then zeros with each half written in
              * (narrow_scatter is differentiable in both); by halves, the copies of a
              * long list cost O(n log n) elements, not O(n^2) */
        opr_tensor *half[2] = {NULL, NULL};
        const int64_t mid = n / 2;
        rc = vm_concat(ctx, items, mid, dim, &half[0]);
        if (!rc) rc = vm_concat(ctx, items + mid, n - mid, dim, &half[1]);
        opr_value z[2] = {opr_v_tensor((opr_tensor *)first), opr_v_ints(shape, first->m.ndim)};
        if (!rc) rc = vm_call(ctx, &tmp, ENGINE_OP_NEW_ZEROS, z, 2, &acc);
        for (int h = 0; h < 2 && !rc; h++) {
            opr_tensor *next;
            opr_value s[4] = {opr_v_tensor(acc), opr_v_tensor(half[h]), opr_v_int(dim),
                              opr_v_int(h ? half[0]->m.shape[dim] : 0)};
            if (!(rc = vm_call(ctx, &tmp, ENGINE_OP_NARROW_SCATTER, s, 4, &next))) acc = next;
        }
        opr_tensor_release(half[0]);
        opr_tensor_release(half[1]);
        if (rc) acc = NULL;
        opr_tensor_retain(acc);
    }
    vtemps_release(&tmp);
    if (rc) { opr_tensor_release(acc); return rc; }
    *out = acc;
    return OPR_OK;
}

int vm_stack(opr_ctx *ctx, opr_tensor *const *items, int64_t n, int dim, opr_tensor **out)
{
    *out = NULL;
    vtemps tmp = {0};
    opr_tensor **ones = malloc((size_t)n * sizeof *ones);
    int rc = ones ? OPR_OK : opr_fail(OPR_ERR_NOMEM, "opr_vmap: out of memory");
    for (int64_t i = 0; i < n && !rc; i++) { /* each item with a dim of 1 at `dim` */
        opr_value u[2] = {opr_v_tensor(items[i]), opr_v_int(dim)};
        rc = vm_call(ctx, &tmp, ENGINE_OP_UNSQUEEZE, u, 2, &ones[i]);
    }
    if (!rc) rc = vm_concat(ctx, ones, n, dim, out);
    free(ones);
    vtemps_release(&tmp);
    return rc;
}

/* ------------------------------------------------------------------ opr_vmap */

typedef struct vmap_args {
    opr_ctx *ctx;
    opr_vmap_fn fn;
    void *user;
    opr_tensor *const *in;
    int nin, nout;
    int in_dim[64];        /* normalised: -1 unbatched */
    const int *out_dims;
    int64_t n;             /* batch size */
} vmap_args;

static int check_inputs(vmap_args *v, const int *in_dims)
{
    int first = -1;
    for (int i = 0; i < v->nin; i++) {
        const opr_tensor *t = v->in[i];
        if (!t) return opr_fail(OPR_ERR_INVALID, "opr_vmap: input %d is NULL", i);
        if (t->ctx != v->ctx) return opr_fail(OPR_ERR_INVALID, "opr_vmap: input %d belongs to another context", i);
        if (t->ragged) return opr_jagged_refuse(t, "opr_vmap");
        const char *gone = t->bt_phys ? opr_vmap_level_gone(t->bt_level) : NULL;
        if (gone) return opr_fail(OPR_ERR_INVALID, "opr_vmap: input %d is a batched tensor of %s", i, gone);
        int d = in_dims ? in_dims[i] : 0;
        if (d == -1) { v->in_dim[i] = -1; continue; }
        if (d < 0 || d >= t->m.ndim)
            return opr_fail(OPR_ERR_INVALID, "opr_vmap: in_dims[%d] = %d is out of range for a %d-d input (0..%d, or -1 "
                            "for an unbatched input)", i, d, t->m.ndim, t->m.ndim - 1);
        v->in_dim[i] = d;
        if (first < 0) { first = i; v->n = t->m.shape[d]; }
        else if (t->m.shape[d] != v->n)
            return opr_fail(OPR_ERR_INVALID, "opr_vmap: batch sizes disagree: input %d has %lld at dim %d, input %d has "
                            "%lld at dim %d", first, (long long)v->n, v->in_dim[first], i, (long long)t->m.shape[d], d);
    }
    if (first < 0) return opr_fail(OPR_ERR_INVALID, "opr_vmap: no input is batched (every in_dims entry is -1)");
    if (v->n < 1) return opr_fail(OPR_ERR_INVALID, "opr_vmap: the batch is empty (size 0 at dim %d of input %d)",
                                  v->in_dim[first], first);
    return OPR_OK;
}

/* An input returned as it is (out[k] == in[i], the identity) may come with a reference
 * the callback took (opr_tensor_retain, or an op such as contiguous that hands its
 * argument back) or without one (`out[0] = in[0]`). The references the input gained
 * during the callback (refs_before: its count before) bound how many of its output
 * slots were given one; the host takes a reference for each of the others, so that
 * releasing outs[] is balanced. A reference kept elsewhere meanwhile (a recorded op
 * that saved the input) counts as given: docs/vmap.md states the rule. */
static void take_returned_inputs(opr_tensor *const *ins, const int *refs_before, int nin, opr_tensor **outs, int nout)
{
    for (int i = 0; i < nin; i++) {
        bool first = true; /* the same tensor at two inputs is counted once */
        for (int j = 0; j < i && first; j++) first = ins[j] != ins[i];
        int slots = 0;
        for (int k = 0; first && k < nout; k++) slots += outs[k] == ins[i];
        if (!slots) continue;
        for (int missing = slots - (atomic_load(&ins[i]->refs) - refs_before[i]); missing > 0; missing--)
            opr_tensor_retain(ins[i]);
    }
}

/* Runs the callback on samples [start, start + n) and leaves each output in res[k],
 * its batch at out_dims[k] (new references). */
static int run_chunk(const vmap_args *v, int64_t start, int64_t n, opr_tensor **res)
{
    const int64_t level = opr_vmap_level_push();
    if (!level) return opr_fail(OPR_ERR_UNSUPPORTED, "opr_vmap: nested more than %d deep", OPR_VMAP_MAX_DEPTH);
    if (level < 0) return opr_fail(OPR_ERR_NOMEM, "opr_vmap: out of memory");
    vtemps tmp = {0};
    opr_tensor *ins[64] = {NULL}, *outs[64] = {NULL};
    int rc = OPR_OK;
    for (int i = 0; i < v->nin && !rc; i++) {
        opr_tensor *t = v->in[i];
        if (v->in_dim[i] < 0) { ins[i] = opr_tensor_retain(t); continue; }
        opr_tensor *moved, *part = NULL;
        if ((rc = vm_movedim(v->ctx, &tmp, t, v->in_dim[i], 0, &moved))) break;
        part = moved;
        if (n != v->n) {
            opr_value a[4] = {opr_v_tensor(moved), opr_v_int(0), opr_v_int(start), opr_v_int(n)};
            if ((rc = vm_call(v->ctx, &tmp, ENGINE_OP_NARROW, a, 4, &part))) break;
        }
        if (!(ins[i] = opr_batched_wrap(part, level))) rc = opr_error_status();
        /* a sample requires grad when its batch does: the callback may ask for
         * per-sample gradients with respect to it (a leaf of the per-sample graph) */
        else ins[i]->requires_grad = part->requires_grad;
    }
    if (!rc) {
        int refs[64];
        for (int i = 0; i < v->nin; i++) refs[i] = atomic_load(&ins[i]->refs);
        rc = v->fn(v->user, ins, v->nin, outs, v->nout);
        take_returned_inputs(ins, refs, v->nin, outs, v->nout);
        if (rc < OPR_ERR_MISMATCH || rc > OPR_OK) /* not an opr_status: callers switch on those */
            rc = opr_fail(OPR_ERR_BACKEND, "opr_vmap: the callback returned %d, which is not an opr_status", rc);
        else if (rc && !*opr_last_error())
            rc = opr_fail(rc, "opr_vmap: the callback failed (status %s) without a message", opr_status_name(rc));
    }
    for (int k = 0; k < v->nout && !rc; k++) {
        opr_tensor *o = outs[k];
        const int want = v->out_dims ? v->out_dims[k] : 0;
        if (!o) { rc = opr_fail(OPR_ERR_INVALID, "opr_vmap: the callback left output %d NULL", k); break; }
        const bool batched = o->bt_phys && o->bt_level == level;
        const char *gone = o->bt_phys && !batched ? opr_vmap_level_gone(o->bt_level) : NULL;
        if (gone) { rc = opr_fail(OPR_ERR_INVALID, "opr_vmap: output %d is a batched tensor of %s", k, gone); break; }
        if (want == -1) {
            if (batched) { rc = opr_fail(OPR_ERR_INVALID, "opr_vmap: output %d differs by sample but out_dims[%d] is -1 "
                                         "(an unbatched output)", k, k); break; }
            res[k] = opr_tensor_retain(o);
            continue;
        }
        if (want < 0 || want > o->m.ndim) {
            rc = opr_fail(OPR_ERR_INVALID, "opr_vmap: out_dims[%d] = %d is out of range for output %d, which has %d dims "
                          "per sample (0..%d, or -1 for an unbatched output)", k, want, k, o->m.ndim, o->m.ndim);
            break;
        }
        opr_tensor *phys = batched ? o->bt_phys : NULL, *moved;
        if (!batched && (rc = vm_expand_batch(v->ctx, &tmp, o, n, &phys))) break;
        if ((rc = vm_movedim(v->ctx, &tmp, phys, 0, want, &moved))) break;
        res[k] = opr_tensor_retain(moved);
    }
    for (int i = 0; i < v->nin; i++) opr_tensor_release(ins[i]);
    for (int k = 0; k < v->nout; k++) opr_tensor_release(outs[k]);
    vtemps_release(&tmp);
    opr_vmap_level_pop();
    if (rc)
        for (int k = 0; k < v->nout; k++) { opr_tensor_release(res[k]); res[k] = NULL; }
    return rc;
}

opr_status opr_vmap(opr_ctx *ctx, opr_vmap_fn fn, void *user, opr_tensor *const *in, const int *in_dims, int nin,
                    opr_tensor **out, const int *out_dims, int nout, const opr_vmap_opts *opts)
{
    for (int k = 0; out && k < nout; k++) out[k] = NULL;
    if (!ctx || !fn || !in || !out) return opr_fail(OPR_ERR_INVALID, "opr_vmap: NULL context, function, inputs or outputs");
    if (nin < 1 || nin > 64 || nout < 1 || nout > 64)
        return opr_fail(OPR_ERR_INVALID, "opr_vmap: %d inputs and %d outputs given (1 to 64 each)", nin, nout);
    opr_vmap_opts o;
    int rc = opr_struct_in(&o, sizeof o, opts, OPR_VMAP_OPTS_STRUCT_SIZE_0_1, "opr_vmap", "opr_vmap_opts");
    if (rc) return rc;
    if (o.chunk_size < 0) return opr_fail(OPR_ERR_INVALID, "opr_vmap: negative chunk_size %lld", (long long)o.chunk_size);
    vmap_args v = {.ctx = ctx, .fn = fn, .user = user, .in = in, .nin = nin, .nout = nout, .out_dims = out_dims};
    if ((rc = check_inputs(&v, in_dims))) return rc;
    const int64_t chunk = o.chunk_size && o.chunk_size < v.n ? o.chunk_size : v.n;
    if (chunk == v.n) return run_chunk(&v, 0, v.n, out);

    /* chunks: each output's parts, then stacked along its batch dim; every part (and its
     * graph) lives until then, so a chunk size that makes very many is refused */
    const int64_t nchunks = (v.n + chunk - 1) / chunk;
    if (nchunks > VMAP_MAX_CHUNKS)
        return opr_fail(OPR_ERR_UNSUPPORTED, "opr_vmap: chunk_size %lld makes %lld chunks of a batch of %lld; at most %d "
                        "are run", (long long)chunk, (long long)nchunks, (long long)v.n, VMAP_MAX_CHUNKS);
    opr_tensor **parts = calloc((size_t)(nchunks * nout), sizeof *parts);
    if (!parts) return opr_fail(OPR_ERR_NOMEM, "opr_vmap: out of memory");
    for (int64_t c = 0; c < nchunks && !rc; c++) {
        int64_t start = c * chunk, n = v.n - start < chunk ? v.n - start : chunk;
        rc = run_chunk(&v, start, n, parts + c * nout);
    }
    for (int k = 0; k < nout && !rc; k++) {
        const int dim = out_dims ? out_dims[k] : 0;
        if (dim == -1) { out[k] = opr_tensor_retain(parts[k]); continue; } /* unbatched: the first chunk's */
        opr_tensor **col = malloc((size_t)nchunks * sizeof *col);
        if (!col) { rc = opr_fail(OPR_ERR_NOMEM, "opr_vmap: out of memory"); break; }
        for (int64_t c = 0; c < nchunks; c++) col[c] = parts[c * nout + k];
        rc = vm_concat(ctx, col, nchunks, dim, &out[k]);
        free(col);
    }
    for (int64_t i = 0; i < nchunks * nout; i++) opr_tensor_release(parts[i]);
    free(parts);
    if (rc)
        for (int k = 0; k < nout; k++) { opr_tensor_release(out[k]); out[k] = NULL; }
    return rc;
}
