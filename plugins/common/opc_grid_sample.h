/* grid_sampler_2d's arithmetic, shared by the CPU (C) and GPU (CUDA/HIP) kernels so
 * that both compute every output and gradient with the same operations in the same
 * order. PyTorch 1.13's semantics (ATen's GridSampler.h):
 *   - a grid coordinate in [-1, 1] maps to a pixel index: ((g + 1) / 2) * (size - 1)
 *     with align_corners (-1 and 1 are the centres of the corner pixels), else
 *     ((g + 1) * size - 1) / 2 (-1 and 1 are the outer edges of the corner pixels);
 *   - padding zeros reads 0 outside the image; border clips the index to
 *     [0, size - 1]; reflection reflects it about the borders (the corner centres with
 *     align_corners, the outer edges without) and then clips;
 *   - an index that is NaN or beyond the int range becomes -100 (out of the image),
 *     as ATen's safe_downgrade_to_int_range, so that no conversion overflows;
 *   - bilinear weighs the 4 neighbours floor(i), floor(i) + 1 by the distances; nearest
 *     reads the neighbour nearbyint(i) (ties to even), whose gradient with respect to
 *     the grid is zero; bicubic weighs 4 x 4 neighbours, each padded on its own
 *     (opc_gs_cubic).
 * The index arithmetic is done in double for every dtype; sums over channels too. The
 * functions come in f32 and f64 versions (OPC_GS_DEFINE below). */
#ifndef OPREG_OPC_GRID_SAMPLE_H
#define OPREG_OPC_GRID_SAMPLE_H

#include <opreg/plugin.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OPC_GS_FN __host__ __device__ static inline
#else
#define OPC_GS_FN static inline
#endif

enum { OPC_GS_BILINEAR = 0, OPC_GS_NEAREST = 1, OPC_GS_BICUBIC = 2 };
enum { OPC_GS_ZEROS = 0, OPC_GS_BORDER = 1, OPC_GS_REFLECTION = 2 };

/* x clipped to [0, size - 1]; *g (may be NULL) its derivative: 0 on and beyond the
 * borders (ATen counts the borders as outside, for the gradient). */
OPC_GS_FN double opc_gs_clip(double x, int64_t size, double *g)
{
    const double hi = (double)(size - 1);
    if (x <= 0) { if (g) *g = 0; return 0; }
    if (x >= hi) { if (g) *g = 0; return hi; }
    if (g) *g = 1;
    return x;
}

/* x reflected into [twice_lo / 2, twice_hi / 2]; *g (may be NULL) its derivative, 1 or
 * -1 (0 for a one-pixel span, where every x reflects to the one pixel). */
OPC_GS_FN double opc_gs_reflect(double x, int64_t twice_lo, int64_t twice_hi, double *g)
{
    if (twice_lo == twice_hi) { if (g) *g = 0; return 0; }
    const double lo = (double)twice_lo / 2, span = (double)(twice_hi - twice_lo) / 2;
    double sign = 1;
    x -= lo;
    if (x < 0) { sign = -1; x = -x; }
    const double extra = fmod(x, span);
    /* the parity of the flips in double: an infinite x gives NaN (then -100 below), never
     * an out-of-range conversion */
    if (fmod(floor(x / span), 2.0) == 0) { if (g) *g = sign; return extra + lo; }
    if (g) *g = -sign;
    return span - extra + lo;
}

/* The pixel index of grid coordinate g along a dim of size pixels, before padding;
 * *d (may be NULL) d index / d g. */
OPC_GS_FN double opc_gs_unnormalize(double g, int64_t size, bool align_corners, double *d)
{
    if (d) *d = align_corners ? (double)(size - 1) / 2 : (double)size / 2;
    return align_corners ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
}

/* Pixel index x after padding (ATen's compute_coordinates); *d (may be NULL) times
 * its derivative. */
