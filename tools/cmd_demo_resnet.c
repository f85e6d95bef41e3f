/* opreg demo --model resnet: the ResNet of examples/resnet.c (its code in
 * examples/resnet/, shared with the example) run from the CLI. */
#include "cli.h"

#include "resnet/resnet_demo.h"

int cmd_demo_resnet(int argc, char **argv)
{
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    int rc = resnet_demo_run(ctx, argc, argv, "opreg demo");
    if (opr_ctx_free(ctx) && !rc) rc = 1;
    return rc;
}
