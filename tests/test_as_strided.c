/* as_strided, as_strided_scatter and resize_ (registry/ops/shape.yaml) beyond what their
 * samples show against PyTorch (test_aten_samples, which makes every input contiguous):
 * as_strided's checks and messages (PyTorch's), its default offset, its gradient on
 * inputs that are views themselves (an offset, a transpose, an expanded input that
 * overlaps itself: values from PyTorch 1.13) and under opr_vmap (functorch's offsets);
 * as_strided_scatter's accumulation over an overlapping view; resize_ keeping the
 * storage and its order, growing it with zeros, refusing to grow a shared one or to
 * resize a tensor that requires grad, and bumping the version a node checks; and
 * atan2.out resizing its out as PyTorch does, with its warning. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static void expect_values(const opr_tensor *t, const double *want, int64_t n)
{
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(v[i] == want[i], "element %lld: %g, expected %g", (long long)i, v[i], want[i]);
    free(v);
}

static opr_tensor *as_strided(opr_tensor *x, int n, const int64_t *size, const int64_t *stride, const int64_t *offset)
{
    opr_value a[] = {opr_v_tensor(x), opr_v_ints(size, n), opr_v_ints(stride, n), offset ? opr_v_int(*offset) : opr_v_none()};
    return tu_call1(ctx, "as_strided", a, 4);
}

static opr_tensor *narrow(opr_tensor *x, int64_t start, int64_t len)
{
    opr_value a[] = {opr_v_tensor(x), opr_v_int(0), opr_v_int(start), opr_v_int(len)};
    return tu_call1(ctx, "narrow", a, 4);
}

START_TEST(test_as_strided_checks)
{
    const int64_t s5[] = {5}, s33[] = {3, 3}, s11[] = {1, 1}, neg[] = {-1, 1}, nsz[] = {-3, 3}, s1[] = {1};
    opr_tensor *x = tu_iota(ctx, 1, s5);
    /* overlapping elements of one storage: row i is x[i], x[i + 1], x[i + 2] */
    opr_tensor *y = as_strided(x, 2, s33, s11, NULL);
    expect_values(y, (const double[]){0, 1, 2, 1, 2, 3, 2, 3, 4}, 9);
    ck_assert_ptr_eq(opr_tensor_data(y), opr_tensor_data(x)); /* a view */
    opr_tensor_release(y);
    int64_t off = 3, minus = -1;
    opr_value a[] = {opr_v_tensor(x), opr_v_ints(s33, 2), opr_v_ints(s11, 2), opr_v_int(off)};
    tu_expect_fail(ctx, "as_strided", a, 4, 1, OPR_ERR_INVALID,
                   "setStorage: sizes [3, 3], strides [1, 1], storage offset 3, and itemsize 8 requiring a storage "
                   "size of 64 are out of bounds for storage of size 40");
    a[2] = opr_v_ints(neg, 2);
    tu_expect_fail(ctx, "as_strided", a, 4, 1, OPR_ERR_INVALID,
                   "Negative strides are not supported at the moment, got strides: [-1, 1]");
    a[1] = opr_v_ints(nsz, 2);
    a[2] = opr_v_ints(s11, 2);
    tu_expect_fail(ctx, "as_strided", a, 4, 1, OPR_ERR_INVALID,
                   "Storage size calculation overflowed with sizes=[-3, 3] and strides=[1, 1]");
    a[1] = opr_v_ints(s1, 1);
    tu_expect_fail(ctx, "as_strided", a, 4, 1, OPR_ERR_INVALID, "mismatch in length of strides and shape");
    a[1] = opr_v_ints(s11, 2);
    a[3] = opr_v_int(minus);
    tu_expect_fail(ctx, "as_strided", a, 4, 1, OPR_ERR_INVALID, "invalid storage offset -1");
    /* storage_offset None: the input's own (x[2:] gives x[2], x[3]); given: the storage's */
    opr_tensor *v = narrow(x, 2, 3);
    const int64_t s2[] = {2}, one[] = {1}, zero = 0;
    y = as_strided(v, 1, s2, one, NULL);
    expect_values(y, (const double[]){2, 3}, 2);
    ck_assert_int_eq(opr_tensor_offset(y), 2);
    opr_tensor_release(y);
    y = as_strided(v, 1, s2, one, &zero);
    expect_values(y, (const double[]){0, 1}, 2);
    opr_tensor_release(y);
    opr_tensor_release(v);
    opr_tensor_release(x);
}
END_TEST

