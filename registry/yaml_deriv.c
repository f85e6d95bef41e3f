/* The derivative keys of an op entry: `self: FORMULA`, or a list of candidates for the
 * same inputs (`self: [FORMULA, {kernel: ...}]`), or for several inputs at once
 * `self, mat2: {kernel: NAME, needs: {...}, flops: EXPR}` (a native fused backward a
 * backend may implement) or `x1, x2: {let: {r: EXPR}, x1: FORMULA, x2: FORMULA}` (a
 * composite fused entry whose `let` intermediates are computed once). */
#include "deriv.h"
#include "yaml_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int arg_of(const opr_op *op, const char *name)
{
    for (int i = 0; i < op->nargs; i++)
        if (!strcmp(op->args[i].name, name)) return i;
    return -1;
}

static int slot_of(const deriv_info *d, const char *name)
{
    for (int i = 0; i < d->nslots; i++)
        if (d->slot_names[i] && !strcmp(d->slot_names[i], name)) return i;
    return -1;
}

static deriv_info *info_of(opr_op *op)
{
    if (op->deriv) return op->deriv;
    deriv_info *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    op->deriv = d; /* deriv_free undoes the rest when a step below fails */
    d->forced = -1;
    int n = 0;
    for (int i = 0; i < op->nargs; i++) d->slot_names[n++] = op->args[i].name;
    for (int i = 0; i < op->nout; i++) d->slot_names[n++] = op->out_names[i];
    d->nslots = n;
    const char *extra[] = {"result", "grad", "grads", "results", "i"};
    for (int i = 0; i < 5; i++)
        if (!(d->slot_names[d->nslots++] = strdup(extra[i]))) { deriv_free(op); return NULL; }
    if (plan_cache_new(d)) { deriv_free(op); return NULL; }
    return d;
}

/* Splits "self, mat2" into input indices. */
static int parse_cover(const loader *l, const yaml_node_t *k, const opr_op *op, deriv_cand *c)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", (const char *)k->data.scalar.value);
    char *save = NULL;
    size_t len = strlen(buf);
    if (len > 3 && !strcmp(buf + len - 3, "[i]")) { /* `tensors[i]`: every item of a Tensor[] argument */
        buf[len - 3] = 0;
        int a = arg_of(op, buf);
        if (a < 0 || op->args[a].type != ARG_TENSOR_LIST || op->args[a].fixed_dtype >= 0)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is not a differentiable Tensor[] argument", buf);
        c->per_item = true;
        c->cover[c->ncover++] = a;
        c->covers |= 1u << a;
        return OPR_OK;
    }
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int a = arg_of(op, tok);
        if (a < 0) return yaml_fail_at(l, k, OPR_ERR_PARSE, "unknown key '%s'", tok);
        if (op->args[a].type == ARG_TENSOR_LIST)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is a Tensor[] argument: its derivative key is 'NAME[i]', "
                                "a formula for item i", tok);
        if (op->args[a].type != ARG_TENSOR || op->args[a].fixed_dtype >= 0)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is not a differentiable tensor input", tok);
        if ((c->covers >> a) & 1) return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' listed twice", tok);
        c->cover[c->ncover++] = a;
        c->covers |= 1u << a;
    }
    return c->ncover ? OPR_OK : yaml_fail_at(l, k, OPR_ERR_PARSE, "empty derivative key%s", "");
}

static int cover_pos(const deriv_cand *c, int arg)
{
    for (int k = 0; k < c->ncover; k++)
        if (c->cover[k] == arg) return k;
    return -1;
}

static int formula_node(const loader *l, opr_op *op, deriv_cand *c, int pos, const yaml_node_t *v,
                        const char **names, int nnames)
{
    if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "a formula must be an expression%s", "");
    expr_src src = yaml_scalar_src(l, v);
    expr *e = expr_parse(yaml_scalar(v), &src);
    if (!e) return opr_error_status();
    int rc = deriv_add_formula(op, c, pos, e, names, nnames, &src);
    if (rc) { expr_free(e); return rc; }
    return deriv_check_calls(l->ctx, op, c->label, e); /* e belongs to c now */
}

