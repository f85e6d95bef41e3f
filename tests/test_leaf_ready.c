/* opr_backward_opts.leaf_ready with many leaves (the engine's index of watched leaves
 * grows and rehashes past 64 and 128): each leaf is reported exactly once, when its
 * whole gradient is in .grad, whatever its address. */
#include "tests/test_util.h"

#include <math.h>
#include <stdlib.h>

#define NLEAVES 300

static opr_tensor *leaves[NLEAVES];
static int calls[NLEAVES], ncalls, at_end; /* at_end: calls when every leaf had a gradient */
static double grad0[NLEAVES];

static void on_ready(opr_tensor *leaf, void *user)
{
    ck_assert_ptr_eq(user, (void *)leaves);
    for (int i = 0; i < NLEAVES; i++)
        if (leaf == leaves[i]) {
            double g[3];
            ck_assert_int_eq(opr_tensor_copy_to_host_f64(opr_grad(leaf), g, 3), OPR_OK);
            grad0[i] = g[0];
            calls[i]++;
            ncalls++;
            int without = 0;
            for (int j = 0; j < NLEAVES; j++) without += !opr_grad(leaves[j]);
            at_end += !without;
            return;
        }
    ck_abort_msg("leaf_ready for a tensor that is not a leaf of the graph");
}

static opr_tensor *call2(opr_ctx *ctx, const char *op, opr_tensor *a, opr_tensor *b)
{
    opr_value v[2] = {opr_v_tensor(a), opr_v_tensor(b)};
    return tu_call1(ctx, op, v, b ? 2 : 1);
}

START_TEST(test_many_leaves_once_each)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(5);
    /* z = sum_i sum(x_i * x_i + x_i): three edges into each leaf */
    opr_tensor *z = NULL;
    for (int i = 0; i < NLEAVES; i++) {
        leaves[i] = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
        ck_assert_int_eq(opr_set_requires_grad(leaves[i], true), OPR_OK);
        opr_tensor *sq = call2(ctx, "mul", leaves[i], leaves[i]), *t = call2(ctx, "add", sq, leaves[i]);
        opr_tensor *s = call2(ctx, "sum", t, NULL);
        opr_tensor *acc = z ? call2(ctx, "add", z, s) : opr_tensor_retain(s);
        opr_tensor *r[] = {sq, t, s, z};
        for (int k = 0; k < 4; k++) opr_tensor_release(r[k]);
        z = acc;
    }
    ncalls = at_end = 0;
    opr_backward_opts o = {.struct_size = sizeof o, .leaf_ready = on_ready, .leaf_ready_user = leaves};
    ck_assert_msg(opr_backward(z, NULL, &o) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(ncalls, NLEAVES);
    /* each as soon as its gradient is whole, not all at the end of the pass */
    ck_assert_msg(at_end <= 2, "%d of %d leaves reported only once every leaf had a gradient", at_end, NLEAVES);
    for (int i = 0; i < NLEAVES; i++) {
        ck_assert_int_eq(calls[i], 1);
        double x[3];
        ck_assert_int_eq(opr_tensor_copy_to_host_f64(leaves[i], x, 3), OPR_OK);
        ck_assert_msg(fabs(grad0[i] - (2 * x[0] + 1)) < 1e-14, "leaf %d: %g at the call, want %g", i, grad0[i],
                      2 * x[0] + 1);
    }
    opr_tensor_release(z);
    for (int i = 0; i < NLEAVES; i++) opr_tensor_release(leaves[i]);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("leaf_ready");
    TCase *tc = tcase_create("leaf_ready");
    tcase_add_test(tc, test_many_leaves_once_each);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
