/* opr_gradcheck, the public finite-difference gradient check: it passes correct ops,
 * and fails, naming the culprit, on a wrong derivative formula loaded from YAML, a
 * wrong fused backward kernel, a wrong forward kernel and the ops whose formulas call
 * that kernel. The wrong kernels come from the vendor plugin of tests/vendor, built in
 * the tree in its broken variants (OPREG_VENDOR_DIR). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const opr_gradcheck_opts *const DEFAULTS = NULL;

/* Runs opr_gradcheck on op's sample s, made in dt on dev. */
static int check_sample(const opr_op *op, int s, opr_dtype dt, opr_device dev, const opr_gradcheck_opts *opts,
                        opr_gradcheck_result *res)
{
    opr_value args[16];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    memset(res, 0, sizeof *res);
    res->struct_size = sizeof *res;
    int rc = opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, args, &nargs, owned, &nowned);
    ck_assert_msg(rc == OPR_OK, "%s sample %d: %s", opr_op_name(op), s, opr_last_error());
    rc = opr_gradcheck(op, args, nargs, NULL, 0, opts, res);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    return rc;
}

START_TEST(correct_ops_pass)
{
    opr_ctx *ctx = tu_ctx();
    const char *names[] = {"mm", "exp", "mul", "linear", "softmax", "norm", "addmm"};
    const opr_dtype dts[] = {OPR_F64, OPR_F32};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const opr_op *op = opr_op_find(ctx, names[i]);
        ck_assert_ptr_nonnull(op);
        for (int s = 0; s < opr_op_sample_count(op); s++)
            for (int d = 0; d < 2; d++) {
                opr_gradcheck_result res;
                int rc = check_sample(op, s, dts[d], OPR_CPU, DEFAULTS, &res);
                ck_assert_msg(rc == OPR_OK, "%s sample %d %s: %s", names[i], s, opr_dtype_name(dts[d]), opr_last_error());
                ck_assert_int_eq(res.failed, 0);
                ck_assert_int_eq(res.culprit, OPR_GC_NONE);
                ck_assert_msg(res.checked > 0 && res.passed == res.checked, "%s: %d checked, %d passed", names[i],
                              res.checked, res.passed);
            }
    }
    tu_ctx_free(ctx);
}
END_TEST

/* mm has three candidates ([self], [mat2], the fused kernel) and two inputs: every
 * candidate x mask, plus the plan by cost per mask; the options narrow that down. */
START_TEST(candidates_masks_and_options)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *mm = opr_op_find(ctx, "mm");
    ck_assert_int_eq(opr_op_grad_candidate_count(mm), 3);
    opr_gradcheck_result res;
    ck_assert_int_eq(check_sample(mm, 0, OPR_F64, OPR_CPU, NULL, &res), OPR_OK);
    /* masks {self}, {mat2}, {self, mat2}: 2 candidates cover each single input, 3 both,
     * and each mask checks the plan by cost once more */
    ck_assert_int_eq(res.checked + res.not_available, (2 + 1) + (2 + 1) + (3 + 1));
    opr_gradcheck_opts o = {.struct_size = sizeof o, .full_mask_only = true};
    ck_assert_int_eq(check_sample(mm, 0, OPR_F64, OPR_CPU, &o, &res), OPR_OK);
    ck_assert_int_eq(res.checked + res.not_available, 3 + 1);
    o.one_candidate = true;
    o.candidate = -1;
    ck_assert_int_eq(check_sample(mm, 0, OPR_F64, OPR_CPU, &o, &res), OPR_OK);
    ck_assert_int_eq(res.checked, 1);
    o.candidate = 3;
    ck_assert_int_eq(check_sample(mm, 0, OPR_F64, OPR_CPU, &o, &res), OPR_ERR_INVALID);

    /* one input by name; the caller's tensors are left as they were */
    int64_t sa[2] = {3, 4}, sb[2] = {4, 2};
    opr_tensor *a = tu_rand(ctx, OPR_F64, 2, sa, -1, 1), *b = tu_rand(ctx, OPR_F64, 2, sb, -1, 1);
    double *before = tu_to_f64(a);
    opr_value args[2] = {opr_v_tensor(a), opr_v_tensor(b)};
    const char *only[] = {"mat2"};
    res = (opr_gradcheck_result){.struct_size = sizeof res};
    ck_assert_int_eq(opr_gradcheck(mm, args, 2, only, 1, NULL, &res), OPR_OK);
    ck_assert_int_eq(res.checked + res.not_available, 2 + 1);
    double *after = tu_to_f64(a);
    ck_assert(!memcmp(before, after, 12 * sizeof(double)));
    ck_assert(!opr_requires_grad(a) && !opr_requires_grad(b));
    free(before);
    free(after);

    /* refusals */
    const char *bad[] = {"nope"};
    ck_assert_int_eq(opr_gradcheck(mm, args, 2, bad, 1, NULL, NULL), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "nope"));
    ck_assert_int_eq(opr_gradcheck(NULL, args, 2, NULL, 0, NULL, NULL), OPR_ERR_INVALID);
    opr_gradcheck_result small = {.struct_size = 8};
    ck_assert_int_eq(opr_gradcheck(mm, args, 2, NULL, 0, NULL, &small), OPR_ERR_INVALID);
    opr_tensor *ia = tu_rand(ctx, OPR_I64, 2, sa, 0, 3), *ib = tu_rand(ctx, OPR_I64, 2, sb, 0, 3);
    opr_value iargs[2] = {opr_v_tensor(ia), opr_v_tensor(ib)};
    ck_assert_int_eq(opr_gradcheck(mm, iargs, 2, NULL, 0, NULL, NULL), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no floating tensor input"));
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_tensor_release(ia);
    opr_tensor_release(ib);
    tu_ctx_free(ctx);
}
END_TEST

