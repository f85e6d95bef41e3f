/* Loads op definitions from YAML (libyaml's document API). A file is a sequence of
 * mappings, one per op. An entry with an error is refused with file:line:column and
 * the offending token; the others are still added. */
#include "composite.h"
#include "deriv.h"
#include "yaml_loader.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int yaml_fail_at(const loader *l, const yaml_node_t *n, int status, const char *fmt, const char *tok)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, tok);
    return opr_fail(status, "%s:%zu:%zu: %s", l->file, n->start_mark.line + 1, n->start_mark.column + 1, msg);
}

const char *yaml_scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

int yaml_check_key(const loader *l, const yaml_node_t *map, const yaml_node_pair_t *p)
{
    const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
    if (!yaml_scalar(k)) return yaml_fail_at(l, k ? k : map, OPR_ERR_PARSE, "keys must be plain names%s", "");
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
        const char *prev = yaml_scalar(yaml_document_get_node(l->doc, q->key));
        if (prev && !strcmp(prev, yaml_scalar(k))) return yaml_fail_at(l, k, OPR_ERR_PARSE, "duplicate key '%s'", yaml_scalar(k));
    }
    return OPR_OK;
}

expr_src yaml_scalar_src(const loader *l, const yaml_node_t *n)
{
    int quoted = n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                 n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    return (expr_src){l->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 + quoted};
}

/* Parses expression-valued keys into exprs. A flow sequence is re-read from the file
 * text as one bracketed list, because YAML would split "size(self, 0)" at its comma. */
static int parse_expr_list(const loader *l, const yaml_node_t *n, expr **out, int max, int *count,
                           const char *key)
{
    *count = 0;
    if (n->type == YAML_SCALAR_NODE) {
        expr_src src = yaml_scalar_src(l, n);
        if (!(out[0] = expr_parse(yaml_scalar(n), &src))) return opr_error_status();
        *count = 1;
        return OPR_OK;
    }
    if (n->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "'%s' must be an expression or a list of them", key);
    if (n->data.sequence.style == YAML_FLOW_SEQUENCE_STYLE) {
        size_t a = n->start_mark.index, b = n->end_mark.index;
        char *text = strndup(l->text + a, b - a);
        if (!text) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        expr_src src = {l->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
        expr *list = expr_parse(text, &src);
        free(text);
        if (!list) return opr_error_status();
        if (list->kind != EXPR_LIST) { expr_free(list); return yaml_fail_at(l, n, OPR_ERR_PARSE, "'%s' must be a list", key); }
        if (list->nargs > max) { expr_free(list); return yaml_fail_at(l, n, OPR_ERR_PARSE, "too many items in '%s'", key); }
        for (int i = 0; i < list->nargs; i++) { out[i] = list->args[i]; list->args[i] = NULL; }
        *count = list->nargs;
        expr_free(list);
        /* A quoted item (["!sparse"], quoted because YAML reads a leading ! as a tag) is
         * read back as a string literal: it is the expression its quotes hold, as in a
         * block list (no check or shape is a bare string). */
        for (int i = 0; i < *count; i++) {
            if (out[i]->kind != EXPR_STR) continue;
            expr_src isrc = {l->file, out[i]->line, out[i]->col + 1};
            expr *e = expr_parse(out[i]->name, &isrc);
            if (!e) {
                for (int j = 0; j < *count; j++) expr_free(out[j]);
                *count = 0;
                return opr_error_status();
            }
            expr_free(out[i]);
            out[i] = e;
        }
        return OPR_OK;
    }
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(l->doc, *it);
        if (!yaml_scalar(item)) return yaml_fail_at(l, item, OPR_ERR_PARSE, "items of '%s' must be expressions", key);
        if (*count == max) return yaml_fail_at(l, item, OPR_ERR_PARSE, "too many items in '%s'", key);
        expr_src src = yaml_scalar_src(l, item);
        if (!(out[*count] = expr_parse(yaml_scalar(item), &src))) return opr_error_status();
        (*count)++;
    }
    return OPR_OK;
}

