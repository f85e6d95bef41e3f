/* A ResNet of BasicBlocks written the way torchvision's ResNet class is (He et al.,
 * "Deep residual learning for image recognition", 2016): a 7x7 stride-2 convolution,
 * batch norm, ReLU and a 3x3 stride-2 max pool; four stages of `blocks[s]` BasicBlocks
 * (3x3 convolution, batch norm, ReLU, 3x3 convolution, batch norm, plus the input, or its
 * 1x1 strided convolution and batch norm where the shape changes, then ReLU) of
 * width << s channels, the first block of stages 1-3 with stride 2; an adaptive average
 * pool to 1x1 and a linear head. With width 64 and blocks {2, 2, 2, 2} it is
 * torchvision's resnet18; tests/resnet_reference.py loads the same weights into
 * torchvision's class.
 *
 * The parameters and buffers are named as torchvision's state_dict names them
 * ("conv1.weight", "layer2.0.downsample.1.running_var", "fc.bias"). Initial weights are
 * drawn from a SplitMix64 stream (examples/gpt/gpt_rng.h) seeded with the model seed:
 * convolutions uniform with the variance of torchvision's kaiming_normal_(fan_out,
 * relu), 2 / (C_out k k); the head as nn.Linear's default, uniform in +-1 / sqrt(fan_in);
 * batch norm weight 1, bias 0, running mean 0, running variance 1. Everything here uses
 * only the public API (opreg/opreg.h). */
#ifndef OPREG_EXAMPLE_RESNET_MODEL_H
#define OPREG_EXAMPLE_RESNET_MODEL_H

#include <opreg/opreg.h>

#include <stdbool.h>

typedef struct resnet_config {
    int blocks[4];    /* BasicBlocks per stage (each >= 1) */
    int width;        /* channels of the stem and stage 0; stage s has width << s */
    int num_classes;
    int in_channels;  /* 3 for RGB images */
    double bn_momentum, bn_eps; /* torchvision: 0.1, 1e-5 */
    opr_dtype dtype;  /* f32 or f64 */
} resnet_config;

/* The ops the model calls, looked up once by name. */
typedef struct resnet_ops {
    const opr_op *conv2d, *batch_norm, *relu, *max_pool2d, *add, *adaptive_avg_pool2d, *reshape, *linear, *cross_entropy;
} resnet_ops;

typedef struct resnet_model {
    resnet_config cfg;
    resnet_ops ops;
    opr_tensor **params;   /* leaves that require grad, in state_dict order */
    char **param_names;
    int n_params;
    opr_tensor **buffers;  /* the batch norms' running mean and variance */
    char **buffer_names;
    int n_buffers;
} resnet_model;

/* Builds the model on dev. NULL with the reason in resnet_error() on a bad config or a
 * failure. */
resnet_model *resnet_model_new(opr_ctx *ctx, const resnet_config *cfg, uint64_t seed, opr_device dev);
/* Releases every tensor and frees m (NULL allowed). */
void resnet_model_free(resnet_model *m);
/* The parameter (or, with buffers true, buffer) named name, NULL when there is none. */
opr_tensor *resnet_model_tensor(const resnet_model *m, const char *name, bool buffers);

/* Forward pass of images x [N, in_channels, H, W] (H, W >= 32 keep every stage's map
 * at least 1x1) to logits [N, num_classes] in *logits and, with targets (i64 [N]), the
 * mean cross-entropy (0-d) in *loss (either pointer may be NULL). train: batch norm
 * uses the batch's statistics and updates the running ones (model.train()); otherwise
 * the running ones (model.eval()). OPR_OK or an error with resnet_error(). */
opr_status resnet_model_forward(resnet_model *m, opr_tensor *x, opr_tensor *targets, bool train, opr_tensor **loss,
                                opr_tensor **logits);

/* The bytes a training step's graph saves when only the head (fc.weight, fc.bias)
 * requires grad, for a batch of n: what opr_plan_saved_bytes gives for its two calls,
 * linear(features, fc.weight, fc.bias) with weight and bias requiring grad and
 * cross_entropy(logits, targets) with the logits requiring it. Nothing of the backbone
 * is recorded then, so this is the whole graph's. OPR_OK or an error with
 * resnet_error(). */
opr_status resnet_head_saved_bytes(const resnet_model *m, int64_t n, uint64_t *bytes);

/* The message of this thread's last failure in the example's code, "" when none. */
const char *resnet_error(void);

#endif
