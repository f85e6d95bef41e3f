/* Jagged tensors: making them (values + offsets, list, padded), the accessors, bad
 * offsets, the ops that take them (against per-sequence dense references), autograd
 * through them, clear errors for everything else, and the seed's memory test: linear
 * backward over B=64 sequences of D=512 at the memory minimum, jagged and dense. With
 * the emulated CUDA plugin (OPREG_TEST_EMU) the ops also run on the device. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* A jagged tensor [B, ragged, D] of dtype dt with the given lengths, values in [-1, 1). */
static opr_tensor *make_jagged_dt(opr_ctx *ctx, opr_dtype dt, const int64_t *lengths, int B, int64_t D)
{
    int64_t *offs = malloc((size_t)(B + 1) * sizeof *offs);
    offs[0] = 0;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lengths[b];
    int64_t vshape[2] = {offs[B], D}, n = B + 1;
    opr_tensor *values = tu_rand(ctx, dt, D ? 2 : 1, vshape, -1, 1);
    opr_tensor *o = opr_tensor_from_data(ctx, OPR_I64, 1, &n, offs, OPR_CPU);
    opr_tensor *j = opr_jagged_from_values(values, o);
    ck_assert_msg(j, "%s", opr_last_error());
    opr_tensor_release(values);
    opr_tensor_release(o);
    free(offs);
    return j;
}

static opr_tensor *make_jagged(opr_ctx *ctx, const int64_t *lengths, int B, int64_t D)
{
    return make_jagged_dt(ctx, OPR_F64, lengths, B, D);
}

static double *values_of(const opr_tensor *j)
{
    opr_tensor *v = opr_jagged_values(j);
    ck_assert(v);
    double *d = tu_to_f64(v);
    opr_tensor_release(v);
    return d;
}

static void expect_close(const double *a, const double *b, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i])), "%s: element %lld: %.17g vs %.17g", what,
                      (long long)i, a[i], b[i]);
}

static const int64_t lens5[5] = {3, 0, 5, 1, 4}; /* one empty sequence */

/* ------------------------------------------------------------------ layout */

