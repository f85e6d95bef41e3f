/* AdamW of the GPT example: torch.optim.AdamW's single-tensor update (PyTorch 1.13),
 * the same operations in the same order, on the host:
 *   p = p * (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#include "gpt_train.h"

#include <math.h>
#include <stdlib.h>

opr_status gpt_adamw_init(gpt_adamw *opt, const gpt_model *m, double lr, double weight_decay)
{
    *opt = (gpt_adamw){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = weight_decay, .n = m->n_params};
    int64_t largest = 1;
    opt->m = calloc((size_t)m->n_params, sizeof *opt->m);
    opt->v = calloc((size_t)m->n_params, sizeof *opt->v);
    bool ok = opt->m && opt->v;
    for (int i = 0; ok && i < m->n_params; i++) {
        const int64_t n = opr_tensor_numel(m->params[i]);
        if (n > largest) largest = n;
        ok = (opt->m[i] = calloc((size_t)n, sizeof(double))) && (opt->v[i] = calloc((size_t)n, sizeof(double)));
    }
    ok = ok && (opt->scratch = malloc(2 * (size_t)largest * sizeof(double))) && (opt->out = malloc((size_t)largest * sizeof(double)));
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
    free(opt->out);
    opt->m = opt->v = NULL;
    opt->scratch = NULL;
    opt->out = NULL;
    opt->n = 0;
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
        double *pv = opt->scratch, *gv = opt->scratch + n, *mi = opt->m[i], *vi = opt->v[i];
        if (opr_tensor_copy_to_host_f64(p, pv, n) || opr_tensor_copy_to_host_f64(g, gv, n))
            return gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: reading %s: %s", gpt_model_param_name(m, i), opr_last_error());
        for (int64_t j = 0; j < n; j++) {
            pv[j] *= decay;
            mi[j] = mi[j] * opt->beta1 + gv[j] * (1.0 - opt->beta1);
            vi[j] = vi[j] * opt->beta2 + gv[j] * gv[j] * (1.0 - opt->beta2);
            pv[j] += -step_size * (mi[j] / (sqrt(vi[j]) / bc2_sqrt + opt->eps));
        }
        const bool f32 = opr_tensor_dtype(p) == OPR_F32;
        if (f32)
            for (int64_t j = 0; j < n; j++) ((float *)opt->out)[j] = (float)pv[j];
        if (opr_tensor_copy_from_host(p, f32 ? opt->out : (void *)pv, (size_t)n * opr_dtype_size(opr_tensor_dtype(p))) ||
            opr_zero_grad(p))
            return gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: writing %s: %s", gpt_model_param_name(m, i), opr_last_error());
    }
    return OPR_OK;
}