/* needs: {self: [mat2], mat2: [self]} */
static int parse_needs(const loader *l, const opr_op *op, deriv_cand *c, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE) return yaml_fail_at(l, v, OPR_ERR_PARSE, "needs must map inputs to lists%s", "");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *list = yaml_document_get_node(l->doc, p->value);
        int pos = yaml_scalar(k) ? cover_pos(c, arg_of(op, yaml_scalar(k))) : -1;
        if (pos < 0) return yaml_fail_at(l, k, OPR_ERR_PARSE, "needs: '%s' is not covered by this entry", yaml_scalar(k) ? yaml_scalar(k) : "?");
        if (list->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, list, OPR_ERR_PARSE, "needs: expected a list%s", "");
        c->out_needs[pos] = 0;
        for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
            yaml_node_t *item = yaml_document_get_node(l->doc, *it);
            int s = yaml_scalar(item) ? slot_of(op->deriv, yaml_scalar(item)) : -1;
            if (s == slot_result(op)) s = op->nargs;
            if (s < 0 || s >= op->nargs + op->nout || (s < op->nargs && op->args[s].type != ARG_TENSOR))
                return yaml_fail_at(l, item, OPR_ERR_PARSE, "needs: '%s' is not a tensor argument or output",
                                    yaml_scalar(item) ? yaml_scalar(item) : "?");
            c->out_needs[pos] |= 1ull << s;
        }
    }
    return OPR_OK;
}

/* The slot a backend registers its fused backward kernel under. It belongs to the
 * candidate until the op is added to the registry, which adds it too (yaml_load.c):
 * an entry refused later leaves nothing behind. */
static int kernel_slot(const loader *l, opr_op *op, deriv_cand *c, const yaml_node_t *v)
{
    const char *name = yaml_scalar(v);
    if (!name || !name[0]) return yaml_fail_at(l, v, OPR_ERR_PARSE, "kernel must be a name%s", "");
    bool taken = !strcmp(name, op->name);
    for (int i = 0; i < op->deriv->ncands && !taken; i++)
        taken = op->deriv->cands[i].kernel && !strcmp(op->deriv->cands[i].kernel->name, name);
    pthread_mutex_lock(&l->ctx->lock);
    taken = taken || registry_find(l->ctx, name);
    pthread_mutex_unlock(&l->ctx->lock);
    if (taken) return yaml_fail_at(l, v, OPR_ERR_PARSE, "kernel name '%s' is already used", name);
    opr_op *k = calloc(1, sizeof *k);
    if (!k) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    char schema[256];
    snprintf(schema, sizeof schema, "%s: fused backward of %s for (%s)", name, op->name, c->label);
    k->name = strdup(name);
    k->schema = strdup(schema);
    k->file = strdup(l->file);
    if (!k->name || !k->schema || !k->file) { op_free(k); return opr_fail(OPR_ERR_NOMEM, "out of memory"); }
    k->line = (int)v->start_mark.line + 1;
    k->backward_of = op;
    k->nout = c->ncover;
    k->dtypes = op->dtypes;
    k->dtype_arg = k->device_arg = -1;
    k->same_shape_args[0] = k->same_shape_args[1] = -1;
    c->kernel = k;
    /* Until `needs` says otherwise, each output reads every tensor input. */
    for (int pos = 0; pos < c->ncover; pos++)
        for (int a = 0; a < op->nargs; a++)
            if (op->args[a].type == ARG_TENSOR) c->out_needs[pos] |= 1ull << a;
    return OPR_OK;
}