START_TEST(test_layout_and_accessors)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(1);
    opr_tensor *j = make_jagged(ctx, lens5, 5, 3);
    ck_assert(opr_tensor_is_jagged(j));
    ck_assert_int_eq(opr_tensor_ndim(j), 3);
    ck_assert_int_eq(opr_tensor_size(j, 0), 5);
    ck_assert_int_eq(opr_tensor_size(j, 1), OPR_SIZE_RAGGED);
    ck_assert_int_eq(opr_tensor_size(j, -1), 3);
    ck_assert_int_eq(opr_tensor_shape(j)[1], OPR_SIZE_RAGGED);
    ck_assert_int_eq(opr_tensor_numel(j), 13 * 3);
    ck_assert_int_eq(opr_jagged_max_length(j), 5);
    const int64_t *o = opr_jagged_offsets_host(j);
    ck_assert(o && o[0] == 0 && o[1] == 3 && o[2] == 3 && o[5] == 13);
    char buf[128];
    ck_assert_msg(strstr(opr_tensor_describe(j, buf, sizeof buf), "ragged"), "%s", buf);
    /* zero-copy: the values are the tensor it wraps */
    opr_tensor *v = opr_jagged_values(j), *v2 = opr_jagged_values(j);
    ck_assert_ptr_eq(v, v2);
    ck_assert(opr_tensor_shares_storage(v, j));
    ck_assert_ptr_eq(opr_tensor_data(v), opr_tensor_data(j));
    /* the structure is shared by results, O(1) */
    opr_tensor *e = tu_call1(ctx, "exp", (opr_value[]){opr_v_tensor(j)}, 1);
    ck_assert(opr_tensor_is_jagged(e));
    ck_assert_ptr_eq(opr_jagged_offsets_host(e), opr_jagged_offsets_host(j));
    ck_assert(opr_jagged_same_structure(e, j));
    ck_assert(!opr_jagged_same_structure(v, j));
    opr_tensor *like = opr_jagged_like(v, j);
    ck_assert(like && opr_jagged_offsets_host(like) == o);
    /* dense-only functions refuse it by name */
    double host[64];
    ck_assert_int_eq(opr_tensor_copy_to_host(j, host, sizeof host), OPR_ERR_UNSUPPORTED);
    ck_assert(strstr(opr_last_error(), "jagged"));
    ck_assert_ptr_null(opr_tensor_transpose(j, 0, 2));
    ck_assert(strstr(opr_last_error(), "transpose: not supported on a jagged tensor"));
    ck_assert_ptr_null(opr_tensor_reshape(j, (int64_t[]){39}, 1));
    ck_assert_ptr_null(opr_tensor_to_dlpack(j));
    /* contiguous: already; detach keeps the structure */
    opr_tensor *c = opr_tensor_contiguous(j), *d = opr_tensor_detach(j);
    ck_assert_ptr_eq(c, j);
    ck_assert(opr_tensor_is_jagged(d) && opr_jagged_same_structure(d, j));
    opr_tensor *rel[] = {j, v, v2, e, like, c, d};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_offsets)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *values = tu_rand(ctx, OPR_F32, 2, (int64_t[]){6, 2}, -1, 1);
    static const struct { int64_t o[4]; const char *needle; } cases[] = {
        {{1, 2, 4, 6}, "offsets[0] is 1, must be 0"},
        {{0, 4, 2, 6}, "offsets decrease at 2 (4 then 2)"},
        {{0, 2, 7, 6}, "offsets[2] = 7 is past the end of the values (6 rows)"},
        {{0, 2, 4, 5}, "offsets end at 5 but the values have 6 rows"},
    };
    float before[12];
    ck_assert_int_eq(opr_tensor_copy_to_host(values, before, sizeof before), OPR_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        opr_tensor *o = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){4}, cases[i].o, OPR_CPU);
        ck_assert_ptr_null(opr_jagged_from_values(values, o));
        ck_assert_msg(strstr(opr_last_error(), cases[i].needle), "case %zu: %s", i, opr_last_error());
        opr_tensor_release(o);
    }
    opr_tensor *f = tu_rand(ctx, OPR_F32, 1, (int64_t[]){3}, 0, 1);
    ck_assert_ptr_null(opr_jagged_from_values(values, f));
    ck_assert(strstr(opr_last_error(), "1-d i64 tensor"));
    opr_tensor_release(f);
    /* nothing was changed */
    float after[12];
    ck_assert_int_eq(opr_tensor_copy_to_host(values, after, sizeof after), OPR_OK);
    ck_assert(!memcmp(before, after, sizeof before));
    /* from_padded: lengths outside 0..N */
    opr_tensor *padded = tu_rand(ctx, OPR_F32, 3, (int64_t[]){2, 3, 2}, -1, 1);
    ck_assert_ptr_null(opr_jagged_from_padded(padded, (int64_t[]){1, 4}, 2));
    ck_assert(strstr(opr_last_error(), "length 4 of sequence 1 is outside 0..3"));
    ck_assert_ptr_null(opr_jagged_from_padded(padded, (int64_t[]){1}, 1));
    opr_tensor_release(padded);
    /* NULLs and dense tensors where a jagged one is wanted: errors, no crash */
    ck_assert_ptr_null(opr_jagged_from_values(NULL, values));
    ck_assert_ptr_null(opr_jagged_from_values(values, NULL));
    ck_assert_ptr_null(opr_jagged_like(values, values));
    ck_assert_ptr_null(opr_jagged_like(NULL, NULL));
    ck_assert_ptr_null(opr_jagged_from_list(ctx, NULL, 1));
    ck_assert_ptr_null(opr_jagged_from_list(ctx, (opr_tensor *[]){NULL}, 1));
    ck_assert_ptr_null(opr_jagged_from_list(NULL, &values, 1));
    ck_assert_ptr_null(opr_jagged_from_padded(NULL, NULL, 0));
    ck_assert_ptr_null(opr_jagged_to_padded(values, 0));
    ck_assert_ptr_null(opr_jagged_to_padded(NULL, 0));
    ck_assert_ptr_null(opr_jagged_values(values));
    ck_assert_ptr_null(opr_jagged_offsets(NULL));
    ck_assert_ptr_null(opr_jagged_offsets_host(values));
    ck_assert_int_eq(opr_jagged_max_length(NULL), -1);
    ck_assert(!opr_jagged_same_structure(NULL, values));
    ck_assert(!opr_tensor_is_jagged(values));
    opr_tensor_release(values);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_list_and_padded)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(2);
    opr_tensor *items[3] = {
        tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1),
        tu_rand(ctx, OPR_F64, 2, (int64_t[]){0, 3}, -1, 1),
        tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 3}, -1, 1),
    };
    opr_tensor *j = opr_jagged_from_list(ctx, items, 3);
    ck_assert_msg(j, "%s", opr_last_error());
    ck_assert_int_eq(opr_jagged_max_length(j), 4);
    double *v = values_of(j), *a = tu_to_f64(items[0]), *c = tu_to_f64(items[2]);
    expect_close(v, a, 6, 0, "item 0");
    expect_close(v + 6, c, 12, 0, "item 2");
    /* padded [3, 4, 3], -7 past each end, and back */
    opr_tensor *p = opr_jagged_to_padded(j, -7);
    ck_assert_msg(p, "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_size(p, 0), 3);
    ck_assert_int_eq(opr_tensor_size(p, 1), 4);
    double *pd = tu_to_f64(p);
    expect_close(pd, a, 6, 0, "padded row 0");
    ck_assert(pd[6] == -7 && pd[12] == -7 && pd[23] == -7);
    expect_close(pd + 24, c, 12, 0, "padded row 2");
    opr_tensor *back = opr_jagged_from_padded(p, (int64_t[]){2, 0, 4}, 3);
    ck_assert_msg(back, "%s", opr_last_error());
    ck_assert(opr_jagged_same_structure(back, j));
    double *bv = values_of(back);
    expect_close(bv, v, 18, 0, "round trip");
    /* a mismatching item is refused */
    opr_tensor *odd = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 4}, -1, 1);
    opr_tensor *bad[2] = {items[0], odd};
    ck_assert_ptr_null(opr_jagged_from_list(ctx, bad, 2));
    ck_assert(strstr(opr_last_error(), "item 1"));
    free(v); free(a); free(c); free(pd); free(bv);
    opr_tensor *rel[] = {items[0], items[1], items[2], j, p, back, odd};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ ops */

