/* Training and sampling of the GPT example: AdamW through the registry's adamw_step_
 * (PyTorch's torch.optim.AdamW, step for step, on the parameters' device), the training
 * loop and seeded sampling. */
#ifndef OPREG_EXAMPLE_GPT_TRAIN_H
#define OPREG_EXAMPLE_GPT_TRAIN_H

#include "gpt_data.h"
#include "gpt_model.h"

#include <opreg/dist.h>

#include <stdio.h>

/* torch.optim.AdamW(params, lr, betas, eps, weight_decay) with amsgrad off, in the
 * parameters' dtype. */
typedef struct gpt_adamw {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    int n;            /* parameters */
    opr_tensor **m, **v; /* first and second moments, per parameter, on its device in its dtype */
} gpt_adamw;

/* Moments start at zero for the model's parameters. OPR_ERR_NOMEM with gpt_error(). */
opr_status gpt_adamw_init(gpt_adamw *opt, const gpt_model *m, double lr, double weight_decay);
/* One step over every parameter that has a gradient, then drops the gradients
 * (optimizer.step(); optimizer.zero_grad(set_to_none=True)). */
opr_status gpt_adamw_step(gpt_adamw *opt, gpt_model *m);
/* Frees the moments (safe on a zeroed or failed gpt_adamw). */
void gpt_adamw_free(gpt_adamw *opt);

typedef struct gpt_train_opts {
    int steps, batch;
    double lr, weight_decay;
    uint64_t seed;   /* the batches come from gpt_rng seeded with seed + 1 */
    int log_every;   /* print the loss and tokens/s every N steps (and the first); 0: silent */
    FILE *log;       /* where; NULL: stdout */
    double *losses;  /* NULL, or room for `steps` losses, one per step */
    /* data parallel over the world group (NULL: one process; rank and ranks are the
     * world's): every member draws the same batch and runs its rows
     * [rank * batch / ranks, ...) through opr_ddp_backward; the losses are the group's
     * means, the rate counts the whole batch */
    opr_ddp *ddp;
    int rank, ranks;
    /* NULL, or room for `steps`: each step's wall time, and (with ddp) the time of the
     * members' step check inside its opr_ddp_backward (from the event before
     * OPR_DDP_STEP_CHECKED, the last bucket in, to it), both in microseconds */
    double *step_us, *check_us;
} gpt_train_opts;

/* Trains m on text for o->steps steps of o->batch sequences of block_size tokens:
 * forward, opr_backward of the mean cross-entropy, AdamW. *tokens_per_s (may be NULL)
 * gets the rate over the whole run. OPR_OK or an error with gpt_error(). */
opr_status gpt_train(gpt_model *m, const gpt_text *text, const gpt_train_opts *o, double *tokens_per_s);

/* The median of v[0..n), n >= 1 (sorts v): of timings, per step or per run. */
double gpt_median(double *v, int n);

/* Generates n_chars characters into out (n_chars + 1 bytes, NUL-terminated), starting
 * after a newline (or the first token when the text has none), each drawn from the
 * softmax of the last logits / temperature with gpt_rng seeded with seed + 2. Runs
 * with grad mode off. */
opr_status gpt_sample(gpt_model *m, const gpt_text *text, uint64_t seed, int n_chars, double temperature, char *out);

#endif
