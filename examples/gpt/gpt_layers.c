/* The layers of the GPT example, composed of core ops (see gpt_layers.h for each one's
 * contract and the dedicated op that replaces it). */
#include "gpt_layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

opr_tensor *model_embedding(const gpt_ops *ops, opr_tensor *weight, opr_tensor *indices, int64_t padding_idx)
{
    if (!weight || !indices) return NULL;
    if (padding_idx != -1) {
        gpt_fail(OPR_ERR_UNSUPPORTED, "model_embedding: padding_idx %lld needs the embedding op (only -1, none, here)",
                 (long long)padding_idx);
        return NULL;
    }
    if (opr_tensor_ndim(weight) != 2 || opr_tensor_dtype(indices) != OPR_I64) {
        gpt_fail(OPR_ERR_INVALID, "model_embedding: weight must be 2-d (is %d-d) and indices i64 (are %s)",
                 opr_tensor_ndim(weight), opr_dtype_name(opr_tensor_dtype(indices)));
        return NULL;
    }
    const int nd = opr_tensor_ndim(indices);
    if (nd + 1 > OPR_MAX_DIMS) {
        gpt_fail(OPR_ERR_INVALID, "model_embedding: indices have %d dims, at most %d", nd, OPR_MAX_DIMS - 1);
        return NULL;
    }
    int64_t shape[OPR_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = opr_tensor_size(indices, d);
    shape[nd] = opr_tensor_size(weight, 1);
    opr_tensor *flat = GPT_CALL(ops->reshape, opr_v_tensor(indices), opr_v_ints((int64_t[]){-1}, 1));
    opr_tensor *rows = GPT_CALL(ops->index_select, opr_v_tensor(weight), opr_v_int(0), opr_v_tensor(flat));
    opr_tensor *out = GPT_CALL(ops->reshape, opr_v_tensor(rows), opr_v_ints(shape, nd + 1));
    GPT_RELEASE(flat, rows);
    return out;
}

opr_tensor *model_layer_norm(const gpt_ops *ops, opr_tensor *input, const int64_t *normalized_shape, int n,
                             opr_tensor *weight, opr_tensor *bias, double eps)
{
    if (!input) return NULL;
    const int nd = opr_tensor_ndim(input);
    if (n < 1 || n > nd) {
        gpt_fail(OPR_ERR_INVALID, "model_layer_norm: normalized_shape has %d dims; input has %d", n, nd);
        return NULL;
    }
    int64_t dims[OPR_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        if (opr_tensor_size(input, nd - n + i) != normalized_shape[i]) {
            gpt_fail(OPR_ERR_INVALID, "model_layer_norm: input size %lld at dim %d, normalized_shape says %lld",
                     (long long)opr_tensor_size(input, nd - n + i), nd - n + i, (long long)normalized_shape[i]);
            return NULL;
        }
        dims[i] = i - n;
    }
    opr_tensor *mu = GPT_CALL(ops->mean, opr_v_tensor(input), opr_v_ints(dims, n), opr_v_bool(true));
    opr_tensor *xc = GPT_CALL(ops->sub, opr_v_tensor(input), opr_v_tensor(mu));
    opr_tensor *sq = GPT_CALL(ops->mul, opr_v_tensor(xc), opr_v_tensor(xc));
    opr_tensor *var = GPT_CALL(ops->mean, opr_v_tensor(sq), opr_v_ints(dims, n), opr_v_bool(true));
    opr_tensor *eps_t = gpt_scalar(input, eps);
    opr_tensor *ve = GPT_CALL(ops->add, opr_v_tensor(var), opr_v_tensor(eps_t));
    opr_tensor *sd = GPT_CALL(ops->sqrt, opr_v_tensor(ve));
    opr_tensor *out = GPT_CALL(ops->div, opr_v_tensor(xc), opr_v_tensor(sd));
    GPT_RELEASE(mu, xc, sq, var, eps_t, ve, sd);
    if (weight) {
        opr_tensor *w = GPT_CALL(ops->mul, opr_v_tensor(out), opr_v_tensor(weight));
        opr_tensor_release(out);
        out = w;
    }
    if (bias) {
        opr_tensor *b = GPT_CALL(ops->add, opr_v_tensor(out), opr_v_tensor(bias));
        opr_tensor_release(out);
        out = b;
    }
    return out;
}

opr_tensor *model_gelu(const gpt_ops *ops, opr_tensor *x, const char *approximate)
{
    if (!x) return NULL;
    if (!approximate || strcmp(approximate, "tanh")) {
        gpt_fail(OPR_ERR_UNSUPPORTED, "model_gelu: approximate \"%s\" needs the gelu op (only \"tanh\" here)",
                 approximate ? approximate : "(null)");
        return NULL;
    }
    /* PyTorch's constants: sqrt(2 / pi) as M_SQRT2 * M_2_SQRTPI * 0.5, and kappa */
    opr_tensor *beta = gpt_scalar(x, M_SQRT2 * M_2_SQRTPI * 0.5), *kappa = gpt_scalar(x, 0.044715);
    opr_tensor *half = gpt_scalar(x, 0.5), *one = gpt_scalar(x, 1.0);
    opr_tensor *x2 = GPT_CALL(ops->mul, opr_v_tensor(x), opr_v_tensor(x));
    opr_tensor *x3 = GPT_CALL(ops->mul, opr_v_tensor(x2), opr_v_tensor(x));
    opr_tensor *kx3 = GPT_CALL(ops->mul, opr_v_tensor(x3), opr_v_tensor(kappa));
    opr_tensor *s = GPT_CALL(ops->add, opr_v_tensor(x), opr_v_tensor(kx3));
    opr_tensor *inner = GPT_CALL(ops->mul, opr_v_tensor(s), opr_v_tensor(beta));
    opr_tensor *th = GPT_CALL(ops->tanh, opr_v_tensor(inner));
    opr_tensor *th1 = GPT_CALL(ops->add, opr_v_tensor(th), opr_v_tensor(one));
    opr_tensor *hx = GPT_CALL(ops->mul, opr_v_tensor(x), opr_v_tensor(half));
    opr_tensor *out = GPT_CALL(ops->mul, opr_v_tensor(hx), opr_v_tensor(th1));
    GPT_RELEASE(beta, kappa, half, one, x2, x3, kx3, s, inner, th, th1, hx);
    return out;
}

opr_tensor *model_dropout(const gpt_ops *ops, opr_tensor *x, double p, bool train, gpt_rng *rng)
{
    if (!x) return NULL;
    if (!(p >= 0 && p <= 1)) {
        gpt_fail(OPR_ERR_INVALID, "model_dropout: p = %g, must be in [0, 1]", p);
        return NULL;
    }
    if (!train || p == 0) return opr_tensor_retain(x);
    const opr_dtype dt = opr_tensor_dtype(x);
    if (dt != OPR_F32 && dt != OPR_F64) {
        gpt_fail(OPR_ERR_INVALID, "model_dropout: x is %s, f32 or f64 here", opr_dtype_name(dt));
        return NULL;
    }
    /* the mask on the host, in x's dtype: 0 where dropped, 1 / (1 - p) where kept */
    const int64_t n = opr_tensor_numel(x);
    void *keep = malloc((size_t)(n ? n : 1) * opr_dtype_size(dt));
    if (!keep) {
        gpt_fail(OPR_ERR_NOMEM, "model_dropout: out of memory for a mask of %lld elements", (long long)n);
        return NULL;
    }
    const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double k = gpt_rng_uniform(rng) < p ? 0.0 : scale;
        if (dt == OPR_F32) ((float *)keep)[i] = (float)k;
        else ((double *)keep)[i] = k;
    }
    opr_tensor *mask = opr_tensor_from_data(opr_tensor_ctx(x), dt, opr_tensor_ndim(x), opr_tensor_shape(x), keep,
                                            opr_tensor_device(x));
    free(keep);
    if (!mask) {
        gpt_fail(OPR_ERR_NOMEM, "model_dropout: %s", opr_last_error());
        return NULL;
    }
    opr_tensor *out = GPT_CALL(ops->mul, opr_v_tensor(x), opr_v_tensor(mask));
    opr_tensor_release(mask);
    return out;
}

