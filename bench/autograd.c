/* Autograd benchmark: opreg's reverse mode against libtorch (C++) and PyTorch (Python),
 * in one run of one command. Three parts:
 *
 *  a  step overhead: one step is  s = sum(mul(x, y)); backward(s); zero grad of x;
 *     release s  on 8-element f32 tensors, x requiring grad. ns per step, opreg vs
 *     libtorch C++ (bench/autograd_torch.cpp) vs PyTorch Python
 *     (bench/autograd_torch.py, a child process serving timing requests).
 *  b  fine-tuning with frozen middle layers: MLP 1024-4096-4096-4096-1024 (linear layers,
 *     ReLU between), batch 64, f32, only the first and last layers require grad, loss =
 *     sum(output). Bytes saved for backward (opreg: opr_autograd_walk of the loss before
 *     backward, and the distinct tensors behind it; PyTorch: saved_tensors_hooks),
 *     against the analytic minimum computed here from the shapes (analytic_min), and
 *     time per step (forward + backward + grads dropped), beside the step's GEMMs alone
 *     through CBLAS on the same shapes ("raw GEMMs", what a step cannot go below).
 *  c  selection accuracy: for mm, matmul, linear and addmm, every non-empty set of their
 *     float tensor inputs requiring grad, six shapes from skinny to square: every
 *     distinct candidate set (each candidate forced in turn with
 *     opr_op_force_grad_candidate) is timed on the backward of that op alone (one
 *     forward, then opr_autograd_grad with retain_graph), and the registry's automatic
 *     choice is checked against the fastest (within 5%).
 *
 * Method. a and b: the bench_timing.h method (calibrate to >= 20 ms loops, one untimed
 * warm-up loop, median of --reps timed loops, CLOCK_MONOTONIC), with the loops of all
 * sides (opreg, libtorch, Python) interleaved round by round and a short pause before
 * each, so that drift of a shared machine hits every side alike. c: the candidate sets
 * of a case are timed interleaved too, and each set's fastest round counts (contention
 * only adds time). Threads: --threads (default 2) for OpenBLAS, OpenMP and libtorch in
 * this process; OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and torch.set_num_threads in the
 * Python one. The Python side is `python3` with torch: --python, $OPREG_BENCH_PYTHON,
 * python3 on PATH, then /usr/bin/python3, the first that imports torch; skipped with
 * the reason when none does.
 *
 * A case whose ops lack a derivative formula says which op and input, and the run goes
 * on with the rest.
 *
 * Usage: opreg_bench_autograd [--parts abc] [--threads N] [--time-a S] [--reps-a N]
 *                             [--time-b S] [--reps-b N] [--budget-c S] [--ops-c LIST]
 *                             [--shape-c N] [--python PATH|none]
 *          --budget-c  seconds of timed rounds in part c, spread over its cases (at
 *                      least 3 rounds each, so large shapes take longer; default 20)
 *          --ops-c     only these ops in part c (comma-separated)
 *          --shape-c   only shape number N (0-5, in the order of the table) in part c
 *        opreg_bench_autograd --profile a|b [--iters N]
 *          opreg's loop alone, untimed, for perf or callgrind
 * Exit status: 0 when the run completed (missed targets and missing derivatives still
 * exit 0), 1 on an error (wrong results, failed calls, leaked tensors). */
#include <opreg/opreg.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_config.h" /* generated: OPREG_BENCH_HAVE_TORCH, ..._NO_TORCH_REASON, ..._SOURCE_DIR */
#include "bench_timing.h"
#if OPREG_BENCH_HAVE_TORCH
#include "autograd_torch.h"
#endif

#define A_N 8
#define TARGET_A_NS 1500.0
#define TARGET_A_RATIO 5.0
#define B_LAYERS 4
#define B_BATCH 64
#define C_WITHIN 0.05
#define C_TARGET 0.90

/* ================================================================== helpers */

static void fill(float *v, size_t n, unsigned seed, float scale)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = ((float)((x >> 8) & 0xffff) / 32768.0f - 1.0f) * scale; /* [-scale, scale) */
    }
}

static opr_tensor *random_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, unsigned seed, float scale)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return NULL;
    fill(buf, n, seed, scale);
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, ndim, shape, buf, OPR_CPU);
    free(buf);
    return t;
}

static float *host_copy(const opr_tensor *t)
{
    size_t n = (size_t)opr_tensor_numel(t);
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (v && opr_tensor_copy_to_host(t, v, n * sizeof *v)) { free(v); return NULL; }
    return v;
}

/* max |a - b| / max |b|: a relative error that tolerates cancellation in sums. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / (den > 0 ? den : 1);
}

static const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
    if (n >= (1u << 20)) snprintf(buf, len, "%.2f MiB", (double)n / (1 << 20));
    else if (n >= 1024) snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else snprintf(buf, len, "%llu B", (unsigned long long)n);
    return buf;
}

static const char *fmt_ns(double ns, char *buf, size_t len)
{
    if (ns < 0) snprintf(buf, len, "-");
    else if (ns < 1e4) snprintf(buf, len, "%.1f ns", ns);
    else if (ns < 1e6) snprintf(buf, len, "%.1f us", ns / 1e3);
    else snprintf(buf, len, "%.2f ms", ns / 1e6);
    return buf;
}

static const char *verdict(bool ok) { return ok ? "PASS" : "MISS"; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Copies src into dst (len bytes), truncating. */
static void scopy(char *dst, size_t len, const char *src)
{
    if (!len) return;
    size_t n = strlen(src);
    if (n >= len) n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static opr_tensor *call1(const opr_op *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    if (opr_call(op, args, nargs, &out, 1)) return NULL;
    return out;
}

/* The names of op's tensor arguments that require grad; returns their count. */
static int grad_names(const opr_op *op, const opr_value *args, int nargs, const char **names)
{
    int n = 0;
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == OPR_V_TENSOR && args[i].u.t && opr_requires_grad(args[i].u.t))
            names[n++] = opr_op_arg_name(op, i);
    return n;
}

/* Why op cannot record a backward for these arguments (some input that requires grad
 * has no derivative), or NULL when it can. Writes into why. */
static const char *lacks_derivative(const opr_op *op, const opr_value *args, int nargs, char *why, size_t len)
{
    const char *names[8];
    int n = grad_names(op, args, nargs, names);
    uint64_t bytes;
    if (!n || !opr_plan_saved_bytes(op, args, nargs, names, n, &bytes)) return NULL;
    snprintf(why, len, "%s lacks a derivative: %s", opr_op_name(op), opr_last_error());
    return why;
}

/* "chosen: SET" and the saved slot names and estimated cost of the chosen plan, from
 * opr_plan_explain's text. Returns false when the text is not in the expected form. */
static bool parse_chosen(const char *text, char *set, size_t set_len, char saves[][32], int *nsaves, double *est_us)
{
    const char *c = strstr(text, "chosen: ");
    if (!c) return false;
    c += 8;
    const char *e = strchr(c, '\n');
    if (!e) return false;
    snprintf(set, set_len, "%.*s", (int)(e - c), c);
    const char *s = strstr(e, "saves {");
    if (!s) return false;
    s += 7;
    const char *close = strchr(s, '}');
    if (!close) return false;
    *nsaves = 0;
    while (s < close && *nsaves < 16) {
        const char *comma = memchr(s, ',', (size_t)(close - s));
        const char *end = comma ? comma : close;
        if (end > s) snprintf(saves[(*nsaves)++], 32, "%.*s", (int)(end - s), s);
        s = end + 1;
        while (*s == ' ') s++;
    }
    const char *w = strstr(e, "estimated ");
    *est_us = w && w < s ? atof(w + 10) : -1;
    return true;
}

/* ================================================================== interleaved timing */

/* One side of a comparison: runs `iters` steps and says how long they took (its own
 * clock for the Python side, which excludes the pipe). Returns 0, or nonzero with a
 * message in err. */
typedef int (*side_run)(void *state, long iters, double *elapsed_s, char *err, size_t err_len);

typedef struct side {
    const char *name;
    side_run run;
    void *state;
    bench_result res; /* res.ns < 0: failed, err says why */
    char err[512];
} side;

static void pause_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* bench_measure() of bench_timing.h for several sides at once: each side is calibrated
 * (loop count doubled until a loop takes >= 20 ms, then sized so that o->reps loops take
 * about o->cell_s) and warmed up by one untimed loop; then the timed loops run in
 * rounds, one loop of every side per round, each after a pause of settle_s (spinning
 * BLAS / OpenMP workers of the previous side go idle), so that drift of a shared
 * machine hits all sides alike. Figures: median, min and max of elapsed / loop count. */
static void measure_sides(side *sides, int n, const bench_opts *o, double settle_s)
{
    const int reps = o->reps < 1 ? 1 : o->reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : o->reps;
    const double probe_s = o->cell_s < 0.02 ? o->cell_s : 0.02;
    double v[8][BENCH_MAX_REPS];
    for (int i = 0; i < n && i < 8; i++) {
        side *sd = &sides[i];
        sd->res.ns = sd->res.min_ns = sd->res.max_ns = -1;
        sd->res.reps = reps;
        long k = 1;
        double t = 0;
        for (;;) {
            if (sd->run(sd->state, k, &t, sd->err, sizeof sd->err)) { k = -1; break; }
            if (t >= probe_s || k >= (1L << 40)) break;
            k = t > 0 && probe_s / t < 2.0 ? (long)((double)k * (probe_s / t) * 1.2) + 1 : k * 2;
        }
        if (k < 0) continue;
        double per_call = t / (double)k, want = o->cell_s / reps / (per_call > 0 ? per_call : 1e-9);
        sd->res.iters = want < 1 ? 1 : want > 1e12 ? (long)1e12 : (long)want;
        sd->res.ns = 0; /* calibrated */
    }
    for (int i = 0; i < n && i < 8; i++) /* warm-up loop at the final count */
        if (sides[i].res.ns == 0 && sides[i].run(sides[i].state, sides[i].res.iters, &(double){0}, sides[i].err, sizeof sides[i].err))
            sides[i].res.ns = -1;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n && i < 8; i++) {
            side *sd = &sides[i];
            if (sd->res.ns < 0) continue;
            double t;
            pause_s(settle_s);
            if (sd->run(sd->state, sd->res.iters, &t, sd->err, sizeof sd->err)) { sd->res.ns = -1; continue; }
            v[i][r] = t * 1e9 / (double)sd->res.iters;
        }
    for (int i = 0; i < n && i < 8; i++) {
        side *sd = &sides[i];
        if (sd->res.ns < 0) continue;
        qsort(v[i], (size_t)reps, sizeof(double), cmp_double);
        sd->res.min_ns = v[i][0];
        sd->res.max_ns = v[i][reps - 1];
        sd->res.ns = reps % 2 ? v[i][reps / 2] : 0.5 * (v[i][reps / 2 - 1] + v[i][reps / 2]);
    }
}

