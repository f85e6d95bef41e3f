/* Convolutional networks on the CPU against PyTorch (bench/conv_torch.py, run as a
 * subprocess, same threads): conv2d forward + backward (input and weight gradients) on
 * ResNet-18's layer shapes, and training steps of a ResNet-18 (examples/resnet: width 64,
 * two BasicBlocks per stage) against torchvision's resnet18 with SGD, f32. opreg runs
 * twice: with the CPU plugin alone (unfold + OpenBLAS GEMM) and with the oneDNN plugin
 * (plugins/onednn) loaded over it, where it was built. Prints one table of milliseconds
 * and ratios (opreg / PyTorch; below 1 is faster).
 *
 *   opreg_bench_conv [--threads N] [--reps N] [--batch N] [--image N]
 *
 * Defaults: 1 thread, 5 repetitions (median), batch 8, 64x64 training images (the layer
 * table uses ResNet-18's shapes at 224x224). */
#include "bench_onednn.h"
#include "bench_python.h"
#include "bench_timing.h"

#include "resnet/resnet_model.h"
#include "resnet/resnet_train.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
    const char *name;
    int64_t cin, cout, k, stride, pad, hw;
} layer;

static const layer layers[] = {
    {"conv1", 3, 64, 7, 2, 3, 224},        {"layer1", 64, 64, 3, 1, 1, 56},       {"layer2.down", 64, 128, 3, 2, 1, 56},
    {"layer2", 128, 128, 3, 1, 1, 28},     {"layer3.down", 128, 256, 3, 2, 1, 28}, {"layer3", 256, 256, 3, 1, 1, 14},
    {"layer4.down", 256, 512, 3, 2, 1, 14}, {"layer4", 512, 512, 3, 1, 1, 7},      {"proj4", 256, 512, 1, 2, 0, 14},
};
#define NLAYERS ((int)(sizeof layers / sizeof layers[0]))

static int reps = 5;

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of reps calls after one warm-up; -1 when a call failed. */
static double median_ms(int (*fn)(void *), void *ud)
{
    double t[64];
    if (fn(ud)) return -1;
    for (int i = 0; i < reps; i++) {
        const double t0 = bench_now_s();
        if (fn(ud)) return -1;
        t[i] = 1e3 * (bench_now_s() - t0);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    return t[reps / 2];
}

typedef struct conv_case {
    opr_ctx *ctx;
    const opr_op *conv2d;
    opr_tensor *x, *w;
    const layer *l;
} conv_case;

static int conv_step(void *ud)
{
    conv_case *c = ud;
    opr_tensor *y = NULL, *grads[2] = {NULL, NULL};
    opr_value args[] = {opr_v_tensor(c->x), opr_v_tensor(c->w), opr_v_none(), opr_v_ints(&c->l->stride, 1),
                        opr_v_ints(&c->l->pad, 1)};
    int rc = opr_call(c->conv2d, args, 5, &y, 1);
    opr_tensor *ones = NULL;
    if (!rc) rc = opr_call(opr_op_find(c->ctx, "ones_like"), (opr_value[]){opr_v_tensor(y)}, 1, &ones, 1);
    if (!rc) rc = opr_autograd_grad(&y, &ones, 1, (opr_tensor *[]){c->x, c->w}, 2, grads, NULL);
    opr_tensor_release(y);
    opr_tensor_release(ones);
    opr_tensor_release(grads[0]);
    opr_tensor_release(grads[1]);
    return rc;
}

typedef struct step_case {
    resnet_model *m;
    resnet_sgd opt;
    opr_tensor *x, *y;
} step_case;

static int train_step(void *ud)
{
    step_case *s = ud;
    opr_tensor *loss = NULL;
    int rc = resnet_model_forward(s->m, s->x, s->y, true, &loss, NULL);
    if (!rc) rc = opr_backward(loss, NULL, NULL);
    if (!rc) rc = resnet_sgd_step(&s->opt, s->m);
    opr_tensor_release(loss);
    return rc;
}

/* Every layer's conv2d step and the ResNet-18 step on ctx into ms (-1: failed). */
static void run_all(opr_ctx *ctx, int batch, int image, double ms[NLAYERS + 1])
{
    for (int i = 0; i < NLAYERS; i++) {
        const layer *l = &layers[i];
        conv_case c = {ctx, opr_op_find(ctx, "conv2d"), NULL, NULL, l};
        c.x = opr_tensor_new(ctx, OPR_F32, 4, (int64_t[]){batch, l->cin, l->hw, l->hw}, OPR_CPU);
        c.w = opr_tensor_new(ctx, OPR_F32, 4, (int64_t[]){l->cout, l->cin, l->k, l->k}, OPR_CPU);
        opr_set_requires_grad(c.x, true);
        opr_set_requires_grad(c.w, true);
        ms[i] = median_ms(conv_step, &c);
        opr_tensor_release(c.x);
        opr_tensor_release(c.w);
    }
    const resnet_config cfg = {.blocks = {2, 2, 2, 2}, .width = 64, .num_classes = 4, .in_channels = 3, .bn_momentum = 0.1,
                               .bn_eps = 1e-5, .dtype = OPR_F32};
    step_case s = {.m = resnet_model_new(ctx, &cfg, 1, OPR_CPU)};
    ms[NLAYERS] = -1;
    if (s.m && !resnet_sgd_init(&s.opt, s.m, 0.01, 0.9, 0)) {
        /* random images of the benchmark's size (the data set's are 32x32) and labels */
        const int64_t n = (int64_t)batch * 3 * image * image;
        float *v = malloc((size_t)n * sizeof *v);
        int64_t *labels = malloc((size_t)batch * sizeof *labels);
        uint64_t r = 88172645463325252ull;
        for (int64_t k = 0; v && k < n; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            v[k] = (float)(r >> 40) / (float)(1 << 24);
        }
        for (int k = 0; labels && k < batch; k++) labels[k] = k % 4;
        if (v && labels) {
            s.x = opr_tensor_from_data(ctx, OPR_F32, 4, (int64_t[]){batch, 3, image, image}, v, OPR_CPU);
            s.y = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){batch}, labels, OPR_CPU);
        }
        free(v);
        free(labels);
        if (s.x && s.y) ms[NLAYERS] = median_ms(train_step, &s);
        resnet_sgd_free(&s.opt);
    }
    opr_tensor_release(s.x);
    opr_tensor_release(s.y);
    resnet_model_free(s.m);
}

