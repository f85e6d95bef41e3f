/* opreg_bench_jagged: jagged tensors against padding, in one run, f32, one thread.
 *
 * Memory (the seed's test): B = 64 sequences of D = 512, lengths drawn in 1..100:
 * input (requires grad) -> linear(D -> D, weight and bias require grad) -> sum ->
 * backward. Peak live bytes (opr_memory_stats) for the jagged batch and for the padded
 * dense [64, 100, 512] one, each against its analytic minimum (input, weight, bias,
 * output, their gradients), and PyTorch 1.13's peak on the padded batch (host memory
 * counted by bench/memhook.c, preloaded into bench/jagged_torch.py).
 *
 * Speed: B = 128 sequences of D = 512, lengths with mean about 25 of max 100:
 *   linear   linear forward + backward (weight and bias require grad)
 *   chain    attention-like pooling: y = linear(x); softmax of y over the ragged dim,
 *            times y, summed over the ragged dim -> sum -> backward
 * each jagged in opreg, padded in opreg (a -inf mask on the padding for the softmax) and
 * padded in PyTorch (libtorch 1.13 through Python: the same kernels; Python adds a few
 * us per op, noise at these sizes). Each figure is the fastest of --rounds rounds.
 * Targets: jagged >= 2.5x faster than padded in opreg; faster than PyTorch padded.
 *
 *   opreg_bench_jagged [--rounds N] [--no-torch] */
#include "bench_python.h"
#include "bench_timing.h"

#include <opreg/opreg.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { D = 512, MEM_B = 64, MEM_MAX = 100, SPEED_B = 128, SPEED_MAX = 100 };

static opr_ctx *ctx;

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static opr_tensor *rand_tensor(int ndim, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * uniform());
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, ndim, shape, v, OPR_CPU);
    free(v);
    return t;
}

static opr_tensor *call(const char *op, const opr_value *args, int n)
{
    opr_tensor *out = NULL;
    if (opr_call_by_name(ctx, op, args, n, &out, 1)) {
        fprintf(stderr, "%s: %s\n", op, opr_last_error());
        exit(1);
    }
    return out;
}

/* A jagged [B, ragged, D] batch of random values with these lengths. */
static opr_tensor *jagged_batch(const int64_t *lengths, int B)
{
    int64_t total = 0;
    for (int b = 0; b < B; b++) total += lengths[b];
    int64_t *offs = malloc((size_t)(B + 1) * sizeof *offs);
    offs[0] = 0;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lengths[b];
    opr_tensor *v = rand_tensor(2, (int64_t[]){total, D}, -1, 1);
    opr_tensor *o = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){B + 1}, offs, OPR_CPU);
    opr_tensor *j = opr_jagged_from_values(v, o);
    if (!j) { fprintf(stderr, "jagged: %s\n", opr_last_error()); exit(1); }
    opr_tensor_release(v);
    opr_tensor_release(o);
    free(offs);
    return j;
}

/* ------------------------------------------------------------------ memory */

static void linear_peak(opr_tensor *x, uint64_t *peak)
{
    opr_tensor *w = rand_tensor(2, (int64_t[]){D, D}, -0.05, 0.05), *b = rand_tensor(1, (int64_t[]){D}, -1, 1);
    opr_set_requires_grad(x, true);
    opr_set_requires_grad(w, true);
    opr_set_requires_grad(b, true);
    opr_tensor *y = call("linear", (opr_value[]){opr_v_tensor(x), opr_v_tensor(w), opr_v_tensor(b)}, 3);
    opr_tensor *loss = call("sum", (opr_value[]){opr_v_tensor(y)}, 1);
    if (opr_backward(loss, NULL, NULL)) { fprintf(stderr, "backward: %s\n", opr_last_error()); exit(1); }
    opr_mem_stats st = {.struct_size = sizeof st};
    opr_memory_stats(ctx, OPR_CPU, &st);
    *peak = st.peak_bytes;
    opr_tensor_release(w);
    opr_tensor_release(b);
    opr_tensor_release(y);
    opr_tensor_release(loss);
}

