/* grid_sampler_2d, grid_sampler_3d and their gradients (registry/ops/grid_sample.yaml),
 * f32 and f64 (f16 and bf16 through f32, cpu_half.c), on the arithmetic of
 * plugins/common/opc_grid_sample.h and opc_grid_sample3d.h (shared with plugins/gpu, so
 * both give the same numbers). 2-d: input [N, C, H, W], grid [N, Ho, Wo, 2], output
 * [N, C, Ho, Wo]; 3-d: input [N, C, D, H, W], grid [N, Do, Ho, Wo, 3], output
 * [N, C, Do, Ho, Wo]. One backward kernel serves four names per dimension (Nd: 2d or
 * 3d), whose arguments sit at the same places (grad_output, input or its sizes, grid,
 * interpolation_mode, padding_mode, align_corners):
 *   grid_sampler_Nd_backward        ATen's op: output_mask[0] (arg 6) says whether to
 *                                   compute grad_input (else it is empty); grad_grid always;
 *   grid_sampler_Nd_backward_fused  the fused derivative entry: the mask in
 *                                   grad_input_mask, input NONE unless the plan saved it
 *                                   (its shape is then grad_input's);
 *   grid_sampler_Nd_backward_input  the input's gradient alone (arg 1 the input's sizes);
 *   grid_sampler_Nd_backward_grid   the grid's gradient alone.
 * The input's gradient is computed per channel plane or volume (one thread each, no two
 * writing the same element: the sums do not depend on the thread count), the grid's per
 * point. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_dtype.h"
#include "../common/opc_grid_sample3d.h"

#include <stdlib.h>
#include <string.h>

/* The geometry of a call, from the input's shape and the grid: 2-d, or 3-d when the
 * input has 5 dims (d the depth, 1 in 2-d). */
typedef struct gs_geom {
    int64_t n, c, d, h, w, npts; /* npts = (Do *) Ho * Wo */
    int mode, pad;
    bool ac;
} gs_geom;

static int gs_geometry(const opr_kernel_call *c, int nd, const int64_t *xs, const opr_tensor_view *grid, int imode, int ipad,
                       gs_geom *g)
{
    if (!grid || grid->ndim != nd || grid->shape[nd - 1] != nd - 2 || grid->shape[0] != xs[0])
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: grid must be [N, %sH_out, W_out, %d] with the input's N", c->op,
                        nd == 5 ? "D_out, " : "", nd - 2);
    const int64_t most = nd == 5 ? OPC_GS_NEAREST : OPC_GS_BICUBIC; /* bicubic is 2-d only */
    if (cpu_arg_i(c, imode) < OPC_GS_BILINEAR || cpu_arg_i(c, imode) > most)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: interpolation_mode %lld is not 0 (bilinear), 1 (nearest)%s", c->op,
                        (long long)cpu_arg_i(c, imode), nd == 5 ? "" : " or 2 (bicubic)");
    if (cpu_arg_i(c, ipad) < OPC_GS_ZEROS || cpu_arg_i(c, ipad) > OPC_GS_REFLECTION)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: padding_mode %lld is not 0, 1 or 2", c->op, (long long)cpu_arg_i(c, ipad));
    *g = (gs_geom){.n = xs[0], .c = xs[1], .d = nd == 5 ? xs[2] : 1, .h = xs[nd - 2], .w = xs[nd - 1],
                   .npts = grid->shape[1] * grid->shape[2] * (nd == 5 ? grid->shape[3] : 1), .mode = (int)cpu_arg_i(c, imode),
                   .pad = (int)cpu_arg_i(c, ipad), .ac = cpu_arg_b(c, imode + 2)};
    return OPR_OK;
}

