/* The data-parallel helper (opreg/dist.h, opr_ddp_*): parameters broadcast from rank 0
 * at the start, gradients averaged over the group in buckets whose reduction starts
 * from the backward engine's leaf_ready callback, as soon as a bucket's last gradient
 * is in. CPU parameters: host buckets, reduced with the group provider's non-blocking
 * all_reduce_start, waited for before the step. Parameters on another device (CUDA):
 * buckets on that device, reduced by the all_reduce op there (NCCL), whose call
 * returns once the reduction is done. */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_BUCKET_MIB 25.0
/* The first bucket (the last layers, ready first) is small, as in PyTorch's DDP, so
 * that a reduction is in flight early in the backward. */
#define FIRST_BUCKET_BYTES (1024.0 * 1024.0)

typedef struct bucket {
    opr_dtype dtype;
    int64_t numel;
    void *buf;           /* CPU: the gradients, packed; reduced in place */
    opr_tensor *dev;     /* another device: the same, a 1-d tensor there */
    int nparams, ready;
    bool started, done; /* done: a poll saw it complete */
    int64_t req;
} bucket;

struct opr_ddp {
    opr_ctx *ctx;
    const opr_group_provider *provider;
    opr_group group;
    opr_device device;    /* the parameters' */
    int n;
    opr_tensor **params;  /* retained */
    opr_ptr_index index;  /* of params */
    int *bucket_of;
    int64_t *offset;      /* in its bucket, in elements */
    bool *got;            /* this backward delivered its gradient */
    bucket *buckets;
    int nbuckets;
    opr_ddp_event *events;
    int nevents, cap;
    double t0;
    int error;            /* the first failure inside leaf_ready */
    char error_msg[640];
};

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void event(opr_ddp *d, opr_ddp_event_kind kind, int index)
{
    if (d->nevents == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        opr_ddp_event *e = realloc(d->events, (size_t)cap * sizeof *e);
        if (!e) return; /* the log is for tests: a lost event is not an error */
        d->events = e;
        d->cap = cap;
    }
    d->events[d->nevents++] = (opr_ddp_event){kind, index, now_us() - d->t0};
}

void opr_ddp_free(opr_ddp *d)
{
    if (!d) return;
    for (int i = 0; i < d->n; i++) opr_tensor_release(d->params[i]);
    for (int b = 0; b < d->nbuckets; b++) {
        free(d->buckets[b].buf);
        opr_tensor_release(d->buckets[b].dev);
    }
    free(d->params);
    opr_ptr_index_free(&d->index);
    free(d->bucket_of);
    free(d->offset);
    free(d->got);
    free(d->buckets);
    free(d->events);
    free(d);
}

/* Reverse parameter order, one dtype per bucket, at most cap_bytes each. */
static int make_buckets(opr_ddp *d, double cap_bytes)
{
    d->buckets = calloc((size_t)d->n, sizeof *d->buckets);
    if (!d->buckets) return opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory");
    for (int i = d->n - 1; i >= 0; i--) {
        opr_tensor *p = d->params[i];
        opr_dtype dt = opr_tensor_dtype(p);
        int64_t numel = opr_tensor_numel(p);
        bucket *b = d->nbuckets ? &d->buckets[d->nbuckets - 1] : NULL;
        double bytes = (double)(b ? b->numel + numel : numel) * (double)opr_dtype_size(dt);
        double cap = d->nbuckets == 1 && cap_bytes > FIRST_BUCKET_BYTES ? FIRST_BUCKET_BYTES : cap_bytes;
        if (!b || b->dtype != dt || (bytes > cap && b->nparams)) {
            b = &d->buckets[d->nbuckets++];
            b->dtype = dt;
        }
        d->bucket_of[i] = (int)(b - d->buckets);
        d->offset[i] = b->numel;
        b->numel += numel;
        b->nparams++;
    }
    for (int k = 0; k < d->nbuckets; k++) {
        bucket *b = &d->buckets[k];
        if (d->device.type != OPR_CPU.type) {
            if (!(b->dev = opr_tensor_new(d->ctx, b->dtype, 1, &b->numel, d->device)))
                return opr_fail_wrap(opr_error_status(), "opr_ddp_new: a bucket of %lld elements",
                                     (long long)b->numel);
        } else if (!(b->buf = calloc((size_t)b->numel + 1, opr_dtype_size(b->dtype)))) {
            return opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory for %lld gradient elements",
                            (long long)b->numel);
        }
    }
    return OPR_OK;
}