static int arg_index(const opr_op *op, const char *name)
{
    for (int i = 0; i < op->nargs; i++)
        if (!strcmp(op->args[i].name, name)) return i;
    return -1;
}

static int parse_dtype_list(const loader *l, const yaml_node_t *n, uint32_t *mask)
{
    if (n->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "%s must be a list of dtypes", "dtypes");
    *mask = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(l->doc, *it);
        opr_dtype dt;
        if (!yaml_scalar(item) || opr_dtype_parse(yaml_scalar(item), &dt))
            return yaml_fail_at(l, item, OPR_ERR_PARSE, "unknown dtype '%s'", yaml_scalar(item) ? yaml_scalar(item) : "?");
        *mask |= OPR_DTYPE_BIT(dt);
    }
    return OPR_OK;
}

/* "T", "acc(T)", a dtype name, or "arg(NAME)". */
static int parse_out_dtype(const loader *l, opr_op *op, const yaml_node_t *n, int *out)
{
    const char *s = yaml_scalar(n);
    if (!s) return yaml_fail_at(l, n, OPR_ERR_PARSE, "%s must be a dtype", "dtype");
    if (!strcmp(s, "T")) { *out = OUT_DTYPE_T; return OPR_OK; }
    if (!strcmp(s, "acc(T)")) { *out = OUT_DTYPE_ACC; return OPR_OK; }
    size_t len = strlen(s);
    if (!strncmp(s, "arg(", 4) && len > 5 && s[len - 1] == ')') {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), s + 4);
        int a = arg_index(op, name);
        if (a < 0 || op->args[a].type != ARG_STR)
            return yaml_fail_at(l, n, OPR_ERR_PARSE, "arg(%s): no str argument of that name", name);
        op->dtype_arg = a;
        *out = OUT_DTYPE_ARG;
        return OPR_OK;
    }
    opr_dtype dt;
    if (opr_dtype_parse(s, &dt)) return yaml_fail_at(l, n, OPR_ERR_PARSE, "unknown dtype '%s'", s);
    *out = (int)dt;
    return OPR_OK;
}

static const char *const view_names[] = {
    [VIEW_T] = "t", [VIEW_TRANSPOSE] = "transpose", [VIEW_PERMUTE] = "permute",
    [VIEW_RESHAPE] = "reshape", [VIEW_EXPAND] = "expand", [VIEW_UNSQUEEZE] = "unsqueeze",
    [VIEW_SQUEEZE] = "squeeze", [VIEW_NARROW] = "narrow", [VIEW_DIAGONAL] = "diagonal",
    [VIEW_CONTIGUOUS] = "contiguous", [VIEW_SLICE] = "slice", [VIEW_AS_STRIDED] = "as_strided",
    [VIEW_RESIZE] = "resize", [VIEW_RESIZE_OUTPUT] = "resize_output",
};

