/* PyTorch as an outside oracle for values and gradients of whole programs:
 *   mlp         two-layer MLP, log_softmax and NLL loss through gather/mean
 *   attention   matmul -> softmax -> matmul attention block
 *   cdist_norm  cdist followed by norms
 *   per_sample  per-sample gradients through opr_vmap against functorch's vmap(grad)
 *
 * Each test draws deterministic f64 inputs, writes them to a temporary file, runs the
 * matching script of tests/oracle (OPREG_ORACLE_DIR) with a python3 that has torch,
 * reads the values and gradients it wrote, and compares them with the same program
 * run through opreg (opr_backward on the scalar loss). oracle_files.c writes the files
 * and runs the script; oracle/oracle_io.py describes their format.
 *
 * Without python3 or torch the suite is skipped (exit status 77, the test's
 * SKIP_RETURN_CODE) with the reason printed. $OPREG_PYTHON, when set, is the only
 * interpreter tried; otherwise python3 on PATH, then /usr/bin/python3 (Debian's
 * python3-torch, which a pyenv or venv python3 first on PATH may not see). */
#include "oracle_files.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OPREG_ORACLE_DIR
#error "OPREG_ORACLE_DIR must name tests/oracle"
#endif

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)
#define TOL 1e-9

static opr_ctx *ctx;

/* Compares an opreg tensor with the oracle's record `name`; failures name the program. */
static void expect_close(const of_recs *rs, const char *name, const opr_tensor *t, const char *program)
{
    of_expect_close_case(rs, program, name, t, TOL, OF_NAN_FAILS);
}

/* ------------------------------------------------------------------ opreg side */

static opr_tensor *call(const char *program, const char *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_OK, "%s: %s failed: %s: %s", program, op, opr_status_name(rc), opr_last_error());
    return out;
}
#define CALL(op, ...) keep(call(program, op, ARGS(__VA_ARGS__)))

static opr_tensor *kept[160];
static int nkept;
static opr_tensor *keep(opr_tensor *t)
{
    ck_assert(nkept < 160);
    return kept[nkept++] = t;
}

static opr_tensor *param(int ndim, const int64_t *shape, double lo, double hi)
{
    opr_tensor *t = keep(tu_rand(ctx, OPR_F64, ndim, shape, lo, hi));
    ck_assert_int_eq(opr_set_requires_grad(t, true), OPR_OK);
    return t;
}

static void run_backward(const char *program, opr_tensor *loss)
{
    ck_assert_msg(opr_requires_grad(loss), "%s: the loss does not require grad (an op without a derivative "
                  "formula cut the graph)", program);
    int rc = opr_backward(loss, NULL, NULL);
    ck_assert_msg(rc == OPR_OK, "%s: backward: %s: %s", program, opr_status_name(rc), opr_last_error());
}

static void setup(void)
{
    ctx = tu_ctx();
    nkept = 0;
    opr_grad_mode_set(true);
}

static void teardown(void)
{
    for (int i = nkept - 1; i >= 0; i--) opr_tensor_release(kept[i]);
    nkept = 0;
    tu_ctx_free(ctx);
}

START_TEST(mlp)
{
    const char *program = "mlp";
    tu_seed(101);
    const int64_t N = 8, D = 5, H = 16, C = 4;
    opr_tensor *x = param(2, (int64_t[]){N, D}, -1, 1);
    opr_tensor *w1 = param(2, (int64_t[]){H, D}, -0.5, 0.5);
    opr_tensor *b1 = param(1, (int64_t[]){H}, -0.1, 0.1);
    opr_tensor *w2 = param(2, (int64_t[]){C, H}, -0.5, 0.5);
    opr_tensor *b2 = param(1, (int64_t[]){C}, -0.1, 0.1);
    opr_tensor *target = keep(tu_rand(ctx, OPR_I64, 2, (int64_t[]){N, 1}, 0, (double)C));
    const char *names[] = {"x", "w1", "b1", "w2", "b2", "target"};
    opr_tensor *ins[] = {x, w1, b1, w2, b2, target};
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "mlp", names, ins, 6, &rs);

    opr_tensor *h = CALL("relu", TV(CALL("linear", TV(x), TV(w1), TV(b1))));
    opr_tensor *logits = CALL("linear", TV(h), TV(w2), TV(b2));
    opr_tensor *lp = CALL("log_softmax", TV(logits), opr_v_int(1));
    opr_tensor *picked = CALL("gather", TV(lp), opr_v_int(1), TV(target));
    opr_tensor *loss = CALL("neg", TV(CALL("mean", TV(picked))));
    expect_close(&rs, "logits", logits, program);
    expect_close(&rs, "lp", lp, program);
    expect_close(&rs, "loss", loss, program);
    run_backward(program, loss);
    const char *gn[] = {"grad_x", "grad_w1", "grad_b1", "grad_w2", "grad_b2"};
    for (int i = 0; i < 5; i++) expect_close(&rs, gn[i], opr_grad(ins[i]), program);
    of_recs_free(&rs);
}
END_TEST

