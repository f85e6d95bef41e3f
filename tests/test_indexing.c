/* The Core ATen indexing ops of registry/ops/indexing.yaml beyond what their samples
 * show against PyTorch (test_aten_samples): the refusals. An index outside its dim, a
 * bad reduce, a step that is not positive, a src of the wrong shape fail with a message
 * that says what is wrong, and nothing is written; slice's bounds clamp as PyTorch's;
 * nonzero's result is sized by the data; scatter_reduce's reductions on one hand-made
 * case (repeated indices, include_self false, integer mean). */
#include "test_util.h"

#include <stdlib.h>

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static opr_tensor *i64_of(int ndim, const int64_t *shape, const int64_t *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, ndim, shape, v, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void expect_values(const opr_tensor *t, int ndim, const int64_t *shape, const double *want)
{
    ck_assert_int_eq(opr_tensor_ndim(t), ndim);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        ck_assert_int_eq(opr_tensor_size(t, d), shape[d]);
        n *= shape[d];
    }
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < n; i++) ck_assert_msg(v[i] == want[i], "element %lld: %g, want %g", (long long)i, v[i], want[i]);
    free(v);
}

START_TEST(test_index_out_of_range)
{
    const int64_t s34[] = {3, 4}, s31[] = {3, 1};
    const double zeros[12] = {0};
    opr_tensor *self = tu_f64(ctx, 2, s34, zeros);
    const int64_t bad[] = {0, 4, 1}, neg[] = {0, -1, 1};
    opr_tensor *index = i64_of(2, s31, bad), *nindex = i64_of(2, s31, neg);
    opr_tensor *src = tu_rand(ctx, OPR_F64, 2, s31, -1, 1);
    opr_value a[] = {opr_v_tensor(self), opr_v_int(1), opr_v_tensor(index), opr_v_tensor(src)};
    tu_expect_fail(ctx, "scatter.src", a, 4, 1, OPR_ERR_INVALID, "index 4 is out of bounds for dimension 1 with size 4");
    a[3] = opr_v_double(1);
    tu_expect_fail(ctx, "scatter.value", a, 4, 1, OPR_ERR_INVALID, "index 4 is out of bounds");
    /* PyTorch's scatter does not wrap negative indices */
    a[2] = opr_v_tensor(nindex);
    a[3] = opr_v_tensor(src);
    tu_expect_fail(ctx, "scatter.src", a, 4, 1, OPR_ERR_INVALID, "index -1 is out of bounds");
    opr_value r[] = {opr_v_tensor(self), opr_v_int(1), opr_v_tensor(index), opr_v_tensor(src), opr_v_string("sum"),
                     opr_v_bool(true)};
    tu_expect_fail(ctx, "scatter_reduce.two", r, 6, 1, OPR_ERR_INVALID, "index 4 is out of bounds");
    r[2] = opr_v_tensor(nindex);
    r[4] = opr_v_string("max");
    tu_expect_fail(ctx, "scatter_reduce.two", r, 6, 1, OPR_ERR_INVALID, "reduce");
    opr_value s[] = {opr_v_tensor(self), opr_v_int(1), opr_v_int(4)};
    tu_expect_fail(ctx, "select.int", s, 3, 1, OPR_ERR_INVALID, "index < size(self, dim)");
    s[2] = opr_v_int(-5);
    tu_expect_fail(ctx, "select.int", s, 3, 1, OPR_ERR_INVALID, "index >= -size(self, dim)");
    s[1] = opr_v_int(2);
    s[2] = opr_v_int(0);
    tu_expect_fail(ctx, "select.int", s, 3, 1, OPR_ERR_INVALID, "");
    /* self is unchanged by the failed calls */
    expect_values(self, 2, s34, zeros);
    opr_tensor_release(self);
    opr_tensor_release(index);
    opr_tensor_release(nindex);
    opr_tensor_release(src);
}
END_TEST

