/* Jagged tensors: a dense values tensor [total, D...] plus a shared structure of
 * offsets [B + 1] (opr_ragged). The jagged header carries the logical shape
 * [B, OPR_SIZE_RAGGED, D...] for the accessors; data and autograd state stay with the
 * values. Ops on jagged tensors are the registry's (registry/jagged_call.c); this file
 * makes, checks and takes apart the layout. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ structure */

/* Checks host offsets against total: starts at 0, never decreases, ends at total. */
static int offsets_check(const int64_t *o, int64_t batch, int64_t total, const char *who, int64_t *max_len)
{
    if (o[0] != 0) return opr_fail(OPR_ERR_INVALID, "%s: offsets[0] is %lld, must be 0", who, (long long)o[0]);
    *max_len = 0;
    for (int64_t b = 0; b < batch; b++) {
        if (o[b + 1] < o[b])
            return opr_fail(OPR_ERR_INVALID, "%s: offsets decrease at %lld (%lld then %lld): they must not decrease",
                            who, (long long)b + 1, (long long)o[b], (long long)o[b + 1]);
        if (o[b + 1] > total)
            return opr_fail(OPR_ERR_INVALID, "%s: offsets[%lld] = %lld is past the end of the values (%lld rows)",
                            who, (long long)b + 1, (long long)o[b + 1], (long long)total);
        if (o[b + 1] - o[b] > *max_len) *max_len = o[b + 1] - o[b];
    }
    if (o[batch] != total)
        return opr_fail(OPR_ERR_INVALID, "%s: offsets end at %lld but the values have %lld rows: the last offset "
                        "must be the number of rows", who, (long long)o[batch], (long long)total);
    return OPR_OK;
}

/* Takes ownership of host (batch + 1 validated entries) and a reference to offsets. */
static opr_ragged *ragged_new(int64_t *host, opr_tensor *offsets, int64_t batch, int64_t total, int64_t max_len)
{
    opr_ragged *r = malloc(sizeof *r);
    if (!r) { free(host); opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    atomic_init(&r->refs, 1);
    r->offsets = opr_tensor_retain(offsets);
    r->host = host;
    r->batch = batch;
    r->total = total;
    r->max_len = max_len;
    return r;
}

opr_ragged *opr_ragged_from_host(opr_ctx *ctx, const int64_t *offsets, int64_t batch, int64_t total,
                                 opr_device dev, const char *who)
{
    int64_t max_len;
    if (batch < 0 || batch > OPR_MAX_NUMEL - 1) { opr_fail(OPR_ERR_INVALID, "%s: bad batch size %lld", who, (long long)batch); return NULL; }
    if (offsets_check(offsets, batch, total, who, &max_len)) return NULL;
    size_t bytes = (size_t)(batch + 1) * sizeof(int64_t);
    int64_t *host = malloc(bytes);
    if (!host) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    memcpy(host, offsets, bytes);
    int64_t n = batch + 1;
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, 1, &n, host, dev);
    if (!t) { free(host); return NULL; }
    opr_ragged *r = ragged_new(host, t, batch, total, max_len);
    opr_tensor_release(t);
    return r;
}

void opr_ragged_release(opr_ragged *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
    opr_tensor_release(r->offsets);
    free(r->host);
    free(r);
}

bool opr_ragged_equal(const opr_ragged *a, const opr_ragged *b)
{
    if (a == b) return true;
    return a->batch == b->batch && a->total == b->total &&
           !memcmp(a->host, b->host, (size_t)(a->batch + 1) * sizeof(int64_t));
}

int opr_ragged_mismatch(const char *who, const char *a_name, const opr_ragged *a, const char *b_name,
                        const opr_ragged *b)
{
    if (a->batch != b->batch)
        return opr_fail(OPR_ERR_INVALID, "%s: '%s' and '%s' are jagged with different batch sizes (%lld and %lld)",
                        who, a_name, b_name, (long long)a->batch, (long long)b->batch);
    for (int64_t i = 0; i < a->batch; i++) {
        int64_t la = a->host[i + 1] - a->host[i], lb = b->host[i + 1] - b->host[i];
        if (la != lb)
            return opr_fail(OPR_ERR_INVALID, "%s: '%s' and '%s' are jagged with different structures: sequence %lld "
                            "has length %lld in '%s' and %lld in '%s'", who, a_name, b_name, (long long)i,
                            (long long)la, a_name, (long long)lb, b_name);
    }
    return opr_fail(OPR_ERR_INVALID, "%s: '%s' and '%s' are jagged with different structures", who, a_name, b_name);
}

int opr_jagged_refuse(const opr_tensor *t, const char *who)
{
    char buf[128];
    return opr_fail(OPR_ERR_UNSUPPORTED, "%s: not supported on a jagged tensor (%s): use opr_jagged_values for its "
                    "values or opr_jagged_to_padded for a dense copy", who, opr_tensor_describe(t, buf, sizeof buf));
}