/* Parameter i's value from rank 0 (collective). */
static int broadcast_param(opr_ddp *d, int i)
{
    opr_tensor *p = d->params[i], *got = NULL;
    opr_value a[3] = {opr_v_tensor(p), opr_v_int(0), opr_v_int(d->group.id)};
    bool mode = opr_grad_mode_set(false);
    int rc = opr_call(opr_op_find(d->ctx, "broadcast_from"), a, 3, &got, 1);
    opr_grad_mode_set(mode);
    if (!rc) rc = opr_tensor_copy_into(p, got);
    opr_tensor_release(got);
    return rc ? opr_fail_wrap(rc, "opr_ddp_new: broadcasting parameter %d from rank 0", i) : OPR_OK;
}

opr_status opr_ddp_new(opr_ctx *ctx, const opr_group *group, opr_tensor *const *params, int n,
                       const opr_ddp_opts *opts, opr_ddp **out)
{
    if (!out) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: NULL out");
    *out = NULL;
    const opr_group_provider *provider = dist_provider(ctx);
    if (!provider) return opr_error_status();
    if (!group || group->id < 0) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: no group (this process is not a member)");
    if (!params || n < 1) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: no parameters (%d)", n);
    opr_ddp_opts o = {.struct_size = sizeof o};
    int rc = opts ? opr_struct_in(&o, sizeof o, opts, OPR_DDP_OPTS_STRUCT_SIZE_0_1, "opr_ddp_new", "opr_ddp_opts") : OPR_OK;
    if (rc) return rc;
    if (o.bucket_mib < 0) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: bucket_mib %g is negative", o.bucket_mib);
    for (int i = 0; i < n; i++) {
        opr_tensor *p = params[i];
        if (!p) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: parameter %d is NULL", i);
        opr_dtype dt = opr_tensor_dtype(p);
        opr_device dev = opr_tensor_device(p), first = opr_tensor_device(params[0]); /* checked at i = 0 */
        if (!opr_requires_grad(p) || (dt != OPR_F32 && dt != OPR_F64))
            return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: parameter %d must be an f32 or f64 tensor that "
                            "requires grad", i);
        if (dev.type != first.type || dev.index != first.index)
            return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: parameter %d is not on parameter 0's device", i);
    }
    opr_ddp *d = calloc(1, sizeof *d);
    if (!d) return opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory");
    *d = (opr_ddp){.ctx = ctx, .provider = provider, .group = *group, .device = opr_tensor_device(params[0]), .n = n};
    d->params = calloc((size_t)n, sizeof *d->params);
    d->bucket_of = calloc((size_t)n, sizeof *d->bucket_of);
    d->offset = calloc((size_t)n, sizeof *d->offset);
    d->got = calloc((size_t)n, sizeof *d->got);
    if (!d->params || !d->bucket_of || !d->offset || !d->got) { opr_ddp_free(d); return opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory"); }
    for (int i = 0; i < n; i++) d->params[i] = opr_tensor_retain(params[i]);
    rc = opr_ptr_index_build(&d->index, (void *const *)d->params, n, n);
    for (int i = 0; i < n && !rc; i++) { /* the index holds a tensor's last position */
        int last = opr_ptr_index_find(&d->index, (void *const *)d->params, d->params[i]);
        if (last != i) rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: parameter %d is parameter %d again", last, i);
    }
    if (!rc) rc = make_buckets(d, (o.bucket_mib > 0 ? o.bucket_mib : DEFAULT_BUCKET_MIB) * 1024 * 1024);
    for (int i = 0; i < n && !rc; i++) rc = broadcast_param(d, i);
    if (rc) { opr_ddp_free(d); return rc; }
    *out = d;
    return OPR_OK;
}

