/* The GPT example's model: parameters, their initialisation and the forward pass (see
 * gpt_model.h). */
#include "gpt_model.h"
#include "gpt_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WTE = 0, WPE = 1, FIRST_BLOCK = 2 };

static opr_tensor *block_param(const gpt_model *m, int layer, enum gpt_block_param p)
{
    return m->params[FIRST_BLOCK + layer * GPT_BLOCK_PARAMS + p];
}

static int lnf_index(const gpt_model *m) { return FIRST_BLOCK + m->cfg.n_layer * GPT_BLOCK_PARAMS; }

const char *gpt_model_param_name(const gpt_model *m, int i)
{
    static const char *const block_names[GPT_BLOCK_PARAMS] = {"ln1_w", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b",
                                                              "ln2_w", "ln2_b", "fc_w",   "fc_b",   "fc2_w",  "fc2_b"};
    static _Thread_local char name[32];
    const int lnf = lnf_index(m);
    if (i == WTE) return "wte";
    if (i == WPE) return "wpe";
    if (i == lnf) return "lnf_w";
    if (i == lnf + 1) return "lnf_b";
    if (i == lnf + 2) return "head_w";
    if (i < FIRST_BLOCK || i > lnf + 2) return "?";
    snprintf(name, sizeof name, "h.%d.%s", (i - FIRST_BLOCK) / GPT_BLOCK_PARAMS,
             block_names[(i - FIRST_BLOCK) % GPT_BLOCK_PARAMS]);
    return name;
}

int64_t gpt_model_numel(const gpt_model *m)
{
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += opr_tensor_numel(m->params[i]);
    return n;
}

/* A leaf that requires grad, [rows] or [rows, cols] (cols 0: 1-d): `fill` everywhere when
 * bound is 0, else (2 u - 1) * bound for successive draws of rng. */
