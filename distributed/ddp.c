/* The data-parallel helper (opreg/dist.h, opr_ddp_*): its construction. The parameters
 * are laid out in buckets, every member checks that the others have the same layout
 * (the same parameters, dtypes, shapes and bucket size: otherwise their reductions
 * would pair unlike buffers), and the values are broadcast from rank 0. The step is
 * ddp_backward.c. */
#include "ddp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET_MIB 25.0
/* The first bucket (the last layers, ready first) is small, as in PyTorch's DDP, so
 * that a reduction is in flight early in the backward. */
#define FIRST_BUCKET_BYTES (1024.0 * 1024.0)

void ddp_tag(char *record, const char *tag)
{
    memset(record, 0, DDP_TAG_BYTES);
    snprintf(record, DDP_TAG_BYTES, "%s", tag);
}

int ddp_other_tag(const char *all, int size, const char *mine, char *why, size_t len)
{
    for (int r = 0; r < size; r++)
        if (memcmp(all + (size_t)r * DDP_RECORD_BYTES, mine, DDP_TAG_BYTES)) {
            snprintf(why, len, "rank %d is running something else (%.*s)", r, DDP_TAG_BYTES,
                     all + (size_t)r * DDP_RECORD_BYTES);
            return r;
        }
    return -1;
}

void opr_ddp_free(opr_ddp *d)
{
    if (!d) return;
    for (int i = 0; i < d->n; i++) opr_tensor_release(d->params[i]);
    for (int b = 0; b < d->nbuckets; b++) {
        if (!d->buckets[b].abandoned) free(d->buckets[b].buf); /* else MPI may still write it */
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

/* Reverse parameter order, one dtype per bucket, at most cap_bytes each: as many
 * buckets as the data needs (the provider's table of requests grows with them). */
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
        if (b->numel > 0x7fffffff)
            return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: bucket %d holds %lld elements, more than a reduction takes "
                            "(2^31 - 1): give a smaller bucket_mib or split the parameter", k, (long long)b->numel);
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

/* ------------------------------------------------------------------ the layout, agreed */

/* What each member gathers about its helper (DDP_RECORD_BYTES). */
typedef struct layout {
    char tag[DDP_TAG_BYTES];
    int32_t status;      /* this member refused its arguments */
    int32_t n;           /* parameters */
    int32_t nbuckets;
    int32_t pad;
    double bucket_mib;
    uint64_t hash;       /* of every parameter's dtype, shape and device type, and its bucket */
} layout;
_Static_assert(sizeof(layout) == DDP_RECORD_BYTES, "a layout is one record");

static uint64_t mix(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ULL; /* FNV-1a */
    return h;
}

static void describe_layout(const opr_ddp *d, double bucket_mib, int status, layout *l)
{
    memset(l, 0, sizeof *l);
    ddp_tag(l->tag, "opr_ddp_new");
    l->status = status;
    if (status) return;
    l->n = d->n;
    l->nbuckets = d->nbuckets;
    l->bucket_mib = bucket_mib;
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < d->n; i++) {
        const opr_tensor *p = d->params[i];
        h = mix(mix(mix(h, (uint64_t)p->m.dtype), (uint64_t)p->m.ndim), (uint64_t)d->bucket_of[i]);
        for (int k = 0; k < p->m.ndim; k++) h = mix(h, (uint64_t)p->m.shape[k]);
    }
    l->hash = mix(h, (uint64_t)d->device.type);
}

/* Every member's layout against this one's: the first difference fails every member
 * alike, naming the rank, before any reduction could pair unlike buckets. Through
 * all_gather_bytes, within the time-out; the group stays usable. */
static int agree_layout(opr_ddp *d, const layout *mine)
{
    if (!d->provider->all_gather_bytes || d->group.size < 2) return mine->status;
    layout *all = calloc((size_t)d->group.size, sizeof *all);
    if (!all) return opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory");
    char why[640] = "";
    int rc = d->provider->all_gather_bytes(d->provider->data, d->group.id, mine, all, sizeof *mine, why, sizeof why);
    if (rc) { free(all); return dist_fail(rc, "opr_ddp_new: comparing the members' layouts", why); }
    rc = mine->status;
    for (int r = 0; r < d->group.size && !rc; r++) {
        const layout *o = &all[r];
        if (memcmp(o->tag, mine->tag, DDP_TAG_BYTES))
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: rank %d is running something else (%.*s)", r, DDP_TAG_BYTES,
                          o->tag);
        else if (o->status)
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: rank %d refused its arguments (its own error says why)", r);
        else if (o->n != mine->n || o->nbuckets != mine->nbuckets || o->bucket_mib != mine->bucket_mib)
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: the members' layouts differ: this rank (%d) has %d parameters "
                          "in %d buckets of %g MiB, rank %d has %d parameters in %d buckets of %g MiB", d->group.rank,
                          mine->n, mine->nbuckets, mine->bucket_mib, r, o->n, o->nbuckets, o->bucket_mib);
        else if (o->hash != mine->hash)
            rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: the members' layouts differ: rank %d's parameters differ from "
                          "this rank's (%d) in dtype, shape or device type", r, d->group.rank);
    }
    free(all);
    return rc;
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

