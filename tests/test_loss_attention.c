/* nll_loss, cross_entropy and scaled_dot_product_attention
 * (registry/ops/nn_loss_attention.yaml): values and gradients against PyTorch 1.13 in
 * f64 (tests/oracle/loss_attention.py; attention written out by hand there), every
 * backward candidate of the attention against finite differences (opr_gradcheck), the
 * ignore_index / weight / label_smoothing rules, the gradients of the class weights
 * (which PyTorch does not give) and of the mask by finite differences, strided
 * query/key/value layouts against contiguous ones, the errors,
 * and the bytes each attention candidate keeps for backward: O(L) per batch for the
 * fused kernel (the log-sum-exp) against O(L * S) for the formula (the
 * probabilities).
 *
 * The PyTorch comparisons are skipped (the other tests still run) where no python3
 * with torch is found: OPREG_PYTHON, else python3 on PATH, else /usr/bin/python3. */
#include "tests/oracle_files.h"
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TV(t) opr_v_tensor(t)
#define TOL 1e-9

static opr_ctx *ctx;
static bool have_torch; /* a python3 with torch was found: the PyTorch comparisons run */

/* ------------------------------------------------------------------ the oracle */

/* Runs oracle/loss_attention.py on the named tensors; fills out with what it wrote. */
static void run_oracle(const char *const *names, opr_tensor *const *ts, int n, of_recs *out)
{
    of_run(OPREG_ORACLE_DIR, "loss_attention", names, ts, n, out);
}

/* Compares an opreg tensor with the oracle's record `name`; failures name the case. */
static void expect_close(const of_recs *rs, const char *name, const opr_tensor *t, const char *what)
{
    of_expect_close_case(rs, what, name, t, TOL, OF_NAN_MATCHES_NAN);
}

/* ------------------------------------------------------------------ helpers */

static opr_tensor *rand_t(int ndim, const int64_t *shape, double lo, double hi)
{
    return tu_rand(ctx, OPR_F64, ndim, shape, lo, hi);
}

static opr_tensor *i64_t(int ndim, const int64_t *shape, const int64_t *vals)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, ndim, shape, vals, (opr_device){0, 0});
    ck_assert_ptr_nonnull(t);
    return t;
}

/* sum(out * r). */
static opr_tensor *sum_times(opr_tensor *out, opr_tensor *r)
{
    opr_tensor *m = tu_call1(ctx, "mul", (opr_value[]){TV(out), TV(r)}, 2);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){TV(m)}, 1);
    opr_tensor_release(m);
    return s;
}

/* sum(out * r), r random of out's shape (kept in *r). */
static opr_tensor *weighted_sum(opr_tensor *out, opr_tensor **r)
{
    int64_t shape[OPR_MAX_DIMS];
    for (int d = 0; d < opr_tensor_ndim(out); d++) shape[d] = opr_tensor_size(out, d);
    *r = rand_t(opr_tensor_ndim(out), shape, -1, 1);
    return sum_times(out, *r);
}

static void backward(opr_tensor *root)
{
    int rc = opr_backward(root, NULL, NULL);
    ck_assert_msg(rc == OPR_OK, "backward: %s", opr_last_error());
}

/* ------------------------------------------------------------------ losses against torch */

typedef struct loss_case {
    int ndim;
    int64_t shape[4];
    int64_t targets[8];   /* one per row, row-major over [N, d...] */
    int reduction;        /* 0 none, 1 mean, 2 sum */
    int64_t ignore_index;
    bool weight;
    double eps;
} loss_case;

static const char *reductions[3] = {"none", "mean", "sum"};

