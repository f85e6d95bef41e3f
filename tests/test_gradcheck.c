/* Gradient checks generated from the registry.
 *
 * The suite reads the YAML files of registry/ops itself (libyaml; the directory is
 * $OPREG_YAML_DIR) and, for every op that has derivative candidates and `samples:`,
 * runs for every sample, every candidate forced in turn, and every non-empty subset of
 * the sample's floating tensor inputs as requires-grad mask:
 *
 *  - gradients: opr_gradcheck (autograd/gradcheck.c), the library's own check, on the
 *    sample's arguments: every candidate x mask against central finite differences in
 *    f64 (eps 1e-6; |a - n| <= atol + rtol * max(|a|, |n|), rtol 1e-5, atol 1e-7);
 *  - gradients are finite, shaped like their inputs (opr_autograd_grad, per candidate);
 *  - agreement: every candidate gives the same gradients as the first one that ran for
 *    the same sample and mask (separate vs fused, 1e-10 relative in f64);
 *  - save sets: the plan (from opr_plan_explain, forced and chosen by cost) saves
 *    exactly the tensors that the chosen formulas read directly, i.e. not only inside
 *    the metadata built-ins (size(), sizes(), numel(), dim(), reduce(), ...). The
 *    formulas are parsed here from the YAML text, independently of the planner, and
 *    opr_plan_saved_bytes must equal the bytes of that set.
 *
 * A candidate that covers none of the requested inputs is skipped; a kernel candidate
 * the backend lacks (planning fails with OPR_ERR_NOT_FOUND) counts as "not available".
 * One summary line is printed per op. A new YAML entry with samples is covered without
 * new code here.
 *
 * A second test case measures, with the memory statistics, what mm, matmul, linear and
 * addmm keep alive for backward when exactly one operand requires grad.
 *
 * Sample format (a list of flow mappings from argument names to specs): a Tensor is a
 * shape list (f64, uniform in [-1, 1]) or {shape: [..], range: [lo, hi], dtype:
 * f64|i64|bool, values: [..]} (i64: integers in [lo, hi); bool: random; values: the elements
 * as given); a Tensor[] is a list of such
 * specs; scalars are plain values; omitted arguments take their defaults. */
#include "test_util.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAXA 12  /* arguments of an op */
#define MAXO 4   /* outputs of an op */
#define MAXC 16  /* derivative candidates of an op */
#define MAXS 32  /* samples of an op */
#define MAXL 8   /* tensors of a Tensor[] sample */
#define MAXT 24  /* tensors of one sample */
#define MAXD 8   /* dims */
#define MAXOPS 512

#define AGREE_TOL 1e-10

/* ------------------------------------------------------------------ schema */

typedef enum atype {
    T_TENSOR, T_TENSOR_OPT, T_TENSOR_LIST, T_INT, T_INT_OPT, T_INT_LIST, T_INT_LIST_OPT,
    T_FLOAT, T_FLOAT_OPT, T_BOOL, T_BOOL_OPT, T_STR, T_STR_OPT, T_FLOAT_LIST, T_FLOAT_LIST_OPT
} atype;

static const struct { const char *text; atype type; } TYPES[] = {
    {"Tensor[]", T_TENSOR_LIST}, {"Tensor?[]", T_TENSOR_LIST}, {"Tensor?", T_TENSOR_OPT}, {"Tensor", T_TENSOR},
    {"int[]?", T_INT_LIST_OPT}, {"int[]", T_INT_LIST}, {"int?", T_INT_OPT}, {"int", T_INT},
    {"float?", T_FLOAT_OPT}, {"float", T_FLOAT}, {"bool?", T_BOOL_OPT}, {"bool", T_BOOL}, {"str?", T_STR_OPT}, {"str", T_STR},
    {"Scalar?", T_FLOAT_OPT}, {"Scalar", T_FLOAT}, /* a number: the samples give floats */
    {"float[]?", T_FLOAT_LIST_OPT}, {"float[]", T_FLOAT_LIST},
};

typedef struct sarg {
    char name[64];
    atype type;
    bool has_def;
    char def[64];
} sarg;

typedef struct schema {
    char name[64];
    sarg args[MAXA];
    int nargs;
    char outs[MAXO][64];
    int nout;
} schema;

static bool is_tensor_type(atype t) { return t == T_TENSOR || t == T_TENSOR_OPT || t == T_TENSOR_LIST; }

static void trim_copy(char *dst, size_t len, const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s)) { s++; n--; }
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n >= len) n = len - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* An argument's text with ATen's spellings of types made plain, as the registry reads
 * them: SymInt is int, int[2] and bool[3] are int lists, Tensor(a!) is a Tensor. */
static void plain_type(char *a)
{
    char out[160];
    size_t n = 0;
    for (const char *p = a; *p && n < sizeof out - 1;) {
        if (!strncmp(p, "SymInt", 6)) { memcpy(out + n, "int", 3); n += 3; p += 6; continue; }
        if (!strncmp(p, "bool[", 5) && isdigit((unsigned char)p[5])) { memcpy(out + n, "int", 3); n += 3; p += 4; continue; }
        if (*p == '[' && isdigit((unsigned char)p[1])) { /* [N] */
            out[n++] = '[';
            p++;
            while (isdigit((unsigned char)*p)) p++;
            continue;
        }
        if (*p == '(' && n >= 6 && !strncmp(out + n - 6, "Tensor", 6)) { /* Tensor(a!) */
            while (*p && *p != ')') p++;
            if (*p) p++;
            continue;
        }
        out[n++] = *p++;
    }
    out[n] = '\0';
    strcpy(a, out);
}

/* "mm(Tensor self, Tensor mat2) -> Tensor" */
static bool parse_schema(const char *s, schema *sc, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    const char *open = strchr(s, '(');
    if (!open) { snprintf(err, errlen, "schema '%s' has no '('", s); return false; }
    trim_copy(sc->name, sizeof sc->name, s, (size_t)(open - s));
    const char *p = open + 1;
    int depth = 0;
    const char *start = p;
    for (;; p++) {
        if (!*p) { snprintf(err, errlen, "schema '%s' has no ')'", s); return false; }
        if (*p == '[' || *p == '(') depth++;
        else if (*p == ']' || (*p == ')' && depth > 0)) depth--;
        else if ((*p == ',' || *p == ')') && depth == 0) {
            char a[160];
            trim_copy(a, sizeof a, start, (size_t)(p - start));
            plain_type(a);
            if (a[0] && strcmp(a, "*")) { /* `*`: ATen's start of the keyword-only arguments */
                if (sc->nargs == MAXA) { snprintf(err, errlen, "too many arguments in '%s'", s); return false; }
                sarg *g = &sc->args[sc->nargs++];
                size_t k;
                for (k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++)
                    if (!strncmp(a, TYPES[k].text, strlen(TYPES[k].text)) && isspace((unsigned char)a[strlen(TYPES[k].text)]))
                        break;
                if (k == sizeof TYPES / sizeof TYPES[0]) { snprintf(err, errlen, "unknown type in '%s'", a); return false; }
                g->type = TYPES[k].type;
                const char *q = a + strlen(TYPES[k].text);
                while (isspace((unsigned char)*q)) q++;
                const char *eq = strchr(q, '=');
                trim_copy(g->name, sizeof g->name, q, eq ? (size_t)(eq - q) : strlen(q));
                if (eq) {
                    g->has_def = true;
                    trim_copy(g->def, sizeof g->def, eq + 1, strlen(eq + 1));
                    size_t dl = strlen(g->def);
                    if (dl >= 2 && (g->def[0] == '"' || g->def[0] == '\'') && g->def[dl - 1] == g->def[0]) {
                        memmove(g->def, g->def + 1, dl - 2); /* a str default: its text */
                        g->def[dl - 2] = '\0';
                    }
                }
            }
            start = p + 1;
            if (*p == ')') break;
        }
    }
    const char *arrow = strstr(p, "->");
    if (!arrow) { snprintf(err, errlen, "schema '%s' has no '->'", s); return false; }
    const char *r = arrow + 2;
    while (isspace((unsigned char)*r)) r++;
    if (*r == '(') {
        r++;
        while (*r && *r != ')' && sc->nout < MAXO) {
            const char *e = r;
            while (*e && *e != ',' && *e != ')') e++;
            char item[96];
            trim_copy(item, sizeof item, r, (size_t)(e - r));
            const char *sp = strrchr(item, ' '); /* an unnamed output is resultK, as the registry names it */
            if (sp) snprintf(sc->outs[sc->nout++], 64, "%s", sp + 1);
            else snprintf(sc->outs[sc->nout], 64, "result%d", sc->nout), sc->nout++;
            r = *e == ',' ? e + 1 : e;
        }
    } else {
        snprintf(sc->outs[0], 64, "result");
        sc->nout = 1;
    }
    return true;
}

static int arg_index(const schema *sc, const char *name)
{
    for (int i = 0; i < sc->nargs; i++)
        if (!strcmp(sc->args[i].name, name)) return i;
    return -1;
}

/* ------------------------------------------------------------------ formula analysis */

/* The built-ins of the expression language (docs/formulas.md): they read only the
 * metadata of tensor arguments, so a tensor seen only through them is not saved. */
static const char *const META_BUILTINS[] = {
    "size", "sizes", "dim", "dtype_name", "numel", "broadcast", "broadcastable", "broadcastable_to", "reduce", "set",
    "matmul_shape", "cat_shape", "diag_shape", "max", "min", "ceil", "floor", "transpose_shape",
    "permute_shape", "reshape_shape", "expand_shape", "unsqueeze_shape", "squeeze_shape", "diagonal_shape",
    "cat_offset", "stack_shape", "len", "conv_shape", "conv_transpose_padding", "pool_shape", "dims_except", "channel_shape",
    "pad_shape", "neg_ints", "strides", "storage_offset", "min_storage_size", "maybe_overlap",
};

