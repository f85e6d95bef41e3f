/* The graph of a captured program: the JSON in the container's metadata. Every node's
 * op is resolved in the registry and every argument checked against its schema here,
 * at load, so that a run never meets a malformed reference (docs/program-format.md). */
#include "program_internal.h"

#include "../core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const graph_keys[4] = {"inputs", "params", "buffers", "consts"};

/* Names of the registry's missing ops, gathered over all nodes before failing. */
typedef struct missing_ops {
    char text[1024];
    int n;
} missing_ops;

static opr_status read_graph_tensors(opr_program *p, json_t *root, int kind)
{
    json_t *arr = json_object_get(root, graph_keys[kind]);
    if (!arr) return OPR_OK;
    if (!json_is_array(arr)) return opr_fail(OPR_ERR_PARSE, "program: \"%s\" is not an array", graph_keys[kind]);
    size_t n = json_array_size(arr);
    p->graph[kind] = calloc(n + 1, sizeof *p->graph[kind]);
    p->graph_names[kind] = calloc(n + 1, sizeof *p->graph_names[kind]);
    if (!p->graph[kind] || !p->graph_names[kind]) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i), *name = json_object_get(e, "name"), *t = json_object_get(e, "tensor");
        if (!json_is_string(name) || !json_is_string(t))
            return opr_fail(OPR_ERR_PARSE, "program: %s[%zu] needs \"name\" and \"tensor\" strings", graph_keys[kind], i);
        int s = prog_stored_find(p, json_string_value(t));
        if (s < 0)
            return opr_fail(OPR_ERR_PARSE, "program: %s[%zu] names tensor '%s', which the file lacks", graph_keys[kind], i,
                            json_string_value(t));
        p->graph[kind][i] = s;
        if (!(p->graph_names[kind][i] = strdup(json_string_value(name))))
            return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        p->ngraph[kind]++;
    }
    return OPR_OK;
}

/* A tensor reference ({"input": I}, {"node": N, "output": K}, ...); node is the index of
 * the node reading it (references go to earlier nodes only), nnodes for graph outputs. */
static opr_status read_ref(const opr_program *p, json_t *v, int node, prog_ref *out, const char *where)
{
    static const char *const keys[4] = {"input", "param", "buffer", "const"};
    if (!json_is_object(v)) return opr_fail(OPR_ERR_PARSE, "%s: not a tensor reference", where);
    json_t *n = json_object_get(v, "node");
    if (n) {
        json_t *k = json_object_get(v, "output");
        if (!json_is_integer(n) || !json_is_integer(k))
            return opr_fail(OPR_ERR_PARSE, "%s: \"node\" and \"output\" must be integers", where);
        json_int_t ni = json_integer_value(n), ki = json_integer_value(k);
        if (ni < 0 || ni >= node)
            return opr_fail(OPR_ERR_PARSE, "%s: reads node %lld, which is not an earlier node", where, (long long)ni);
        if (ki < 0 || ki >= p->nodes[ni].nout)
            return opr_fail(OPR_ERR_PARSE, "%s: reads output %lld of node %lld, which has %d", where, (long long)ki,
                            (long long)ni, p->nodes[ni].nout);
        *out = (prog_ref){SRC_NODE, (int)ni, (int)ki};
        return OPR_OK;
    }
    for (int kind = 0; kind < 4; kind++) {
        json_t *i = json_object_get(v, keys[kind]);
        if (!i) continue;
        if (!json_is_integer(i) || json_integer_value(i) < 0 || json_integer_value(i) >= p->ngraph[kind])
            return opr_fail(OPR_ERR_PARSE, "%s: %s index out of range (the program has %d)", where, keys[kind],
                            p->ngraph[kind]);
        *out = (prog_ref){(prog_src)kind, (int)json_integer_value(i), 0};
        return OPR_OK;
    }
    return opr_fail(OPR_ERR_PARSE, "%s: not a tensor reference", where);
}

/* The schema type of argument pos without its trailing '?'. */
static void base_type(const opr_op *op, int pos, char *buf, size_t len)
{
    snprintf(buf, len, "%s", opr_op_arg_type(op, pos));
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '?') buf[n - 1] = '\0';
}

