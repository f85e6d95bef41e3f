/* A character-level GPT trained on Shakespeare's sonnets through opreg's public API,
 * the way a PyTorch user writes one: the model (examples/gpt/gpt_model.c) is a stack
 * of functionals (examples/gpt/gpt_layers.c: embedding, layer_norm, gelu, attention,
 * cross_entropy) over ops found with opr_op_find and run with opr_call, the loss goes
 * through opr_backward, and AdamW (examples/gpt/gpt_adamw.c) updates the weights.
 * Prints the loss and tokens/s as it trains, then a seeded sample.
 *
 *   example_gpt [--steps N] [--layers N] [--heads N] [--embd N] ... (--help)
 *
 * `opreg demo --model gpt` runs the same code. */
#include "gpt/gpt_demo.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: example_gpt [OPTIONS]\n\nTrains a character-level GPT and samples from it.\n\n");
            gpt_demo_options_help(stdout);
            return 0;
        }
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) {
        fprintf(stderr, "example_gpt: %s\n", opr_last_error());
        return 1;
    }
    int rc = gpt_demo_run(ctx, argc, argv, "example_gpt");
    if (opr_ctx_free(ctx) && !rc) rc = 1;
    return rc;
}
