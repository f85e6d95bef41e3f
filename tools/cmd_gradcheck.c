/* opreg gradcheck: an op's gradients on its samples against finite differences. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf("usage: opreg gradcheck OP [--backend NAME] [--dtype f64|f32|f16|bf16] [--inputs NAME[,NAME...]]\n"
           "                         [--eps E] [--atol A] [--rtol R] [--plugin PATH]...\n\n"
           "Checks the gradients of OP on every sample of its YAML entry (`samples:`) with\n"
           "opr_gradcheck: central finite differences in f64, on the CPU, are the reference for\n"
           "every derivative candidate (formulas, fused kernels, fast variants, each forced in\n"
           "turn, then the plan chosen by cost) and every requires-grad mask. The sample's\n"
           "tensors are made on the backend (default cpu) in the dtype (default f64). A failure\n"
           "names its culprit: the op's forward kernel, a derivative formula, a fused backward\n"
           "kernel, or the ops a formula calls (right on the CPU, wrong on the backend).\n"
           "--inputs limits the inputs differentiated; the tolerances default by dtype\n"
           "(see opr_gradcheck_opts in opreg.h).\n"
           "Exits 0 when every sample passed, 1 when one failed, 2 on bad usage.\n\n"
           "example: opreg gradcheck mm --backend cuda --dtype f32\n");
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
    for (int i = 2; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "opreg gradcheck: unknown option '%s' (see --help)\n", a); return 2; }
        if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--dtype")) dtype_name = v;
        else if (!strcmp(a, "--inputs")) inputs = v;
        else if (!strcmp(a, "--eps")) { if (!parse_option_number(a, v, &opts.eps)) return 2; }
        else if (!strcmp(a, "--atol")) { if (!parse_option_number(a, v, &opts.atol)) return 2; }
        else if (!strcmp(a, "--rtol")) { if (!parse_option_number(a, v, &opts.rtol)) return 2; }
        else if (strcmp(a, "--plugin")) { fprintf(stderr, "opreg gradcheck: unknown option '%s' (see --help)\n", a); return 2; }
    }
    opr_dtype dt;
    if (opr_dtype_parse(dtype_name, &dt) || !opr_dtype_is_floating(dt)) {
        fprintf(stderr, "opreg gradcheck: --dtype must be a floating dtype, not '%s'\n", dtype_name);
        return 2;
    }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
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
    status = 0;
    for (int s = 0; s < opr_op_sample_count(op); s++) {
        opr_value args[16];
        opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
        int nargs = 0, nowned = 0;
        opr_gradcheck_result res = {.struct_size = sizeof res};
        int rc = opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, args, &nargs, owned, &nowned);
        if (!rc) rc = opr_gradcheck(op, args, nargs, copy ? names : NULL, nnames, &opts, &res);
        for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
        if (rc && rc != OPR_ERR_MISMATCH) {
            printf("  sample %d: could not check: %s\n", s, opr_last_error());
            status = 1;
            continue;
        }
        printf("  sample %d: %d checked, %d passed, %d failed, %d not available%s%s\n", s, res.checked, res.passed,
               res.failed, res.not_available, res.not_available ? ": " : "", res.not_available_list);
        if (res.failed) {
            printf("    FAIL (culprit: %s %s) %s\n", culprit_name(res.culprit), res.culprit_name, res.detail);
            status = 1;
        }
    }
    printf("%s\n", status ? "FAILED" : "passed");
out:
    free(copy);
    opr_ctx_free(ctx);
    return status;
}
