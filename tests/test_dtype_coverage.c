/* A schema promises no more than the CPU kernels deliver: every op with samples, in
 * every dtype its YAML `dtypes:` lists, on every sample, runs on the CPU without
 * OPR_ERR_UNSUPPORTED or OPR_ERR_NOT_FOUND (a kernel that refuses the dtype at call
 * time, or no kernel registered for it). Other errors are some sample's business (a
 * sample may be meant to fail) and belong to the op's own suite; this one only asks
 * whether the dtype is implemented. Every offender is listed in one failure. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 16
#define MAX_OUTS 8

static const opr_dtype all_dtypes[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16, OPR_I32};

/* Runs sample s of op in dt on the CPU; returns opr_call's status (OPR_OK where the
 * sample cannot be built in dt or has more outputs than we take: nothing to judge). */
static int run_sample(const opr_op *op, int s, opr_dtype dt, char *msg, size_t len)
{
    opr_value args[MAX_ARGS];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS], *outs[MAX_OUTS] = {0};
    int nargs = 0, nowned = 0, nouts = 0;
    msg[0] = '\0';
    if (opr_op_sample_args(op, s, dt, OPR_CPU, (uint64_t)s + 1, args, &nargs, owned, &nowned)) return OPR_OK;
    int rc = opr_op_result_count(op, args, nargs, &nouts);
    if (!rc && nouts > MAX_OUTS) rc = OPR_OK, nouts = 0;
    else if (!rc) rc = opr_call(op, args, nargs, outs, nouts);
    if (rc) snprintf(msg, len, "%s", opr_last_error());
    for (int i = 0; i < MAX_OUTS; i++) opr_tensor_release(outs[i]);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    return rc;
}

START_TEST(test_schema_dtypes_run_on_cpu)
{
    opr_ctx *ctx = tu_ctx();
    /* Check's messages are short: one "op (dtype, ...)" per offender here, the first
     * error of each on stderr */
    static char report[3072];
    size_t used = 0;
    int offenders = 0, runs = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        char missing[64] = "";
        for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
            opr_dtype dt = all_dtypes[d];
            if (!opr_op_supports_dtype(op, dt)) continue;
            for (int s = 0; s < opr_op_sample_count(op); s++) {
                char msg[512];
                int rc = run_sample(op, s, dt, msg, sizeof msg);
                runs++;
                if (rc != OPR_ERR_UNSUPPORTED && rc != OPR_ERR_NOT_FOUND) continue;
                size_t at = strlen(missing);
                snprintf(missing + at, sizeof missing - at, "%s%s", at ? ", " : "", opr_dtype_name(dt));
                fprintf(stderr, "%s %s sample %d: %s: %s\n", opr_op_name(op), opr_dtype_name(dt), s,
                        opr_status_name(rc), msg);
                break; /* one sample per (op, dtype) says it */
            }
        }
        if (!missing[0]) continue;
        offenders++;
        if (used < sizeof report - 1)
            used += (size_t)snprintf(report + used, sizeof report - used, "%s%s (%s)", used ? ", " : "",
                                     opr_op_name(op), missing);
    }
    ck_assert_int_gt(runs, 100); /* the samples were found at all */
    ck_assert_msg(offenders == 0, "%d op(s) whose schema lists dtypes the CPU does not run: %s", offenders, report);
    tu_ctx_free(ctx);
}
END_TEST

/* The half types are computed in f32 and rounded (plugins/cpu/cpu_half.c): exact on
 * values they hold exactly, rounded to nearest even otherwise, strided views read and
 * written in place. */
