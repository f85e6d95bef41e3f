/* opr_call: argument checking against the schema, output shape and dtype inference,
 * output allocation, kernel selection by device, and the call itself. Nothing here
 * takes a lock: the op pointer and its kernel slots are read atomically. */
#include "composite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_name(arg_type t)
{
    static const char *names[] = {"Tensor", "Tensor[]", "int", "float", "bool", "int[]", "str", "Scalar", "float[]"};
    return names[t];
}

const char *value_kind_name(opr_value_kind k)
{
    static const char *names[] = {"None", "Tensor", "Tensor[]", "int", "float", "bool", "int[]", "str", "float[]"};
    return (unsigned)k <= OPR_V_DOUBLE_LIST ? names[k] : "invalid value";
}

/* State collected while checking the arguments. */
typedef struct checked {
    opr_kernel_arg kargs[OPR_MAX_ARGS];
    opr_tensor_view views[OPR_MAX_ARGS];
    opr_tensor_view *list_views;  /* views of the one Tensor[] argument, if any, followed
                                     in the same block by the pointers to them */
    opr_tensor *tensors[OPR_MAX_ARGS];
    double dbls[OPR_MAX_ARGS][OPR_MAX_DIMS]; /* an int[] given for a float[], as doubles */
    mval slots[OPR_MAX_ARGS + OPR_MAX_OUTS + 1];
    int common;                   /* common dtype T, -1 until seen */
    opr_device dev;
    bool have_dev;
    opr_ctx *ctx;
    bool any_requires_grad;
    bool list_requires_grad;  /* a Tensor[] element requires grad */
} checked;

static int check_tensor(const opr_op *op, const op_arg *a, opr_tensor *t, checked *c, const char *where)
{
    char buf[96], dev[48];
    if (t->ragged) /* opr_call hands jagged calls to jagged_call first: only plans get here */
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: argument '%s'%s is jagged; plans are made for dense arguments (pass "
                        "its values, opr_jagged_values)", op->name, a->name, where);
    if (c->ctx && t->ctx != c->ctx)
        return opr_fail(OPR_ERR_INVALID, "%s: argument '%s'%s belongs to another context", op->name, a->name, where);
    c->ctx = t->ctx;
    opr_device d = t->storage->dev;
    if (!c->have_dev) { c->dev = d; c->have_dev = true; }
    else if (c->dev.type != d.type || c->dev.index != d.index)
        return opr_fail(OPR_ERR_INVALID, "%s: argument '%s'%s is on %s but earlier arguments are on %s", op->name, a->name,
                        where, opr_device_format(t->ctx, d, buf, sizeof buf), opr_device_format(t->ctx, c->dev, dev, sizeof dev));
    if (a->fixed_dtype >= 0) {
        if ((int)t->m.dtype != a->fixed_dtype)
            return opr_fail(OPR_ERR_INVALID, "%s: argument '%s'%s must be %s, got %s", op->name, a->name, where,
                            opr_dtype_name((opr_dtype)a->fixed_dtype), opr_tensor_describe(t, buf, sizeof buf));
    } else if (c->common < 0) {
        c->common = (int)t->m.dtype;
    } else if ((int)t->m.dtype != c->common) {
        return opr_fail(OPR_ERR_INVALID, "%s: argument '%s'%s is %s but earlier tensor arguments are %s (no implicit casts)",
                        op->name, a->name, where, opr_dtype_name(t->m.dtype), opr_dtype_name((opr_dtype)c->common));
    }
    c->any_requires_grad |= t->requires_grad;
    return OPR_OK;
}