/* A side that runs a bench_body, timed here. */
typedef struct body_side {
    bench_body body;
    void *state;
    const char *(*error)(void); /* message when body fails */
} body_side;

static int body_side_run(void *p, long iters, double *elapsed_s, char *err, size_t err_len)
{
    body_side *b = p;
    double t0 = bench_now_s();
    if (b->body(b->state, iters)) {
        scopy(err, err_len, b->error ? b->error() : "failed");
        return 1;
    }
    *elapsed_s = bench_now_s() - t0;
    return 0;
}

/* ================================================================== PyTorch (Python) */

/* bench/autograd_torch.py --serve, as a child process answering "a N" / "b N". */
typedef struct py_server {
    bool up;
    pid_t pid;
    FILE *to, *from;
    char interpreter[256];
    char info[512];
    char why[1024]; /* why it is not up, or which interpreters were skipped first */
    uint64_t b_saved_distinct, b_saved_total;
    int b_n_distinct, b_n_total;
    char b_shapes[512];
} py_server;

/* Appends msg to p->why ("; " between notes). */
static void py_note(py_server *p, const char *msg)
{
    size_t u = strlen(p->why);
    if (u && u + 2 < sizeof p->why) { memcpy(p->why + u, "; ", 3); u += 2; }
    scopy(p->why + u, sizeof p->why - u, msg);
}

/* Starts the script under one interpreter and reads its setup up to READY. */
static int py_try(py_server *p, const char *python, const char *script, int threads, const char *cases)
{
    int in[2], out[2];
    if (pipe(in)) return -1;
    if (pipe(out)) { close(in[0]); close(in[1]); return -1; }
    char tstr[16];
    snprintf(tstr, sizeof tstr, "%d", threads);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { close(in[0]); close(in[1]); close(out[0]); close(out[1]); return -1; }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        setenv("OMP_NUM_THREADS", tstr, 1);
        setenv("OPENBLAS_NUM_THREADS", tstr, 1);
        execlp(python, python, script, "--serve", "--cases", cases, "--threads", tstr, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->pid = pid;
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    char line[2048], tail[512] = "";
    bool skipped = false;
    while (p->to && p->from && fgets(line, sizeof line, p->from)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strcmp(line, "READY")) { p->up = true; break; }
        if (!strncmp(line, "RESULT info ", 12)) scopy(p->info, sizeof p->info, line + 12);
        else if (!strncmp(line, "RESULT b_saved_bytes ", 21)) {
            unsigned long long d, t;
            if (sscanf(line + 21, "%llu %llu %d %d", &d, &t, &p->b_n_distinct, &p->b_n_total) == 4) {
                p->b_saved_distinct = d;
                p->b_saved_total = t;
            }
        } else if (!strncmp(line, "RESULT b_saved_shapes ", 22)) scopy(p->b_shapes, sizeof p->b_shapes, line + 22);
        else if (!strncmp(line, "SKIP ", 5)) { py_note(p, line + 5); skipped = true; }
        else if (line[0]) scopy(tail, sizeof tail, line); /* e.g. the last line of a traceback */
    }
    if (p->up) { scopy(p->interpreter, sizeof p->interpreter, python); return 0; }
    if (p->to) fclose(p->to);
    else close(in[1]);
    if (p->from) fclose(p->from);
    else close(out[0]);
    p->to = p->from = NULL;
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (!skipped) {
        char msg[800];
        if (code == 127) snprintf(msg, sizeof msg, "%.200s: not found", python);
        else snprintf(msg, sizeof msg, "%.200s: failed (%.500s)", python, tail[0] ? tail : "no output");
        py_note(p, msg);
    }
    return -1;
}

/* With --python PATH only that interpreter, else $OPREG_BENCH_PYTHON, `python3` from
 * PATH, then /usr/bin/python3 (a distribution's python3-torch is often shadowed by a
 * pyenv or venv python3 without torch). */
static void py_start(py_server *p, const char *forced, int threads, const char *cases)
{
    memset(p, 0, sizeof *p);
    if (forced && !strcmp(forced, "none")) { py_note(p, "disabled with --python none"); return; }
    const char *script = OPREG_BENCH_SOURCE_DIR "/autograd_torch.py";
    const char *cands[3];
    int n = 0;
    if (forced) cands[n++] = forced;
    else {
        const char *env = getenv("OPREG_BENCH_PYTHON");
        if (env && env[0]) cands[n++] = env;
        cands[n++] = "python3";
        cands[n++] = "/usr/bin/python3";
    }
    for (int i = 0; i < n && !p->up; i++) py_try(p, cands[i], script, threads, cases);
}

static void py_stop(py_server *p)
{
    if (!p->up) return;
    fprintf(p->to, "quit\n");
    fclose(p->to);
    fclose(p->from);
    int st;
    waitpid(p->pid, &st, 0);
    p->up = false;
}

typedef struct py_side {
    py_server *p;
    const char *cas;
} py_side;

static int py_side_run(void *state, long iters, double *elapsed_s, char *err, size_t err_len)
{
    py_side *s = state;
    py_server *p = s->p;
    if (!p->up) { scopy(err, err_len, "the Python process is gone"); return 1; }
    if (fprintf(p->to, "%s %ld\n", s->cas, iters) < 0 || fflush(p->to)) { scopy(err, err_len, "cannot write to Python"); return 1; }
    char line[1024];
    while (fgets(line, sizeof line, p->from)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "T ", 2)) { *elapsed_s = atof(line + 2) * 1e-9; return 0; }
        if (!strncmp(line, "E ", 2)) { scopy(err, err_len, line + 2); return 1; }
    }
    scopy(err, err_len, "the Python process ended");
    p->up = false;
    return 1;
}

/* ================================================================== part a */

typedef struct a_state {
    const opr_op *mul, *sum;
    opr_tensor *x, *y;
} a_state;

static int a_step(a_state *s)
{
    opr_value ma[2] = {opr_v_tensor(s->x), opr_v_tensor(s->y)};
    opr_tensor *z = NULL, *l = NULL;
    int rc = opr_call(s->mul, ma, 2, &z, 1);
    if (rc) return rc;
    opr_value sa[1] = {opr_v_tensor(z)};
    rc = opr_call(s->sum, sa, 1, &l, 1);
    opr_tensor_release(z);
    if (rc) return rc;
    rc = opr_backward(l, NULL, NULL);
    if (!rc) rc = opr_zero_grad(s->x);
    opr_tensor_release(l);
    return rc;
}

static int a_body(void *p, long iters)
{
    for (long i = 0; i < iters; i++)
        if (a_step(p)) return 1;
    return 0;
}

static const char *opreg_error(void) { return opr_last_error(); }

#if OPREG_BENCH_HAVE_TORCH
static int torch_a_run(void *p, long iters, double *elapsed_s, char *err, size_t err_len)
{
    double t0 = bench_now_s();
    if (bat_mulsum_run(p, iters, err, err_len)) return 1;
    *elapsed_s = bench_now_s() - t0;
    return 0;
}

static int torch_b_run(void *p, long iters, double *elapsed_s, char *err, size_t err_len)
{
    double t0 = bench_now_s();
    if (bat_mlp_run(p, iters, err, err_len)) return 1;
    *elapsed_s = bench_now_s() - t0;
    return 0;
}
#endif

/* The timing table of a or b: one row per side, ratios against the first (opreg). */
static void print_sides(const char *indent, const side *sides, int n, const char *const *absent, int nabsent)
{
    char b1[32], b2[32], b3[32];
    printf("%s%-16s %12s %27s %14s %10s\n", indent, "", "per step", "min .. max", "steps x loops", "vs opreg");
    for (int i = 0; i < n; i++) {
        const side *sd = &sides[i];
        if (sd->res.ns < 0) { printf("%s%-16s %12s  (failed: %s)\n", indent, sd->name, "-", sd->err); continue; }
        char ratio[16] = "-";
        if (sides[0].res.ns > 0) snprintf(ratio, sizeof ratio, "%.2fx", sd->res.ns / sides[0].res.ns);
        printf("%s%-16s %12s %12s .. %-12s %8ld x %-3d %10s\n", indent, sd->name, fmt_ns(sd->res.ns, b1, sizeof b1),
               fmt_ns(sd->res.min_ns, b2, sizeof b2), fmt_ns(sd->res.max_ns, b3, sizeof b3), sd->res.iters, sd->res.reps,
               ratio);
    }
    for (int i = 0; i + 1 < nabsent * 2; i += 2) printf("%s%-16s %12s  (%s)\n", indent, absent[i], "skipped", absent[i + 1]);
}

typedef struct part_a {
    bool ran;
    char why[512];
    side sides[3];
    int nsides;
    const char *absent[4];
    int nabsent;
} part_a;

