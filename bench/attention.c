/* opreg_bench_attention: causal scaled_dot_product_attention, forward + backward, with
 * each backward candidate of its node forced (opr_op_force_grad_candidate): the fused
 * kernel (keeps the per-row log-sum-exp, recomputes the probabilities) and the formula
 * (keeps the L x S probabilities), side by side with PyTorch 1.13's attention written out
 * by hand (bench/attention_torch.py, run as a subprocess with the first python3 that has
 * torch) in one run. f32, one thread, batch * heads x T x head dim; each time is the
 * fastest of --rounds rounds; saved bytes are what the graph keeps for backward
 * (opr_autograd_walk; for PyTorch, saved_tensors_hooks).
 *
 *   opreg_bench_attention [--rounds N] [--bh N] [--dim N] [--no-torch] */
#include "bench_python.h"
#include "bench_tensor.h"
#include "bench_timing.h"

#include <opreg/opreg.h>

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

static void add_saved(void *ud, const opr_node_info *info)
{
    *(uint64_t *)ud += info->saved_bytes;
}

/* One forward + backward of causal attention on q, k, v; the time in ns (< 0 on error)
 * and the bytes the graph saved. */
static double one_step(opr_tensor **qkv, uint64_t *saved)
{
    const double t0 = bench_now_s();
    opr_value args[6] = {opr_v_tensor(qkv[0]), opr_v_tensor(qkv[1]), opr_v_tensor(qkv[2]), opr_v_none(),
                         opr_v_double(0), opr_v_bool(true)};
    opr_tensor *y = NULL, *s = NULL, *g[3] = {NULL, NULL, NULL};
    int rc = opr_call_by_name(ctx, "scaled_dot_product_attention", args, 6, &y, 1);
    if (!rc) {
        opr_value a = opr_v_tensor(y);
        rc = opr_call_by_name(ctx, "sum", &a, 1, &s, 1);
    }
    *saved = 0;
    if (!rc && opr_autograd_walk(s, add_saved, saved) < 0) rc = -1;
    if (!rc) rc = opr_autograd_grad(&s, NULL, 1, qkv, 3, g, NULL);
    const double t = bench_now_s() - t0;
    if (rc) fprintf(stderr, "attention: %s\n", opr_last_error());
    for (int i = 0; i < 3; i++) opr_tensor_release(g[i]);
    opr_tensor_release(s);
    opr_tensor_release(y);
    return rc ? -1 : t * 1e9;
}

int main(int argc, char **argv)
{
    int rounds = 3, bh = 8, dim = 64;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bh") && i + 1 < argc) bh = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc) dim = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else {
            printf("usage: opreg_bench_attention [--rounds N] [--bh N] [--dim N] [--no-torch]\n\n"
                   "Causal attention forward + backward with each backward candidate forced, against\n"
                   "PyTorch's (by hand), f32, one thread, fastest of N rounds (default 3); batch * heads\n"
                   "--bh (8), head dim --dim (64), T = 64 .. 1024.\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }
    const opr_op *node = opr_op_find(ctx, "_scaled_dot_product_attention");
    int cands[2] = {-1, -1}; /* the fused kernel, the formula */
    for (int i = 0; node && i < opr_op_grad_candidate_count(node); i++) {
        const char *label = opr_op_grad_candidate_label(node, i);
        if (strncmp(label, "query, key, value", 17)) continue; /* the attn_mask formula */
        cands[strstr(label, "kernel") ? 0 : 1] = i;
    }
    if (cands[0] < 0 || cands[1] < 0) { fprintf(stderr, "_scaled_dot_product_attention: candidates not found\n"); return 1; }
    enum { NT = 5 };
    const int64_t lengths[NT] = {64, 128, 256, 512, 1024};
    const char *names[2 * NT];
    char namebuf[2 * NT][32];
    double tv[2 * NT];
    char args[128];
    int used = snprintf(args, sizeof args, "%d %d %d", rounds, bh, dim);
    for (int i = 0; i < NT; i++) {
        snprintf(namebuf[2 * i], sizeof namebuf[0], "torch_%lld_ns", (long long)lengths[i]);
        snprintf(namebuf[2 * i + 1], sizeof namebuf[0], "torch_%lld_saved", (long long)lengths[i]);
        names[2 * i] = namebuf[2 * i], names[2 * i + 1] = namebuf[2 * i + 1];
        tv[2 * i] = tv[2 * i + 1] = -1;
        used += snprintf(args + used, sizeof args - (size_t)used, " %lld", (long long)lengths[i]);
    }
    const bool have_torch = torch && bench_python_figures("torch", "attention_torch.py", args, NULL, names, tv, 2 * NT) == 0;
    printf("causal attention forward + backward, f32, 1 thread, batch*heads %d, head dim %d, fastest of %d rounds%s\n\n",
           bh, dim, rounds, have_torch ? "" : " (PyTorch: no python3 with torch found, or --no-torch)");
    printf("%6s %12s %12s %12s %12s %12s %12s %11s\n", "T", "fused ms", "formula ms", "torch ms", "fused MiB",
           "formula MiB", "torch MiB", "torch/fused");
    int status = 0;
    for (int i = 0; i < NT; i++) {
        const int64_t shape[3] = {bh, lengths[i], dim};
        opr_tensor *qkv[3];
        for (int k = 0; k < 3; k++) {
            qkv[k] = bench_rand_f32(ctx, 3, shape, -1, 1, 21 + (unsigned)k);
            opr_set_requires_grad(qkv[k], true);
        }
        double best[2] = {1e300, 1e300};
        uint64_t saved[2] = {0, 0};
        for (int r = 0; r <= rounds && !status; r++) /* round 0 warms up; candidates interleaved */
            for (int c = 0; c < 2; c++) {
                opr_op_force_grad_candidate(node, cands[c]);
                double t = one_step(qkv, &saved[c]);
                if (t < 0) { status = 1; break; }
                if (r > 0 && t < best[c]) best[c] = t;
            }
        opr_op_force_grad_candidate(node, -1);
        const double mib = 1024.0 * 1024.0;
        printf("%6lld %12.2f %12.2f ", (long long)lengths[i], best[0] / 1e6, best[1] / 1e6);
        if (tv[2 * i] > 0) printf("%12.2f ", tv[2 * i] / 1e6);
        else printf("%12s ", "n/a");
        printf("%12.2f %12.2f ", (double)saved[0] / mib, (double)saved[1] / mib);
        if (tv[2 * i] > 0) printf("%12.2f %11.2f\n", tv[2 * i + 1] / mib, tv[2 * i] / best[0]);
        else printf("%12s %11s\n", "n/a", "n/a");
        for (int k = 0; k < 3; k++) opr_tensor_release(qkv[k]);
    }
    opr_ctx_free(ctx);
    return status;
}
