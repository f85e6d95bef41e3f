/* Special-gradient fast mode (opr_special_grads_set): what the fast variants give at
 * the special points (the table in registry/README.md), that the mode is recorded into
 * each node at forward time and is thread-local, and the load-time rules of `fast:`.
 * Away from the special points the fast candidates are checked against finite
 * differences with every other candidate by test_gradcheck; normal mode at the special
 * points against PyTorch by test_oracle. */
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;
static void setup(void) { ctx = tu_ctx(); opr_special_grads_set(true); opr_grad_mode_set(true); }
static void teardown(void) { opr_special_grads_set(true); tu_ctx_free(ctx); }

static opr_tensor *leaf(int ndim, const int64_t *shape, const double *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    ck_assert_msg(t, "%s", opr_last_error());
    ck_assert_int_eq(opr_set_requires_grad(t, true), OPR_OK);
    return t;
}

/* A normal-mode candidate grad_of forces on forced_op (-1: chosen by cost); fast mode
 * always plans by cost. */
static const opr_op *forced_op;
static int forced_cand = -1;

/* d sum(op(x, args...)) / dx, with the graph recorded in fast mode or not. */
static double *grad_of(const char *op, opr_tensor *x, const opr_value *extra, int nextra, bool fast)
{
    opr_value args[4] = {opr_v_tensor(x)};
    for (int i = 0; i < nextra; i++) args[1 + i] = extra[i];
    if (forced_op) ck_assert_int_eq(opr_op_force_grad_candidate(forced_op, fast ? -1 : forced_cand), OPR_OK);
    bool prev = opr_special_grads_set(!fast);
    opr_tensor *y = tu_call1(ctx, op, args, 1 + nextra);
    opr_special_grads_set(prev);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y)}, 1);
    opr_tensor *g = NULL;
    ck_assert_msg(opr_autograd_grad(&s, NULL, 1, &x, 1, &g, NULL) == OPR_OK, "%s", opr_last_error());
    double *v = tu_to_f64(g);
    opr_tensor_release(g);
    opr_tensor_release(s);
    opr_tensor_release(y);
    return v;
}

/* Normal mode runs each of norm's normal candidates in turn (the formula and, on the
 * CPU, the fused norm_backward kernel): both must give PyTorch's subgradients. */
START_TEST(norm_at_zero)
{
    const opr_op *op = opr_op_find(ctx, "norm");
    ck_assert_ptr_nonnull(op);
    int tried = 0;
    forced_op = op;
    for (int cand = 0; cand < opr_op_grad_candidate_count(op); cand++) {
        if (strstr(opr_op_grad_candidate_label(op, cand), "fast")) continue;
        forced_cand = cand;
        tried++;
        double a[4] = {0, 3, -4, 0}, z[3] = {0, 0, 0};
        opr_tensor *ta = leaf(1, (int64_t[]){4}, a), *tz = leaf(1, (int64_t[]){3}, z);
        /* p = 2, norm > 0 with zero entries: fast is self / norm, 0 at the zeros too */
        double *n = grad_of("norm", ta, NULL, 0, false), *f = grad_of("norm", ta, NULL, 0, true);
        for (int i = 0; i < 4; i++) ck_assert_double_eq_tol(f[i], n[i], 1e-15);
        ck_assert_double_eq_tol(n[1], 0.6, 1e-15);
        free(n); free(f);
        /* p = 2 at norm 0: normal 0 (PyTorch's subgradient), fast NaN */
        n = grad_of("norm", tz, NULL, 0, false);
        f = grad_of("norm", tz, NULL, 0, true);
        for (int i = 0; i < 3; i++) { ck_assert_double_eq(n[i], 0); ck_assert(isnan(f[i])); }
        free(n); free(f);
        /* p = 1.5: at the zeros of self normal 0, fast NaN; elsewhere equal */
        opr_value p15[1] = {opr_v_double(1.5)};
        n = grad_of("norm", ta, p15, 1, false);
        f = grad_of("norm", ta, p15, 1, true);
        ck_assert_double_eq(n[0], 0); ck_assert(isnan(f[0])); ck_assert(isnan(f[3]));
        ck_assert_double_eq_tol(f[1], n[1], 1e-14); ck_assert_double_eq_tol(f[2], n[2], 1e-14);
        free(n); free(f);
        opr_tensor_release(ta); opr_tensor_release(tz);
    }
    opr_op_force_grad_candidate(op, -1);
    forced_op = NULL;
    forced_cand = -1;
    ck_assert_int_eq(tried, 2);
}
END_TEST

