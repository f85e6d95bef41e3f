/* Dispatch benchmark: nanoseconds per call of opreg's opr_call against libtorch's
 * at::add / at::mm, side by side in one run.
 *
 *   add  two 8-element f32 tensors; the output is released every call, as a caller
 *        that drops its result would (so output allocation counts);
 *   mm   two 256x256 f32 matrices, both libraries on the same OpenBLAS and the same
 *        thread count (default 1).
 *
 * Method (bench_timing.h): calibrate, one untimed warm-up repetition, then the median
 * of --reps timed repetitions, sized so that a cell's repetitions take about --time
 * seconds together; CLOCK_MONOTONIC.
 *
 * Usage: opreg_bench_dispatch [--time S] [--reps N] [--threads N]
 *        opreg_bench_dispatch --profile add|mm [--iters N]
 *            runs only opreg's loop N times, untimed, for perf / callgrind.
 * Exit status: 0 when the results check out (targets missed still exit 0), 1 on error. */
#include <opreg/opreg.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_config.h" /* generated: OPREG_BENCH_HAVE_TORCH, OPREG_BENCH_NO_TORCH_REASON */
#include "bench_timing.h"
#if OPREG_BENCH_HAVE_TORCH
#include "bench_torch.h"
#endif

#define ADD_N 8
#define MM_N 256
#define TARGET_ADD_NS 150.0
#define TARGET_RATIO 5.0

/* ------------------------------------------------------------------ opreg side */

typedef struct opreg_state {
    const opr_op *op;
    opr_value args[2];
    int nargs;
    int rc;
} opreg_state;

static int opreg_body(void *p, long iters)
{
    opreg_state *s = p;
    for (long i = 0; i < iters; i++) {
        opr_tensor *out;
        int rc = opr_call(s->op, s->args, s->nargs, &out, 1);
        if (rc) { s->rc = rc; return 1; }
        opr_tensor_release(out);
    }
    return 0;
}

/* Runs op once on (a, b) and copies the result to host memory. */
static int opreg_once(const opr_op *op, opr_tensor *a, opr_tensor *b, float *out, size_t n)
{
    opr_value args[2] = {opr_v_tensor(a), opr_v_tensor(b)};
    opr_tensor *r = NULL;
    int rc = opr_call(op, args, 2, &r, 1);
    if (!rc) rc = opr_tensor_copy_to_host(r, out, n * sizeof *out);
    opr_tensor_release(r);
    return rc;
}

/* ------------------------------------------------------------------ helpers */

static void fill(float *v, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f; /* [-1, 1) */
    }
}

