/* Guard mode (opr_kernel_guards_set): a kernel that writes past or before its output,
 * or changes an input, fails the call under guards and names what it did; a correct
 * kernel gives the same results with guards as without, and its guarded outputs
 * behave as any tensor (views, copies, autograd). The faulty kernels run on device
 * "gdev", whose allocator leaves room on both sides of every block, so that without
 * guards their stray writes land in memory the test owns, and on "hdev", the same
 * device flagged as host memory, where outputs are followed by guard pages. */
#define _GNU_SOURCE /* sigaction, siginfo_t */
#include "test_util.h"

#include <opreg/plugin.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures/fx_copy.h"

/* ------------------------------------------------------------------ the device */

#define SLACK 256 /* bytes on each side of a gdev block */

static void *gdev_alloc(void *data, int32_t ordinal, size_t n)
{
    (void)data; (void)ordinal;
    char *p = calloc(1, n + 2 * SLACK);
    return p ? p + SLACK : NULL;
}
static void gdev_free(void *data, int32_t ordinal, void *p, size_t n)
{
    (void)data; (void)ordinal; (void)n;
    if (p) free((char *)p - SLACK);
}
static int gdev_copy(void *data, int32_t ordinal, void *dst, const void *src, size_t n)
{
    (void)data; (void)ordinal;
    if (n) memcpy(dst, src, n);
    return OPR_OK;
}

typedef enum fault { FAULT_NONE, FAULT_PAST, FAULT_PAST3, FAULT_FAR, FAULT_BEFORE, FAULT_BOTH, FAULT_INPUT } fault;
static fault fault_now;

/* out = -self (f32, contiguous), then the fault. */
static int k_neg(const opr_kernel_call *call)
{
    const opr_tensor_view *a = call->args[0]->u.t;
    opr_tensor_view *o = call->outputs[0];
    float *out = o->data, *in = a->data;
    for (int64_t k = 0; k < o->numel; k++) out[k] = -in[k];
    switch (fault_now) {
    case FAULT_PAST: out[o->numel] = 1; break;
    case FAULT_PAST3: out[o->numel] = out[o->numel + 1] = out[o->numel + 4] = 1; break;
    case FAULT_FAR: out[o->numel + 1000] = 1; break;
    case FAULT_BEFORE: out[-1] = 1; break;
    case FAULT_BOTH: out[-2] = out[o->numel] = 1; break;
    case FAULT_INPUT: in[0] += 1; break;
    case FAULT_NONE: break;
    }
    return OPR_OK;
}

/* out = self * other (f32, same shape, contiguous); FAULT_INPUT changes other. */
static int k_mul(const opr_kernel_call *call)
{
    const opr_tensor_view *a = call->args[0]->u.t, *b = call->args[1]->u.t;
    opr_tensor_view *o = call->outputs[0];
    float *out = o->data, *x = a->data, *y = b->data;
    for (int64_t k = 0; k < o->numel; k++) out[k] = x[k] * y[k];
    if (fault_now == FAULT_INPUT) y[0] = 7;
    return OPR_OK;
}

/* self.fill_(value) (f32): an in-place op, which changes its self. */
static int k_fill_(const opr_kernel_call *call)
{
    opr_tensor_view *o = call->outputs[0];
    float *x = o->data;
    for (int64_t k = 0; k < o->numel; k++) x[k] = (float)call->args[1]->u.d;
    return OPR_OK;
}

/* The faulty kernels on a device `name` of plugin `name`. */
static int init_device(const opr_host_api *host, opr_plugin *self, const char *name, uint64_t flags)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = name;
    self->version = "0.0.1";
    opr_device_desc dev = {
        .struct_size = sizeof dev, .name = name, .count = 1, .alloc = gdev_alloc, .free = gdev_free,
        .copy_to_host = gdev_copy, .copy_from_host = gdev_copy, .copy_device = gdev_copy, .flags = flags,
    };
    int rc = host->register_device(self, &dev);
    const struct { const char *op; opr_kernel_fn fn; } ks[] = {{"neg", k_neg}, {"mul", k_mul}, {"fill_", k_fill_}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && !rc; i++) {
        opr_kernel_desc k = {.struct_size = sizeof k, .op = ks[i].op, .device = name, .dtypes = OPR_DTYPE_BIT(OPR_F32),
                             .fn = ks[i].fn};
        rc = host->register_kernel(self, &k);
    }
    return rc ? rc : fx_register_copy(host, self, name);
}

