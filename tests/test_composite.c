/* Composite ops (an op defined in YAML by a `forward:` expression over other ops, no
 * kernel): loading at run time, running on the CPU and on the emulated CUDA device,
 * autograd through the parts (several nodes) and through the op's own formulas (one
 * node, same gradients), the load and call errors with their positions, and core.yaml's
 * cdist_mm against cdist. The suite runs with the emulated CUDA plugin on the plugin
 * path when the build has it (OPREG_TEST_EMU), else the CUDA case is skipped. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* softplus three ways: through parts, with its own backward, and a nested composite */
static const char *softplus_yaml =
    "- name: sp_parts(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  forward: log(add(exp(self), 1))\n"
    "- name: sp_own(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  forward:\n"
    "    let:\n"
    "      e: exp(self)\n"
    "    result: log(add(e, 1))\n"
    "  self: mul(grad, sigmoid(self))\n"
    "  samples: [{self: [3, 4]}]\n"
    "- name: sp_twice(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  forward: sp_parts(sp_own(self))\n";

static opr_ctx *ctx_with_softplus(void)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, softplus_yaml, "sp.yaml", &n) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(n, 3);
    return ctx;
}

static opr_tensor *call1(const char *op, opr_tensor *x, opr_ctx *ctx)
{
    opr_value a = opr_v_tensor(x);
    return tu_call1(ctx, op, &a, 1);
}

