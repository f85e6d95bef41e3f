/* A kernel's supports and cost_ns (ABI 2.2), asked before it runs. Device "qdev" (host
 * memory) has an mm whose supports refuses more than 4 rows and an mm_backward whose
 * supports refuses an inner size K above 8 and whose cost_ns the tests set. Both
 * kernels count the calls they should never have got. */
#include "test_util.h"

#include <opreg/plugin.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fixtures/fx_copy.h"
#include "fixtures/fx_hostmem.h"

static int mm_asked, mm_ran, mm_ran_refused; /* the last: a call its supports refused */
static int bw_asked, bw_ran, bw_ran_refused;
static double bw_cost = NAN, mm_cost = NAN;   /* what cost_ns answers (NaN: no estimate) */
static bool bw_asked_on_metadata;             /* a query had no data and no host (the planner's) */

static void mm_f64(const opr_tensor_view *a, const opr_tensor_view *b, opr_tensor_view *o, bool ta)
{
    const double *x = a->data, *y = b->data;
    double *z = o->data;
    const int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
    const int64_t sm = ta ? a->strides[1] : a->strides[0], sk = ta ? a->strides[0] : a->strides[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < b->shape[1]; j++) {
            double acc = 0;
            for (int64_t l = 0; l < k; l++) acc += x[i * sm + l * sk] * y[l * b->strides[0] + j * b->strides[1]];
            z[i * o->strides[0] + j * o->strides[1]] = acc;
        }
}

static bool mm_supports(const opr_kernel_call *call, char *why, size_t len)
{
    mm_asked++;
    int64_t m = call->args[0]->u.t->shape[0];
    if (m <= 4) return true;
    snprintf(why, len, "qdev mm: M > 4 not supported (M = %lld)", (long long)m);
    return false;
}

static double mm_cost_ns(const opr_kernel_call *call)
{
    (void)call;
    return mm_cost;
}

static int k_mm(const opr_kernel_call *call)
{
    if (call->args[0]->u.t->shape[0] > 4) mm_ran_refused++;
    mm_ran++;
    mm_f64(call->args[0]->u.t, call->args[1]->u.t, call->outputs[0], false);
    return OPR_OK;
}

/* args: grad, self, mat2, result; outputs: the gradients of self and mat2. */
static bool bw_supports(const opr_kernel_call *call, char *why, size_t len)
{
    bw_asked++;
    const opr_tensor_view *self = call->args[1]->u.t;
    if (!call->host && !call->host_call && !self->data && !call->outputs[0]->data) bw_asked_on_metadata = true;
    if (self->shape[1] <= 8) return true;
    snprintf(why, len, "qdev mm_backward: K = %lld above 8", (long long)self->shape[1]);
    return false;
}

static double bw_cost_ns(const opr_kernel_call *call)
{
    (void)call;
    return bw_cost;
}

static int k_mm_backward(const opr_kernel_call *call)
{
    const opr_tensor_view *grad = call->args[0]->u.t;
    if (call->args[1]->kind == OPR_ARG_TENSOR && call->args[1]->u.t->shape[1] > 8) bw_ran_refused++;
    bw_ran++;
    if (call->grad_input_mask & 1) { /* grad @ mat2^T */
        const opr_tensor_view *b = call->args[2]->u.t;
        opr_tensor_view bt = *b;
        int64_t shape[2] = {b->shape[1], b->shape[0]}, strides[2] = {b->strides[1], b->strides[0]};
        bt.shape = shape;
        bt.strides = strides;
        mm_f64(grad, &bt, call->outputs[0], false);
    }
    if (call->grad_input_mask & 2) mm_f64(call->args[1]->u.t, grad, call->outputs[1], true); /* self^T @ grad */
    return OPR_OK;
}

static int init_qdev(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "qdev";
    self->version = "0.0.1";
    opr_device_desc dev = {
        .struct_size = sizeof dev, .name = "qdev", .count = 1, .alloc = fx_host_alloc, .free = fx_host_free,
        .copy_to_host = fx_host_copy, .copy_from_host = fx_host_copy, .copy_device = fx_host_copy,
        .flags = OPR_DEVICE_HOST_MEMORY,
    };
    int rc = host->register_device(self, &dev);
    opr_kernel_desc mm = {.struct_size = sizeof mm, .op = "mm", .device = "qdev", .dtypes = OPR_DTYPE_BIT(OPR_F64),
                          .fn = k_mm, .supports = mm_supports, .cost_ns = mm_cost_ns};
    opr_kernel_desc bw = {.struct_size = sizeof bw, .op = "mm_backward", .device = "qdev",
                          .dtypes = OPR_DTYPE_BIT(OPR_F64), .fn = k_mm_backward, .supports = bw_supports,
                          .cost_ns = bw_cost_ns};
    if (!rc) rc = host->register_kernel(self, &mm);
    if (!rc) rc = host->register_kernel(self, &bw);
    return rc ? rc : fx_register_copy(host, self, "qdev");
}

