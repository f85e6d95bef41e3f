/* The Core ATen reductions and shape ops of registry/ops/reduction.yaml and shape.yaml
 * beyond what the table-driven suites check on their samples (test_aten_samples against
 * PyTorch, test_gradcheck, opreg check): that every ATen name resolves, by its full
 * name and through the overload resolver from the base name; amax / amin at tied
 * extrema, where finite differences cannot judge (normal mode: PyTorch's share of
 * grad / k; fast mode: all of it to each); and the clear errors on the argument
 * constraints PyTorch checks. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;
static void setup(void) { ctx = tu_ctx(); opr_special_grads_set(true); opr_grad_mode_set(true); }
static void teardown(void) { opr_special_grads_set(true); tu_ctx_free(ctx); }

START_TEST(names_resolve)
{
    static const char *const names[] = {
        "sum.dim_IntList", "mean.dim", "prod.dim_int", "var.correction", "var.dim", "squeeze.dim", "squeeze.dims",
        "arange.start_step", "amax", "amin", "any", "any.dim", "any.dims", "cumsum", "view", "alias", "clone",
        "split_with_sizes", "flip", "repeat", "copy", "_to_copy", "empty.memory_format", "empty_strided", "full",
        "fill.Scalar", "scalar_tensor", "expand", "permute",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(opr_op_find(ctx, names[i]) != NULL, "no op %s", names[i]);
    /* an overload name on an existing op is that op: one implementation, two names */
    ck_assert_ptr_eq(opr_op_find(ctx, "sum.dim_IntList"), opr_op_find(ctx, "sum"));
    ck_assert_ptr_eq(opr_op_find(ctx, "var.correction"), opr_op_find(ctx, "var"));
    /* mean is ATen's default overload (no overload name), mean.dim a composite over it */
    ck_assert_ptr_null(opr_op_overload_name(opr_op_find(ctx, "mean")));
    ck_assert_ptr_ne(opr_op_find(ctx, "mean.dim"), opr_op_find(ctx, "mean"));
    ck_assert(opr_op_is_composite(opr_op_find(ctx, "mean.dim")));
    /* the resolver picks by the kinds of the arguments: any(x), any(x, 1), any(x, [0, 1]) */
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    const int64_t dims[2] = {0, 1};
    opr_value a[3] = {opr_v_tensor(x), opr_v_int(1), opr_v_ints(dims, 2)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "any", a, 1, NULL, 0), opr_op_find(ctx, "any"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "any", a, 2, NULL, 0), opr_op_find(ctx, "any.dim"));
    opr_value l[2] = {opr_v_tensor(x), opr_v_ints(dims, 2)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "any", l, 2, NULL, 0), opr_op_find(ctx, "any.dims"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "squeeze", l, 2, NULL, 0), opr_op_find(ctx, "squeeze.dims"));
    opr_tensor_release(x);
}
END_TEST

/* d sum(op(x, dim)) / dx for a [3, 4] x, recorded in fast mode or not. */
static double *extremum_grad(const char *op, opr_tensor *x, bool fast)
{
    const int64_t dim[1] = {1};
    bool prev = opr_special_grads_set(!fast);
    opr_tensor *y = tu_call1(ctx, op, (opr_value[]){opr_v_tensor(x), opr_v_ints(dim, 1)}, 2);
    opr_special_grads_set(prev);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y)}, 1), *g = NULL;
    ck_assert_msg(opr_autograd_grad(&s, NULL, 1, &x, 1, &g, NULL) == OPR_OK, "%s", opr_last_error());
    double *v = tu_to_f64(g);
    opr_tensor_release(g);
    opr_tensor_release(s);
    opr_tensor_release(y);
    return v;
}

/* Rows with 1, 2 and 3 tied extrema: each tied element gets 1 / (the row's ties) in
 * normal mode, 1 in fast mode, the others 0. */
START_TEST(extremum_ties)
{
    const double v[12] = {1, 9, 2, 3, 5, 5, -1, 0, 4, 4, 4, -2};
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){3, 4}, v, OPR_CPU);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    for (int which = 0; which < 2; which++) {
        const char *op = which ? "amin" : "amax";
        double *n = extremum_grad(op, x, false), *f = extremum_grad(op, x, true);
        for (int r = 0; r < 3; r++) {
            double ext = v[r * 4];
            for (int c = 1; c < 4; c++) ext = which ? fmin(ext, v[r * 4 + c]) : fmax(ext, v[r * 4 + c]);
            int ties = 0;
            for (int c = 0; c < 4; c++) ties += v[r * 4 + c] == ext;
            for (int c = 0; c < 4; c++) {
                const bool tied = v[r * 4 + c] == ext;
                ck_assert_msg(fabs(n[r * 4 + c] - (tied ? 1.0 / ties : 0)) < 1e-15, "%s normal [%d, %d]: %g", op, r, c, n[r * 4 + c]);
                ck_assert_msg(f[r * 4 + c] == (tied ? 1 : 0), "%s fast [%d, %d]: %g", op, r, c, f[r * 4 + c]);
            }
        }
        free(n);
        free(f);
    }
    opr_tensor_release(x);
}
END_TEST

/* Calls op by name; expects a failure whose message holds `why`, and no result. */
static void expect_error(const char *op, const opr_value *args, int nargs, const char *why)
{
    opr_tensor *out[4] = {NULL, NULL, NULL, NULL};
    const opr_op *o = opr_op_find(ctx, op);
    ck_assert_ptr_nonnull(o);
    int rc = opr_op_returns_list(o) ? opr_op_result_count(o, args, nargs, &(int){0}) : opr_call(o, args, nargs, out, 1);
    ck_assert_msg(rc != OPR_OK, "%s: accepted bad arguments", op);
    ck_assert_msg(strstr(opr_last_error(), why) != NULL, "%s: error '%s' does not say '%s'", op, opr_last_error(), why);
    ck_assert_ptr_null(out[0]);
}

START_TEST(bad_arguments)
{
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    opr_tensor *e = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 0}, -1, 1);
    const int64_t twice[2] = {1, -1}, far[1] = {2}, one[1] = {2}, sizes[2] = {1, 1}, last[1] = {1};
    expect_error("flip", (opr_value[]){opr_v_tensor(x), opr_v_ints(twice, 2)}, 2, "twice");
    expect_error("flip", (opr_value[]){opr_v_tensor(x), opr_v_ints(far, 1)}, 2, "out of range");
    expect_error("cumsum", (opr_value[]){opr_v_tensor(x), opr_v_int(2)}, 2, "check failed");
    expect_error("repeat", (opr_value[]){opr_v_tensor(x), opr_v_ints(one, 1)}, 2, "len(repeats) >= dim(self)");
    expect_error("split_with_sizes", (opr_value[]){opr_v_tensor(x), opr_v_ints(sizes, 2), opr_v_int(1)}, 3,
                 "list_sum(split_sizes) == size(self, dim)");
    /* a reduction over an empty dim has no extremum */
    expect_error("amax", (opr_value[]){opr_v_tensor(e), opr_v_ints(last, 1)}, 2, "check failed");
    expect_error("amin", (opr_value[]){opr_v_tensor(x), opr_v_ints(twice, 2)}, 2, "twice");
    expect_error("empty_strided", (opr_value[]){opr_v_ints(sizes, 2), opr_v_ints(one, 1)}, 2,
                 "len(stride) == len(size)");
    opr_tensor_release(x);
    opr_tensor_release(e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("aten_reduce_shape");
    TCase *tc = tcase_create("aten_reduce_shape");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, names_resolve);
    tcase_add_test(tc, extremum_ties);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