OPC_GS_FN double opc_gs_pad(double x, int64_t size, int pad, bool align_corners, double *d)
{
    double gc = 1, gr = 1;
    if (pad == OPC_GS_BORDER) {
        x = opc_gs_clip(x, size, &gc);
    } else if (pad == OPC_GS_REFLECTION) {
        x = align_corners ? opc_gs_reflect(x, 0, 2 * (size - 1), &gr) : opc_gs_reflect(x, -1, 2 * size - 1, &gr);
        x = opc_gs_clip(x, size, &gc);
    }
    if (!(x >= -2147483648.0 && x <= 2147483647.0)) x = -100; /* NaN too */
    if (d) *d *= gc * gr;
    return x;
}

/* The pixel index the grid coordinate g reads along a dim of size pixels, after
 * padding; *d (may be NULL) d index / d g. */
OPC_GS_FN double opc_gs_source(double g, int64_t size, int pad, bool align_corners, double *d)
{
    return opc_gs_pad(opc_gs_unnormalize(g, size, align_corners, d), size, pad, align_corners, d);
}

/* Bicubic (ATen's grid sampler bicubic): the unpadded index i = floor(i) + t reads the
 * 4 x 4 pixels floor(i) - 1 .. floor(i) + 2 per dim, each padded on its own, weighed
 * by the cubic convolution weights of t (A = -0.75, as PyTorch); w[k] the weight of
 * tap k, d[k] (may be NULL) d w[k] / d t. An index beyond the int range reads nothing. */
