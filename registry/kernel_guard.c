/* Guard mode (opr_kernel_guards_set): around each kernel call, canary bytes before and
 * after every output the host allocates, and a snapshot of every input, both checked
 * when the kernel returns. Everything goes through the device's copy functions, so it
 * works on memory the host cannot touch; where the device's memory is host memory,
 * the output is also followed by guard pages (guard_page.c). */
#include "registry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool opr_kernel_guards_set(opr_ctx *ctx, bool on)
{
    return ctx && atomic_exchange(&ctx->kernel_guards, on);
}

void opr_kernel_trace_set(opr_ctx *ctx, char *buf, size_t len)
{
    if (!ctx) return;
    ctx->kernel_trace_len = buf ? len : 0;
    atomic_store(&ctx->kernel_trace, buf && len ? buf : NULL);
}

/* opr_kernel_trace_set: names the kernel about to run, "" once it returned. */
static void trace(kcall_frame *f, const dtype_kernel *k, const opr_kernel_call *call, bool start)
{
    char *buf = atomic_load_explicit(&f->ctx->kernel_trace, memory_order_relaxed);
    if (!buf) return;
    if (start)
        snprintf(buf, f->ctx->kernel_trace_len, "%s on %s (plugin %s)", call->op, f->ctx->devices[f->dev.type].name,
                 k->plugin);
    else
        buf[0] = '\0';
}

static int device_copy(opr_ctx *ctx, opr_device dev, void *dst, const void *src, size_t n, bool to_host)
{
    opr_device_entry *e = opr_dev_entry(ctx, dev);
    if (!e) return opr_fail(OPR_ERR_INVALID, "kernel guards: unknown device");
    int rc = to_host ? e->desc.copy_to_host(e->desc.data, dev.index, dst, src, n)
                     : e->desc.copy_from_host(e->desc.data, dev.index, dst, src, n);
    return rc ? opr_fail(rc < 0 ? rc : OPR_ERR_BACKEND, "kernel guards: copy %s %s failed", to_host ? "from" : "to",
                         e->name)
              : OPR_OK;
}

opr_tensor *kcall_output_new(kcall_frame *f, int i, opr_dtype dtype, int ndim, const int64_t *shape)
{
    if (!f->guards) return opr_tensor_empty(f->ctx, dtype, ndim, shape, f->dev);
    int64_t numel;
    if (opr_shape_check(shape, ndim, &numel, "tensor")) return NULL;
    opr_device_entry *e = opr_dev_entry(f->ctx, f->dev);
    if (e && (e->desc.flags & OPR_DEVICE_HOST_MEMORY)) {
        opr_tensor *t = guard_page_output(f->ctx, f->dev, dtype, ndim, shape, numel);
        if (t) {
            f->guarded |= 1u << i;
            f->page_guarded |= 1u << i;
            return t;
        }
    }
    const int64_t es = (int64_t)opr_elem_size(dtype), front = GUARD_BYTES / es;
    /* one storage with the guards in it; the output views the middle, so it is freed,
     * viewed and copied like any tensor (its storage offset is not 0) */
    int64_t total = numel + 2 * front;
    opr_tensor *flat = opr_tensor_empty(f->ctx, dtype, 1, &total, f->dev);
    if (!flat) return NULL;
    int64_t strides[OPR_MAX_DIMS];
    opr_contiguous_strides(shape, ndim, strides);
    opr_tensor *t = opr_tensor_make_view(flat, ndim, shape, strides, front);
    opr_tensor_release(flat);
    if (!t) return NULL;
    unsigned char fill[GUARD_BYTES];
    memset(fill, GUARD_FILL, sizeof fill);
    char *data = opr_tensor_data(t);
    if (device_copy(f->ctx, f->dev, data - GUARD_BYTES, fill, GUARD_BYTES, false) ||
        device_copy(f->ctx, f->dev, data + numel * es, fill, GUARD_BYTES, false)) {
        opr_tensor_release(t);
        return NULL;
    }
    f->guarded |= 1u << i;
    return t;
}

/* ------------------------------------------------------------------ names */

static void input_name(const opr_op *fwd, const int *cover, int j, int item, char *buf, size_t len)
{
    const char *name = NULL;
    int a = j;
    if (cover) { /* fused backward: output gradients, forward arguments, forward outputs */
        if (j < fwd->nout) {
            if (fwd->nout == 1) snprintf(buf, len, "grad");
            else snprintf(buf, len, "grad of '%s'", fwd->out_names[j] ? fwd->out_names[j] : "?");
            return;
        }
        a = j - fwd->nout;
        if (a >= fwd->nargs) name = fwd->out_names[a - fwd->nargs];
    }
    if (!name && a < fwd->nargs) name = fwd->args[a].name;
    if (item >= 0) snprintf(buf, len, "'%s[%d]'", name ? name : "?", item);
    else snprintf(buf, len, "'%s'", name ? name : "?");
}