int opr_ddp_bucket_count(const opr_ddp *d) { return d ? d->nbuckets : 0; }
int opr_ddp_bucket_of(const opr_ddp *d, int param) { return d && param >= 0 && param < d->n ? d->bucket_of[param] : -1; }

const opr_ddp_event *opr_ddp_events(const opr_ddp *d, int *n)
{
    if (n) *n = d ? d->nevents : 0;
    return d ? d->events : NULL;
}

static void fail_once(opr_ddp *d, int rc, const char *fmt, const char *detail)
{
    if (d->error) return;
    d->error = rc ? rc : OPR_ERR_BACKEND;
    snprintf(d->error_msg, sizeof d->error_msg, fmt, detail);
}

/* A device bucket's mean through the all_reduce op on its device: done on return. */
static void reduce_on_device(opr_ddp *d, int k)
{
    bucket *b = &d->buckets[k];
    opr_value a[3] = {opr_v_tensor(b->dev), opr_v_string("mean"), opr_v_int(d->group.id)};
    opr_tensor *mean = NULL;
    b->started = true;
    event(d, OPR_DDP_BUCKET_STARTED, k);
    bool mode = opr_grad_mode_set(false);
    int rc = opr_call(opr_op_find(d->ctx, "all_reduce"), a, 3, &mean, 1);
    opr_grad_mode_set(mode);
    if (!rc) rc = opr_tensor_copy_into(b->dev, mean);
    opr_tensor_release(mean);
    if (rc) { fail_once(d, rc, "opr_ddp_backward: a bucket's reduction: %s", opr_last_error()); return; }
    b->done = true;
    event(d, OPR_DDP_BUCKET_DONE, k);
}

static void start_bucket(opr_ddp *d, int k)
{
    bucket *b = &d->buckets[k];
    if (b->dev) { reduce_on_device(d, k); return; }
    char why[512] = "";
    int rc = d->provider->all_reduce_start(d->provider->data, d->group.id, b->buf, b->numel, b->dtype, "mean", &b->req,
                                           why, sizeof why);
    if (rc) { fail_once(d, rc, "opr_ddp_backward: starting a bucket's reduction: %s", why); return; }
    b->started = true;
    event(d, OPR_DDP_BUCKET_STARTED, k);
}

/* Drives the reductions in flight (an MPI progresses them only inside its calls). */
static void poll_started(opr_ddp *d)
{
    if (!d->provider->poll) return;
    for (int k = 0; k < d->nbuckets; k++) {
        bucket *b = &d->buckets[k];
        if (!b->started || b->done) continue; /* device buckets are done when started */
        char why[256];
        int done = 0;
        if (d->provider->poll(d->provider->data, b->req, &done, why, sizeof why)) continue; /* wait reports it */
        if (done) {
            b->done = true;
            event(d, OPR_DDP_BUCKET_DONE, k);
        }
    }
}

/* Parameter i's slot in its device bucket, shaped like the parameter (a new view). */
static opr_tensor *slot_view(opr_ddp *d, int i)
{
    const opr_tensor *p = d->params[i];
    int64_t strides[OPR_MAX_DIMS];
    opr_contiguous_strides(p->m.shape, p->m.ndim, strides);
    return opr_tensor_make_view(d->buckets[d->bucket_of[i]].dev, p->m.ndim, p->m.shape, strides, d->offset[i]);
}

/* Parameter i's gradient (zeros without one) into its device bucket. */
static int stage_on_device(opr_ddp *d, int i)
{
    opr_tensor *slot = slot_view(d, i), *g = opr_grad(d->params[i]), *zeros = NULL;
    if (!g) g = zeros = opr_tensor_new(d->ctx, d->params[i]->m.dtype, d->params[i]->m.ndim, d->params[i]->m.shape,
                                       d->device);
    int rc = slot && g ? opr_tensor_copy_into(slot, g) : opr_error_status();
    opr_tensor_release(zeros);
    opr_tensor_release(slot);
    return rc;
}