START_TEST(attention)
{
    const char *program = "attention";
    tu_seed(202);
    const int64_t B = 2, T = 5, E = 8;
    opr_tensor *x = param(3, (int64_t[]){B, T, E}, -1, 1);
    opr_tensor *wq = param(2, (int64_t[]){E, E}, -0.5, 0.5);
    opr_tensor *wk = param(2, (int64_t[]){E, E}, -0.5, 0.5);
    opr_tensor *wv = param(2, (int64_t[]){E, E}, -0.5, 0.5);
    opr_tensor *r = keep(tu_rand(ctx, OPR_F64, 3, (int64_t[]){B, T, E}, -1, 1));
    double sc = 1 / sqrt((double)E);
    opr_tensor *scale = keep(opr_tensor_from_data(ctx, OPR_F64, 0, NULL, &sc, OPR_CPU));
    const char *names[] = {"x", "wq", "wk", "wv", "r", "scale"};
    opr_tensor *ins[] = {x, wq, wk, wv, r, scale};
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "attention", names, ins, 6, &rs);

    opr_tensor *q = CALL("matmul", TV(x), TV(wq));
    opr_tensor *k = CALL("matmul", TV(x), TV(wk));
    opr_tensor *v = CALL("matmul", TV(x), TV(wv));
    opr_tensor *kt = CALL("transpose", TV(k), opr_v_int(1), opr_v_int(2));
    opr_tensor *scores = CALL("mul", TV(CALL("matmul", TV(q), TV(kt))), TV(scale));
    opr_tensor *a = CALL("softmax", TV(scores), opr_v_int(-1));
    opr_tensor *o = CALL("matmul", TV(a), TV(v));
    opr_tensor *loss = CALL("sum", TV(CALL("mul", TV(o), TV(r))));
    expect_close(&rs, "a", a, program);
    expect_close(&rs, "o", o, program);
    expect_close(&rs, "loss", loss, program);
    run_backward(program, loss);
    const char *gn[] = {"grad_x", "grad_wq", "grad_wk", "grad_wv"};
    for (int i = 0; i < 4; i++) expect_close(&rs, gn[i], opr_grad(ins[i]), program);
    of_recs_free(&rs);
}
END_TEST

START_TEST(cdist_norm)
{
    const char *program = "cdist_norm";
    tu_seed(303);
    opr_tensor *x1 = param(3, (int64_t[]){2, 6, 3}, -1, 1);
    opr_tensor *x2 = param(3, (int64_t[]){2, 4, 3}, -1, 1);
    const char *names[] = {"x1", "x2"};
    opr_tensor *ins[] = {x1, x2};
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "cdist_norm", names, ins, 2, &rs);

    opr_tensor *d = CALL("cdist", TV(x1), TV(x2));
    opr_tensor *loss = CALL("mul", TV(CALL("norm", TV(d))), TV(CALL("norm", TV(x2), opr_v_double(3))));
    expect_close(&rs, "d", d, program);
    expect_close(&rs, "loss", loss, program);
    run_backward(program, loss);
    expect_close(&rs, "grad_x1", opr_grad(x1), program);
    expect_close(&rs, "grad_x2", opr_grad(x2), program);
    of_recs_free(&rs);
}
END_TEST

/* The special points fast mode skips (registry/README.md): normal mode gives PyTorch's
 * subgradients there. */