static int check_args(const opr_op *op, const opr_value *args, int nargs, checked *c)
{
    for (int i = 0; i < op->nargs; i++) {
        const op_arg *a = &op->args[i];
        opr_kernel_arg *k = &c->kargs[i];
        mval *m = &c->slots[i];
        c->tensors[i] = NULL;
        k->struct_size = sizeof *k;
        if (i >= nargs) {
            if (!a->has_default)
                return opr_fail(OPR_ERR_INVALID, "%s: missing argument '%s' (%s); schema: %s", op->name, a->name,
                                type_name(a->type), op->schema);
            *k = a->def;
            mval_of_kernel_arg(k, m);
            continue;
        }
        const opr_value *v = &args[i];
        if (v->kind == OPR_V_NONE) {
            if (!a->optional)
                return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' (%s) is not optional", op->name, a->name, type_name(a->type));
            k->kind = OPR_ARG_NONE;
            m->k = MV_NONE;
            continue;
        }
        bool ok = true;
        switch (a->type) {
        case ARG_TENSOR:
            if ((ok = v->kind == OPR_V_TENSOR)) {
                if (!v->u.t) return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' is a NULL tensor", op->name, a->name);
                int rc = check_tensor(op, a, v->u.t, c, "");
                if (rc) return rc;
                opr_tensor_fill_view(v->u.t, &c->views[i]);
                c->tensors[i] = v->u.t;
                k->kind = OPR_ARG_TENSOR;
                k->u.t = &c->views[i];
                m->k = MV_TENSOR;
                m->u.t = &v->u.t->m;
            }
            break;
        case ARG_TENSOR_LIST:
            if ((ok = v->kind == OPR_V_TENSOR_LIST)) {
                if (v->u.tl.n < 0 || (v->u.tl.n && !v->u.tl.items))
                    return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' is a NULL tensor list", op->name, a->name);
                free(c->list_views);
                /* one block: n views, then the n pointers the kernel gets */
                size_t nv = (size_t)v->u.tl.n + 1;
                c->list_views = malloc(nv * (sizeof *c->list_views + sizeof(opr_tensor_view *)));
                if (!c->list_views) return opr_fail(OPR_ERR_NOMEM, "%s: out of memory", op->name);
                const opr_tensor_view **ptrs = (const opr_tensor_view **)(void *)(c->list_views + nv);
                for (int j = 0; j < v->u.tl.n; j++) {
                    char where[32];
                    snprintf(where, sizeof where, "[%d]", j);
                    if (!v->u.tl.items[j] && a->none_items) { /* None: the kernel gets NULL */
                        ptrs[j] = NULL;
                        continue;
                    }
                    if (!v->u.tl.items[j]) return opr_fail(OPR_ERR_INVALID, "%s: argument '%s%s' is NULL", op->name, a->name, where);
                    /* Tensor?[] items are indices, outside T: i64, or a bool mask, which
                     * opr_call has expanded to i64 (index_masks.c) and only a plan or a
                     * check of the arguments (dispatch_validate) sees */
                    op_arg index_arg = *a;
                    if (a->none_items) index_arg.fixed_dtype = v->u.tl.items[j]->m.dtype == OPR_BOOL ? OPR_BOOL : OPR_I64;
                    int rc = check_tensor(op, &index_arg, v->u.tl.items[j], c, where);
                    if (rc) return rc;
                    c->list_requires_grad |= v->u.tl.items[j]->requires_grad;
                    opr_tensor_fill_view(v->u.tl.items[j], &c->list_views[j]);
                    ptrs[j] = &c->list_views[j];
                }
                k->kind = OPR_ARG_TENSOR_LIST;
                k->u.tl.items = ptrs;
                k->u.tl.n = v->u.tl.n;
                m->k = MV_TENSORS;
                m->n = v->u.tl.n;
                m->u.ts = v->u.tl.items;
            }
            break;
        case ARG_INT:
            if ((ok = v->kind == OPR_V_INT)) { k->kind = OPR_ARG_INT; k->u.i = v->u.i; }
            break;
        case ARG_FLOAT:
            if (v->kind == OPR_V_INT) { k->kind = OPR_ARG_DOUBLE; k->u.d = (double)v->u.i; }
            else if ((ok = v->kind == OPR_V_DOUBLE)) { k->kind = OPR_ARG_DOUBLE; k->u.d = v->u.d; }
            break;
        case ARG_BOOL:
            if ((ok = v->kind == OPR_V_BOOL)) { k->kind = OPR_ARG_BOOL; k->u.b = v->u.b; }
            break;
        case ARG_INT_LIST:
            if ((ok = v->kind == OPR_V_INT_LIST)) {
                if (v->u.il.n && !v->u.il.items)
                    return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' has %d NULL items", op->name, a->name, v->u.il.n);
                if (v->u.il.n < 0 || v->u.il.n > OPR_MAX_DIMS)
                    return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' must be a list of 0 to %d ints", op->name,
                                    a->name, OPR_MAX_DIMS);
                for (int j = 0; a->bool_items && j < v->u.il.n; j++)
                    if (v->u.il.items[j] != 0 && v->u.il.items[j] != 1)
                        return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' is a bool list: item %d is %lld, not 0 or 1",
                                        op->name, a->name, j, (long long)v->u.il.items[j]);
                k->kind = OPR_ARG_INT_LIST;
                k->u.il.items = v->u.il.items;
                k->u.il.n = v->u.il.n;
            }
            break;
        case ARG_FLOAT_LIST: /* an int list converts, as PyTorch takes scale_factors=[2, 2] */
            if ((ok = v->kind == OPR_V_DOUBLE_LIST || v->kind == OPR_V_INT_LIST)) {
                const int n = v->kind == OPR_V_DOUBLE_LIST ? v->u.dl.n : v->u.il.n;
                const void *items = v->kind == OPR_V_DOUBLE_LIST ? (const void *)v->u.dl.items : (const void *)v->u.il.items;
                if (n && !items)
                    return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' has %d NULL items", op->name, a->name, n);
                if (n < 0 || n > OPR_MAX_DIMS)
                    return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' must be a list of 0 to %d floats", op->name,
                                    a->name, OPR_MAX_DIMS);
                for (int j = 0; v->kind == OPR_V_INT_LIST && j < n; j++) c->dbls[i][j] = (double)v->u.il.items[j];
                k->kind = OPR_ARG_DOUBLE_LIST;
                k->u.dl.items = v->kind == OPR_V_DOUBLE_LIST ? v->u.dl.items : c->dbls[i];
                k->u.dl.n = n;
            }
            break;
        case ARG_STR:
            if ((ok = v->kind == OPR_V_STRING && v->u.s)) { k->kind = OPR_ARG_STRING; k->u.s = v->u.s; }
            break;
        case ARG_SCALAR: /* the number keeps its kind: an int stays exact */
            if (v->kind == OPR_V_INT) { k->kind = OPR_ARG_INT; k->u.i = v->u.i; }
            else if (v->kind == OPR_V_DOUBLE) { k->kind = OPR_ARG_DOUBLE; k->u.d = v->u.d; }
            else if ((ok = v->kind == OPR_V_BOOL)) { k->kind = OPR_ARG_BOOL; k->u.b = v->u.b; }
            break;
        }
        if (!ok)
            return opr_fail(OPR_ERR_INVALID, "%s: argument '%s' expects %s, got %s", op->name, a->name,
                            type_name(a->type), value_kind_name(v->kind));
        if (a->type != ARG_TENSOR && a->type != ARG_TENSOR_LIST) mval_of_kernel_arg(k, m);
    }
    return OPR_OK;
}

