/* grid_sampler_3d's arithmetic, shared by the CPU (C) and GPU (CUDA/HIP) kernels as
 * opc_grid_sample.h is for 2-d, on its coordinate functions (opc_gs_source: the same
 * unnormalization and padding per dim). PyTorch 1.13's semantics (ATen's
 * GridSamplerKernel / GridSampler.cu, 3-d): input [N, C, D, H, W], grid
 * [N, D_out, H_out, W_out, 3] holding (x, y, z), x along W, y along H, z along D;
 * bilinear weighs the 8 neighbours floor(i), floor(i) + 1 per dim by the distances
 * (trilinear); nearest reads nearbyint(i) per dim (ties to even) and has no grid
 * gradient; bicubic is 2-d only. The index arithmetic and the sums over channels are in
 * double. The functions come in f32 and f64 versions (OPC_GS3_DEFINE below). */
#ifndef OPREG_OPC_GRID_SAMPLE3D_H
#define OPREG_OPC_GRID_SAMPLE3D_H

#include "opc_grid_sample.h"

/* Whether voxel (z, y, x) lies in a d x h x w volume. */
OPC_GS_FN bool opc_gs3_in(int64_t z, int64_t y, int64_t x, int64_t d, int64_t h, int64_t w)
{
    return z >= 0 && z < d && y >= 0 && y < h && x >= 0 && x < w;
}

/* The 8 trilinear neighbours of (iz, iy, ix) as offsets into a d x h x w volume (-1 for
 * one outside), in ATen's order tnw, tne, tsw, tse, bnw, bne, bsw, bse (t: floor(iz),
 * b: floor(iz) + 1; n, s: floor(iy) and + 1; w, e: floor(ix) and + 1), their weights,
 * and, when dw is given, d weight / d (ix, iy, iz) in dw[0..7], dw[8..15], dw[16..23]. */
OPC_GS_FN void opc_gs3_corners(double iz, double iy, double ix, int64_t d, int64_t h, int64_t w, int64_t *off, double *wt,
                               double *dw)
{
    const double z0 = floor(iz), y0 = floor(iy), x0 = floor(ix), tz = iz - z0, ty = iy - y0, tx = ix - x0;
    for (int k = 0; k < 8; k++) {
        const int bz = k >> 2, by = (k >> 1) & 1, bx = k & 1;
        const int64_t z = (int64_t)z0 + bz, y = (int64_t)y0 + by, x = (int64_t)x0 + bx;
        const double fz = bz ? tz : 1 - tz, fy = by ? ty : 1 - ty, fx = bx ? tx : 1 - tx;
        off[k] = opc_gs3_in(z, y, x, d, h, w) ? (z * h + y) * w + x : -1;
        wt[k] = fx * fy * fz;
        if (dw) {
            dw[k] = (bx ? 1 : -1) * fy * fz;
            dw[8 + k] = fx * (by ? 1 : -1) * fz;
            dw[16 + k] = fx * fy * (bz ? 1 : -1);
        }
    }
}

/* For element type T (suffix SUF), as opc_grid_sample.h's 2-d functions:
 *
 * opc_gs3_forward_SUF: the output at grid point g (x, y, z) for every channel: x the
 * sample's input [C, D, H, W] contiguous, y its first output element, channels ostride
 * apart.
 *
 * opc_gs3_backward_input_SUF: one channel volume of the input's gradient dx [D, H, W]
 * (contiguous, zeroed here) from that channel's gradient dy (npts points) and the
 * sample's grid (npts (x, y, z) triples). One caller per volume.
 *
 * opc_gs3_backward_grid_SUF: the grid's gradient at one point ((d gx, d gy, d gz) into
 * dg) from the sample's input and the point's gradient dy (C values ostride apart). */