/* gdev: device memory as far as the host knows (canaries only). */
static int init_gdev(const opr_host_api *host, opr_plugin *self) { return init_device(host, self, "gdev", 0); }
/* hdev: the same, flagged as host memory (guard pages too). */
static int init_hdev(const opr_host_api *host, opr_plugin *self)
{
    return init_device(host, self, "hdev", OPR_DEVICE_HOST_MEMORY);
}

static opr_ctx *gdev_ctx(opr_device *dev)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_gdev, NULL), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "gdev", dev), OPR_OK);
    return ctx;
}

static opr_tensor *gdev_vec(opr_ctx *ctx, opr_device dev, const float *v, int64_t n)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, 1, &n, v, dev);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* neg on gdev with fault f: the call's status, the message in msg. */
static int neg_with(opr_ctx *ctx, opr_device dev, fault f, char *msg, size_t len)
{
    opr_tensor *x = gdev_vec(ctx, dev, (const float[]){1, 2, 3, 4, 5}, 5), *r = NULL;
    opr_value args[1] = {opr_v_tensor(x)};
    fault_now = f;
    int rc = opr_call(opr_op_find(ctx, "neg"), args, 1, &r, 1);
    fault_now = FAULT_NONE;
    snprintf(msg, len, "%s", rc ? opr_last_error() : "");
    if (!rc) {
        float got[5];
        ck_assert_int_eq(opr_tensor_copy_to_host(r, got, sizeof got), OPR_OK);
        for (int k = 0; k < 5; k++) ck_assert(got[k] == -(float)(k + 1));
    } else {
        ck_assert_ptr_null(r);
    }
    opr_tensor_release(r);
    opr_tensor_release(x);
    return rc;
}

/* ------------------------------------------------------------------ faults */

START_TEST(test_overrun_caught)
{
    opr_device dev;
    opr_ctx *ctx = gdev_ctx(&dev);
    char msg[1024];
    ck_assert(!opr_kernel_guards_set(ctx, true)); /* off by default */
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_PAST, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_str_eq(msg, "neg on gdev wrote 1 element past its output (kernel of plugin gdev, found in guard mode)");
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_PAST3, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(msg, "neg on gdev wrote 3 elements past its output"), "%s", msg);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_BEFORE, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(msg, "neg on gdev wrote 1 element before its output ("), "%s", msg);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_BOTH, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(msg, "neg on gdev wrote 1 element before and 1 element past its output ("), "%s", msg);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_NONE, msg, sizeof msg), OPR_OK);

    /* guards off: the same kernels "pass" (their writes land in gdev's slack): it is
     * the mode that catches them */
    ck_assert(opr_kernel_guards_set(ctx, false));
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_PAST, msg, sizeof msg), OPR_OK);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_BEFORE, msg, sizeof msg), OPR_OK);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_INPUT, msg, sizeof msg), OPR_OK);
    tu_ctx_free(ctx);
}
END_TEST

/* The child's SIGSEGV handler: exits 42 when the fault lies 4000 bytes past the end of
 * a guarded output (FAULT_FAR: element numel + 1000 of an f32 output), 43 otherwise. */
static void on_guard_fault(int sig, siginfo_t *si, void *context)
{
    (void)sig; (void)context;
    _exit(opr_kernel_guard_overrun(si->si_addr) == 4000 ? 42 : 43);
}

/* On a device flagged OPR_DEVICE_HOST_MEMORY an output is followed by guard pages: a
 * near overrun is still counted in the canary, a far one faults in the guard page, and
 * opr_kernel_guard_overrun tells a fault handler how far past the output it was. */