/* Quotes a failed check with the shapes of the tensors involved. */
static int check_failed(const opr_op *op, const expr *e, const checked *c)
{
    char text[256] = "", shapes[512] = "";
    expr_format(e, text, sizeof text);
    for (int i = 0; i < op->nargs; i++) {
        if (!c->tensors[i]) continue;
        char d[96];
        size_t n = strlen(shapes);
        snprintf(shapes + n, sizeof shapes - n, "%s%s: %s", n ? ", " : "", op->args[i].name,
                 opr_tensor_describe(c->tensors[i], d, sizeof d));
    }
    return opr_fail(OPR_ERR_INVALID, "%s: check failed: %s%s%s%s", op->name, text, shapes[0] ? " (" : "", shapes,
                    shapes[0] ? ")" : "");
}

static int out_dtype(const opr_op *op, int i, const checked *c, opr_dtype *out)
{
    int rule = op->out_dtype[i];
    if (rule == OUT_DTYPE_T) { *out = (opr_dtype)c->common; return OPR_OK; }
    if (rule == OUT_DTYPE_ACC) { *out = out_dtype_acc((opr_dtype)c->common); return OPR_OK; }
    if (rule == OUT_DTYPE_ARG) {
        const opr_kernel_arg *k = &c->kargs[op->dtype_arg];
        int rc = opr_dtype_parse(k->u.s, out);
        return rc ? opr_fail_wrap(rc, "%s: argument '%s'", op->name, op->args[op->dtype_arg].name) : OPR_OK;
    }
    *out = (opr_dtype)rule;
    return OPR_OK;
}

