/* Autograd through Tensor[] arguments and list results: cat and stack (a gradient per
 * item of the list, from a `tensors[i]:` formula), split and chunk (a list of
 * pieces whose gradients are put together). Values and gradients against small cases
 * computed by hand and against finite differences (opr_gradcheck); items with mixed
 * requires-grad, a tensor given twice, empty pieces, and the errors. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0, 1, 2, ... as an f64 tensor of the given shape, offset by `base`. */
static opr_tensor *iota(opr_ctx *ctx, int ndim, const int64_t *shape, double base)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = base + (double)i;
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    free(v);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

static void expect_values(const opr_tensor *t, int ndim, const int64_t *shape, const double *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: no tensor", what);
    ck_assert_int_eq(opr_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_msg(opr_tensor_shape(t)[d] == shape[d], "%s: size %d is %lld, want %lld", what, d,
                      (long long)opr_tensor_shape(t)[d], (long long)shape[d]);
    double *got = tu_to_f64(t);
    for (int64_t i = 0; i < opr_tensor_numel(t); i++)
        ck_assert_msg(fabs(got[i] - want[i]) < 1e-12, "%s: element %lld is %g, want %g", what, (long long)i, got[i],
                      want[i]);
    free(got);
}

static opr_tensor *cat_of(opr_ctx *ctx, const char *op, opr_tensor *const *ts, int n, int64_t dim)
{
    opr_value a[2] = {opr_v_tensors(ts, n), opr_v_int(dim)};
    return tu_call1(ctx, op, a, 2);
}

static void backward_with(opr_tensor *y, opr_tensor *g)
{
    ck_assert_msg(opr_backward(y, g, NULL) == OPR_OK, "%s", opr_last_error());
}

static void check_grad(const opr_op *op, const opr_value *args, int nargs)
{
    opr_gradcheck_opts o = {.struct_size = sizeof o};
    opr_gradcheck_result r = {.struct_size = sizeof r};
    int rc = opr_gradcheck(op, args, nargs, NULL, 0, &o, &r);
    ck_assert_msg(rc == OPR_OK && r.failed == 0 && r.passed > 0, "%s: %s / %s", opr_op_name(op), opr_last_error(),
                  r.detail);
}

/* ------------------------------------------------------------------ cat */

START_TEST(test_cat_grad_by_hand)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){2, 3}, 0), *b = iota(ctx, 2, (int64_t[]){1, 3}, 10);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(b, true), OPR_OK);
    opr_tensor *ts[] = {a, b};
    opr_tensor *y = cat_of(ctx, "cat", ts, 2, 0);
    expect_values(y, 2, (int64_t[]){3, 3}, (double[]){0, 1, 2, 3, 4, 5, 10, 11, 12}, "cat dim 0");
    opr_tensor *g = iota(ctx, 2, (int64_t[]){3, 3}, 100);
    backward_with(y, g);
    /* each item gets its rows of the output gradient */
    expect_values(opr_grad(a), 2, (int64_t[]){2, 3}, (double[]){100, 101, 102, 103, 104, 105}, "grad a");
    expect_values(opr_grad(b), 2, (int64_t[]){1, 3}, (double[]){106, 107, 108}, "grad b");
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

/* Along the last dim, with an item that does not require grad in the middle and a
 * tensor given twice: the twice-given one gets the sum of its two pieces. */
START_TEST(test_cat_mixed_and_twice)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){2, 2}, 0), *c = iota(ctx, 2, (int64_t[]){2, 1}, 50);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    opr_tensor *ts[] = {a, c, a};
    opr_tensor *y = cat_of(ctx, "cat", ts, 3, -1);
    expect_values(y, 2, (int64_t[]){2, 5}, (double[]){0, 1, 50, 0, 1, 2, 3, 51, 2, 3}, "cat dim -1");
    opr_tensor *g = iota(ctx, 2, (int64_t[]){2, 5}, 0);
    backward_with(y, g);
    /* g = [[0 1 2 3 4], [5 6 7 8 9]]: a's pieces are columns 0-1 and 3-4 */
    expect_values(opr_grad(a), 2, (int64_t[]){2, 2}, (double[]){0 + 3, 1 + 4, 5 + 8, 6 + 9}, "grad a, twice");
    ck_assert_ptr_null(opr_grad(c));
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(a);
    opr_tensor_release(c);
    tu_ctx_free(ctx);
}
END_TEST

