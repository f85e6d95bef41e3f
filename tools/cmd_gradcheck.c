/* opreg gradcheck: an op's gradients on its samples against finite differences. Each
 * sample runs in a supervised worker (check_supervisor.h), so a kernel that crashes or
 * hangs costs its sample, not the report. */
#include "check_supervisor.h"
#include "cli.h"
#include "plugin_probe.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf("usage: opreg gradcheck OP [--backend NAME] [--dtype f64|f32|f16|bf16] [--inputs NAME[,NAME...]]\n"
           "                         [--eps E] [--atol A] [--rtol R] [--timeout S] [--no-fork]\n"
           "                         [--allow-unchecked] [--plugin PATH]... [--yaml FILE]...\n\n"
           "Checks the gradients of OP on every sample of its YAML entry (`samples:`) with\n"
           "opr_gradcheck: central finite differences in f64, on the CPU, are the reference for\n"
           "every derivative candidate (formulas, fused kernels, fast variants, each forced in\n"
           "turn, then the plan chosen by cost) and every requires-grad mask. The sample's\n"
           "tensors are made on the backend (default cpu) in the dtype (default f64). A failure\n"
           "names its culprit: the op's forward kernel, a derivative formula, a fused backward\n"
           "kernel, or the ops a formula calls (right on the CPU, wrong on the backend).\n"
           "--inputs limits the inputs differentiated; the tolerances default by dtype\n"
           "(see opr_gradcheck_opts in opreg.h). Each sample runs in a worker process: a crash\n"
           "or a sample running past --timeout S seconds (default %d) is reported as such and\n"
           "the others still run; --no-fork runs them in this process (for a debugger).\n"
           "A sample where nothing could be compared (every candidate not available on the\n"
           "backend) is NOT CHECKED.\n"
           "Exits 0 when every sample passed, 1 when one failed, crashed or timed out, or when\n"
           "nothing at all was checked (unless --allow-unchecked), 2 on bad usage.\n\n"
           "example: opreg gradcheck mm --backend cuda --dtype f32\n", CHECK_TIMEOUT_DEFAULT_S);
}

static const char *culprit_name(opr_gradcheck_culprit c)
{
    switch (c) {
    case OPR_GC_FORWARD: return "forward kernel";
    case OPR_GC_FORMULA: return "derivative formula";
    case OPR_GC_KERNEL: return "fused backward kernel";
    case OPR_GC_HELPER: return "an op the formula calls";
    case OPR_GC_ERROR: return "error";
    default: return "none";
    }
}

/* What the workers share: the op and options, and in the parent the tallies. */
typedef struct gc_run {
    opr_ctx *ctx;
    const opr_op *op;
    opr_dtype dt;
    opr_device dev;
    const opr_gradcheck_opts *opts;
    const char *const *names;
    int nnames;
    int checked, failed; /* parent: samples that compared something / that failed */
} gc_run;

/* Worker: sample s, its result as the lines to print (message) and a verdict. */
static void gc_sample(int s, void *data)
{
    gc_run *run = data;
    check_record r = {.kind = CR_RESULT, .unit = s, .sample = s, .dtype = (int)run->dt, .verdict = CV_PASS};
    opr_value args[16];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    opr_gradcheck_result res = {.struct_size = sizeof res};
    check_phase("%s backward, sample %d, %s", opr_op_name(run->op), s, opr_dtype_name(run->dt));
    size_t slot_len;
    char *slot = check_kernel_slot(&slot_len);
    opr_kernel_trace_set(run->ctx, slot, slot_len);
    int rc = opr_op_sample_args(run->op, s, run->dt, run->dev, (uint64_t)s + 1, args, &nargs, owned, &nowned);
    if (!rc) rc = opr_gradcheck(run->op, args, nargs, run->names, run->nnames, run->opts, &res);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    if (rc && rc != OPR_ERR_MISMATCH) {
        r.verdict = CV_FAIL;
        snprintf(r.message, sizeof r.message, "  sample %d: could not check: %.1900s", s, opr_last_error());
    } else {
        int n = snprintf(r.message, sizeof r.message, "  sample %d: %d checked, %d passed, %d failed, %d not available%s%.500s",
                         s, res.checked, res.passed, res.failed, res.not_available, res.not_available ? ": " : "",
                         res.not_available_list);
        if (res.failed) {
            r.verdict = CV_FAIL;
            snprintf(r.message + n, sizeof r.message - (size_t)n, "\n    FAIL (culprit: %s %.64s) %.1000s",
                     culprit_name(res.culprit), res.culprit_name, res.detail);
        } else if (!res.checked) {
            r.verdict = CV_NOT_CHECKED;
            if (res.not_available_why[0])
                snprintf(r.message + n, sizeof r.message - (size_t)n, "\n    NOT CHECKED: %.900s", res.not_available_why);
        }
    }
    check_emit(&r);
}

static void gc_take(const check_record *r, void *data)
{
    gc_run *run = data;
    if (r->verdict == CV_CRASHED || r->verdict == CV_TIMEOUT)
        printf("  sample %d: %s\n", r->unit, r->message);
    else
        printf("%s\n", r->message);
    if (r->verdict == CV_PASS) run->checked++;
    if (r->verdict == CV_FAIL || r->verdict == CV_CRASHED || r->verdict == CV_TIMEOUT) run->failed++;
    fflush(stdout);
}

