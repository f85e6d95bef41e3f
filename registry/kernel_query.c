/* Asking a kernel about a call before it runs (ABI 2.2): its supports and cost_ns
 * callbacks. The planner has only metadata, so it asks with a call made of that alone:
 * no data, contiguous views, every tensor argument given. */
#include "deriv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Argument i of q from v (its tensor as metadata); false for a Tensor[], which a
 * query does not carry. */
static bool query_arg(kquery *q, int i, const mval *v, opr_device dev)
{
    opr_kernel_arg *a = &q->args[i];
    q->arg_ptrs[i] = a;
    if (v->k != MV_TENSOR) return kernel_arg_of_mval(v, a);
    opr_meta_fill_view(v->u.t, dev, q->strides[i], &q->views[i]);
    *a = (opr_kernel_arg){.struct_size = sizeof *a, .kind = OPR_ARG_TENSOR, .u.t = &q->views[i]};
    return true;
}

static void query_finish(kquery *q, const char *name, int nargs, int nout, uint64_t mask, const dtype_kernel *k)
{
    for (int p = 0; p < nout; p++) q->out_ptrs[p] = &q->outv[p];
    q->call = (opr_kernel_call){.struct_size = sizeof q->call, .op = name, .args = q->arg_ptrs, .nargs = nargs,
                                .outputs = q->out_ptrs, .nout = nout, .grad_input_mask = mask,
                                .kernel_data = k->data};
}

bool kquery_forward(kquery *q, const opr_op *op, const mval *slots, const opr_meta *const *outs, opr_device dev,
                    const dtype_kernel *k)
{
    for (int i = 0; i < op->nargs; i++)
        if (!query_arg(q, i, &slots[i], dev)) return false;
    for (int o = 0; o < op->nout; o++) opr_meta_fill_view(outs[o], dev, q->out_strides[o], &q->outv[o]);
    query_finish(q, op->name, op->nargs, op->nout, 0, k);
    return true;
}

bool kquery_backward(kquery *q, const opr_op *op, const deriv_cand *c, uint32_t want, const mval *slots,
                     opr_device dev, const dtype_kernel *k)
{
    int na = 0;
    /* the gradients of the outputs have the outputs' metadata (plugin.h, fused backward) */
    for (int o = 0; o < op->nout; o++, na++) {
        if (slots[op->nargs + o].k != MV_TENSOR) return false; /* an op returning Tensor[] */
        if (!query_arg(q, na, &slots[op->nargs + o], dev)) return false;
    }
    for (int s = 0; s < op->nargs + op->nout; s++, na++) {
        static const mval none = {.k = MV_NONE}; /* a Tensor[] argument: NONE, as in the call */
        const bool list = s < op->nargs && op->args[s].type == ARG_TENSOR_LIST;
        if (!query_arg(q, na, list ? &none : &slots[s], dev)) return false;
    }
    uint64_t mask = 0;
    for (int p = 0; p < c->ncover; p++) {
        memset(&q->outv[p], 0, sizeof q->outv[p]);
        q->outv[p].struct_size = sizeof q->outv[p];
        if (!((want >> c->cover[p]) & 1) || slots[c->cover[p]].k != MV_TENSOR) continue;
        opr_meta_fill_view(slots[c->cover[p]].u.t, dev, q->out_strides[p], &q->outv[p]);
        mask |= 1ull << p;
    }
    query_finish(q, c->kernel->name, na, c->ncover, mask, k);
    return true;
}

const char *kquery_refusal(const dtype_kernel *k, const opr_kernel_call *call, char *why, size_t why_len)
{
    if (!k->supports || !why_len) return NULL;
    why[0] = '\0';
    if (k->supports(call, why, why_len)) return NULL;
    why[why_len - 1] = '\0'; /* a plugin that filled the buffer to the end */
    if (!why[0]) snprintf(why, why_len, "no reason given");
    return why;
}

bool kquery_cost(const dtype_kernel *k, const opr_kernel_call *call, double *ns)
{
    if (!k->cost_ns) return false;
    double v = k->cost_ns(call);
    if (isnan(v) || v < 0) return false; /* no estimate: the registry's stands */
    /* "as expensive as can be" (DBL_MAX, infinity) is taken at its word but capped, so
     * that sums of costs stay finite and comparable (a tie of two capped costs is a
     * tie) and a plan's text stays readable */
    *ns = v > KQUERY_COST_MAX_NS ? KQUERY_COST_MAX_NS : v;
    return true;
}
