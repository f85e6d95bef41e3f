/* Batch and group normalization kernels (f32 and f64; f16 and bf16 through them,
 * cpu_half.c): native_batch_norm, its backward
 * native_batch_norm_backward (also the fused backward native_batch_norm_backward_fused of
 * training calls), native_group_norm and its backward native_group_norm_backward (the
 * kernel of _native_batch_norm_legit and its variants too: normalization.yaml).
 *
 * input is seen as [N, C, inner] (inner: the product of the trailing dims). Statistics
 * are accumulated in double, two passes (the mean, then the squared deviations), as the
 * variance must not lose digits to cancellation. Channels (batch norm) and sample groups
 * (group norm) are independent: the threads split them. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_batch_norm_legit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Element i of a 1-d tensor of dtype dt (any stride), as double; dflt when v is NULL. */
static inline double vec_at(const opr_tensor_view *v, int64_t i, double dflt)
{
    if (!v) return dflt;
    return v->dtype == OPR_F32 ? (double)((const float *)v->data)[i * v->strides[0]] : ((const double *)v->data)[i * v->strides[0]];
}
static inline void vec_set(opr_tensor_view *v, int64_t i, double x)
{
    if (v->dtype == OPR_F32) ((float *)v->data)[i * v->strides[0]] = (float)x;
    else ((double *)v->data)[i * v->strides[0]] = x;
}
static inline double at(const void *p, bool f32, int64_t i) { return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i]; }
static inline void put(void *p, bool f32, int64_t i, double x)
{
    if (f32) ((float *)p)[i] = (float)x;
    else ((double *)p)[i] = x;
}

/* Checks that every given tensor has dtype dt and that the per-channel ones hold C
 * elements in one dim. */