/* Items made by other ops: the gradient goes on through their nodes; an empty item
 * (and PyTorch's legacy 1-d empty one, which cat skips) gets an empty gradient. */
START_TEST(test_cat_through_nodes_and_empty)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){2, 2}, 1);
    opr_tensor *e = iota(ctx, 2, (int64_t[]){2, 0}, 0), *legacy = iota(ctx, 1, (int64_t[]){0}, 0);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(e, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(legacy, true), OPR_OK);
    opr_value m[2] = {opr_v_tensor(x), opr_v_tensor(x)};
    opr_tensor *sq = tu_call1(ctx, "mul", m, 2); /* x * x */
    opr_tensor *ts[] = {sq, e, legacy, x};
    opr_tensor *y = cat_of(ctx, "cat", ts, 4, 1);
    expect_values(y, 2, (int64_t[]){2, 4}, (double[]){1, 4, 1, 2, 9, 16, 3, 4}, "cat with empties");
    opr_tensor *g = iota(ctx, 2, (int64_t[]){2, 4}, 1);
    backward_with(y, g);
    /* d/dx: 2 x g[:, 0:2] + g[:, 2:4] */
    expect_values(opr_grad(x), 2, (int64_t[]){2, 2}, (double[]){2 * 1 * 1 + 3, 2 * 2 * 2 + 4, 2 * 3 * 5 + 7, 2 * 4 * 6 + 8},
                  "grad x");
    expect_values(opr_grad(e), 2, (int64_t[]){2, 0}, NULL, "grad of the [2, 0] item");
    expect_values(opr_grad(legacy), 1, (int64_t[]){0}, NULL, "grad of the 1-d empty item");
    opr_tensor *r[] = {x, e, legacy, sq, y, g};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_cat_gradcheck)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(3);
    opr_tensor *a = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 3, 2}, -1, 1);
    opr_tensor *b = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 1, 2}, -1, 1);
    opr_tensor *c = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 2, 2}, -1, 1);
    opr_tensor *ts[] = {a, b, c, b};
    opr_value args[2] = {opr_v_tensors(ts, 4), opr_v_int(1)};
    check_grad(opr_op_find(ctx, "cat"), args, 2);
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_tensor_release(c);
    tu_ctx_free(ctx);
}
END_TEST

/* Only sizes are needed: nothing is saved, whichever items require grad. */
START_TEST(test_cat_saves_nothing)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){64, 64}, 0), *b = iota(ctx, 2, (int64_t[]){64, 64}, 0);
    ck_assert_int_eq(opr_set_requires_grad(b, true), OPR_OK);
    opr_tensor *ts[] = {a, b};
    opr_value args[2] = {opr_v_tensors(ts, 2), opr_v_int(0)};
    const char *rg[] = {"tensors"};
    uint64_t bytes = 1;
    ck_assert_msg(opr_plan_saved_bytes(opr_op_find(ctx, "cat"), args, 2, rg, 1, &bytes) == OPR_OK, "%s",
                  opr_last_error());
    ck_assert_int_eq(bytes, 0);
    char buf[4096];
    ck_assert_msg(opr_plan_explain(opr_op_find(ctx, "cat"), args, 2, rg, 1, buf, sizeof buf) == OPR_OK, "%s",
                  opr_last_error());
    ck_assert_msg(strstr(buf, "sizes of {tensors}"), "%s", buf);
    /* the node holds no item: a, which does not require grad, goes with our reference */
    opr_tensor *y = cat_of(ctx, "cat", ts, 2, 0);
    opr_tensor_release(a);
    opr_tensor *g = iota(ctx, 2, (int64_t[]){128, 64}, 0);
    backward_with(y, g);
    double *gb = tu_to_f64(opr_grad(b));
    for (int i = 0; i < 64 * 64; i++) ck_assert_msg(gb[i] == 64 * 64 + i, "grad b element %d: %g", i, gb[i]);
    free(gb);
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_cat_errors)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){2, 3}, 0), *b = iota(ctx, 2, (int64_t[]){2, 4}, 0);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    opr_tensor *ts[] = {a, b};
    opr_value args[2] = {opr_v_tensors(ts, 2), opr_v_int(0)};
    tu_expect_fail(ctx, "cat", args, 2, 1, OPR_ERR_INVALID, "tensor 1 has size 4 in dim 1");
    args[1] = opr_v_int(2);
    tu_expect_fail(ctx, "cat", args, 2, 1, OPR_ERR_INVALID, "dim 2 out of range");
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ stack */

