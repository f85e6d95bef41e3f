/* Classification losses (registry/ops/nn_loss_attention.yaml): nll_loss and
 * cross_entropy over class indices, and the kernels their gradients call. The
 * input is seen as rows (n, p) of C classes: [N, C, d...] has N * prod(d) rows whose
 * classes are D = prod(d) elements apart; [C] is one row. Losses are not on the hot
 * path of a step (one pass over the logits), so every element goes through the
 * strided accessors and sums are kept in double. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The row layout of a loss input and the reading of its arguments. */
typedef struct loss_rows {
    int64_t n, c, d;      /* batch, classes, positions per sample (rows = n * d) */
    bool has_weight;
    int64_t ignore_index;
    int reduction;        /* LOSS_NONE, LOSS_MEAN, LOSS_SUM */
} loss_rows;

enum { LOSS_NONE, LOSS_MEAN, LOSS_SUM };

static inline double ld(const opr_tensor_view *v, int64_t off)
{
    return v->dtype == OPR_F32 ? ((const float *)v->data)[off] : ((const double *)v->data)[off];
}
static inline void st(opr_tensor_view *v, int64_t off, double x)
{
    if (v->dtype == OPR_F32) ((float *)v->data)[off] = (float)x;
    else ((double *)v->data)[off] = x;
}
static inline int64_t target_at(const opr_tensor_view *t, int64_t r)
{
    return ((const int64_t *)t->data)[cpu_offset_of(t, r)];
}

static int parse_reduction(const opr_kernel_call *c, int i)
{
    const char *s = c->args[i]->kind == OPR_ARG_STRING ? c->args[i]->u.s : "";
    return !strcmp(s, "none") ? LOSS_NONE : !strcmp(s, "sum") ? LOSS_SUM : LOSS_MEAN;
}

/* Rows of an input of shape `shape` (ndim >= 1), class dim 1 (0 when 1-d). */
static void rows_of(const int64_t *shape, int32_t ndim, loss_rows *lr)
{
    lr->n = ndim == 1 ? 1 : shape[0];
    lr->c = ndim == 1 ? shape[0] : shape[1];
    lr->d = 1;
    for (int32_t k = 2; k < ndim; k++) lr->d *= shape[k];
}

/* Logical element index of class k of row r. */
static inline int64_t elem(const loss_rows *lr, int64_t r, int64_t k)
{
    return (r / lr->d) * lr->c * lr->d + k * lr->d + r % lr->d;
}

/* Every target is ignore_index or a class; fails naming the first that is neither. */
static int check_targets(const opr_kernel_call *c, const char *op, const opr_tensor_view *target, const loss_rows *lr)
{
    for (int64_t r = 0; r < lr->n * lr->d; r++) {
        int64_t t = target_at(target, r);
        if (t != lr->ignore_index && (t < 0 || t >= lr->c))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: target %lld at index %lld is out of range for %lld classes (ignore_index %lld)",
                            op, (long long)t, (long long)r, (long long)lr->c, (long long)lr->ignore_index);
    }
    return OPR_OK;
}

/* The rows of `shaped` (the input, or the gradient of nll_loss_backward), the reduction
 * and ignore_index at arguments first and first + 1, and the targets checked: one per
 * row, each ignore_index or a class. */
static int loss_rows_in(const opr_kernel_call *c, const char *op, const opr_tensor_view *shaped,
                        const opr_tensor_view *target, int first, loss_rows *lr)
{
    rows_of(shaped->shape, shaped->ndim, lr);
    lr->reduction = parse_reduction(c, first);
    lr->ignore_index = cpu_arg_i(c, first + 1);
    if (target->numel != lr->n * lr->d)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: target has %lld elements for %lld rows", op,
                        (long long)target->numel, (long long)(lr->n * lr->d));
    return check_targets(c, op, target, lr);
}

static inline double weight_of(const opr_tensor_view *w, int64_t k)
{
    return w ? ld(w, k * w->strides[0]) : 1.0;
}

/* The summed weight of the targets that are not ignored (their count without weights). */
static double target_weight_sum(const opr_tensor_view *target, const opr_tensor_view *w, const loss_rows *lr)
{
    double s = 0;
    for (int64_t r = 0; r < lr->n * lr->d; r++) {
        int64_t t = target_at(target, r);
        if (t != lr->ignore_index) s += weight_of(w, t);
    }
    return s;
}

/* nll_loss(self, target, weight, reduction, ignore_index) */
static int k_nll_loss(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *target = cpu_arg_t(c, 1), *w = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    loss_rows lr;
    int rc = loss_rows_in(c, "nll_loss", x, target, 3, &lr);
    if (rc != OPR_OK) return rc;
    double total = 0;
    for (int64_t r = 0; r < lr.n * lr.d; r++) {
        int64_t t = target_at(target, r);
        double l = t == lr.ignore_index ? 0.0 : -weight_of(w, t) * ld(x, cpu_offset_of(x, elem(&lr, r, t)));
        if (lr.reduction == LOSS_NONE) st(out, r, l);
        total += l;
    }
    if (lr.reduction == LOSS_SUM) st(out, 0, total);
    if (lr.reduction == LOSS_MEAN) st(out, 0, total / target_weight_sum(target, w, &lr));
    return OPR_OK;
}