/* d(sum(g * as_strided(f(x)))) / dx for a view f(x) of a leaf x: PyTorch 1.13's
 * as_strided_backward reads f(x)'s own geometry. */
typedef opr_tensor *(*view_fn)(opr_tensor *x);
static void expect_grad(int nd, const int64_t *xshape, view_fn f, int n, const int64_t *size, const int64_t *stride,
                        const int64_t *offset, const double *g, const double *want)
{
    opr_tensor *x = tu_iota(ctx, nd, xshape);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *v = f(x), *y = as_strided(v, n, size, stride, offset), *gt = tu_f64(ctx, n, size, g);
    ck_assert_int_eq(opr_backward(y, gt, NULL), OPR_OK);
    expect_values(opr_grad(x), want, opr_tensor_numel(x));
    opr_tensor *all[] = {gt, y, v, x};
    for (int i = 0; i < 4; i++) opr_tensor_release(all[i]);
}

static opr_tensor *narrow_1_4(opr_tensor *x) { return narrow(x, 1, 4); }
static opr_tensor *expand_2(opr_tensor *x)
{
    const int64_t s23[] = {2, 3};
    opr_value a[] = {opr_v_tensor(x), opr_v_ints(s23, 2)};
    return tu_call1(ctx, "expand", a, 2);
}
static opr_tensor *transpose(opr_tensor *x)
{
    opr_value a[] = {opr_v_tensor(x)};
    return tu_call1(ctx, "t", a, 1);
}

START_TEST(test_as_strided_grad_of_views)
{
    const int64_t s6[] = {6}, s3[] = {3}, s23[] = {2, 3}, s22[] = {2, 2}, st12[] = {1, 2}, st11[] = {1, 1}, st2[] = {2};
    const int64_t zero = 0;
    /* x[1:5] (offset 1) as [[x1, x3], [x2, x4]] */
    expect_grad(1, s6, narrow_1_4, 2, s22, st12, NULL, (const double[]){1, 2, 3, 4}, (const double[]){0, 1, 3, 2, 4, 0});
    /* offset 0, below the input's: x0 is no element of the input, its share is dropped */
    expect_grad(1, s6, narrow_1_4, 1, s3, st2, &zero, (const double[]){1, 2, 3}, (const double[]){0, 0, 2, 0, 3, 0});
    /* an expanded input reads each place twice: the gradient there is shared */
    expect_grad(1, s3, expand_2, 2, s22, st11, &zero, (const double[]){1, 2, 3, 4}, (const double[]){1, 5, 4});
    /* a transposed input: the storage's elements 0, 2, 4 */
    expect_grad(2, s23, transpose, 1, s3, st2, NULL, (const double[]){1, 2, 3}, (const double[]){1, 0, 2, 0, 3, 0});
}
END_TEST

static opr_status per_sample(void *user, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)nin; (void)nout;
    const int64_t *offset = user, s[] = {2}, st[] = {1};
    opr_value a[] = {opr_v_tensor(in[0]), opr_v_ints(s, 1), opr_v_ints(st, 1), offset ? opr_v_int(*offset) : opr_v_none()};
    return opr_call(opr_op_find(ctx, "as_strided"), a, 4, out, 1);
}

START_TEST(test_as_strided_vmap)
{
    /* functorch's rule: sample i's view starts at storage_offset + i * (the batch
     * stride), or at its own offset for None */
    const int64_t s25[] = {2, 5}, one = 1;
    opr_tensor *x = tu_iota(ctx, 2, s25), *out = NULL;
    ck_assert_int_eq(opr_vmap(ctx, per_sample, (void *)&one, &x, NULL, 1, &out, NULL, 1, NULL), OPR_OK);
    expect_values(out, (const double[]){1, 2, 6, 7}, 4);
    opr_tensor_release(out);
    opr_tensor *v = narrow(x, 1, 1); /* [1, 5] at offset 5 */
    ck_assert_int_eq(opr_vmap(ctx, per_sample, NULL, &v, NULL, 1, &out, NULL, 1, NULL), OPR_OK);
    expect_values(out, (const double[]){5, 6}, 2);
    opr_tensor_release(out);
    opr_tensor_release(v);
    opr_tensor_release(x);
}
END_TEST

