/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the geometry of a
 * convolution, shared by the CPU and GPU kernels of convolution, convolution_backward_weight,
 * convolution_backward and its fused form.
 *
 * Every convolution relates a "big" image B and a "small" image S through a weight W in
 * the layout [C_s, C_b / groups, *kernel]:
 *     S[n, cs, o] = sum over cb in cs's group and k of W[cs, cb, k] * B[n, cb, o * stride + k * dilation - padding]
 * A convolution computes S from B (input = B, output = S, weight as given); a transposed
 * one B from S (input = S, output = B: its weight [C_in, C_out / groups, *kernel] is the
 * same layout). The gradient of one image is the other direction with the same weight,
 * and the weight's gradient is S (or its gradient) times the unfolded B (or its
 * gradient). Spatial dims are padded to 3 with size-1 dims in front, so one set of loops
 * serves 1-d, 2-d and 3-d. */
#ifndef OPREG_OPC_CONV_H
#define OPREG_OPC_CONV_H

#include "opc_why.h"

#include <opreg/plugin.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct opc_conv {
    int64_t n, groups;
    int64_t cb, cs;           /* channels of B and of S (all groups) */
    int64_t sb[3], ss[3];     /* spatial sizes of B and S */
    int64_t k[3], st[3], pad[3], dil[3];
    int64_t kvol, bvol, svol; /* products of k, sb and ss */
} opc_conv;

/* Item d of a per-dimension parameter (one item for all dims, or one per dim; an
 * absent or empty list gives dflt); false for a list of another length. */
static inline bool opc_conv_param(const opr_kernel_arg *a, int d, int nd, int64_t dflt, int64_t *out)
{
    *out = dflt;
    if (!a || a->kind != OPR_ARG_INT_LIST || a->u.il.n == 0) return true;
    if (a->u.il.n != 1 && a->u.il.n != nd) return false;
    *out = a->u.il.items[a->u.il.n == 1 ? 0 : d];
    return true;
}

/* The geometry from the shapes of B ([N, C_b, *sb]), S ([N, C_s, *ss]) and the weight
 * ([C_s, C_b / groups, *k]), and the stride, padding and dilation arguments. Checks that
 * the three agree (S's spatial sizes are those B gives, up to what a transposed
 * convolution's output_padding adds: less than the stride or the dilation). false with the
 * message in why. */
static inline bool opc_conv_geometry(const char *op, int32_t ndim, const int64_t *b, const int64_t *s, const int64_t *w,
                                     const opr_kernel_arg *stride, const opr_kernel_arg *padding,
                                     const opr_kernel_arg *dilation, int64_t groups, opc_conv *g, char *why, size_t why_size)
{
    const int nd = ndim - 2;
    if (nd < 1 || nd > 3) {
        snprintf(why, why_size, "%s: expected 3 to 5 dims ([N, C, *spatial]), got %d", op, (int)ndim);
        return false;
    }
    if (groups < 1 || w[0] % groups || b[1] != w[1] * groups || s[1] != w[0] || b[0] != s[0]) {
        snprintf(why, why_size, "%s: the channels do not agree: %lld and %lld channels, weight [%lld, %lld, ...], groups %lld", op,
                 (long long)b[1], (long long)s[1], (long long)w[0], (long long)w[1], (long long)groups);
        return false;
    }
    g->n = b[0];
    g->groups = groups;
    g->cb = b[1];
    g->cs = s[1];
    g->kvol = g->bvol = g->svol = 1;
    for (int d = 0; d < 3; d++) {
        const int src = d - (3 - nd); /* the padded dims in front have size 1 */
        if (src < 0) {
            g->sb[d] = g->ss[d] = g->k[d] = g->st[d] = g->dil[d] = 1;
            g->pad[d] = 0;
            continue;
        }
        g->sb[d] = b[2 + src];
        g->ss[d] = s[2 + src];
        g->k[d] = w[2 + src];
        if (!opc_conv_param(stride, src, nd, 1, &g->st[d]) || !opc_conv_param(padding, src, nd, 0, &g->pad[d]) ||
            !opc_conv_param(dilation, src, nd, 1, &g->dil[d])) {
            snprintf(why, why_size, "%s: stride, padding and dilation need 1 or %d items", op, nd);
            return false;
        }
        if (g->st[d] < 1 || g->dil[d] < 1 || g->pad[d] < 0) {
            snprintf(why, why_size, "%s: stride and dilation must be positive and padding not negative", op);
            return false;
        }
        /* every window of S inside the padded B, and B longer only by what a transposed
         * convolution's output_padding (less than the stride or the dilation) adds */
        const int64_t span = g->dil[d] * (g->k[d] - 1) + 1, left = g->sb[d] + 2 * g->pad[d] - span - (g->ss[d] - 1) * g->st[d];
        if (g->k[d] < 1 || g->ss[d] < 1 || left < 0 || left >= (g->st[d] > g->dil[d] ? g->st[d] : g->dil[d])) {
            snprintf(why, why_size, "%s: spatial dim %d: sizes %lld and %lld do not fit kernel %lld, stride %lld, padding %lld, dilation %lld",
                     op, src, (long long)g->sb[d], (long long)g->ss[d], (long long)g->k[d], (long long)g->st[d],
                     (long long)g->pad[d], (long long)g->dil[d]);
            return false;
        }
        g->kvol *= g->k[d];
        g->bvol *= g->sb[d];
        g->svol *= g->ss[d];
    }
    return true;
}

#endif
