/* The optimizer steps of registry/ops/optim.yaml against torch.optim (PyTorch 1.13,
 * oracle/optim.py): SGD (momentum, dampening, weight decay, nesterov, maximize) and
 * AdamW (betas, eps, weight decay, amsgrad) over several steps on an f64 parameter,
 * the parameter and the optimizer's state after every step within 1e-12; and the
 * arguments PyTorch refuses, refused with nothing written.
 *
 * Skipped (exit status 77) without a python3 that has torch, as test_oracle is. */
#include "oracle_files.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef OPREG_ORACLE_DIR
#error "OPREG_ORACLE_DIR must name tests/oracle"
#endif

#define STEPS 4
#define TOL 1e-12

typedef struct optim_case {
    const char *name;
    int adamw;      /* 0 SGD, 1 AdamW */
    double lr, a, b, c, d, e; /* oracle/optim.py's cfg: SGD momentum, dampening, weight_decay, nesterov, maximize;
                                 AdamW beta1, beta2, eps, weight_decay, amsgrad */
} optim_case;

static const optim_case cases[] = {
    {"sgd momentum dampening weight_decay", 0, 0.1, 0.9, 0.1, 0.01, 0, 0},
    {"sgd nesterov", 0, 0.05, 0.8, 0, 1e-3, 1, 0},
    {"sgd without momentum, maximize", 0, 0.1, 0, 0, 0.1, 0, 1},
    {"sgd momentum maximize", 0, 0.02, 0.5, 0.5, 0, 0, 1},
    {"adamw", 1, 0.01, 0.9, 0.999, 1e-8, 0.01, 0},
    {"adamw amsgrad", 1, 0.05, 0.8, 0.95, 1e-6, 0.1, 1},
};

static const int64_t shape[] = {3, 5};

static opr_ctx *ctx;

static opr_tensor *copy_of(const opr_tensor *t)
{
    double v[15];
    ck_assert_int_eq(opr_tensor_copy_to_host(t, v, sizeof v), OPR_OK);
    opr_tensor *c = opr_tensor_from_data(ctx, OPR_F64, 2, shape, v, OPR_CPU);
    ck_assert_ptr_nonnull(c);
    return c;
}

static opr_tensor *zeros(void)
{
    static const double z[15];
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, 2, shape, z, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void step(const char *op, opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_OK, "%s: %s: %s", op, opr_status_name(rc), opr_last_error());
    opr_tensor_release(out); /* self */
}

