/* grid_sampler_2d, grid_sampler_3d and their gradients (registry/ops/grid_sample.yaml),
 * f32 and f64 (f16 and bf16 through f32, gpu_half.cu): the CPU plugin's kernels
 * (plugins/cpu/cpu_grid_sample.c, whose header comment gives the four backward names
 * per dimension and their arguments) on the same per-point arithmetic
 * (plugins/common/opc_grid_sample.h, opc_grid_sample3d.h), so both backends give the
 * same numbers. One thread per output point (forward, the grid's gradient) or per
 * channel plane or volume (the input's gradient: each is written by one thread, so no
 * atomics and the sums do not depend on the launch). */
#include "gpu_common.cuh"
#include "../common/opc_grid_sample3d.h"

#include <string.h>

namespace {

/* 2-d, or 3-d (d the depth, 1 in 2-d; 3 coordinates per grid point). */
struct gs_geom {
    int64_t n, c, d, h, w, npts;
    int mode, pad;
    bool ac, three;
};

/* The shared per-point functions by element type. */
GK_DEV void gs_fwd(const float *x, int64_t C, int64_t H, int64_t W, double gx, double gy, int m, int p, bool ac, float *y, int64_t os)
{
    opc_gs_forward_f32(x, C, H, W, gx, gy, m, p, ac, y, os);
}
GK_DEV void gs_fwd(const double *x, int64_t C, int64_t H, int64_t W, double gx, double gy, int m, int p, bool ac, double *y, int64_t os)
{
    opc_gs_forward_f64(x, C, H, W, gx, gy, m, p, ac, y, os);
}
GK_DEV void gs_bwd_in(const float *dy, const float *grid, int64_t n, int64_t H, int64_t W, int m, int p, bool ac, float *dx)
{
    opc_gs_backward_input_f32(dy, grid, n, H, W, m, p, ac, dx);
}
GK_DEV void gs_bwd_in(const double *dy, const double *grid, int64_t n, int64_t H, int64_t W, int m, int p, bool ac, double *dx)
{
    opc_gs_backward_input_f64(dy, grid, n, H, W, m, p, ac, dx);
}
GK_DEV void gs_bwd_grid(const float *x, int64_t C, int64_t H, int64_t W, double gx, double gy, const float *dy, int64_t os,
                        int m, int p, bool ac, float *dg)
{
    opc_gs_backward_grid_f32(x, C, H, W, gx, gy, dy, os, m, p, ac, dg);
}
GK_DEV void gs_bwd_grid(const double *x, int64_t C, int64_t H, int64_t W, double gx, double gy, const double *dy, int64_t os,
                        int m, int p, bool ac, double *dg)
{
    opc_gs_backward_grid_f64(x, C, H, W, gx, gy, dy, os, m, p, ac, dg);
}
GK_DEV void gs3_fwd(const float *x, const gs_geom &g, const double *gp, float *y)
{
    opc_gs3_forward_f32(x, g.c, g.d, g.h, g.w, gp, g.mode, g.pad, g.ac, y, g.npts);
}
GK_DEV void gs3_fwd(const double *x, const gs_geom &g, const double *gp, double *y)
{
    opc_gs3_forward_f64(x, g.c, g.d, g.h, g.w, gp, g.mode, g.pad, g.ac, y, g.npts);
}
GK_DEV void gs3_bwd_in(const float *dy, const float *grid, const gs_geom &g, float *dx)
{
    opc_gs3_backward_input_f32(dy, grid, g.npts, g.d, g.h, g.w, g.mode, g.pad, g.ac, dx);
}
GK_DEV void gs3_bwd_in(const double *dy, const double *grid, const gs_geom &g, double *dx)
{
    opc_gs3_backward_input_f64(dy, grid, g.npts, g.d, g.h, g.w, g.mode, g.pad, g.ac, dx);
}
GK_DEV void gs3_bwd_grid(const float *x, const gs_geom &g, const double *gp, const float *dy, float *dg)
{
    opc_gs3_backward_grid_f32(x, g.c, g.d, g.h, g.w, gp, dy, g.npts, g.mode, g.pad, g.ac, dg);
}
GK_DEV void gs3_bwd_grid(const double *x, const gs_geom &g, const double *gp, const double *dy, double *dg)
{
    opc_gs3_backward_grid_f64(x, g.c, g.d, g.h, g.w, gp, dy, g.npts, g.mode, g.pad, g.ac, dg);
}

template <class T> __global__ void k_gs_forward(gs_geom g, const T *x, const T *grid, T *y)
{
    const int64_t vol = g.d * g.h * g.w;
    GK_LOOP(i, g.n * g.npts)
    {
        const int64_t s = i / g.npts, p = i % g.npts;
        T *yp = y + s * g.c * g.npts + p;
        if (g.three) {
            const double gp[3] = {(double)grid[3 * i], (double)grid[3 * i + 1], (double)grid[3 * i + 2]};
            gs3_fwd(x + s * g.c * vol, g, gp, yp);
        } else {
            gs_fwd(x + s * g.c * vol, g.c, g.h, g.w, (double)grid[2 * i], (double)grid[2 * i + 1], g.mode, g.pad, g.ac, yp,
                   g.npts);
        }
    }
}

template <class T> __global__ void k_gs_backward_input(gs_geom g, const T *dy, const T *grid, T *dx)
{
    const int64_t vol = g.d * g.h * g.w, k = g.three ? 3 : 2;
    GK_LOOP(q, g.n * g.c)
    {
        const T *gq = grid + q / g.c * k * g.npts;
        if (g.three) gs3_bwd_in(dy + q * g.npts, gq, g, dx + q * vol);
        else gs_bwd_in(dy + q * g.npts, gq, g.npts, g.h, g.w, g.mode, g.pad, g.ac, dx + q * vol);
    }
}

template <class T> __global__ void k_gs_backward_grid(gs_geom g, const T *dy, const T *x, const T *grid, T *dgrid)
{
    const int64_t vol = g.d * g.h * g.w;
    GK_LOOP(i, g.n * g.npts)
    {
        const int64_t s = i / g.npts, p = i % g.npts;
        const T *xs = x + s * g.c * vol, *dys = dy + s * g.c * g.npts + p;
        if (g.three) {
            const double gp[3] = {(double)grid[3 * i], (double)grid[3 * i + 1], (double)grid[3 * i + 2]};
            gs3_bwd_grid(xs, g, gp, dys, dgrid + 3 * i);
        } else {
            gs_bwd_grid(xs, g.c, g.h, g.w, (double)grid[2 * i], (double)grid[2 * i + 1], dys, g.npts, g.mode, g.pad, g.ac,
                        dgrid + 2 * i);
        }
    }
}

/* The geometry of a call (nd: the input's dims, 4 or 5), as the CPU plugin checks it. */
int gs_geometry(const opr_kernel_call *c, int nd, const int64_t *xs, const opr_tensor_view *grid, int imode, int ipad, gs_geom *g)
{
    if (!grid || grid->ndim != nd || grid->shape[nd - 1] != nd - 2 || grid->shape[0] != xs[0])
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grid must be [N, %sH_out, W_out, %d] with the input's N", c->op,
                       nd == 5 ? "D_out, " : "", nd - 2);
    const int64_t mode = gk_arg_i(c, imode), pad = gk_arg_i(c, ipad), most = nd == 5 ? OPC_GS_NEAREST : OPC_GS_BICUBIC;
    if (mode < OPC_GS_BILINEAR || mode > most)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: interpolation_mode %lld is not 0 (bilinear), 1 (nearest)%s", c->op,
                       (long long)mode, nd == 5 ? "" : " or 2 (bicubic)");
    if (pad < OPC_GS_ZEROS || pad > OPC_GS_REFLECTION)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: padding_mode %lld is not 0, 1 or 2", c->op, (long long)pad);
    g->three = nd == 5;
    g->n = xs[0], g->c = xs[1], g->d = g->three ? xs[2] : 1, g->h = xs[nd - 2], g->w = xs[nd - 1];
    g->npts = grid->shape[1] * grid->shape[2] * (g->three ? grid->shape[3] : 1);
    g->mode = (int)mode, g->pad = (int)pad, g->ac = gk_arg_b(c, imode + 2);
    return OPR_OK;
}