static int run_part_a(opr_ctx *ctx, const bench_opts *o, bool have_torch, py_server *py, part_a *pa, long profile_iters)
{
    memset(pa, 0, sizeof *pa);
    float xv[A_N], yv[A_N], g[A_N];
    fill(xv, A_N, 11, 1);
    fill(yv, A_N, 12, 1);
    const int64_t shape[1] = {A_N};
    a_state s = {opr_op_find(ctx, "mul"), opr_op_find(ctx, "sum"), NULL, NULL};
    if (!s.mul || !s.sum) { snprintf(pa->why, sizeof pa->why, "no mul or sum op"); return 0; }
    s.x = opr_tensor_from_data(ctx, OPR_F32, 1, shape, xv, OPR_CPU);
    s.y = opr_tensor_from_data(ctx, OPR_F32, 1, shape, yv, OPR_CPU);
    int status = 0;
#if OPREG_BENCH_HAVE_TORCH
    bat_mulsum *tm = NULL;
#endif
    if (!s.x || !s.y || opr_set_requires_grad(s.x, true)) { fprintf(stderr, "part a: %s\n", opr_last_error()); status = 1; goto out; }
    /* derivatives present? */
    opr_value ma[2] = {opr_v_tensor(s.x), opr_v_tensor(s.y)};
    if (lacks_derivative(s.mul, ma, 2, pa->why, sizeof pa->why)) goto out;
    {
        opr_tensor *z = call1(s.mul, ma, 2);
        opr_value sa[1] = {opr_v_tensor(z)};
        const char *w = z ? lacks_derivative(s.sum, sa, 1, pa->why, sizeof pa->why) : NULL;
        opr_tensor_release(z);
        if (!z) { fprintf(stderr, "part a: mul: %s\n", opr_last_error()); status = 1; goto out; }
        if (w) goto out;
    }
    if (profile_iters > 0) {
        if (a_body(&s, profile_iters)) { fprintf(stderr, "part a: %s\n", opr_last_error()); status = 1; }
        goto out;
    }
    /* correctness: d sum(x*y) / dx = y */
    {
        opr_value sa[1];
        opr_tensor *z = call1(s.mul, ma, 2), *l = NULL;
        sa[0] = opr_v_tensor(z);
        if (z) l = call1(s.sum, sa, 1);
        int rc = l ? opr_backward(l, NULL, NULL) : -1;
        opr_tensor *gx = rc ? NULL : opr_grad(s.x);
        rc = gx ? opr_tensor_copy_to_host(gx, g, sizeof g) : -1;
        for (int i = 0; !rc && i < A_N; i++)
            if (g[i] != yv[i]) rc = -100;
        opr_tensor_release(z);
        opr_tensor_release(l);
        opr_zero_grad(s.x);
        if (rc) { fprintf(stderr, "part a: opreg gradient wrong or failed (%d): %s\n", rc, opr_last_error()); status = 1; goto out; }
    }
    body_side ob = {a_body, &s, opreg_error};
    pa->sides[pa->nsides++] = (side){.name = "opreg", .run = body_side_run, .state = &ob};
#if OPREG_BENCH_HAVE_TORCH
    if (have_torch) {
        char err[512];
        float tg[A_N];
        tm = bat_mulsum_new(xv, yv, A_N, tg, err, sizeof err);
        if (!tm) { fprintf(stderr, "part a: libtorch: %s\n", err); status = 1; goto out; }
        for (int i = 0; i < A_N; i++)
            if (tg[i] != yv[i]) { fprintf(stderr, "part a: libtorch gradient differs at %d\n", i); status = 1; goto out; }
        pa->sides[pa->nsides++] = (side){.name = "libtorch C++", .run = torch_a_run, .state = tm};
    } else {
        pa->absent[2 * pa->nabsent] = "libtorch C++";
        pa->absent[2 * pa->nabsent++ + 1] = "libtorch failed to initialise";
    }
#else
    (void)have_torch;
    pa->absent[2 * pa->nabsent] = "libtorch C++";
    pa->absent[2 * pa->nabsent++ + 1] = OPREG_BENCH_NO_TORCH_REASON;
#endif
    py_side ps = {py, "a"};
    if (py->up) pa->sides[pa->nsides++] = (side){.name = "PyTorch Python", .run = py_side_run, .state = &ps};
    else {
        pa->absent[2 * pa->nabsent] = "PyTorch Python";
        pa->absent[2 * pa->nabsent++ + 1] = py->why[0] ? py->why : "no python3 with torch";
    }
    measure_sides(pa->sides, pa->nsides, o, 0.02);
    for (int i = 0; i < pa->nsides; i++) {
        pa->sides[i].state = NULL; /* stack objects of this function */
        if (pa->sides[i].res.ns < 0) { fprintf(stderr, "part a: %s: %s\n", pa->sides[i].name, pa->sides[i].err); status = 1; }
    }
    pa->ran = pa->sides[0].res.ns > 0;
out:
#if OPREG_BENCH_HAVE_TORCH
    bat_mulsum_free(tm);
#endif
    opr_tensor_release(s.x);
    opr_tensor_release(s.y);
    return status;
}

static void print_part_a(const part_a *pa, const bench_opts *o)
{
    printf("== a. step overhead: s = sum(mul(x, y)); backward(s); zero grad; release  (x, y: f32[%d], x requires grad)\n", A_N);
    printf("   median of %d loops per side, interleaved, ~%.2f s of loops per side\n\n", o->reps, o->cell_s);
    if (!pa->ran) {
        printf("   opreg: not run: %s\n\n", pa->why[0] ? pa->why : "error (see above)");
        return;
    }
    print_sides("   ", pa->sides, pa->nsides, pa->absent, pa->nabsent);
    printf("   (\"vs opreg\": how many times longer than opreg's step; zero grad = drop the gradient, x.grad = None)\n\n");
}

/* ================================================================== part b */

typedef struct mlp {
    int64_t widths[B_LAYERS + 1];
    int64_t batch;
    float *hx, *hw[B_LAYERS], *hb[B_LAYERS];
    opr_tensor *x, *w[B_LAYERS], *b[B_LAYERS];
    bool trainable[B_LAYERS];
    const opr_op *linear, *relu, *sum;
} mlp;

/* What the analysis forward found: for every recorded call, the candidate set its plan
 * chose and the tensors it saves (opr_plan_explain); and the distinct tensors saved,
 * identified by (data pointer, bytes) as PyTorch's side does. */
#define B_MAX_SAVED 64
#define B_MAX_CALLS 16
typedef struct b_check {
    char why[1024];          /* set when some op lacks a derivative */
    uint64_t node_sum;       /* bytes of every call's saved tensors, summed over calls */
    uint64_t distinct;       /* bytes of distinct saved tensors */
    int nsaved, nrefs;
    struct { const void *data; uint64_t bytes; char desc[64]; } saved[B_MAX_SAVED];
    int ncalls;
    struct { char tag[16]; char set[120]; char saves[64]; uint64_t bytes; } calls[B_MAX_CALLS];
    char explain[1 << 16];
} b_check;

static void note_saved(b_check *c, const opr_tensor *t, const char *desc)
{
    uint64_t bytes = (uint64_t)opr_tensor_numel(t) * opr_dtype_size(opr_tensor_dtype(t));
    const void *data = opr_tensor_data(t);
    c->node_sum += bytes;
    c->nrefs++;
    if (c->ncalls) c->calls[c->ncalls - 1].bytes += bytes;
    for (int i = 0; i < c->nsaved; i++)
        if (c->saved[i].data == data && c->saved[i].bytes == bytes) return;
    if (c->nsaved == B_MAX_SAVED) return;
    c->saved[c->nsaved].data = data;
    c->saved[c->nsaved].bytes = bytes;
    scopy(c->saved[c->nsaved].desc, sizeof c->saved[0].desc, desc);
    c->nsaved++;
    c->distinct += bytes;
}

/* opr_call with one output. With chk: first checks that the op can record its
 * backward, and notes the tensors its chosen plan saves (named `tag`.slot). */
static opr_tensor *b_call(const opr_op *op, const opr_value *args, int nargs, b_check *chk, const char *tag)
{
    char saves[16][32], set[256];
    int nsaves = 0;
    bool recorded = false;
    if (chk) {
        const char *names[8];
        int n = grad_names(op, args, nargs, names);
        if (n) {
            double est;
            if (opr_plan_explain(op, args, nargs, names, n, chk->explain, sizeof chk->explain)) {
                snprintf(chk->why, sizeof chk->why, "%s lacks a derivative: %s", opr_op_name(op), opr_last_error());
                return NULL;
            }
            if (!parse_chosen(chk->explain, set, sizeof set, saves, &nsaves, &est)) snprintf(set, sizeof set, "?");
            recorded = true;
        }
    }
    opr_tensor *out = call1(op, args, nargs);
    if (!out || !recorded) return out;
    if (chk->ncalls < B_MAX_CALLS) {
        int c = chk->ncalls++;
        memset(&chk->calls[c], 0, sizeof chk->calls[c]);
        scopy(chk->calls[c].tag, sizeof chk->calls[c].tag, tag);
        scopy(chk->calls[c].set, sizeof chk->calls[c].set, set);
        size_t u = 0;
        for (int s = 0; s < nsaves && u < sizeof chk->calls[c].saves; s++)
            u += (size_t)snprintf(chk->calls[c].saves + u, sizeof chk->calls[c].saves - u, "%s%.24s", s ? ", " : "", saves[s]);
    }
    for (int s = 0; s < nsaves; s++) {
        const opr_tensor *t = NULL;
        for (int i = 0; i < nargs && !t; i++)
            if (args[i].kind == OPR_V_TENSOR && !strcmp(opr_op_arg_name(op, i), saves[s])) t = args[i].u.t;
        if (!t && !strcmp(saves[s], "result")) t = out;
        char desc[64], shape[40] = "";
        const opr_tensor *d = t ? t : out;
        for (int k = 0; k < opr_tensor_ndim(d); k++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", k ? "x" : "", (long long)opr_tensor_size(d, k));
        snprintf(desc, sizeof desc, "%.15s.%.15s [%.28s]", tag, saves[s], shape);
        if (t) note_saved(chk, t, desc);
    }
    return out;
}

/* The forward pass to loss = sum(output); NULL on failure (chk->why says why when an op
 * lacks a derivative). */
static opr_tensor *mlp_forward(const mlp *m, b_check *chk)
{
    opr_tensor *h = opr_tensor_retain(m->x);
    char tag[32];
    for (int l = 0; l < B_LAYERS && h; l++) {
        opr_value la[3] = {opr_v_tensor(h), opr_v_tensor(m->w[l]), opr_v_tensor(m->b[l])};
        snprintf(tag, sizeof tag, "linear%d", l + 1);
        opr_tensor *z = b_call(m->linear, la, 3, chk, tag);
        opr_tensor_release(h);
        h = z;
        if (h && l + 1 < B_LAYERS) {
            opr_value ra[1] = {opr_v_tensor(h)};
            snprintf(tag, sizeof tag, "relu%d", l + 1);
            z = b_call(m->relu, ra, 1, chk, tag);
            opr_tensor_release(h);
            h = z;
        }
    }
    if (!h) return NULL;
    opr_value sa[1] = {opr_v_tensor(h)};
    opr_tensor *loss = b_call(m->sum, sa, 1, chk, "sum");
    opr_tensor_release(h);
    return loss;
}

static int mlp_step(const mlp *m)
{
    opr_tensor *loss = mlp_forward(m, NULL);
    if (!loss) return OPR_ERR_BACKEND;
    int rc = opr_backward(loss, NULL, NULL);
    opr_tensor_release(loss);
    for (int l = 0; l < B_LAYERS && !rc; l++)
        if (m->trainable[l]) {
            opr_zero_grad(m->w[l]);
            opr_zero_grad(m->b[l]);
        }
    return rc;
}

static int mlp_body(void *p, long iters)
{
    for (long i = 0; i < iters; i++)
        if (mlp_step(p)) return 1;
    return 0;
}

/* The step's GEMMs alone, on the same shapes through CBLAS: the forward products and,
 * for loss = sum(output) with layers 1 and 4 trainable, dW4, the gradient through
 * layers 4, 3, 2 and dW1. What a step cannot go below (bias, ReLU and the sum are
 * memory-bound extras); the "raw GEMMs" row of part b. */
typedef struct raw_gemms {
    const mlp *m;
    float *h[B_LAYERS + 1]; /* h[0] = x, h[l + 1] = layer l's output (pre-activation) */
    float *g, *dh, *dh2, *dw_first, *dw_last;
} raw_gemms;

static int raw_gemms_body(void *p, long iters)
{
    raw_gemms *r = p;
    const mlp *m = r->m;
    const int n = (int)m->batch;
    const int *w = (const int[]){(int)m->widths[0], (int)m->widths[1], (int)m->widths[2], (int)m->widths[3],
                                 (int)m->widths[4]};
    for (long it = 0; it < iters; it++) {
        for (int l = 0; l < B_LAYERS; l++) /* h[l+1] = h[l] W_l^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w[l + 1], w[l], 1, r->h[l], w[l], m->hw[l], w[l], 0,
                        r->h[l + 1], w[l + 1]);
        /* dW4 = g^T h3, dh3 = g W4, dh2 = dh3 W3, dh1 = dh2 W2, dW1 = dh1^T x */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w[4], w[3], n, 1, r->g, w[4], r->h[3], w[3], 0, r->dw_last, w[3]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, w[3], w[4], 1, r->g, w[4], m->hw[3], w[3], 0, r->dh, w[3]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, w[2], w[3], 1, r->dh, w[3], m->hw[2], w[2], 0, r->dh2, w[2]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, w[1], w[2], 1, r->dh2, w[2], m->hw[1], w[1], 0, r->dh, w[1]);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w[1], w[0], n, 1, r->dh, w[1], r->h[0], w[0], 0, r->dw_first, w[0]);
    }
    return 0;
}

