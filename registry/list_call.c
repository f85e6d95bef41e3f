/* Ops returning a Tensor[] (`-> Tensor[]`: split, chunk). How many pieces a
 * call gives depends on its arguments: the entry's `count:` expression says, and piece
 * i is its `forward:` expression with `i` bound (a view of the argument, as PyTorch's
 * split gives). The caller asks opr_op_result_count first and passes that many result
 * slots to opr_call. With derivative entries of its own the call is one autograd node
 * whose outputs are the pieces (formulas read them as `grads`, a missing piece's
 * gradient being zeros); without, the parts record as usual. */
#include "composite.h"
#include "expr_run.h"

#include <stdlib.h>
#include <string.h>

/* The largest list a call may return: each piece is a tensor header of its own. */
#define LIST_MAX_PIECES (1 << 24)

static int count_of(const opr_op *op, const mval *slots, int *count)
{
    mval v;
    int rc = expr_eval(op->count, slots, &v);
    if (rc) return opr_fail_wrap(rc, "%s: counting its pieces", op->name);
    if (v.k != MV_INT) return opr_fail(OPR_ERR_INVALID, "%s: 'count' did not give an int", op->name);
    if (v.u.i < 0 || v.u.i > LIST_MAX_PIECES)
        return opr_fail(OPR_ERR_INVALID, "%s: %lld pieces (from 0 to %d)", op->name, (long long)v.u.i, LIST_MAX_PIECES);
    *count = (int)v.u.i;
    return OPR_OK;
}

/* Layouts a list op does not take: opr_vmap's batched tensors and jagged tensors. */
static int refuse_layouts(const opr_op *op, const opr_value *args, int nargs)
{
    unsigned l = args && nargs > 0 && nargs <= OPR_MAX_ARGS ? layouts_in_args(args, nargs) : 0;
    if (!l) return OPR_OK;
    return opr_fail(OPR_ERR_UNSUPPORTED, "%s returns a Tensor[], which %s does not support yet; call it on %s",
                    op->name, l & LAYOUT_BATCHED ? "opr_vmap" : "a jagged tensor",
                    l & LAYOUT_BATCHED ? "each sample outside opr_vmap" : "the values (opr_jagged_values)");
}

opr_status opr_op_result_count(const opr_op *op, const opr_value *args, int nargs, int *count)
{
    if (!op || !count) return opr_fail(OPR_ERR_INVALID, "opr_op_result_count: NULL op or count");
    *count = 0;
    if (!op->list_out) { *count = op->nout; return OPR_OK; }
    int rc = refuse_layouts(op, args, nargs);
    mval slots[OPR_MAX_ARGS + 1];
    opr_device dev;
    opr_dtype common;
    if (!rc) rc = dispatch_validate(op, args, nargs, slots, &dev, &common);
    return rc ? rc : count_of(op, slots, count);
}

bool opr_op_returns_list(const opr_op *op) { return op && op->list_out; }

int list_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    if (nres && !results) return opr_fail(OPR_ERR_INVALID, "%s: NULL results array", op->name);
    for (int i = 0; i < nres; i++) results[i] = NULL;
    int rc = refuse_layouts(op, args, nargs);
    if (rc) return rc;
    mval slots[OPR_MAX_ARGS + 1];
    opr_device dev;
    opr_dtype common;
    if ((rc = dispatch_validate(op, args, nargs, slots, &dev, &common))) return rc;
    int count = 0;
    if ((rc = count_of(op, slots, &count))) return rc;
    if (nres != count)
        return opr_fail(OPR_ERR_INVALID, "%s: returns %d tensor(s) for these arguments, %d result slot(s) given "
                        "(opr_op_result_count says how many)", op->name, count, nres);
    if ((rc = composite_link(op))) return rc;
    opr_tensor *tensors[OPR_MAX_ARGS] = {NULL};
    bool requires_grad = false;
    for (int i = 0; i < op->nargs && i < nargs; i++) {
        if (args[i].kind == OPR_V_TENSOR) tensors[i] = args[i].u.t;
        if (args[i].kind == OPR_V_TENSOR) requires_grad |= args[i].u.t->requires_grad;
        for (int j = 0; args[i].kind == OPR_V_TENSOR_LIST && j < args[i].u.tl.n; j++)
            requires_grad |= args[i].u.tl.items[j] && args[i].u.tl.items[j]->requires_grad;
    }
    const bool record = requires_grad && opr_grad_mode_enabled();
    /* With its own formulas the call is one node: its parts must not be recorded. */
    const bool own = op->deriv || op->nondifferentiable;
    expr_run r;
    expr_run_init(&r, op->ctx, dev, common);
    for (int i = 0; i < op->nargs; i++)
        if (tensors[i]) r.known[r.nknown++] = tensors[i];
    /* the items of the Tensor[] arguments, so that piece i may hand `LIST[i]` to an op
     * (a _foreach op's per-item step), not only its sizes */
    int nitems = 0;
    for (int i = 0; i < op->nargs && i < nargs; i++)
        if (args[i].kind == OPR_V_TENSOR_LIST) nitems += args[i].u.tl.n;
    opr_tensor **items = nitems ? malloc(sizeof *items * (size_t)nitems) : NULL;
    if (nitems && !items) {
        expr_run_done(&r);
        return opr_fail(OPR_ERR_NOMEM, "%s: out of memory", op->name);
    }
    nitems = 0;
    for (int i = 0; i < op->nargs && i < nargs; i++)
        for (int j = 0; args[i].kind == OPR_V_TENSOR_LIST && j < args[i].u.tl.n; j++)
            items[nitems++] = args[i].u.tl.items[j];
    r.known_list = items;
    r.nknown_list = nitems;
    mval vals[OPR_MAX_ARGS + 1];
    memcpy(vals, slots, (size_t)op->nargs * sizeof *vals);
    bool mode = own ? opr_grad_mode_set(false) : false;
    for (int i = 0; i < count && !rc; i++) {
        vals[op->nargs] = (mval){.k = MV_INT, .u.i = i};
        mval v = {.k = MV_NONE};
        rc = expr_run_eval(&r, op->composite->result, vals, &v);
        opr_tensor *piece = !rc && v.k == MV_TENSOR ? expr_run_tensor(&r, v.u.t) : NULL;
        if (!rc && !piece) rc = opr_fail(OPR_ERR_INVALID, "%s: the forward expression did not give a tensor", op->name);
        if (rc) { rc = opr_fail_wrap(rc, "%s: piece %d (%s:%d)", op->name, i, op->file, op->line); break; }
        /* a new header per piece: the node is attached to it, never to an argument */
        results[i] = own ? opr_tensor_make_view(piece, piece->m.ndim, piece->m.shape, piece->m.strides, piece->m.offset)
                         : opr_tensor_retain(piece);
        if (!results[i]) rc = opr_error_status();
        expr_run_rewind(&r, 0);
    }
    if (own) opr_grad_mode_set(mode);
    expr_run_done(&r);
    free(items);
    if (!rc && record && op->deriv && count > 0)
        rc = op->ctx->reg->record_list(op, tensors, slots, results, count, dev);
    if (rc)
        for (int i = 0; i < count; i++) { opr_tensor_release(results[i]); results[i] = NULL; }
    return rc;
}