template <class T> void launch_forward(const gk_ctx *k, const gs_geom &g, const void *x, const void *grid, void *y)
{
    gk_launch(k_gs_forward<T>, gk_blocks(g.n * g.npts), GK_THREADS, 0, k->stream, g, (const T *)x, (const T *)grid, (T *)y);
}

template <class T>
void launch_backward(const gk_ctx *k, const gs_geom &g, const void *dy, const void *x, const void *grid, void *dx, void *dgrid)
{
    if (dx)
        gk_launch(k_gs_backward_input<T>, gk_blocks(g.n * g.c), GK_THREADS, 0, k->stream, g, (const T *)dy, (const T *)grid,
                  (T *)dx);
    if (dgrid)
        gk_launch(k_gs_backward_grid<T>, gk_blocks(g.n * g.npts), GK_THREADS, 0, k->stream, g, (const T *)dy, (const T *)x,
                  (const T *)grid, (T *)dgrid);
}

/* grid_sampler_2d / grid_sampler_3d(input, grid, interpolation_mode, padding_mode,
 * align_corners) */
int k_grid_sampler(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    const int nd = strstr(c->op, "_3d") ? 5 : 4;
    const opr_tensor_view *x = gk_arg_t(c, 0), *grid = gk_arg_t(c, 1);
    opr_tensor_view *y = c->outputs[0];
    if (!x || x->ndim != nd) return GK_FAIL(c, OPR_ERR_INVALID, "%s: input must have %d dims [N, C, ...]", c->op, nd);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", c->op, gk_dtype_name(x->dtype), GPU_NAME);
    gs_geom g;
    if ((rc = gs_geometry(c, nd, x->shape, grid, 2, 3, &g))) return rc;
    if ((rc = gk_check_dtype(c, c->op, "grid", grid, x->dtype))) return rc;
    if (y->numel == 0) return OPR_OK;
    gk_buf bx, bg;
    const void *px, *pg;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = gk_dense(&k, grid, &bg, &pg))) return rc;
    if (x->dtype == OPR_F32) launch_forward<float>(&k, g, px, pg, y->data);
    else launch_forward<double>(&k, g, px, pg, y->data);
    return gk_launched(&k, "grid sampler kernel");
}