START_TEST(test_half_values)
{
    opr_ctx *ctx = tu_ctx();
    const opr_dtype dts[2] = {OPR_F16, OPR_BF16};
    for (int k = 0; k < 2; k++) {
        const double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5, 0.25, -1, 8, 1.0 / 3, 2};
        uint16_t ba[6], bb[6];
        for (int i = 0; i < 6; i++) {
            ba[i] = k == 0 ? opr_f16_from_float((float)a[i]) : opr_bf16_from_float((float)a[i]);
            bb[i] = k == 0 ? opr_f16_from_float((float)b[i]) : opr_bf16_from_float((float)b[i]);
        }
        opr_tensor *ha = opr_tensor_from_data(ctx, dts[k], 2, (int64_t[]){2, 3}, ba, OPR_CPU);
        opr_tensor *hb = opr_tensor_from_data(ctx, dts[k], 2, (int64_t[]){3, 2}, bb, OPR_CPU);
        ck_assert_int_eq(opr_tensor_dtype(ha), dts[k]);
        opr_tensor *sum = tu_call1(ctx, "add", (opr_value[]){opr_v_tensor(ha), opr_v_tensor(ha)}, 2);
        opr_tensor *prod = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(ha), opr_v_tensor(hb)}, 2);
        ck_assert_int_eq(opr_tensor_dtype(prod), dts[k]);
        double *s = tu_to_f64(sum), *p = tu_to_f64(prod);
        for (int i = 0; i < 6; i++) ck_assert_msg(s[i] == 2 * a[i], "%s add [%d] = %g", opr_dtype_name(dts[k]), i, s[i]);
        /* [1 2 3; 4 5 6] x b, where 1/3 is rounded first (f16: 0.333251953125, bf16: 0.333984375) */
        const double third = k == 0 ? 0.333251953125 : 0.333984375;
        const double want[4] = {0.5 + 2 * -1 + 3 * third, 0.25 + 16 + 6, 2 - 5 + 6 * third, 1 + 40 + 12};
        const double tol = k == 0 ? 1.0 / 1024 : 1.0 / 128;
        for (int i = 0; i < 4; i++)
            ck_assert_msg(fabs(p[i] - want[i]) <= tol * fabs(want[i]), "%s mm [%d] = %g, want %g",
                          opr_dtype_name(dts[k]), i, p[i], want[i]);
        free(s);
        free(p);
        opr_tensor *tr[] = {ha, hb, sum, prod};
        for (int i = 0; i < 4; i++) opr_tensor_release(tr[i]);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* to() into and out of the half types: f32 rounds to nearest even, halves widen
 * exactly, i64 goes through float. */
START_TEST(test_half_conversions)
{
    opr_ctx *ctx = tu_ctx();
    const float third = 1.0f / 3;
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, (float[]){third, -2.5f, 65504.0f}, OPR_CPU);
    opr_tensor *n = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){2049, -7}, OPR_CPU);
    static const char *const names[2] = {"f16", "bf16"};
    /* 1/3 and 2049 rounded: f16 0.333251953125 and 2048, bf16 0.333984375 and 2048;
     * 65504 is f16's largest and rounds to 65536 in bf16 */
    const double want[2][5] = {{0.333251953125, -2.5, 65504, 2048, -7}, {0.333984375, -2.5, 65536, 2048, -7}};
    for (int k = 0; k < 2; k++) {
        opr_tensor *h = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(x), opr_v_string(names[k])}, 2);
        opr_tensor *hn = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(n), opr_v_string(names[k])}, 2);
        opr_tensor *back = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(h), opr_v_string("f64")}, 2);
        ck_assert_str_eq(opr_dtype_name(opr_tensor_dtype(h)), names[k]);
        double *v = tu_to_f64(back), *vn = tu_to_f64(hn);
        for (int i = 0; i < 3; i++) ck_assert_msg(v[i] == want[k][i], "%s: to [%d] = %.12g, want %.12g", names[k], i, v[i], want[k][i]);
        for (int i = 0; i < 2; i++) ck_assert_msg(vn[i] == want[k][3 + i], "%s: i64 [%d] = %g", names[k], i, vn[i]);
        free(v);
        free(vn);
        opr_tensor_release(h);
        opr_tensor_release(hn);
        opr_tensor_release(back);
    }
    opr_tensor_release(x);
    opr_tensor_release(n);
    tu_ctx_free(ctx);
}
END_TEST

