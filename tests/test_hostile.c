/* Inputs a hostile caller can build through the public API: sizes that overflow int64,
 * plan queries with malformed arguments, bool tensors holding other bytes than 0/1,
 * and misused backward options. Each must end in an error with a message (or the
 * right result), never in a crash, a wrapped size or a leak. */
#include "test_util.h"

#include <dlpack/dlpack.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static opr_ctx *ctx;
static opr_tensor *a23;

static void setup(void)
{
    ctx = tu_ctx();
    tu_seed(11);
    a23 = tu_rand(ctx, OPR_F32, 2, (int64_t[]){2, 3}, -1, 1);
}

static void teardown(void)
{
    opr_tensor_release(a23);
    tu_ctx_free(ctx);
}

/* ------------------------------------------------------------------ sizes */

START_TEST(factory_sizes_that_overflow)
{
    tu_expect_fail(ctx, "zeros", (opr_value[]){opr_v_ints((int64_t[]){INT64_MAX}, 1)}, 1, 1, OPR_ERR_INVALID,
                   "too many elements");
    tu_expect_fail(ctx, "zeros", (opr_value[]){opr_v_ints((int64_t[]){(INT64_C(1) << 62) + 1, 4}, 2)}, 1, 1,
                   OPR_ERR_INVALID, "too many elements");
    tu_expect_fail(ctx, "new_zeros",
                   (opr_value[]){opr_v_tensor(a23), opr_v_ints((int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40}, 2)},
                   2, 1, OPR_ERR_INVALID, "too many elements");
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F64, 1, (int64_t[]){INT64_MAX / 4}, OPR_CPU));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too many elements"));
    /* a merely large count that fits is an allocation failure, not a wrapped size */
    opr_tensor *big = opr_tensor_new(ctx, OPR_F64, 1, (int64_t[]){INT64_C(1) << 58}, OPR_CPU);
    ck_assert_ptr_null(big);
    ck_assert_msg(strstr(opr_last_error(), "out of memory") != NULL, "%s", opr_last_error());
}
END_TEST

START_TEST(views_that_overflow)
{
    opr_tensor *one = tu_rand(ctx, OPR_F32, 2, (int64_t[]){1, 1}, -1, 1);
    int64_t huge[2] = {(INT64_C(1) << 62) + 1, 4};
    ck_assert_ptr_null(opr_tensor_expand(one, huge, 2));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too many elements"));
    tu_expect_fail(ctx, "expand", (opr_value[]){opr_v_tensor(one), opr_v_ints(huge, 2)}, 2, 1, OPR_ERR_INVALID,
                   "too many elements");
    /* reshape's -1 is inferred from the product of the other sizes, which can wrap */
    opr_tensor *empty = tu_rand(ctx, OPR_F32, 1, (int64_t[]){0}, -1, 1);
    ck_assert_ptr_null(opr_tensor_reshape(empty, (int64_t[]){INT64_C(1) << 62, 4, -1}, 3));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too many elements"));
    ck_assert_ptr_null(opr_tensor_view_shape(empty, (int64_t[]){INT64_C(1) << 32, INT64_C(1) << 32, 0}, 3));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too many elements"));
    ck_assert_ptr_null(opr_tensor_reshape(empty, (int64_t[]){0, INT64_C(1) << 62, 4}, 3));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too many elements"));
    opr_tensor_release(empty);
    /* an expansion within the limit is still a view */
    opr_tensor *wide = opr_tensor_expand(one, (int64_t[]){4, 3}, 2);
    ck_assert_ptr_nonnull(wide);
    opr_tensor_release(wide);
    opr_tensor_release(one);
}
END_TEST

