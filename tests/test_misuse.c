/* Misuse of opr_call returns an error code and a message that says what was wrong, and
 * leaves every argument as it was. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;
static opr_tensor *a23, *b34, *c23d, *idx;

static void setup(void)
{
    ctx = tu_ctx();
    tu_seed(7);
    a23 = tu_rand(ctx, OPR_F32, 2, (int64_t[]){2, 3}, -1, 1);
    b34 = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 4}, -1, 1);
    c23d = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    idx = tu_rand(ctx, OPR_I64, 1, (int64_t[]){2}, 0, 2);
}

static void teardown(void)
{
    opr_tensor_release(a23);
    opr_tensor_release(b34);
    opr_tensor_release(c23d);
    opr_tensor_release(idx);
    tu_ctx_free(ctx);
}

START_TEST(null_op_and_results)
{
    opr_tensor *out = NULL;
    ck_assert_int_eq(opr_call(NULL, NULL, 0, &out, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "NULL op"));
    opr_value args[2] = {opr_v_tensor(a23), opr_v_tensor(a23)};
    const opr_op *add = opr_op_find(ctx, "add");
    ck_assert_int_eq(opr_call(add, args, 2, NULL, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "NULL results"));
    ck_assert_int_eq(opr_call(add, NULL, 2, &out, 1), OPR_ERR_INVALID);
    ck_assert_ptr_null(opr_op_find(ctx, "no_such_op"));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no op named 'no_such_op'"));
}
END_TEST

START_TEST(argument_and_result_counts)
{
    opr_value args[4] = {opr_v_tensor(a23), opr_v_tensor(a23), opr_v_double(1), opr_v_int(3)};
    tu_expect_fail(ctx, "add", args, 4, 1, OPR_ERR_INVALID, "at most 3 argument(s), 4 given");
    tu_expect_fail(ctx, "add", args, 1, 1, OPR_ERR_INVALID, "missing argument 'other'");
    tu_expect_fail(ctx, "add", args, 2, 2, OPR_ERR_INVALID, "returns 1 tensor(s), 2 result slot(s)");
    tu_expect_fail(ctx, "max.dim", (opr_value[]){opr_v_tensor(a23), opr_v_int(0)}, 2, 3, OPR_ERR_INVALID,
                   "returns 2 tensor(s), 3 result slot(s) given (1 to 2)");
}
END_TEST

START_TEST(argument_kinds)
{
    /* add(x, 3) is add.Scalar (test_overloads): the Tensor overload refuses a number */
    tu_expect_fail(ctx, "add.Tensor", (opr_value[]){opr_v_tensor(a23), opr_v_int(3)}, 2, 1, OPR_ERR_INVALID,
                   "argument 'other' expects Tensor, got int");
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(NULL)}, 2, 1, OPR_ERR_INVALID,
                   "'other' is a NULL tensor");
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a23), opr_v_none()}, 2, 1, OPR_ERR_INVALID,
                   "'other' (Tensor) is not optional");
    tu_expect_fail(ctx, "sum", (opr_value[]){opr_v_tensor(a23), opr_v_string("x")}, 2, 1, OPR_ERR_INVALID,
                   "'dim' expects int[], got str");
    tu_expect_fail(ctx, "zeros", (opr_value[]){opr_v_ints((int64_t[]){2}, 1), opr_v_string("f99")}, 2, 1,
                   OPR_ERR_INVALID, "unknown dtype 'f99'");
    tu_expect_fail(ctx, "zeros", (opr_value[]){opr_v_ints((int64_t[]){2}, 1), opr_v_string("f32"), opr_v_string("tpu")},
                   3, 1, OPR_ERR_NOT_FOUND, "device 'tpu'");
    opr_tensor *list[2] = {a23, NULL};
    tu_expect_fail(ctx, "cat", (opr_value[]){opr_v_tensors(list, 2)}, 1, 1, OPR_ERR_INVALID, "'tensors[1]' is NULL");
}
END_TEST