int dispatch_alloc_output(const opr_kernel_call *call, int32_t index, int32_t ndim, const int64_t *shape)
{
    kcall_frame *f = call ? call->host_call : NULL;
    if (f && !f->may_alloc) return opr_fail(OPR_ERR_INVALID, "alloc_output: %s has no data-dependent output", call->op);
    if (!f || index < 0 || index >= call->nout || ndim < 0 || ndim > OPR_MAX_DIMS || (ndim && !shape))
        return opr_fail(OPR_ERR_INVALID, "alloc_output: bad output index or shape");
    if (f->outs[index]) return opr_fail(OPR_ERR_INVALID, "alloc_output: output %d is already allocated", index);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return opr_fail(OPR_ERR_INVALID, "alloc_output: negative size");
    opr_tensor *t = opr_tensor_empty(f->ctx, f->out_dtype[index], ndim, shape, f->dev);
    if (!t) return opr_error_status();
    f->outs[index] = t;
    opr_tensor_fill_view(t, call->outputs[index]);
    return OPR_OK;
}

/* Everything opr_call checks before it allocates: arguments against the schema, one
 * context and device, dtypes, and the op's `check:` expressions. */
static int validate(const opr_op *op, const opr_value *args, int nargs, checked *c)
{
    if (!op) return opr_fail(OPR_ERR_INVALID, "opr_call: NULL op");
    if (op->backward_of)
        return opr_fail(OPR_ERR_INVALID, "%s is the fused backward kernel of %s, run by the autograd engine; "
                        "it cannot be called directly", op->name, op->backward_of->name);
    if (nargs > 0 && !args) return opr_fail(OPR_ERR_INVALID, "%s: NULL args array with %d argument(s)", op->name, nargs);
    if (nargs < 0 || nargs > op->nargs)
        return opr_fail(OPR_ERR_INVALID, "%s: takes at most %d argument(s), %d given; schema: %s", op->name, op->nargs,
                        nargs, op->schema);
    c->common = -1;
    c->ctx = op->ctx;
    int rc = check_args(op, args, nargs, c);
    if (rc) return rc;
    if (op->device_arg >= 0 && !c->have_dev) {
        rc = opr_device_parse(op->ctx, c->kargs[op->device_arg].u.s, &c->dev);
        if (rc) return opr_fail_wrap(rc, "%s: argument 'device'", op->name);
        c->have_dev = true;
    }
    if (!c->have_dev) c->dev = OPR_CPU;
    if (c->common < 0) {
        /* No tensor argument: T is the dtype argument's value (whichever output names
         * it), else f32. Output 0 may itself be T, so it cannot be asked. */
        opr_dtype dt = OPR_F32;
        if (op->dtype_arg >= 0 && (rc = opr_dtype_parse(c->kargs[op->dtype_arg].u.s, &dt)))
            return opr_fail_wrap(rc, "%s: argument '%s'", op->name, op->args[op->dtype_arg].name);
        c->common = (int)dt;
    }
    if (!(op->dtypes & OPR_DTYPE_BIT(c->common)))
        return opr_fail(OPR_ERR_INVALID, "%s: dtype %s is not supported by this op", op->name,
                        opr_dtype_name((opr_dtype)c->common));
    for (int i = 0; i < op->nchecks; i++) {
        mval v;
        if ((rc = expr_eval(op->checks[i], c->slots, &v))) return opr_fail_wrap(rc, "%s", op->name);
        if (v.k != MV_BOOL || !v.u.b) return check_failed(op, op->checks[i], c);
    }
    return OPR_OK;
}