static void gc_describe(int s, check_record *r, void *data)
{
    (void)data;
    r->sample = s;
}

/* The value of --eps, --atol or --rtol: a whole finite number, not negative (0: the
 * default); false, with a message, for anything else ("abc", "1e-3x"). */
static bool parse_option_number(const char *opt, const char *v, double *out)
{
    char *end;
    errno = 0;
    const double d = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(d) || d < 0) {
        fprintf(stderr, "opreg gradcheck: %s takes a finite number >= 0, not '%s'\n", opt, v);
        return false;
    }
    *out = d;
    return true;
}

int cmd_gradcheck(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { usage(); return 0; }
    if (argc < 2 || argv[1][0] == '-') { usage(); return 2; }
    const char *op_name = argv[1], *backend = "cpu", *dtype_name = "f64", *inputs = NULL;
    opr_gradcheck_opts opts = {.struct_size = sizeof opts};
    bool allow_unchecked = false;
    check_sup sup = {.timeout_s = CHECK_TIMEOUT_DEFAULT_S};
    for (int i = 2; i < argc; i += 2) { /* every option but the flags takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-fork") || !strcmp(a, "--allow-unchecked")) {
            if (a[2] == 'n') sup.no_fork = true;
            else allow_unchecked = true;
            i--;
            continue;
        }
        if (!v) { fprintf(stderr, "opreg gradcheck: unknown option '%s' (see --help)\n", a); return 2; }
        if (!strcmp(a, "--timeout")) {
            if (!parse_option_number(a, v, &sup.timeout_s)) return 2;
            continue;
        }
        if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--dtype")) dtype_name = v;
        else if (!strcmp(a, "--inputs")) inputs = v;
        else if (!strcmp(a, "--eps")) { if (!parse_option_number(a, v, &opts.eps)) return 2; }
        else if (!strcmp(a, "--atol")) { if (!parse_option_number(a, v, &opts.atol)) return 2; }
        else if (!strcmp(a, "--rtol")) { if (!parse_option_number(a, v, &opts.rtol)) return 2; }
        else if (strcmp(a, "--plugin") && strcmp(a, "--yaml")) { fprintf(stderr, "opreg gradcheck: unknown option '%s' (see --help)\n", a); return 2; }
    }
    opr_dtype dt;
    if (opr_dtype_parse(dtype_name, &dt) || !opr_dtype_is_floating(dt)) {
        fprintf(stderr, "opreg gradcheck: --dtype must be a floating dtype, not '%s'\n", dtype_name);
        return 2;
    }
    opr_ctx *ctx = cli_ctx_new_isolated(argc, argv, PROBE_TIMEOUT_DEFAULT);
    if (!ctx) return 1;
    opr_cpu_fallback_set(ctx, false); /* the backend's own kernels, not the cpu's */
    int status = 2;
    opr_device dev;
    const opr_op *op = opr_op_find(ctx, op_name);
    char *copy = inputs ? strdup(inputs) : NULL;
    const char *names[16];
    int nnames = 0;
    for (char *save = NULL, *t = copy ? strtok_r(copy, ",", &save) : NULL; t && nnames < 16; t = strtok_r(NULL, ",", &save))
        names[nnames++] = t;
    if (!op) { fprintf(stderr, "opreg gradcheck: no op named '%s' (see opreg ops)\n", op_name); goto out; }
    if (opr_device_parse(ctx, backend, &dev)) { fprintf(stderr, "opreg gradcheck: %s (see opreg info)\n", opr_last_error()); goto out; }
    if (opr_op_grad_candidate_count(op) <= 0) { fprintf(stderr, "opreg gradcheck: %s has no derivative formulas\n", op_name); goto out; }
    if (!opr_op_supports_dtype(op, dt)) { fprintf(stderr, "opreg gradcheck: %s does not take dtype %s\n", op_name, dtype_name); goto out; }
    if (!opr_op_sample_count(op)) { fprintf(stderr, "opreg gradcheck: %s has no samples in its YAML entry\n", op_name); goto out; }
    printf("gradcheck %s on %s %s: %d sample(s), %d candidate(s):", op_name, backend, opr_dtype_name(dt),
           opr_op_sample_count(op), opr_op_grad_candidate_count(op));
    for (int c = 0; c < opr_op_grad_candidate_count(op); c++) printf(" [%s]", opr_op_grad_candidate_label(op, c));
    printf("\n");
    gc_run run = {.ctx = ctx, .op = op, .dt = dt, .dev = dev, .opts = &opts, .names = copy ? names : NULL, .nnames = nnames};
    sup.nunits = opr_op_sample_count(op);
    sup.run_unit = gc_sample;
    sup.take = gc_take;
    sup.describe_unit = gc_describe;
    sup.data = &run;
    if (check_supervise(&sup)) { perror("opreg gradcheck: starting a worker"); status = 1; goto out; }
    status = run.failed ? 1 : 0;
    if (!run.checked && !run.failed) {
        printf("NOT CHECKED: no sample of %s could be compared on %s%s\n", opr_op_name(op), backend,
               allow_unchecked ? " (allowed)" : "");
        if (!allow_unchecked) status = 1;
    }
    printf("%s\n", run.failed ? "FAILED" : status ? "NOT CHECKED" : "passed");
out:
    free(copy);
    opr_ctx_free(ctx);
    return status;
}
