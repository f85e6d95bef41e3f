/* Schema strings: "name(Type arg=default, ...) -> Ret" where name may carry an
 * overload ("max.dim": op max, overload dim), Type is Tensor, Tensor?, Tensor[], int,
 * int?, int[], int[]?, float, float?, Scalar, Scalar?, bool, str or str?, Tensor?[] (a
 * Tensor[] whose items may be None: ATen's indices) (and ATen's
 * spellings of some: parse_type; a `*` before the keyword-only arguments), and Ret is Tensor or "(Tensor a, Tensor b)". Defaults are
 * literals of the expression language. */
#include "composite.h"
#include "deriv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *text; arg_type type; bool optional; } type_names[] = {
    {"Tensor[]", ARG_TENSOR_LIST, false}, {"Tensor?", ARG_TENSOR, true}, {"Tensor", ARG_TENSOR, false},
    {"int[]?", ARG_INT_LIST, true}, {"int[]", ARG_INT_LIST, false}, {"int?", ARG_INT, true},
    {"int", ARG_INT, false}, {"float?", ARG_FLOAT, true}, {"float", ARG_FLOAT, false},
    {"bool?", ARG_BOOL, true}, {"bool", ARG_BOOL, false}, {"str?", ARG_STR, true}, {"str", ARG_STR, false}, {"Scalar?", ARG_SCALAR, true},
    {"Scalar", ARG_SCALAR, false},
    /* ATen's float[]? (upsample's scale_factors): a list of doubles, None its only default */
    {"float[]?", ARG_FLOAT_LIST, true}, {"float[]", ARG_FLOAT_LIST, false},
};

typedef struct cursor {
    const char *text, *p;
    const expr_src *src;
    bool nomem;             /* an allocation failed: that is the error, whatever follows */
} cursor;

static int fail(const cursor *c, const char *at, const char *what)
{
    if (c->nomem) return opr_fail(OPR_ERR_NOMEM, "out of memory parsing a schema");
    char tok[40];
    size_t n = strcspn(at, " ,()=");
    if (n == 0) n = *at ? 1 : 0;
    if (n >= sizeof tok) n = sizeof tok - 1;
    memcpy(tok, at, n);
    tok[n] = '\0';
    return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: %s near '%s'", c->src->file, c->src->line,
                    c->src->col + (int)(at - c->text), what, n ? tok : "end of schema");
}

static void skip(cursor *c) { while (isspace((unsigned char)*c->p)) c->p++; }

static char *ident(cursor *c)
{
    skip(c);
    const char *s = c->p;
    while (isalnum((unsigned char)*c->p) || *c->p == '_') c->p++;
    if (c->p == s) return NULL;
    char *id = strndup(s, (size_t)(c->p - s));
    c->nomem = !id;
    return id;
}

/* An op name: an identifier, optionally '.' and an overload name ("max.dim"). */
static char *op_name(cursor *c)
{
    skip(c);
    const char *s = c->p;
    while (isalnum((unsigned char)*c->p) || *c->p == '_') c->p++;
    if (c->p == s) return NULL;
    if (*c->p == '.' && (isalnum((unsigned char)c->p[1]) || c->p[1] == '_')) {
        c->p++;
        while (isalnum((unsigned char)*c->p) || *c->p == '_') c->p++;
    }
    char *id = strndup(s, (size_t)(c->p - s));
    c->nomem = !id;
    return id;
}

