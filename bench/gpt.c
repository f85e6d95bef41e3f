/* opreg_bench_gpt: training steps of the demo GPT (`opreg demo --model gpt`: 2 layers,
 * 4 heads, width 128, context 64, batch 16, f32) in opreg and in PyTorch 1.13
 * (bench/gpt_torch.py, the model of tests/gpt_reference.py: the same weights, batches
 * and AdamW) and in libtorch's C++ API (bench/gpt_torch.cpp, the same model in ATen ops,
 * where CMake found libtorch), with 1 and 2 threads, in one run. One table: tokens/s over --steps steps
 * after --warmup steps, and the peak memory of those steps above what was live before
 * them (activations, gradients, temporaries; opreg: opr_memory_stats of the CPU, which
 * counts every tensor; PyTorch: the host memory counted by bench/memhook.c). The
 * optimizer state (opreg's on the host in f64, PyTorch's in f32 tensors) exists before
 * the timed steps on both sides and is not in the figure. libtorch runs in this
 * process, where its memory cannot be told apart: no peak figure for it.
 *
 * Every side runs with a C allocator that keeps freed memory (bench_malloc.h): with
 * glibc's defaults the C++ model ran at half its speed on page faults.
 * --glibc-defaults leaves the allocator as it is.
 *
 *   opreg_bench_gpt [--steps N] [--warmup N] [--no-torch] [--glibc-defaults] */
#include "bench_malloc.h"
#include "bench_python.h"
#if OPREG_BENCH_HAVE_TORCH
#include "gpt_torch.h"
#endif

#include "gpt/gpt_train.h"

#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 4, EMBD = 128, CONTEXT = 64, BATCH = 16 };