int main(int argc, char **argv)
{
    int threads = 1, batch = 8, image = 64;
    for (int i = 1; i < argc; i++) {
        int *f = !strcmp(argv[i], "--threads") ? &threads : !strcmp(argv[i], "--reps") ? &reps : !strcmp(argv[i], "--batch") ? &batch
               : !strcmp(argv[i], "--image") ? &image : NULL;
        if (!strcmp(argv[i], "--help") || !f || i + 1 == argc || (*f = atoi(argv[++i])) < 1 || reps > 64) {
            printf("usage: opreg_bench_conv [--threads N] [--reps N (1-64)] [--batch N] [--image N]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) {
        fprintf(stderr, "opreg_bench_conv: %s\n", opr_last_error());
        return 1;
    }
    const char *names[NLAYERS + 1];
    char keys[NLAYERS + 1][40];
    double torch_ms[NLAYERS + 1], ours[NLAYERS + 1], dnnl[NLAYERS + 1];
    for (int i = 0; i < NLAYERS; i++) snprintf(keys[i], sizeof keys[i], "conv_%s", layers[i].name), names[i] = keys[i];
    names[NLAYERS] = "resnet18_step";
    char args[128];
    snprintf(args, sizeof args, "%d %d %d %d", threads, reps, batch, image);
    const bool have_torch = !bench_python_figures("torchvision", "conv_torch.py", args, NULL, names, torch_ms, NLAYERS + 1);

    run_all(ctx, batch, image, ours);
    opr_ctx_free(ctx);
    char why[512];
    opr_ctx *dctx = bench_onednn_ctx(why, sizeof why);
    const bool have_dnnl = dctx != NULL;
    if (dctx) {
        run_all(dctx, batch, image, dnnl);
        opr_ctx_free(dctx);
    }
    printf("conv2d forward + backward (input and weight), batch %d, f32, %d thread(s); ResNet-18 training step at %dx%d\n",
           batch, threads, image, image);
    printf("opreg: the CPU plugin alone (cpu) and with the oneDNN plugin over it (onednn); ratio = opreg / PyTorch\n");
    printf("  %-14s %10s %10s %10s %10s %10s\n", "case", "cpu ms", "onednn ms", "PyTorch ms", "cpu ratio", "onednn ratio");
    for (int i = 0; i <= NLAYERS; i++) {
        const char *n = i < NLAYERS ? layers[i].name : "resnet18 step";
        char d[16] = "-", t[16] = "-", rc[16] = "-", rd[16] = "-";
        if (have_dnnl) snprintf(d, sizeof d, "%.2f", dnnl[i]);
        if (have_torch) {
            snprintf(t, sizeof t, "%.2f", torch_ms[i]);
            snprintf(rc, sizeof rc, "%.2f", ours[i] / torch_ms[i]);
            if (have_dnnl) snprintf(rd, sizeof rd, "%.2f", dnnl[i] / torch_ms[i]);
        }
        printf("  %-14s %10.2f %10s %10s %10s %10s\n", n, ours[i], d, t, rc, rd);
    }
    if (!have_torch) printf("(no python3 with torch and torchvision: PyTorch not run)\n");
    if (!have_dnnl) printf("(oneDNN not run: %s)\n", why);
    return 0;
}
