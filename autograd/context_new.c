/* opr_ctx_new: the registry's context with the autograd layer attached. The layers form
 * a line, core <- registry <- autograd: the lower ones reach autograd only through the
 * table and the recorder handed down here. */
#include "autograd.h"

static const opr_autograd_iface autograd_iface = {
    .node_release = ag_node_release,
    .leaf_grad_has_graph = ag_leaf_grad_has_graph,
    .leaf_cycle_collect = ag_leaf_cycle_collect,
};

opr_ctx *opr_ctx_new(const opr_ctx_opts *opts)
{
    opr_ctx *ctx = registry_ctx_new(opts, &autograd_iface, ag_record);
    if (ctx) ctx->reg->record_list = ag_record_list; /* no op runs before the context is returned */
    return ctx;
}
