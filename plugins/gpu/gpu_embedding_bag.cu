/* Kernels of registry/ops/embedding_bag.yaml: _embedding_bag, embedding_bag_weight_backward
 * and _embedding_bag_per_sample_weights_backward, with the CPU plugin's checks
 * (plugins/common/opc_embedding_bag.h). indices and offsets are read back to the host
 * for those checks (and the counts of scale_grad_by_freq), then used on the device in
 * contiguous copies. The forward gives each (bag, column) one thread, which sums its
 * bag's entries in order in double, as the CPU does: the same numbers. The weight
 * gradient adds rows with atomicAdd: sums over repeated indices are not bitwise
 * reproducible from run to run (as embedding_backward). */
#include "gpu_common.cuh"
#include "../common/opc_embedding_bag.h"

#include <stdlib.h>

namespace {

GK_DEV void atomic_add(float *p, double v) { atomicAdd(p, (float)v); }
GK_DEV void atomic_add(double *p, double v) { atomicAdd(p, v); }

/* The 1-D i64 view v contiguous on the host (*host, malloc'ed) and on the device (dev). */
int load_i64(const gk_ctx *k, const opr_tensor_view *v, int64_t **host, gk_buf *dev)
{
    *host = (int64_t *)malloc((size_t)(v->numel ? v->numel : 1) * sizeof(int64_t));
    if (!*host) return GK_FAIL(k->call, OPR_ERR_NOMEM, "%s: out of host memory", k->op);
    const void *data;
    gk_buf tmp;
    int rc = gk_dense(k, v, &tmp, &data);
    if (!rc) rc = gk_to_host(k, *host, data, (size_t)v->numel * sizeof(int64_t));
    if (!rc) rc = dev->alloc(k, (size_t)v->numel * sizeof(int64_t));
    if (!rc) rc = gk_from_host(k, dev->p, *host, (size_t)v->numel * sizeof(int64_t));
    return rc;
}

/* indices and offsets of a call, checked, on both sides. */
struct bags {
    int64_t *idx = nullptr, *off = nullptr;
    gk_buf didx, doff;
    int64_t n = 0, noff = 0;
    ~bags()
    {
        free(idx);
        free(off);
    }
    int load(const gk_ctx *k, const opr_tensor_view *indices, const opr_tensor_view *offsets, int64_t num_weights)
    {
        n = indices->numel;
        noff = offsets->numel;
        int rc = load_i64(k, indices, &idx, &didx);
        if (!rc) rc = load_i64(k, offsets, &off, &doff);
        if (rc) return rc;
        char msg[256];
        if (!opc_ebag_check(off, noff, idx, n, num_weights, msg, sizeof msg))
            return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: %s", k->op, msg);
        return OPR_OK;
    }
};

bool is_float(opr_dtype t) { return t == OPR_F32 || t == OPR_F64; }

template <class T>
__global__ void k_bag_forward(int64_t B, int64_t D, int64_t n, int64_t noff, const int64_t *idx, const int64_t *off,
                              const T *w, int64_t ws0, int64_t ws1, const T *psw, int64_t ps, int64_t mode, int64_t pad,
                              T *out, int64_t *bag_size, int64_t *max_idx)
{
    GK_LOOP(t, B * D)
    {
        const int64_t b = t / D, d = t - b * D, end = opc_ebag_end(off, noff, b, n);
        double acc = 0;
        int64_t arg = 0, count = 0;
        bool first = true;
        for (int64_t i = off[b]; i < end; i++) {
            if (idx[i] == pad) continue;
            count++;
            const double v = (double)w[idx[i] * ws0 + d * ws1];
            if (mode == 2) {
                if (first || v > acc) { /* the first maximum wins; a NaN never replaces it */
                    acc = v;
                    arg = idx[i];
                }
                first = false;
            } else {
                acc += psw ? (double)psw[i * ps] * v : v;
            }
        }
        if (mode == 1 && count > 0) acc /= (double)count;
        out[t] = (T)acc;
        if (d == 0) bag_size[b] = mode == 0 ? 0 : count;
        if (mode == 2) max_idx[t] = arg;
        else if (d == 0) max_idx[b] = mode == 0 ? 0 : count;
    }
}

__global__ void k_offset2bag(int64_t n, int64_t noff, int64_t B, const int64_t *off, int64_t *o2b)
{
    GK_LOOP(i, n) o2b[i] = opc_ebag_bag_of(off, noff, B, i);
}

int k_embedding_bag_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const char *op = "_embedding_bag";
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *w = gk_arg_t(c, 0), *indices = gk_arg_t(c, 1), *offsets = gk_arg_t(c, 2);
    const opr_tensor_view *psw = gk_arg_t(c, 6);
    const int64_t mode = gk_arg_i(c, 4), pad = gk_arg_i(c, 8);
    if (!w || !indices || !offsets || c->nout < 4 || w->ndim != 2)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected weight [N, D], indices, offsets and 4 outputs", op);
    if (!is_float(w->dtype) || (psw && psw->dtype != w->dtype))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(w->dtype),
                       GPU_NAME);
    if (mode < 0 || mode > 2 || (psw && (mode != 0 || psw->numel != indices->numel)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: mode must be 0, 1 or 2, per_sample_weights only with mode 0", op);
    opr_tensor_view *out = c->outputs[0], *o2b = c->outputs[1], *bsz = c->outputs[2], *maxi = c->outputs[3];
    const int64_t B = bsz->numel, D = w->shape[1];
    if (out->numel != B * D || (o2b->numel != 0 && o2b->numel != indices->numel))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: outputs do not match the arguments", op);
    bags a;
    if ((rc = a.load(&k, indices, offsets, w->shape[0]))) return rc;
    const int64_t *didx = a.didx.as<int64_t>(), *doff = a.doff.as<int64_t>();
    if (o2b->numel > 0)
        gk_launch(k_offset2bag, gk_blocks(o2b->numel), GK_THREADS, 0, k.stream, o2b->numel, a.noff, B, doff,
                  (int64_t *)o2b->data);
    if (B * D > 0) {
        const int64_t ps = psw ? psw->strides[0] : 0;
        if (w->dtype == OPR_F32)
            gk_launch(k_bag_forward<float>, gk_blocks(B * D), GK_THREADS, 0, k.stream, B, D, a.n, a.noff, didx, doff,
                      (const float *)w->data, w->strides[0], w->strides[1], psw ? (const float *)psw->data : nullptr, ps,
                      mode, pad, (float *)out->data, (int64_t *)bsz->data, (int64_t *)maxi->data);
        else
            gk_launch(k_bag_forward<double>, gk_blocks(B * D), GK_THREADS, 0, k.stream, B, D, a.n, a.noff, didx, doff,
                      (const double *)w->data, w->strides[0], w->strides[1], psw ? (const double *)psw->data : nullptr,
                      ps, mode, pad, (double *)out->data, (int64_t *)bsz->data, (int64_t *)maxi->data);
    } else if (B > 0) { /* D = 0: no (bag, column) thread writes the sizes */
        gk_buf dsz;
        int64_t *hsz = (int64_t *)calloc((size_t)B, sizeof(int64_t));
        if (!hsz) return GK_FAIL(c, OPR_ERR_NOMEM, "%s: out of host memory", op);
        for (int64_t b = 0; mode != 0 && b < B; b++)
            for (int64_t i = a.off[b]; i < opc_ebag_end(a.off, a.noff, b, a.n); i++) hsz[b] += a.idx[i] != pad;
        rc = gk_from_host(&k, bsz->data, hsz, (size_t)B * sizeof(int64_t));
        if (!rc && mode != 2) rc = gk_from_host(&k, maxi->data, hsz, (size_t)B * sizeof(int64_t));
        free(hsz);
        if (rc) return rc;
    }
    return gk_launched(&k, "_embedding_bag kernel");
}

/* modes 0 and 1: entry i adds grad[bag(i)] * scale to its weight row */
template <class T>
__global__ void k_bag_weight_grad(int64_t n, int64_t D, int64_t B, int64_t noff, const int64_t *idx, const int64_t *off,
                                  const T *g, int64_t gs0, int64_t gs1, const int64_t *bsz, int64_t bs, const T *psw,
                                  int64_t ps, const double *count, int64_t mode, int64_t pad, T *out)
{
    GK_LOOP(t, n * D)
    {
        const int64_t i = t / D, d = t - i * D, b = opc_ebag_bag_of(off, noff, B, i), r = idx[i];
        if (b >= B || r == pad) continue;
        double scale = psw ? (double)psw[i * ps] : 1.0;
        if (mode == 1) scale /= (double)bsz[b * bs];
        if (count) scale /= count[r];
        atomic_add(out + r * D + d, (double)g[b * gs0 + d * gs1] * scale);
    }
}

/* mode 2: grad[b, d] goes to row max_indices[b, d] of each non-empty bag */
template <class T>
__global__ void k_bag_weight_grad_max(int64_t B, int64_t D, const T *g, int64_t gs0, int64_t gs1, const int64_t *bsz,
                                      int64_t bs, const int64_t *mi, int64_t ms0, int64_t ms1, int64_t nw, T *out)
{
    GK_LOOP(t, B * D)
    {
        const int64_t b = t / D, d = t - b * D, r = mi[b * ms0 + d * ms1];
        if (bsz[b * bs] > 0 && r >= 0 && r < nw) atomic_add(out + r * D + d, (double)g[b * gs0 + d * gs1]);
    }
}

int k_embedding_bag_weight_backward_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const char *op = "embedding_bag_weight_backward";
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *g = gk_arg_t(c, 0), *indices = gk_arg_t(c, 1), *offsets = gk_arg_t(c, 2);
    const opr_tensor_view *bsz = gk_arg_t(c, 3), *maxi = gk_arg_t(c, 4), *psw = gk_arg_t(c, 8);
    const int64_t nw = gk_arg_i(c, 5), mode = gk_arg_i(c, 7), pad = gk_arg_i(c, 9);
    const bool freq = gk_arg_b(c, 6) && mode != 2;
    opr_tensor_view *out = c->outputs[0];
    if (!g || !indices || !offsets || !bsz || !maxi || g->ndim != 2 || !is_float(g->dtype) || out->dtype != g->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected a floating grad [B, D] and i64 index tensors", op);
    const int64_t B = g->shape[0], D = g->shape[1];
    if (bsz->numel != B || out->numel != nw * D || (mode == 2 && maxi->numel != B * D) ||
        (psw && (psw->numel != indices->numel || psw->dtype != g->dtype)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: arguments do not match grad [%lld, %lld]", op, (long long)B, (long long)D);
    bags a;
    if ((rc = a.load(&k, indices, offsets, nw))) return rc;
    if ((rc = gk_fill(&k, gk_dtype_size(out->dtype), out->ndim, out->shape, out->data, out->strides, 0))) return rc;
    gk_buf dcount;
    if (freq) {
        double *hc = (double *)calloc((size_t)(nw ? nw : 1), sizeof(double));
        if (!hc) return GK_FAIL(c, OPR_ERR_NOMEM, "%s: out of host memory", op);
        for (int64_t i = 0; i < a.n; i++) hc[a.idx[i]] += 1;
        rc = dcount.alloc(&k, (size_t)nw * sizeof(double));
        if (!rc) rc = gk_from_host(&k, dcount.p, hc, (size_t)nw * sizeof(double));
        free(hc);
        if (rc) return rc;
    }
    const int64_t *bp = (const int64_t *)bsz->data, bs = bsz->strides[0];
    const int64_t ps = psw ? psw->strides[0] : 0;
    if (mode == 2 && B * D > 0) {
        const int64_t *mp = (const int64_t *)maxi->data;
        if (g->dtype == OPR_F32)
            gk_launch(k_bag_weight_grad_max<float>, gk_blocks(B * D), GK_THREADS, 0, k.stream, B, D, (const float *)g->data,
                      g->strides[0], g->strides[1], bp, bs, mp, maxi->strides[0], maxi->strides[1], nw, (float *)out->data);
        else
            gk_launch(k_bag_weight_grad_max<double>, gk_blocks(B * D), GK_THREADS, 0, k.stream, B, D,
                      (const double *)g->data, g->strides[0], g->strides[1], bp, bs, mp, maxi->strides[0],
                      maxi->strides[1], nw, (double *)out->data);
    } else if (mode != 2 && a.n * D > 0) {
        const int64_t *di = a.didx.as<int64_t>(), *dof = a.doff.as<int64_t>();
        const double *cnt = freq ? dcount.as<double>() : nullptr;
        if (g->dtype == OPR_F32)
            gk_launch(k_bag_weight_grad<float>, gk_blocks(a.n * D), GK_THREADS, 0, k.stream, a.n, D, B, a.noff, di, dof,
                      (const float *)g->data, g->strides[0], g->strides[1], bp, bs,
                      psw ? (const float *)psw->data : nullptr, ps, cnt, mode, pad, (float *)out->data);
        else
            gk_launch(k_bag_weight_grad<double>, gk_blocks(a.n * D), GK_THREADS, 0, k.stream, a.n, D, B, a.noff, di, dof,
                      (const double *)g->data, g->strides[0], g->strides[1], bp, bs,
                      psw ? (const double *)psw->data : nullptr, ps, cnt, mode, pad, (double *)out->data);
    }
    return gk_launched(&k, "embedding_bag_weight_backward kernel");
}

template <class T>
__global__ void k_bag_psw_grad(int64_t n, int64_t D, int64_t B, int64_t noff, const int64_t *idx, const int64_t *off,
                               const T *g, int64_t gs0, int64_t gs1, const T *w, int64_t ws0, int64_t ws1, int64_t pad,
                               T *out)
{
    GK_LOOP(i, n)
    {
        const int64_t b = opc_ebag_bag_of(off, noff, B, i), r = idx[i];
        double dot = 0;
        for (int64_t d = 0; b < B && r != pad && d < D; d++) dot += (double)g[b * gs0 + d * gs1] * (double)w[r * ws0 + d * ws1];
        out[i] = (T)dot;
    }
}

int k_embedding_bag_psw_backward_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const char *op = "_embedding_bag_per_sample_weights_backward";
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *g = gk_arg_t(c, 0), *w = gk_arg_t(c, 1), *indices = gk_arg_t(c, 2);
    const opr_tensor_view *offsets = gk_arg_t(c, 3);
    const int64_t mode = gk_arg_i(c, 5), pad = gk_arg_i(c, 6);
    opr_tensor_view *out = c->outputs[0];
    if (!g || !w || !indices || !offsets || g->ndim != 2 || w->ndim != 2 || g->shape[1] != w->shape[1] ||
        !is_float(g->dtype) || w->dtype != g->dtype || out->numel != indices->numel)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected grad [B, D], weight [N, D] of one floating dtype", op);
    if (mode != 0) return GK_FAIL(c, OPR_ERR_INVALID, "%s: only mode 0 (sum) has per_sample_weights", op);
    bags a;
    if ((rc = a.load(&k, indices, offsets, w->shape[0]))) return rc;
    if (a.n == 0) return OPR_OK;
    const int64_t B = g->shape[0], D = g->shape[1];
    const int64_t *di = a.didx.as<int64_t>(), *dof = a.doff.as<int64_t>();
    if (g->dtype == OPR_F32)
        gk_launch(k_bag_psw_grad<float>, gk_blocks(a.n), GK_THREADS, 0, k.stream, a.n, D, B, a.noff, di, dof,
                  (const float *)g->data, g->strides[0], g->strides[1], (const float *)w->data, w->strides[0],
                  w->strides[1], pad, (float *)out->data);
    else
        gk_launch(k_bag_psw_grad<double>, gk_blocks(a.n), GK_THREADS, 0, k.stream, a.n, D, B, a.noff, di, dof,
                  (const double *)g->data, g->strides[0], g->strides[1], (const double *)w->data, w->strides[0],
                  w->strides[1], pad, (double *)out->data);
    return gk_launched(&k, "_embedding_bag_per_sample_weights_backward kernel");
}

} // namespace

int gk_register_embedding_bag(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = gk_register(self, "_embedding_bag", fl, k_embedding_bag_op);
    if (rc == OPR_OK) rc = gk_register(self, "embedding_bag_weight_backward", fl, k_embedding_bag_weight_backward_op);
    if (rc == OPR_OK)
        rc = gk_register(self, "_embedding_bag_per_sample_weights_backward", fl, k_embedding_bag_psw_backward_op);
    return rc;
}