static void assert_close(const opr_tensor *a, const opr_tensor *b, double tol, const char *what)
{
    ck_assert_int_eq(opr_tensor_numel(a), opr_tensor_numel(b));
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    for (int64_t i = 0; i < opr_tensor_numel(a); i++)
        ck_assert_msg(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])), "%s: element %lld: %.17g vs %.17g", what,
                      (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

typedef struct walk { int n; char ops[16][32]; } walk;
static void on_node(void *ud, const opr_node_info *info)
{
    walk *w = ud;
    if (w->n < 16) snprintf(w->ops[w->n], sizeof w->ops[0], "%s", info->op);
    w->n++;
}

/* d(sum(g * op(x)))/dx by autograd. */
static opr_tensor *grad_of(opr_ctx *ctx, const char *op, opr_tensor *x, opr_tensor *g, int *nodes, walk *w)
{
    opr_tensor *y = call1(op, x, ctx);
    walk local = {0};
    if (!w) w = &local;
    *nodes = opr_autograd_walk(y, on_node, w);
    opr_tensor *gx = NULL;
    ck_assert_msg(opr_autograd_grad(&y, &g, 1, &x, 1, &gx, NULL) == OPR_OK, "%s", opr_last_error());
    opr_tensor_release(y);
    return gx;
}

START_TEST(test_runs_on_cpu)
{
    opr_ctx *ctx = ctx_with_softplus();
    const opr_op *parts = opr_op_find(ctx, "sp_parts"), *own = opr_op_find(ctx, "sp_own");
    ck_assert(opr_op_is_composite(parts) && opr_op_is_composite(own));
    ck_assert(!opr_op_is_composite(opr_op_find(ctx, "exp")));
    ck_assert(!opr_op_is_composite(NULL));
    ck_assert_str_eq(opr_op_forward(parts), "log(add(exp(self), 1))");
    ck_assert_str_eq(opr_op_forward(own), "e = exp(self); log(add(e, 1))");
    ck_assert_ptr_null(opr_op_forward(opr_op_find(ctx, "exp")));
    ck_assert(opr_op_has_kernel(parts, 0) && opr_op_has_kernel(own, 0));
    ck_assert_int_eq(opr_op_grad_candidate_count(parts), 0);
    ck_assert_int_eq(opr_op_grad_candidate_count(own), 1);

    tu_seed(1);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 4}, -3, 3);
    opr_tensor *a = call1("sp_parts", x, ctx), *b = call1("sp_own", x, ctx), *c = call1("sp_twice", x, ctx);
    double *xv = tu_to_f64(x), *av = tu_to_f64(a), *bv = tu_to_f64(b), *cv = tu_to_f64(c);
    for (int i = 0; i < 12; i++) {
        double want = log1p(exp(xv[i]));
        ck_assert_msg(fabs(av[i] - want) < 1e-12 && fabs(bv[i] - want) < 1e-12, "%d: %g %g vs %g", i, av[i], bv[i], want);
        ck_assert_msg(fabs(cv[i] - log1p(exp(want))) < 1e-12, "nested %d: %g", i, cv[i]);
    }
    ck_assert_int_eq(opr_tensor_dtype(a), OPR_F64);
    free(xv); free(av); free(bv); free(cv);
    /* f32 too (the number 1 becomes a 0-d tensor of the call's dtype) */
    opr_tensor *x32 = tu_rand(ctx, OPR_F32, 1, (int64_t[]){5}, -1, 1);
    opr_tensor *y32 = call1("sp_own", x32, ctx);
    ck_assert_int_eq(opr_tensor_dtype(y32), OPR_F32);
    /* outside the op's dtypes: refused like any op */
    opr_tensor *xi = tu_rand(ctx, OPR_I64, 1, (int64_t[]){5}, -1, 1);
    opr_value v = opr_v_tensor(xi);
    tu_expect_fail(ctx, "sp_own", &v, 1, 1, OPR_ERR_INVALID, "dtype i64 is not supported");
    opr_tensor *r[] = {x, a, b, c, x32, y32, xi};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_autograd_parts_vs_own)
{
    opr_ctx *ctx = ctx_with_softplus();
    tu_seed(2);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 5}, -2, 2);
    opr_tensor *g = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 5}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    int n_parts = 0, n_own = 0, n_twice = 0;
    walk wp = {0}, wo = {0}, wt = {0};
    opr_tensor *gp = grad_of(ctx, "sp_parts", x, g, &n_parts, &wp);
    opr_tensor *go = grad_of(ctx, "sp_own", x, g, &n_own, &wo);
    opr_tensor *gt = grad_of(ctx, "sp_twice", x, g, &n_twice, &wt);
    /* through parts: log <- add <- exp; own backward: exactly one node, the op itself */
    ck_assert_int_eq(n_parts, 3);
    ck_assert_str_eq(wp.ops[0], "log");
    ck_assert_int_eq(n_own, 1);
    ck_assert_str_eq(wo.ops[0], "sp_own");
    /* nested: the outer composite records its parts, the inner one is one node */
    ck_assert_int_eq(n_twice, 4);
    ck_assert_str_eq(wt.ops[3], "sp_own");
    assert_close(go, gp, 1e-12, "own backward vs through parts");
    /* both against the exact derivative, g * sigmoid(x), and central differences */
    double *xv = tu_to_f64(x), *gv = tu_to_f64(g), *pv = tu_to_f64(gp);
    for (int i = 0; i < 20; i++) {
        double s = 1 / (1 + exp(-xv[i]));
        ck_assert_msg(fabs(pv[i] - gv[i] * s) < 1e-12, "%d: %g vs %g", i, pv[i], gv[i] * s);
        double h = 1e-6, fd = gv[i] * (log1p(exp(xv[i] + h)) - log1p(exp(xv[i] - h))) / (2 * h);
        ck_assert_msg(fabs(pv[i] - fd) < 1e-7, "%d: fd %g vs %g", i, fd, pv[i]);
    }
    free(xv); free(gv); free(pv);
    /* no input requiring grad, or grad mode off: nothing is recorded */
    bool was = opr_grad_mode_set(false);
    opr_tensor *y = call1("sp_parts", x, ctx);
    ck_assert(!opr_requires_grad(y));
    opr_grad_mode_set(was);
    opr_tensor *r[] = {x, g, gp, go, gt, y};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* The own-backward op's plan is explained; a through-parts op says its parts are. */
