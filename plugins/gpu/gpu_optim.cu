/* Optimizer steps (registry/ops/optim.yaml): sgd_step_ and adamw_step_, f32 and f64,
 * with the arithmetic of the CPU kernels (plugins/cpu/cpu_optim.c), which is PyTorch
 * 1.13's single-tensor code in the parameter's dtype: one thread per element, the
 * scalars computed on the host in double and rounded to the dtype. Every operand is
 * read and written through its own strides (a parameter is usually contiguous, but a
 * view of one is not): the element's offset is computed from its logical index. */
#include "gpu_common.cuh"

#include <math.h>

namespace {

/* A tensor on the device, addressed by logical row-major index (p NULL: absent). */
template <class T> struct view {
    T *p;
    int nd;
    int64_t shape[OPR_MAX_DIMS], st[OPR_MAX_DIMS];
    GK_DEV T &at(int64_t i) const
    {
        int64_t off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += i % shape[d] * st[d];
            i /= shape[d];
        }
        return p[off];
    }
};

template <class T> view<T> view_of(const opr_tensor_view *v)
{
    view<T> r = {};
    if (!v) return r;
    r.p = (T *)v->data;
    r.nd = v->ndim;
    for (int d = 0; d < v->ndim && d < OPR_MAX_DIMS; d++) {
        r.shape[d] = v->shape[d];
        r.st[d] = v->strides[d];
    }
    return r;
}

template <class T> struct sgd_args {
    T lr, wd, mom, keep;
    bool use_wd, use_mom, nesterov, maximize, first;
};

template <class T>
__global__ void k_sgd(int64_t n, view<T> p, view<const T> grad, view<T> buf, sgd_args<T> a)
{
    GK_LOOP(i, n)
    {
        T &x = p.at(i);
        T g = grad.at(i);
        if (a.maximize) g = -g;
        if (a.use_wd) g = g + a.wd * x;
        if (a.use_mom) {
            T &b = buf.at(i);
            b = a.first ? g : b * a.mom + a.keep * g;
            g = a.nesterov ? g + a.mom * b : b;
        }
        x = x + -a.lr * g;
    }
}

template <class T> struct adamw_args {
    T decay, b1, b2, c1, c2, bc2, eps, step;
    bool amsgrad;
};

GK_DEV float opt_sqrt(float x) { return sqrtf(x); }
GK_DEV double opt_sqrt(double x) { return sqrt(x); }

template <class T>
__global__ void k_adamw(int64_t n, view<T> p, view<const T> grad, view<T> m, view<T> v, view<T> vmax, adamw_args<T> a)
{
    GK_LOOP(i, n)
    {
        T &x = p.at(i), &mi = m.at(i), &vi = v.at(i);
        const T g = grad.at(i);
        x = x * a.decay;
        mi = mi * a.b1 + a.c1 * g;
        vi = vi * a.b2 + a.c2 * (g * g);
        T second = vi;
        if (a.amsgrad) {
            T &mx = vmax.at(i);
            if (!(mx >= vi)) mx = vi; /* torch.maximum: NaN propagates */
            second = mx;
        }
        x = x + a.step * (mi / (opt_sqrt(second) / a.bc2 + a.eps));
    }
}

/* Every operand has self's dtype and element count and, when written, no expanded dim. */
int check_operands(const opr_kernel_call *c, const opr_tensor_view *self, const opr_tensor_view *const *v,
                   const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (!v[i]) continue;
        if (v[i]->dtype != self->dtype || v[i]->numel != self->numel)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: %s must have self's dtype and shape", c->op, names[i]);
        int rc = i ? gk_check_writable(c, c->op, v[i]) : OPR_OK; /* v[0] is grad, read only */
        if (rc) return rc;
    }
    return OPR_OK;
}

template <class T>
void launch_sgd(const gk_ctx *k, opr_tensor_view *out, const opr_tensor_view *grad, const opr_tensor_view *buf,
                const double *s, const bool *flags)
{
    const sgd_args<T> a = {(T)s[0], (T)s[3], (T)s[1], (T)(1.0 - s[2]), s[3] != 0, s[1] != 0, flags[0], flags[1], flags[2]};
    gk_launch(k_sgd<T>, gk_blocks(out->numel), GK_THREADS, 0, k->stream, out->numel, view_of<T>(out),
              view_of<const T>(grad), view_of<T>(buf), a);
}