static bool is_meta_builtin(const char *name)
{
    for (size_t i = 0; i < sizeof META_BUILTINS / sizeof META_BUILTINS[0]; i++)
        if (!strcmp(META_BUILTINS[i], name)) return true;
    return false;
}

/* Slot bits: argument i is bit i, output k is bit nargs + k. Returns 0 for names that
 * are not arguments or outputs (grad, grads, lets, keyword names). */
static uint32_t slot_bits(const schema *sc, const char *name)
{
    int a = arg_index(sc, name);
    if (a >= 0) return 1u << a;
    for (int k = 0; k < sc->nout; k++)
        if (!strcmp(sc->outs[k], name)) return 1u << (sc->nargs + k);
    if (!strcmp(name, "result")) return 1u << sc->nargs;
    if (!strcmp(name, "results")) return ((1u << sc->nout) - 1) << sc->nargs;
    return 0;
}

/* The value of a select's condition on a call: `NAME` (a bool argument), `!NAME`,
 * `NAME == None`, `NAME != None`, or `NAME == "text"` / `NAME != "text"` for a str
 * argument; 1 true, 0 false, -1 when the call does not decide it
 * here (the registry decides more; then both branches count, which can only say more). */
static int select_taken(const schema *sc, const opr_value *v, int nv, const char *s, const char *e)
{
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    bool neg = false;
    if (s < e && *s == '!') { neg = true; s++; }
    const char *id = s;
    while (s < e && (isalnum((unsigned char)*s) || *s == '_')) s++;
    char name[64];
    trim_copy(name, sizeof name, id, (size_t)(s - id));
    const int a = arg_index(sc, name);
    if (a < 0) return -1;
    const sarg *g = &sc->args[a];
    const bool given = a < nv;
    while (s < e && isspace((unsigned char)*s)) s++;
    const bool is_none = given ? v[a].kind == OPR_V_NONE : (g->has_def && !strcmp(g->def, "None"));
    if (s == e) { /* a bool argument */
        bool b;
        if (given && v[a].kind == OPR_V_BOOL) b = v[a].u.b;
        else if (!given && g->has_def) b = !strcmp(g->def, "True") || !strcmp(g->def, "true");
        else return -1;
        return b != neg;
    }
    if (neg) return -1;
    const bool eq = e - s > 2 && !strncmp(s, "==", 2), ne = e - s > 2 && !strncmp(s, "!=", 2);
    if (!eq && !ne) return -1;
    s += 2;
    while (s < e && isspace((unsigned char)*s)) s++;
    if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s) { /* NAME == "text" (a str argument) */
        const char *text = given && v[a].kind == OPR_V_STRING ? v[a].u.s : NULL;
        char want[64];
        trim_copy(want, sizeof want, s + 1, (size_t)(e - s - 2));
        if (!text) return -1;
        return (strcmp(text, want) == 0) == eq;
    }
    if (e - s != 4 || strncmp(s, "None", 4)) return -1;
    return eq ? is_none : !is_none;
}

/* Slots the formula text [p, end) reads directly (as tensor data) and only through
 * built-ins; cur: inside a metadata built-in. With the call's values v (nv of them; v
 * NULL: none), a select the call decides counts only the branch it takes, as the
 * registry saves for it. */
static void uses_span(const schema *sc, const char *p, const char *end, bool cur, const opr_value *v, int nv, uint32_t *direct,
                      uint32_t *meta)
{
    bool stack[128];
    int top = 0;
    while (p < end) {
        if (isspace((unsigned char)*p)) { p++; continue; }
        if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
            while (p < end && (isalnum((unsigned char)*p) || *p == '.' ||
                               ((*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E'))))
                p++;
            continue;
        }
        if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (p < end && *p != q) p++;
            if (p < end) p++;
            continue;
        }
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *s = p;
            while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
            char id[64];
            trim_copy(id, sizeof id, s, (size_t)(p - s));
            const char *n = p;
            while (n < end && isspace((unsigned char)*n)) n++;
            if (n < end && *n == '(' && v && !strcmp(id, "select")) { /* split its three arguments */
                const char *arg[4] = {n + 1, NULL, NULL, NULL};
                int k = 1, depth = 0;
                const char *q = n + 1;
                for (; q < end && k < 4; q++) {
                    if (*q == '(' || *q == '[') depth++;
                    else if ((*q == ')' || *q == ']') && depth > 0) depth--;
                    else if (depth == 0 && (*q == ',' || *q == ')')) {
                        arg[k++] = q + 1;
                        if (*q == ')') break; /* the select's own closing parenthesis */
                    }
                }
                const int taken = k == 4 ? select_taken(sc, v, nv, arg[0], arg[1] - 1) : -1;
                if (taken >= 0) {
                    uses_span(sc, arg[0], arg[1] - 1, true, v, nv, direct, meta); /* None tests read metadata */
                    const int b = taken ? 1 : 2;
                    uses_span(sc, arg[b], arg[b + 1] - 1, cur, v, nv, direct, meta);
                    p = arg[3];
                    continue;
                }
            }
            if (n < end && *n == '(') { /* a call */
                if (top < 128) stack[top++] = cur;
                cur = cur || is_meta_builtin(id);
                p = n + 1;
                continue;
            }
            if (n < end && *n == '=' && n[1] != '=') continue; /* keyword argument name */
            if (!strcmp(id, "results") && n < end && *n == '[') { /* results[k] */
                const char *d = n + 1;
                while (isspace((unsigned char)*d)) d++;
                if (isdigit((unsigned char)*d)) {
                    long k = strtol(d, NULL, 10);
                    if (k >= 0 && k < sc->nout) *(cur ? meta : direct) |= 1u << (sc->nargs + k);
                    continue;
                }
            }
            uint32_t b = slot_bits(sc, id);
            *(cur ? meta : direct) |= b;
            continue;
        }
        if (*p == '(' || *p == '[') {
            if (top < 128) stack[top++] = cur;
            p++;
            continue;
        }
        if (*p == ')' || *p == ']') {
            if (top > 0) cur = stack[--top];
            p++;
            continue;
        }
        p++;
    }
}

/* Slots a formula reads directly (as tensor data) and only through built-ins, both
 * branches of every select counted. */
static void formula_uses(const schema *sc, const char *text, uint32_t *direct, uint32_t *meta)
{
    uses_span(sc, text, text + strlen(text), false, NULL, 0, direct, meta);
}

/* ------------------------------------------------------------------ YAML model */

typedef struct dcand {
    char label[128];
    int cover[MAXA], ncover;
    bool kernel;
    uint32_t needs[MAXA]; /* per cover position: slots read directly */
    char *formula[MAXA];  /* per cover position: the formula's text (NULL for a kernel), for
                             needs that follow the call's selects (call_needs) */
    uint32_t let_needs;
    bool has_lets;
} dcand;

typedef enum vkind { V_ABSENT, V_NONE, V_TENSOR, V_TLIST, V_INT, V_FLOAT, V_BOOL, V_ILIST, V_STR, V_FLIST } vkind;

typedef struct tspec {
    int ndim;
    int64_t shape[MAXD];
    opr_dtype dt;
    double lo, hi;
    int nvalues;       /* > 0: the elements as given (`values:`), not drawn */
    double values[16];
} tspec;

typedef struct aval {
    vkind k;
    tspec t;
    tspec items[MAXL];
    int nitems;
    int64_t i;
    double d;
    bool b;
    int64_t il[MAXD];
    int nil;
    char s[64];
    double fl[MAXD]; /* a float[] (nil items) */
} aval;

typedef struct sample {
    aval a[MAXA];
    int line;
} sample;

typedef struct yop {
    schema sc;
    char file[128];
    int line;
    dcand c[MAXC];
    int nc;
    sample s[MAXS];
    int ns;
    bool has_samples;
    char err[512]; /* problem reading this entry */
} yop;

static yop *yops;
static int nyops;
static char load_error[1024];

typedef struct yreader {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
} yreader;

static yaml_node_t *ynode(const yreader *r, int id) { return yaml_document_get_node(r->doc, id); }
static const char *yscalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool is_null(const yaml_node_t *n)
{
    const char *s = yscalar(n);
    return s && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!s[0] || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL") ||
            !strcmp(s, "None"));
}

static bool rfail(const yreader *r, const yaml_node_t *n, const char *what, const char *tok)
{
    snprintf(r->err, r->errlen, "%s:%zu:%zu: %s%s%s", r->file, n ? n->start_mark.line + 1 : 0,
             n ? n->start_mark.column + 1 : 0, what, tok ? " " : "", tok ? tok : "");
    return false;
}

static bool read_int(const yreader *r, const yaml_node_t *n, int64_t *out)
{
    const char *s = yscalar(n);
    char *end;
    if (!s) return rfail(r, n, "expected an integer", NULL);
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return rfail(r, n, "expected an integer, got", s);
    *out = v;
    return true;
}

static bool read_double(const yreader *r, const yaml_node_t *n, double *out)
{
    const char *s = yscalar(n);
    char *end;
    if (!s) return rfail(r, n, "expected a number", NULL);
    *out = strtod(s, &end);
    if (end == s || *end) return rfail(r, n, "expected a number, got", s);
    return true;
}

static bool read_int_list(const yreader *r, const yaml_node_t *n, int64_t *out, int *count)
{
    *count = 0;
    if (n->type == YAML_SCALAR_NODE) { *count = 1; return read_int(r, n, out); }
    if (n->type != YAML_SEQUENCE_NODE) return rfail(r, n, "expected a list of integers", NULL);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        if (*count == MAXD) return rfail(r, n, "list too long", NULL);
        if (!read_int(r, ynode(r, *it), &out[(*count)++])) return false;
    }
    return true;
}