static int parse_fused(const loader *l, opr_op *op, deriv_cand *c, const yaml_node_t *v)
{
    deriv_info *d = op->deriv;
    const char *names[DERIV_MAX_SLOTS];
    int nnames = d->nslots;
    memcpy(names, d->slot_names, sizeof names);
    int rc = OPR_OK;
    yaml_node_t *kernel = NULL, *needs = NULL, *flops = NULL;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; !rc && p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *val = yaml_document_get_node(l->doc, p->value);
        const char *key = yaml_scalar(k);
        if ((rc = yaml_check_key(l, v, p))) return rc;
        if (!strcmp(key, "kernel")) kernel = val;
        else if (!strcmp(key, "needs")) needs = val;
        else if (!strcmp(key, "flops")) flops = val;
        else if (!strcmp(key, "let")) {
            if (val->type != YAML_MAPPING_NODE) return yaml_fail_at(l, val, OPR_ERR_PARSE, "let must map names to expressions%s", "");
            for (yaml_node_pair_t *q = val->data.mapping.pairs.start; !rc && q < val->data.mapping.pairs.top; q++) {
                yaml_node_t *lk = yaml_document_get_node(l->doc, q->key), *lv = yaml_document_get_node(l->doc, q->value);
                if ((rc = yaml_check_key(l, val, q))) return rc;
                if (c->nlets == DERIV_MAX_LETS)
                    return yaml_fail_at(l, lk, OPR_ERR_PARSE, "let: at most %s named intermediates", "4");
                if (!yaml_scalar(lv)) return yaml_fail_at(l, lv, OPR_ERR_PARSE, "let: expected an expression%s", "");
                expr_src src = yaml_scalar_src(l, lv);
                expr *e = expr_parse(yaml_scalar(lv), &src);
                if (!e) return opr_error_status();
                /* a let may read earlier lets */
                rc = deriv_add_formula(op, c, -1, e, names, nnames, &src);
                if (rc) { expr_free(e); return rc; }
                c->lets[c->nlets++] = e;
                names[nnames++] = yaml_scalar(lk);
                if ((rc = deriv_check_calls(l->ctx, op, c->label, e))) return rc;
            }
        } else {
            int pos = cover_pos(c, arg_of(op, key));
            if (pos < 0) return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is not one of this entry's inputs", key);
            continue; /* formulas after the lets, below */
        }
    }
    if (kernel) {
        if ((rc = kernel_slot(l, op, c, kernel))) return rc;
        if (needs && (rc = parse_needs(l, op, c, needs))) return rc;
        if (flops && flops->type == YAML_MAPPING_NODE) { /* per output: {self: .., mat2: ..} */
            for (yaml_node_pair_t *p = flops->data.mapping.pairs.start; p < flops->data.mapping.pairs.top; p++) {
                if ((rc = yaml_check_key(l, flops, p))) return rc;
                yaml_node_t *fk = yaml_document_get_node(l->doc, p->key), *fv = yaml_document_get_node(l->doc, p->value);
                int pos = yaml_scalar(fk) ? cover_pos(c, arg_of(op, yaml_scalar(fk))) : -1;
                if (pos < 0 || !yaml_scalar(fv))
                    return yaml_fail_at(l, fk, OPR_ERR_PARSE, "flops: '%s' is not an input of this entry", yaml_scalar(fk) ? yaml_scalar(fk) : "?");
                expr_src src = yaml_scalar_src(l, fv);
                if (!(c->out_flops[pos] = expr_parse(yaml_scalar(fv), &src))) return opr_error_status();
                if ((rc = expr_resolve(c->out_flops[pos], (const char *const *)d->slot_names, d->nslots, &src))) return rc;
            }
        } else if (flops) {
            if (!yaml_scalar(flops)) return yaml_fail_at(l, flops, OPR_ERR_PARSE, "flops must be an expression%s", "");
            expr_src src = yaml_scalar_src(l, flops);
            if (!(c->flops = expr_parse(yaml_scalar(flops), &src))) return opr_error_status();
            if ((rc = expr_resolve(c->flops, (const char *const *)d->slot_names, d->nslots, &src))) return rc;
        }
        return OPR_OK;
    }
    /* a composite entry's cost comes from the ops its formulas call, and it saves what
     * they read: needs/flops there would be silently ignored */
    if (needs || flops)
        return yaml_fail_at(l, needs ? needs : flops, OPR_ERR_PARSE,
                            "'%s' is read only in a kernel entry (with 'kernel:'); a composite entry's cost and "
                            "saved tensors follow from its formulas", needs ? "needs" : "flops");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        const char *key = yaml_scalar(yaml_document_get_node(l->doc, p->key));
        int pos = cover_pos(c, arg_of(op, key));
        if (pos < 0) continue;
        if ((rc = formula_node(l, op, c, pos, yaml_document_get_node(l->doc, p->value), names, nnames))) return rc;
    }
    for (int pos = 0; pos < c->ncover; pos++)
        if (!c->formula[pos])
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "fused entry has no formula for '%s' (and no kernel)",
                                op->args[c->cover[pos]].name);
    return OPR_OK;
}