static const loss_case loss_cases[] = {
    {2, {5, 4}, {0, 3, 1, 2, 3}, 1, -100, false, 0},
    {2, {5, 4}, {0, 3, 1, 2, 3}, 0, -100, true, 0},
    {2, {5, 4}, {0, -100, 1, 2, -100}, 1, -100, true, 0},  /* mean over the weights of the rows kept */
    {2, {5, 4}, {0, 2, 1, 2, 3}, 2, 2, true, 0},           /* ignore_index is a real class */
    {2, {4, 6}, {5, 0, 1, 1}, 1, -100, false, 0.2},
    {2, {5, 4}, {0, -100, 1, 2, -100}, 1, -100, false, 0.1}, /* smoothing mean counts ignored rows */
    {2, {5, 4}, {0, -100, 1, 2, -100}, 1, -100, true, 0.3},
    {2, {5, 4}, {0, 1, 1, 2, 3}, 0, 1, true, 0.25},
    {1, {6}, {4}, 1, -100, true, 0.1},                       /* one sample: [C], 0-d target */
    {3, {2, 3, 4}, {0, 2, 1, 1, 2, 0, 0, 1}, 1, -100, true, 0.15}, /* [N, C, d] */
    {3, {2, 3, 4}, {0, 2, -100, 1, 2, 0, 0, 1}, 0, -100, false, 0},
};

static void check_loss_case(const char *op, const loss_case *lc, int idx)
{
    const bool ce = !strcmp(op, "cross_entropy");
    if (!ce && lc->eps != 0) return;
    char what[96];
    snprintf(what, sizeof what, "%s case %d", op, idx);
    const int64_t c = lc->ndim == 1 ? lc->shape[0] : lc->shape[1];
    int64_t tshape[4], tn = 0, rows = 1;
    for (int d = 0; d < lc->ndim; d++)
        if (d != (lc->ndim == 1 ? 0 : 1)) tshape[tn++] = lc->shape[d], rows *= lc->shape[d];
    opr_tensor *x = rand_t(lc->ndim, lc->shape, -2, 2), *target = i64_t((int)tn, tshape, lc->targets);
    opr_tensor *w = lc->weight ? rand_t(1, &c, 0.5, 2) : NULL;
    opr_set_requires_grad(x, true);
    opr_value args[6] = {TV(x), TV(target), w ? TV(w) : opr_v_none(), opr_v_string(reductions[lc->reduction]),
                         opr_v_int(lc->ignore_index), opr_v_double(lc->eps)};
    opr_tensor *out = tu_call1(ctx, op, args, ce ? 6 : 5), *r;
    opr_tensor *loss = weighted_sum(out, &r);
    backward(loss);
    const int64_t one = 1;
    int64_t casev[6] = {ce, lc->reduction, lc->ignore_index, lc->weight, 0, 0};
    opr_tensor *cs = i64_t(1, (int64_t[]){6}, casev), *eps = rand_t(0, &one, 0, 1);
    opr_tensor_release(eps);
    eps = opr_tensor_from_data(ctx, OPR_F64, 0, NULL, &lc->eps, (opr_device){0, 0});
    opr_tensor *wt = w ? w : rand_t(1, &c, 1, 2);
    const char *names[] = {"case", "eps", "x", "target", "weight", "r"};
    opr_tensor *ts[] = {cs, eps, x, target, wt, r};
    of_recs rs = {.n = 0};
    run_oracle(names, ts, 6, &rs);
    expect_close(&rs, "out", out, what);
    opr_tensor *g = opr_grad(x);
    expect_close(&rs, "grad_x", g, what);
    of_recs_free(&rs);
    if (!w) opr_tensor_release(wt);
    opr_tensor *all[] = {x, target, w, out, r, loss, cs, eps};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    (void)rows;
}

START_TEST(test_nll_loss_vs_torch)
{
    if (!have_torch) return;
    tu_seed(11);
    for (size_t i = 0; i < sizeof loss_cases / sizeof loss_cases[0]; i++) check_loss_case("nll_loss", &loss_cases[i], (int)i);
}
END_TEST

START_TEST(test_cross_entropy_vs_torch)
{
    if (!have_torch) return;
    tu_seed(12);
    for (size_t i = 0; i < sizeof loss_cases / sizeof loss_cases[0]; i++)
        check_loss_case("cross_entropy", &loss_cases[i], (int)i);
}
END_TEST