static int parse_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v)
{
    const char *key = yaml_scalar(k);
    int count, rc;
    if (!strcmp(key, "name")) return OPR_OK; /* handled first */
    if (!strcmp(key, "samples")) return samples_parse(l, op, v);
    if (!strcmp(key, "forward")) return yaml_forward_key(l, op, k, v);
    if (!strcmp(key, "reference")) return yaml_reference_key(l, op, k, v);
    if (!strcmp(key, "jagged")) return yaml_jagged_key(l, op, v);
    if (!strcmp(key, "batch")) return yaml_batch_key(l, op, v);
    if (!strcmp(key, "alternative")) return yaml_alternative_key(l, op, v);
    if (!strcmp(key, "kernel_rate")) return yaml_kernel_rate_key(l, op, v);
    if (!strcmp(key, "tolerance")) return yaml_tolerance_key(l, op, v);
    if (!strcmp(key, "overload")) { /* the overload name of an op written without one: gt is gt.Tensor */
        const char *o = yaml_scalar(v);
        bool ok = o && *o;
        for (const char *p = o; ok && *p; p++) ok = isalnum((unsigned char)*p) || *p == '_';
        if (!ok || op->overload)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "overload: %s", op->overload ? "the name already has one ('op.NAME')"
                                                                                  : "expected an identifier");
        if (!(op->overload = strdup(o))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        return OPR_OK;
    }
    if (!strcmp(key, "differentiable")) {
        const char *b = yaml_scalar(v);
        if (!b || (strcmp(b, "false") && strcmp(b, "true")))
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "differentiable must be true or false, not '%s'", b ? b : "?");
        op->nondifferentiable = !strcmp(b, "false");
        return OPR_OK;
    }
    if (!strcmp(key, "int_to_float") || !strcmp(key, "scalar_promotion")) { /* promote.c */
        const char *b = yaml_scalar(v);
        if (!b || (strcmp(b, "false") && strcmp(b, "true")))
            return yaml_fail_at(l, v, OPR_ERR_PARSE, key[0] == 'i' ? "int_to_float must be true or false, not '%s'"
                                                                 : "scalar_promotion must be true or false, not '%s'",
                                b ? b : "?");
        if (key[0] == 'i') op->int_to_float = !strcmp(b, "true");
        else op->no_scalar_promotion = !strcmp(b, "false");
        return OPR_OK;
    }
    if (!strcmp(key, "output_differentiability")) { /* PyTorch's key: [True, False, False] */
        const int n = v->type == YAML_SEQUENCE_NODE ? (int)(v->data.sequence.items.top - v->data.sequence.items.start) : -1;
        if (n != op->nout)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "output_differentiability needs one true / false per output%s", "");
        for (int k = 0; k < n; k++) {
            const char *b = yaml_scalar(yaml_document_get_node(l->doc, v->data.sequence.items.start[k]));
            const bool t = b && (!strcmp(b, "true") || !strcmp(b, "True")), f = b && (!strcmp(b, "false") || !strcmp(b, "False"));
            if (!t && !f) return yaml_fail_at(l, v, OPR_ERR_PARSE, "output_differentiability: '%s' is not true or false", b ? b : "?");
            if (f) op->out_nondiff |= 1u << k;
        }
        return OPR_OK;
    }
    if (!strcmp(key, "shape") || !strcmp(key, "shapes")) {
        /* the duplicate-key check does not see `shape` and `shapes` as the same key */
        if (op->shapes[0] || op->dynamic_shape)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s': the output shapes are already given", key);
        if (yaml_scalar(v) && !strcmp(yaml_scalar(v), "dynamic")) { op->dynamic_shape = true; return OPR_OK; }
        bool many = key[5] == 's';
        if ((rc = parse_expr_list(l, v, op->shapes, many ? OPR_MAX_OUTS : 1, &count, key))) return rc;
        if (!many && v->type != YAML_SCALAR_NODE)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must be one expression (quote a [a, b] list)", key);
        if (count != op->nout)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "'%s' gives a different number of shapes than the op has outputs", key);
        return OPR_OK;
    }
    if (!strcmp(key, "check")) {
        rc = parse_expr_list(l, v, op->checks, (int)(sizeof op->checks / sizeof op->checks[0]), &count, key);
        op->nchecks = count;
        return rc;
    }
    if (!strcmp(key, "random")) { /* the int? argument the host fills from the context's generator */
        int a = yaml_scalar(v) ? arg_index(op, yaml_scalar(v)) : -1;
        if (a < 0 || op->args[a].type != ARG_INT || !op->args[a].optional)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "random must name an 'int?' argument (the seed), not '%s'",
                                yaml_scalar(v) ? yaml_scalar(v) : "?");
        op->random = true;
        op->random_arg = a;
        return OPR_OK;
    }
    if (!strcmp(key, "identity_if")) {
        if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must be an expression", key);
        if (op->nout != 1 || op->nargs == 0 || op->args[0].type != ARG_TENSOR || op->inplace)
            return yaml_fail_at(l, k, OPR_ERR_PARSE, "%s needs an out-of-place op taking a Tensor first and returning one", key);
        expr_src src = yaml_scalar_src(l, v);
        return (op->identity_if = expr_parse(yaml_scalar(v), &src)) ? OPR_OK : opr_error_status();
    }
    if (!strcmp(key, "count")) { /* the number of pieces of a `-> Tensor[]` op */
        if (!op->list_out) return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is only for an op returning Tensor[]", key);
        if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must be an expression", key);
        expr_src src = yaml_scalar_src(l, v);
        return (op->count = expr_parse(yaml_scalar(v), &src)) ? OPR_OK : opr_error_status();
    }
    if (!strcmp(key, "flops")) {
        if (!yaml_scalar(v)) return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must be an expression", key);
        expr_src src = yaml_scalar_src(l, v);
        return (op->flops = expr_parse(yaml_scalar(v), &src)) ? OPR_OK : opr_error_status();
    }
    if (!strcmp(key, "dtypes")) return parse_dtype_list(l, v, &op->dtypes);
    if (!strcmp(key, "dtype")) {
        if (op->nout != 1) return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s: use dtypes_out for several outputs", key);
        return parse_out_dtype(l, op, v, &op->out_dtype[0]);
    }
    if (!strcmp(key, "dtypes_out")) {
        if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start != op->nout)
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must list one dtype per output", key);
        int i = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++, i++)
            if ((rc = parse_out_dtype(l, op, yaml_document_get_node(l->doc, *it), &op->out_dtype[i]))) return rc;
        return OPR_OK;
    }
    if (!strcmp(key, "arg_dtypes")) {
        if (v->type != YAML_MAPPING_NODE) return yaml_fail_at(l, v, OPR_ERR_PARSE, "%s must map argument names to dtypes", key);
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *d = yaml_document_get_node(l->doc, p->value);
            int a = yaml_scalar(k) ? arg_index(op, yaml_scalar(k)) : -1;
            if ((rc = yaml_check_key(l, v, p))) return rc;
            if (a < 0 || op->args[a].type != ARG_TENSOR)
                return yaml_fail_at(l, k, OPR_ERR_PARSE, "'%s' is not a Tensor argument", yaml_scalar(k) ? yaml_scalar(k) : "?");
            opr_dtype dt;
            if (!yaml_scalar(d) || opr_dtype_parse(yaml_scalar(d), &dt))
                return yaml_fail_at(l, d, OPR_ERR_PARSE, "unknown dtype '%s'", yaml_scalar(d) ? yaml_scalar(d) : "?");
            op->args[a].fixed_dtype = (int)dt;
        }
        return OPR_OK;
    }
    if (!strcmp(key, "view")) {
        for (int k = 1; k < VIEW_KIND_COUNT; k++)
            if (yaml_scalar(v) && !strcmp(yaml_scalar(v), view_names[k])) { op->view = (view_kind)k; return OPR_OK; }
        return yaml_fail_at(l, v, OPR_ERR_PARSE, "unknown view kind '%s'", yaml_scalar(v) ? yaml_scalar(v) : "?");
    }
    /* a key naming inputs ("self", "self, mat2") holds their derivative */
    char first[64];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(key, ", ["), key); /* "tensors[i]": a list's items */
    if (arg_index(op, first) >= 0) return yaml_deriv_key(l, op, k, v, false);
    if (!strcmp(key, "fast")) return yaml_fast_key(l, op, v);
    return yaml_fail_at(l, k, OPR_ERR_PARSE, "unknown key '%s'", key);
}