/* Largest |x - ref| / (1 + |ref|). */
static double max_rel_diff(const float *x, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static const char *fmt_ns(double ns, char *buf, size_t len)
{
    if (ns < 0) snprintf(buf, len, "-");
    else if (ns < 1e4) snprintf(buf, len, "%.1f", ns);
    else snprintf(buf, len, "%.0f", ns);
    return buf;
}

static void print_row(const char *op, const char *variant, double opreg_ns, double torch_ns)
{
    char a[32], b[32], r[32] = "-";
    if (opreg_ns > 0 && torch_ns > 0) snprintf(r, sizeof r, "%.2fx", torch_ns / opreg_ns);
    printf("%-16s %-26s %12s %13s %15s\n", op, variant, fmt_ns(opreg_ns, a, sizeof a),
           fmt_ns(torch_ns, b, sizeof b), r);
}

static void print_detail(const char *what, const bench_result *r)
{
    printf("  %-40s %9ld calls x %d reps   min %.1f  median %.1f  max %.1f ns\n", what, r->iters,
           r->reps, r->min_ns, r->ns, r->max_ns);
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--time SECONDS_PER_CELL] [--reps N] [--threads N]\n"
            "       %s --profile add|mm [--iters N] [--threads N]\n",
            argv0, argv0);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    bench_opts o = {.cell_s = 0.3, .reps = 11};
    int threads = 1;
    const char *profile = NULL;
    long profile_iters = 1000000;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--time") && val) { o.cell_s = atof(val); i++; }
        else if (!strcmp(arg, "--reps") && val) { o.reps = atoi(val); i++; }
        else if (!strcmp(arg, "--threads") && val) { threads = atoi(val); i++; }
        else if (!strcmp(arg, "--profile") && val) { profile = val; i++; }
        else if (!strcmp(arg, "--iters") && val) { profile_iters = atol(val); i++; }
        else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) { usage(argv[0]); return 0; }
        else { usage(argv[0]); return 1; }
    }
    if (o.cell_s <= 0 || o.reps < 1 || o.reps > BENCH_MAX_REPS || threads < 1 || profile_iters < 1 ||
        (profile && strcmp(profile, "add") && strcmp(profile, "mm"))) {
        usage(argv[0]);
        return 1;
    }

    /* One OpenBLAS in the process (the plugin's and libtorch's libblas.so.3 both
     * resolve to libopenblas.so.0), so this setting covers both sides. */
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);

    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }
    const opr_op *add = opr_op_find(ctx, "add"), *mm = opr_op_find(ctx, "mm");
    if (!add || !mm || !opr_op_has_kernel(add, 0) || !opr_op_has_kernel(mm, 0)) {
        fprintf(stderr, "opreg: no CPU kernel for add/mm; plugin candidates:\n");
        for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
            opr_plugin_candidate c = {.struct_size = sizeof c};
            if (!opr_plugin_candidate_get(ctx, i, &c))
                fprintf(stderr, "  %s: %s\n", c.path, c.loaded ? "loaded" : c.why ? c.why : "not loaded");
        }
        opr_ctx_free(ctx);
        return 1;
    }

    float add_a[ADD_N], add_b[ADD_N], add_o[ADD_N];
    fill(add_a, ADD_N, 1);
    fill(add_b, ADD_N, 2);
    float *mm_a = malloc(sizeof(float) * MM_N * MM_N), *mm_b = malloc(sizeof(float) * MM_N * MM_N),
          *mm_o = malloc(sizeof(float) * MM_N * MM_N);
    double *mm_ref = calloc((size_t)MM_N * MM_N, sizeof(double));
    if (!mm_a || !mm_b || !mm_o || !mm_ref) { fprintf(stderr, "out of memory\n"); return 1; }
    fill(mm_a, (size_t)MM_N * MM_N, 3);
    fill(mm_b, (size_t)MM_N * MM_N, 4);

    const int64_t add_shape[1] = {ADD_N}, mm_shape[2] = {MM_N, MM_N};
    opr_tensor *ta = opr_tensor_from_data(ctx, OPR_F32, 1, add_shape, add_a, OPR_CPU);
    opr_tensor *tb = opr_tensor_from_data(ctx, OPR_F32, 1, add_shape, add_b, OPR_CPU);
    opr_tensor *ma = opr_tensor_from_data(ctx, OPR_F32, 2, mm_shape, mm_a, OPR_CPU);
    opr_tensor *mb = opr_tensor_from_data(ctx, OPR_F32, 2, mm_shape, mm_b, OPR_CPU);
    if (!ta || !tb || !ma || !mb) { fprintf(stderr, "opr_tensor_from_data: %s\n", opr_last_error()); return 1; }

    opreg_state add_s = {.op = add, .args = {opr_v_tensor(ta), opr_v_tensor(tb)}, .nargs = 2};
    opreg_state mm_s = {.op = mm, .args = {opr_v_tensor(ma), opr_v_tensor(mb)}, .nargs = 2};
    int status = 0;

    if (profile) { /* just the loop, for perf record / callgrind */
        opreg_state *s = !strcmp(profile, "add") ? &add_s : &mm_s;
        if (opreg_body(s, profile_iters)) {
            fprintf(stderr, "opr_call: %s\n", opr_last_error());
            status = 1;
        }
        goto done;
    }

    /* ---- correctness: opreg against exact / double references */
    int rc = opreg_once(add, ta, tb, add_o, ADD_N);
    for (int i = 0; !rc && i < ADD_N; i++)
        if (add_o[i] != add_a[i] + add_b[i]) rc = -100;
    if (rc) { fprintf(stderr, "opreg add gives wrong results (%d): %s\n", rc, opr_last_error()); status = 1; goto done; }
    for (int i = 0; i < MM_N; i++)
        for (int k = 0; k < MM_N; k++) {
            const double x = mm_a[i * MM_N + k];
            for (int j = 0; j < MM_N; j++) mm_ref[i * MM_N + j] += x * mm_b[k * MM_N + j];
        }
    rc = opreg_once(mm, ma, mb, mm_o, (size_t)MM_N * MM_N);
    double mm_diff = rc ? INFINITY : max_rel_diff(mm_o, mm_ref, (size_t)MM_N * MM_N);
    if (mm_diff > 1e-4) { fprintf(stderr, "opreg mm gives wrong results (rc %d, max rel diff %g): %s\n", rc, mm_diff, opr_last_error()); status = 1; goto done; }

    /* ---- libtorch setup and checks */
    char torch_info[512] = "", torch_err[512] = "";
    bool have_torch = false;
