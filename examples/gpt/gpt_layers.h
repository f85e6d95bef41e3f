/* The layers of the GPT example, one function per PyTorch functional, with PyTorch's
 * arguments and semantics. Each is composed here from ops of registry/ops/core.yaml;
 * where a dedicated op is on its way, the comment names it and the function becomes a
 * call of it, with the same arguments. All return a new reference, or NULL with the
 * reason in gpt_error() (a NULL tensor argument: an earlier failure, passed on). */
#ifndef OPREG_EXAMPLE_GPT_LAYERS_H
#define OPREG_EXAMPLE_GPT_LAYERS_H

#include "gpt_ops.h"
#include "gpt_rng.h"

#include <stdbool.h>

/* F.embedding(indices, weight): the rows of weight [num, D] picked by indices (i64, any
 * shape), [*indices.shape, D]. padding_idx must be -1 (none): a padding row that gets
 * no gradient needs the dedicated op.
 * Becomes: embedding(weight, indices, padding_idx). */
opr_tensor *model_embedding(const gpt_ops *ops, opr_tensor *weight, opr_tensor *indices, int64_t padding_idx);

/* F.layer_norm(input, normalized_shape, weight, bias, eps): over the last n dims
 * (which must equal normalized_shape), (x - mean) / sqrt(var + eps) with the biased
 * variance, then * weight + bias (each may be NULL: none).
 * Becomes: layer_norm(input, normalized_shape, weight, bias, eps). */
opr_tensor *model_layer_norm(const gpt_ops *ops, opr_tensor *input, const int64_t *normalized_shape, int n,
                             opr_tensor *weight, opr_tensor *bias, double eps);

/* F.gelu(x, approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * approximate "none" (the erf form) needs the dedicated op: refused here.
 * Becomes: gelu(self, approximate). */
opr_tensor *model_gelu(const gpt_ops *ops, opr_tensor *x, const char *approximate);

/* F.dropout(x, p, training): in training, each element zeroed with probability p and
 * the rest scaled by 1 / (1 - p); otherwise (or p == 0) x itself (a new reference).
 * The mask is drawn on the host from rng, a uniform per element in row-major order.
 * Becomes: dropout(input, p, train), which draws from its own generator (rng goes). */
opr_tensor *model_dropout(const gpt_ops *ops, opr_tensor *x, double p, bool train, gpt_rng *rng);

/* F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal)
 * (PyTorch 2.0's; 1.13 spells it out): softmax(q k^T / sqrt(E) masked) v, q [..., L, E],
 * k [..., S, E], v [..., S, Ev]. attn_mask: NULL or bool [L, S] (broadcast), true where a
 * query may attend; is_causal: the mask tril(ones(L, S)) (not with attn_mask). Masked
 * scores are -inf. dropout_p must be 0 (the attention weights are not dropped here).
 * Becomes: scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal),
 * with the causal mask from triu/tril. */
opr_tensor *model_attention(const gpt_ops *ops, opr_tensor *q, opr_tensor *k, opr_tensor *v, opr_tensor *attn_mask,
                            double dropout_p, bool is_causal);

/* F.cross_entropy(input [N, C], target [N] i64) with weight None, ignore_index -100,
 * label_smoothing 0 and reduction "mean", "sum" or "none": -log_softmax(input)[n,
 * target[n]], reduced. A target of ignore_index is not skipped here: gather refuses it
 * as out of range.
 * Becomes: cross_entropy(self, target, weight, reduction, ignore_index, label_smoothing). */
opr_tensor *model_cross_entropy(const gpt_ops *ops, opr_tensor *input, opr_tensor *target, const char *reduction);

#endif
