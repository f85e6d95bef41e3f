/* AdamW of the GPT example: one adamw_step_ per parameter (registry/ops/optim.yaml,
 * torch.optim.AdamW's single-tensor update of PyTorch 1.13), on the parameter's device,
 * with the moments as tensors beside it:
 *   p = p * (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#include "gpt_train.h"

#include <stdlib.h>

/* zeros_like(p) with grad mode off: optimizer state is not part of any graph. */
static opr_tensor *zeros_like(opr_tensor *p)
{
    opr_value a[] = {opr_v_tensor(p)};
    opr_tensor *out = NULL;
    bool was = opr_grad_mode_set(false);
    int rc = opr_call_by_name(opr_tensor_ctx(p), "zeros_like", a, 1, &out, 1);
    opr_grad_mode_set(was);
    return rc ? NULL : out;
}

opr_status gpt_adamw_init(gpt_adamw *opt, const gpt_model *m, double lr, double weight_decay)
{
    *opt = (gpt_adamw){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = weight_decay, .n = m->n_params};
    opt->m = calloc((size_t)(m->n_params ? m->n_params : 1), sizeof *opt->m);
    opt->v = calloc((size_t)(m->n_params ? m->n_params : 1), sizeof *opt->v);
    bool ok = opt->m && opt->v;
    for (int i = 0; ok && i < m->n_params; i++)
        ok = (opt->m[i] = zeros_like(m->params[i])) && (opt->v[i] = zeros_like(m->params[i]));
    if (!ok) {
        gpt_adamw_free(opt);
        return gpt_fail(OPR_ERR_NOMEM, "gpt_adamw_init: the moments: %s", opr_last_error());
    }
    return OPR_OK;
}

void gpt_adamw_free(gpt_adamw *opt)
{
    for (int i = 0; i < opt->n; i++) {
        if (opt->m) opr_tensor_release(opt->m[i]);
        if (opt->v) opr_tensor_release(opt->v[i]);
    }
    free(opt->m);
    free(opt->v);
    opt->m = opt->v = NULL;
    opt->n = 0;
}

opr_status gpt_adamw_step(gpt_adamw *opt, gpt_model *m)
{
    opt->step++;
    bool was = opr_grad_mode_set(false); /* as torch's step(): the update records nothing */
    opr_status rc = OPR_OK;
    for (int i = 0; !rc && i < m->n_params; i++) {
        opr_tensor *p = m->params[i], *g = opr_grad(p), *out = NULL;
        if (!g) continue; /* no gradient reached it (PyTorch skips it too) */
        opr_value a[] = {opr_v_tensor(p), opr_v_tensor(g), opr_v_tensor(opt->m[i]), opr_v_tensor(opt->v[i]),
                         opr_v_none(), opr_v_int(opt->step), opr_v_double(opt->lr), opr_v_double(opt->beta1),
                         opr_v_double(opt->beta2), opr_v_double(opt->eps), opr_v_double(opt->weight_decay),
                         opr_v_bool(false)};
        if ((rc = opr_call_by_name(opr_tensor_ctx(p), "adamw_step_", a, 12, &out, 1)))
            rc = gpt_fail(rc, "gpt_adamw_step: %s: %s", gpt_model_param_name(m, i), opr_last_error());
        opr_tensor_release(out); /* p itself */
        if (!rc && opr_zero_grad(p))
            rc = gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: %s: %s", gpt_model_param_name(m, i), opr_last_error());
    }
    opr_grad_mode_set(was);
    return rc;
}