START_TEST(test_as_strided_scatter_accumulates)
{
    const int64_t s5[] = {5}, s33[] = {3, 3}, st11[] = {1, 1};
    opr_tensor *x = tu_iota(ctx, 1, s5);
    opr_tensor *src = tu_f64(ctx, 2, s33, (const double[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
    opr_value a[] = {opr_v_tensor(x), opr_v_tensor(src), opr_v_ints(s33, 2), opr_v_ints(st11, 2), opr_v_none(),
                     opr_v_bool(true)};
    opr_tensor *y = tu_call1(ctx, "as_strided_scatter", a, 6);
    expect_values(y, (const double[]){0 + 1, 1 + 2, 2 + 3, 3 + 2, 4 + 1}, 5); /* each place counted */
    opr_tensor_release(y);
    const int64_t s22[] = {2, 2}, st12[] = {1, 2};
    a[2] = opr_v_ints(s22, 2);
    tu_expect_fail(ctx, "as_strided_scatter", a, 6, 1, OPR_ERR_INVALID, "expected src to have a size equal to the slice");
    a[2] = opr_v_ints(s33, 2);
    a[3] = opr_v_ints(st12, 2);
    tu_expect_fail(ctx, "as_strided_scatter", a, 6, 1, OPR_ERR_INVALID, "reaches past self's 5 elements");
    opr_tensor_release(src);
    opr_tensor_release(x);
}
END_TEST

static opr_tensor *resize(opr_tensor *x, int n, const int64_t *size)
{
    opr_value a[] = {opr_v_tensor(x), opr_v_ints(size, n)};
    opr_tensor *r = tu_call1(ctx, "resize_", a, 2);
    ck_assert_ptr_eq(r, x); /* in place */
    return r;
}

START_TEST(test_resize)
{
    const int64_t s23[] = {2, 3}, s4[] = {4}, s35[] = {3, 5}, s6[] = {6}, s1[] = {1};
    /* smaller: the same storage, the first elements in storage order */
    opr_tensor *x = tu_iota(ctx, 2, s23);
    void *data = opr_tensor_data(x);
    opr_tensor_release(resize(x, 1, s4));
    ck_assert_ptr_eq(opr_tensor_data(x), data);
    expect_values(x, (const double[]){0, 1, 2, 3}, 4);
    /* larger: the old elements, then zeros */
    opr_tensor_release(resize(x, 2, s35));
    ck_assert_int_eq(opr_tensor_size(x, 1), 5);
    ck_assert_int_eq(opr_tensor_stride(x, 0), 5);
    expect_values(x, (const double[]){0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 15);
    opr_tensor_release(x);
    /* a view keeps its offset; its storage, shared, may not grow */
    x = tu_iota(ctx, 1, s6);
    opr_tensor *v = narrow(x, 2, 2);
    opr_value a[] = {opr_v_tensor(v), opr_v_ints(s6, 1)};
    tu_expect_fail(ctx, "resize_", a, 2, 1, OPR_ERR_INVALID, "must grow from 48 to 64 bytes but 1 other tensor(s)");
    ck_assert_int_eq(opr_tensor_size(v, 0), 2); /* unchanged */
    const int64_t s3[] = {3};
    opr_tensor_release(resize(v, 1, s3));
    ck_assert_int_eq(opr_tensor_offset(v), 2);
    expect_values(v, (const double[]){2, 3, 4}, 3);
    opr_tensor_release(resize(v, 1, s1));
    opr_tensor_release(v);
    /* memory formats other than contiguous */
    opr_value m[] = {opr_v_tensor(x), opr_v_ints(s6, 1), opr_v_string("channels_last")};
    tu_expect_fail(ctx, "resize_", m, 3, 1, OPR_ERR_UNSUPPORTED, "memory_format 'channels_last' is not supported");
    opr_tensor_release(x);
}
END_TEST

START_TEST(test_resize_and_autograd)
{
    const int64_t s3[] = {3}, s31[] = {3, 1};
    /* a tensor that requires grad: PyTorch's refusal, grad mode or not */
    opr_tensor *x = tu_iota(ctx, 1, s3), *w = tu_iota(ctx, 1, s3);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_value a[] = {opr_v_tensor(x), opr_v_ints(s31, 2)};
    tu_expect_fail(ctx, "resize_", a, 2, 1, OPR_ERR_UNSUPPORTED, "resize_: cannot resize variables that require grad");
    bool mode = opr_grad_mode_set(false);
    tu_expect_fail(ctx, "resize_", a, 2, 1, OPR_ERR_UNSUPPORTED, "cannot resize variables that require grad");
    opr_grad_mode_set(mode);
    /* a resize is a change in place: a node that saved the tensor fails its backward */
    opr_value m[] = {opr_v_tensor(x), opr_v_tensor(w)};
    opr_tensor *y = tu_call1(ctx, "mul", m, 2), *g = tu_iota(ctx, 1, s3);
    opr_tensor_release(resize(w, 2, s31));
    ck_assert_int_eq(opr_backward(y, g, NULL), OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "modified in place"), "message: %s", opr_last_error());
    opr_tensor *all[] = {g, y, w, x};
    for (int i = 0; i < 4; i++) opr_tensor_release(all[i]);
}
END_TEST

typedef struct { int n; char message[512]; } log_capture;

static void capture_log(opr_log_level level, const char *source, const char *message, void *user_data)
{
    (void)source;
    log_capture *c = user_data;
    if (level != OPR_LOG_WARN) return;
    c->n++;
    snprintf(c->message, sizeof c->message, "%s", message);
}

START_TEST(test_atan2_out_resizes)
{
    const int64_t s23[] = {2, 3}, s3[] = {3}, s4[] = {4}, s0[] = {0};
    opr_tensor *y = tu_iota(ctx, 2, s23), *x = tu_iota(ctx, 1, s3);
    const opr_op *op = opr_op_find(ctx, "atan2.out");
    ck_assert_ptr_nonnull(op);
    log_capture got = {0};
    opr_log_set(capture_log, &got);
    /* out with elements, of another shape: resized, with PyTorch's warning */
    opr_tensor *out = tu_iota(ctx, 1, s4), *r = NULL;
    opr_value a[] = {opr_v_tensor(y), opr_v_tensor(x), opr_v_tensor(out)};
    ck_assert_int_eq(opr_call(op, a, 3, &r, 1), OPR_OK);
    ck_assert_int_eq(got.n, 1);
    ck_assert_msg(strstr(got.message, "was resized since it had shape [4], which does not match the required output "
                                      "shape [2, 3]"), "warning: %s", got.message);
    ck_assert_int_eq(opr_tensor_ndim(out), 2);
    ck_assert_int_eq(opr_tensor_size(out, 1), 3);
    opr_tensor_release(r);
    /* of the shape already: left alone, no warning; empty: resized quietly */
    void *data = opr_tensor_data(out);
    ck_assert_int_eq(opr_call(op, a, 3, &r, 1), OPR_OK);
    ck_assert_ptr_eq(opr_tensor_data(out), data);
    opr_tensor_release(r);
    opr_tensor *empty = tu_iota(ctx, 1, s0);
    a[2] = opr_v_tensor(empty);
    ck_assert_int_eq(opr_call(op, a, 3, &r, 1), OPR_OK);
    ck_assert_int_eq(opr_tensor_numel(empty), 6);
    opr_tensor_release(r);
    opr_log_set(NULL, NULL);
    ck_assert_int_eq(got.n, 1);
    opr_tensor *all[] = {empty, out, x, y};
    for (int i = 0; i < 4; i++) opr_tensor_release(all[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("as_strided");
    TCase *tc = tcase_create("as_strided");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_as_strided_checks);
    tcase_add_test(tc, test_as_strided_grad_of_views);
    tcase_add_test(tc, test_as_strided_vmap);
    tcase_add_test(tc, test_as_strided_scatter_accumulates);
    tcase_add_test(tc, test_resize);
    tcase_add_test(tc, test_resize_and_autograd);
    tcase_add_test(tc, test_atan2_out_resizes);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