static void output_name(const opr_op *fwd, const int *cover, const opr_kernel_call *call, int i, char *buf, size_t len)
{
    if (cover) snprintf(buf, len, " (the gradient of '%s')", fwd->args[cover[i]].name);
    else if (call->nout > 1) snprintf(buf, len, " '%s'", fwd->out_names[i] ? fwd->out_names[i] : "?");
    else buf[0] = 0;
}

/* ------------------------------------------------------------------ snapshots */

typedef struct snapshot {
    const char *at;      /* first byte of the input's span on its device */
    size_t n;
    opr_device dev;
    unsigned char *bytes;
    int arg, item;
} snapshot;

/* The bytes an input view reaches: [*lo, *lo + *n). */
static void view_span(const opr_tensor_view *v, const char **lo, size_t *n)
{
    int64_t first = 0, last = 0;
    for (int d = 0; d < v->ndim; d++) {
        int64_t reach = (v->shape[d] - 1) * v->strides[d];
        if (reach < 0) first += reach;
        else last += reach;
    }
    const size_t es = opr_elem_size(v->dtype);
    *lo = (const char *)v->data + first * (int64_t)es;
    *n = v->numel ? (size_t)(last - first + 1) * es : 0;
}

typedef struct guard_run {
    snapshot *snaps;
    int n, cap;
} guard_run;

static int snap(kcall_frame *f, guard_run *g, const opr_tensor_view *v, int arg, int item, const char *skip_lo,
                size_t skip_n)
{
    const char *lo;
    size_t n;
    view_span(v, &lo, &n);
    /* an input sharing memory with what an in-place op writes may change with it */
    if (!n || (skip_n && lo < skip_lo + skip_n && skip_lo < lo + n)) return OPR_OK;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 8;
        snapshot *s = realloc(g->snaps, (size_t)cap * sizeof *s);
        if (!s) return opr_fail(OPR_ERR_NOMEM, "kernel guards: out of memory");
        g->snaps = s;
        g->cap = cap;
    }
    snapshot *s = &g->snaps[g->n];
    *s = (snapshot){.at = lo, .n = n, .dev = v->device, .bytes = malloc(n), .arg = arg, .item = item};
    if (!s->bytes) return opr_fail(OPR_ERR_NOMEM, "kernel guards: out of memory");
    g->n++;
    return device_copy(f->ctx, v->device, s->bytes, lo, n, true);
}

/* written: the op's arguments a forward call writes (`Tensor(a!)`), left out like an
 * in-place op's self; NULL for a fused backward call. */