/* What a composite op (`forward:`) cannot be: its forward gives one tensor of the
 * shape its entry states, computed by other ops (not by the host, not in place). */
static int check_composite(const loader *l, const opr_op *op)
{
    const composite_def *cd = op->composite;
    const char *why = NULL;
    if (op->view) why = "'forward' and 'view' exclude each other (a view is implemented by the host)";
    else if (op->identity_if) why = "'forward' and 'identity_if' exclude each other";
    else if (op->inplace) why = "a composite op cannot be in place (its name ends in '_')";
    else if (op->nout != 1) why = "a composite op returns one Tensor";
    else if (op->list_out && (cd->nlets || op->shapes[0]))
        why = "an op returning Tensor[] gives piece i by one forward expression (no 'let', no 'shape')";
    else if (op->list_out) why = NULL;
    else if (op->dynamic_shape) why = "a composite op needs a 'shape' expression (not dynamic): its result is checked against it";
    if (!why) return OPR_OK;
    return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: op '%s': %s", l->file, cd->line, cd->col, op->name, why);
}

/* Resolves every expression of op against its slot names and checks completeness. */
static int finish_op(const loader *l, opr_op *op, const yaml_node_t *entry)
{
    const char *names[OPR_MAX_ARGS + OPR_MAX_OUTS + 1];
    int n = 0;
    for (int i = 0; i < op->nargs; i++) names[n++] = op->args[i].name;
    for (int i = 0; i < op->nout; i++) names[n++] = op->out_names[i];
    names[n++] = "result";
    expr_src src = {l->file, 0, 0};
    int rc;
    /* shapes and checks run before outputs exist: they may only read the arguments */
    for (int i = 0; i < op->nchecks; i++)
        if (expr_resolve(op->checks[i], names, op->nargs, &src)) return OPR_ERR_PARSE;
    for (int i = 0; i < op->nout; i++)
        if (op->shapes[i] && expr_resolve(op->shapes[i], names, op->nargs, &src)) return OPR_ERR_PARSE;
    if (op->flops && expr_resolve(op->flops, names, n, &src)) return OPR_ERR_PARSE;
    if (op->identity_if && expr_resolve(op->identity_if, names, op->nargs, &src)) return OPR_ERR_PARSE;
    if (op->composite && (rc = check_composite(l, op))) return rc;
    if (op->list_out) { /* `-> Tensor[]`: count and a per-piece forward, nothing else that shapes outputs */
        if (!op->count || !op->composite)
            return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s' returns Tensor[]: it needs 'count' and 'forward' "
                                "(piece i, with `i` its index)", op->name);
        if (expr_resolve(op->count, names, op->nargs, &src)) return OPR_ERR_PARSE;
        if (op->view || op->identity_if || op->inplace || op->alt.name || op->jagged.kind || op->batch.kind)
            return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s' returns Tensor[]: 'view', 'identity_if', "
                                "'alternative', 'jagged' and 'batch' do not apply", op->name);
        for (int c = 0; op->deriv && c < op->deriv->ncands; c++)
            if (op->deriv->cands[c].kernel)
                return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s' returns Tensor[]: its derivatives are formulas "
                                    "(no kernel entries)", op->name);
    }
    if (!op->view && !op->dynamic_shape && !op->shapes[0] && !op->list_out)
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s' needs a 'shape' (or 'view')", op->name);
    /* a fast variant replaces a normal formula: outside fast mode the input needs one */
    if (op->deriv && (op->deriv->fast_covers & ~op->deriv->differentiable)) {
        int a = __builtin_ctz(op->deriv->fast_covers & ~op->deriv->differentiable);
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "fast variant for '%s' without a normal derivative formula",
                            op->args[a].name);
    }
    /* an alternative stands in for the op's kernel: views and composites have none */
    if ((op->alt.nrates || op->alt.default_rate != 1) && !op->alt.name)
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s': 'kernel_rate' without an 'alternative' to compare with", op->name);
    if (op->alt.name && (op->view || op->composite || op->inplace || op->dynamic_shape))
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "op '%s': only an out-of-place op with a kernel and a 'shape' "
                            "can have an 'alternative'", op->name);
    if (op->view && (op->nargs == 0 || op->args[0].type != ARG_TENSOR || op->nout != 1))
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "view op '%s' must take a Tensor first and return one Tensor", op->name);
    for (int i = 0; i < op->nargs; i++)
        if (op->args[i].type == ARG_STR && !strcmp(op->args[i].name, "device")) op->device_arg = i;
    /* broadcast(a, b) of two tensors is the common elementwise case: dispatch skips
     * evaluating it when both shapes are equal */
    const expr *sh = op->shapes[0];
    op->same_shape_args[0] = op->same_shape_args[1] = -1;
    if (sh && sh->kind == EXPR_CALL && !strcmp(sh->name, "broadcast") && sh->nargs == 2 &&
        sh->args[0]->kind == EXPR_NAME && sh->args[1]->kind == EXPR_NAME &&
        op->args[sh->args[0]->slot].type == ARG_TENSOR && op->args[sh->args[1]->slot].type == ARG_TENSOR &&
        !op->args[sh->args[0]->slot].optional && !op->args[sh->args[1]->slot].optional) {
        op->same_shape_args[0] = sh->args[0]->slot;
        op->same_shape_args[1] = sh->args[1]->slot;
    }
    return OPR_OK;
}