/* Peak bytes above what was live before, for the jagged or the padded batch. */
static uint64_t memory_row(const int64_t *lengths, bool jagged, uint64_t *minimum)
{
    opr_mem_stats st = {.struct_size = sizeof st};
    opr_memory_stats(ctx, OPR_CPU, &st);
    const uint64_t base = st.current_bytes;
    opr_memory_reset_peak(ctx, OPR_CPU);
    int64_t rows = 0;
    for (int b = 0; b < MEM_B; b++) rows += lengths[b];
    if (!jagged) rows = (int64_t)MEM_B * MEM_MAX;
    opr_tensor *x = jagged ? jagged_batch(lengths, MEM_B) : rand_tensor(3, (int64_t[]){MEM_B, MEM_MAX, D}, -1, 1);
    uint64_t peak;
    linear_peak(x, &peak);
    opr_tensor_release(x);
    const uint64_t act = (uint64_t)rows * D * 4, params = (uint64_t)(D * D + D) * 4;
    *minimum = 3 * act + 2 * params + 4 + (jagged ? (uint64_t)(MEM_B + 1) * 8 : 0);
    return peak - base;
}

/* ------------------------------------------------------------------ speed */

typedef struct speed_case {
    opr_tensor *x, *w, *b;
    opr_tensor *neg_mask; /* padded only: [B, N, 1], -inf on the padding */
    bool chain;
} speed_case;

static double one_step(const speed_case *c)
{
    double t0 = bench_now_s();
    opr_tensor *y = call("linear", (opr_value[]){opr_v_tensor(c->x), opr_v_tensor(c->w), opr_v_tensor(c->b)}, 3);
    opr_tensor *loss;
    if (!c->chain) {
        loss = call("sum", (opr_value[]){opr_v_tensor(y)}, 1);
    } else {
        opr_tensor *m = c->neg_mask ? call("add", (opr_value[]){opr_v_tensor(y), opr_v_tensor(c->neg_mask)}, 2)
                                    : opr_tensor_retain(y);
        opr_tensor *a = call("softmax", (opr_value[]){opr_v_tensor(m), opr_v_int(1)}, 2);
        opr_tensor *p = call("mul", (opr_value[]){opr_v_tensor(a), opr_v_tensor(y)}, 2);
        int64_t one = 1;
        opr_tensor *s = call("sum", (opr_value[]){opr_v_tensor(p), opr_v_ints(&one, 1)}, 2);
        loss = call("sum", (opr_value[]){opr_v_tensor(s)}, 1);
        opr_tensor_release(m);
        opr_tensor_release(a);
        opr_tensor_release(p);
        opr_tensor_release(s);
    }
    opr_tensor *g[3] = {NULL, NULL, NULL}, *in[3] = {c->x, c->w, c->b};
    if (opr_autograd_grad(&loss, NULL, 1, in, 3, g, NULL)) { fprintf(stderr, "backward: %s\n", opr_last_error()); exit(1); }
    double t = bench_now_s() - t0;
    for (int i = 0; i < 3; i++) opr_tensor_release(g[i]);
    opr_tensor_release(loss);
    opr_tensor_release(y);
    return t * 1e9;
}

static double best_of(const speed_case *c, int rounds)
{
    double best = INFINITY;
    for (int r = 0; r <= rounds; r++) { /* the first round warms up */
        double t = one_step(c);
        if (r && t < best) best = t;
    }
    return best;
}

/* ------------------------------------------------------------------ PyTorch */