/* [2, 3] or {shape: [2, 3], range: [lo, hi], dtype: i64} */
static bool read_tspec(const yreader *r, const yaml_node_t *n, tspec *t)
{
    memset(t, 0, sizeof *t);
    t->dt = OPR_F64;
    t->lo = -1;
    t->hi = 1;
    if (n->type == YAML_SEQUENCE_NODE) return read_int_list(r, n, t->shape, &t->ndim);
    if (n->type != YAML_MAPPING_NODE) return rfail(r, n, "a tensor sample is a shape list or {shape: ..}", NULL);
    bool have_shape = false, have_range = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ynode(r, p->key), *v = ynode(r, p->value);
        const char *key = yscalar(k);
        if (!key) return rfail(r, k, "bad key", NULL);
        if (!strcmp(key, "shape")) {
            if (v->type != YAML_SEQUENCE_NODE) return rfail(r, v, "shape must be a list", NULL);
            if (!read_int_list(r, v, t->shape, &t->ndim)) return false;
            have_shape = true;
        } else if (!strcmp(key, "range")) {
            if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start != 2)
                return rfail(r, v, "range must be [lo, hi]", NULL);
            if (!read_double(r, ynode(r, v->data.sequence.items.start[0]), &t->lo)) return false;
            if (!read_double(r, ynode(r, v->data.sequence.items.start[1]), &t->hi)) return false;
            have_range = true;
        } else if (!strcmp(key, "dtype")) {
            const char *s = yscalar(v);
            if (!s || opr_dtype_parse(s, &t->dt) ||
                (t->dt != OPR_F64 && t->dt != OPR_I64 && t->dt != OPR_I32 && t->dt != OPR_BOOL))
                return rfail(r, v, "dtype must be f64, i64, i32 or bool, got", s ? s : "?");
        } else if (!strcmp(key, "values")) {
            if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start > 16)
                return rfail(r, v, "values must be a list of at most 16 numbers", NULL);
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                if (!read_double(r, ynode(r, *it), &t->values[t->nvalues++])) return false;
        } else {
            return rfail(r, k, "unknown tensor spec key", key);
        }
    }
    if (!have_shape) return rfail(r, n, "tensor spec without shape", NULL);
    if ((t->dt == OPR_I64 || t->dt == OPR_I32) && !have_range) { t->lo = 0; t->hi = 2; }
    return true;
}

static bool read_sample(const yreader *r, const schema *sc, const yaml_node_t *n, sample *s)
{
    memset(s, 0, sizeof *s);
    s->line = (int)n->start_mark.line + 1;
    if (n->type != YAML_MAPPING_NODE) return rfail(r, n, "a sample is a mapping from argument names to specs", NULL);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ynode(r, p->key), *v = ynode(r, p->value);
        const char *key = yscalar(k);
        int a = key ? arg_index(sc, key) : -1;
        if (a < 0) return rfail(r, k, "sample names no argument", key ? key : "?");
        aval *x = &s->a[a];
        atype ty = sc->args[a].type;
        if (is_null(v)) {
            if (ty != T_TENSOR_OPT && ty != T_INT_OPT && ty != T_FLOAT_OPT && ty != T_INT_LIST_OPT && ty != T_BOOL_OPT &&
                ty != T_STR_OPT && ty != T_FLOAT_LIST_OPT)
                return rfail(r, v, "None given for non-optional argument", key);
            x->k = V_NONE;
            continue;
        }
        switch (ty) {
        case T_TENSOR:
        case T_TENSOR_OPT:
            x->k = V_TENSOR;
            if (!read_tspec(r, v, &x->t)) return false;
            break;
        case T_TENSOR_LIST:
            x->k = V_TLIST;
            if (v->type != YAML_SEQUENCE_NODE) return rfail(r, v, "a Tensor[] sample is a list of tensor specs", NULL);
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                if (x->nitems == MAXL) return rfail(r, v, "too many tensors", NULL);
                if (is_null(ynode(r, *it))) { /* None in a Tensor?[] (indices): ndim -1 */
                    memset(&x->items[x->nitems], 0, sizeof x->items[0]);
                    x->items[x->nitems++].ndim = -1;
                    continue;
                }
                if (!read_tspec(r, ynode(r, *it), &x->items[x->nitems++])) return false;
            }
            break;
        case T_INT:
        case T_INT_OPT:
            x->k = V_INT;
            if (!read_int(r, v, &x->i)) return false;
            break;
        case T_FLOAT:
        case T_FLOAT_OPT:
            x->k = V_FLOAT;
            if (!read_double(r, v, &x->d)) return false;
            break;
        case T_BOOL:
        case T_BOOL_OPT: {
            const char *b = yscalar(v);
            x->k = V_BOOL;
            if (b && (!strcmp(b, "true") || !strcmp(b, "True"))) x->b = true;
            else if (b && (!strcmp(b, "false") || !strcmp(b, "False"))) x->b = false;
            else return rfail(r, v, "expected a bool", b);
            break;
        }
        case T_INT_LIST:
        case T_INT_LIST_OPT:
            x->k = V_ILIST;
            if (!read_int_list(r, v, x->il, &x->nil)) return false;
            break;
        case T_FLOAT_LIST:
        case T_FLOAT_LIST_OPT:
            x->k = V_FLIST;
            x->nil = 0;
            if (v->type != YAML_SEQUENCE_NODE) return rfail(r, v, "expected a list of numbers", NULL);
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                if (x->nil == MAXD) return rfail(r, v, "list too long", NULL);
                if (!read_double(r, ynode(r, *it), &x->fl[x->nil++])) return false;
            }
            break;
        case T_STR:
        case T_STR_OPT:
            x->k = V_STR;
            if (!yscalar(v)) return rfail(r, v, "expected a string", NULL);
            snprintf(x->s, sizeof x->s, "%s", yscalar(v));
            break;
        }
    }
    return true;
}

/* A derivative key: every comma-separated token names a Tensor argument, or `NAME[i]`
 * the items of a Tensor[] argument. */
static bool is_deriv_key(const schema *sc, const char *key)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", key);
    size_t len = strlen(buf);
    if (len > 3 && !strcmp(buf + len - 3, "[i]")) {
        buf[len - 3] = 0;
        return arg_index(sc, buf) >= 0 && is_tensor_type(sc->args[arg_index(sc, buf)].type);
    }
    char *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save), n++) {
        int a = arg_index(sc, tok);
        if (a < 0 || !is_tensor_type(sc->args[a].type)) return false;
    }
    return n > 0;
}

static bool read_deriv(const yreader *r, const schema *sc, const char *key, const yaml_node_t *v, dcand *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->label, sizeof c->label, "%s", key);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", key);
    size_t len = strlen(buf);
    if (len > 3 && !strcmp(buf + len - 3, "[i]")) buf[len - 3] = 0; /* `tensors[i]`: the list's items */
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
        c->cover[c->ncover++] = arg_index(sc, tok);
    uint32_t meta = 0;
    if (v->type == YAML_SCALAR_NODE) {
        if (c->ncover != 1) return rfail(r, v, "several inputs with one formula:", key);
        formula_uses(sc, yscalar(v), &c->needs[0], &meta);
        c->formula[0] = strdup(yscalar(v));
        return true;
    }
    if (v->type != YAML_MAPPING_NODE) return rfail(r, v, "derivative must be a formula or a mapping:", key);
    const yaml_node_t *needs = NULL;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        const char *k = yscalar(ynode(r, p->key));
        yaml_node_t *val = ynode(r, p->value);
        if (!k) return rfail(r, val, "bad key", NULL);
        if (!strcmp(k, "kernel")) {
            c->kernel = true; /* labelled as the registry labels it */
            snprintf(c->label, sizeof c->label, "%s (kernel %s)", key, yscalar(val) ? yscalar(val) : "?");
        }
        else if (!strcmp(k, "needs")) needs = val;
        else if (!strcmp(k, "flops")) continue;
        else if (!strcmp(k, "let")) {
            if (val->type != YAML_MAPPING_NODE) return rfail(r, val, "let must be a mapping", NULL);
            c->has_lets = true;
            for (yaml_node_pair_t *q = val->data.mapping.pairs.start; q < val->data.mapping.pairs.top; q++) {
                const char *f = yscalar(ynode(r, q->value));
                if (!f) return rfail(r, ynode(r, q->value), "let: expected an expression", NULL);
                formula_uses(sc, f, &c->let_needs, &meta);
            }
        } else {
            int a = arg_index(sc, k);
            int pos = -1;
            for (int i = 0; i < c->ncover; i++)
                if (c->cover[i] == a) pos = i;
            if (pos < 0) return rfail(r, val, "not one of this entry's inputs:", k);
            if (!yscalar(val)) return rfail(r, val, "a formula must be an expression", NULL);
            formula_uses(sc, yscalar(val), &c->needs[pos], &meta);
            c->formula[pos] = strdup(yscalar(val));
        }
    }
    if (c->kernel) {
        /* Until `needs` says otherwise, a kernel reads every tensor input. */
        for (int pos = 0; pos < c->ncover; pos++) {
            c->needs[pos] = 0;
            for (int a = 0; a < sc->nargs; a++)
                if (is_tensor_type(sc->args[a].type)) c->needs[pos] |= 1u << a;
        }
        if (needs) {
            if (needs->type != YAML_MAPPING_NODE) return rfail(r, needs, "needs must be a mapping", NULL);
            for (yaml_node_pair_t *p = needs->data.mapping.pairs.start; p < needs->data.mapping.pairs.top; p++) {
                const char *k = yscalar(ynode(r, p->key));
                yaml_node_t *list = ynode(r, p->value);
                int a = k ? arg_index(sc, k) : -1, pos = -1;
                for (int i = 0; i < c->ncover; i++)
                    if (c->cover[i] == a) pos = i;
                if (pos < 0 || list->type != YAML_SEQUENCE_NODE) return rfail(r, list, "bad needs entry", k);
                c->needs[pos] = 0;
                for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
                    const char *nm = yscalar(ynode(r, *it));
                    c->needs[pos] |= nm ? slot_bits(sc, nm) : 0;
                }
            }
        }
    }
    return true;
}

