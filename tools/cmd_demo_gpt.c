/* opreg demo --model gpt: the character-level GPT of examples/gpt.c (its code in
 * examples/gpt/, shared with the example) run from the CLI. */
#include "cli.h"

#include "gpt/gpt_demo.h"

int cmd_demo_gpt(int argc, char **argv)
{
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    int rc = gpt_demo_run(ctx, argc, argv, "opreg demo");
    if (opr_ctx_free(ctx) && !rc) rc = 1;
    return rc;
}