/* Whether a value of kind k may be bound to argument pos (the format's table). */
static bool kind_fits(const opr_op *op, int pos, prog_arg_kind k)
{
    char t[32];
    base_type(op, pos, t, sizeof t);
    const bool scalar = !strcmp(t, "Scalar");
    switch (k) {
    case PA_NONE: return opr_op_arg_optional(op, pos) || opr_op_arg_default(op, pos, NULL);
    case PA_REF: return !strcmp(t, "Tensor");
    case PA_TENSORS: return !strcmp(t, "Tensor[]") || !strcmp(t, "Tensor?[]");
    case PA_INT: return !strcmp(t, "int") || !strcmp(t, "float") || scalar || !strcmp(t, "int[]");
    case PA_FLOAT: return !strcmp(t, "float") || scalar;
    case PA_BOOL: return !strcmp(t, "bool") || scalar;
    case PA_INTS: return !strcmp(t, "int[]") || !strcmp(t, "bool[]");
    case PA_BOOLS: return !strcmp(t, "bool[]");
    default: return !strcmp(t, "str");
    }
}

static char *dup_or_fail(const char *s)
{
    char *d = strdup(s);
    if (!d) opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    return d;
}

/* ATen's dtype name as opreg's schemas spell it (their checks compare the words); a
 * floating one becomes the run's dtype when the program is converted. A name opreg
 * lacks (uint8) is kept: the op's own check refuses it, naming it. */
static const char *run_dtype_name(const opr_program *p, const char *name)
{
    static const struct { const char *aten, *opreg; } names[] = {
        {"float32", "f32"}, {"float64", "f64"}, {"int64", "i64"}, {"bool", "bool"}, {"float16", "f16"}, {"bfloat16", "bf16"}};
    if (p->opts.convert_dtype && (!strcmp(name, "float32") || !strcmp(name, "float64")))
        return p->run_dtype == OPR_F64 ? "f64" : "f32";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].aten)) return names[i].opreg;
    return name;
}