/* This member's arguments; 0 or the status, with the message. */
static int check_params(opr_tensor *const *params, int n, double bucket_mib)
{
    if (!params || n < 1) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: no parameters (%d)", n);
    if (!(bucket_mib >= 0) || bucket_mib > 1e6)
        return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: bucket_mib %g is negative or not a size in MiB", bucket_mib);
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
    return OPR_OK;
}

/* The helper for valid arguments, buckets made; NULL with the error. */
static opr_ddp *make(opr_ctx *ctx, const opr_group_provider *provider, const opr_group *group,
                     opr_tensor *const *params, int n, double bucket_mib)
{
    opr_ddp *d = calloc(1, sizeof *d);
    if (!d) { opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory"); return NULL; }
    *d = (opr_ddp){.ctx = ctx, .provider = provider, .group = *group, .device = opr_tensor_device(params[0]), .n = n};
    d->params = calloc((size_t)n, sizeof *d->params);
    d->bucket_of = calloc((size_t)n, sizeof *d->bucket_of);
    d->offset = calloc((size_t)n, sizeof *d->offset);
    d->got = calloc((size_t)n, sizeof *d->got);
    if (!d->params || !d->bucket_of || !d->offset || !d->got) {
        d->n = 0;
        opr_ddp_free(d);
        opr_fail(OPR_ERR_NOMEM, "opr_ddp_new: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) d->params[i] = opr_tensor_retain(params[i]);
    int rc = opr_ptr_index_build(&d->index, (void *const *)d->params, n, n);
    for (int i = 0; i < n && !rc; i++) { /* the index holds a tensor's last position */
        int last = opr_ptr_index_find(&d->index, (void *const *)d->params, d->params[i]);
        if (last != i) rc = opr_fail(OPR_ERR_INVALID, "opr_ddp_new: parameter %d is parameter %d again", last, i);
    }
    if (!rc) rc = make_buckets(d, (bucket_mib > 0 ? bucket_mib : DEFAULT_BUCKET_MIB) * 1024 * 1024);
    if (rc) { opr_ddp_free(d); return NULL; }
    return d;
}

opr_status opr_ddp_new(opr_ctx *ctx, const opr_group *group, opr_tensor *const *params, int n,
                       const opr_ddp_opts *opts, opr_ddp **out)
{
    if (!out) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: NULL out");
    *out = NULL;
    const opr_group_provider *provider = dist_provider(ctx);
    if (!provider) return opr_error_status();
    if (!group || group->id < 0) return opr_fail(OPR_ERR_INVALID, "opr_ddp_new: no group (this process is not a member)");
    opr_ddp_opts o = {.struct_size = sizeof o};
    int rc = opts ? opr_struct_in(&o, sizeof o, opts, OPR_DDP_OPTS_STRUCT_SIZE_0_1, "opr_ddp_new", "opr_ddp_opts") : OPR_OK;
    if (rc) return rc;
    const double mib = o.bucket_mib > 0 ? o.bucket_mib : DEFAULT_BUCKET_MIB;
    /* a member that refuses its arguments still joins the comparison, so that the others
     * fail with it instead of waiting for it */
    rc = check_params(params, n, o.bucket_mib);
    opr_ddp *d = rc ? NULL : make(ctx, provider, group, params, n, o.bucket_mib);
    if (!rc && !d) rc = opr_error_status();
    char saved[640] = "";
    if (rc) snprintf(saved, sizeof saved, "%s", opr_last_error());
    opr_ddp shell = {.provider = provider, .group = *group};
    layout mine;
    describe_layout(d ? d : &shell, mib, rc, &mine);
    int arc = agree_layout(d ? d : &shell, &mine);
    if (rc) return opr_fail(rc, "%s", saved); /* this member's own reason first */
    rc = arc;
    for (int i = 0; i < n && !rc; i++) rc = broadcast_param(d, i);
    if (rc) { opr_ddp_free(d); return rc; }
    *out = d;
    return OPR_OK;
}

opr_status opr_ddp_set_step(opr_ddp *d, int64_t step)
{
    if (!d) return opr_fail(OPR_ERR_INVALID, "opr_ddp_set_step: NULL helper");
    if (step < 0) return opr_fail(OPR_ERR_INVALID, "opr_ddp_set_step: step %lld is negative", (long long)step);
    d->step = step;
    return OPR_OK;
}

int64_t opr_ddp_step(const opr_ddp *d) { return d ? d->step : -1; }
int opr_ddp_bucket_count(const opr_ddp *d) { return d ? d->nbuckets : 0; }
int opr_ddp_bucket_of(const opr_ddp *d, int param) { return d && param >= 0 && param < d->n ? d->bucket_of[param] : -1; }

const opr_ddp_event *opr_ddp_events(const opr_ddp *d, int *n)
{
    if (n) *n = d ? d->nevents : 0;
    return d ? d->events : NULL;
}