static opr_op *load_entry(const loader *l, yaml_node_t *entry)
{
    if (entry->type != YAML_MAPPING_NODE) {
        yaml_fail_at(l, entry, OPR_ERR_PARSE, "each entry must be a mapping with a 'name'%s", "");
        return NULL;
    }
    yaml_node_t *name = NULL;
    for (yaml_node_pair_t *p = entry->data.mapping.pairs.start; p < entry->data.mapping.pairs.top; p++) {
        const char *k = yaml_scalar(yaml_document_get_node(l->doc, p->key));
        if (k && !strcmp(k, "name")) name = yaml_document_get_node(l->doc, p->value);
    }
    if (!yaml_scalar(name)) {
        yaml_fail_at(l, entry, OPR_ERR_PARSE, "entry has no 'name' schema%s", "");
        return NULL;
    }
    opr_op *op = calloc(1, sizeof *op);
    if (!op) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    op->dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    op->dtype_arg = op->device_arg = -1;
    op->alt.default_rate = 1;
    for (int i = 0; i < OPR_MAX_OUTS; i++) op->out_dtype[i] = OUT_DTYPE_T;
    op->schema = strdup(yaml_scalar(name));
    op->file = strdup(l->file);
    op->line = (int)name->start_mark.line + 1;
    expr_src src = yaml_scalar_src(l, name);
    int rc = op->schema && op->file ? schema_parse(op, yaml_scalar(name), &src) : opr_fail(OPR_ERR_NOMEM, "out of memory");
    if (!rc) { /* a duplicate is reported at its name, with where the first one is */
        pthread_mutex_lock(&l->ctx->lock);
        const opr_op *first = registry_find_exact(l->ctx, op->name);
        if (first) {
            char msg[256];
            snprintf(msg, sizeof msg, "op '%s' is already defined (first defined at %s:%d)", op->name,
                     first->file ? first->file : "?", first->line);
            rc = yaml_fail_at(l, name, OPR_ERR_INVALID, "%s", msg);
        }
        pthread_mutex_unlock(&l->ctx->lock);
    }
    for (yaml_node_pair_t *p = entry->data.mapping.pairs.start; !rc && p < entry->data.mapping.pairs.top; p++) {
        if (!(rc = yaml_check_key(l, entry, p)))
            rc = parse_key(l, op, yaml_document_get_node(l->doc, p->key), yaml_document_get_node(l->doc, p->value));
    }
    if (!rc) rc = finish_op(l, op, entry);
    if (rc) { op_free(op); return NULL; }
    return op;
}