/* Evaluates a default literal into arg->def. */
static int parse_default(cursor *c, op_arg *a, const char *at)
{
    /* the default runs to the next ',' or ')' at bracket depth 0 */
    const char *s = c->p;
    int depth = 0;
    while (*c->p && !(depth == 0 && (*c->p == ',' || *c->p == ')'))) {
        if (*c->p == '[') depth++;
        if (*c->p == ']') depth--;
        c->p++;
    }
    char *text = strndup(s, (size_t)(c->p - s));
    if (!text) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    expr_src src = {c->src->file, c->src->line, c->src->col + (int)(s - c->text)};
    expr *e = expr_parse(text, &src);
    free(text);
    if (!e) return opr_error_status();
    int rc = OPR_OK;
    a->has_default = true;
    a->def.struct_size = sizeof a->def;
    if (e->kind == EXPR_NONE) {
        if (!a->optional) rc = fail(c, at, "None default for a non-optional argument");
        a->def.kind = OPR_ARG_NONE;
    } else if (a->type == ARG_INT && e->kind == EXPR_INT) {
        a->def.kind = OPR_ARG_INT; a->def.u.i = e->i;
    } else if (a->type == ARG_FLOAT && (e->kind == EXPR_INT || e->kind == EXPR_FLOAT)) {
        a->def.kind = OPR_ARG_DOUBLE; a->def.u.d = e->kind == EXPR_INT ? (double)e->i : e->d;
    } else if (a->type == ARG_SCALAR && e->kind == EXPR_INT) { /* a Scalar keeps the number's kind */
        a->def.kind = OPR_ARG_INT; a->def.u.i = e->i;
    } else if (a->type == ARG_SCALAR && e->kind == EXPR_FLOAT) {
        a->def.kind = OPR_ARG_DOUBLE; a->def.u.d = e->d;
    } else if (a->type == ARG_BOOL && e->kind == EXPR_BOOL) {
        a->def.kind = OPR_ARG_BOOL; a->def.u.b = e->b;
    } else if (a->type == ARG_STR && e->kind == EXPR_STR) {
        if (!(a->def_str = strdup(e->name))) rc = opr_fail(OPR_ERR_NOMEM, "out of memory");
        a->def.kind = OPR_ARG_STRING; a->def.u.s = a->def_str;
    } else if (a->type == ARG_INT_LIST && a->list_len && e->kind == EXPR_INT) { /* int[2] padding=0 */
        for (int i = 0; i < a->list_len; i++) a->def_ints[i] = e->i;
        a->def.kind = OPR_ARG_INT_LIST; a->def.u.il.items = a->def_ints; a->def.u.il.n = a->list_len;
    } else if (a->type == ARG_INT_LIST && e->kind == EXPR_LIST && e->nargs <= OPR_MAX_DIMS) {
        for (int i = 0; i < e->nargs && !rc; i++) {
            if (e->args[i]->kind != EXPR_INT) rc = fail(c, at, "int list default must hold ints");
            else a->def_ints[i] = e->args[i]->i;
        }
        a->def.kind = OPR_ARG_INT_LIST; a->def.u.il.items = a->def_ints; a->def.u.il.n = e->nargs;
    } else {
        rc = fail(c, at, "default value does not match the argument type");
    }
    expr_free(e);
    return rc;
}

/* The type of an argument, as ATen writes it too: `SymInt` is `int` (sizes are concrete
 * here); `int[N]` and `SymInt[N]` are int lists whose int default stands for N copies
 * (`int[2] padding=0` is [0, 0]); `bool[N]` is an int list of 0 / 1 items (ATen's
 * `bool[3] output_mask`); `Tensor(a!)` is a Tensor the op writes in place (batch norm's
 * running statistics), `Tensor(a)` an alias annotation, which changes nothing here. */
