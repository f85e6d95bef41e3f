/* The `forward:` key of an op entry: the op is a composite of other ops (composite.h).
 *
 *   forward: sqrt(clamp_min(d2(x1, x2), 0))        one expression, or
 *   forward:
 *     let:
 *       d2: ...                                     up to 4 intermediates, in order
 *     result: sqrt(clamp_min(d2, 0))
 *
 * The expressions read the op's arguments (and earlier lets) and call ops by name. */
#include "composite.h"
#include "deriv.h"
#include "yaml_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses one expression of the forward; it may read the names given. Calls of ops
 * already defined are checked against their schemas now, the others when linked. */
static int forward_expr(const loader *l, opr_op *op, const yaml_node_t *v, const char **names, int nnames,
                        expr **out)
{
    if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "forward: expected an expression%s", ""); /* or reference: */
    expr_src src = yaml_scalar_src(l, v);
    expr *e = expr_parse(yaml_scalar(v), &src);
    if (!e) return opr_error_status();
    int rc = expr_resolve_formula(e, names, nnames, &src);
    if (!rc) {
        char what[128];
        snprintf(what, sizeof what, "forward of %s", op->name);
        pthread_mutex_lock(&l->ctx->lock);
        rc = deriv_link_calls(l->ctx, op, what, e, true);
        pthread_mutex_unlock(&l->ctx->lock);
    }
    if (rc) { expr_free(e); return rc; }
    *out = e;
    return OPR_OK;
}

/* "a = EXPR; b = EXPR; EXPR": the forward as opreg plan shows it. */
static int forward_text(composite_def *cd, const yaml_node_t *const *lets, const yaml_node_t *result)
{
    size_t len = strlen(yaml_scalar(result)) + 1;
    for (int k = 0; k < cd->nlets; k++) len += strlen(cd->let_names[k]) + strlen(yaml_scalar(lets[k])) + 5;
    if (!(cd->text = malloc(len))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    size_t used = 0;
    for (int k = 0; k < cd->nlets; k++)
        used += (size_t)snprintf(cd->text + used, len - used, "%s = %s; ", cd->let_names[k], yaml_scalar(lets[k]));
    snprintf(cd->text + used, len - used, "%s", yaml_scalar(result));
    return OPR_OK;
}

/* A `forward:` or `reference:` value into *slot (which op_free frees with the op when
 * the entry is refused). */
static int forward_def(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v, composite_def **slot)
{
    composite_def *cd = calloc(1, sizeof *cd);
    if (!cd) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    *slot = cd;
    cd->line = (int)k->start_mark.line + 1;
    cd->col = (int)k->start_mark.column + 1;
    const char *names[OPR_MAX_ARGS + 1 + COMPOSITE_MAX_LETS];
    int nnames = 0;
    for (int i = 0; i < op->nargs; i++) names[nnames++] = op->args[i].name;
    if (op->list_out) names[nnames++] = "i"; /* piece i of a `-> Tensor[]` op (list_call.c) */
    const yaml_node_t *lets[COMPOSITE_MAX_LETS], *result = v;
    int rc = OPR_OK;
    if (v->type == YAML_MAPPING_NODE) {
        const yaml_node_t *let = NULL;
        result = NULL;
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            if ((rc = yaml_check_key(l, v, p))) return rc;
            yaml_node_t *fk = yaml_document_get_node(l->doc, p->key), *fv = yaml_document_get_node(l->doc, p->value);
            if (!strcmp(yaml_scalar(fk), "let")) let = fv;
            else if (!strcmp(yaml_scalar(fk), "result")) result = fv;
            else return yaml_fail_at(l, fk, OPR_ERR_PARSE, "forward: unknown key '%s' (expected let and result)", yaml_scalar(fk));
        }
        if (!result) return yaml_fail_at(l, v, OPR_ERR_PARSE, "forward: a mapping needs 'result'%s", "");
        if (let && let->type != YAML_MAPPING_NODE)
            return yaml_fail_at(l, let, OPR_ERR_PARSE, "forward: let must map names to expressions%s", "");
        for (yaml_node_pair_t *q = let ? let->data.mapping.pairs.start : NULL; q && q < let->data.mapping.pairs.top; q++) {
            if ((rc = yaml_check_key(l, let, q))) return rc;
            yaml_node_t *lk = yaml_document_get_node(l->doc, q->key), *lv = yaml_document_get_node(l->doc, q->value);
            if (cd->nlets == COMPOSITE_MAX_LETS)
                return yaml_fail_at(l, lk, OPR_ERR_PARSE, "forward: let: at most %s named intermediates", "4");
            for (int i = 0; i < nnames; i++)
                if (!strcmp(names[i], yaml_scalar(lk)))
                    return yaml_fail_at(l, lk, OPR_ERR_PARSE, "forward: let: '%s' is already an argument's name", yaml_scalar(lk));
            expr *e = NULL;
            if ((rc = forward_expr(l, op, lv, names, nnames, &e))) return rc;
            char *name = strdup(yaml_scalar(lk));
            if (!name) { expr_free(e); return opr_fail(OPR_ERR_NOMEM, "out of memory"); }
            cd->lets[cd->nlets] = e;
            cd->let_names[cd->nlets] = name;
            names[nnames++] = name;
            lets[cd->nlets++] = lv;
        }
    }
    if ((rc = forward_expr(l, op, result, names, nnames, &cd->result))) return rc;
    return forward_text(cd, lets, result);
}

int yaml_forward_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v)
{
    if (op->reference) return yaml_fail_at(l, k, OPR_ERR_PARSE, "forward: an op with reference: runs kernels%s", "");
    return forward_def(l, op, k, v, &op->composite);
}

int yaml_reference_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v)
{
    /* a composite runs its forward everywhere: it needs no reference */
    if (op->composite) return yaml_fail_at(l, k, OPR_ERR_PARSE, "reference: a composite op (forward:) needs none%s", "");
    return forward_def(l, op, k, v, &op->reference);
}