static opr_tensor *rand_on(opr_ctx *ctx, opr_device dev, int64_t rows, int64_t cols)
{
    opr_tensor *host = tu_rand(ctx, OPR_F64, 2, (int64_t[]){rows, cols}, -1, 1), *t = opr_tensor_to(host, dev);
    opr_tensor_release(host);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

static opr_ctx *qdev_ctx(opr_device *dev)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_qdev, NULL), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "qdev", dev), OPR_OK);
    mm_asked = mm_ran = mm_ran_refused = bw_asked = bw_ran = bw_ran_refused = 0;
    bw_cost = mm_cost = NAN;
    bw_asked_on_metadata = false;
    return ctx;
}

/* max |a - b| of two tensors of the same shape, read to the host. */
static double max_diff(opr_tensor *a, opr_tensor *b)
{
    double x[64], y[64];
    int64_t n = opr_tensor_numel(a);
    ck_assert_int_le(n, 64);
    ck_assert_int_eq(opr_tensor_copy_to_host(a, x, (size_t)n * sizeof *x), OPR_OK);
    ck_assert_int_eq(opr_tensor_copy_to_host(b, y, (size_t)n * sizeof *y), OPR_OK);
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i] - y[i]));
    return m;
}

/* A forward call its supports refuses never reaches the kernel: it runs on the CPU
 * (fallback on) or fails with the reason (off). */
START_TEST(test_supports_forward)
{
    opr_device dev;
    opr_ctx *ctx = qdev_ctx(&dev);
    for (int64_t rows = 3; rows <= 8; rows += 5) {
        opr_tensor *a = rand_on(ctx, dev, rows, 3), *b = rand_on(ctx, dev, 3, 2);
        opr_tensor *ca = opr_tensor_to(a, OPR_CPU), *cb = opr_tensor_to(b, OPR_CPU);
        mm_ran = 0;
        opr_tensor *y = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
        opr_tensor *want = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(ca), opr_v_tensor(cb)}, 2);
        ck_assert_int_eq(opr_tensor_device(y).type, dev.type);
        ck_assert(max_diff(y, want) <= 1e-15);
        ck_assert_int_eq(mm_ran, rows <= 4); /* 8 rows: asked, refused, not called */
        opr_tensor_release(want);
        opr_tensor_release(y);
        opr_tensor_release(ca);
        opr_tensor_release(cb);
        opr_tensor_release(a);
        opr_tensor_release(b);
    }
    ck_assert_int_ge(mm_asked, 2);
    opr_cpu_fallback_set(ctx, false);
    opr_tensor *a = rand_on(ctx, dev, 8, 3), *b = rand_on(ctx, dev, 3, 2);
    tu_expect_fail(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "mm (qdev, plugin qdev) supports: qdev mm: M > 4 not supported (M = 8)");
    ck_assert_int_eq(mm_ran_refused, 0);
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