START_TEST(test_stack_values_and_grads)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){2, 3}, 0), *b = iota(ctx, 2, (int64_t[]){2, 3}, 10);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(b, true), OPR_OK);
    opr_tensor *ts[] = {a, b};
    /* result[.., k, ..] = item k, for every position of the new dim */
    const int64_t dims[] = {0, 1, 2, -1, -3};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        int d = (int)(dims[t] < 0 ? dims[t] + 3 : dims[t]);
        int64_t shape[3] = {2, 3, 0};
        int64_t out_shape[3];
        for (int k = 0, j = 0; k < 3; k++) out_shape[k] = k == d ? 2 : shape[j++];
        opr_tensor *y = cat_of(ctx, "stack", ts, 2, dims[t]);
        double want[12];
        for (int p = 0; p < 12; p++) { /* p in y's row-major order: its (item, row, col) */
            int idx[3] = {p / (int)(out_shape[1] * out_shape[2]), (p / (int)out_shape[2]) % (int)out_shape[1],
                          p % (int)out_shape[2]};
            int item = idx[d], rest[2], n = 0;
            for (int k = 0; k < 3; k++)
                if (k != d) rest[n++] = idx[k];
            want[p] = item * 10 + rest[0] * 3 + rest[1];
        }
        char what[32];
        snprintf(what, sizeof what, "stack dim %lld", (long long)dims[t]);
        expect_values(y, 3, out_shape, want, what);
        /* the gradient of item k is the slice k of g */
        opr_tensor *g = iota(ctx, 3, out_shape, 0);
        opr_tensor *ga = NULL, *gb = NULL, *ins[] = {a, b}, *gs[2] = {NULL, NULL};
        ck_assert_msg(opr_autograd_grad(&y, &g, 1, ins, 2, gs, NULL) == OPR_OK, "%s", opr_last_error());
        ga = gs[0];
        gb = gs[1];
        double wa[6], wb[6];
        for (int p = 0; p < 12; p++) {
            int idx[3] = {p / (int)(out_shape[1] * out_shape[2]), (p / (int)out_shape[2]) % (int)out_shape[1],
                          p % (int)out_shape[2]};
            int rest[2], n = 0;
            for (int k = 0; k < 3; k++)
                if (k != d) rest[n++] = idx[k];
            (idx[d] ? wb : wa)[rest[0] * 3 + rest[1]] = p;
        }
        expect_values(ga, 2, shape, wa, what);
        expect_values(gb, 2, shape, wb, what);
        opr_tensor_release(ga);
        opr_tensor_release(gb);
        opr_tensor_release(g);
        opr_tensor_release(y);
    }
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_stack_mixed_twice_gradcheck)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(4);
    opr_tensor *a = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1);
    opr_tensor *b = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    opr_tensor *ts[] = {a, b, a};
    opr_tensor *y = cat_of(ctx, "stack", ts, 3, 1);
    opr_tensor *g = iota(ctx, 3, (int64_t[]){3, 3, 2}, 0);
    backward_with(y, g);
    /* g[r, k, c] = 6 r + 2 k + c: a's gradient is the sum over k = 0 and k = 2 */
    double want[6];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 2; c++) want[r * 2 + c] = (6 * r + c) + (6 * r + 4 + c);
    expect_values(opr_grad(a), 2, (int64_t[]){3, 2}, want, "grad a, twice");
    ck_assert_ptr_null(opr_grad(b));
    opr_value args[2] = {opr_v_tensors(ts, 3), opr_v_int(-1)};
    check_grad(opr_op_find(ctx, "stack"), args, 2);
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_stack_errors)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *a = iota(ctx, 2, (int64_t[]){2, 3}, 0), *b = iota(ctx, 2, (int64_t[]){3, 2}, 0);
    opr_tensor *s = iota(ctx, 0, NULL, 0);
    opr_tensor *ts[] = {a, b};
    opr_value args[2] = {opr_v_tensors(ts, 2), opr_v_int(0)};
    tu_expect_fail(ctx, "stack", args, 2, 1, OPR_ERR_INVALID, "tensor 1 has shape [3, 2], tensor 0 has [2, 3]");
    ts[1] = a;
    args[1] = opr_v_int(3);
    tu_expect_fail(ctx, "stack", args, 2, 1, OPR_ERR_INVALID, "dim 3 out of range for 2-d tensors");
    args[1] = opr_v_int(-4);
    tu_expect_fail(ctx, "stack", args, 2, 1, OPR_ERR_INVALID, "dim -4 out of range");
    args[0] = opr_v_tensors(ts, 0);
    args[1] = opr_v_int(0);
    tu_expect_fail(ctx, "stack", args, 2, 1, OPR_ERR_INVALID, "empty list");
    opr_tensor *scalars[] = {s, s};
    args[0] = opr_v_tensors(scalars, 2);
    tu_expect_fail(ctx, "stack", args, 2, 1, OPR_ERR_INVALID, "check failed: dim(tensors[0]) > 0");
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_tensor_release(s);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ split, chunk */

