/* The built-in shape of ATen's advanced indexing (index.Tensor, index_put's values in
 * registry/ops/indexing.yaml): index_shape(self, indices), where indices is a Tensor?[]
 * (None items take their dim whole). The index tensors broadcast together to B; the
 * result is self's dims before the first indexed one, B, then the dims after the last
 * one when the indexed dims are adjacent, else B followed by every dim not indexed
 * (PyTorch 1.13). The kernels lay their results out the same way
 * (plugins/common/opc_adv_index.h). Reads metadata only. */
#include "expr.h"

int expr_bi_index_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_TENSOR || !mval_is_list(&a[1]))
        return opr_fail(OPR_ERR_INVALID, "index_shape: expected a tensor and a tensor list");
    const opr_meta *t = a[0].u.t;
    const int m = a[1].n;
    if (m > t->ndim)
        return opr_fail(OPR_ERR_INVALID, "index: too many indices for tensor of dimension %d (got %d)", t->ndim, m);
    int64_t b[OPR_MAX_DIMS];
    int nb = 0, first = -1, last = -1, nidx = 0;
    for (int j = 0; j < m; j++) {
        const opr_meta *x = mval_item(&a[1], j);
        if (!x) continue;
        if (first < 0) first = j;
        last = j;
        nidx++;
        int64_t nbs[OPR_MAX_DIMS];
        int nn;
        if (!shape_broadcast(b, nb, x->shape, x->ndim, nbs, &nn))
            return opr_fail(OPR_ERR_INVALID, "index: shape mismatch: indexing tensors could not be broadcast together "
                            "(item %d)", j);
        for (int d = 0; d < nn; d++) b[d] = nbs[d];
        nb = nn;
    }
    if (t->ndim - nidx + nb > OPR_MAX_DIMS)
        return opr_fail(OPR_ERR_INVALID, "index: the result would have %d dims (at most %d)", t->ndim - nidx + nb,
                        OPR_MAX_DIMS);
    const bool adjacent = last - first + 1 == nidx;
    out->k = MV_LIST;
    out->n = 0;
    for (int d = 0; d <= t->ndim; d++) {
        if (nidx && d == (adjacent ? first : 0))
            for (int e = 0; e < nb; e++) out->u.l[out->n++] = b[e];
        if (d == t->ndim) break;
        if (d < m && mval_item(&a[1], d)) continue;
        out->u.l[out->n++] = t->shape[d];
    }
    return OPR_OK;
}
