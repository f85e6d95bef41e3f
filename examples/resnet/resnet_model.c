/* The ResNet of the example: parameters, initial weights, forward pass. */
#include "resnet_model.h"

#include "gpt/gpt_rng.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_text[1024];

static opr_status fail(opr_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return status;
}

const char *resnet_error(void) { return error_text; }

/* opr_call of an op with one output; a NULL tensor argument (an earlier failure of the
 * chain) makes it do nothing and give NULL, keeping the first failure's message. */
static opr_tensor *call(const opr_op *op, const opr_value *args, int nargs)
{
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == OPR_V_TENSOR && !args[i].u.t) return NULL;
    opr_tensor *out = NULL;
    if (opr_call(op, args, nargs, &out, 1)) fail(OPR_ERR_INVALID, "%s", opr_last_error());
    return out;
}
#define CALL(op, ...) call((op), (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value)))
#define T(t) opr_v_tensor(t)
#define INTS(...) opr_v_ints((int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static opr_status ops_init(opr_ctx *ctx, resnet_ops *ops)
{
    static const struct { const char *name; size_t offset; } table[] = {
#define OP(n) {#n, offsetof(resnet_ops, n)}
        OP(conv2d), OP(batch_norm), OP(relu), OP(max_pool2d), OP(add), OP(adaptive_avg_pool2d), OP(reshape), OP(linear),
        OP(cross_entropy),
#undef OP
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const opr_op *op = opr_op_find(ctx, table[i].name);
        if (!op) return fail(OPR_ERR_NOT_FOUND, "resnet: the registry has no op '%s'", table[i].name);
        *(const opr_op **)(void *)((char *)ops + table[i].offset) = op;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ parameters */

typedef struct builder {
    resnet_model *m;
    opr_ctx *ctx;
    opr_device dev;
    gpt_rng rng;
    int cap_p, cap_b;
} builder;

static opr_status push(builder *b, bool buffer, const char *name, opr_tensor *t)
{
    resnet_model *m = b->m;
    opr_tensor ***list = buffer ? &m->buffers : &m->params;
    char ***names = buffer ? &m->buffer_names : &m->param_names;
    int *n = buffer ? &m->n_buffers : &m->n_params, *cap = buffer ? &b->cap_b : &b->cap_p;
    if (!t) return fail(OPR_ERR_NOMEM, "resnet: creating %s: %s", name, opr_last_error());
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 32;
        opr_tensor **nl = realloc(*list, (size_t)*cap * sizeof *nl);
        if (nl) *list = nl;
        char **nn = nl ? realloc(*names, (size_t)*cap * sizeof *nn) : NULL;
        if (nn) *names = nn;
        if (!nl || !nn) {
            opr_tensor_release(t);
            return fail(OPR_ERR_NOMEM, "resnet: out of memory");
        }
    }
    (*list)[*n] = t;
    if (!((*names)[*n] = strdup(name))) {
        opr_tensor_release(t);
        return fail(OPR_ERR_NOMEM, "resnet: out of memory");
    }
    (*n)++;
    if (!buffer && opr_set_requires_grad(t, true)) return fail(OPR_ERR_INVALID, "resnet: %s", opr_last_error());
    return OPR_OK;
}

/* A tensor of the given shape: uniform in +-bound from the stream, or all `fill` when
 * bound is 0. */
static opr_tensor *make(builder *b, int ndim, const int64_t *shape, double bound, double fill)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    const bool f32 = b->m->cfg.dtype == OPR_F32;
    void *v = malloc((size_t)(n ? n : 1) * (f32 ? sizeof(float) : sizeof(double)));
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) {
        const double x = bound ? (2 * gpt_rng_uniform(&b->rng) - 1) * bound : fill;
        if (f32) ((float *)v)[i] = (float)x;
        else ((double *)v)[i] = x;
    }
    opr_tensor *t = opr_tensor_from_data(b->ctx, b->m->cfg.dtype, ndim, shape, v, b->dev);
    free(v);
    return t;
}

static opr_status conv(builder *b, const char *name, int64_t cout, int64_t cin, int64_t k)
{
    /* kaiming_normal_(mode="fan_out", nonlinearity="relu"): variance 2 / fan_out; uniform
     * in +-sqrt(3) std has the same variance */
    const double bound = sqrt(3.0) * sqrt(2.0 / (double)(cout * k * k));
    char full[96];
    snprintf(full, sizeof full, "%s.weight", name);
    return push(b, false, full, make(b, 4, (int64_t[]){cout, cin, k, k}, bound, 0));
}

static opr_status bn(builder *b, const char *name, int64_t c)
{
    static const char *const parts[] = {"weight", "bias", "running_mean", "running_var"};
    static const double fills[] = {1, 0, 0, 1};
    opr_status rc = OPR_OK;
    for (int i = 0; i < 4 && !rc; i++) {
        char full[96];
        snprintf(full, sizeof full, "%s.%s", name, parts[i]);
        rc = push(b, i >= 2, full, make(b, 1, (int64_t[]){c}, 0, fills[i]));
    }
    return rc;
}

