/* The i32 dtype (torch.int32) end to end, PyTorch 1.13's semantics as the reference:
 * its name, size and DLPack code both ways; conversions to and from every dtype (i64
 * to i32 keeps the low 32 bits, a float beyond i32 is refused); arithmetic that wraps
 * at 32 bits; promotion (a Python int keeps i32, a float makes f32, a 0-d i64 tensor
 * joins a dimensioned i32 one as i32, true division gives f32); sum, prod and cumsum
 * into i64 as torch gives them; the extrema and argmax in i32. The values per op are
 * compared with PyTorch by test_aten_samples (the i32 pass); this suite pins the rules. */
#include "test_util.h"

#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static opr_tensor *i32_of(int n, const int32_t *v)
{
    const int64_t shape[1] = {n};
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I32, 1, shape, v, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* t (dtype dt, n elements) holds exactly want. */
static void expect(opr_tensor *t, opr_dtype dt, int n, const double *want)
{
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    ck_assert_msg(opr_tensor_dtype(t) == dt, "dtype %s, want %s", opr_dtype_name(opr_tensor_dtype(t)),
                  opr_dtype_name(dt));
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *v = tu_to_f64(t);
    for (int i = 0; i < n; i++) ck_assert_msg(v[i] == want[i], "element %d: %.17g, want %.17g", i, v[i], want[i]);
    free(v);
    opr_tensor_release(t);
}

START_TEST(names_sizes_dlpack)
{
    opr_dtype dt;
    ck_assert_str_eq(opr_dtype_name(OPR_I32), "i32");
    ck_assert_uint_eq(opr_dtype_size(OPR_I32), 4);
    ck_assert_int_eq(OPR_I32, 6); /* appended: the older values keep their ABI */
    ck_assert_int_eq(opr_dtype_parse("i32", &dt), OPR_OK);
    ck_assert_int_eq(dt, OPR_I32);
    ck_assert_int_eq(opr_dtype_parse("int32", &dt), OPR_OK);
    ck_assert_int_eq(dt, OPR_I32);
    ck_assert_int_eq(opr_dtype_parse("int", &dt), OPR_OK); /* torch.int */
    ck_assert_int_eq(dt, OPR_I32);

    const int32_t v[3] = {INT32_MIN, -1, INT32_MAX};
    opr_tensor *t = i32_of(3, v);
    DLManagedTensor *m = opr_tensor_to_dlpack(t);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->dl_tensor.dtype.code, kDLInt);
    ck_assert_int_eq(m->dl_tensor.dtype.bits, 32);
    opr_tensor *back = opr_tensor_from_dlpack(ctx, m);
    expect(back, OPR_I32, 3, (double[]){INT32_MIN, -1, INT32_MAX});
    opr_tensor_release(t);
}
END_TEST

START_TEST(conversions)
{
    const int64_t shape[1] = {3};
    const int64_t wide[3] = {4294967297LL, -2147483649LL, 7}; /* 2^32 + 1, INT32_MIN - 1 */
    opr_tensor *l = opr_tensor_from_data(ctx, OPR_I64, 1, shape, wide, OPR_CPU);
    expect(tu_call1(ctx, "to", ARGS(opr_v_tensor(l), opr_v_string("i32"))), OPR_I32, 3,
           (double[]){1, INT32_MAX, 7}); /* the low 32 bits, as torch's .int() */
    const int32_t v[3] = {INT32_MIN, -3, INT32_MAX};
    opr_tensor *t = i32_of(3, v);
    expect(tu_call1(ctx, "to", ARGS(opr_v_tensor(t), opr_v_string("i64"))), OPR_I64, 3, (double[]){INT32_MIN, -3, INT32_MAX});
    expect(tu_call1(ctx, "to", ARGS(opr_v_tensor(t), opr_v_string("f64"))), OPR_F64, 3, (double[]){INT32_MIN, -3, INT32_MAX});
    expect(tu_call1(ctx, "to", ARGS(opr_v_tensor(t), opr_v_string("bool"))), OPR_BOOL, 3, (double[]){1, 1, 1});
    const double f[3] = {-2.75, 2147483647.0, 0.5};
    opr_tensor *d = opr_tensor_from_data(ctx, OPR_F64, 1, shape, f, OPR_CPU);
    expect(tu_call1(ctx, "to", ARGS(opr_v_tensor(d), opr_v_string("i32"))), OPR_I32, 3, (double[]){-2, INT32_MAX, 0});
    const double big[1] = {2147483648.0};
    opr_tensor *b = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){1}, big, OPR_CPU);
    tu_expect_fail(ctx, "to", ARGS(opr_v_tensor(b), opr_v_string("i32")), 1, OPR_ERR_INVALID, "as i32");
    tu_expect_fail(ctx, "full", ARGS(opr_v_ints((int64_t[]){2}, 1), opr_v_double(3e9), opr_v_string("i32")), 1,
                   OPR_ERR_INVALID, "int32_t without overflow");
    opr_tensor_release(l);
    opr_tensor_release(t);
    opr_tensor_release(d);
    opr_tensor_release(b);
}
END_TEST

