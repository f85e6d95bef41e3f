/* The padding and resampling composites (registry/ops/padding.yaml, resampling.yaml):
 * values against hand-computed cases, the built-ins they rest on (pad_shape and the
 * errors it gives), the refused calls, and, with the emulated CUDA plugin
 * (OPREG_TEST_EMU), the index tensors their factories make on the call's device: the
 * same values on cuda:0 as on the CPU. PyTorch comparisons of every sample are in
 * test_aten_samples. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)
#define INTS(...) opr_v_ints((int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* 0, 1, 2, ... in f64, shaped `shape`. */
static opr_tensor *iota(opr_ctx *ctx, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert(v != NULL);
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    free(v);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

static void expect_values(const opr_tensor *t, int ndim, const int64_t *shape, const double *want, const char *what)
{
    ck_assert_msg(opr_tensor_ndim(t) == ndim, "%s: %d-d, expected %d-d", what, opr_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_msg(opr_tensor_size(t, d) == shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                      (long long)opr_tensor_size(t, d), (long long)shape[d]);
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < opr_tensor_numel(t); i++)
        if (fabs(v[i] - want[i]) > 1e-12) {
            const double got = v[i];
            free(v);
            ck_abort_msg("%s[%lld] is %.17g, expected %.17g", what, (long long)i, got, want[i]);
        }
    free(v);
}

/* [[0 1 2], [3 4 5]] padded: reflection (2, 1) on the last dim, replication (1, 0) and
 * constant (-1 crop, 2 with 9) on the last two. */
START_TEST(test_pad_values)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 3, (int64_t[]){1, 2, 3});
    opr_tensor *r = tu_call1(ctx, "reflection_pad1d", ARGS(TV(x), INTS(2, 1)));
    expect_values(r, 3, (int64_t[]){1, 2, 6}, (double[]){2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4}, "reflection_pad1d");
    opr_tensor *x4 = iota(ctx, 4, (int64_t[]){1, 1, 2, 3});
    opr_tensor *p = tu_call1(ctx, "replication_pad2d", ARGS(TV(x4), INTS(1, 0, 0, 1)));
    expect_values(p, 4, (int64_t[]){1, 1, 3, 4}, (double[]){0, 0, 1, 2, 3, 3, 4, 5, 3, 3, 4, 5}, "replication_pad2d");
    opr_tensor *c = tu_call1(ctx, "constant_pad_nd", ARGS(TV(x), INTS(-1, 2), opr_v_double(9)));
    expect_values(c, 3, (int64_t[]){1, 2, 4}, (double[]){1, 2, 9, 9, 4, 5, 9, 9}, "constant_pad_nd");
    opr_tensor *all[] = {x, r, x4, p, c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* Calls PyTorch refuses are refused with the reason, nothing crashes. */
START_TEST(test_pad_errors)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 3, (int64_t[]){1, 2, 3});
    tu_expect_fail(ctx, "constant_pad_nd", ARGS(TV(x), INTS(-2, -2)), 1, OPR_ERR_INVALID, "negative output size");
    tu_expect_fail(ctx, "constant_pad_nd", ARGS(TV(x), INTS(1, 1, 1)), 1, OPR_ERR_INVALID, "len(pad) % 2 == 0");
    tu_expect_fail(ctx, "reflection_pad1d", ARGS(TV(x), INTS(3, 0)), 1, OPR_ERR_INVALID, "padding[0] < size(self, -1)");
    tu_expect_fail(ctx, "replication_pad2d", ARGS(TV(x), INTS(-2, -2, 0, 0)), 1, OPR_ERR_INVALID, ">= 1");
    tu_expect_fail(ctx, "pad", ARGS(TV(x), INTS(1, 1), opr_v_string("circular")), 1, OPR_ERR_INVALID, "mode");
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* im2col then col2im: each element comes back multiplied by the number of windows
 * that hold it (kernel 2, stride 1 over 3 columns: 1, 2, 1). */
