/* opreg_bench_leaf_ready: what opr_backward_opts.leaf_ready (the hook the data-parallel
 * helper starts its bucket reductions from) adds to a backward pass, by number of
 * leaves: the graph adds N parameter-like leaves of 4 floats in a chain, and the
 * backward runs with and without the hook (best of 5 each). The per-leaf overhead
 * should stay flat as N grows (the engine finds a leaf's count through an index, not a
 * search of every watched leaf). */
#include "bench_timing.h"
#include <opreg/opreg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ready;
static void on_ready(opr_tensor *leaf, void *user)
{
    (void)leaf;
    (void)user;
    ready++;
}

static int fail(const char *what)
{
    fprintf(stderr, "opreg_bench_leaf_ready: %s: %s\n", what, opr_last_error());
    return 1;
}

/* The best of 5 backward passes over sum(x_0 + ... + x_{n-1}), in seconds. */
static int time_backward(opr_ctx *ctx, opr_tensor **leaves, int n, bool hook, double *best)
{
    *best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        opr_tensor *s = opr_tensor_retain(leaves[0]);
        for (int i = 1; i < n; i++) {
            opr_value a[2] = {opr_v_tensor(s), opr_v_tensor(leaves[i])};
            opr_tensor *t = NULL;
            int rc = opr_call_by_name(ctx, "add", a, 2, &t, 1);
            opr_tensor_release(s);
            if (rc) return fail("add");
            s = t;
        }
        opr_value a = opr_v_tensor(s);
        opr_tensor *r = NULL;
        int rc = opr_call_by_name(ctx, "sum", &a, 1, &r, 1);
        opr_tensor_release(s);
        if (rc) return fail("sum");
        opr_backward_opts o = {.struct_size = sizeof o, .leaf_ready = hook ? on_ready : NULL};
        ready = 0;
        double t0 = bench_now_s();
        rc = opr_backward(r, NULL, &o);
        double t = bench_now_s() - t0;
        opr_tensor_release(r);
        if (rc) return fail("backward");
        if (hook && ready != n) {
            fprintf(stderr, "opreg_bench_leaf_ready: %d leaf_ready calls for %d leaves\n", ready, n);
            return 1;
        }
        if (t < *best) *best = t;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        printf("usage: opreg_bench_leaf_ready\n\nPrints the backward time of a chain of N leaves "
               "with and without opr_backward_opts.leaf_ready, and the hook's cost per leaf.\n");
        return !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ? 0 : 2;
    }
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) return fail("opr_ctx_new");
    printf("%8s %14s %14s %16s\n", "leaves", "backward ms", "with hook ms", "hook ns/leaf");
    static const int sizes[] = {500, 2000, 8000};
    int status = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !status; k++) {
        const int n = sizes[k];
        opr_tensor **leaves = calloc((size_t)n, sizeof *leaves);
        for (int i = 0; leaves && i < n && !status; i++) {
            leaves[i] = opr_tensor_new(ctx, OPR_F32, 1, (int64_t[]){4}, OPR_CPU);
            if (!leaves[i] || opr_set_requires_grad(leaves[i], true)) status = fail("a leaf");
        }
        if (!leaves) status = fail("out of memory");
        double plain = 0, hooked = 0;
        if (!status) status = time_backward(ctx, leaves, n, false, &plain);
        if (!status) status = time_backward(ctx, leaves, n, true, &hooked);
        if (!status)
            printf("%8d %14.3f %14.3f %16.0f\n", n, plain * 1e3, hooked * 1e3, (hooked - plain) * 1e9 / n);
        for (int i = 0; leaves && i < n; i++) opr_tensor_release(leaves[i]);
        free(leaves);
    }
    opr_ctx_free(ctx);
    return status;
}