/* Batch norm in f16 on the CPU writes its running statistics in place through the f32
 * path (cpu_register_upcast_ex): the f16 tensors the caller holds are updated. */
START_TEST(test_half_batch_norm_running_stats)
{
    opr_ctx *ctx = tu_ctx();
    /* channel 0: 1, 3, 5, 7 (mean 4, unbiased variance 20 / 3); channel 1: all 2 */
    const float xs[8] = {1, 2, 3, 2, 5, 2, 7, 2};
    opr_tensor *x32 = opr_tensor_from_data(ctx, OPR_F32, 2, (int64_t[]){4, 2}, xs, OPR_CPU);
    opr_tensor *x = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(x32), opr_v_string("f16")}, 2);
    opr_tensor *zeros = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, (float[]){0, 0}, OPR_CPU);
    opr_tensor *ones = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, (float[]){1, 1}, OPR_CPU);
    opr_tensor *rm = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(zeros), opr_v_string("f16")}, 2);
    opr_tensor *rv = tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(ones), opr_v_string("f16")}, 2);
    opr_tensor *outs[3] = {NULL};
    opr_value a[] = {opr_v_tensor(x), opr_v_none(), opr_v_none(), opr_v_tensor(rm), opr_v_tensor(rv), opr_v_bool(true),
                     opr_v_double(0.5), opr_v_double(1e-5)};
    ck_assert_msg(!opr_call(opr_op_find(ctx, "native_batch_norm"), a, 8, outs, 3), "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_dtype(rm), OPR_F16);
    double *m = tu_to_f64(rm), *v = tu_to_f64(rv), *y = tu_to_f64(outs[0]);
    /* running = 0.5 running + 0.5 batch: mean (2, 1), variance (0.5 + 10 / 3, 0.5) */
    ck_assert_msg(m[0] == 2 && m[1] == 1, "running_mean %g %g", m[0], m[1]);
    ck_assert_msg(fabs(v[0] - (0.5 + 10.0 / 3)) <= 4e-3 && v[1] == 0.5, "running_var %g %g", v[0], v[1]);
    /* y[0, 0] = (1 - 4) / sqrt(5 + eps) */
    ck_assert_msg(fabs(y[0] + 3 / sqrt(5.00001)) <= 2e-3, "y[0] = %g", y[0]);
    free(m);
    free(v);
    free(y);
    opr_tensor *tr[] = {x32, x, zeros, ones, rm, rv, outs[0], outs[1], outs[2]};
    for (size_t i = 0; i < sizeof tr / sizeof tr[0]; i++) opr_tensor_release(tr[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* t converted by to() to the dtype named `dt`. */
static opr_tensor *to_dt(opr_ctx *ctx, opr_tensor *t, const char *dt)
{
    return tu_call1(ctx, "to", (opr_value[]){opr_v_tensor(t), opr_v_string(dt)}, 2);
}

/* got (a half tensor) equals want (f32) rounded to got's dtype, element for element:
 * what computing in f32 and rounding once at the end gives. Takes both. */
static void expect_rounded(opr_ctx *ctx, opr_tensor *got, opr_tensor *want, const char *what)
{
    const char *dt = opr_dtype_name(opr_tensor_dtype(got));
    opr_tensor *w = to_dt(ctx, want, dt);
    ck_assert_int_eq(opr_tensor_ndim(got), opr_tensor_ndim(w));
    for (int d = 0; d < opr_tensor_ndim(got); d++) ck_assert_int_eq(opr_tensor_size(got, d), opr_tensor_size(w, d));
    double *g = tu_to_f64(got), *v = tu_to_f64(w);
    for (int64_t i = 0; i < opr_tensor_numel(got); i++)
        ck_assert_msg(g[i] == v[i], "%s %s [%lld] = %.9g, want %.9g", dt, what, (long long)i, g[i], v[i]);
    free(g);
    free(v);
    opr_tensor_release(got);
    opr_tensor_release(want);
    opr_tensor_release(w);
}

/* The padding ops move elements only: in f16 and bf16 on the CPU each equals the f32
 * op on the widened input, bit for bit (constant_pad_nd's value rounded to the dtype).
 * The rows of 3000 hold more elements than bf16 (256) and f16 (2048) count exactly: the
 * reflected index must not be computed in the tensor's dtype. */
START_TEST(test_half_padding_exact)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(7);
    opr_tensor *x = tu_rand(ctx, OPR_F32, 4, (int64_t[]){2, 3, 4, 5}, -4, 4);
    opr_tensor *row = tu_rand(ctx, OPR_F32, 2, (int64_t[]){2, 3000}, -4, 4);
    static const char *const names[2] = {"f16", "bf16"};
    const int64_t refl[4] = {1, 2, 3, 1}, repl[6] = {1, 2, 0, 2, 1, 1}, cpad[4] = {1, 0, 2, -1}, refl1[2] = {3, 2};
    for (int k = 0; k < 2; k++) {
        opr_tensor *hr = to_dt(ctx, row, names[k]), *wr = to_dt(ctx, hr, "f32");
        expect_rounded(ctx, tu_call1(ctx, "reflection_pad1d", (opr_value[]){opr_v_tensor(hr), opr_v_ints(refl1, 2)}, 2),
                       tu_call1(ctx, "reflection_pad1d", (opr_value[]){opr_v_tensor(wr), opr_v_ints(refl1, 2)}, 2),
                       "reflection_pad1d");
        opr_tensor_release(hr);
        opr_tensor_release(wr);
        opr_tensor *h = to_dt(ctx, x, names[k]), *w = to_dt(ctx, h, "f32");
        expect_rounded(ctx, tu_call1(ctx, "reflection_pad2d", (opr_value[]){opr_v_tensor(h), opr_v_ints(refl, 4)}, 2),
                       tu_call1(ctx, "reflection_pad2d", (opr_value[]){opr_v_tensor(w), opr_v_ints(refl, 4)}, 2),
                       "reflection_pad2d");
        expect_rounded(ctx, tu_call1(ctx, "replication_pad3d", (opr_value[]){opr_v_tensor(h), opr_v_ints(repl, 6)}, 2),
                       tu_call1(ctx, "replication_pad3d", (opr_value[]){opr_v_tensor(w), opr_v_ints(repl, 6)}, 2),
                       "replication_pad3d");
        expect_rounded(
            ctx, tu_call1(ctx, "constant_pad_nd", (opr_value[]){opr_v_tensor(h), opr_v_ints(cpad, 4), opr_v_double(0.1)}, 3),
            tu_call1(ctx, "constant_pad_nd", (opr_value[]){opr_v_tensor(w), opr_v_ints(cpad, 4), opr_v_double(0.1)}, 3),
            "constant_pad_nd");
        opr_tensor_release(h);
        opr_tensor_release(w);
    }
    opr_tensor_release(x);
    opr_tensor_release(row);
    tu_ctx_free(ctx);
}
END_TEST

/* native_layer_norm and its backward in f16 and bf16 on the CPU: computed in f32 and
 * rounded once (each output the f32 op's on the widened inputs, rounded), mean and
 * rstd in the input's dtype (PyTorch 1.13's CPU kernel); layer_norm gives the same. */
START_TEST(test_half_layer_norm)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(11);
    const int64_t ns[1] = {8}, all[3] = {1, 1, 1};
    opr_tensor *x = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 8}, -2, 2), *g = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 8}, -1, 1);
    opr_tensor *wt = tu_rand(ctx, OPR_F32, 1, ns, 0.5, 2), *b = tu_rand(ctx, OPR_F32, 1, ns, -1, 1);
    static const char *const names[2] = {"f16", "bf16"};
    const opr_op *fwd = opr_op_find(ctx, "native_layer_norm"), *bwd = opr_op_find(ctx, "native_layer_norm_backward");
    for (int k = 0; k < 2; k++) {
        opr_tensor *h[4] = {to_dt(ctx, x, names[k]), to_dt(ctx, g, names[k]), to_dt(ctx, wt, names[k]), to_dt(ctx, b, names[k])};
        opr_tensor *w[4];
        for (int i = 0; i < 4; i++) w[i] = to_dt(ctx, h[i], "f32");
        opr_tensor *ho[3] = {0}, *wo[3] = {0};
        opr_value ha[] = {opr_v_tensor(h[0]), opr_v_ints(ns, 1), opr_v_tensor(h[2]), opr_v_tensor(h[3]), opr_v_double(1e-5)};
        opr_value wa[] = {opr_v_tensor(w[0]), opr_v_ints(ns, 1), opr_v_tensor(w[2]), opr_v_tensor(w[3]), opr_v_double(1e-5)};
        ck_assert_msg(!opr_call(fwd, ha, 5, ho, 3) && !opr_call(fwd, wa, 5, wo, 3), "%s", opr_last_error());
        for (int i = 0; i < 3; i++) ck_assert_str_eq(opr_dtype_name(opr_tensor_dtype(ho[i])), names[k]);
        opr_tensor *ln = tu_call1(ctx, "layer_norm", ha, 5);
        opr_tensor_retain(wo[0]);
        expect_rounded(ctx, ln, wo[0], "layer_norm");
        /* the backward from the half statistics, and the f32 one from them widened */
        opr_tensor *hs[2] = {ho[1], ho[2]}, *ws[2] = {to_dt(ctx, ho[1], "f32"), to_dt(ctx, ho[2], "f32")};
        opr_tensor *hg[3] = {0}, *wg[3] = {0};
        opr_value hb[] = {opr_v_tensor(h[1]), opr_v_tensor(h[0]), opr_v_ints(ns, 1), opr_v_tensor(hs[0]),
                          opr_v_tensor(hs[1]), opr_v_tensor(h[2]), opr_v_tensor(h[3]), opr_v_ints(all, 3)};
        opr_value wb[] = {opr_v_tensor(w[1]), opr_v_tensor(w[0]), opr_v_ints(ns, 1), opr_v_tensor(ws[0]),
                          opr_v_tensor(ws[1]), opr_v_tensor(w[2]), opr_v_tensor(w[3]), opr_v_ints(all, 3)};
        ck_assert_msg(!opr_call(bwd, hb, 8, hg, 3) && !opr_call(bwd, wb, 8, wg, 3), "%s", opr_last_error());
        static const char *const fwd_names[3] = {"native_layer_norm", "mean", "rstd"};
        static const char *const bwd_names[3] = {"grad_input", "grad_weight", "grad_bias"};
        for (int i = 0; i < 3; i++) {
            expect_rounded(ctx, ho[i], wo[i], fwd_names[i]);
            expect_rounded(ctx, hg[i], wg[i], bwd_names[i]);
        }
        for (int i = 0; i < 4; i++) {
            opr_tensor_release(h[i]);
            opr_tensor_release(w[i]);
        }
        opr_tensor_release(ws[0]);
        opr_tensor_release(ws[1]);
    }
    opr_tensor *tr[] = {x, g, wt, b};
    for (size_t i = 0; i < sizeof tr / sizeof tr[0]; i++) opr_tensor_release(tr[i]);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *coverage_suite(void)
{
    Suite *s = suite_create("dtype_coverage");
    TCase *t = tcase_create("cpu");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, test_schema_dtypes_run_on_cpu);
    tcase_add_test(t, test_half_values);
    tcase_add_test(t, test_half_conversions);
    tcase_add_test(t, test_half_batch_norm_running_stats);
    tcase_add_test(t, test_half_padding_exact);
    tcase_add_test(t, test_half_layer_norm);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(coverage_suite()); }