/* The candidates of one derivative key: one, or a list of them (`self: [FORMULA,
 * {kernel: ...}]`); fast ones are labelled like the registry labels them. */
static bool read_derivs(const yreader *r, yop *y, const char *key, const yaml_node_t *v, bool fast)
{
    const bool list = v->type == YAML_SEQUENCE_NODE;
    const yaml_node_item_t *it = list ? v->data.sequence.items.start : NULL;
    for (int k = 0; list ? it < v->data.sequence.items.top : k < 1; k++) {
        if (y->nc == MAXC) return rfail(r, v, "too many derivative candidates", NULL);
        dcand *c = &y->c[y->nc++];
        if (!read_deriv(r, &y->sc, key, list ? ynode(r, *it++) : v, c)) return false;
        if (fast) {
            char label[sizeof c->label];
            snprintf(label, sizeof label, "fast %s", c->label);
            memcpy(c->label, label, sizeof label);
        }
    }
    return true;
}

static bool read_op(const yreader *r, const yaml_node_t *n, yop *y)
{
    memset(y, 0, sizeof *y);
    snprintf(y->file, sizeof y->file, "%s", r->file);
    y->line = (int)n->start_mark.line + 1;
    const char *name = NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++)
        if (yscalar(ynode(r, p->key)) && !strcmp(yscalar(ynode(r, p->key)), "name")) name = yscalar(ynode(r, p->value));
    if (!name) return rfail(r, n, "entry without a name", NULL);
    char err[256];
    if (!parse_schema(name, &y->sc, err, sizeof err)) return rfail(r, n, err, NULL);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *key = yscalar(ynode(r, p->key));
        yaml_node_t *v = ynode(r, p->value);
        if (!key) continue;
        if (!strcmp(key, "samples")) {
            y->has_samples = true;
            if (v->type != YAML_SEQUENCE_NODE) return rfail(r, v, "samples must be a list", NULL);
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                if (y->ns == MAXS) return rfail(r, v, "too many samples", NULL);
                if (!read_sample(r, &y->sc, ynode(r, *it), &y->s[y->ns++])) return false;
            }
        } else if (is_deriv_key(&y->sc, key)) {
            if (!read_derivs(r, y, key, v, false)) return false;
        } else if (!strcmp(key, "fast") && v->type == YAML_MAPPING_NODE) {
            /* fast-mode variants: checked like the others (forced one at a time), away
             * from the special points the samples avoid */
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
                const char *fkey = yscalar(ynode(r, q->key));
                if (!fkey || !is_deriv_key(&y->sc, fkey)) return rfail(r, v, "fast: not a derivative key", fkey);
                if (!read_derivs(r, y, fkey, ynode(r, q->value), true)) return false;
            }
        }
    }
    return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Frees what reading an entry allocated (the candidates' formula texts). */
static void yop_clear(yop *y)
{
    for (int i = 0; i < y->nc; i++)
        for (int p = 0; p < MAXA; p++) {
            free(y->c[i].formula[p]);
            y->c[i].formula[p] = NULL;
        }
}

static void load_file(const char *path, const char *base)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(load_error, sizeof load_error, "cannot open %.900s", path); return; }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(load_error, sizeof load_error, "%s:%zu: YAML error: %s", base, parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        fclose(f);
        return;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = root->data.sequence.items.start; it < root->data.sequence.items.top; it++) {
            yaml_node_t *n = yaml_document_get_node(&doc, *it);
            if (!n || n->type != YAML_MAPPING_NODE || nyops == MAXOPS) continue;
            yop *y = &yops[nyops];
            yreader r = {&doc, base, y->err, sizeof y->err};
            char err[512] = "";
            r.err = err;
            r.errlen = sizeof err;
            bool ok = read_op(&r, n, y);
            if (!ok) snprintf(y->err, sizeof y->err, "%s", err);
            if (y->sc.name[0]) nyops++;
            else yop_clear(y); /* the slot is read into again */
            if (!y->sc.name[0] && !ok && !load_error[0]) snprintf(load_error, sizeof load_error, "%s", err);
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
}

static void unload_registry_yaml(void)
{
    for (int i = 0; yops && i < MAXOPS; i++) yop_clear(&yops[i]);
    free(yops);
    yops = NULL;
}

static void load_registry_yaml(void)
{
    yops = calloc(MAXOPS, sizeof *yops);
    if (!yops) { snprintf(load_error, sizeof load_error, "out of memory"); return; }
    const char *dir = getenv("OPREG_YAML_DIR");
    if (!dir || !dir[0]) { snprintf(load_error, sizeof load_error, "OPREG_YAML_DIR is not set"); return; }
    DIR *d = opendir(dir);
    if (!d) { snprintf(load_error, sizeof load_error, "cannot open OPREG_YAML_DIR=%s", dir); return; }
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 256;) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".yaml")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        load_file(path, names[i]);
        free(names[i]);
    }
}

