/* opreg plan: how the registry would compute an op's gradients for given shapes. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf("usage: opreg plan OP --requires-grad NAME[,NAME...] [--shape NAME=AxBx...]...\n"
           "                   [--arg NAME=VALUE]... [--dtype f32|f64] [--backend NAME] [--fast]\n"
           "                   [--plugin PATH]... [--yaml FILE]...\n\n"
           "Prints every candidate set that computes the gradients of the named inputs of OP, with\n"
           "its estimated cost, launches and the tensors it saves (and their bytes), then the chosen\n"
           "set and why it won. Every tensor argument needs a --shape; other arguments take their\n"
           "defaults unless given with --arg (ints, floats, true/false, or lists like 0,1 or 1.5,2;\n"
           "None for an optional one); --shape NAME=none passes None for an optional tensor (Tensor?).\n"
           "--backend NAME plans on that device, with its plugins' kernels: where a kernel gives\n"
           "its own estimate (cost_ns, ABI 2.2) it replaces the registry's (\"the estimate of K\n"
           "(plugin P)\"), and a fused kernel whose supports refuses the arguments is listed as\n"
           "\"not a candidate\", with its reason.\n"
           "--fast plans for a node recorded in fast mode (special gradients off,\n"
           "opr_special_grads_set): the op's fast variants, marked [fast ...], replace the normal\n"
           "formulas of the inputs they cover.\n"
           "For a composite op (a `forward:` expression over other ops) it first prints the\n"
           "forward; with derivative entries the op is one node and its plan follows as above,\n"
           "without them autograd records the ops of the forward, each planned on its own; when\n"
           "the forward is one call passing the op's arguments on, that call's plan follows.\n"
           "For an op with an alternative (`alternative:`, e.g. cdist and cdist_mm) it first says\n"
           "which of the two the call runs, with both estimates, and plans that one.\n"
           "The last line says how the op runs on batched tensors of opr_vmap (its batching rule,\n"
           "or a loop over the samples).\n\n"
           "example: opreg plan mm --requires-grad self --shape self=64x512 --shape mat2=512x512\n");
}

/* "1.7,2": a float[] argument's items; -1 when malformed. */
static int parse_floats(const char *s, double *out)
{
    int n = 0;
    for (const char *p = s; *p && n < OPR_MAX_DIMS;) {
        char *end;
        out[n++] = strtod(p, &end);
        if (end == p) return -1;
        if (!*end) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
    return *s ? -1 : 0;
}

static int parse_dims(const char *s, int64_t *dims)
{
    int n = 0;
    if (!*s) return 0; /* a 0-d tensor */
    for (const char *p = s; n < OPR_MAX_DIMS;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0) return -1;
        dims[n++] = v;
        if (!*end) return n;
        if (*end != 'x' && *end != ',') return -1;
        p = end + 1;
    }
    return -1;
}

static const char *value_of(int argc, char **argv, const char *flag, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag) && !strncmp(argv[i + 1], name, n) && argv[i + 1][n] == '=') return argv[i + 1] + n + 1;
    return NULL;
}

