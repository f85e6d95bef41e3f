/* AdamW of the GPT example: one _foreach_adamw_step over the parameters
 * (registry/ops/optim_foreach.yaml: adamw_step_ on each, torch.optim.AdamW's
 * single-tensor update of PyTorch 1.13), on the parameters' device, with the moments
 * as tensors beside them:
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
    /* the parameters a gradient reached (PyTorch skips the others too), stepped by one
     * _foreach_adamw_step (registry/ops/optim_foreach.yaml): adamw_step_ on each */
    opr_tensor **lists = calloc(4 * (size_t)(m->n_params ? m->n_params : 1), sizeof *lists);
    int *which = calloc((size_t)(m->n_params ? m->n_params : 1), sizeof *which);
    if (!lists || !which) {
        free(lists);
        free(which);
        opr_grad_mode_set(was);
        return gpt_fail(OPR_ERR_NOMEM, "gpt_adamw_step: out of memory");
    }
    opr_tensor **ps = lists, **gs = ps + m->n_params, **ms = gs + m->n_params, **vs = ms + m->n_params;
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        opr_tensor *g = opr_grad(m->params[i]);
        if (!g) continue;
        which[n] = i;
        ps[n] = m->params[i];
        gs[n] = g;
        ms[n] = opt->m[i];
        vs[n++] = opt->v[i];
    }
    opr_status rc = OPR_OK;
    if (n > 0) {
        opr_value a[] = {opr_v_tensors(ps, n), opr_v_tensors(gs, n), opr_v_tensors(ms, n), opr_v_tensors(vs, n),
                         opr_v_tensors(NULL, 0), opr_v_int(opt->step), opr_v_double(opt->lr),
                         opr_v_double(opt->beta1), opr_v_double(opt->beta2), opr_v_double(opt->eps),
                         opr_v_double(opt->weight_decay), opr_v_bool(false)};
        opr_tensor **out = calloc((size_t)n, sizeof *out); /* the parameters themselves */
        if (!out) rc = gpt_fail(OPR_ERR_NOMEM, "gpt_adamw_step: out of memory");
        else if ((rc = opr_call_by_name(opr_tensor_ctx(ps[0]), "_foreach_adamw_step", a, 12, out, n)))
            rc = gpt_fail(rc, "gpt_adamw_step: %s", opr_last_error());
        for (int k = 0; out && k < n; k++) opr_tensor_release(out[k]);
        free(out);
    }
    for (int k = 0; !rc && k < n; k++)
        if (opr_zero_grad(ps[k]))
            rc = gpt_fail(OPR_ERR_BACKEND, "gpt_adamw_step: %s: %s", gpt_model_param_name(m, which[k]),
                          opr_last_error());
    free(lists);
    free(which);
    opr_grad_mode_set(was);
    return rc;
}
