/* opreg ops: the registry, one schema per line, the overloads of a name together. */
#include "cli.h"
#include "core_aten.h"

#include <stdio.h>
#include <string.h>

static void print_op(opr_ctx *ctx, const opr_op *op, bool indent, bool kernels, bool jagged, bool batching,
                     int *with_rule, int *looped)
{
    if (jagged && !opr_op_jagged_rule(op)) return;
    printf("%s%s", indent ? "  " : "", opr_op_schema(op));
    if (jagged) printf("    (jagged: %s)", opr_op_jagged_rule(op));
    if (batching) {
        const char *rule = opr_op_batching_rule(op);
        printf("    (batching: %s)", rule);
        if (!strcmp(rule, "loop")) (*looped)++;
        else (*with_rule)++;
    }
    if (opr_op_is_composite(op)) printf(opr_op_grad_candidate_count(op) ? "    (composite, own backward)" : "    (composite)");
    if (kernels) {
        printf("    [");
        for (int t = 0, first = 1; t < opr_device_type_count(ctx); t++)
            if (opr_op_has_kernel(op, t)) { printf(first ? "%s" : " %s", opr_device_type_name(ctx, t)); first = 0; }
        printf("]");
    }
    printf("\n");
}

int cmd_ops(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg ops [--kernels] [--jagged] [--batching] [--core-aten [--all]] [--plugin PATH]...\n"
               "                 [--yaml FILE]...\n\n"
               "Prints the schema of every registered op, one per line. The overloads of a name (max\n"
               "and max.dim, gt and gt.Scalar) are listed together, the later ones indented, where\n"
               "the first was defined. Composite ops (defined in\n"
               "YAML by a `forward:` expression over other ops, no kernel) are marked '(composite)',\n"
               "or '(composite, own backward)' when autograd records them as one node with their own\n"
               "derivative formulas (else it records their parts). With --kernels, each line also\n"
               "lists the device types the op runs on: those with a kernel for it, every type for a\n"
               "host-side view, and for a composite the types on which every op it calls runs.\n"
               "With --jagged, only the ops that take jagged tensors, each with its rule\n"
               "(elementwise, rows, all, or the dims it reduces and what runs over the ragged dim).\n"
               "With --batching, each line also says how the op runs on batched tensors of opr_vmap:\n"
               "its batching rule, or 'loop' (no rule: one call per sample, correct but slower), and\n"
               "a count of both at the end.\n"
               "With --core-aten, instead: each overload of the Core ATen opset (the ops PyTorch's\n"
               "native_functions.yaml tags `core`, the set PyTorch asks a backend to implement),\n"
               "whether it is defined by that name and overload, its derivative formulas ('yes'; 'parts':\n"
               "a composite differentiated through the ops it calls; 'n/d': no floating output carries\n"
               "gradients; 'NONE'), the device types it runs on, and what is wrong with it: no CPU\n"
               "kernel, no formula where it is differentiable, arguments a call by ATen's schema would\n"
               "not bind to (its positional ones in ATen's order, its keyword-only ones by name, any\n"
               "other with a default). Exits 1 when a defined overload has such a problem, or, with\n"
               "--all, when one is missing.\n");
        return 0;
    }
    bool kernels = false, jagged = false, batching = false, core_aten = false, all = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--plugin") || !strcmp(a, "--yaml")) {
            if (i + 1 >= argc) { fprintf(stderr, "opreg ops: %s needs a value (see --help)\n", a); return 2; }
            i++;
        } else if (!strcmp(a, "--core-aten")) core_aten = true;
        else if (!strcmp(a, "--all")) all = true;
        else if (!strcmp(a, "--kernels")) kernels = true;
        else if (!strcmp(a, "--jagged")) jagged = true;
        else if (!strcmp(a, "--batching")) batching = true;
        else { fprintf(stderr, "opreg ops: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (all && !core_aten) { fprintf(stderr, "opreg ops: --all goes with --core-aten (see --help)\n"); return 2; }
    int with_rule = 0, looped = 0;
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    if (core_aten) {
        int bad = core_aten_report(ctx, all);
        opr_ctx_free(ctx);
        return bad ? 1 : 0;
    }
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i), *set[32];
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)strcspn(opr_op_name(op), "."), opr_op_name(op));
        int n = opr_op_overloads(ctx, base, set, 32);
        if (n > 32) n = 32;
        if (n > 1 && set[0] != op) continue; /* listed with the first of its set */
        for (int k = 0; k < (n > 1 ? n : 1); k++)
            print_op(ctx, n > 1 ? set[k] : op, k > 0, kernels, jagged, batching, &with_rule, &looped);
    }
    if (batching) printf("%d op(s) with a batching rule, %d run by the loop\n", with_rule, looped);
    opr_ctx_free(ctx);
    return 0;
}
