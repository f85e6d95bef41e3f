/* The oneDNN plugin (plugins/onednn) against the CPU plugin on the geometries its
 * primitives need care with, which the convolution samples of `opreg check`
 * (check_onednn) do not all reach: a transposed convolution whose output_padding goes
 * past what the windows reach (the big image cropped), windows that lie wholly in the
 * padding, a stride that leaves a remainder (negative right padding), depthwise groups
 * on a non-contiguous input, 1-d and 3-d, an empty batch; forward and the three
 * gradients of convolution_backward, each in a context with the CPU plugin alone and one
 * with the oneDNN plugin loaded over it. Also: the oneDNN kernels are the ones chosen,
 * a repeated call (a cached primitive) gives the same result, and threads running the
 * same primitives at once get the results they get alone. */
#include "test_util.h"

#include <opreg/opreg.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_case {
    const char *what;
    int ndim;
    int64_t x[5], w[5];
    bool bias, transposed, permuted; /* permuted: the input is a transposed view (last two dims) */
    int64_t stride, padding, dilation, output_padding, groups;
} conv_case;

static const conv_case cases[] = {
    {"transposed, output_padding past the windows' reach", 3, {2, 4, 5}, {4, 3, 3}, true, true, false, 1, 0, 2, 1, 1},
    {"every window in the padding", 4, {2, 2, 1, 1}, {3, 2, 1, 1}, true, false, false, 3, 1, 1, 0, 1},
    {"1x1 stride 2 on an odd size", 4, {2, 8, 7, 7}, {16, 8, 1, 1}, false, false, false, 2, 0, 1, 0, 1},
    {"depthwise on a non-contiguous input", 4, {2, 6, 5, 7}, {6, 1, 3, 3}, true, false, true, 1, 1, 1, 0, 6},
    {"3-d, groups, dilation and stride", 5, {1, 4, 5, 6, 5}, {6, 2, 2, 3, 2}, true, false, false, 2, 1, 2, 0, 2},
    {"transposed 2-d, groups, stride", 4, {2, 4, 3, 4}, {4, 3, 3, 2}, true, true, false, 2, 1, 1, 1, 2},
    {"1-d, dilation", 3, {3, 5, 11}, {4, 5, 3}, false, false, false, 1, 2, 3, 0, 1},
    {"empty batch", 4, {0, 3, 4, 4}, {2, 3, 3, 3}, true, false, false, 1, 1, 1, 0, 1},
};

static opr_ctx *onednn_ctx(void)
{
    const char *path = OPREG_ONEDNN_PLUGIN_FILE;
    const opr_ctx_opts o = {.struct_size = sizeof o, .plugin_paths = &path, .n_plugin_paths = 1};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    return ctx;
}

/* The same random f32 values as a tensor of each context. */
static void twin(opr_ctx *a, opr_ctx *b, int ndim, const int64_t *shape, opr_tensor **ta, opr_tensor **tb)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)tu_uniform(-1, 1);
    *ta = opr_tensor_from_data(a, OPR_F32, ndim, shape, v, OPR_CPU);
    *tb = opr_tensor_from_data(b, OPR_F32, ndim, shape, v, OPR_CPU);
    free(v);
    ck_assert(*ta && *tb);
}

static void expect_close(const char *what, const char *which, opr_tensor *got, opr_tensor *ref)
{
    ck_assert_int_eq(opr_tensor_ndim(got), opr_tensor_ndim(ref));
    ck_assert(!memcmp(opr_tensor_shape(got), opr_tensor_shape(ref), (size_t)opr_tensor_ndim(ref) * sizeof(int64_t)));
    double *g = tu_to_f64(got), *r = tu_to_f64(ref);
    for (int64_t i = 0; i < opr_tensor_numel(ref); i++)
        ck_assert_msg(fabs(g[i] - r[i]) <= 1e-5 + 1e-4 * fabs(r[i]), "%s: %s element %lld: %.8g, CPU plugin %.8g", what,
                      which, (long long)i, g[i], r[i]);
    free(g);
    free(r);
}

/* The case's input (permuted: the transpose of its last two dims, a strided view). */
static opr_tensor *input_view(opr_ctx *ctx, const conv_case *c, opr_tensor *t)
{
    if (!c->permuted) return opr_tensor_retain(t);
    const opr_value args[] = {opr_v_tensor(t), opr_v_int(c->ndim - 2), opr_v_int(c->ndim - 1)};
    return tu_call1(ctx, "transpose", args, 3);
}