int cmd_plan(int argc, char **argv)
{
    if (cli_wants_help(argc, argv) || argc < 2 || argv[1][0] == '-') {
        usage();
        return argc < 2 || (argc >= 2 && argv[1][0] == '-' && !cli_wants_help(argc, argv)) ? 2 : 0;
    }
    const char *op_name = argv[1], *rg = NULL, *backend = "cpu", *dtype_name = "f32";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--fast")) continue;
        bool takes_value = !strcmp(a, "--requires-grad") || !strcmp(a, "--backend") || !strcmp(a, "--dtype") ||
                           !strcmp(a, "--shape") || !strcmp(a, "--arg") || !strcmp(a, "--plugin") || !strcmp(a, "--yaml");
        if (!takes_value) { fprintf(stderr, "opreg plan: unknown option '%s' (see --help)\n", a); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "opreg plan: %s needs a value (see --help)\n", a); return 2; }
        if (!strcmp(a, "--requires-grad")) rg = argv[i + 1];
        else if (!strcmp(a, "--backend")) backend = argv[i + 1];
        else if (!strcmp(a, "--dtype")) dtype_name = argv[i + 1];
        i++;
    }
    if (!rg) { fprintf(stderr, "opreg plan: --requires-grad is required (see --help)\n"); return 2; }
    opr_dtype dt;
    if (opr_dtype_parse(dtype_name, &dt)) { fprintf(stderr, "opreg plan: %s\n", opr_last_error()); return 2; }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    int status = 1;
    opr_device dev;
    const opr_op *op = opr_op_find(ctx, op_name);
    opr_value args[16];
    opr_tensor *owned[16] = {NULL};
    int64_t lists[16][OPR_MAX_DIMS];
    double flists[16][OPR_MAX_DIMS];
    char *names[16];
    int nnames = 0;
    char *rg_copy = strdup(rg);
    if (!op || opr_device_parse(ctx, backend, &dev)) { fprintf(stderr, "opreg plan: %s\n", opr_last_error()); goto out; }
    for (char *save = NULL, *t = strtok_r(rg_copy, ",", &save); t && nnames < 16; t = strtok_r(NULL, ",", &save))
        names[nnames++] = t;
    int nargs = opr_op_num_args(op);
    printf("%s on %s, gradients for %s\n", opr_op_schema(op), backend, rg);
    for (int i = 0; i < nargs && i < 16; i++) {
        const char *name = opr_op_arg_name(op, i);
        int kind = opr_op_arg_kind(op, i);
        const char *shape = value_of(argc, argv, "--shape", name), *val = value_of(argc, argv, "--arg", name);
        if (kind == OPR_V_TENSOR && shape && !strcmp(shape, "none")) { /* an optional tensor not given */
            args[i] = opr_v_none();
            printf("  %-8s None\n", name);
            continue;
        }
        if (kind == OPR_V_TENSOR) {
            int n = shape ? parse_dims(shape, lists[i]) : -1;
            if (n < 0) {
                fprintf(stderr, "opreg plan: give the shape of tensor argument '%s' with --shape %s=AxB\n", name, name);
                goto out;
            }
            if (!(owned[i] = opr_tensor_new(ctx, dt, n, lists[i], dev))) { fprintf(stderr, "opreg plan: %s\n", opr_last_error()); goto out; }
            args[i] = opr_v_tensor(owned[i]);
            char d[96];
            printf("  %-8s %s\n", name, opr_tensor_describe(owned[i], d, sizeof d));
            continue;
        }
        if (!val) { nargs = i; break; } /* this and the rest take their defaults */
        if (!strcmp(val, "None") && opr_op_arg_optional(op, i)) args[i] = opr_v_none(); /* upsample's output_size=None */
        else if (kind == OPR_V_INT) args[i] = opr_v_int(atoll(val));
        else if (kind == OPR_V_DOUBLE) args[i] = opr_v_double(atof(val));
        else if (kind == OPR_V_BOOL) args[i] = opr_v_bool(!strcmp(val, "true") || !strcmp(val, "1"));
        else if (kind == OPR_V_INT_LIST) args[i] = opr_v_ints(lists[i], parse_dims(val, lists[i]) < 0 ? 0 : parse_dims(val, lists[i]));
        else if (kind == OPR_V_DOUBLE_LIST) {
            const int n = parse_floats(val, flists[i]);
            if (n < 0) { fprintf(stderr, "opreg plan: '%s' is not a list of numbers such as 1.7,2\n", val); goto out; }
            args[i] = opr_v_doubles(flists[i], n);
        }
        else args[i] = opr_v_string(val);
    }
    if (opr_op_alternative(op)) {
        double kernel_ns, alt_ns;
        const opr_op *chosen = opr_op_choose(op, args, nargs, &kernel_ns, &alt_ns);
        if (!chosen) { fprintf(stderr, "opreg plan: %s\n", opr_last_error()); goto out; }
        printf("alternative %s: estimated %.1f us, against %.1f us for the kernel of %s: this call runs %s%s\n",
               opr_op_alternative(op), alt_ns / 1e3, kernel_ns / 1e3, op_name, opr_op_name(chosen),
               chosen == op ? "" : " (its plan follows)");
        op = chosen;
    }
    bool fast = false;
    for (int i = 2; i < argc; i++) fast |= !strcmp(argv[i], "--fast");
    if (fast) opr_special_grads_set(false);
    char *buf = malloc(1 << 16);
    if (buf && !opr_plan_explain(op, args, nargs, (const char *const *)names, nnames, buf, 1 << 16)) {
        printf("%s", buf);
        const char *rule = opr_op_batching_rule(op);
        printf("under opr_vmap: %s\n", opr_op_returns_list(op)  ? "refused (it returns a Tensor[])"
                                        : strcmp(rule, "loop")        ? rule
                                        : opr_op_is_composite(op) ? "no batching rule: its forward runs on the batch"
                                                                  : "no batching rule: one call per sample (correct, slower)");
        status = 0;
    } else {
        fprintf(stderr, "opreg plan: %s\n", opr_last_error());
    }
    free(buf);
out:
    for (int i = 0; i < 16; i++) opr_tensor_release(owned[i]);
    free(rg_copy);
    opr_ctx_free(ctx);
    return status;
}
