/* Scaled dot-product attention (registry/ops/nn_loss_attention.yaml) on the GPU:
 * _scaled_dot_product_attention (output, logsumexp, attn) and the fused
 * scaled_dot_product_attention_backward, which reads the inputs and the log-sum-exp
 * and recomputes the probabilities as it goes (no L x S matrix: O(L) scratch).
 *
 * Direct kernels, one thread per query row (forward, dq) or key row (dk, dv), summing
 * in double: correct on every backend this file builds for (CUDA, ROCm, the emulated
 * device of the tests); not tuned. Strided inputs are made contiguous first, the mask
 * is expanded to [B, L, S]. */
#include "gpu_common.cuh"

#include <math.h>

/* One call's sizes; B batches of L query rows and S keys. */
struct ga_dims {
    int64_t B, L, S, E, Ev;
    double scale;
    bool causal;
};

/* Score of query row i against key j of batch b (scaled, masked; -inf when removed). */
template <class T>
GK_DEV double ga_score(const ga_dims &d, const T *q, const T *k, const T *mask, int64_t b, int64_t i, int64_t j)
{
    if (d.causal && j > i) return -INFINITY;
    const T *qi = q + (b * d.L + i) * d.E, *kj = k + (b * d.S + j) * d.E;
    double s = 0;
    for (int64_t e = 0; e < d.E; e++) s += (double)qi[e] * (double)kj[e];
    s *= d.scale;
    if (mask) s += (double)mask[(b * d.L + i) * d.S + j];
    return s;
}

template <class T>
__global__ void k_ga_forward(ga_dims d, const T *q, const T *k, const T *v, const T *mask, T *out, T *lse, T *attn)
{
    GK_LOOP(r, d.B * d.L)
    {
        const int64_t b = r / d.L, i = r - b * d.L;
        T *a = attn + r * d.S, *o = out + r * d.Ev;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < d.S; j++) {
            const double s = ga_score(d, q, k, mask, b, i, j);
            a[j] = (T)s;
            mx = fmax(mx, s);
        }
        for (int64_t j = 0; j < d.S; j++) sum += exp(ga_score(d, q, k, mask, b, i, j) - mx);
        const double l = mx + log(sum);
        lse[r] = (T)l;
        for (int64_t e = 0; e < d.Ev; e++) o[e] = (T)0;
        for (int64_t j = 0; j < d.S; j++) {
            const double p = exp(ga_score(d, q, k, mask, b, i, j) - l);
            a[j] = (T)p;
            const T *vj = v + (b * d.S + j) * d.Ev;
            for (int64_t e = 0; e < d.Ev; e++) o[e] = (T)((double)o[e] + p * (double)vj[e]);
        }
    }
}

/* dP_ij = dout_i . v_j + gattn_ij (v may be NULL when only dv is wanted: then unused). */
template <class T>
GK_DEV double ga_dp(const ga_dims &d, const T *gout, const T *v, const T *gattn, int64_t b, int64_t i, int64_t j)
{
    const T *go = gout + (b * d.L + i) * d.Ev, *vj = v + (b * d.S + j) * d.Ev;
    double s = gattn ? (double)gattn[(b * d.L + i) * d.S + j] : 0.0;
    for (int64_t e = 0; e < d.Ev; e++) s += (double)go[e] * (double)vj[e];
    return s;
}

/* Per query row: shift_i = glse_i - sum_j P_ij dP_ij, and dq_i = scale sum_j dS_ij k_j. */
template <class T>
__global__ void k_ga_rows(ga_dims d, const T *q, const T *k, const T *v, const T *mask, const T *lse, const T *gout,
                          const T *glse, const T *gattn, double *shift, T *dq)
{
    GK_LOOP(r, d.B * d.L)
    {
        const int64_t b = r / d.L, i = r - b * d.L;
        const double l = (double)lse[r];
        double dsum = 0;
        for (int64_t j = 0; j < d.S; j++)
            dsum += exp(ga_score(d, q, k, mask, b, i, j) - l) * ga_dp(d, gout, v, gattn, b, i, j);
        const double sh = (glse ? (double)glse[r] : 0.0) - dsum;
        shift[r] = sh;
        if (!dq) continue;
        T *dqi = dq + r * d.E;
        for (int64_t e = 0; e < d.E; e++) dqi[e] = (T)0;
        for (int64_t j = 0; j < d.S; j++) {
            const double p = exp(ga_score(d, q, k, mask, b, i, j) - l);
            const double ds = p * (ga_dp(d, gout, v, gattn, b, i, j) + sh) * d.scale;
            const T *kj = k + (b * d.S + j) * d.E;
            for (int64_t e = 0; e < d.E; e++) dqi[e] = (T)((double)dqi[e] + ds * (double)kj[e]);
        }
    }
}