/* A composite op whose derivative formula is wrong (d/dx x*x is 2 x grad, not x grad),
 * next to the same op with the right one. */
static const char *square_yaml =
    "- name: gcw_square(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  forward: mul(self, self)\n"
    "  self: mul(grad, self)\n"
    "  samples: [{self: [3, 2]}]\n"
    "- name: gcw_square_ok(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  forward: mul(self, self)\n"
    "  self: mul(mul(grad, self), 2)\n"
    "  samples: [{self: [3, 2]}]\n";
/* Options that would make the check meaningless are refused, 0 still meaning the
 * default; and NaN gradients never pass (torch.autograd.gradcheck: NaN is a mismatch,
 * even against NaN). */
START_TEST(bad_options_and_nan_gradients)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *op = opr_op_find(ctx, "exp");
    opr_gradcheck_result res;
    const double bad_eps[] = {NAN, INFINITY, -1e-6, -INFINITY};
    for (size_t i = 0; i < sizeof bad_eps / sizeof bad_eps[0]; i++) {
        opr_gradcheck_opts o = {.struct_size = sizeof o, .eps = bad_eps[i]};
        ck_assert_int_eq(check_sample(op, 0, OPR_F64, OPR_CPU, &o, &res), OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), "eps") != NULL, "%s", opr_last_error());
    }
    const double bad_tol[] = {NAN, -1e-7, INFINITY};
    for (size_t i = 0; i < sizeof bad_tol / sizeof bad_tol[0]; i++) {
        opr_gradcheck_opts a = {.struct_size = sizeof a, .atol = bad_tol[i]}, r = {.struct_size = sizeof r, .rtol = bad_tol[i]};
        ck_assert_int_eq(check_sample(op, 0, OPR_F64, OPR_CPU, &a, &res), OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), "atol") != NULL, "%s", opr_last_error());
        ck_assert_int_eq(check_sample(op, 0, OPR_F64, OPR_CPU, &r, &res), OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), "rtol") != NULL, "%s", opr_last_error());
    }
    opr_gradcheck_opts zero = {.struct_size = sizeof zero}, set = {.struct_size = sizeof set, .eps = 1e-5, .atol = 1e-6, .rtol = 1e-4};
    ck_assert_int_eq(check_sample(op, 0, OPR_F64, OPR_CPU, &zero, &res), OPR_OK);
    ck_assert_int_eq(check_sample(op, 0, OPR_F64, OPR_CPU, &set, &res), OPR_OK);
    ck_assert_int_gt(res.passed, 0);

    /* sqrt at -1: the forward is NaN on both sides (they agree), and so are the analytic
     * and numeric gradients: a mismatch, not a pass */
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){1}, (double[]){-1}, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(x)};
    memset(&res, 0, sizeof res);
    res.struct_size = sizeof res;
    ck_assert_int_eq(opr_gradcheck(opr_op_find(ctx, "sqrt"), args, 1, NULL, 0, NULL, &res), OPR_ERR_MISMATCH);
    ck_assert_int_gt(res.failed, 0);
    ck_assert_msg(strstr(res.detail, "nan") != NULL, "%s", res.detail);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(wrong_formula_from_yaml)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, square_yaml, "square.yaml", &n) == OPR_OK, "%s", opr_last_error());
    const opr_op *ok = opr_op_find(ctx, "gcw_square_ok"), *bad = opr_op_find(ctx, "gcw_square");
    opr_gradcheck_result res;
    ck_assert_msg(check_sample(ok, 0, OPR_F64, OPR_CPU, NULL, &res) == OPR_OK, "%s", opr_last_error());
    for (int d = 0; d < 2; d++) {
        opr_dtype dt = d ? OPR_F32 : OPR_F64;
        ck_assert_int_eq(check_sample(bad, 0, dt, OPR_CPU, NULL, &res), OPR_ERR_MISMATCH);
        ck_assert_int_eq(res.culprit, OPR_GC_FORMULA);
        ck_assert_str_eq(res.culprit_name, "gcw_square");
        ck_assert_int_eq(res.candidate, 0);
        ck_assert_int_eq(res.failed, 2); /* the candidate, and the plan by cost that uses it */
        ck_assert_msg(strstr(res.detail, "derivative formula [self] is wrong") && strstr(res.detail, "analytic"), "%s",
                      res.detail);
        ck_assert_str_eq(opr_last_error(), res.detail);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* A context with the CPU plugin and the vendor plugin of one variant. */
static opr_ctx *vendor_ctx(const char *variant, opr_device *vdev)
{
    opr_ctx *ctx = tu_ctx();
    char path[1024];
    snprintf(path, sizeof path, "%s/libvendor_%s.so", OPREG_VENDOR_DIR, variant);
    ck_assert_msg(opr_plugin_load(ctx, path) == OPR_OK, "%s: %s", path, opr_last_error());
    ck_assert_int_eq(opr_device_parse(ctx, "vdev", vdev), OPR_OK);
    return ctx;
}

START_TEST(vendor_ok_passes)
{
    opr_device vdev;
    opr_ctx *ctx = vendor_ctx("ok", &vdev);
    const char *names[] = {"vfma", "exp"};
    for (int i = 0; i < 2; i++) {
        opr_gradcheck_result res;
        const opr_op *op = opr_op_find(ctx, names[i]);
        ck_assert_msg(check_sample(op, 0, OPR_F32, vdev, NULL, &res) == OPR_OK, "%s", opr_last_error());
        ck_assert_int_gt(res.passed, 0);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(wrong_fused_kernel)
{
    opr_device vdev;
    opr_ctx *ctx = vendor_ctx("wrong_fused", &vdev);
    const opr_op *vfma = opr_op_find(ctx, "vfma");
    opr_gradcheck_result res;
    ck_assert_int_eq(check_sample(vfma, 0, OPR_F64, vdev, NULL, &res), OPR_ERR_MISMATCH);
    ck_assert_int_eq(res.culprit, OPR_GC_KERNEL);
    ck_assert_str_eq(res.culprit_name, "vfma_backward");
    ck_assert_str_eq(opr_op_grad_candidate_label(vfma, res.candidate), "self, other (kernel vfma_backward)");
    ck_assert_msg(strstr(res.detail, "fused backward kernel vfma_backward is wrong on vdev"), "%s", res.detail);
    /* the formulas are not blamed: forced one by one, they pass */
    for (int c = 0; c < 2; c++) {
        opr_gradcheck_opts o = {.struct_size = sizeof o, .one_candidate = true, .candidate = c};
        ck_assert_msg(check_sample(vfma, 0, OPR_F64, vdev, &o, &res) == OPR_OK, "[%s]: %s",
                      opr_op_grad_candidate_label(vfma, c), opr_last_error());
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(wrong_forward_kernel)
{
    opr_device vdev;
    opr_ctx *ctx = vendor_ctx("wrong_forward", &vdev);
    opr_gradcheck_result res;
    /* mul itself: its forward */
    ck_assert_int_eq(check_sample(opr_op_find(ctx, "mul"), 0, OPR_F32, vdev, NULL, &res), OPR_ERR_MISMATCH);
    ck_assert_int_eq(res.culprit, OPR_GC_FORWARD);
    ck_assert_str_eq(res.culprit_name, "mul");
    ck_assert_msg(strstr(res.detail, "forward kernel is wrong on vdev"), "%s", res.detail);
    /* exp: right forward, its formula mul(grad, result) runs mul on vdev; right on the CPU */
    ck_assert_int_eq(check_sample(opr_op_find(ctx, "exp"), 0, OPR_F32, vdev, NULL, &res), OPR_ERR_MISMATCH);
    ck_assert_int_eq(res.culprit, OPR_GC_HELPER);
    ck_assert_str_eq(res.helpers, "mul");
    ck_assert_msg(strstr(res.detail, "right on the CPU in f64 but wrong on vdev"), "%s", res.detail);
    /* on the CPU, exp is fine */
    ck_assert_int_eq(check_sample(opr_op_find(ctx, "exp"), 0, OPR_F32, OPR_CPU, NULL, &res), OPR_OK);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gradcheck_api");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, correct_ops_pass);
    tcase_add_test(tc, candidates_masks_and_options);
    tcase_add_test(tc, bad_options_and_nan_gradients);
    tcase_add_test(tc, wrong_formula_from_yaml);
    tcase_add_test(tc, vendor_ok_passes);
    tcase_add_test(tc, wrong_fused_kernel);
    tcase_add_test(tc, wrong_forward_kernel);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
