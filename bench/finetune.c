/* ResNet-18 fine-tuning with a frozen backbone, and full training, on the CPU against
 * PyTorch 1.13 (bench/finetune_torch.py: torchvision's resnet18, run as a subprocess with
 * the same threads, side by side): step time and peak memory. opreg's model is the
 * example's (examples/resnet: width 64, two BasicBlocks per stage, 4 classes), f32.
 *
 * opreg runs twice: with the CPU plugin alone (unfold + OpenBLAS GEMM convolutions) and
 * with the oneDNN plugin (plugins/onednn) over it, where it was built.
 *
 * A step: forward (batch norm in training mode), cross-entropy, backward, SGD with
 * momentum 0.9 over the parameters that require grad, then the gradients dropped
 * (resnet_sgd_step; PyTorch: optimizer.step(), zero_grad(set_to_none=True)).
 *   frozen  only fc.weight and fc.bias require grad: the backbone's convolutions get
 *           inputs and weights that do not, so nothing of the backbone is recorded and the
 *           graph saves what the head's gradients read. Printed with it: the bytes the
 *           graph saved (opr_autograd_walk) and those opr_plan_saved_bytes gives for the
 *           head's calls (resnet_head_saved_bytes); they are equal;
 *   full    every parameter trains.
 *
 * Peak memory is measured the same way on both sides: bench/memhook.c counts the bytes
 * held by every block the C allocation functions hand out (malloc_usable_size), linked
 * into this program and preloaded into Python; a step's peak is the highest count
 * during the step above the count before it (the median over the repetitions). That
 * covers tensors, kernel scratch (opreg's unfolded images, oneDNN's buffers) and either
 * framework's bookkeeping alike. opreg's CPU allocator keeps freed blocks for reuse,
 * which at this level would read as live (every step after the first would reuse them
 * and peak at 0 above the count before it), so the memory runs use a context made with
 * OPREG_CPU_NO_CACHE=1; PyTorch's CPU allocator keeps none. The timed runs use the
 * default context (cache on). Every process runs with the C allocator policy of
 * bench_malloc.h. Also printed: opreg's own high-water mark of tensor storage
 * (opr_memory_stats: peak_bytes above current_bytes before the step; tensors only).
 *
 * Targets: frozen peak <= 0.6x PyTorch's, full peak <= 1.0x, step time <= 1.0x.
 *
 *   opreg_bench_finetune [--threads N] [--reps N] [--batch N] [--image N]
 *
 * Defaults: 1 thread, 5 timed steps (median) after 2 of warm-up, batch 8, 64x64 images. */
#include "bench_malloc.h"
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

/* bench/memhook.c, linked into this program: the bytes live in the C allocator now, the
 * highest count since the last reset, and the reset. */
int64_t memhook_current(void);
int64_t memhook_peak(void);
void memhook_reset_peak(void);

#define WARMUP 2
#define MAX_REPS 64

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

typedef struct run_cfg {
    int reps, batch, image;
} run_cfg;

/* One case's figures (-1: not measured). */
typedef struct figures {
    double ms, peak, tensor_peak;
    uint64_t saved, head_reads; /* frozen: the graph's saved bytes, the head's planned ones */
} figures;

typedef struct model_run {
    resnet_model *m;
    resnet_sgd opt;
    opr_tensor *x, *y;
} model_run;

static void model_run_free(model_run *r)
{
    resnet_sgd_free(&r->opt);
    opr_tensor_release(r->x);
    opr_tensor_release(r->y);
    resnet_model_free(r->m);
}

static void sum_saved(void *ud, const opr_node_info *info) { *(uint64_t *)ud += info->saved_bytes; }

/* One training step; with saved, the bytes the step's graph saved (walked before its
 * backward). */
static int step(model_run *r, uint64_t *saved)
{
    opr_tensor *loss = NULL;
    int rc = resnet_model_forward(r->m, r->x, r->y, true, &loss, NULL);
    if (!rc && saved && opr_autograd_walk(loss, sum_saved, saved) < 0) rc = -1;
    if (!rc) rc = opr_backward(loss, NULL, NULL);
    if (!rc) rc = resnet_sgd_step(&r->opt, r->m);
    opr_tensor_release(loss);
    return rc;
}

