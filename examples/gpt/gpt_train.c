/* The GPT example's training loop and sampling (see gpt_train.h). */
#include "gpt_train.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An i64 [rows, cols] tensor of host tokens on the model's device. */
static opr_tensor *token_tensor(opr_ctx *ctx, const int64_t *tokens, int64_t rows, int64_t cols, opr_device dev)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){rows, cols}, tokens, dev);
    if (!t) gpt_fail(OPR_ERR_NOMEM, "gpt: a token tensor: %s", opr_last_error());
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double gpt_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The members' step check of the last opr_ddp_backward, in us: the time between the
 * event before OPR_DDP_STEP_CHECKED (the last bucket in) and it; 0 when it did not run. */
static double step_check_us(const opr_ddp *ddp)
{
    int n;
    const opr_ddp_event *ev = opr_ddp_events(ddp, &n);
    for (int i = 1; ev && i < n; i++)
        if (ev[i].kind == OPR_DDP_STEP_CHECKED) {
            double before = 0;
            for (int k = 0; k < i; k++) before = fmax(before, ev[k].t_us);
            return ev[i].t_us - before;
        }
    return 0;
}

opr_status gpt_train(gpt_model *m, const gpt_text *text, const gpt_train_opts *o, double *tokens_per_s)
{
    const int B = o->batch, T = m->cfg.block_size;
    const int ranks = o->ddp && o->ranks > 1 ? o->ranks : 1, share = B / ranks, first = o->ddp ? o->rank * share : 0;
    if (B % ranks) return gpt_fail(OPR_ERR_INVALID, "gpt_train: a batch of %d does not split over %d ranks", B, ranks);
    FILE *log = o->log ? o->log : stdout;
    opr_ctx *ctx = opr_tensor_ctx(m->params[0]);
    const opr_device dev = opr_tensor_device(m->params[0]);
    int64_t *x = malloc((size_t)B * (size_t)T * sizeof *x), *y = malloc((size_t)B * (size_t)T * sizeof *y);
    gpt_adamw opt = {0};
    opr_status rc = !x || !y ? gpt_fail(OPR_ERR_NOMEM, "gpt_train: out of memory") : gpt_adamw_init(&opt, m, o->lr, o->weight_decay);
    gpt_rng batches = gpt_rng_new(o->seed + 1);
    const double t0 = now_s();
    double t_last = t0;
    int step_last = 0;
    for (int step = 1; !rc && step <= o->steps; step++) {
        const double t_step = now_s();
        rc = gpt_text_batch(text, &batches, B, T, x, y);
        opr_tensor *xt = rc ? NULL : token_tensor(ctx, x + (size_t)first * T, share, T, dev);
        opr_tensor *yt = xt ? token_tensor(ctx, y + (size_t)first * T, share, T, dev) : NULL;
        opr_tensor *loss = NULL;
        if (!rc && (!xt || !yt)) rc = OPR_ERR_NOMEM;
        if (!rc) rc = gpt_model_forward(m, xt, yt, true, &loss, NULL);
        if (!rc && (o->ddp ? opr_ddp_backward(o->ddp, loss, NULL) : opr_backward(loss, NULL, NULL)))
            rc = gpt_fail(OPR_ERR_BACKEND, "gpt_train: backward: %s", opr_last_error());
        if (!rc && o->ddp && o->check_us) o->check_us[step - 1] = step_check_us(o->ddp);
        if (!rc) rc = gpt_adamw_step(&opt, m);
        double lv = NAN;
        if (!rc && o->ddp) { /* the group's mean: the loss of the whole batch */
            opr_value a[3] = {opr_v_tensor(loss), opr_v_string("mean"), opr_v_int(0)};
            opr_tensor *mean = NULL;
            const bool grad_was = opr_grad_mode_set(false);
            if (opr_call(opr_op_find(ctx, "all_reduce"), a, 3, &mean, 1))
                rc = gpt_fail(OPR_ERR_BACKEND, "gpt_train: the group's loss: %s", opr_last_error());
            opr_grad_mode_set(grad_was);
            GPT_RELEASE(loss);
            loss = mean;
        }
        if (!rc && opr_tensor_copy_to_host_f64(loss, &lv, 1)) rc = gpt_fail(OPR_ERR_BACKEND, "gpt_train: %s", opr_last_error());
        GPT_RELEASE(xt, yt, loss);
        if (rc) break;
        if (o->losses) o->losses[step - 1] = lv;
        if (o->step_us) o->step_us[step - 1] = 1e6 * (now_s() - t_step);
        if (o->log_every > 0 && (step == 1 || step % o->log_every == 0 || step == o->steps)) {
            const double t = now_s();
            fprintf(log, "  step %5d/%d  loss %.4f  %8.0f tokens/s\n", step, o->steps, lv,
                    (double)(step - step_last) * B * T / (t - t_last));
            fflush(log);
            t_last = t;
            step_last = step;
        }
    }
    if (tokens_per_s) *tokens_per_s = (double)o->steps * B * T / (now_s() - t0);
    gpt_adamw_free(&opt);
    free(x);
    free(y);
    return rc;
}