static opr_status read_arg(opr_program *p, int node, json_t *v, prog_arg *a, const char *where)
{
    if (json_is_null(v)) {
        a->kind = PA_NONE;
        return OPR_OK;
    }
    if (!json_is_object(v) || json_object_size(v) == 0)
        return opr_fail(OPR_ERR_PARSE, "%s: not a tagged argument", where);
    json_t *x;
    if (json_object_get(v, "node") || json_object_get(v, "input") || json_object_get(v, "param") ||
        json_object_get(v, "buffer") || json_object_get(v, "const")) {
        a->kind = PA_REF;
        return read_ref(p, v, node, &a->ref, where);
    }
    if ((x = json_object_get(v, "tensors"))) {
        if (!json_is_array(x)) return opr_fail(OPR_ERR_PARSE, "%s: \"tensors\" is not an array", where);
        a->kind = PA_TENSORS;
        a->n = (int)json_array_size(x);
        if (!(a->refs = calloc((size_t)a->n + 1, sizeof *a->refs))) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        for (int i = 0; i < a->n; i++) {
            json_t *e = json_array_get(x, (size_t)i);
            if (json_is_null(e)) a->refs[i] = (prog_ref){SRC_NONE, 0, 0};
            else if (read_ref(p, e, node, &a->refs[i], where)) return opr_error_status();
        }
        return OPR_OK;
    }
    if ((x = json_object_get(v, "int"))) {
        if (!json_is_integer(x)) return opr_fail(OPR_ERR_PARSE, "%s: \"int\" is not an integer", where);
        a->kind = PA_INT;
        a->i = json_integer_value(x);
        return OPR_OK;
    }
    if ((x = json_object_get(v, "float"))) {
        a->kind = PA_FLOAT;
        const char *s = json_string_value(x);
        if (json_is_number(x)) a->d = json_number_value(x);
        else if (s && !strcmp(s, "inf")) a->d = INFINITY;
        else if (s && !strcmp(s, "-inf")) a->d = -INFINITY;
        else if (s && !strcmp(s, "nan")) a->d = NAN;
        else return opr_fail(OPR_ERR_PARSE, "%s: \"float\" is neither a number nor inf, -inf, nan", where);
        return OPR_OK;
    }
    if ((x = json_object_get(v, "bool"))) {
        if (!json_is_boolean(x)) return opr_fail(OPR_ERR_PARSE, "%s: \"bool\" is not true or false", where);
        a->kind = PA_BOOL;
        a->b = json_is_true(x);
        return OPR_OK;
    }
    if ((x = json_object_get(v, "ints")) || (x = json_object_get(v, "bools"))) {
        const bool bools = json_object_get(v, "bools") == x;
        if (!json_is_array(x) || json_array_size(x) > 64)
            return opr_fail(OPR_ERR_PARSE, "%s: a list of at most 64 items expected", where);
        a->kind = bools ? PA_BOOLS : PA_INTS;
        a->n = (int)json_array_size(x);
        if (!(a->ints = calloc((size_t)a->n + 1, sizeof *a->ints))) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        for (int i = 0; i < a->n; i++) {
            json_t *e = json_array_get(x, (size_t)i);
            if (bools ? !json_is_boolean(e) : !json_is_integer(e))
                return opr_fail(OPR_ERR_PARSE, "%s: item %d is not a%s", where, i, bools ? " bool" : "n integer");
            a->ints[i] = bools ? json_is_true(e) : json_integer_value(e);
        }
        return OPR_OK;
    }
    static const struct { const char *tag; prog_arg_kind kind; } strs[] = {
        {"str", PA_STR}, {"dtype", PA_DTYPE}, {"device", PA_DEVICE}, {"layout", PA_STR}, {"memory_format", PA_STR}};
    for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++) {
        if (!(x = json_object_get(v, strs[k].tag))) continue;
        if (!json_is_string(x)) return opr_fail(OPR_ERR_PARSE, "%s: \"%s\" is not a string", where, strs[k].tag);
        a->kind = strs[k].kind;
        const char *s = json_string_value(x);
        if (a->kind == PA_DTYPE) s = run_dtype_name(p, s);
        if (a->kind == PA_DEVICE) s = p->device; /* replay runs where it was asked to */
        return (a->s = dup_or_fail(s)) ? OPR_OK : OPR_ERR_NOMEM;
    }
    return opr_fail(OPR_ERR_PARSE, "%s: unknown argument kind \"%s\"", where, json_object_iter_key(json_object_iter(v)));
}

/* Whether op's arguments have the names, in order, of the ATen schema text
 * ("split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"). */
static bool same_arg_names(const opr_op *op, const char *schema)
{
    const char *s = strchr(schema, '(');
    int k = 0, depth = 0;
    if (!s) return false;
    for (const char *start = ++s; *s; s++) {
        if (*s == '(' || *s == '[') depth++;
        else if ((*s == ']' || *s == ')') && depth > 0) depth--;
        else if (*s == ',' || *s == ')') { /* the end of one argument, depth 0 */
            const char *end = start;
            while (end < s && *end != '=') end++;
            while (end > start && end[-1] == ' ') end--;
            const char *name = end;
            while (name > start && name[-1] != ' ') name--;
            const size_t len = (size_t)(end - name);
            if (len && !(len == 1 && *name == '*')) { /* "*" marks the keyword-only ones */
                const char *want = opr_op_arg_name(op, k++);
                if (!want || strlen(want) != len || strncmp(want, name, len)) return false;
            }
            start = s + 1;
            if (*s == ')') break;
        }
    }
    return k == opr_op_num_args(op);
}