START_TEST(diag_and_diagonal_offsets)
{
    opr_tensor *v3 = tu_rand(ctx, OPR_F32, 1, (int64_t[]){3}, -1, 1);
    tu_expect_fail(ctx, "diag", (opr_value[]){opr_v_tensor(v3), opr_v_int((INT64_C(1) << 32) - 4)}, 2, 1,
                   OPR_ERR_INVALID, "too many elements");
    tu_expect_fail(ctx, "diag", (opr_value[]){opr_v_tensor(v3), opr_v_int(INT64_MIN)}, 2, 1, OPR_ERR_INVALID,
                   "out of range");
    /* offsets beyond the matrix give an empty diagonal, as in PyTorch */
    const int64_t offsets[] = {INT64_MIN, INT64_MIN + 1, -4, 4, INT64_MAX};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        opr_tensor *d = tu_call1(ctx, "diagonal", (opr_value[]){opr_v_tensor(a23), opr_v_int(offsets[i])}, 2);
        ck_assert_int_eq(opr_tensor_numel(d), 0);
        opr_tensor_release(d);
        opr_tensor *m = tu_call1(ctx, "diag", (opr_value[]){opr_v_tensor(a23), opr_v_int(offsets[i])}, 2);
        ck_assert_int_eq(opr_tensor_numel(m), 0);
        opr_tensor_release(m);
        d = opr_tensor_diagonal(a23, offsets[i], 0, 1);
        ck_assert_ptr_nonnull(d);
        ck_assert_int_eq(opr_tensor_numel(d), 0);
        opr_tensor_release(d);
    }
    /* diag's backward helper, called directly with offsets anywhere in int64 */
    opr_tensor *g33 = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 3}, -1, 1);
    tu_expect_fail(ctx, "diag_backward",
                   (opr_value[]){opr_v_tensor(g33), opr_v_ints((int64_t[]){3}, 1), opr_v_int(INT64_MAX)}, 3, 1,
                   OPR_ERR_INVALID, "out of range");
    opr_tensor *g0 = tu_rand(ctx, OPR_F32, 1, (int64_t[]){0}, -1, 1);
    opr_tensor *z = tu_call1(ctx, "diag_backward",
                             (opr_value[]){opr_v_tensor(g0), opr_v_ints((int64_t[]){2, 3}, 2), opr_v_int(INT64_MIN)}, 3);
    ck_assert_int_eq(opr_tensor_numel(z), 6);
    opr_tensor_release(z);
    opr_tensor_release(g0);
    opr_tensor_release(g33);
    opr_tensor_release(v3);
}
END_TEST

START_TEST(arange_counts)
{
    tu_expect_fail(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(1e300)}, 2, 1, OPR_ERR_INVALID,
                   "out of the int64 range");
    tu_expect_fail(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(2e18)}, 2, 1, OPR_ERR_INVALID,
                   "too many elements");
    tu_expect_fail(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(1.0 / 0.0)}, 2, 1, OPR_ERR_INVALID,
                   "not finite");
    tu_expect_fail(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(0.0 / 0.0)}, 2, 1, OPR_ERR_INVALID,
                   "not finite");
    tu_expect_fail(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(5), opr_v_double(0)}, 3, 1,
                   OPR_ERR_INVALID, "step");
    opr_tensor *r = tu_call1(ctx, "arange", (opr_value[]){opr_v_double(0), opr_v_double(5), opr_v_double(2)}, 3);
    ck_assert_int_eq(opr_tensor_numel(r), 3);
    opr_tensor_release(r);
}
END_TEST

/* ------------------------------------------------------------------ plan queries */

static void expect_plan_fail(const char *op_name, const opr_value *args, int nargs, const char *const *rg, int nrg,
                             const char *needle)
{
    const opr_op *op = opr_op_find(ctx, op_name);
    ck_assert_ptr_nonnull(op);
    char buf[4096];
    uint64_t bytes = 7;
    int rc = opr_plan_explain(op, args, nargs, rg, nrg, buf, sizeof buf);
    ck_assert_msg(rc == OPR_ERR_INVALID, "%s explain: %s (%s)", op_name, opr_status_name(rc), opr_last_error());
    ck_assert_msg(strstr(opr_last_error(), needle), "%s: '%s' lacks '%s'", op_name, opr_last_error(), needle);
    rc = opr_plan_saved_bytes(op, args, nargs, rg, nrg, &bytes);
    ck_assert_msg(rc == OPR_ERR_INVALID, "%s bytes: %s (%s)", op_name, opr_status_name(rc), opr_last_error());
    ck_assert_msg(strstr(opr_last_error(), needle), "%s: '%s' lacks '%s'", op_name, opr_last_error(), needle);
    ck_assert_int_eq(bytes, 7);
}