/* ------------------------------------------------------------------ attention against torch */

typedef struct att_case {
    int ndim;
    int64_t q[4], k[4], v[4];
    int mask_ndim;        /* 0: no mask */
    int64_t mask[4];
    bool causal;
} att_case;

static const att_case att_cases[] = {
    {3, {2, 5, 4}, {2, 7, 4}, {2, 7, 3}, 0, {0}, false},
    {3, {2, 6, 4}, {2, 6, 4}, {2, 6, 5}, 0, {0}, true},
    {3, {2, 5, 3}, {2, 7, 3}, {2, 7, 2}, 2, {5, 7}, false},
    {4, {2, 2, 4, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, 3, {2, 1, 6}, true},   /* mask broadcast over heads and rows */
    {3, {1, 70, 8}, {1, 70, 8}, {1, 70, 8}, 2, {70, 70}, true},         /* more rows than one block */
    {2, {3, 4}, {5, 4}, {5, 2}, 1, {5}, false},                          /* no batch dims */
};

/* The index of the kernel or the formula candidate for query, key and value. */
static int candidate(const opr_op *op, bool kernel)
{
    for (int i = 0; i < opr_op_grad_candidate_count(op); i++) {
        const char *label = opr_op_grad_candidate_label(op, i);
        if (!strncmp(label, "query, key, value", 17) && (strstr(label, "kernel") != NULL) == kernel) return i;
    }
    ck_abort_msg("%s has no %s candidate", opr_op_name(op), kernel ? "kernel" : "formula");
    return -1;
}

static void check_att_case(const att_case *ac, int idx, int cand)
{
    char what[96];
    snprintf(what, sizeof what, "attention case %d, candidate %d", idx, cand);
    opr_tensor *q = rand_t(ac->ndim, ac->q, -1, 1), *k = rand_t(ac->ndim, ac->k, -1, 1), *v = rand_t(ac->ndim, ac->v, -1, 1);
    opr_tensor *mask = ac->mask_ndim ? rand_t(ac->mask_ndim, ac->mask, -1, 1) : NULL;
    opr_set_requires_grad(q, true);
    opr_set_requires_grad(k, true);
    opr_set_requires_grad(v, true);
    opr_value args[6] = {TV(q), TV(k), TV(v), mask ? TV(mask) : opr_v_none(), opr_v_double(0), opr_v_bool(ac->causal)};
    opr_tensor *out = tu_call1(ctx, "scaled_dot_product_attention", args, 6), *r;
    opr_tensor *loss = weighted_sum(out, &r);
    backward(loss);
    int64_t casev[6] = {2, 0, 0, 0, ac->causal, ac->mask_ndim > 0};
    opr_tensor *cs = i64_t(1, (int64_t[]){6}, casev);
    opr_tensor *mt = mask ? mask : rand_t(1, (int64_t[]){1}, 0, 1);
    const char *names[] = {"case", "q", "k", "v", "mask", "r"};
    opr_tensor *ts[] = {cs, q, k, v, mt, r};
    of_recs rs = {.n = 0};
    run_oracle(names, ts, 6, &rs);
    expect_close(&rs, "out", out, what);
    opr_tensor *gq = opr_grad(q), *gk = opr_grad(k), *gv = opr_grad(v);
    expect_close(&rs, "grad_q", gq, what);
    expect_close(&rs, "grad_k", gk, what);
    expect_close(&rs, "grad_v", gv, what);
    of_recs_free(&rs);
    if (!mask) opr_tensor_release(mt);
    opr_tensor *all[] = {q, k, v, mask, out, r, loss, cs}; /* the grads are borrowed */
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}

START_TEST(test_attention_vs_torch)
{
    if (!have_torch) return;
    const opr_op *op = opr_op_find(ctx, "_scaled_dot_product_attention");
    ck_assert_ptr_nonnull(op);
    const int cands[2] = {candidate(op, true), candidate(op, false)};
    tu_seed(13);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_eq(opr_op_force_grad_candidate(op, cands[c]), OPR_OK);
        for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) check_att_case(&att_cases[i], (int)i, cands[c]);
    }
    opr_op_force_grad_candidate(op, -1);
}
END_TEST

