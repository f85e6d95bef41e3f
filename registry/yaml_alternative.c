/* The `alternative:` and `kernel_rate:` keys of an op entry (registry/alternative.c
 * makes the choice at each call; docs/formulas.md, "Alternatives"):
 *
 *   alternative: OP            a composite op with the same arguments and result,
 *                              computing the same function another way
 *   kernel_rate: {DEVICE: R, default: R}
 *                              how fast this op's own kernel runs on a device type,
 *                              as a fraction of that device's GEMM rate (default 1)
 */
#include "yaml_loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int yaml_alternative_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    const char *name = yaml_scalar(v);
    if (!name || !*name) return yaml_fail_at(l, v, OPR_ERR_PARSE, "alternative: expected the name of an op%s", "");
    if (!strcmp(name, op->name))
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "alternative: '%s' is the op itself", name);
    if (!(op->alt.name = strdup(name))) return opr_fail(OPR_ERR_NOMEM, "out of memory loading %s", l->file);
    op->alt.line = (int)v->start_mark.line + 1;
    op->alt.col = (int)v->start_mark.column + 1;
    return OPR_OK;
}

int yaml_kernel_rate_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "kernel_rate: expected a mapping of device types to rates%s", "");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *r = yaml_document_get_node(l->doc, p->value);
        const char *device = yaml_scalar(k), *text = yaml_scalar(r);
        char *end = NULL;
        double rate = text ? strtod(text, &end) : NAN;
        if (!text || end == text || *end || !(rate > 0) || !isfinite(rate))
            return yaml_fail_at(l, r, OPR_ERR_PARSE, "kernel_rate: '%s' is not a positive number", text ? text : "?");
        if (!strcmp(device, "default")) { op->alt.default_rate = rate; continue; }
        if (op->alt.nrates == ALT_MAX_RATES)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "kernel_rate: more than 8 device types (at '%s')", device);
        if (!(op->alt.rate_device[op->alt.nrates] = strdup(device)))
            return opr_fail(OPR_ERR_NOMEM, "out of memory loading %s", l->file);
        op->alt.rate[op->alt.nrates++] = rate;
    }
    return OPR_OK;
}