static const char *raw_gemms_error(void) { return "out of memory"; }

static bool raw_gemms_init(raw_gemms *r, const mlp *m)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    const size_t n = (size_t)m->batch, widest = 4096;
    r->h[0] = m->hx;
    bool ok = true;
    for (int l = 1; l <= B_LAYERS; l++) ok &= (r->h[l] = calloc(n * (size_t)m->widths[l], sizeof(float))) != NULL;
    ok &= (r->g = malloc(n * (size_t)m->widths[B_LAYERS] * sizeof(float))) != NULL;
    ok &= (r->dh = calloc(n * widest, sizeof(float))) && (r->dh2 = calloc(n * widest, sizeof(float)));
    ok &= (r->dw_first = calloc((size_t)(m->widths[1] * m->widths[0]), sizeof(float))) != NULL;
    ok &= (r->dw_last = calloc((size_t)(m->widths[B_LAYERS] * m->widths[B_LAYERS - 1]), sizeof(float))) != NULL;
    for (size_t i = 0; r->g && i < n * (size_t)m->widths[B_LAYERS]; i++) r->g[i] = 1;
    return ok;
}

static void raw_gemms_free(raw_gemms *r)
{
    for (int l = 1; l <= B_LAYERS; l++) free(r->h[l]);
    free(r->g);
    free(r->dh);
    free(r->dh2);
    free(r->dw_first);
    free(r->dw_last);
}

/* The analytic minimum of the bytes saved for backward, for loss = sum(output), on
 * formula level (tensors the forward produced, kept whole), counting each tensor once:
 *
 *   Layer l computes z_l = h_{l-1} W_l^T + b_l, h_l = relu(z_l) for l < L, h_0 = x.
 *   With f the first trainable layer, the gradient must flow from the loss back to
 *   z_f, through every layer above f:
 *   - dW_l = dz_l^T h_{l-1} for trainable l needs that layer's input h_{l-1}
 *     (x [64x1024] for layer 1; a3 = h_3 [64x4096] for layer 4);
 *   - db_l = sum of dz_l over the batch needs nothing saved;
 *   - dh_{l-1} = dz_l W_l for every layer l > f needs W_l (W2, W3 [4096x4096],
 *     W4 [1024x4096]: frozen, but the gradient to layer 1 goes through them);
 *   - dz_l = dh_l * 1[z_l > 0] for f <= l < L needs the ReLU's mask: its output a_l
 *     (or z_l, the same size) for a1, a2, a3 [64x4096] each;
 *   - d loss / d h_L = ones (sum) needs only the shape.
 *   a3 is needed twice (ReLU 3 mask and layer 4's dW) and counted once. Nothing else:
 *   not W1 (dW1 needs only x and dz_1, and no gradient flows below layer 1), not the
 *   inputs a1, a2 of the frozen layers as GEMM operands (only as masks), not z_4.
 *   Total for 1024-4096-4096-4096-1024, batch 64, f32:
 *     x 256 KiB + a1..a3 3 MiB + W2, W3 128 MiB + W4 16 MiB = 147.25 MiB.
 *   (Below formula level, the masks of a1 and a2 could be kept as bits; neither library
 *   re-encodes saved tensors, so that is not counted.) */
static uint64_t analytic_min(const mlp *m, char *how, size_t len, uint64_t *mask_only_bytes)
{
    int first = -1;
    for (int l = 0; l < B_LAYERS && first < 0; l++)
        if (m->trainable[l]) first = l;
    if (first < 0) { snprintf(how, len, "nothing requires grad"); return 0; }
    bool need_h[B_LAYERS + 1] = {false}, as_input[B_LAYERS + 1] = {false}; /* h_0 = x, h_l = a_l */
    bool need_w[B_LAYERS] = {false};
    for (int l = 0; l < B_LAYERS; l++) {
        if (m->trainable[l]) need_h[l] = as_input[l] = true; /* input of layer l+1 (1-based) */
        if (l > first) need_w[l] = true;
        if (l >= first && l + 1 < B_LAYERS) need_h[l + 1] = true; /* ReLU after layer l+1 */
    }
    const size_t es = sizeof(float);
    uint64_t total = 0;
    *mask_only_bytes = 0;
    size_t used = 0;
    how[0] = '\0';
#define HOW(...) do { if (used < len) { int k_ = snprintf(how + used, len - used, __VA_ARGS__); if (k_ > 0) used += (size_t)k_; } } while (0)
    for (int i = 0; i <= B_LAYERS; i++) {
        if (!need_h[i]) continue;
        uint64_t bytes = (uint64_t)m->batch * (uint64_t)m->widths[i] * es;
        total += bytes;
        if (!as_input[i]) *mask_only_bytes += bytes;
        if (i == 0) HOW("x [%lldx%lld] (dW1)", (long long)m->batch, (long long)m->widths[0]);
        else if (as_input[i]) HOW(" + a%d [%lldx%lld] (ReLU mask, dW%d)", i, (long long)m->batch, (long long)m->widths[i], i + 1);
        else HOW(" + a%d [%lldx%lld] (ReLU mask)", i, (long long)m->batch, (long long)m->widths[i]);
    }
    for (int l = 0; l < B_LAYERS; l++) {
        if (!need_w[l]) continue;
        total += (uint64_t)m->widths[l + 1] * (uint64_t)m->widths[l] * es;
        HOW(" + W%d [%lldx%lld]", l + 1, (long long)m->widths[l + 1], (long long)m->widths[l]);
    }
#undef HOW
    return total;
}

typedef struct part_b {
    bool ran;
    char why[1024];
    uint64_t walk_sum, analytic, mask_only;
    char how[512];
    int walk_nodes;
    b_check *chk;
    uint64_t graph_new_bytes; /* storage allocated by the forward and held by the graph */
    bool checked_torch;
    double loss_diff, grad_diff[2];
    side sides[4]; /* opreg, raw GEMMs, libtorch, PyTorch */
    int nsides;
    const char *absent[4];
    int nabsent;
} part_b;

static void walk_node(void *ud, const opr_node_info *info)
{
    part_b *pb = ud;
    pb->walk_sum += info->saved_bytes;
    pb->walk_nodes++;
}