/* opreg's figures for one thread count: tokens/s and the peak bytes. */
static int run_opreg(opr_ctx *ctx, const gpt_text *text, int warmup, int steps, double *rate, double *peak)
{
    gpt_config cfg = {.n_layer = LAYERS, .n_head = HEADS, .n_embd = EMBD, .block_size = CONTEXT,
                      .vocab_size = text->vocab_size, .dtype = OPR_F32};
    gpt_model *m = gpt_model_new(ctx, &cfg, 1337, OPR_CPU);
    if (!m) return -1;
    gpt_train_opts o = {.steps = warmup, .batch = BATCH, .lr = 3e-3, .weight_decay = 0.01, .seed = 1337};
    int rc = warmup > 0 ? gpt_train(m, text, &o, NULL) : OPR_OK;
    opr_mem_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    if (!rc) rc = opr_memory_stats(ctx, OPR_CPU, &before) || opr_memory_reset_peak(ctx, OPR_CPU);
    o.steps = steps;
    o.seed = 1338; /* other batches than the warm-up's */
    if (!rc) rc = gpt_train(m, text, &o, rate);
    if (!rc) rc = opr_memory_stats(ctx, OPR_CPU, &after);
    *peak = (double)(after.peak_bytes - before.current_bytes);
    gpt_model_free(m);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    int steps = 10, warmup = 3;
    bool torch = true, glibc_defaults = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else if (!strcmp(argv[i], "--glibc-defaults")) glibc_defaults = true;
        else {
            printf("usage: opreg_bench_gpt [--steps N] [--warmup N] [--no-torch] [--glibc-defaults]\n\n"
                   "Training steps of the demo GPT (2 layers, 4 heads, width 128, context 64, batch 16,\n"
                   "f32) in opreg and PyTorch 1.13, 1 and 2 threads: tokens/s over N steps (default 10)\n"
                   "after a warm-up (default 3), and the peak memory of those steps. Every side runs with\n"
                   "a C allocator that keeps freed memory (mmap threshold 32 MiB, no trimming), without\n"
                   "which PyTorch pays a page fault per page of every step's temporaries;\n"
                   "--glibc-defaults keeps glibc's own policy.\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (steps < 1 || warmup < 0) {
        fprintf(stderr, "opreg_bench_gpt: --steps >= 1, --warmup >= 0\n");
        return 2;
    }
    if (!glibc_defaults && bench_keep_freed_memory()) {
        fprintf(stderr, "opreg_bench_gpt: could not set the allocator policy\n");
        return 1;
    }
    const char *text_path = OPREG_BENCH_SOURCE_DIR "/../examples/data/sonnets.txt";
    gpt_text text;
    if (gpt_text_load(text_path, &text)) {
        fprintf(stderr, "opreg_bench_gpt: %s\n", gpt_error());
        return 1;
    }
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) {
        fprintf(stderr, "opreg_bench_gpt: %s\n", opr_last_error());
        return 1;
    }
    printf("opreg_bench_gpt: training steps of the demo GPT (%d layers, %d heads, width %d, context %d, batch %d,\n"
           "f32, AdamW), %d steps after %d of warm-up; peak: bytes above the live memory before the steps;\n"
           "C allocator: %s; OpenBLAS kernels: %s (OPENBLAS_CORETYPE picks others, for every side)\n\n",
           LAYERS, HEADS, EMBD, CONTEXT, BATCH, steps, warmup,
           glibc_defaults ? "glibc's defaults" : BENCH_MALLOC_POLICY, openblas_get_corename());
    printf("  %-7s %12s %12s %12s %12s %12s %13s %13s %10s\n", "threads", "opreg tok/s", "torch tok/s",
           "opreg/torch", "C++ tok/s", "opreg/C++", "opreg peak MB", "torch peak MB", "peak ratio");
    int rc = 0;
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
        double rate = 0, peak = 0, tv[2] = {-1, -1}, cpp = -1;
        if (run_opreg(ctx, &text, warmup, steps, &rate, &peak)) {
            fprintf(stderr, "opreg_bench_gpt: %s\n", gpt_error());
            rc = 1;
            break;
        }
        char args[4400];
        snprintf(args, sizeof args, "'%s' %d %d %d %d %d %d %d %d", text_path, threads, warmup, steps, LAYERS, HEADS,
                 EMBD, CONTEXT, BATCH);
        const char *names[] = {"torch_tokens_per_s", "torch_peak"};
        const bool have = torch && bench_python_figures("torch", "gpt_torch.py", args, OPREG_BENCH_MEMHOOK, names, tv, 2) == 0;
#if OPREG_BENCH_HAVE_TORCH
        char err[512] = "";
        bgt_config bc = {LAYERS, HEADS, EMBD, CONTEXT, BATCH, text.vocab_size, threads, warmup, steps, 1337};
        if (torch && bgt_train(&bc, text.tokens, text.n, &cpp, err, sizeof err)) {
            fprintf(stderr, "opreg_bench_gpt: libtorch: %s\n", err);
            cpp = -1;
        }
#endif
        printf("  %-7d %12.0f ", threads, rate);
        if (have) printf("%12.0f %11.2fx ", tv[0], rate / tv[0]);
        else printf("%12s %12s ", "n/a", "n/a");
        if (cpp > 0) printf("%12.0f %11.2fx", cpp, rate / cpp);
        else printf("%12s %12s", "n/a", "n/a");
        printf(" %13.2f ", peak / 1e6);
        if (have && tv[1] > 0) printf("%13.2f %9.2fx\n", tv[1] / 1e6, peak / tv[1]);
        else printf("%13s %10s\n", "n/a", "n/a");
        fflush(stdout);
    }
    if (torch && !OPREG_BENCH_HAVE_TORCH) printf("  (C++: %s)\n", OPREG_BENCH_NO_TORCH_REASON);
    printf("\ntorch: PyTorch 1.13 in Python; C++: libtorch; opreg/X > 1: opreg trains faster; peak ratio < 1: opreg\n"
           "needs less memory\n");
    gpt_text_free(&text);
    if (opr_ctx_free(ctx)) rc = 1;
    return rc;
}