START_TEST(test_plan_explain)
{
    opr_ctx *ctx = ctx_with_softplus();
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 1, (int64_t[]){8}, OPR_CPU);
    opr_value a = opr_v_tensor(x);
    const char *rg[] = {"self"};
    char buf[4096];
    ck_assert_int_eq(opr_plan_explain(opr_op_find(ctx, "sp_own"), &a, 1, rg, 1, buf, sizeof buf), OPR_OK);
    ck_assert_msg(strstr(buf, "composite op: forward = e = exp(self); log(add(e, 1))") && strstr(buf, "one node") &&
                  strstr(buf, "chosen: [self]"), "%s", buf);
    ck_assert_int_eq(opr_plan_explain(opr_op_find(ctx, "sp_parts"), &a, 1, rg, 1, buf, sizeof buf), OPR_OK);
    ck_assert_msg(strstr(buf, "forward = log(add(exp(self), 1))") && strstr(buf, "records the ops of the forward"),
                  "%s", buf);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_runs_on_emulated_cuda)
{
#ifndef OPREG_TEST_EMU
    printf("test_runs_on_emulated_cuda: skipped (no emulated CUDA plugin in this build)\n");
    return;
#endif
    opr_ctx *ctx = ctx_with_softplus();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "sp_own"), dev.type));
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "cdist_mm"), dev.type));
    tu_seed(3);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 4}, -2, 2);
    opr_tensor *g = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 4}, -1, 1);
    opr_tensor *xd = opr_tensor_to(x, dev), *gd = opr_tensor_to(g, dev);
    ck_assert(xd && gd);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(xd, true), OPR_OK);
    const char *ops[] = {"sp_parts", "sp_own", "sp_twice"};
    for (int k = 0; k < 3; k++) {
        opr_tensor *y = call1(ops[k], x, ctx), *yd = call1(ops[k], xd, ctx);
        ck_assert_int_eq(opr_tensor_device(yd).type, dev.type);
        opr_tensor *back = opr_tensor_to(yd, OPR_CPU);
        assert_close(back, y, 1e-12, ops[k]);
        int nodes;
        opr_tensor *gx = grad_of(ctx, ops[k], x, g, &nodes, NULL), *gxd = grad_of(ctx, ops[k], xd, gd, &nodes, NULL);
        opr_tensor *gback = opr_tensor_to(gxd, OPR_CPU);
        assert_close(gback, gx, 1e-12, ops[k]);
        opr_tensor *r[] = {y, yd, back, gx, gxd, gback};
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    }
    opr_tensor *r[] = {x, g, xd, gd};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* Loads text into ctx, expects it refused with a message containing each needle. */
static void expect_refused(opr_ctx *ctx, const char *text, const char *needle, const char *needle2)
{
    int n = -1;
    int rc = opr_registry_load_yaml_string(ctx, text, "bad.yaml", &n);
    ck_assert_msg(rc == OPR_ERR_PARSE, "loaded (rc %d) instead of refusing:\n%s", rc, text);
    ck_assert_msg(strstr(opr_last_error(), needle), "message '%s' lacks '%s'", opr_last_error(), needle);
    if (needle2) ck_assert_msg(strstr(opr_last_error(), needle2), "message '%s' lacks '%s'", opr_last_error(), needle2);
}