static int run_part_b(opr_ctx *ctx, const bench_opts *o, bool have_torch, py_server *py, part_b *pb, long profile_iters)
{
    static const int64_t widths[B_LAYERS + 1] = {1024, 4096, 4096, 4096, 1024};
    mlp m = {.batch = B_BATCH};
    memcpy(m.widths, widths, sizeof widths);
    m.linear = opr_op_find(ctx, "linear");
    m.relu = opr_op_find(ctx, "relu");
    m.sum = opr_op_find(ctx, "sum");
    int status = 0;
#if OPREG_BENCH_HAVE_TORCH
    bat_mlp *tm = NULL;
    char err[512];
#endif
    pb->chk = calloc(1, sizeof *pb->chk);
    if (!pb->chk) { fprintf(stderr, "out of memory\n"); return 1; }
    if (!m.linear || !m.relu || !m.sum) { snprintf(pb->why, sizeof pb->why, "no linear, relu or sum op"); goto out; }
    const int64_t xs[2] = {m.batch, widths[0]};
    m.hx = malloc((size_t)(m.batch * widths[0]) * sizeof(float));
    if (!m.hx) { status = 1; goto out; }
    fill(m.hx, (size_t)(m.batch * widths[0]), 100, 1);
    m.x = opr_tensor_from_data(ctx, OPR_F32, 2, xs, m.hx, OPR_CPU);
    if (!m.x) { fprintf(stderr, "part b: %s\n", opr_last_error()); status = 1; goto out; }
    for (int l = 0; l < B_LAYERS; l++) {
        const int64_t ws[2] = {widths[l + 1], widths[l]}, bs[1] = {widths[l + 1]};
        const size_t nw = (size_t)(ws[0] * ws[1]);
        float scale = 1.0f / sqrtf((float)widths[l]);
        m.hw[l] = malloc(nw * sizeof(float));
        m.hb[l] = malloc((size_t)bs[0] * sizeof(float));
        if (!m.hw[l] || !m.hb[l]) { fprintf(stderr, "out of memory\n"); status = 1; goto out; }
        fill(m.hw[l], nw, 200 + (unsigned)l, scale);
        fill(m.hb[l], (size_t)bs[0], 300 + (unsigned)l, scale);
        m.w[l] = opr_tensor_from_data(ctx, OPR_F32, 2, ws, m.hw[l], OPR_CPU);
        m.b[l] = opr_tensor_from_data(ctx, OPR_F32, 1, bs, m.hb[l], OPR_CPU);
        m.trainable[l] = l == 0 || l == B_LAYERS - 1;
        if (!m.w[l] || !m.b[l]) { fprintf(stderr, "part b: %s\n", opr_last_error()); status = 1; goto out; }
        if (m.trainable[l] && (opr_set_requires_grad(m.w[l], true) || opr_set_requires_grad(m.b[l], true))) {
            fprintf(stderr, "part b: %s\n", opr_last_error());
            status = 1;
            goto out;
        }
    }
    pb->analytic = analytic_min(&m, pb->how, sizeof pb->how, &pb->mask_only);

    /* analysis forward: derivatives present? what does each node save? */
    opr_mem_stats ms0 = {.struct_size = sizeof ms0}, ms1 = {.struct_size = sizeof ms1};
    opr_memory_stats(ctx, OPR_CPU, &ms0);
    opr_tensor *loss = mlp_forward(&m, pb->chk);
    if (!loss) {
        if (pb->chk->why[0]) snprintf(pb->why, sizeof pb->why, "%s", pb->chk->why);
        else { fprintf(stderr, "part b: forward failed: %s\n", opr_last_error()); status = 1; }
        goto out;
    }
    opr_memory_stats(ctx, OPR_CPU, &ms1);
    pb->graph_new_bytes = ms1.current_bytes - ms0.current_bytes;
    if (opr_autograd_walk(loss, walk_node, pb) < 0) {
        fprintf(stderr, "part b: walk: %s\n", opr_last_error());
        status = 1;
        opr_tensor_release(loss);
        goto out;
    }
    float lv = 0;
    opr_tensor_copy_to_host(loss, &lv, sizeof lv);
    int rc = opr_backward(loss, NULL, NULL);
    opr_tensor_release(loss);
    if (rc) { fprintf(stderr, "part b: backward: %s\n", opr_last_error()); status = 1; goto out; }
    {   /* with loss = sum, d loss / d b4 is the batch size in every element, exactly */
        opr_tensor *g = opr_grad(m.b[B_LAYERS - 1]);
        float *h = g ? host_copy(g) : NULL;
        for (int64_t i = 0; h && i < widths[B_LAYERS]; i++)
            if (h[i] != (float)m.batch) { free(h); h = NULL; }
        if (!h) { fprintf(stderr, "part b: opreg's gradient of b4 is missing or not %lld everywhere\n", (long long)m.batch); status = 1; goto out; }
        free(h);
    }
    if (profile_iters > 0) {
        if (mlp_body(&m, profile_iters)) { fprintf(stderr, "part b: %s\n", opr_last_error()); status = 1; }
        goto out;
    }
#if OPREG_BENCH_HAVE_TORCH
    /* correctness against libtorch on the same data: loss, dW1 and dW4 */
    if (have_torch) {
        const float *cw[B_LAYERS], *cb[B_LAYERS];
        for (int l = 0; l < B_LAYERS; l++) { cw[l] = m.hw[l]; cb[l] = m.hb[l]; }
        tm = bat_mlp_new(B_LAYERS, widths, m.batch, m.hx, cw, cb, m.trainable, err, sizeof err);
        if (!tm) { fprintf(stderr, "part b: libtorch: %s\n", err); status = 1; goto out; }
        const int check_layers[2] = {0, B_LAYERS - 1};
        float *tdw[2] = {NULL, NULL};
        double tl = 0;
        for (int k = 0; k < 2; k++) {
            const int l = check_layers[k];
            tdw[k] = malloc((size_t)(widths[l + 1] * widths[l]) * sizeof(float));
        }
        if (!tdw[0] || !tdw[1] || bat_mlp_step_grads(tm, 2, check_layers, tdw, &tl, err, sizeof err)) {
            fprintf(stderr, "part b: libtorch step: %s\n", tdw[0] && tdw[1] ? err : "out of memory");
            status = 1;
        }
        pb->loss_diff = fabs(tl - lv) / (fabs(tl) > 1 ? fabs(tl) : 1);
        for (int k = 0; k < 2 && !status; k++) {
            const int l = check_layers[k];
            /* the gradients of the analysis step are still in place */
            opr_tensor *g = opr_grad(m.w[l]);
            float *dw = g ? host_copy(g) : NULL;
            if (!dw) { fprintf(stderr, "part b: opreg has no gradient for W%d: %s\n", l + 1, opr_last_error()); status = 1; break; }
            pb->grad_diff[k] = rel_err(dw, tdw[k], (size_t)(widths[l + 1] * widths[l]));
            free(dw);
        }
        free(tdw[0]);
        free(tdw[1]);
        pb->checked_torch = !status;
        if (!status && (pb->loss_diff > 1e-3 || pb->grad_diff[0] > 1e-3 || pb->grad_diff[1] > 1e-3)) {
            fprintf(stderr, "part b: opreg and libtorch disagree: loss %.2g, dW1 %.2g, dW4 %.2g (relative)\n", pb->loss_diff,
                    pb->grad_diff[0], pb->grad_diff[1]);
            status = 1;
        }
    }
#endif
    for (int l = 0; l < B_LAYERS; l++)
        if (m.trainable[l]) { opr_zero_grad(m.w[l]); opr_zero_grad(m.b[l]); }
    if (status) goto out;

    body_side ob = {mlp_body, &m, opreg_error};
    pb->sides[pb->nsides++] = (side){.name = "opreg", .run = body_side_run, .state = &ob};
    raw_gemms rg;
    body_side rb = {raw_gemms_body, &rg, raw_gemms_error};
    if (raw_gemms_init(&rg, &m)) pb->sides[pb->nsides++] = (side){.name = "raw GEMMs", .run = body_side_run, .state = &rb};
#if OPREG_BENCH_HAVE_TORCH
    if (tm) pb->sides[pb->nsides++] = (side){.name = "libtorch C++", .run = torch_b_run, .state = tm};
    else {
        pb->absent[2 * pb->nabsent] = "libtorch C++";
        pb->absent[2 * pb->nabsent++ + 1] = "libtorch failed to initialise";
    }
#else
    (void)have_torch;
    pb->absent[2 * pb->nabsent] = "libtorch C++";
    pb->absent[2 * pb->nabsent++ + 1] = OPREG_BENCH_NO_TORCH_REASON;
#endif
    py_side ps = {py, "b"};
    if (py->up) pb->sides[pb->nsides++] = (side){.name = "PyTorch Python", .run = py_side_run, .state = &ps};
    else {
        pb->absent[2 * pb->nabsent] = "PyTorch Python";
        pb->absent[2 * pb->nabsent++ + 1] = py->why[0] ? py->why : "no python3 with torch";
    }
    /* pause 0.2 s before each loop: OpenBLAS workers of the side before spin for a while */
    measure_sides(pb->sides, pb->nsides, o, 0.2);
    for (int i = 0; i < pb->nsides; i++) {
        pb->sides[i].state = NULL;
        if (pb->sides[i].res.ns < 0) { fprintf(stderr, "part b: %s: %s\n", pb->sides[i].name, pb->sides[i].err); status = 1; }
    }
    pb->ran = pb->sides[0].res.ns > 0;
    raw_gemms_free(&rg);
out:
#if OPREG_BENCH_HAVE_TORCH
    bat_mlp_free(tm);
#endif
    opr_tensor_release(m.x);
    free(m.hx);
    for (int l = 0; l < B_LAYERS; l++) {
        opr_tensor_release(m.w[l]);
        opr_tensor_release(m.b[l]);
        free(m.hw[l]);
        free(m.hb[l]);
    }
    return status;
}

/* The side named `name` among the measured ones, or NULL. */
static const side *find_side(const side *sides, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(sides[i].name, name) && sides[i].res.ns > 0) return &sides[i];
    return NULL;
}

static void print_part_b(const part_b *pb, const py_server *py, const bench_opts *o)
{
    char b1[32], b2[32], b3[32];
    printf("== b. fine-tuning with frozen middle layers: MLP 1024-4096-4096-4096-1024, ReLU between, batch %d, f32,\n"
           "      layers 1 and 4 (weight, bias) require grad, 2 and 3 frozen; loss = sum(output)\n\n", B_BATCH);
    printf("   analytic minimum saved for backward: %s\n", pb->how);
    printf("     = %llu bytes (%s); a tensor needed by two formulas counts once; %s of it are\n"
           "     ReLU outputs needed only as masks\n\n",
           (unsigned long long)pb->analytic, fmt_bytes(pb->analytic, b1, sizeof b1), fmt_bytes(pb->mask_only, b2, sizeof b2));
    bool py_saved = py->b_saved_distinct > 0;
    if (!pb->chk || !pb->walk_nodes) {
        printf("   opreg: not run: %s\n", pb->why[0] ? pb->why : "error (see above)");
        if (py_saved)
            printf("   PyTorch Python: saves %llu bytes (%s) in %d distinct tensors: %s\n", (unsigned long long)py->b_saved_distinct,
                   fmt_bytes(py->b_saved_distinct, b1, sizeof b1), py->b_n_distinct, py->b_shapes);
        printf("\n");
        return;
    }
    printf("   opreg's graph of one step, per recorded call (chosen set and saves from opr_plan_explain):\n");
    printf("     %-8s %-58s %-16s %12s\n", "call", "chosen candidate set", "saves", "saved bytes");
    for (int i = 0; i < pb->chk->ncalls; i++)
        printf("     %-8s %-58s %-16s %12llu\n", pb->chk->calls[i].tag, pb->chk->calls[i].set, pb->chk->calls[i].saves,
               (unsigned long long)pb->chk->calls[i].bytes);
    printf("     distinct saved tensors:");
    for (int i = 0; i < pb->chk->nsaved; i++) printf("%s %s", i ? "," : "", pb->chk->saved[i].desc);
    printf("\n     opr_autograd_walk of the loss: %d nodes, saved bytes summed over nodes %llu%s\n", pb->walk_nodes,
           (unsigned long long)pb->walk_sum,
           pb->walk_sum == pb->chk->node_sum ? " (= the sum over the calls above)" : " (differs from the sum over the calls above!)");
    printf("     new storage held by the graph after forward (opr_memory_stats delta): %s\n\n",
           fmt_bytes(pb->graph_new_bytes, b1, sizeof b1));

    printf("   %-46s %18s %18s %18s\n", "saved bytes", "opreg", "PyTorch Python", "analytic min");
    printf("   %-46s %18llu %18s %18llu\n", "distinct tensors (each counted once)", (unsigned long long)pb->chk->distinct,
           py_saved ? (snprintf(b1, sizeof b1, "%llu", (unsigned long long)py->b_saved_distinct), b1) : "n/a",
           (unsigned long long)pb->analytic);
    printf("   %-46s %18llu %18s\n", "summed over nodes (walk) / pack-hook calls", (unsigned long long)pb->walk_sum,
           py_saved ? (snprintf(b2, sizeof b2, "%llu", (unsigned long long)py->b_saved_total), b2) : "n/a");
    char t1[32], t2[32] = "n/a";
    snprintf(t1, sizeof t1, "%d / %d", pb->chk->nsaved, pb->chk->nrefs);
    if (py_saved) snprintf(t2, sizeof t2, "%d / %d", py->b_n_distinct, py->b_n_total);
    printf("   %-46s %18s %18s\n", "tensors (distinct / saved by some node)", t1, t2);
    printf("   %-46s %18s %18s %18s\n", "", fmt_bytes(pb->chk->distinct, b1, sizeof b1),
           py_saved ? fmt_bytes(py->b_saved_distinct, b2, sizeof b2) : "", fmt_bytes(pb->analytic, b3, sizeof b3));
    if (py_saved) printf("   PyTorch's saved tensors (shapes): %s\n", py->b_shapes);
    else printf("   PyTorch Python: skipped (%s)\n", py->why[0] ? py->why : "no python3 with torch");
    printf("\n");

    if (!pb->ran) { printf("   step time: not measured (error above)\n\n"); return; }
    printf("   step time (forward + backward + grads dropped), median of %d loops per side, interleaved:\n", o->reps);
    print_sides("     ", pb->sides, pb->nsides, pb->absent, pb->nabsent);
    if (pb->checked_torch)
        printf("     checks vs libtorch on the same data: loss rel diff %.1e, dW1 %.1e, dW4 %.1e; db4 == %d exactly\n",
               pb->loss_diff, pb->grad_diff[0], pb->grad_diff[1], B_BATCH);
    printf("\n");
}