#define GS_LOOPS(T, SUF)                                                                                            \
    static void gs_forward_##SUF(const gs_geom *g, const T *x, const T *grid, T *y)                                 \
    {                                                                                                               \
        const int64_t total = g->n * g->npts;                                                                       \
        _Pragma("omp parallel for if (total * g->c >= CPU_PAR_THRESHOLD) schedule(static)")                         \
        for (int64_t i = 0; i < total; i++) {                                                                       \
            const int64_t s = i / g->npts, p = i % g->npts;                                                         \
            opc_gs_forward_##SUF(x + s * g->c * g->h * g->w, g->c, g->h, g->w, (double)grid[2 * i],                  \
                                 (double)grid[2 * i + 1], g->mode, g->pad, g->ac, y + s * g->c * g->npts + p, g->npts); \
        }                                                                                                           \
    }                                                                                                               \
    static void gs_backward_##SUF(const gs_geom *g, const T *dy, const T *x, const T *grid, T *dx, T *dgrid)        \
    {                                                                                                               \
        const int64_t planes = g->n * g->c, total = g->n * g->npts;                                                 \
        if (dx) {                                                                                                   \
            _Pragma("omp parallel for if (planes * g->npts >= CPU_PAR_THRESHOLD) schedule(static)")                 \
            for (int64_t q = 0; q < planes; q++)                                                                    \
                opc_gs_backward_input_##SUF(dy + q * g->npts, grid + q / g->c * 2 * g->npts, g->npts, g->h, g->w,  \
                                            g->mode, g->pad, g->ac, dx + q * g->h * g->w);                          \
        }                                                                                                           \
        if (dgrid) {                                                                                                \
            _Pragma("omp parallel for if (total * g->c >= CPU_PAR_THRESHOLD) schedule(static)")                     \
            for (int64_t i = 0; i < total; i++) {                                                                   \
                const int64_t s = i / g->npts, p = i % g->npts;                                                     \
                opc_gs_backward_grid_##SUF(x + s * g->c * g->h * g->w, g->c, g->h, g->w, (double)grid[2 * i],       \
                                           (double)grid[2 * i + 1], dy + s * g->c * g->npts + p, g->npts, g->mode,  \
                                           g->pad, g->ac, dgrid + 2 * i);                                           \
            }                                                                                                       \
        }                                                                                                           \
    }
GS_LOOPS(float, f32)
GS_LOOPS(double, f64)

/* The same in 3-d (opc_grid_sample3d.h): grid points of 3 coordinates, volumes. */
#define GS3_LOOPS(T, SUF)                                                                                           \
    static void gs3_forward_##SUF(const gs_geom *g, const T *x, const T *grid, T *y)                                \
    {                                                                                                               \
        const int64_t total = g->n * g->npts, vol = g->d * g->h * g->w;                                             \
        _Pragma("omp parallel for if (total * g->c >= CPU_PAR_THRESHOLD) schedule(static)")                         \
        for (int64_t i = 0; i < total; i++) {                                                                       \
            const int64_t s = i / g->npts, p = i % g->npts;                                                         \
            const double gp[3] = {(double)grid[3 * i], (double)grid[3 * i + 1], (double)grid[3 * i + 2]};           \
            opc_gs3_forward_##SUF(x + s * g->c * vol, g->c, g->d, g->h, g->w, gp, g->mode, g->pad, g->ac,           \
                                  y + s * g->c * g->npts + p, g->npts);                                             \
        }                                                                                                           \
    }                                                                                                               \
    static void gs3_backward_##SUF(const gs_geom *g, const T *dy, const T *x, const T *grid, T *dx, T *dgrid)       \
    {                                                                                                               \
        const int64_t planes = g->n * g->c, total = g->n * g->npts, vol = g->d * g->h * g->w;                       \
        if (dx) {                                                                                                   \
            _Pragma("omp parallel for if (planes * g->npts >= CPU_PAR_THRESHOLD) schedule(static)")                 \
            for (int64_t q = 0; q < planes; q++)                                                                    \
                opc_gs3_backward_input_##SUF(dy + q * g->npts, grid + q / g->c * 3 * g->npts, g->npts, g->d, g->h,  \
                                             g->w, g->mode, g->pad, g->ac, dx + q * vol);                           \
        }                                                                                                           \
        if (dgrid) {                                                                                                \
            _Pragma("omp parallel for if (total * g->c >= CPU_PAR_THRESHOLD) schedule(static)")                     \
            for (int64_t i = 0; i < total; i++) {                                                                   \
                const int64_t s = i / g->npts, p = i % g->npts;                                                     \
                const double gp[3] = {(double)grid[3 * i], (double)grid[3 * i + 1], (double)grid[3 * i + 2]};       \
                opc_gs3_backward_grid_##SUF(x + s * g->c * vol, g->c, g->d, g->h, g->w, gp, dy + s * g->c * g->npts + p, \
                                            g->npts, g->mode, g->pad, g->ac, dgrid + 3 * i);                        \
            }                                                                                                       \
        }                                                                                                           \
    }
GS3_LOOPS(float, f32)
GS3_LOOPS(double, f64)

static int check_dtype(const opr_kernel_call *c, const opr_tensor_view *v, opr_dtype dt, const char *what)
{
    if (v && v->dtype != dt)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s is %s, expected %s", c->op, what, opc_dtype_name(v->dtype),
                        opc_dtype_name(dt));
    return OPR_OK;
}

/* grid_sampler_2d / grid_sampler_3d(input, grid, interpolation_mode, padding_mode,
 * align_corners) */