static int parse_type(cursor *c, op_arg *a)
{
    const char *at = c->p, *p = c->p;
    char text[16];
    size_t n = 0;
    if (!strncmp(p, "SymInt", 6)) { memcpy(text, "int", 3); n = 3; p += 6; }
    while ((isalpha((unsigned char)*p)) && n < sizeof text - 4) text[n++] = *p++;
    if (n == 6 && !memcmp(text, "Tensor", 6) && *p == '(') { /* alias annotation */
        const char *q = p + 1;
        while (isalpha((unsigned char)*q)) q++;
        if (*q == '!') { a->written = true; q++; }
        if (*q != ')' || q == p + 1) return fail(c, at, "expected an alias annotation such as Tensor(a!)");
        p = q + 1;
    }
    if (n == 6 && !memcmp(text, "Tensor", 6) && p[0] == '?' && p[1] == '[' && p[2] == ']') { /* Tensor?[] */
        a->none_items = true;
        p++;
    }
    if (*p == '[') {
        const char *q = p + 1;
        while (isdigit((unsigned char)*q)) q++;
        if (*q != ']') return fail(c, at, "unknown argument type");
        if (q > p + 1) {
            long len = strtol(p + 1, NULL, 10);
            if (len < 1 || len > OPR_MAX_DIMS || (n == 6 && !memcmp(text, "Tensor", 6)))
                return fail(c, at, "unknown argument type");
            a->list_len = (int)len;
            if (n == 4 && !memcmp(text, "bool", 4)) { memcpy(text, "int", 3); n = 3; a->bool_items = true; }
        }
        text[n++] = '[';
        text[n++] = ']';
        p = q + 1;
    }
    if (*p == '?') text[n++] = *p++;
    text[n] = '\0';
    if (!isspace((unsigned char)*p)) return fail(c, at, "unknown argument type");
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (!strcmp(text, type_names[i].text)) {
            a->type = type_names[i].type;
            a->optional = type_names[i].optional;
            if (a->written && a->type != ARG_TENSOR) break;
            c->p = p;
            return OPR_OK;
        }
    return fail(c, at, "unknown argument type");
}

static int parse_arg(cursor *c, op_arg *a, const char **name_pos)
{
    skip(c);
    int rc = parse_type(c, a);
    if (rc) return rc;
    a->fixed_dtype = -1;
    skip(c);
    const char *name_at = c->p;
    if (!(a->name = ident(c))) return fail(c, name_at, "expected an argument name");
    *name_pos = name_at;
    skip(c);
    if (*c->p == '=') {
        c->p++;
        skip(c);
        return parse_default(c, a, c->p);
    }
    return OPR_OK;
}