START_TEST(special_points)
{
    const char *program = "special_points";
    double a[4] = {0, 3, -4, 0}, z[3] = {0, 0, 0}, q1[4] = {2, 0, 3, 5}, q2[4] = {0, 2, 0, 3}, m[5] = {1, 7, 7, -2, 7};
    double c1[4] = {1, 2, 0, 1}, c2[4] = {3, -1, 1, 2};
    const char *names[] = {"a", "z", "q1", "q2", "m", "c1", "c2"};
    opr_tensor *ins[7];
    const double *vals[7] = {a, z, q1, q2, m, c1, c2};
    const int64_t shapes[7][2] = {{4}, {3}, {4}, {4}, {5}, {2, 2}, {2, 2}};
    for (int i = 0; i < 7; i++) {
        ins[i] = keep(opr_tensor_from_data(ctx, OPR_F64, i < 5 ? 1 : 2, shapes[i], vals[i], OPR_CPU));
        ck_assert_int_eq(opr_set_requires_grad(ins[i], true), OPR_OK);
    }
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "special_points", names, ins, 7, &rs);
    struct { const char *rec, *op; int x; double p; } one[] = {
        {"grad_norm2_a", "norm", 0, 2}, {"grad_norm2_z", "norm", 1, 2}, {"grad_norm15_a", "norm", 0, 1.5},
        {"grad_prod_q1", "prod", 2, 0}, {"grad_prod_q2", "prod", 3, 0}, {"grad_max_m", "max", 4, 0},
        {"grad_min_m", "min", 4, 0},
    };
    for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
        opr_value args[2] = {opr_v_tensor(ins[one[k].x]), opr_v_double(one[k].p)};
        opr_tensor *y = one[k].p ? CALL(one[k].op, args[0], args[1]) : CALL(one[k].op, args[0]);
        opr_tensor *g = NULL;
        ck_assert_int_eq(opr_autograd_grad(&y, NULL, 1, &ins[one[k].x], 1, &g, NULL), OPR_OK);
        expect_close(&rs, one[k].rec, keep(g), program);
    }
    opr_tensor *d = CALL("cdist", TV(ins[5]), TV(ins[6]));
    opr_tensor *s = CALL("sum", TV(d));
    opr_tensor *g[2] = {NULL, NULL};
    ck_assert_int_eq(opr_autograd_grad(&s, NULL, 1, &ins[5], 2, g, NULL), OPR_OK);
    expect_close(&rs, "grad_cdist_c1", keep(g[0]), program);
    expect_close(&rs, "grad_cdist_c2", keep(g[1]), program);
    of_recs_free(&rs);
}
END_TEST

/* ------------------------------------------------------------------ per-sample gradients */

/* One case of oracle/per_sample.py: f(x_i, w, y_i) of one sample, on the ops the name
 * says; consts are the case's shared constants. */
typedef struct ps_case {
    const char *name;
    int xnd, wnd;
    int64_t xs[4], ws[3];   /* x's shape with the batch first; w's */
    double lo, hi;
    opr_tensor *x, *w, *y, *k; /* k: the case's one constant (mask, weights, index, bias, w2) */
} ps_case;

/* The callback's calls: failures are reported with the case, temporaries released. */
typedef struct ps_run {
    const ps_case *c;
    opr_tensor *tmp[16];
    int n;
} ps_run;

static opr_tensor *ps_call(ps_run *r, const char *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_OK, "per-sample %s: %s: %s", r->c->name, op, opr_last_error());
    ck_assert(r->n < 16);
    return r->tmp[r->n++] = out;
}
#define PS(op, ...) ps_call(&run, op, ARGS(__VA_ARGS__))

static opr_tensor *ps_loss(ps_run *r_, opr_tensor *x, opr_tensor *w, opr_tensor *y)
{
    ps_run run = *r_;
    const char *n = run.c->name;
    opr_tensor *k = run.c->k, *loss;
    static const char *const elementwise_first[] = {"masked_select", "clamp", "index_select", "topk", "mode", "sort", "prod"};
    opr_tensor *xw = NULL;
    for (size_t i = 0; i < sizeof elementwise_first / sizeof *elementwise_first; i++)
        if (!strcmp(n, elementwise_first[i])) xw = PS("mul", TV(x), TV(w));
    if (!strcmp(n, "masked_select")) loss = PS("sum", TV(PS("masked_select", TV(xw), TV(k))));
    else if (!strcmp(n, "clamp")) loss = PS("sum", TV(PS("mul", TV(PS("clamp", TV(xw), opr_v_double(-0.5), opr_v_double(0.5))), TV(k))));
    else if (!strcmp(n, "diag")) loss = PS("sum", TV(PS("mul", TV(PS("diag", TV(x))), TV(w))));
    else if (!strcmp(n, "index_select")) {
        opr_tensor *s = PS("index_select", TV(xw), opr_v_int(0), TV(k));
        loss = PS("sum", TV(PS("mul", TV(s), TV(s))));
    } else if (!strcmp(n, "topk") || !strcmp(n, "mode") || !strcmp(n, "sort")) {
        opr_tensor *v[2] = {NULL, NULL};
        opr_value a[2] = {TV(xw), opr_v_int(2)};
        int rc = opr_call_by_name(ctx, n, a, !strcmp(n, "topk") ? 2 : 1, v, 2);
        ck_assert_msg(rc == OPR_OK, "per-sample %s: %s", n, opr_last_error());
        run.tmp[run.n++] = v[0];
        run.tmp[run.n++] = v[1];
        loss = PS("sum", TV(PS("mul", TV(v[0]), TV(k))));
    } else if (!strcmp(n, "prod")) loss = PS("prod", TV(xw));
    else if (!strcmp(n, "linear")) loss = PS("sum", TV(PS("tanh", TV(PS("linear", TV(x), TV(w), TV(k))))));
    else if (!strcmp(n, "nested")) loss = PS("sum", TV(PS("tanh", TV(PS("linear", TV(x), TV(w))))));
    else if (!strcmp(n, "mm")) {
        opr_tensor *m = PS("mm", TV(x), TV(w));
        loss = PS("sum", TV(PS("mul", TV(m), TV(m))));
    } else if (!strcmp(n, "cdist")) loss = PS("sum", TV(PS("cdist", TV(x), TV(w))));
    else { /* cross_entropy, mlp */
        opr_tensor *h = PS("linear", TV(x), TV(w));
        if (!strcmp(n, "mlp")) h = PS("linear", TV(PS("relu", TV(h))), TV(k));
        opr_tensor *lp = PS("log_softmax", TV(h), opr_v_int(0));
        loss = PS("neg", TV(PS("sum", TV(PS("gather", TV(lp), opr_v_int(0), TV(y))))));
    }
    run.n--; /* the loss is the caller's */
    for (int i = 0; i < run.n; i++) opr_tensor_release(run.tmp[i]);
    return loss;
}

