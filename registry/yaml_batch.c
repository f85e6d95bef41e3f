/* The `batch:` key of an op entry: how the op runs on batched tensors of opr_vmap
 * (registry/vmap_call.c runs the rules; docs/vmap.md documents them).
 *
 *   batch: elementwise        batched operands padded to one rank, unbatched broadcast
 *   batch: matmul             matmul's broadcasting (mm, matmul)
 *   batch: batch_dims         leading batch dims that must match (cdist, bmm)
 *   batch: rows               only argument 0 may be batched (linear)
 *   batch: unbatched          the result does not depend on batched values (new_zeros)
 *   batch: data_dependent     argument 0 batched, the others unbatched (masked_select)
 *   batch: {dims: [ARG, ..], expand: [ARG, ..]}
 *                             int / int[] arguments naming dims of argument 0 are
 *                             shifted past the batch dim; the tensor arguments listed in
 *                             expand are expanded to the batch when unbatched, the
 *                             others must be unbatched
 *   batch: {size: ARG}        an int[] argument is a per-sample shape (sum_to)
 * An op without the key loops over the samples, unless it is a host view (view:),
 * whose kind says how. */
#include "yaml_loader.h"

#include <string.h>

static int arg_named(const opr_op *op, const char *name)
{
    for (int i = 0; name && i < op->nargs; i++)
        if (!strcmp(op->args[i].name, name)) return i;
    return -1;
}

/* A list of argument names, of the types `ok` accepts, into a bit mask. */
static int arg_list(const loader *l, const opr_op *op, const yaml_node_t *v, bool tensors, uint32_t *mask)
{
    if (v->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, v, OPR_ERR_PARSE, "batch: expected a list of argument names%s", "");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        const yaml_node_t *n = yaml_document_get_node(l->doc, *it);
        int a = arg_named(op, yaml_scalar(n));
        const bool fits = a >= 0 && (tensors ? op->args[a].type == ARG_TENSOR
                                             : op->args[a].type == ARG_INT || op->args[a].type == ARG_INT_LIST);
        if (!fits)
            return yaml_fail_at(l, n, OPR_ERR_PARSE, tensors ? "batch: expand: '%s' is not a Tensor argument"
                                                             : "batch: dims: '%s' is not an int or int[] argument",
                                yaml_scalar(n) ? yaml_scalar(n) : "?");
        *mask |= 1u << a;
    }
    return OPR_OK;
}

static int parse_mapping(const loader *l, opr_op *op, const yaml_node_t *v)
{
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *val = yaml_document_get_node(l->doc, p->value);
        const char *key = yaml_scalar(k);
        if (!strcmp(key, "dims")) {
            op->batch.kind = BATCH_DIMS;
            if ((rc = arg_list(l, op, val, false, &op->batch.dim_args))) return rc;
        } else if (!strcmp(key, "expand")) {
            op->batch.kind = BATCH_DIMS; /* with no dims: only the expanding */
            if ((rc = arg_list(l, op, val, true, &op->batch.expand_args))) return rc;
        } else if (!strcmp(key, "size")) {
            int a = arg_named(op, yaml_scalar(val));
            if (a < 0 || op->args[a].type != ARG_INT_LIST)
                return yaml_fail_at(l, val, OPR_ERR_PARSE, "batch: size: '%s' is not an int[] argument",
                                    yaml_scalar(val) ? yaml_scalar(val) : "?");
            op->batch.kind = BATCH_SIZE;
            op->batch.size_arg = a;
        } else {
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "batch: unknown key '%s' (expected dims, expand or size)", key);
        }
    }
    if (op->batch.kind == BATCH_LOOP || (op->batch.kind == BATCH_SIZE && (op->batch.dim_args || op->batch.expand_args)))
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "batch: a mapping is {dims: [..], expand: [..]} or {size: ARG}%s", "");
    return OPR_OK;
}

int yaml_batch_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (op->nargs < 1 || op->inplace)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "batch: the op must take arguments and not be in place%s", "");
    if (v->type == YAML_MAPPING_NODE) return parse_mapping(l, op, v);
    const char *s = yaml_scalar(v);
    static const struct { const char *name; batch_kind kind; } kinds[] = {
        {"elementwise", BATCH_ELEMENTWISE}, {"matmul", BATCH_MATMUL}, {"batch_dims", BATCH_BATCH_DIMS},
        {"rows", BATCH_ROWS}, {"unbatched", BATCH_UNBATCHED}, {"data_dependent", BATCH_DATA_DEPENDENT},
        {"loop", BATCH_LOOP},
    };
    for (size_t i = 0; s && i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(s, kinds[i].name)) { op->batch.kind = kinds[i].kind; return OPR_OK; }
    return yaml_fail_at(l, v, OPR_ERR_PARSE, "batch: expected elementwise, matmul, batch_dims, rows, unbatched, "
                        "data_dependent, loop, {dims: ..} or {size: ..}, not '%s'", s ? s : "?");
}

const char *opr_op_batching_rule(const opr_op *op)
{
    if (!op) return NULL;
    static const char *const names[] = {
        [BATCH_LOOP] = "loop", [BATCH_ELEMENTWISE] = "elementwise", [BATCH_DIMS] = "dims",
        [BATCH_MATMUL] = "matmul", [BATCH_BATCH_DIMS] = "batch_dims", [BATCH_ROWS] = "rows",
        [BATCH_SIZE] = "size", [BATCH_UNBATCHED] = "unbatched", [BATCH_DATA_DEPENDENT] = "data_dependent",
        [BATCH_VIEW] = "view",
    };
    if (op->batch.kind == BATCH_LOOP && op->view) return names[BATCH_VIEW];
    return names[op->batch.kind];
}