START_TEST(test_load_errors)
{
    opr_ctx *ctx = tu_ctx();
    int nops = opr_op_count(ctx);
    /* recursion: directly */
    expect_refused(ctx, "- name: rec(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(rec(self))\n",
                   "bad.yaml:3:16: forward of rec calls rec itself", "cannot be recursive");
    ck_assert_ptr_null(opr_op_find(ctx, "rec"));
    /* through another composite of the same file (cyc_b is checked when added) */
    expect_refused(ctx,
                   "- name: cyc_a(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(cyc_b(self))\n"
                   "- name: cyc_b(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: exp(cyc_a(self))\n",
                   "bad.yaml:6:16: forward of cyc_b calls cyc_a (bad.yaml:1), whose forward calls cyc_b again", NULL);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "cyc_a")); /* the first entry loaded */
    ck_assert_ptr_null(opr_op_find(ctx, "cyc_b"));
    /* ... and through two, from a later string */
    int n = 0;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- name: cyc_c(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                                        "  forward: cyc_a(self)\n", "ok.yaml", &n), OPR_OK);
    expect_refused(ctx, "- name: cyc_b(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(exp(cyc_c(self)))\n",
                   "bad.yaml:3:20: forward of cyc_b calls cyc_c", "whose forward calls cyc_b again");
    /* cyc_a still calls an op that does not exist: a clear error at the call, no crash */
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "cyc_a"), 0));
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 1, (int64_t[]){3}, OPR_CPU);
    opr_value a = opr_v_tensor(x);
    tu_expect_fail(ctx, "cyc_a", &a, 1, 1, OPR_ERR_NOT_FOUND, "bad.yaml:3:16: forward of cyc_a calls unknown op 'cyc_b'");
    tu_expect_fail(ctx, "cyc_c", &a, 1, 1, OPR_ERR_NOT_FOUND, "forward of cyc_a calls unknown op 'cyc_b'");
    /* forward with view */
    expect_refused(ctx, "- name: fv(Tensor self) -> Tensor\n  shape: sizes(self)\n  view: t\n  forward: neg(self)\n",
                   "bad.yaml:4:3: op 'fv': 'forward' and 'view' exclude each other", NULL);
    /* wrong argument counts and names in the calls */
    expect_refused(ctx, "- name: fa(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: mm(self)\n",
                   "bad.yaml:3:12: forward of fa: mm() needs argument 'mat2'", NULL);
    expect_refused(ctx, "- name: fb(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(self, self)\n",
                   "bad.yaml:3:12: forward of fb: neg() takes fewer arguments", NULL);
    expect_refused(ctx, "- name: fc(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: sum(self, dims=[0])\n",
                   "forward of fc: sum() has no argument named 'dims'", NULL);
    /* names: the arguments and lets only */
    expect_refused(ctx, "- name: fd(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: mul(self, grad)\n",
                   "bad.yaml:3:22", "grad");
    expect_refused(ctx, "- name: fe(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward:\n    let:\n"
                        "      self: neg(self)\n    result: self\n",
                   "bad.yaml:5:7: forward: let: 'self' is already an argument's name", NULL);
    expect_refused(ctx, "- name: ff(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward:\n    let:\n      e: exp(self)\n",
                   "bad.yaml:4:5: forward: a mapping needs 'result'", NULL);
    /* what a composite cannot be */
    expect_refused(ctx, "- name: fg(Tensor self) -> Tensor\n  shape: dynamic\n  forward: neg(self)\n",
                   "bad.yaml:3:3: op 'fg': a composite op needs a 'shape' expression", NULL);
    expect_refused(ctx, "- name: fh_(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(self)\n",
                   "cannot be in place", NULL);
    /* nothing refused reached the table */
    ck_assert_int_eq(opr_op_count(ctx), nops + 2);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* The forward must give what shape: and dtype: say; checked at every call. */
