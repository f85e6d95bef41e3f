/* Advanced indexing (index.Tensor, index_put, index_put_ of registry/ops/indexing.yaml)
 * beyond what their samples show against PyTorch (test_aten_samples): the refusals,
 * each with a message that says what is wrong and nothing written (an index outside its
 * dim, more indices than dims, index shapes that do not broadcast, a mask whose shape
 * is not self's, values that do not broadcast to the indexed shape, a float index);
 * and the layout rules on a tensor whose elements are their own flat positions, so that
 * each result element names where it came from; and the version check of the index
 * tensors index's node saves. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static opr_tensor *i64_of(int ndim, const int64_t *shape, const int64_t *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, ndim, shape, v, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void expect_shape(const opr_tensor *t, int ndim, const int64_t *shape)
{
    ck_assert_int_eq(opr_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++) ck_assert_int_eq(opr_tensor_size(t, d), shape[d]);
}

START_TEST(test_layout)
{
    /* x[i, :, j] with x [3, 4, 5]: the broadcast index dims go first (not adjacent) */
    const int64_t s345[] = {3, 4, 5}, s2[] = {2};
    opr_tensor *x = tu_iota(ctx, 3, s345);
    opr_tensor *i = i64_of(1, s2, (const int64_t[]){2, -3}), *j = i64_of(1, s2, (const int64_t[]){-1, 1});
    opr_tensor *items[] = {i, NULL, j};
    opr_value a[] = {opr_v_tensor(x), opr_v_tensors(items, 3)};
    opr_tensor *r = tu_call1(ctx, "index.Tensor", a, 2);
    expect_shape(r, 2, (const int64_t[]){2, 4});
    double *v = tu_to_f64(r);
    const int64_t iv[] = {2, 0}, jv[] = {4, 1}; /* wrapped */
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 4; m++)
            ck_assert_double_eq(v[k * 4 + m], (double)(iv[k] * 20 + m * 5 + jv[k]));
    free(v);
    opr_tensor_release(r);
    /* x[:, i] with i [2, 1] and a None first: adjacent, B in place of dim 1 */
    const int64_t s21[] = {2, 1};
    opr_tensor *i2 = i64_of(2, s21, (const int64_t[]){3, 0});
    opr_tensor *items2[] = {NULL, i2};
    a[1] = opr_v_tensors(items2, 2);
    r = tu_call1(ctx, "index", a, 2);
    expect_shape(r, 4, (const int64_t[]){3, 2, 1, 5});
    v = tu_to_f64(r);
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < 5; m++)
                ck_assert_double_eq(v[(p * 2 + k) * 5 + m], (double)(p * 20 + (k ? 0 : 3) * 5 + m));
    free(v);
    opr_tensor_release(r);
    opr_tensor_release(i2);
    opr_tensor_release(x);
    opr_tensor_release(i);
    opr_tensor_release(j);
}
END_TEST

START_TEST(test_accumulate_sums_repeats)
{
    const int64_t s4[] = {4}, s5[] = {5};
    opr_tensor *x = tu_iota(ctx, 1, s4), *vals = tu_iota(ctx, 1, s5);
    opr_tensor *idx = i64_of(1, s5, (const int64_t[]){1, -3, 3, 1, 0});
    opr_tensor *items[] = {idx};
    opr_value a[] = {opr_v_tensor(x), opr_v_tensors(items, 1), opr_v_tensor(vals), opr_v_bool(true)};
    opr_tensor *r = tu_call1(ctx, "index_put", a, 4);
    double *v = tu_to_f64(r);
    /* position 1 gets values 0, 1 and 3 on top of its own 1; 0 gets 4; 3 gets 2 */
    const double want[] = {0 + 4, 1 + 0 + 1 + 3, 2, 3 + 2};
    for (int k = 0; k < 4; k++) ck_assert_double_eq(v[k], want[k]);
    free(v);
    opr_tensor_release(r);
    /* in place: self itself changes, and a failing call leaves it as it was */
    opr_tensor *r2 = tu_call1(ctx, "index_put_", a, 4);
    ck_assert_ptr_eq(r2, x);
    opr_tensor_release(r2);
    opr_tensor *bad = i64_of(1, s5, (const int64_t[]){0, 1, 2, 3, 4});
    items[0] = bad;
    tu_expect_fail(ctx, "index_put_", a, 4, 1, OPR_ERR_INVALID, "index 4 is out of bounds for dimension 0 with size 4");
    v = tu_to_f64(x);
    for (int k = 0; k < 4; k++) ck_assert_double_eq(v[k], want[k]);
    free(v);
    opr_tensor_release(bad);
    opr_tensor_release(idx);
    opr_tensor_release(vals);
    opr_tensor_release(x);
}
END_TEST