static opr_status ps_grad(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)nin; (void)nout;
    ps_run run = {.c = ud};
    opr_tensor *loss = ps_loss(&run, in[0], in[1], in[2]);
    opr_tensor *wrt[2] = {in[0], in[1]};
    int rc = opr_autograd_grad(&loss, NULL, 1, wrt, 2, out, NULL);
    opr_tensor_release(loss);
    return rc;
}

static opr_status ps_nested(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)nin;
    return opr_vmap(ctx, ps_grad, ud, in, (int[]){0, -1, 0}, 3, out, NULL, nout, NULL);
}

/* Exact values on the clamp bounds, zeros in prod, ties for mode and sort. */
static void ps_special_values(ps_case *c)
{
    double *v = tu_to_f64(c->x);
    const int64_t n = opr_tensor_numel(c->x);
    if (!strcmp(c->name, "clamp")) { v[0] = 0.5; v[3] = -0.5; v[7] = 0.5; }
    if (!strcmp(c->name, "prod")) { v[1] = 0; v[4] = 0; v[5] = 0; } /* sample 0: one zero; sample 1: two */
    if (!strcmp(c->name, "mode") || !strcmp(c->name, "sort"))
        for (int64_t i = 0; i < n; i++) v[i] = (double)((int64_t)(v[i] * 3)); /* small integers: ties */
    opr_tensor_copy_from_host(c->x, v, (size_t)n * sizeof *v);
    free(v);
}