/* The pieces of op(x, n, dim): their count from opr_op_result_count, then the call. */
static int pieces_of(opr_ctx *ctx, const char *op, opr_tensor *x, int64_t n, int64_t dim, opr_tensor **out, int max)
{
    const opr_op *o = opr_op_find(ctx, op);
    ck_assert(opr_op_returns_list(o));
    opr_value a[3] = {opr_v_tensor(x), opr_v_int(n), opr_v_int(dim)};
    int count = -1;
    ck_assert_msg(opr_op_result_count(o, a, 3, &count) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_le(count, max);
    ck_assert_msg(opr_call(o, a, 3, out, count) == OPR_OK, "%s", opr_last_error());
    return count;
}

static void release_all(opr_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) opr_tensor_release(ts[i]);
}

/* Piece sizes as PyTorch 1.13 gives them (torch.split / torch.chunk), by hand. */
START_TEST(test_split_chunk_values)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){5, 3}, 0);
    opr_tensor *p[8] = {NULL};
    /* split(2) of 5 rows: 2, 2, 1 */
    ck_assert_int_eq(pieces_of(ctx, "split", x, 2, 0, p, 8), 3);
    expect_values(p[0], 2, (int64_t[]){2, 3}, (double[]){0, 1, 2, 3, 4, 5}, "split piece 0");
    expect_values(p[1], 2, (int64_t[]){2, 3}, (double[]){6, 7, 8, 9, 10, 11}, "split piece 1");
    expect_values(p[2], 2, (int64_t[]){1, 3}, (double[]){12, 13, 14}, "split piece 2");
    release_all(p, 3);
    /* along the last dim, split_size larger than the dim: one piece, all of it */
    ck_assert_int_eq(pieces_of(ctx, "split", x, 7, -1, p, 8), 1);
    expect_values(p[0], 2, (int64_t[]){5, 3}, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, "split 7");
    release_all(p, 1);
    /* chunk(2) of 5: 3, 2; chunk(4) of 3 columns: 1, 1, 1 (three pieces, not four) */
    ck_assert_int_eq(pieces_of(ctx, "chunk", x, 2, 0, p, 8), 2);
    ck_assert_int_eq(opr_tensor_shape(p[0])[0], 3);
    ck_assert_int_eq(opr_tensor_shape(p[1])[0], 2);
    release_all(p, 2);
    ck_assert_int_eq(pieces_of(ctx, "chunk", x, 4, 1, p, 8), 3);
    expect_values(p[2], 2, (int64_t[]){5, 1}, (double[]){2, 5, 8, 11, 14}, "chunk column 2");
    release_all(p, 3);
    /* chunk(4) of 6: 2, 2, 2 (torch gives three) */
    opr_tensor *six = iota(ctx, 1, (int64_t[]){6}, 0);
    ck_assert_int_eq(pieces_of(ctx, "chunk", six, 4, 0, p, 8), 3);
    expect_values(p[2], 1, (int64_t[]){2}, (double[]){4, 5}, "chunk 4 of 6, piece 2");
    release_all(p, 3);
    /* an empty dim: split gives one empty piece, chunk(3) three */
    opr_tensor *e = iota(ctx, 2, (int64_t[]){3, 0}, 0);
    ck_assert_int_eq(pieces_of(ctx, "split", e, 2, 1, p, 8), 1);
    expect_values(p[0], 2, (int64_t[]){3, 0}, NULL, "split of an empty dim");
    release_all(p, 1);
    ck_assert_int_eq(pieces_of(ctx, "chunk", e, 3, 1, p, 8), 3);
    expect_values(p[2], 2, (int64_t[]){3, 0}, NULL, "chunk of an empty dim");
    release_all(p, 3);
    ck_assert_int_eq(pieces_of(ctx, "split", e, 0, 1, p, 8), 1); /* split_size 0 is fine on an empty dim */
    release_all(p, 1);
    opr_tensor_release(x);
    opr_tensor_release(six);
    opr_tensor_release(e);
    tu_ctx_free(ctx);
}
END_TEST

