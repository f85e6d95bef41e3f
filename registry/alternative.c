/* Alternatives: an op with a kernel whose entry names, under `alternative:`, a
 * composite op computing the same function another way (cdist: pairwise differences;
 * cdist_mm: the GEMM identity). Each call runs the one the cost model estimates
 * cheaper on the arguments' device and shapes (plan_forward_cost); the op's own kernel
 * wins ties, and the alternative also runs where the op has no kernel for the device
 * or dtype. The choice is made on metadata only, so it is the same for equal shapes. */
#include "composite.h"
#include "deriv.h"

#include <math.h>
#include <string.h>

/* The alternative of op, resolved and checked at the first call: defined, a
 * composite, the same arguments and result, and no alternative of its own (so a
 * choice never chains). */
static int alt_resolve(const opr_op *op, const opr_op **out)
{
    opr_op *alt = atomic_load_explicit(&((opr_op *)op)->alt.op, memory_order_acquire);
    if (alt) { *out = alt; return OPR_OK; }
    alt = registry_find(op->ctx, op->alt.name);
    const char *why = NULL;
    if (!alt) why = "is not defined";
    else if (!alt->composite) why = "is not a composite op (an entry with 'forward:')";
    else if (alt->alt.name) why = "has an alternative of its own";
    else if (alt->nargs != op->nargs || alt->nout != op->nout || alt->out_dtype[0] != op->out_dtype[0])
        why = "does not take the same arguments and return the same result";
    for (int i = 0; !why && i < op->nargs; i++)
        if (strcmp(alt->args[i].name, op->args[i].name) || alt->args[i].type != op->args[i].type)
            why = "does not take the same arguments and return the same result";
    if (why)
        return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: alternative of %s: '%s' %s", op->file, op->alt.line, op->alt.col,
                        op->name, op->alt.name, why);
    atomic_store_explicit(&((opr_op *)op)->alt.op, alt, memory_order_release);
    *out = alt;
    return OPR_OK;
}

static double kernel_rate(const opr_op *op, opr_device dev)
{
    const char *name = op->ctx->devices[dev.type].name;
    for (int i = 0; i < op->alt.nrates; i++)
        if (name && !strcmp(op->alt.rate_device[i], name)) return op->alt.rate[i];
    return op->alt.default_rate;
}

int alt_choose(const opr_op *op, const opr_value *args, int nargs, const mval *slots, opr_device dev,
               opr_dtype common, const opr_op **chosen, double *kernel_ns, double *alt_ns)
{
    *chosen = op;
    *kernel_ns = *alt_ns = INFINITY;
    const opr_op *alt = NULL;
    int rc = alt_resolve(op, &alt);
    if (rc) return rc;
    const kernel_entry *k = atomic_load_explicit(&((opr_op *)op)->kernels[dev.type], memory_order_acquire);
    if (kernel_for(k, common) && (rc = plan_forward_cost(op, slots, dev, kernel_rate(op, dev), kernel_ns)))
        return rc;
    /* the alternative's own checks (dtypes, shapes) may refuse what the op accepts:
     * then the kernel runs, and reports what it refuses itself */
    mval alt_slots[OPR_MAX_ARGS];
    opr_device alt_dev;
    opr_dtype alt_common;
    if (!composite_runs_on(alt, dev.type) || dispatch_validate(alt, args, nargs, alt_slots, &alt_dev, &alt_common))
        return OPR_OK;
    if ((rc = plan_forward_cost(alt, alt_slots, dev, 1, alt_ns))) return rc;
    if (*alt_ns < *kernel_ns) *chosen = alt;
    return OPR_OK;
}

const char *opr_op_alternative(const opr_op *op) { return op ? op->alt.name : NULL; }

const opr_op *opr_op_choose(const opr_op *op, const opr_value *args, int nargs, double *kernel_ns,
                            double *alternative_ns)
{
    if (!op) { opr_fail(OPR_ERR_INVALID, "opr_op_choose: NULL op"); return NULL; }
    double kns = INFINITY, ans = INFINITY;
    const opr_op *chosen = op;
    mval slots[OPR_MAX_ARGS];
    opr_device dev;
    opr_dtype common;
    int rc = dispatch_validate(op, args, nargs, slots, &dev, &common);
    if (!rc && op->alt.name) rc = alt_choose(op, args, nargs, slots, dev, common, &chosen, &kns, &ans);
    if (rc) return NULL;
    if (kernel_ns) *kernel_ns = kns;
    if (alternative_ns) *alternative_ns = ans;
    return chosen;
}
