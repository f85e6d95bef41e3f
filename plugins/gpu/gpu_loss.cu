/* Classification losses (registry/ops/nn_loss_attention.yaml): nll_loss,
 * cross_entropy and the kernels of their gradients, with the row layout of
 * plugins/cpu/cpu_loss.c: [N, C, d...] is N * prod(d) rows of C classes D = prod(d)
 * elements apart. The targets are copied to the host and checked before any kernel
 * runs (an out-of-range class is an error, never an out-of-bounds read), and the
 * summed target weight of "mean" is computed there too. One thread per row; the
 * reductions sum the per-row values in one thread, in double, in row order, so the
 * result does not depend on the launch. */
#include "gpu_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { GL_NONE, GL_MEAN, GL_SUM };

/* What the host learnt of a call's targets and weights. */
struct gl_call {
    int64_t n = 0, c = 0, d = 1, rows = 0, ignore = -100;
    int reduction = GL_MEAN;
    double wsum_targets = 0, wsum_classes = 0;
    gk_buf xb, tb, wb;
    const void *x = nullptr, *w = nullptr;
    const int64_t *t = nullptr;
};

static int gl_reduction(const opr_kernel_call *c, int i)
{
    const char *s = c->args[i]->kind == OPR_ARG_STRING ? c->args[i]->u.s : "";
    return !strcmp(s, "none") ? GL_NONE : !strcmp(s, "sum") ? GL_SUM : GL_MEAN;
}

/* Reads the layout from shape, copies target and weight to the host, checks the targets
 * and sums the weights. */
static int gl_prepare(const gk_ctx *k, const int64_t *shape, int32_t ndim, const opr_tensor_view *target,
                      const opr_tensor_view *w, gl_call *g)
{
    g->n = ndim == 1 ? 1 : shape[0];
    g->c = ndim == 1 ? shape[0] : shape[1];
    for (int32_t i = 2; i < ndim; i++) g->d *= shape[i];
    g->rows = g->n * g->d;
    if (target->numel != g->rows)
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: target has %lld elements for %lld rows", k->op,
                       (long long)target->numel, (long long)g->rows);
    int rc;
    const void *td;
    if ((rc = gk_dense(k, target, &g->tb, &td))) return rc;
    g->t = (const int64_t *)td;
    if (w && (rc = gk_dense(k, w, &g->wb, &g->w))) return rc;
    int64_t *th = (int64_t *)malloc((size_t)(g->rows ? g->rows : 1) * sizeof(int64_t));
    double *wh = (double *)malloc((size_t)(g->c ? g->c : 1) * sizeof(double));
    void *wraw = malloc((size_t)(g->c ? g->c : 1) * sizeof(double));
    if (!th || !wh || !wraw) {
        free(th), free(wh), free(wraw);
        return GK_FAIL(k->call, OPR_ERR_NOMEM, "%s: out of memory", k->op);
    }
    rc = gk_to_host(k, th, g->t, (size_t)g->rows * sizeof(int64_t));
    if (!rc && w) rc = gk_to_host(k, wraw, g->w, (size_t)g->c * gk_dtype_size(w->dtype));
    for (int64_t i = 0; !rc && i < g->c; i++)
        wh[i] = !w ? 1.0 : w->dtype == OPR_F32 ? ((const float *)wraw)[i] : ((const double *)wraw)[i];
    for (int64_t r = 0; !rc && r < g->rows; r++) {
        const int64_t t = th[r];
        if (t == g->ignore) continue;
        if (t < 0 || t >= g->c)
            rc = GK_FAIL(k->call, OPR_ERR_INVALID, "%s: target %lld at index %lld is out of range for %lld classes (ignore_index %lld)",
                         k->op, (long long)t, (long long)r, (long long)g->c, (long long)g->ignore);
        else g->wsum_targets += wh[t];
    }
    for (int64_t i = 0; i < g->c; i++) g->wsum_classes += wh[i];
    free(th), free(wh), free(wraw);
    return rc;
}

GK_DEV int64_t gl_elem(int64_t c, int64_t d, int64_t r, int64_t cls) { return (r / d) * c * d + cls * d + r % d; }

template <class T> GK_DEV double gl_w(const T *w, int64_t cls) { return w ? (double)w[cls] : 1.0; }