START_TEST(per_sample_grads)
{
    const int64_t N = 3;
    ps_case cases[] = {
        {"masked_select", 3, 2, {N, 3, 4}, {3, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"clamp", 2, 1, {N, 5}, {5}, -1, 1, NULL, NULL, NULL, NULL},
        {"diag", 2, 2, {N, 4}, {4, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"index_select", 3, 2, {N, 5, 2}, {5, 2}, -1, 1, NULL, NULL, NULL, NULL},
        {"topk", 2, 1, {N, 6}, {6}, -1, 1, NULL, NULL, NULL, NULL},
        {"prod", 2, 1, {N, 4}, {4}, 0.5, 1.5, NULL, NULL, NULL, NULL},
        {"mode", 3, 1, {N, 3, 5}, {5}, -1, 1, NULL, NULL, NULL, NULL},
        {"sort", 2, 1, {N, 6}, {6}, -1, 1, NULL, NULL, NULL, NULL},
        {"linear", 2, 2, {N, 4}, {3, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"mm", 3, 2, {N, 2, 3}, {3, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"cdist", 3, 2, {N, 2, 3}, {4, 3}, -1, 1, NULL, NULL, NULL, NULL},
        {"cross_entropy", 2, 2, {N, 4}, {3, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"mlp", 2, 2, {N, 4}, {8, 4}, -1, 1, NULL, NULL, NULL, NULL},
        {"nested", 3, 2, {2, N, 4}, {3, 4}, -1, 1, NULL, NULL, NULL, NULL},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    const char *names[4 * NC];
    opr_tensor *ts[4 * NC];
    char label[4 * NC][64];
    int nrec = 0;
    tu_seed(707);
    for (int i = 0; i < NC; i++) {
        ps_case *c = &cases[i];
        const bool unit_w = !strcmp(c->name, "clamp") || !strcmp(c->name, "mode") || !strcmp(c->name, "sort");
        c->x = param(c->xnd, c->xs, c->lo, c->hi);
        c->w = unit_w ? keep(opr_tensor_from_data(ctx, OPR_F64, 1, c->ws, (double[]){1, 1, 1, 1, 1, 1}, OPR_CPU))
                      : keep(tu_rand(ctx, OPR_F64, c->wnd, c->ws, 0.5, 1.5));
        opr_set_requires_grad(c->w, true);
        ps_special_values(c);
        /* per-sample labels (the nested case: one per inner sample) */
        const int64_t ny = !strcmp(c->name, "nested") ? 2 * N : N;
        c->y = keep(tu_rand(ctx, OPR_I64, 2, (int64_t[]){ny, 1}, 0, 3));
        if (!strcmp(c->name, "nested"))
            c->y = keep(opr_tensor_reshape(c->y, (int64_t[]){2, N, 1}, 3));
        const char *kn = NULL;
        if (!strcmp(c->name, "masked_select")) { /* the shared mask: i64 for the oracle, bool here */
            int64_t mi[12];
            unsigned char mb[12];
            for (int e = 0; e < 12; e++) mb[e] = (unsigned char)(mi[e] = (e * 7) % 3 != 0);
            names[nrec] = "masked_select_mask";
            ts[nrec++] = keep(opr_tensor_from_data(ctx, OPR_I64, 2, c->ws, mi, OPR_CPU));
            c->k = keep(opr_tensor_from_data(ctx, OPR_BOOL, 2, c->ws, mb, OPR_CPU));
        } else if (!strcmp(c->name, "index_select")) {
            c->k = keep(opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){4}, (int64_t[]){0, 2, 2, 4}, OPR_CPU));
            kn = "idx";
        } else if (!strcmp(c->name, "clamp") || !strcmp(c->name, "sort")) {
            c->k = keep(tu_rand(ctx, OPR_F64, 1, c->ws, -1, 1));
            kn = "k";
        } else if (!strcmp(c->name, "topk")) {
            c->k = keep(tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, -1, 1));
            kn = "k";
        } else if (!strcmp(c->name, "mode")) {
            c->k = keep(tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1));
            kn = "k";
        } else if (!strcmp(c->name, "linear")) {
            c->k = keep(tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1));
            kn = "b";
        } else if (!strcmp(c->name, "mlp")) {
            c->k = keep(tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 8}, -1, 1));
            kn = "w2";
        }
        const char *parts[4] = {"x", "w", "y", kn};
        opr_tensor *vals[4] = {c->x, c->w, c->y, c->k};
        for (int p = 0; p < 4; p++) {
            if (!parts[p]) continue;
            snprintf(label[nrec], sizeof label[nrec], "%s_%s", c->name, parts[p]);
            names[nrec] = label[nrec];
            ts[nrec++] = vals[p];
        }
    }
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "per_sample", names, ts, nrec, &rs);
    for (int i = 0; i < NC; i++) {
        ps_case *c = &cases[i];
        opr_tensor *out[2] = {NULL, NULL}, *in[3] = {c->x, c->w, c->y};
        const bool nested = !strcmp(c->name, "nested");
        int rc = opr_vmap(ctx, nested ? ps_nested : ps_grad, c, in, (int[]){0, -1, 0}, 3, out, NULL, 2, NULL);
        ck_assert_msg(rc == OPR_OK, "per-sample %s: opr_vmap: %s", c->name, opr_last_error());
        char gx[80], gw[80];
        snprintf(gx, sizeof gx, "%s_gx", c->name);
        snprintf(gw, sizeof gw, "%s_gw", c->name);
        expect_close(&rs, gx, keep(out[0]), c->name);
        expect_close(&rs, gw, keep(out[1]), c->name);
    }
    of_recs_free(&rs);
}
END_TEST

int main(void)
{
    char why[1024];
    if (!of_find_python(why, sizeof why)) {
        printf("test_oracle: SKIPPED: no python3 with torch (tried %s); install python3-torch or set OPREG_PYTHON\n", why);
        return 77;
    }
    printf("test_oracle: oracle is %s with torch, scripts in %s\n", of_python(), OPREG_ORACLE_DIR);
    fflush(stdout);
    Suite *s = suite_create("oracle");
    TCase *tc = tcase_create("programs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, mlp);
    tcase_add_test(tc, attention);
    tcase_add_test(tc, cdist_norm);
    tcase_add_test(tc, special_points);
    tcase_add_test(tc, per_sample_grads);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