/* Per key row: dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dout_i. */
template <class T>
__global__ void k_ga_cols(ga_dims d, const T *q, const T *k, const T *v, const T *mask, const T *lse, const T *gout,
                          const T *gattn, const double *shift, T *dk, T *dv)
{
    GK_LOOP(r, d.B * d.S)
    {
        const int64_t b = r / d.S, j = r - b * d.S;
        T *dkj = dk ? dk + r * d.E : nullptr, *dvj = dv ? dv + r * d.Ev : nullptr;
        for (int64_t e = 0; dkj && e < d.E; e++) dkj[e] = (T)0;
        for (int64_t e = 0; dvj && e < d.Ev; e++) dvj[e] = (T)0;
        for (int64_t i = 0; i < d.L; i++) {
            const int64_t ri = b * d.L + i;
            const double p = exp(ga_score(d, q, k, mask, b, i, j) - (double)lse[ri]);
            if (p == 0) continue;
            if (dvj) {
                const T *go = gout + ri * d.Ev;
                for (int64_t e = 0; e < d.Ev; e++) dvj[e] = (T)((double)dvj[e] + p * (double)go[e]);
            }
            if (dkj) {
                const double ds = p * (ga_dp(d, gout, v, gattn, b, i, j) + shift[ri]) * d.scale;
                const T *qi = q + ri * d.E;
                for (int64_t e = 0; e < d.E; e++) dkj[e] = (T)((double)dkj[e] + ds * (double)qi[e]);
            }
        }
    }
}

/* v (a mask, or the gradient of attn) expanded to q's batch dims x L x S, contiguous. */
static int ga_expand(const gk_ctx *k, const opr_tensor_view *v, const opr_tensor_view *q, int64_t S, gk_buf *buf,
                     const void **data)
{
    *data = nullptr;
    if (!v) return OPR_OK;
    const int32_t nd = q->ndim;
    int64_t shape[GK_MAXD], dst[GK_MAXD], src[GK_MAXD];
    for (int32_t i = 0; i < nd; i++) shape[i] = q->shape[i];
    shape[nd - 1] = S;
    for (int32_t i = 0; i < nd; i++) {
        const int32_t vi = i - (nd - v->ndim);
        src[i] = vi < 0 || v->shape[vi] == 1 ? 0 : v->strides[vi];
    }
    opc_contig_strides(nd, shape, dst);
    const size_t es = gk_dtype_size(v->dtype);
    int rc = buf->alloc(k, (size_t)gk_numel(nd, shape) * es);
    if (rc) return rc;
    *data = buf->p;
    return gk_copy_strided(k, es, nd, shape, buf->p, dst, v->data, src);
}

static void ga_dims_of(const opr_tensor_view *q, const opr_tensor_view *k, int64_t Ev, bool causal, ga_dims *d)
{
    const int32_t nb = q->ndim - 2;
    d->B = 1;
    for (int32_t i = 0; i < nb; i++) d->B *= q->shape[i];
    d->L = q->shape[nb];
    d->S = k->shape[nb];
    d->E = q->shape[nb + 1];
    d->Ev = Ev;
    d->scale = d->E ? 1.0 / sqrt((double)d->E) : 1.0;
    d->causal = causal;
}

/* _scaled_dot_product_attention(query, key, value, attn_mask, is_causal) */
static int k_sdpa(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "_scaled_dot_product_attention", &k);
    if (rc) return rc;
    const opr_tensor_view *q = gk_arg_t(c, 0), *key = gk_arg_t(c, 1), *v = gk_arg_t(c, 2), *mask = gk_arg_t(c, 3);
    ga_dims d;
    ga_dims_of(q, key, v->shape[v->ndim - 1], gk_arg_b(c, 4), &d);
    gk_buf qb, kb, vb, mb;
    const void *qd, *kd, *vd, *md;
    if ((rc = gk_dense(&k, q, &qb, &qd)) || (rc = gk_dense(&k, key, &kb, &kd)) || (rc = gk_dense(&k, v, &vb, &vd)) ||
        (rc = ga_expand(&k, mask, q, d.S, &mb, &md)))
        return rc;
    if (d.B * d.L == 0) return OPR_OK;
    void *out = c->outputs[0]->data, *lse = c->outputs[1]->data, *attn = c->outputs[2]->data;
    if (q->dtype == OPR_F32)
        gk_launch(k_ga_forward<float>, gk_blocks(d.B * d.L), GK_THREADS, 0, k.stream, d, (const float *)qd,
                  (const float *)kd, (const float *)vd, (const float *)md, (float *)out, (float *)lse, (float *)attn);
    else
        gk_launch(k_ga_forward<double>, gk_blocks(d.B * d.L), GK_THREADS, 0, k.stream, d, (const double *)qd,
                  (const double *)kd, (const double *)vd, (const double *)md, (double *)out, (double *)lse,
                  (double *)attn);
    return gk_launched(&k, "_scaled_dot_product_attention");
}