/* ------------------------------------------------------------------ gradcheck */

/* opr_gradcheck of op at args over the named inputs: every candidate, every mask. */
static void gradcheck(const char *opname, const opr_value *args, int nargs, const char *const *inputs, int ninputs,
                      opr_dtype dt, const char *what)
{
    const opr_op *op = opr_op_find(ctx, opname);
    ck_assert_ptr_nonnull(op);
    opr_gradcheck_result res = {.struct_size = sizeof res};
    opr_gradcheck_opts opts = {.struct_size = sizeof opts};
    (void)dt;
    int rc = opr_gradcheck(op, args, nargs, inputs, ninputs, &opts, &res);
    ck_assert_msg(rc == OPR_OK, "%s: %s", what, opr_last_error());
    ck_assert_msg(res.checked > 0 && res.failed == 0, "%s: %d checked, %d failed", what, res.checked, res.failed);
}

START_TEST(test_attention_gradcheck)
{
    tu_seed(14);
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) {
        const att_case *ac = &att_cases[i];
        if (ac->q[ac->ndim - 2] > 8) continue; /* finite differences: small inputs only */
        for (int causal = 0; causal < 2; causal++) {
            opr_tensor *q = rand_t(ac->ndim, ac->q, -1, 1), *k = rand_t(ac->ndim, ac->k, -1, 1),
                       *v = rand_t(ac->ndim, ac->v, -1, 1);
            opr_tensor *mask = ac->mask_ndim ? rand_t(ac->mask_ndim, ac->mask, -1, 1) : NULL;
            char what[64];
            snprintf(what, sizeof what, "attention case %zu%s", i, causal ? " causal" : "");
            const char *inputs[] = {"query", "key", "value", "attn_mask"};
            opr_value h[5] = {TV(q), TV(k), TV(v), mask ? TV(mask) : opr_v_none(), opr_v_bool(causal)};
            gradcheck("_scaled_dot_product_attention", h, 5, inputs, mask ? 4 : 3, OPR_F64, what);
            opr_tensor_release(q), opr_tensor_release(k), opr_tensor_release(v), opr_tensor_release(mask);
        }
    }
}
END_TEST

START_TEST(test_loss_gradcheck)
{
    tu_seed(15);
    for (size_t i = 0; i < sizeof loss_cases / sizeof loss_cases[0]; i++) {
        const loss_case *lc = &loss_cases[i];
        const int64_t c = lc->ndim == 1 ? lc->shape[0] : lc->shape[1];
        int64_t tshape[4], tn = 0;
        for (int d = 0; d < lc->ndim; d++)
            if (d != (lc->ndim == 1 ? 0 : 1)) tshape[tn++] = lc->shape[d];
        opr_tensor *x = rand_t(lc->ndim, lc->shape, -2, 2), *target = i64_t((int)tn, tshape, lc->targets);
        opr_tensor *w = lc->weight ? rand_t(1, &c, 0.5, 2) : NULL;
        const char *inputs[] = {"self", "weight"};
        opr_value args[6] = {TV(x), TV(target), w ? TV(w) : opr_v_none(), opr_v_string(reductions[lc->reduction]),
                             opr_v_int(lc->ignore_index), opr_v_double(lc->eps)};
        char what[64];
        snprintf(what, sizeof what, "loss case %zu", i);
        if (lc->eps == 0) gradcheck("nll_loss", args, 5, inputs, w ? 2 : 1, OPR_F64, what);
        gradcheck("cross_entropy", args, 6, inputs, w ? 2 : 1, OPR_F64, what);
        opr_tensor_release(x), opr_tensor_release(target), opr_tensor_release(w);
    }
}
END_TEST

/* ------------------------------------------------------------------ hand-computed values */

