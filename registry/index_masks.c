/* Bool masks among the items of a `Tensor?[]` argument (ATen's indices: index.Tensor,
 * index_put). As in PyTorch (expandTensors), a k-d mask indexing dims d..d+k-1 stands
 * for the k i64 columns of its nonzero(): the call is made again with those, so the
 * kernels, the shape expressions and the recorded node only ever see i64 indices (or
 * None), and the result's shape is known before the kernel runs. The columns are views
 * of one nonzero() result; a recorded node keeps them alive as it keeps any index. */
#include "registry.h"

#include <stdio.h>
#include <string.h>

/* How many items a call's Tensor?[] arguments may hold after expansion. */
#define MASK_MAX_ITEMS OPR_MAX_DIMS

static bool is_mask(const opr_tensor *t) { return t && t->m.dtype == OPR_BOOL; }

bool index_masks_present(const opr_op *op, const opr_value *args, int nargs)
{
    for (int i = 0; i < nargs && i < op->nargs; i++) {
        if (!op->args[i].none_items || args[i].kind != OPR_V_TENSOR_LIST || !args[i].u.tl.items) continue;
        for (int j = 0; j < args[i].u.tl.n; j++)
            if (is_mask(args[i].u.tl.items[j])) return true;
    }
    return false;
}

/* The items of list (n of them) with each mask replaced by its nonzero's columns,
 * into items (room for MASK_MAX_ITEMS) and their count into *count; each column is a
 * new reference the caller releases (owned[], *nowned). self is the indexed tensor:
 * a mask must match its sizes at the dims it covers. */
static int expand(const opr_op *op, const op_arg *a, const opr_tensor *self, opr_tensor *const *list, int n,
                  opr_tensor **items, int *count, opr_tensor **owned, int *nowned)
{
    const opr_op *nonzero = NULL;
    int dim = 0; /* the dim of self the next item indexes */
    *count = 0;
    for (int j = 0; j < n; j++) {
        opr_tensor *t = list[j];
        if (!is_mask(t)) {
            if (*count == MASK_MAX_ITEMS)
                return opr_fail(OPR_ERR_INVALID, "%s: too many indices in '%s'", op->name, a->name);
            items[(*count)++] = t;
            dim++;
            continue;
        }
        if (t->m.ndim == 0)
            return opr_fail(OPR_ERR_UNSUPPORTED, "%s: a 0-d bool index ('%s'[%d]) is not supported; use a 1-d mask",
                            op->name, a->name, j);
        for (int d = 0; d < t->m.ndim; d++)
            if (!self || dim + d >= self->m.ndim || self->m.shape[dim + d] != t->m.shape[d])
                return opr_fail(OPR_ERR_INVALID, "%s: The shape of the mask at index %d does not match the shape of "
                                "the indexed tensor at dim %d ('%s'[%d] has size %lld there)", op->name, d, dim + d,
                                a->name, j, (long long)t->m.shape[d]);
        if (*count + t->m.ndim > MASK_MAX_ITEMS)
            return opr_fail(OPR_ERR_INVALID, "%s: too many indices in '%s'", op->name, a->name);
        if (!nonzero && !(nonzero = opr_op_find(op->ctx, "nonzero"))) return opr_error_status();
        opr_tensor *nz = NULL;
        opr_value v = opr_v_tensor(t);
        int rc = opr_call(nonzero, &v, 1, &nz, 1);
        if (rc) return opr_fail_wrap(rc, "%s: the nonzero of mask '%s'[%d]", op->name, a->name, j);
        owned[(*nowned)++] = nz;
        for (int d = 0; d < t->m.ndim; d++) { /* column d of the [count, ndim] coordinates */
            const int64_t len = nz->m.shape[0], stride = nz->m.strides[0];
            opr_tensor *col = opr_tensor_make_view(nz, 1, &len, &stride, nz->m.offset + d * nz->m.strides[1]);
            if (!col) return opr_error_status();
            owned[(*nowned)++] = col;
            items[(*count)++] = col;
        }
        dim += t->m.ndim;
    }
    return OPR_OK;
}

int index_masks_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres)
{
    opr_value expanded[OPR_MAX_ARGS];
    opr_tensor *items[OPR_MAX_ARGS][MASK_MAX_ITEMS];
    /* per list: a nonzero result and its columns per mask item */
    opr_tensor *owned[OPR_MAX_ARGS * MASK_MAX_ITEMS * 2];
    int nowned = 0, rc = OPR_OK;
    const opr_tensor *self = nargs > 0 && args[0].kind == OPR_V_TENSOR ? args[0].u.t : NULL;
    for (int i = 0; i < nargs && !rc; i++) {
        expanded[i] = args[i];
        if (i >= op->nargs || !op->args[i].none_items || args[i].kind != OPR_V_TENSOR_LIST || !args[i].u.tl.items)
            continue;
        int count = 0;
        if (args[i].u.tl.n > MASK_MAX_ITEMS)
            rc = opr_fail(OPR_ERR_INVALID, "%s: too many indices in '%s'", op->name, op->args[i].name);
        else
            rc = expand(op, &op->args[i], self, args[i].u.tl.items, args[i].u.tl.n, items[i], &count, owned, &nowned);
        expanded[i] = opr_v_tensors(items[i], count);
    }
    if (!rc) rc = opr_call(op, expanded, nargs, results, nres);
    for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
    return rc;
}
