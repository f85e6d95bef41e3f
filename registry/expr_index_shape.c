/* The built-in shape of ATen's advanced indexing (index.Tensor, index_put's values in
 * registry/ops/indexing.yaml): index_shape(self, indices), where indices is a Tensor?[]
 * (None items take their dim whole). The index tensors broadcast together to B; the
 * result is self's dims before the first indexed one, B, then the dims after the last
 * one when the indexed dims are adjacent, else B followed by every dim not indexed
 * (PyTorch 1.13). The kernels lay their results out the same way
 * (plugins/common/opc_adv_index.h). Reads metadata only.
 *
 * A call expands a bool mask to its nonzero's columns before its shape is computed
 * (index_masks.c); a plan made from the arguments alone (opr_plan_explain) may still
 * see the mask, a k-d one covering k dims of self: its count of true elements is taken
 * as its size (the bound, as nonzero's cost model takes it). */
#include "expr.h"

int expr_bi_index_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (a[0].k != MV_TENSOR || !mval_is_list(&a[1]))
        return opr_fail(OPR_ERR_INVALID, "index_shape: expected a tensor and a tensor list");
    const opr_meta *t = a[0].u.t;
    bool indexed[OPR_MAX_DIMS] = {false};
    int64_t b[OPR_MAX_DIMS];
    int nb = 0, first = -1, last = -1, nidx = 0, dim = 0, total = 0;
    for (int j = 0; j < a[1].n; j++) { /* PyTorch counts the dims first */
        const opr_meta *x = mval_item(&a[1], j);
        total += x && x->dtype == OPR_BOOL && x->ndim > 0 ? x->ndim : 1;
    }
    if (total > t->ndim)
        return opr_fail(OPR_ERR_INVALID, "index: too many indices for tensor of dimension %d (got %d)", t->ndim, total);
    for (int j = 0; j < a[1].n; j++) {
        const opr_meta *x = mval_item(&a[1], j);
        const int covers = x && x->dtype == OPR_BOOL && x->ndim > 0 ? x->ndim : 1;
        if (!x) {
            dim++;
            continue;
        }
        const int64_t bound = x->numel;
        const int64_t *shape = covers > 1 || x->dtype == OPR_BOOL ? &bound : x->shape;
        const int ndim = x->dtype == OPR_BOOL ? 1 : x->ndim;
        int64_t nbs[OPR_MAX_DIMS];
        int nn;
        if (!shape_broadcast(b, nb, shape, ndim, nbs, &nn))
            return opr_fail(OPR_ERR_INVALID, "index: shape mismatch: indexing tensors could not be broadcast together "
                            "(item %d)", j);
        for (int d = 0; d < nn; d++) b[d] = nbs[d];
        nb = nn;
        for (int d = dim; d < dim + covers; d++) indexed[d] = true;
        if (first < 0) first = dim;
        last = dim + covers - 1;
        nidx += covers;
        dim += covers;
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
        if (!indexed[d]) out->u.l[out->n++] = t->shape[d];
    }
    return OPR_OK;
}