START_TEST(test_elementwise)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(3);
    opr_tensor *a = make_jagged(ctx, lens5, 5, 3), *b = make_jagged(ctx, lens5, 5, 3);
    double *av = values_of(a), *bv = values_of(b);
    const int64_t T = 13;
    /* jagged + jagged: the same lengths in a different structure object (O(B) check) */
    opr_tensor *s = tu_call1(ctx, "add", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
    ck_assert(opr_tensor_is_jagged(s) && opr_jagged_same_structure(s, a));
    double *sv = values_of(s), ref[13 * 3];
    for (int i = 0; i < T * 3; i++) ref[i] = av[i] + bv[i];
    expect_close(sv, ref, T * 3, 1e-15, "add");
    free(sv);
    /* jagged * dense [D], [1, 1, D] and [B, 1, D] */
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    opr_tensor *w11 = tu_rand(ctx, OPR_F64, 3, (int64_t[]){1, 1, 3}, -1, 1);
    opr_tensor *wb = tu_rand(ctx, OPR_F64, 3, (int64_t[]){5, 1, 3}, -1, 1);
    double *wd = tu_to_f64(w), *w11d = tu_to_f64(w11), *wbd = tu_to_f64(wb);
    const int64_t *o = opr_jagged_offsets_host(a);
    opr_tensor *m1 = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(a), opr_v_tensor(w)}, 2);
    opr_tensor *m2 = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(a), opr_v_tensor(w11)}, 2);
    opr_tensor *m3 = tu_call1(ctx, "sub", (opr_value[]){opr_v_tensor(a), opr_v_tensor(wb)}, 2);
    double *m1v = values_of(m1), *m2v = values_of(m2), *m3v = values_of(m3);
    for (int bi = 0; bi < 5; bi++)
        for (int64_t r = o[bi]; r < o[bi + 1]; r++)
            for (int d = 0; d < 3; d++) {
                ck_assert(fabs(m1v[r * 3 + d] - av[r * 3 + d] * wd[d]) < 1e-15);
                ck_assert(fabs(m2v[r * 3 + d] - av[r * 3 + d] * w11d[d]) < 1e-15);
                ck_assert(fabs(m3v[r * 3 + d] - (av[r * 3 + d] - wbd[bi * 3 + d])) < 1e-15);
            }
    /* a dense operand that varies along the ragged dim is refused */
    opr_tensor *w2 = tu_rand(ctx, OPR_F64, 3, (int64_t[]){5, 2, 3}, -1, 1);
    tu_expect_fail(ctx, "mul", (opr_value[]){opr_v_tensor(a), opr_v_tensor(w2)}, 2, 1, OPR_ERR_INVALID,
                   "does not broadcast against the jagged argument");
    /* a different structure: the error names both operands and the first difference */
    opr_tensor *c = make_jagged(ctx, (int64_t[]){3, 0, 4, 2, 4}, 5, 3);
    tu_expect_fail(ctx, "add", (opr_value[]){opr_v_tensor(a), opr_v_tensor(c)}, 2, 1, OPR_ERR_INVALID,
                   "'self' and 'other' are jagged with different structures: sequence 2 has length 5 in 'self' and 4 in 'other'");
    /* unary, comparisons (bool results stay jagged) */
    opr_tensor *e = tu_call1(ctx, "tanh", (opr_value[]){opr_v_tensor(a)}, 1);
    double *ev = values_of(e);
    for (int i = 0; i < T * 3; i++) ck_assert(fabs(ev[i] - tanh(av[i])) < 1e-15);
    opr_tensor *gt = tu_call1(ctx, "gt", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
    ck_assert(opr_tensor_is_jagged(gt) && opr_tensor_dtype(gt) == OPR_BOOL);
    free(av); free(bv); free(wd); free(w11d); free(wbd); free(m1v); free(m2v); free(m3v); free(ev);
    opr_tensor *rel[] = {a, b, s, w, w11, wb, m1, m2, m3, w2, c, e, gt};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* The reference of the reductions and softmax: each sequence as a dense [L, D] tensor. */
static opr_tensor *sequence(opr_ctx *ctx, const opr_tensor *j, int b)
{
    opr_tensor *v = opr_jagged_values(j);
    const int64_t *o = opr_jagged_offsets_host(j);
    opr_value args[4] = {opr_v_tensor(v), opr_v_int(0), opr_v_int(o[b]), opr_v_int(o[b + 1] - o[b])};
    opr_tensor *s = tu_call1(ctx, "narrow", args, 4);
    opr_tensor_release(v);
    return s;
}

START_TEST(test_reductions_and_softmax)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(4);
    opr_tensor *j = make_jagged(ctx, lens5, 5, 3);
    const int64_t *o = opr_jagged_offsets_host(j);
    int64_t one = 1, last = -1, zero = 0;
    /* sum and mean over the ragged dim: dense [B, D]; with keepdim [B, 1, D] */
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(j), opr_v_ints(&one, 1)}, 2);
    opr_tensor *m = tu_call1(ctx, "mean", (opr_value[]){opr_v_tensor(j), opr_v_ints(&one, 1)}, 2);
    opr_tensor *sk = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(j), opr_v_ints(&one, 1), opr_v_bool(true)}, 3);
    ck_assert(!opr_tensor_is_jagged(s) && opr_tensor_ndim(s) == 2 && opr_tensor_size(s, 0) == 5);
    ck_assert(opr_tensor_ndim(sk) == 3 && opr_tensor_size(sk, 1) == 1);
    double *sd = tu_to_f64(s), *md = tu_to_f64(m);
    for (int b = 0; b < 5; b++) {
        opr_tensor *seq = sequence(ctx, j, b);
        opr_tensor *rs = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(seq), opr_v_ints(&zero, 1)}, 2);
        double *r = tu_to_f64(rs);
        for (int d = 0; d < 3; d++) {
            ck_assert(fabs(sd[b * 3 + d] - r[d]) < 1e-14);
            int64_t len = o[b + 1] - o[b];
            if (len) ck_assert(fabs(md[b * 3 + d] - r[d] / (double)len) < 1e-14);
            else ck_assert(isnan(md[b * 3 + d])); /* the mean of nothing, as PyTorch */
        }
        free(r);
        opr_tensor_release(rs);
        opr_tensor_release(seq);
    }
    /* over the last dim: jagged [B, ragged] */
    opr_tensor *sl = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(j), opr_v_ints(&last, 1)}, 2);
    ck_assert(opr_tensor_is_jagged(sl) && opr_tensor_ndim(sl) == 2);
    /* every element: dense 0-d */
    opr_tensor *all = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(j)}, 1);
    ck_assert(!opr_tensor_is_jagged(all) && opr_tensor_ndim(all) == 0);
    double *sld = values_of(sl), *alld = tu_to_f64(all), *v = values_of(j), tot = 0;
    for (int64_t r = 0; r < 13; r++) {
        ck_assert(fabs(sld[r] - (v[r * 3] + v[r * 3 + 1] + v[r * 3 + 2])) < 1e-14);
        tot += sld[r];
    }
    ck_assert(fabs(alld[0] - tot) < 1e-13);
    /* the batch dim and the ragged dim with another: refused */
    tu_expect_fail(ctx, "sum", (opr_value[]){opr_v_tensor(j), opr_v_ints(&zero, 1)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "dim 0 of a jagged tensor");
    int64_t two[2] = {1, 2};
    tu_expect_fail(ctx, "sum", (opr_value[]){opr_v_tensor(j), opr_v_ints(two, 2)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "together with other dims");
    /* softmax and log_softmax over the ragged dim: jagged, each sequence's column sums to 1 */
    opr_tensor *sm = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(j), opr_v_int(1)}, 2);
    opr_tensor *lsm = tu_call1(ctx, "log_softmax", (opr_value[]){opr_v_tensor(j), opr_v_int(-2)}, 2);
    ck_assert(opr_jagged_same_structure(sm, j) && opr_jagged_same_structure(lsm, j));
    double *smd = values_of(sm), *lsmd = values_of(lsm);
    for (int b = 0; b < 5; b++) {
        if (o[b + 1] == o[b]) continue;
        opr_tensor *seq = sequence(ctx, j, b);
        opr_tensor *rs = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(seq), opr_v_int(0)}, 2);
        double *r = tu_to_f64(rs);
        expect_close(smd + o[b] * 3, r, (o[b + 1] - o[b]) * 3, 1e-14, "softmax");
        for (int64_t i = 0; i < (o[b + 1] - o[b]) * 3; i++) ck_assert(fabs(lsmd[o[b] * 3 + i] - log(r[i])) < 1e-13);
        free(r);
        opr_tensor_release(rs);
        opr_tensor_release(seq);
    }
    /* softmax over the last dim: on the values */
    opr_tensor *sml = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(j), opr_v_int(2)}, 2);
    ck_assert(opr_tensor_is_jagged(sml));
    free(sd); free(md); free(sld); free(alld); free(v); free(smd); free(lsmd);
    opr_tensor *rel[] = {j, s, m, sk, sl, all, sm, lsm, sml};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_linear_and_unsupported)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(5);
    opr_tensor *j = make_jagged(ctx, lens5, 5, 3);
    opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 3}, -1, 1), *bias = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, -1, 1);
    opr_tensor *y = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(j), opr_v_tensor(w), opr_v_tensor(bias)}, 3);
    ck_assert(opr_jagged_same_structure(y, j) && opr_tensor_size(y, 2) == 4);
    opr_tensor *v = opr_jagged_values(j);
    opr_tensor *ref = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(v), opr_v_tensor(w), opr_v_tensor(bias)}, 3);
    double *yd = values_of(y), *rd = tu_to_f64(ref);
    expect_close(yd, rd, 13 * 4, 0, "linear");
    opr_tensor *wt = opr_tensor_transpose(w, 0, 1);
    opr_tensor *mm = tu_call1(ctx, "matmul", (opr_value[]){opr_v_tensor(j), opr_v_tensor(wt)}, 2);
    ck_assert(opr_tensor_is_jagged(mm) && opr_tensor_size(mm, 2) == 4);
    /* the jagged tensor only as the rows operand */
    tu_expect_fail(ctx, "matmul", (opr_value[]){opr_v_tensor(w), opr_v_tensor(j)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "only argument 'self' may be jagged");
    /* ops without a rule: a clear error naming the op */
    tu_expect_fail(ctx, "mm", (opr_value[]){opr_v_tensor(j), opr_v_tensor(wt)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "mm: does not take jagged tensors (argument 'self' is jagged)");
    tu_expect_fail(ctx, "transpose", (opr_value[]){opr_v_tensor(j), opr_v_int(1), opr_v_int(2)}, 3, 1,
                   OPR_ERR_UNSUPPORTED, "transpose: does not take jagged tensors");
    opr_tensor *list[2] = {j, j};
    tu_expect_fail(ctx, "cat", (opr_value[]){opr_v_tensors(list, 2)}, 1, 1, OPR_ERR_UNSUPPORTED,
                   "cat: jagged tensors in a Tensor[] argument");
    ck_assert_str_eq(opr_op_jagged_rule(opr_op_find(ctx, "linear")), "rows");
    ck_assert(strstr(opr_op_jagged_rule(opr_op_find(ctx, "softmax")), "segment_softmax"));
    ck_assert_ptr_null(opr_op_jagged_rule(opr_op_find(ctx, "mm")));
    /* plans are made for dense arguments */
    char buf[256];
    const char *rg[] = {"input"};
    ck_assert_int_eq(opr_plan_explain(opr_op_find(ctx, "linear"), (opr_value[]){opr_v_tensor(j), opr_v_tensor(w)}, 2,
                                      rg, 1, buf, sizeof buf), OPR_ERR_UNSUPPORTED);
    free(yd); free(rd);
    opr_tensor *rel[] = {j, w, bias, y, v, ref, wt, mm};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* A rule is data: an op loaded at run time takes jagged tensors by its `jagged:` key,
 * and bad keys are load errors with their position. */
START_TEST(test_rules_from_yaml)
{
    opr_ctx *ctx = tu_ctx();
    const char *yaml =
        "- name: softplus_j(Tensor self) -> Tensor\n"
        "  shape: sizes(self)\n"
        "  jagged: elementwise\n"
        "  forward: log(add(exp(self), 1))\n"
        "- name: rowsum_j(Tensor self, int dim) -> Tensor\n"
        "  shape: reduce(self, dim)\n"
        "  jagged: {dim: dim, ragged: \"segment_sum(self, offsets)\"}\n"
        "  forward: sum(self, [dim])\n";
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, yaml, "jagged_rules", &n) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(n, 2);
    tu_seed(8);
    opr_tensor *j = make_jagged(ctx, lens5, 5, 2);
    opr_tensor *sp = tu_call1(ctx, "softplus_j", (opr_value[]){opr_v_tensor(j)}, 1);
    ck_assert(opr_jagged_same_structure(sp, j));
    double *v = values_of(j), *spv = values_of(sp);
    for (int i = 0; i < 26; i++) ck_assert(fabs(spv[i] - log1p(exp(v[i]))) < 1e-14);
    opr_tensor *rs = tu_call1(ctx, "rowsum_j", (opr_value[]){opr_v_tensor(j), opr_v_int(1)}, 2);
    ck_assert(!opr_tensor_is_jagged(rs) && opr_tensor_size(rs, 0) == 5);
    static const struct { const char *yaml; const char *needle; } bad[] = {
        {"- name: b1(Tensor self) -> Tensor\n  shape: sizes(self)\n  jagged: sometimes\n",
         "jagged: expected elementwise, rows, all or {dim: ..}, not 'sometimes'"},
        {"- name: b2(Tensor self, float p) -> Tensor\n  shape: sizes(self)\n  jagged: {dim: p}\n",
         "jagged: dim must name an int or int[] argument, not 'p'"},
        {"- name: b3(Tensor self, int d) -> Tensor\n  shape: sizes(self)\n  jagged: {dim: d, raged: x}\n",
         "jagged: unknown key 'raged'"},
        {"- name: b4(Tensor self, int d) -> Tensor\n  shape: sizes(self)\n  jagged: {dim: d, ragged: \"nope(self, offsetz)\"}\n",
         "offsetz"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(opr_registry_load_yaml_string(ctx, bad[i].yaml, "bad_rules", NULL), OPR_ERR_PARSE);
        ck_assert_msg(strstr(opr_last_error(), bad[i].needle), "case %zu: %s", i, opr_last_error());
        ck_assert_msg(strstr(opr_last_error(), "bad_rules:"), "position: %s", opr_last_error());
    }
    free(v); free(spv);
    opr_tensor_release(j);
    opr_tensor_release(sp);
    opr_tensor_release(rs);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ autograd */

/* loss = sum over b of sum(softmax_over_rows(linear(x_b)) * linear(x_b)): jagged, and
 * sequence by sequence on dense tensors; the gradients of x, W and b must agree. */
START_TEST(test_autograd_matches_per_sequence)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(6);
    opr_tensor *x = make_jagged(ctx, lens5, 5, 3);
    opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1), *bias = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    ck_assert(opr_requires_grad(x));
    ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(bias, true), OPR_OK);
    opr_tensor *y = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(x), opr_v_tensor(w), opr_v_tensor(bias)}, 3);
    opr_tensor *sm = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(y), opr_v_int(1)}, 2);
    opr_tensor *p = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(sm), opr_v_tensor(y)}, 2);
    int64_t one = 1;
    opr_tensor *seg = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(p), opr_v_ints(&one, 1)}, 2);
    opr_tensor *loss = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(seg)}, 1);
    ck_assert_int_eq(opr_backward(loss, NULL, NULL), OPR_OK);
    opr_tensor *gx = opr_grad(x);
    ck_assert_msg(gx && opr_tensor_is_jagged(gx) && opr_jagged_same_structure(gx, x), "grad of a jagged leaf is jagged");
    ck_assert_ptr_eq(opr_grad(x), gx); /* the same wrapper while the gradient is the same */
    double *gxd = values_of(gx), *gwd = tu_to_f64(opr_grad(w)), *gbd = tu_to_f64(opr_grad(bias));

    /* the reference: a leaf per sequence */
    opr_tensor *w2 = opr_tensor_detach(w), *b2 = opr_tensor_detach(bias);
    opr_set_requires_grad(w2, true);
    opr_set_requires_grad(b2, true);
    const int64_t *o = opr_jagged_offsets_host(x);
    double *xv = values_of(x);
    for (int b = 0; b < 5; b++) {
        int64_t L = o[b + 1] - o[b];
        if (!L) continue;
        opr_tensor *xb = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){L, 3}, xv + o[b] * 3, OPR_CPU);
        opr_set_requires_grad(xb, true);
        opr_tensor *yb = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(xb), opr_v_tensor(w2), opr_v_tensor(b2)}, 3);
        opr_tensor *sb = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(yb), opr_v_int(0)}, 2);
        opr_tensor *pb = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(sb), opr_v_tensor(yb)}, 2);
        opr_tensor *lb = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(pb)}, 1);
        ck_assert_int_eq(opr_backward(lb, NULL, NULL), OPR_OK);
        double *g = tu_to_f64(opr_grad(xb));
        expect_close(gxd + o[b] * 3, g, L * 3, 1e-12, "grad x");
        free(g);
        opr_tensor *rel[] = {xb, yb, sb, pb, lb};
        for (size_t i = 0; i < 5; i++) opr_tensor_release(rel[i]);
    }
    double *gw2 = tu_to_f64(opr_grad(w2)), *gb2 = tu_to_f64(opr_grad(b2));
    expect_close(gwd, gw2, 6, 1e-12, "grad W");
    expect_close(gbd, gb2, 2, 1e-12, "grad b");

    /* opr_autograd_grad with a jagged input and a jagged gradient of a jagged output */
    opr_tensor *x2 = opr_tensor_detach(x);
    opr_set_requires_grad(x2, true);
    opr_tensor *e = tu_call1(ctx, "exp", (opr_value[]){opr_v_tensor(x2)}, 1);
    opr_tensor *ge = opr_tensor_detach(e), *g = NULL;
    ck_assert_int_eq(opr_autograd_grad(&e, &ge, 1, &x2, 1, &g, NULL), OPR_OK);
    ck_assert(g && opr_jagged_same_structure(g, x2));
    double *gd = values_of(g), *ed = values_of(e);
    for (int i = 0; i < 39; i++) ck_assert(fabs(gd[i] - ed[i] * ed[i]) < 1e-14);
    /* a dense gradient for a jagged output is refused */
    opr_tensor *dense = tu_rand(ctx, OPR_F64, 2, (int64_t[]){13, 3}, -1, 1), *g3 = NULL;
    ck_assert_int_eq(opr_autograd_grad(&e, &dense, 1, &x2, 1, &g3, NULL), OPR_ERR_INVALID);
    ck_assert(strstr(opr_last_error(), "output 0 is jagged but its gradient is dense"));
    ck_assert_int_eq(opr_zero_grad(x), OPR_OK);
    ck_assert_ptr_null(opr_grad(x));

    free(gxd); free(gwd); free(gbd); free(xv); free(gw2); free(gb2); free(gd); free(ed);
    opr_tensor *rel[] = {x, w, bias, y, sm, p, seg, loss, w2, b2, x2, e, ge, g, dense};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ on the emulated device */

