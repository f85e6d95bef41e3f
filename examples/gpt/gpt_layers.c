/* The layers of the GPT example: each a call of its registry op (see gpt_layers.h). */
#include "gpt_layers.h"

/* A tensor argument that may be None. */
static opr_value optional(opr_tensor *t) { return t ? opr_v_tensor(t) : opr_v_none(); }

opr_tensor *model_embedding(const gpt_ops *ops, opr_tensor *weight, opr_tensor *indices, int64_t padding_idx)
{
    return GPT_CALL(ops->embedding, opr_v_tensor(weight), opr_v_tensor(indices), opr_v_int(padding_idx));
}

opr_tensor *model_layer_norm(const gpt_ops *ops, opr_tensor *input, const int64_t *normalized_shape, int n,
                             opr_tensor *weight, opr_tensor *bias, double eps)
{
    return GPT_CALL(ops->layer_norm, opr_v_tensor(input), opr_v_ints(normalized_shape, n), optional(weight),
                    optional(bias), opr_v_double(eps));
}

opr_tensor *model_gelu(const gpt_ops *ops, opr_tensor *x, const char *approximate)
{
    return GPT_CALL(ops->gelu, opr_v_tensor(x), opr_v_string(approximate ? approximate : "none"));
}

opr_tensor *model_dropout(const gpt_ops *ops, opr_tensor *x, double p, bool train)
{
    return GPT_CALL(ops->dropout, opr_v_tensor(x), opr_v_double(p), opr_v_bool(train));
}

opr_tensor *model_attention(const gpt_ops *ops, opr_tensor *q, opr_tensor *k, opr_tensor *v, opr_tensor *attn_mask,
                            double dropout_p, bool is_causal)
{
    return GPT_CALL(ops->scaled_dot_product_attention, opr_v_tensor(q), opr_v_tensor(k), opr_v_tensor(v),
                    optional(attn_mask), opr_v_double(dropout_p), opr_v_bool(is_causal));
}

opr_tensor *model_cross_entropy(const gpt_ops *ops, opr_tensor *input, opr_tensor *target, opr_tensor *weight,
                                const char *reduction, int64_t ignore_index, double label_smoothing)
{
    return GPT_CALL(ops->cross_entropy, opr_v_tensor(input), opr_v_tensor(target), optional(weight),
                    opr_v_string(reduction ? reduction : "mean"), opr_v_int(ignore_index), opr_v_double(label_smoothing));
}
