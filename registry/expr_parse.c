/* Recursive-descent parser for the expression language.
 *
 *   expr    := or
 *   or      := and ('||' and)*
 *   and     := cmp ('&&' cmp)*
 *   cmp     := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
 *   sum     := prod (('+'|'-') prod)*
 *   prod    := unary (('*'|'/'|'%') unary)*
 *   unary   := ('-'|'!') unary | postfix
 *   postfix := primary ('(' args ')' | '[' expr ']')*
 *   primary := INT | FLOAT | STRING | NAME | '[' items ']' | '(' expr ')'
 */
#include "expr.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *text;
    const char *p;
    const expr_src *src;
    int failed;
    int depth;              /* recursion depth of parse_expr and parse_unary */
    /* the last position computed, so that each node's costs only the text since */
    const char *mark;
    int mark_line, mark_col;
} parser;

static void pos_of(parser *ps, const char *at, int *line, int *col)
{
    const char *c = ps->text;
    *line = ps->src->line;
    *col = ps->src->col;
    if (ps->mark && ps->mark <= at) {
        c = ps->mark;
        *line = ps->mark_line;
        *col = ps->mark_col;
    }
    for (; c < at; c++) {
        if (*c == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
    ps->mark = at;
    ps->mark_line = *line;
    ps->mark_col = *col;
}

static void skip_space(parser *ps)
{
    while (*ps->p && isspace((unsigned char)*ps->p)) ps->p++;
}

static expr *fail_at(parser *ps, const char *at, const char *what)
{
    if (ps->failed) return NULL;
    ps->failed = 1;
    int line, col;
    pos_of(ps, at, &line, &col);
    char tok[32];
    size_t n = 0;
    if (!*at) strcpy(tok, "end of expression");
    else {
        while (at[n] && !isspace((unsigned char)at[n]) && n < sizeof tok - 1 &&
               (n == 0 || isalnum((unsigned char)at[n]) || at[n] == '_' || at[n] == '.'))
            n++;
        memcpy(tok, at, n);
        tok[n] = '\0';
    }
    opr_fail(OPR_ERR_PARSE, "%s:%d:%d: %s near '%s'", ps->src->file, line, col, what, tok);
    return NULL;
}

/* An allocation failed: the status is OPR_ERR_NOMEM, whatever fails after. */
static expr *nomem(parser *ps)
{
    if (!ps->failed) opr_fail(OPR_ERR_NOMEM, "out of memory parsing an expression");
    ps->failed = 1;
    return NULL;
}

/* A node; its name (NAME, CALL, STR: len bytes of `name`) is stored in the same block,
 * one allocation per node being what keeps loading the op files cheap. */
static expr *node_new(parser *ps, expr_kind kind, const char *at, const char *name, size_t len)
{
    expr *e = calloc(1, sizeof *e + (name ? len + 1 : 0));
    if (!e) return nomem(ps);
    if (name) {
        e->name = memcpy((char *)(e + 1), name, len);
        e->name[len] = '\0';
    }
    e->kind = kind;
    e->slot = -1;
    e->builtin = -1;
    pos_of(ps, at, &e->line, &e->col);
    return e;
}

/* Appends arg (and its keyword) to e; on failure frees both. The argument array grows
 * by doubling; the keyword array exists once an argument has a keyword. */
static int push_arg(parser *ps, expr *e, expr *arg, char *kw)
{
    if (arg->height >= EXPR_MAX_DEPTH) {
        expr_free(arg);
        free(kw);
        fail_at(ps, ps->p, "expression nested too deeply");
        return OPR_ERR_PARSE;
    }
    bool ok = true;
    if (e->nargs == e->cap) {
        int cap = e->cap ? 2 * e->cap : 2;
        expr **args = realloc(e->args, (size_t)cap * sizeof *args);
        char **kws = e->kwnames ? realloc(e->kwnames, (size_t)cap * sizeof *kws) : NULL;
        if (args) e->args = args;
        if (kws) e->kwnames = kws;
        ok = args && (kws || !e->kwnames);
        if (ok) e->cap = cap;
    }
    if (ok && kw && !e->kwnames) {
        e->kwnames = calloc((size_t)e->cap, sizeof *e->kwnames);
        ok = e->kwnames != NULL;
    }
    if (!ok) {
        expr_free(arg);
        free(kw);
        nomem(ps);
        return OPR_ERR_NOMEM;
    }
    if (arg->height + 1 > e->height) e->height = arg->height + 1;
    if (e->kwnames) e->kwnames[e->nargs] = kw;
    e->args[e->nargs++] = arg;
    return OPR_OK;
}

static expr *parse_expr(parser *ps);

static bool accept(parser *ps, const char *tok)
{
    skip_space(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->p, tok, n)) return false;
    /* '<' must not swallow the first half of '<=' (and so on) */
    if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '=' || tok[0] == '!') && ps->p[1] == '=')
        return false;
    ps->p += n;
    return true;
}

