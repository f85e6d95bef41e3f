/* The random factories rand, randn and randperm (registry/ops/random.yaml, algorithm in
 * docs/random.md). Their values cannot match PyTorch's (another generator), so instead
 * of test_aten_samples this suite checks: the distributions (range, mean and variance of
 * a few thousand draws; randperm a permutation), that f32 is the f64 number truncated
 * (rand) or rounded (randn), that an explicit seed gives identical numbers and another
 * seed other ones, that calls without a seed follow the context's generator
 * (opr_manual_seed), the argument checks, and that the emulated CUDA device gives the
 * CPU's numbers bit for bit where the build has it. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* One call of a factory: size (rand, randn: 1-D [n]) or n (randperm); seed < 0 and
 * seeded false: none given. */
static opr_tensor *draw(opr_ctx *ctx, const char *op, int64_t n, const char *dtype, const char *device, bool seeded,
                        int64_t seed)
{
    const opr_op *o = opr_op_find(ctx, op);
    ck_assert_ptr_nonnull(o);
    const bool perm = op[4] == 'p'; /* randperm */
    opr_value a[6] = {perm ? opr_v_int(n) : opr_v_ints(&n, 1), opr_v_string(dtype), opr_v_none(), opr_v_string(device),
                      opr_v_none(), seeded ? opr_v_int(seed) : opr_v_none()};
    opr_tensor *t = NULL;
    ck_assert_msg(opr_call(o, a, 6, &t, 1) == OPR_OK, "%s: %s", op, opr_last_error());
    ck_assert_int_eq(opr_tensor_numel(t), n);
    return t;
}

static opr_tensor *draw_cpu(opr_ctx *ctx, const char *op, int64_t n, const char *dtype, int64_t seed)
{
    return draw(ctx, op, n, dtype, "cpu", true, seed);
}

/* Whether a and b hold the same numbers (bitwise for floats: no NaN is drawn). */
static bool same(const opr_tensor *a, const opr_tensor *b)
{
    const int64_t n = opr_tensor_numel(a);
    if (n != opr_tensor_numel(b)) return false;
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    bool eq = true;
    for (int64_t i = 0; i < n && eq; i++) eq = x[i] == y[i];
    free(x);
    free(y);
    return eq;
}

static void moments(const opr_tensor *t, double *mean, double *var)
{
    const int64_t n = opr_tensor_numel(t);
    double *x = tu_to_f64(t), s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *var = s2 / (double)(n - 1);
    free(x);
}

