/* opreg ops: the registry, one schema per line, the overloads of a name together. */
#include "cli.h"

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
        printf("usage: opreg ops [--kernels] [--jagged] [--batching] [--plugin PATH]... [--yaml FILE]...\n\n"
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
               "a count of both at the end.\n");
        return 0;
    }
    bool kernels = false, jagged = false, batching = false;
    for (int i = 1; i < argc; i++) {
        kernels |= !strcmp(argv[i], "--kernels");
        jagged |= !strcmp(argv[i], "--jagged");
        batching |= !strcmp(argv[i], "--batching");
    }
    int with_rule = 0, looped = 0;
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
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