START_TEST(test_slice_bounds_and_refusals)
{
    const int64_t s7[] = {7};
    const double v[] = {0, 1, 2, 3, 4, 5, 6};
    opr_tensor *x = tu_f64(ctx, 1, s7, v);
    /* start -100 clamps to 0, end 100 to 7: 0, 3, 6 */
    opr_value a[] = {opr_v_tensor(x), opr_v_int(0), opr_v_int(-100), opr_v_int(100), opr_v_int(3)};
    opr_tensor *t = tu_call1(ctx, "slice.Tensor", a, 5);
    const int64_t s3[] = {3};
    expect_values(t, 1, s3, (const double[]){0, 3, 6});
    opr_tensor_release(t);
    /* end before start: empty */
    a[2] = opr_v_int(5);
    a[3] = opr_v_int(-4);
    t = tu_call1(ctx, "slice.Tensor", a, 5);
    ck_assert_int_eq(opr_tensor_numel(t), 0);
    opr_tensor_release(t);
    /* a step near INT64_MAX: the first element alone (its count and stride once
     * overflowed) */
    a[2] = opr_v_int(2);
    a[3] = opr_v_none();
    a[4] = opr_v_int(INT64_MAX - 1);
    t = tu_call1(ctx, "slice.Tensor", a, 5);
    const int64_t s1[] = {1};
    expect_values(t, 1, s1, (const double[]){2});
    opr_tensor_release(t);
    /* None bounds, a negative start */
    a[2] = opr_v_int(-3);
    a[3] = opr_v_none();
    a[4] = opr_v_int(2);
    t = tu_call1(ctx, "slice.Tensor", a, 5);
    const int64_t s2[] = {2};
    expect_values(t, 1, s2, (const double[]){4, 6});
    /* slice_scatter writes exactly those positions */
    const double w[] = {10, 20};
    opr_tensor *src = tu_f64(ctx, 1, s2, w);
    opr_value b[] = {opr_v_tensor(x), opr_v_tensor(src), opr_v_int(0), opr_v_int(-3), opr_v_none(), opr_v_int(2)};
    opr_tensor *y = tu_call1(ctx, "slice_scatter", b, 6);
    expect_values(y, 1, s7, (const double[]){0, 1, 2, 3, 10, 5, 20});
    opr_tensor_release(y);
    /* a src of another length, a step of 0 */
    b[5] = opr_v_int(1);
    tu_expect_fail(ctx, "slice_scatter", b, 6, 1, OPR_ERR_INVALID, "slice_scatter: src must have the shape of the slice");
    b[5] = opr_v_int(0);
    tu_expect_fail(ctx, "slice_scatter", b, 6, 1, OPR_ERR_INVALID, "step > 0");
    a[4] = opr_v_int(0);
    tu_expect_fail(ctx, "slice.Tensor", a, 5, 1, OPR_ERR_INVALID, "step > 0");
    opr_tensor_release(src);
    opr_tensor_release(t);
    opr_tensor_release(x);
}
END_TEST

START_TEST(test_nonzero_sized_by_data)
{
    const int64_t s23[] = {2, 3};
    const double v[] = {0, -0.0, 2, 5, 0, -1};
    opr_tensor *x = tu_f64(ctx, 2, s23, v);
    opr_value a[] = {opr_v_tensor(x)};
    opr_tensor *t = tu_call1(ctx, "nonzero", a, 1);
    ck_assert_int_eq(opr_tensor_dtype(t), OPR_I64);
    const int64_t s32[] = {3, 2};
    expect_values(t, 2, s32, (const double[]){0, 2, 1, 0, 1, 2});
    opr_tensor_release(t);
    opr_tensor_release(x);
    const double z[] = {0, 0, 0, 0, 0, 0};
    x = tu_f64(ctx, 2, s23, z);
    a[0] = opr_v_tensor(x);
    t = tu_call1(ctx, "nonzero", a, 1);
    ck_assert_int_eq(opr_tensor_size(t, 0), 0);
    ck_assert_int_eq(opr_tensor_size(t, 1), 2);
    opr_tensor_release(t);
    opr_tensor_release(x);
}
END_TEST

