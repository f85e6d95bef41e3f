/* Calls the way PyTorch programs write them: arguments by keyword (names put into
 * schema order, skipped ones given their defaults), an int where an int[] is expected,
 * and an op name standing for its overload set ("max": max, max.dim), the overload
 * picked by the kinds of the values given. */
#include "composite.h"

#include <stdio.h>
#include <string.h>

/* How well value v fits argument a: 0 exactly, 1 by a conversion (an int for a float
 * or an int[], an int[] for a float[]: opr_call converts it), -1 not at all. */
static int fit(const op_arg *a, const opr_value *v)
{
    if (v->kind == OPR_V_NONE) return a->optional ? 0 : -1;
    switch (a->type) {
    case ARG_TENSOR: return v->kind == OPR_V_TENSOR ? 0 : -1;
    case ARG_TENSOR_LIST: return v->kind == OPR_V_TENSOR_LIST ? 0 : -1;
    case ARG_INT: return v->kind == OPR_V_INT ? 0 : -1;
    case ARG_FLOAT: return v->kind == OPR_V_DOUBLE ? 0 : v->kind == OPR_V_INT ? 1 : -1;
    case ARG_SCALAR: return v->kind == OPR_V_DOUBLE || v->kind == OPR_V_INT || v->kind == OPR_V_BOOL ? 0 : -1;
    case ARG_BOOL: return v->kind == OPR_V_BOOL ? 0 : -1;
    case ARG_INT_LIST: return v->kind == OPR_V_INT_LIST ? 0 : v->kind == OPR_V_INT ? 1 : -1;
    case ARG_STR: return v->kind == OPR_V_STRING ? 0 : -1;
    case ARG_FLOAT_LIST: return v->kind == OPR_V_DOUBLE_LIST ? 0 : v->kind == OPR_V_INT_LIST ? 1 : -1;
    }
    return -1;
}

/* Arguments bound to an op's schema. */
typedef struct bound {
    opr_value vals[OPR_MAX_ARGS];
    int n;                            /* through the last one given */
    int64_t ints[OPR_MAX_ARGS];       /* an int given for an int[] */
    int cost;                         /* conversions made */
    char why[160];                    /* why they do not bind */
} bound;

static int no_bind(bound *b, const char *fmt, const char *name)
{
    snprintf(b->why, sizeof b->why, fmt, name);
    return -1;
}

static int bind(const opr_op *op, const opr_value *args, int nargs, const opr_kwarg *kw, int nkw, bound *b)
{
    bool given[OPR_MAX_ARGS] = {false};
    b->n = 0;
    b->cost = 0;
    b->why[0] = '\0';
    if (nargs > op->nargs) return no_bind(b, "too many positional arguments%s", "");
    for (int i = 0; i < nargs; i++) {
        b->vals[i] = args[i];
        given[i] = true;
    }
    b->n = nargs;
    for (int k = 0; k < nkw; k++) {
        int i = kw[k].name ? opr_op_arg_index(op, kw[k].name) : -1;
        if (i < 0) return no_bind(b, "no argument named '%s'", kw[k].name ? kw[k].name : "(NULL)");
        if (given[i]) return no_bind(b, "argument '%s' given twice", kw[k].name);
        b->vals[i] = kw[k].value;
        given[i] = true;
        if (i + 1 > b->n) b->n = i + 1;
    }
    for (int i = 0; i < b->n; i++) {
        const op_arg *a = &op->args[i];
        if (!given[i]) {
            if (!a->has_default && !a->optional) return no_bind(b, "missing argument '%s'", a->name);
            b->vals[i] = a->has_default ? op_arg_default(a) : opr_v_none();
            continue;
        }
        int f = fit(a, &b->vals[i]);
        if (f < 0) return no_bind(b, "argument '%s' has the wrong kind", a->name);
        if (f && a->type == ARG_INT_LIST) { /* sum(x, 1): dim=[1] */
            b->ints[i] = b->vals[i].u.i;
            b->vals[i] = opr_v_ints(&b->ints[i], 1);
        }
        b->cost += f;
    }
    for (int i = b->n; i < op->nargs; i++)
        if (!op->args[i].has_default) return no_bind(b, "missing argument '%s'", op->args[i].name);
    return 0;
}

static int fail_bind(const opr_op *op, const bound *b, opr_tensor **results, int nres)
{
    for (int i = 0; results && i < nres; i++) results[i] = NULL;
    return opr_fail(OPR_ERR_INVALID, "%s: %s; schema: %s", op->name, b->why, op->schema);
}