/* ResNet-18 on ctx with random images of the benchmark's size; frozen: only fc trains. */
static int model_run_new(opr_ctx *ctx, const run_cfg *c, bool frozen, model_run *r)
{
    const resnet_config cfg = {.blocks = {2, 2, 2, 2}, .width = 64, .num_classes = 4, .in_channels = 3, .bn_momentum = 0.1,
                               .bn_eps = 1e-5, .dtype = OPR_F32};
    *r = (model_run){.m = resnet_model_new(ctx, &cfg, 1, OPR_CPU)};
    if (!r->m || resnet_sgd_init(&r->opt, r->m, 0.01, 0.9, 0)) return -1;
    for (int i = 0; frozen && i < r->m->n_params; i++)
        if (strncmp(r->m->param_names[i], "fc.", 3) && opr_set_requires_grad(r->m->params[i], false)) return -1;
    const int64_t n = (int64_t)c->batch * 3 * c->image * c->image;
    float *v = malloc((size_t)n * sizeof *v);
    int64_t *labels = malloc((size_t)c->batch * sizeof *labels);
    uint64_t s = 88172645463325252ull;
    for (int64_t k = 0; v && k < n; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v[k] = (float)(s >> 40) / (float)(1 << 24);
    }
    for (int k = 0; labels && k < c->batch; k++) labels[k] = k % 4;
    if (v && labels) {
        r->x = opr_tensor_from_data(ctx, OPR_F32, 4, (int64_t[]){c->batch, 3, c->image, c->image}, v, OPR_CPU);
        r->y = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){c->batch}, labels, OPR_CPU);
    }
    free(v);
    free(labels);
    return r->x && r->y ? 0 : -1;
}

/* Median step time of one case on ctx (the default allocator). */
static int time_case(opr_ctx *ctx, const run_cfg *c, bool frozen, figures *f)
{
    model_run r;
    int rc = model_run_new(ctx, c, frozen, &r);
    double t[MAX_REPS];
    for (int i = 0; i < WARMUP && !rc; i++) rc = step(&r, NULL);
    for (int i = 0; i < c->reps && !rc; i++) {
        const double t0 = bench_now_s();
        rc = step(&r, NULL);
        t[i] = 1e3 * (bench_now_s() - t0);
    }
    if (!rc) f->ms = median(t, c->reps);
    model_run_free(&r);
    return rc;
}

/* Peak memory of one case on ctx (made without the allocator cache), and for the frozen
 * case the saved bytes of its graph against what the head reads. */
static int memory_case(opr_ctx *ctx, const run_cfg *c, bool frozen, figures *f)
{
    model_run r;
    int rc = model_run_new(ctx, c, frozen, &r);
    double peak[MAX_REPS], tensors[MAX_REPS];
    uint64_t saved = 0;
    for (int i = 0; i < WARMUP && !rc; i++) rc = step(&r, i == 0 ? &saved : NULL);
    for (int i = 0; i < c->reps && !rc; i++) {
        opr_mem_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
        rc = opr_memory_stats(ctx, OPR_CPU, &before) || opr_memory_reset_peak(ctx, OPR_CPU);
        const int64_t base = memhook_current();
        memhook_reset_peak();
        if (!rc) rc = step(&r, NULL);
        peak[i] = (double)(memhook_peak() - base);
        if (!rc) rc = opr_memory_stats(ctx, OPR_CPU, &after);
        tensors[i] = (double)after.peak_bytes - (double)before.current_bytes;
    }
    if (!rc) {
        f->peak = median(peak, c->reps);
        f->tensor_peak = median(tensors, c->reps);
        f->saved = saved;
        if (frozen) rc = resnet_head_saved_bytes(r.m, c->batch, &f->head_reads);
    }
    model_run_free(&r);
    return rc;
}

static void fmt(char *buf, size_t len, double v, double scale, const char *f)
{
    if (v < 0) snprintf(buf, len, "-");
    else snprintf(buf, len, f, v / scale);
}