static int check_operands(const opr_kernel_call *c, opr_dtype dt, int64_t ch, const opr_tensor_view *const *vecs, int nvecs)
{
    for (int i = 0; i < nvecs; i++) {
        const opr_tensor_view *v = vecs[i];
        if (!v) continue;
        if (v->dtype != dt)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: operands of dtypes %s and %s", c->op, cpu_dtype_name(v->dtype), cpu_dtype_name(dt));
        if (v->ndim != 1 || v->shape[0] != ch)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: a per-channel tensor must have shape [%lld]", c->op, (long long)ch);
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ batch norm forward */

/* native_batch_norm: args (input, weight, bias, running_mean, running_var, training,
 * momentum, eps); outputs (out, save_mean, save_invstd), the last two empty in eval. */
static int k_batch_norm(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 1), *b = cpu_arg_t(c, 2);
    opr_tensor_view *rm = (opr_tensor_view *)cpu_arg_t(c, 3), *rv = (opr_tensor_view *)cpu_arg_t(c, 4);
    const bool train = cpu_arg_b(c, 5);
    const double momentum = cpu_arg_d(c, 6), eps = cpu_arg_d(c, 7);
    opr_tensor_view *y = c->outputs[0], *sm = c->outputs[1], *si = c->outputs[2];
    if (!x || x->ndim < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: input must have at least 2 dims", c->op);
    const int64_t n = x->shape[0], ch = x->shape[1], inner = n && ch ? x->numel / (n * ch) : 0, m = n * inner;
    const opr_tensor_view *vecs[] = {w, b, rm, rv, train ? sm : NULL, train ? si : NULL};
    int rc = check_operands(c, x->dtype, ch, vecs, 6);
    if (rc) return rc;
    if (!train && (!rm || !rv)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: eval needs running_mean and running_var", c->op);
    if (train && m == 0 && ch) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: training needs at least one value per channel", c->op);
    void *owned;
    const void *px = cpu_dense(x, &owned);
    if (x->numel && !px) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    const bool f32 = x->dtype == OPR_F32;
    _Pragma("omp parallel for if (x->numel >= CPU_PAR_THRESHOLD) schedule(static)")
    for (int64_t k = 0; k < ch; k++) {
        double mean, invstd;
        if (train) {
            double s = 0, ss = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < inner; j++) s += at(px, f32, (i * ch + k) * inner + j);
            mean = s / (double)m;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < inner; j++) {
                    const double d = at(px, f32, (i * ch + k) * inner + j) - mean;
                    ss += d * d;
                }
            invstd = 1 / sqrt(ss / (double)m + eps);
            vec_set(sm, k, mean);
            vec_set(si, k, invstd);
            if (rm) vec_set(rm, k, (1 - momentum) * vec_at(rm, k, 0) + momentum * mean);
            if (rv) vec_set(rv, k, (1 - momentum) * vec_at(rv, k, 0) + momentum * ss / (double)(m - 1));
        } else {
            mean = vec_at(rm, k, 0);
            invstd = 1 / sqrt(vec_at(rv, k, 0) + eps);
        }
        const double scale = invstd * vec_at(w, k, 1), shift = vec_at(b, k, 0) - mean * scale;
        for (int64_t i = 0; i < n; i++) {
            const int64_t off = (i * ch + k) * inner;
            for (int64_t j = 0; j < inner; j++) put(y->data, f32, off + j, at(px, f32, off + j) * scale + shift);
        }
    }
    free(owned);
    return OPR_OK;
}

/* ------------------------------------------------------------------ batch norm backward */

typedef struct bn_backward {
    const opr_tensor_view *g, *x, *w, *mean, *invstd; /* mean / invstd: saved (train) or running (eval; invstd is then the running var) */
    bool train;
    double eps;
    opr_tensor_view *dx, *dw, *db;
} bn_backward;

static int bn_backward_run(const opr_kernel_call *c, const bn_backward *p)
{
    const opr_tensor_view *g = p->g, *x = p->x;
    if (!g || g->ndim < 2 || (x && (x->ndim != g->ndim || x->numel != g->numel)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: grad and input must have the same shape of at least 2 dims", c->op);
    if ((p->dx || p->dw) && (!x || !p->mean || !p->invstd))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: input and the statistics are needed for these gradients", c->op);
    const int64_t n = g->shape[0], ch = g->shape[1], inner = n && ch ? g->numel / (n * ch) : 0, m = n * inner;
    const opr_tensor_view *vecs[] = {p->w, p->mean, p->invstd, p->dw, p->db};
    int rc = check_operands(c, g->dtype, ch, vecs, 5);
    if (!rc && x && x->dtype != g->dtype) rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s: grad and input differ in dtype", c->op);
    if (rc) return rc;
    void *og, *ox;
    const void *pg = cpu_dense(g, &og), *px = cpu_dense((p->dx || p->dw) ? x : NULL, &ox);
    if ((g->numel && !pg) || ((p->dx || p->dw) && x->numel && !px)) {
        free(og);
        free(ox);
        return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    }
    const bool f32 = g->dtype == OPR_F32;
    _Pragma("omp parallel for if (g->numel >= CPU_PAR_THRESHOLD) schedule(static)")
    for (int64_t k = 0; k < ch; k++) {
        const double mean = p->mean ? vec_at(p->mean, k, 0) : 0;
        const double invstd = !p->invstd ? 0 : p->train ? vec_at(p->invstd, k, 0) : 1 / sqrt(vec_at(p->invstd, k, 0) + p->eps);
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t off = (i * ch + k) * inner;
            for (int64_t j = 0; j < inner; j++) {
                const double gv = at(pg, f32, off + j);
                sg += gv;
                if (px) sgx += gv * (at(px, f32, off + j) - mean);
            }
        }
        if (p->db) vec_set(p->db, k, sg);
        if (p->dw) vec_set(p->dw, k, sgx * invstd);
        if (!p->dx) continue;
        const double scale = vec_at(p->w, k, 1) * invstd;
        /* train: dx = w invstd (g - mean(g) - xhat mean(g xhat)); eval: dx = w invstd g */
        const double a = p->train && m ? sg / (double)m : 0, bcoef = p->train && m ? sgx * invstd * invstd / (double)m : 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t off = (i * ch + k) * inner;
            for (int64_t j = 0; j < inner; j++)
                put(p->dx->data, f32, off + j, scale * (at(pg, f32, off + j) - a - (at(px, f32, off + j) - mean) * bcoef));
        }
    }
    free(og);
    free(ox);
    return OPR_OK;
}

/* native_batch_norm_backward: args (grad_out, input, weight, running_mean, running_var,
 * save_mean, save_invstd, train, eps, output_mask); outputs left out by the mask are
 * empty. */
static int k_batch_norm_backward(const opr_kernel_call *c)
{
    unsigned mask = 0;
    for (int i = 0; c->args[9]->kind == OPR_ARG_INT_LIST && i < c->args[9]->u.il.n && i < 3; i++)
        mask |= (c->args[9]->u.il.items[i] ? 1u : 0u) << i;
    const bool train = cpu_arg_b(c, 7);
    bn_backward p = {
        .g = cpu_arg_t(c, 0), .x = cpu_arg_t(c, 1), .w = cpu_arg_t(c, 2),
        .mean = cpu_arg_t(c, train ? 5 : 3), .invstd = cpu_arg_t(c, train ? 6 : 4),
        .train = train, .eps = cpu_arg_d(c, 8),
        .dx = mask & 1 ? c->outputs[0] : NULL, .dw = mask & 2 ? c->outputs[1] : NULL, .db = mask & 4 ? c->outputs[2] : NULL,
    };
    return bn_backward_run(c, &p);
}

/* native_batch_norm_backward_fused (native_batch_norm's fused backward): args (the 3
 * output gradients, input, weight, bias, running_mean, running_var, training, momentum,
 * eps, out, save_mean, save_invstd); training calls only (fused_supports). */
static int k_batch_norm_backward_fused(const opr_kernel_call *c)
{
    if (!cpu_arg_b(c, 8)) return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: eval calls use the formulas", c->op);
    bn_backward p = {
        .g = cpu_arg_t(c, 0), .x = cpu_arg_t(c, 3), .w = cpu_arg_t(c, 4), .mean = cpu_arg_t(c, 12),
        .invstd = cpu_arg_t(c, 13), .train = true, .eps = cpu_arg_d(c, 10),
        .dx = c->grad_input_mask & 1 ? c->outputs[0] : NULL, .dw = c->grad_input_mask & 2 ? c->outputs[1] : NULL,
        .db = c->grad_input_mask & 4 ? c->outputs[2] : NULL,
    };
    return bn_backward_run(c, &p);
}

static bool fused_supports(const opr_kernel_call *c, char *why, size_t why_len)
{
    if (c->nargs > 8 && cpu_arg_b(c, 8)) return true;
    snprintf(why, why_len, "eval-mode batch norm: its formulas read the running statistics");
    return false;
}

/* ------------------------------------------------------------------ group norm */

/* native_group_norm: args (input, weight, bias, N, C, HxW, group, eps); outputs (out,
 * mean [N, group], rstd [N, group]). */
static int k_group_norm(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 1), *b = cpu_arg_t(c, 2);
    const int64_t n = cpu_arg_i(c, 3), ch = cpu_arg_i(c, 4), hw = cpu_arg_i(c, 5), groups = cpu_arg_i(c, 6);
    const double eps = cpu_arg_d(c, 7);
    opr_tensor_view *y = c->outputs[0], *mo = c->outputs[1], *ro = c->outputs[2];
    if (!x || groups < 1 || ch % groups || x->numel != n * ch * hw || mo->numel != n * groups || ro->numel != n * groups)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: input of %lld elements is not N x C x HxW = %lld x %lld x %lld in %lld groups",
                        c->op, x ? (long long)x->numel : 0LL, (long long)n, (long long)ch, (long long)hw, (long long)groups);
    const opr_tensor_view *vecs[] = {w, b};
    int rc = check_operands(c, x->dtype, ch, vecs, 2);
    if (rc) return rc;
    void *owned;
    const void *px = cpu_dense(x, &owned);
    if (x->numel && !px) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    const bool f32 = x->dtype == OPR_F32;
    const int64_t cg = ch / groups, len = cg * hw;
    _Pragma("omp parallel for if (x->numel >= CPU_PAR_THRESHOLD) schedule(static)")
    for (int64_t r = 0; r < n * groups; r++) {
        const int64_t off = r * len;
        double s = 0, ss = 0;
        for (int64_t j = 0; j < len; j++) s += at(px, f32, off + j);
        const double mean = len ? s / (double)len : 0;
        for (int64_t j = 0; j < len; j++) {
            const double d = at(px, f32, off + j) - mean;
            ss += d * d;
        }
        const double rstd = 1 / sqrt((len ? ss / (double)len : 0) + eps);
        put(mo->data, f32, r, mean);
        put(ro->data, f32, r, rstd);
        for (int64_t cc = 0; cc < cg; cc++) {
            const int64_t k = (r % groups) * cg + cc;
            const double scale = rstd * vec_at(w, k, 1), shift = vec_at(b, k, 0) - mean * scale;
            for (int64_t j = 0; j < hw; j++) put(y->data, f32, off + cc * hw + j, at(px, f32, off + cc * hw + j) * scale + shift);
        }
    }
    free(owned);
    return OPR_OK;
}

