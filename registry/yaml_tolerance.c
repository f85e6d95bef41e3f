/* The `tolerance:` key of an op entry: how far a backend's result may be from the CPU
 * reference in f64, per dtype, for ops whose kernels are legitimately less exact than
 * the defaults of `opreg check` allow (docs/conformance.md, "Tolerances"):
 *
 *   tolerance: {f32: 1e-3, f16: {rtol: 5e-2, atol: 1e-2}}
 *
 * A number sets rtol and atol alike; a mapping sets either or both (the other keeps the
 * default). */
#include "yaml_loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int parse_tol(const loader *l, const yaml_node_t *n, double *out)
{
    const char *text = yaml_scalar(n);
    char *end = NULL;
    double v = text ? strtod(text, &end) : NAN;
    if (!text || end == text || *end || !(v >= 0) || !isfinite(v))
        return yaml_fail_at(l, n, OPR_ERR_PARSE, "tolerance: '%s' is not a number >= 0", text ? text : "?");
    *out = v;
    return OPR_OK;
}

int yaml_tolerance_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "tolerance: expected a mapping of dtypes to tolerances%s", "");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *t = yaml_document_get_node(l->doc, p->value);
        opr_dtype dt;
        if (!yaml_scalar(k) || opr_dtype_parse(yaml_scalar(k), &dt) || !opr_dtype_is_floating(dt))
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "tolerance: '%s' is not a floating dtype",
                                yaml_scalar(k) ? yaml_scalar(k) : "?");
        double *rtol = &op->tol_rtol[dt], *atol = &op->tol_atol[dt];
        if (t->type != YAML_MAPPING_NODE) {
            if ((rc = parse_tol(l, t, rtol))) return rc;
            *atol = *rtol;
            op->tol_rtol_set |= OPR_DTYPE_BIT(dt);
            op->tol_atol_set |= OPR_DTYPE_BIT(dt);
            continue;
        }
        for (yaml_node_pair_t *q = t->data.mapping.pairs.start; q < t->data.mapping.pairs.top; q++) {
            if ((rc = yaml_check_key(l, t, q))) return rc;
            const yaml_node_t *qk = yaml_document_get_node(l->doc, q->key), *qv = yaml_document_get_node(l->doc, q->value);
            const char *name = yaml_scalar(qk);
            if (!name || (strcmp(name, "rtol") && strcmp(name, "atol")))
                return yaml_fail_at(l, qk, OPR_ERR_PARSE, "tolerance: expected rtol or atol, not '%s'", name ? name : "?");
            if ((rc = parse_tol(l, qv, name[0] == 'r' ? rtol : atol))) return rc;
            if (name[0] == 'r') op->tol_rtol_set |= OPR_DTYPE_BIT(dt);
            else op->tol_atol_set |= OPR_DTYPE_BIT(dt);
        }
    }
    return OPR_OK;
}

bool opr_op_tolerance(const opr_op *op, opr_dtype dtype, double *rtol, double *atol)
{
    if (!op || (unsigned)dtype >= OPR_DTYPE_COUNT) return false;
    bool r = op->tol_rtol_set & OPR_DTYPE_BIT(dtype), a = op->tol_atol_set & OPR_DTYPE_BIT(dtype);
    if (rtol && r) *rtol = op->tol_rtol[dtype];
    if (atol && a) *atol = op->tol_atol[dtype];
    return r || a;
}