/* sgd_step_: args (self, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
 * nesterov, maximize, first_step); output self. */
int k_sgd_step(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    const opr_tensor_view *grad = gk_arg_t(c, 1), *buf = gk_arg_t(c, 2);
    const double s[4] = {gk_arg_d(c, 3), gk_arg_d(c, 4), gk_arg_d(c, 5), gk_arg_d(c, 6)}; /* lr, mom, damp, wd */
    const bool flags[3] = {gk_arg_b(c, 7), gk_arg_b(c, 8), gk_arg_b(c, 9)};               /* nesterov, maximize, first */
    if (!grad || (s[1] != 0 && !buf)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: momentum needs a momentum_buffer", c->op);
    const opr_tensor_view *ops[] = {grad, buf};
    static const char *const names[] = {"grad", "momentum_buffer"};
    if ((rc = gk_check_writable(c, c->op, out)) || (rc = check_operands(c, out, ops, names, 2))) return rc;
    if (out->numel == 0) return OPR_OK;
    if (out->dtype == OPR_F32) launch_sgd<float>(&k, out, grad, s[1] != 0 ? buf : nullptr, s, flags);
    else launch_sgd<double>(&k, out, grad, s[1] != 0 ? buf : nullptr, s, flags);
    return gk_launched(&k, "sgd step kernel");
}

template <class T>
void launch_adamw(const gk_ctx *k, opr_tensor_view *out, const opr_tensor_view *const *ops, const double *s, bool amsgrad)
{
    /* s: lr, beta1, beta2, eps, weight_decay, step_size, sqrt of the second bias correction */
    const adamw_args<T> a = {(T)(1.0 - s[0] * s[4]), (T)s[1], (T)s[2], (T)(1.0 - s[1]), (T)(1.0 - s[2]),
                             (T)s[6], (T)s[3], (T)(-s[5]), amsgrad};
    gk_launch(k_adamw<T>, gk_blocks(out->numel), GK_THREADS, 0, k->stream, out->numel, view_of<T>(out),
              view_of<const T>(ops[0]), view_of<T>(ops[1]), view_of<T>(ops[2]), view_of<T>(amsgrad ? ops[3] : nullptr), a);
}

/* adamw_step_: args (self, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1,
 * beta2, eps, weight_decay, amsgrad); output self. */
int k_adamw_step(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    const opr_tensor_view *ops[] = {gk_arg_t(c, 1), gk_arg_t(c, 2), gk_arg_t(c, 3), gk_arg_t(c, 4)};
    static const char *const names[] = {"grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    const int64_t step = gk_arg_i(c, 5);
    const bool amsgrad = gk_arg_b(c, 11);
    if (!ops[0] || !ops[1] || !ops[2] || (amsgrad && !ops[3]) || step < 1)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: needs grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) "
                       "and a step from 1", c->op);
    if ((rc = gk_check_writable(c, c->op, out)) || (rc = check_operands(c, out, ops, names, 4))) return rc;
    const double lr = gk_arg_d(c, 6), b1 = gk_arg_d(c, 7), b2 = gk_arg_d(c, 8), t = (double)step;
    const double s[7] = {lr, b1, b2, gk_arg_d(c, 9), gk_arg_d(c, 10), lr / (1.0 - pow(b1, t)), sqrt(1.0 - pow(b2, t))};
    if (out->numel == 0) return OPR_OK;
    if (out->dtype == OPR_F32) launch_adamw<float>(&k, out, ops, s, amsgrad);
    else launch_adamw<double>(&k, out, ops, s, amsgrad);
    return gk_launched(&k, "adamw step kernel");
}

} // namespace

int gk_register_optim(opr_plugin *self)
{
    int rc = gk_register(self, "sgd_step_", GK_FLOATS, k_sgd_step);
    if (!rc) rc = gk_register(self, "adamw_step_", GK_FLOATS, k_adamw_step);
    return rc;
}