/* Case c through opreg, compared with its records in rs after every step. */
static void run_case(int ci, opr_tensor *p, opr_tensor *const *g, const of_recs *rs)
{
    const optim_case *c = &cases[ci];
    opr_tensor *x = copy_of(p), *s[3] = {NULL, NULL, NULL}; /* SGD: buf; AdamW: m, v, vmax */
    const bool momentum = !c->adamw && c->a != 0, amsgrad = c->adamw && c->e != 0;
    if (momentum) s[0] = zeros();
    if (c->adamw) { s[0] = zeros(); s[1] = zeros(); }
    if (amsgrad) s[2] = zeros();
    opr_grad_mode_set(false); /* as torch's step() */
    for (int k = 0; k < STEPS; k++) {
        if (!c->adamw) {
            opr_value a[] = {opr_v_tensor(x), opr_v_tensor(g[k]), s[0] ? opr_v_tensor(s[0]) : opr_v_none(),
                             opr_v_double(c->lr), opr_v_double(c->a), opr_v_double(c->b), opr_v_double(c->c),
                             opr_v_bool(c->d != 0), opr_v_bool(c->e != 0), opr_v_bool(k == 0)};
            step("sgd_step_", a, 10);
        } else {
            opr_value a[] = {opr_v_tensor(x), opr_v_tensor(g[k]), opr_v_tensor(s[0]), opr_v_tensor(s[1]),
                             s[2] ? opr_v_tensor(s[2]) : opr_v_none(), opr_v_int(k + 1), opr_v_double(c->lr),
                             opr_v_double(c->a), opr_v_double(c->b), opr_v_double(c->c), opr_v_double(c->d),
                             opr_v_bool(amsgrad)};
            step("adamw_step_", a, 12);
        }
        char name[32];
        snprintf(name, sizeof name, "c%d_p%d", ci, k);
        of_expect_close_case(rs, c->name, name, x, TOL, OF_NAN_FAILS);
        static const char *const state[2][3] = {{"buf", NULL, NULL}, {"m", "v", "vmax"}};
        for (int j = 0; j < 3; j++) {
            if (!s[j]) continue;
            snprintf(name, sizeof name, "c%d_%s%d", ci, state[c->adamw][j], k);
            of_expect_close_case(rs, c->name, name, s[j], TOL, OF_NAN_FAILS);
        }
    }
    opr_tensor *all[] = {x, s[0], s[1], s[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}

START_TEST(against_torch)
{
    enum { NCASES = (int)(sizeof cases / sizeof cases[0]) };
    opr_tensor *p = tu_rand(ctx, OPR_F64, 2, shape, -1, 1), *g[STEPS];
    for (int k = 0; k < STEPS; k++) g[k] = tu_rand(ctx, OPR_F64, 2, shape, -1 - k, 1 + k); /* growing: amsgrad's max moves */
    double cfgv[NCASES][8];
    for (int i = 0; i < NCASES; i++) {
        const optim_case *c = &cases[i];
        const double row[8] = {c->adamw, STEPS, c->lr, c->a, c->b, c->c, c->d, c->e};
        memcpy(cfgv[i], row, sizeof row);
    }
    const int64_t cfg_shape[] = {NCASES, 8};
    opr_tensor *cfg = opr_tensor_from_data(ctx, OPR_F64, 2, cfg_shape, cfgv, OPR_CPU);
    const char *names[] = {"p", "g0", "g1", "g2", "g3", "cfg"};
    opr_tensor *ins[] = {p, g[0], g[1], g[2], g[3], cfg};
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "optim", names, ins, 6, &rs);
    for (int i = 0; i < NCASES; i++) run_case(i, p, g, &rs);
    of_recs_free(&rs);
    opr_tensor *all[] = {p, g[0], g[1], g[2], g[3], cfg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

/* sgd_step_ / adamw_step_ with one argument changed from a valid call: refused with
 * OPR_ERR_INVALID, and the parameter is not written. */
static void expect_refused(const char *op, opr_value *args, int nargs, opr_tensor *param, const char *why)
{
    double before[15], after[15];
    ck_assert_int_eq(opr_tensor_copy_to_host(param, before, sizeof before), OPR_OK);
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_ERR_INVALID, "%s with %s: got %s (%s), not refused", op, why, opr_status_name(rc),
                  opr_last_error());
    ck_assert_int_eq(opr_tensor_copy_to_host(param, after, sizeof after), OPR_OK);
    ck_assert_msg(!memcmp(before, after, sizeof before), "%s with %s: the parameter was written", op, why);
}

START_TEST(bad_arguments)
{
    opr_grad_mode_set(false);
    opr_tensor *p = tu_rand(ctx, OPR_F64, 2, shape, -1, 1), *g = tu_rand(ctx, OPR_F64, 2, shape, -1, 1);
    opr_tensor *b = zeros(), *m = zeros(), *v = zeros();
    const int64_t other_shape[] = {5, 3};
    opr_tensor *g_other = tu_rand(ctx, OPR_F64, 2, other_shape, -1, 1);
#define SGD(grad_, buf_, lr_, mom_, damp_, wd_, nest_)                                                         \
    (opr_value[]){opr_v_tensor(p), opr_v_tensor(grad_), buf_, opr_v_double(lr_), opr_v_double(mom_),           \
                  opr_v_double(damp_), opr_v_double(wd_), opr_v_bool(nest_), opr_v_bool(false), opr_v_bool(false)}, 10
    expect_refused("sgd_step_", SGD(g, opr_v_tensor(b), 0.1, 0.9, 0.1, 0, true), p, "nesterov and dampening");
    expect_refused("sgd_step_", SGD(g, opr_v_tensor(b), 0.1, 0, 0, 0, true), p, "nesterov without momentum");
    expect_refused("sgd_step_", SGD(g, opr_v_none(), 0.1, 0.9, 0, 0, false), p, "momentum without a buffer");
    expect_refused("sgd_step_", SGD(g, opr_v_tensor(b), -0.1, 0.9, 0, 0, false), p, "a negative lr");
    expect_refused("sgd_step_", SGD(g, opr_v_tensor(b), 0.1, -0.9, 0, 0, false), p, "a negative momentum");
    expect_refused("sgd_step_", SGD(g, opr_v_tensor(b), 0.1, 0.9, 0, -1, false), p, "a negative weight decay");
    expect_refused("sgd_step_", SGD(g_other, opr_v_tensor(b), 0.1, 0.9, 0, 0, false), p, "a grad of another shape");
#define ADAMW(vmax_, step_, b1_, b2_, eps_, ams_)                                                              \
    (opr_value[]){opr_v_tensor(p), opr_v_tensor(g), opr_v_tensor(m), opr_v_tensor(v), vmax_, opr_v_int(step_), \
                  opr_v_double(1e-3), opr_v_double(b1_), opr_v_double(b2_), opr_v_double(eps_),               \
                  opr_v_double(0.01), opr_v_bool(ams_)}, 12
    expect_refused("adamw_step_", ADAMW(opr_v_none(), 1, 0.9, 0.999, 1e-8, true), p, "amsgrad without max_exp_avg_sq");
    expect_refused("adamw_step_", ADAMW(opr_v_none(), 0, 0.9, 0.999, 1e-8, false), p, "step 0");
    expect_refused("adamw_step_", ADAMW(opr_v_none(), 1, 1.0, 0.999, 1e-8, false), p, "beta1 1");
    expect_refused("adamw_step_", ADAMW(opr_v_none(), 1, 0.9, -0.1, 1e-8, false), p, "a negative beta2");
    expect_refused("adamw_step_", ADAMW(opr_v_none(), 1, 0.9, 0.999, -1e-8, false), p, "a negative eps");
    /* a parameter that requires grad, with grad mode on: autograd records no in-place op */
    opr_grad_mode_set(true);
    ck_assert_int_eq(opr_set_requires_grad(p, true), OPR_OK);
    opr_tensor *out = NULL;
    opr_value ok[] = {opr_v_tensor(p), opr_v_tensor(g), opr_v_none(), opr_v_double(0.1)};
    ck_assert_int_ne(opr_call_by_name(ctx, "sgd_step_", ok, 4, &out, 1), OPR_OK);
    opr_grad_mode_set(false);
    ck_assert_int_eq(opr_call_by_name(ctx, "sgd_step_", ok, 4, &out, 1), OPR_OK); /* as in torch's step() */
    opr_tensor_release(out);
    opr_tensor *all[] = {p, g, b, m, v, g_other};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void)
{
    opr_grad_mode_set(true);
    tu_ctx_free(ctx);
}

int main(void)
{
    char why[1024];
    if (!of_find_python(why, sizeof why)) {
        printf("test_optim: SKIPPED: no python3 with torch (tried %s); install python3-torch or set OPREG_PYTHON\n", why);
        return 77;
    }
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("steps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, against_torch);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