START_TEST(test_refusals)
{
    const int64_t s34[] = {3, 4}, s2[] = {2}, s3[] = {3}, s4[] = {4};
    opr_tensor *x = tu_iota(ctx, 2, s34);
    opr_tensor *i2 = i64_of(1, s2, (const int64_t[]){0, -4}), *i3 = i64_of(1, s3, (const int64_t[]){0, 1, 2});
    opr_tensor *items[] = {i2, i3, i3};
    opr_value a[] = {opr_v_tensor(x), opr_v_tensors(items, 1)};
    tu_expect_fail(ctx, "index", a, 2, 1, OPR_ERR_INVALID, "index -4 is out of bounds for dimension 0 with size 3");
    a[1] = opr_v_tensors(items, 3);
    tu_expect_fail(ctx, "index", a, 2, 1, OPR_ERR_INVALID, "too many indices for tensor of dimension 2");
    items[0] = i3;
    items[1] = i2;
    a[1] = opr_v_tensors(items, 2);
    tu_expect_fail(ctx, "index", a, 2, 1, OPR_ERR_INVALID, "could not be broadcast together");
    /* a mask must have self's sizes where it indexes */
    opr_tensor *mask = opr_tensor_from_data(ctx, OPR_BOOL, 1, s4, (const uint8_t[]){1, 0, 1, 1}, OPR_CPU);
    items[0] = mask;
    a[1] = opr_v_tensors(items, 1);
    tu_expect_fail(ctx, "index", a, 2, 1, OPR_ERR_INVALID, "does not match the shape of the indexed tensor");
    /* a float index */
    opr_tensor *f = tu_iota(ctx, 1, s2);
    items[0] = f;
    tu_expect_fail(ctx, "index", a, 2, 1, OPR_ERR_INVALID, "must be i64");
    /* values that do not broadcast to x[i3] ([3, 4]) */
    items[0] = i3;
    opr_tensor *vals = tu_iota(ctx, 1, s3);
    opr_value p[] = {opr_v_tensor(x), opr_v_tensors(items, 1), opr_v_tensor(vals)};
    tu_expect_fail(ctx, "index_put", p, 3, 1, OPR_ERR_INVALID, "broadcastable_to");
    opr_tensor_release(vals);
    opr_tensor_release(f);
    opr_tensor_release(mask);
    opr_tensor_release(i2);
    opr_tensor_release(i3);
    opr_tensor_release(x);
}
END_TEST

/* index's node keeps its index tensors (its gradient scatters through them), and checks
 * them at backward as it checks its other saved tensors: an index changed in place after
 * the call fails the backward, naming it, instead of sending the gradient to the new
 * positions. Unchanged, the gradient lands on the indexed rows. */
START_TEST(test_index_changed_after_forward)
{
    const int64_t s43[] = {4, 3}, s3[] = {3}, s33[] = {3, 3};
    opr_tensor *x = tu_iota(ctx, 2, s43), *idx = i64_of(1, s3, (const int64_t[]){0, 2, 2});
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *items[] = {idx};
    opr_value a[] = {opr_v_tensor(x), opr_v_tensors(items, 1)};
    opr_tensor *ones = opr_tensor_from_data(ctx, OPR_F64, 2, s33, (const double[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, OPR_CPU);
    opr_tensor *y = tu_call1(ctx, "index.Tensor", a, 2);
    ck_assert_int_eq(opr_backward(y, ones, NULL), OPR_OK);
    double *g = tu_to_f64(opr_grad(x));
    for (int k = 0; k < 12; k++) ck_assert_double_eq(g[k], k < 3 ? 1 : k < 6 ? 0 : k < 9 ? 2 : 0);
    free(g);
    opr_tensor_release(y);
    y = tu_call1(ctx, "index.Tensor", a, 2);
    opr_value fill[] = {opr_v_tensor(idx), opr_v_double(3)};
    opr_tensor_release(tu_call1(ctx, "fill_", fill, 2));
    ck_assert_int_eq(opr_backward(y, ones, NULL), OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "'indices[0]', saved for it, was modified in place"), "message: %s",
                  opr_last_error());
    g = tu_to_f64(opr_grad(x)); /* the first backward's, nothing added */
    ck_assert_double_eq(g[0], 1);
    ck_assert_double_eq(g[9], 0);
    free(g);
    opr_tensor_release(y);
    opr_tensor_release(ones);
    opr_tensor_release(idx);
    opr_tensor_release(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("adv_index");
    TCase *tc = tcase_create("adv_index");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_accumulate_sums_repeats);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_index_changed_after_forward);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