/* Per row: the nll part (and, with eps, the smoothing part) of the loss, into part[r]
 * and part[rows + r]; with log_softmax the input is logits, else log-probabilities. */
template <class T>
__global__ void k_gl_rows(int64_t rows, int64_t c, int64_t d, const T *x, const int64_t *t, const T *w, int64_t ignore,
                          bool log_softmax, bool smooth, double *part)
{
    GK_LOOP(r, rows)
    {
        const int64_t cls = t[r];
        double nll = 0, sm = 0;
        if (cls != ignore) {
            double lse = 0;
            if (log_softmax) {
                double mx = -INFINITY, s = 0;
                for (int64_t k = 0; k < c; k++) mx = fmax(mx, (double)x[gl_elem(c, d, r, k)]);
                for (int64_t k = 0; k < c; k++) s += exp((double)x[gl_elem(c, d, r, k)] - mx);
                lse = mx + log(s);
            }
            nll = -gl_w(w, cls) * ((double)x[gl_elem(c, d, r, cls)] - lse);
            for (int64_t k = 0; smooth && k < c; k++) sm -= gl_w(w, k) * ((double)x[gl_elem(c, d, r, k)] - lse);
        }
        part[r] = nll;
        part[rows + r] = sm;
    }
}

/* out = a * nll + b * smooth per row (reduction none) or summed over the rows. */
template <class T>
__global__ void k_gl_combine(int64_t rows, const double *part, double a, double b, bool reduce, T *out)
{
    if (reduce) {
        if (blockIdx.x != 0 || threadIdx.x != 0) return;
        double sn = 0, ss = 0;
        for (int64_t r = 0; r < rows; r++) sn += part[r], ss += part[rows + r];
        out[0] = (T)(a * sn + b * ss);
        return;
    }
    GK_LOOP(r, rows) out[r] = (T)(a * part[r] + b * part[rows + r]);
}

/* Gradient rows: a_r = scale_nll * g_r * w[t], b_r = scale_smooth * g_r;
 * out = a_r (p - onehot) + b_r (p wsum - w) with p = softmax (cross entropy), or
 * -a_r onehot (nll). */
template <class T>
__global__ void k_gl_grad(int64_t rows, int64_t c, int64_t d, const T *x, const int64_t *t, const T *w, int64_t ignore,
                          const T *g, bool g_per_row, double scale_nll, double scale_smooth, double wsum, bool softmax,
                          T *out)
{
    GK_LOOP(r, rows)
    {
        const int64_t cls = t[r];
        if (cls == ignore) {
            for (int64_t k = 0; k < c; k++) out[gl_elem(c, d, r, k)] = (T)0;
            continue;
        }
        const double gr = (double)g[g_per_row ? r : 0];
        const double a = scale_nll * gr * gl_w(w, cls), b = scale_smooth * gr;
        if (!softmax) {
            for (int64_t k = 0; k < c; k++) out[gl_elem(c, d, r, k)] = (T)(k == cls ? -a : 0.0);
            continue;
        }
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < c; k++) mx = fmax(mx, (double)x[gl_elem(c, d, r, k)]);
        for (int64_t k = 0; k < c; k++) s += exp((double)x[gl_elem(c, d, r, k)] - mx);
        for (int64_t k = 0; k < c; k++) {
            const double p = exp((double)x[gl_elem(c, d, r, k)] - mx) / s;
            out[gl_elem(c, d, r, k)] = (T)(a * (p - (k == cls ? 1.0 : 0.0)) + b * (p * wsum - gl_w(w, k)));
        }
    }
}

/* nll_loss(self, target, weight, reduction, ignore_index) and cross_entropy(...,
 * label_smoothing): the same pass, with log_softmax for cross_entropy. */