/* Only some pieces used, one of them twice: the gradient is theirs put together, zeros
 * for the unused piece. */
START_TEST(test_split_grad_by_hand)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){5, 2}, 0);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *p[3] = {NULL};
    ck_assert_int_eq(pieces_of(ctx, "split", x, 2, 0, p, 3), 3);
    opr_tensor *used[] = {p[2], p[0], p[2]};
    opr_tensor *y = cat_of(ctx, "cat", used, 3, 0); /* rows 4, 0, 1, 4 of x */
    expect_values(y, 2, (int64_t[]){4, 2}, (double[]){8, 9, 0, 1, 2, 3, 8, 9}, "cat of pieces");
    opr_tensor *g = iota(ctx, 2, (int64_t[]){4, 2}, 1); /* rows [1 2] [3 4] [5 6] [7 8] */
    backward_with(y, g);
    expect_values(opr_grad(x), 2, (int64_t[]){5, 2}, (double[]){3, 4, 5, 6, 0, 0, 0, 0, 1 + 7, 2 + 8}, "grad x");
    release_all(p, 3);
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* A piece on its own (the others get no gradient at all), through a further op. */
START_TEST(test_chunk_one_piece_grad)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){2, 5}, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *p[3] = {NULL};
    ck_assert_int_eq(pieces_of(ctx, "chunk", x, 3, 1, p, 3), 3); /* columns 0-1, 2-3, 4 */
    opr_value m[2] = {opr_v_tensor(p[1]), opr_v_tensor(p[1])};
    opr_tensor *sq = tu_call1(ctx, "mul", m, 2);
    opr_value sa = opr_v_tensor(sq);
    opr_tensor *s = tu_call1(ctx, "sum", &sa, 1);
    backward_with(s, NULL);
    /* d sum(p1^2) / dx = 2 x on columns 2-3, 0 elsewhere; x = [[1..5], [6..10]] */
    expect_values(opr_grad(x), 2, (int64_t[]){2, 5}, (double[]){0, 0, 6, 8, 0, 0, 0, 16, 18, 0}, "grad x");
    release_all(p, 3);
    opr_tensor_release(sq);
    opr_tensor_release(s);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_split_chunk_gradcheck)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(5);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 3, (int64_t[]){3, 5, 2}, -1, 1);
    opr_value a[3] = {opr_v_tensor(x), opr_v_int(2), opr_v_int(1)};
    check_grad(opr_op_find(ctx, "split"), a, 3);
    a[1] = opr_v_int(4);
    a[2] = opr_v_int(-2);
    check_grad(opr_op_find(ctx, "chunk"), a, 3);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_split_chunk_errors)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){5, 3}, 0), *s = iota(ctx, 0, NULL, 0);
    opr_value a[3] = {opr_v_tensor(x), opr_v_int(0), opr_v_int(0)};
    tu_expect_fail(ctx, "split", a, 3, 1, OPR_ERR_INVALID, "check failed: split_size > 0");
    a[1] = opr_v_int(-1);
    tu_expect_fail(ctx, "split", a, 3, 1, OPR_ERR_INVALID, "check failed: split_size > 0");
    tu_expect_fail(ctx, "chunk", a, 3, 1, OPR_ERR_INVALID, "check failed: chunks > 0");
    a[1] = opr_v_int(0);
    tu_expect_fail(ctx, "chunk", a, 3, 1, OPR_ERR_INVALID, "check failed: chunks > 0");
    a[1] = opr_v_int(2);
    a[2] = opr_v_int(2);
    tu_expect_fail(ctx, "split", a, 3, 1, OPR_ERR_INVALID, "dim 2 out of range");
    int count = 0;
    ck_assert_int_eq(opr_op_result_count(opr_op_find(ctx, "chunk"), a, 3, &count), OPR_ERR_INVALID);
    /* the wrong number of result slots names the right one */
    a[2] = opr_v_int(0);
    tu_expect_fail(ctx, "split", a, 3, 2, OPR_ERR_INVALID, "returns 3 tensor(s) for these arguments, 2 result slot(s)");
    a[0] = opr_v_tensor(s);
    tu_expect_fail(ctx, "split", a, 3, 1, OPR_ERR_INVALID, "check failed: dim(self) > 0");
    /* plain ops count their outputs */
    ck_assert_int_eq(opr_op_result_count(opr_op_find(ctx, "sort"), a, 1, &count), OPR_OK);
    ck_assert_int_eq(count, 2);
    ck_assert(!opr_op_returns_list(opr_op_find(ctx, "cat")));
    opr_tensor_release(x);
    opr_tensor_release(s);
    tu_ctx_free(ctx);
}
END_TEST

