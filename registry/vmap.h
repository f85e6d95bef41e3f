/* Shared by opr_vmap (vmap.c), the batching of op calls (vmap_call.c) and the calls
 * with jagged arguments (jagged_call.c): the tensors made along the way, and the few
 * reshaping steps they need, each an op call through opr_call so that autograd
 * records it. */
#ifndef OPREG_VMAP_H
#define OPREG_VMAP_H

#include "registry.h"

/* Tensors made during one call, released together. */
typedef struct vtemps {
    opr_tensor **t;
    int n, cap;
} vtemps;

/* Takes ownership of t (released on failure too); OPR_OK or OPR_ERR_NOMEM. */
int vtemps_keep(vtemps *tmp, opr_tensor *t);
void vtemps_release(vtemps *tmp);

/* Runs one of the library's own ops (registry_engine_op) with one output, kept. */
int vm_call(opr_ctx *ctx, vtemps *tmp, int which, const opr_value *args, int nargs, opr_tensor **out);
/* t with dim `from` moved to position `to` (a permute). */
int vm_movedim(opr_ctx *ctx, vtemps *tmp, opr_tensor *t, int from, int to, opr_tensor **out);
/* t [S...] as [n, S...] (unsqueeze and expand: a view). */
int vm_expand_batch(opr_ctx *ctx, vtemps *tmp, opr_tensor *t, int64_t n, opr_tensor **out);
/* items (n tensors of one shape but along dim) one after the other along dim; through
 * narrow_scatter when autograd must see it, else copied. *out is a new reference.
 * Items of other shapes: OPR_ERR_UNSUPPORTED (a data-dependent shape). */
int vm_concat(opr_ctx *ctx, opr_tensor *const *items, int64_t n, int dim, opr_tensor **out);
/* items (n tensors of one shape S) stacked into [.., n, ..] (n inserted at dim). */
int vm_stack(opr_ctx *ctx, opr_tensor *const *items, int64_t n, int dim, opr_tensor **out);

#endif