/* Looks the node's op up: "addmm" for addmm.default, else "NAME.OVERLOAD". */
static const opr_op *resolve(opr_program *p, prog_node *nd, json_t *e, int i, missing_ops *miss)
{
    json_t *op = json_object_get(e, "op"), *ov = json_object_get(e, "overload");
    if (!json_is_string(op) || (ov && !json_is_string(ov)) || !json_string_length(op)) {
        opr_fail(OPR_ERR_PARSE, "node %d: \"op\" (and \"overload\") must be strings", i);
        return NULL;
    }
    const char *o = ov ? json_string_value(ov) : "";
    int len = !o[0] || !strcmp(o, "default") ? snprintf(nd->aten, sizeof nd->aten, "%s", json_string_value(op))
                                             : snprintf(nd->aten, sizeof nd->aten, "%s.%s", json_string_value(op), o);
    if (len < 0 || (size_t)len >= sizeof nd->aten) {
        opr_fail(OPR_ERR_PARSE, "node %d: op name too long", i);
        return NULL;
    }
    const opr_op *found = opr_op_find(p->ctx, nd->aten);
    /* a plain name finds the first overload of its set: it must be the op itself */
    if (found && !strchr(nd->aten, '.') && opr_op_overload_name(found) && strcmp(opr_op_name(found), nd->aten))
        found = NULL;
    /* ATen's overload of an op opreg defines once, without an overload name
     * (split.Tensor, transpose.int, masked_fill.Scalar are opreg's split, transpose,
     * masked_fill) when its arguments have the names of ATen's (the node's "schema"),
     * then checked against its schema below */
    if (!found && strchr(nd->aten, '.')) {
        const opr_op *plain = opr_op_find(p->ctx, json_string_value(op));
        json_t *schema = json_object_get(e, "schema");
        if (plain && !opr_op_overload_name(plain) && !strcmp(opr_op_name(plain), json_string_value(op)) &&
            (!json_is_string(schema) || same_arg_names(plain, json_string_value(schema))))
            found = plain;
    }
    if (!found) {
        size_t used = strlen(miss->text);
        if (!strstr(miss->text, nd->aten) && used + strlen(nd->aten) + 16 < sizeof miss->text)
            snprintf(miss->text + used, sizeof miss->text - used, "%saten::%s (node %d)", miss->n ? ", " : "", nd->aten, i);
        miss->n++;
    }
    return found;
}

static opr_status read_node(opr_program *p, int i, json_t *e, missing_ops *miss)
{
    prog_node *nd = &p->nodes[i];
    char where[160];
    if (!json_is_object(e)) return opr_fail(OPR_ERR_PARSE, "node %d: not an object", i);
    json_t *outs = json_object_get(e, "outputs"), *args = json_object_get(e, "args"), *kw = json_object_get(e, "kwargs");
    if (!json_is_integer(outs) || json_integer_value(outs) < 0 || json_integer_value(outs) > 64)
        return opr_fail(OPR_ERR_PARSE, "node %d: \"outputs\" must be an integer 0..64", i);
    nd->nout = (int)json_integer_value(outs);
    if ((args && !json_is_array(args)) || (kw && !json_is_object(kw)))
        return opr_fail(OPR_ERR_PARSE, "node %d: \"args\" must be an array and \"kwargs\" an object", i);
    nd->op = resolve(p, nd, e, i, miss);
    if (!nd->op) return miss->n ? OPR_OK : opr_error_status(); /* missing ops are reported together */
    const int nargs = opr_op_num_args(nd->op);
    if (!opr_op_returns_list(nd->op) && nd->nout != opr_op_num_outputs(nd->op))
        return opr_fail(OPR_ERR_PARSE, "node %d (aten::%s): %d outputs, the op has %d", i, nd->aten, nd->nout,
                        opr_op_num_outputs(nd->op));
    nd->npos = (int)json_array_size(args);
    if (nd->npos > nargs)
        return opr_fail(OPR_ERR_PARSE, "node %d (aten::%s): %d arguments, the schema has %d", i, nd->aten, nd->npos, nargs);
    nd->nargs = nd->npos + (int)json_object_size(kw);
    nd->args = calloc((size_t)nd->nargs + 1, sizeof *nd->args);
    nd->refs = malloc(((size_t)nd->nout + 1) * sizeof *nd->refs);
    nd->values = calloc((size_t)nd->nout + 1, sizeof *nd->values);
    if (!nd->args || !nd->refs || !nd->values) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    const char *key = NULL;
    void *it = kw ? json_object_iter(kw) : NULL;
    bool device_given = false;
    for (int a = 0; a < nd->nargs; a++) {
        prog_arg *pa = &nd->args[a];
        json_t *v;
        if (a < nd->npos) {
            pa->pos = a;
            v = json_array_get(args, (size_t)a);
            snprintf(where, sizeof where, "node %d (aten::%s) argument %d (%s)", i, nd->aten, a, opr_op_arg_name(nd->op, a));
        } else {
            key = json_object_iter_key(it);
            v = json_object_iter_value(it);
            it = json_object_iter_next(kw, it);
            if (!(pa->kw = dup_or_fail(key))) return OPR_ERR_NOMEM;
            pa->pos = opr_op_arg_index(nd->op, key);
            snprintf(where, sizeof where, "node %d (aten::%s) keyword argument %s", i, nd->aten, key);
            if (pa->pos < 0) return opr_fail(OPR_ERR_PARSE, "%s: the schema has no such argument", where);
            if (pa->pos < nd->npos) return opr_fail(OPR_ERR_PARSE, "%s: given by position too", where);
        }
        if (read_arg(p, i, v, pa, where)) return opr_error_status();
        char t[32];
        base_type(nd->op, pa->pos, t, sizeof t);
        if (pa->kind == PA_BOOL && !strcmp(t, "float")) { /* full(size, True): the number 1 */
            pa->kind = PA_FLOAT;
            pa->d = pa->b;
        }
        if (!kind_fits(nd->op, pa->pos, pa->kind))
            return opr_fail(OPR_ERR_PARSE, "%s: the schema's %s takes no such value", where, opr_op_arg_type(nd->op, pa->pos));
        if (pa->kind == PA_TENSORS && !(pa->items = calloc((size_t)pa->n + 1, sizeof *pa->items)))
            return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        device_given = device_given || !strcmp(opr_op_arg_name(nd->op, pa->pos), "device");
    }
    /* a factory without a device argument runs where ATen's default (the CPU) would
     * put it in the capture: here, the program's device (decided once, not per run) */
    const int dpos = opr_op_arg_index(nd->op, "device");
    nd->add_device = !device_given && dpos >= nd->npos && !strncmp(opr_op_arg_type(nd->op, dpos), "str", 3);
    json_t *refs = json_object_get(e, "refs");
    for (int k = 0; k < nd->nout; k++) {
        json_t *r = json_array_get(refs, (size_t)k);
        nd->refs[k] = -1;
        if (!r || json_is_null(r)) continue;
        if (!json_is_string(r) || (nd->refs[k] = prog_stored_find(p, json_string_value(r))) < 0)
            return opr_fail(OPR_ERR_PARSE, "node %d: reference %d is not a tensor of the file", i, k);
    }
    return OPR_OK;
}