START_TEST(test_im2col_col2im)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 4, (int64_t[]){1, 1, 1, 3});
    opr_tensor *cols = tu_call1(ctx, "im2col", ARGS(TV(x), INTS(1, 2), INTS(1, 1), INTS(0, 0), INTS(1, 1)));
    expect_values(cols, 3, (int64_t[]){1, 2, 2}, (double[]){0, 1, 1, 2}, "im2col");
    opr_tensor *back = tu_call1(ctx, "col2im", ARGS(TV(cols), INTS(1, 3), INTS(1, 2), INTS(1, 1), INTS(0, 0), INTS(1, 1)));
    expect_values(back, 4, (int64_t[]){1, 1, 1, 3}, (double[]){0, 2, 2}, "col2im");
    opr_tensor *all[] = {x, cols, back};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* interpolate of [[0 1 2], [3 4 5], [6 7 8]] to 5 x 4, bilinear with align_corners: the
 * plane is linear, so the result is 1.5 i + 2/3 j at (i, j) (PyTorch gives the same);
 * nearest by a scale of 2 repeats each element twice along both dims. */
START_TEST(test_interpolate)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 4, (int64_t[]){1, 1, 3, 3});
    const opr_kwarg kw[] = {opr_kw("mode", opr_v_string("bilinear")), opr_kw("align_corners", opr_v_bool(true))};
    opr_tensor *y = NULL;
    ck_assert_msg(opr_call_by_name_kw(ctx, "interpolate", ARGS(TV(x), INTS(5, 4)), kw, 2, &y, 1) == OPR_OK, "%s",
                  opr_last_error());
    double want[20];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = 1.5 * i + 2.0 * j / 3.0;
    expect_values(y, 4, (int64_t[]){1, 1, 5, 4}, want, "interpolate bilinear");
    opr_tensor *n = tu_call1(ctx, "interpolate", ARGS(TV(x), opr_v_none(), opr_v_double(2)));
    double wn[36];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) wn[i * 6 + j] = 3 * (i / 2) + j / 2;
    expect_values(n, 4, (int64_t[]){1, 1, 6, 6}, wn, "interpolate nearest");
    opr_tensor_release(x);
    opr_tensor_release(y);
    opr_tensor_release(n);
    tu_ctx_free(ctx);
}
END_TEST

/* The composites build their indices with arange, which must land on the call's
 * device: the same values on cuda:0 as on the CPU. */
START_TEST(test_device_indices)
{
#ifndef OPREG_TEST_EMU
    printf("test_device_indices: skipped (no emulated CUDA plugin in this build)\n");
#else
    opr_ctx *ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    tu_seed(3);
    opr_tensor *x = tu_rand(ctx, OPR_F32, 4, (int64_t[]){1, 2, 3, 4}, -1, 1);
    opr_tensor *dx = opr_tensor_to(x, dev);
    ck_assert_msg(dx != NULL, "%s", opr_last_error());
    const char *ops[] = {"reflection_pad2d", "replication_pad2d", "constant_pad_nd"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        opr_tensor *a = tu_call1(ctx, ops[i], ARGS(TV(x), INTS(1, 2, 2, 1)));
        opr_tensor *b = tu_call1(ctx, ops[i], ARGS(TV(dx), INTS(1, 2, 2, 1)));
        ck_assert_msg(opr_tensor_device(b).type == dev.type, "%s: the result is not on cuda:0", ops[i]);
        double *va = tu_to_f64(a), *vb = tu_to_f64(b);
        for (int64_t k = 0; k < opr_tensor_numel(a); k++)
            ck_assert_msg(va[k] == vb[k], "%s[%lld]: cpu %g, cuda %g", ops[i], (long long)k, va[k], vb[k]);
        free(va);
        free(vb);
        opr_tensor_release(a);
        opr_tensor_release(b);
    }
    opr_tensor_release(x);
    opr_tensor_release(dx);
    tu_ctx_free(ctx);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("padding_ops");
    TCase *tc = tcase_create("padding_ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pad_values);
    tcase_add_test(tc, test_pad_errors);
    tcase_add_test(tc, test_im2col_col2im);
    tcase_add_test(tc, test_interpolate);
    tcase_add_test(tc, test_device_indices);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