/* ------------------------------------------------------------------ sample data */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s ? s : 0x9e3779b97f4a7c15ull; }
static double rng_uniform(double lo, double hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* One tensor of a sample: a plain Tensor argument or an item of a Tensor[] one. */
typedef struct tinst {
    int arg, item; /* item -1: plain Tensor */
    const tspec *spec;
    int64_t numel;
    void *data; /* f64: double, i64: int64_t, bool: uint8_t */
} tinst;

typedef struct sdata {
    tinst t[MAXT];
    int nt;
    int gi[MAXT]; /* indices in t of the floating inputs (candidates for requires grad) */
    int ng;
} sdata;

static int64_t numel_of(const tspec *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

static void sdata_free(sdata *sd)
{
    for (int i = 0; i < sd->nt; i++) free(sd->t[i].data);
    memset(sd, 0, sizeof *sd);
}

static bool sdata_make(const yop *y, const sample *s, int sample_idx, sdata *sd, char *err, size_t errlen)
{
    memset(sd, 0, sizeof *sd);
    rng_seed(fnv(y->sc.name) ^ (uint64_t)(sample_idx + 1) * 0x2545F4914F6CDD1Dull);
    for (int a = 0; a < y->sc.nargs; a++) {
        const aval *v = &s->a[a];
        int n = v->k == V_TENSOR ? 1 : v->k == V_TLIST ? v->nitems : 0;
        for (int it = 0; it < n; it++) {
            if (v->k == V_TLIST && v->items[it].ndim < 0) continue; /* None: the list item stays NULL */
            if (sd->nt == MAXT) { snprintf(err, errlen, "too many tensors in sample"); return false; }
            tinst *t = &sd->t[sd->nt];
            t->arg = a;
            t->item = v->k == V_TENSOR ? -1 : it;
            t->spec = v->k == V_TENSOR ? &v->t : &v->items[it];
            t->numel = numel_of(t->spec);
            size_t es = t->spec->dt == OPR_BOOL ? 1 : t->spec->dt == OPR_I32 ? 4 : 8;
            t->data = calloc((size_t)(t->numel ? t->numel : 1), es);
            if (!t->data) { snprintf(err, errlen, "out of memory"); return false; }
            for (int64_t e = 0; e < t->numel; e++) {
                double u = e < t->spec->nvalues ? t->spec->values[e] : rng_uniform(t->spec->lo, t->spec->hi);
                if (t->spec->dt == OPR_F64) ((double *)t->data)[e] = u;
                else if (t->spec->dt == OPR_I64) ((int64_t *)t->data)[e] = (int64_t)floor(u);
                else if (t->spec->dt == OPR_I32) ((int32_t *)t->data)[e] = (int32_t)floor(u);
                else ((uint8_t *)t->data)[e] = rng_uniform(0, 1) < 0.5;
            }
            /* an input no candidate names (avg_pool2d_backward's self, read for its shape)
             * is not differentiable: requiring grad on it is refused */
            bool named = false;
            for (int ci = 0; ci < y->nc && !named; ci++)
                for (int i = 0; i < y->c[ci].ncover; i++) named = named || y->c[ci].cover[i] == a;
            if (t->spec->dt == OPR_F64 && named) sd->gi[sd->ng++] = sd->nt;
            sd->nt++;
        }
    }
    return true;
}

/* Arguments of one call. */
typedef struct callargs {
    opr_value v[MAXA];
    int n;
    opr_tensor *t[MAXT];            /* by tinst index; owned */
    opr_tensor *lists[MAXA][MAXL];  /* Tensor[] items (borrowed from t) */
} callargs;

static void callargs_free(callargs *c)
{
    for (int i = 0; i < MAXT; i++) opr_tensor_release(c->t[i]);
    memset(c, 0, sizeof *c);
}

/* Value of a schema default ("None", "1", "[0, 1]", "\"f32\"", "False"). */
static opr_value default_value(const sarg *g, int64_t *ilist_store)
{
    const char *d = g->def;
    if (!strcmp(d, "None")) return opr_v_none();
    switch (g->type) {
    case T_INT:
    case T_INT_OPT: return opr_v_int(strtoll(d, NULL, 10));
    case T_FLOAT:
    case T_FLOAT_OPT: return opr_v_double(strtod(d, NULL));
    case T_BOOL:
    case T_BOOL_OPT: return opr_v_bool(!strcmp(d, "True") || !strcmp(d, "true"));
    case T_INT_LIST:
    case T_INT_LIST_OPT: {
        int n = 0;
        for (const char *p = d; *p && n < MAXD; p++)
            if (isdigit((unsigned char)*p) || *p == '-') {
                char *e;
                ilist_store[n++] = strtoll(p, &e, 10);
                p = e - 1;
            }
        return opr_v_ints(ilist_store, n);
    }
    case T_STR: return opr_v_string(g->def);
    case T_STR_OPT: return strcmp(g->def, "None") ? opr_v_string(g->def) : opr_v_none();
    default: return opr_v_none();
    }
}

/* Builds the arguments; tensors whose bit is set in rg require grad; tinst `pert`
 * (or -1) gets `delta` added to element `pel`. */
static bool build_args(opr_ctx *ctx, const yop *y, const sample *s, const sdata *sd, uint32_t rg, int pert,
                       int64_t pel, double delta, callargs *c, int64_t (*ilists)[MAXD], char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    int last = -1;
    for (int a = 0; a < y->sc.nargs; a++)
        if (s->a[a].k != V_ABSENT || !y->sc.args[a].has_def) last = a;
    for (int i = 0; i < sd->nt; i++) {
        const tinst *t = &sd->t[i];
        const void *data = t->data;
        double *tmp = NULL;
        if (i == pert) {
            tmp = malloc((size_t)t->numel * sizeof *tmp);
            if (!tmp) { snprintf(err, errlen, "out of memory"); return false; }
            memcpy(tmp, t->data, (size_t)t->numel * sizeof *tmp);
            tmp[pel] += delta;
            data = tmp;
        }
        c->t[i] = opr_tensor_from_data(ctx, t->spec->dt, t->spec->ndim, t->spec->shape, data, OPR_CPU);
        free(tmp);
        if (!c->t[i]) { snprintf(err, errlen, "creating a sample tensor: %s", opr_last_error()); return false; }
        if ((rg >> i) & 1 && opr_set_requires_grad(c->t[i], true)) {
            snprintf(err, errlen, "requires_grad: %s", opr_last_error());
            return false;
        }
        if (t->item >= 0) c->lists[t->arg][t->item] = c->t[i];
    }
    for (int a = 0; a <= last; a++) {
        const aval *v = &s->a[a];
        const sarg *g = &y->sc.args[a];
        switch (v->k) {
        case V_ABSENT:
            if (!g->has_def) { snprintf(err, errlen, "sample lacks argument '%s'", g->name); return false; }
            c->v[a] = default_value(g, ilists[a]);
            break;
        case V_NONE: c->v[a] = opr_v_none(); break;
        case V_TENSOR:
            for (int i = 0; i < sd->nt; i++)
                if (sd->t[i].arg == a) c->v[a] = opr_v_tensor(c->t[i]);
            break;
        case V_TLIST: c->v[a] = opr_v_tensors(c->lists[a], v->nitems); break;
        case V_INT: c->v[a] = opr_v_int(v->i); break;
        case V_FLOAT: c->v[a] = opr_v_double(v->d); break;
        case V_BOOL: c->v[a] = opr_v_bool(v->b); break;
        case V_ILIST: c->v[a] = opr_v_ints(v->il, v->nil); break;
        case V_STR: c->v[a] = opr_v_string(v->s); break;
        case V_FLIST: c->v[a] = opr_v_doubles(v->fl, v->nil); break;
        }
    }
    c->n = last + 1;
    return true;
}

/* ------------------------------------------------------------------ per-op check */

typedef struct outmeta {
    int n;                 /* outputs */
    bool floating[MAXO];
    int64_t numel[MAXO];
    size_t esize[MAXO];
    int ndim[MAXO];
    int64_t shape[MAXO][MAXD];
} outmeta;

typedef struct opstate {
    opr_ctx *ctx;
    const opr_op *op;
    const yop *y;
    int yaml_of[MAXC];     /* registry candidate -> YAML candidate */
    int ncand;
    /* counters */
    int checked, passed, na, failed, skipped, savechecks, savefails, saveunchecked;
    int fdchecked; /* combinations opr_gradcheck compared with finite differences */
    char first_fail[1024];
    int nreported;
} opstate;

#define MAX_REPORTED 12 /* failure lines printed per op */

static void report(opstate *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(opstate *st, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (st->nreported < MAX_REPORTED) printf("  FAIL %s: %s\n", st->y->sc.name, msg);
    else if (st->nreported == MAX_REPORTED) printf("  FAIL %s: ... (further failures counted, not shown)\n", st->y->sc.name);
    st->nreported++;
    fflush(stdout);
    if (!st->first_fail[0]) snprintf(st->first_fail, sizeof st->first_fail, "%.1000s", msg);
}

/* How many tensors a call gives: the op's outputs, or the pieces of an op returning a
 * Tensor[] (split, chunk), each then checked as an output of its own; -1 on error. */
static int outputs_of(const opstate *st, const callargs *c)
{
    int n = -1;
    if (opr_op_result_count(st->op, c->v, c->n, &n) || n > MAXO) return -1;
    return n;
}

static bool forward_plain(opstate *st, const sample *s, const sdata *sd, int pert, int64_t pel, double delta,
                          outmeta *om, double **vals, char *err, size_t errlen)
{
    callargs c;
    int64_t il[MAXA][MAXD];
    bool prev = opr_grad_mode_set(false);
    bool ok = build_args(st->ctx, st->y, s, sd, 0, pert, pel, delta, &c, il, err, errlen);
    opr_tensor *outs[MAXO] = {NULL};
    int nout = ok ? outputs_of(st, &c) : 0;
    if (ok && (nout < 0 || opr_call(st->op, c.v, c.n, outs, nout))) {
        if (nout < 0) nout = 0;
        snprintf(err, errlen, "forward failed: %s", opr_last_error());
        ok = false;
    }
    opr_grad_mode_set(prev);
    for (int k = 0; ok && k < nout; k++) {
        opr_dtype dt = opr_tensor_dtype(outs[k]);
        if (om) {
            om->n = nout;
            om->floating[k] = (dt == OPR_F32 || dt == OPR_F64) && opr_op_output_differentiable(st->op, k);
            om->numel[k] = opr_tensor_numel(outs[k]);
            om->esize[k] = opr_dtype_size(dt);
            om->ndim[k] = opr_tensor_ndim(outs[k]);
            for (int d = 0; d < om->ndim[k]; d++) om->shape[k][d] = opr_tensor_size(outs[k], d);
        }
        if (vals) vals[k] = (dt == OPR_F32 || dt == OPR_F64) ? tu_to_f64(outs[k]) : NULL;
    }
    for (int k = 0; k < nout; k++) opr_tensor_release(outs[k]);
    callargs_free(&c);
    return ok;
}

/* Parses opr_plan_explain's "chosen:" and "saves {..}" lines into the YAML
 * candidates chosen (with the inputs each computes) and the saved slot bits. */
static bool parse_explain(const opstate *st, const char *text, int *chosen, uint32_t *wants, int *nchosen,
                          uint32_t *saved, char *err, size_t errlen)
{
    const schema *sc = &st->y->sc;
    const char *p = strstr(text, "chosen: ");
    if (!p) { snprintf(err, errlen, "explain text has no 'chosen:' line"); return false; }
    p += 8;
    const char *eol = strchr(p, '\n');
    if (!eol) eol = p + strlen(p);
    *nchosen = 0;
    while (p < eol) {
        const char *o = memchr(p, '[', (size_t)(eol - p));
        if (!o) break;
        const char *cl = NULL; /* the matching ']': a label may hold brackets ("tensors[i]") */
        for (int depth = 0, k = 0; o + k < eol && !cl; k++) {
            if (o[k] == '[') depth++;
            else if (o[k] == ']' && --depth == 0) cl = o + k;
        }
        if (!cl) { snprintf(err, errlen, "unbalanced [ in chosen line"); return false; }
        char content[256];
        trim_copy(content, sizeof content, o + 1, (size_t)(cl - o - 1));
        uint32_t want = 0;
        char *f = strstr(content, " for ");
        if (f) {
            *f = '\0';
            char *save = NULL;
            for (char *tok = strtok_r(f + 5, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                int a = arg_index(sc, tok);
                if (a < 0) { snprintf(err, errlen, "chosen line names unknown input '%s'", tok); return false; }
                want |= 1u << a;
            }
        }
        int found = -1; /* labels name a kernel entry's kernel: "self, mat2 (kernel mm_backward)" */
        for (int i = 0; i < st->y->nc; i++)
            if (!strcmp(st->y->c[i].label, content)) found = i;
        if (found < 0) { snprintf(err, errlen, "chosen candidate [%s] is not in the YAML", content); return false; }
        if (!want)
            for (int i = 0; i < st->y->c[found].ncover; i++) want |= 1u << st->y->c[found].cover[i];
        chosen[*nchosen] = found;
        wants[(*nchosen)++] = want;
        p = cl + 1;
    }
    const char *sv = strstr(eol, "saves {");
    if (!sv) { snprintf(err, errlen, "explain text has no 'saves {' after 'chosen:'"); return false; }
    sv += 7;
    const char *close = strchr(sv, '}');
    if (!close) { snprintf(err, errlen, "unterminated saves {"); return false; }
    char names[512];
    trim_copy(names, sizeof names, sv, (size_t)(close - sv));
    *saved = 0;
    char *save = NULL;
    for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        uint32_t b = slot_bits(sc, tok);
        if (!b) { snprintf(err, errlen, "saves unknown slot '%s'", tok); return false; }
        *saved |= b;
    }
    return true;
}

static void describe_slots(const schema *sc, uint32_t bits, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < sc->nargs + sc->nout; s++) {
        if (!((bits >> s) & 1)) continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", s < sc->nargs ? sc->args[s].name : sc->outs[s - sc->nargs]);
        if (n > 0 && (size_t)n < len - used) used += (size_t)n;
    }
}

/* Save-set minimality and saved bytes for the plan now in force. Returns 1 ok,
 * 0 failed (err set), -1 not available, -2 not checkable (the plan API cannot plan an
 * op whose output shape is data-dependent, e.g. masked_select). */
static int check_saves(opstate *st, const sdata *sd, const callargs *c, const outmeta *om, const char *const *names,
                       int nnames, char *err, size_t errlen)
{
    const schema *sc = &st->y->sc;
    static char text[32768];
    int rc = opr_plan_explain(st->op, c->v, c->n, names, nnames, text, sizeof text);
    if (rc == OPR_ERR_NOT_FOUND) return -1;
    if (rc == OPR_ERR_UNSUPPORTED && strstr(opr_last_error(), "data-dependent")) return -2; /* plan API can't */
    if (rc) { snprintf(err, errlen, "opr_plan_explain: %s: %s", opr_status_name(rc), opr_last_error()); return 0; }
    int chosen[MAXA], nchosen;
    uint32_t wants[MAXA], saved;
    if (!parse_explain(st, text, chosen, wants, &nchosen, &saved, err, errlen)) return 0;
    uint32_t expect = 0;
    for (int i = 0; i < nchosen; i++) {
        const dcand *d = &st->y->c[chosen[i]];
        if (d->has_lets && !d->kernel) expect |= d->let_needs;
        for (int p = 0; p < d->ncover; p++) {
            if (!((wants[i] >> d->cover[p]) & 1)) continue;
            uint32_t direct = 0, meta = 0;
            if (d->formula[p] && !d->kernel) uses_span(sc, d->formula[p], d->formula[p] + strlen(d->formula[p]), false, c->v, c->n, &direct, &meta);
            expect |= d->formula[p] && !d->kernel ? direct : d->needs[p];
        }
    }
    uint32_t tensors = ((1u << sc->nout) - 1) << sc->nargs;
    for (int a = 0; a < sc->nargs; a++) /* an optional tensor given as None is never saved */
        if (is_tensor_type(sc->args[a].type) &&
            !(a < c->n ? c->v[a].kind == OPR_V_NONE : sc->args[a].has_def && !strcmp(sc->args[a].def, "None")))
            tensors |= 1u << a;
    expect &= tensors;
    char a[256], b[256];
    if ((saved & tensors) & ~expect) {
        describe_slots(sc, (saved & tensors) & ~expect, a, sizeof a);
        describe_slots(sc, expect, b, sizeof b);
        snprintf(err, errlen, "save set not minimal: the plan saves {%s} but the chosen formulas read directly only {%s}",
                 a, b);
        return 0;
    }
    if (expect & ~saved) {
        describe_slots(sc, expect & ~saved, a, sizeof a);
        snprintf(err, errlen, "the chosen formulas read {%s} but the plan does not save it", a);
        return 0;
    }
    uint64_t want_bytes = 0;
    for (int s = 0; s < sc->nargs + sc->nout; s++) {
        if (!((expect >> s) & 1)) continue;
        if (s >= sc->nargs) {
            want_bytes += (uint64_t)om->numel[s - sc->nargs] * om->esize[s - sc->nargs];
            continue;
        }
        for (int i = 0; i < sd->nt; i++)
            if (sd->t[i].arg == s)
                want_bytes += (uint64_t)sd->t[i].numel * (sd->t[i].spec->dt == OPR_BOOL ? 1 : sd->t[i].spec->dt == OPR_I32 ? 4 : 8);
    }
    uint64_t got = 0;
    rc = opr_plan_saved_bytes(st->op, c->v, c->n, names, nnames, &got);
    if (rc) { snprintf(err, errlen, "opr_plan_saved_bytes: %s: %s", opr_status_name(rc), opr_last_error()); return 0; }
    if (got != want_bytes) {
        describe_slots(sc, expect, b, sizeof b);
        snprintf(err, errlen, "opr_plan_saved_bytes = %llu but {%s} is %llu bytes", (unsigned long long)got, b,
                 (unsigned long long)want_bytes);
        return 0;
    }
    return 1;
}

typedef struct gradset {
    double *g[MAXT]; /* by tinst index, NULL where not requested */
    int cand;        /* registry candidate that produced it */
} gradset;

static void gradset_free(gradset *g)
{
    for (int i = 0; i < MAXT; i++) free(g->g[i]);
    memset(g, 0, sizeof *g);
}

/* Mask names for the plan API: the arguments of the requested tinsts. */
static int mask_names(const opstate *st, const sdata *sd, uint32_t rg, const char **names, uint32_t *argmask)
{
    int n = 0;
    *argmask = 0;
    for (int i = 0; i < sd->nt; i++) {
        if (!((rg >> i) & 1)) continue;
        int a = sd->t[i].arg;
        if ((*argmask >> a) & 1) continue;
        *argmask |= 1u << a;
        names[n++] = st->y->sc.args[a].name;
    }
    return n;
}

typedef enum { R_PASS, R_FAIL, R_NA } result;

/* One (sample, forced candidate, mask) combination. */
static result run_combo(opstate *st, const sample *s, const sdata *sd, const outmeta *om, double *const *go,
                        uint32_t rg, int cand, gradset *ref, char *err, size_t errlen)
{
    const char *names[MAXA];
    uint32_t argmask;
    int nn = mask_names(st, sd, rg, names, &argmask);
    callargs c;
    int64_t il[MAXA][MAXD];
    result res = R_FAIL;
    opr_tensor *outs[MAXO] = {NULL}, *gos[MAXO] = {NULL}, *grads[MAXT] = {NULL};
    opr_tensor *inputs[MAXT];
    int nin = 0, tin[MAXT];
    gradset mine = {{NULL}, cand};
    if (!build_args(st->ctx, st->y, s, sd, rg, -1, 0, 0, &c, il, err, errlen)) goto done;
    int sv = check_saves(st, sd, &c, om, names, nn, err, errlen);
    if (sv == -1) { res = R_NA; goto done; }
    if (sv == -2) st->saveunchecked++;
    else st->savechecks++;
    if (sv == 0) { st->savefails++; goto done; }
    int nout = outputs_of(st, &c);
    int rc = nout < 0 ? OPR_ERR_INVALID : opr_call(st->op, c.v, c.n, outs, nout);
    if (rc) { snprintf(err, errlen, "forward with grad: %s: %s", opr_status_name(rc), opr_last_error()); goto done; }
    opr_tensor *fouts[MAXO];
    int nf = 0;
    for (int k = 0; k < nout; k++) {
        if (!om->floating[k]) continue;
        if (!opr_requires_grad(outs[k])) { snprintf(err, errlen, "float output %d does not require grad", k); goto done; }
        gos[nf] = opr_tensor_from_data(st->ctx, opr_tensor_dtype(outs[k]), om->ndim[k], om->shape[k], go[k], OPR_CPU);
        fouts[nf++] = outs[k];
    }
    for (int i = 0; i < sd->nt; i++)
        if ((rg >> i) & 1) { tin[nin] = i; inputs[nin++] = c.t[i]; }
    rc = opr_autograd_grad(fouts, gos, nf, inputs, nin, grads, NULL);
    if (rc == OPR_ERR_UNSUPPORTED && strstr(opr_last_error(), ") supports: ")) { /* a forced kernel declined the call */
        res = R_NA;
        goto done;
    }
    if (rc) { snprintf(err, errlen, "backward: %s: %s", opr_status_name(rc), opr_last_error()); goto done; }
    for (int j = 0; j < nin; j++) {
        int ti = tin[j];
        const tinst *t = &sd->t[ti];
        if (grads[j]) {
            bool shape_ok = opr_tensor_ndim(grads[j]) == t->spec->ndim && opr_tensor_dtype(grads[j]) == OPR_F64;
            for (int d = 0; shape_ok && d < t->spec->ndim; d++) shape_ok = opr_tensor_size(grads[j], d) == t->spec->shape[d];
            if (!shape_ok) {
                char desc[96];
                snprintf(err, errlen, "gradient of '%s' is %s, not the input's shape", st->y->sc.args[t->arg].name,
                         opr_tensor_describe(grads[j], desc, sizeof desc));
                goto done;
            }
            mine.g[ti] = tu_to_f64(grads[j]);
        } else {
            mine.g[ti] = calloc((size_t)(t->numel ? t->numel : 1), sizeof(double));
        }
        for (int64_t e = 0; e < t->numel; e++) {
            if (isnan(mine.g[ti][e])) {
                snprintf(err, errlen, "d/d %s%s[%lld] is NaN", st->y->sc.args[t->arg].name,
                         t->item >= 0 ? "(list item)" : "", (long long)e);
                goto done;
            }
        }
    }
    if (ref->cand < 0) {
        *ref = mine;
        memset(&mine, 0, sizeof mine);
    } else {
        for (int i = 0; i < sd->nt; i++) {
            if (!((rg >> i) & 1)) continue;
            for (int64_t e = 0; e < sd->t[i].numel; e++) {
                double a = mine.g[i][e], b = ref->g[i][e];
                if (fabs(a - b) > AGREE_TOL * fmax(1.0, fmax(fabs(a), fabs(b)))) {
                    snprintf(err, errlen, "candidates disagree on d/d %s[%lld]: [%s] gives %.17g, [%s] gives %.17g",
                             st->y->sc.args[sd->t[i].arg].name, (long long)e, opr_op_grad_candidate_label(st->op, cand),
                             a, opr_op_grad_candidate_label(st->op, ref->cand), b);
                    goto done;
                }
            }
        }
    }
    res = R_PASS;
done:
    gradset_free(&mine);
    for (int k = 0; k < MAXO; k++) { opr_tensor_release(outs[k]); opr_tensor_release(gos[k]); }
    for (int j = 0; j < MAXT; j++) opr_tensor_release(grads[j]);
    callargs_free(&c);
    return res;
}

static bool cand_covers_any(const opstate *st, int reg, uint32_t argmask)
{
    const dcand *d = &st->y->c[st->yaml_of[reg]];
    for (int i = 0; i < d->ncover; i++)
        if ((argmask >> d->cover[i]) & 1) return true;
    return false;
}

static void check_op(opstate *st)
{
    const yop *y = st->y;
    char err[2048];
    for (int si = 0; si < y->ns; si++) {
        const sample *s = &y->s[si];
        sdata sd;
        if (!sdata_make(y, s, si, &sd, err, sizeof err)) { st->failed++; report(st, "sample %d: %s", si, err); continue; }
        outmeta om;
        memset(&om, 0, sizeof om);
        if (!forward_plain(st, s, &sd, -1, 0, 0, &om, NULL, err, sizeof err)) {
            st->failed++;
            report(st, "sample %d (%s:%d): %s", si, y->file, s->line, err);
            sdata_free(&sd);
            continue;
        }
        double *go[MAXO] = {NULL};
        rng_seed(fnv(y->sc.name) + 7919u * (uint64_t)si + 17);
        for (int k = 0; k < om.n; k++) {
            if (!om.floating[k]) continue;
            go[k] = malloc((size_t)(om.numel[k] ? om.numel[k] : 1) * sizeof(double));
            for (int64_t e = 0; e < om.numel[k]; e++) go[k][e] = rng_uniform(-1, 1);
        }
        bool f64_in = false; /* a sample of integer tensors (fmod on i64) has nothing to differentiate */
        for (int i = 0; i < sd.nt; i++) f64_in = f64_in || sd.t[i].spec->dt == OPR_F64;
        if (sd.ng == 0 && f64_in) { st->failed++; report(st, "sample %d (%s:%d): no f64 tensor input to differentiate", si, y->file, s->line); }
        for (uint32_t m = 1; sd.ng && m < (1u << sd.ng); m++) {
            uint32_t rg = 0;
            for (int j = 0; j < sd.ng; j++)
                if ((m >> j) & 1) rg |= 1u << sd.gi[j];
            const char *names[MAXA];
            uint32_t argmask;
            int nn = mask_names(st, &sd, rg, names, &argmask);
            char maskdesc[256];
            describe_slots(&y->sc, argmask, maskdesc, sizeof maskdesc);
            /* inputs without any formula */
            uint32_t covered = 0;
            for (int i = 0; i < y->nc; i++)
                for (int p = 0; p < y->c[i].ncover; p++) covered |= 1u << y->c[i].cover[p];
            if (argmask & ~covered) {
                char miss[128];
                describe_slots(&y->sc, argmask & ~covered, miss, sizeof miss);
                st->checked++;
                st->failed++;
                report(st, "sample %d (%s:%d) mask {%s}: no derivative formula for {%s} [formula missing]", si, y->file,
                       s->line, maskdesc, miss);
                continue;
            }
            /* the plan chosen by cost: save set only */
            {
                callargs c;
                int64_t il[MAXA][MAXD];
                opr_op_force_grad_candidate(st->op, -1);
                if (build_args(st->ctx, y, s, &sd, rg, -1, 0, 0, &c, il, err, sizeof err)) {
                    int sv = check_saves(st, &sd, &c, &om, names, nn, err, sizeof err);
                    if (sv >= 0) st->savechecks++;
                    if (sv == -2) st->saveunchecked++;
                    if (sv == 0) {
                        st->savefails++;
                        report(st, "sample %d (%s:%d) mask {%s} plan by cost: %s", si, y->file, s->line, maskdesc, err);
                    }
                }
                callargs_free(&c);
            }
            gradset ref;
            memset(&ref, 0, sizeof ref);
            ref.cand = -1;
            for (int ci = 0; ci < st->ncand; ci++) {
                if (!cand_covers_any(st, ci, argmask)) { st->skipped++; continue; }
                st->checked++;
                opr_op_force_grad_candidate(st->op, ci);
                result r = run_combo(st, s, &sd, &om, go, rg, ci, &ref, err, sizeof err);
                opr_op_force_grad_candidate(st->op, -1);
                if (r == R_PASS) st->passed++;
                else if (r == R_NA) st->na++;
                else {
                    st->failed++;
                    report(st, "sample %d (%s:%d) mask {%s} candidate [%s]: %s", si, y->file, s->line, maskdesc,
                           opr_op_grad_candidate_label(st->op, ci), err);
                }
            }
            gradset_free(&ref);
        }
        /* the gradients of every candidate x mask against central finite differences in
         * f64: the library's opr_gradcheck, on this sample's arguments */
        if (sd.ng) {
            callargs c;
            int64_t il[MAXA][MAXD];
            opr_op_force_grad_candidate(st->op, -1);
            if (build_args(st->ctx, y, s, &sd, 0, -1, 0, 0, &c, il, err, sizeof err)) {
                opr_gradcheck_result gr = {.struct_size = sizeof gr};
                int rc = opr_gradcheck(st->op, c.v, c.n, NULL, 0, NULL, &gr);
                st->fdchecked += gr.checked;
                if (rc) {
                    st->failed++;
                    report(st, "sample %d (%s:%d): opr_gradcheck: %s", si, y->file, s->line,
                           rc == OPR_ERR_MISMATCH ? gr.detail : opr_last_error());
                }
            } else {
                st->failed++;
                report(st, "sample %d (%s:%d): %s", si, y->file, s->line, err);
            }
            callargs_free(&c);
        }
        for (int k = 0; k < MAXO; k++) free(go[k]);
        sdata_free(&sd);
    }
}

/* ------------------------------------------------------------------ tests */

/* Ops that have samples, checked one per loop iteration. */
static int checked_ops[MAXOPS];
static int nchecked_ops;

START_TEST(registry_read)
{
    ck_assert_msg(!load_error[0], "%s", load_error);
    ck_assert_msg(nyops > 0, "no op entries read from OPREG_YAML_DIR");
    for (int i = 0; i < nyops; i++) ck_assert_msg(!yops[i].err[0], "%s: %s", yops[i].sc.name, yops[i].err);
}
END_TEST

/* Every op with derivative candidates in the registry has samples, so that no formula
 * escapes the gradient checks. The collectives (dist.yaml) are the exception: in one
 * process they are the identity, and their gradients are checked across ranks under
 * mpirun instead (tests/dist, label dist). */
START_TEST(every_differentiable_op_has_samples)
{
    opr_ctx *ctx = tu_ctx();
    char missing[4096] = "";
    size_t used = 0;
    int nmissing = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        if (opr_op_grad_candidate_count(op) <= 0) continue;
        bool has = false;
        for (int k = 0; k < nyops; k++)
            if (!strcmp(yops[k].sc.name, opr_op_name(op)) &&
                (yops[k].ns > 0 || strstr(yops[k].file, "dist.yaml")))
                has = true;
        if (has) continue;
        nmissing++;
        int n = snprintf(missing + used, sizeof missing - used, " %s", opr_op_name(op));
        if (n > 0 && (size_t)n < sizeof missing - used) used += (size_t)n;
    }
    if (nmissing) printf("gradcheck: %d op(s) with derivatives but no samples:%s\n", nmissing, missing);
    tu_ctx_free(ctx);
    ck_assert_msg(nmissing == 0, "%d op(s) have derivative formulas but no samples:%s", nmissing, missing);
}
END_TEST

START_TEST(gradcheck_op)
{
    const yop *y = &yops[checked_ops[_i]];
    opstate st;
    memset(&st, 0, sizeof st);
    st.y = y;
    st.ctx = tu_ctx();
    st.op = opr_op_find(st.ctx, y->sc.name);
    ck_assert_msg(st.op != NULL, "%s (%s:%d) is not in the registry: %s", y->sc.name, y->file, y->line,
                  opr_registry_errors(st.ctx));
    ck_assert_msg(!y->err[0], "%s: %s", y->sc.name, y->err);
    st.ncand = opr_op_grad_candidate_count(st.op);
    if (st.ncand <= 0) {
        printf("gradcheck %-16s samples but no derivative candidates: not checked\n", y->sc.name);
        tu_ctx_free(st.ctx);
        return;
    }
    ck_assert_msg(st.ncand == y->nc, "%s: registry has %d candidates, the YAML %d", y->sc.name, st.ncand, y->nc);
    for (int i = 0; i < st.ncand; i++) {
        const char *label = opr_op_grad_candidate_label(st.op, i);
        st.yaml_of[i] = -1;
        for (int k = 0; k < y->nc; k++)
            if (!strcmp(y->c[k].label, label)) st.yaml_of[i] = k;
        ck_assert_msg(st.yaml_of[i] >= 0, "%s: candidate '%s' not found in the YAML", y->sc.name, label);
    }
    check_op(&st);
    opr_op_force_grad_candidate(st.op, -1);
    int masks = 0;
    for (int si = 0; si < y->ns; si++) {
        int ng = 0;
        for (int a = 0; a < y->sc.nargs; a++) {
            const aval *v = &y->s[si].a[a];
            if (v->k == V_TENSOR && v->t.dt == OPR_F64) ng++;
            for (int it = 0; v->k == V_TLIST && it < v->nitems; it++) ng += v->items[it].dt == OPR_F64;
        }
        masks += (1 << ng) - 1;
    }
    printf("gradcheck %-16s %d sample(s) x %d candidate(s), %d mask(s) in all: %d checked, %d passed, %d not available, "
           "%d failed (%d skipped: candidate covers no requested input); %d against finite differences; save sets %d "
           "checked, %d wrong%s\n",
           y->sc.name, y->ns, st.ncand, masks, st.checked, st.passed, st.na, st.failed, st.skipped, st.fdchecked, st.savechecks,
           st.savefails, st.saveunchecked ? ", some not checkable (data-dependent output shape)" : "");
    fflush(stdout);
    int live = opr_ctx_free(st.ctx);
    ck_assert_msg(st.failed == 0 && st.savefails == 0, "%s: %d failed, %d save-set failures%s; first: %s", y->sc.name,
                  st.failed, st.savefails, live ? " (and tensors leaked)" : "", st.first_fail);
    ck_assert_msg(live == 0, "%s: %d tensor(s) leaked", y->sc.name, live);
    ck_assert_msg(st.passed > 0, "%s: nothing could be checked (%d not available)", y->sc.name, st.na);
}
END_TEST

/* ------------------------------------------------------------------ saved memory, measured */

static uint64_t mem_current(opr_ctx *ctx)
{
    opr_mem_stats s = {.struct_size = sizeof s};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &s), OPR_OK);
    return s.current_bytes;
}