START_TEST(plan_queries_check_arguments)
{
    const char *self[] = {"self"};
    opr_tensor *s0 = tu_rand(ctx, OPR_F32, 0, NULL, -1, 1);
    expect_plan_fail("sum", (opr_value[]){opr_v_tensor(a23), opr_v_ints(NULL, 1)}, 2, self, 1, "NULL");
    expect_plan_fail("mm", (opr_value[]){opr_v_tensor(a23), opr_v_int(3)}, 2, self, 1, "expects Tensor");
    expect_plan_fail("mm", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(NULL)}, 2, self, 1, "NULL tensor");
    expect_plan_fail("matmul", (opr_value[]){opr_v_tensor(s0), opr_v_tensor(s0)}, 2, self, 1, "");
    expect_plan_fail("mm", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(a23)}, 2, self, 1, "check failed");
    expect_plan_fail("mm", NULL, 2, self, 1, "NULL");
    opr_tensor *b32 = tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 2}, -1, 1);
    expect_plan_fail("mm", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b32)}, 2, (const char *[]){NULL}, 1,
                     "(null)");
    expect_plan_fail("mm", (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b32)}, 2, NULL, 1, "(null)");
    const opr_op *mm = opr_op_find(ctx, "mm");
    ck_assert_int_eq(opr_plan_explain(mm, (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b32)}, 2, self, 1, NULL, 16),
                     OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plan_saved_bytes(mm, (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b32)}, 2, self, 1, NULL),
                     OPR_ERR_INVALID);
    uint64_t bytes = 0;
    ck_assert_int_eq(opr_plan_saved_bytes(mm, (opr_value[]){opr_v_tensor(a23), opr_v_tensor(b32)}, 2, self, 1, &bytes),
                     OPR_OK);
    ck_assert_int_eq(bytes, 3 * 2 * 4); /* grad of self reads mat2 only */
    opr_tensor_release(b32);
    opr_tensor_release(s0);
}
END_TEST

/* ------------------------------------------------------------------ bool bytes */

static int64_t masked_count(opr_tensor *x, opr_tensor *mask)
{
    opr_tensor *out = tu_call1(ctx, "masked_select", (opr_value[]){opr_v_tensor(x), opr_v_tensor(mask)}, 2);
    int64_t n = opr_tensor_numel(out);
    opr_tensor_release(out);
    return n;
}

START_TEST(bool_bytes_are_normalised)
{
    const unsigned char raw[8] = {0, 1, 2, 3, 0xff, 0x80, 0, 1};
    opr_tensor *x = tu_rand(ctx, OPR_F32, 1, (int64_t[]){8}, -1, 1);
    opr_tensor *mask = opr_tensor_from_data(ctx, OPR_BOOL, 1, (int64_t[]){8}, raw, OPR_CPU);
    ck_assert_ptr_nonnull(mask);
    unsigned char back[8];
    ck_assert_int_eq(opr_tensor_copy_to_host(mask, back, sizeof back), OPR_OK);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(back[i], raw[i] != 0);
    ck_assert_int_eq(masked_count(x, mask), 6);

    /* the same through copy_from_host */
    ck_assert_int_eq(opr_tensor_copy_from_host(mask, raw, sizeof raw), OPR_OK);
    ck_assert_int_eq(opr_tensor_copy_to_host(mask, back, sizeof back), OPR_OK);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(back[i], raw[i] != 0);

    /* DLPack import of caller memory holding other bytes: refused, memory untouched */
    unsigned char mem[8];
    memcpy(mem, raw, sizeof mem);
    int64_t shape[1] = {8};
    DLManagedTensor m = {0};
    m.dl_tensor.data = mem;
    m.dl_tensor.device = (DLDevice){kDLCPU, 0};
    m.dl_tensor.ndim = 1;
    m.dl_tensor.dtype = (DLDataType){kDLUInt, 8, 1}; /* dlpack 0.6: how bool travels */;
    m.dl_tensor.shape = shape;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "bool"));
    ck_assert_mem_eq(mem, raw, sizeof mem);
    /* ... and accepted with 0/1 bytes */
    for (int i = 0; i < 8; i++) mem[i] = raw[i] != 0;
    opr_tensor *imported = opr_tensor_from_dlpack(ctx, &m);
    ck_assert_ptr_nonnull(imported);
    ck_assert_int_eq(masked_count(x, imported), 6);
    opr_tensor_release(imported);
    opr_tensor_release(mask);
    opr_tensor_release(x);
}
END_TEST

