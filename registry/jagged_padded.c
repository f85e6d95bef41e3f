/* Jagged tensors to and from their padded dense form, through the jagged_to_padded and
 * padded_to_jagged ops (so autograd records them and every backend runs them). */
#include "registry.h"

#include <stdlib.h>

opr_tensor *opr_jagged_to_padded(opr_tensor *t, double pad_value)
{
    if (!t || !t->ragged) {
        opr_fail(OPR_ERR_INVALID, "opr_jagged_to_padded: %s", t ? "not a jagged tensor" : "NULL tensor");
        return NULL;
    }
    const opr_op *op = registry_engine_op(t->ctx, ENGINE_OP_JAGGED_TO_PADDED);
    if (!op) return NULL;
    const opr_ragged *r = t->ragged;
    opr_value args[4] = {opr_v_tensor(t->jag_values), opr_v_tensor(r->offsets), opr_v_int(r->max_len),
                         opr_v_double(pad_value)};
    opr_tensor *out = NULL;
    return opr_call(op, args, 4, &out, 1) ? NULL : out;
}

opr_tensor *opr_jagged_from_padded(opr_tensor *padded, const int64_t *lengths, int n)
{
    const char *who = "opr_jagged_from_padded";
    if (!padded || (n && !lengths)) { opr_fail(OPR_ERR_INVALID, "%s: NULL argument", who); return NULL; }
    if (padded->ragged) { opr_jagged_refuse(padded, who); return NULL; }
    if (padded->m.ndim < 2 || padded->m.ndim > OPR_MAX_DIMS) {
        opr_fail(OPR_ERR_INVALID, "%s: padded must be [B, N, D...], got %d dims", who, padded->m.ndim);
        return NULL;
    }
    if (n != padded->m.shape[0]) {
        opr_fail(OPR_ERR_INVALID, "%s: %d lengths given for a batch of %lld", who, n, (long long)padded->m.shape[0]);
        return NULL;
    }
    int64_t *offs = malloc((size_t)(n + 1) * sizeof *offs);
    if (!offs) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    offs[0] = 0;
    for (int b = 0; b < n; b++) {
        if (lengths[b] < 0 || lengths[b] > padded->m.shape[1]) {
            opr_fail(OPR_ERR_INVALID, "%s: length %lld of sequence %d is outside 0..%lld (the padded length)", who,
                     (long long)lengths[b], b, (long long)padded->m.shape[1]);
            free(offs);
            return NULL;
        }
        offs[b + 1] = offs[b] + lengths[b];
    }
    opr_ragged *r = opr_ragged_from_host(padded->ctx, offs, n, offs[n], padded->storage->dev, who);
    free(offs);
    if (!r) return NULL;
    const opr_op *op = registry_engine_op(padded->ctx, ENGINE_OP_PADDED_TO_JAGGED);
    opr_tensor *values = NULL, *t = NULL;
    opr_value args[3] = {opr_v_tensor(padded), opr_v_tensor(r->offsets), opr_v_int(r->total)};
    if (op && !opr_call(op, args, 3, &values, 1)) t = opr_jagged_wrap(values, r);
    opr_tensor_release(values);
    opr_ragged_release(r);
    return t;
}
