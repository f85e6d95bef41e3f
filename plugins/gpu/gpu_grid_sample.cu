/* grid_sampler_2d and its gradients (registry/ops/grid_sample.yaml), f32 and f64 (f16
 * and bf16 through f32, gpu_half.cu): the
 * CPU plugin's kernels (plugins/cpu/cpu_grid_sample.c, whose header comment gives the
 * four backward names and their arguments) on the same per-point arithmetic
 * (plugins/common/opc_grid_sample.h), so both backends give the same numbers. One
 * thread per output point (forward, the grid's gradient) or per channel plane (the
 * input's gradient: each plane is written by one thread, so no atomics and the sums do
 * not depend on the launch). */
#include "gpu_common.cuh"
#include "../common/opc_grid_sample.h"

#include <string.h>

namespace {

struct gs_geom {
    int64_t n, c, h, w, npts;
    int mode, pad;
    bool ac;
};

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

template <class T> __global__ void k_gs_forward(gs_geom g, const T *x, const T *grid, T *y)
{
    GK_LOOP(i, g.n * g.npts)
    {
        const int64_t s = i / g.npts, p = i % g.npts;
        gs_fwd(x + s * g.c * g.h * g.w, g.c, g.h, g.w, (double)grid[2 * i], (double)grid[2 * i + 1], g.mode, g.pad, g.ac,
               y + s * g.c * g.npts + p, g.npts);
    }
}

template <class T> __global__ void k_gs_backward_input(gs_geom g, const T *dy, const T *grid, T *dx)
{
    GK_LOOP(q, g.n * g.c)
    gs_bwd_in(dy + q * g.npts, grid + q / g.c * 2 * g.npts, g.npts, g.h, g.w, g.mode, g.pad, g.ac, dx + q * g.h * g.w);
}

template <class T> __global__ void k_gs_backward_grid(gs_geom g, const T *dy, const T *x, const T *grid, T *dgrid)
{
    GK_LOOP(i, g.n * g.npts)
    {
        const int64_t s = i / g.npts, p = i % g.npts;
        gs_bwd_grid(x + s * g.c * g.h * g.w, g.c, g.h, g.w, (double)grid[2 * i], (double)grid[2 * i + 1],
                    dy + s * g.c * g.npts + p, g.npts, g.mode, g.pad, g.ac, dgrid + 2 * i);
    }
}

int gs_geometry(const opr_kernel_call *c, const int64_t *xs, const opr_tensor_view *grid, int imode, int ipad, gs_geom *g)
{
    if (!grid || grid->ndim != 4 || grid->shape[3] != 2 || grid->shape[0] != xs[0])
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grid must be [N, H_out, W_out, 2] with the input's N", c->op);
    const int64_t mode = gk_arg_i(c, imode), pad = gk_arg_i(c, ipad);
    if (mode < OPC_GS_BILINEAR || mode > OPC_GS_BICUBIC)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: interpolation_mode %lld is not 0 (bilinear), 1 (nearest) or 2 (bicubic)", c->op,
                       (long long)mode);
    if (pad < OPC_GS_ZEROS || pad > OPC_GS_REFLECTION)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: padding_mode %lld is not 0, 1 or 2", c->op, (long long)pad);
    g->n = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3], g->npts = grid->shape[1] * grid->shape[2];
    g->mode = (int)mode, g->pad = (int)pad, g->ac = gk_arg_b(c, imode + 2);
    return OPR_OK;
}

int k_grid_sampler_2d(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "grid_sampler_2d", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *grid = gk_arg_t(c, 1);
    opr_tensor_view *y = c->outputs[0];
    if (!x || x->ndim != 4) return GK_FAIL(c, OPR_ERR_INVALID, "%s: input must be [N, C, H, W]", c->op);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", c->op, gk_dtype_name(x->dtype), GPU_NAME);
    gs_geom g;
    if ((rc = gs_geometry(c, x->shape, grid, 2, 3, &g))) return rc;
    if ((rc = gk_check_dtype(c, c->op, "grid", grid, x->dtype))) return rc;
    if (y->numel == 0) return OPR_OK;
    gk_buf bx, bg;
    const void *px, *pg;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = gk_dense(&k, grid, &bg, &pg))) return rc;
    const int64_t n = g.n * g.npts;
    if (x->dtype == OPR_F32)
        gk_launch(k_gs_forward<float>, gk_blocks(n), GK_THREADS, 0, k.stream, g, (const float *)px, (const float *)pg,
                  (float *)y->data);
    else
        gk_launch(k_gs_forward<double>, gk_blocks(n), GK_THREADS, 0, k.stream, g, (const double *)px, (const double *)pg,
                  (double *)y->data);
    return gk_launched(&k, "grid_sampler_2d kernel");
}

