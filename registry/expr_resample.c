/* Built-in shape functions of the padding and resampling ops (registry/ops/padding.yaml,
 * resampling.yaml): sizes that depend on a variable number of (left, right) pairs, which
 * the expression language cannot loop over itself. Like every built-in they read
 * metadata only. */
#include "expr.h"

/* pad_shape(self, pad): the sizes of self with its last len(pad) / 2 dims grown by the
 * (left, right) pairs of pad, the first pair for the last dim (ATen's constant_pad_nd
 * order); a negative pad crops. An error for an odd list, more pairs than dims, or a
 * size that would fall below 0. */
int expr_bi_pad_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_TENSOR || a[1].k != MV_LIST)
        return opr_fail(OPR_ERR_INVALID, "pad_shape: expected (tensor, int list)");
    const opr_meta *x = a[0].u.t;
    const int np = a[1].n;
    if (np % 2 || np / 2 > x->ndim)
        return opr_fail(OPR_ERR_INVALID, "pad_shape: the padding length must be even and at most twice the %d dims of the "
                        "input, got %d", x->ndim, np);
    out->k = MV_LIST;
    out->n = x->ndim;
    for (int d = 0; d < x->ndim; d++) out->u.l[d] = x->shape[d];
    for (int k = 0; k < np / 2; k++) {
        const int d = x->ndim - 1 - k;
        const int64_t l = a[1].u.l[2 * k], r = a[1].u.l[2 * k + 1];
        /* pads are bounded by the int list's own range; a sum past 2^62 is refused */
        if (l < -((int64_t)1 << 61) || l > ((int64_t)1 << 61) || r < -((int64_t)1 << 61) || r > ((int64_t)1 << 61))
            return opr_fail(OPR_ERR_INVALID, "pad_shape: a pad of dim %d is out of range", d);
        const int64_t s = x->shape[d] + l + r;
        if (s < 0)
            return opr_fail(OPR_ERR_INVALID, "pad_shape: the input size %lld of dim %d, plus the padding %lld and %lld, "
                            "gives a negative output size", (long long)x->shape[d], d, (long long)l, (long long)r);
        out->u.l[d] = s;
    }
    return OPR_OK;
}

/* neg_ints(l): the int list l with every item negated (the pads that undo a padding). */
int expr_bi_neg_ints(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "neg_ints: expected an int list");
    out->k = MV_LIST;
    out->n = a[0].n;
    for (int i = 0; i < a[0].n; i++) {
        if (a[0].u.l[i] == INT64_MIN) return opr_fail(OPR_ERR_INVALID, "neg_ints: item %d cannot be negated", i);
        out->u.l[i] = -a[0].u.l[i];
    }
    return OPR_OK;
}
