/* A GPT-style character model in the shape of nanoGPT's: learned token and position
 * embeddings, n_layer pre-LayerNorm blocks (LN -> causal multi-head self-attention ->
 * residual; LN -> MLP 4 n_embd with GELU (tanh) -> residual), a final LayerNorm and a
 * linear head without bias.
 *
 * Initial weights are drawn from gpt_rng seeded with the model seed, scaled like
 * PyTorch's default initialisation, in this order (each tensor row-major, each value
 * (2 u - 1) * bound for the next uniform u):
 *   wte [vocab, n_embd], wpe [block_size, n_embd]     bound sqrt(3) (variance 1, as
 *                                                     nn.Embedding's N(0, 1))
 *   per layer: attn_w [3 n_embd, n_embd], attn_b [3 n_embd]   bound 1 / sqrt(n_embd)
 *              proj_w [n_embd, n_embd], proj_b [n_embd]       bound 1 / sqrt(n_embd)
 *              fc_w [4 n_embd, n_embd], fc_b [4 n_embd]       bound 1 / sqrt(n_embd)
 *              fc2_w [n_embd, 4 n_embd], fc2_b [n_embd]       bound 1 / sqrt(4 n_embd)
 *   head_w [vocab, n_embd]                                    bound 1 / sqrt(n_embd)
 * (nn.Linear's bound 1 / sqrt(fan_in) for weight and bias); the LayerNorms start at
 * weight 1, bias 0 and draw nothing. tests/gpt_reference.py builds the same model in
 * PyTorch from the same draws. */
#ifndef OPREG_EXAMPLE_GPT_MODEL_H
#define OPREG_EXAMPLE_GPT_MODEL_H

#include "gpt_layers.h"

typedef struct gpt_config {
    int n_layer, n_head, n_embd; /* n_embd a multiple of n_head */
    int block_size;              /* longest context */
    int vocab_size;
    double dropout;              /* after the embeddings, the attention projection and the MLP; 0: none.
                                  * The masks come from the context's generator (opr_manual_seed) */
    opr_dtype dtype;             /* f32 or f64 */
} gpt_config;

/* Parameters of one block, in the order of params[] (after wte, wpe). */
enum gpt_block_param {
    GPT_LN1_W, GPT_LN1_B, GPT_ATTN_W, GPT_ATTN_B, GPT_PROJ_W, GPT_PROJ_B,
    GPT_LN2_W, GPT_LN2_B, GPT_FC_W, GPT_FC_B, GPT_FC2_W, GPT_FC2_B, GPT_BLOCK_PARAMS
};

typedef struct gpt_model {
    gpt_config cfg;
    gpt_ops ops;
    /* wte, wpe, the blocks' GPT_BLOCK_PARAMS each, lnf_w, lnf_b, head_w: leaves that
     * require grad, in the order gpt_model_param_name names them */
    opr_tensor **params;
    int n_params;
} gpt_model;

/* Builds the model on dev with the initial weights described above. NULL with
 * gpt_error() on an invalid config or a failure. */
gpt_model *gpt_model_new(opr_ctx *ctx, const gpt_config *cfg, uint64_t seed, opr_device dev);
/* Releases the parameters and frees m (NULL allowed). */
void gpt_model_free(gpt_model *m);

/* "wte", "h.0.attn_w", ..., "head_w" (a static buffer per thread, valid until the next call). */
const char *gpt_model_param_name(const gpt_model *m, int i);
/* Number of scalar parameters. */
int64_t gpt_model_numel(const gpt_model *m);

/* Forward pass: idx i64 [B, T] (T <= block_size) -> logits [B, T, vocab] into *logits
 * and, when targets (i64 [B, T]) is given, the mean cross-entropy (a 0-d tensor) into
 * *loss. Either pointer may be NULL (not wanted). train: dropout on. OPR_OK, or an
 * error with gpt_error(). */
opr_status gpt_model_forward(gpt_model *m, opr_tensor *idx, opr_tensor *targets, bool train, opr_tensor **loss,
                             opr_tensor **logits);

#endif