/* Parameter i's gradient (zeros without one) into its bucket, which starts when
 * full. */
static void stage(opr_ddp *d, int i)
{
    bucket *b = &d->buckets[d->bucket_of[i]];
    const size_t es = opr_dtype_size(b->dtype), bytes = (size_t)opr_tensor_numel(d->params[i]) * es;
    const opr_tensor *g = opr_grad(d->params[i]);
    int rc = OPR_OK;
    if (b->dev) {
        rc = stage_on_device(d, i);
    } else {
        char *at = (char *)b->buf + (size_t)d->offset[i] * es;
        if (g) rc = opr_tensor_copy_to_host(g, at, bytes);
        else memset(at, 0, bytes);
    }
    if (rc) { fail_once(d, rc, "opr_ddp_backward: reading a gradient: %s", opr_last_error()); return; }
    d->got[i] = true;
    if (++b->ready == b->nparams && !d->error) start_bucket(d, d->bucket_of[i]);
}

/* A parameter's gradient is complete. */
static void leaf_ready(opr_tensor *leaf, void *user)
{
    opr_ddp *d = user;
    int i = opr_ptr_index_find(&d->index, (void *const *)d->params, leaf);
    if (i < 0 || d->got[i] || !opr_grad(leaf)) return; /* not a parameter of ours */
    event(d, OPR_DDP_GRAD_READY, i);
    stage(d, i);
    poll_started(d);
}

opr_status opr_ddp_backward(opr_ddp *d, opr_tensor *loss, opr_tensor *grad)
{
    if (!d) return opr_fail(OPR_ERR_INVALID, "opr_ddp_backward: NULL helper");
    d->nevents = 0;
    d->error = 0;
    d->t0 = now_us();
    for (int i = 0; i < d->n; i++) d->got[i] = false;
    for (int k = 0; k < d->nbuckets; k++) {
        d->buckets[k].ready = 0;
        d->buckets[k].started = d->buckets[k].done = false;
    }
    /* a parameter already holding a gradient from before counts it too: .grad accumulates */
    opr_backward_opts o = {.struct_size = sizeof o, .leaf_ready = leaf_ready, .leaf_ready_user = d};
    int rc = opr_backward(loss, grad, &o);
    event(d, OPR_DDP_BACKWARD_DONE, -1);
    /* every member reduces every bucket, whatever its loss reached: the missing
     * gradients are zeros (or what .grad held) */
    for (int i = 0; i < d->n && !d->error; i++)
        if (!d->got[i]) stage(d, i);
    /* wait for each started bucket even after an error, so that no reduction is left
     * writing into the buffers */
    for (int k = 0; k < d->nbuckets; k++) {
        bucket *b = &d->buckets[k];
        if (!b->started || b->dev) continue; /* a device bucket's call waited */
        char why[640] = "";
        int wrc = d->provider->wait(d->provider->data, b->req, why, sizeof why);
        if (wrc) fail_once(d, wrc, "opr_ddp_backward: %s", why);
        else if (!b->done) event(d, OPR_DDP_BUCKET_DONE, k);
    }
    if (rc) return rc;
    if (d->error) return opr_fail(d->error, "%s", d->error_msg);
    for (int i = 0; i < d->n; i++) { /* the means back into .grad */
        opr_tensor *g = opr_grad(d->params[i]);
        if (!g) continue;
        bucket *b = &d->buckets[d->bucket_of[i]];
        size_t es = opr_dtype_size(b->dtype);
        if (b->dev) {
            opr_tensor *slot = slot_view(d, i);
            rc = slot ? opr_tensor_copy_into(g, slot) : opr_error_status();
            opr_tensor_release(slot);
        } else {
            rc = opr_tensor_copy_from_host(g, (char *)b->buf + (size_t)d->offset[i] * es,
                                           (size_t)opr_tensor_numel(d->params[i]) * es);
        }
        if (rc) return opr_fail_wrap(rc, "opr_ddp_backward: writing parameter %d's gradient", i);
    }
    return OPR_OK;
}