/* "l0,l1,..." appended to buf. */
static void append_lengths(char *buf, size_t len, const int64_t *l, int n)
{
    size_t used = strlen(buf);
    for (int i = 0; i < n && used + 24 < len; i++) used += (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld", (long long)l[i]);
}

int main(int argc, char **argv)
{
    int rounds = 5;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else {
            printf("usage: opreg_bench_jagged [--rounds N] [--no-torch]\n\n"
                   "Jagged tensors against padding: peak memory of linear backward (B=64, D=512,\n"
                   "lengths 1..100) and the time of linear and of an attention-like chain, forward\n"
                   "+ backward (B=128, D=512, lengths of mean 25, max 100), jagged and padded in\n"
                   "opreg and padded in PyTorch. f32, one thread, fastest of N rounds (default 5).\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }

    /* the batches, drawn once: both sides see the same lengths */
    int64_t mem_l[MEM_B], speed_l[SPEED_B], mem_total = 0, speed_total = 0, speed_max = 0;
    for (int b = 0; b < MEM_B; b++) { mem_l[b] = 1 + (int64_t)(uniform() * MEM_MAX); mem_total += mem_l[b]; }
    for (int b = 0; b < SPEED_B; b++) { /* exponential with mean 25, cut to 1..100 */
        int64_t l = 1 + (int64_t)(-24.0 * log(1.0 - uniform()));
        speed_l[b] = l > SPEED_MAX ? SPEED_MAX : l;
    }
    speed_l[0] = SPEED_MAX; /* one full-length sequence: the batch pads to 100 */
    for (int b = 0; b < SPEED_B; b++) {
        speed_total += speed_l[b];
        if (speed_l[b] > speed_max) speed_max = speed_l[b];
    }

    const char *names[] = {"mem_padded_peak", "linear_padded", "chain_padded"};
    double tv[3] = {-1, -1, -1};
    char args[4096];
    snprintf(args, sizeof args, "%d %d ", rounds, D);
    append_lengths(args, sizeof args, mem_l, MEM_B);
    strcat(args, " ");
    append_lengths(args, sizeof args, speed_l, SPEED_B);
    bool have_torch = torch && bench_python_figures("torch", "jagged_torch.py", args, OPREG_BENCH_MEMHOOK, names, tv, 3) == 0;

    uint64_t jmin, dmin;
    uint64_t jpeak = memory_row(mem_l, true, &jmin), dpeak = memory_row(mem_l, false, &dmin);
    printf("memory: linear backward, B=%d D=%d, lengths 1..%d (%lld tokens of %d padded)\n", MEM_B, D, MEM_MAX,
           (long long)mem_total, MEM_B * MEM_MAX);
    printf("  %-22s %10s %10s %8s\n", "", "peak MB", "min MB", "peak/min");
    printf("  %-22s %10.2f %10.2f %8.3f\n", "opreg jagged", jpeak / 1e6, jmin / 1e6, (double)jpeak / (double)jmin);
    printf("  %-22s %10.2f %10.2f %8.3f\n", "opreg padded", dpeak / 1e6, dmin / 1e6, (double)dpeak / (double)dmin);
    if (have_torch && tv[0] >= 0)
        printf("  %-22s %10.2f %10.2f %8.3f\n", "pytorch 1.13 padded", tv[0] / 1e6, dmin / 1e6, tv[0] / (double)dmin);
    else
        printf("  pytorch: %s\n", have_torch ? "no memory figure (memhook not preloaded)" : "no python3 with torch found, or --no-torch");
    printf("  jagged peak / pytorch padded peak: %s%.3f\n\n", have_torch && tv[0] > 0 ? "" : "(n/a) ",
           have_torch && tv[0] > 0 ? (double)jpeak / tv[0] : 0.0);

    /* speed */
    opr_tensor *xj = jagged_batch(speed_l, SPEED_B);
    opr_tensor *xp = opr_jagged_to_padded(xj, 0);
    float *mask = malloc((size_t)SPEED_B * speed_max * sizeof *mask);
    for (int b = 0; b < SPEED_B; b++)
        for (int64_t i = 0; i < speed_max; i++) mask[b * speed_max + i] = i < speed_l[b] ? 0.0f : -INFINITY;
    opr_tensor *neg = opr_tensor_from_data(ctx, OPR_F32, 3, (int64_t[]){SPEED_B, speed_max, 1}, mask, OPR_CPU);
    free(mask);
    opr_tensor *w = rand_tensor(2, (int64_t[]){D, D}, -0.05, 0.05), *b = rand_tensor(1, (int64_t[]){D}, -1, 1);
    opr_set_requires_grad(xj, true);
    opr_set_requires_grad(xp, true);
    opr_set_requires_grad(w, true);
    opr_set_requires_grad(b, true);
    printf("speed: forward + backward, B=%d D=%d, lengths mean %.1f max %lld (%lld tokens of %lld padded), "
           "fastest of %d\n", SPEED_B, D, (double)speed_total / SPEED_B, (long long)speed_max, (long long)speed_total,
           (long long)SPEED_B * speed_max, rounds);
    printf("  %-8s %14s %14s %14s %16s %16s\n", "row", "jagged ms", "padded ms", "torch pad ms", "padded/jagged",
           "torch/jagged");
    const char *rows[2] = {"linear", "chain"};
    for (int r = 0; r < 2; r++) {
        speed_case cj = {xj, w, b, NULL, r == 1}, cp = {xp, w, b, neg, r == 1};
        double tj = best_of(&cj, rounds), tp = best_of(&cp, rounds), tt = tv[1 + r];
        printf("  %-8s %14.3f %14.3f %14.3f %15.2fx", rows[r], tj / 1e6, tp / 1e6, have_torch ? tt / 1e6 : NAN, tp / tj);
        if (have_torch) printf(" %15.2fx\n", tt / tj);
        else printf(" %16s\n", "n/a");
    }
    printf("\ntargets: padded/jagged >= 2.5x (opreg), torch/jagged > 1x; jagged peak <= 1.1x its minimum\n");
    opr_tensor *rel[] = {xj, xp, neg, w, b};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) opr_tensor_release(rel[i]);
    return opr_ctx_free(ctx) ? 1 : 0;
}