/* ------------------------------------------------------------------ the header */

opr_tensor *opr_jagged_wrap(opr_tensor *values, opr_ragged *r)
{
    if (values->ragged) { opr_fail(OPR_ERR_INVALID, "jagged: the values are jagged themselves"); return NULL; }
    if (values->m.ndim < 1 || values->m.ndim > OPR_MAX_DIMS - 1) {
        opr_fail(OPR_ERR_INVALID, "jagged: values must have 1 to %d dims, got %d", OPR_MAX_DIMS - 1, values->m.ndim);
        return NULL;
    }
    if (values->m.shape[0] != r->total) {
        opr_fail(OPR_ERR_INVALID, "jagged: the values have %lld rows but the offsets end at %lld",
                 (long long)values->m.shape[0], (long long)r->total);
        return NULL;
    }
    opr_device vd = values->storage->dev, od = r->offsets->storage->dev;
    if (vd.type != od.type || vd.index != od.index) {
        char a[48], b[48];
        opr_fail(OPR_ERR_INVALID, "jagged: the values are on %s but the offsets on %s",
                 opr_device_format(values->ctx, vd, a, sizeof a), opr_device_format(values->ctx, od, b, sizeof b));
        return NULL;
    }
    opr_tensor *t = opr_tensor_alloc_header(values->ctx);
    if (!t) return NULL;
    atomic_fetch_add(&values->storage->refs, 1);
    t->storage = values->storage;
    t->m.offset = values->m.offset;
    t->m.dtype = values->m.dtype;
    t->m.ndim = values->m.ndim + 1;
    t->m.numel = values->m.numel;
    t->m.shape[0] = r->batch;
    t->m.shape[1] = OPR_SIZE_RAGGED;
    t->m.strides[0] = 0;
    t->m.strides[1] = values->m.strides[0];
    for (int d = 1; d < values->m.ndim; d++) {
        t->m.shape[d + 1] = values->m.shape[d];
        t->m.strides[d + 1] = values->m.strides[d];
    }
    t->jag_values = opr_tensor_retain(values);
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    t->ragged = r;
    return t;
}

/* ------------------------------------------------------------------ public */

bool opr_tensor_is_jagged(const opr_tensor *t) { return t && t->ragged; }

opr_tensor *opr_jagged_values(const opr_tensor *t)
{
    if (!t || !t->ragged) { opr_fail(OPR_ERR_INVALID, "opr_jagged_values: %s", t ? "not a jagged tensor" : "NULL tensor"); return NULL; }
    return opr_tensor_retain(t->jag_values);
}

opr_tensor *opr_jagged_offsets(const opr_tensor *t)
{
    if (!t || !t->ragged) { opr_fail(OPR_ERR_INVALID, "opr_jagged_offsets: %s", t ? "not a jagged tensor" : "NULL tensor"); return NULL; }
    return opr_tensor_retain(t->ragged->offsets);
}

const int64_t *opr_jagged_offsets_host(const opr_tensor *t) { return t && t->ragged ? t->ragged->host : NULL; }

int64_t opr_jagged_max_length(const opr_tensor *t) { return t && t->ragged ? t->ragged->max_len : -1; }

bool opr_jagged_same_structure(const opr_tensor *a, const opr_tensor *b)
{
    return a && b && a->ragged && b->ragged && opr_ragged_equal(a->ragged, b->ragged);
}

opr_tensor *opr_jagged_from_values(opr_tensor *values, opr_tensor *offsets)
{
    const char *who = "opr_jagged_from_values";
    if (!values || !offsets) { opr_fail(OPR_ERR_INVALID, "%s: NULL tensor", who); return NULL; }
    if (values->ragged || offsets->ragged) { opr_jagged_refuse(values->ragged ? values : offsets, who); return NULL; }
    if (values->ctx != offsets->ctx) { opr_fail(OPR_ERR_INVALID, "%s: values and offsets belong to different contexts", who); return NULL; }
    if (offsets->m.dtype != OPR_I64 || offsets->m.ndim != 1 || offsets->m.shape[0] < 1) {
        char buf[96];
        opr_fail(OPR_ERR_INVALID, "%s: offsets must be a 1-d i64 tensor of B + 1 >= 1 entries, got %s", who,
                 opr_tensor_describe(offsets, buf, sizeof buf));
        return NULL;
    }
    if (values->m.ndim < 1) { opr_fail(OPR_ERR_INVALID, "%s: values must have at least 1 dim", who); return NULL; }
    opr_device vd = values->storage->dev, od = offsets->storage->dev;
    if (vd.type != od.type || vd.index != od.index) {
        char a[48], b[48];
        opr_fail(OPR_ERR_INVALID, "%s: the values are on %s but the offsets on %s", who,
                 opr_device_format(values->ctx, vd, a, sizeof a), opr_device_format(values->ctx, od, b, sizeof b));
        return NULL;
    }
    int64_t batch = offsets->m.shape[0] - 1, max_len;
    size_t bytes = (size_t)offsets->m.shape[0] * sizeof(int64_t);
    int64_t *host = malloc(bytes);
    if (!host) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    if (opr_tensor_copy_to_host(offsets, host, bytes) ||
        offsets_check(host, batch, values->m.shape[0], who, &max_len)) {
        free(host);
        return NULL;
    }
    /* The caller keeps its offsets tensor and may write to it: the structure reads a
     * copy of its own, so that both views of the offsets stay the same. */
    opr_tensor *own = opr_tensor_from_data(values->ctx, OPR_I64, 1, offsets->m.shape, host, vd);
    opr_ragged *r = own ? ragged_new(host, own, batch, values->m.shape[0], max_len) : NULL;
    if (!own) free(host);
    opr_tensor_release(own);
    if (!r) return NULL;
    opr_tensor *t = opr_jagged_wrap(values, r);
    opr_ragged_release(r);
    return t;
}

