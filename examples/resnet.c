/* A ResNet trained on generated images through opreg's public API, the way a PyTorch
 * user writes one with torchvision's ResNet class: the model (examples/resnet/
 * resnet_model.c) is conv2d, batch_norm, relu, max_pool2d, adaptive_avg_pool2d and
 * linear found with opr_op_find and run with opr_call, the cross-entropy goes through
 * opr_backward, and SGD with momentum (examples/resnet/resnet_train.c) updates the
 * weights. Prints the loss and images/s as it trains, what the first step saved per op,
 * and the accuracy on held-out images.
 *
 *   example_resnet [--steps N] [--width N] [--blocks N] ... (--help)
 *
 * `opreg demo --model resnet` runs the same code. */
#include "resnet/resnet_demo.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: example_resnet [OPTIONS]\n\nTrains a ResNet on generated images of four shapes.\n\n");
            resnet_demo_options_help(stdout);
            return 0;
        }
    opr_ctx *ctx = opr_ctx_new(NULL);
    if (!ctx) {
        fprintf(stderr, "example_resnet: %s\n", opr_last_error());
        return 1;
    }
    int rc = resnet_demo_run(ctx, argc, argv, "example_resnet");
    if (opr_ctx_free(ctx) && !rc) rc = 1;
    return rc;
}