static opr_status read_outputs(opr_program *p, json_t *root)
{
    json_t *outs = json_object_get(root, "outputs"), *refs = json_object_get(root, "output_refs");
    if (!json_is_array(outs)) return opr_fail(OPR_ERR_PARSE, "program: no \"outputs\" array");
    p->noutputs = (int)json_array_size(outs);
    p->outputs = calloc((size_t)p->noutputs + 1, sizeof *p->outputs);
    p->output_refs = calloc((size_t)p->noutputs + 1, sizeof *p->output_refs);
    if (!p->outputs || !p->output_refs) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    for (int k = 0; k < p->noutputs; k++) {
        char where[48];
        snprintf(where, sizeof where, "program output %d", k);
        if (read_ref(p, json_array_get(outs, (size_t)k), p->nnodes, &p->outputs[k], where)) return opr_error_status();
        json_t *r = json_array_get(refs, (size_t)k);
        p->output_refs[k] = -1;
        if (r && !json_is_null(r) && (!json_is_string(r) || (p->output_refs[k] = prog_stored_find(p, json_string_value(r))) < 0))
            return opr_fail(OPR_ERR_PARSE, "program: output reference %d is not a tensor of the file", k);
    }
    json_t *loss = json_object_get(root, "loss");
    p->loss = -1;
    if (loss && !json_is_null(loss)) {
        if (!json_is_integer(loss) || json_integer_value(loss) < 0 || json_integer_value(loss) >= p->noutputs)
            return opr_fail(OPR_ERR_PARSE, "program: \"loss\" is not the index of an output");
        p->loss = (int)json_integer_value(loss);
    }
    return OPR_OK;
}

