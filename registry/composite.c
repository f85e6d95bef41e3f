/* Composite ops (composite.h): linking their forward, refusing cycles, running the
 * forward on real tensors through opr_call, and the public queries. */
#include "composite.h"
#include "deriv.h"
#include "expr_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void def_free(composite_def *cd)
{
    if (!cd) return;
    for (int k = 0; k < cd->nlets; k++) { expr_free(cd->lets[k]); free(cd->let_names[k]); }
    expr_free(cd->result);
    free(cd->text);
    free(cd);
}

void composite_free(opr_op *op)
{
    def_free(op->composite);
    def_free(op->reference);
    op->composite = op->reference = NULL;
}

/* The expressions of a forward: its lets, then its result. */
static int forward_exprs(const composite_def *cd, const expr **out)
{
    int n = 0;
    for (int k = 0; k < cd->nlets; k++) out[n++] = cd->lets[k];
    out[n++] = cd->result;
    return n;
}

/* ------------------------------------------------------------------ cycles */

/* Ops visited by the search, a growable list (composites are few). */
typedef struct op_list {
    const opr_op **v;
    int n, cap;
} op_list;

static int list_push(op_list *l, const opr_op *op)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        const opr_op **grown = realloc(l->v, (size_t)cap * sizeof *grown);
        if (!grown) return opr_fail(OPR_ERR_NOMEM, "out of memory checking composite ops for cycles");
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = op;
    return OPR_OK;
}

static bool list_has(const op_list *l, const opr_op *op)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == op) return true;
    return false;
}

/* Walks e's op calls: a call named `target` sets *hit; the composite ops called that
 * were not seen yet are added to `todo` (and `seen`). */
static int scan_calls(const opr_ctx *ctx, const expr *e, const char *target, op_list *seen, op_list *todo,
                      const expr **hit)
{
    if (*hit) return OPR_OK;
    if (e->kind == EXPR_CALL && e->builtin < 0) {
        if (!strcmp(e->name, target)) { *hit = e; return OPR_OK; }
        const opr_op *callee = e->callee ? e->callee : registry_find(ctx, e->name);
        if (callee && callee->composite && !list_has(seen, callee)) {
            int rc = list_push(seen, callee);
            if (!rc) rc = list_push(todo, callee);
            if (rc) return rc;
        }
    }
    for (int i = 0; i < e->nargs; i++) {
        int rc = scan_calls(ctx, e->args[i], target, seen, todo, hit);
        if (rc) return rc;
    }
    return OPR_OK;
}

/* Whether the forward of `from` reaches a call of `target` through composite ops. */
static int reaches(const opr_ctx *ctx, const opr_op *from, const char *target, bool *found)
{
    op_list seen = {0}, todo = {0};
    const expr *hit = NULL;
    int rc = list_push(&seen, from);
    if (!rc) rc = list_push(&todo, from);
    while (!rc && !hit && todo.n) {
        const composite_def *cd = todo.v[--todo.n]->composite;
        const expr *es[COMPOSITE_MAX_LETS + 1];
        int n = forward_exprs(cd, es);
        for (int i = 0; i < n && !rc && !hit; i++) rc = scan_calls(ctx, es[i], target, &seen, &todo, &hit);
    }
    free(seen.v);
    free(todo.v);
    *found = hit != NULL;
    return rc;
}

/* Finds, in e, a call that leads back to op: to op itself, or to a composite whose
 * forward reaches op. */
static int find_cycle(opr_ctx *ctx, const opr_op *op, const expr *e, const expr **call, const opr_op **via)
{
    if (e->kind == EXPR_CALL && e->builtin < 0) {
        if (!strcmp(e->name, op->name)) { *call = e; *via = NULL; return OPR_OK; }
        const opr_op *callee = registry_find(ctx, e->name);
        bool found = false;
        int rc = callee && callee->composite ? reaches(ctx, callee, op->name, &found) : OPR_OK;
        if (rc) return rc;
        if (found) { *call = e; *via = callee; return OPR_OK; }
    }
    for (int i = 0; i < e->nargs && !*call; i++) {
        int rc = find_cycle(ctx, op, e->args[i], call, via);
        if (rc) return rc;
    }
    return OPR_OK;
}