/* nll_loss_backward(grad, target, weight, self_sizes, reduction, ignore_index) */
static int k_nll_loss_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0), *target = cpu_arg_t(c, 1), *w = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    loss_rows lr;
    int rc = loss_rows_in(c, "nll_loss_backward", out, target, 4, &lr);
    if (rc != OPR_OK) return rc;
    memset(out->data, 0, (size_t)out->numel * cpu_dtype_size(out->dtype));
    double g0 = lr.reduction == LOSS_NONE ? 0 : ld(g, 0);
    if (lr.reduction == LOSS_MEAN) g0 /= target_weight_sum(target, w, &lr);
    for (int64_t r = 0; r < lr.n * lr.d; r++) {
        int64_t t = target_at(target, r);
        if (t == lr.ignore_index) continue;
        double gr = lr.reduction == LOSS_NONE ? ld(g, cpu_offset_of(g, r)) : g0;
        st(out, elem(&lr, r, t), -weight_of(w, t) * gr);
    }
    return OPR_OK;
}

/* log_softmax of row r into logp and softmax into p (C doubles each). Rows of a
 * contiguous [N, C] input are read directly; the max, the exponentials and their sum
 * are vector loops (cpu_vmath.h: 1 ULP, partial sums in a fixed order). */
static void row_log_softmax(const opr_tensor_view *x, const loss_rows *lr, int64_t r, double *logp, double *p)
{
    const int64_t C = lr->c;
    if (lr->d == 1 && cpu_is_contiguous(x)) {
        if (x->dtype == OPR_F32)
            for (int64_t k = 0; k < C; k++) logp[k] = ((const float *)x->data)[r * C + k];
        else memcpy(logp, (const double *)x->data + r * C, (size_t)C * sizeof *logp);
    } else {
        for (int64_t k = 0; k < C; k++) logp[k] = ld(x, cpu_offset_of(x, elem(lr, r, k)));
    }
    const double mx = cpu_vm.max_f64(C, logp);
    cpu_vm.expsub_f64(C, logp, mx, p);
    const double s = cpu_vm.sum_f64(C, p), lse = mx + log(s);
    for (int64_t k = 0; k < C; k++) {
        logp[k] -= lse;
        p[k] /= s;
    }
}

/* The divisor of a "mean" cross entropy, for the target part and the smoothing part
 * alike: the summed weight of the targets that are not ignored (their count without
 * weights), as PyTorch 1.13 does; 1 for the other reductions. */
static double ce_divisor(const opr_tensor_view *target, const opr_tensor_view *w, const loss_rows *lr)
{
    return lr->reduction == LOSS_MEAN ? target_weight_sum(target, w, lr) : 1.0;
}

/* cross_entropy(self, target, weight, reduction, ignore_index, label_smoothing) */
static int k_cross_entropy(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *target = cpu_arg_t(c, 1), *w = cpu_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    loss_rows lr;
    const double eps = cpu_arg_d(c, 5);
    int rc = loss_rows_in(c, "cross_entropy", x, target, 3, &lr);
    if (rc != OPR_OK) return rc;
    double *logp = malloc((size_t)(lr.c ? 2 * lr.c : 1) * sizeof *logp), *p = logp + lr.c;
    if (!logp) return CPU_FAIL(c, OPR_ERR_NOMEM, "cross_entropy: out of memory for a row of %lld classes", (long long)lr.c);
    const double div = ce_divisor(target, w, &lr);
    double nll_sum = 0, smooth_sum = 0;
    for (int64_t r = 0; r < lr.n * lr.d; r++) {
        int64_t t = target_at(target, r);
        double nll = 0, smooth = 0;
        if (t != lr.ignore_index) {
            row_log_softmax(x, &lr, r, logp, p);
            nll = -weight_of(w, t) * logp[t];
            for (int64_t k = 0; eps != 0 && k < lr.c; k++) smooth -= weight_of(w, k) * logp[k];
        }
        if (lr.reduction == LOSS_NONE) st(out, r, (1 - eps) * nll + eps / (double)lr.c * smooth);
        nll_sum += nll;
        smooth_sum += smooth;
    }
    if (lr.reduction != LOSS_NONE)
        st(out, 0, ((1 - eps) * nll_sum + eps / (double)lr.c * smooth_sum) / div);
    free(logp);
    return OPR_OK;
}

/* cross_entropy_backward(grad, self, target, weight, reduction, ignore_index,
 * label_smoothing): per row, with p = softmax and g the row's output gradient,
 * (1 - e) g_nll w[t] (p - onehot(t)) + e / C g_smooth (p sum(w) - w). */