/* ================================================================== part c */

#define C_MAX_SETS 12
#define C_MAX_ROUNDS 41
#define C_MAX_SAMPLES (2 * C_MAX_ROUNDS) /* a miss gets a second pass */

typedef struct c_set {
    char text[256];  /* opr_plan_explain's "chosen:" text */
    char brief[96];  /* the same with candidates as #index */
    double est_us;
    uint64_t saved;
    opr_tensor *out; /* forward output whose graph uses this set */
    double samples[C_MAX_SAMPLES];
    int nsamples;
    double t_ns;     /* the fastest round (see run_c_case) */
    double first_s;  /* the first call (warm-up and check) */
    bool pruned;     /* timed in one round only: far slower than the fastest */
} c_set;

typedef struct c_case {
    char op[16], mask[32], shape[32];
    int nsets, auto_set, best_set;
    double ratio;
    bool valid, hit, wrong;
    int passes;   /* 2 when a miss was timed again */
    char why[256];
    char detail[2048];
    char sets_line[512];
} c_case;

/* "[self] + [self, mat2 kernel mm_backward for mat2]" -> "#0+#2(mat2)". */
static void brief_set(const opr_op *op, const char *text, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    const char *p = text;
    while ((p = strchr(p, '['))) {
        const char *e = strchr(p, ']');
        if (!e) break;
        char item[200], label[200], part[96] = "";
        snprintf(item, sizeof item, "%.*s", (int)(e - p - 1), p + 1);
        char *f = strstr(item, " for ");
        if (f) { snprintf(part, sizeof part, "(%s)", f + 5); *f = '\0'; }
        char *k = strstr(item, " kernel ");
        snprintf(label, sizeof label, "%s", item);
        if (k) label[k - item] = '\0';
        int idx = -1;
        for (int i = 0; i < opr_op_grad_candidate_count(op) && idx < 0; i++) {
            const char *l = opr_op_grad_candidate_label(op, i);
            if (l && (!strcmp(l, label) || !strcmp(l, item))) idx = i;
        }
        int n = idx >= 0 ? snprintf(out + used, len - used, "%s#%d%s", used ? "+" : "", idx, part)
                         : snprintf(out + used, len - used, "%s[%s]%s", used ? "+" : "", label, part);
        if (n > 0) used = used + (size_t)n < len ? used + (size_t)n : len - 1;
        p = e + 1;
    }
    if (!used) scopy(out, len, text);
}

typedef struct c_shape { int64_t n, k, m; } c_shape;

typedef struct c_tensors {
    opr_tensor *a, *bm, *w, *bias, *g; /* a [n,k], bm [k,m], w [m,k], bias [m], g [n,m] */
} c_tensors;

/* Arguments of op for shape s: returns nargs. */
static int c_args(const char *op, const c_tensors *t, opr_value *args)
{
    if (!strcmp(op, "linear")) {
        args[0] = opr_v_tensor(t->a);
        args[1] = opr_v_tensor(t->w);
        args[2] = opr_v_tensor(t->bias);
        return 3;
    }
    if (!strcmp(op, "addmm")) {
        args[0] = opr_v_tensor(t->bias);
        args[1] = opr_v_tensor(t->a);
        args[2] = opr_v_tensor(t->bm);
        return 3;
    }
    args[0] = opr_v_tensor(t->a);
    args[1] = opr_v_tensor(t->bm);
    return 2;
}

static void c_shape_text(const char *op, const c_shape *s, char *buf, size_t len)
{
    if (!strcmp(op, "linear"))
        snprintf(buf, len, "%lldx%lld, W %lldx%lld", (long long)s->n, (long long)s->k, (long long)s->m, (long long)s->k);
    else
        snprintf(buf, len, "%lldx%lld @ %lldx%lld", (long long)s->n, (long long)s->k, (long long)s->k, (long long)s->m);
}

/* One case: op with the inputs in `mask` requiring grad. */
static int run_c_case(const opr_op *op, const c_tensors *t, opr_value *args, int nargs, uint32_t mask, double budget_s,
                      c_case *cc, char *explain, size_t explain_len, bool verbose_miss)
{
    c_set *sets = calloc(C_MAX_SETS, sizeof *sets);
    if (!sets) return 1;
    const char *names[3];
    opr_tensor *inputs[3];
    int nin = 0, status = 0;
    for (int i = 0; i < nargs; i++)
        if ((mask >> i) & 1) {
            names[nin] = opr_op_arg_name(op, i);
            inputs[nin++] = args[i].u.t;
            opr_set_requires_grad(args[i].u.t, true);
        }
    cc->auto_set = cc->best_set = -1;
    int nsets = 0;
    const int ncand = opr_op_grad_candidate_count(op);
    for (int f = -1; f < ncand; f++) {
        if (opr_op_force_grad_candidate(op, f)) continue;
        char set[256], saves[16][32];
        int nsaves;
        double est;
        if (opr_plan_explain(op, args, nargs, names, nin, explain, explain_len)) {
            if (f == -1) { snprintf(cc->why, sizeof cc->why, "%s", opr_last_error()); break; }
            continue; /* e.g. a forced kernel this backend lacks */
        }
        if (!parse_chosen(explain, set, sizeof set, saves, &nsaves, &est)) {
            fprintf(stderr, "part c: cannot read opr_plan_explain's output:\n%s\n", explain);
            status = 1;
            break;
        }
        int found = -1;
        for (int i = 0; i < nsets && found < 0; i++)
            if (!strcmp(sets[i].text, set)) found = i;
        if (found < 0 && nsets < C_MAX_SETS) {
            c_set *s = &sets[nsets];
            snprintf(s->text, sizeof s->text, "%s", set);
            brief_set(op, set, s->brief, sizeof s->brief);
            s->est_us = est;
            opr_plan_saved_bytes(op, args, nargs, names, nin, &s->saved);
            int rc = opr_call(op, args, nargs, &s->out, 1);
            if (rc) {
                /* a broken formula or kernel: reported, the case not counted, the run goes on */
                snprintf(cc->why, sizeof cc->why, "ERROR: forward recording %.80s fails: %s %.100s", set, opr_status_name(rc),
                         opr_last_error());
                cc->wrong = true;
                break;
            }
            found = nsets++;
        }
        if (f == -1) cc->auto_set = found;
    }
    opr_op_force_grad_candidate(op, -1);
    cc->nsets = nsets;
    if (status || cc->why[0] || cc->wrong || nsets == 0 || cc->auto_set < 0) goto out;

    /* warm-up and check: every set gives the same gradients */
    opr_backward_opts bo = {.struct_size = sizeof bo, .retain_graph = true};
    float *ref[3] = {NULL, NULL, NULL};
    for (int s = 0; s < nsets && !status && !cc->wrong; s++) {
        opr_tensor *grads[3] = {NULL, NULL, NULL};
        double t0 = bench_now_s();
        int rc = opr_autograd_grad(&sets[s].out, &t->g, 1, inputs, nin, grads, &bo);
        sets[s].first_s = bench_now_s() - t0;
        if (rc) { /* a broken formula or kernel: reported in the row, the run goes on */
            snprintf(cc->why, sizeof cc->why, "ERROR: backward with %.80s fails: %s %.100s", sets[s].text, opr_status_name(rc),
                     opr_last_error());
            cc->wrong = true;
        }
        for (int i = 0; i < nin && !rc && !cc->wrong; i++) {
            if (!grads[i]) {
                snprintf(cc->why, sizeof cc->why, "ERROR: no gradient for %s with %.80s", names[i], sets[s].text);
                cc->wrong = true;
                break;
            }
            float *h = host_copy(grads[i]);
            if (!h) { status = 1; break; }
            if (s == 0) ref[i] = h;
            else {
                double e = rel_err(h, ref[i], (size_t)opr_tensor_numel(grads[i]));
                free(h);
                if (e > 1e-4 && !cc->why[0]) {
                    /* a wrong formula or kernel: reported, the case not counted, the run goes on */
                    snprintf(cc->why, sizeof cc->why, "ERROR: gradient of %s differs between %.60s and %.60s by %.2g (relative)",
                             names[i], sets[0].text, sets[s].text, e);
                    cc->wrong = true;
                }
            }
        }
        for (int i = 0; i < nin; i++) opr_tensor_release(grads[i]);
    }
    for (int i = 0; i < 3; i++) free(ref[i]);
    if (status || cc->wrong) goto out;

    /* calibrate on the first calls: a sample is `calls` backward calls, >= 1 ms for the
     * fastest set; as many rounds as the budget allows, 3 (5 when cheap) to
     * C_MAX_ROUNDS, odd. A set whose first call took over 3x the fastest's cannot be
     * the fastest: it is timed in the first round only (unless it is the automatic
     * choice), which keeps pathological sets from eating the run time. */
    double first_min = INFINITY;
    for (int s = 0; s < nsets; s++)
        if (sets[s].first_s < first_min) first_min = sets[s].first_s;
    if (first_min <= 0) first_min = 1e-7;
    long calls = (long)ceil(1e-3 / first_min);
    if (calls < 1) calls = 1;
    double round_s = 0;
    for (int s = 0; s < nsets; s++) {
        sets[s].pruned = s != cc->auto_set && sets[s].first_s > 3 * first_min;
        if (!sets[s].pruned) round_s += (double)calls * sets[s].first_s;
    }
    int rounds = (int)(budget_s / round_s);
    if (nsets == 1) rounds = 1; /* nothing to compare: one sample for the table */
    else {
        const int least = round_s * 5 <= 0.75 ? 5 : 3; /* large shapes: 3 rounds, to bound the run time */
        if (rounds < least) rounds = least;
        if (rounds > C_MAX_ROUNDS) rounds = C_MAX_ROUNDS;
        if (rounds % 2 == 0) rounds--;
    }
    /* A miss is timed again (the same number of rounds, interleaved anew) before it
     * counts: a burst of other work on a shared machine must not make one. The fastest
     * round over both passes counts. */
    for (int pass = 0; pass < 2 && !status; pass++) {
        for (int r = 0; r < rounds && !status; r++)
            for (int s = 0; s < nsets && !status; s++) {
                if ((r > 0 || pass > 0) && sets[s].pruned) continue;
                if (sets[s].nsamples == C_MAX_SAMPLES) continue;
                double t0 = bench_now_s();
                for (long c = 0; c < calls; c++) {
                    opr_tensor *grads[3] = {NULL, NULL, NULL};
                    if (opr_autograd_grad(&sets[s].out, &t->g, 1, inputs, nin, grads, &bo)) {
                        fprintf(stderr, "part c: %s backward (it worked once): %s\n", opr_op_name(op), opr_last_error());
                        status = 1;
                        break;
                    }
                    for (int i = 0; i < nin; i++) opr_tensor_release(grads[i]);
                }
                sets[s].samples[sets[s].nsamples++] = (bench_now_s() - t0) * 1e9 / (double)calls;
            }
        if (status) break;
        /* the fastest round of each set: other processes on a shared machine only ever
         * add time, so the minimum of interleaved rounds is the steadiest estimate of a
         * set's own cost (the median moved by 10-15% between runs here, the minimum
         * much less) */
        cc->best_set = -1;
        for (int s = 0; s < nsets; s++) {
            double m = sets[s].samples[0];
            for (int i = 1; i < sets[s].nsamples; i++)
                if (sets[s].samples[i] < m) m = sets[s].samples[i];
            sets[s].t_ns = m;
            if (cc->best_set < 0 || sets[s].t_ns < sets[cc->best_set].t_ns) cc->best_set = s;
        }
        cc->ratio = sets[cc->auto_set].t_ns / sets[cc->best_set].t_ns;
        cc->hit = cc->ratio <= 1.0 + C_WITHIN;
        cc->passes = pass + 1;
        if (cc->hit || nsets == 1) break;
    }
    if (status) goto out;
    cc->valid = true;
    size_t used = 0;
    for (int s = 0; s < nsets; s++) {
        char tb[32];
        int n = snprintf(cc->sets_line + used, sizeof cc->sets_line - used, "%s%s %s%s%s%s", s ? " | " : "", sets[s].brief,
                         fmt_ns(sets[s].t_ns, tb, sizeof tb), sets[s].pruned ? "~" : "", s == cc->auto_set ? " A" : "",
                         s == cc->best_set ? " *" : "");
        if (n > 0) used = used + (size_t)n < sizeof cc->sets_line ? used + (size_t)n : sizeof cc->sets_line - 1;
    }
    if (verbose_miss && !cc->hit) { /* printed after the case's row */
        used = (size_t)snprintf(cc->detail, sizeof cc->detail,
                                "        miss (confirmed by a second pass): %d rounds x %ld calls per pass; estimated (cost model) vs measured:\n",
                                rounds, calls);
        for (int s = 0; s < nsets && used < sizeof cc->detail; s++) {
            char tb[32], bb[32];
            used += (size_t)snprintf(cc->detail + used, sizeof cc->detail - used,
                                     "          %-62s est %9.1f us  saves %-10s  measured %9s%s%s\n", sets[s].text, sets[s].est_us,
                                     fmt_bytes(sets[s].saved, bb, sizeof bb), fmt_ns(sets[s].t_ns, tb, sizeof tb),
                                     s == cc->auto_set ? "  <- auto" : "", s == cc->best_set ? "  <- fastest" : "");
        }
    }
out:
    for (int s = 0; s < nsets; s++) opr_tensor_release(sets[s].out);
    for (int i = 0; i < nargs; i++)
        if ((mask >> i) & 1) opr_set_requires_grad(args[i].u.t, false);
    free(sets);
    return status;
}

