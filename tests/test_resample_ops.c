/* The `float[]?` argument type and the resampling ops that take it or that came with it
 * (registry/ops/resampling.yaml's .vec overloads, registry/ops/grid_sample.yaml): how a
 * float list is described, converted, bound by keyword and resolved; the .vec ops
 * against the ops they compose (one kernel, two names); the refused calls; and
 * properties of grid_sampler_2d and grid_sampler_3d that hold whatever the backend (an
 * identity grid reproduces the input; the ATen backward's mask; no bicubic in 3-d). Values of every sample against
 * PyTorch are in test_aten_samples, gradients in test_gradcheck. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)
#define INTS(...) opr_v_ints((int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define DBLS(...) opr_v_doubles((double[]){__VA_ARGS__}, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)))

/* Asserts a and b have the same shape and values within tol. */
static void expect_same(const opr_tensor *a, const opr_tensor *b, double tol, const char *what)
{
    ck_assert_msg(opr_tensor_ndim(a) == opr_tensor_ndim(b), "%s: %d-d against %d-d", what, opr_tensor_ndim(a),
                  opr_tensor_ndim(b));
    for (int d = 0; d < opr_tensor_ndim(a); d++)
        ck_assert_msg(opr_tensor_size(a, d) == opr_tensor_size(b, d), "%s: dim %d is %lld against %lld", what, d,
                      (long long)opr_tensor_size(a, d), (long long)opr_tensor_size(b, d));
    double *va = tu_to_f64(a), *vb = tu_to_f64(b);
    for (int64_t i = 0; i < opr_tensor_numel(a); i++)
        if (!(fabs(va[i] - vb[i]) <= tol)) {
            const double x = va[i], y = vb[i];
            free(va);
            free(vb);
            ck_abort_msg("%s[%lld]: %.17g against %.17g", what, (long long)i, x, y);
        }
    free(va);
    free(vb);
}

/* float[]? as the schema API reports it, and an int list converted where a float list is
 * expected (opr_call), by keyword (opr_call_kw) and by overload resolution. */
START_TEST(test_float_list_argument)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *vec = opr_op_find(ctx, "upsample_nearest2d.vec");
    ck_assert_ptr_nonnull(vec);
    ck_assert_str_eq(opr_op_arg_type(vec, 2), "float[]?");
    ck_assert_int_eq(opr_op_arg_kind(vec, 2), OPR_V_DOUBLE_LIST);
    ck_assert(opr_op_arg_optional(vec, 2));
    ck_assert(!opr_op_arg_default(vec, 2, NULL)); /* ATen's scale_factors has no default */

    tu_seed(7);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 4, (int64_t[]){2, 3, 4, 3}, -1, 1);
    opr_tensor *fl = tu_call1(ctx, "upsample_nearest2d.vec", ARGS(TV(x), opr_v_none(), DBLS(2.0, 3.0)));
    opr_tensor *il = tu_call1(ctx, "upsample_nearest2d.vec", ARGS(TV(x), opr_v_none(), INTS(2, 3)));
    opr_tensor *base = tu_call1(ctx, "upsample_nearest2d", ARGS(TV(x), INTS(8, 9), opr_v_double(2), opr_v_double(3)));
    expect_same(fl, base, 0, "upsample_nearest2d.vec [2.0, 3.0] against upsample_nearest2d");
    expect_same(il, base, 0, "upsample_nearest2d.vec [2, 3] against upsample_nearest2d");

    const opr_kwarg kw = {"scale_factors", DBLS(2.0, 3.0)};
    opr_value pos[] = {TV(x), opr_v_none()};
    opr_tensor *r = NULL;
    ck_assert_msg(opr_call_kw(vec, pos, 2, &kw, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_same(r, base, 0, "upsample_nearest2d.vec by keyword");
    opr_tensor_release(r);

    /* a float list picks the .vec overload; output_size and scales pick the other */
    opr_value v[] = {TV(x), opr_v_none(), DBLS(1.5, 1.5)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "upsample_nearest2d", v, 3, NULL, 0), vec);
    opr_value o[] = {TV(x), INTS(5, 5)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "upsample_nearest2d", o, 2, NULL, 0), opr_op_find(ctx, "upsample_nearest2d"));

    /* a list literal with a non-integral item is a float list: interpolate's
     * [scale_factor, scale_factor] hands 1.5 on as the sampling scale */
    opr_tensor *ip = tu_call1(ctx, "interpolate", ARGS(TV(x), opr_v_none(), opr_v_double(1.5), opr_v_string("bilinear")));
    opr_tensor *bv = tu_call1(ctx, "upsample_bilinear2d.vec", ARGS(TV(x), opr_v_none(), opr_v_bool(false), DBLS(1.5, 1.5)));
    opr_tensor *bs = tu_call1(ctx, "upsample_bilinear2d", ARGS(TV(x), INTS(6, 4), opr_v_bool(false), opr_v_double(1.5), opr_v_double(1.5)));
    expect_same(ip, bv, 0, "interpolate against upsample_bilinear2d.vec");
    expect_same(bv, bs, 0, "upsample_bilinear2d.vec against upsample_bilinear2d with the scales");
    /* the scale, not in / out, sets the step: 4 rows at 1.5 are 6, read from 1 / 1.5 apart */
    opr_tensor *sized = tu_call1(ctx, "upsample_bilinear2d", ARGS(TV(x), INTS(6, 4), opr_v_bool(false)));
    double *a = tu_to_f64(bv), *b = tu_to_f64(sized);
    double diff = 0;
    for (int64_t i = 0; i < opr_tensor_numel(bv); i++) diff = fmax(diff, fabs(a[i] - b[i]));
    free(a);
    free(b);
    ck_assert_msg(diff > 1e-6, "the scale factors changed nothing (largest difference %g)", diff);

    opr_tensor *all[] = {x, fl, il, base, ip, bv, bs, sized};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* What PyTorch refuses is refused, with a message and no crash. */
