/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the geometry of a
 * pooling, shared by the CPU and GPU kernels of max_pool2d/3d_with_indices, avg_pool2d/3d
 * (and their backward) and _adaptive_avg_pool2d/3d (and their backward).
 *
 * The input and output are planes (the product of the dims before the nd spatial ones:
 * [N, C] or [C]) of nd spatial dims, padded to 3 with size-1 dims in front. The host has
 * allocated the output with the shape the YAML gives (pool_shape); these checks make
 * sure the two shapes and the parameters agree before a kernel indexes anything. */
#ifndef OPREG_OPC_POOL_H
#define OPREG_OPC_POOL_H

#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct opc_pool {
    int64_t planes;
    int64_t in[3], out[3];
    int64_t k[3], st[3], pad[3], dil[3];
    int64_t in_vol, out_vol;      /* elements of one input / output plane */
    bool count_include_pad;       /* average pooling */
    int64_t divisor_override;     /* average pooling; 0: none */
} opc_pool;

/* The planes and spatial sizes of in and out (nd spatial dims each, the same leading
 * dims). false with the message in why. */
static inline bool opc_pool_planes(const char *op, int nd, const opr_tensor_view *in, const opr_tensor_view *out, opc_pool *g,
                                   char *why, size_t why_size)
{
    if (in->ndim != out->ndim || in->ndim < nd + 1 || in->ndim > nd + 2) {
        snprintf(why, why_size, "%s: expected %d-d or %d-d tensors of equal rank, got %d and %d dims", op, nd + 1, nd + 2,
                 (int)in->ndim, (int)out->ndim);
        return false;
    }
    const int lead = in->ndim - nd;
    g->planes = 1;
    for (int i = 0; i < lead; i++) {
        if (in->shape[i] != out->shape[i]) {
            snprintf(why, why_size, "%s: the leading dims differ (dim %d: %lld and %lld)", op, i, (long long)in->shape[i],
                     (long long)out->shape[i]);
            return false;
        }
        g->planes *= in->shape[i];
    }
    g->in_vol = g->out_vol = 1;
    for (int d = 0; d < 3; d++) {
        const int src = d - (3 - nd);
        g->in[d] = src < 0 ? 1 : in->shape[lead + src];
        g->out[d] = src < 0 ? 1 : out->shape[lead + src];
        g->k[d] = g->st[d] = g->dil[d] = 1;
        g->pad[d] = 0;
        g->in_vol *= g->in[d];
        g->out_vol *= g->out[d];
    }
    g->count_include_pad = true;
    g->divisor_override = 0;
    return true;
}

/* Item d of a per-dimension list (one item for all dims, one per dim; empty: dflt). */
static inline bool opc_pool_param(const opr_kernel_arg *a, int d, int nd, int64_t dflt, int64_t *out)
{
    *out = dflt;
    if (!a || a->kind != OPR_ARG_INT_LIST || a->u.il.n == 0) return true;
    if (a->u.il.n != 1 && a->u.il.n != nd) return false;
    *out = a->u.il.items[a->u.il.n == 1 ? 0 : d];
    return true;
}

/* opc_pool_planes, then the window parameters (dilation NULL: 1), checked against the
 * output sizes: every window starts inside the padded input and the last one does not
 * start in the right padding (PyTorch's rule for ceil_mode). */
static inline bool opc_pool_geometry(const char *op, int nd, const opr_tensor_view *in, const opr_tensor_view *out,
                                     const opr_kernel_arg *kernel, const opr_kernel_arg *stride, const opr_kernel_arg *padding,
                                     const opr_kernel_arg *dilation, opc_pool *g, char *why, size_t why_size)
{
    if (!opc_pool_planes(op, nd, in, out, g, why, why_size)) return false;
    if (!kernel || kernel->kind != OPR_ARG_INT_LIST || (kernel->u.il.n != 1 && kernel->u.il.n != nd)) {
        snprintf(why, why_size, "%s: kernel_size must have 1 or %d items", op, nd);
        return false;
    }
    for (int d = 3 - nd; d < 3; d++) {
        const int src = d - (3 - nd);
        g->k[d] = kernel->u.il.items[kernel->u.il.n == 1 ? 0 : src];
        if (!opc_pool_param(stride, src, nd, g->k[d], &g->st[d]) || !opc_pool_param(padding, src, nd, 0, &g->pad[d]) ||
            !opc_pool_param(dilation, src, nd, 1, &g->dil[d])) {
            snprintf(why, why_size, "%s: stride, padding and dilation need 1 or %d items", op, nd);
            return false;
        }
        if (g->k[d] < 1 || g->st[d] < 1 || g->dil[d] < 1 || g->pad[d] < 0 || g->pad[d] > g->k[d] / 2) {
            snprintf(why, why_size, "%s: kernel_size, stride and dilation must be positive, padding at most half the kernel size",
                     op);
            return false;
        }
        const int64_t span = g->dil[d] * (g->k[d] - 1) + 1;
        if (g->out[d] < 1 || (g->out[d] - 1) * g->st[d] + span > g->in[d] + 2 * g->pad[d] + g->st[d] - 1 ||
            (g->out[d] - 1) * g->st[d] >= g->in[d] + g->pad[d]) {
            snprintf(why, why_size, "%s: spatial dim %d: output size %lld does not fit input %lld (kernel %lld, stride %lld, padding %lld)",
                     op, src, (long long)g->out[d], (long long)g->in[d], (long long)g->k[d], (long long)g->st[d],
                     (long long)g->pad[d]);
            return false;
        }
    }
    return true;
}

#endif
