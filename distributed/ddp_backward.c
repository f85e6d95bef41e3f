/* The data-parallel helper's step (opr_ddp_backward): gradients averaged over the group
 * in buckets whose reduction starts from the backward engine's leaf_ready callback.
 *
 * Every member must issue the same reductions in the same order, whatever its loss
 * reached: buckets start in index order (a full bucket waits for the ones before it, as
 * in PyTorch's reducer), a parameter this member's loss did not reach goes in as zeros
 * after the backward, and a member whose own step failed still reduces every bucket.
 * After the last bucket is in, every member gathers every member's step number and status,
 * so that a member out of step (one that skipped a step), or one that failed, fails
 * them all, naming it. A reduction that failed in flight (a time-out) keeps its bucket
 * (MPI may still write it) and breaks the helper: every later call says so.
 *
 * CPU parameters: host buckets, reduced with the group provider's non-blocking
 * all_reduce_start. Parameters on another device (CUDA): buckets on that device,
 * reduced by the all_reduce op there (NCCL), whose call returns once it is done. */
#include "ddp.h"

#include "../autograd/autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static void fail_once(opr_ddp *d, int rc, const char *fmt, const char *detail)
{
    if (d->error) return;
    d->error = rc ? rc : OPR_ERR_BACKEND;
    snprintf(d->error_msg, sizeof d->error_msg, fmt, detail);
}

/* A reduction failed in flight: the helper is unusable from now on, and says why. */
static void break_helper(opr_ddp *d, const char *what, int k, const char *why)
{
    if (d->broken[0]) return;
    const bool timed_out = strstr(why, "timed out") != NULL, broken_before = strstr(why, " is broken: ") != NULL;
    if (broken_before) snprintf(d->broken, sizeof d->broken, "%s", why);
    else if (k >= 0)
        snprintf(d->broken, sizeof d->broken, "group %lld is broken: %s %s at step %lld (bucket %d of %d): %s",
                 (long long)d->group.id, what, timed_out ? "timed out" : "failed", (long long)d->step, k, d->nbuckets, why);
    else
        snprintf(d->broken, sizeof d->broken, "group %lld is broken: %s %s at step %lld: %s", (long long)d->group.id,
                 what, timed_out ? "timed out" : "failed", (long long)d->step, why);
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
    if (rc) {
        if (rc == OPR_ERR_BACKEND) break_helper(d, "all_reduce", k, opr_last_error());
        fail_once(d, rc, "opr_ddp_backward: a bucket's reduction: %s", opr_last_error());
        return;
    }
    b->done = true;
    event(d, OPR_DDP_BUCKET_DONE, k);
}

/* Starts bucket k (the next in order). A start that fails leaves the members' order of
 * reductions apart: the step check is then skipped (the others time out). */
static void start_bucket(opr_ddp *d, int k)
{
    bucket *b = &d->buckets[k];
    if (b->dev) { reduce_on_device(d, k); return; }
    char why[512] = "";
    int rc = d->provider->all_reduce_start(d->provider->data, d->group.id, b->buf, b->numel, b->dtype, "mean", &b->req,
                                           why, sizeof why);
    if (rc) {
        if (rc == OPR_ERR_BACKEND) break_helper(d, "all_reduce", k, why);
        fail_once(d, rc, "opr_ddp_backward: starting a bucket's reduction: %s", why);
        return;
    }
    b->started = true;
    event(d, OPR_DDP_BUCKET_STARTED, k);
}

/* Starts the full buckets that every bucket before them has started. */
static void start_ready(opr_ddp *d)
{
    while (d->next_start < d->nbuckets && d->buckets[d->next_start].ready == d->buckets[d->next_start].nparams)
        start_bucket(d, d->next_start++);
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

/* Parameter i's gradient (zeros without one, or when reading it fails: the bucket
 * still goes to the others) into its bucket; full buckets start in order. */
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
        if (!g || rc) memset(at, 0, bytes);
    }
    if (rc) fail_once(d, rc, "opr_ddp_backward: reading a gradient: %s", opr_last_error());
    d->got[i] = true;
    b->ready++;
    start_ready(d);
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

/* What each member gathers after its last bucket (DDP_RECORD_BYTES). */
typedef struct step_record {
    char tag[DDP_TAG_BYTES];
    int64_t step;
    int32_t status; /* this member's own step failed */
    int32_t pad;
    char reserved[16];
} step_record;
_Static_assert(sizeof(step_record) == DDP_RECORD_BYTES, "a step record is one record");

/* Every member's step and status against this one's (collective, within the time-out):
 * 0, or the first difference as an error naming the rank. */