START_TEST(test_refused)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = tu_rand(ctx, OPR_F64, 4, (int64_t[]){1, 2, 3, 3}, -1, 1);
    opr_tensor *grid = tu_rand(ctx, OPR_F64, 4, (int64_t[]){1, 2, 2, 2}, -1, 1);
    opr_tensor *grid3 = tu_rand(ctx, OPR_F64, 4, (int64_t[]){1, 2, 2, 3}, -1, 1);
    opr_tensor *grid_n2 = tu_rand(ctx, OPR_F64, 4, (int64_t[]){2, 2, 2, 2}, -1, 1);
    const char *vec = "upsample_nearest2d.vec";
    tu_expect_fail(ctx, vec, ARGS(TV(x), INTS(4, 4), DBLS(2.0, 2.0)), 1, OPR_ERR_INVALID, "check failed");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), opr_v_none()), 1, OPR_ERR_INVALID, "check failed");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), DBLS(2.0, 2.0, 2.0)), 1, OPR_ERR_INVALID, "len(scale_factors)");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), DBLS(0.1, 2.0)), 1, OPR_ERR_INVALID, "output_size[0] > 0");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), DBLS(1, 2, 3, 4, 5, 6, 7, 8, 9)), 1, OPR_ERR_INVALID, "0 to 8 floats");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), opr_v_doubles(NULL, 2)), 1, OPR_ERR_INVALID, "NULL items");
    tu_expect_fail(ctx, vec, ARGS(TV(x), opr_v_none(), opr_v_double(2.0)), 1, OPR_ERR_INVALID, "expects float[]");

    const char *gs = "grid_sampler_2d";
    tu_expect_fail(ctx, gs, ARGS(TV(x), TV(grid), opr_v_int(3), opr_v_int(0), opr_v_bool(false)), 1, OPR_ERR_INVALID,
                   "interpolation_mode");
    tu_expect_fail(ctx, gs, ARGS(TV(x), TV(grid), opr_v_int(0), opr_v_int(3), opr_v_bool(false)), 1, OPR_ERR_INVALID,
                   "padding_mode");
    tu_expect_fail(ctx, gs, ARGS(TV(x), TV(grid3), opr_v_int(0), opr_v_int(0), opr_v_bool(false)), 1, OPR_ERR_INVALID,
                   "size(grid, 3) == 2");
    tu_expect_fail(ctx, gs, ARGS(TV(x), TV(grid_n2), opr_v_int(0), opr_v_int(0), opr_v_bool(false)), 1, OPR_ERR_INVALID,
                   "size(grid, 0) == size(input, 0)");
    tu_expect_fail(ctx, "grid_sample", ARGS(TV(x), TV(grid), opr_v_string("area")), 1, OPR_ERR_INVALID, "mode");
    opr_tensor *all[] = {x, grid, grid3, grid_n2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* The grid whose points are the pixel centres (align_corners: -1 and 1 are the corner
 * centres) reads every pixel back, in every mode and padding; shifted by half a pixel
 * to the left, bilinear gives the mean of each pixel and its left neighbour (zeros
 * padding: half the first column). */
START_TEST(test_grid_sampler_identity)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t N = 2, C = 3, H = 4, W = 5;
    opr_tensor *x = tu_rand(ctx, OPR_F64, 4, (int64_t[]){N, C, H, W}, -1, 1);
    double *g = malloc((size_t)(N * H * W * 2) * sizeof *g), *gs = malloc((size_t)(N * H * W * 2) * sizeof *gs);
    ck_assert(g && gs);
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < W; j++) {
                double *p = g + ((n * H + i) * W + j) * 2, *q = gs + ((n * H + i) * W + j) * 2;
                p[0] = -1 + 2.0 * (double)j / (double)(W - 1);
                p[1] = -1 + 2.0 * (double)i / (double)(H - 1);
                q[0] = p[0] - 1.0 / (double)(W - 1); /* half a pixel: a pixel is 2 / (W - 1) wide */
                q[1] = p[1];
            }
    opr_tensor *grid = opr_tensor_from_data(ctx, OPR_F64, 4, (int64_t[]){N, H, W, 2}, g, OPR_CPU);
    opr_tensor *shifted = opr_tensor_from_data(ctx, OPR_F64, 4, (int64_t[]){N, H, W, 2}, gs, OPR_CPU);
    free(g);
    free(gs);
    for (int mode = 0; mode < 3; mode++) /* bicubic's weights at t = 0 are 0, 1, 0, 0 */
        for (int pad = 0; pad < 3; pad++) {
            opr_tensor *y = tu_call1(ctx, "grid_sampler_2d", ARGS(TV(x), TV(grid), opr_v_int(mode), opr_v_int(pad), opr_v_bool(true)));
            char what[64];
            snprintf(what, sizeof what, "identity grid, mode %d, padding %d", mode, pad);
            expect_same(y, x, 1e-12, what);
            opr_tensor_release(y);
        }
    opr_tensor *y = tu_call1(ctx, "grid_sampler_2d", ARGS(TV(x), TV(shifted), opr_v_int(0), opr_v_int(0), opr_v_bool(true)));
    double *vx = tu_to_f64(x), *vy = tu_to_f64(y);
    for (int64_t i = 0; i < N * C * H * W; i++) {
        const double left = i % W ? vx[i - 1] : 0;
        ck_assert_msg(fabs(vy[i] - 0.5 * (vx[i] + left)) < 1e-12, "shifted grid [%lld]: %.17g, expected %.17g", (long long)i,
                      vy[i], 0.5 * (vx[i] + left));
    }
    free(vx);
    free(vy);
    opr_tensor_release(y);
    opr_tensor_release(grid);
    opr_tensor_release(shifted);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* ATen's grid_sampler_2d_backward: grad_input empty where output_mask[0] is 0, the
 * grid's gradient always (as ATen), and the same gradients as autograd's. */
