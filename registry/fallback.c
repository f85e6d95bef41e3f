/* The CPU fallback: a call on a device whose plugins have no kernel for the op (or not
 * for its dtype) runs the CPU kernel on copies of its tensors and copies the results
 * back, so that an op missing on a vendor's device is slow rather than an error, also
 * inside backward formulas. On by default, reported once per (op, device type) in the
 * log; opr_cpu_fallback_set(ctx, false) turns it off. In-place ops never fall back:
 * their result must be the device tensor itself. */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

bool opr_cpu_fallback_set(opr_ctx *ctx, bool on)
{
    if (!ctx) return false;
    return !atomic_exchange(&ctx->cpu_fallback_off, !on);
}

bool fallback_applies(const opr_op *op, int device_type, opr_dtype common)
{
    if (device_type == OPR_CPU.type || op->inplace || op->view || op->composite) return false;
    if (atomic_load(&op->ctx->cpu_fallback_off)) return false;
    return kernel_for(atomic_load(&((opr_op *)op)->kernels[OPR_CPU.type]), common) != NULL;
}

static void warn_once(const opr_op *op, opr_device dev, opr_dtype common)
{
    const uint32_t bit = 1u << dev.type;
    if (atomic_fetch_or(&((opr_op *)op)->fallback_warned, bit) & bit) return;
    opr_log_emit(OPR_LOG_WARN, "opreg", "%s: no kernel on device %s for %s: running on the cpu with copies in and out "
                 "(reported once; opr_cpu_fallback_set(ctx, false) makes it an error)", op->name,
                 op->ctx->devices[dev.type].name, opr_dtype_name(common));
}

int fallback_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres,
                  opr_tensor *const *tensors, const mval *slots, opr_device dev, opr_dtype common, bool record,
                  bool list_requires_grad)
{
    warn_once(op, dev, common);
    opr_value cpu_args[OPR_MAX_ARGS];
    opr_tensor *owned[OPR_MAX_ARGS] = {NULL}, **list = NULL, *cpu_res[OPR_MAX_OUTS] = {NULL};
    int nlist = 0, rc = OPR_OK;
    /* the copies and the CPU call are not recorded: the node below is, on the device */
    const bool mode = opr_grad_mode_set(false);
    for (int i = 0; i < nargs && !rc; i++) {
        cpu_args[i] = args[i];
        if (args[i].kind == OPR_V_TENSOR && args[i].u.t) {
            if (!(owned[i] = opr_tensor_to(args[i].u.t, OPR_CPU))) rc = opr_error_status();
            cpu_args[i] = opr_v_tensor(owned[i]);
        } else if (args[i].kind == OPR_V_TENSOR_LIST) {
            nlist = args[i].u.tl.n;
            if (!(list = calloc((size_t)(nlist ? nlist : 1), sizeof *list))) { rc = opr_fail(OPR_ERR_NOMEM, "%s: out of memory", op->name); break; }
            for (int k = 0; k < nlist && !rc; k++)
                if (args[i].u.tl.items[k] && !(list[k] = opr_tensor_to(args[i].u.tl.items[k], OPR_CPU))) rc = opr_error_status();
            cpu_args[i] = opr_v_tensors(list, nlist);
        } else if (i == op->device_arg) {
            cpu_args[i] = opr_v_string("cpu"); /* a factory: made on the cpu, then moved */
        }
    }
    if (!rc) rc = opr_call(op, cpu_args, nargs, cpu_res, nres);
    opr_grad_mode_set(mode);
    for (int k = 0; k < nres && !rc; k++)
        if (!(results[k] = opr_tensor_to(cpu_res[k], dev))) rc = opr_error_status();
    if (!rc && record) rc = op->ctx->reg->record(op, tensors, slots, results, dev, list_requires_grad);
    if (rc) {
        rc = opr_fail_wrap(rc, "%s (on the cpu, as no kernel on %s)", op->name, op->ctx->devices[dev.type].name);
        for (int k = 0; k < nres; k++) { opr_tensor_release(results[k]); results[k] = NULL; }
    }
    for (int k = 0; k < nres; k++) opr_tensor_release(cpu_res[k]);
    for (int i = 0; i < nargs; i++) opr_tensor_release(owned[i]);
    for (int k = 0; k < nlist; k++) opr_tensor_release(list[k]);
    free(list);
    return rc;
}