/* The graph run twice (retain_graph), a gradient asked for a piece itself (a non-leaf
 * output of the split node), and a second derivative through cat (create_graph): the
 * per-item formulas are themselves recorded. */
START_TEST(test_retain_capture_create_graph)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 1, (int64_t[]){4}, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *p[2] = {NULL};
    ck_assert_int_eq(pieces_of(ctx, "split", x, 2, 0, p, 2), 2);
    opr_tensor *ts[] = {p[1], p[0]};
    opr_tensor *y = cat_of(ctx, "cat", ts, 2, 0); /* x2 x3 x0 x1 */
    opr_tensor *g = iota(ctx, 1, (int64_t[]){4}, 10);
    opr_backward_opts keep = {.struct_size = sizeof keep, .retain_graph = true};
    ck_assert_msg(opr_backward(y, g, &keep) == OPR_OK, "%s", opr_last_error());
    ck_assert_msg(opr_backward(y, g, &keep) == OPR_OK, "%s", opr_last_error());
    expect_values(opr_grad(x), 1, (int64_t[]){4}, (double[]){24, 26, 20, 22}, "twice");
    opr_tensor *gp = NULL;
    ck_assert_msg(opr_autograd_grad(&y, &g, 1, &p[1], 1, &gp, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(gp, 1, (int64_t[]){2}, (double[]){10, 11}, "grad of piece 1");
    opr_tensor_release(gp);
    /* d/dx sum(cat(x*x, x) * w) = 2 x w0 + w1, and its derivative again: 2 w0 */
    opr_tensor *z = iota(ctx, 1, (int64_t[]){2}, 3);
    ck_assert_int_eq(opr_set_requires_grad(z, true), OPR_OK);
    opr_value m[2] = {opr_v_tensor(z), opr_v_tensor(z)};
    opr_tensor *sq = tu_call1(ctx, "mul", m, 2);
    opr_tensor *zs[] = {sq, z};
    opr_tensor *c = cat_of(ctx, "cat", zs, 2, 0);
    opr_tensor *w = iota(ctx, 1, (int64_t[]){4}, 1); /* w0 = [1 2], w1 = [3 4] */
    opr_backward_opts cg = {.struct_size = sizeof cg, .create_graph = true};
    opr_tensor *dz = NULL;
    ck_assert_msg(opr_autograd_grad(&c, &w, 1, &z, 1, &dz, &cg) == OPR_OK, "%s", opr_last_error());
    expect_values(dz, 1, (int64_t[]){2}, (double[]){2 * 3 * 1 + 3, 2 * 4 * 2 + 4}, "first derivative");
    ck_assert(opr_requires_grad(dz));
    opr_tensor *ddz = NULL;
    opr_tensor *ones = iota(ctx, 1, (int64_t[]){2}, 1); /* weights 1, 2 */
    ck_assert_msg(opr_autograd_grad(&dz, &ones, 1, &z, 1, &ddz, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(ddz, 1, (int64_t[]){2}, (double[]){2 * 1 * 1, 2 * 2 * 2}, "second derivative");
    opr_tensor *r[] = {x, p[0], p[1], y, g, z, sq, c, w, dz, ddz, ones};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* vmap and jagged tensors refuse ops returning a Tensor[] with a message saying so. */
static opr_status split_in_vmap(void *user, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)user; (void)nin; (void)nout;
    opr_value a[2] = {opr_v_tensor(in[0]), opr_v_int(1)};
    opr_tensor *p[4] = {NULL};
    int rc = opr_call_by_name(opr_tensor_ctx(in[0]), "split", a, 2, p, 2);
    ck_assert_int_eq(rc, OPR_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(opr_last_error(), "split returns a Tensor[], which opr_vmap does not support"), "%s",
                  opr_last_error());
    out[0] = opr_tensor_retain(in[0]);
    return OPR_OK;
}

START_TEST(test_list_results_refused_by_vmap_and_jagged)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = iota(ctx, 2, (int64_t[]){3, 2}, 0), *out = NULL;
    ck_assert_msg(opr_vmap(ctx, split_in_vmap, NULL, &x, NULL, 1, &out, NULL, 1, NULL) == OPR_OK, "%s",
                  opr_last_error());
    opr_tensor *items[] = {x, x};
    opr_tensor *j = opr_jagged_from_list(ctx, items, 2);
    ck_assert_msg(j != NULL, "%s", opr_last_error());
    opr_value a[2] = {opr_v_tensor(j), opr_v_int(1)};
    tu_expect_fail(ctx, "split", a, 2, 1, OPR_ERR_UNSUPPORTED, "which a jagged tensor does not support yet");
    int n = 0;
    ck_assert_int_eq(opr_op_result_count(opr_op_find(ctx, "split"), a, 2, &n), OPR_ERR_UNSUPPORTED);
    opr_tensor_release(out);
    opr_tensor_release(j);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* The YAML side: what the loader refuses, with its position. */
START_TEST(test_yaml_refusals)
{
    opr_ctx *ctx = tu_ctx();
    static const struct { const char *text, *needle; } bad[] = {
        {"- name: c1(Tensor[] ts, int dim=0) -> Tensor\n  shape: cat_shape(ts, dim)\n  ts: grad\n",
         "'ts' is a Tensor[] argument: its derivative key is 'NAME[i]'"},
        {"- name: c2(Tensor self) -> Tensor\n  shape: sizes(self)\n  self[i]: grad\n",
         "'self' is not a differentiable Tensor[] argument"},
        {"- name: c3(Tensor self) -> Tensor\n  shape: sizes(self)\n  self: mul(grad, i)\n",
         "'i' (an item's index) is known only in a 'LIST[i]:' derivative entry"},
        {"- name: c4(Tensor self) -> Tensor[]\n  forward: narrow(self, 0, i, 1)\n",
         "returns Tensor[]: it needs 'count' and 'forward'"},
        {"- name: c5(Tensor self) -> Tensor\n  shape: sizes(self)\n  count: 2\n", "only for an op returning Tensor[]"},
        {"- name: c6(Tensor self) -> Tensor[]\n  count: 2\n  shape: sizes(self)\n  forward: self\n",
         "no 'let', no 'shape'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int n = -1;
        ck_assert_msg(opr_registry_load_yaml_string(ctx, bad[k].text, "bad.yaml", &n) == OPR_ERR_PARSE,
                      "loaded: %s", bad[k].text);
        ck_assert_msg(strstr(opr_last_error(), bad[k].needle), "'%s' lacks '%s'", opr_last_error(), bad[k].needle);
        ck_assert_msg(strstr(opr_last_error(), "bad.yaml:"), "no position in '%s'", opr_last_error());
    }
    /* a list op of one's own: every second row, `i` in count and forward */
    const char *ok = "- name: rows2(Tensor self) -> Tensor[]\n"
                     "  count: ceil(size(self, 0) / 2)\n"
                     "  forward: narrow(self, 0, 2 * i, 1)\n"
                     "  self: narrow_scatter(new_zeros(grads[0], sizes(self)), grads[0], 0, 0)\n";
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, ok, "ok.yaml", &n) == OPR_OK, "%s", opr_last_error());
    opr_tensor *x = iota(ctx, 2, (int64_t[]){5, 2}, 0), *p[3] = {NULL};
    opr_value xa = opr_v_tensor(x);
    int count = 0;
    ck_assert_int_eq(opr_op_result_count(opr_op_find(ctx, "rows2"), &xa, 1, &count), OPR_OK);
    ck_assert_int_eq(count, 3);
    ck_assert_msg(opr_call_by_name(ctx, "rows2", &xa, 1, p, 3) == OPR_OK, "%s", opr_last_error());
    expect_values(p[2], 2, (int64_t[]){1, 2}, (double[]){8, 9}, "rows2 piece 2");
    release_all(p, 3);
    /* its formula hands grads[0] to ops: backward through piece 0 alone */
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    ck_assert_msg(opr_call_by_name(ctx, "rows2", &xa, 1, p, 3) == OPR_OK, "%s", opr_last_error());
    opr_tensor *g = iota(ctx, 2, (int64_t[]){1, 2}, 1);
    backward_with(p[0], g);
    expect_values(opr_grad(x), 2, (int64_t[]){5, 2}, (double[]){1, 2, 0, 0, 0, 0, 0, 0, 0, 0}, "rows2 grad");
    release_all(p, 3);
    opr_tensor_release(g);
    /* no rows, no pieces: a call with no result slots */
    opr_tensor *none = iota(ctx, 2, (int64_t[]){0, 2}, 0);
    opr_value na = opr_v_tensor(none);
    ck_assert_int_eq(opr_op_result_count(opr_op_find(ctx, "rows2"), &na, 1, &count), OPR_OK);
    ck_assert_int_eq(count, 0);
    ck_assert_msg(opr_call_by_name(ctx, "rows2", &na, 1, NULL, 0) == OPR_OK, "%s", opr_last_error());
    opr_tensor_release(none);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tensor_lists");
    TCase *tc = tcase_create("lists");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cat_grad_by_hand);
    tcase_add_test(tc, test_cat_mixed_and_twice);
    tcase_add_test(tc, test_cat_through_nodes_and_empty);
    tcase_add_test(tc, test_cat_gradcheck);
    tcase_add_test(tc, test_cat_saves_nothing);
    tcase_add_test(tc, test_cat_errors);
    tcase_add_test(tc, test_stack_values_and_grads);
    tcase_add_test(tc, test_stack_mixed_twice_gradcheck);
    tcase_add_test(tc, test_stack_errors);
    tcase_add_test(tc, test_split_chunk_values);
    tcase_add_test(tc, test_split_grad_by_hand);
    tcase_add_test(tc, test_chunk_one_piece_grad);
    tcase_add_test(tc, test_split_chunk_gradcheck);
    tcase_add_test(tc, test_split_chunk_errors);
    tcase_add_test(tc, test_retain_capture_create_graph);
    tcase_add_test(tc, test_list_results_refused_by_vmap_and_jagged);
    tcase_add_test(tc, test_yaml_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
