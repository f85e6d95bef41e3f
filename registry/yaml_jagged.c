/* The `jagged:` key of an op entry: how the op takes jagged tensors
 * (registry/jagged_call.c runs the rule; docs/jagged.md documents it).
 *
 *   jagged: elementwise          on the values; dense operands broadcast over the
 *                                non-ragged dims ([D...] or [B, 1, D...])
 *   jagged: rows                 argument 0 jagged, the op applied to its values row by
 *                                row (linear, matmul); the other tensors dense, <= 2-d
 *   jagged: all                  a reduction over every element: on the values
 *   jagged:                      a reduction or softmax over dims named by an argument:
 *     dim: dim                     the argument; None or [] reduce every element
 *     ragged: EXPR                 the op over the ragged dim (dim 1), an expression of
 *                                  the arguments (self is the values) and `offsets`;
 *                                  without it the ragged dim is refused
 *     ragged_result: dense         [B, ...] (the default), or jagged: the values' rows
 * Other dims run the op on the values with the dim shifted; dim 0 (the batch) is
 * refused. */
#include "deriv.h"
#include "yaml_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ragged(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "jagged: ragged must be an expression%s", "");
    const char *names[OPR_MAX_ARGS + 1];
    for (int i = 0; i < op->nargs; i++) names[i] = op->args[i].name;
    names[op->nargs] = "offsets";
    expr_src src = yaml_scalar_src(l, v);
    expr *e = expr_parse(yaml_scalar(v), &src);
    if (!e) return opr_error_status();
    int rc = expr_resolve_formula(e, names, op->nargs + 1, &src);
    if (!rc) {
        char what[128];
        snprintf(what, sizeof what, "jagged rule of %s", op->name);
        pthread_mutex_lock(&l->ctx->lock);
        rc = deriv_link_calls(l->ctx, op, what, e, true); /* ops defined later are linked at first use */
        pthread_mutex_unlock(&l->ctx->lock);
    }
    if (rc) { expr_free(e); return rc; }
    op->jagged.ragged = e;
    size_t len = strlen(yaml_scalar(v)) + sizeof "dim, ragged: ";
    if (!(op->jagged.ragged_text = malloc(len))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    snprintf(op->jagged.ragged_text, len, "dim, ragged: %s", yaml_scalar(v));
    return OPR_OK;
}

static int parse_dim_rule(const loader *l, opr_op *op, const yaml_node_t *v)
{
    op->jagged.kind = JAGGED_DIM;
    op->jagged.dim_arg = -1;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *val = yaml_document_get_node(l->doc, p->value);
        const char *key = yaml_scalar(k), *s = yaml_scalar(val);
        if (!strcmp(key, "dim")) {
            for (int i = 0; s && i < op->nargs; i++)
                if (!strcmp(op->args[i].name, s) && (op->args[i].type == ARG_INT || op->args[i].type == ARG_INT_LIST))
                    op->jagged.dim_arg = i;
            if (op->jagged.dim_arg < 0)
                return yaml_fail_at(l, val, OPR_ERR_PARSE, "jagged: dim must name an int or int[] argument, not '%s'",
                                    s ? s : "?");
        } else if (!strcmp(key, "ragged")) {
            if ((rc = parse_ragged(l, op, val))) return rc;
        } else if (!strcmp(key, "ragged_result")) {
            if (!s || (strcmp(s, "dense") && strcmp(s, "jagged")))
                return yaml_fail_at(l, val, OPR_ERR_PARSE, "jagged: ragged_result is dense or jagged, not '%s'", s ? s : "?");
            op->jagged.ragged_keeps_rows = !strcmp(s, "jagged");
        } else {
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "jagged: unknown key '%s' (expected dim, ragged, ragged_result)", key);
        }
    }
    if (op->jagged.dim_arg < 0) return yaml_fail_at(l, v, OPR_ERR_PARSE, "jagged: a mapping needs 'dim'%s", "");
    return OPR_OK;
}

int yaml_jagged_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (op->nargs < 1 || op->args[0].type != ARG_TENSOR)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "jagged: the op must take a Tensor first%s", "");
    if (op->inplace) return yaml_fail_at(l, v, OPR_ERR_PARSE, "jagged: in-place ops cannot take jagged tensors%s", "");
    if (v->type == YAML_MAPPING_NODE) return parse_dim_rule(l, op, v);
    const char *s = yaml_scalar(v);
    static const struct { const char *name; jagged_kind kind; } kinds[] = {
        {"elementwise", JAGGED_ELEMENTWISE}, {"rows", JAGGED_ROWS}, {"all", JAGGED_ALL},
    };
    for (size_t i = 0; s && i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(s, kinds[i].name)) { op->jagged.kind = kinds[i].kind; return OPR_OK; }
    return yaml_fail_at(l, v, OPR_ERR_PARSE, "jagged: expected elementwise, rows, all or {dim: ..}, not '%s'", s ? s : "?");
}

const char *opr_op_jagged_rule(const opr_op *op)
{
    if (!op) return NULL;
    switch (op->jagged.kind) {
    case JAGGED_ELEMENTWISE: return "elementwise";
    case JAGGED_ROWS: return "rows";
    case JAGGED_ALL: return "all";
    case JAGGED_DIM: return op->jagged.ragged_text ? op->jagged.ragged_text : "dim";
    default: return NULL;
    }
}