#if OPREG_BENCH_HAVE_TORCH
    if (bt_init(threads, torch_info, sizeof torch_info, torch_err, sizeof torch_err)) {
        snprintf(torch_info, sizeof torch_info, "not available (libtorch failed to initialise: %s)", torch_err);
    } else {
        have_torch = true;
        float t_add[ADD_N];
        float *t_mm = malloc(sizeof(float) * MM_N * MM_N);
        if (!t_mm || bt_add_once(add_a, add_b, ADD_N, t_add, torch_err, sizeof torch_err) ||
            bt_mm_once(mm_a, mm_b, MM_N, t_mm, torch_err, sizeof torch_err)) {
            fprintf(stderr, "libtorch check failed: %s\n", torch_err);
            status = 1;
            free(t_mm);
            goto done;
        }
        for (int i = 0; i < ADD_N; i++)
            if (t_add[i] != add_o[i]) { fprintf(stderr, "libtorch and opreg add disagree at %d\n", i); status = 1; }
        double d = max_rel_diff(t_mm, mm_ref, (size_t)MM_N * MM_N);
        if (d > 1e-4) { fprintf(stderr, "libtorch mm off by %g\n", d); status = 1; }
        free(t_mm);
        if (status) goto done;
    }
#else
    (void)torch_err;
    snprintf(torch_info, sizeof torch_info, "not available (%s)", OPREG_BENCH_NO_TORCH_REASON);
#endif

    printf("opreg dispatch benchmark: ns per call, median of %d timed repetitions (~%.2f s per cell,\n"
           "  after calibration and one warm-up repetition), CLOCK_MONOTONIC\n", o.reps, o.cell_s);
    printf("threads: %d everywhere: OpenBLAS %d (openblas_set_num_threads), OpenMP %d (omp_set_num_threads)%s\n",
           threads, openblas_get_num_threads(), omp_get_max_threads(),
           have_torch ? ", libtorch intra-op via torch::set_num_threads" : "");
    printf("BLAS: %s; one copy in the process, used by opreg's cpu plugin%s\n", openblas_get_config(),
           have_torch ? " and by libtorch (through libblas.so.3, which links libopenblas.so.0)" : "");
    printf("libtorch: %s\n", torch_info);
    printf("checks: add exact, mm max rel diff vs double reference %.2g%s\n\n", mm_diff,
           have_torch ? " (libtorch: same checks passed)" : "");

    /* ---- timing */
    bench_result r_add = bench_measure(opreg_body, &add_s, &o);
    if (r_add.ns < 0) { fprintf(stderr, "opreg add: %s\n", opr_last_error()); status = 1; goto done; }
    bench_result r_mm = bench_measure(opreg_body, &mm_s, &o);
    if (r_mm.ns < 0) { fprintf(stderr, "opreg mm: %s\n", opr_last_error()); status = 1; goto done; }

    bench_result t_add[3], t_mm;
    for (int m = 0; m < 3; m++) t_add[m].ns = -1;
    t_mm.ns = -1;