/* forward and convolution_backward of case c in ctx: results y, dx, dw, db */
static void run_case(opr_ctx *ctx, const conv_case *c, opr_tensor *x, opr_tensor *w, opr_tensor *b, opr_tensor *gy,
                     opr_tensor *out[4])
{
    const int64_t st = c->stride, pad = c->padding, dil = c->dilation, op = c->output_padding, mask[3] = {1, 1, 1};
    const int64_t bias_size = opr_tensor_shape(w)[c->transposed ? 1 : 0] * (c->transposed ? c->groups : 1);
    opr_tensor *xv = input_view(ctx, c, x);
    const opr_value fwd[] = {opr_v_tensor(xv), opr_v_tensor(w), b ? opr_v_tensor(b) : opr_v_none(), opr_v_ints(&st, 1),
                             opr_v_ints(&pad, 1), opr_v_ints(&dil, 1), opr_v_bool(c->transposed), opr_v_ints(&op, 1),
                             opr_v_int(c->groups)};
    out[0] = tu_call1(ctx, "convolution", fwd, 9);
    if (gy) {
        const opr_value bwd[] = {opr_v_tensor(gy), opr_v_tensor(xv), opr_v_tensor(w), opr_v_ints(&bias_size, 1),
                                 opr_v_ints(&st, 1), opr_v_ints(&pad, 1), opr_v_ints(&dil, 1), opr_v_bool(c->transposed),
                                 opr_v_ints(&op, 1), opr_v_int(c->groups), opr_v_ints(mask, 3)};
        const int rc = opr_call(opr_op_find(ctx, "convolution_backward"), bwd, 11, out + 1, 3);
        ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    }
    opr_tensor_release(xv);
}

START_TEST(test_kernels_chosen)
{
    opr_ctx *ctx = onednn_ctx();
    static const char *const ops[] = {"convolution", "convolution_backward", "convolution_backward_weight",
                                      "convolution_backward_fused"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        opr_kernel_info k = {.struct_size = sizeof k};
        ck_assert_int_eq(opr_op_kernel_info(opr_op_find(ctx, ops[i]), OPR_CPU.type, OPR_F32, &k), OPR_OK);
        ck_assert_str_eq(k.plugin, "onednn");
        ck_assert_str_eq(k.shadowed, "cpu");
        ck_assert(k.overrides);
        /* f64, the reference, stays the CPU plugin's */
        ck_assert_int_eq(opr_op_kernel_info(opr_op_find(ctx, ops[i]), OPR_CPU.type, OPR_F64, &k), OPR_OK);
        ck_assert_str_eq(k.plugin, "cpu");
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_against_cpu)
{
    const conv_case *c = &cases[_i];
    opr_ctx *ref = tu_ctx(), *dnn = onednn_ctx();
    tu_seed(7 + (uint64_t)_i);
    int64_t xs[5];
    memcpy(xs, c->x, sizeof xs);
    if (c->permuted) { /* stored with the last two dims swapped, read through the transpose */
        xs[c->ndim - 1] = c->x[c->ndim - 2];
        xs[c->ndim - 2] = c->x[c->ndim - 1];
    }
    opr_tensor *x[2], *w[2], *b[2] = {NULL, NULL}, *gy[2] = {NULL, NULL}, *r[2][4] = {{0}};
    twin(ref, dnn, c->ndim, xs, &x[0], &x[1]);
    twin(ref, dnn, c->ndim, c->w, &w[0], &w[1]);
    const int64_t nb = c->transposed ? c->w[1] * c->groups : c->w[0];
    if (c->bias) twin(ref, dnn, 1, &nb, &b[0], &b[1]);
    run_case(ref, c, x[0], w[0], b[0], NULL, r[0]);
    twin(ref, dnn, opr_tensor_ndim(r[0][0]), opr_tensor_shape(r[0][0]), &gy[0], &gy[1]);
    opr_tensor_release(r[0][0]);
    run_case(ref, c, x[0], w[0], b[0], gy[0], r[0]);
    run_case(dnn, c, x[1], w[1], b[1], gy[1], r[1]);
    static const char *const names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
    for (int k = 0; k < 4; k++) expect_close(c->what, names[k], r[1][k], r[0][k]);
    /* again: the cached primitive, the same numbers */
    opr_tensor *again[4] = {0};
    run_case(dnn, c, x[1], w[1], b[1], gy[1], again);
    for (int k = 0; k < 4; k++) {
        double *p = tu_to_f64(again[k]), *q = tu_to_f64(r[1][k]);
        ck_assert(!memcmp(p, q, (size_t)opr_tensor_numel(again[k]) * sizeof *p));
        free(p);
        free(q);
        opr_tensor_release(again[k]);
    }
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < 4; k++) opr_tensor_release(r[s][k]);
        opr_tensor_release(x[s]);
        opr_tensor_release(w[s]);
        opr_tensor_release(b[s]);
        opr_tensor_release(gy[s]);
    }
    tu_ctx_free(dnn);
    tu_ctx_free(ref);
}
END_TEST