static void ratio(char *buf, size_t len, double a, double b)
{
    if (a < 0 || b <= 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.2f", a / b);
}

int main(int argc, char **argv)
{
    int threads = 1;
    run_cfg c = {.reps = 5, .batch = 8, .image = 64};
    for (int i = 1; i < argc; i++) {
        int *f = !strcmp(argv[i], "--threads") ? &threads : !strcmp(argv[i], "--reps") ? &c.reps
               : !strcmp(argv[i], "--batch") ? &c.batch : !strcmp(argv[i], "--image") ? &c.image : NULL;
        if (!strcmp(argv[i], "--help") || !f || i + 1 == argc || (*f = atoi(argv[++i])) < 1 || c.reps > MAX_REPS ||
            c.image < 32) {
            printf("usage: opreg_bench_finetune [--threads N] [--reps N (1-%d)] [--batch N] [--image N (>= 32)]\n",
                   MAX_REPS);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (bench_keep_freed_memory()) {
        fprintf(stderr, "opreg_bench_finetune: could not set the C allocator policy\n");
        return 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);

    /* PyTorch first, alone on the machine's cores */
    static const char *const cases[] = {"frozen", "full"};
    const char *names[4] = {"torch_frozen_ms", "torch_frozen_peak", "torch_full_ms", "torch_full_peak"};
    double tv[4] = {-1, -1, -1, -1};
    char args[128];
    snprintf(args, sizeof args, "%d %d %d %d", threads, c.reps, c.batch, c.image);
    const bool have_torch =
        !bench_python_figures("torchvision", "finetune_torch.py", args, OPREG_BENCH_MEMHOOK, names, tv, 4);

    /* opreg with the CPU plugin alone, then with the oneDNN plugin over it */
    figures ours[2][2] = {{{-1, -1, -1, 0, 0}, {-1, -1, -1, 0, 0}}, {{-1, -1, -1, 0, 0}, {-1, -1, -1, 0, 0}}};
    char why[512] = "";
    bool have[2] = {false, false};
    for (int p = 0; p < 2; p++) {
        opr_ctx *ctx = p ? bench_onednn_ctx(why, sizeof why) : opr_ctx_new(NULL);
        /* read when a context is made: this one's freed blocks go back to the C allocator */
        setenv("OPREG_CPU_NO_CACHE", "1", 1);
        opr_ctx *mctx = !ctx ? NULL : p ? bench_onednn_ctx(why, sizeof why) : opr_ctx_new(NULL);
        unsetenv("OPREG_CPU_NO_CACHE");
        if (!ctx || !mctx) {
            opr_ctx_free(ctx);
            if (p) continue; /* why says why */
            fprintf(stderr, "opreg_bench_finetune: %s\n", opr_last_error());
            return 1;
        }
        for (int k = 0; k < 2; k++)
            if (time_case(ctx, &c, k == 0, &ours[p][k]) || memory_case(mctx, &c, k == 0, &ours[p][k])) {
                fprintf(stderr, "opreg_bench_finetune: %s case: %s%s\n", cases[k], resnet_error(), opr_last_error());
                return 1;
            }
        have[p] = true;
        opr_ctx_free(mctx);
        opr_ctx_free(ctx);
    }
    static const char *const plugins[] = {"cpu", "onednn"};
    printf("ResNet-18 training step (forward, backward, SGD), batch %d, %dx%d, f32, %d thread(s); opreg with the CPU\n"
           "plugin alone (cpu) and with the oneDNN plugin over it (onednn)\n", c.batch, c.image, c.image, threads);
    printf("peak: bytes live in the C allocator above those before the step (bench/memhook.c, both sides);\n"
           "tensors: opreg's opr_memory_stats high-water mark; ratio = opreg / PyTorch, median of %d steps\n", c.reps);
    printf("  %-7s %-7s %9s %11s %6s %14s %16s %6s %11s\n", "case", "opreg", "opreg ms", "PyTorch ms", "ratio",
           "opreg peak MB", "PyTorch peak MB", "ratio", "tensors MB");
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 2; p++) {
            if (!have[p]) continue;
            const figures *f = &ours[p][k];
            char a[4][24], r[2][16];
            fmt(a[0], sizeof a[0], f->ms, 1, "%.2f");
            fmt(a[1], sizeof a[1], tv[2 * k], 1, "%.2f");
            fmt(a[2], sizeof a[2], f->peak, 1e6, "%.2f");
            fmt(a[3], sizeof a[3], tv[2 * k + 1], 1e6, "%.2f");
            ratio(r[0], sizeof r[0], f->ms, tv[2 * k]);
            ratio(r[1], sizeof r[1], f->peak, tv[2 * k + 1]);
            printf("  %-7s %-7s %9s %11s %6s %14s %16s %6s %11.2f\n", cases[k], plugins[p], a[0], a[1], r[0], a[2], a[3],
                   r[1], f->tensor_peak / 1e6);
        }
    printf("targets: frozen peak <= 0.6x, full peak <= 1.0x, step time <= 1.0x\n");
    printf("frozen backbone: the graph saved %llu bytes; the head's gradients read %llu (opr_plan_saved_bytes of "
           "linear and cross_entropy)\n",
           (unsigned long long)ours[0][0].saved, (unsigned long long)ours[0][0].head_reads);
    if (!have_torch) printf("(no python3 with torch and torchvision: PyTorch not run)\n");
    if (!have[1]) printf("(oneDNN not run: %s)\n", why);
    return 0;
}