START_TEST(test_result_mismatch)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx,
        "- name: bad_shape(Tensor self) -> Tensor\n  shape: \"[size(self, 0)]\"\n  forward: neg(self)\n"
        "- name: bad_dtype(Tensor self) -> Tensor\n  shape: sizes(self)\n  dtype: f32\n  dtypes: [f64]\n  forward: neg(self)\n",
        "mm.yaml", &n), OPR_OK);
    opr_tensor *x = opr_tensor_new(ctx, OPR_F64, 2, (int64_t[]){2, 3}, OPR_CPU);
    opr_value a = opr_v_tensor(x);
    tu_expect_fail(ctx, "bad_shape", &a, 1, 1, OPR_ERR_INVALID,
                   "bad_shape: the forward expression gave [2, 3] f64 cpu but the op's entry (mm.yaml:1) says [2] f64 cpu");
    tu_expect_fail(ctx, "bad_dtype", &a, 1, 1, OPR_ERR_INVALID, "says [2, 3] f32 cpu");
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* cdist_mm against cdist: values and both gradients. */
static void cdist_pair(opr_ctx *ctx, opr_tensor *x1, opr_tensor *x2, const char *what)
{
    ck_assert_int_eq(opr_set_requires_grad(x1, true), OPR_OK);
    ck_assert_int_eq(opr_set_requires_grad(x2, true), OPR_OK);
    opr_value a[2] = {opr_v_tensor(x1), opr_v_tensor(x2)};
    opr_tensor *y = tu_call1(ctx, "cdist", a, 2), *ym = tu_call1(ctx, "cdist_mm", a, 2);
    ck_assert_int_eq(opr_tensor_ndim(y), opr_tensor_ndim(ym));
    assert_close(ym, y, 1e-10, what);
    walk w = {0};
    ck_assert_int_eq(opr_autograd_walk(ym, on_node, &w), 1);
    ck_assert_str_eq(w.ops[0], "cdist_mm");
    tu_seed(7);
    opr_tensor *g = tu_rand(ctx, OPR_F64, opr_tensor_ndim(y), opr_tensor_shape(y), -1, 1);
    opr_tensor *in[2] = {x1, x2}, *gc[2] = {NULL}, *gm[2] = {NULL};
    ck_assert_msg(opr_autograd_grad(&y, &g, 1, in, 2, gc, NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert_msg(opr_autograd_grad(&ym, &g, 1, in, 2, gm, NULL) == OPR_OK, "%s", opr_last_error());
    assert_close(gm[0], gc[0], 1e-10, what);
    assert_close(gm[1], gc[1], 1e-10, what);
    opr_tensor *r[] = {y, ym, g, gc[0], gc[1], gm[0], gm[1]};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
}

START_TEST(test_cdist_mm_matches_cdist)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert(opr_op_is_composite(opr_op_find(ctx, "cdist_mm")));
    const int64_t shapes[][2][3] = {{{3, 4}, {5, 4}}, {{1, 3}, {1, 3}}, {{2, 3, 4}, {2, 5, 4}}, {{2, 3, 4}, {1, 5, 4}}};
    const int nd[] = {2, 2, 3, 3};
    tu_seed(5);
    for (int s = 0; s < 4; s++) {
        opr_tensor *x1 = tu_rand(ctx, OPR_F64, nd[s], shapes[s][0], -1, 1);
        opr_tensor *x2 = tu_rand(ctx, OPR_F64, nd[s], shapes[s][1], -1, 1);
        char what[32];
        snprintf(what, sizeof what, "shape pair %d", s);
        cdist_pair(ctx, x1, x2, what);
        opr_tensor_release(x1);
        opr_tensor_release(x2);
    }
    /* zero distances: rows of x2 equal to rows of x1, in values whose arithmetic is
     * exact, so that both give exactly 0 there and the subgradient 0 */
    const double v1[] = {0.5, -1, 0.25, 2, 0, 1.5, -0.75, 1, 1};
    const double v2[] = {2, 0, 1.5, 1, 1, 1, 0.5, -1, 0.25, 0.5, 0.5, 0.5};
    opr_tensor *x1 = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){3, 3}, v1, OPR_CPU);
    opr_tensor *x2 = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){4, 3}, v2, OPR_CPU);
    opr_value a[2] = {opr_v_tensor(x1), opr_v_tensor(x2)};
    opr_tensor *ym = tu_call1(ctx, "cdist_mm", a, 2);
    double *d = tu_to_f64(ym);
    ck_assert(d[0 * 4 + 2] == 0.0 && d[1 * 4 + 0] == 0.0); /* x1[0] == x2[2], x1[1] == x2[0] */
    free(d);
    opr_tensor_release(ym);
    cdist_pair(ctx, x1, x2, "zero distances");
    /* and the whole gradient where every distance is 0 */
    opr_tensor *z1 = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){1, 3}, v1, OPR_CPU);
    opr_tensor *z2 = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){1, 3}, v1, OPR_CPU);
    ck_assert_int_eq(opr_set_requires_grad(z1, true), OPR_OK);
    opr_value za[2] = {opr_v_tensor(z1), opr_v_tensor(z2)};
    opr_tensor *zy = tu_call1(ctx, "cdist_mm", za, 2), *gz = NULL;
    ck_assert_int_eq(opr_autograd_grad(&zy, NULL, 1, &z1, 1, &gz, NULL), OPR_OK);
    double *gv = tu_to_f64(gz);
    for (int i = 0; i < 3; i++) ck_assert_msg(gv[i] == 0.0, "%d: %g", i, gv[i]);
    free(gv);
    /* the rules of cdist: p == 2 only, and the checks quote the failing expression */
    opr_value bad[3] = {opr_v_tensor(x1), opr_v_tensor(x2), opr_v_double(1)};
    tu_expect_fail(ctx, "cdist_mm", bad, 3, 1, OPR_ERR_INVALID, "check failed: p == 2");
    opr_tensor *r[] = {x1, x2, z1, z2, zy, gz};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* Alternatives (`alternative:`): cdist runs its own kernel on the CPU at every size
 * (kernel_rate cpu: 1, the CPU kernel takes the GEMM identity itself), and cdist_mm on
 * the emulated CUDA device for large inputs, as one node with cdist_mm's formulas; an
 * op without a kernel runs its alternative; the errors, at load and at the first call. */