START_TEST(prod_with_zeros)
{
    double one[4] = {2, 0, 3, 5}, two[4] = {0, 2, 0, 3};
    opr_tensor *t1 = leaf(1, (int64_t[]){4}, one), *t2 = leaf(1, (int64_t[]){4}, two);
    double *n = grad_of("prod", t1, NULL, 0, false), *f = grad_of("prod", t1, NULL, 0, true);
    /* normal: the product of the others (30 at the zero, 0 elsewhere); fast: NaN at the zero */
    ck_assert_double_eq(n[1], 30);
    ck_assert(isnan(f[1]));
    for (int i = 0; i < 4; i++) if (i != 1) { ck_assert_double_eq(n[i], 0); ck_assert_double_eq(f[i], 0); }
    free(n); free(f);
    n = grad_of("prod", t2, NULL, 0, false);
    f = grad_of("prod", t2, NULL, 0, true);
    for (int i = 0; i < 4; i++) ck_assert_double_eq(n[i], 0);
    ck_assert(isnan(f[0]) && isnan(f[2]));
    ck_assert_double_eq(f[1], 0); ck_assert_double_eq(f[3], 0);
    free(n); free(f);
    opr_tensor_release(t1); opr_tensor_release(t2);
}
END_TEST

START_TEST(max_min_ties)
{
    double v[5] = {1, 7, 7, -2, 7};
    opr_tensor *t = leaf(1, (int64_t[]){5}, v);
    /* normal: the gradient split evenly between the 3 tied maxima; fast: all of it to each */
    double *n = grad_of("max", t, NULL, 0, false), *f = grad_of("max", t, NULL, 0, true);
    for (int i = 0; i < 5; i++) {
        bool tied = v[i] == 7;
        ck_assert_double_eq_tol(n[i], tied ? 1.0 / 3 : 0, 1e-15);
        ck_assert_double_eq(f[i], tied ? 1 : 0);
    }
    free(n); free(f);
    double w[3] = {-1, 4, -1};
    opr_tensor *u = leaf(1, (int64_t[]){3}, w);
    n = grad_of("min", u, NULL, 0, false);
    f = grad_of("min", u, NULL, 0, true);
    ck_assert_double_eq(n[0], 0.5); ck_assert_double_eq(n[2], 0.5); ck_assert_double_eq(n[1], 0);
    ck_assert_double_eq(f[0], 1); ck_assert_double_eq(f[2], 1); ck_assert_double_eq(f[1], 0);
    free(n); free(f);
    opr_tensor_release(t); opr_tensor_release(u);
}
END_TEST

/* maximum/minimum at ties: normal half the gradient to each side (PyTorch), fast all of
 * it; clamp.Tensor where min > max: normal no gradient to self or min (PyTorch's
 * clamp_backward_min_max), fast self where it equals the result (max) and min where
 * self < min. Away from those points the two agree. */
START_TEST(pointwise_special_points)
{
    double xv[3] = {1, 2, 3}, yv[3] = {1, 0, 5};
    opr_tensor *x = leaf(1, (int64_t[]){3}, xv);
    opr_tensor *y = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, yv, OPR_CPU);
    opr_value other = opr_v_tensor(y);
    double *n = grad_of("maximum", x, &other, 1, false), *f = grad_of("maximum", x, &other, 1, true);
    ck_assert_double_eq(n[0], 0.5); ck_assert_double_eq(n[1], 1); ck_assert_double_eq(n[2], 0);
    ck_assert_double_eq(f[0], 1); ck_assert_double_eq(f[1], 1); ck_assert_double_eq(f[2], 0);
    free(n); free(f);
    n = grad_of("minimum", x, &other, 1, false);
    f = grad_of("minimum", x, &other, 1, true);
    ck_assert_double_eq(n[0], 0.5); ck_assert_double_eq(n[1], 0); ck_assert_double_eq(n[2], 1);
    ck_assert_double_eq(f[0], 1); ck_assert_double_eq(f[1], 0); ck_assert_double_eq(f[2], 1);
    free(n); free(f);
    /* clamp(x, min, max) with min > max in element 0 (result: max = -1 there) and x = max */
    double sv[2] = {-1, 0.5}, lo[2] = {1, 0}, hi[2] = {-1, 1};
    opr_tensor *s = leaf(1, (int64_t[]){2}, sv), *mn = leaf(1, (int64_t[]){2}, lo);
    opr_tensor *mx = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, hi, OPR_CPU);
    opr_value bounds[2] = {opr_v_tensor(mn), opr_v_tensor(mx)};
    n = grad_of("clamp.Tensor", s, bounds, 2, false);
    f = grad_of("clamp.Tensor", s, bounds, 2, true);
    ck_assert_double_eq(n[0], 0); ck_assert_double_eq(n[1], 1);
    ck_assert_double_eq(f[0], 1); ck_assert_double_eq(f[1], 1);
    free(n); free(f);
    /* the gradient of min: d sum(clamp(self, min, max)) / d min */
    for (int fast = 0; fast < 2; fast++) {
        bool prev = opr_special_grads_set(!fast);
        opr_tensor *r = tu_call1(ctx, "clamp.Tensor", (opr_value[]){opr_v_tensor(s), bounds[0], bounds[1]}, 3);
        opr_special_grads_set(prev);
        opr_tensor *sum = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(r)}, 1), *g = NULL;
        ck_assert_msg(opr_autograd_grad(&sum, NULL, 1, &mn, 1, &g, NULL) == OPR_OK, "%s", opr_last_error());
        double *v = tu_to_f64(g);
        ck_assert_double_eq(v[0], fast ? 1 : 0); /* self < min, but min > max */
        ck_assert_double_eq(v[1], 0);
        free(v);
        opr_tensor_release(g); opr_tensor_release(sum); opr_tensor_release(r);
    }
    opr_tensor_release(x); opr_tensor_release(y);
    opr_tensor_release(s); opr_tensor_release(mn); opr_tensor_release(mx);
}
END_TEST