static uint64_t tbytes(const opr_tensor *t) { return (uint64_t)opr_tensor_numel(t) * opr_dtype_size(opr_tensor_dtype(t)); }

/* What an op keeps alive for backward when only argument `grad_arg` requires grad.
 *
 * The operand that requires grad is made a non-leaf, X = sum(X0, dim=[0]) from a leaf
 * X0 of shape [1, ...] (sum's formula reads X0 only through sizes(), so its node saves
 * nothing, checked below), so that the graph does not hold X itself through an edge.
 * The graph is kept alive by z = sum(y) while every other reference (X, the other
 * operands, y) is released. Then
 *     current - baseline = bytes(X0) + bytes(z) + bytes saved by the op's node,
 * exactly, and the saved bytes must be those of the partner operand. */
static void measure_saved(const char *opname, int nargs, const char *const *argnames, const int *ndims,
                          const int64_t (*shapes)[3], int grad_arg, int partner)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(1234);
    const opr_op *op = opr_op_find(ctx, opname);
    ck_assert_ptr_nonnull(op);
    const opr_op *sum = opr_op_find(ctx, "sum");
    ck_assert_ptr_nonnull(sum);
    uint64_t base = mem_current(ctx);
    opr_tensor *args_t[4] = {NULL}, *x0 = NULL;
    opr_value args[4];
    const char *self_name = "self";
    for (int a = 0; a < nargs; a++) {
        if (a == grad_arg) {
            int64_t s0[4] = {1};
            memcpy(s0 + 1, shapes[a], (size_t)ndims[a] * sizeof(int64_t));
            x0 = tu_rand(ctx, OPR_F64, ndims[a] + 1, s0, -1, 1);
            ck_assert_int_eq(opr_set_requires_grad(x0, true), OPR_OK);
            int64_t d0 = 0;
            opr_value sa[2] = {opr_v_tensor(x0), opr_v_ints(&d0, 1)};
            uint64_t sb = 99;
            ck_assert_msg(opr_plan_saved_bytes(sum, sa, 2, &self_name, 1, &sb) == OPR_OK, "sum plan: %s",
                          opr_last_error());
            ck_assert_msg(sb == 0, "sum(X0, [0]) would save %llu bytes", (unsigned long long)sb);
            args_t[a] = tu_call1(ctx, "sum", sa, 2);
        } else {
            args_t[a] = tu_rand(ctx, OPR_F64, ndims[a], shapes[a], -1, 1);
        }
        args[a] = opr_v_tensor(args_t[a]);
    }
    uint64_t partner_bytes = tbytes(args_t[partner]);
    uint64_t x0_bytes = tbytes(x0);
    uint64_t plan = 0;
    int rc = opr_plan_saved_bytes(op, args, nargs, &argnames[grad_arg], 1, &plan);
    ck_assert_msg(rc == OPR_OK, "%s: plan for %s only: %s [formula missing?]", opname, argnames[grad_arg],
                  opr_last_error());
    ck_assert_msg(plan == partner_bytes, "%s with only %s requiring grad: plan saves %llu bytes, %s is %llu", opname,
                  argnames[grad_arg], (unsigned long long)plan, argnames[partner], (unsigned long long)partner_bytes);
    opr_tensor *y = NULL;
    rc = opr_call(op, args, nargs, &y, 1);
    ck_assert_msg(rc == OPR_OK, "%s: %s", opname, opr_last_error());
    ck_assert(opr_requires_grad(y));
    opr_value za[1] = {opr_v_tensor(y)};
    uint64_t zs = 99;
    ck_assert_int_eq(opr_plan_saved_bytes(sum, za, 1, &self_name, 1, &zs), OPR_OK);
    ck_assert_msg(zs == 0, "sum(y) would save %llu bytes", (unsigned long long)zs);
    opr_tensor *z = tu_call1(ctx, "sum", za, 1);
    for (int a = 0; a < nargs; a++) opr_tensor_release(args_t[a]);
    opr_tensor_release(y);
    uint64_t held = mem_current(ctx) - base;
    uint64_t measured = held - x0_bytes - tbytes(z);
    printf("saved-memory %-7s only %-6s requires grad: plan %llu B, measured %llu B held by the graph (%s = %llu B)\n",
           opname, argnames[grad_arg], (unsigned long long)plan, (unsigned long long)measured, argnames[partner],
           (unsigned long long)partner_bytes);
    ck_assert_msg(measured == partner_bytes, "%s with only %s requiring grad: the graph holds %llu bytes, expected %llu (%s)",
                  opname, argnames[grad_arg], (unsigned long long)measured, (unsigned long long)partner_bytes,
                  argnames[partner]);
    /* the graph still runs, and releasing it frees what it saved */
    ck_assert_msg(opr_backward(z, NULL, NULL) == OPR_OK, "backward: %s", opr_last_error());
    ck_assert_ptr_nonnull(opr_grad(x0));
    ck_assert_int_eq(opr_zero_grad(x0), OPR_OK);
    opr_tensor_release(z);
    ck_assert_msg(mem_current(ctx) - base == x0_bytes, "after releasing the graph %llu bytes are held, expected %llu",
                  (unsigned long long)(mem_current(ctx) - base), (unsigned long long)x0_bytes);
    opr_tensor_release(x0);
    ck_assert_uint_eq(mem_current(ctx), base);
    tu_ctx_free(ctx);
}