opr_status gpt_sample(gpt_model *m, const gpt_text *text, uint64_t seed, int n_chars, double temperature, char *out)
{
    if (n_chars < 0 || !(temperature > 0))
        return gpt_fail(OPR_ERR_INVALID, "gpt_sample: %d characters at temperature %g (>= 0 and > 0)", n_chars, temperature);
    const int T = m->cfg.block_size, V = text->vocab_size;
    if (V != m->cfg.vocab_size)
        return gpt_fail(OPR_ERR_INVALID, "gpt_sample: the text has %d tokens, the model %d", V, m->cfg.vocab_size);
    opr_ctx *ctx = opr_tensor_ctx(m->params[0]);
    const opr_device dev = opr_tensor_device(m->params[0]);
    int64_t *ctx_tokens = malloc((size_t)(n_chars + 1) * sizeof *ctx_tokens);
    double *logits = malloc((size_t)T * (size_t)V * sizeof *logits), *p = malloc((size_t)V * sizeof *p);
    if (!ctx_tokens || !logits || !p) {
        free(ctx_tokens); free(logits); free(p);
        return gpt_fail(OPR_ERR_NOMEM, "gpt_sample: out of memory");
    }
    ctx_tokens[0] = text->token_of['\n'] >= 0 ? text->token_of['\n'] : 0;
    gpt_rng rng = gpt_rng_new(seed + 2);
    const bool grad_was = opr_grad_mode_set(false);
    opr_status rc = OPR_OK;
    for (int i = 0; i < n_chars && !rc; i++) {
        const int len = i + 1 < T ? i + 1 : T;
        opr_tensor *idx = token_tensor(ctx, ctx_tokens + (i + 1 - len), 1, len, dev), *lt = NULL;
        rc = idx ? gpt_model_forward(m, idx, NULL, false, NULL, &lt) : OPR_ERR_NOMEM;
        if (!rc && opr_tensor_copy_to_host_f64(lt, logits, (int64_t)len * V))
            rc = gpt_fail(OPR_ERR_BACKEND, "gpt_sample: %s", opr_last_error());
        GPT_RELEASE(idx, lt);
        if (rc) break;
        const double *last = logits + (size_t)(len - 1) * (size_t)V;
        double top = last[0], total = 0;
        for (int v = 1; v < V; v++) top = fmax(top, last[v]);
        for (int v = 0; v < V; v++) total += p[v] = exp((last[v] - top) / temperature);
        double u = gpt_rng_uniform(&rng) * total;
        int pick = V - 1;
        for (int v = 0; v < V; v++)
            if ((u -= p[v]) < 0) { pick = v; break; }
        ctx_tokens[i + 1] = pick;
        out[i] = (char)text->chars[pick];
    }
    opr_grad_mode_set(grad_was);
    out[rc ? 0 : n_chars] = '\0';
    free(ctx_tokens);
    free(logits);
    free(p);
    return rc;
}