static int dl_deleted;
static void dl_count_deleter(DLManagedTensor *m)
{
    (void)m;
    dl_deleted++;
}

/* A DLManagedTensor is the caller's word about memory: one that cannot describe
 * readable memory is refused (its deleter not run: the caller still owns it). */
START_TEST(dlpack_import_checks_its_fields)
{
    int64_t shape[2] = {4, 4};
    DLManagedTensor m = {0};
    m.dl_tensor.device = (DLDevice){kDLCPU, 0};
    m.dl_tensor.ndim = 2;
    m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
    m.dl_tensor.shape = shape;
    m.deleter = dl_count_deleter;
    dl_deleted = 0;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m)); /* data NULL with 16 elements */
    ck_assert_msg(strstr(opr_last_error(), "NULL data") != NULL, "%s", opr_last_error());
    float mem[16] = {0};
    m.dl_tensor.data = mem;
    shape[0] = -4;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m));
    shape[0] = 4;
    m.dl_tensor.ndim = OPR_MAX_DIMS + 1;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m));
    m.dl_tensor.ndim = -1;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m));
    m.dl_tensor.ndim = 2;
    int64_t strides[2] = {INT64_C(1) << 62, 1};
    m.dl_tensor.strides = strides;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &m));
    ck_assert_int_eq(dl_deleted, 0);
    /* no elements: no memory needed, NULL data is fine */
    m.dl_tensor.strides = NULL;
    m.dl_tensor.data = NULL;
    shape[0] = 0;
    opr_tensor *empty = opr_tensor_from_dlpack(ctx, &m);
    ck_assert_msg(empty != NULL, "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_numel(empty), 0);
    opr_tensor_release(empty);
    ck_assert_int_eq(dl_deleted, 1);
}
END_TEST

/* ------------------------------------------------------------------ loss weights */

/* The backward ops of the losses take the class weights as the forward ops do: one
 * weight per class, else refused before the kernel reads past them. */
