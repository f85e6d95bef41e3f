/* Per-sample gradients with opr_vmap: one DP-SGD step of an MLP 2-32-3 on a
 * three-spirals data set (f64, one batch of 64 points).
 *
 *   1. per-sample gradients: opr_vmap over the batch of a callback that computes one
 *      sample's cross-entropy loss and opr_autograd_grad of it with respect to the
 *      weights (functorch's vmap(grad(loss)));
 *   2. each sample's gradient norm over all weights, clipped to at most CLIP;
 *   3. the clipped gradients averaged (the noise of DP-SGD is left out: it would only
 *      make the comparison below harder to read).
 *
 * The same step is then computed the slow way, one backward pass per sample, and the
 * two must agree to 1e-12. Built and run by ctest (tests/CMakeLists.txt); it prints
 * the norms' range and the largest difference. Exit status 0 when they agree. */
#include <opreg/opreg.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 64, HIDDEN = 32, CLASSES = 3, NPARAMS = 4 };
#define CLIP 1.0

static opr_ctx *ctx;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static opr_tensor *call(const char *op, const opr_value *args, int n)
{
    opr_tensor *out = NULL;
    if (opr_call_by_name(ctx, op, args, n, &out, 1)) return NULL;
    return out;
}

/* The model: w1 [32, 2], b1 [32], w2 [3, 32], b2 [3]. */
static opr_tensor *params[NPARAMS];

/* One sample's loss: -log_softmax(w2 relu(w1 x + b1) + b2)[label]. x [2], label [1]. */
static opr_tensor *sample_loss(opr_tensor *x, opr_tensor *label)
{
    opr_tensor *h = call("linear", (opr_value[]){opr_v_tensor(x), opr_v_tensor(params[0]), opr_v_tensor(params[1])}, 3);
    opr_tensor *r = h ? call("relu", (opr_value[]){opr_v_tensor(h)}, 1) : NULL;
    opr_tensor *z = r ? call("linear", (opr_value[]){opr_v_tensor(r), opr_v_tensor(params[2]), opr_v_tensor(params[3])}, 3) : NULL;
    opr_tensor *lp = z ? call("log_softmax", (opr_value[]){opr_v_tensor(z), opr_v_int(0)}, 2) : NULL;
    opr_tensor *picked = lp ? call("gather", (opr_value[]){opr_v_tensor(lp), opr_v_int(0), opr_v_tensor(label)}, 3) : NULL;
    opr_tensor *s = picked ? call("sum", (opr_value[]){opr_v_tensor(picked)}, 1) : NULL;
    opr_tensor *loss = s ? call("neg", (opr_value[]){opr_v_tensor(s)}, 1) : NULL;
    opr_tensor *tmp[] = {h, r, z, lp, picked, s};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) opr_tensor_release(tmp[i]);
    return loss;
}

/* The vmap callback: in = {x, label} of one sample; out = the gradients of its loss. */
static opr_status per_sample_grad(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)ud; (void)nin; (void)nout;
    opr_tensor *loss = sample_loss(in[0], in[1]);
    if (!loss) return OPR_ERR_INVALID;
    opr_status rc = opr_autograd_grad(&loss, NULL, 1, params, NPARAMS, out, NULL);
    opr_tensor_release(loss);
    return rc;
}

/* Clipped and averaged: grads[p] is [BATCH, ...param shape] (f64 on the host). */
static void dp_average(double *const *grads, const int64_t *numel, double *avg[NPARAMS], double *norm_lo, double *norm_hi)
{
    *norm_lo = INFINITY;
    *norm_hi = 0;
    for (int p = 0; p < NPARAMS; p++)
        for (int64_t i = 0; i < numel[p]; i++) avg[p][i] = 0;
    for (int s = 0; s < BATCH; s++) {
        double sq = 0;
        for (int p = 0; p < NPARAMS; p++)
            for (int64_t i = 0; i < numel[p]; i++) sq += grads[p][s * numel[p] + i] * grads[p][s * numel[p] + i];
        const double norm = sqrt(sq), scale = norm > CLIP ? CLIP / norm : 1.0;
        if (norm < *norm_lo) *norm_lo = norm;
        if (norm > *norm_hi) *norm_hi = norm;
        for (int p = 0; p < NPARAMS; p++)
            for (int64_t i = 0; i < numel[p]; i++) avg[p][i] += grads[p][s * numel[p] + i] * scale / BATCH;
    }
}