START_TEST(test_rand_uniform)
{
    opr_ctx *ctx = tu_ctx();
    /* 4000 draws: the mean's standard deviation is 0.0046, the variance's 0.0012 */
    opr_tensor *d = draw_cpu(ctx, "rand", 4000, "f64", 1), *f = draw_cpu(ctx, "rand", 4000, "f32", 1);
    ck_assert_int_eq(opr_tensor_dtype(d), OPR_F64);
    ck_assert_int_eq(opr_tensor_dtype(f), OPR_F32);
    double mean, var;
    moments(d, &mean, &var);
    ck_assert_msg(fabs(mean - 0.5) < 0.025 && fabs(var - 1.0 / 12) < 0.006, "rand f64: mean %g, variance %g", mean, var);
    double *x = tu_to_f64(d), *y = tu_to_f64(f);
    int64_t low = 0;
    for (int64_t i = 0; i < 4000; i++) {
        ck_assert_msg(x[i] >= 0 && x[i] < 1, "rand f64 element %lld is %.17g", (long long)i, x[i]);
        ck_assert_msg(y[i] == floor(x[i] * 16777216.0) / 16777216.0, "rand f32 element %lld: %.9g is not %.17g truncated",
                      (long long)i, y[i], x[i]);
        low += x[i] < 0.25;
    }
    ck_assert_msg(low > 900 && low < 1100, "%lld of 4000 below 0.25", (long long)low); /* 1000 +- 27 */
    free(x);
    free(y);
    opr_tensor_release(d);
    opr_tensor_release(f);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_randn_normal)
{
    opr_ctx *ctx = tu_ctx();
    /* 4000 draws: the mean's standard deviation is 0.016, the variance's 0.022 */
    opr_tensor *d = draw_cpu(ctx, "randn", 4000, "f64", 2), *f = draw_cpu(ctx, "randn", 4000, "f32", 2);
    double mean, var;
    moments(d, &mean, &var);
    ck_assert_msg(fabs(mean) < 0.07 && fabs(var - 1) < 0.1, "randn f64: mean %g, variance %g", mean, var);
    double *x = tu_to_f64(d), *y = tu_to_f64(f);
    int64_t within = 0, pos = 0;
    for (int64_t i = 0; i < 4000; i++) {
        ck_assert_msg(isfinite(x[i]), "randn element %lld is %g", (long long)i, x[i]);
        ck_assert_msg(y[i] == (double)(float)x[i], "randn f32 element %lld: %.9g is not %.17g rounded", (long long)i,
                      y[i], x[i]);
        within += fabs(x[i]) < 1;
        pos += x[i] > 0;
    }
    /* P(|z| < 1) = 0.6827: 2731 +- 29; P(z > 0) = 0.5: 2000 +- 32 */
    ck_assert_msg(within > 2610 && within < 2850, "%lld of 4000 within one standard deviation", (long long)within);
    ck_assert_msg(pos > 1870 && pos < 2130, "%lld of 4000 positive", (long long)pos);
    free(x);
    free(y);
    opr_tensor_release(d);
    opr_tensor_release(f);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_randperm_permutation)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *p = draw_cpu(ctx, "randperm", 1000, "i64", 3), *q = draw_cpu(ctx, "randperm", 1000, "f64", 3);
    ck_assert_int_eq(opr_tensor_dtype(p), OPR_I64);
    ck_assert_msg(same(p, q), "randperm in f64 differs from i64 for one seed");
    double *x = tu_to_f64(p);
    char *seen = calloc(1000, 1);
    int64_t fixed = 0, first_half = 0;
    for (int64_t i = 0; i < 1000; i++) {
        const int64_t v = (int64_t)x[i];
        ck_assert_msg(v >= 0 && v < 1000 && !seen[v], "randperm: element %lld is %g (repeated or out of range)",
                      (long long)i, x[i]);
        seen[v] = 1;
        fixed += v == i;
        first_half += i < 500 && v < 500;
    }
    /* fixed points: Poisson(1); of the first 500 positions about 250 hold values < 500 (+- 8) */
    ck_assert_msg(fixed < 8, "%lld fixed points", (long long)fixed);
    ck_assert_msg(first_half > 210 && first_half < 290, "%lld small values in the first half", (long long)first_half);
    free(seen);
    free(x);
    opr_tensor *one = draw_cpu(ctx, "randperm", 1, "i64", 9), *none = draw_cpu(ctx, "randperm", 0, "i64", 9);
    double *o = tu_to_f64(one);
    ck_assert(o[0] == 0);
    free(o);
    opr_tensor *all[] = {p, q, one, none};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_seeds)
{
    opr_ctx *ctx = tu_ctx();
    static const char *const ops[] = {"rand", "randn", "randperm"};
    for (int k = 0; k < 3; k++) {
        const char *dt = k == 2 ? "i64" : "f64";
        opr_tensor *a = draw_cpu(ctx, ops[k], 300, dt, 77), *b = draw_cpu(ctx, ops[k], 300, dt, 77);
        opr_tensor *c = draw_cpu(ctx, ops[k], 300, dt, 78);
        ck_assert_msg(same(a, b), "%s: the same seed gave other numbers", ops[k]);
        ck_assert_msg(!same(a, c), "%s: seeds 77 and 78 gave the same numbers", ops[k]);
        /* without a seed: the context's generator, restarted by opr_manual_seed */
        opr_manual_seed(ctx, 42);
        opr_tensor *g1 = draw(ctx, ops[k], 300, dt, "cpu", false, 0), *g2 = draw(ctx, ops[k], 300, dt, "cpu", false, 0);
        opr_manual_seed(ctx, 42);
        opr_tensor *g3 = draw(ctx, ops[k], 300, dt, "cpu", false, 0);
        ck_assert_msg(same(g1, g3), "%s: opr_manual_seed(42) twice gave other numbers", ops[k]);
        ck_assert_msg(!same(g1, g2), "%s: two calls without a seed drew the same numbers", ops[k]);
        opr_tensor *all[] = {a, b, c, g1, g2, g3};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_refusals)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t sz[] = {3, -2}, ok[] = {3};
    opr_value a[6] = {opr_v_ints(sz, 2), opr_v_string("f32"), opr_v_none(), opr_v_string("cpu"), opr_v_none(), opr_v_int(1)};
    tu_expect_fail(ctx, "rand", a, 6, 1, OPR_ERR_INVALID, "negative size");
    a[0] = opr_v_ints(ok, 1);
    a[1] = opr_v_string("i64");
    tu_expect_fail(ctx, "randn", a, 6, 1, OPR_ERR_INVALID, "i64");
    a[1] = opr_v_string("f32");
    a[2] = opr_v_string("sparse_coo");
    tu_expect_fail(ctx, "rand", a, 6, 1, OPR_ERR_INVALID, "layout");
    opr_value p[6] = {opr_v_int(-1), opr_v_string("i64"), opr_v_none(), opr_v_string("cpu"), opr_v_none(), opr_v_int(1)};
    tu_expect_fail(ctx, "randperm", p, 6, 1, OPR_ERR_INVALID, "n >= 0");
    p[0] = opr_v_int(16777217);
    p[1] = opr_v_string("f32");
    tu_expect_fail(ctx, "randperm", p, 6, 1, OPR_ERR_INVALID, "16777216");
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
    static const struct { const char *op, *dt; } cases[] = {
        {"rand", "f32"}, {"rand", "f64"}, {"randn", "f32"}, {"randn", "f64"},
        {"randperm", "i64"}, {"randperm", "f32"}, {"randperm", "f64"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        opr_tensor *c = draw(ctx, cases[k].op, 777, cases[k].dt, "cpu", true, 1234567);
        opr_tensor *g = draw(ctx, cases[k].op, 777, cases[k].dt, "cuda:0", true, 1234567);
        ck_assert_msg(opr_tensor_device(g).type != OPR_CPU.type, "%s ran on the cpu", cases[k].op);
        opr_tensor *back = opr_tensor_to(g, OPR_CPU);
        ck_assert_msg(same(c, back), "%s %s: cuda:0 differs from the cpu", cases[k].op, cases[k].dt);
        opr_tensor_release(c);
        opr_tensor_release(g);
        opr_tensor_release(back);
    }
    tu_ctx_free(ctx);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("random");
    TCase *tc = tcase_create("random");
    tcase_add_test(tc, test_rand_uniform);
    tcase_add_test(tc, test_randn_normal);
    tcase_add_test(tc, test_randperm_permutation);
    tcase_add_test(tc, test_seeds);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_device_matches_cpu);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
