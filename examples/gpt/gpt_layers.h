/* The layers of the GPT example, one function per PyTorch functional, with PyTorch's
 * arguments and semantics, each a call of the registry's op of the same meaning
 * (registry/ops/nn.yaml, nn_norm.yaml, nn_loss_attention.yaml), so that the model code
 * reads like its PyTorch original. All return a new reference, or NULL with the reason
 * in gpt_error() (a NULL tensor argument: an earlier failure, passed on; otherwise the
 * op's own message, naming the op and the argument). */
#ifndef OPREG_EXAMPLE_GPT_LAYERS_H
#define OPREG_EXAMPLE_GPT_LAYERS_H

#include "gpt_ops.h"

#include <stdbool.h>

/* F.embedding(indices, weight, padding_idx): the rows of weight [num, D] picked by
 * indices (i64, any shape), [*indices.shape, D]. padding_idx >= 0 names a row whose
 * gradient stays 0; a negative one means none (aten's convention: F.embedding's
 * padding_idx=None). The op `embedding`. */
opr_tensor *model_embedding(const gpt_ops *ops, opr_tensor *weight, opr_tensor *indices, int64_t padding_idx);

/* F.layer_norm(input, normalized_shape, weight, bias, eps): over the last n dims
 * (which must equal normalized_shape[0..n)), (x - mean) / sqrt(var + eps) with the
 * biased variance, then * weight + bias (each may be NULL: none). The op `layer_norm`. */
opr_tensor *model_layer_norm(const gpt_ops *ops, opr_tensor *input, const int64_t *normalized_shape, int n,
                             opr_tensor *weight, opr_tensor *bias, double eps);

/* F.gelu(x, approximate): x * Phi(x) for "none", the tanh approximation for "tanh".
 * The op `gelu`. */
opr_tensor *model_gelu(const gpt_ops *ops, opr_tensor *x, const char *approximate);

/* F.dropout(x, p, training): in training, each element zeroed with probability p and
 * the rest scaled by 1 / (1 - p); otherwise (or p == 0) x itself. The mask comes from
 * the context's generator (opr_manual_seed seeds it): each training call draws anew.
 * The op `dropout`. */
opr_tensor *model_dropout(const gpt_ops *ops, opr_tensor *x, double p, bool train);

/* F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal)
 * (PyTorch 2.0's): softmax(q k^T / sqrt(E) + attn_mask) v, q [..., L, E], k [..., S, E],
 * v [..., S, Ev]. attn_mask: NULL or a float mask broadcasting to [..., L, S], added to
 * the scores (-inf removes a key); is_causal removes key j from query i where j > i.
 * dropout_p must be 0 (the op drops no attention weights). The op
 * `scaled_dot_product_attention`. */
opr_tensor *model_attention(const gpt_ops *ops, opr_tensor *q, opr_tensor *k, opr_tensor *v, opr_tensor *attn_mask,
                            double dropout_p, bool is_causal);

/* F.cross_entropy(input, target, weight, reduction, ignore_index, label_smoothing):
 * input [N, C] logits (or [C], or [N, C, d...]), target i64 class indices; weight NULL
 * or one per class; reduction "mean", "sum" or "none" (NULL: "mean"); a target equal to ignore_index
 * contributes nothing (PyTorch's default -100). The op `cross_entropy`. */
opr_tensor *model_cross_entropy(const gpt_ops *ops, opr_tensor *input, opr_tensor *target, opr_tensor *weight,
                                const char *reduction, int64_t ignore_index, double label_smoothing);

#endif