START_TEST(test_guard_page_fault)
{
    opr_device dev;
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_hdev, NULL), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "hdev", &dev), OPR_OK);
    opr_kernel_guards_set(ctx, true);
    char msg[1024];
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_PAST3, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(msg, "neg on hdev wrote 3 elements past its output"), "%s", msg);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_PAST, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_NONE, msg, sizeof msg), OPR_OK);
    ck_assert_int_eq(opr_kernel_guard_overrun(msg), -1); /* not a guard page */
    ck_assert_int_eq(opr_kernel_guard_overrun(NULL), -1);

    /* a CPU output is page-guarded too: its data ends 64 to 127 bytes before a page
     * that opr_kernel_guard_overrun knows */
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){5}, (const float[]){1, 2, 3, 4, 5}, OPR_CPU);
    opr_tensor *y = tu_call1(ctx, "neg", (opr_value[]){opr_v_tensor(x)}, 1);
    const char *end = (const char *)opr_tensor_data(y) + 5 * sizeof(float);
    int64_t first = -1;
    for (int64_t k = 0; k < 128 && first < 0; k++)
        if (opr_kernel_guard_overrun(end + k) >= 0) first = k;
    ck_assert_int_ge(first, 64);
    ck_assert_int_eq(opr_kernel_guard_overrun(end + first + 100), first + 100);
    opr_tensor_release(y); /* its guard pages go with it */
    ck_assert_int_eq(opr_kernel_guard_overrun(end + first), -1);
    opr_tensor_release(x);

    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_guard_fault;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        neg_with(ctx, dev, FAULT_FAR, msg, sizeof msg);
        _exit(44); /* the stray write did not fault */
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 42, "child: %s %d",
                  WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_changed_input_caught)
{
    opr_device dev;
    opr_ctx *ctx = gdev_ctx(&dev);
    opr_kernel_guards_set(ctx, true);
    char msg[1024];
    ck_assert_int_eq(neg_with(ctx, dev, FAULT_INPUT, msg, sizeof msg), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(msg, "neg on gdev changed its input 'self' ("), "%s", msg);

    opr_tensor *a = gdev_vec(ctx, dev, (const float[]){1, 2, 3}, 3), *b = gdev_vec(ctx, dev, (const float[]){4, 5, 6}, 3);
    opr_tensor *r = NULL;
    opr_value args[2] = {opr_v_tensor(a), opr_v_tensor(b)};
    fault_now = FAULT_INPUT;
    ck_assert_int_eq(opr_call(opr_op_find(ctx, "mul"), args, 2, &r, 1), OPR_ERR_BACKEND);
    fault_now = FAULT_NONE;
    ck_assert_msg(strstr(opr_last_error(), "mul on gdev changed its input 'other' ("), "%s", opr_last_error());
    ck_assert_ptr_null(r);

    /* an in-place op changes its self: no finding */
    opr_tensor *c = gdev_vec(ctx, dev, (const float[]){-1, 2, -3}, 3);
    opr_value args1[2] = {opr_v_tensor(c), opr_v_double(2.5)};
    ck_assert_msg(opr_call(opr_op_find(ctx, "fill_"), args1, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    float got[3];
    ck_assert_int_eq(opr_tensor_copy_to_host(c, got, sizeof got), OPR_OK);
    ck_assert(got[0] == 2.5f && got[1] == 2.5f && got[2] == 2.5f);
    opr_tensor_release(r);
    opr_tensor_release(a);
    opr_tensor_release(b);
    opr_tensor_release(c);
    tu_ctx_free(ctx);
}
END_TEST

/* sqrt_backward on the cpu, overriding the CPU plugin's: 0.5 / result, then one
 * element past its output (only ever run with guards on, whose region it hits). */
static int k_sqrt_backward_past(const opr_kernel_call *call)
{
    const opr_tensor_view *g = call->args[0]->u.t, *res = call->args[2]->u.t;
    opr_tensor_view *o = call->outputs[0];
    double *out = o->data;
    const double *gv = g->data, *rv = res->data;
    for (int64_t k = 0; k < o->numel; k++) out[k] = gv[k * g->strides[0]] * 0.5 / rv[k * res->strides[0]];
    out[o->numel] = 0;
    return OPR_OK;
}

static int init_bad_backward(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "bad_backward";
    self->version = "0.0.1";
    opr_kernel_desc k = {.struct_size = sizeof k, .op = "sqrt_backward", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F64),
                         .fn = k_sqrt_backward_past, .override_dtypes = OPR_DTYPE_BIT(OPR_F64)};
    return host->register_kernel(self, &k);
}

START_TEST(test_fused_backward_guarded)
{
    opr_ctx *ctx = tu_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_bad_backward, NULL), OPR_OK);
    const opr_op *sq = opr_op_find(ctx, "sqrt");
    int cand = -1;
    for (int i = 0; i < opr_op_grad_candidate_count(sq); i++)
        if (strstr(opr_op_grad_candidate_label(sq, i), "sqrt_backward")) cand = i;
    ck_assert_int_ge(cand, 0);
    ck_assert_int_eq(opr_op_force_grad_candidate(sq, cand), OPR_OK);
    opr_kernel_guards_set(ctx, true);
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){4}, (const double[]){1, 4, 9, 16}, OPR_CPU);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *y = tu_call1(ctx, "sqrt", (opr_value[]){opr_v_tensor(x)}, 1);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(y)}, 1);
    ck_assert_int_eq(opr_backward(s, NULL, NULL), OPR_ERR_BACKEND);
    ck_assert_msg(strstr(opr_last_error(), "sqrt_backward on cpu wrote 1 element past its output (the gradient of 'self') "
                                           "(kernel of plugin bad_backward"),
                  "%s", opr_last_error());
    opr_op_force_grad_candidate(sq, -1);
    opr_tensor_release(s);
    opr_tensor_release(y);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ correct kernels */