/* The gradient of self and mat2 of mm(a, b) on dev, against the CPU's. */
static void check_backward(opr_ctx *ctx, opr_device dev, int64_t m, int64_t k)
{
    opr_tensor *a = rand_on(ctx, dev, m, k), *b = rand_on(ctx, dev, k, 2), *g = rand_on(ctx, dev, m, 2);
    opr_tensor *ca = opr_tensor_to(a, OPR_CPU), *cb = opr_tensor_to(b, OPR_CPU), *cg = opr_tensor_to(g, OPR_CPU);
    opr_tensor *in[4] = {a, b, ca, cb};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(opr_set_requires_grad(in[i], true), OPR_OK);
    opr_tensor *y = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
    opr_tensor *cy = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(ca), opr_v_tensor(cb)}, 2);
    ck_assert_msg(opr_backward(y, g, NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert_msg(opr_backward(cy, cg, NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert(max_diff(opr_grad(a), opr_grad(ca)) <= 1e-13);
    ck_assert(max_diff(opr_grad(b), opr_grad(cb)) <= 1e-13);
    opr_tensor *all[] = {y, cy, a, b, g, ca, cb, cg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}

/* opr_plan_explain's text for mm on dev (a: m x k, b: k x 2), gradients for `wrt`. */
static void explain(opr_ctx *ctx, opr_device dev, int64_t m, int64_t k, const char *wrt, char *buf, size_t len)
{
    opr_tensor *a = rand_on(ctx, dev, m, k), *b = rand_on(ctx, dev, k, 2);
    const char *names[2];
    int n = 0;
    if (strstr(wrt, "self")) names[n++] = "self";
    if (strstr(wrt, "mat2")) names[n++] = "mat2";
    ck_assert_msg(opr_plan_explain(opr_op_find(ctx, "mm"), (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2, names,
                                   n, buf, len) == OPR_OK, "%s", opr_last_error());
    opr_tensor_release(a);
    opr_tensor_release(b);
}

/* The planner asks supports on metadata before it picks the fused kernel: refused for
 * K > 8, the formulas run (the kernel is never called) and the plan says why. */
START_TEST(test_supports_planner)
{
    opr_device dev;
    opr_ctx *ctx = qdev_ctx(&dev);
    bw_cost = 1; /* the kernel wins wherever it may run */
    check_backward(ctx, dev, 3, 4);
    ck_assert_int_eq(bw_ran, 1);
    ck_assert(bw_asked_on_metadata);
    bw_ran = 0;
    check_backward(ctx, dev, 3, 12);
    ck_assert_int_eq(bw_ran, 0);
    ck_assert_int_eq(bw_ran_refused, 0);
    char text[8192];
    explain(ctx, dev, 3, 12, "self,mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "not a candidate: [self, mat2 (kernel mm_backward)], kernel mm_backward (plugin qdev) "
                               "refuses these arguments (supports: qdev mm_backward: K = 12 above 8)"),
                  "%s", text);
    ck_assert_msg(strstr(text, "chosen: [self] + [mat2]"), "%s", text);
    tu_ctx_free(ctx);
}
END_TEST

/* A plugin's cost_ns decides between its fused kernel and the formulas, and the plan
 * says whose estimate it used; without one, a tie goes to the kernel. */
START_TEST(test_plugin_cost)
{
    opr_device dev;
    opr_ctx *ctx = qdev_ctx(&dev);
    char text[8192];
    bw_cost = 1e9; /* a second: the formulas win */
    explain(ctx, dev, 3, 4, "self,mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "chosen: [self] + [mat2]") && strstr(text, "lowest estimated cost"), "%s", text);
    ck_assert_msg(strstr(text, "cost 1000000.0 us (the estimate of mm_backward (plugin qdev))"), "%s", text);
    bw_ran = 0;
    check_backward(ctx, dev, 3, 4);
    ck_assert_int_eq(bw_ran, 0);

    bw_cost = 1; /* a nanosecond: the kernel wins, on the plugin's word */
    /* plans are cached per metadata (an estimate may depend on nothing else): forcing
     * no candidate drops them */
    ck_assert_int_eq(opr_op_force_grad_candidate(opr_op_find(ctx, "mm"), -1), OPR_OK);
    explain(ctx, dev, 3, 4, "self,mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "chosen: [self, mat2 (kernel mm_backward)]") && strstr(text, "lowest estimated cost") &&
                      strstr(text, "costed with the estimate of mm_backward (plugin qdev)"),
                  "%s", text);
    check_backward(ctx, dev, 3, 4);
    ck_assert_int_eq(bw_ran, 1);

    /* "as expensive as can be": DBL_MAX and infinity are capped at 1e15 ns, not summed
     * into infinity nor printed with 309 digits; the formulas win */
    static const double huge[] = {DBL_MAX, INFINITY};
    for (int i = 0; i < 2; i++) {
        bw_cost = huge[i];
        ck_assert_int_eq(opr_op_force_grad_candidate(opr_op_find(ctx, "mm"), -1), OPR_OK);
        explain(ctx, dev, 3, 4, "self,mat2", text, sizeof text);
        ck_assert_msg(strstr(text, "chosen: [self] + [mat2]") && strstr(text, "lowest estimated cost") &&
                          strstr(text, "cost 1000000000000.0 us (the estimate of mm_backward (plugin qdev))") &&
                          !strstr(text, "inf"),
                      "%s", text);
    }
    /* and two capped estimates are a tie, settled by the usual rules */
    mm_cost = DBL_MAX;
    ck_assert_int_eq(opr_op_force_grad_candidate(opr_op_find(ctx, "mm"), -1), OPR_OK);
    explain(ctx, dev, 3, 4, "mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "a tie within 3%") && !strstr(text, "inf") && strlen(text) < 4000, "%s", text);
    mm_cost = NAN;
    ck_assert_int_eq(opr_op_force_grad_candidate(opr_op_find(ctx, "mm"), -1), OPR_OK);

    /* a forward kernel's estimate costs the formulas that call it */
    mm_cost = 5e6;
    bw_cost = NAN;
    explain(ctx, dev, 3, 4, "mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "candidate [mat2]\n      cost 5000.0 us (the estimate of mm (plugin qdev))"), "%s", text);

    /* no estimates: the formula for mat2 alone and the kernel cost the same (one mm,
     * one launch, the same saved self): the tie goes to the kernel */
    mm_cost = NAN;
    explain(ctx, dev, 3, 4, "mat2", text, sizeof text);
    ck_assert_msg(strstr(text, "chosen: [self, mat2 (kernel mm_backward) for mat2]") &&
                      strstr(text, "won on a fused kernel over formulas"),
                  "%s", text);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernel_query");
    TCase *tc = tcase_create("query");
    tcase_add_test(tc, test_supports_forward);
    tcase_add_test(tc, test_supports_planner);
    tcase_add_test(tc, test_plugin_cost);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