START_TEST(loss_backward_weight_sizes)
{
    opr_tensor *x = tu_rand(ctx, OPR_F32, 2, (int64_t[]){2, 3}, -1, 1);
    opr_tensor *target = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){0, 2}, OPR_CPU);
    opr_tensor *g = opr_tensor_from_data(ctx, OPR_F32, 0, NULL, (float[]){1}, OPR_CPU);
    opr_tensor *bad[3] = {tu_rand(ctx, OPR_F32, 1, (int64_t[]){0}, 0, 1), tu_rand(ctx, OPR_F32, 2, (int64_t[]){3, 1}, 0, 1),
                          tu_rand(ctx, OPR_F32, 1, (int64_t[]){2}, 0, 1)};
    opr_tensor *w3 = tu_rand(ctx, OPR_F32, 1, (int64_t[]){3}, 0, 1);
    const int64_t sizes[2] = {2, 3};
    for (int i = 0; i <= 3; i++) {
        opr_tensor *w = i < 3 ? bad[i] : w3;
        opr_value nll[6] = {opr_v_tensor(g), opr_v_tensor(target), opr_v_tensor(w), opr_v_ints(sizes, 2),
                            opr_v_string("mean"), opr_v_int(-100)};
        opr_value ce[7] = {opr_v_tensor(g), opr_v_tensor(x), opr_v_tensor(target), opr_v_tensor(w),
                           opr_v_string("mean"), opr_v_int(-100), opr_v_double(0.1)};
        if (i == 3) { /* the right size still works */
            opr_tensor_release(tu_call1(ctx, "nll_loss_backward", nll, 6));
            opr_tensor_release(tu_call1(ctx, "cross_entropy_backward", ce, 7));
            continue;
        }
        tu_expect_fail(ctx, "nll_loss_backward", nll, 6, 1, OPR_ERR_INVALID, "size(weight, 0)");
        tu_expect_fail(ctx, "cross_entropy_backward", ce, 7, 1, OPR_ERR_INVALID, "size(weight, 0)");
    }
    /* self_sizes must name a class dim */
    tu_expect_fail(ctx, "nll_loss_backward",
                   (opr_value[]){opr_v_tensor(g), opr_v_tensor(target), opr_v_none(), opr_v_ints(NULL, 0),
                                 opr_v_string("mean"), opr_v_int(-100)},
                   6, 1, OPR_ERR_INVALID, "len(self_sizes)");
    opr_tensor *all[] = {x, target, g, bad[0], bad[1], bad[2], w3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* ------------------------------------------------------------------ numbers to integers */

/* A number stored into an integer tensor must fit: PyTorch's "value cannot be converted
 * to type int64_t without overflow", never an out-of-range conversion (undefined
 * behaviour in C) that returns OPR_OK. */
START_TEST(numbers_that_do_not_fit_int64)
{
    static const char why[] = "value cannot be converted to type int64_t without overflow";
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){3}, (int64_t[]){1, 2, 3}, OPR_CPU);
    opr_tensor *mask = opr_tensor_from_data(ctx, OPR_BOOL, 1, (int64_t[]){3}, (unsigned char[]){1, 0, 1}, OPR_CPU);
    const double bad[] = {1e19, -1e19, NAN, INFINITY, -INFINITY, 0x1p63, -0x1.0000000000001p63};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        opr_value a[3] = {opr_v_tensor(x), opr_v_tensor(mask), opr_v_double(bad[i])};
        tu_expect_fail(ctx, "masked_fill", a, 3, 1, OPR_ERR_INVALID, why);
        tu_expect_fail(ctx, "masked_fill_", a, 3, 1, OPR_ERR_INVALID, why);
        tu_expect_fail(ctx, "fill_", (opr_value[]){opr_v_tensor(x), opr_v_double(bad[i])}, 2, 1, OPR_ERR_INVALID, why);
        tu_expect_fail(ctx, "full",
                       (opr_value[]){opr_v_ints((int64_t[]){2}, 1), opr_v_double(bad[i]), opr_v_string("i64")}, 3, 1,
                       OPR_ERR_INVALID, why);
    }
    int64_t back[3];
    ck_assert_int_eq(opr_tensor_copy_to_host(x, back, sizeof back), OPR_OK);
    ck_assert(back[0] == 1 && back[1] == 2 && back[2] == 3); /* the failed in-place calls wrote nothing */
    /* the ends of the range, and a fraction (truncated, as PyTorch does) */
    const double ok[] = {-0x1p63, 0x1.fffffffffffffp62, 2.75};
    const int64_t want[] = {INT64_MIN, INT64_C(0x7ffffffffffffc00), 2};
    for (int i = 0; i < 3; i++) {
        opr_tensor *y = tu_call1(ctx, "masked_fill", (opr_value[]){opr_v_tensor(x), opr_v_tensor(mask), opr_v_double(ok[i])}, 3);
        ck_assert_int_eq(opr_tensor_copy_to_host(y, back, sizeof back), OPR_OK);
        ck_assert(back[0] == want[i] && back[1] == 2 && back[2] == want[i]);
        opr_tensor_release(y);
    }
    /* an int Scalar stays exact: INT64_MAX is not rounded through a double (2^63) */
    opr_tensor *z = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){1}, (int64_t[]){0}, OPR_CPU);
    opr_tensor *y = tu_call1(ctx, "add.Scalar", (opr_value[]){opr_v_tensor(z), opr_v_int(INT64_MAX)}, 2);
    ck_assert_int_eq(opr_tensor_copy_to_host(y, back, sizeof back[0]), OPR_OK);
    ck_assert(back[0] == INT64_MAX);
    opr_tensor_release(y);
    /* bool takes any number (v != 0), as PyTorch's conversion to bool cannot overflow */
    opr_tensor *b = opr_tensor_from_data(ctx, OPR_BOOL, 1, (int64_t[]){3}, (unsigned char[]){0, 0, 0}, OPR_CPU);
    opr_tensor_release(tu_call1(ctx, "fill_", (opr_value[]){opr_v_tensor(b), opr_v_double(1e19)}, 2));
    unsigned char bb[3];
    ck_assert_int_eq(opr_tensor_copy_to_host(b, bb, sizeof bb), OPR_OK);
    ck_assert(bb[0] == 1 && bb[1] == 1 && bb[2] == 1);
    opr_tensor_release(b);
    opr_tensor *all[] = {x, mask, z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* ------------------------------------------------------------------ backward */

START_TEST(backward_options_struct_size)
{
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_set_requires_grad(w, true);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(w)}, 1);
    opr_backward_opts bad = {0};
    ck_assert_int_eq(opr_backward(s, NULL, &bad), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "struct_size"));
    ck_assert_ptr_null(opr_grad(w));
    opr_tensor *g = NULL;
    ck_assert_int_eq(opr_autograd_grad(&s, NULL, 1, &w, 1, &g, &bad), OPR_ERR_INVALID);
    ck_assert_ptr_null(g);
    opr_backward_opts ok = {.struct_size = sizeof ok};
    ck_assert_int_eq(opr_backward(s, NULL, &ok), OPR_OK);
    ck_assert_ptr_nonnull(opr_grad(w));
    opr_tensor_release(s);
    opr_tensor_release(w);
}
END_TEST