resnet_model *resnet_model_new(opr_ctx *ctx, const resnet_config *cfg, uint64_t seed, opr_device dev)
{
    if (!cfg || cfg->width < 1 || cfg->num_classes < 1 || cfg->in_channels < 1 ||
        (cfg->dtype != OPR_F32 && cfg->dtype != OPR_F64)) {
        fail(OPR_ERR_INVALID, "resnet: width, num_classes and in_channels must be positive, dtype f32 or f64");
        return NULL;
    }
    for (int s = 0; s < 4; s++)
        if (cfg->blocks[s] < 1) {
            fail(OPR_ERR_INVALID, "resnet: stage %d has %d blocks; each needs at least 1", s, cfg->blocks[s]);
            return NULL;
        }
    resnet_model *m = calloc(1, sizeof *m);
    if (!m) {
        fail(OPR_ERR_NOMEM, "resnet: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    builder b = {m, ctx, dev, gpt_rng_new(seed), 0, 0};
    opr_status rc = ops_init(ctx, &m->ops);
    if (!rc) rc = conv(&b, "conv1", cfg->width, cfg->in_channels, 7);
    if (!rc) rc = bn(&b, "bn1", cfg->width);
    int64_t inplanes = cfg->width;
    for (int s = 0; s < 4 && !rc; s++) {
        const int64_t planes = (int64_t)cfg->width << s;
        for (int k = 0; k < cfg->blocks[s] && !rc; k++) {
            char name[64], part[80];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, k);
            snprintf(part, sizeof part, "%s.conv1", name);
            rc = conv(&b, part, planes, inplanes, 3);
            snprintf(part, sizeof part, "%s.bn1", name);
            if (!rc) rc = bn(&b, part, planes);
            snprintf(part, sizeof part, "%s.conv2", name);
            if (!rc) rc = conv(&b, part, planes, planes, 3);
            snprintf(part, sizeof part, "%s.bn2", name);
            if (!rc) rc = bn(&b, part, planes);
            if (!rc && k == 0 && (s > 0 || inplanes != planes)) {
                snprintf(part, sizeof part, "%s.downsample.0", name);
                rc = conv(&b, part, planes, inplanes, 1);
                snprintf(part, sizeof part, "%s.downsample.1", name);
                if (!rc) rc = bn(&b, part, planes);
            }
            inplanes = planes;
        }
    }
    const double bound = 1 / sqrt((double)inplanes);
    if (!rc) rc = push(&b, false, "fc.weight", make(&b, 2, (int64_t[]){cfg->num_classes, inplanes}, bound, 0));
    if (!rc) rc = push(&b, false, "fc.bias", make(&b, 1, (int64_t[]){cfg->num_classes}, bound, 0));
    if (rc) {
        resnet_model_free(m);
        return NULL;
    }
    return m;
}

void resnet_model_free(resnet_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) {
        opr_tensor_release(m->params[i]);
        free(m->param_names[i]);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        opr_tensor_release(m->buffers[i]);
        free(m->buffer_names[i]);
    }
    free(m->params);
    free(m->param_names);
    free(m->buffers);
    free(m->buffer_names);
    free(m);
}

opr_tensor *resnet_model_tensor(const resnet_model *m, const char *name, bool buffers)
{
    const int n = buffers ? m->n_buffers : m->n_params;
    for (int i = 0; i < n; i++)
        if (!strcmp(buffers ? m->buffer_names[i] : m->param_names[i], name)) return buffers ? m->buffers[i] : m->params[i];
    return NULL;
}

/* ------------------------------------------------------------------ forward */

static opr_tensor *p(const resnet_model *m, const char *prefix, const char *part, bool buffer)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", prefix, part);
    opr_tensor *t = resnet_model_tensor(m, name, buffer);
    if (!t) fail(OPR_ERR_NOT_FOUND, "resnet: no tensor %s", name);
    return t;
}

/* F.conv2d(x, weight, None, stride, padding). */
static opr_tensor *conv2d(resnet_model *m, opr_tensor *x, const char *name, int64_t stride, int64_t padding)
{
    return CALL(m->ops.conv2d, T(x), T(p(m, name, "weight", false)), opr_v_none(), INTS(stride, stride), INTS(padding, padding));
}

/* F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps). */
static opr_tensor *batch_norm(resnet_model *m, opr_tensor *x, const char *name, bool train)
{
    return CALL(m->ops.batch_norm, T(x), T(p(m, name, "weight", false)), T(p(m, name, "bias", false)),
                T(p(m, name, "running_mean", true)), T(p(m, name, "running_var", true)), opr_v_bool(train),
                opr_v_double(m->cfg.bn_momentum), opr_v_double(m->cfg.bn_eps), opr_v_bool(false));
}

static opr_tensor *relu(resnet_model *m, opr_tensor *x) { return CALL(m->ops.relu, T(x)); }