START_TEST(test_alternative_choice)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *cdist = opr_op_find(ctx, "cdist"), *cdist_mm = opr_op_find(ctx, "cdist_mm");
    ck_assert_str_eq(opr_op_alternative(cdist), "cdist_mm");
    ck_assert_ptr_null(opr_op_alternative(opr_op_find(ctx, "mm")));
    tu_seed(11);
    const int64_t rows[] = {4, 2048};
    for (int s = 0; s < 2; s++) {
        opr_tensor *x1 = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){rows[s], 64}, OPR_CPU);
        opr_tensor *x2 = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){rows[s], 64}, OPR_CPU);
        opr_value a[2] = {opr_v_tensor(x1), opr_v_tensor(x2)};
        double kernel_ns = 0, alt_ns = 0;
        ck_assert_ptr_eq(opr_op_choose(cdist, a, 2, &kernel_ns, &alt_ns), cdist);
        ck_assert_msg(isfinite(kernel_ns) && isfinite(alt_ns) && kernel_ns < alt_ns, "%g vs %g", kernel_ns, alt_ns);
        opr_tensor_release(x1);
        opr_tensor_release(x2);
    }
#ifdef OPREG_TEST_EMU
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    for (int s = 0; s < 2; s++) {
        const int64_t n = s ? 1024 : 8;
        opr_tensor *x1 = tu_rand(ctx, OPR_F64, 2, (int64_t[]){n, 64}, -1, 1);
        opr_tensor *x2 = tu_rand(ctx, OPR_F64, 2, (int64_t[]){n, 64}, -1, 1);
        opr_tensor *d1 = opr_tensor_to(x1, dev), *d2 = opr_tensor_to(x2, dev);
        ck_assert_int_eq(opr_set_requires_grad(d1, true), OPR_OK);
        opr_value a[2] = {opr_v_tensor(d1), opr_v_tensor(d2)}, c[2] = {opr_v_tensor(x1), opr_v_tensor(x2)};
        double kernel_ns = 0, alt_ns = 0;
        const opr_op *chosen = opr_op_choose(cdist, a, 2, &kernel_ns, &alt_ns);
        ck_assert_msg(chosen == (s ? cdist_mm : cdist), "%d rows: %s (kernel %g ns, cdist_mm %g ns)", (int)n,
                      chosen ? opr_op_name(chosen) : opr_last_error(), kernel_ns, alt_ns);
        opr_tensor *y = tu_call1(ctx, "cdist", a, 2), *ref = tu_call1(ctx, "cdist", c, 2);
        opr_tensor *back = opr_tensor_to(y, OPR_CPU);
        assert_close(back, ref, 1e-9, s ? "cdist on cuda through cdist_mm" : "cdist on cuda");
        walk w = {0};
        ck_assert_int_eq(opr_autograd_walk(y, on_node, &w), 1);
        ck_assert_str_eq(w.ops[0], s ? "cdist_mm" : "cdist");
        opr_tensor *r[] = {x1, x2, d1, d2, y, ref, back};
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    }
#else
    (void)cdist_mm;
    printf("test_alternative_choice: the emulated CUDA part skipped (no emulated CUDA plugin in this build)\n");