static opr_tensor *new_param(opr_ctx *ctx, const gpt_config *cfg, opr_device dev, gpt_rng *rng, int64_t rows,
                             int64_t cols, double bound, double fill)
{
    const int64_t n = rows * (cols ? cols : 1);
    void *buf = malloc((size_t)n * opr_dtype_size(cfg->dtype));
    if (!buf) {
        gpt_fail(OPR_ERR_NOMEM, "gpt_model_new: out of memory for a parameter of %lld values", (long long)n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        const double v = bound ? (2.0 * gpt_rng_uniform(rng) - 1.0) * bound : fill;
        if (cfg->dtype == OPR_F32) ((float *)buf)[i] = (float)v;
        else ((double *)buf)[i] = v;
    }
    opr_tensor *t = opr_tensor_from_data(ctx, cfg->dtype, cols ? 2 : 1, (int64_t[]){rows, cols}, buf, dev);
    free(buf);
    if (!t || opr_set_requires_grad(t, true)) {
        gpt_fail(OPR_ERR_NOMEM, "gpt_model_new: %s", opr_last_error());
        opr_tensor_release(t);
        return NULL;
    }
    return t;
}

gpt_model *gpt_model_new(opr_ctx *ctx, const gpt_config *cfg, uint64_t seed, opr_device dev)
{
    if (!ctx || !cfg) {
        gpt_fail(OPR_ERR_INVALID, "gpt_model_new: NULL %s", ctx ? "config" : "context");
        return NULL;
    }
    if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->n_embd < 1 || cfg->n_embd % cfg->n_head || cfg->block_size < 1 ||
        cfg->vocab_size < 1 || !(cfg->dropout >= 0 && cfg->dropout < 1) ||
        (cfg->dtype != OPR_F32 && cfg->dtype != OPR_F64)) {
        gpt_fail(OPR_ERR_INVALID,
                 "gpt_model_new: invalid config (layers %d, heads %d, n_embd %d, block %d, vocab %d, dropout %g, %s): "
                 "all >= 1, n_embd a multiple of heads, dropout in [0, 1), f32 or f64",
                 cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->block_size, cfg->vocab_size, cfg->dropout,
                 opr_dtype_name(cfg->dtype));
        return NULL;
    }
    gpt_model *m = calloc(1, sizeof *m);
    if (!m) {
        gpt_fail(OPR_ERR_NOMEM, "gpt_model_new: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->n_params = FIRST_BLOCK + cfg->n_layer * GPT_BLOCK_PARAMS + 3;
    m->params = calloc((size_t)m->n_params, sizeof *m->params);
    if (!m->params || gpt_ops_init(ctx, &m->ops)) {
        if (!m->params) gpt_fail(OPR_ERR_NOMEM, "gpt_model_new: out of memory");
        gpt_model_free(m);
        return NULL;
    }
    const int64_t C = cfg->n_embd, V = cfg->vocab_size;
    const double emb = sqrt(3.0), lin = 1.0 / sqrt((double)C), lin4 = 1.0 / sqrt((double)(4 * C));
    gpt_rng rng = gpt_rng_new(seed);
    m->params[WTE] = new_param(ctx, cfg, dev, &rng, V, C, emb, 0);
    m->params[WPE] = new_param(ctx, cfg, dev, &rng, cfg->block_size, C, emb, 0);
    for (int l = 0; l < cfg->n_layer; l++) {
        opr_tensor **p = m->params + FIRST_BLOCK + l * GPT_BLOCK_PARAMS;
        p[GPT_LN1_W] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 1);
        p[GPT_LN1_B] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 0);
        p[GPT_ATTN_W] = new_param(ctx, cfg, dev, &rng, 3 * C, C, lin, 0);
        p[GPT_ATTN_B] = new_param(ctx, cfg, dev, &rng, 3 * C, 0, lin, 0);
        p[GPT_PROJ_W] = new_param(ctx, cfg, dev, &rng, C, C, lin, 0);
        p[GPT_PROJ_B] = new_param(ctx, cfg, dev, &rng, C, 0, lin, 0);
        p[GPT_LN2_W] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 1);
        p[GPT_LN2_B] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 0);
        p[GPT_FC_W] = new_param(ctx, cfg, dev, &rng, 4 * C, C, lin, 0);
        p[GPT_FC_B] = new_param(ctx, cfg, dev, &rng, 4 * C, 0, lin, 0);
        p[GPT_FC2_W] = new_param(ctx, cfg, dev, &rng, C, 4 * C, lin4, 0);
        p[GPT_FC2_B] = new_param(ctx, cfg, dev, &rng, C, 0, lin4, 0);
    }
    const int lnf = lnf_index(m);
    m->params[lnf] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 1);
    m->params[lnf + 1] = new_param(ctx, cfg, dev, &rng, C, 0, 0, 0);
    m->params[lnf + 2] = new_param(ctx, cfg, dev, &rng, V, C, lin, 0);
    for (int i = 0; i < m->n_params; i++)
        if (!m->params[i]) {
            gpt_model_free(m);
            return NULL;
        }
    return m;
}

void gpt_model_free(gpt_model *m)
{
    if (!m) return;
    for (int i = 0; m->params && i < m->n_params; i++) opr_tensor_release(m->params[i]);
    free(m->params);
    free(m);
}

/* [B, T, C] -> [B, n_head, T, C / n_head]: t.reshape(B, T, H, C / H).transpose(1, 2). */
static opr_tensor *heads(const gpt_model *m, opr_tensor *t)
{
    const gpt_ops *o = &m->ops;
    const int64_t B = opr_tensor_size(t, 0), T = opr_tensor_size(t, 1), C = m->cfg.n_embd, H = m->cfg.n_head;
    opr_tensor *split = GPT_CALL(o->reshape, opr_v_tensor(t), opr_v_ints((int64_t[]){B, T, H, C / H}, 4));
    opr_tensor *out = GPT_CALL(o->transpose, opr_v_tensor(split), opr_v_int(1), opr_v_int(2));
    opr_tensor_release(split);
    return out;
}