opr_tensor *opr_jagged_like(opr_tensor *values, const opr_tensor *like)
{
    if (!values || !like) { opr_fail(OPR_ERR_INVALID, "opr_jagged_like: NULL tensor"); return NULL; }
    if (!like->ragged) { opr_fail(OPR_ERR_INVALID, "opr_jagged_like: 'like' is not a jagged tensor"); return NULL; }
    if (values->ctx != like->ctx) { opr_fail(OPR_ERR_INVALID, "opr_jagged_like: the tensors belong to different contexts"); return NULL; }
    return opr_jagged_wrap(values, like->ragged);
}

opr_tensor *opr_jagged_from_list(opr_ctx *ctx, opr_tensor *const *items, int n)
{
    const char *who = "opr_jagged_from_list";
    if (!ctx || !items || n < 1) { opr_fail(OPR_ERR_INVALID, "%s: need a context and at least one tensor", who); return NULL; }
    int64_t *offs = malloc((size_t)(n + 1) * sizeof *offs);
    if (!offs) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    offs[0] = 0;
    const opr_tensor *first = items[0];
    for (int i = 0; i < n; i++) {
        const opr_tensor *t = items[i];
        char a[128], b[128];
        const char *bad = !t ? "is NULL" : t->ctx != ctx ? "belongs to another context" : t->ragged ? "is jagged"
                        : t->m.ndim < 1 ? "has no dims (a sequence is [L, D...])" : NULL;
        if (!bad && (t->m.dtype != first->m.dtype || t->m.ndim != first->m.ndim ||
                     memcmp(t->m.shape + 1, first->m.shape + 1, (size_t)(t->m.ndim - 1) * sizeof(int64_t)) ||
                     t->storage->dev.type != first->storage->dev.type || t->storage->dev.index != first->storage->dev.index)) {
            opr_fail(OPR_ERR_INVALID, "%s: item %d (%s) does not match item 0 (%s) in dtype, device or trailing dims", who,
                     i, opr_tensor_describe(t, a, sizeof a), opr_tensor_describe(first, b, sizeof b));
            free(offs);
            return NULL;
        }
        if (bad) { opr_fail(OPR_ERR_INVALID, "%s: item %d %s", who, i, bad); free(offs); return NULL; }
        if (t->m.shape[0] > OPR_MAX_NUMEL - offs[i]) { opr_fail(OPR_ERR_INVALID, "%s: too many rows", who); free(offs); return NULL; }
        offs[i + 1] = offs[i] + t->m.shape[0];
    }
    int64_t shape[OPR_MAX_DIMS];
    memcpy(shape, first->m.shape, sizeof shape);
    shape[0] = offs[n];
    opr_device dev = first->storage->dev;
    opr_tensor *values = opr_tensor_empty(ctx, first->m.dtype, first->m.ndim, shape, dev);
    opr_ragged *r = values ? opr_ragged_from_host(ctx, offs, n, offs[n], dev, who) : NULL;
    int rc = values && r ? OPR_OK : opr_error_status();
    for (int i = 0; i < n && !rc; i++) {
        if (!items[i]->m.numel) continue;
        opr_tensor *rows = opr_tensor_narrow(values, 0, offs[i], items[i]->m.shape[0]);
        rc = rows ? opr_tensor_copy_into(rows, items[i]) : opr_error_status();
        opr_tensor_release(rows);
    }
    opr_tensor *t = rc ? NULL : opr_jagged_wrap(values, r);
    opr_tensor_release(values);
    opr_ragged_release(r);
    free(offs);
    return t;
}