/* libyaml keeps a pending simple key per flow level and looks at all of them at every
 * token, so flow collections nested n deep take time quadratic in n (20000 levels:
 * seconds). Text nesting brackets deeper than this is refused before libyaml reads it.
 * Brackets in quoted scalars and comments count too: an overestimate that op files,
 * nesting a few levels, never come near. */
#define YAML_MAX_FLOW_DEPTH 1000

static int check_flow_depth(const char *text, size_t len, const char *file)
{
    int depth = 0, line = 1, col = 0;
    for (size_t i = 0; i < len; i++) {
        col++;
        if (text[i] == '\n') {
            line++;
            col = 0;
        } else if ((text[i] == '[' || text[i] == '{') && ++depth > YAML_MAX_FLOW_DEPTH) {
            return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: brackets nested deeper than %d levels", file, line, col,
                            YAML_MAX_FLOW_DEPTH);
        } else if ((text[i] == ']' || text[i] == '}') && depth > 0) {
            depth--;
        }
    }
    return OPR_OK;
}

/* Adds op and the fused backward kernel slots its derivatives name: all of them or
 * none, so that a refused entry leaves nothing behind. Call with ctx->lock held.
 * *kept says whether the registry has taken op even so (added, then dropped with
 * registry_truncate because a kernel slot could not be added): else it is still the
 * caller's to free. */