/* Causal self-attention of one block: x [B, T, C] (already normalised) -> [B, T, C]. */
static opr_tensor *self_attention(gpt_model *m, int l, opr_tensor *x, bool train)
{
    const gpt_ops *o = &m->ops;
    const int64_t B = opr_tensor_size(x, 0), T = opr_tensor_size(x, 1), C = m->cfg.n_embd;
    opr_tensor *qkv = GPT_CALL(o->linear, opr_v_tensor(x), opr_v_tensor(block_param(m, l, GPT_ATTN_W)),
                               opr_v_tensor(block_param(m, l, GPT_ATTN_B)));
    /* q, k, v = qkv.split(C, dim=2): one op whose gradient is one cat of the three
     * (three narrows would each scatter into a zeroed [B, T, 3 C] in backward) */
    opr_tensor *parts[3] = {NULL, NULL, NULL};
    if (qkv && opr_call(o->split, (opr_value[]){opr_v_tensor(qkv), opr_v_int(C), opr_v_int(2)}, 3, parts, 3))
        gpt_fail(OPR_ERR_INVALID, "%s", opr_last_error());
    opr_tensor *q = heads(m, parts[0]), *k = heads(m, parts[1]), *v = heads(m, parts[2]);
    opr_tensor *y = model_attention(o, q, k, v, NULL, 0.0, true);
    opr_tensor *yt = GPT_CALL(o->transpose, opr_v_tensor(y), opr_v_int(1), opr_v_int(2));
    opr_tensor *yc = GPT_CALL(o->contiguous, opr_v_tensor(yt));
    opr_tensor *merged = GPT_CALL(o->reshape, opr_v_tensor(yc), opr_v_ints((int64_t[]){B, T, C}, 3));
    opr_tensor *proj = GPT_CALL(o->linear, opr_v_tensor(merged), opr_v_tensor(block_param(m, l, GPT_PROJ_W)),
                                opr_v_tensor(block_param(m, l, GPT_PROJ_B)));
    opr_tensor *out = model_dropout(o, proj, m->cfg.dropout, train);
    GPT_RELEASE(qkv, parts[0], parts[1], parts[2], q, k, v, y, yt, yc, merged, proj);
    return out;
}

/* The MLP of one block: x [B, T, C] (already normalised) -> [B, T, C]. */
static opr_tensor *mlp(gpt_model *m, int l, opr_tensor *x, bool train)
{
    const gpt_ops *o = &m->ops;
    opr_tensor *h = GPT_CALL(o->linear, opr_v_tensor(x), opr_v_tensor(block_param(m, l, GPT_FC_W)),
                             opr_v_tensor(block_param(m, l, GPT_FC_B)));
    opr_tensor *g = model_gelu(o, h, "tanh");
    opr_tensor *y = GPT_CALL(o->linear, opr_v_tensor(g), opr_v_tensor(block_param(m, l, GPT_FC2_W)),
                             opr_v_tensor(block_param(m, l, GPT_FC2_B)));
    opr_tensor *out = model_dropout(o, y, m->cfg.dropout, train);
    GPT_RELEASE(h, g, y);
    return out;
}

/* x + f(layer_norm(x)): one residual branch. */
static opr_tensor *residual(gpt_model *m, int l, opr_tensor *x, enum gpt_block_param ln_w, bool train,
                            opr_tensor *(*f)(gpt_model *, int, opr_tensor *, bool))
{
    const int64_t C = m->cfg.n_embd;
    opr_tensor *n = model_layer_norm(&m->ops, x, &C, 1, block_param(m, l, ln_w), block_param(m, l, ln_w + 1), 1e-5);
    opr_tensor *fx = n ? f(m, l, n, train) : NULL;
    opr_tensor *out = GPT_CALL(m->ops.add, opr_v_tensor(x), opr_v_tensor(fx));
    GPT_RELEASE(n, fx);
    return out;
}