static int prepare(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres, checked *c)
{
    if (op && nres && !results) return opr_fail(OPR_ERR_INVALID, "%s: NULL results array", op->name);
    for (int i = 0; i < nres && results; i++) results[i] = NULL;
    if (op && nres != op->nout)
        return opr_fail(OPR_ERR_INVALID, "%s: returns %d tensor(s), %d result slot(s) given (1 to %d)", op->name,
                        op->nout, nres, op->nout);
    return validate(op, args, nargs, c);
}

int dispatch_validate(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_device *dev,
                      opr_dtype *common)
{
    checked c;
    c.list_views = NULL;
    c.have_dev = false;
    c.any_requires_grad = c.list_requires_grad = false;
    int rc = validate(op, args, nargs, &c);
    free(c.list_views);
    if (rc) return rc;
    memcpy(slots, c.slots, (size_t)op->nargs * sizeof *slots);
    *dev = c.dev;
    *common = (opr_dtype)c.common;
    return OPR_OK;
}

/* A multi-output op asked for its first nres outputs: the others are released. */
static int call_prefix(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    opr_tensor *all[OPR_MAX_OUTS] = {NULL};
    int rc = opr_call(op, args, nargs, all, op->nout);
    for (int i = 0; i < op->nout; i++) {
        if (i < nres) results[i] = all[i];
        else opr_tensor_release(all[i]);
    }
    return rc;
}