opr_status opr_call_kw(const opr_op *op, const opr_value *args, int nargs, const opr_kwarg *kwargs, int nkw,
                       opr_tensor **results, int nres)
{
    if (!op || nargs < 0 || nkw < 0 || (nargs && !args) || (nkw && !kwargs)) {
        for (int i = 0; results && i < nres; i++) results[i] = NULL;
        return opr_fail(OPR_ERR_INVALID, "opr_call_kw: NULL op, or NULL args or kwargs with a count");
    }
    bound b;
    if (bind(op, args, nargs, kwargs, nkw, &b)) /* positional only: opr_call says what is wrong */
        return nkw ? fail_bind(op, &b, results, nres) : opr_call(op, args, nargs, results, nres);
    return opr_call(op, b.vals, b.n, results, nres);
}

/* "(Tensor, int)": the kinds of the values given, for the error of a failed choice. */
static void describe_values(const opr_value *args, int nargs, const opr_kwarg *kw, int nkw, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < nargs + nkw && at < len; i++) {
        const opr_value *v = i < nargs ? &args[i] : &kw[i - nargs].value;
        const char *kind = value_kind_name(v->kind);
        int n = i < nargs ? snprintf(buf + at, len - at, "%s%s", i ? ", " : "", kind)
                          : snprintf(buf + at, len - at, "%s%s=%s", i ? ", " : "", kw[i - nargs].name ? kw[i - nargs].name : "?", kind);
        at += n > 0 ? (size_t)n : 0;
    }
    if (at < len) snprintf(buf + at, len - at, ")");
}

/* Overload sets are small (a handful of schemas): larger ones are cut here. */
#define MAX_OVERLOADS 32

const opr_op *opr_op_resolve(const opr_ctx *ctx, const char *name, const opr_value *args, int nargs,
                             const opr_kwarg *kwargs, int nkw)
{
    if (!ctx || !name || nargs < 0 || nkw < 0 || (nargs && !args) || (nkw && !kwargs)) {
        opr_fail(OPR_ERR_INVALID, "opr_op_resolve: NULL argument, or NULL args or kwargs with a count");
        return NULL;
    }
    if (strchr(name, '.')) return opr_op_find(ctx, name); /* "max.dim" names one overload */
    const opr_op *set[MAX_OVERLOADS];
    int n = registry_overloads(ctx, name, set, MAX_OVERLOADS);
    if (n > MAX_OVERLOADS) n = MAX_OVERLOADS;
    if (n == 0) { opr_fail(OPR_ERR_NOT_FOUND, "no op named '%s'", name); return NULL; }
    if (n == 1) return set[0]; /* no choice: opr_call says what is wrong with the arguments */
    const opr_op *best = NULL;
    int best_cost = 0;
    bound b;
    for (int i = 0; i < n; i++) /* the fewest conversions; the first defined on a tie */
        if (!bind(set[i], args, nargs, kwargs, nkw, &b) && (!best || b.cost < best_cost)) {
            best = set[i];
            best_cost = b.cost;
        }
    if (best) return best;
    char msg[1024], kinds[160];
    describe_values(args, nargs, kwargs, nkw, kinds, sizeof kinds);
    size_t at = (size_t)snprintf(msg, sizeof msg, "no overload of '%s' takes %s:", name, kinds);
    for (int i = 0; i < n && at < sizeof msg; i++) {
        bind(set[i], args, nargs, kwargs, nkw, &b);
        int w = snprintf(msg + at, sizeof msg - at, " %s (%s);", set[i]->schema, b.why);
        at += w > 0 ? (size_t)w : 0;
    }
    opr_fail(OPR_ERR_INVALID, "%s", msg);
    return NULL;
}

opr_status opr_call_by_name_kw(opr_ctx *ctx, const char *name, const opr_value *args, int nargs,
                               const opr_kwarg *kwargs, int nkw, opr_tensor **results, int nres)
{
    const opr_op *op = opr_op_resolve(ctx, name, args, nargs, kwargs, nkw);
    if (!op && ctx && name && (op = registry_find_exact(ctx, name))) /* none fits: the error of the op so named */
        return opr_call_kw(op, args, nargs, kwargs, nkw, results, nres);
    if (!op) {
        for (int i = 0; results && i < nres; i++) results[i] = NULL;
        return opr_error_status();
    }
    return opr_call_kw(op, args, nargs, kwargs, nkw, results, nres);
}

opr_status opr_call_by_name(opr_ctx *ctx, const char *name, const opr_value *args, int nargs, opr_tensor **results,
                            int nres)
{
    return opr_call_by_name_kw(ctx, name, args, nargs, NULL, 0, results, nres);
}
