/* AdamW of the GPT example: torch.optim.AdamW's single-tensor update (PyTorch 1.13),
 * the same operations in the same order, in the parameters' dtype (f32 math for an f32
 * model, as PyTorch's CPU kernels do):
 *   p = p * (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Contiguous CPU tensors are updated where they lie; others go through a host copy. */
#include "gpt_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

opr_status gpt_adamw_init(gpt_adamw *opt, const gpt_model *m, double lr, double weight_decay)
{
    *opt = (gpt_adamw){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = weight_decay, .n = m->n_params};
    size_t largest = 1;
    opt->m = calloc((size_t)m->n_params, sizeof *opt->m);
    opt->v = calloc((size_t)m->n_params, sizeof *opt->v);
    bool ok = opt->m && opt->v;
    for (int i = 0; ok && i < m->n_params; i++) {
        const opr_tensor *p = m->params[i];
        const size_t bytes = (size_t)opr_tensor_numel(p) * opr_dtype_size(opr_tensor_dtype(p));
        if (bytes > largest) largest = bytes;
        ok = (opt->m[i] = calloc(1, bytes ? bytes : 1)) && (opt->v[i] = calloc(1, bytes ? bytes : 1));
    }
    ok = ok && (opt->scratch = malloc(2 * largest));
    if (!ok) {
        gpt_adamw_free(opt);
        return gpt_fail(OPR_ERR_NOMEM, "gpt_adamw_init: out of memory");
    }
    return OPR_OK;
}

void gpt_adamw_free(gpt_adamw *opt)
{
    for (int i = 0; i < opt->n; i++) {
        if (opt->m) free(opt->m[i]);
        if (opt->v) free(opt->v[i]);
    }
    free(opt->m);
    free(opt->v);
    free(opt->scratch);
    opt->m = opt->v = NULL;
    opt->scratch = NULL;
    opt->n = 0;
}

/* One parameter's update over n values of type T (float or double). */
#define ADAMW_UPDATE(T, SQRT)                                                                        \
    do {                                                                                             \
        T *p_ = pv, *m_ = mv, *v_ = vv;                                                             \
        const T *g_ = gv;                                                                            \
        const T decay_ = (T)decay, b1_ = (T)opt->beta1, b2_ = (T)opt->beta2, c1_ = (T)(1.0 - opt->beta1); \
        const T c2_ = (T)(1.0 - opt->beta2), bc2_ = (T)bc2_sqrt, eps_ = (T)opt->eps, step_ = (T)(-step_size); \
        for (int64_t j = 0; j < n; j++) {                                                            \
            p_[j] *= decay_;                                                                         \
            m_[j] = m_[j] * b1_ + g_[j] * c1_;                                                       \
            v_[j] = v_[j] * b2_ + g_[j] * g_[j] * c2_;                                               \
            p_[j] += step_ * (m_[j] / (SQRT(v_[j]) / bc2_ + eps_));                                  \
        }                                                                                            \
    } while (0)

/* Where a tensor's n values can be read (and written) on the host: its own memory when
 * it is a contiguous CPU tensor, else `staging` filled with a copy. NULL on failure. */
static void *host_values(opr_tensor *t, void *staging, size_t bytes)
{
    if (opr_tensor_device(t).type == OPR_CPU.type && opr_tensor_is_contiguous(t)) return opr_tensor_data(t);
    return opr_tensor_copy_to_host(t, staging, bytes) ? NULL : staging;
}

opr_status gpt_adamw_step(gpt_adamw *opt, gpt_model *m)
{
    opt->step++;
    const double t = (double)opt->step;
    const double step_size = opt->lr / (1.0 - pow(opt->beta1, t));
    const double bc2_sqrt = sqrt(1.0 - pow(opt->beta2, t));
    const double decay = 1.0 - opt->lr * opt->weight_decay;
    for (int i = 0; i < m->n_params; i++) {
        opr_tensor *p = m->params[i], *g = opr_grad(p);
        if (!g) continue; /* no gradient reached it (PyTorch skips it too) */
        const int64_t n = opr_tensor_numel(p);
        const opr_dtype dt = opr_tensor_dtype(p);
        const size_t bytes = (size_t)n * opr_dtype_size(dt);
        char *staging = opt->scratch;
        void *pv = host_values(p, staging, bytes), *gv = pv ? host_values(g, staging + bytes, bytes) : NULL;
        void *mv = opt->m[i], *vv = opt->v[i];
        if (!pv || !gv)
            return gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: reading %s: %s", gpt_model_param_name(m, i), opr_last_error());
        if (dt == OPR_F32) ADAMW_UPDATE(float, sqrtf);
        else if (dt == OPR_F64) ADAMW_UPDATE(double, sqrt);
        else return gpt_fail(OPR_ERR_INVALID, "gpt_adamw_step: %s is not f32 or f64", gpt_model_param_name(m, i));
        if ((pv == staging && opr_tensor_copy_from_host(p, pv, bytes)) || opr_zero_grad(p))
            return gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: writing %s: %s", gpt_model_param_name(m, i), opr_last_error());
    }
    return OPR_OK;
}