/* Threads sharing one context (and so the cached primitives): each runs its own
 * geometry and one they all share, and must get what it got alone. */
typedef struct thread_job {
    opr_ctx *ctx;
    const conv_case *c;
    opr_tensor *x, *w, *b, *gy;
    double *want[4];
    int bad;
} thread_job;

static void *thread_run(void *p)
{
    thread_job *j = p;
    for (int rep = 0; rep < 8; rep++) {
        opr_tensor *r[4] = {0};
        run_case(j->ctx, j->c, j->x, j->w, j->b, j->gy, r);
        for (int k = 0; k < 4; k++) {
            double *v = tu_to_f64(r[k]);
            if (memcmp(v, j->want[k], (size_t)opr_tensor_numel(r[k]) * sizeof *v)) j->bad++;
            free(v);
            opr_tensor_release(r[k]);
        }
    }
    return NULL;
}

START_TEST(test_threads_share_primitives)
{
    opr_ctx *ctx = onednn_ctx();
    enum { NT = 4 };
    thread_job jobs[NT];
    pthread_t th[NT];
    tu_seed(99);
    for (int t = 0; t < NT; t++) {
        thread_job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->ctx = ctx;
        j->c = &cases[t % 2 ? 4 : 3 + t / 2 * 2]; /* cases 3, 4, 5, 4: two share one geometry */
        opr_tensor *unused;
        int64_t xs[5];
        memcpy(xs, j->c->x, sizeof xs);
        if (j->c->permuted) {
            xs[j->c->ndim - 1] = j->c->x[j->c->ndim - 2];
            xs[j->c->ndim - 2] = j->c->x[j->c->ndim - 1];
        }
        twin(ctx, ctx, j->c->ndim, xs, &j->x, &unused);
        opr_tensor_release(unused);
        twin(ctx, ctx, j->c->ndim, j->c->w, &j->w, &unused);
        opr_tensor_release(unused);
        const int64_t nb = j->c->transposed ? j->c->w[1] * j->c->groups : j->c->w[0];
        if (j->c->bias) {
            twin(ctx, ctx, 1, &nb, &j->b, &unused);
            opr_tensor_release(unused);
        }
        opr_tensor *r[4] = {0};
        run_case(ctx, j->c, j->x, j->w, j->b, NULL, r);
        twin(ctx, ctx, opr_tensor_ndim(r[0]), opr_tensor_shape(r[0]), &j->gy, &unused);
        opr_tensor_release(unused);
        opr_tensor_release(r[0]);
        run_case(ctx, j->c, j->x, j->w, j->b, j->gy, r); /* alone, first */
        for (int k = 0; k < 4; k++) {
            j->want[k] = tu_to_f64(r[k]);
            opr_tensor_release(r[k]);
        }
    }
    for (int t = 0; t < NT; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, thread_run, &jobs[t]), 0);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) {
        ck_assert_msg(jobs[t].bad == 0, "thread %d (%s): %d results differ from the ones it got alone", t,
                      jobs[t].c->what, jobs[t].bad);
        for (int k = 0; k < 4; k++) free(jobs[t].want[k]);
        opr_tensor_release(jobs[t].x);
        opr_tensor_release(jobs[t].w);
        opr_tensor_release(jobs[t].b);
        opr_tensor_release(jobs[t].gy);
    }
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("onednn");
    TCase *t = tcase_create("onednn");
    tcase_add_test(t, test_kernels_chosen);
    tcase_add_loop_test(t, test_against_cpu, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(t, test_threads_share_primitives);
    suite_add_tcase(s, t);
    return tu_run(s);
}