/* The four backward names of either dimension. */
int k_grid_sampler_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    opr_tensor_view *dx, *dgrid;
    int64_t xs[5];
    char why[200];
    if (!opc_gs_backward_outputs(c, &dx, &dgrid, xs, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int nd = strstr(c->op, "_3d") ? 5 : 4;
    const opr_tensor_view *gy = gk_arg_t(c, 0), *x = gk_arg_t(c, 1), *grid = gk_arg_t(c, 2);
    if (!gy || !grid) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output and grid", c->op);
    if (dgrid && !x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: the grid's gradient needs the input", c->op);
    if (gy->dtype != OPR_F32 && gy->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", c->op, gk_dtype_name(gy->dtype), GPU_NAME);
    gs_geom g;
    if ((rc = gs_geometry(c, nd, xs, grid, 3, 4, &g))) return rc;
    if ((rc = gk_check_dtype(c, c->op, "grid", grid, gy->dtype))) return rc;
    if (x && (rc = gk_check_dtype(c, c->op, "input", x, gy->dtype))) return rc;
    bool shape_ok = gy->ndim == nd && gy->shape[0] == g.n && gy->shape[1] == g.c;
    for (int d = 2; shape_ok && d < nd; d++) shape_ok = gy->shape[d] == grid->shape[d - 1];
    if (!shape_ok) return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad_output must be [N, C, *out] of the input and the grid", c->op);
    if (dx && !dx->numel) dx = nullptr;
    if (dgrid && !dgrid->numel) dgrid = nullptr;
    if (!dx && !dgrid) return OPR_OK;
    gk_buf bgy, bx, bgrid;
    const void *pgy, *pgrid, *px = nullptr;
    if ((rc = gk_dense(&k, gy, &bgy, &pgy)) || (rc = gk_dense(&k, grid, &bgrid, &pgrid)) ||
        (dgrid && (rc = gk_dense(&k, x, &bx, &px))))
        return rc;
    void *pdx = dx ? dx->data : nullptr, *pdg = dgrid ? dgrid->data : nullptr;
    if (gy->dtype == OPR_F32) launch_backward<float>(&k, g, pgy, px, pgrid, pdx, pdg);
    else launch_backward<double>(&k, g, pgy, px, pgrid, pdx, pdg);
    return gk_launched(&k, "grid sampler backward kernel");
}

} // namespace

int gk_register_grid_sample(opr_plugin *self)
{
    /* the fused entries where the YAML's key is (input, grid), the order of its outputs */
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"grid_sampler_2d", k_grid_sampler},
        {"grid_sampler_2d_backward", k_grid_sampler_backward},
#ifdef OPR_GK_GRID_SAMPLER_2D_BACKWARD
        {"grid_sampler_2d_backward_fused", k_grid_sampler_backward},
#endif
        {"grid_sampler_2d_backward_input", k_grid_sampler_backward},
        {"grid_sampler_2d_backward_grid", k_grid_sampler_backward},
        {"grid_sampler_3d", k_grid_sampler},
        {"grid_sampler_3d_backward", k_grid_sampler_backward},
#ifdef OPR_GK_GRID_SAMPLER_3D_BACKWARD
        {"grid_sampler_3d_backward_fused", k_grid_sampler_backward},
#endif
        {"grid_sampler_3d_backward_input", k_grid_sampler_backward},
        {"grid_sampler_3d_backward_grid", k_grid_sampler_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register_upcast(self, table[i].op, GK_FLOATS, table[i].fn);
        if (rc) return rc;
    }
    return OPR_OK;
}