#endif
    /* an op with no kernel anywhere runs its alternative */
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx,
                      "- name: twice(Tensor self) -> Tensor\n  shape: sizes(self)\n  alternative: twice_c\n"
                      "- name: twice_c(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: mul(self, 2)\n"
                      "- name: no_alt(Tensor self) -> Tensor\n  shape: sizes(self)\n  alternative: nowhere\n"
                      "- name: not_composite(Tensor self) -> Tensor\n  shape: sizes(self)\n  alternative: neg\n"
                      "- name: other_args(Tensor self, int k) -> Tensor\n  shape: sizes(self)\n  alternative: twice_c\n",
                      "alt.yaml", &n) == OPR_OK, "%s", opr_last_error());
    const opr_op *twice = opr_op_find(ctx, "twice");
    ck_assert(opr_op_has_kernel(twice, OPR_CPU.type));
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){5}, -1, 1);
    opr_value a = opr_v_tensor(x);
    double kernel_ns = 0, alt_ns = 0;
    ck_assert_ptr_eq(opr_op_choose(twice, &a, 1, &kernel_ns, &alt_ns), opr_op_find(ctx, "twice_c"));
    ck_assert(isinf(kernel_ns) && isfinite(alt_ns));
    opr_tensor *y = tu_call1(ctx, "twice", &a, 1);
    double *xv = tu_to_f64(x), *yv = tu_to_f64(y);
    for (int i = 0; i < 5; i++) ck_assert(yv[i] == 2 * xv[i]);
    free(xv);
    free(yv);
    tu_expect_fail(ctx, "no_alt", &a, 1, 1, OPR_ERR_INVALID, "alt.yaml:9:16: alternative of no_alt: 'nowhere' is not defined");
    tu_expect_fail(ctx, "not_composite", &a, 1, 1, OPR_ERR_INVALID,
                   "alternative of not_composite: 'neg' is not a composite op");
    opr_value ak[2] = {opr_v_tensor(x), opr_v_int(1)};
    tu_expect_fail(ctx, "other_args", ak, 2, 1, OPR_ERR_INVALID,
                   "alternative of other_args: 'twice_c' does not take the same arguments");
    expect_refused(ctx, "- name: kr(Tensor self) -> Tensor\n  shape: sizes(self)\n  kernel_rate: {cpu: 2}\n",
                   "op 'kr': 'kernel_rate' without an 'alternative' to compare with", NULL);
    expect_refused(ctx, "- name: as(Tensor self) -> Tensor\n  shape: sizes(self)\n  alternative: as\n",
                   "bad.yaml:3:16: alternative: 'as' is the op itself", NULL);
    expect_refused(ctx, "- name: kr2(Tensor self) -> Tensor\n  shape: sizes(self)\n  alternative: twice_c\n"
                   "  kernel_rate: {cpu: -1}\n", "kernel_rate: '-1' is not a positive number", NULL);
    expect_refused(ctx, "- name: av(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: neg(self)\n"
                   "  alternative: twice_c\n", "op 'av': only an out-of-place op with a kernel", NULL);
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

/* `reference:`: an op with kernels (none here) whose CPU has no kernel runs the
 * expression there, and only there; it is not a composite, and cannot be one too. */
START_TEST(test_reference_runs_on_cpu_only)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, "- name: twice_ref(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                                     "  reference: mul(self, 2)\n", "ref.yaml", &n) == OPR_OK,
                  "%s", opr_last_error());
    const opr_op *op = opr_op_find(ctx, "twice_ref");
    ck_assert(!opr_op_is_composite(op));
    ck_assert(opr_op_has_kernel(op, 0));
    for (int t = 1; t < opr_device_type_count(ctx); t++) ck_assert(!opr_op_has_kernel(op, t));
    tu_seed(2);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){5}, -1, 1), *y = call1("twice_ref", x, ctx);
    ck_assert_ptr_nonnull(y);
    double *xv = tu_to_f64(x), *yv = tu_to_f64(y);
    for (int i = 0; i < 5; i++) ck_assert(yv[i] == 2 * xv[i]);
    free(xv);
    free(yv);
    opr_tensor_release(x);
    opr_tensor_release(y);
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- name: both_ref(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                                        "  forward: mul(self, 2)\n  reference: mul(self, 2)\n", "both.yaml", &n),
                     OPR_ERR_PARSE);
    ck_assert_msg(strstr(opr_last_error(), "reference: a composite op (forward:) needs none"), "%s", opr_last_error());
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- name: self_ref(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                                        "  reference: self_ref(self)\n", "self.yaml", &n),
                     OPR_ERR_PARSE);
    ck_assert_msg(strstr(opr_last_error(), "reference of self_ref calls self_ref itself"), "%s", opr_last_error());
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("composite");
    TCase *tc = tcase_create("composite");
    tcase_add_test(tc, test_runs_on_cpu);
    tcase_add_test(tc, test_autograd_parts_vs_own);
    tcase_add_test(tc, test_plan_explain);
    tcase_add_test(tc, test_runs_on_emulated_cuda);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_result_mismatch);
    tcase_add_test(tc, test_cdist_mm_matches_cdist);
    tcase_add_test(tc, test_alternative_choice);
    tcase_add_test(tc, test_reference_runs_on_cpu_only);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
