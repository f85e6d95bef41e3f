/* The host's side of a kernel call: the error detail a plugin binds to the call with
 * host->set_error(call, ...). It lives in the call's frame, not in thread-local state,
 * so a detail set from a plugin's own worker thread still reaches the caller, and a
 * detail can never land on another call. */
#include "registry.h"

#include <stdio.h>

void kcall_frame_init(kcall_frame *f, opr_ctx *ctx, opr_device dev, bool may_alloc)
{
    f->ctx = ctx;
    f->dev = dev;
    f->may_alloc = may_alloc;
    for (int i = 0; i < OPR_MAX_OUTS; i++) f->outs[i] = NULL;
    f->guards = atomic_load_explicit(&ctx->kernel_guards, memory_order_relaxed);
    f->guard_failed = false;
    f->guarded = 0;
    f->page_guarded = 0;
    atomic_init(&f->error_state, KCALL_ERROR_NONE);
    opr_error_clear();
}

void kcall_set_errorv(const opr_kernel_call *call, const char *fmt, va_list ap)
{
    kcall_frame *f = call ? call->host_call : NULL;
    if (!f) {
        opr_error_vset(fmt ? fmt : "(no detail)", ap);
        return;
    }
    int expected = KCALL_ERROR_NONE;
    if (!atomic_compare_exchange_strong(&f->error_state, &expected, KCALL_ERROR_WRITING)) return;
    vsnprintf(f->error, sizeof f->error, fmt ? fmt : "(no detail)", ap);
    atomic_store(&f->error_state, KCALL_ERROR_SET);
}

int kcall_fail(const kcall_frame *f, int rc, const char *what)
{
    if (f->guard_failed) return opr_fail(OPR_ERR_BACKEND, "%s", f->error); /* it names the op and device */
    const char *detail = f->error;
    if (atomic_load(&((kcall_frame *)f)->error_state) != KCALL_ERROR_SET) {
        const char *tls = opr_last_error();
        detail = tls && tls[0] ? tls : "kernel failed without detail";
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", detail); /* the thread's error is about to be overwritten */
    return opr_fail(rc < 0 ? rc : OPR_ERR_BACKEND, "%s: %s", what, msg);
}