/* One BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + identity). Takes x's reference. */
static opr_tensor *basic_block(resnet_model *m, opr_tensor *x, const char *name, int64_t stride, bool downsample, bool train)
{
    char part[80];
    snprintf(part, sizeof part, "%s.conv1", name);
    opr_tensor *a = conv2d(m, x, part, stride, 1);
    snprintf(part, sizeof part, "%s.bn1", name);
    opr_tensor *b = batch_norm(m, a, part, train);
    opr_tensor *c = relu(m, b);
    snprintf(part, sizeof part, "%s.conv2", name);
    opr_tensor *d = conv2d(m, c, part, 1, 1);
    snprintf(part, sizeof part, "%s.bn2", name);
    opr_tensor *e = batch_norm(m, d, part, train);
    opr_tensor *id = x, *ds = NULL, *dbn = NULL;
    if (downsample) {
        snprintf(part, sizeof part, "%s.downsample.0", name);
        ds = conv2d(m, x, part, stride, 0);
        snprintf(part, sizeof part, "%s.downsample.1", name);
        id = dbn = batch_norm(m, ds, part, train);
    }
    opr_tensor *s = CALL(m->ops.add, T(e), T(id));
    opr_tensor *out = relu(m, s);
    opr_tensor *drop[] = {x, a, b, c, d, e, ds, dbn, s};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) opr_tensor_release(drop[i]);
    return out;
}

opr_status resnet_model_forward(resnet_model *m, opr_tensor *x, opr_tensor *targets, bool train, opr_tensor **loss,
                                opr_tensor **logits)
{
    error_text[0] = '\0';
    if (loss) *loss = NULL;
    if (logits) *logits = NULL;
    opr_tensor *h = conv2d(m, x, "conv1", 2, 3), *t;
    t = batch_norm(m, h, "bn1", train);
    opr_tensor_release(h);
    h = relu(m, t);
    opr_tensor_release(t);
    t = CALL(m->ops.max_pool2d, T(h), INTS(3, 3), INTS(2, 2), INTS(1, 1));
    opr_tensor_release(h);
    h = t;
    int64_t inplanes = m->cfg.width;
    for (int s = 0; s < 4; s++) {
        const int64_t planes = (int64_t)m->cfg.width << s;
        for (int k = 0; k < m->cfg.blocks[s]; k++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, k);
            const int64_t stride = k == 0 && s > 0 ? 2 : 1;
            h = basic_block(m, h, name, stride, k == 0 && (s > 0 || inplanes != planes), train);
            inplanes = planes;
        }
    }
    t = CALL(m->ops.adaptive_avg_pool2d, T(h), INTS(1, 1));
    opr_tensor_release(h);
    h = CALL(m->ops.reshape, T(t), INTS(-1, inplanes));
    opr_tensor_release(t);
    opr_tensor *out = CALL(m->ops.linear, T(h), T(p(m, "fc", "weight", false)), T(p(m, "fc", "bias", false)));
    opr_tensor_release(h);
    if (!out) return fail(OPR_ERR_INVALID, "resnet forward: %s", error_text);
    if (targets && loss) {
        *loss = CALL(m->ops.cross_entropy, T(out), T(targets));
        if (!*loss) {
            opr_tensor_release(out);
            return fail(OPR_ERR_INVALID, "resnet loss: %s", error_text);
        }
    }
    if (logits) *logits = out;
    else opr_tensor_release(out);
    return OPR_OK;
}

opr_status resnet_head_saved_bytes(const resnet_model *m, int64_t n, uint64_t *bytes)
{
    *bytes = 0;
    opr_tensor *w = resnet_model_tensor(m, "fc.weight", false), *b = resnet_model_tensor(m, "fc.bias", false);
    if (!w || !b) return fail(OPR_ERR_NOT_FOUND, "resnet: no fc.weight or fc.bias");
    /* stand-ins of the features, logits and targets: a plan depends on shapes only */
    opr_ctx *ctx = opr_tensor_ctx(w);
    const opr_device dev = opr_tensor_device(w);
    opr_tensor *h = opr_tensor_new(ctx, m->cfg.dtype, 2, (int64_t[]){n, opr_tensor_shape(w)[1]}, dev);
    opr_tensor *logits = opr_tensor_new(ctx, m->cfg.dtype, 2, (int64_t[]){n, m->cfg.num_classes}, dev);
    opr_tensor *targets = opr_tensor_new(ctx, OPR_I64, 1, (int64_t[]){n}, dev);
    uint64_t head = 0, loss = 0;
    opr_status rc = h && logits && targets ? OPR_OK : fail(OPR_ERR_NOMEM, "resnet: %s", opr_last_error());
    if (!rc && opr_plan_saved_bytes(m->ops.linear, (opr_value[]){T(h), T(w), T(b)}, 3, (const char *[]){"weight", "bias"}, 2,
                                    &head))
        rc = fail(OPR_ERR_INVALID, "resnet: the head's plan: %s", opr_last_error());
    if (!rc && opr_plan_saved_bytes(m->ops.cross_entropy, (opr_value[]){T(logits), T(targets)}, 2, (const char *[]){"self"}, 1,
                                    &loss))
        rc = fail(OPR_ERR_INVALID, "resnet: the loss's plan: %s", opr_last_error());
    opr_tensor_release(h);
    opr_tensor_release(logits);
    opr_tensor_release(targets);
    if (!rc) *bytes = head + loss;
    return rc;
}