static int register_entry(opr_ctx *ctx, opr_op *op, bool *kept)
{
    int n0 = registry_count(ctx);
    int rc = composite_check_cycle(ctx, op); /* here, under the lock: two loads cannot close a cycle */
    if (rc) { *kept = false; return rc; }
    rc = registry_add(ctx, op);
    for (int i = 0; !rc && op->deriv && i < op->deriv->ncands; i++)
        if (op->deriv->cands[i].kernel) rc = registry_add(ctx, op->deriv->cands[i].kernel);
    *kept = rc && registry_count(ctx) > n0;
    if (*kept) registry_truncate(ctx, n0);
    return rc;
}

int yaml_load_text(opr_ctx *ctx, const char *text, size_t len, const char *file, int *n_loaded)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    int added = 0, refused = 0;
    bool nomem = false; /* an entry was refused for want of memory, not for its text */
    char first_error[1024] = "";
    if (n_loaded) *n_loaded = 0;
    if (!yaml_parser_initialize(&parser)) return opr_fail(OPR_ERR_NOMEM, "out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth_rc = check_flow_depth(text, len, file);
    if (depth_rc) {
        pthread_mutex_lock(&ctx->lock);
        registry_note_error(ctx, opr_last_error());
        pthread_mutex_unlock(&ctx->lock);
        yaml_parser_delete(&parser);
        return depth_rc;
    }
    if (!yaml_parser_load(&parser, &doc)) {
        /* every syntax error comes with a `problem`; libyaml fails without one (and,
         * in places, without setting YAML_MEMORY_ERROR) only when an allocation fails */
        int rc = parser.error == YAML_MEMORY_ERROR || !parser.problem ? opr_fail(OPR_ERR_NOMEM, "%s: out of memory reading YAML", file) :
                 opr_fail(OPR_ERR_PARSE, "%s:%zu:%zu: %s%s%s", file, parser.problem_mark.line + 1,
                          parser.problem_mark.column + 1, parser.problem ? parser.problem : "YAML error",
                          parser.context ? " " : "", parser.context ? parser.context : "");
        pthread_mutex_lock(&ctx->lock);
        registry_note_error(ctx, opr_last_error());
        pthread_mutex_unlock(&ctx->lock);
        yaml_parser_delete(&parser);
        return rc;
    }
    loader l = {ctx, &doc, text, file};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = OPR_OK;
    if (root && root->type != YAML_SEQUENCE_NODE) {
        rc = yaml_fail_at(&l, root, OPR_ERR_PARSE, "the file must be a sequence of op entries%s", "");
        pthread_mutex_lock(&ctx->lock);
        registry_note_error(ctx, opr_last_error());
        pthread_mutex_unlock(&ctx->lock);
    }
    for (yaml_node_item_t *it = root && !rc ? root->data.sequence.items.start : NULL;
         it && it < root->data.sequence.items.top; it++) {
        yaml_node_t *entry = yaml_document_get_node(&doc, *it), *extends = NULL;
        for (yaml_node_pair_t *p = entry && entry->type == YAML_MAPPING_NODE ? entry->data.mapping.pairs.start : NULL;
             p && p < entry->data.mapping.pairs.top; p++) {
            const char *k = yaml_scalar(yaml_document_get_node(&doc, p->key));
            if (k && !strcmp(k, "extends")) extends = yaml_document_get_node(&doc, p->value);
        }
        if (extends) { /* more for an op defined earlier: nothing is added to the registry but kernel slots */
            int ext_rc = yaml_extend_entry(&l, entry, extends);
            pthread_mutex_lock(&ctx->lock);
            if (ext_rc) {
                nomem = nomem || ext_rc == OPR_ERR_NOMEM;
                registry_note_error(ctx, opr_last_error());
                if (!refused++) snprintf(first_error, sizeof first_error, "%s", opr_last_error());
            } else {
                added++;
            }
            pthread_mutex_unlock(&ctx->lock);
            continue;
        }
        opr_op *op = load_entry(&l, entry);
        pthread_mutex_lock(&ctx->lock);
        bool kept = false;
        int add_rc = op ? register_entry(ctx, op, &kept) : opr_error_status();
        if (add_rc) {
            if (!kept) op_free(op);
            nomem = nomem || add_rc == OPR_ERR_NOMEM;
            registry_note_error(ctx, opr_last_error());
            if (!refused++) snprintf(first_error, sizeof first_error, "%s", opr_last_error());
        } else {
            added++;
        }
        pthread_mutex_unlock(&ctx->lock);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (n_loaded) *n_loaded = added;
    if (rc) return rc;
    if (refused)
        return opr_fail(nomem ? OPR_ERR_NOMEM : OPR_ERR_PARSE, "%s%s", first_error,
                        refused > 1 ? " (and more: see opr_registry_errors)" : "");
    return OPR_OK;
}

int yaml_load_file(opr_ctx *ctx, const char *path, int *n_loaded)
{
    if (n_loaded) *n_loaded = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read
     * (a FIFO would block, a link to /dev/zero would be read until memory runs out) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOMEM) return opr_fail(OPR_ERR_NOMEM, "%s: out of memory opening it", path);
    if (fd < 0) return opr_fail(OPR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return opr_fail(OPR_ERR_IO, "%s: cannot read: not a regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        if (e == ENOMEM) return opr_fail(OPR_ERR_NOMEM, "%s: out of memory opening it", path);
        return opr_fail(OPR_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); fclose(f); return opr_fail(OPR_ERR_NOMEM, "%s: out of memory", path); }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return opr_fail(OPR_ERR_IO, "%s: read error", path); }
    buf[len] = '\0';
    int rc = yaml_load_text(ctx, buf, len, path, n_loaded);
    free(buf);
    return rc;
}

opr_status opr_registry_load_yaml(opr_ctx *ctx, const char *path, int *n_loaded)
{
    if (n_loaded) *n_loaded = 0;
    if (!ctx || !path) return opr_fail(OPR_ERR_INVALID, "opr_registry_load_yaml: NULL argument");
    return yaml_load_file(ctx, path, n_loaded);
}

opr_status opr_registry_load_yaml_string(opr_ctx *ctx, const char *text, const char *name, int *n_loaded)
{
    if (n_loaded) *n_loaded = 0;
    if (!ctx || !text) return opr_fail(OPR_ERR_INVALID, "opr_registry_load_yaml_string: NULL argument");
    return yaml_load_text(ctx, text, strlen(text), name ? name : "<string>", n_loaded);
}