static int k_grid_sampler(const opr_kernel_call *c)
{
    const int nd = strstr(c->op, "_3d") ? 5 : 4;
    const opr_tensor_view *x = cpu_arg_t(c, 0), *grid = cpu_arg_t(c, 1);
    opr_tensor_view *y = c->outputs[0];
    if (!x || x->ndim != nd) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: input must have %d dims [N, C, ...]", c->op, nd);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported", c->op, opc_dtype_name(x->dtype));
    gs_geom g;
    int rc = gs_geometry(c, nd, x->shape, grid, 2, 3, &g);
    if (!rc) rc = check_dtype(c, grid, x->dtype, "grid");
    if (rc || y->numel == 0) return rc;
    void *ox = NULL, *og = NULL;
    const void *px = cpu_dense(x, &ox), *pg = cpu_dense(grid, &og);
    const bool f32 = x->dtype == OPR_F32;
    if (!px || !pg) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    else if (nd == 5) f32 ? gs3_forward_f32(&g, px, pg, y->data) : gs3_forward_f64(&g, px, pg, y->data);
    else f32 ? gs_forward_f32(&g, px, pg, y->data) : gs_forward_f64(&g, px, pg, y->data);
    free(ox);
    free(og);
    return rc;
}

/* The four backward names of either dimension (the header comment says how their
 * arguments differ). */
static int k_grid_sampler_backward(const opr_kernel_call *c)
{
    opr_tensor_view *dx, *dgrid;
    int64_t xs[5];
    char why[200];
    if (!opc_gs_backward_outputs(c, &dx, &dgrid, xs, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int nd = strstr(c->op, "_3d") ? 5 : 4;
    const opr_tensor_view *gy = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *grid = cpu_arg_t(c, 2);
    if (!gy || !grid) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output and grid", c->op);
    if (dgrid && !x) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the grid's gradient needs the input", c->op);
    if (gy->dtype != OPR_F32 && gy->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported", c->op, opc_dtype_name(gy->dtype));
    gs_geom g;
    int rc = gs_geometry(c, nd, xs, grid, 3, 4, &g);
    if (!rc) rc = check_dtype(c, grid, gy->dtype, "grid");
    if (!rc) rc = check_dtype(c, x, gy->dtype, "input");
    bool shape_ok = !rc && gy->ndim == nd && gy->shape[0] == g.n && gy->shape[1] == g.c;
    for (int d = 2; shape_ok && d < nd; d++) shape_ok = gy->shape[d] == grid->shape[d - 1];
    if (!rc && !shape_ok)
        rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s: grad_output must be [N, C, *out] of the input and the grid", c->op);
    if (rc) return rc;
    if (dx && !dx->numel) dx = NULL;
    if (dgrid && !dgrid->numel) dgrid = NULL;
    if (!dx && !dgrid) return OPR_OK;
    void *og = NULL, *ox = NULL, *ogrid = NULL;
    const void *pg = cpu_dense(gy, &og), *pgrid = cpu_dense(grid, &ogrid), *px = dgrid ? cpu_dense(x, &ox) : NULL;
    void *pdx = dx ? dx->data : NULL, *pdg = dgrid ? dgrid->data : NULL;
    const bool f32 = gy->dtype == OPR_F32;
    if (!pg || !pgrid || (dgrid && !px)) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    else if (nd == 5) f32 ? gs3_backward_f32(&g, pg, px, pgrid, pdx, pdg) : gs3_backward_f64(&g, pg, px, pgrid, pdx, pdg);
    else f32 ? gs_backward_f32(&g, pg, px, pgrid, pdx, pdg) : gs_backward_f64(&g, pg, px, pgrid, pdx, pdg);
    free(og);
    free(ox);
    free(ogrid);
    return rc;
}

int cpu_register_grid_sample(opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"grid_sampler_2d", k_grid_sampler},
        {"grid_sampler_2d_backward", k_grid_sampler_backward},
        {"grid_sampler_2d_backward_fused", k_grid_sampler_backward},
        {"grid_sampler_2d_backward_input", k_grid_sampler_backward},
        {"grid_sampler_2d_backward_grid", k_grid_sampler_backward},
        {"grid_sampler_3d", k_grid_sampler},
        {"grid_sampler_3d_backward", k_grid_sampler_backward},
        {"grid_sampler_3d_backward_fused", k_grid_sampler_backward},
        {"grid_sampler_3d_backward_input", k_grid_sampler_backward},
        {"grid_sampler_3d_backward_grid", k_grid_sampler_backward},
    };
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register_upcast(self, table[i].op, dtypes, table[i].fn);
        if (rc) return rc;
    }
    return OPR_OK;
}
