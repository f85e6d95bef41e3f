/* Programs written the way PyTorch programs are: overload sets (max and max.dim, gt
 * and gt.Scalar) resolved by the arguments' kinds, keyword arguments, a subset of a
 * multi-output op's outputs, argument introspection, Scalar arguments with PyTorch's
 * wrapped-number promotion, 0-d tensors promoted by category, and the `to` op that the
 * promotion runs. References are computed here from the inputs' values. */
#include "tests/test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static opr_tensor *from(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, data, OPR_CPU);
    ck_assert_msg(t, "%s", opr_last_error());
    return t;
}

static void expect_values(const opr_tensor *t, opr_dtype dt, int n, const double *want)
{
    ck_assert_int_eq(opr_tensor_dtype(t), dt);
    double *got = tu_to_f64(t);
    for (int i = 0; i < n; i++) ck_assert_msg(fabs(got[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])), "[%d] %g != %g", i, got[i], want[i]);
    free(got);
}

START_TEST(test_find_and_sets)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *dim = opr_op_find(ctx, "max.dim"), *all = opr_op_find(ctx, "max");
    ck_assert_ptr_nonnull(dim);
    ck_assert_ptr_nonnull(all);
    ck_assert_ptr_ne(dim, all);
    ck_assert_str_eq(opr_op_name(dim), "max.dim");
    ck_assert_str_eq(opr_op_overload_name(dim), "dim");
    ck_assert_ptr_null(opr_op_overload_name(all));
    /* gt is written without an overload name and declares `overload: Tensor` */
    ck_assert_ptr_eq(opr_op_find(ctx, "gt.Tensor"), opr_op_find(ctx, "gt"));
    ck_assert_str_eq(opr_op_overload_name(opr_op_find(ctx, "gt")), "Tensor");
    ck_assert_ptr_null(opr_op_find(ctx, "gt.Nothing"));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no op named 'gt.Nothing'"));
    const opr_op *set[8];
    ck_assert_int_eq(opr_op_overloads(ctx, "max", set, 8), 2);
    ck_assert_ptr_eq(set[0], all);
    ck_assert_ptr_eq(set[1], dim);
    ck_assert_int_eq(opr_op_overloads(ctx, "max.dim", NULL, 0), 2);
    ck_assert_int_eq(opr_op_overloads(ctx, "where", set, 8), 3);
    ck_assert_int_eq(opr_op_overloads(ctx, "nothing_like_it", set, 8), 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_resolve_by_kinds)
{
    opr_ctx *ctx = tu_ctx();
    const double xv[6] = {1, 5, 2, 7, 0, 3};
    opr_tensor *x = from(ctx, OPR_F64, 2, (int64_t[]){2, 3}, xv);
    opr_value a[2] = {opr_v_tensor(x), opr_v_int(1)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "max", a, 1, NULL, 0), opr_op_find(ctx, "max"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "max", a, 2, NULL, 0), opr_op_find(ctx, "max.dim"));
    opr_kwarg kw = opr_kw("dim", opr_v_int(1));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "max", a, 1, &kw, 1), opr_op_find(ctx, "max.dim"));
    /* a number picks the Scalar overload, a tensor the Tensor one */
    opr_value num[2] = {opr_v_tensor(x), opr_v_double(2.5)}, ten[2] = {opr_v_tensor(x), opr_v_tensor(x)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "gt", num, 2, NULL, 0), opr_op_find(ctx, "gt.Scalar"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "gt", ten, 2, NULL, 0), opr_op_find(ctx, "gt"));
    /* max(x, dim=1) the PyTorch way: values and indices of each row */
    opr_tensor *r[2] = {NULL, NULL};
    ck_assert_msg(opr_call_by_name_kw(ctx, "max", a, 1, &kw, 1, r, 2) == OPR_OK, "%s", opr_last_error());
    expect_values(r[0], OPR_F64, 2, (double[]){5, 7});
    expect_values(r[1], OPR_I64, 2, (double[]){1, 0});
    opr_tensor_release(r[0]);
    opr_tensor_release(r[1]);
    /* nothing fits: every schema is named with why */
    opr_value bad[2] = {opr_v_tensor(x), opr_v_string("no")};
    ck_assert_ptr_null(opr_op_resolve(ctx, "max", bad, 2, NULL, 0));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no overload of 'max' takes (Tensor, str)"));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "max.dim(Tensor self, int dim"));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "argument 'dim' has the wrong kind"));
    ck_assert_ptr_null(opr_op_resolve(ctx, "nope", a, 1, NULL, 0));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no op named 'nope'"));
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_keywords)
{
    opr_ctx *ctx = tu_ctx();
    const double xv[6] = {1, 2, 3, 4, 5, 6};
    opr_tensor *x = from(ctx, OPR_F64, 2, (int64_t[]){2, 3}, xv);
    const opr_op *sum = opr_op_find(ctx, "sum");
    opr_value a = opr_v_tensor(x);
    /* keepdim given, dim skipped: its default None (every dim) */
    opr_kwarg keep = opr_kw("keepdim", opr_v_bool(true));
    opr_tensor *r = NULL;
    ck_assert_msg(opr_call_kw(sum, &a, 1, &keep, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_ndim(r), 2);
    ck_assert_int_eq(opr_tensor_shape(r)[0], 1);
    expect_values(r, OPR_F64, 1, (double[]){21});
    opr_tensor_release(r);
    /* an int for int[] dim, as sum(x, dim=1) */
    opr_kwarg d1 = opr_kw("dim", opr_v_int(1));
    ck_assert_msg(opr_call_kw(sum, &a, 1, &d1, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F64, 2, (double[]){6, 15});
    opr_tensor_release(r);
    /* errors: unknown, repeated, missing */
    opr_kwarg unknown = opr_kw("axis", opr_v_int(0));
    ck_assert_int_eq(opr_call_kw(sum, &a, 1, &unknown, 1, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no argument named 'axis'"));
    opr_kwarg twice[2] = {opr_kw("dim", opr_v_int(0)), opr_kw("dim", opr_v_int(1))};
    ck_assert_int_eq(opr_call_kw(sum, &a, 1, twice, 2, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "argument 'dim' given twice"));
    opr_kwarg self_again = opr_kw("self", opr_v_tensor(x));
    ck_assert_int_eq(opr_call_kw(sum, &a, 1, &self_again, 1, &r, 1), OPR_ERR_INVALID);
    const opr_op *narrow = opr_op_find(ctx, "narrow");
    opr_kwarg len = opr_kw("length", opr_v_int(1));
    ck_assert_int_eq(opr_call_kw(narrow, &a, 1, &len, 1, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "missing argument 'dim'"));
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_output_subset)
{
    opr_ctx *ctx = tu_ctx();
    const double xv[4] = {3, 1, 2, 8};
    opr_tensor *x = from(ctx, OPR_F64, 2, (int64_t[]){2, 2}, xv);
    const opr_op *mind = opr_op_find(ctx, "min.dim");
    opr_value a[2] = {opr_v_tensor(x), opr_v_int(1)};
    opr_tensor *v = NULL;
    ck_assert_msg(opr_call(mind, a, 2, &v, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(v, OPR_F64, 2, (double[]){1, 2});
    opr_tensor_release(v);
    opr_tensor *r[3];
    ck_assert_int_eq(opr_call(mind, a, 2, r, 3), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_call(mind, a, 2, r, 0), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_op_output_index(mind, "indices"), 1);
    ck_assert_str_eq(opr_op_output_name(mind, 0), "values");
    ck_assert_int_eq(opr_op_output_index(mind, "nothing"), -1);
    ck_assert_str_eq(opr_op_output_name(opr_op_find(ctx, "exp"), 0), "result");
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_introspection)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *clamp = opr_op_find(ctx, "clamp"), *sum = opr_op_find(ctx, "sum");
    const opr_op *adds = opr_op_find(ctx, "add.Scalar");
    ck_assert_str_eq(opr_op_arg_type(clamp, 1), "float?");
    ck_assert(opr_op_arg_optional(clamp, 1));
    ck_assert(!opr_op_arg_optional(clamp, 0));
    const opr_op *nd = opr_op_find(ctx, "native_dropout"); /* ATen's bool? train */
    ck_assert_str_eq(opr_op_arg_type(nd, 2), "bool?");
    ck_assert(opr_op_arg_optional(nd, 2));
    ck_assert_int_eq(opr_op_arg_kind(nd, 2), OPR_V_BOOL);
    opr_value d;
    ck_assert(opr_op_arg_default(clamp, 2, &d));
    ck_assert_int_eq(d.kind, OPR_V_NONE);
    ck_assert(!opr_op_arg_default(clamp, 0, &d));
    ck_assert(opr_op_arg_default(sum, 2, &d));
    ck_assert_int_eq(d.kind, OPR_V_BOOL);
    ck_assert(!d.u.b);
    ck_assert_int_eq(opr_op_arg_index(sum, "keepdim"), 2);
    ck_assert_int_eq(opr_op_arg_index(sum, "axis"), -1);
    ck_assert_str_eq(opr_op_arg_type(adds, 1), "Scalar");
    ck_assert_int_eq(opr_op_arg_kind(adds, 1), OPR_V_DOUBLE);
    ck_assert(opr_op_arg_default(adds, 2, &d));
    ck_assert_int_eq(d.kind, OPR_V_INT); /* Scalar alpha=1 stays an int */
    ck_assert_int_eq(d.u.i, 1);
    ck_assert_ptr_null(opr_op_arg_type(sum, 7));
    tu_ctx_free(ctx);
}
END_TEST

/* Scalar overloads with PyTorch's wrapped-number rules. */
START_TEST(test_scalars)
{
    opr_ctx *ctx = tu_ctx();
    const float fv[3] = {1.5f, -2, 4};
    const int64_t iv[3] = {1, 2, 3};
    const unsigned char bv[3] = {1, 0, 1};
    opr_tensor *f = from(ctx, OPR_F32, 1, (int64_t[]){3}, fv), *i = from(ctx, OPR_I64, 1, (int64_t[]){3}, iv);
    opr_tensor *b = from(ctx, OPR_BOOL, 1, (int64_t[]){3}, bv), *r = NULL;
    /* a float number with an f32 tensor: f32 (the number does not make it f64) */
    opr_value fa[2] = {opr_v_tensor(f), opr_v_double(0.25)};
    ck_assert_msg(opr_call_by_name(ctx, "add", fa, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F32, 3, (double[]){1.75, -1.75, 4.25});
    opr_tensor_release(r);
    /* an int with i64: exact i64 */
    opr_value ia[3] = {opr_v_tensor(i), opr_v_int(10), opr_v_int(2)};
    ck_assert_msg(opr_call_by_name(ctx, "add", ia, 3, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_I64, 3, (double[]){21, 22, 23});
    opr_tensor_release(r);
    /* a float with i64: f32, as torch.tensor([1, 2, 3]) * 0.5 */
    opr_value im[2] = {opr_v_tensor(i), opr_v_double(0.5)};
    ck_assert_msg(opr_call_by_name(ctx, "mul", im, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F32, 3, (double[]){0.5, 1, 1.5});
    opr_tensor_release(r);
    /* comparisons compare in the promoted dtype: 2 > 2.5 is false */
    opr_value ig[2] = {opr_v_tensor(i), opr_v_double(2.5)};
    ck_assert_msg(opr_call_by_name(ctx, "gt", ig, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_BOOL, 3, (double[]){0, 0, 1});
    opr_tensor_release(r);
    /* an int with bool: i64 */
    opr_value bm[2] = {opr_v_tensor(b), opr_v_int(3)};
    ck_assert_msg(opr_call_by_name(ctx, "mul", bm, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_I64, 3, (double[]){3, 0, 3});
    opr_tensor_release(r);
    /* where with a number */
    opr_value w[3] = {opr_v_tensor(b), opr_v_tensor(f), opr_v_int(0)};
    ck_assert_msg(opr_call_by_name(ctx, "where", w, 3, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F32, 3, (double[]){1.5, 0, 4});
    opr_tensor_release(r);
    /* pow(2, x) and its refused base */
    opr_value p[2] = {opr_v_int(2), opr_v_tensor(f)};
    ck_assert_msg(opr_call_by_name(ctx, "pow", p, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F32, 3, (double[]){pow(2, 1.5), 0.25, 16});
    opr_tensor_release(r);
    p[0] = opr_v_double(-2);
    ck_assert_int_eq(opr_call_by_name(ctx, "pow", p, 2, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "self > 0"));
    opr_tensor_release(f);
    opr_tensor_release(i);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

/* x * 3 - 1 with x requiring grad: the gradient is 3 everywhere. */
START_TEST(test_scalar_gradient)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, -1, 1), *y = NULL, *z = NULL, *s = NULL;
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_value m[2] = {opr_v_tensor(x), opr_v_int(3)};
    ck_assert_int_eq(opr_call_by_name(ctx, "mul", m, 2, &y, 1), OPR_OK);
    opr_value a[2] = {opr_v_tensor(y), opr_v_double(1)};
    ck_assert_int_eq(opr_call_by_name(ctx, "sub", a, 2, &z, 1), OPR_OK);
    opr_value sa = opr_v_tensor(z);
    ck_assert_int_eq(opr_call_by_name(ctx, "sum", &sa, 1, &s, 1), OPR_OK);
    ck_assert_msg(opr_backward(s, NULL, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(opr_grad(x), OPR_F64, 4, (double[]){3, 3, 3, 3});
    opr_tensor_release(s);
    opr_tensor_release(z);
    opr_tensor_release(y);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* 0-d tensors take part by category; dimensioned tensors must still agree. */
START_TEST(test_zero_dim_promotion)
{
    opr_ctx *ctx = tu_ctx();
    const float xv[3] = {1, 2, 3};
    const double sv = 0.5;
    const int64_t iv[3] = {4, 5, 6};
    opr_tensor *x = from(ctx, OPR_F32, 1, (int64_t[]){3}, xv), *s = from(ctx, OPR_F64, 0, NULL, &sv);
    opr_tensor *i = from(ctx, OPR_I64, 1, (int64_t[]){3}, iv), *r = NULL, *sum = NULL;
    ck_assert_int_eq(opr_set_requires_grad(s, true), OPR_OK);
    /* f32 [3] * f64 0-d: f32, and s's gradient comes back in f64 */
    opr_value a[2] = {opr_v_tensor(x), opr_v_tensor(s)};
    ck_assert_msg(opr_call_by_name(ctx, "mul", a, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F32, 3, (double[]){0.5, 1, 1.5});
    opr_value ra = opr_v_tensor(r);
    ck_assert_int_eq(opr_call_by_name(ctx, "sum", &ra, 1, &sum, 1), OPR_OK);
    ck_assert_msg(opr_backward(sum, NULL, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(opr_grad(s), OPR_F64, 1, (double[]){6});
    opr_tensor_release(sum);
    opr_tensor_release(r);
    /* i64 [3] + f64 0-d: the 0-d tensor's higher category wins: f64 */
    opr_value b[2] = {opr_v_tensor(i), opr_v_tensor(s)};
    ck_assert_msg(opr_call_by_name(ctx, "add", b, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F64, 3, (double[]){4.5, 5.5, 6.5});
    opr_tensor_release(r);
    /* dimensioned f32 and f64: still refused */
    opr_tensor *x64 = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, 0, 1);
    opr_value c[2] = {opr_v_tensor(x), opr_v_tensor(x64)};
    tu_expect_fail(ctx, "mul", c, 2, 1, OPR_ERR_INVALID, "no implicit casts");
    opr_tensor_release(x64);
    opr_tensor_release(x);
    opr_tensor_release(s);
    opr_tensor_release(i);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_to)
{
    opr_ctx *ctx = tu_ctx();
    const double v[4] = {-1.75, 0, 2.5, 3e9};
    opr_tensor *x = from(ctx, OPR_F64, 1, (int64_t[]){4}, v), *r = NULL;
    opr_value a[2] = {opr_v_tensor(x), opr_v_string("i64")};
    ck_assert_msg(opr_call_by_name(ctx, "to", a, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_I64, 4, (double[]){-1, 0, 2, 3e9}); /* truncation toward zero */
    opr_tensor_release(r);
    a[1] = opr_v_string("bool");
    ck_assert_int_eq(opr_call_by_name(ctx, "to", a, 2, &r, 1), OPR_OK);
    expect_values(r, OPR_BOOL, 4, (double[]){1, 0, 1, 1});
    opr_tensor_release(r);
    const double bad[2] = {1, NAN};
    opr_tensor *n = from(ctx, OPR_F64, 1, (int64_t[]){2}, bad);
    opr_value b[2] = {opr_v_tensor(n), opr_v_string("i64")};
    tu_expect_fail(ctx, "to", b, 2, 1, OPR_ERR_INVALID, "cannot be represented as i64");
    b[1] = opr_v_string("f99");
    tu_expect_fail(ctx, "to", b, 2, 1, OPR_ERR_INVALID, "f99");
    opr_tensor_release(n);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_yaml_overloads)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    /* gt answers to gt.Tensor already */
    ck_assert_int_ne(opr_registry_load_yaml_string(ctx, "- name: gt.Tensor(Tensor self) -> Tensor\n  shape: sizes(self)\n",
                                                   "dup.yaml", &n), OPR_OK);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "already defined"));
    ck_assert_int_ne(opr_registry_load_yaml_string(ctx, "- name: twice.x(Tensor self) -> Tensor\n  overload: y\n"
                                                   "  shape: sizes(self)\n", "two.yaml", &n), OPR_OK);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "already has one"));
    ck_assert_int_ne(opr_registry_load_yaml_string(ctx, "- name: badname(Tensor self) -> Tensor\n  overload: a-b\n"
                                                   "  shape: sizes(self)\n", "bad.yaml", &n), OPR_OK);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "expected an identifier"));
    /* a new overload of exp, found by its kinds */
    ck_assert_msg(opr_registry_load_yaml_string(ctx, "- name: exp.twice(Tensor self, int times) -> Tensor\n"
                                                "  forward: exp(exp(self))\n  shape: sizes(self)\n", "ok.yaml", &n) == OPR_OK,
                  "%s", opr_last_error());
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, 0, 1);
    opr_value a[2] = {opr_v_tensor(x), opr_v_int(2)};
    ck_assert_ptr_eq(opr_op_resolve(ctx, "exp", a, 2, NULL, 0), opr_op_find(ctx, "exp.twice"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "exp", a, 1, NULL, 0), opr_op_find(ctx, "exp"));
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* The pointwise families' overload sets, resolved as PyTorch resolves them: fmod and
 * remainder by the kind of `other`, div's rounding_mode (keyword-only in ATen) picking
 * div.Tensor_mode or div.Scalar_mode; a bad mode and an integer division by zero are
 * errors, not results. Expected values follow from the definitions: floor rounds the
 * quotient down, trunc toward 0, remainder takes the divisor's sign. */
START_TEST(test_pointwise_overloads)
{
    opr_ctx *ctx = tu_ctx();
    const double xv[4] = {7, -7, 5.5, -5.5}, yv[4] = {2, 2, -2, 2};
    opr_tensor *x = from(ctx, OPR_F64, 1, (int64_t[]){4}, xv), *y = from(ctx, OPR_F64, 1, (int64_t[]){4}, yv);
    opr_value num[2] = {opr_v_tensor(x), opr_v_double(2.5)}, ten[2] = {opr_v_tensor(x), opr_v_tensor(y)};
    ck_assert_ptr_eq(opr_op_find(ctx, "fmod.Tensor"), opr_op_find(ctx, "fmod"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "fmod", num, 2, NULL, 0), opr_op_find(ctx, "fmod.Scalar"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "fmod", ten, 2, NULL, 0), opr_op_find(ctx, "fmod.Tensor"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "remainder", num, 2, NULL, 0), opr_op_find(ctx, "remainder.Scalar"));
    opr_tensor *r = NULL;
    ck_assert_msg(opr_call_by_name(ctx, "remainder", ten, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F64, 4, (double[]){1, 1, -0.5, 0.5});
    opr_tensor_release(r);
    opr_kwarg floor_kw = opr_kw("rounding_mode", opr_v_string("floor"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "div", ten, 2, &floor_kw, 1), opr_op_find(ctx, "div.Tensor_mode"));
    ck_assert_msg(opr_call_by_name_kw(ctx, "div", ten, 2, &floor_kw, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F64, 4, (double[]){3, -4, -3, -3});
    opr_tensor_release(r);
    opr_value two[2] = {opr_v_tensor(x), opr_v_int(2)};
    opr_kwarg trunc_kw = opr_kw("rounding_mode", opr_v_string("trunc"));
    ck_assert_ptr_eq(opr_op_resolve(ctx, "div", two, 2, &trunc_kw, 1), opr_op_find(ctx, "div.Scalar_mode"));
    ck_assert_msg(opr_call_by_name_kw(ctx, "div", two, 2, &trunc_kw, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_F64, 4, (double[]){3, -3, 2, -2});
    opr_tensor_release(r);
    r = NULL;
    opr_kwarg round_kw = opr_kw("rounding_mode", opr_v_string("round"));
    ck_assert_int_eq(opr_call_by_name_kw(ctx, "div", ten, 2, &round_kw, 1, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_null(r);
    /* integers: floor division and a zero divisor */
    const int64_t iv[3] = {-7, 7, 9}, jv[3] = {2, -2, 0};
    opr_tensor *i = from(ctx, OPR_I64, 1, (int64_t[]){3}, iv), *j = from(ctx, OPR_I64, 1, (int64_t[]){2}, jv);
    opr_value ii[2] = {opr_v_tensor(i), opr_v_tensor(i)}, ij[2] = {opr_v_tensor(i), opr_v_tensor(j)};
    ck_assert_msg(opr_call_by_name_kw(ctx, "div", ii, 2, &floor_kw, 1, &r, 1) == OPR_OK, "%s", opr_last_error());
    expect_values(r, OPR_I64, 3, (double[]){1, 1, 1});
    opr_tensor_release(r);
    r = NULL;
    opr_tensor *k = from(ctx, OPR_I64, 1, (int64_t[]){3}, (int64_t[]){2, -2, 0});
    opr_value ik[2] = {opr_v_tensor(i), opr_v_tensor(k)};
    ck_assert_int_eq(opr_call_by_name(ctx, "fmod", ik, 2, &r, 1), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "ZeroDivisionError"));
    ck_assert_ptr_null(r);
    ck_assert_int_ne(opr_call_by_name(ctx, "fmod", ij, 2, &r, 1), OPR_OK); /* [3] and [2] do not broadcast */
    opr_tensor_release(i);
    opr_tensor_release(j);
    opr_tensor_release(k);
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("overloads");
    TCase *tc = tcase_create("overloads");
    tcase_add_test(tc, test_find_and_sets);
    tcase_add_test(tc, test_resolve_by_kinds);
    tcase_add_test(tc, test_keywords);
    tcase_add_test(tc, test_output_subset);
    tcase_add_test(tc, test_introspection);
    tcase_add_test(tc, test_scalars);
    tcase_add_test(tc, test_scalar_gradient);
    tcase_add_test(tc, test_zero_dim_promotion);
    tcase_add_test(tc, test_to);
    tcase_add_test(tc, test_yaml_overloads);
    tcase_add_test(tc, test_pointwise_overloads);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