/* Two rows of two classes, log-probabilities given: every number below by hand. */
START_TEST(test_nll_loss_by_hand)
{
    const double xv[4] = {-0.5, -1.0, -2.0, -0.25};
    const int64_t shape[2] = {2, 2}, tshape[1] = {2}, tv[2] = {1, 0}, wshape[1] = {2};
    const double wv[2] = {3.0, 0.5};
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 2, shape, xv, (opr_device){0, 0});
    opr_tensor *t = i64_t(1, tshape, tv), *w = opr_tensor_from_data(ctx, OPR_F64, 1, wshape, wv, (opr_device){0, 0});
    /* row losses -w[t] x[t]: 0.5 * 1.0 = 0.5 and 3 * 2 = 6; mean divides by 0.5 + 3 */
    opr_tensor *m = tu_call1(ctx, "nll_loss", (opr_value[]){TV(x), TV(t), TV(w)}, 3);
    double got;
    ck_assert_int_eq(opr_tensor_copy_to_host(m, &got, sizeof got), OPR_OK);
    ck_assert_double_eq_tol(got, 6.5 / 3.5, 1e-15);
    /* target 0 ignored: only row 0 is left: 0.5 / 0.5 */
    opr_tensor *m2 = tu_call1(ctx, "nll_loss", (opr_value[]){TV(x), TV(t), TV(w), opr_v_string("mean"), opr_v_int(0)}, 5);
    ck_assert_int_eq(opr_tensor_copy_to_host(m2, &got, sizeof got), OPR_OK);
    ck_assert_double_eq_tol(got, 1.0, 1e-15);
    /* every target ignored: 0 / 0, NaN as in PyTorch */
    const int64_t same[2] = {1, 1};
    opr_tensor *t2 = i64_t(1, tshape, same);
    opr_tensor *m3 = tu_call1(ctx, "nll_loss", (opr_value[]){TV(x), TV(t2), TV(w), opr_v_string("mean"), opr_v_int(1)}, 5);
    ck_assert_int_eq(opr_tensor_copy_to_host(m3, &got, sizeof got), OPR_OK);
    ck_assert(isnan(got));
    opr_tensor *all[] = {m, m2, m3, x, t, t2, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* One query against two keys: out = p v0 + (1 - p) v1 with p = 1 / (1 + exp(-1/sqrt(2))). */
START_TEST(test_attention_by_hand)
{
    const double qv[2] = {1, 0}, kv[4] = {1, 0, 0, 1}, vv[2] = {1, 3};
    opr_tensor *q = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){1, 2}, qv, (opr_device){0, 0});
    opr_tensor *k = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){2, 2}, kv, (opr_device){0, 0});
    opr_tensor *v = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){2, 1}, vv, (opr_device){0, 0});
    opr_tensor *out = tu_call1(ctx, "scaled_dot_product_attention", (opr_value[]){TV(q), TV(k), TV(v)}, 3);
    const double p = 1 / (1 + exp(-1 / sqrt(2.0)));
    double got;
    ck_assert_int_eq(opr_tensor_copy_to_host(out, &got, sizeof got), OPR_OK);
    ck_assert_double_eq_tol(got, p + 3 * (1 - p), 1e-14);
    /* causal: row 0 sees key 0 only */
    opr_tensor *c = tu_call1(ctx, "scaled_dot_product_attention",
                             (opr_value[]){TV(q), TV(k), TV(v), opr_v_none(), opr_v_double(0), opr_v_bool(true)}, 6);
    ck_assert_int_eq(opr_tensor_copy_to_host(c, &got, sizeof got), OPR_OK);
    ck_assert_double_eq_tol(got, 1.0, 1e-15);
    opr_tensor *all[] = {q, k, v, out, c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* ------------------------------------------------------------------ layouts */

static opr_tensor *transposed(opr_tensor *x, int a, int b)
{
    return tu_call1(ctx, "transpose", (opr_value[]){TV(x), opr_v_int(a), opr_v_int(b)}, 3);
}

/* A leaf holding x.transpose(a, b) contiguously, and (in *view) its transpose back:
 * x's values in a strided layout, whose gradient lands on the leaf. */
static opr_tensor *relaid(opr_tensor *x, int a, int b, opr_tensor **view)
{
    opr_tensor *t = opr_tensor_transpose(x, a, b), *leaf = opr_tensor_contiguous(t);
    ck_assert_ptr_nonnull(leaf);
    opr_tensor_release(t);
    opr_set_requires_grad(leaf, true);
    *view = transposed(leaf, a, b);
    ck_assert(!opr_tensor_is_contiguous(*view));
    return leaf;
}

/* Max |a - b| over equal-shaped tensors of any layout. */
static double max_diff(const opr_tensor *a, const opr_tensor *b)
{
    const int64_t n = opr_tensor_numel(a);
    ck_assert_int_eq(n, opr_tensor_numel(b));
    double *x = tu_to_f64(a), *y = tu_to_f64(b), worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(x[i] - y[i]));
    free(x), free(y);
    return worst;
}

