/* ATen's native_dropout (registry/ops/nn.yaml): its result is dropout_seeded's for the
 * same seed, its bool mask says which elements were kept, eval mode passes the input
 * through with an all-true mask, p = 1 drops everything, a call without a seed draws
 * one from the context's generator (reproducible after opr_manual_seed), the gradient
 * is dropout_seeded of the output gradient (nothing saved), and the emulated CUDA
 * device gives the CPU's numbers where the build has it. Values against PyTorch are
 * not comparable (another generator); test_aten_samples has the deterministic cases. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)

/* native_dropout(x, p, train, seed) into out[0] (result), out[1] (mask); train < 0 is
 * None, seed < 0 none given. */
static void native_dropout(opr_ctx *ctx, opr_tensor *x, double p, int train, int64_t seed, opr_tensor *out[2])
{
    const opr_op *op = opr_op_find(ctx, "native_dropout");
    ck_assert_ptr_nonnull(op);
    opr_value a[4] = {TV(x), opr_v_double(p), train < 0 ? opr_v_none() : opr_v_bool(train), seed < 0 ? opr_v_none() : opr_v_int(seed)};
    ck_assert_msg(opr_call(op, a, 4, out, 2) == OPR_OK, "native_dropout: %s", opr_last_error());
    ck_assert_int_eq(opr_tensor_dtype(out[1]), OPR_BOOL);
}

static void expect_equal(const opr_tensor *a, const opr_tensor *b, const char *what)
{
    ck_assert_int_eq(opr_tensor_numel(a), opr_tensor_numel(b));
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    for (int64_t i = 0; i < opr_tensor_numel(a); i++)
        ck_assert_msg(x[i] == y[i], "%s: element %lld: %.17g vs %.17g", what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

START_TEST(test_matches_dropout_seeded)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(3);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){40, 25}, 0.5, 2); /* never 0 */
    for (int train = -1; train <= 1; train += 2) {                        /* None, true */
        opr_tensor *out[2];
        native_dropout(ctx, x, 0.4, train, 11, out);
        opr_tensor *ref = tu_call1(ctx, "dropout_seeded", ARGS(TV(x), opr_v_double(0.4), opr_v_int(11)));
        expect_equal(out[0], ref, "native_dropout vs dropout_seeded");
        double *r = tu_to_f64(ref), *m = tu_to_f64(out[1]);
        int64_t kept = 0;
        for (int64_t i = 0; i < opr_tensor_numel(ref); i++) {
            ck_assert_msg(m[i] == (r[i] != 0), "mask element %lld is %g, the result %g", (long long)i, m[i], r[i]);
            kept += m[i] != 0;
        }
        /* 1000 draws at keep probability 0.6: 600 +- 16 (one standard deviation) */
        ck_assert_msg(kept > 500 && kept < 700, "%lld of 1000 kept at p = 0.4", (long long)kept);
        free(r);
        free(m);
        opr_tensor_release(ref);
        opr_tensor_release(out[0]);
        opr_tensor_release(out[1]);
    }
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_eval_and_p_one)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(4);
    opr_tensor *x = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 7}, -1, 1), *out[2];
    native_dropout(ctx, x, 0.5, 0, -1, out); /* eval: input and an all-true mask */
    expect_equal(out[0], x, "eval result");
    double *m = tu_to_f64(out[1]);
    for (int64_t i = 0; i < 21; i++) ck_assert_msg(m[i] == 1, "eval mask element %lld is %g", (long long)i, m[i]);
    free(m);
    opr_tensor_release(out[0]);
    opr_tensor_release(out[1]);
    native_dropout(ctx, x, 1, 1, 5, out); /* p = 1: nothing kept, zeros (not NaN) */
    double *y = tu_to_f64(out[0]);
    m = tu_to_f64(out[1]);
    for (int64_t i = 0; i < 21; i++) ck_assert_msg(y[i] == 0 && m[i] == 0, "p = 1: element %lld is %g, mask %g", (long long)i, y[i], m[i]);
    free(y);
    free(m);
    opr_tensor_release(out[0]);
    opr_tensor_release(out[1]);
    tu_expect_fail(ctx, "native_dropout", ARGS(TV(x), opr_v_double(1.5), opr_v_bool(true)), 2, OPR_ERR_INVALID, "p <= 1");
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_seed_from_generator)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(5);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){500}, 0.5, 1), *a[2], *b[2], *c[2];
    opr_manual_seed(ctx, 42);
    native_dropout(ctx, x, 0.5, 1, -1, a);
    native_dropout(ctx, x, 0.5, 1, -1, b);
    opr_manual_seed(ctx, 42);
    native_dropout(ctx, x, 0.5, 1, -1, c);
    expect_equal(a[1], c[1], "the same mask after the same opr_manual_seed");
    double *ma = tu_to_f64(a[1]), *mb = tu_to_f64(b[1]);
    int differ = 0;
    for (int64_t i = 0; i < 500; i++) differ += ma[i] != mb[i];
    ck_assert_msg(differ > 0, "two calls drew the same mask");
    free(ma);
    free(mb);
    opr_tensor *all[] = {x, a[0], a[1], b[0], b[1], c[0], c[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_gradient_regenerates_the_mask)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(6);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){6, 9}, -1, 1), *out[2];
    opr_tensor *r = tu_rand(ctx, OPR_F64, 2, (int64_t[]){6, 9}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    native_dropout(ctx, x, 0.3, 1, 17, out);
    ck_assert_int_eq(opr_backward(out[0], r, NULL), OPR_OK);
    opr_tensor *ref = tu_call1(ctx, "dropout_seeded", ARGS(TV(r), opr_v_double(0.3), opr_v_int(17)));
    expect_equal(opr_grad(x), ref, "the gradient");
    opr_tensor_release(ref);
    opr_tensor_release(out[0]);
    opr_tensor_release(out[1]);
    opr_tensor_release(x);
    opr_tensor_release(r);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_device_matches_cpu)
{
#ifndef OPREG_TEST_EMU
    printf("test_device_matches_cpu: skipped (no emulated CUDA plugin in this build)\n");
    return;
#else
    opr_ctx *ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    tu_seed(7);
    for (int k = 0; k < 2; k++) {
        opr_tensor *x = tu_rand(ctx, k ? OPR_F64 : OPR_F32, 3, (int64_t[]){3, 20, 7}, -1, 1);
        opr_tensor *dx = opr_tensor_to(x, dev), *cpu[2], *gpu[2];
        native_dropout(ctx, x, 0.35, 1, 77, cpu);
        native_dropout(ctx, dx, 0.35, 1, 77, gpu);
        opr_tensor *g0 = opr_tensor_to(gpu[0], OPR_CPU), *g1 = opr_tensor_to(gpu[1], OPR_CPU);
        expect_equal(cpu[0], g0, "native_dropout's result on cuda vs cpu");
        expect_equal(cpu[1], g1, "native_dropout's mask on cuda vs cpu");
        opr_tensor *all[] = {x, dx, cpu[0], cpu[1], gpu[0], gpu[1], g0, g1};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    tu_ctx_free(ctx);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("native_dropout");
    TCase *tc = tcase_create("native_dropout");
    tcase_add_test(tc, test_matches_dropout_seeded);
    tcase_add_test(tc, test_eval_and_p_one);
    tcase_add_test(tc, test_seed_from_generator);
    tcase_add_test(tc, test_gradient_regenerates_the_mask);
    tcase_add_test(tc, test_device_matches_cpu);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