/* scaled_dot_product_attention_backward: args (grad output, grad logsumexp, grad attn,
 * query, key, value, attn_mask, is_causal, output, logsumexp, attn). */
static int k_sdpa_backward(const opr_kernel_call *c)
{
    static const char *op = "scaled_dot_product_attention_backward";
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *gout = gk_arg_t(c, 0), *glse = gk_arg_t(c, 1), *gattn = gk_arg_t(c, 2), *q = gk_arg_t(c, 3),
                          *key = gk_arg_t(c, 4), *v = gk_arg_t(c, 5), *mask = gk_arg_t(c, 6), *lse = gk_arg_t(c, 9);
    opr_tensor_view *dq = c->outputs[0], *dk = c->outputs[1], *dv = c->outputs[2];
    const bool want_qk = dq->data || dk->data;
    if (!q || !key || !lse || !gout || (want_qk && !v))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: query, key, logsumexp (and value for the query or key gradient) must be saved", op);
    ga_dims d;
    ga_dims_of(q, key, gout->shape[gout->ndim - 1], gk_arg_b(c, 7), &d);
    gk_buf qb, kb, vb, mb, gob, glb, gab, lb, shift;
    const void *qd, *kd, *vd, *md, *god, *gld, *gad, *ld;
    if ((rc = gk_dense(&k, q, &qb, &qd)) || (rc = gk_dense(&k, key, &kb, &kd)) ||
        (rc = gk_dense(&k, want_qk ? v : nullptr, &vb, &vd)) || (rc = ga_expand(&k, mask, q, d.S, &mb, &md)) ||
        (rc = gk_dense(&k, gout, &gob, &god)) || (rc = gk_dense(&k, glse, &glb, &gld)) ||
        (rc = ga_expand(&k, gattn, q, d.S, &gab, &gad)) || (rc = gk_dense(&k, lse, &lb, &ld)) ||
        (rc = shift.alloc(&k, (size_t)(d.B * d.L) * sizeof(double))))
        return rc;
    if (!want_qk) gad = nullptr; /* dv alone does not read dP */
    if (q->dtype == OPR_F32) {
        if (want_qk && d.B * d.L > 0)
            gk_launch(k_ga_rows<float>, gk_blocks(d.B * d.L), GK_THREADS, 0, k.stream, d, (const float *)qd,
                      (const float *)kd, (const float *)vd, (const float *)md, (const float *)ld, (const float *)god,
                      (const float *)gld, (const float *)gad, shift.as<double>(), (float *)dq->data);
        if ((dk->data || dv->data) && d.B * d.S > 0)
            gk_launch(k_ga_cols<float>, gk_blocks(d.B * d.S), GK_THREADS, 0, k.stream, d, (const float *)qd,
                      (const float *)kd, (const float *)vd, (const float *)md, (const float *)ld, (const float *)god,
                      (const float *)gad, (const double *)shift.p, (float *)dk->data, (float *)dv->data);
    } else {
        if (want_qk && d.B * d.L > 0)
            gk_launch(k_ga_rows<double>, gk_blocks(d.B * d.L), GK_THREADS, 0, k.stream, d, (const double *)qd,
                      (const double *)kd, (const double *)vd, (const double *)md, (const double *)ld,
                      (const double *)god, (const double *)gld, (const double *)gad, shift.as<double>(),
                      (double *)dq->data);
        if ((dk->data || dv->data) && d.B * d.S > 0)
            gk_launch(k_ga_cols<double>, gk_blocks(d.B * d.S), GK_THREADS, 0, k.stream, d, (const double *)qd,
                      (const double *)kd, (const double *)vd, (const double *)md, (const double *)ld,
                      (const double *)god, (const double *)gad, (const double *)shift.p, (double *)dk->data,
                      (double *)dv->data);
    }
    return gk_launched(&k, op);
}

int gk_register_attention(opr_plugin *self)
{
    int rc = gk_register(self, "_scaled_dot_product_attention", GK_FLOATS, k_sdpa);
#ifdef OPR_GK_SDPA_BACKWARD
    if (rc == OPR_OK) rc = gk_register(self, "scaled_dot_product_attention_backward", GK_FLOATS, k_sdpa_backward);
#else
    (void)k_sdpa_backward;
#endif
    return rc;
}
