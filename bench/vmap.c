/* opreg_bench_vmap: per-sample gradients of an MLP 784-512-10 with cross-entropy,
 * batch 64, f32, one thread, in one run:
 *   vmap       opr_vmap of a callback that takes one sample's loss and
 *              opr_autograd_grad of it with respect to the weights
 *   loop       64 backward passes, one per sample (what one writes without vmap)
 *   functorch  vmap(grad(loss)) in PyTorch 1.13 (bench/vmap_torch.py)
 * Each figure is the fastest of --rounds rounds of one batch; the peak is the live
 * memory above what was there before (opr_memory_stats; for PyTorch the host memory
 * counted by bench/memhook.c). The two opreg results are compared.
 * Targets: vmap >= 5x faster than the loop, and no slower than functorch.
 *
 *   opreg_bench_vmap [--rounds N] [--no-torch] */
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

enum { B = 64, IN = 784, HID = 512, OUT = 10, NP = 4 };

static opr_ctx *ctx;
static opr_tensor *params[NP];

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static opr_tensor *tensor(int nd, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * uniform());
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, nd, shape, v, OPR_CPU);
    free(v);
    return t;
}

static opr_tensor *call(const char *op, const opr_value *args, int n)
{
    opr_tensor *out = NULL;
    if (opr_call_by_name(ctx, op, args, n, &out, 1)) { fprintf(stderr, "%s: %s\n", op, opr_last_error()); exit(1); }
    return out;
}

/* One sample's cross-entropy: x [784], y [1] (i64). */
static opr_tensor *sample_loss(opr_tensor *x, opr_tensor *y)
{
    opr_tensor *h = call("linear", (opr_value[]){opr_v_tensor(x), opr_v_tensor(params[0]), opr_v_tensor(params[1])}, 3);
    opr_tensor *r = call("relu", (opr_value[]){opr_v_tensor(h)}, 1);
    opr_tensor *z = call("linear", (opr_value[]){opr_v_tensor(r), opr_v_tensor(params[2]), opr_v_tensor(params[3])}, 3);
    opr_tensor *lp = call("log_softmax", (opr_value[]){opr_v_tensor(z), opr_v_int(0)}, 2);
    opr_tensor *p = call("gather", (opr_value[]){opr_v_tensor(lp), opr_v_int(0), opr_v_tensor(y)}, 3);
    opr_tensor *s = call("sum", (opr_value[]){opr_v_tensor(p)}, 1);
    opr_tensor *l = call("neg", (opr_value[]){opr_v_tensor(s)}, 1);
    opr_tensor *tmp[] = {h, r, z, lp, p, s};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) opr_tensor_release(tmp[i]);
    return l;
}

static opr_status per_sample(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)ud; (void)nin; (void)nout;
    opr_tensor *l = sample_loss(in[0], in[1]);
    opr_status rc = opr_autograd_grad(&l, NULL, 1, params, NP, out, NULL);
    opr_tensor_release(l);
    return rc;
}

/* One batch of per-sample gradients (into g, [B, ...] per parameter); seconds. */
static double run_vmap(opr_tensor *x, opr_tensor *y, opr_tensor **g)
{
    double t0 = bench_now_s();
    if (opr_vmap(ctx, per_sample, NULL, (opr_tensor *[]){x, y}, (int[]){0, 0}, 2, g, NULL, NP, NULL)) {
        fprintf(stderr, "opr_vmap: %s\n", opr_last_error());
        exit(1);
    }
    return bench_now_s() - t0;
}

/* The same with one backward pass per sample; gradients into host arrays. */
static double run_loop(opr_tensor *x, opr_tensor *y, float **host)
{
    double t0 = bench_now_s();
    for (int s = 0; s < B; s++) {
        opr_tensor *xs = call("narrow", (opr_value[]){opr_v_tensor(x), opr_v_int(0), opr_v_int(s), opr_v_int(1)}, 4);
        opr_tensor *xi = call("reshape", (opr_value[]){opr_v_tensor(xs), opr_v_ints((int64_t[]){IN}, 1)}, 2);
        opr_tensor *yi = call("narrow", (opr_value[]){opr_v_tensor(y), opr_v_int(0), opr_v_int(s), opr_v_int(1)}, 4);
        opr_tensor *yv = call("reshape", (opr_value[]){opr_v_tensor(yi), opr_v_ints((int64_t[]){1}, 1)}, 2);
        opr_tensor *l = sample_loss(xi, yv), *g[NP];
        if (opr_autograd_grad(&l, NULL, 1, params, NP, g, NULL)) { fprintf(stderr, "loop: %s\n", opr_last_error()); exit(1); }
        for (int p = 0; p < NP; p++) {
            if (host) {
                size_t n = (size_t)opr_tensor_numel(g[p]);
                opr_tensor_copy_to_host(g[p], host[p] + (size_t)s * n, n * sizeof(float));
            }
            opr_tensor_release(g[p]);
        }
        opr_tensor *tmp[] = {xs, xi, yi, yv, l};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) opr_tensor_release(tmp[i]);
    }
    return bench_now_s() - t0;
}