/* native_group_norm_backward: args (grad_out, input, mean, rstd, weight, N, C, HxW,
 * group, output_mask); outputs (grad_input, grad_weight, grad_bias), each empty where
 * output_mask says no. Per (sample, group) row of len = C / group * HxW elements, with
 * xhat = (x - mean) * rstd and g = grad_out * weight:
 *   grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the row;
 * per channel, over the samples and HxW: grad_weight = sum(grad_out * xhat),
 * grad_bias = sum(grad_out). Sums in double. */
static int k_group_norm_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *dy = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *mt = cpu_arg_t(c, 2), *rt = cpu_arg_t(c, 3);
    const opr_tensor_view *w = cpu_arg_t(c, 4);
    const int64_t n = cpu_arg_i(c, 5), ch = cpu_arg_i(c, 6), hw = cpu_arg_i(c, 7), groups = cpu_arg_i(c, 8);
    unsigned mask = 0;
    for (int i = 0; c->nargs > 9 && c->args[9]->kind == OPR_ARG_INT_LIST && i < c->args[9]->u.il.n && i < 3; i++)
        mask |= (c->args[9]->u.il.items[i] ? 1u : 0u) << i;
    if (!dy || !x || !mt || !rt || c->nout < 3 || groups < 1 || ch % groups || x->numel != n * ch * hw || dy->numel != x->numel ||
        mt->numel != n * groups || rt->numel != n * groups)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: grad_out and input must be N x C x HxW = %lld x %lld x %lld, mean and rstd "
                        "N x group (group %lld dividing C)", c->op, (long long)n, (long long)ch, (long long)hw, (long long)groups);
    const opr_tensor_view *vecs[] = {w, dy, mt, rt};
    int rc = check_operands(c, x->dtype, ch, vecs, 1);
    for (int i = 1; !rc && i < 4; i++)
        if (vecs[i]->dtype != x->dtype)
            rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s: operands of dtypes %s and %s", c->op, cpu_dtype_name(vecs[i]->dtype),
                          cpu_dtype_name(x->dtype));
    if (rc) return rc;
    opr_tensor_view *dx = mask & 1 ? c->outputs[0] : NULL, *dw = mask & 2 ? c->outputs[1] : NULL, *db = mask & 4 ? c->outputs[2] : NULL;
    void *owned[4] = {NULL, NULL, NULL, NULL};
    const void *p[4];
    const opr_tensor_view *src[4] = {dy, x, mt, rt};
    for (int i = 0; i < 4; i++)
        if (!(p[i] = cpu_dense(src[i], &owned[i])) && src[i]->numel) {
            for (int j = 0; j < i; j++) free(owned[j]);
            return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
        }
    const bool f32 = x->dtype == OPR_F32;
    const int64_t cg = ch / groups, len = cg * hw;
    if (dx) {
        _Pragma("omp parallel for if (x->numel >= CPU_PAR_THRESHOLD) schedule(static)")
        for (int64_t r = 0; r < n * groups; r++) {
            const int64_t off = r * len, c0 = (r % groups) * cg;
            const double mean = at(p[2], f32, r), rstd = at(p[3], f32, r);
            double s1 = 0, s2 = 0;
            for (int64_t j = 0; j < len; j++) {
                const double g = at(p[0], f32, off + j) * vec_at(w, c0 + j / hw, 1);
                s1 += g;
                s2 += g * (at(p[1], f32, off + j) - mean) * rstd;
            }
            const double m1 = len ? s1 / (double)len : 0, m2 = len ? s2 / (double)len : 0;
            for (int64_t j = 0; j < len; j++) {
                const double g = at(p[0], f32, off + j) * vec_at(w, c0 + j / hw, 1);
                put(dx->data, f32, off + j, rstd * (g - m1 - (at(p[1], f32, off + j) - mean) * rstd * m2));
            }
        }
    }
    if (dw || db) {
        _Pragma("omp parallel for if (x->numel >= CPU_PAR_THRESHOLD) schedule(static)")
        for (int64_t k = 0; k < ch; k++) {
            double sw = 0, sb = 0;
            for (int64_t i = 0; i < n; i++) {
                const int64_t r = i * groups + k / cg, off = (i * ch + k) * hw;
                const double mean = at(p[2], f32, r), rstd = at(p[3], f32, r);
                for (int64_t j = 0; j < hw; j++) {
                    const double g = at(p[0], f32, off + j);
                    sw += g * (at(p[1], f32, off + j) - mean) * rstd;
                    sb += g;
                }
            }
            if (dw) vec_set(dw, k, sw);
            if (db) vec_set(db, k, sb);
        }
    }
    for (int i = 0; i < 4; i++) free(owned[i]);
    return OPR_OK;
}