static int snap_inputs(kcall_frame *f, guard_run *g, const opr_kernel_call *call, bool inplace, const op_arg *written)
{
    const char *skip_lo = NULL;
    size_t skip_n = 0;
    if (inplace && call->nargs && call->args[0]->kind == OPR_ARG_TENSOR) view_span(call->args[0]->u.t, &skip_lo, &skip_n);
    for (int j = inplace ? 1 : 0; j < call->nargs; j++) {
        const opr_kernel_arg *a = call->args[j];
        if (written && written[j].written) continue;
        int rc = OPR_OK;
        if (a->kind == OPR_ARG_TENSOR) rc = snap(f, g, a->u.t, j, -1, skip_lo, skip_n);
        for (int k = 0; a->kind == OPR_ARG_TENSOR_LIST && k < a->u.tl.n && !rc; k++)
            if (a->u.tl.items[k]) rc = snap(f, g, a->u.tl.items[k], j, k, skip_lo, skip_n); /* NULL: a None index */
        if (rc) return rc;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ checks */

/* Elements of `es` bytes among the n bytes of a guard whose bytes changed. */
static int64_t damaged(const unsigned char *b, size_t n, size_t es)
{
    int64_t count = 0;
    for (size_t e = 0; e + es <= n; e += es)
        for (size_t j = 0; j < es; j++)
            if (b[e + j] != GUARD_FILL) { count++; break; }
    return count;
}

typedef struct report {
    char *buf;
    size_t len, used;
} report;

/* Appends one finding, "; "-separated. */
static void say(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(report *r, const char *fmt, ...)
{
    if (r->used + 2 >= r->len) return;
    if (r->used) { memcpy(r->buf + r->used, "; ", 3); r->used += 2; }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(r->buf + r->used, r->len - r->used, fmt, ap);
    va_end(ap);
    if (w > 0) r->used = r->used + (size_t)w < r->len ? r->used + (size_t)w : r->len - 1;
}

static const char *elements(int64_t n) { return n == 1 ? "element" : "elements"; }

static int check_outputs(kcall_frame *f, const opr_kernel_call *call, const opr_op *fwd, const int *cover, report *r)
{
    for (int i = 0; i < call->nout; i++) {
        if (!(f->guarded >> i & 1)) continue;
        const opr_tensor_view *o = call->outputs[i];
        const size_t es = opr_elem_size(o->dtype);
        const size_t bytes = (size_t)o->numel * es;
        const size_t after_n = f->page_guarded >> i & 1 ? guard_after_bytes(bytes) : GUARD_BYTES;
        unsigned char before[GUARD_BYTES], after[2 * GUARD_BYTES];
        const char *data = o->data;
        int rc = device_copy(f->ctx, f->dev, before, data - GUARD_BYTES, GUARD_BYTES, true);
        if (!rc) rc = device_copy(f->ctx, f->dev, after, data + bytes, after_n, true);
        if (rc) return rc;
        int64_t nb = damaged(before, GUARD_BYTES, es), na = damaged(after, after_n, es);
        char name[96];
        output_name(fwd, cover, call, i, name, sizeof name);
        if (nb && na)
            say(r, "wrote %lld %s before and %lld %s past its output%s", (long long)nb, elements(nb), (long long)na,
                elements(na), name);
        else if (nb)
            say(r, "wrote %lld %s before its output%s", (long long)nb, elements(nb), name);
        else if (na)
            say(r, "wrote %lld %s past its output%s", (long long)na, elements(na), name);
    }
    return OPR_OK;
}

static int check_inputs(kcall_frame *f, const guard_run *g, const opr_op *fwd, const int *cover, report *r)
{
    unsigned char *now = NULL;
    size_t cap = 0;
    int rc = OPR_OK;
    for (int s = 0; s < g->n && !rc; s++) {
        const snapshot *sn = &g->snaps[s];
        if (sn->n > cap) {
            unsigned char *b = realloc(now, sn->n);
            if (!b) { rc = opr_fail(OPR_ERR_NOMEM, "kernel guards: out of memory"); break; }
            now = b;
            cap = sn->n;
        }
        if ((rc = device_copy(f->ctx, sn->dev, now, sn->at, sn->n, true))) break;
        if (memcmp(now, sn->bytes, sn->n)) {
            char name[96];
            input_name(fwd, cover, sn->arg, sn->item, name, sizeof name);
            say(r, "changed its input %s", name);
        }
    }
    free(now);
    return rc;
}

static int run_traced(kcall_frame *f, const dtype_kernel *k, const opr_kernel_call *call)
{
    trace(f, k, call, true);
    int rc = k->fn(call);
    trace(f, k, call, false);
    return rc;
}

int kcall_run(kcall_frame *f, const dtype_kernel *k, const opr_kernel_call *call, const opr_op *fwd, const int *cover)
{
    if (!f->guards) return run_traced(f, k, call);
    guard_run g = {NULL, 0, 0};
    int rc = snap_inputs(f, &g, call, !cover && fwd->inplace, !cover && fwd->has_written ? fwd->args : NULL);
    if (!rc) {
        rc = run_traced(f, k, call);
        char found[768];
        report r = {found, sizeof found, 0};
        /* a kernel that failed is reported as such; what it wrote then does not matter */
        int grc = rc ? OPR_OK : check_outputs(f, call, fwd, cover, &r);
        if (!rc && !grc) grc = check_inputs(f, &g, fwd, cover, &r);
        if (!rc && (grc || r.used)) {
            if (grc) {
                snprintf(f->error, sizeof f->error, "%s on %s: guard check failed: %s", call->op,
                         f->ctx->devices[f->dev.type].name, opr_last_error());
            } else {
                snprintf(f->error, sizeof f->error, "%s on %s %s (kernel of plugin %s, found in guard mode)", call->op,
                         f->ctx->devices[f->dev.type].name, found, k->plugin);
            }
            atomic_store(&f->error_state, KCALL_ERROR_SET);
            f->guard_failed = true;
            rc = OPR_ERR_BACKEND;
        }
    }
    for (int s = 0; s < g.n; s++) free(g.snaps[s].bytes);
    free(g.snaps);
    return rc;
}
