/* Run-time refusal (ABI 2.2): a kernel that returns OPR_ERR_UNSUPPORTED means "not for
 * these arguments". With the CPU fallback on, a refused forward runs on the CPU with
 * copies and a refused fused backward kernel gives way to the op's formulas, each
 * logged once per op, device and reason with the plugin's message; with the fallback
 * off the error carries that message. Device "rdev" (host memory) has an mm that
 * refuses more than 4 rows, as a firmware limit would, and an mm_backward that refuses
 * everything. */
#include "test_util.h"

#include <opreg/plugin.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fixtures/fx_copy.h"
#include "fixtures/fx_hostmem.h"

static int mm_ran, mm_refused, mm_backward_refused;

/* self (M x K) @ mat2 (K x N), f64, any strides; refuses M > 4. */
static int k_mm(const opr_kernel_call *call)
{
    const opr_tensor_view *a = call->args[0]->u.t, *b = call->args[1]->u.t;
    opr_tensor_view *o = call->outputs[0];
    if (a->shape[0] > 4) {
        mm_refused++;
        call->host->set_error(call, "rdev mm: M > 4 not supported by this firmware (M = %lld)", (long long)a->shape[0]);
        return OPR_ERR_UNSUPPORTED;
    }
    mm_ran++;
    const double *x = a->data, *y = b->data;
    double *z = o->data;
    for (int64_t i = 0; i < a->shape[0]; i++)
        for (int64_t j = 0; j < b->shape[1]; j++) {
            double acc = 0;
            for (int64_t k = 0; k < a->shape[1]; k++) acc += x[i * a->strides[0] + k * a->strides[1]] * y[k * b->strides[0] + j * b->strides[1]];
            z[i * o->strides[0] + j * o->strides[1]] = acc;
        }
    return OPR_OK;
}

static int unwanted_views_ok = -1; /* 1: every unwanted gradient's view was all zero (plugin.h) */

/* args: grad, self, mat2, result; outputs: the gradients of self and mat2. */
static int k_mm_backward(const opr_kernel_call *call)
{
    for (int p = 0; p < 2; p++) {
        if (call->grad_input_mask >> p & 1) continue;
        const opr_tensor_view *o = call->outputs[p];
        bool ok = !o->data && o->ndim == 0 && !o->shape && !o->strides && o->numel == 0;
        unwanted_views_ok = unwanted_views_ok != 0 && ok;
    }
    mm_backward_refused++;
    call->host->set_error(call, "rdev mm_backward: not in this firmware");
    return OPR_ERR_UNSUPPORTED;
}

static int init_rdev(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "rdev";
    self->version = "0.0.1";
    opr_device_desc dev = {
        .struct_size = sizeof dev, .name = "rdev", .count = 1, .alloc = fx_host_alloc, .free = fx_host_free,
        .copy_to_host = fx_host_copy, .copy_from_host = fx_host_copy, .copy_device = fx_host_copy,
        .flags = OPR_DEVICE_HOST_MEMORY,
    };
    int rc = host->register_device(self, &dev);
    const struct { const char *op; opr_kernel_fn fn; } ks[] = {{"mm", k_mm}, {"mm_backward", k_mm_backward}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && !rc; i++) {
        opr_kernel_desc k = {.struct_size = sizeof k, .op = ks[i].op, .device = "rdev", .dtypes = OPR_DTYPE_BIT(OPR_F64),
                             .fn = ks[i].fn};
        rc = host->register_kernel(self, &k);
    }
    return rc ? rc : fx_register_copy(host, self, "rdev");
}

/* A random f64 rows x cols tensor on dev (tu_rand's values, moved there). */
static opr_tensor *rand_on(opr_ctx *ctx, opr_device dev, int64_t rows, int64_t cols)
{
    opr_tensor *host = tu_rand(ctx, OPR_F64, 2, (int64_t[]){rows, cols}, -1, 1), *t = opr_tensor_to(host, dev);
    opr_tensor_release(host);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* The log's refusal lines. */
static char refusal_log[4096];
static int refusal_lines;
static void capture(opr_log_level level, const char *source, const char *message, void *user)
{
    (void)level; (void)source; (void)user;
    if (!strstr(message, "refused these arguments")) return;
    refusal_lines++;
    size_t used = strlen(refusal_log);
    snprintf(refusal_log + used, sizeof refusal_log - used, "%s\n", message);
}

/* Five SGD steps of loss = sum((x @ W)^2) for W (3 x 2) on dev, x (rows x 3): the
 * losses. */
static void train(opr_ctx *ctx, opr_device dev, int64_t rows, double *losses)
{
    tu_seed(5);
    opr_tensor *x = rand_on(ctx, dev, rows, 3);
    double w[6];
    for (int k = 0; k < 6; k++) w[k] = tu_uniform(-1, 1);
    for (int step = 0; step < 5; step++) {
        opr_tensor *wc = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){3, 2}, w, OPR_CPU);
        opr_tensor *W = opr_tensor_to(wc, dev);
        ck_assert_int_eq(opr_set_requires_grad(W, true), OPR_OK);
        opr_tensor *y = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(x), opr_v_tensor(W)}, 2);
        opr_tensor *y2 = tu_call1(ctx, "mul", (opr_value[]){opr_v_tensor(y), opr_v_tensor(y)}, 2);
        opr_tensor *loss = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y2)}, 1);
        ck_assert_msg(opr_backward(loss, NULL, NULL) == OPR_OK, "%s", opr_last_error());
        double g[6];
        ck_assert_int_eq(opr_tensor_copy_to_host(opr_grad(W), g, sizeof g), OPR_OK);
        ck_assert_int_eq(opr_tensor_copy_to_host(loss, &losses[step], sizeof losses[step]), OPR_OK);
        for (int k = 0; k < 6; k++) w[k] -= 0.01 * g[k];
        opr_tensor_release(loss);
        opr_tensor_release(y2);
        opr_tensor_release(y);
        opr_tensor_release(W);
        opr_tensor_release(wc);
    }
    opr_tensor_release(x);
}

