/* Optimizer steps (registry/ops/optim.yaml): sgd_step_ and adamw_step_, one
 * parameter's update by torch.optim.SGD / AdamW in place, f32 and f64. The arithmetic
 * is PyTorch 1.13's single-tensor code, operation by operation, in the parameter's
 * dtype (f32 math for f32, as torch's CPU kernels do): the scalars (1 - lr wd, the
 * bias corrections) are computed in double, as Python computes them, and then rounded
 * to the dtype. Any strides: the tensors are walked by logical index. */
#include "cpu_common.h"
#include "cpu_kernels.h"

#include <math.h>

/* A written tensor must not have two elements at one address (an expanded dim). */
static int check_writable(const opr_kernel_call *c, const char *what, const opr_tensor_view *v)
{
    for (int32_t d = 0; v && d < v->ndim; d++)
        if (v->shape[d] > 1 && v->strides[d] == 0)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s has an expanded dim %d: elements would be written twice", c->op,
                            what, (int)d);
    return OPR_OK;
}

/* Every operand has self's dtype and element count (the YAML's checks compare shapes). */
static int check_operands(const opr_kernel_call *c, const opr_tensor_view *self, const opr_tensor_view *const *v,
                          const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (!v[i]) continue;
        if (v[i]->dtype != self->dtype || v[i]->numel != self->numel)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s must have self's dtype and shape", c->op, names[i]);
        int rc = i ? check_writable(c, names[i], v[i]) : OPR_OK; /* v[0] is grad, read only */
        if (rc) return rc;
    }
    return OPR_OK;
}

/* Element i of v (NULL: none): at i itself when every operand of the call is
 * contiguous (parameters, their gradients and buffers are), else found through v's
 * strides. */
#define AT(T, v, i) (((T *)(v)->data)[contig ? (i) : cpu_offset_of((v), (i))])

/* Every given view is contiguous. */
static bool all_contiguous(const opr_tensor_view *const *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] && !cpu_is_contiguous(v[i])) return false;
    return true;
}

/* SGD_LOOP on contiguous operands, with momentum (the usual case), as one loop whose
 * flags are selects the compiler vectorizes: the general loop's per-element branches
 * and offsets kept it scalar, at 4 ns per element, as long as ResNet-18's backward
 * for its 11M parameters. The same operations in the same order. */
#define SGD_DENSE_MOMENTUM(T)                                                                                 \
    do {                                                                                                      \
        const T lr_ = (T)lr, wd_ = (T)wd, mom_ = (T)mom, keep_ = (T)(1.0 - damp);                           \
        const bool wd_on = wd != 0;                                                                           \
        T *restrict p_ = out->data, *restrict b_ = buf->data;                                                 \
        const T *restrict g_ = grad->data;                                                                    \
        _Pragma("omp parallel for if (n >= CPU_PAR_THRESHOLD)")                                               \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            const T p = p_[i], gi = maximize ? -g_[i] : g_[i], g = wd_on ? gi + wd_ * p : gi;                 \
            const T b = first ? g : b_[i] * mom_ + keep_ * g;                                                 \
            b_[i] = b;                                                                                        \
            p_[i] = p + -lr_ * (nesterov ? g + mom_ * b : b);                                                 \
        }                                                                                                     \
    } while (0)

#define SGD_LOOP(T)                                                                                           \
    do {                                                                                                      \
        const T lr_ = (T)lr, wd_ = (T)wd, mom_ = (T)mom, keep_ = (T)(1.0 - damp);                           \
        _Pragma("omp parallel for if (n >= CPU_PAR_THRESHOLD)")                                               \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            T *p = &AT(T, out, i);                                                                            \
            T g = AT(T, grad, i);                                                                             \
            if (maximize) g = -g;                                                                             \
            if (wd != 0) g = g + wd_ * *p;                                                                    \
            if (mom != 0) {                                                                                   \
                T *b = &AT(T, buf, i);                                                                        \
                *b = first ? g : *b * mom_ + keep_ * g;                                                       \
                g = nesterov ? g + mom_ * *b : *b;                                                            \
            }                                                                                                 \
            *p = *p + -lr_ * g;                                                                               \
        }                                                                                                     \
    } while (0)

/* sgd_step_: args (self, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
 * nesterov, maximize, first_step); output self. */
