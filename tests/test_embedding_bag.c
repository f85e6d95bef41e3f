/* _embedding_bag (registry/ops/embedding_bag.yaml) where test_aten_samples cannot compare
 * with PyTorch: scale_grad_by_freq (PyTorch 1.13's CPU kernel divides by another
 * entry's count; here each entry's gradient is divided by its own index's count, as
 * documented), the refusals of bad offsets and indices, and the emulated CUDA device
 * against the CPU (all four outputs and both gradients) where the build has it. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const int64_t IDX[6] = {3, 1, 1, 0, 2, 3}, OFF[3] = {0, 1, 4};

static opr_tensor *i64s(opr_ctx *ctx, const int64_t *v, int64_t n, opr_device dev)
{
    return opr_tensor_from_data(ctx, OPR_I64, 1, &n, v, dev);
}

/* _embedding_bag(w, indices, offsets, freq, mode, False, psw, False, -1) into out[4]. */
static void bag(opr_ctx *ctx, opr_tensor *w, opr_tensor *idx, opr_tensor *off, bool freq, int mode, opr_tensor *psw,
                opr_tensor *out[4])
{
    const opr_op *op = opr_op_find(ctx, "_embedding_bag");
    ck_assert_ptr_nonnull(op);
    opr_value a[9] = {opr_v_tensor(w), opr_v_tensor(idx), opr_v_tensor(off), opr_v_bool(freq), opr_v_int(mode),
                      opr_v_bool(false), psw ? opr_v_tensor(psw) : opr_v_none(), opr_v_bool(false), opr_v_int(-1)};
    ck_assert_msg(opr_call(op, a, 9, out, 4) == OPR_OK, "_embedding_bag: %s", opr_last_error());
}

static void release(opr_tensor **t, int n)
{
    for (int i = 0; i < n; i++) opr_tensor_release(t[i]);
}