static int gl_forward(const opr_kernel_call *c, const char *op, bool ce)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *target = gk_arg_t(c, 1), *w = gk_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    gl_call g;
    g.reduction = gl_reduction(c, 3);
    g.ignore = gk_arg_i(c, 4);
    const double eps = ce ? gk_arg_d(c, 5) : 0.0;
    if ((rc = gl_prepare(&k, x->shape, x->ndim, target, w, &g))) return rc;
    if ((rc = gk_dense(&k, x, &g.xb, &g.x))) return rc;
    const bool mean = g.reduction == GL_MEAN, reduce = g.reduction != GL_NONE;
    /* "mean": both parts by the summed target weight (PyTorch 1.13) */
    const double div = mean ? g.wsum_targets : 1.0;
    const double a = (1 - eps) / div, b = g.c ? eps / (double)g.c / div : 0.0;
    gk_buf part;
    if ((rc = part.alloc(&k, (size_t)(2 * g.rows) * sizeof(double)))) return rc;
    if (g.rows == 0 && !reduce) return OPR_OK;
    if (x->dtype == OPR_F32) {
        gk_launch(k_gl_rows<float>, gk_blocks(g.rows), GK_THREADS, 0, k.stream, g.rows, g.c, g.d, (const float *)g.x, g.t,
                  (const float *)g.w, g.ignore, ce, eps != 0, part.as<double>());
        gk_launch(k_gl_combine<float>, reduce ? 1 : gk_blocks(g.rows), reduce ? 1 : GK_THREADS, 0, k.stream, g.rows,
                  (const double *)part.p, a, b, reduce, (float *)out->data);
    } else {
        gk_launch(k_gl_rows<double>, gk_blocks(g.rows), GK_THREADS, 0, k.stream, g.rows, g.c, g.d, (const double *)g.x,
                  g.t, (const double *)g.w, g.ignore, ce, eps != 0, part.as<double>());
        gk_launch(k_gl_combine<double>, reduce ? 1 : gk_blocks(g.rows), reduce ? 1 : GK_THREADS, 0, k.stream, g.rows,
                  (const double *)part.p, a, b, reduce, (double *)out->data);
    }
    return gk_launched(&k, op);
}

static int k_nll_loss(const opr_kernel_call *c) { return gl_forward(c, "nll_loss", false); }
static int k_cross_entropy(const opr_kernel_call *c) { return gl_forward(c, "cross_entropy", true); }

/* nll_loss_backward(grad, target, weight, self_sizes, reduction, ignore_index) and
 * cross_entropy_backward(grad, self, target, weight, reduction, ignore_index,
 * label_smoothing). */
static int gl_backward(const opr_kernel_call *c, const char *op, bool ce)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const int o = ce ? 1 : 0; /* cross_entropy_backward has self after grad */
    const opr_tensor_view *gv = gk_arg_t(c, 0), *x = ce ? gk_arg_t(c, 1) : NULL, *target = gk_arg_t(c, 1 + o),
                          *w = gk_arg_t(c, 2 + o);
    opr_tensor_view *out = c->outputs[0];
    gl_call g;
    g.reduction = gl_reduction(c, 4);
    g.ignore = gk_arg_i(c, 5);
    const double eps = ce ? gk_arg_d(c, 6) : 0.0;
    if ((rc = gl_prepare(&k, out->shape, out->ndim, target, w, &g))) return rc;
    if (x && (rc = gk_dense(&k, x, &g.xb, &g.x))) return rc;
    gk_buf gb;
    const void *gd;
    if ((rc = gk_dense(&k, gv, &gb, &gd))) return rc;
    const bool mean = g.reduction == GL_MEAN;
    /* "mean": both parts by the summed target weight (PyTorch 1.13) */
    const double div = mean ? g.wsum_targets : 1.0;
    const double a = (1 - eps) / div, b = g.c ? eps / (double)g.c / div : 0.0;
    const bool per_row = g.reduction == GL_NONE;
    if (g.rows == 0) return OPR_OK;
    if (out->dtype == OPR_F32)
        gk_launch(k_gl_grad<float>, gk_blocks(g.rows), GK_THREADS, 0, k.stream, g.rows, g.c, g.d, (const float *)g.x, g.t,
                  (const float *)g.w, g.ignore, (const float *)gd, per_row, a, b, g.wsum_classes, ce, (float *)out->data);
    else
        gk_launch(k_gl_grad<double>, gk_blocks(g.rows), GK_THREADS, 0, k.stream, g.rows, g.c, g.d, (const double *)g.x,
                  g.t, (const double *)g.w, g.ignore, (const double *)gd, per_row, a, b, g.wsum_classes, ce,
                  (double *)out->data);
    return gk_launched(&k, op);
}