opr_status gpt_model_forward(gpt_model *m, opr_tensor *idx, opr_tensor *targets, bool train, opr_tensor **loss,
                             opr_tensor **logits)
{
    if (loss) *loss = NULL;
    if (logits) *logits = NULL;
    if (!m || !idx) return gpt_fail(OPR_ERR_INVALID, "gpt_model_forward: NULL %s", m ? "idx" : "model");
    const gpt_ops *o = &m->ops;
    const int64_t B = opr_tensor_size(idx, 0), T = opr_tensor_size(idx, 1), C = m->cfg.n_embd;
    if (opr_tensor_ndim(idx) != 2 || opr_tensor_dtype(idx) != OPR_I64 || T < 1 || T > m->cfg.block_size)
        return gpt_fail(OPR_ERR_INVALID, "gpt_model_forward: idx must be i64 [B, T] with 1 <= T <= %d",
                        m->cfg.block_size);
    if (targets && (opr_tensor_ndim(targets) != 2 || opr_tensor_size(targets, 0) != B ||
                    opr_tensor_size(targets, 1) != T || opr_tensor_dtype(targets) != OPR_I64))
        return gpt_fail(OPR_ERR_INVALID, "gpt_model_forward: targets must be i64 [%lld, %lld], like idx", (long long)B,
                        (long long)T);
    gpt_fail(OPR_OK, "%s", "");
    char dev[32];
    opr_device_format(opr_tensor_ctx(idx), opr_tensor_device(idx), dev, sizeof dev);
    opr_tensor *pos = GPT_CALL(o->arange, opr_v_double(0), opr_v_double((double)T), opr_v_double(1),
                               opr_v_string("i64"), opr_v_string(dev));
    opr_tensor *tok_emb = model_embedding(o, m->params[WTE], idx, -1);
    opr_tensor *pos_emb = model_embedding(o, m->params[WPE], pos, -1);
    opr_tensor *sum = GPT_CALL(o->add, opr_v_tensor(tok_emb), opr_v_tensor(pos_emb));
    opr_tensor *x = model_dropout(o, sum, m->cfg.dropout, train);
    GPT_RELEASE(pos, tok_emb, pos_emb, sum);
    for (int l = 0; l < m->cfg.n_layer && x; l++) {
        opr_tensor *a = residual(m, l, x, GPT_LN1_W, train, self_attention);
        opr_tensor_release(x);
        x = residual(m, l, a, GPT_LN2_W, train, mlp);
        opr_tensor_release(a);
    }
    const int lnf = lnf_index(m);
    opr_tensor *xf = model_layer_norm(o, x, &C, 1, m->params[lnf], m->params[lnf + 1], 1e-5);
    opr_tensor *out = GPT_CALL(o->linear, opr_v_tensor(xf), opr_v_tensor(m->params[lnf + 2]), opr_v_none());
    GPT_RELEASE(x, xf);
    if (targets && loss) {
        const int64_t V = m->cfg.vocab_size;
        opr_tensor *flat = GPT_CALL(o->reshape, opr_v_tensor(out), opr_v_ints((int64_t[]){B * T, V}, 2));
        opr_tensor *tflat = GPT_CALL(o->reshape, opr_v_tensor(targets), opr_v_ints((int64_t[]){B * T}, 1));
        *loss = model_cross_entropy(o, flat, tflat, NULL, "mean", -100, 0.0);
        GPT_RELEASE(flat, tflat);
    }
    const bool ok = out && (!targets || !loss || *loss);
    if (ok && logits) *logits = opr_tensor_retain(out);
    opr_tensor_release(out);
    if (!ok && loss) {
        opr_tensor_release(*loss);
        *loss = NULL;
    }
    return ok ? OPR_OK : OPR_ERR_INVALID;
}