typedef struct part_c {
    int total, valid, hits, choice_cases, choice_hits, wrong;
    int per_op_valid[4], per_op_hits[4];
    char missing[4][512];
    double seconds;
} part_c;

static const char *const C_OPS[4] = {"mm", "matmul", "linear", "addmm"};

/* Whether op is in the comma-separated list (NULL: all). */
static bool c_selected(const char *list, const char *op)
{
    if (!list) return true;
    size_t n = strlen(op);
    for (const char *p = list; (p = strstr(p, op)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static int run_part_c(opr_ctx *ctx, double budget_total_s, const char *only_ops, int only_shape, part_c *pc)
{
    static const c_shape shapes[6] = {
        {4096, 8, 4096}, {8, 4096, 8}, {64, 4096, 64}, {512, 512, 512}, {4096, 64, 4096}, {1024, 1024, 1024},
    };
    memset(pc, 0, sizeof *pc);
    double t_start = bench_now_s();
    char *explain = malloc(1 << 16);
    if (!explain) return 1;
    int status = 0;
    /* cases to run, for the per-case budget */
    int ncases = 0;
    for (int o = 0; o < 4; o++) {
        const opr_op *op = c_selected(only_ops, C_OPS[o]) ? opr_op_find(ctx, C_OPS[o]) : NULL;
        int nin = op ? (!strcmp(C_OPS[o], "linear") || !strcmp(C_OPS[o], "addmm") ? 3 : 2) : 0;
        ncases += 6 * ((1 << nin) - 1);
    }
    const double budget_case = budget_total_s / (ncases ? ncases : 1);

    printf("== c. selection accuracy: backward of one op alone, every distinct candidate set the registry can choose\n"
           "      (each candidate forced in turn), timed interleaved; hit = automatic choice within %.0f%% of the fastest\n",
           C_WITHIN * 100);
    printf("      f32, retain_graph backward through opr_autograd_grad with a random grad_output; times per backward call,\n"
           "      the fastest of the interleaved rounds (at least 3; contention on a shared machine only adds time)\n");
    printf("      sets: #i = candidate i of the op (legend per op), (x) = only for input x; A = automatic choice,\n"
           "      * = fastest, ~ = timed in one round only (its first call took over 3x the fastest set's)\n\n");
    for (int o = 0; o < 4 && !status; o++) {
        if (!c_selected(only_ops, C_OPS[o])) continue;
        const opr_op *op = opr_op_find(ctx, C_OPS[o]);
        if (!op) { snprintf(pc->missing[o], sizeof pc->missing[o], "no op %s", C_OPS[o]); continue; }
        const int nin = !strcmp(C_OPS[o], "linear") || !strcmp(C_OPS[o], "addmm") ? 3 : 2;
        printf("   %s: %s\n     candidates:", C_OPS[o], opr_op_schema(op));
        for (int i = 0; i < opr_op_grad_candidate_count(op); i++) printf("%s #%d [%s]", i ? "," : "", i, opr_op_grad_candidate_label(op, i));
        if (!opr_op_grad_candidate_count(op)) printf(" none: %s has no derivative formulas yet", C_OPS[o]);
        printf("\n");
        printf("     %-17s %-24s %8s  %s\n", "grad of", "shape", "auto/best", "sets: time per backward (A auto, * fastest)");
        for (int si = 0; si < 6 && !status; si++) {
            if (only_shape >= 0 && si != only_shape) continue;
            const c_shape *s = &shapes[si];
            c_tensors t = {0};
            const int64_t as[2] = {s->n, s->k}, bs[2] = {s->k, s->m}, ws[2] = {s->m, s->k}, bias[1] = {s->m}, gs[2] = {s->n, s->m};
            t.a = random_tensor(ctx, 2, as, 1000 + (unsigned)si, 1);
            t.bm = random_tensor(ctx, 2, bs, 2000 + (unsigned)si, 1);
            t.w = random_tensor(ctx, 2, ws, 3000 + (unsigned)si, 1);
            t.bias = random_tensor(ctx, 1, bias, 4000 + (unsigned)si, 1);
            t.g = random_tensor(ctx, 2, gs, 5000 + (unsigned)si, 1);
            if (!t.a || !t.bm || !t.w || !t.bias || !t.g) { fprintf(stderr, "part c: %s\n", opr_last_error()); status = 1; }
            opr_value args[3];
            int nargs = c_args(C_OPS[o], &t, args);
            for (uint32_t mask = 1; mask < (1u << nin) && !status; mask++) {
                c_case cc = {0};
                snprintf(cc.op, sizeof cc.op, "%s", C_OPS[o]);
                c_shape_text(C_OPS[o], s, cc.shape, sizeof cc.shape);
                size_t u = 0;
                for (int i = 0; i < nargs; i++)
                    if ((mask >> i) & 1) u += (size_t)snprintf(cc.mask + u, sizeof cc.mask - u, "%s%s", u ? "," : "", opr_op_arg_name(op, i));
                pc->total++;
                if (!opr_op_grad_candidate_count(op)) { /* reported in the legend line */
                    snprintf(pc->missing[o], sizeof pc->missing[o], "%s has no derivative formulas", C_OPS[o]);
                    continue;
                }
                status = run_c_case(op, &t, args, nargs, mask, budget_case, &cc, explain, 1 << 16, true);
                if (status) break;
                if (!cc.valid) {
                    printf("     %-17s %-24s %8s  n/a: %s\n", cc.mask, cc.shape, "", cc.why[0] ? cc.why : "no candidate set");
                    if (cc.wrong) pc->wrong++;
                    else if (cc.why[0] && !pc->missing[o][0]) snprintf(pc->missing[o], sizeof pc->missing[o], "%s", cc.why);
                    continue;
                }
                pc->valid++;
                pc->per_op_valid[o]++;
                if (cc.hit) { pc->hits++; pc->per_op_hits[o]++; }
                if (cc.nsets > 1) { pc->choice_cases++; if (cc.hit) pc->choice_hits++; }
                printf("     %-17s %-24s %7.2fx%s %s\n", cc.mask, cc.shape, cc.ratio, cc.hit ? " " : "!", cc.sets_line);
                if (cc.detail[0]) printf("%s", cc.detail);
                fflush(stdout);
            }
            opr_tensor_release(t.a);
            opr_tensor_release(t.bm);
            opr_tensor_release(t.w);
            opr_tensor_release(t.bias);
            opr_tensor_release(t.g);
        }
        printf("\n");
    }
    free(explain);
    pc->seconds = bench_now_s() - t_start;
    return status;
}

/* ================================================================== main */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--parts abc] [--threads N] [--time-a S] [--reps-a N] [--time-b S] [--reps-b N]\n"
            "          [--budget-c S] [--ops-c mm,matmul,linear,addmm] [--shape-c 0-5] [--python PATH|none]\n"
            "       %s --profile a|b [--iters N] [--threads N]\n",
            argv0, argv0);
}