int main(int argc, char **argv)
{
    int rounds = 5;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else {
            printf("usage: opreg_bench_vmap [--rounds N] [--no-torch]\n\n"
                   "Per-sample gradients of an MLP 784-512-10 (cross-entropy, batch 64, f32, one thread):\n"
                   "opr_vmap against a loop of backward passes and functorch's vmap(grad), fastest of N\n"
                   "rounds (default 5), with the peak memory of each.\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }
    params[0] = tensor(2, (int64_t[]){HID, IN}, -0.05, 0.05);
    params[1] = tensor(1, (int64_t[]){HID}, 0, 0);
    params[2] = tensor(2, (int64_t[]){OUT, HID}, -0.05, 0.05);
    params[3] = tensor(1, (int64_t[]){OUT}, 0, 0);
    for (int p = 0; p < NP; p++) opr_set_requires_grad(params[p], true);
    opr_tensor *x = tensor(2, (int64_t[]){B, IN}, 0, 1);
    int64_t ys[B];
    for (int s = 0; s < B; s++) ys[s] = (int64_t)(uniform() * OUT);
    opr_tensor *y = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){B, 1}, ys, OPR_CPU);

    const char *names[2] = {"functorch_ns", "functorch_peak"};
    double py[2] = {-1, -1};
    char args[32];
    snprintf(args, sizeof args, "%d %d", rounds, B);
    bool have_torch = torch && bench_python_figures("functorch", "vmap_torch.py", args, OPREG_BENCH_MEMHOOK, names, py, 2) == 0;
    const double tt = py[0], tpeak = py[1];

    /* correctness first: vmap against the loop */
    float *loop_g[NP];
    opr_tensor *g[NP];
    size_t numel[NP];
    run_vmap(x, y, g);
    for (int p = 0; p < NP; p++) {
        numel[p] = (size_t)opr_tensor_numel(g[p]);
        loop_g[p] = malloc(numel[p] * sizeof(float));
    }
    run_loop(x, y, loop_g);
    double worst = 0;
    for (int p = 0; p < NP; p++) {
        float *v = malloc(numel[p] * sizeof(float));
        opr_tensor_copy_to_host(g[p], v, numel[p] * sizeof(float));
        for (size_t i = 0; i < numel[p]; i++) worst = fmax(worst, fabs((double)v[i] - loop_g[p][i]));
        free(v);
        free(loop_g[p]);
        opr_tensor_release(g[p]);
    }

    double tv = INFINITY, tl = INFINITY;
    uint64_t pv = 0, pl = 0;
    opr_mem_stats st = {.struct_size = sizeof st};
    for (int r = 0; r < rounds; r++) {
        opr_memory_stats(ctx, OPR_CPU, &st);
        uint64_t base = st.current_bytes;
        opr_memory_reset_peak(ctx, OPR_CPU);
        tv = fmin(tv, run_vmap(x, y, g));
        opr_memory_stats(ctx, OPR_CPU, &st);
        pv = st.peak_bytes - base;
        for (int p = 0; p < NP; p++) opr_tensor_release(g[p]);
        opr_memory_stats(ctx, OPR_CPU, &st);
        base = st.current_bytes;
        opr_memory_reset_peak(ctx, OPR_CPU);
        tl = fmin(tl, run_loop(x, y, NULL));
        opr_memory_stats(ctx, OPR_CPU, &st);
        pl = st.peak_bytes - base;
    }
    printf("per-sample gradients, MLP %d-%d-%d, cross-entropy, batch %d, f32, 1 thread, fastest of %d\n", IN, HID, OUT,
           B, rounds);
    printf("  %-22s %10s %12s\n", "", "ms", "peak MB");
    printf("  %-22s %10.2f %12.2f\n", "opreg opr_vmap", tv * 1e3, pv / 1e6);
    printf("  %-22s %10.2f %12.2f\n", "opreg loop of 64", tl * 1e3, pl / 1e6);
    if (have_torch) printf("  %-22s %10.2f %12.2f\n", "functorch vmap(grad)", tt / 1e6, tpeak / 1e6);
    else printf("  functorch: no python3 with functorch found, or --no-torch\n");
    printf("  loop / vmap: %.2fx", tl / tv);
    if (have_torch) printf("   functorch / vmap: %.2fx", tt * 1e-9 / tv);
    printf("\n  largest difference between vmap and the loop: %.3g\n", worst);
    printf("targets: loop / vmap >= 5x; functorch / vmap >= 1x\n");
    for (int p = 0; p < NP; p++) opr_tensor_release(params[p]);
    opr_tensor_release(x);
    opr_tensor_release(y);
    return opr_ctx_free(ctx) ? 1 : 0;
}