static int k_nll_loss_backward(const opr_kernel_call *c) { return gl_backward(c, "nll_loss_backward", false); }
static int k_cross_entropy_backward(const opr_kernel_call *c) { return gl_backward(c, "cross_entropy_backward", true); }

/* The gradient with respect to the class weights (plugins/cpu/cpu_loss.c says how),
 * in one thread: C accumulators in acc, then out. */
template <class T>
__global__ void k_gl_weight_grad(int64_t rows, int64_t c, int64_t d, const T *x, const int64_t *t, const T *w,
                                 int64_t ignore, const T *g, bool per_row, double eps, bool softmax, bool mean,
                                 double wsum, double *acc, T *out)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double loss = 0;
    for (int64_t k = 0; k < c; k++) acc[k] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t cls = t[r];
        if (cls == ignore) continue;
        double lse = 0;
        if (softmax) {
            double mx = -INFINITY, s = 0;
            for (int64_t k = 0; k < c; k++) mx = fmax(mx, (double)x[gl_elem(c, d, r, k)]);
            for (int64_t k = 0; k < c; k++) s += exp((double)x[gl_elem(c, d, r, k)] - mx);
            lse = mx + log(s);
        }
        const double gr = per_row ? (double)g[r] : 1.0, lpt = (double)x[gl_elem(c, d, r, cls)] - lse;
        acc[cls] -= gr * (1 - eps) * lpt;
        loss -= (1 - eps) * (double)w[cls] * lpt;
        for (int64_t k = 0; eps != 0 && k < c; k++) {
            const double lp = (double)x[gl_elem(c, d, r, k)] - lse;
            acc[k] -= gr * eps / (double)c * lp;
            loss -= eps / (double)c * (double)w[k] * lp;
        }
    }
    if (mean) {
        loss /= wsum;
        for (int64_t r = 0; r < rows; r++)
            if (t[r] != ignore) acc[t[r]] -= loss;
    }
    const double g0 = per_row ? 1.0 : (double)g[0];
    for (int64_t k = 0; k < c; k++) out[k] = (T)(g0 * acc[k] / (mean ? wsum : 1.0));
}

/* loss_weight_backward(grad, self, target, weight, reduction, ignore_index,
 * label_smoothing, log_softmax) */
static int k_loss_weight_backward(const opr_kernel_call *c)
{
    static const char *op = "loss_weight_backward";
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *gv = gk_arg_t(c, 0), *x = gk_arg_t(c, 1), *target = gk_arg_t(c, 2), *w = gk_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    gl_call g;
    g.reduction = gl_reduction(c, 4);
    g.ignore = gk_arg_i(c, 5);
    const double eps = gk_arg_d(c, 6);
    const bool softmax = gk_arg_b(c, 7);
    if ((rc = gl_prepare(&k, x->shape, x->ndim, target, w, &g))) return rc;
    if ((rc = gk_dense(&k, x, &g.xb, &g.x))) return rc;
    gk_buf gb, acc;
    const void *gd;
    if ((rc = gk_dense(&k, gv, &gb, &gd)) || (rc = acc.alloc(&k, (size_t)g.c * sizeof(double)))) return rc;
    const bool per_row = g.reduction == GL_NONE, mean = g.reduction == GL_MEAN;
    if (out->dtype == OPR_F32)
        gk_launch(k_gl_weight_grad<float>, 1, 1, 0, k.stream, g.rows, g.c, g.d, (const float *)g.x, g.t,
                  (const float *)g.w, g.ignore, (const float *)gd, per_row, eps, softmax, mean, g.wsum_targets,
                  acc.as<double>(), (float *)out->data);
    else
        gk_launch(k_gl_weight_grad<double>, 1, 1, 0, k.stream, g.rows, g.c, g.d, (const double *)g.x, g.t,
                  (const double *)g.w, g.ignore, (const double *)gd, per_row, eps, softmax, mean, g.wsum_targets,
                  acc.as<double>(), (double *)out->data);
    return gk_launched(&k, op);
}

int gk_register_loss(opr_plugin *self)
{
    const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"nll_loss", k_nll_loss},           {"nll_loss_backward", k_nll_loss_backward},
        {"cross_entropy", k_cross_entropy}, {"cross_entropy_backward", k_cross_entropy_backward},
        {"loss_weight_backward", k_loss_weight_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, GK_FLOATS, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