opr_tensor *model_attention(const gpt_ops *ops, opr_tensor *q, opr_tensor *k, opr_tensor *v, opr_tensor *attn_mask,
                            double dropout_p, bool is_causal)
{
    if (!q || !k || !v) return NULL;
    if (dropout_p != 0) {
        gpt_fail(OPR_ERR_UNSUPPORTED, "model_attention: dropout_p %g needs the scaled_dot_product_attention op (0 here)",
                 dropout_p);
        return NULL;
    }
    if (attn_mask && is_causal) {
        gpt_fail(OPR_ERR_INVALID, "model_attention: attn_mask and is_causal together (PyTorch refuses them too)");
        return NULL;
    }
    if (opr_tensor_ndim(q) < 2 || opr_tensor_ndim(k) < 2 || opr_tensor_size(q, -1) != opr_tensor_size(k, -1)) {
        gpt_fail(OPR_ERR_INVALID, "model_attention: query [..., L, E] and key [..., S, E] differ in E or have < 2 dims");
        return NULL;
    }
    const int64_t L = opr_tensor_size(q, -2), S = opr_tensor_size(k, -2), E = opr_tensor_size(q, -1);
    opr_tensor *kt = GPT_CALL(ops->transpose, opr_v_tensor(k), opr_v_int(-2), opr_v_int(-1));
    opr_tensor *raw = GPT_CALL(ops->matmul, opr_v_tensor(q), opr_v_tensor(kt));
    opr_tensor *scale = gpt_scalar(q, 1.0 / sqrt((double)E));
    opr_tensor *scores = GPT_CALL(ops->mul, opr_v_tensor(raw), opr_v_tensor(scale));
    GPT_RELEASE(kt, raw, scale);
    opr_tensor *mask = attn_mask ? opr_tensor_retain(attn_mask) : NULL;
    if (is_causal) { /* query i attends to keys j <= i: tril(ones(L, S)) */
        char dev[32];
        opr_device_format(opr_tensor_ctx(q), opr_tensor_device(q), dev, sizeof dev);
        opr_tensor *rows = GPT_CALL(ops->arange, opr_v_double(0), opr_v_double((double)L), opr_v_double(1),
                                    opr_v_string("i64"), opr_v_string(dev));
        opr_tensor *cols = GPT_CALL(ops->arange, opr_v_double(0), opr_v_double((double)S), opr_v_double(1),
                                    opr_v_string("i64"), opr_v_string(dev));
        opr_tensor *r2 = GPT_CALL(ops->unsqueeze, opr_v_tensor(rows), opr_v_int(1));
        opr_tensor *c2 = GPT_CALL(ops->unsqueeze, opr_v_tensor(cols), opr_v_int(0));
        mask = GPT_CALL(ops->ge, opr_v_tensor(r2), opr_v_tensor(c2));
        GPT_RELEASE(rows, cols, r2, c2);
        if (!mask) {
            opr_tensor_release(scores);
            return NULL;
        }
    }
    if (mask) {
        opr_tensor *ninf = gpt_scalar(q, -INFINITY);
        opr_tensor *masked = GPT_CALL(ops->where, opr_v_tensor(mask), opr_v_tensor(scores), opr_v_tensor(ninf));
        GPT_RELEASE(ninf, scores, mask);
        scores = masked;
    }
    opr_tensor *att = GPT_CALL(ops->softmax, opr_v_tensor(scores), opr_v_int(-1));
    opr_tensor *out = GPT_CALL(ops->matmul, opr_v_tensor(att), opr_v_tensor(v));
    GPT_RELEASE(scores, att);
    return out;
}