/* _native_batch_norm_legit.no_stats and _native_batch_norm_legit_no_training: the
 * batch norm kernel above with the arguments they lack filled in. */
static int k_batch_norm_legit_variant(const opr_kernel_call *c)
{
    opc_bn_legit m;
    if (!opc_bn_legit_call(c, &m)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: unexpected argument count %d", c->op, (int)c->nargs);
    return k_batch_norm(&m.call);
}

int cpu_register_batch_norm(opr_plugin *self)
{
    /* f16 and bf16 computed in f32 (cpu_half.c); batch norm's running_mean and
     * running_var (arguments 3 and 4) are written in place */
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), running = 1u << 3 | 1u << 4;
    static const struct {
        const char *op;
        opr_kernel_fn fn;
        bool writes_running;
    } table[] = {
        {"native_batch_norm", k_batch_norm, true},
        {"native_batch_norm_backward", k_batch_norm_backward, false},
        {"_native_batch_norm_legit", k_batch_norm, true},
        {"_native_batch_norm_legit.no_stats", k_batch_norm_legit_variant, false},
        {"_native_batch_norm_legit_no_training", k_batch_norm_legit_variant, false},
        {"native_group_norm", k_group_norm, false},
        {"native_group_norm_backward", k_group_norm_backward, false},
    };
    int rc = OPR_OK;
    for (size_t i = 0; i < sizeof table / sizeof table[0] && !rc; i++)
        rc = cpu_register_upcast_ex(self, table[i].op, dtypes, table[i].fn, table[i].writes_running ? running : 0, NULL);
    if (!rc) rc = cpu_register_upcast_ex(self, "native_batch_norm_backward_fused", dtypes, k_batch_norm_backward_fused, 0, fused_supports);
    if (!rc) rc = cpu_register_upcast_ex(self, "_native_batch_norm_legit_backward_fused", dtypes, k_batch_norm_backward_fused, 0, fused_supports);
    return rc;
}