/* The kernels read query, key and value in place when rows are strided (the heads of a
 * [B, T, H, D] projection, transposed) and pack them when columns are (a transposed
 * [..., D, T] key); with 16 batches they also split the batches between threads. Every
 * layout gives the contiguous inputs' output and gradients, for both candidates. */
START_TEST(test_attention_strided_layouts)
{
    const opr_op *op = opr_op_find(ctx, "_scaled_dot_product_attention");
    ck_assert_ptr_nonnull(op);
    const int cands[2] = {candidate(op, true), candidate(op, false)};
    const int64_t shape[4] = {2, 8, 40, 24};
    tu_seed(31);
    for (int c = 0; c < 2; c++) {
        ck_assert_int_eq(opr_op_force_grad_candidate(op, cands[c]), OPR_OK);
        opr_tensor *q = rand_t(4, shape, -1, 1), *k = rand_t(4, shape, -1, 1), *v = rand_t(4, shape, -1, 1);
        opr_set_requires_grad(q, true), opr_set_requires_grad(k, true), opr_set_requires_grad(v, true);
        opr_tensor *qs, *ks, *vs;
        opr_tensor *ql = relaid(q, 1, 2, &qs), *kl = relaid(k, 2, 3, &ks), *vl = relaid(v, 1, 2, &vs);
        opr_tensor *out[2], *r = NULL, *loss[2];
        opr_tensor *in[2][3] = {{q, k, v}, {qs, ks, vs}};
        for (int l = 0; l < 2; l++) {
            out[l] = tu_call1(ctx, "scaled_dot_product_attention",
                              (opr_value[]){TV(in[l][0]), TV(in[l][1]), TV(in[l][2]), opr_v_none(), opr_v_double(0),
                                            opr_v_bool(true)}, 6);
            loss[l] = r ? sum_times(out[l], r) : weighted_sum(out[l], &r);
            backward(loss[l]);
        }
        ck_assert_double_le(max_diff(out[0], out[1]), 1e-13);
        opr_tensor *gq = transposed(opr_grad(ql), 1, 2), *gk = transposed(opr_grad(kl), 2, 3),
                   *gv = transposed(opr_grad(vl), 1, 2);
        ck_assert_double_le(max_diff(opr_grad(q), gq), 1e-13);
        ck_assert_double_le(max_diff(opr_grad(k), gk), 1e-13);
        ck_assert_double_le(max_diff(opr_grad(v), gv), 1e-13);
        opr_tensor *all[] = {q, k, v, ql, kl, vl, qs, ks, vs, out[0], out[1], loss[0], loss[1], r, gq, gk, gv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    opr_op_force_grad_candidate(op, -1);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(test_errors)
{
    const int64_t xs[2] = {2, 4}, ts[1] = {2}, t3[1] = {3}, ws[1] = {3};
    opr_tensor *x = rand_t(2, xs, -1, 1), *w3 = rand_t(1, ws, 0, 1), *tf = rand_t(1, ts, 0, 2);
    opr_tensor *t_hi = i64_t(1, ts, (int64_t[]){0, 4}), *t_neg = i64_t(1, ts, (int64_t[]){-1, 0});
    opr_tensor *t_long = i64_t(1, t3, (int64_t[]){0, 1, 2}), *t_ok = i64_t(1, ts, (int64_t[]){0, 3});
    const char *losses[2] = {"nll_loss", "cross_entropy"};
    for (int i = 0; i < 2; i++) {
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(t_hi)}, 2, 1, OPR_ERR_INVALID, "target 4 at index 1 is out of range for 4 classes");
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(t_neg)}, 2, 1, OPR_ERR_INVALID, "target -1 at index 0 is out of range");
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(tf)}, 2, 1, OPR_ERR_INVALID, "target");
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(t_long)}, 2, 1, OPR_ERR_INVALID, "sizes(target)");
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(t_ok), TV(w3)}, 3, 1, OPR_ERR_INVALID, "size(weight, 0)");
        tu_expect_fail(ctx, losses[i], (opr_value[]){TV(x), TV(t_ok), opr_v_none(), opr_v_string("avg")}, 4, 1,
                       OPR_ERR_INVALID, "reduction");
    }
    tu_expect_fail(ctx, "cross_entropy",
                   (opr_value[]){TV(x), TV(t_ok), opr_v_none(), opr_v_string("mean"), opr_v_int(-100), opr_v_double(1.5)},
                   6, 1, OPR_ERR_INVALID, "label_smoothing");
    const int64_t qs[3] = {2, 3, 4}, ks[3] = {2, 5, 4}, k5[3] = {2, 5, 5}, kb[3] = {3, 5, 4}, ms[2] = {3, 4};
    opr_tensor *q = rand_t(3, qs, -1, 1), *k = rand_t(3, ks, -1, 1), *kbad = rand_t(3, k5, -1, 1);
    opr_tensor *kbatch = rand_t(3, kb, -1, 1), *mbad = rand_t(2, ms, -1, 1);
    tu_expect_fail(ctx, "scaled_dot_product_attention",
                   (opr_value[]){TV(q), TV(k), TV(k), opr_v_none(), opr_v_double(0.1)}, 5, 1, OPR_ERR_INVALID, "dropout_p == 0");
    tu_expect_fail(ctx, "scaled_dot_product_attention", (opr_value[]){TV(q), TV(kbad), TV(kbad)}, 3, 1, OPR_ERR_INVALID,
                   "size(query, -1) == size(key, -1)");
    tu_expect_fail(ctx, "scaled_dot_product_attention", (opr_value[]){TV(q), TV(kbatch), TV(kbatch)}, 3, 1,
                   OPR_ERR_INVALID, "check failed");
    tu_expect_fail(ctx, "scaled_dot_product_attention", (opr_value[]){TV(q), TV(k), TV(k), TV(mbad)}, 4, 1,
                   OPR_ERR_INVALID, "attn_mask");
    opr_tensor *all[] = {x, w3, tf, t_hi, t_neg, t_long, t_ok, q, k, kbad, kbatch, mbad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* ------------------------------------------------------------------ saved bytes */

typedef struct walk_sum {
    uint64_t bytes;
    int nodes;
} walk_sum;

static void on_node(void *ud, const opr_node_info *info)
{
    walk_sum *w = ud;
    if (strcmp(info->op, "_scaled_dot_product_attention")) return;
    w->bytes += info->saved_bytes;
    w->nodes++;
}

/* What the node of a causal attention over [B, T, E] inputs keeps with the candidate
 * forced. */
static uint64_t saved_with(int cand, int64_t B, int64_t T, int64_t E)
{
    const opr_op *op = opr_op_find(ctx, "_scaled_dot_product_attention");
    ck_assert_int_eq(opr_op_force_grad_candidate(op, cand), OPR_OK);
    const int64_t shape[3] = {B, T, E};
    opr_tensor *q = rand_t(3, shape, -1, 1), *k = rand_t(3, shape, -1, 1), *v = rand_t(3, shape, -1, 1);
    opr_set_requires_grad(q, true), opr_set_requires_grad(k, true), opr_set_requires_grad(v, true);
    opr_tensor *out = tu_call1(ctx, "scaled_dot_product_attention",
                               (opr_value[]){TV(q), TV(k), TV(v), opr_v_none(), opr_v_double(0), opr_v_bool(true)}, 6);
    walk_sum w = {0, 0};
    ck_assert_int_ge(opr_autograd_walk(out, on_node, &w), 1);
    ck_assert_int_eq(w.nodes, 1);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){TV(out)}, 1);
    backward(s);
    opr_tensor *g = opr_grad(q);
    ck_assert_ptr_nonnull(g);
    opr_tensor *all[] = {q, k, v, out, s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    opr_op_force_grad_candidate(op, -1);
    return w.bytes;
}