opr_status opr_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    if (op && results && nres >= 1 && nres < op->nout) return call_prefix(op, args, nargs, results, nres);
    if (op && op->has_index_list && args && nargs > 0 && nargs <= op->nargs && index_masks_present(op, args, nargs))
        return index_masks_call(op, args, nargs, results, nres);
    opr_dtype promoted;
    if (op && args && nargs > 0 && nargs <= op->nargs && promote_target(op, args, nargs, &promoted))
        return promote_call(op, args, nargs, promoted, results, nres);
    unsigned layouts = op && args && nargs > 0 && nargs <= OPR_MAX_ARGS ? layouts_in_args(args, nargs) : 0;
    if (op && op->list_out && layouts) return list_call(op, args, nargs, results, nres); /* refuses them */
    if (layouts & LAYOUT_BATCHED) return vmap_call(op, args, nargs, results, nres); /* the batch is outermost */
    if (layouts & LAYOUT_JAGGED) return jagged_call(op, args, nargs, results, nres);
    if (op && op->list_out) return list_call(op, args, nargs, results, nres); /* its own count of results */
    checked c;
    c.list_views = NULL;
    c.have_dev = false;
    c.any_requires_grad = c.list_requires_grad = false;
    int rc = prepare(op, args, nargs, results, nres, &c);
    if (rc) { free(c.list_views); return rc; }
    opr_value seeded[OPR_MAX_ARGS];
    if (op->random && c.kargs[op->random_arg].kind == OPR_ARG_NONE) {
        /* `random:` op called without a seed: draw one now, after the checks passed (so a
         * refused call draws nothing), and hand it on as if the caller had given it, so
         * that the kernel, a fallback and the recorded node (whose formula regenerates
         * the same randomness) all see the same seed */
        const int64_t seed = (int64_t)opr_rng_next_seed(op->ctx);
        for (int i = 0; i < op->nargs; i++) seeded[i] = i < nargs ? args[i] : op_arg_default(&op->args[i]);
        seeded[op->random_arg] = opr_v_int(seed);
        args = seeded;
        nargs = op->nargs;
        c.kargs[op->random_arg].kind = OPR_ARG_INT;
        c.kargs[op->random_arg].u.i = seed;
        c.slots[op->random_arg].k = MV_INT;
        c.slots[op->random_arg].u.i = seed;
    }
    if ((op->view == VIEW_RESIZE || op->view == VIEW_RESIZE_OUTPUT) && c.tensors[0]->requires_grad) {
        free(c.list_views); /* PyTorch's words, whether grad mode is on or not */
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: cannot resize variables that require grad", op->name);
    }
    bool record = c.any_requires_grad && opr_grad_mode_enabled();
    if (record && op->inplace) { /* refuse before anything is mutated */
        free(c.list_views);
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: in-place ops on tensors that require grad are not recorded by "
                        "autograd; use the out-of-place op or no_grad", op->name);
    }
    for (int i = 0; op->has_written && i < op->nargs; i++)
        if (op->args[i].written && c.tensors[i] && c.tensors[i]->requires_grad && opr_grad_mode_enabled()) {
            free(c.list_views);
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: argument '%s' is written in place and must not require grad", op->name,
                            op->args[i].name);
        }

    if (op->alt.name) { /* the cheaper of its kernel and its alternative */
        const opr_op *run;
        double kernel_ns, alt_ns;
        rc = alt_choose(op, args, nargs, c.slots, c.dev, (opr_dtype)c.common, &run, &kernel_ns, &alt_ns);
        if (rc || run != op) {
            free(c.list_views);
            return rc ? rc : opr_call(run, args, nargs, results, nres);
        }
    }

    if (op->composite) { /* its parts run through opr_call, each on this device */
        rc = composite_call(op, c.tensors, c.slots, c.dev, (opr_dtype)c.common, record, &results[0]);
        free(c.list_views);
        return rc;
    }

    bool identity = false;
    if (op->identity_if) { /* e.g. sum_to a shape the tensor already has: no kernel, no copy */
        mval v;
        if ((rc = expr_eval(op->identity_if, c.slots, &v))) { free(c.list_views); return opr_fail_wrap(rc, "%s", op->name); }
        identity = v.k == MV_BOOL && v.u.b && c.tensors[0]->m.dtype == (opr_dtype)c.common;
    }
    if (op->view || identity) {
        opr_tensor *self = c.tensors[0];
        opr_tensor *v = identity ? opr_tensor_make_view(self, self->m.ndim, self->m.shape, self->m.strides, self->m.offset)
                                 : host_op_run(op, self, c.kargs);
        if (v && record && (rc = op->ctx->reg->record(op, c.tensors, c.slots, &v, c.dev, c.list_requires_grad))) {
            opr_tensor_release(v);
            v = NULL;
        }
        free(c.list_views);
        results[0] = v;
        return v ? OPR_OK : rc ? rc : opr_error_status();
    }

    const kernel_entry *kerns = atomic_load_explicit(&((opr_op *)op)->kernels[c.dev.type], memory_order_acquire);
    if (c.dev.type == 0 && op->reference && !kernel_for(kerns, c.common)) { /* no CPU kernel: the op's reference */
        rc = composite_call_reference(op, c.tensors, c.slots, (opr_dtype)c.common, record, &results[0]);
        free(c.list_views);
        return rc;
    }
    if (!kernel_for(kerns, c.common) && fallback_applies(op, c.dev.type, (opr_dtype)c.common)) {
        rc = fallback_call(op, args, nargs, results, nres, c.tensors, c.slots, c.dev, (opr_dtype)c.common, record,
                           c.list_requires_grad, NULL);
        free(c.list_views);
        return rc;
    }
    if (!kerns) {
        free(c.list_views);
        /* the device is in the table, so a plugin registered it: what is missing is the kernel */
        return opr_fail(OPR_ERR_NOT_FOUND, "%s: no kernel for device %s: no loaded plugin registers %s there", op->name,
                        op->ctx->devices[c.dev.type].name, op->name);
    }
    const dtype_kernel *kern = kernel_for(kerns, c.common);
    if (!kern) {
        free(c.list_views);
        char plugins[160];
        kernel_plugins(kerns, plugins, sizeof plugins);
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: the %s kernel (plugin %s) does not implement dtype %s", op->name,
                        op->ctx->devices[c.dev.type].name, plugins, opr_dtype_name((opr_dtype)c.common));
    }

    kcall_frame f;
    kcall_frame_init(&f, op->ctx, c.dev, op->dynamic_shape);
    /* The outputs' metadata first, with no data: a kernel's supports (ABI 2.2) sees the
     * call before anything is allocated. */
    opr_tensor_view out_views[OPR_MAX_OUTS];
    opr_meta out_metas[OPR_MAX_OUTS];
    int64_t out_strides[OPR_MAX_OUTS][OPR_MAX_DIMS];
    for (int i = 0; i < op->nout && !rc; i++) {
        if ((rc = out_dtype(op, i, &c, &f.out_dtype[i]))) break;
        if (op->inplace) {
            out_views[0] = c.views[0];
            continue;
        }
        memset(&out_views[i], 0, sizeof out_views[i]);
        out_views[i].struct_size = sizeof out_views[i];
        if (op->dynamic_shape) continue;
        mval shape;
        const opr_meta *a = op->same_shape_args[0] >= 0 ? c.slots[op->same_shape_args[0]].u.t : NULL;
        const opr_meta *b = a ? c.slots[op->same_shape_args[1]].u.t : NULL;
        if (a && a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t))) {
            shape.k = MV_LIST;
            shape.n = a->ndim;
            memcpy(shape.u.l, a->shape, sizeof shape.u.l);
        } else if ((rc = expr_eval(op->shapes[i], c.slots, &shape))) {
            rc = opr_fail_wrap(rc, "%s", op->name);
            break;
        }
        if (shape.k != MV_LIST) { rc = opr_fail(OPR_ERR_INVALID, "%s: shape expression did not give a list", op->name); break; }
        for (int d = 0; d < shape.n && !rc; d++)
            if (shape.u.l[d] < 0) rc = opr_fail(OPR_ERR_INVALID, "%s: negative output size %lld", op->name, (long long)shape.u.l[d]);
        if (rc) break;
        opr_meta *m = &out_metas[i];
        *m = (opr_meta){.dtype = f.out_dtype[i], .ndim = shape.n, .numel = opr_meta_numel(shape.u.l, shape.n)};
        memcpy(m->shape, shape.u.l, (size_t)shape.n * sizeof(int64_t));
        opr_meta_fill_view(m, c.dev, out_strides[i], &out_views[i]);
    }
    /* the ABI passes arrays of pointers (the structs may grow): built on the stack */
    const opr_kernel_arg *arg_ptrs[OPR_MAX_ARGS];
    opr_tensor_view *out_ptrs[OPR_MAX_OUTS];
    for (int i = 0; i < op->nargs; i++) arg_ptrs[i] = &c.kargs[i];
    for (int i = 0; i < op->nout; i++) out_ptrs[i] = &out_views[i];
    opr_kernel_call call = {
        .struct_size = sizeof call, .op = op->name, .args = arg_ptrs, .nargs = op->nargs,
        .outputs = out_ptrs, .nout = op->nout, .host = plugin_host_api(), .host_call = &f,
        .kernel_data = kern->data,
    };
    /* "not for these arguments", said by the kernel's supports (before anything is
     * allocated) or by the kernel itself: the CPU stands in, as for a missing kernel */
    bool refused = false;
    char why[512];
    const char *no = rc ? NULL : kquery_refusal(kern, &call, why, sizeof why);
    if (no) {
        rc = opr_fail(OPR_ERR_UNSUPPORTED, "%s (%s, plugin %s) supports: %s", op->name,
                      op->ctx->devices[c.dev.type].name, kern->plugin, no);
        opr_error_mark_declined();
        refused = true;
    }
    for (int i = 0; i < op->nout && !rc; i++) {
        if (op->inplace) {
            f.outs[0] = opr_tensor_retain(c.tensors[0]);
            continue;
        }
        if (op->dynamic_shape) continue;
        if (!(f.outs[i] = kcall_output_new(&f, i, f.out_dtype[i], out_metas[i].ndim, out_metas[i].shape))) {
            rc = opr_fail_wrap(opr_error_status(), "%s", op->name);
            break;
        }
        opr_tensor_fill_view(f.outs[i], &out_views[i]);
    }
    if (!rc) {
        rc = kcall_run(&f, kern, &call, op, NULL);
        if (rc) {
            char what[256];
            snprintf(what, sizeof what, "%s (%s, plugin %s)", op->name, op->ctx->devices[c.dev.type].name, kern->plugin);
            rc = kcall_fail(&f, rc, what);
            refused = rc == OPR_ERR_UNSUPPORTED && !f.guard_failed;
        } else if (op->dynamic_shape && !f.outs[0]) {
            rc = opr_fail(OPR_ERR_BACKEND, "%s: kernel did not allocate its data-dependent output", op->name);
        }
    }
    if (refused && fallback_applies(op, c.dev.type, (opr_dtype)c.common)) {
        char refusal[1024];
        snprintf(refusal, sizeof refusal, "%s", opr_last_error());
        for (int i = 0; i < op->nout; i++) { opr_tensor_release(f.outs[i]); f.outs[i] = NULL; }
        rc = fallback_call(op, args, nargs, results, nres, c.tensors, c.slots, c.dev, (opr_dtype)c.common, record,
                           c.list_requires_grad, refusal);
        free(c.list_views);
        return rc;
    }
    /* The autograd step (docs/architecture.md, "One opr_call"): a node with the plan for
     * the inputs that require grad, saving only what its formulas read. */
    if (!rc && op->inplace) atomic_fetch_add_explicit(&f.outs[0]->storage->version, 1, memory_order_relaxed);
    for (int i = 0; !rc && op->has_written && i < op->nargs; i++) /* saved copies of it are stale now */
        if (op->args[i].written && c.tensors[i])
            atomic_fetch_add_explicit(&c.tensors[i]->storage->version, 1, memory_order_relaxed);
    if (!rc && record) rc = op->ctx->reg->record(op, c.tensors, c.slots, f.outs, c.dev, c.list_requires_grad);
    if (c.list_views) free(c.list_views);
    if (rc) {
        for (int i = 0; i < op->nout; i++) opr_tensor_release(f.outs[i]);
        return rc;
    }
    for (int i = 0; i < op->nout; i++) results[i] = f.outs[i];
    return OPR_OK;
}

/* Strided copies on accelerators run the device's copy_ kernel. They move data for
 * the core (contiguous(), reshape, reading back), so autograd stays out of them even
 * when src requires grad. */
static int strided_copy(opr_ctx *ctx, opr_tensor *dst, const opr_tensor *src)
{
    opr_op *op = registry_find(ctx, "copy_");
    if (!op) return opr_fail(OPR_ERR_NOT_FOUND, "strided device copy needs the copy_ op");
    opr_value args[2] = {opr_v_tensor(dst), opr_v_tensor((opr_tensor *)src)};
    opr_tensor *out = NULL;
    bool grad_mode = opr_grad_mode_set(false);
    int rc = opr_call(op, args, 2, &out, 1);
    opr_grad_mode_set(grad_mode);
    opr_tensor_release(out);
    return rc;
}

void dispatch_init(opr_ctx *ctx) { ctx->device_strided_copy = strided_copy; }