static expr *binary(parser *ps, int op, expr *l, expr *r, const char *at)
{
    if (!l || !r) { expr_free(l); expr_free(r); return NULL; }
    expr *e = node_new(ps, EXPR_BINARY, at, NULL, 0);
    if (!e) { expr_free(l); expr_free(r); return NULL; }
    e->op = op;
    if (push_arg(ps, e, l, NULL)) { expr_free(e); expr_free(r); return NULL; }
    if (push_arg(ps, e, r, NULL)) { expr_free(e); return NULL; }
    return e;
}

/* Whether the len bytes at s spell word. */
static bool word_is(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && !memcmp(s, word, len);
}

/* Comma-separated items up to `close`, with `name=value` keywords when allowed. */
static expr *parse_items(parser *ps, expr *e, char close, bool keywords)
{
    skip_space(ps);
    if (*ps->p == close) { ps->p++; return e; }
    for (;;) {
        skip_space(ps);
        char *kw = NULL;
        if (keywords && (isalpha((unsigned char)*ps->p) || *ps->p == '_')) {
            const char *save = ps->p;
            while (isalnum((unsigned char)*ps->p) || *ps->p == '_') ps->p++;
            const char *after = ps->p;
            skip_space(ps);
            if (*ps->p == '=' && ps->p[1] != '=') {
                if (!(kw = strndup(save, (size_t)(after - save)))) { expr_free(e); return nomem(ps); }
                ps->p++;
            } else {
                ps->p = save;
            }
        }
        expr *a = parse_expr(ps);
        if (!a || push_arg(ps, e, a, kw)) { if (!a) free(kw); expr_free(e); return NULL; }
        skip_space(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; return e; }
        expr_free(e);
        return fail_at(ps, ps->p, close == ')' ? "expected ',' or ')'" : "expected ',' or ']'");
    }
}

static expr *parse_primary(parser *ps)
{
    skip_space(ps);
    const char *at = ps->p;
    char c = *at;
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)at[1]))) {
        char *end;
        errno = 0;
        long long iv = strtoll(at, &end, 10);
        bool is_float = *end == '.' || *end == 'e' || *end == 'E';
        if (is_float) {
            double d = strtod(at, &end);
            expr *e = node_new(ps, EXPR_FLOAT, at, NULL, 0);
            if (e) e->d = d;
            ps->p = end;
            return e;
        }
        if (errno) return fail_at(ps, at, "integer out of range");
        expr *e = node_new(ps, EXPR_INT, at, NULL, 0);
        if (e) e->i = iv;
        ps->p = end;
        return e;
    }
    if (c == '"' || c == '\'') {
        const char *end = strchr(at + 1, c);
        if (!end) return fail_at(ps, at, "unterminated string");
        expr *e = node_new(ps, EXPR_STR, at, at + 1, (size_t)(end - at - 1));
        ps->p = end + 1;
        return e;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        while (isalnum((unsigned char)*ps->p) || *ps->p == '_') ps->p++;
        /* a call may name an overload, as schemas do: `div.Tensor_mode(self, other, "trunc")`;
         * the dot counts only when a name and '(' follow it (the language has no fields) */
        if (*ps->p == '.' && (isalpha((unsigned char)ps->p[1]) || ps->p[1] == '_')) {
            const char *q = ps->p + 1;
            while (isalnum((unsigned char)*q) || *q == '_') q++;
            const char *r = q;
            while (isspace((unsigned char)*r)) r++;
            if (*r == '(') ps->p = q;
        }
        size_t n = (size_t)(ps->p - at);
        expr *e;
        if (word_is(at, n, "True") || word_is(at, n, "False") || word_is(at, n, "true") || word_is(at, n, "false")) {
            e = node_new(ps, EXPR_BOOL, at, NULL, 0);
            if (e) e->b = c == 'T' || c == 't';
        } else if (word_is(at, n, "None")) {
            e = node_new(ps, EXPR_NONE, at, NULL, 0);
        } else if (word_is(at, n, "inf")) {
            e = node_new(ps, EXPR_FLOAT, at, NULL, 0);
            if (e) e->d = __builtin_inf();
        } else {
            e = node_new(ps, EXPR_NAME, at, at, n);
        }
        return e;
    }
    if (c == '[') {
        ps->p++;
        expr *e = node_new(ps, EXPR_LIST, at, NULL, 0);
        return e ? parse_items(ps, e, ']', false) : NULL;
    }
    if (c == '(') {
        ps->p++;
        expr *e = parse_expr(ps);
        if (!e) return NULL;
        if (!accept(ps, ")")) { expr_free(e); return fail_at(ps, ps->p, "expected ')'"); }
        return e;
    }
    return fail_at(ps, at, *at ? "unexpected token" : "unexpected end");
}