int composite_check_cycle(opr_ctx *ctx, const opr_op *op)
{
    const composite_def *cd = op->composite ? op->composite : op->reference;
    if (!cd) return OPR_OK;
    const expr *es[COMPOSITE_MAX_LETS + 1], *call = NULL;
    const opr_op *via = NULL;
    int n = forward_exprs(cd, es);
    for (int i = 0; i < n && !call; i++) {
        int rc = find_cycle(ctx, op, es[i], &call, &via);
        if (rc) return rc;
    }
    if (!call) return OPR_OK;
    const char *what = cd == op->reference ? "reference" : "forward";
    if (!via)
        return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: %s of %s calls %s itself: a composite op cannot be recursive",
                        op->file, call->line, call->col, what, op->name, op->name);
    return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: %s of %s calls %s (%s:%d), whose forward calls %s again: a "
                    "composite op cannot be recursive", op->file, call->line, call->col, what, op->name, via->name,
                    via->file, via->line, op->name);
}

/* ------------------------------------------------------------------ linking */

/* Resolves the calls of cd, op's forward or reference (once). */
static int def_link(const opr_op *op, composite_def *cd)
{
    if (atomic_load_explicit(&cd->linked, memory_order_acquire)) return OPR_OK;
    char what[128];
    snprintf(what, sizeof what, "%s of %s", cd == op->reference ? "reference" : "forward", op->name);
    const expr *es[COMPOSITE_MAX_LETS + 1];
    int n = forward_exprs(cd, es), rc = OPR_OK;
    pthread_mutex_lock(&op->ctx->lock);
    for (int i = 0; i < n && !rc; i++) rc = deriv_link_calls(op->ctx, op, what, (expr *)es[i], false);
    if (!rc) atomic_store_explicit(&cd->linked, true, memory_order_release);
    pthread_mutex_unlock(&op->ctx->lock);
    return rc;
}

int composite_link(const opr_op *op) { return def_link(op, op->composite); }

/* ------------------------------------------------------------------ running */

/* Nesting of composite calls on this thread. */
static _Thread_local int composite_depth;

static int expected_dtype(const opr_op *op, const mval *slots, opr_dtype common, opr_dtype *out)
{
    int rule = op->out_dtype[0];
    if (rule == OUT_DTYPE_T) *out = common;
    else if (rule == OUT_DTYPE_ACC) *out = out_dtype_acc(common);
    else if (rule != OUT_DTYPE_ARG) *out = (opr_dtype)rule;
    else if (opr_dtype_parse(slots[op->dtype_arg].u.s, out))
        return opr_fail_wrap(OPR_ERR_INVALID, "%s: argument '%s'", op->name, op->args[op->dtype_arg].name);
    return OPR_OK;
}

/* The result must be what the entry's shape: and dtype say: the cost model, plans and
 * other ops' checks rely on them. */
static int check_result(const opr_op *op, const opr_tensor *res, const mval *shape, opr_dtype dt, opr_device dev)
{
    bool same = res->m.dtype == dt && res->m.ndim == shape->n &&
                !memcmp(res->m.shape, shape->u.l, (size_t)shape->n * sizeof(int64_t)) &&
                res->storage->dev.type == dev.type && res->storage->dev.index == dev.index;
    if (same) return OPR_OK;
    char got[96], want[160] = "[";
    size_t used = 1;
    for (int d = 0; d < shape->n; d++)
        used += (size_t)snprintf(want + used, sizeof want - used, "%s%lld", d ? ", " : "", (long long)shape->u.l[d]);
    char devname[48];
    snprintf(want + used, sizeof want - used, "] %s %s", opr_dtype_name(dt), opr_device_format(op->ctx, dev, devname, sizeof devname));
    return opr_fail(OPR_ERR_INVALID, "%s: the forward expression gave %s but the op's entry (%s:%d) says %s", op->name,
                    opr_tensor_describe(res, got, sizeof got), op->file, op->line, want);
}