static const int64_t MM_SHAPES[][3] = {{6, 5}, {5, 7}};
static const int MM_NDIMS[] = {2, 2};

START_TEST(saved_mm_self) { const char *n[] = {"self", "mat2"}; measure_saved("mm", 2, n, MM_NDIMS, MM_SHAPES, 0, 1); }
END_TEST
START_TEST(saved_mm_mat2) { const char *n[] = {"self", "mat2"}; measure_saved("mm", 2, n, MM_NDIMS, MM_SHAPES, 1, 0); }
END_TEST
START_TEST(saved_matmul_self) { const char *n[] = {"self", "other"}; measure_saved("matmul", 2, n, MM_NDIMS, MM_SHAPES, 0, 1); }
END_TEST
START_TEST(saved_matmul_other) { const char *n[] = {"self", "other"}; measure_saved("matmul", 2, n, MM_NDIMS, MM_SHAPES, 1, 0); }
END_TEST

/* linear(input [6, 5], weight [7, 5]) */
static const int64_t LIN_SHAPES[][3] = {{6, 5}, {7, 5}};
START_TEST(saved_linear_input) { const char *n[] = {"input", "weight"}; measure_saved("linear", 2, n, MM_NDIMS, LIN_SHAPES, 0, 1); }
END_TEST
START_TEST(saved_linear_weight) { const char *n[] = {"input", "weight"}; measure_saved("linear", 2, n, MM_NDIMS, LIN_SHAPES, 1, 0); }
END_TEST

