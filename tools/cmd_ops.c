/* opreg ops: the registry, one schema per line. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cmd_ops(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg ops [--kernels] [--plugin PATH]...\n\n"
               "Prints the schema of every registered op, one per line. With --kernels, each line\n"
               "also lists the device types that have a kernel (or 'view' for host-side views).\n");
        return 0;
    }
    bool kernels = false;
    for (int i = 1; i < argc; i++) kernels |= !strcmp(argv[i], "--kernels");
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        printf("%s", opr_op_schema(op));
        if (kernels) {
            printf("    [");
            for (int t = 0, first = 1; t < opr_device_type_count(ctx); t++)
                if (opr_op_has_kernel(op, t)) { printf(first ? "%s" : " %s", opr_device_type_name(ctx, t)); first = 0; }
            printf("]");
        }
        printf("\n");
    }
    opr_ctx_free(ctx);
    return 0;
}