opr_tensor *model_cross_entropy(const gpt_ops *ops, opr_tensor *input, opr_tensor *target, const char *reduction)
{
    if (!input || !target) return NULL;
    const bool mean = reduction && !strcmp(reduction, "mean"), sum = reduction && !strcmp(reduction, "sum");
    if (!mean && !sum && !(reduction && !strcmp(reduction, "none"))) {
        gpt_fail(OPR_ERR_INVALID, "model_cross_entropy: reduction \"%s\", must be \"mean\", \"sum\" or \"none\"",
                 reduction ? reduction : "(null)");
        return NULL;
    }
    if (opr_tensor_ndim(input) != 2 || opr_tensor_ndim(target) != 1 || opr_tensor_dtype(target) != OPR_I64 ||
        opr_tensor_size(target, 0) != opr_tensor_size(input, 0)) {
        gpt_fail(OPR_ERR_INVALID, "model_cross_entropy: input must be [N, C] and target i64 [N] (got %d-d and %s %d-d)",
                 opr_tensor_ndim(input), opr_dtype_name(opr_tensor_dtype(target)), opr_tensor_ndim(target));
        return NULL;
    }
    opr_tensor *lp = GPT_CALL(ops->log_softmax, opr_v_tensor(input), opr_v_int(1));
    opr_tensor *t2 = GPT_CALL(ops->unsqueeze, opr_v_tensor(target), opr_v_int(1));
    opr_tensor *picked = GPT_CALL(ops->gather, opr_v_tensor(lp), opr_v_int(1), opr_v_tensor(t2));
    opr_tensor *red = mean  ? GPT_CALL(ops->mean, opr_v_tensor(picked))
                      : sum ? GPT_CALL(ops->sum, opr_v_tensor(picked))
                            : GPT_CALL(ops->reshape, opr_v_tensor(picked), opr_v_ints((int64_t[]){-1}, 1));
    opr_tensor *out = GPT_CALL(ops->neg, opr_v_tensor(red));
    GPT_RELEASE(lp, t2, picked, red);
    return out;
}