START_TEST(test_grid_sampler_backward_op)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(11);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 4, (int64_t[]){2, 2, 3, 4}, -1, 1);
    opr_tensor *grid = tu_rand(ctx, OPR_F64, 4, (int64_t[]){2, 3, 2, 2}, -1.3, 1.3);
    opr_tensor *gy = tu_rand(ctx, OPR_F64, 4, (int64_t[]){2, 2, 3, 2}, -1, 1);
    const opr_op *bw = opr_op_find(ctx, "grid_sampler_2d_backward");
    ck_assert_ptr_nonnull(bw);
    opr_tensor *out[2] = {NULL, NULL}, *both[2] = {NULL, NULL};
    ck_assert_msg(!opr_call(bw, ARGS(TV(gy), TV(x), TV(grid), opr_v_int(0), opr_v_int(2), opr_v_bool(false), INTS(0, 1)), out, 2),
                  "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_numel(out[0]), 0);
    ck_assert_int_eq(opr_tensor_numel(out[1]), opr_tensor_numel(grid));
    ck_assert_msg(!opr_call(bw, ARGS(TV(gy), TV(x), TV(grid), opr_v_int(0), opr_v_int(2), opr_v_bool(false), INTS(1, 0)), both, 2),
                  "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_numel(both[0]), opr_tensor_numel(x));
    expect_same(both[1], out[1], 0, "the grid's gradient whatever output_mask[1]");

    ck_assert(!opr_set_requires_grad(x, true));
    ck_assert(!opr_set_requires_grad(grid, true));
    opr_tensor *y = tu_call1(ctx, "grid_sampler_2d", ARGS(TV(x), TV(grid), opr_v_int(0), opr_v_int(2), opr_v_bool(false)));
    opr_tensor *grads[2] = {NULL, NULL}, *inputs[2] = {x, grid};
    ck_assert_msg(!opr_autograd_grad(&y, &gy, 1, inputs, 2, grads, NULL), "%s", opr_last_error());
    expect_same(grads[0], both[0], 1e-12, "autograd's input gradient against grid_sampler_2d_backward");
    expect_same(grads[1], both[1], 1e-12, "autograd's grid gradient against grid_sampler_2d_backward");
    opr_tensor *all[] = {x, grid, gy, out[0], out[1], both[0], both[1], y, grads[0], grads[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* Under opr_vmap (no batching rule: one call per sample) the float list reaches each
 * call: batch B of [N, C, H, W] samples gives what one call on [B * N, C, H, W] gives,
 * the planes being independent; grid_sampler_2d the same with its grid batched too. */
static opr_status vmap_vec(void *user, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)user, (void)nin, (void)nout;
    const opr_op *op = opr_op_find(opr_tensor_ctx(in[0]), "upsample_bilinear2d.vec");
    opr_value a[] = {TV(in[0]), opr_v_none(), opr_v_bool(false), DBLS(1.7, 2.0)};
    return opr_call(op, a, 4, out, 1);
}
static opr_status vmap_grid(void *user, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)user, (void)nin, (void)nout;
    const opr_op *op = opr_op_find(opr_tensor_ctx(in[0]), "grid_sampler_2d");
    opr_value a[] = {TV(in[0]), TV(in[1]), opr_v_int(2), opr_v_int(2), opr_v_bool(false)};
    return opr_call(op, a, 5, out, 1);
}

START_TEST(test_vmap)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(5);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 5, (int64_t[]){3, 2, 2, 3, 4}, -1, 1);
    opr_tensor *grid = tu_rand(ctx, OPR_F64, 5, (int64_t[]){3, 2, 2, 3, 2}, -1.5, 1.5);
    opr_tensor *y = NULL, *yg = NULL;
    ck_assert_msg(!opr_vmap(ctx, vmap_vec, NULL, &x, (int[]){0}, 1, &y, (int[]){0}, 1, NULL), "%s", opr_last_error());
    opr_tensor *flat = tu_call1(ctx, "reshape", ARGS(TV(x), INTS(6, 2, 3, 4)));
    opr_tensor *want = tu_call1(ctx, "upsample_bilinear2d.vec", ARGS(TV(flat), opr_v_none(), opr_v_bool(false), DBLS(1.7, 2.0)));
    opr_tensor *want5 = tu_call1(ctx, "reshape", ARGS(TV(want), INTS(3, 2, 2, 5, 8)));
    expect_same(y, want5, 1e-12, "upsample_bilinear2d.vec under opr_vmap");
    opr_tensor *ins[] = {x, grid};
    ck_assert_msg(!opr_vmap(ctx, vmap_grid, NULL, ins, (int[]){0, 0}, 2, &yg, (int[]){0}, 1, NULL), "%s", opr_last_error());
    opr_tensor *gflat = tu_call1(ctx, "reshape", ARGS(TV(grid), INTS(6, 2, 3, 2)));
    opr_tensor *gwant = tu_call1(ctx, "grid_sampler_2d", ARGS(TV(flat), TV(gflat), opr_v_int(2), opr_v_int(2), opr_v_bool(false)));
    opr_tensor *gwant5 = tu_call1(ctx, "reshape", ARGS(TV(gwant), INTS(3, 2, 2, 2, 3)));
    expect_same(yg, gwant5, 1e-12, "grid_sampler_2d under opr_vmap");
    opr_tensor *all[] = {x, grid, y, yg, flat, want, want5, gflat, gwant, gwant5};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* grid_sampler_3d: the grid of the voxel centres (align_corners) reads every voxel back
 * in both modes and every padding, and grid_sample takes 5-d inputs to it; bicubic is
 * refused in 3-d (PyTorch refuses it too), by grid_sampler_3d and by grid_sample. */
START_TEST(test_grid_sampler_3d)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t N = 2, C = 2, D = 3, H = 4, W = 5, pts = N * D * H * W;
    opr_tensor *x = tu_rand(ctx, OPR_F64, 5, (int64_t[]){N, C, D, H, W}, -1, 1);
    double *g = malloc((size_t)(pts * 3) * sizeof *g);
    ck_assert(g);
    for (int64_t i = 0; i < pts; i++) {
        const int64_t j = i % W, k = i / W % H, l = i / (W * H) % D;
        g[3 * i] = -1 + 2.0 * (double)j / (double)(W - 1);
        g[3 * i + 1] = -1 + 2.0 * (double)k / (double)(H - 1);
        g[3 * i + 2] = -1 + 2.0 * (double)l / (double)(D - 1);
    }
    opr_tensor *grid = opr_tensor_from_data(ctx, OPR_F64, 5, (int64_t[]){N, D, H, W, 3}, g, OPR_CPU);
    free(g);
    for (int mode = 0; mode < 2; mode++)
        for (int pad = 0; pad < 3; pad++) {
            opr_tensor *y = tu_call1(ctx, "grid_sampler_3d", ARGS(TV(x), TV(grid), opr_v_int(mode), opr_v_int(pad), opr_v_bool(true)));
            char what[64];
            snprintf(what, sizeof what, "3-d identity grid, mode %d, padding %d", mode, pad);
            expect_same(y, x, 1e-12, what);
            opr_tensor_release(y);
        }
    opr_tensor *y = tu_call1(ctx, "grid_sample", ARGS(TV(x), TV(grid), opr_v_string("nearest"), opr_v_string("border"),
                                                      opr_v_bool(true)));
    expect_same(y, x, 1e-12, "grid_sample on 5-d input");
    opr_tensor_release(y);
    tu_expect_fail(ctx, "grid_sampler_3d", ARGS(TV(x), TV(grid), opr_v_int(2), opr_v_int(0), opr_v_bool(false)), 1,
                   OPR_ERR_INVALID, "interpolation_mode");
    tu_expect_fail(ctx, "grid_sample", ARGS(TV(x), TV(grid), opr_v_string("bicubic")), 1, OPR_ERR_INVALID, "bicubic");
    opr_tensor_release(grid);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("resample_ops");
    TCase *tc = tcase_create("resample_ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_float_list_argument);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_grid_sampler_identity);
    tcase_add_test(tc, test_grid_sampler_backward_op);
    tcase_add_test(tc, test_grid_sampler_3d);
    tcase_add_test(tc, test_vmap);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
