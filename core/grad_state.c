/* Per-tensor requires_grad and the thread-local grad mode. The engine that uses them
 * lives in the autograd layer. */
#include "core.h"

static _Thread_local bool grad_mode_off; /* zero-initialised: grad mode on by default */

bool opr_grad_mode_set(bool enabled)
{
    bool prev = !grad_mode_off;
    grad_mode_off = !enabled;
    return prev;
}

bool opr_grad_mode_enabled(void) { return !grad_mode_off; }

opr_status opr_set_requires_grad(opr_tensor *t, bool requires_grad)
{
    if (!t) return opr_fail(OPR_ERR_INVALID, "opr_set_requires_grad: NULL tensor");
    t = opr_jagged_base(t); /* a jagged tensor's autograd state is its values' */
    if (requires_grad && !opr_dtype_is_floating(t->m.dtype))
        return opr_fail(OPR_ERR_INVALID, "opr_set_requires_grad: only floating tensors can require grad, got %s",
                        opr_dtype_name(t->m.dtype));
    if (t->grad_fn && !requires_grad)
        return opr_fail(OPR_ERR_INVALID, "opr_set_requires_grad: cannot clear requires_grad of a non-leaf tensor");
    t->requires_grad = requires_grad;
    return OPR_OK;
}

bool opr_requires_grad(const opr_tensor *t) { return t && opr_jagged_base(t)->requires_grad; }