int main(void)
{
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "per_sample_grads: %s\n", opr_last_error()); return 1; }
    /* three spirals, 64 points */
    double xs[BATCH * 2];
    int64_t ys[BATCH];
    for (int k = 0; k < BATCH; k++) {
        const int c = k % CLASSES;
        const double r = (double)(k / CLASSES + 1) / (BATCH / CLASSES + 1);
        const double th = c * 2.0 * M_PI / CLASSES + r * 3.5 + 0.15 * (uniform() - 0.5);
        xs[2 * k] = r * cos(th);
        xs[2 * k + 1] = r * sin(th);
        ys[k] = c;
    }
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){BATCH, 2}, xs, OPR_CPU);
    opr_tensor *y = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){BATCH, 1}, ys, OPR_CPU);
    const int64_t shapes[NPARAMS][2] = {{HIDDEN, 2}, {HIDDEN, 0}, {CLASSES, HIDDEN}, {CLASSES, 0}};
    int64_t numel[NPARAMS];
    for (int p = 0; p < NPARAMS; p++) {
        const int nd = shapes[p][1] ? 2 : 1;
        numel[p] = shapes[p][0] * (nd == 2 ? shapes[p][1] : 1);
        double *v = malloc((size_t)numel[p] * sizeof *v);
        for (int64_t i = 0; i < numel[p]; i++) v[i] = (uniform() * 2 - 1) * (nd == 2 ? 1.2 : 0.1);
        params[p] = opr_tensor_from_data(ctx, OPR_F64, nd, shapes[p], v, OPR_CPU);
        free(v);
        opr_set_requires_grad(params[p], true);
    }

    /* 1. per-sample gradients, all at once */
    opr_tensor *in[2] = {x, y}, *pg[NPARAMS];
    if (opr_vmap(ctx, per_sample_grad, NULL, in, (int[]){0, 0}, 2, pg, NULL, NPARAMS, NULL)) {
        fprintf(stderr, "per_sample_grads: opr_vmap: %s\n", opr_last_error());
        return 1;
    }
    double *fast[NPARAMS], *slow[NPARAMS], *avg_fast[NPARAMS], *avg_slow[NPARAMS];
    for (int p = 0; p < NPARAMS; p++) {
        fast[p] = malloc((size_t)(BATCH * numel[p]) * sizeof(double));
        slow[p] = malloc((size_t)(BATCH * numel[p]) * sizeof(double));
        avg_fast[p] = malloc((size_t)numel[p] * sizeof(double));
        avg_slow[p] = malloc((size_t)numel[p] * sizeof(double));
        opr_tensor_copy_to_host(pg[p], fast[p], (size_t)(BATCH * numel[p]) * sizeof(double));
    }

    /* the loop: one backward pass per sample */
    for (int s = 0; s < BATCH; s++) {
        opr_tensor *xi = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, xs + 2 * s, OPR_CPU);
        opr_tensor *yi = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){1}, ys + s, OPR_CPU);
        opr_tensor *loss = sample_loss(xi, yi), *g[NPARAMS] = {NULL};
        if (!loss || opr_autograd_grad(&loss, NULL, 1, params, NPARAMS, g, NULL)) {
            fprintf(stderr, "per_sample_grads: the loop: %s\n", opr_last_error());
            return 1;
        }
        for (int p = 0; p < NPARAMS; p++) {
            opr_tensor_copy_to_host(g[p], slow[p] + s * numel[p], (size_t)numel[p] * sizeof(double));
            opr_tensor_release(g[p]);
        }
        opr_tensor_release(loss);
        opr_tensor_release(xi);
        opr_tensor_release(yi);
    }

    /* 2 and 3: clip each sample's gradient to norm CLIP, average */
    double lo_f, hi_f, lo_s, hi_s, worst = 0;
    dp_average(fast, numel, avg_fast, &lo_f, &hi_f);
    dp_average(slow, numel, avg_slow, &lo_s, &hi_s);
    for (int p = 0; p < NPARAMS; p++) {
        for (int64_t i = 0; i < BATCH * numel[p]; i++) worst = fmax(worst, fabs(fast[p][i] - slow[p][i]));
        for (int64_t i = 0; i < numel[p]; i++) worst = fmax(worst, fabs(avg_fast[p][i] - avg_slow[p][i]));
    }
    printf("per-sample gradient norms %.4f .. %.4f (loop %.4f .. %.4f), clipped at %.1f and averaged\n", lo_f, hi_f,
           lo_s, hi_s, CLIP);
    printf("largest difference between opr_vmap and the loop: %.3g\n", worst);
    const bool ok = worst <= 1e-12;
    printf("%s\n", ok ? "per-sample gradients agree" : "per-sample gradients DIFFER");

    for (int p = 0; p < NPARAMS; p++) {
        free(fast[p]); free(slow[p]); free(avg_fast[p]); free(avg_slow[p]);
        opr_tensor_release(pg[p]);
        opr_tensor_release(params[p]);
    }
    opr_tensor_release(x);
    opr_tensor_release(y);
    return opr_ctx_free(ctx) == 0 && ok ? 0 : 1;
}
