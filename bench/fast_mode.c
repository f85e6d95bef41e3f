/* opreg_bench_fast_mode: backward passes with the special-case subgradients (normal)
 * and without (fast mode, opr_special_grads_set(false) at forward), side by side with
 * PyTorch's backward (bench/fast_mode_torch.py, run as a subprocess with the first
 * python3 that has torch) in one run. f32, one thread everywhere. Each figure is the
 * fastest of --rounds rounds of one backward (the forward is not timed).
 *
 * Targets (issue "special-gradient fast mode"): fast >= 1.5x faster than normal on
 * cdist and norm; fast never slower than normal; fast faster than PyTorch everywhere.
 *
 *   opreg_bench_fast_mode [--rounds N] [--no-torch] */
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

/* A leaf input that requires grad. */
static opr_tensor *rand_leaf(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    opr_tensor *t = bench_rand_f32(ctx, ndim, shape, lo, hi, seed);
    if (t) opr_set_requires_grad(t, true);
    return t;
}

typedef struct bcase {
    const char *name;
    const char *op;       /* forward: op(x[0], x[1]?, extra), then sum unless 0-d */
    int nin;
    int ndim;
    int64_t shape[2];
    double lo, hi;
    opr_value extra;      /* kind OPR_V_NONE: none */
    bool has_extra;
} bcase;

/* One backward of case c (forward untimed); < 0 on error. */
static double one_backward(const bcase *c, opr_tensor **x, bool fast)
{
    opr_value args[3];
    int n = 0;
    for (int i = 0; i < c->nin; i++) args[n++] = opr_v_tensor(x[i]);
    if (c->has_extra) args[n++] = c->extra;
    bool prev = opr_special_grads_set(!fast);
    opr_tensor *y = NULL, *s = NULL;
    int rc = opr_call_by_name(ctx, c->op, args, n, &y, 1);
    if (!rc && opr_tensor_ndim(y) > 0) {
        opr_value a = opr_v_tensor(y);
        rc = opr_call_by_name(ctx, "sum", &a, 1, &s, 1);
    } else if (!rc) {
        s = opr_tensor_retain(y);
    }
    opr_special_grads_set(prev);
    if (rc) { fprintf(stderr, "%s: %s\n", c->name, opr_last_error()); opr_tensor_release(y); return -1; }
    opr_tensor *g[2] = {NULL, NULL};
    double t0 = bench_now_s();
    rc = opr_autograd_grad(&s, NULL, 1, x, c->nin, g, NULL);
    double t = bench_now_s() - t0;
    if (rc) fprintf(stderr, "%s: backward: %s\n", c->name, opr_last_error());
    for (int i = 0; i < c->nin; i++) opr_tensor_release(g[i]);
    opr_tensor_release(s);
    opr_tensor_release(y);
    return rc ? -1 : t * 1e9;
}

int main(int argc, char **argv)
{
    int rounds = 5;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else {
            printf("usage: opreg_bench_fast_mode [--rounds N] [--no-torch]\n\n"
                   "Backward time of normal and fast mode (opr_special_grads_set) against PyTorch's\n"
                   "backward, f32, one thread, fastest of N rounds (default 5).\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }
    const bcase cases[] = {
        {"cdist_2048x64", "cdist", 2, 2, {2048, 64}, -1, 1, {0}, false},
        {"norm_1M", "norm", 1, 1, {1 << 20}, -1, 1, {0}, false},
        {"norm_16M", "norm", 1, 1, {1 << 24}, -1, 1, {0}, false},
        {"norm_p3_1M", "norm", 1, 1, {1 << 20}, -1, 1, opr_v_double(3), true},
        {"prod_rows_4096x256", "prod", 1, 2, {4096, 256}, 0.9, 1.1, opr_v_int(1), true},
        {"max_1M", "max", 1, 1, {1 << 20}, -1, 1, {0}, false},
        {"sqrt_1M", "sqrt", 1, 1, {1 << 20}, 0.5, 2, {0}, false},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    const char *names[N];
    double tns[N];
    for (int i = 0; i < N; i++) { names[i] = cases[i].name; tns[i] = -1; }
    char args[32];
    snprintf(args, sizeof args, "%d", rounds);
    bool have_torch = torch && bench_python_figures("torch", "fast_mode_torch.py", args, NULL, names, tns, N) == 0;
    printf("backward only, f32, 1 thread, fastest of %d rounds%s\n\n", rounds,
           have_torch ? "" : " (PyTorch: no python3 with torch found, or --no-torch)");
    printf("%-20s %12s %12s %12s %12s %14s\n", "case", "normal us", "fast us", "torch us", "normal/fast",
           "fast/torch");
    int status = 0;
    for (int i = 0; i < N; i++) {
        const bcase *c = &cases[i];
        opr_tensor *x[2] = {NULL, NULL};
        for (int k = 0; k < c->nin; k++) x[k] = rand_leaf(c->ndim, c->shape, c->lo, c->hi, 11 + k);
        double best[2] = {1e300, 1e300};
        for (int r = 0; r <= rounds; r++) /* round 0 warms up; normal and fast interleaved */
            for (int f = 0; f < 2; f++) {
                double t = one_backward(c, x, f);
                if (t < 0) { status = 1; break; }
                if (r > 0 && t < best[f]) best[f] = t;
            }
        for (int k = 0; k < c->nin; k++) opr_tensor_release(x[k]);
        char tcol[32] = "-", rcol[32] = "-";
        if (tns[i] > 0) {
            snprintf(tcol, sizeof tcol, "%.1f", tns[i] / 1e3);
            snprintf(rcol, sizeof rcol, "%.2fx", best[1] / tns[i]);
        }
        printf("%-20s %12.1f %12.1f %12s %11.2fx %14s\n", c->name, best[0] / 1e3, best[1] / 1e3, tcol,
               best[0] / best[1], rcol);
    }
    printf("\nnormal/fast > 1: fast mode is faster; fast/torch < 1: opreg's fast mode beats PyTorch.\n");
    opr_ctx_free(ctx);
    return status;
}
