/* What a node saves when its formula selects on the call's arguments: select(cond, a,
 * b) whose condition reads only arguments (all_reduce's op, a mode string, a flag)
 * takes the same branch in the backward as at record time, so only that branch's
 * tensors are saved. Calls that differ only in such an argument get plans of their own
 * (a string is part of the plan's key), and each backward is right. */
#include "tests/test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y = self (mode "copy") or self * other (mode "scale"); `other` is read by the
 * gradient of self only in "scale". sel_flag's condition reads a bool. */
static const char *yaml =
    "- name: sel_mode(Tensor self, Tensor other, str mode=\"copy\") -> Tensor\n"
    "  check: [mode == \"copy\" || mode == \"scale\", sizes(self) == sizes(other)]\n"
    "  shape: sizes(self)\n"
    "  forward: select(mode == \"copy\", mul(self, 1), mul(self, other))\n"
    "  self: select(mode == \"copy\", grad, mul(grad, other))\n"
    "- name: sel_flag(Tensor self, Tensor other, bool scaled=False) -> Tensor\n"
    "  check: [sizes(self) == sizes(other)]\n"
    "  shape: sizes(self)\n"
    "  forward: select(scaled, mul(self, other), mul(self, 1))\n"
    "  self: select(scaled, mul(grad, other), grad)\n"
    "- name: sel_shape(Tensor self, Tensor other) -> Tensor\n"
    "  check: [sizes(self) == sizes(other)]\n"
    "  shape: sizes(self)\n"
    "  forward: mul(self, other)\n"
    "  # the condition reads grad: decided only in the backward, so both branches count\n"
    "  self: select(dim(grad) > 5, grad, mul(grad, other))\n"
    "- name: sel_item(Tensor[] ts, Tensor other) -> Tensor\n"
    "  shape: sizes(other)\n"
    "  forward: mul(other, 1)\n"
    "  # item 70 of a long list is past what the plan cache's key holds\n"
    "  other: select(dim(ts[70]) == 1, grad, mul(grad, other))\n";

static opr_ctx *ctx_with_ops(void)
{
    opr_ctx *ctx = tu_ctx();
    int n = 0;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, yaml, "sel.yaml", &n) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(n, 4);
    return ctx;
}

static void on_node(void *ud, const opr_node_info *info)
{
    *(uint64_t *)ud = info->saved_bytes;
}

/* Records op(x, w, extra) with x requiring grad; checks what the node saved and that
 * the gradient of sum(y) is ones (no w) or w. */
static void check_call(opr_ctx *ctx, const char *op, opr_value extra, bool scaled, uint64_t want_saved)
{
    const int64_t shape[] = {4, 3};
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, shape, -1, 1), *w = tu_rand(ctx, OPR_F64, 2, shape, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_value args[] = {opr_v_tensor(x), opr_v_tensor(w), extra};
    opr_tensor *y = tu_call1(ctx, op, args, extra.kind == OPR_V_NONE ? 2 : 3);
    uint64_t saved = ~0ull;
    ck_assert_int_eq(opr_autograd_walk(y, on_node, &saved), 1);
    ck_assert_msg(saved == want_saved, "%s: saved %llu bytes, want %llu", op, (unsigned long long)saved,
                  (unsigned long long)want_saved);
    opr_tensor *ones = tu_rand(ctx, OPR_F64, 2, shape, 1, 1), *gx = NULL;
    ck_assert_msg(opr_autograd_grad(&y, &ones, 1, &x, 1, &gx, NULL) == OPR_OK, "%s: %s", op, opr_last_error());
    double *g = tu_to_f64(gx), *wv = tu_to_f64(w);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(fabs(g[i] - (scaled ? wv[i] : 1.0)) < 1e-15, "%s: d/dx[%d] = %g", op, i, g[i]);
    free(g);
    free(wv);
    opr_tensor *r[] = {x, w, y, ones, gx};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
}