START_TEST(wrapping_arithmetic)
{
    const int32_t a[3] = {INT32_MAX, INT32_MIN, 65536}, b[3] = {1, -1, 65536};
    opr_tensor *x = i32_of(3, a), *y = i32_of(3, b);
    expect(tu_call1(ctx, "add", ARGS(opr_v_tensor(x), opr_v_tensor(y))), OPR_I32, 3, (double[]){INT32_MIN, INT32_MAX, 131072});
    expect(tu_call1(ctx, "mul", ARGS(opr_v_tensor(x), opr_v_tensor(y))), OPR_I32, 3, (double[]){INT32_MAX, INT32_MIN, 0});
    expect(tu_call1(ctx, "neg", ARGS(opr_v_tensor(x))), OPR_I32, 3, (double[]){-INT32_MAX, INT32_MIN, -65536});
    expect(tu_call1(ctx, "bitwise_xor", ARGS(opr_v_tensor(x), opr_v_tensor(y))), OPR_I32, 3,
           (double[]){INT32_MAX - 1, INT32_MAX, 0});
    const int32_t n[2] = {-7, 7}, dv[2] = {2, -2};
    opr_tensor *p = i32_of(2, n), *q = i32_of(2, dv);
    expect(tu_call1(ctx, "div.Tensor_mode", ARGS(opr_v_tensor(p), opr_v_tensor(q), opr_v_string("floor"))), OPR_I32, 2,
           (double[]){-4, -4});
    expect(tu_call1(ctx, "remainder", ARGS(opr_v_tensor(p), opr_v_tensor(q))), OPR_I32, 2, (double[]){1, -1});
    const int32_t z[2] = {1, 0};
    opr_tensor *zero = i32_of(2, z);
    tu_expect_fail(ctx, "fmod", ARGS(opr_v_tensor(p), opr_v_tensor(zero)), 1, OPR_ERR_INVALID, "ZeroDivisionError");
    opr_tensor *ps[] = {x, y, p, q, zero};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) opr_tensor_release(ps[i]);
}
END_TEST

START_TEST(promotion)
{
    const int32_t v[2] = {5, -6};
    opr_tensor *x = i32_of(2, v);
    /* a Python int keeps i32; a float makes the default float */
    expect(tu_call1(ctx, "add.Scalar", ARGS(opr_v_tensor(x), opr_v_int(2))), OPR_I32, 2, (double[]){7, -4});
    expect(tu_call1(ctx, "mul.Scalar", ARGS(opr_v_tensor(x), opr_v_double(0.5))), OPR_F32, 2, (double[]){2.5, -3});
    /* a 0-d i64 tensor joins a dimensioned i32 one in i32 (same category) */
    const int64_t one = 1;
    opr_tensor *s = opr_tensor_from_data(ctx, OPR_I64, 0, NULL, &one, OPR_CPU);
    expect(tu_call1(ctx, "add", ARGS(opr_v_tensor(x), opr_v_tensor(s))), OPR_I32, 2, (double[]){6, -5});
    /* true division of integers is f32 */
    const int32_t d[2] = {2, 4};
    opr_tensor *y = i32_of(2, d);
    expect(tu_call1(ctx, "div", ARGS(opr_v_tensor(x), opr_v_tensor(y))), OPR_F32, 2, (double[]){2.5, -1.5});
    expect(tu_call1(ctx, "div.Scalar", ARGS(opr_v_tensor(x), opr_v_int(2))), OPR_F32, 2, (double[]){2.5, -3});
    opr_tensor_release(x);
    opr_tensor_release(s);
    opr_tensor_release(y);
}
END_TEST

START_TEST(reductions)
{
    const int32_t v[4] = {INT32_MAX, INT32_MAX, 2, INT32_MIN};
    opr_tensor *x = i32_of(4, v);
    /* sum, prod and cumsum of int32 are int64 (no wrap at 32 bits) */
    expect(tu_call1(ctx, "sum", ARGS(opr_v_tensor(x))), OPR_I64, 1, (double[]){2147483648.0}); /* 2^31: past i32 */
    expect(tu_call1(ctx, "cumsum", ARGS(opr_v_tensor(x), opr_v_int(0))), OPR_I64, 4,
           (double[]){INT32_MAX, 4294967294.0, 4294967296.0, 2147483648.0});
    const int32_t p[3] = {65536, 65536, -3};
    opr_tensor *y = i32_of(3, p);
    expect(tu_call1(ctx, "prod", ARGS(opr_v_tensor(y))), OPR_I64, 1, (double[]){-12884901888.0});
    tu_expect_fail(ctx, "sum", ARGS(opr_v_tensor(x), opr_v_none(), opr_v_bool(false), opr_v_string("i32")), 1,
                   OPR_ERR_INVALID, "check failed");
    expect(tu_call1(ctx, "amax", ARGS(opr_v_tensor(x), opr_v_ints((int64_t[]){0}, 1))), OPR_I32, 1,
           (double[]){INT32_MAX});
    expect(tu_call1(ctx, "min", ARGS(opr_v_tensor(x))), OPR_I32, 1, (double[]){INT32_MIN});
    expect(tu_call1(ctx, "argmin", ARGS(opr_v_tensor(x))), OPR_I64, 1, (double[]){3});
    opr_tensor_release(x);
    opr_tensor_release(y);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("i32");
    TCase *tc = tcase_create("i32");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, names_sizes_dlpack);
    tcase_add_test(tc, conversions);
    tcase_add_test(tc, wrapping_arithmetic);
    tcase_add_test(tc, promotion);
    tcase_add_test(tc, reductions);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