/* A few CPU ops and a backward, with guards on or off: every result, and the
 * gradients, as f64 one after the other. */
static double *run_cpu(bool guards, int64_t *n)
{
    opr_ctx *ctx = tu_ctx();
    opr_kernel_guards_set(ctx, guards);
    tu_seed(11);
    opr_tensor *a = tu_rand(ctx, OPR_F64, 2, (int64_t[]){5, 7}, -1, 1), *b = tu_rand(ctx, OPR_F64, 2, (int64_t[]){7, 3}, -1, 1);
    opr_set_requires_grad(a, true);
    opr_set_requires_grad(b, true);
    opr_tensor *outs[8] = {NULL};
    int no = 0;
    outs[no++] = tu_call1(ctx, "mm", (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
    outs[no++] = tu_call1(ctx, "softmax", (opr_value[]){opr_v_tensor(outs[0]), opr_v_int(1)}, 2);
    opr_tensor *mx[2];
    ck_assert_int_eq(opr_call_by_name(ctx, "max.dim", (opr_value[]){opr_v_tensor(a), opr_v_int(1)}, 2, mx, 2), OPR_OK);
    outs[no++] = mx[0];
    outs[no++] = mx[1];
    /* a guarded output used as any tensor: a transposed view, a copy, a reshape */
    opr_tensor *t = opr_tensor_transpose(outs[1], 0, 1);
    outs[no++] = opr_tensor_contiguous(t);
    outs[no++] = opr_tensor_reshape(outs[0], (int64_t[]){15}, 1);
    opr_tensor_release(t);
    opr_tensor *loss = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(outs[1])}, 1);
    ck_assert_int_eq(opr_backward(loss, NULL, NULL), OPR_OK);
    outs[no++] = opr_tensor_retain(opr_grad(a));
    outs[no++] = opr_tensor_retain(opr_grad(b));
    if (guards) ck_assert_int_gt(opr_tensor_offset(outs[0]), 0); /* the front guard */
    int64_t total = 0;
    for (int i = 0; i < no; i++) total += opr_tensor_numel(outs[i]);
    double *all = malloc((size_t)total * sizeof *all);
    *n = 0;
    for (int i = 0; i < no; i++) {
        ck_assert_int_eq(opr_tensor_copy_to_host_f64(outs[i], all + *n, total - *n), OPR_OK);
        *n += opr_tensor_numel(outs[i]);
        opr_tensor_release(outs[i]);
    }
    opr_tensor_release(loss);
    opr_tensor_release(a);
    opr_tensor_release(b);
    tu_ctx_free(ctx); /* no tensor leaked, guarded storages included */
    return all;
}

