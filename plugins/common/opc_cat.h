/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): checking the
 * tensors of cat against its output before anything is copied. */
#ifndef OPREG_OPC_CAT_H
#define OPREG_OPC_CAT_H

#include "opc_shape.h"
#include "opc_dtype.h"
#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdio.h>
#include <string.h>

/* PyTorch's legacy rule: 1-d empty tensors may appear in any cat and are skipped. */
static inline bool opc_cat_skipped(const opr_tensor_view *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* cat(tensors, dim) of call c, checked, and a walk over the tensors to copy. */
typedef struct {
    const opr_tensor_view *const *ts;
    int32_t nt;
    int32_t dim;                   /* wrapped */
    opr_tensor_view *out;
    /* the walk (opc_cat_next): tensor t goes to out's data + offset elements, laid out
     * with out's strides */
    int32_t next;
    int64_t at;                    /* along dim */
    const opr_tensor_view *t;
    int64_t offset;
} opc_cat;

/* Checks the arguments of cat (call c, its dim argument dim_arg) against its output: a
 * non-empty tensor list whose tensors all have at least one dim and out's dtype, and
 * each one not skipped out's shape except along dim, where the sizes add up to out's.
 * Returns false with the message in why. */
static inline bool opc_cat_start(const opr_kernel_call *c, int64_t dim_arg, opc_cat *cat, char *why, size_t why_size)
{
    memset(cat, 0, sizeof *cat);
    if (c->nargs < 2 || c->args[0]->kind != OPR_ARG_TENSOR_LIST || c->args[0]->u.tl.n == 0) {
        snprintf(why, why_size, "cat: expected a non-empty list of tensors");
        return false;
    }
    const opr_tensor_view *const *ts = cat->ts = c->args[0]->u.tl.items;
    const int32_t nt = cat->nt = c->args[0]->u.tl.n;
    const opr_tensor_view *out = cat->out = c->outputs[0];
    if (!opc_wrap_dim(dim_arg, out->ndim, &cat->dim)) {
        snprintf(why, why_size, "cat: dim %lld out of range for %d-d tensors", (long long)dim_arg, (int)out->ndim);
        return false;
    }
    const int32_t dim = cat->dim;
    int64_t total = 0;
    for (int32_t i = 0; i < nt; i++) {
        const opr_tensor_view *t = ts[i];
        if (t->ndim == 0) {
            snprintf(why, why_size, "cat: zero-dimensional tensor %d cannot be concatenated", (int)i);
            return false;
        }
        if (t->dtype != out->dtype) {
            snprintf(why, why_size, "cat: tensor %d has dtype %s, expected %s", (int)i, opc_dtype_name(t->dtype),
                     opc_dtype_name(out->dtype));
            return false;
        }
        if (opc_cat_skipped(t)) continue;
        if (t->ndim != out->ndim) {
            snprintf(why, why_size, "cat: tensor %d has %d dims, expected %d", (int)i, (int)t->ndim, (int)out->ndim);
            return false;
        }
        for (int32_t d = 0; d < t->ndim; d++)
            if (d != dim && t->shape[d] != out->shape[d]) {
                snprintf(why, why_size, "cat: tensor %d has size %lld at dim %d, expected %lld", (int)i,
                         (long long)t->shape[d], (int)d, (long long)out->shape[d]);
                return false;
            }
        total += t->shape[dim];
    }
    /* a 0-d output (which no valid cat has) has no size to compare with */
    if (out->ndim == 0 || total != out->shape[dim]) {
        snprintf(why, why_size, "cat: sizes along dim %d add up to %lld, output has %lld", (int)dim, (long long)total,
                 (long long)(out->ndim ? out->shape[dim] : 0));
        return false;
    }
    return true;
}

/* Steps to the next tensor with elements (cat->t, cat->offset); false after the last. */
static inline bool opc_cat_next(opc_cat *cat)
{
    while (cat->next < cat->nt) {
        const opr_tensor_view *t = cat->ts[cat->next++];
        if (opc_cat_skipped(t)) continue;
        const int64_t at = cat->at;
        cat->at += t->shape[cat->dim];
        if (t->numel == 0) continue;
        cat->t = t;
        cat->offset = at * cat->out->strides[cat->dim];
        return true;
    }
    return false;
}

#endif