#if OPREG_BENCH_HAVE_TORCH
    if (have_torch) {
        for (int m = 0; m < BT_MODE_COUNT; m++)
            if (bt_time_add(add_a, add_b, ADD_N, (bt_mode)m, &o, &t_add[m], torch_err, sizeof torch_err)) {
                fprintf(stderr, "libtorch add (%s): %s\n", bt_mode_name((bt_mode)m), torch_err);
                status = 1;
            }
        if (bt_time_mm(mm_a, mm_b, MM_N, BT_NO_GRAD, &o, &t_mm, torch_err, sizeof torch_err)) {
            fprintf(stderr, "libtorch mm: %s\n", torch_err);
            status = 1;
        }
    }
#endif

    printf("%-16s %-26s %12s %13s %15s\n", "op", "libtorch variant", "opreg ns", "libtorch ns", "libtorch/opreg");
    printf("%-16s %-26s %12s %13s %15s\n", "----------------", "--------------------------", "--------",
           "-----------", "--------------");
    if (have_torch) {
        print_row("add f32[8]", "plain (grad mode on)", r_add.ns, t_add[0].ns);
        print_row("add f32[8]", "torch::NoGradGuard", r_add.ns, t_add[1].ns);
        print_row("add f32[8]", "c10::InferenceMode", r_add.ns, t_add[2].ns);
        print_row("mm f32[256x256]", "torch::NoGradGuard", r_mm.ns, t_mm.ns);
        printf("(one opreg figure per op, measured once: no input requires grad, and opreg's call\n"
               " path checks grad mode only when an input requires grad, so each libtorch variant is compared with it)\n\n");
    } else {
        print_row("add f32[8]", "(libtorch not available)", r_add.ns, -1);
        print_row("mm f32[256x256]", "(libtorch not available)", r_mm.ns, -1);
        printf("\n");
    }

    printf("cells:\n");
    print_detail("opreg add", &r_add);
    print_detail("opreg mm", &r_mm);
    if (have_torch) {
        print_detail("libtorch add, plain", &t_add[0]);
        print_detail("libtorch add, NoGradGuard", &t_add[1]);
        print_detail("libtorch add, InferenceMode", &t_add[2]);
        print_detail("libtorch mm, NoGradGuard", &t_mm);
    }

    printf("\ntargets:\n");
    printf("  opreg add overhead <= %.0f ns (whole call, output alloc+release included): %.1f ns  %s\n",
           TARGET_ADD_NS, r_add.ns, r_add.ns <= TARGET_ADD_NS ? "PASS" : "MISS");
    double best_torch = -1;
    if (t_add[1].ns > 0) best_torch = t_add[1].ns;
    if (t_add[2].ns > 0 && (best_torch < 0 || t_add[2].ns < best_torch)) best_torch = t_add[2].ns;
    if (best_torch > 0) {
        double ratio = best_torch / r_add.ns;
        printf("  opreg add <= 1/5 of libtorch (vs its fastest no-grad variant, %.1f ns): "
               "%.1f ns vs limit %.1f ns, ratio %.2fx  %s\n",
               best_torch, r_add.ns, best_torch / TARGET_RATIO, ratio, ratio >= TARGET_RATIO ? "PASS" : "MISS");
    } else {
        printf("  opreg add <= 1/5 of libtorch: n/a (libtorch %s)\n",
               have_torch ? "timing failed" : "not available");
    }

done:
    opr_tensor_release(ta);
    opr_tensor_release(tb);
    opr_tensor_release(ma);
    opr_tensor_release(mb);
    int live = opr_ctx_free(ctx);
    if (live) { fprintf(stderr, "opr_ctx_free: %d tensors still alive\n", live); status = 1; }
    free(mm_a);
    free(mm_b);
    free(mm_o);
    free(mm_ref);
    return status;
}