/* create_graph into a leaf: the leaf's grad has a graph that reaches the leaf again.
 * tu_ctx_free asserts nothing is left alive. */
START_TEST(create_graph_into_leaf_frees_its_graph)
{
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_set_requires_grad(w, true);
    opr_tensor *sq = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(w), opr_v_tensor(w)}, 2);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(sq)}, 1);
    opr_backward_opts o = {.struct_size = sizeof o, .create_graph = true};
    ck_assert_int_eq(opr_backward(s, NULL, &o), OPR_OK);
    opr_tensor *g = opr_grad(w);
    ck_assert_ptr_nonnull(g);
    ck_assert(opr_requires_grad(g));
    /* d/dw sum(2w) = 2 per element: the recorded graph works */
    opr_tensor *gs = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(g)}, 1);
    ck_assert_int_eq(opr_zero_grad(w), OPR_OK);
    ck_assert_int_eq(opr_backward(gs, NULL, NULL), OPR_OK);
    double second[3];
    opr_tensor_copy_to_host(opr_grad(w), second, sizeof second);
    for (int i = 0; i < 3; i++) ck_assert_double_eq_tol(second[i], 2.0, 1e-12);
    /* and once more without dropping the grad: w keeps a grad whose graph saved w */
    ck_assert_int_eq(opr_zero_grad(w), OPR_OK);
    opr_tensor *sq2 = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(w), opr_v_tensor(w)}, 2);
    opr_tensor *s2 = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(sq2)}, 1);
    ck_assert_int_eq(opr_backward(s2, NULL, &o), OPR_OK);
    ck_assert(opr_requires_grad(opr_grad(w)));
    opr_tensor *all[] = {s2, sq2, gs, s, sq, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* ------------------------------------------------------------------ struct_size */

START_TEST(struct_size_is_honoured)
{
    /* too small: refused, nothing written */
    opr_mem_stats small = {.struct_size = OPR_MEM_STATS_STRUCT_SIZE_0_1 - 1, .current_bytes = 7};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &small), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "opr_mem_stats.struct_size"));
    ck_assert_int_eq(small.current_bytes, 7);
    opr_plugin_candidate cand = {0};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 0, &cand), OPR_ERR_INVALID);
    opr_ctx_opts bad_opts = {.struct_size = 8};
    ck_assert_ptr_null(opr_ctx_new(&bad_opts));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "opr_ctx_opts.struct_size"));
    /* a program built against a newer header, whose struct has grown: the fields this
     * library knows are filled, what lies beyond is left alone, struct_size kept */
    struct {
        opr_mem_stats known;
        uint64_t newer_field;
    } big;
    memset(&big, 0xab, sizeof big);
    big.known.struct_size = sizeof big;
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &big.known), OPR_OK);
    ck_assert_uint_eq(big.known.struct_size, sizeof big);
    ck_assert_uint_eq(big.newer_field, UINT64_C(0xabababababababab));
    ck_assert(big.known.current_bytes > 0 && big.known.current_bytes < UINT64_C(0xabababababababab));
    opr_ctx_opts newer[2];
    memset(newer, 0, sizeof newer);
    newer[0].struct_size = sizeof newer; /* fields past this library's are ignored */
    newer[0].skip_plugin_discovery = true;
    opr_ctx *c = opr_ctx_new(&newer[0]);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(opr_plugin_candidate_count(c), 0);
    ck_assert_int_eq(opr_ctx_free(c), 0);
}
END_TEST

