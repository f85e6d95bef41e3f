/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the geometry of
 * ATen's advanced indexing, index.Tensor(self, Tensor?[] indices) and index_put, shared
 * by the CPU and GPU kernels so that both lay the result out alike.
 *
 * The items of indices are i64 index tensors or None (a NULL view: that dim is taken
 * whole); the host has already replaced a bool mask by its nonzero's columns. As in
 * PyTorch 1.13 the index tensors broadcast together to a shape B, and the result is
 * self's dims before the first indexed one, then B, then the dims after the last one
 * when the indexed dims are adjacent; B first, then every dim not indexed, when they
 * are not (x[:, i, :, j]). Dims past the end of indices are taken whole.
 *
 * Each result dim then carries a stride into self (0 for B's dims) and one into each
 * index tensor (0 outside B and where that index broadcasts), so one walk over the
 * result with 1 + nidx operands finds, per element, the self offset of its non-indexed
 * coordinates and the positions of its index values. */
#ifndef OPREG_OPC_ADV_INDEX_H
#define OPREG_OPC_ADV_INDEX_H

#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct opc_adv_index {
    int32_t ndim;                              /* the result's dims */
    int64_t shape[OPR_MAX_DIMS];               /* the result's shape */
    int64_t numel;
    int64_t self_strides[OPR_MAX_DIMS];        /* per result dim, into the indexed tensor */
    int32_t nidx;                              /* index tensors (None items left out) */
    const opr_tensor_view *idx[OPR_MAX_DIMS];  /* them, in order */
    int32_t idx_dim[OPR_MAX_DIMS];             /* the dim of self each one indexes */
    int64_t idx_size[OPR_MAX_DIMS];            /* self's size there (the valid range) */
    int64_t idx_self_stride[OPR_MAX_DIMS];     /* self's stride there */
    int64_t idx_strides[OPR_MAX_DIMS][OPR_MAX_DIMS]; /* [k][result dim], into index k */
} opc_adv_index;

/* Lays out indexing of a tensor of ndim dims, shape and strides (self, or the
 * output of index_put, which has self's shape) by the n items of indices. False, with
 * PyTorch's message in why, for more items than dims, index shapes that do not
 * broadcast, or a result of more than OPR_MAX_DIMS dims. */
static inline bool opc_adv_index_plan(const char *op, int32_t ndim, const int64_t *shape, const int64_t *strides,
                                      const opr_tensor_view *const *indices, int32_t n, opc_adv_index *g, char *why,
                                      size_t why_size)
{
    if (n > ndim) {
        snprintf(why, why_size, "%s: too many indices for tensor of dimension %d (got %d)", op, (int)ndim, (int)n);
        return false;
    }
    int32_t nb = 0, first = -1, last = -1;
    int64_t b[OPR_MAX_DIMS];
    g->nidx = 0;
    for (int32_t j = 0; j < n; j++) {
        const opr_tensor_view *t = indices[j];
        if (!t) continue;
        if (first < 0) first = j;
        last = j;
        /* broadcast B with t's shape, right-aligned */
        const int32_t m = t->ndim > nb ? t->ndim : nb;
        int64_t nbs[OPR_MAX_DIMS];
        for (int32_t d = 0; d < m; d++) {
            const int32_t da = d - (m - nb), dt = d - (m - t->ndim);
            const int64_t sa = da >= 0 ? b[da] : 1, st = dt >= 0 ? t->shape[dt] : 1;
            if (sa != st && sa != 1 && st != 1) {
                snprintf(why, why_size, "%s: shape mismatch: indexing tensors could not be broadcast together "
                         "(size %lld against %lld at dim %d of the broadcast shape)", op, (long long)sa, (long long)st,
                         (int)d);
                return false;
            }
            nbs[d] = sa == 1 ? st : sa;
        }
        for (int32_t d = 0; d < m; d++) b[d] = nbs[d];
        nb = m;
        g->idx[g->nidx] = t;
        g->idx_dim[g->nidx] = j;
        g->idx_size[g->nidx] = shape[j];
        g->idx_self_stride[g->nidx] = strides[j];
        g->nidx++;
    }
    const bool adjacent = g->nidx == 0 || last - first + 1 == g->nidx;
    if (ndim - g->nidx + nb > OPR_MAX_DIMS) {
        snprintf(why, why_size, "%s: the result would have %d dims (at most %d)", op, (int)(ndim - g->nidx + nb),
                 (int)OPR_MAX_DIMS);
        return false;
    }
    g->ndim = 0;
    for (int32_t d = 0; d <= ndim; d++) {
        if (g->nidx && d == (adjacent ? first : 0)) { /* B's dims go here */
            for (int32_t e = 0; e < nb; e++) {
                g->shape[g->ndim] = b[e];
                g->self_strides[g->ndim] = 0;
                for (int32_t k = 0; k < g->nidx; k++) {
                    const opr_tensor_view *t = g->idx[k];
                    const int32_t dt = e - (nb - t->ndim);
                    g->idx_strides[k][g->ndim] = dt >= 0 && t->shape[dt] != 1 ? t->strides[dt] : 0;
                }
                g->ndim++;
            }
        }
        if (d == ndim) break;
        if (d < n && indices[d]) continue;
        g->shape[g->ndim] = shape[d];
        g->self_strides[g->ndim] = strides[d];
        for (int32_t k = 0; k < g->nidx; k++) g->idx_strides[k][g->ndim] = 0;
        g->ndim++;
    }
    g->numel = 1;
    for (int32_t d = 0; d < g->ndim; d++) g->numel *= g->shape[d];
    return true;
}

/* Whether index values between min and max (those of a non-empty index) all lie in
 * [-size, size) of dimension dim, with PyTorch's message for the first one that does
 * not (negative ones are later wrapped like Python indices). */
static inline bool opc_adv_index_in_range(const char *op, int64_t min, int64_t max, int32_t dim, int64_t size,
                                          char *why, size_t why_size)
{
    if (max < size && min >= -size) return true;
    snprintf(why, why_size, "%s: index %lld is out of bounds for dimension %d with size %lld", op,
             (long long)(max >= size ? max : min), (int)dim, (long long)size);
    return false;
}

#endif