/* The same chain on cuda:0 and on the CPU: values, offsets and gradients agree, and
 * bad offsets are refused on the device too. */
START_TEST(test_on_emulated_cuda)
{
#ifndef OPREG_TEST_EMU
    printf("test_on_emulated_cuda: skipped (no emulated CUDA plugin in this build)\n");
    return;
#endif
    opr_ctx *ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    tu_seed(7);
    opr_tensor *x = make_jagged(ctx, lens5, 5, 3), *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    opr_tensor *xd = opr_tensor_to(x, dev), *wd = opr_tensor_to(w, dev);
    ck_assert_msg(xd && wd, "%s", opr_last_error());
    ck_assert(opr_tensor_is_jagged(xd) && opr_tensor_device(xd).type == dev.type);
    opr_tensor *off = opr_jagged_offsets(xd);
    ck_assert_int_eq(opr_tensor_device(off).type, dev.type);
    opr_tensor_release(off);
    double results[2][64], grads[2][64];
    opr_tensor *xs[2] = {x, xd}, *ws[2] = {w, wd};
    int64_t one = 1;
    for (int k = 0; k < 2; k++) {
        opr_tensor *leaf = opr_tensor_detach(xs[k]);
        opr_set_requires_grad(leaf, true);
        opr_tensor *y = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(leaf), opr_v_tensor(ws[k])}, 2);
        opr_tensor *ls = tu_call1(ctx, "log_softmax", (opr_value[]){opr_v_tensor(y), opr_v_int(1)}, 2);
        opr_tensor *sm = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(y), opr_v_int(1)}, 2);
        opr_tensor *p = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(ls), opr_v_tensor(sm)}, 2);
        opr_tensor *m = tu_call1(ctx, "mean", (opr_value[]){opr_v_tensor(p), opr_v_ints(&one, 1)}, 2);
        opr_tensor *pad = opr_jagged_to_padded(y, 0.5);
        opr_tensor *l1 = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(m)}, 1);
        opr_tensor *l2 = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(pad)}, 1);
        opr_tensor *loss = tu_call1(ctx, "add", (opr_value[]){opr_v_tensor(l1), opr_v_tensor(l2)}, 2);
        ck_assert_int_eq(opr_backward(loss, NULL, NULL), OPR_OK);
        opr_tensor *pc = opr_tensor_to(pad, OPR_CPU), *gv = opr_jagged_values(opr_grad(leaf));
        opr_tensor *gc = opr_tensor_to(gv, OPR_CPU);
        double *a = tu_to_f64(pc), *g = tu_to_f64(gc);
        memcpy(results[k], a, 5 * 5 * 2 * sizeof(double));
        memcpy(grads[k], g, 13 * 3 * sizeof(double));
        free(a); free(g);
        opr_tensor *rel[] = {leaf, y, ls, sm, p, m, pad, l1, l2, loss, pc, gv, gc};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    }
    expect_close(results[1], results[0], 50, 1e-13, "padded on cuda");
    expect_close(grads[1], grads[0], 39, 1e-12, "gradient on cuda");
    /* offsets on another device than the values */
    opr_tensor *v = opr_jagged_values(xd), *cpu_offsets = opr_jagged_offsets(x);
    ck_assert_ptr_null(opr_jagged_from_values(v, cpu_offsets));
    ck_assert_msg(strstr(opr_last_error(), "the values are on cuda:0 but the offsets on cpu"), "%s", opr_last_error());
    opr_tensor_release(cpu_offsets);
    /* a bad offset reaches the device kernels only through the ops: refused there too */
    int64_t bad[6] = {0, 3, 2, 8, 9, 13};
    opr_tensor *o = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){6}, bad, OPR_CPU), *od = opr_tensor_to(o, dev);
    tu_expect_fail(ctx, "segment_sum", (opr_value[]){opr_v_tensor(v), opr_v_tensor(od)}, 2, 1, OPR_ERR_INVALID,
                   "offsets must not decrease");
    opr_tensor *rel[] = {x, w, xd, wd, v, o, od};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ memory (the seed's test) */

/* input (requires grad) -> linear(D -> D, weight and bias require grad) -> sum ->
 * backward, on B = 64 sequences of D = 512 with lengths drawn in 1..100 (fixed seed),
 * jagged or padded dense [64, 100, 512]. The peak of live device memory must stay
 * within 1.1x the minimum: input, weight, bias, output, their three gradients and
 * what the plan saves beyond them (nothing: linear saves its input and weight). */
static void linear_memory(bool jagged, uint64_t *peak_out, uint64_t *min_out)
{
    opr_ctx *ctx = tu_ctx();
    enum { B = 64, D = 512, MAXLEN = 100 };
    int64_t lengths[B], total = 0;
    tu_seed(2024);
    for (int b = 0; b < B; b++) { lengths[b] = 1 + (int64_t)tu_uniform(0, MAXLEN); total += lengths[b]; }
    opr_mem_stats st = {.struct_size = sizeof st};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &st), OPR_OK);
    const uint64_t base = st.current_bytes;
    ck_assert_int_eq(opr_memory_reset_peak(ctx, OPR_CPU), OPR_OK);
    const int64_t rows = jagged ? total : (int64_t)B * MAXLEN;
    opr_tensor *x = jagged ? make_jagged_dt(ctx, OPR_F32, lengths, B, D)
                           : tu_rand(ctx, OPR_F32, 3, (int64_t[]){B, MAXLEN, D}, -1, 1);
    opr_tensor *w = tu_rand(ctx, OPR_F32, 2, (int64_t[]){D, D}, -0.05, 0.05), *bias = tu_rand(ctx, OPR_F32, 1, (int64_t[]){D}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(bias, true), OPR_OK);
    opr_tensor *y = tu_call1(ctx, "linear", (opr_value[]){opr_v_tensor(x), opr_v_tensor(w), opr_v_tensor(bias)}, 3);
    opr_tensor *loss = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y)}, 1);
    ck_assert_int_eq(opr_backward(loss, NULL, NULL), OPR_OK);
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &st), OPR_OK);
    const uint64_t act = (uint64_t)rows * D * 4, params = (uint64_t)(D * D + D) * 4;
    const uint64_t offsets = jagged ? (uint64_t)(B + 1) * 8 : 0;
    /* x, W, b, y, loss, grad x, grad W, grad b (+ the offsets) */
    const uint64_t minimum = act + params + act + 4 + act + params + offsets;
    *peak_out = st.peak_bytes - base;
    *min_out = minimum;
    opr_tensor *rel[] = {x, w, bias, y, loss};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    tu_ctx_free(ctx);
}

START_TEST(test_linear_backward_memory)
{
    for (int jagged = 1; jagged >= 0; jagged--) {
        uint64_t peak, minimum;
        linear_memory(jagged, &peak, &minimum);
        printf("linear backward memory (%s): peak %.2f MB, minimum %.2f MB, ratio %.3f\n", jagged ? "jagged" : "dense",
               peak / 1e6, minimum / 1e6, (double)peak / (double)minimum);
        ck_assert_msg(peak <= minimum * 1.1, "%s: peak %llu bytes > 1.1 x minimum %llu", jagged ? "jagged" : "dense",
                      (unsigned long long)peak, (unsigned long long)minimum);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jagged");
    TCase *tc = tcase_create("jagged");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_layout_and_accessors);
    tcase_add_test(tc, test_bad_offsets);
    tcase_add_test(tc, test_list_and_padded);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_reductions_and_softmax);
    tcase_add_test(tc, test_linear_and_unsupported);
    tcase_add_test(tc, test_rules_from_yaml);
    tcase_add_test(tc, test_autograd_matches_per_sequence);
    tcase_add_test(tc, test_linear_backward_memory);
    tcase_add_test(tc, test_on_emulated_cuda);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