static int k_sgd_step(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    const opr_tensor_view *grad = cpu_arg_t(c, 1), *buf = cpu_arg_t(c, 2);
    const double lr = cpu_arg_d(c, 3), mom = cpu_arg_d(c, 4), damp = cpu_arg_d(c, 5), wd = cpu_arg_d(c, 6);
    const bool nesterov = cpu_arg_b(c, 7), maximize = cpu_arg_b(c, 8), first = cpu_arg_b(c, 9);
    const opr_tensor_view *ops[] = {grad, buf};
    static const char *const names[] = {"grad", "momentum_buffer"};
    if (!grad || (mom != 0 && !buf)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: momentum needs a momentum_buffer", c->op);
    int rc = check_writable(c, "self", out);
    if (!rc) rc = check_operands(c, out, ops, names, 2);
    if (rc) return rc;
    const int64_t n = out->numel;
    const bool contig = all_contiguous((const opr_tensor_view *[]){out, grad, buf}, 3);
    if (contig && mom != 0 && out->dtype == OPR_F32) SGD_DENSE_MOMENTUM(float);
    else if (contig && mom != 0) SGD_DENSE_MOMENTUM(double);
    else if (out->dtype == OPR_F32) SGD_LOOP(float);
    else SGD_LOOP(double);
    return OPR_OK;
}

#define ADAMW_LOOP(T, SQRT)                                                                                   \
    do {                                                                                                      \
        const T decay_ = (T)(1.0 - lr * wd), b1_ = (T)b1, b2_ = (T)b2, c1_ = (T)(1.0 - b1), c2_ = (T)(1.0 - b2); \
        const T bc2_ = (T)bc2_sqrt, eps_ = (T)eps, step_ = (T)(-step_size);                                  \
        _Pragma("omp parallel for if (n >= CPU_PAR_THRESHOLD)")                                               \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            T *p = &AT(T, out, i), *m = &AT(T, exp_avg, i), *v = &AT(T, exp_avg_sq, i);                       \
            const T g = AT(T, grad, i);                                                                       \
            *p = *p * decay_;                                                                                 \
            *m = *m * b1_ + c1_ * g;                                                                          \
            *v = *v * b2_ + c2_ * (g * g);                                                                    \
            T second = *v;                                                                                    \
            if (amsgrad) {                                                                                    \
                T *vmax = &AT(T, max_sq, i);                                                                  \
                if (!(*vmax >= *v)) *vmax = *v; /* torch.maximum: NaN propagates */                           \
                second = *vmax;                                                                               \
            }                                                                                                 \
            *p = *p + step_ * (*m / (SQRT(second) / bc2_ + eps_));                                            \
        }                                                                                                     \
    } while (0)

/* adamw_step_: args (self, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1,
 * beta2, eps, weight_decay, amsgrad); output self. */
static int k_adamw_step(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    const opr_tensor_view *grad = cpu_arg_t(c, 1), *exp_avg = cpu_arg_t(c, 2), *exp_avg_sq = cpu_arg_t(c, 3);
    const opr_tensor_view *max_sq = cpu_arg_t(c, 4);
    const int64_t step = cpu_arg_i(c, 5);
    const double lr = cpu_arg_d(c, 6), b1 = cpu_arg_d(c, 7), b2 = cpu_arg_d(c, 8), eps = cpu_arg_d(c, 9);
    const double wd = cpu_arg_d(c, 10);
    const bool amsgrad = cpu_arg_b(c, 11);
    const opr_tensor_view *ops[] = {grad, exp_avg, exp_avg_sq, max_sq};
    static const char *const names[] = {"grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    if (!grad || !exp_avg || !exp_avg_sq || (amsgrad && !max_sq) || step < 1)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: needs grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) "
                        "and a step from 1", c->op);
    int rc = check_writable(c, "self", out);
    if (!rc) rc = check_operands(c, out, ops, names, 4);
    if (rc) return rc;
    const double t = (double)step, step_size = lr / (1.0 - pow(b1, t)), bc2_sqrt = sqrt(1.0 - pow(b2, t));
    const int64_t n = out->numel;
    const bool contig = all_contiguous((const opr_tensor_view *[]){out, grad, exp_avg, exp_avg_sq, max_sq}, 5);
    if (out->dtype == OPR_F32) ADAMW_LOOP(float, sqrtf);
    else ADAMW_LOOP(double, sqrt);
    return OPR_OK;
}

int cpu_register_optim(opr_plugin *self)
{
    const uint32_t floats = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = cpu_register(self, "sgd_step_", floats, k_sgd_step);
    if (!rc) rc = cpu_register(self, "adamw_step_", floats, k_adamw_step);
    return rc;
}