int main(int argc, char **argv)
{
    bench_opts oa = {.cell_s = 0.3, .reps = 11}, ob = {.cell_s = 0.5, .reps = 7};
    int threads = 2;
    double budget_c = 20;
    int c_shape_only = -1;
    const char *parts = "abc", *python = NULL, *profile = NULL, *c_ops = NULL;
    long profile_iters = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--parts") && val) { parts = val; i++; }
        else if (!strcmp(arg, "--threads") && val) { threads = atoi(val); i++; }
        else if (!strcmp(arg, "--time-a") && val) { oa.cell_s = atof(val); i++; }
        else if (!strcmp(arg, "--reps-a") && val) { oa.reps = atoi(val); i++; }
        else if (!strcmp(arg, "--time-b") && val) { ob.cell_s = atof(val); i++; }
        else if (!strcmp(arg, "--reps-b") && val) { ob.reps = atoi(val); i++; }
        else if (!strcmp(arg, "--budget-c") && val) { budget_c = atof(val); i++; }
        else if (!strcmp(arg, "--ops-c") && val) { c_ops = val; i++; }
        else if (!strcmp(arg, "--shape-c") && val) { c_shape_only = atoi(val); i++; }
        else if (!strcmp(arg, "--python") && val) { python = val; i++; }
        else if (!strcmp(arg, "--profile") && val) { profile = val; i++; }
        else if (!strcmp(arg, "--iters") && val) { profile_iters = atol(val); i++; }
        else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) { usage(argv[0]); return 0; }
        else { usage(argv[0]); return 1; }
    }
    if (threads < 1 || oa.cell_s <= 0 || ob.cell_s <= 0 || oa.reps < 1 || oa.reps > BENCH_MAX_REPS || ob.reps < 1 ||
        ob.reps > BENCH_MAX_REPS || budget_c <= 0 || c_shape_only < -1 || c_shape_only > 5 || (profile && strcmp(profile, "a") && strcmp(profile, "b"))) {
        usage(argv[0]);
        return 1;
    }
    if (profile && profile_iters < 1) profile_iters = !strcmp(profile, "a") ? 1000000 : 3;
    const bool do_a = strchr(parts, 'a'), do_b = strchr(parts, 'b'), do_c = strchr(parts, 'c');

    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }
    const opr_op *mm = opr_op_find(ctx, "mm");
    if (!mm || !opr_op_has_kernel(mm, 0)) {
        fprintf(stderr, "opreg: no CPU kernels; plugin candidates:\n");
        for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
            opr_plugin_candidate c = {.struct_size = sizeof c};
            if (!opr_plugin_candidate_get(ctx, i, &c))
                fprintf(stderr, "  %s: %s\n", c.path, c.loaded ? "loaded" : c.why ? c.why : "not loaded");
        }
        opr_ctx_free(ctx);
        return 1;
    }
    int status = 0;
    py_server py;
    memset(&py, 0, sizeof py);
    if (profile) {
        part_a pa;
        part_b pb = {0};
        status = !strcmp(profile, "a") ? run_part_a(ctx, &oa, false, &py, &pa, profile_iters)
                                       : run_part_b(ctx, &ob, false, &py, &pb, profile_iters);
        if (!strcmp(profile, "a") && pa.why[0]) fprintf(stderr, "%s\n", pa.why);
        if (!strcmp(profile, "b") && pb.why[0]) fprintf(stderr, "%s\n", pb.why);
        free(pb.chk);
        int live = opr_ctx_free(ctx);
        return status || live;
    }
    signal(SIGPIPE, SIG_IGN); /* a Python side that dies must not take the driver with it */

    double t_start = bench_now_s();
    char torch_info[512] = "", torch_err[512] = "";
    bool have_torch = false;
#if OPREG_BENCH_HAVE_TORCH
    if (bat_init(threads, torch_info, sizeof torch_info, torch_err, sizeof torch_err))
        snprintf(torch_info, sizeof torch_info, "not available (libtorch failed to initialise: %s)", torch_err);
    else have_torch = true;
#else
    (void)torch_err;
    snprintf(torch_info, sizeof torch_info, "not available (%s)", OPREG_BENCH_NO_TORCH_REASON);
#endif
    /* The Python side starts first, before this process holds the MLP's memory; it
     * waits for timing requests while the C side works. */
    char py_cases[8] = "";
    if (do_a) strcat(py_cases, "a");
    if (do_b) strcat(py_cases, py_cases[0] ? ",b" : "b");
    if (py_cases[0]) py_start(&py, python, threads, py_cases);

    printf("opreg autograd benchmark\n");
    printf("threads: %d everywhere: OpenBLAS %d, OpenMP %d%s; Python: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,\n"
           "  torch.set_num_threads\n",
           threads, openblas_get_num_threads(), omp_get_max_threads(), have_torch ? ", libtorch at::set_num_threads" : "");
    printf("BLAS: %s (one copy in this process, used by opreg's cpu plugin%s;\n"
           "  Python's torch loads the same libopenblas through libblas.so.3)\n", openblas_get_config(),
           have_torch ? " and libtorch" : "");
    printf("libtorch: %s\n", torch_info);
    if (py.up) printf("PyTorch Python: %s%s%s\n", py.info, py.why[0] ? "; skipped before it: " : "", py.why);
    else if (py_cases[0]) printf("PyTorch Python: skipped: %s\n", py.why[0] ? py.why : "no python3 with torch");
    printf("\n");

    bool any_error = false;
    /* ---------------- a */
    part_a pa = {0};
    const side *a_opreg = NULL, *a_torch = NULL;
    if (do_a) {
        if (run_part_a(ctx, &oa, have_torch, &py, &pa, 0)) any_error = true;
        print_part_a(&pa, &oa);
        a_opreg = find_side(pa.sides, pa.nsides, "opreg");
        a_torch = find_side(pa.sides, pa.nsides, "libtorch C++");
    }
    fflush(stdout);
    /* ---------------- b */
    part_b pb = {0};
    const side *b_opreg = NULL, *b_py = NULL;
    if (do_b) {
        if (run_part_b(ctx, &ob, have_torch, &py, &pb, 0)) any_error = true;
        print_part_b(&pb, &py, &ob);
        b_opreg = find_side(pb.sides, pb.nsides, "opreg");
        b_py = find_side(pb.sides, pb.nsides, "PyTorch Python");
    }
    py_stop(&py);
    fflush(stdout);
    /* ---------------- c */
    part_c pc = {0};
    if (do_c) {
        if (run_part_c(ctx, budget_c, c_ops, c_shape_only, &pc) || pc.wrong) any_error = true;
        printf("   summary: automatic choice within %.0f%% of the fastest in %d of %d cases (%.1f%%); in %d of %d cases with\n"
               "   more than one candidate set; per op:",
               C_WITHIN * 100, pc.hits, pc.valid, pc.valid ? 100.0 * pc.hits / pc.valid : 0.0, pc.choice_hits, pc.choice_cases);
        for (int o = 0; o < 4; o++) printf(" %s %d/%d", C_OPS[o], pc.per_op_hits[o], pc.per_op_valid[o]);
        printf("; %d of %d cases not run (missing derivatives)", pc.total - pc.valid - pc.wrong, pc.total);
        if (pc.wrong) printf(", %d failed (ERROR rows above)", pc.wrong);
        printf("; %.0f s\n\n", pc.seconds);
    }

    /* ---------------- targets */
    char b1[32], b2[32];
    printf("targets:\n");
    if (do_a) {
        if (!a_opreg) printf("  a. opreg <= %.1f us per step: not run (%s)  MISS\n", TARGET_A_NS / 1e3, pa.why[0] ? pa.why : "error");
        else {
            printf("  a. opreg <= %.1f us per step: %s  %s\n", TARGET_A_NS / 1e3, fmt_ns(a_opreg->res.ns, b1, sizeof b1),
                   verdict(a_opreg->res.ns <= TARGET_A_NS));
            if (a_torch)
                printf("  a. opreg >= %.0fx faster than libtorch C++: %.2fx  %s\n", TARGET_A_RATIO,
                       a_torch->res.ns / a_opreg->res.ns, verdict(a_torch->res.ns / a_opreg->res.ns >= TARGET_A_RATIO));
            else printf("  a. opreg >= %.0fx faster than libtorch C++: n/a (libtorch not available)\n", TARGET_A_RATIO);
        }
    }
    if (do_b) {
        const bool have_saved = pb.chk && pb.walk_nodes;
        if (!have_saved) printf("  b. saved bytes: not measured (%s)  MISS\n", pb.why[0] ? pb.why : "error");
        else {
            printf("  b. opreg saved bytes == analytic minimum: %llu vs %llu  %s\n", (unsigned long long)pb.chk->distinct,
                   (unsigned long long)pb.analytic, verdict(pb.chk->distinct == pb.analytic));
            if (pb.walk_sum != pb.chk->distinct)
                printf("     (distinct tensors; the opr_autograd_walk sum, %llu, counts a tensor saved by two nodes twice)\n",
                       (unsigned long long)pb.walk_sum);
            if (py.b_saved_distinct)
                printf("  b. opreg saved bytes <= PyTorch's: %s vs %s  %s\n", fmt_bytes(pb.chk->distinct, b1, sizeof b1),
                       fmt_bytes(py.b_saved_distinct, b2, sizeof b2), verdict(pb.chk->distinct <= py.b_saved_distinct));
            else printf("  b. opreg saved bytes <= PyTorch's: n/a (PyTorch Python skipped)\n");
        }
        if (b_opreg && b_py)
            printf("  b. opreg step time <= PyTorch's (same OpenBLAS, %d threads): %s vs %s (%.2fx)  %s\n", threads,
                   fmt_ns(b_opreg->res.ns, b1, sizeof b1), fmt_ns(b_py->res.ns, b2, sizeof b2), b_opreg->res.ns / b_py->res.ns,
                   verdict(b_opreg->res.ns <= b_py->res.ns));
        else if (b_opreg) printf("  b. opreg step time <= PyTorch's: n/a (PyTorch Python skipped)\n");
        else printf("  b. opreg step time <= PyTorch's: not measured  MISS\n");
    }
    if (do_c) {
        double pct = pc.valid ? (double)pc.hits / pc.valid : 0;
        printf("  c. automatic choice within %.0f%% of the fastest in >= %.0f%% of cases: %.1f%% (%d/%d)%s  %s\n", C_WITHIN * 100,
               C_TARGET * 100, 100 * pct, pc.hits, pc.valid, pc.valid < pc.total ? ", on the cases that could run" : "",
               verdict(pc.valid > 0 && pct >= C_TARGET));
        for (int o = 0; o < 4; o++)
            if (pc.missing[o][0]) printf("     not run: %s\n", pc.missing[o]);
    }
    printf("\ntotal %.0f s\n", bench_now_s() - t_start);

    free(pb.chk);
    int live = opr_ctx_free(ctx);
    if (live) { fprintf(stderr, "opr_ctx_free: %d tensors still alive\n", live); any_error = true; }
    return any_error || status ? 1 : 0;
}
