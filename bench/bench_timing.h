/* Timing method shared by the opreg and libtorch sides of the dispatch benchmark, so
 * both are measured the same way: a body runs `iters` calls in a tight loop; the
 * iteration count is calibrated so that all timed repetitions of one cell together
 * take about `cell_s` seconds; one untimed repetition warms up; the figure is the
 * median over the repetitions of (elapsed / iters), on CLOCK_MONOTONIC.
 * Header-only (static inline), valid C11 and C++17. */
#ifndef OPREG_BENCH_TIMING_H
#define OPREG_BENCH_TIMING_H

#include <time.h>

#define BENCH_MAX_REPS 64

/* Runs the measured operation `iters` times. Returns 0, or nonzero to abort. */
typedef int (*bench_body)(void *state, long iters);

typedef struct bench_opts {
    double cell_s; /* timed seconds per cell, all repetitions together */
    int reps;      /* timed repetitions; the median is reported */
} bench_opts;

typedef struct bench_result {
    double ns;     /* median ns per call; < 0 when the body failed */
    double min_ns, max_ns;
    long iters;    /* calls per repetition */
    int reps;
} bench_result;

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline bench_result bench_measure(bench_body body, void *state, const bench_opts *o)
{
    bench_result r;
    r.ns = r.min_ns = r.max_ns = -1;
    r.iters = 0;
    r.reps = o->reps < 1 ? 1 : o->reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : o->reps;

    /* Calibrate: double the count until one loop takes >= 20 ms (or the whole cell's
     * time, when that is less); the first loops double as warm-up. */
    const double probe_s = o->cell_s < 0.02 ? o->cell_s : 0.02;
    long n = 1;
    double t;
    for (;;) {
        double t0 = bench_now_s();
        if (body(state, n)) return r;
        t = bench_now_s() - t0;
        if (t >= probe_s || n >= (1L << 40)) break;
        n = t > 0 && probe_s / t < 2.0 ? (long)((double)n * (probe_s / t) * 1.2) + 1 : n * 2;
    }
    double per_call = t / (double)n;
    double want = o->cell_s / r.reps / (per_call > 0 ? per_call : 1e-9);
    r.iters = want < 1 ? 1 : want > 1e12 ? (long)1e12 : (long)want;

    if (body(state, r.iters)) return r; /* warm-up repetition at the final count */
    double v[BENCH_MAX_REPS];
    for (int i = 0; i < r.reps; i++) {
        double t0 = bench_now_s();
        if (body(state, r.iters)) return r;
        v[i] = (bench_now_s() - t0) * 1e9 / (double)r.iters;
    }
    for (int i = 1; i < r.reps; i++) { /* insertion sort: at most 64 values */
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
    r.min_ns = v[0];
    r.max_ns = v[r.reps - 1];
    r.ns = r.reps % 2 ? v[r.reps / 2] : 0.5 * (v[r.reps / 2 - 1] + v[r.reps / 2]);
    return r;
}

#endif /* OPREG_BENCH_TIMING_H */