START_TEST(test_correct_kernels_pass)
{
    int64_t n0, n1;
    double *off = run_cpu(false, &n0), *on = run_cpu(true, &n1);
    ck_assert_int_eq(n0, n1);
    for (int64_t j = 0; j < n0; j++) ck_assert_msg(off[j] == on[j], "element %lld: %g vs %g", (long long)j, off[j], on[j]);
    free(off);
    free(on);
}
END_TEST

/* Every op's every sample on the CPU in f64 with guards on: the CPU plugin's kernels
 * neither overrun nor change inputs (a call refused for its arguments is fine). */
START_TEST(test_cpu_kernels_clean)
{
    opr_ctx *ctx = tu_ctx();
    opr_kernel_guards_set(ctx, true);
    int ran = 0;
    for (int o = 0; o < opr_op_count(ctx); o++) {
        const opr_op *op = opr_op_at(ctx, o);
        for (int i = 0; i < opr_op_sample_count(op); i++) {
            opr_value args[16];
            opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS], *res[64] = {NULL};
            int nargs, nowned = 0, count = 0;
            if (opr_op_sample_args(op, i, OPR_F64, OPR_CPU, 5, args, &nargs, owned, &nowned) == OPR_OK &&
                !opr_op_result_count(op, args, nargs, &count) && count && count <= 64) {
                int rc = opr_call(op, args, nargs, res, count);
                ck_assert_msg(rc != OPR_ERR_BACKEND || !strstr(opr_last_error(), "guard mode"), "%s sample %d: %s",
                              opr_op_name(op), i, opr_last_error());
                ran += !rc;
            }
            for (int r = 0; r < 64; r++) opr_tensor_release(res[r]);
            for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
        }
    }
    ck_assert_int_gt(ran, 150);
    tu_ctx_free(ctx);
}
END_TEST

/* Every sample of a few ops on every other device the context has (the emulated CUDA
 * plugin, where the build has it), guarded: no finding, and the results of the
 * unguarded calls. */
START_TEST(test_guards_on_devices)
{
    opr_ctx *ctx = tu_ctx();
    int compared = 0;
    static const char *const ops[] = {"mul", "mm", "sum", "max.dim", "softmax", "cat", "embedding"};
    for (int type = 1; type < opr_device_type_count(ctx); type++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            const opr_op *op = opr_op_find(ctx, ops[o]);
            for (int i = 0; op && i < opr_op_sample_count(op); i++) {
                double *got[2] = {NULL, NULL};
                int64_t n[2] = {0, 0};
                for (int g = 0; g < 2; g++) {
                    opr_kernel_guards_set(ctx, g == 1);
                    opr_value args[16];
                    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS], *res[4] = {NULL};
                    int nargs, nowned = 0;
                    ck_assert_int_eq(opr_op_sample_args(op, i, OPR_F32, (opr_device){type, 0}, 5, args, &nargs, owned, &nowned),
                                     OPR_OK);
                    int nres = opr_op_num_outputs(op);
                    ck_assert_msg(opr_call(op, args, nargs, res, nres) == OPR_OK, "%s on %s: %s", ops[o],
                                  opr_device_type_name(ctx, type), opr_last_error());
                    got[g] = malloc(1 << 16);
                    for (int r = 0; r < nres; r++) {
                        ck_assert_int_eq(opr_tensor_copy_to_host_f64(res[r], got[g] + n[g], (1 << 13) - n[g]), OPR_OK);
                        n[g] += opr_tensor_numel(res[r]);
                        opr_tensor_release(res[r]);
                    }
                    for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
                }
                ck_assert_int_eq(n[0], n[1]);
                for (int64_t j = 0; j < n[0]; j++) ck_assert(got[0][j] == got[1][j]);
                free(got[0]);
                free(got[1]);
                compared++;
            }
        }
    if (opr_device_type_count(ctx) > 1) ck_assert_int_gt(compared, 5);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernel_guards");
    TCase *tc = tcase_create("guards");
    tcase_add_test(tc, test_overrun_caught);
    tcase_add_test(tc, test_guard_page_fault);
    tcase_add_test(tc, test_changed_input_caught);
    tcase_add_test(tc, test_fused_backward_guarded);
    tcase_add_test(tc, test_correct_kernels_pass);
    tcase_add_test(tc, test_cpu_kernels_clean);
    tcase_add_test(tc, test_guards_on_devices);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