static int parse_returns(cursor *c, opr_op *op)
{
    skip(c);
    if (!strncmp(c->p, "Tensor[]", 8)) { /* a list whose length the `count:` key gives */
        c->p += 8;
        if (!(op->out_names[0] = strdup("result"))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        op->nout = 1;
        op->list_out = true;
        return OPR_OK;
    }
    if (!strncmp(c->p, "Tensor", 6) && !isalnum((unsigned char)c->p[6])) {
        c->p += 6;
        /* ATen's alias annotation of an out= overload's result, `-> Tensor(a!)`: the
         * result is that argument, which the op's forward returns */
        if (*c->p == '(') {
            const char *q = c->p + 1;
            while (isalpha((unsigned char)*q)) q++;
            if (*q == '!') q++;
            if (*q != ')' || q == c->p + 1) return fail(c, c->p, "expected an alias annotation such as Tensor(a!)");
            c->p = q + 1;
        }
        if (!(op->out_names[0] = strdup("result"))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        op->nout = 1;
        return OPR_OK;
    }
    if (*c->p != '(') return fail(c, c->p, "expected 'Tensor' or '(' after '->'");
    c->p++;
    for (;;) {
        skip(c);
        if (strncmp(c->p, "Tensor", 6)) return fail(c, c->p, "only Tensor outputs are supported");
        c->p += 6;
        if (op->nout == OPR_MAX_OUTS) return fail(c, c->p, "too many outputs");
        char *name = ident(c);
        if (!name && c->nomem) return opr_fail(OPR_ERR_NOMEM, "out of memory parsing a schema");
        if (!name) {
            char buf[16];
            snprintf(buf, sizeof buf, "result%d", op->nout);
            name = strdup(buf);
        }
        if (!name) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        op->out_names[op->nout++] = name;
        skip(c);
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == ')') { c->p++; return OPR_OK; }
        return fail(c, c->p, "expected ',' or ')' in the outputs");
    }
}

int schema_parse(opr_op *op, const char *schema, const expr_src *src)
{
    cursor c = {schema, schema, src, false};
    const char *at = c.p;
    if (!(op->name = op_name(&c))) return fail(&c, at, "expected an op name");
    const char *dot = strchr(op->name, '.');
    op->base_len = dot ? (int)(dot - op->name) : (int)strlen(op->name);
    if (dot && !(op->overload = strdup(dot + 1))) return opr_fail(OPR_ERR_NOMEM, "out of memory parsing a schema");
    skip(&c);
    if (*c.p != '(') return fail(&c, c.p, "expected '('");
    c.p++;
    skip(&c);
    if (*c.p == ')') c.p++;
    else for (;;) {
        if (op->nargs == OPR_MAX_ARGS) return fail(&c, c.p, "too many arguments");
        /* ATen's `*` starts the keyword-only arguments; here every argument is also
         * positional (opr_call takes them in schema order), so the marker is skipped. */
        skip(&c);
        if (*c.p == '*' && op->nargs > 0) {
            c.p++;
            skip(&c);
            if (*c.p != ',') return fail(&c, c.p, "expected ',' after '*'");
            c.p++;
            skip(&c);
        }
        op_arg *a = &op->args[op->nargs++];
        const char *name_at = c.p;
        int rc = parse_arg(&c, a, &name_at);
        if (rc) return rc;
        for (int k = 0; k < op->nargs - 1; k++)
            if (!strcmp(op->args[k].name, a->name)) return fail(&c, name_at, "duplicate argument name");
        if (!a->has_default && op->nargs > 1 && op->args[op->nargs - 2].has_default)
            return fail(&c, name_at, "argument without default after one with a default");
        skip(&c);
        if (*c.p == ',') { c.p++; continue; }
        if (*c.p == ')') { c.p++; break; }
        return fail(&c, c.p, "expected ',' or ')'");
    }
    skip(&c);
    if (strncmp(c.p, "->", 2)) return fail(&c, c.p, "expected '->'");
    c.p += 2;
    int rc = parse_returns(&c, op);
    if (rc) return rc;
    skip(&c);
    if (*c.p) return fail(&c, c.p, "unexpected text after the schema");
    op->inplace = op->name[op->base_len - 1] == '_';
    for (int i = 0; i < op->nargs; i++) {
        op->has_scalars |= op->args[i].type == ARG_SCALAR;
        op->has_written |= op->args[i].written;
        op->has_index_list |= op->args[i].none_items;
    }
    if (op->inplace && (op->nargs == 0 || op->args[0].type != ARG_TENSOR || op->nout != 1))
        return fail(&c, schema, "in-place op must take a Tensor first and return one Tensor");
    return OPR_OK;
}

void op_free(opr_op *op)
{
    if (!op) return;
    deriv_free(op);
    samples_free(op);
    composite_free(op);
    free(op->alt.name);
    for (int i = 0; i < op->alt.nrates; i++) free(op->alt.rate_device[i]);
    expr_free(op->jagged.ragged);
    free(op->jagged.ragged_text);
    free(op->name);
    free(op->overload);
    free(op->schema);
    free(op->file);
    for (int i = 0; i < op->nargs; i++) { free(op->args[i].name); free(op->args[i].def_str); }
    for (int i = 0; i < op->nout; i++) free(op->out_names[i]);
    expr_free(op->count);
    /* a refused entry may hold more shapes than outputs */
    for (int i = 0; i < OPR_MAX_OUTS; i++) expr_free(op->shapes[i]);
    for (int i = 0; i < op->nchecks; i++) expr_free(op->checks[i]);
    expr_free(op->flops);
    expr_free(op->identity_if);
    for (int i = 0; i < OPR_MAX_DEVICE_TYPES; i++)
        for (kernel_entry *k = atomic_load(&op->kernels[i]), *next; k; k = next) {
            next = k->replaced;
            free(k);
        }
    free(op);
}