START_TEST(cdist_zero_distance)
{
    /* row 0 of x1 equals row 1 of x2: a zero distance */
    double a[4] = {1, 2, 0, 1}, b[4] = {3, -1, 1, 2};
    opr_tensor *x1 = leaf(2, (int64_t[]){2, 2}, a), *x2 = leaf(2, (int64_t[]){2, 2}, b);
    double *g[2][2];
    for (int fast = 0; fast < 2; fast++) {
        bool prev = opr_special_grads_set(!fast);
        opr_tensor *d = tu_call1(ctx, "cdist", (opr_value[]){opr_v_tensor(x1), opr_v_tensor(x2)}, 2);
        opr_special_grads_set(prev);
        opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(d)}, 1);
        opr_tensor *ins[2] = {x1, x2}, *gs[2] = {NULL, NULL};
        ck_assert_msg(opr_autograd_grad(&s, NULL, 1, ins, 2, gs, NULL) == OPR_OK, "%s", opr_last_error());
        for (int k = 0; k < 2; k++) { g[fast][k] = tu_to_f64(gs[k]); opr_tensor_release(gs[k]); }
        opr_tensor_release(s); opr_tensor_release(d);
    }
    /* normal: every entry finite (the zero distance contributes 0); fast: NaN in the
     * rows of the pair at zero distance, the same as normal in the others */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) ck_assert(isfinite(g[0][k][i]));
    ck_assert(isnan(g[1][0][0]) && isnan(g[1][0][1]));   /* x1 row 0 */
    ck_assert(isnan(g[1][1][2]) && isnan(g[1][1][3]));   /* x2 row 1 */
    ck_assert_double_eq_tol(g[1][0][2], g[0][0][2], 1e-14); /* x1 row 1 */
    ck_assert_double_eq_tol(g[1][1][0], g[0][1][0], 1e-14); /* x2 row 0 */
    for (int f = 0; f < 2; f++) for (int k = 0; k < 2; k++) free(g[f][k]);
    opr_tensor_release(x1); opr_tensor_release(x2);
}
END_TEST

static void walk_fast(void *ud, const opr_node_info *info)
{
    int *counts = ud;
    counts[info->fast ? 1 : 0]++;
}