/* scatter_reduce along dim 0 of a [3] self with index [0, 0, 2, 0] and src [1, 2, 3, 4]. */
START_TEST(test_scatter_reduce_cases)
{
    const int64_t s3[] = {3}, s4[] = {4};
    const int64_t idx[] = {0, 0, 2, 0};
    opr_tensor *self = tu_f64(ctx, 1, s3, (const double[]){10, 20, 30});
    opr_tensor *index = i64_of(1, s4, idx), *src = tu_f64(ctx, 1, s4, (const double[]){1, 2, 3, 4});
    static const struct { const char *reduce; bool include_self; double want[3]; } cases[] = {
        {"sum", true, {17, 20, 33}}, {"sum", false, {7, 20, 3}}, {"prod", true, {80, 20, 90}},
        {"prod", false, {8, 20, 3}}, {"mean", true, {4.25, 20, 16.5}}, {"mean", false, {7.0 / 3, 20, 3}},
        {"amax", true, {10, 20, 30}}, {"amax", false, {4, 20, 3}}, {"amin", true, {1, 20, 3}},
        {"amin", false, {1, 20, 3}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        opr_value a[] = {opr_v_tensor(self), opr_v_int(0), opr_v_tensor(index), opr_v_tensor(src),
                         opr_v_string(cases[k].reduce), opr_v_bool(cases[k].include_self)};
        opr_tensor *t = tu_call1(ctx, "scatter_reduce.two", a, 6);
        expect_values(t, 1, s3, cases[k].want);
        opr_tensor_release(t);
    }
    /* integer mean divides by flooring, as PyTorch: (10 + 1 + 2 + 4) / 4 -> 4, -7 / 2 -> -4 */
    const int64_t iv[] = {10, 20, -10}, is[] = {1, 2, 3, 4};
    opr_tensor *iself = i64_of(1, s3, iv), *isrc = i64_of(1, s4, is);
    opr_value a[] = {opr_v_tensor(iself), opr_v_int(0), opr_v_tensor(index), opr_v_tensor(isrc), opr_v_string("mean"),
                     opr_v_bool(true)};
    opr_tensor *t = tu_call1(ctx, "scatter_reduce.two", a, 6);
    expect_values(t, 1, s3, (const double[]){4, 20, -4});
    opr_tensor_release(t);
    opr_tensor_release(iself);
    opr_tensor_release(isrc);
    opr_tensor_release(self);
    opr_tensor_release(index);
    opr_tensor_release(src);
}
END_TEST

/* The ATen names resolve: exactly (NAME.OVERLOAD) and, from the base name, by the
 * kinds of the arguments (a number for scatter's last argument picks scatter.value). */
START_TEST(test_names_resolve)
{
    const char *names[] = {"select.int", "select_scatter", "slice.Tensor", "slice_scatter", "scatter.src",
                           "scatter.value", "scatter_reduce.two", "nonzero", "embedding_dense_backward"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(opr_op_find(ctx, names[i]) != NULL, "no op %s", names[i]);
    const int64_t s23[] = {2, 3}, s21[] = {2, 1};
    const int64_t iv[] = {2, 0};
    opr_tensor *x = tu_f64(ctx, 2, s23, (const double[]){1, 2, 3, 4, 5, 6}), *index = i64_of(2, s21, iv);
    opr_value a[] = {opr_v_tensor(x), opr_v_int(1), opr_v_tensor(index), opr_v_double(-1)};
    opr_tensor *t = tu_call1(ctx, "scatter", a, 4);
    expect_values(t, 2, s23, (const double[]){1, 2, -1, -1, 5, 6});
    opr_tensor_release(t);
    opr_value b[] = {opr_v_tensor(x), opr_v_int(1), opr_v_int(-1)};
    t = tu_call1(ctx, "select", b, 3);
    const int64_t s2[] = {2};
    expect_values(t, 1, s2, (const double[]){3, 6});
    opr_tensor_release(t);
    opr_value c[] = {opr_v_tensor(x), opr_v_int(1), opr_v_none(), opr_v_none(), opr_v_int(2)};
    t = tu_call1(ctx, "slice", c, 5);
    const int64_t s22[] = {2, 2};
    expect_values(t, 2, s22, (const double[]){1, 3, 4, 6});
    opr_tensor_release(t);
    opr_tensor_release(x);
    opr_tensor_release(index);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("indexing");
    TCase *tc = tcase_create("indexing");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_index_out_of_range);
    tcase_add_test(tc, test_slice_bounds_and_refusals);
    tcase_add_test(tc, test_nonzero_sized_by_data);
    tcase_add_test(tc, test_scatter_reduce_cases);
    tcase_add_test(tc, test_names_resolve);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