OPC_GS_FN double opc_gs_cubic(double i, double *w, double *d)
{
    const double A = -0.75;
    const double f = floor(i), t = i - f;
    double x = t + 1;
    w[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    if (d) d[0] = (3 * A * x - 10 * A) * x + 8 * A;
    x = t;
    w[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
    if (d) d[1] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 1 - t;
    w[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
    if (d) d[2] = -(3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 2 - t;
    w[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    if (d) d[3] = -((3 * A * x - 10 * A) * x + 8 * A);
    return f >= -2147483648.0 && f <= 2147483647.0 ? f : -100; /* NaN and inf too */
}

/* The padded pixel of tap index k (an integer) along a dim: its index, or -1 outside. */
OPC_GS_FN int64_t opc_gs_tap(double k, int64_t size, int pad, bool align_corners)
{
    const int64_t p = (int64_t)opc_gs_pad(k, size, pad, align_corners, (double *)0);
    return p >= 0 && p < size ? p : -1;
}

/* Whether pixel (y, x) lies in an h x w image. */
OPC_GS_FN bool opc_gs_in(int64_t y, int64_t x, int64_t h, int64_t w) { return y >= 0 && y < h && x >= 0 && x < w; }

/* The 4 bilinear neighbours of (iy, ix), in the order nw, ne, sw, se, and their weights. */
OPC_GS_FN void opc_gs_corners(double iy, double ix, int64_t *ys, int64_t *xs, double *wt)
{
    const double y0 = floor(iy), x0 = floor(ix), ty = iy - y0, tx = ix - x0;
    ys[0] = ys[1] = (int64_t)y0;
    ys[2] = ys[3] = (int64_t)y0 + 1;
    xs[0] = xs[2] = (int64_t)x0;
    xs[1] = xs[3] = (int64_t)x0 + 1;
    wt[0] = (1 - tx) * (1 - ty);
    wt[1] = tx * (1 - ty);
    wt[2] = (1 - tx) * ty;
    wt[3] = tx * ty;
}

/* For element type T (suffix SUF):
 *
 * opc_gs_forward_SUF: the output at one grid point (gx, gy) for every channel: x is the
 * sample's input [C, H, W] contiguous, y its first output element, the channels
 * ostride apart.
 *
 * opc_gs_backward_input_SUF: one channel plane of the input's gradient dx [H, W]
 * (contiguous, zeroed here) from that channel's gradient dy (npts points, contiguous)
 * and the sample's grid (npts (x, y) pairs): each point adds its gradient to the
 * pixels it read. One caller per plane: no two write the same element.
 *
 * opc_gs_backward_grid_SUF: the grid's gradient at one point ((d gx, d gy) into dg)
 * from the sample's input and the point's gradient dy (C values ostride apart). */
#define OPC_GS_DEFINE(T, SUF)                                                                                     \
    OPC_GS_FN void opc_gs_forward_##SUF(const T *x, int64_t C, int64_t H, int64_t W, double gx, double gy,        \
                                        int mode, int pad, bool ac, T *y, int64_t ostride)                        \
    {                                                                                                             \
        if (mode == OPC_GS_BICUBIC) {                                                                             \
            double wx[4], wy[4];                                                                                  \
            const double fx = opc_gs_cubic(opc_gs_unnormalize(gx, W, ac, (double *)0), wx, (double *)0);          \
            const double fy = opc_gs_cubic(opc_gs_unnormalize(gy, H, ac, (double *)0), wy, (double *)0);          \
            int64_t tx[4], ty[4];                                                                                 \
            for (int k = 0; k < 4; k++) {                                                                         \
                tx[k] = opc_gs_tap(fx - 1 + k, W, pad, ac);                                                       \
                ty[k] = opc_gs_tap(fy - 1 + k, H, pad, ac);                                                       \
            }                                                                                                     \
            for (int64_t c = 0; c < C; c++) {                                                                     \
                double acc = 0;                                                                                   \
                for (int i = 0; i < 4; i++) {                                                                     \
                    double row = 0;                                                                               \
                    for (int j = 0; ty[i] >= 0 && j < 4; j++)                                                     \
                        if (tx[j] >= 0) row += (double)x[(c * H + ty[i]) * W + tx[j]] * wx[j];                   \
                    acc += row * wy[i];                                                                           \
                }                                                                                                 \
                y[c * ostride] = (T)acc;                                                                          \
            }                                                                                                     \
            return;                                                                                               \
        }                                                                                                         \
        const double ix = opc_gs_source(gx, W, pad, ac, (double *)0), iy = opc_gs_source(gy, H, pad, ac, (double *)0);                \
        if (mode == OPC_GS_NEAREST) {                                                                             \
            const int64_t xn = (int64_t)nearbyint(ix), yn = (int64_t)nearbyint(iy);                              \
            const bool in = opc_gs_in(yn, xn, H, W);                                                              \
            for (int64_t c = 0; c < C; c++) y[c * ostride] = in ? x[(c * H + yn) * W + xn] : (T)0;               \
            return;                                                                                               \
        }                                                                                                         \
        int64_t ys[4], xs[4];                                                                                     \
        double wt[4];                                                                                             \
        opc_gs_corners(iy, ix, ys, xs, wt);                                                                       \
        for (int64_t c = 0; c < C; c++) {                                                                         \
            double acc = 0;                                                                                       \
            for (int k = 0; k < 4; k++)                                                                           \
                if (opc_gs_in(ys[k], xs[k], H, W)) acc += (double)x[(c * H + ys[k]) * W + xs[k]] * wt[k];        \
            y[c * ostride] = (T)acc;                                                                              \
        }                                                                                                         \
    }                                                                                                             \
    OPC_GS_FN void opc_gs_backward_input_##SUF(const T *dy, const T *grid, int64_t npts, int64_t H, int64_t W,    \
                                               int mode, int pad, bool ac, T *dx)                                 \
    {                                                                                                             \
        for (int64_t i = 0; i < H * W; i++) dx[i] = (T)0;                                                         \
        for (int64_t p = 0; p < npts; p++) {                                                                      \
            if (mode == OPC_GS_BICUBIC) {                                                                         \
                double wx[4], wy[4];                                                                              \
                const double fx = opc_gs_cubic(opc_gs_unnormalize((double)grid[2 * p], W, ac, (double *)0), wx, (double *)0);     \
                const double fy = opc_gs_cubic(opc_gs_unnormalize((double)grid[2 * p + 1], H, ac, (double *)0), wy, (double *)0); \
                for (int i = 0; i < 4; i++) {                                                                     \
                    const int64_t ty = opc_gs_tap(fy - 1 + i, H, pad, ac);                                        \
                    for (int j = 0; ty >= 0 && j < 4; j++) {                                                      \
                        const int64_t tx = opc_gs_tap(fx - 1 + j, W, pad, ac);                                    \
                        if (tx >= 0) dx[ty * W + tx] += (T)(wy[i] * wx[j] * (double)dy[p]);                       \
                    }                                                                                             \
                }                                                                                                 \
                continue;                                                                                         \
            }                                                                                                     \
            const double ix = opc_gs_source((double)grid[2 * p], W, pad, ac, (double *)0);                                  \
            const double iy = opc_gs_source((double)grid[2 * p + 1], H, pad, ac, (double *)0);                              \
            if (mode == OPC_GS_NEAREST) {                                                                         \
                const int64_t xn = (int64_t)nearbyint(ix), yn = (int64_t)nearbyint(iy);                          \
                if (opc_gs_in(yn, xn, H, W)) dx[yn * W + xn] += dy[p];                                            \
                continue;                                                                                         \
            }                                                                                                     \
            int64_t ys[4], xs[4];                                                                                 \
            double wt[4];                                                                                         \
            opc_gs_corners(iy, ix, ys, xs, wt);                                                                   \
            for (int k = 0; k < 4; k++)                                                                           \
                if (opc_gs_in(ys[k], xs[k], H, W)) dx[ys[k] * W + xs[k]] += (T)(wt[k] * (double)dy[p]);          \
        }                                                                                                         \
    }                                                                                                             \
    OPC_GS_FN void opc_gs_backward_grid_##SUF(const T *x, int64_t C, int64_t H, int64_t W, double gx, double gy,  \
                                              const T *dy, int64_t ostride, int mode, int pad, bool ac, T *dg)    \
    {                                                                                                             \
        if (mode == OPC_GS_NEAREST) { /* piecewise constant in the grid */                                        \
            dg[0] = dg[1] = (T)0;                                                                                 \
            return;                                                                                               \
        }                                                                                                         \
        double mx, my;                                                                                            \
        if (mode == OPC_GS_BICUBIC) { /* the taps are padded, not the index: only unnormalize's derivative */   \
            double wx[4], wy[4], dwx[4], dwy[4];                                                                  \
            const double fx = opc_gs_cubic(opc_gs_unnormalize(gx, W, ac, &mx), wx, dwx);                          \
            const double fy = opc_gs_cubic(opc_gs_unnormalize(gy, H, ac, &my), wy, dwy);                          \
            int64_t tx[4], ty[4];                                                                                 \
            for (int k = 0; k < 4; k++) {                                                                         \
                tx[k] = opc_gs_tap(fx - 1 + k, W, pad, ac);                                                       \
                ty[k] = opc_gs_tap(fy - 1 + k, H, pad, ac);                                                       \
            }                                                                                                     \
            double sx = 0, sy = 0;                                                                                \
            for (int64_t c = 0; c < C; c++) {                                                                     \
                const double g = (double)dy[c * ostride];                                                         \
                for (int i = 0; i < 4; i++)                                                                       \
                    for (int j = 0; ty[i] >= 0 && j < 4; j++)                                                     \
                        if (tx[j] >= 0) {                                                                         \
                            const double v = (double)x[(c * H + ty[i]) * W + tx[j]] * g;                          \
                            sx += v * dwx[j] * wy[i];                                                             \
                            sy += v * wx[j] * dwy[i];                                                             \
                        }                                                                                         \
            }                                                                                                     \
            dg[0] = (T)(mx * sx);                                                                                 \
            dg[1] = (T)(my * sy);                                                                                 \
            return;                                                                                               \
        }                                                                                                         \
        const double ix = opc_gs_source(gx, W, pad, ac, &mx), iy = opc_gs_source(gy, H, pad, ac, &my);            \
        int64_t ys[4], xs[4];                                                                                     \
        double wt[4];                                                                                             \
        opc_gs_corners(iy, ix, ys, xs, wt);                                                                       \
        const double ty = iy - floor(iy), tx = ix - floor(ix);                                                    \
        /* d weight / d ix and d weight / d iy of nw, ne, sw, se */                                               \
        const double wx[4] = {-(1 - ty), 1 - ty, -ty, ty}, wy[4] = {-(1 - tx), -tx, 1 - tx, tx};                 \
        double sx = 0, sy = 0;                                                                                    \
        for (int64_t c = 0; c < C; c++) {                                                                         \
            const double g = (double)dy[c * ostride];                                                             \
            for (int k = 0; k < 4; k++)                                                                           \
                if (opc_gs_in(ys[k], xs[k], H, W)) {                                                              \
                    const double v = (double)x[(c * H + ys[k]) * W + xs[k]] * g;                                  \
                    sx += v * wx[k];                                                                              \
                    sy += v * wy[k];                                                                              \
                }                                                                                                 \
        }                                                                                                         \
        dg[0] = (T)(mx * sx);                                                                                     \
        dg[1] = (T)(my * sy);                                                                                     \
    }

OPC_GS_DEFINE(float, f32)
OPC_GS_DEFINE(double, f64)

/* The outputs and the input's shape ([N, C, H, W], or [N, C, D, H, W] for the 3-d ops,
 * into xs[5]) of a backward call, host side. Four names per dimension share the kernel:
 * the fused entry (grad_input_mask says which outputs are wanted),
 * grid_sampler_Nd_backward_input and _grid (one output each; the input's gradient gets
 * the input's sizes when the input itself is not passed) and ATen's
 * grid_sampler_Nd_backward (the grid's gradient always, as ATen; the input's when
 * output_mask[0]). false with the reason in why. */
static inline bool opc_gs_backward_outputs(const opr_kernel_call *c, opr_tensor_view **dx, opr_tensor_view **dgrid,
                                           int64_t xs[5], char *why, size_t why_size)
{
    const bool only_input = strstr(c->op, "_backward_input") != NULL, only_grid = strstr(c->op, "_backward_grid") != NULL;
    const int nd = strstr(c->op, "_3d") ? 5 : 4;
    unsigned mask = only_input ? 1u : only_grid ? 2u : (unsigned)c->grad_input_mask;
    if (!only_input && !only_grid && !c->grad_input_mask)
        mask = 2u | (c->nargs > 6 && c->args[6]->kind == OPR_ARG_INT_LIST && c->args[6]->u.il.n > 0 &&
                     c->args[6]->u.il.items[0] ? 1u : 0u);
    const int nout = only_input || only_grid ? 1 : 2;
    if (c->nout < nout) {
        snprintf(why, why_size, "%s: expected %d outputs", c->op, nout);
        return false;
    }
    *dx = mask & 1 ? c->outputs[0] : NULL;
    *dgrid = mask & 2 ? c->outputs[only_grid ? 0 : 1] : NULL;
    const opr_tensor_view *x = c->nargs > 1 && c->args[1]->kind == OPR_ARG_TENSOR ? c->args[1]->u.t : NULL;
    if (x && x->ndim == nd) memcpy(xs, x->shape, (size_t)nd * sizeof *xs);
    else if (c->nargs > 1 && c->args[1]->kind == OPR_ARG_INT_LIST && c->args[1]->u.il.n == nd)
        memcpy(xs, c->args[1]->u.il.items, (size_t)nd * sizeof *xs);
    else if (*dx && (*dx)->ndim == nd) memcpy(xs, (*dx)->shape, (size_t)nd * sizeof *xs);
    else {
        snprintf(why, why_size, "%s: the input's shape (%d dims) is unknown", c->op, nd);
        return false;
    }
    return true;
}

#endif
