/* opreg run: replay a captured program (opreg-capture, docs/program-format.md) on a
 * backend, and with --compare name the first node whose value leaves the reference. */
#include "cli.h"

#include <opreg/program.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: opreg run MODEL.opreg [--backend DEVICE] [--dtype f32|f64] [--compare] [--backward]\n"
            "                 [--repeat N] [--warmup N] [--profile] [--format text|json] [--rtol X] [--atol X]\n\n"
            "Runs a program captured by opreg-capture on DEVICE (default cpu) with autograd.\n"
            "  --dtype      run in this floating dtype (default: as captured)\n"
            "  --compare    check every node, output and (with --backward) parameter gradient that\n"
            "               has a reference; print the first diverging node, its op, its inputs'\n"
            "               shapes and dtypes and whether they still matched; exit 1 on a mismatch.\n"
            "               Tolerance per element: atol + rtol |reference|, by default 1e-4 + 1e-3 |ref|\n"
            "               when the run or the reference is f32, 1e-9 + 1e-7 |ref| in f64\n"
            "  --backward   also run backward (of the program's loss, else of the sum of its outputs)\n"
            "  --repeat N   run N times and report the time per run: mean and median (json: also the\n"
            "               medians in the process's CPU time, which other processes' load does not inflate)\n"
            "  --warmup N   first run N times untimed (caches, allocator, lazily opened libraries)\n"
            "  --profile    time per op kind (calls, total, share) and the slowest nodes, over the\n"
            "               timed runs\n"
            "  --format     json: one JSON object on stdout, for CI\n"
            "Exit status: 0 ok, 1 mismatch, 2 usage or load error (an op the registry lacks is\n"
            "named before anything runs), 3 a node failed.\n");
}

typedef struct run_args {
    const char *path, *backend, *dtype;
    bool compare, backward, profile, json;
    int repeat, warmup;
    double rtol, atol;
} run_args;

/* Outcome of comparing one tensor with its reference. */
typedef struct cmp {
    bool checked, ok;
    double max_err, tol_at_max, max_ref;
    char why[96]; /* a shape or dtype difference */
} cmp;

