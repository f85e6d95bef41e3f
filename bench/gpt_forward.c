/* opreg_bench_gpt_forward: the GPT example's hand-written forward (examples/gpt/,
 * gpt_model_forward to the loss) timed like `opreg run --repeat` times a captured
 * program, so that bench/replay.sh can set the replay of the same model beside it: the
 * difference per node is what replaying a captured graph costs over calling the ops
 * from C. The model is given by its config (the capture's: bench/replay_models.py);
 * the weights and tokens are drawn here, which changes no op's cost.
 *
 *   opreg_bench_gpt_forward [--layers N] [--heads N] [--embd N] [--context N] [--vocab N]
 *                           [--batch N] [--repeat N] [--warmup N]
 *
 * Prints `forward MS CPU_MS` (grad mode off, as `opreg run` without --backward) and
 * `forward_backward MS CPU_MS` (parameters require grad; their gradients dropped before
 * each run, as `opreg run --backward` does): the medians of --repeat runs after
 * --warmup, in wall time and in the process's CPU time; and `nodes N`, the ops one
 * forward records. Threads: whatever OMP_NUM_THREADS and OPENBLAS_NUM_THREADS say
 * (bench/replay.sh sets 1). */
#include "bench_timing.h"
#include "gpt/gpt_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void count_node(void *ud, const opr_node_info *info)
{
    (void)info;
    ++*(int *)ud;
}

/* One run: forward to the loss, then (backward) its backward; its wall and CPU time. */
static int run_once(gpt_model *m, opr_tensor *x, opr_tensor *y, bool backward, double *t, double *cpu)
{
    for (int i = 0; backward && i < m->n_params; i++) opr_zero_grad(m->params[i]);
    const bool was = opr_grad_mode_set(backward);
    opr_tensor *loss = NULL;
    const double t0 = bench_now_s(), c0 = cpu_now_s();
    int rc = gpt_model_forward(m, x, y, false, &loss, NULL);
    if (!rc && backward) rc = opr_backward(loss, NULL, NULL);
    *t = bench_now_s() - t0;
    *cpu = cpu_now_s() - c0;
    opr_grad_mode_set(was);
    opr_tensor_release(loss);
    return rc;
}

int main(int argc, char **argv)
{
    gpt_config cfg = {.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 65, .dtype = OPR_F32};
    int batch = 8, repeat = 20, warmup = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--layers") ? &cfg.n_layer : !strcmp(a, "--heads") ? &cfg.n_head
                 : !strcmp(a, "--embd") ? &cfg.n_embd : !strcmp(a, "--context") ? &cfg.block_size
                 : !strcmp(a, "--vocab") ? &cfg.vocab_size : !strcmp(a, "--batch") ? &batch
                 : !strcmp(a, "--repeat") ? &repeat : !strcmp(a, "--warmup") ? &warmup : NULL;
        if (!dst || i + 1 >= argc) {
            printf("usage: opreg_bench_gpt_forward [--layers N] [--heads N] [--embd N] [--context N] [--vocab N]\n"
                   "                               [--batch N] [--repeat N] [--warmup N]\n\n"
                   "Median ms (wall, then the process's CPU time) of the GPT example's forward to the loss\n"
                   "(grad mode off) and of forward + backward, over --repeat runs (default 20) after\n"
                   "--warmup (default 3); defaults: the\n"
                   "model bench/replay.sh captures (2 layers, 4 heads, width 128, context 64, vocab 65,\n"
                   "batch 8, f32).\n");
            return strcmp(a, "--help") ? 2 : 0;
        }
        *dst = atoi(argv[++i]);
    }
    if (batch < 1 || repeat < 1 || warmup < 0) {
        fprintf(stderr, "opreg_bench_gpt_forward: --batch >= 1, --repeat >= 1, --warmup >= 0\n");
        return 2;
    }
    opr_ctx *ctx = opr_ctx_new(NULL);
    gpt_model *m = ctx ? gpt_model_new(ctx, &cfg, 1337, OPR_CPU) : NULL;
    const int64_t n = (int64_t)batch * cfg.block_size;
    int64_t *tok = malloc((size_t)(2 * n) * sizeof *tok);
    double *times = malloc(2 * (size_t)repeat * sizeof *times); /* wall, then CPU */
    opr_tensor *x = NULL, *y = NULL;
    int rc = !m || !tok || !times;
    if (rc) fprintf(stderr, "opreg_bench_gpt_forward: %s\n", m ? "out of memory" : gpt_error());
    for (int64_t i = 0; !rc && i < 2 * n; i++) tok[i] = (i * 7919 + 13) % cfg.vocab_size;
    if (!rc) {
        x = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){batch, cfg.block_size}, tok, OPR_CPU);
        y = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){batch, cfg.block_size}, tok + n, OPR_CPU);
        rc = !x || !y;
    }
    for (int backward = 0; !rc && backward < 2; backward++) {
        for (int r = -warmup; !rc && r < repeat; r++) {
            double t, cpu;
            rc = run_once(m, x, y, backward, &t, &cpu);
            if (r >= 0) {
                times[r] = t;
                times[repeat + r] = cpu;
            }
        }
        if (!rc)
            printf("%s %.4f %.4f\n", backward ? "forward_backward" : "forward", 1e3 * gpt_median(times, repeat),
                   1e3 * gpt_median(times + repeat, repeat));
    }
    if (!rc) { /* the ops one forward records: the count of calls the example makes */
        opr_tensor *loss = NULL;
        int nodes = 0;
        rc = gpt_model_forward(m, x, y, false, &loss, NULL) || opr_autograd_walk(loss, count_node, &nodes) < 0;
        if (!rc) printf("nodes %d\n", nodes);
        opr_tensor_release(loss);
    }
    if (rc && m) fprintf(stderr, "opreg_bench_gpt_forward: %s\n", opr_last_error());
    opr_tensor_release(x);
    opr_tensor_release(y);
    free(tok);
    free(times);
    gpt_model_free(m);
    opr_ctx_free(ctx);
    return rc ? 1 : 0;
}