static int k_cross_entropy_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *target = cpu_arg_t(c, 2), *w = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    loss_rows lr;
    const double eps = cpu_arg_d(c, 6);
    int rc = loss_rows_in(c, "cross_entropy_backward", x, target, 4, &lr);
    if (rc != OPR_OK) return rc;
    double *logp = malloc((size_t)(lr.c ? 2 * lr.c : 1) * sizeof *logp), *p = logp + lr.c;
    if (!logp) return CPU_FAIL(c, OPR_ERR_NOMEM, "cross_entropy_backward: out of memory for a row of %lld classes", (long long)lr.c);
    const double div = ce_divisor(target, w, &lr);
    double wsum = 0;
    for (int64_t k = 0; k < lr.c; k++) wsum += weight_of(w, k);
    for (int64_t r = 0; r < lr.n * lr.d; r++) {
        int64_t t = target_at(target, r);
        if (t == lr.ignore_index) {
            for (int64_t k = 0; k < lr.c; k++) st(out, elem(&lr, r, k), 0);
            continue;
        }
        double gr = lr.reduction == LOSS_NONE ? ld(g, cpu_offset_of(g, r)) : ld(g, 0);
        double a = (1 - eps) * gr / div * weight_of(w, t), b = eps / (double)lr.c * gr / div;
        row_log_softmax(x, &lr, r, logp, p);
        for (int64_t k = 0; k < lr.c; k++)
            st(out, elem(&lr, r, k), a * (p[k] - (k == t)) + b * (p[k] * wsum - weight_of(w, k)));
    }
    free(logp);
    return OPR_OK;
}

/* loss_weight_backward(grad, self, target, weight, reduction, ignore_index,
 * label_smoothing, log_softmax): the gradient of nll_loss (log_softmax false) or
 * cross_entropy (true) with respect to the class weights. Row r with target t adds
 * g_r ((1 - e) nll_r [c == t] + e / C smooth_rc) to class c, with nll_r = -logp[t] and
 * smooth_rc = -logp[c]; "mean" divides the loss by W = sum of the target weights, so
 * there dw_c = g (A_c - loss * count_c) / W, count_c the rows whose target is c. */
static int k_loss_weight_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *target = cpu_arg_t(c, 2), *w = cpu_arg_t(c, 3);
    opr_tensor_view *out = c->outputs[0];
    loss_rows lr;
    const double eps = cpu_arg_d(c, 6);
    const bool softmax = cpu_arg_b(c, 7);
    int rc = loss_rows_in(c, "loss_weight_backward", x, target, 4, &lr);
    if (rc != OPR_OK) return rc;
    double *logp = malloc((size_t)(lr.c ? 3 * lr.c : 1) * sizeof *logp);
    if (!logp) return CPU_FAIL(c, OPR_ERR_NOMEM, "loss_weight_backward: out of memory for a row of %lld classes", (long long)lr.c);
    double *acc = logp + lr.c, *p = logp + 2 * lr.c, loss = 0, wsum = target_weight_sum(target, w, &lr);
    for (int64_t k = 0; k < lr.c; k++) acc[k] = 0;
    for (int64_t r = 0; r < lr.n * lr.d; r++) {
        int64_t t = target_at(target, r);
        if (t == lr.ignore_index) continue;
        if (softmax) row_log_softmax(x, &lr, r, logp, p);
        else
            for (int64_t k = 0; k < lr.c; k++) logp[k] = ld(x, cpu_offset_of(x, elem(&lr, r, k)));
        const double gr = lr.reduction == LOSS_NONE ? ld(g, cpu_offset_of(g, r)) : 1.0;
        acc[t] -= gr * (1 - eps) * logp[t];
        loss -= (1 - eps) * weight_of(w, t) * logp[t];
        for (int64_t k = 0; eps != 0 && k < lr.c; k++) {
            acc[k] -= gr * eps / (double)lr.c * logp[k];
            loss -= eps / (double)lr.c * weight_of(w, k) * logp[k];
        }
    }
    const double g0 = lr.reduction == LOSS_NONE ? 1.0 : ld(g, 0);
    if (lr.reduction == LOSS_MEAN) {
        loss /= wsum;
        for (int64_t r = 0; r < lr.n * lr.d; r++) {
            int64_t t = target_at(target, r);
            if (t != lr.ignore_index) acc[t] -= loss;
        }
    }
    for (int64_t k = 0; k < lr.c; k++)
        st(out, k, g0 * acc[k] / (lr.reduction == LOSS_MEAN ? wsum : 1.0));
    free(logp);
    return OPR_OK;
}

int cpu_register_loss(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"nll_loss", k_nll_loss},           {"nll_loss_backward", k_nll_loss_backward},
        {"cross_entropy", k_cross_entropy}, {"cross_entropy_backward", k_cross_entropy_backward},
        {"loss_weight_backward", k_loss_weight_backward},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