START_TEST(test_scale_grad_by_freq)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(11);
    /* bags [3], [1, 1, 0], [2, 3]; grad row b is b + 1: row r of the weight gradient is
     * the sum of its entries' bag rows, divided by r's count (1, 2, 1, 2) with the flag
     * and by the bag's size in mode 1 */
    static const double want[2][2][4] = {
        {{2, 4, 3, 4}, {2, 2, 3, 2}},                          /* mode 0: plain, by count */
        {{2.0 / 3, 4.0 / 3, 1.5, 2.5}, {2.0 / 3, 2.0 / 3, 1.5, 1.25}}, /* mode 1 */
    };
    const double g[6] = {1, 1, 2, 2, 3, 3};
    for (int mode = 0; mode < 2; mode++)
        for (int freq = 0; freq < 2; freq++) {
            opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 2}, -1, 1), *out[4];
            opr_tensor *idx = i64s(ctx, IDX, 6, OPR_CPU), *off = i64s(ctx, OFF, 3, OPR_CPU);
            opr_tensor *gt = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){3, 2}, g, OPR_CPU);
            ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
            bag(ctx, w, idx, off, freq, mode, NULL, out);
            ck_assert_int_eq(opr_backward(out[0], gt, NULL), OPR_OK);
            double *gw = tu_to_f64(opr_grad(w));
            for (int r = 0; r < 4; r++)
                for (int d = 0; d < 2; d++)
                    ck_assert_msg(fabs(gw[r * 2 + d] - want[mode][freq][r]) < 1e-12,
                                  "mode %d, scale_grad_by_freq %d: grad of row %d is %g, expected %g", mode, freq, r,
                                  gw[r * 2 + d], want[mode][freq][r]);
            free(gw);
            release(out, 4);
            opr_tensor *all[] = {w, idx, off, gt};
            release(all, 4);
        }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_refusals)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *w = tu_rand(ctx, OPR_F32, 2, (int64_t[]){4, 2}, -1, 1);
    static const struct { int64_t idx[3], off[2]; const char *needle; } bad[] = {
        {{0, 1, 2}, {1, 2}, "offsets[0] has to be 0"},
        {{0, 1, 2}, {0, 4}, "offsets[-1] can not be greater"},
        {{0, 4, 2}, {0, 1}, "out of range"},
        {{0, -1, 2}, {0, 1}, "out of range"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        opr_tensor *idx = i64s(ctx, bad[k].idx, 3, OPR_CPU), *off = i64s(ctx, bad[k].off, 2, OPR_CPU);
        opr_value a[9] = {opr_v_tensor(w), opr_v_tensor(idx), opr_v_tensor(off), opr_v_bool(false), opr_v_int(0),
                          opr_v_bool(false), opr_v_none(), opr_v_bool(false), opr_v_int(-1)};
        tu_expect_fail(ctx, "_embedding_bag", a, 9, 4, OPR_ERR_INVALID, bad[k].needle);
        opr_tensor *all[] = {idx, off};
        release(all, 2);
    }
    const int64_t dec[3] = {0, 2, 1};
    opr_tensor *idx = i64s(ctx, IDX, 6, OPR_CPU), *off = i64s(ctx, dec, 3, OPR_CPU);
    opr_tensor *psw = tu_rand(ctx, OPR_F32, 1, (int64_t[]){6}, -1, 1);
    opr_value a[9] = {opr_v_tensor(w), opr_v_tensor(idx), opr_v_tensor(off), opr_v_bool(false), opr_v_int(0),
                      opr_v_bool(false), opr_v_none(), opr_v_bool(false), opr_v_int(-1)};
    tu_expect_fail(ctx, "_embedding_bag", a, 9, 4, OPR_ERR_INVALID, "non-decreasing");
    a[2] = opr_v_tensor(off = (opr_tensor_release(off), i64s(ctx, OFF, 3, OPR_CPU)));
    a[4] = opr_v_int(1);
    a[6] = opr_v_tensor(psw);
    tu_expect_fail(ctx, "_embedding_bag", a, 9, 4, OPR_ERR_INVALID, "mode == 0");
    a[4] = opr_v_int(3);
    a[6] = opr_v_none();
    tu_expect_fail(ctx, "_embedding_bag", a, 9, 4, OPR_ERR_INVALID, "mode <= 2");
    a[4] = opr_v_int(0);
    a[5] = opr_v_bool(true);
    tu_expect_fail(ctx, "_embedding_bag", a, 9, 4, OPR_ERR_INVALID, "sparse");
    opr_tensor *all[] = {w, idx, off, psw};
    release(all, 4);
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
    tu_seed(12);
    for (int mode = 0; mode < 3; mode++) {
        opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 3}, -1, 1);
        opr_tensor *psw = mode == 0 ? tu_rand(ctx, OPR_F64, 1, (int64_t[]){6}, -1, 1) : NULL;
        opr_tensor *dw = opr_tensor_to(w, dev), *dpsw = psw ? opr_tensor_to(psw, dev) : NULL;
        opr_tensor *idx = i64s(ctx, IDX, 6, OPR_CPU), *off = i64s(ctx, OFF, 3, OPR_CPU);
        opr_tensor *didx = i64s(ctx, IDX, 6, dev), *doff = i64s(ctx, OFF, 3, dev), *c[4], *g[4];
        opr_tensor *r = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 3}, -1, 1), *dr = opr_tensor_to(r, dev);
        opr_tensor *leaves[] = {w, dw, psw, dpsw};
        for (int k = 0; k < 4; k++)
            if (leaves[k]) ck_assert_int_eq(opr_set_requires_grad(leaves[k], true), OPR_OK);
        bag(ctx, w, idx, off, false, mode, psw, c);
        bag(ctx, dw, didx, doff, false, mode, dpsw, g);
        for (int k = 0; k < 4; k++) {
            opr_tensor *back = opr_tensor_to(g[k], OPR_CPU);
            double *x = tu_to_f64(c[k]), *y = tu_to_f64(back);
            ck_assert_int_eq(opr_tensor_numel(c[k]), opr_tensor_numel(back));
            for (int64_t i = 0; i < opr_tensor_numel(back); i++)
                ck_assert_msg(x[i] == y[i], "mode %d output %d element %lld: cpu %.17g, cuda %.17g", mode, k,
                              (long long)i, x[i], y[i]);
            free(x);
            free(y);
            opr_tensor_release(back);
        }
        ck_assert_int_eq(opr_backward(c[0], r, NULL), OPR_OK);
        ck_assert_int_eq(opr_backward(g[0], dr, NULL), OPR_OK);
        for (int k = 0; k < 4; k += 2) {
            if (!leaves[k]) continue;
            opr_tensor *back = opr_tensor_to(opr_grad(leaves[k + 1]), OPR_CPU);
            double *x = tu_to_f64(opr_grad(leaves[k])), *y = tu_to_f64(back);
            for (int64_t i = 0; i < opr_tensor_numel(back); i++)
                ck_assert_msg(fabs(x[i] - y[i]) < 1e-12, "mode %d gradient %d element %lld: cpu %.17g, cuda %.17g",
                              mode, k, (long long)i, x[i], y[i]);
            free(x);
            free(y);
            opr_tensor_release(back);
        }
        release(c, 4);
        release(g, 4);
        opr_tensor *all[] = {w, dw, idx, off, didx, doff, r, dr};
        release(all, 8);
        if (psw) opr_tensor_release(psw);
        if (dpsw) opr_tensor_release(dpsw);
    }
    tu_ctx_free(ctx);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("embedding_bag");
    TCase *tc = tcase_create("embedding_bag");
    tcase_add_test(tc, test_scale_grad_by_freq);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_device_matches_cpu);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