/* s as a JSON string on stdout (paths and error messages may hold quotes). */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", (unsigned char)*s);
        else putchar(*s);
    }
    putchar('"');
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU time: unlike the wall clock, not inflated while other processes
 * hold the cores (a one-thread CPU run's measure on a loaded machine). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void tolerance(const run_args *a, opr_dtype run, opr_dtype ref, double *rtol, double *atol)
{
    const bool f64 = run == OPR_F64 && ref == OPR_F64;
    *rtol = a->rtol >= 0 ? a->rtol : f64 ? 1e-7 : 1e-3;
    *atol = a->atol >= 0 ? a->atol : f64 ? 1e-9 : 1e-4;
}

static cmp compare(const run_args *a, const opr_tensor *got, const opr_tensor *ref)
{
    cmp c = {.checked = got && ref, .ok = true};
    if (!c.checked) return c;
    if (opr_tensor_ndim(got) != opr_tensor_ndim(ref) || opr_tensor_numel(got) != opr_tensor_numel(ref)) {
        char g[64], r[64];
        snprintf(c.why, sizeof c.why, "shape %s, reference %s", opr_tensor_describe(got, g, sizeof g),
                 opr_tensor_describe(ref, r, sizeof r));
        c.ok = false;
        return c;
    }
    double rtol, atol;
    tolerance(a, opr_tensor_dtype(got), opr_tensor_dtype(ref), &rtol, &atol);
    const int64_t n = opr_tensor_numel(got);
    double *x = malloc((size_t)(n ? n : 1) * sizeof *x), *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    if (!x || !y || opr_tensor_copy_to_host_f64(got, x, n) || opr_tensor_copy_to_host_f64(ref, y, n)) {
        snprintf(c.why, sizeof c.why, "could not read the values: %s", opr_last_error());
        c.ok = false;
    }
    double worst = -1;
    for (int64_t i = 0; c.ok && i < n; i++) {
        const bool same = x[i] == y[i] || (isnan(x[i]) && isnan(y[i]));
        const double err = same ? 0 : fabs(x[i] - y[i]), tol = atol + rtol * fabs(y[i]);
        if (!isnan(y[i]) && fabs(y[i]) > c.max_ref) c.max_ref = fabs(y[i]);
        /* the element furthest past its tolerance (NaN against a number is infinitely far) */
        const double over = isnan(err) ? INFINITY : err - tol;
        if (over > worst || worst < 0) {
            worst = over;
            c.max_err = isnan(err) ? INFINITY : err;
            c.tol_at_max = tol;
        }
    }
    if (worst > 0) c.ok = false;
    free(x);
    free(y);
    return c;
}

/* Prints the first diverging node as the issue asks: its op, inputs and whether they matched. */
static void report_node(opr_program *p, int i, int k, const cmp *c, const cmp *node_cmp, const char *backend, bool json)
{
    char desc[96];
    const int nt = opr_program_node_num_tensor_args(p, i);
    bool inputs_match = true, inputs_known = true;
    for (int j = 0; j < nt; j++) {
        int src, out;
        if (opr_program_node_tensor_arg(p, i, j, &src, &out) || src < 0) continue;
        const cmp *s = &node_cmp[src];
        if (!s->checked) inputs_known = false;
        else if (!s->ok) inputs_match = false;
    }
    const char *verdict = !inputs_match ? "its inputs differ from the reference too"
                          : inputs_known ? "its inputs match the reference"
                                         : "some of its inputs have no reference";
    if (json) {
        printf("\"mismatch\": {\"node\": %d, \"op\": \"%s\", \"output\": %d, \"max_abs_error\": %.3e, \"tolerance\": %.3e, "
               "\"inputs_match\": %s, \"detail\": ",
               i, opr_program_node_aten_name(p, i), k, c->max_err, c->tol_at_max,
               !inputs_match ? "false" : inputs_known ? "true" : "null");
        json_string(c->why);
        printf("}");
        return;
    }
    if (c->why[0])
        printf("node %d %s on %s: output %d: %s; %s\n", i, opr_program_node_aten_name(p, i), backend, k, c->why, verdict);
    else
        printf("node %d %s on %s: output %d: max abs error %.1e (reference %.1e tolerance); %s\n", i,
               opr_program_node_aten_name(p, i), backend, k, c->max_err, c->tol_at_max, verdict);
    for (int j = 0; j < nt; j++) {
        int src, out;
        if (opr_program_node_tensor_arg(p, i, j, &src, &out)) continue;
        opr_tensor *v = src >= 0 ? opr_program_node_value(p, src, out) : NULL;
        if (src < 0) printf("  input %d: a graph input, parameter, buffer or constant\n", j);
        else
            printf("  input %d: node %d output %d, %s, %s\n", j, src, out, v ? opr_tensor_describe(v, desc, sizeof desc) : "?",
                   !node_cmp[src].checked ? "no reference" : node_cmp[src].ok ? "matches" : "differs");
    }
}

/* A parameter the outputs do not depend on gets no gradient here and zeros in PyTorch's
 * reference: the same. */
static bool all_zero(const opr_tensor *t)
{
    const int64_t n = opr_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    bool zero = v && !opr_tensor_copy_to_host_f64(t, v, n);
    for (int64_t i = 0; zero && i < n; i++) zero = v[i] == 0;
    free(v);
    return zero;
}

/* Compares every node, then the outputs and gradients; returns the number of mismatches. */
static int compare_all(const run_args *a, opr_program *p, opr_tensor **outs, bool json)
{
    const int nn = opr_program_num_nodes(p);
    cmp *nc = calloc((size_t)nn + 1, sizeof *nc);
    if (!nc) return 1;
    int bad = 0, checked = 0, first = -1, first_k = 0;
    cmp first_c = {0};
    for (int i = 0; i < nn; i++) {
        nc[i].ok = true;
        for (int k = 0; k < opr_program_node_num_outputs(p, i); k++) {
            cmp c = compare(a, opr_program_node_value(p, i, k), opr_program_node_reference(p, i, k));
            if (!c.checked) continue;
            checked++;
            nc[i].checked = true;
            if (!c.ok && nc[i].ok) {
                nc[i].ok = false;
                bad++;
                if (first < 0) first = i, first_k = k, first_c = c;
            }
        }
    }
    if (json) printf("\"compare\": {\"nodes_checked\": %d, \"nodes_differing\": %d, ", checked, bad);
    if (first >= 0) {
        report_node(p, first, first_k, &first_c, nc, a->backend, json);
        if (json) printf(", ");
    }
    int obad = 0;
    for (int k = 0; k < opr_program_num_outputs(p); k++) {
        cmp c = compare(a, outs[k], opr_program_output_reference(p, k));
        if (c.checked && !c.ok) {
            obad++;
            if (!json) printf("output %d: max abs error %.1e (tolerance %.1e)%s%s\n", k, c.max_err, c.tol_at_max,
                              c.why[0] ? ": " : "", c.why);
        }
    }
    int gbad = 0, gchecked = 0;
    for (int i = 0; a->backward && i < opr_program_num_params(p); i++) {
        char name[512];
        snprintf(name, sizeof name, "ref/grad/%s", opr_program_param_name(p, i));
        opr_tensor *g = opr_grad(opr_program_param(p, opr_program_param_name(p, i)));
        opr_tensor *r = opr_program_stored(p, name);
        if (!r) continue;
        gchecked++;
        cmp c = g ? compare(a, g, r) : (cmp){.checked = true, .ok = all_zero(r), .why = "no gradient"};
        if (!c.ok) {
            gbad++;
            if (!json)
                printf("gradient of %s: max abs error %.1e (tolerance %.1e)%s%s\n", opr_program_param_name(p, i), c.max_err,
                       c.tol_at_max, c.why[0] ? ": " : "", c.why);
        }
    }
    /* buffers as the run left them: compared after the first run only (each run writes them again) */
    int bbad = 0;
    for (int i = 0; i < opr_program_num_buffers(p); i++) {
        char name[512];
        snprintf(name, sizeof name, "ref/buffer/%s", opr_program_buffer_name(p, i));
        cmp c = compare(a, opr_program_buffer(p, opr_program_buffer_name(p, i)), opr_program_stored(p, name));
        if (c.checked && !c.ok) {
            bbad++;
            if (!json)
                printf("buffer %s after the run: max abs error %.1e (tolerance %.1e)%s%s\n", opr_program_buffer_name(p, i),
                       c.max_err, c.tol_at_max, c.why[0] ? ": " : "", c.why);
        }
    }
    if (json)
        printf("\"outputs_differing\": %d, \"grads_checked\": %d, \"grads_differing\": %d, \"buffers_differing\": %d}, ",
               obad, gchecked, gbad, bbad);
    else if (!bad && !obad && !gbad && !bbad)
        printf("compare: %d node outputs, the outputs, %d parameter gradients and the buffers match the reference\n",
               checked, gchecked);
    free(nc);
    return bad + obad + gbad + bbad;
}

typedef struct op_time {
    const char *name;
    int calls;
    int64_t ns;
} op_time;

static int by_ns(const void *x, const void *y)
{
    const int64_t a = ((const op_time *)x)->ns, b = ((const op_time *)y)->ns;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* The profile of the timed runs: every node's time less its time in the warm-up (base). */
static void print_profile(opr_program *p, const int64_t *base, bool json)
{
    const int nn = opr_program_num_nodes(p);
    op_time *kinds = calloc((size_t)nn + 1, sizeof *kinds), *nodes = calloc((size_t)nn + 1, sizeof *nodes);
    if (!kinds || !nodes) goto out;
    int nk = 0;
    int64_t total = 0;
    for (int i = 0; i < nn; i++) {
        const char *name = opr_program_node_aten_name(p, i);
        const int64_t ns = opr_program_node_time_ns(p, i) - base[i];
        int k = 0;
        while (k < nk && strcmp(kinds[k].name, name)) k++;
        if (k == nk) kinds[nk++].name = name;
        kinds[k].calls++;
        kinds[k].ns += ns;
        total += ns;
        nodes[i] = (op_time){name, i, ns}; /* calls holds the node index here */
    }
    qsort(kinds, (size_t)nk, sizeof *kinds, by_ns);
    qsort(nodes, (size_t)nn, sizeof *nodes, by_ns);
    const double t = total ? (double)total : 1;
    if (json) printf("\"profile\": {\"total_ms\": %.3f, \"ops\": [", 1e-6 * (double)total);
    else printf("profile: %.3f ms in %d nodes (the timed runs)\n  %-28s %7s %10s %6s\n", 1e-6 * (double)total, nn, "op", "calls", "ms", "share");
    for (int k = 0; k < nk; k++)
        if (json)
            printf("%s{\"op\": \"%s\", \"calls\": %d, \"total_ms\": %.3f, \"share\": %.4f}", k ? ", " : "", kinds[k].name,
                   kinds[k].calls, 1e-6 * (double)kinds[k].ns, (double)kinds[k].ns / t);
        else
            printf("  %-28s %7d %10.3f %5.1f%%\n", kinds[k].name, kinds[k].calls, 1e-6 * (double)kinds[k].ns,
                   100.0 * (double)kinds[k].ns / t);
    if (json) printf("], \"slowest_nodes\": [");
    else printf("  slowest nodes:\n");
    for (int i = 0; i < nn && i < 10; i++)
        if (json)
            printf("%s{\"node\": %d, \"op\": \"%s\", \"total_ms\": %.3f}", i ? ", " : "", nodes[i].calls, nodes[i].name,
                   1e-6 * (double)nodes[i].ns);
        else
            printf("  node %-5d %-28s %10.3f ms\n", nodes[i].calls, nodes[i].name, 1e-6 * (double)nodes[i].ns);
    if (json) printf("]}, ");
out:
    free(kinds);
    free(nodes);
}

static int parse_args(int argc, char **argv, run_args *a)
{
    *a = (run_args){.backend = "cpu", .repeat = 1, .rtol = -1, .atol = -1};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const bool has = i + 1 < argc;
        if (!strcmp(s, "--compare")) a->compare = true;
        else if (!strcmp(s, "--backward")) a->backward = true;
        else if (!strcmp(s, "--profile")) a->profile = true;
        else if (!strcmp(s, "--backend") && has) a->backend = argv[++i];
        else if (!strcmp(s, "--dtype") && has) a->dtype = argv[++i];
        else if (!strcmp(s, "--repeat") && has) a->repeat = atoi(argv[++i]);
        else if (!strcmp(s, "--warmup") && has) a->warmup = atoi(argv[++i]);
        else if (!strcmp(s, "--rtol") && has) a->rtol = atof(argv[++i]);
        else if (!strcmp(s, "--atol") && has) a->atol = atof(argv[++i]);
        else if (!strcmp(s, "--format") && has) {
            const char *f = argv[++i];
            if (strcmp(f, "json") && strcmp(f, "text")) return fprintf(stderr, "opreg run: --format text or json\n"), 2;
            a->json = !strcmp(f, "json");
        } else if ((!strcmp(s, "--plugin") || !strcmp(s, "--yaml")) && has) i++; /* cli_ctx_new's */
        else if (s[0] != '-' && !a->path) a->path = s;
        else return fprintf(stderr, "opreg run: unknown or incomplete option '%s' (see --help)\n", s), 2;
    }
    if (!a->path) return fprintf(stderr, "opreg run: no program file given (see --help)\n"), 2;
    if (a->repeat < 1) return fprintf(stderr, "opreg run: --repeat must be at least 1\n"), 2;
    if (a->warmup < 0) return fprintf(stderr, "opreg run: --warmup must be at least 0\n"), 2;
    if (a->dtype && strcmp(a->dtype, "f32") && strcmp(a->dtype, "f64"))
        return fprintf(stderr, "opreg run: --dtype f32 or f64\n"), 2;
    return 0;
}

int cmd_run(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        run_usage(stdout);
        return 0;
    }
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 2;
    opr_program_opts o = {.struct_size = sizeof o, .convert_dtype = a.dtype != NULL, .requires_grad = a.backward,
                          .keep_values = a.compare, .profile = a.profile};
    o.dtype = a.dtype && !strcmp(a.dtype, "f64") ? OPR_F64 : OPR_F32;
    opr_program *p = NULL;
    opr_tensor **outs = NULL;
    double *times = NULL;
    int64_t *base = NULL; /* each node's profiled time after the warm-up */
    rc = 2;
    if (opr_device_parse(ctx, a.backend, &o.device)) {
        fprintf(stderr, "opreg run: backend %s: %s\n", a.backend, opr_last_error());
        goto out;
    }
    if (opr_program_load(ctx, a.path, &o, &p)) {
        fprintf(stderr, "opreg run: %s\n", opr_last_error());
        goto out;
    }
    const int nout = opr_program_num_outputs(p);
    outs = calloc((size_t)nout + 1, sizeof *outs);
    /* per timed run: wall forward, backward, both; then the same in CPU time */
    times = calloc(6 * (size_t)a.repeat, sizeof *times);
    base = calloc((size_t)opr_program_num_nodes(p) + 1, sizeof *base);
    if (!outs || !times || !base) goto out;
    double fwd = 0, bwd = 0;
    int mismatches = 0;
    rc = 0;
    if (a.json) {
        printf("{\"program\": ");
        json_string(a.path);
        printf(", \"backend\": ");
        json_string(a.backend);
        printf(", \"nodes\": %d, \"runs\": %d, \"warmup\": %d, ", opr_program_num_nodes(p), a.repeat, a.warmup);
    } else {
        printf("%s on %s: %d nodes\n", a.path, a.backend, opr_program_num_nodes(p));
    }
    /* the warm-up runs come first (r < 0): run and, on the first, compared, not timed */
    for (int r = -a.warmup; r < a.repeat && !rc; r++) {
        for (int i = 0; r == 0 && i < opr_program_num_nodes(p); i++) base[i] = opr_program_node_time_ns(p, i);
        for (int k = 0; k < nout; k++) opr_tensor_release(outs[k]), outs[k] = NULL;
        for (int i = 0; a.backward && i < opr_program_num_params(p); i++)
            opr_zero_grad(opr_program_param(p, opr_program_param_name(p, i)));
        const double t0 = now_s(), c0 = cpu_s();
        if (opr_program_run(p, NULL, 0, outs, nout) || opr_device_sync(ctx, o.device)) rc = 3;
        const double t1 = now_s(), c1 = cpu_s();
        if (!rc && a.backward && (opr_program_backward(p, outs) || opr_device_sync(ctx, o.device))) rc = 3;
        if (r >= 0) {
            const double t[6] = {t1 - t0, now_s() - t1, 0, c1 - c0, cpu_s() - c1, 0};
            for (int k = 0; k < 6; k++) times[k * a.repeat + r] = k % 3 == 2 ? t[k - 2] + t[k - 1] : t[k];
            fwd += t[0];
            bwd += t[1];
        }
        /* the first run is the one compared: the references are of one run from the
         * stored state, and a run may write the buffers */
        if (!rc && r == -a.warmup && a.compare) mismatches = compare_all(&a, p, outs, a.json);
    }
    if (rc) {
        fprintf(stderr, "opreg run: %s\n", opr_last_error());
        if (a.json) {
            printf("\"error\": ");
            json_string(opr_last_error());
            printf(", \"ok\": false}\n");
        }
        goto out;
    }
    double med[6]; /* the medians of times' six rows */
    for (int k = 0; k < 6; k++) med[k] = 1e3 * median(times + k * a.repeat, a.repeat);
    const double fwd_median = med[0] / 1e3, bwd_median = med[1] / 1e3;
    if (a.json)
        printf("\"forward_ms\": %.4f, \"backward_ms\": %.4f, \"forward_median_ms\": %.4f, \"backward_median_ms\": %.4f, "
               "\"run_median_ms\": %.4f, \"forward_cpu_median_ms\": %.4f, \"backward_cpu_median_ms\": %.4f, "
               "\"run_cpu_median_ms\": %.4f, ", 1e3 * fwd / a.repeat, 1e3 * bwd / a.repeat, med[0], med[1], med[2], med[3],
               med[4], med[5]);
    else if (a.backward)
        printf("%d run(s) after %d untimed: forward %.3f ms (median %.3f), backward %.3f ms (median %.3f)\n", a.repeat,
               a.warmup, 1e3 * fwd / a.repeat, 1e3 * fwd_median, 1e3 * bwd / a.repeat, 1e3 * bwd_median);
    else
        printf("%d run(s) after %d untimed: forward %.3f ms (median %.3f)\n", a.repeat, a.warmup, 1e3 * fwd / a.repeat,
               1e3 * fwd_median);
    if (mismatches) rc = 1;
    if (a.profile) print_profile(p, base, a.json);
    if (a.json) printf("\"ok\": %s}\n", rc ? "false" : "true");
out:
    for (int k = 0; outs && k < opr_program_num_outputs(p); k++) opr_tensor_release(outs[k]);
    free(outs);
    free(times);
    free(base);
    opr_program_free(p);
    opr_ctx_free(ctx);
    return rc;
}
