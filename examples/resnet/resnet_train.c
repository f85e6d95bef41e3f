/* SGD, batches, the training loop and the accuracy of the ResNet example. */
#include "resnet_train.h"

#include "resnet_data.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

opr_status resnet_sgd_init(resnet_sgd *opt, const resnet_model *m, double lr, double momentum, double weight_decay)
{
    *opt = (resnet_sgd){.lr = lr, .momentum = momentum, .weight_decay = weight_decay, .n = m->n_params};
    opt->buf = calloc((size_t)(m->n_params ? m->n_params : 1), sizeof *opt->buf);
    return opt->buf ? OPR_OK : OPR_ERR_NOMEM;
}

void resnet_sgd_free(resnet_sgd *opt)
{
    for (int i = 0; opt->buf && i < opt->n; i++) opr_tensor_release(opt->buf[i]);
    free(opt->buf);
    *opt = (resnet_sgd){0};
}

/* torch.optim.SGD's update (g += wd p; buf = g on the first step, else momentum buf + g;
 * p -= lr buf) as _foreach_sgd_step calls (registry/ops/optim_foreach.yaml: sgd_step_
 * on each parameter), on the parameters' device, with grad mode off as in torch's
 * step(). A parameter's first step (its buffer made now) and the later ones differ, so
 * the parameters go in two calls: those on their first step, and the others. */
static opr_status sgd_params(resnet_sgd *opt, resnet_model *m)
{
    const size_t cap = (size_t)(m->n_params ? m->n_params : 1);
    opr_tensor **lists = calloc(6 * cap, sizeof *lists), **out = calloc(cap, sizeof *out);
    bool *fresh = calloc(cap, sizeof *fresh); /* no buffer yet: on its first step */
    if (!lists || !out || !fresh) {
        free(lists);
        free(out);
        free(fresh);
        return OPR_ERR_NOMEM;
    }
    for (int i = 0; i < m->n_params; i++) fresh[i] = !opt->buf[i];
    opr_status rc = OPR_OK;
    for (int first = 1; first >= 0 && !rc; first--) {
        opr_tensor **ps = lists + (first ? 0 : 3) * cap, **gs = ps + cap, **bs = gs + cap;
        int n = 0;
        for (int i = 0; i < m->n_params && !rc; i++) {
            opr_tensor *p = m->params[i], *grad = opr_grad(p);
            if (!grad || fresh[i] != (first == 1)) continue; /* no gradient: skipped, as PyTorch does */
            if (first && opt->momentum != 0) {
                opr_value z[] = {opr_v_tensor(p)};
                if (opr_call_by_name(opr_tensor_ctx(p), "zeros_like", z, 1, &opt->buf[i], 1)) rc = OPR_ERR_NOMEM;
            }
            ps[n] = p;
            gs[n] = grad;
            bs[n++] = opt->buf[i];
        }
        if (rc || n == 0) continue;
        opr_value a[] = {opr_v_tensors(ps, n), opr_v_tensors(gs, n), opr_v_tensors(bs, opt->momentum != 0 ? n : 0),
                         opr_v_double(opt->lr), opr_v_double(opt->momentum), opr_v_double(0),
                         opr_v_double(opt->weight_decay), opr_v_bool(false), opr_v_bool(false), opr_v_bool(first)};
        rc = opr_call_by_name(opr_tensor_ctx(ps[0]), "_foreach_sgd_step", a, 10, out, n);
        for (int k = 0; !rc && k < n; k++) opr_tensor_release(out[k]); /* the parameters themselves */
    }
    free(lists);
    free(out);
    free(fresh);
    return rc;
}

opr_status resnet_sgd_step(resnet_sgd *opt, resnet_model *m)
{
    bool was = opr_grad_mode_set(false);
    opr_status rc = sgd_params(opt, m);
    opr_grad_mode_set(was);
    if (rc) return rc;
    for (int i = 0; i < m->n_params; i++) opr_zero_grad(m->params[i]);
    return OPR_OK;
}

