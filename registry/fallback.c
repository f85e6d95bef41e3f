/* The CPU fallback: a call on a device whose plugins have no kernel for the op (or not
 * for its dtype), or whose kernel refused the call's arguments at run time
 * (OPR_ERR_UNSUPPORTED), runs the CPU kernel on copies of its tensors and copies the
 * results back, so that an op missing on a vendor's device is slow rather than an
 * error, also inside backward formulas. On by default, reported once per (op, device
 * type), or per (op, device type, reason) for refusals, in the log;
 * opr_cpu_fallback_set(ctx, false) turns it off. In-place ops never fall back:
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
    if (device_type == OPR_CPU.type || op->inplace || op->has_written || op->view || op->composite) return false;
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

/* FNV-1a over the bytes of s, continuing from h. */
static uint64_t hash_str(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator, so that "ab"+"c" != "a"+"bc" */
}

/* True the first time (what, device type, refusal) is seen in ctx. The table is small
 * and fixed: once it is full every refusal is logged, which is noisy but not wrong. */
static bool first_refusal(opr_ctx *ctx, const char *what, int device_type, const char *refusal)
{
    uint64_t h = hash_str(hash_str(0xcbf29ce484222325ull, what), refusal) ^ (uint64_t)device_type;
    if (!h) h = 1;
    const int n = (int)(sizeof ctx->refusals_logged / sizeof ctx->refusals_logged[0]);
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *slot = &ctx->refusals_logged[(h + (uint64_t)i) % (uint64_t)n];
        uint64_t seen = 0;
        if (atomic_compare_exchange_strong(slot, &seen, h)) return true;
        if (seen == h) return false;
    }
    return true;
}

void fallback_log_refusal(opr_ctx *ctx, const char *what, int device_type, const char *refusal, const char *instead)
{
    if (!first_refusal(ctx, what, device_type, refusal)) return;
    opr_log_emit(OPR_LOG_WARN, "opreg", "%s on %s: the kernel refused these arguments at run time (%s): %s "
                 "(reported once per op, device and reason; opr_cpu_fallback_set(ctx, false) makes it an error)",
                 what, ctx->devices[device_type].name, refusal, instead);
}

int fallback_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres,
                  opr_tensor *const *tensors, const mval *slots, opr_device dev, opr_dtype common, bool record,
                  bool list_requires_grad, const char *refusal)
{
    if (refusal) fallback_log_refusal(op->ctx, op->name, dev.type, refusal, "running it on the cpu with copies in and out");
    else warn_once(op, dev, common);
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
        rc = opr_fail_wrap(rc, "%s (on the cpu, as %s on %s)", op->name, refusal ? "its kernel refused the call" : "no kernel",
                           op->ctx->devices[dev.type].name);
        for (int k = 0; k < nres; k++) { opr_tensor_release(results[k]); results[k] = NULL; }
    }
    for (int k = 0; k < nres; k++) opr_tensor_release(cpu_res[k]);
    for (int i = 0; i < nargs; i++) opr_tensor_release(owned[i]);
    for (int k = 0; k < nlist; k++) opr_tensor_release(list[k]);
    free(list);
    return rc;
}