static int agree_step(opr_ddp *d, int status)
{
    if (!d->provider->all_gather_bytes || d->group.size < 2) return OPR_OK;
    step_record mine, *all = calloc((size_t)d->group.size, sizeof *all);
    if (!all) return opr_fail(OPR_ERR_NOMEM, "opr_ddp_backward: out of memory");
    memset(&mine, 0, sizeof mine);
    ddp_tag(mine.tag, "opr_ddp_backward");
    mine.step = d->step;
    mine.status = status;
    char why[640] = "";
    int rc = d->provider->all_gather_bytes(d->provider->data, d->group.id, &mine, all, sizeof mine, why, sizeof why);
    if (rc) {
        if (rc == OPR_ERR_BACKEND) break_helper(d, "the step check", -1, why);
        free(all);
        return opr_fail(rc, "opr_ddp_backward: %s", d->broken[0] ? d->broken : why);
    }
    for (int r = 0; r < d->group.size && !rc; r++) {
        const step_record *o = &all[r];
        if (memcmp(o->tag, mine.tag, DDP_TAG_BYTES))
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_backward: rank %d is running something else (%.*s) at step %lld",
                          r, DDP_TAG_BYTES, o->tag, (long long)d->step);
        else if (o->step != mine.step)
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_backward: the members are out of step: rank %d is at step %lld, "
                          "this rank (%d) at step %lld; no gradient was written (a member skipped or repeated a step)",
                          r, (long long)o->step, d->group.rank, (long long)mine.step);
        else if (o->status && r != d->group.rank)
            rc = opr_fail(OPR_ERR_BACKEND, "opr_ddp_backward: rank %d failed step %lld (its own error says why); no "
                          "gradient was written", r, (long long)o->step);
    }
    free(all);
    return rc;
}

/* The bucket's mean into parameter i's .grad; a parameter without one (its loss did not
 * reach it here) gets one, so that every replica takes the same step. */
static int write_back(opr_ddp *d, int i)
{
    opr_tensor *p = d->params[i], *g = opr_grad(p);
    bucket *b = &d->buckets[d->bucket_of[i]];
    size_t es = opr_dtype_size(b->dtype);
    opr_tensor *fresh = NULL;
    if (!g && !(g = fresh = opr_tensor_new(d->ctx, p->m.dtype, p->m.ndim, p->m.shape, d->device)))
        return opr_error_status();
    int rc;
    if (b->dev) {
        opr_tensor *slot = slot_view(d, i);
        rc = slot ? opr_tensor_copy_into(g, slot) : opr_error_status();
        opr_tensor_release(slot);
    } else {
        rc = opr_tensor_copy_from_host(g, (char *)b->buf + (size_t)d->offset[i] * es,
                                       (size_t)opr_tensor_numel(p) * es);
    }
    if (fresh) {
        ag_leaf_lock(p);
        bool set = !rc && !p->grad;
        if (set) p->grad = fresh; /* the reference moves to .grad */
        ag_leaf_unlock(p);
        if (!set) opr_tensor_release(fresh);
    }
    return rc;
}

opr_status opr_ddp_backward(opr_ddp *d, opr_tensor *loss, opr_tensor *grad)
{
    if (!d) return opr_fail(OPR_ERR_INVALID, "opr_ddp_backward: NULL helper");
    if (d->broken[0]) return opr_fail(OPR_ERR_BACKEND, "opr_ddp_backward: %s", d->broken);
    d->nevents = 0;
    d->error = 0;
    d->next_start = 0;
    d->t0 = now_us();
    for (int i = 0; i < d->n; i++) d->got[i] = false;
    for (int k = 0; k < d->nbuckets; k++) {
        d->buckets[k].ready = 0;
        d->buckets[k].started = d->buckets[k].done = false;
    }
    /* a parameter already holding a gradient from before counts it too: .grad accumulates */
    opr_backward_opts o = {.struct_size = sizeof o, .leaf_ready = leaf_ready, .leaf_ready_user = d};
    int rc = opr_backward(loss, grad, &o);
    char own[640] = "";
    if (rc) snprintf(own, sizeof own, "%s", opr_last_error());
    event(d, OPR_DDP_BACKWARD_DONE, -1);
    /* every member reduces every bucket, whatever its loss reached: the missing
     * gradients are zeros (or what .grad held) */
    for (int i = 0; i < d->n; i++)
        if (!d->got[i]) stage(d, i);
    /* wait for each started bucket even after an error: a reduction left running would
     * write into the buffers later */
    for (int k = 0; k < d->nbuckets; k++) {
        bucket *b = &d->buckets[k];
        if (!b->started || b->dev) continue; /* a device bucket's call waited */
        char why[640] = "";
        int wrc = d->provider->wait(d->provider->data, b->req, why, sizeof why);
        if (wrc) {
            b->abandoned = true; /* MPI may still write it: kept to the end of the process */
            break_helper(d, "all_reduce", k, why);
            fail_once(d, wrc, "opr_ddp_backward: %s", d->broken);
        } else if (!b->done) {
            event(d, OPR_DDP_BUCKET_DONE, k);
        }
    }
    /* the order of reductions is the same on every member only if every start and wait
     * succeeded: then the step check comes next on every member */
    bool all_done = d->next_start == d->nbuckets && !d->broken[0];
    for (int k = 0; k < d->nbuckets && all_done; k++) all_done = d->buckets[k].started;
    int src = all_done ? agree_step(d, rc ? rc : d->error) : OPR_OK;
    if (all_done) event(d, OPR_DDP_STEP_CHECKED, -1);
    char step_msg[1024] = "";
    if (src) snprintf(step_msg, sizeof step_msg, "%s", opr_last_error());
    const int64_t step = d->step++;
    if (rc) return opr_fail(rc, "%s", own);
    if (d->error) return opr_fail(d->error, "%s", d->error_msg);
    if (src) return opr_fail(src, "%s", step_msg);
    for (int i = 0; i < d->n; i++) { /* the means into .grad */
        rc = write_back(d, i);
        if (rc) return opr_fail_wrap(rc, "opr_ddp_backward: writing parameter %d's gradient at step %lld", i,
                                     (long long)step);
    }
    return OPR_OK;
}