int yaml_deriv_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v, bool fast)
{
    deriv_info *d = info_of(op);
    if (!d) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    if (v->type == YAML_SEQUENCE_NODE) { /* several candidates for the same inputs */
        if (v->data.sequence.items.start == v->data.sequence.items.top)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "derivative of '%s': an empty list of candidates", yaml_scalar(k));
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            const yaml_node_t *item = yaml_document_get_node(l->doc, *it);
            if (item->type == YAML_SEQUENCE_NODE)
                return yaml_fail_at(l, item, OPR_ERR_PARSE, "derivative of '%s': a list inside a list of candidates", yaml_scalar(k));
            int rc = yaml_deriv_key(l, op, k, item, fast);
            if (rc) return rc;
        }
        return OPR_OK;
    }
    deriv_cand c = {.fast = fast};
    int rc = parse_cover(l, k, op, &c);
    if (rc) return rc;
    char label[300];
    snprintf(label, sizeof label, "%s%s", fast ? "fast " : "", yaml_scalar(k));
    if (!(c.label = strdup(label))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    if (v->type == YAML_SCALAR_NODE) {
        if (c.ncover != 1) rc = yaml_fail_at(l, v, OPR_ERR_PARSE, "'%s' covers several inputs: give a kernel or one formula each", c.label);
        else rc = formula_node(l, op, &c, 0, v, (const char **)d->slot_names, d->nslots);
    } else if (v->type == YAML_MAPPING_NODE && c.per_item) {
        rc = yaml_fail_at(l, v, OPR_ERR_PARSE, "'%s' must be one formula (an item's gradient)", c.label);
    } else if (v->type == YAML_MAPPING_NODE) {
        rc = parse_fused(l, op, &c, v);
    } else {
        rc = yaml_fail_at(l, v, OPR_ERR_PARSE, "derivative of '%s' must be a formula or a mapping", c.label);
    }
    if (!rc && c.kernel) { /* "self, mat2 (kernel mm_backward)": told apart from a formula for the same key */
        char *named = malloc(strlen(c.label) + strlen(c.kernel->name) + 11);
        if (!named) rc = opr_fail(OPR_ERR_NOMEM, "out of memory");
        else {
            sprintf(named, "%s (kernel %s)", c.label, c.kernel->name);
            free(c.label);
            c.label = named;
        }
    }
    deriv_cand *grown = rc ? NULL : realloc(d->cands, (size_t)(d->ncands + 1) * sizeof *grown);
    if (!grown) {
        free(c.label);
        for (int i = 0; i < c.ncover; i++) expr_free(c.formula[i]);
        for (int i = 0; i < c.nlets; i++) expr_free(c.lets[i]);
        for (int i = 0; i < c.ncover; i++) expr_free(c.out_flops[i]);
        expr_free(c.flops);
        op_free(c.kernel); /* not registered yet */
        return rc ? rc : opr_fail(OPR_ERR_NOMEM, "out of memory");
    }
    d->cands = grown;
    d->cands[d->ncands++] = c;
    if (fast) d->fast_covers |= c.covers;
    else d->differentiable |= c.covers;
    return OPR_OK;
}

int yaml_fast_key(const loader *l, opr_op *op, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "fast must map inputs to their fast-mode derivatives%s", "");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        int rc = yaml_check_key(l, v, p);
        if (rc) return rc;
        yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *val = yaml_document_get_node(l->doc, p->value);
        if ((rc = yaml_deriv_key(l, op, k, val, true))) return rc;
    }
    if (!op->deriv || !op->deriv->fast_covers)
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "fast has no derivative entries%s", "");
    return OPR_OK;
}