static opr_ctx *rdev_ctx(opr_device *dev)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_rdev, NULL), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "rdev", dev), OPR_OK);
    mm_ran = mm_refused = mm_backward_refused = 0;
    refusal_log[0] = 0;
    refusal_lines = 0;
    opr_log_set(capture, NULL);
    return ctx;
}

/* Refused for 8 rows, taken for 3: the same losses as the CPU either way, the refusal
 * logged once although it happened at every step. */
START_TEST(test_refused_forward_falls_back)
{
    opr_device dev;
    opr_ctx *ctx = rdev_ctx(&dev);
    for (int64_t rows = 3; rows <= 8; rows += 5) {
        double on_dev[5], on_cpu[5];
        mm_ran = mm_refused = 0;
        train(ctx, dev, rows, on_dev);
        train(ctx, OPR_CPU, rows, on_cpu);
        for (int s = 0; s < 5; s++)
            ck_assert_msg(fabs(on_dev[s] - on_cpu[s]) <= 1e-12 * fabs(on_cpu[s]), "%lld rows, step %d: %.17g vs %.17g",
                          (long long)rows, s, on_dev[s], on_cpu[s]);
        if (rows > 4) ck_assert_int_ge(mm_refused, 5);
        else ck_assert_int_ge(mm_ran, 5); /* the forward and the backward formulas' mm */
    }
    ck_assert_msg(strstr(refusal_log, "mm on rdev: the kernel refused these arguments at run time") &&
                      strstr(refusal_log, "M > 4 not supported by this firmware") &&
                      strstr(refusal_log, "running it on the cpu with copies in and out"),
                  "%s", refusal_log);
    /* once per (op, device, reason): the message names M, which was 8 each time the
     * forward was refused; the backward's mm(t(x), grad) has 3 rows and ran */
    int forward_lines = 0;
    for (const char *p = refusal_log; (p = strstr(p, "mm on rdev: the kernel refused")); p++) forward_lines++;
    ck_assert_int_eq(forward_lines, 1);
    opr_log_set(NULL, NULL);
    tu_ctx_free(ctx);
}
END_TEST

/* With the fallback off the refusal is the call's error, with the plugin's message. */
START_TEST(test_refusal_without_fallback)
{
    opr_device dev;
    opr_ctx *ctx = rdev_ctx(&dev);
    opr_cpu_fallback_set(ctx, false);
    opr_tensor *a = rand_on(ctx, dev, 8, 3), *b = rand_on(ctx, dev, 3, 2);
    tu_expect_fail(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2, 1, OPR_ERR_UNSUPPORTED,
                   "mm (rdev, plugin rdev): rdev mm: M > 4 not supported by this firmware (M = 8)");
    ck_assert_int_eq(refusal_lines, 0);
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_log_set(NULL, NULL);
    tu_ctx_free(ctx);
}
END_TEST

/* A fused backward kernel that refuses gives way to the formulas (with the fallback
 * on) or fails the backward with its message (off). */
START_TEST(test_refused_fused_backward)
{
    opr_device dev;
    opr_ctx *ctx = rdev_ctx(&dev);
    const opr_op *mm = opr_op_find(ctx, "mm");
    int cand = -1;
    for (int i = 0; i < opr_op_grad_candidate_count(mm); i++)
        if (strstr(opr_op_grad_candidate_label(mm, i), "mm_backward")) cand = i;
    ck_assert_int_ge(cand, 0);
    ck_assert_int_eq(opr_op_force_grad_candidate(mm, cand), OPR_OK);
    double on_dev[5], on_cpu[5];
    train(ctx, dev, 3, on_dev);
    ck_assert_int_ge(mm_backward_refused, 5);
    ck_assert_int_eq(unwanted_views_ok, 1); /* only W requires grad: x's gradient is not wanted */
    train(ctx, OPR_CPU, 3, on_cpu);
    for (int s = 0; s < 5; s++) ck_assert(fabs(on_dev[s] - on_cpu[s]) <= 1e-12 * fabs(on_cpu[s]));
    ck_assert_msg(strstr(refusal_log, "mm_backward on rdev: the kernel refused these arguments at run time") &&
                      strstr(refusal_log, "rdev mm_backward: not in this firmware") &&
                      strstr(refusal_log, "derivative formulas"),
                  "%s", refusal_log);

    opr_cpu_fallback_set(ctx, false);
    opr_tensor *a = rand_on(ctx, dev, 3, 3), *b = rand_on(ctx, dev, 3, 2);
    opr_set_requires_grad(b, true);
    opr_tensor *y = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
    opr_tensor *g = rand_on(ctx, dev, 3, 2);
    ck_assert_int_eq(opr_backward(y, g, NULL), OPR_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(opr_last_error(), "rdev mm_backward: not in this firmware"), "%s", opr_last_error());
    opr_op_force_grad_candidate(mm, -1);
    opr_tensor_release(g);
    opr_tensor_release(y);
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_log_set(NULL, NULL);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime_refusal");
    TCase *tc = tcase_create("refusal");
    tcase_add_test(tc, test_refused_forward_falls_back);
    tcase_add_test(tc, test_refusal_without_fallback);
    tcase_add_test(tc, test_refused_fused_backward);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
