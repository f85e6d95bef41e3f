/* Runs expressions on real tensors: the evaluator's call hook binds each op call's
 * arguments to the callee's schema and runs it with opr_call, so the calls are
 * recorded by autograd like any other (expr_run.h). */
#include "expr_run.h"
#include "deriv.h"

#include <string.h>

void expr_run_init(expr_run *r, opr_ctx *ctx, opr_device dev, opr_dtype dt)
{
    r->ctx = ctx;
    r->dev = dev;
    r->dt = dt;
    r->nknown = r->ntemps = 0;
    r->known_list = NULL;
    r->nknown_list = 0;
}

opr_tensor *expr_run_tensor(const expr_run *r, const opr_meta *m)
{
    for (int i = 0; i < r->nknown; i++)
        if (r->known[i] && &r->known[i]->m == m) return r->known[i];
    for (int i = 0; i < r->ntemps; i++)
        if (&r->temps[i]->m == m) return r->temps[i];
    for (int i = 0; i < r->nknown_list; i++)
        if (r->known_list[i] && &r->known_list[i]->m == m) return r->known_list[i];
    return NULL;
}

int expr_run_keep(expr_run *r, opr_tensor *t)
{
    if (r->ntemps == EXPR_RUN_MAX_TEMPS) { opr_tensor_release(t); return opr_fail(OPR_ERR_NOMEM, "expression too large"); }
    r->temps[r->ntemps++] = t;
    return OPR_OK;
}

void expr_run_done(expr_run *r)
{
    expr_run_rewind(r, 0);
}

void expr_run_rewind(expr_run *r, int mark)
{
    for (int i = mark; i < r->ntemps; i++) opr_tensor_release(r->temps[i]);
    if (mark < r->ntemps) r->ntemps = mark;
}

/* The number v where a callee takes a Tensor: a 0-d tensor of the run's dtype. This is
 * where every Scalar (and float) argument reaches a kernel as an element, so the
 * range is checked here: an int stays exact for i64, a float i64 cannot hold is
 * refused. NULL with the error set. */
static opr_tensor *scalar_tensor(expr_run *r, const mval *v)
{
    unsigned char buf[8];
    if (v->k == MV_INT && r->dt == OPR_I64) memcpy(buf, &v->u.i, sizeof v->u.i);
    else if (opr_number_store(r->dt, v->k == MV_INT ? (double)v->u.i : v->k == MV_FLOAT ? v->u.d : v->u.b, buf))
        return NULL;
    opr_tensor *t = opr_tensor_from_data(r->ctx, r->dt, 0, NULL, buf, r->dev);
    return t && !expr_run_keep(r, t) ? t : NULL;
}

static int run_call(void *ud, const expr *call, const mval *args, int nargs, mval *out)
{
    (void)nargs;
    expr_run *r = ud;
    const opr_op *op = call->callee;
    if (!op) /* linking resolves every call before a run: a bug if not */
        return opr_fail(OPR_ERR_INVALID, "%d:%d: call of '%s' was not linked", call->line, call->col, call->name);
    int pos[OPR_MAX_ARGS];
    int rc = deriv_bind(op, call, pos);
    if (rc) return rc;
    opr_value vals[OPR_MAX_ARGS];
    int n = op->nargs;
    while (n > 0 && pos[n - 1] < 0) n--; /* trailing defaults are filled by opr_call */
    /* A factory (a str argument named device) called without a device makes its tensor
     * where the formula or composite runs (arange of indices next to a cuda tensor),
     * not on its default device. */
    char devname[32];
    int devarg = -1;
    for (int p = 0; p < op->nargs; p++)
        if (pos[p] < 0 && op->args[p].type == ARG_STR && !strcmp(op->args[p].name, "device")) devarg = p;
    if (devarg >= 0) {
        opr_device_format(r->ctx, r->dev, devname, sizeof devname);
        if (n < devarg + 1) n = devarg + 1;
    }
    for (int p = 0; p < n; p++) {
        const op_arg *a = &op->args[p];
        if (p == devarg) {
            vals[p] = opr_v_string(devname);
            continue;
        }
        if (pos[p] < 0) {
            if (!a->has_default) return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: %s() needs argument '%s'", op->file,
                                                 call->line, call->col, op->name, a->name);
            vals[p] = op_arg_default(a);
            continue;
        }
        const mval *v = &args[pos[p]];
        switch (v->k) {
        case MV_TENSOR: {
            opr_tensor *t = expr_run_tensor(r, v->u.t);
            if (!t) return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: '%s' was not saved (only its sizes): a formula may "
                                    "read it only through size(), sizes(), dim() or numel()", op->file, call->line,
                                    call->col, call->args[pos[p]]->name ? call->args[pos[p]]->name : "argument");
            vals[p] = opr_v_tensor(t);
            break;
        }
        case MV_INT:
        case MV_FLOAT:
        case MV_BOOL:
            if (a->type == ARG_TENSOR) {
                opr_tensor *t = scalar_tensor(r, v);
                if (!t) return opr_error_status();
                vals[p] = opr_v_tensor(t);
            } else {
                vals[p] = v->k == MV_INT ? opr_v_int(v->u.i) : v->k == MV_FLOAT ? opr_v_double(v->u.d) : opr_v_bool(v->u.b);
            }
            break;
        case MV_LIST: vals[p] = opr_v_ints(v->u.l, v->n); break;
        case MV_FLIST: vals[p] = opr_v_doubles(v->u.fl, v->n); break;
        case MV_TENSORS: /* a Tensor[] argument or `grads` handed on */
            for (int i = 0; i < v->n; i++)
                if (!v->u.ts[i] && !a->none_items) return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: %s(): item %d of the tensor list is None",
                                                 op->file, call->line, call->col, op->name, i);
            vals[p] = opr_v_tensors(v->u.ts, v->n);
            break;
        case MV_METAS:
            return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: %s(): a Tensor[] kept only as its items' sizes cannot be "
                            "passed to an op", op->file, call->line, call->col, op->name);
        case MV_STR: vals[p] = opr_v_string(v->u.s); break;
        default: vals[p] = opr_v_none(); break;
        }
    }
    opr_tensor *res[OPR_MAX_OUTS] = {NULL};
    rc = opr_call(op, vals, n, res, op->nout);
    if (rc) return rc;
    for (int k = 0; k < op->nout; k++)
        if ((rc = expr_run_keep(r, res[k]))) {
            for (int j = k + 1; j < op->nout; j++) opr_tensor_release(res[j]);
            return rc;
        }
    out->k = MV_TENSOR;
    out->u.t = &res[0]->m;
    return OPR_OK;
}

int expr_run_eval(expr_run *r, const expr *e, const mval *slots, mval *out)
{
    expr_hooks h = {r, run_call};
    return expr_eval_with(e, slots, &h, out);
}