static expr *parse_postfix(parser *ps)
{
    expr *e = parse_primary(ps);
    while (e) {
        skip_space(ps);
        const char *at = ps->p;
        if (*at == '(') {
            if (e->kind != EXPR_NAME) { expr_free(e); return fail_at(ps, at, "only names can be called"); }
            ps->p++;
            e->kind = EXPR_CALL;
            e = parse_items(ps, e, ')', true);
        } else if (*at == '[') {
            ps->p++;
            expr *idx = parse_expr(ps);
            if (!idx || !accept(ps, "]")) {
                expr_free(idx);
                expr_free(e);
                return fail_at(ps, ps->p, "expected ']'");
            }
            expr *n = node_new(ps, EXPR_INDEX, at, NULL, 0);
            if (!n) { expr_free(e); expr_free(idx); return NULL; }
            if (push_arg(ps, n, e, NULL)) { expr_free(n); expr_free(idx); return NULL; }
            if (push_arg(ps, n, idx, NULL)) { expr_free(n); return NULL; }
            e = n;
        } else {
            break;
        }
    }
    return e;
}

static expr *parse_unary(parser *ps)
{
    skip_space(ps);
    const char *at = ps->p;
    int op = 0;
    if (*at == '-') op = EOP_NEG;
    else if (*at == '!' && at[1] != '=') op = EOP_NOT;
    if (!op) return parse_postfix(ps);
    ps->p++;
    /* "- - - 1" folds into one literal: the recursion, not the tree, is what grows */
    if (ps->depth >= EXPR_MAX_DEPTH) return fail_at(ps, at, "expression nested too deeply");
    ps->depth++;
    expr *a = parse_unary(ps);
    ps->depth--;
    if (!a) return NULL;
    if (op == EOP_NEG && (a->kind == EXPR_INT || a->kind == EXPR_FLOAT)) { /* fold literals */
        a->i = -a->i;
        a->d = -a->d;
        pos_of(ps, at, &a->line, &a->col);
        return a;
    }
    expr *e = node_new(ps, EXPR_UNARY, at, NULL, 0);
    if (!e || push_arg(ps, e, a, NULL)) { if (!e) expr_free(a); else expr_free(e); return NULL; }
    e->op = op;
    return e;
}

static expr *parse_prod(parser *ps)
{
    expr *l = parse_unary(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        int op = accept(ps, "*") ? EOP_MUL : accept(ps, "/") ? EOP_DIV : accept(ps, "%") ? EOP_MOD : 0;
        if (!op || !l) return l;
        l = binary(ps, op, l, parse_unary(ps), at);
    }
}

static expr *parse_sum(parser *ps)
{
    expr *l = parse_prod(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        int op = accept(ps, "+") ? EOP_ADD : accept(ps, "-") ? EOP_SUB : 0;
        if (!op || !l) return l;
        l = binary(ps, op, l, parse_prod(ps), at);
    }
}

static expr *parse_cmp(parser *ps)
{
    expr *l = parse_sum(ps);
    if (!l) return NULL;
    skip_space(ps);
    const char *at = ps->p;
    int op = accept(ps, "==") ? EOP_EQ : accept(ps, "!=") ? EOP_NE : accept(ps, "<=") ? EOP_LE
           : accept(ps, ">=") ? EOP_GE : accept(ps, "<") ? EOP_LT : accept(ps, ">") ? EOP_GT : 0;
    return op ? binary(ps, op, l, parse_sum(ps), at) : l;
}

static expr *parse_and(parser *ps)
{
    expr *l = parse_cmp(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        if (!l || !accept(ps, "&&")) return l;
        l = binary(ps, EOP_AND, l, parse_cmp(ps), at);
    }
}

static expr *parse_or(parser *ps)
{
    expr *l = parse_and(ps);
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        if (!l || !accept(ps, "||")) return l;
        l = binary(ps, EOP_OR, l, parse_and(ps), at);
    }
}

/* Every bracket, call argument and index comes back here: the depth check that keeps
 * "((((...))))" from exhausting the stack (brackets add no node to the tree). */
static expr *parse_expr(parser *ps)
{
    skip_space(ps);
    if (ps->depth >= EXPR_MAX_DEPTH) return fail_at(ps, ps->p, "expression nested too deeply");
    ps->depth++;
    expr *e = parse_or(ps);
    ps->depth--;
    return e;
}

expr *expr_parse(const char *text, const expr_src *src)
{
    parser ps = {.text = text, .p = text, .src = src};
    expr *e = parse_expr(&ps);
    skip_space(&ps);
    if (e && *ps.p) {
        expr_free(e);
        return fail_at(&ps, ps.p, "unexpected trailing text");
    }
    return e;
}

void expr_free(expr *e)
{
    if (!e) return;
    for (int i = 0; i < e->nargs; i++) {
        expr_free(e->args[i]);
        free(e->kwnames ? e->kwnames[i] : NULL);
    }
    free(e->args);
    free(e->kwnames);
    free(e); /* with its name */
}