/* addmm(self [7], mat1 [6, 5], mat2 [5, 7]) */
static const int64_t ADDMM_SHAPES[][3] = {{7}, {6, 5}, {5, 7}};
static const int ADDMM_NDIMS[] = {1, 2, 2};
START_TEST(saved_addmm_mat1) { const char *n[] = {"self", "mat1", "mat2"}; measure_saved("addmm", 3, n, ADDMM_NDIMS, ADDMM_SHAPES, 1, 2); }
END_TEST
START_TEST(saved_addmm_mat2) { const char *n[] = {"self", "mat1", "mat2"}; measure_saved("addmm", 3, n, ADDMM_NDIMS, ADDMM_SHAPES, 2, 1); }
END_TEST

int main(void)
{
    load_registry_yaml();
    for (int i = 0; i < nyops; i++)
        if (yops[i].ns > 0) checked_ops[nchecked_ops++] = i;
    printf("gradcheck: %d op entries read, %d with samples\n", nyops, nchecked_ops);
    fflush(stdout);
    Suite *s = suite_create("gradcheck");
    TCase *reg = tcase_create("registry");
    tcase_add_test(reg, registry_read);
    tcase_add_test(reg, every_differentiable_op_has_samples);
    suite_add_tcase(s, reg);
    TCase *ops = tcase_create("ops");
    tcase_set_timeout(ops, 600);
    if (nchecked_ops) tcase_add_loop_test(ops, gradcheck_op, 0, nchecked_ops);
    suite_add_tcase(s, ops);
    TCase *mem = tcase_create("saved_memory");
    tcase_add_test(mem, saved_mm_self);
    tcase_add_test(mem, saved_mm_mat2);
    tcase_add_test(mem, saved_matmul_self);
    tcase_add_test(mem, saved_matmul_other);
    tcase_add_test(mem, saved_linear_input);
    tcase_add_test(mem, saved_linear_weight);
    tcase_add_test(mem, saved_addmm_mat1);
    tcase_add_test(mem, saved_addmm_mat2);
    suite_add_tcase(s, mem);
    int rc = tu_run(s);
    unload_registry_yaml();
    return rc;
}