/* Runs cd, op's forward or reference, as composite_call says. */
static int def_call(const opr_op *op, composite_def *cd, opr_tensor *const *tensors, const mval *slots, opr_device dev,
                    opr_dtype common, bool record, opr_tensor **out)
{
    *out = NULL;
    int rc = def_link(op, cd);
    if (rc) return rc;
    if (composite_depth >= COMPOSITE_MAX_DEPTH)
        return opr_fail(OPR_ERR_INVALID, "%s: composite ops nested more than %d deep", op->name, COMPOSITE_MAX_DEPTH);
    /* what the entry promises, checked before anything runs */
    mval shape;
    opr_dtype dt;
    if ((rc = expr_eval(op->shapes[0], slots, &shape))) return opr_fail_wrap(rc, "%s", op->name);
    if (shape.k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "%s: shape expression did not give a list", op->name);
    if ((rc = expected_dtype(op, slots, common, &dt))) return rc;

    expr_run r;
    expr_run_init(&r, op->ctx, dev, common);
    mval vals[OPR_MAX_ARGS + COMPOSITE_MAX_LETS];
    memcpy(vals, slots, (size_t)op->nargs * sizeof *vals);
    for (int i = 0; i < op->nargs; i++)
        if (tensors[i]) r.known[r.nknown++] = tensors[i];
    /* With its own formulas the op is one node: its parts must not be recorded. */
    bool own = op->deriv || op->nondifferentiable;
    bool mode = own ? opr_grad_mode_set(false) : false;
    composite_depth++;
    for (int k = 0; k < cd->nlets && !rc; k++) rc = expr_run_eval(&r, cd->lets[k], vals, &vals[op->nargs + k]);
    mval v = {.k = MV_NONE};
    if (!rc) rc = expr_run_eval(&r, cd->result, vals, &v);
    composite_depth--;
    if (own) opr_grad_mode_set(mode);
    if (rc) rc = opr_fail_wrap(rc, "%s (composite op, %s:%d)", op->name, op->file, op->line);
    opr_tensor *res = NULL;
    if (!rc && !(res = v.k == MV_TENSOR ? expr_run_tensor(&r, v.u.t) : NULL))
        rc = opr_fail(OPR_ERR_INVALID, "%s: the forward expression did not give a tensor", op->name);
    if (!rc) rc = check_result(op, res, &shape, dt, dev);
    if (!rc && !own) {
        *out = opr_tensor_retain(res);  /* an argument itself stays itself, graph and all */
    } else if (!rc) {
        /* a new header: the node is attached to it, never to an argument */
        bool is_arg = false;
        for (int i = 0; i < op->nargs; i++) is_arg |= tensors[i] == res;
        *out = is_arg || res->grad_fn ? opr_tensor_make_view(res, res->m.ndim, res->m.shape, res->m.strides, res->m.offset)
                                      : opr_tensor_retain(res);
        if (!*out) rc = opr_error_status();
        if (!rc && record && op->deriv && (rc = op->ctx->reg->record(op, tensors, slots, out, dev, false))) {
            opr_tensor_release(*out);
            *out = NULL;
        }
    }
    expr_run_done(&r);
    return rc;
}

int composite_call(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_device dev,
                   opr_dtype common, bool record, opr_tensor **out)
{
    return def_call(op, op->composite, tensors, slots, dev, common, record, out);
}

int composite_call_reference(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_dtype common,
                             bool record, opr_tensor **out)
{
    return def_call(op, op->reference, tensors, slots, (opr_device){0, 0}, common, record, out);
}

/* ------------------------------------------------------------------ queries */

/* Looks callees up by name (lock-free) rather than reading call->callee, which
 * composite_link may be writing on another thread. */
static bool calls_run_on(const opr_ctx *ctx, const expr *e, int device_type, int depth)
{
    if (e->kind == EXPR_CALL && e->builtin < 0) {
        const opr_op *callee = registry_find(ctx, e->name);
        if (!callee) return false;
        if (callee->composite) {
            if (depth >= COMPOSITE_MAX_DEPTH) return false;
            const expr *es[COMPOSITE_MAX_LETS + 1];
            int n = forward_exprs(callee->composite, es);
            for (int i = 0; i < n; i++)
                if (!calls_run_on(ctx, es[i], device_type, depth + 1)) return false;
        } else if (callee->view != VIEW_NONE ? !views_run_on(ctx, device_type)
                                             : !atomic_load(&((opr_op *)callee)->kernels[device_type])) {
            return false;
        }
    }
    for (int i = 0; i < e->nargs; i++)
        if (!calls_run_on(ctx, e->args[i], device_type, depth)) return false;
    return true;
}

bool composite_runs_on(const opr_op *op, int device_type)
{
    const expr *es[COMPOSITE_MAX_LETS + 1];
    const composite_def *cd = op->composite ? op->composite : device_type == 0 ? op->reference : NULL;
    if (!cd) return false;
    int n = forward_exprs(cd, es);
    for (int i = 0; i < n; i++)
        if (!calls_run_on(op->ctx, es[i], device_type, 0)) return false;
    return true;
}

bool opr_op_is_composite(const opr_op *op) { return op && op->composite; }

const char *opr_op_forward(const opr_op *op) { return op && op->composite ? op->composite->text : NULL; }