/* ------------------------------------------------------------------ no silent caps */

START_TEST(backward_with_many_outputs)
{
    enum { N = 40 };
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_set_requires_grad(w, true);
    opr_tensor *outs[N], *g = NULL;
    for (int i = 0; i < N; i++) {
        opr_tensor *c = opr_tensor_from_data(ctx, OPR_F64, 0, NULL, (double[]){i + 1.0}, OPR_CPU);
        opr_tensor *m = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(w), opr_v_tensor(c)}, 2);
        outs[i] = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(m)}, 1);
        opr_tensor_release(m);
        opr_tensor_release(c);
    }
    ck_assert_int_eq(opr_autograd_grad(outs, NULL, N, &w, 1, &g, NULL), OPR_OK);
    double got[3];
    opr_tensor_copy_to_host(g, got, sizeof got);
    for (int k = 0; k < 3; k++) ck_assert_double_eq_tol(got[k], N * (N + 1) / 2.0, 1e-9);
    opr_tensor_release(g);
    for (int i = 0; i < N; i++) opr_tensor_release(outs[i]);
    opr_tensor_release(w);
}
END_TEST

static void count_node(void *ud, const opr_node_info *info)
{
    (void)info;
    ++*(int *)ud;
}

START_TEST(walk_of_a_long_graph)
{
    enum { N = 3000 };
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, -1, 1);
    opr_set_requires_grad(x, true);
    opr_tensor *y = opr_tensor_retain(x);
    for (int i = 0; i < N; i++) {
        opr_tensor *z = tu_call1(ctx, "exp", (opr_value[]){opr_v_tensor(y)}, 1);
        opr_tensor_release(y);
        y = tu_call1(ctx, "log", (opr_value[]){opr_v_tensor(z)}, 1);
        opr_tensor_release(z);
    }
    int seen = 0;
    ck_assert_int_eq(opr_autograd_walk(y, count_node, &seen), 2 * N);
    ck_assert_int_eq(seen, 2 * N);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

START_TEST(yaml_directory_with_many_files)
{
    enum { N = 300 };
    char dir[] = "/tmp/opreg_yaml_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/op%03d.yaml", dir, i);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "- name: many_%03d(Tensor self) -> Tensor\n  shape: sizes(self)\n", i);
        fclose(f);
    }
    opr_ctx_opts o = {.struct_size = sizeof o, .yaml_dir = dir, .skip_plugin_discovery = true};
    opr_ctx *c = opr_ctx_new(&o);
    ck_assert_msg(c != NULL, "%s", opr_last_error());
    ck_assert_int_eq(opr_op_count(c), N);
    ck_assert_ptr_nonnull(opr_op_find(c, "many_299"));
    ck_assert_int_eq(opr_ctx_free(c), 0);
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/op%03d.yaml", dir, i);
        remove(path);
    }
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, factory_sizes_that_overflow);
    tcase_add_test(tc, views_that_overflow);
    tcase_add_test(tc, diag_and_diagonal_offsets);
    tcase_add_test(tc, arange_counts);
    tcase_add_test(tc, plan_queries_check_arguments);
    tcase_add_test(tc, bool_bytes_are_normalised);
    tcase_add_test(tc, dlpack_import_checks_its_fields);
    tcase_add_test(tc, loss_backward_weight_sizes);
    tcase_add_test(tc, numbers_that_do_not_fit_int64);
    tcase_add_test(tc, backward_options_struct_size);
    tcase_add_test(tc, create_graph_into_leaf_frees_its_graph);
    tcase_add_test(tc, struct_size_is_honoured);
    tcase_add_test(tc, backward_with_many_outputs);
    tcase_add_test(tc, walk_of_a_long_graph);
    tcase_add_test(tc, yaml_directory_with_many_files);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