#define OPC_GS3_DEFINE(T, SUF)                                                                                     \
    OPC_GS_FN void opc_gs3_forward_##SUF(const T *x, int64_t C, int64_t D, int64_t H, int64_t W, const double *g, \
                                         int mode, int pad, bool ac, T *y, int64_t ostride)                        \
    {                                                                                                              \
        const int64_t vol = D * H * W;                                                                             \
        const double ix = opc_gs_source(g[0], W, pad, ac, (double *)0), iy = opc_gs_source(g[1], H, pad, ac, (double *)0); \
        const double iz = opc_gs_source(g[2], D, pad, ac, (double *)0);                                            \
        if (mode == OPC_GS_NEAREST) {                                                                              \
            const int64_t xn = (int64_t)nearbyint(ix), yn = (int64_t)nearbyint(iy), zn = (int64_t)nearbyint(iz);  \
            const bool in = opc_gs3_in(zn, yn, xn, D, H, W);                                                       \
            for (int64_t c = 0; c < C; c++) y[c * ostride] = in ? x[c * vol + (zn * H + yn) * W + xn] : (T)0;     \
            return;                                                                                                \
        }                                                                                                          \
        int64_t off[8];                                                                                            \
        double wt[8];                                                                                              \
        opc_gs3_corners(iz, iy, ix, D, H, W, off, wt, (double *)0);                                                \
        for (int64_t c = 0; c < C; c++) {                                                                          \
            double acc = 0;                                                                                        \
            for (int k = 0; k < 8; k++)                                                                            \
                if (off[k] >= 0) acc += (double)x[c * vol + off[k]] * wt[k];                                      \
            y[c * ostride] = (T)acc;                                                                               \
        }                                                                                                          \
    }                                                                                                              \
    OPC_GS_FN void opc_gs3_backward_input_##SUF(const T *dy, const T *grid, int64_t npts, int64_t D, int64_t H,    \
                                                int64_t W, int mode, int pad, bool ac, T *dx)                      \
    {                                                                                                              \
        for (int64_t i = 0; i < D * H * W; i++) dx[i] = (T)0;                                                      \
        for (int64_t p = 0; p < npts; p++) {                                                                       \
            const double ix = opc_gs_source((double)grid[3 * p], W, pad, ac, (double *)0);                         \
            const double iy = opc_gs_source((double)grid[3 * p + 1], H, pad, ac, (double *)0);                     \
            const double iz = opc_gs_source((double)grid[3 * p + 2], D, pad, ac, (double *)0);                     \
            if (mode == OPC_GS_NEAREST) {                                                                          \
                const int64_t xn = (int64_t)nearbyint(ix), yn = (int64_t)nearbyint(iy), zn = (int64_t)nearbyint(iz); \
                if (opc_gs3_in(zn, yn, xn, D, H, W)) dx[(zn * H + yn) * W + xn] += dy[p];                          \
                continue;                                                                                          \
            }                                                                                                      \
            int64_t off[8];                                                                                        \
            double wt[8];                                                                                          \
            opc_gs3_corners(iz, iy, ix, D, H, W, off, wt, (double *)0);                                            \
            for (int k = 0; k < 8; k++)                                                                            \
                if (off[k] >= 0) dx[off[k]] += (T)(wt[k] * (double)dy[p]);                                        \
        }                                                                                                          \
    }                                                                                                              \
    OPC_GS_FN void opc_gs3_backward_grid_##SUF(const T *x, int64_t C, int64_t D, int64_t H, int64_t W,             \
                                               const double *g, const T *dy, int64_t ostride, int mode, int pad,   \
                                               bool ac, T *dg)                                                     \
    {                                                                                                              \
        if (mode == OPC_GS_NEAREST) { /* piecewise constant in the grid */                                         \
            dg[0] = dg[1] = dg[2] = (T)0;                                                                          \
            return;                                                                                                \
        }                                                                                                          \
        double m[3];                                                                                               \
        const int64_t vol = D * H * W;                                                                             \
        const double ix = opc_gs_source(g[0], W, pad, ac, &m[0]), iy = opc_gs_source(g[1], H, pad, ac, &m[1]);     \
        const double iz = opc_gs_source(g[2], D, pad, ac, &m[2]);                                                  \
        int64_t off[8];                                                                                            \
        double wt[8], dw[24], s[3] = {0, 0, 0};                                                                    \
        opc_gs3_corners(iz, iy, ix, D, H, W, off, wt, dw);                                                         \
        for (int64_t c = 0; c < C; c++) {                                                                          \
            const double gc = (double)dy[c * ostride];                                                             \
            for (int k = 0; k < 8; k++)                                                                            \
                if (off[k] >= 0) {                                                                                 \
                    const double v = (double)x[c * vol + off[k]] * gc;                                             \
                    for (int a = 0; a < 3; a++) s[a] += v * dw[8 * a + k];                                         \
                }                                                                                                  \
        }                                                                                                          \
        for (int a = 0; a < 3; a++) dg[a] = (T)(m[a] * s[a]);                                                      \
    }

OPC_GS3_DEFINE(float, f32)
OPC_GS3_DEFINE(double, f64)

#endif