START_TEST(test_saved_bytes)
{
    const opr_op *op = opr_op_find(ctx, "_scaled_dot_product_attention");
    const int kernel = candidate(op, true), formula = candidate(op, false);
    const int64_t B = 2, E = 16, es = 8;
    tu_seed(16);
    for (int64_t T = 16; T <= 128; T *= 2) {
        const uint64_t fused = saved_with(kernel, B, T, E), form = saved_with(formula, B, T, E);
        /* fused: query, key, value and one log-sum-exp per row; formula: query, key,
         * value and the T x T probabilities of every batch */
        ck_assert_uint_eq(fused, (uint64_t)((3 * B * T * E + B * T) * es));
        ck_assert_uint_eq(form, (uint64_t)((3 * B * T * E + B * T * T) * es));
        /* beyond the inputs: O(T) per batch against O(T^2) */
        const uint64_t inputs = (uint64_t)(3 * B * T * E * es);
        ck_assert_uint_eq((fused - inputs) / (uint64_t)(B * es), (uint64_t)T);
        ck_assert_uint_eq((form - inputs) / (uint64_t)(B * es), (uint64_t)(T * T));
    }
}
END_TEST

/* opr_plan_explain of the public op shows its node's two candidates and their bytes. */
START_TEST(test_plan_lists_both_candidates)
{
    const opr_op *op = opr_op_find(ctx, "scaled_dot_product_attention");
    const int64_t shape[3] = {8, 128, 64};
    opr_tensor *q = opr_tensor_new(ctx, OPR_F32, 3, shape, (opr_device){0, 0});
    opr_value args[6] = {TV(q), TV(q), TV(q), opr_v_none(), opr_v_double(0), opr_v_bool(true)};
    const char *rg[3] = {"query", "key", "value"};
    char buf[8192];
    ck_assert_int_eq(opr_plan_explain(op, args, 6, rg, 3, buf, sizeof buf), OPR_OK);
    ck_assert_msg(strstr(buf, "kernel scaled_dot_product_attention_backward)]\n      cost") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "saves {query, key, value, attn_mask, logsumexp} = 772.0 KiB") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "saves {query, key, value, attn} = 1.25 MiB") != NULL, "%s", buf);
    opr_tensor_release(q);
}
END_TEST

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

int main(void)
{
    char why[1024];
    have_torch = of_find_python(why, sizeof why);
    if (!have_torch)
        printf("test_loss_attention: no python3 with torch (tried %s): the PyTorch comparisons are skipped\n", why);
    Suite *s = suite_create("loss_attention");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 600); /* about 40 runs of python with torch */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_nll_loss_vs_torch);
    tcase_add_test(tc, test_cross_entropy_vs_torch);
    tcase_add_test(tc, test_attention_vs_torch);
    tcase_add_test(tc, test_attention_gradcheck);
    tcase_add_test(tc, test_loss_gradcheck);
    tcase_add_test(tc, test_nll_loss_by_hand);
    tcase_add_test(tc, test_attention_by_hand);
    tcase_add_test(tc, test_attention_strided_layouts);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_saved_bytes);
    tcase_add_test(tc, test_plan_lists_both_candidates);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
