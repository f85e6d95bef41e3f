/* Training of the ResNet example: SGD with momentum through the registry's sgd_step_
 * (PyTorch's torch.optim.SGD, step for step, on the parameters' device), batches of the shapes
 * data set, the training loop, test accuracy, and what one step's graph saved per op. */
#ifndef OPREG_EXAMPLE_RESNET_TRAIN_H
#define OPREG_EXAMPLE_RESNET_TRAIN_H

#include "resnet_model.h"

#include <stdio.h>

/* torch.optim.SGD(params, lr, momentum, weight_decay) (dampening 0, nesterov off), in
 * the parameters' dtype. */
typedef struct resnet_sgd {
    double lr, momentum, weight_decay;
    int n;
    opr_tensor **buf; /* momentum buffers, per parameter, beside it; NULL until its first step */
} resnet_sgd;

/* OPR_ERR_NOMEM with resnet_error(). */
opr_status resnet_sgd_init(resnet_sgd *opt, const resnet_model *m, double lr, double momentum, double weight_decay);
/* One step over every parameter that has a gradient, then drops the gradients
 * (optimizer.step(); optimizer.zero_grad(set_to_none=True)). */
opr_status resnet_sgd_step(resnet_sgd *opt, resnet_model *m);
void resnet_sgd_free(resnet_sgd *opt);

/* Images first .. first + n - 1 of the data set `seed` as tensors of the model's dtype
 * on dev: *x [n, 3, 32, 32], *y i64 [n]. */
opr_status resnet_batch(opr_ctx *ctx, opr_dtype dtype, opr_device dev, uint64_t seed, int64_t first, int n, opr_tensor **x,
                        opr_tensor **y);

typedef struct resnet_train_opts {
    int steps, batch;
    double lr, momentum, weight_decay;
    bool decay;          /* lr falls linearly from lr to 0 over the steps */
    uint64_t data_seed;  /* training images: set data_seed, drawn in order */
    int log_every;       /* print the loss and images/s every N steps (and the first); 0: silent */
    FILE *log;           /* where; NULL: stdout */
    double *losses;      /* NULL, or room for `steps` losses */
    /* called once, on the first step's graph before its backward (NULL: not) */
    void (*walk)(void *ud, const opr_node_info *info);
    void *walk_ud;
} resnet_train_opts;

/* Trains m (batch norm in training mode). *images_per_s (may be NULL): the rate over
 * the run. OPR_OK or an error with resnet_error(). */
opr_status resnet_train(resnet_model *m, const resnet_train_opts *o, double *images_per_s);

/* The share of images first .. first + n - 1 of set `seed` that m (in eval mode, grad
 * mode off) classifies right, in *accuracy. */
opr_status resnet_accuracy(resnet_model *m, uint64_t seed, int64_t first, int n, double *accuracy);

#endif