opr_status prog_read_graph(opr_program *p, const char *text)
{
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!root) return opr_fail(OPR_ERR_PARSE, "program graph: line %d column %d: %s", err.line, err.column, err.text);
    opr_status st = OPR_OK;
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version"),
           *nodes = json_object_get(root, "nodes");
    if (!json_is_object(root) || !json_is_string(fmt) || strcmp(json_string_value(fmt), "opreg-program")) {
        st = opr_fail(OPR_ERR_PARSE, "program graph: \"format\" is not \"opreg-program\"");
        goto done;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        st = opr_fail(OPR_ERR_PARSE, "program graph: version %s: this reader reads version 1",
                      json_is_integer(ver) ? "other than 1" : "missing");
        goto done;
    }
    if (!json_is_array(nodes)) {
        st = opr_fail(OPR_ERR_PARSE, "program graph: no \"nodes\" array");
        goto done;
    }
    json_t *dt = json_object_get(root, "dtype");
    if (dt && (!json_is_string(dt) || (strcmp(json_string_value(dt), "f32") && strcmp(json_string_value(dt), "f64")))) {
        st = opr_fail(OPR_ERR_PARSE, "program graph: \"dtype\" must be \"f32\" or \"f64\"");
        goto done;
    }
    if (dt && !p->opts.convert_dtype) p->run_dtype = strcmp(json_string_value(dt), "f64") ? OPR_F32 : OPR_F64;
    for (int kind = 0; kind < 4 && !st; kind++) st = read_graph_tensors(p, root, kind);
    if (st) goto done;
    p->nodes = calloc(json_array_size(nodes) + 1, sizeof *p->nodes);
    if (!p->nodes) {
        st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        goto done;
    }
    missing_ops miss = {.n = 0};
    for (size_t i = 0; i < json_array_size(nodes) && !st; i++) {
        st = read_node(p, (int)i, json_array_get(nodes, i), &miss);
        p->nnodes = (int)i + 1;
    }
    if (!st && miss.n) st = opr_fail(OPR_ERR_NOT_FOUND, "program: %d node(s) call ops the registry lacks: %s", miss.n, miss.text);
    if (!st) st = read_outputs(p, root);
done:
    json_decref(root);
    return st;
}

/* Marks output (n, k) as read by node i (nnodes: by the graph's outputs). */
static void note_use(int **last, prog_ref r, int i)
{
    if (r.src == SRC_NODE && last[r.index][r.output] < i) last[r.index][r.output] = i;
}

opr_status prog_plan_frees(opr_program *p)
{
    int **last = calloc((size_t)p->nnodes + 1, sizeof *last);
    opr_status st = last ? OPR_OK : opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    for (int i = 0; i < p->nnodes && !st; i++) {
        if (!(last[i] = malloc(((size_t)p->nodes[i].nout + 1) * sizeof **last))) st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        /* an output nobody reads goes right after its node */
        for (int k = 0; !st && k < p->nodes[i].nout; k++) last[i][k] = i;
    }
    for (int i = 0; i < p->nnodes && !st; i++)
        for (int a = 0; a < p->nodes[i].nargs; a++) {
            const prog_arg *pa = &p->nodes[i].args[a];
            if (pa->kind == PA_REF) note_use(last, pa->ref, i);
            for (int j = 0; pa->kind == PA_TENSORS && j < pa->n; j++) note_use(last, pa->refs[j], i);
        }
    for (int k = 0; k < p->noutputs && !st; k++) note_use(last, p->outputs[k], p->nnodes);
    for (int pass = 0; pass < 2 && !st; pass++) { /* count, then fill */
        for (int n = 0; n < p->nnodes; n++)
            for (int k = 0; k < p->nodes[n].nout; k++) {
                if (last[n][k] >= p->nnodes) continue; /* a graph output: kept */
                prog_node *at = &p->nodes[last[n][k]];
                if (pass == 0) at->nfrees++;
                else at->frees[at->nfrees++] = (prog_ref){SRC_NODE, n, k};
            }
        for (int i = 0; pass == 0 && i < p->nnodes && !st; i++) {
            if (!(p->nodes[i].frees = malloc(((size_t)p->nodes[i].nfrees + 1) * sizeof *p->nodes[i].frees)))
                st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
            p->nodes[i].nfrees = 0;
        }
    }
    for (int i = 0; last && i < p->nnodes; i++) free(last[i]);
    free(last);
    return st;
}
