/* The list forms of the optimizer steps (registry/ops/optim_foreach.yaml:
 * _foreach_sgd_step, _foreach_adamw_step) against a loop of the single-tensor ops
 * (test_optim checks those against torch.optim): three parameters of different shapes,
 * f32 and f64, several steps, every configuration of SGD and AdamW the state lists
 * cover (momentum or none, nesterov, amsgrad or not); the parameters and the state
 * after every step must be the same bits. Then the refusals: lists of other lengths, a
 * state list missing where the step needs it (nothing written), and an item of another
 * shape (the error names the piece). */
#include "test_util.h"

#include <math.h>
#include <string.h>

#define NP 3
#define STEPS 3
#define MAXN 12

static const int64_t shapes[NP][3] = {{3, 4}, {5}, {2, 2, 2}};
static const int ndims[NP] = {2, 1, 3};

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static int64_t numel_of(int p)
{
    int64_t n = 1;
    for (int d = 0; d < ndims[p]; d++) n *= shapes[p][d];
    return n;
}

/* Parameter p's tensor `which` (0 parameter, 1 gradient at step s, 2.. state) in dt. */
static opr_tensor *make(int p, int which, int s, opr_dtype dt)
{
    double v[MAXN];
    float f[MAXN];
    for (int64_t i = 0; i < numel_of(p); i++) {
        v[i] = which == 0   ? sin(1.0 + p + 0.3 * (double)i)
               : which == 1 ? cos(0.5 * s + p - 0.7 * (double)i)
                            : 0.0; /* state starts at zeros */
        f[i] = (float)v[i];
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndims[p], shapes[p], dt == OPR_F32 ? (void *)f : (void *)v, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* Whether a and b hold the same bits. */
static bool same(const opr_tensor *a, const opr_tensor *b)
{
    double va[MAXN], vb[MAXN];
    const int64_t n = opr_tensor_numel(a);
    ck_assert_int_eq(opr_tensor_copy_to_host_f64(a, va, n), OPR_OK);
    ck_assert_int_eq(opr_tensor_copy_to_host_f64(b, vb, n), OPR_OK);
    return !memcmp(va, vb, sizeof(double) * (size_t)n);
}

typedef struct cfg {
    const char *name;
    int adamw;
    double lr, a, b, c; /* SGD: momentum, dampening, weight decay; AdamW: beta1, beta2, weight decay */
    bool flag;          /* SGD: nesterov; AdamW: amsgrad */
} cfg;

static const cfg cfgs[] = {
    {"sgd", 0, 0.1, 0, 0, 0.01, false},
    {"sgd momentum", 0, 0.05, 0.9, 0.1, 0.01, false},
    {"sgd nesterov", 0, 0.05, 0.8, 0, 1e-3, true},
    {"adamw", 1, 0.01, 0.9, 0.999, 0.01, false},
    {"adamw amsgrad", 1, 0.05, 0.8, 0.95, 0.1, true},
};

/* Which state lists the configuration keeps: SGD 1 (momentum), AdamW 3. */
static int nstate(const cfg *c) { return c->adamw ? 3 : 1; }
static bool state_used(const cfg *c, int k)
{
    return c->adamw ? (k < 2 || c->flag) : c->a > 0;
}

/* One step of c on the lists: the list op (list true) or a loop of the single op. */
static void run_step(const cfg *c, bool list, opr_tensor **params, opr_tensor **grads, opr_tensor *state[][NP], int s)
{
    opr_tensor *st[3][NP];
    for (int k = 0; k < nstate(c); k++)
        for (int p = 0; p < NP; p++) st[k][p] = state[k][p];
    const int n_used[3] = {state_used(c, 0) ? NP : 0, state_used(c, 1) ? NP : 0, state_used(c, 2) ? NP : 0};
    if (list) {
        opr_tensor *out[NP] = {NULL};
        int rc;
        if (!c->adamw) {
            opr_value a[10] = {opr_v_tensors(params, NP), opr_v_tensors(grads, NP), opr_v_tensors(st[0], n_used[0]),
                               opr_v_double(c->lr), opr_v_double(c->a), opr_v_double(c->b), opr_v_double(c->c),
                               opr_v_bool(c->flag), opr_v_bool(false), opr_v_bool(s == 1)};
            rc = opr_call(opr_op_find(ctx, "_foreach_sgd_step"), a, 10, out, NP);
        } else {
            opr_value a[12] = {opr_v_tensors(params, NP), opr_v_tensors(grads, NP), opr_v_tensors(st[0], NP),
                               opr_v_tensors(st[1], NP), opr_v_tensors(st[2], n_used[2]), opr_v_int(s),
                               opr_v_double(c->lr), opr_v_double(c->a), opr_v_double(c->b), opr_v_double(1e-8),
                               opr_v_double(c->c), opr_v_bool(c->flag)};
            rc = opr_call(opr_op_find(ctx, "_foreach_adamw_step"), a, 12, out, NP);
        }
        ck_assert_msg(rc == OPR_OK, "%s: %s", c->name, opr_last_error());
        for (int p = 0; p < NP; p++) {
            ck_assert_msg(out[p] == params[p], "%s: piece %d is not the parameter itself", c->name, p);
            opr_tensor_release(out[p]);
        }
        return;
    }
    for (int p = 0; p < NP; p++) {
        opr_tensor *out = NULL;
        int rc;
        if (!c->adamw) {
            opr_value a[10] = {opr_v_tensor(params[p]), opr_v_tensor(grads[p]),
                               n_used[0] ? opr_v_tensor(st[0][p]) : opr_v_none(), opr_v_double(c->lr),
                               opr_v_double(c->a), opr_v_double(c->b), opr_v_double(c->c), opr_v_bool(c->flag),
                               opr_v_bool(false), opr_v_bool(s == 1)};
            rc = opr_call(opr_op_find(ctx, "sgd_step_"), a, 10, &out, 1);
        } else {
            opr_value a[12] = {opr_v_tensor(params[p]), opr_v_tensor(grads[p]), opr_v_tensor(st[0][p]),
                               opr_v_tensor(st[1][p]), n_used[2] ? opr_v_tensor(st[2][p]) : opr_v_none(),
                               opr_v_int(s), opr_v_double(c->lr), opr_v_double(c->a), opr_v_double(c->b),
                               opr_v_double(1e-8), opr_v_double(c->c), opr_v_bool(c->flag)};
            rc = opr_call(opr_op_find(ctx, "adamw_step_"), a, 12, &out, 1);
        }
        ck_assert_msg(rc == OPR_OK, "%s (single): %s", c->name, opr_last_error());
        opr_tensor_release(out);
    }
}

START_TEST(list_equals_loop)
{
    bool was = opr_grad_mode_set(false);
    for (int dti = 0; dti < 2; dti++) {
        const opr_dtype dt = dti ? OPR_F64 : OPR_F32;
        for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
            const cfg *c = &cfgs[k];
            opr_tensor *pl[NP], *pr[NP], *sl[3][NP], *sr[3][NP];
            for (int p = 0; p < NP; p++) {
                pl[p] = make(p, 0, 0, dt);
                pr[p] = make(p, 0, 0, dt);
                for (int q = 0; q < 3; q++) { sl[q][p] = make(p, 2, 0, dt); sr[q][p] = make(p, 2, 0, dt); }
            }
            for (int s = 1; s <= STEPS; s++) {
                opr_tensor *g[NP];
                for (int p = 0; p < NP; p++) g[p] = make(p, 1, s, dt);
                run_step(c, true, pl, g, sl, s);
                run_step(c, false, pr, g, sr, s);
                for (int p = 0; p < NP; p++) {
                    ck_assert_msg(same(pl[p], pr[p]), "%s %s step %d: parameter %d differs from the loop's", c->name,
                                  opr_dtype_name(dt), s, p);
                    for (int q = 0; q < nstate(c); q++)
                        ck_assert_msg(same(sl[q][p], sr[q][p]), "%s %s step %d: state %d of parameter %d differs",
                                      c->name, opr_dtype_name(dt), s, q, p);
                    opr_tensor_release(g[p]);
                }
                /* and the step moved the parameters */
                opr_tensor *start = make(0, 0, 0, dt);
                ck_assert_msg(!same(pl[0], start), "%s: the parameter did not move", c->name);
                opr_tensor_release(start);
            }
            for (int p = 0; p < NP; p++) {
                opr_tensor_release(pl[p]);
                opr_tensor_release(pr[p]);
                for (int q = 0; q < 3; q++) { opr_tensor_release(sl[q][p]); opr_tensor_release(sr[q][p]); }
            }
        }
    }
    opr_grad_mode_set(was);
}
END_TEST

START_TEST(refusals)
{
    bool was = opr_grad_mode_set(false);
    opr_tensor *p[NP], *g[NP], *b[NP], *out[NP] = {NULL};
    for (int i = 0; i < NP; i++) { p[i] = make(i, 0, 0, OPR_F64); g[i] = make(i, 1, 1, OPR_F64); b[i] = make(i, 2, 0, OPR_F64); }
    opr_tensor *before = make(0, 0, 0, OPR_F64);
    const opr_op *sgd = opr_op_find(ctx, "_foreach_sgd_step");
    /* two gradients for three parameters */
    opr_value a[5] = {opr_v_tensors(p, NP), opr_v_tensors(g, NP - 1), opr_v_tensors(b, NP), opr_v_double(0.1),
                      opr_v_double(0.9)};
    ck_assert_int_eq(opr_call(sgd, a, 5, out, NP), OPR_ERR_INVALID);
    /* momentum without buffers */
    a[1] = opr_v_tensors(g, NP);
    a[2] = opr_v_tensors(b, 0);
    ck_assert_int_eq(opr_call(sgd, a, 5, out, NP), OPR_ERR_INVALID);
    ck_assert_msg(same(p[0], before), "a refused call wrote the parameters");
    /* an item of another shape: the error names the piece */
    opr_tensor *g2[NP] = {g[0], g[2], g[1]};
    a[1] = opr_v_tensors(g2, NP);
    a[2] = opr_v_tensors(b, NP);
    ck_assert_int_eq(opr_call(sgd, a, 5, out, NP), OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "piece 1"), "%s", opr_last_error());
    /* the wrong number of result slots */
    a[1] = opr_v_tensors(g, NP);
    ck_assert_int_eq(opr_call(sgd, a, 5, out, NP - 1), OPR_ERR_INVALID);
    for (int i = 0; i < NP; i++) { opr_tensor_release(p[i]); opr_tensor_release(g[i]); opr_tensor_release(b[i]); }
    opr_tensor_release(before);
    opr_grad_mode_set(was);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim_foreach");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, list_equals_loop);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