START_TEST(test_branch_by_string)
{
    opr_ctx *ctx = ctx_with_ops();
    tu_seed(1);
    const uint64_t w_bytes = 12 * sizeof(double);
    /* the same shapes each time: only the string tells the plans apart */
    check_call(ctx, "sel_mode", opr_v_string("copy"), false, 0);
    check_call(ctx, "sel_mode", opr_v_string("scale"), true, w_bytes);
    check_call(ctx, "sel_mode", opr_v_string("copy"), false, 0);
    check_call(ctx, "sel_mode", opr_v_none(), false, 0); /* the default, "copy" */
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_branch_by_bool)
{
    opr_ctx *ctx = ctx_with_ops();
    tu_seed(2);
    check_call(ctx, "sel_flag", opr_v_bool(true), true, 12 * sizeof(double));
    check_call(ctx, "sel_flag", opr_v_bool(false), false, 0);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_undecided_saves_both)
{
    opr_ctx *ctx = ctx_with_ops();
    tu_seed(3);
    check_call(ctx, "sel_shape", opr_v_none(), true, 12 * sizeof(double));
    tu_ctx_free(ctx);
}
END_TEST

/* Calls whose condition reads what the plan's key leaves out (item 70 of a list of 72)
 * share a plan: it must save for both branches, or the second call's backward would
 * lack `other`. */
START_TEST(test_key_cut_short_saves_both)
{
    opr_ctx *ctx = ctx_with_ops();
    tu_seed(4);
    enum { N = 72 };
    opr_tensor *items[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) /* round 1: item 70 is 2-d, the other branch */
            items[i] = round && i == 70 ? tu_rand(ctx, OPR_F64, 2, (int64_t[]){1, 2}, 0, 1)
                                        : tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, 0, 1);
        opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
        ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
        opr_value args[] = {opr_v_tensors(items, N), opr_v_tensor(w)};
        opr_tensor *y = tu_call1(ctx, "sel_item", args, 2);
        uint64_t saved = ~0ull;
        ck_assert_int_eq(opr_autograd_walk(y, on_node, &saved), 1);
        ck_assert_uint_eq(saved, 3 * sizeof(double)); /* both branches: other */
        opr_tensor *ones = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, 1, 1), *gw = NULL;
        ck_assert_msg(opr_autograd_grad(&y, &ones, 1, &w, 1, &gw, NULL) == OPR_OK, "round %d: %s", round,
                      opr_last_error());
        double *g = tu_to_f64(gw), *wv = tu_to_f64(w);
        for (int i = 0; i < 3; i++) ck_assert(fabs(g[i] - (round ? wv[i] : 1.0)) < 1e-15);
        free(g);
        free(wv);
        opr_tensor *r[] = {w, y, ones, gw};
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
        for (int i = 0; i < N; i++) opr_tensor_release(items[i]);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* opr_plan_saved_bytes and the explanation follow the call's branch too. */
START_TEST(test_plan_queries)
{
    opr_ctx *ctx = ctx_with_ops();
    const opr_op *op = opr_op_find(ctx, "sel_mode");
    ck_assert_ptr_nonnull(op);
    const int64_t shape[] = {5, 2};
    opr_tensor *x = tu_rand(ctx, OPR_F32, 2, shape, 0, 1), *w = tu_rand(ctx, OPR_F32, 2, shape, 0, 1);
    const char *self_name = "self";
    uint64_t bytes = 1;
    opr_value copy[] = {opr_v_tensor(x), opr_v_tensor(w), opr_v_string("copy")};
    ck_assert_int_eq(opr_plan_saved_bytes(op, copy, 3, &self_name, 1, &bytes), OPR_OK);
    ck_assert_uint_eq(bytes, 0);
    opr_value scale[] = {opr_v_tensor(x), opr_v_tensor(w), opr_v_string("scale")};
    ck_assert_int_eq(opr_plan_saved_bytes(op, scale, 3, &self_name, 1, &bytes), OPR_OK);
    ck_assert_uint_eq(bytes, 10 * sizeof(float));
    char text[4096];
    ck_assert_int_eq(opr_plan_explain(op, scale, 3, &self_name, 1, text, sizeof text), OPR_OK);
    ck_assert_msg(strstr(text, "saves {other}"), "%s", text);
    ck_assert_int_eq(opr_plan_explain(op, copy, 3, &self_name, 1, text, sizeof text), OPR_OK);
    ck_assert_msg(strstr(text, "saves {}"), "%s", text);
    opr_tensor_release(x);
    opr_tensor_release(w);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_saves");
    TCase *tc = tcase_create("plan_saves");
    tcase_add_test(tc, test_branch_by_string);
    tcase_add_test(tc, test_branch_by_bool);
    tcase_add_test(tc, test_undecided_saves_both);
    tcase_add_test(tc, test_key_cut_short_saves_both);
    tcase_add_test(tc, test_plan_queries);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