START_TEST(recorded_at_forward)
{
    /* fast at forward, normal at backward: the node keeps its fast formulas */
    double z[3] = {0, 0, 0};
    opr_tensor *x = leaf(1, (int64_t[]){3}, z);
    ck_assert(opr_special_grads_enabled());
    ck_assert(opr_special_grads_set(false) == true);
    opr_tensor *y = tu_call1(ctx, "norm", (opr_value[]){opr_v_tensor(x)}, 1);
    ck_assert(opr_special_grads_set(true) == false);
    int counts[2] = {0, 0};
    ck_assert_int_eq(opr_autograd_walk(y, walk_fast, counts), 1);
    ck_assert_int_eq(counts[1], 1);
    ck_assert_int_eq(opr_backward(y, NULL, NULL), OPR_OK);
    double *g = tu_to_f64(opr_grad(x));
    for (int i = 0; i < 3; i++) ck_assert(isnan(g[i])); /* the fast formula ran */
    free(g);
    opr_tensor_release(y);
    /* and the other way round */
    ck_assert_int_eq(opr_zero_grad(x), OPR_OK);
    y = tu_call1(ctx, "norm", (opr_value[]){opr_v_tensor(x)}, 1);
    opr_special_grads_set(false);
    counts[0] = counts[1] = 0;
    opr_autograd_walk(y, walk_fast, counts);
    ck_assert_int_eq(counts[0], 1);
    ck_assert_int_eq(opr_backward(y, NULL, NULL), OPR_OK);
    opr_special_grads_set(true);
    g = tu_to_f64(opr_grad(x));
    for (int i = 0; i < 3; i++) ck_assert_double_eq(g[i], 0);
    free(g);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

typedef struct {
    opr_tensor *x;
    bool fast;
    opr_tensor *y;
    pthread_barrier_t *bar;
} thread_job;

static void *record_on_thread(void *p)
{
    thread_job *j = p;
    opr_special_grads_set(!j->fast);
    pthread_barrier_wait(j->bar); /* both threads have set their mode before either records */
    opr_value a[1] = {opr_v_tensor(j->x)};
    if (opr_call_by_name(ctx, "norm", a, 1, &j->y, 1)) j->y = NULL;
    return NULL;
}

START_TEST(thread_local)
{
    double v[2] = {3, 4};
    opr_tensor *x = leaf(1, (int64_t[]){2}, v);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    thread_job jobs[2] = {{x, true, NULL, &bar}, {x, false, NULL, &bar}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, record_on_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    ck_assert(opr_special_grads_enabled()); /* this thread's mode was not touched */
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(jobs[i].y);
        int counts[2] = {0, 0};
        opr_autograd_walk(jobs[i].y, walk_fast, counts);
        ck_assert_int_eq(counts[1], jobs[i].fast ? 1 : 0);
        ck_assert_int_eq(counts[0], jobs[i].fast ? 0 : 1);
        opr_tensor_release(jobs[i].y);
    }
    opr_tensor_release(x);
}
END_TEST

START_TEST(plan_explain_fast)
{
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 1, (int64_t[]){1000}, OPR_CPU);
    opr_value a[1] = {opr_v_tensor(x)};
    const char *rg[1] = {"self"};
    char buf[4096];
    const opr_op *op = opr_op_find(ctx, "norm");
    ck_assert_int_eq(opr_plan_explain(op, a, 1, rg, 1, buf, sizeof buf), OPR_OK);
    ck_assert_msg(strstr(buf, "chosen: [self") && !strstr(buf, "[fast self"), "%s", buf);
    opr_special_grads_set(false);
    ck_assert_int_eq(opr_plan_explain(op, a, 1, rg, 1, buf, sizeof buf), OPR_OK);
    opr_special_grads_set(true);
    ck_assert_msg(strstr(buf, "chosen: [fast self") && strstr(buf, "fast mode"), "%s", buf);
    opr_tensor_release(x);
}
END_TEST

START_TEST(load_errors)
{
    int n = -1;
    /* a fast variant needs a normal formula for its input */
    int rc = opr_registry_load_yaml_string(ctx, "- name: fz1(Tensor self, Tensor other) -> Tensor\n"
                                                "  shape: sizes(self)\n  self: grad\n  fast:\n    other: grad\n",
                                           "f.yaml", &n);
    ck_assert_int_eq(rc, OPR_ERR_PARSE);
    ck_assert_msg(strstr(opr_last_error(), "f.yaml:1:3: fast variant for 'other' without a normal derivative formula"),
                  "%s", opr_last_error());
    ck_assert_ptr_null(opr_op_find(ctx, "fz1"));
    rc = opr_registry_load_yaml_string(ctx, "- name: fz2(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                            "  self: grad\n  fast: grad\n", "f.yaml", &n);
    ck_assert_int_eq(rc, OPR_ERR_PARSE);
    ck_assert_msg(strstr(opr_last_error(), "f.yaml:4:9: fast must map inputs"), "%s", opr_last_error());
    rc = opr_registry_load_yaml_string(ctx, "- name: fz3(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                            "  self: grad\n  fast:\n    selff: grad\n", "f.yaml", &n);
    ck_assert_int_eq(rc, OPR_ERR_PARSE);
    ck_assert_msg(strstr(opr_last_error(), "unknown key 'selff'"), "%s", opr_last_error());
    /* a good one loads and shows its fast candidate */
    rc = opr_registry_load_yaml_string(ctx, "- name: fz4(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                            "  self: mul(grad, 2)\n  fast:\n    self: add(grad, grad)\n", "f.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    const opr_op *op = opr_op_find(ctx, "fz4");
    ck_assert_int_eq(opr_op_grad_candidate_count(op), 2);
    ck_assert_str_eq(opr_op_grad_candidate_label(op, 1), "fast self");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fast_mode");
    TCase *tc = tcase_create("fast");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, norm_at_zero);
    tcase_add_test(tc, prod_with_zeros);
    tcase_add_test(tc, max_min_ties);
    tcase_add_test(tc, pointwise_special_points);
    tcase_add_test(tc, cdist_zero_distance);
    tcase_add_test(tc, recorded_at_forward);
    tcase_add_test(tc, thread_local);
    tcase_add_test(tc, plan_explain_fast);
    tcase_add_test(tc, load_errors);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