int k_grid_sampler_2d_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    opr_tensor_view *dx, *dgrid;
    int64_t xs[4];
    char why[200];
    if (!opc_gs_backward_outputs(c, &dx, &dgrid, xs, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const opr_tensor_view *gy = gk_arg_t(c, 0), *x = gk_arg_t(c, 1), *grid = gk_arg_t(c, 2);
    if (!gy || !grid) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output and grid", c->op);
    if (dgrid && !x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: the grid's gradient needs the input", c->op);
    if (gy->dtype != OPR_F32 && gy->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", c->op, gk_dtype_name(gy->dtype), GPU_NAME);
    gs_geom g;
    if ((rc = gs_geometry(c, xs, grid, 3, 4, &g))) return rc;
    if ((rc = gk_check_dtype(c, c->op, "grid", grid, gy->dtype))) return rc;
    if (x && (rc = gk_check_dtype(c, c->op, "input", x, gy->dtype))) return rc;
    if (gy->ndim != 4 || gy->shape[0] != g.n || gy->shape[1] != g.c || gy->shape[2] != grid->shape[1] ||
        gy->shape[3] != grid->shape[2])
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad_output must be [N, C, H_out, W_out] of the input and the grid", c->op);
    if (dx && !dx->numel) dx = nullptr;
    if (dgrid && !dgrid->numel) dgrid = nullptr;
    if (!dx && !dgrid) return OPR_OK;
    gk_buf bgy, bx, bgrid;
    const void *pgy, *pgrid, *px = nullptr;
    if ((rc = gk_dense(&k, gy, &bgy, &pgy)) || (rc = gk_dense(&k, grid, &bgrid, &pgrid)) ||
        (dgrid && (rc = gk_dense(&k, x, &bx, &px))))
        return rc;
    const bool f32 = gy->dtype == OPR_F32;
    if (dx) {
        const int64_t planes = g.n * g.c;
        if (f32)
            gk_launch(k_gs_backward_input<float>, gk_blocks(planes), GK_THREADS, 0, k.stream, g, (const float *)pgy,
                      (const float *)pgrid, (float *)dx->data);
        else
            gk_launch(k_gs_backward_input<double>, gk_blocks(planes), GK_THREADS, 0, k.stream, g, (const double *)pgy,
                      (const double *)pgrid, (double *)dx->data);
        if ((rc = gk_launched(&k, "grid_sampler_2d input gradient kernel"))) return rc;
    }
    if (dgrid) {
        const int64_t n = g.n * g.npts;
        if (f32)
            gk_launch(k_gs_backward_grid<float>, gk_blocks(n), GK_THREADS, 0, k.stream, g, (const float *)pgy,
                      (const float *)px, (const float *)pgrid, (float *)dgrid->data);
        else
            gk_launch(k_gs_backward_grid<double>, gk_blocks(n), GK_THREADS, 0, k.stream, g, (const double *)pgy,
                      (const double *)px, (const double *)pgrid, (double *)dgrid->data);
        if ((rc = gk_launched(&k, "grid_sampler_2d grid gradient kernel"))) return rc;
    }
    return OPR_OK;
}

} // namespace

int gk_register_grid_sample(opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"grid_sampler_2d", k_grid_sampler_2d},
        {"grid_sampler_2d_backward", k_grid_sampler_2d_backward},
#ifdef OPR_GK_GRID_SAMPLER_2D_BACKWARD /* the YAML's key is (input, grid), the order of its outputs */
        {"grid_sampler_2d_backward_fused", k_grid_sampler_2d_backward},
#endif
        {"grid_sampler_2d_backward_input", k_grid_sampler_2d_backward},
        {"grid_sampler_2d_backward_grid", k_grid_sampler_2d_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register_upcast(self, table[i].op, GK_FLOATS, table[i].fn);
        if (rc) return rc;
    }
    return OPR_OK;
}