opr_status resnet_batch(opr_ctx *ctx, opr_dtype dtype, opr_device dev, uint64_t seed, int64_t first, int n, opr_tensor **x,
                        opr_tensor **y)
{
    const int64_t per = 3 * RESNET_DATA_SIZE * RESNET_DATA_SIZE;
    double *v = malloc((size_t)(n * per) * sizeof *v);
    int64_t *labels = malloc((size_t)n * sizeof *labels);
    void *data = dtype == OPR_F32 ? malloc((size_t)(n * per) * sizeof(float)) : NULL;
    *x = *y = NULL;
    if (v && labels && (dtype != OPR_F32 || data)) {
        resnet_data_draw(seed, first, n, v, labels);
        for (int64_t i = 0; dtype == OPR_F32 && i < n * per; i++) ((float *)data)[i] = (float)v[i];
        *x = opr_tensor_from_data(ctx, dtype, 4, (int64_t[]){n, 3, RESNET_DATA_SIZE, RESNET_DATA_SIZE},
                                  dtype == OPR_F32 ? data : (void *)v, dev);
        *y = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){n}, labels, dev);
    }
    free(v);
    free(labels);
    free(data);
    if (!*x || !*y) {
        opr_tensor_release(*x);
        opr_tensor_release(*y);
        *x = *y = NULL;
        return OPR_ERR_NOMEM;
    }
    return OPR_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

opr_status resnet_train(resnet_model *m, const resnet_train_opts *o, double *images_per_s)
{
    FILE *log = o->log ? o->log : stdout;
    resnet_sgd opt;
    if (resnet_sgd_init(&opt, m, o->lr, o->momentum, o->weight_decay)) return OPR_ERR_NOMEM;
    opr_ctx *ctx = opr_tensor_ctx(m->params[0]);
    const opr_device dev = opr_tensor_device(m->params[0]);
    opr_status rc = OPR_OK;
    const double t0 = now_s();
    double tlog = t0;
    for (int step = 0; step < o->steps && !rc; step++) {
        opr_tensor *x, *y, *loss = NULL;
        rc = resnet_batch(ctx, m->cfg.dtype, dev, o->data_seed, (int64_t)step * o->batch, o->batch, &x, &y);
        if (!rc) rc = resnet_model_forward(m, x, y, true, &loss, NULL);
        if (!rc && step == 0 && o->walk) opr_autograd_walk(loss, o->walk, o->walk_ud);
        if (!rc) rc = opr_backward(loss, NULL, NULL);
        double lv = 0;
        if (!rc) rc = opr_tensor_copy_to_host_f64(loss, &lv, 1);
        /* the learning rate falls linearly to 0 over the run (o->decay), which settles the
         * weights the batch norms' running statistics describe */
        if (o->decay) opt.lr = o->lr * (1 - (double)step / o->steps);
        if (!rc) rc = resnet_sgd_step(&opt, m);
        if (!rc && o->losses) o->losses[step] = lv;
        if (!rc && o->log_every && (step % o->log_every == 0 || step == o->steps - 1)) {
            const double t = now_s();
            const int done = step % o->log_every == 0 ? (step ? o->log_every : 1) : step % o->log_every;
            fprintf(log, "step %4d  loss %.4f  %.0f images/s\n", step, lv, done * o->batch / (t - tlog));
            fflush(log);
            tlog = t;
        }
        opr_tensor_release(x);
        opr_tensor_release(y);
        opr_tensor_release(loss);
    }
    if (images_per_s) *images_per_s = o->steps * o->batch / (now_s() - t0);
    resnet_sgd_free(&opt);
    return rc;
}

opr_status resnet_accuracy(resnet_model *m, uint64_t seed, int64_t first, int n, double *accuracy)
{
    opr_ctx *ctx = opr_tensor_ctx(m->params[0]);
    const bool prev = opr_grad_mode_set(false);
    int right = 0;
    opr_status rc = OPR_OK;
    for (int64_t at = first; at < first + n && !rc; at += 64) {
        const int k = (int)(first + n - at < 64 ? first + n - at : 64);
        opr_tensor *x, *y, *logits = NULL;
        rc = resnet_batch(ctx, m->cfg.dtype, opr_tensor_device(m->params[0]), seed, at, k, &x, &y);
        if (!rc) rc = resnet_model_forward(m, x, NULL, false, NULL, &logits);
        double *lv = rc ? NULL : malloc((size_t)k * (size_t)m->cfg.num_classes * sizeof *lv);
        int64_t labels[64];
        if (!rc && (!lv || opr_tensor_copy_to_host_f64(logits, lv, (int64_t)k * m->cfg.num_classes) ||
                    opr_tensor_copy_to_host(y, labels, (size_t)k * sizeof *labels)))
            rc = OPR_ERR_BACKEND;
        for (int i = 0; !rc && i < k; i++) {
            int best = 0;
            for (int c = 1; c < m->cfg.num_classes; c++)
                if (lv[i * m->cfg.num_classes + c] > lv[i * m->cfg.num_classes + best]) best = c;
            right += best == labels[i];
        }
        free(lv);
        opr_tensor_release(x);
        opr_tensor_release(y);
        opr_tensor_release(logits);
    }
    opr_grad_mode_set(prev);
    *accuracy = n ? (double)right / n : 0;
    return rc;
}