START_TEST(shape_mismatch_names_the_shapes)
{
    tu_expect_fail(ctx, "mm", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(a23)}, 2, 1, OPR_ERR_INVALID,
                   "check failed: size(self, 1) == size(mat2, 0) (self: [2, 3] f32 cpu, mat2: [2, 3] f32 cpu)");
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b34)}, 2, 1, OPR_ERR_INVALID,
                   "shapes do not broadcast: [2, 3] [3, 4]");
    tu_expect_fail(ctx, "sum", (opr_value[]){opr_v_tensor(a23), opr_v_ints((int64_t[]){5}, 1)}, 2, 1,
                   OPR_ERR_INVALID, "dim 5 out of range");
    tu_expect_fail(ctx, "sum", (opr_value[]){opr_v_tensor(a23), opr_v_ints((int64_t[]){1, -1}, 2)}, 2, 1,
                   OPR_ERR_INVALID, "appears twice");
    tu_expect_fail(ctx, "narrow", (opr_value[]){opr_v_tensor(a23), opr_v_int(1), opr_v_int(2), opr_v_int(5)}, 4, 1,
                   OPR_ERR_INVALID, "out of range");
    tu_expect_fail(ctx, "topk", (opr_value[]){opr_v_tensor(a23), opr_v_int(9)}, 2, 2, OPR_ERR_INVALID,
                   "k <= size(self, dim)");
}
END_TEST

START_TEST(dtype_mismatch)
{
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(c23d)}, 2, 1, OPR_ERR_INVALID,
                   "'other' is f64 but earlier tensor arguments are f32");
    tu_expect_fail(ctx, "index_select", (opr_value[]){opr_v_tensor(a23), opr_v_int(0), opr_v_tensor(a23)}, 3, 1,
                   OPR_ERR_INVALID, "'index' must be i64");
    opr_tensor *i23 = tu_rand(ctx, OPR_I64, 2, (int64_t[]){2, 3}, 0, 5);
    tu_expect_fail(ctx, "exp", (opr_value[]){opr_v_tensor(i23)}, 1, 1, OPR_ERR_INVALID,
                   "dtype i64 is not supported by this op");
    opr_tensor_release(i23);
}
END_TEST

START_TEST(tensors_of_another_context)
{
    opr_ctx *other = tu_ctx();
    opr_tensor *x = tu_rand(other, OPR_F32, 2, (int64_t[]){2, 3}, -1, 1);
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(x)}, 2, 1, OPR_ERR_INVALID,
                   "belongs to another context");
    opr_tensor_release(x);
    tu_ctx_free(other);
}
END_TEST

START_TEST(failed_inplace_changes_nothing)
{
    double before[6], after[6];
    opr_tensor *self = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    opr_tensor_copy_to_host(self, before, sizeof before);
    opr_tensor *bad_idx = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){0, 7}, OPR_CPU);
    opr_tensor *src = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    opr_value args[4] = {opr_v_tensor(self), opr_v_int(0), opr_v_tensor(bad_idx), opr_v_tensor(src)};
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, "index_add_", args, 4, &out, 1);
    ck_assert_int_eq(rc, OPR_ERR_INVALID);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "index_add_"));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "out of range"));
    opr_tensor_copy_to_host(self, after, sizeof after);
    ck_assert_mem_eq(before, after, sizeof before);
    /* the same call with valid indices works and returns self */
    opr_tensor *good_idx = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){1, 0}, OPR_CPU);
    args[2] = opr_v_tensor(good_idx);
    out = tu_call1(ctx, "index_add_", args, 4);
    ck_assert_ptr_eq(out, self);
    opr_tensor *all[] = {out, self, bad_idx, good_idx, src};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

START_TEST(no_kernel_for_user_op)
{
    const char *yaml = "- name: my_op(Tensor self) -> Tensor\n  shape: sizes(self)\n";
    int n = 0;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, yaml, "user.yaml", &n), OPR_OK);
    ck_assert_int_eq(n, 1);
    tu_expect_fail(ctx, "my_op", (opr_value[]){opr_v_tensor(a23)}, 1, 1, OPR_ERR_NOT_FOUND,
                   "my_op: no kernel for device cpu");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_create("misuse");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, null_op_and_results);
    tcase_add_test(tc, argument_and_result_counts);
    tcase_add_test(tc, argument_kinds);
    tcase_add_test(tc, shape_mismatch_names_the_shapes);
    tcase_add_test(tc, dtype_mismatch);
    tcase_add_test(tc, tensors_of_another_context);
    tcase_add_test(tc, failed_inplace_changes_nothing);
    tcase_add_test(tc, no_kernel_for_user_op);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
