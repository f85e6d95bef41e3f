/* Kernels of registry/ops/embedding_bag.yaml: _embedding_bag, embedding_bag_weight_backward
 * and _embedding_bag_per_sample_weights_backward. Inputs may be any strided views (the
 * 1-D index tensors are read into contiguous host arrays, which the checks of
 * plugins/common/opc_embedding_bag.h need anyway); outputs are the host's contiguous
 * tensors. Sums run in double, bag after bag and entry after entry in order, as the
 * CUDA/HIP kernels do. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_embedding_bag.h"

#include <stdlib.h>
#include <string.h>

/* v (1-D i64) as a contiguous array: v's data itself or a malloc'ed copy (*owned). */
static const int64_t *flat_i64(const opr_tensor_view *v, int64_t **owned)
{
    *owned = NULL;
    if (v->numel <= 1 || v->strides[0] == 1) return v->data;
    int64_t *p = malloc((size_t)v->numel * sizeof *p);
    if (!p) return NULL;
    for (int64_t i = 0; i < v->numel; i++) p[i] = ((const int64_t *)v->data)[i * v->strides[0]];
    *owned = p;
    return p;
}

/* Element (r, k) of a 2-D f32/f64 view, or element r of a 1-D one (k = 0). */
static double at2(const opr_tensor_view *v, int64_t r, int64_t k)
{
    const int64_t off = r * v->strides[0] + (v->ndim > 1 ? k * v->strides[1] : 0);
    return v->dtype == OPR_F32 ? (double)((const float *)v->data)[off] : ((const double *)v->data)[off];
}

static void put(opr_tensor_view *o, int64_t i, double x)
{
    if (o->dtype == OPR_F32) ((float *)o->data)[i] = (float)x;
    else ((double *)o->data)[i] = x;
}

/* The index arrays of a call, checked: indices against num_weights, offsets. */
typedef struct {
    const int64_t *idx, *off;
    int64_t *own_idx, *own_off;
    int64_t n, noff;
} bag_arrays;

static int load_bags(const opr_kernel_call *c, const char *op, const opr_tensor_view *indices,
                     const opr_tensor_view *offsets, int64_t num_weights, bag_arrays *a)
{
    char msg[256];
    a->n = indices->numel;
    a->noff = offsets->numel;
    a->idx = flat_i64(indices, &a->own_idx);
    a->off = flat_i64(offsets, &a->own_off);
    if (!a->idx || !a->off) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    if (!opc_ebag_check(a->off, a->noff, a->idx, a->n, num_weights, msg, sizeof msg))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s", op, msg);
    return OPR_OK;
}

static void free_bags(bag_arrays *a)
{
    free(a->own_idx);
    free(a->own_off);
}

static bool is_float(opr_dtype t) { return t == OPR_F32 || t == OPR_F64; }

/* _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
 * per_sample_weights, include_last_offset, padding_idx) -> (output, offset2bag,
 * bag_size, max_indices), as registry/ops/embedding_bag.yaml describes them. */
static int k_embedding_bag(const opr_kernel_call *c)
{
    const char *op = "_embedding_bag";
    const opr_tensor_view *w = cpu_arg_t(c, 0), *indices = cpu_arg_t(c, 1), *offsets = cpu_arg_t(c, 2);
    const opr_tensor_view *psw = cpu_arg_t(c, 6);
    const int64_t mode = cpu_arg_i(c, 4), pad = cpu_arg_i(c, 8);
    if (!w || !indices || !offsets || c->nout < 4 || w->ndim != 2)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected weight [N, D], indices, offsets and 4 outputs", op);
    if (!is_float(w->dtype) || (psw && psw->dtype != w->dtype))
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported", op, cpu_dtype_name(w->dtype));
    if (mode < 0 || mode > 2 || (psw && (mode != 0 || psw->numel != indices->numel)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: mode must be 0, 1 or 2, per_sample_weights only with mode 0", op);
    opr_tensor_view *out = c->outputs[0], *o2b = c->outputs[1], *bsz = c->outputs[2], *maxi = c->outputs[3];
    const int64_t B = bsz->numel, D = w->shape[1];
    if (out->numel != B * D || (o2b->numel != 0 && o2b->numel != indices->numel))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: outputs do not match the arguments", op);
    bag_arrays a;
    int rc = load_bags(c, op, indices, offsets, w->shape[0], &a);
    if (rc) {
        free_bags(&a);
        return rc;
    }
    int64_t *o2bp = o2b->data, *bszp = bsz->data, *maxp = maxi->data;
    for (int64_t i = 0; i < o2b->numel; i++) o2bp[i] = opc_ebag_bag_of(a.off, a.noff, B, i);
#pragma omp parallel for if (B * D >= CPU_PAR_THRESHOLD)
    for (int64_t b = 0; b < B; b++) {
        const int64_t end = opc_ebag_end(a.off, a.noff, b, a.n);
        int64_t count = 0;
        for (int64_t i = a.off[b]; i < end; i++) count += a.idx[i] != pad;
        bszp[b] = mode == 0 ? 0 : count;
        for (int64_t d = 0; d < D; d++) {
            double acc = 0;
            int64_t arg = 0;
            bool first = true;
            for (int64_t i = a.off[b]; i < end; i++) {
                if (a.idx[i] == pad) continue;
                const double v = at2(w, a.idx[i], d);
                if (mode == 2) {
                    if (first || v > acc) { /* the first maximum wins; a NaN never replaces it */
                        acc = v;
                        arg = a.idx[i];
                    }
                    first = false;
                } else {
                    acc += psw ? at2(psw, i, 0) * v : v;
                }
            }
            if (mode == 1 && count > 0) acc /= (double)count;
            put(out, b * D + d, acc);
            if (mode == 2) maxp[b * D + d] = arg;
        }
        if (mode != 2) maxp[b] = bszp[b];
    }
    free_bags(&a);
    return OPR_OK;
}

/* embedding_bag_weight_backward(grad, indices, offsets, bag_size, max_indices,
 * num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx): sequential
 * over the entries, so repeated rows add up in a fixed order. */
static int k_embedding_bag_weight_backward(const opr_kernel_call *c)
{
    const char *op = "embedding_bag_weight_backward";
    const opr_tensor_view *g = cpu_arg_t(c, 0), *indices = cpu_arg_t(c, 1), *offsets = cpu_arg_t(c, 2);
    const opr_tensor_view *bsz = cpu_arg_t(c, 3), *maxi = cpu_arg_t(c, 4), *psw = cpu_arg_t(c, 8);
    const int64_t nw = cpu_arg_i(c, 5), mode = cpu_arg_i(c, 7), pad = cpu_arg_i(c, 9);
    const bool freq = cpu_arg_b(c, 6) && mode != 2;
    opr_tensor_view *out = c->outputs[0];
    if (!g || !indices || !offsets || !bsz || !maxi || g->ndim != 2 || !is_float(g->dtype) || out->dtype != g->dtype)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected a floating grad [B, D] and i64 index tensors", op);
    const int64_t B = g->shape[0], D = g->shape[1];
    if (bsz->numel != B || out->numel != nw * D || (mode == 2 && maxi->numel != B * D) ||
        (psw && (psw->numel != indices->numel || psw->dtype != g->dtype)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: arguments do not match grad [%lld, %lld]", op, (long long)B, (long long)D);
    bag_arrays a;
    int rc = load_bags(c, op, indices, offsets, nw, &a);
    double *acc = rc ? NULL : calloc((size_t)(nw * D + (freq ? nw : 0)) + 1, sizeof *acc);
    if (!rc && !acc) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    if (rc) {
        free_bags(&a);
        return rc;
    }
    double *count = acc + nw * D;
    for (int64_t i = 0; freq && i < a.n; i++) count[a.idx[i]] += 1;
    if (mode == 2) {
        for (int64_t b = 0; b < B; b++) {
            const int64_t nb = ((const int64_t *)bsz->data)[b * bsz->strides[0]];
            for (int64_t d = 0; nb > 0 && d < D; d++) {
                const int64_t r = ((const int64_t *)maxi->data)[b * maxi->strides[0] + d * maxi->strides[1]];
                if (r < 0 || r >= nw) {
                    free(acc);
                    free_bags(&a);
                    return CPU_FAIL(c, OPR_ERR_INVALID, "%s: max_indices holds %lld, outside [0, %lld)", op,
                                    (long long)r, (long long)nw);
                }
                acc[r * D + d] += at2(g, b, d);
            }
        }
    } else {
        for (int64_t i = 0; i < a.n; i++) {
            const int64_t b = opc_ebag_bag_of(a.off, a.noff, B, i), r = a.idx[i];
            if (b >= B || r == pad) continue;
            double scale = psw ? at2(psw, i, 0) : 1.0;
            if (mode == 1) scale /= (double)((const int64_t *)bsz->data)[b * bsz->strides[0]];
            if (freq) scale /= count[r];
            for (int64_t d = 0; d < D; d++) acc[r * D + d] += at2(g, b, d) * scale;
        }
    }
    for (int64_t k = 0; k < nw * D; k++) put(out, k, acc[k]);
    free(acc);
    free_bags(&a);
    return OPR_OK;
}

/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
 * mode, padding_idx): per entry the dot product of its bag's grad row with its weight
 * row (offset2bag is not read: the bags come from offsets). */
static int k_embedding_bag_psw_backward(const opr_kernel_call *c)
{
    const char *op = "_embedding_bag_per_sample_weights_backward";
    const opr_tensor_view *g = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 1), *indices = cpu_arg_t(c, 2);
    const opr_tensor_view *offsets = cpu_arg_t(c, 3);
    const int64_t mode = cpu_arg_i(c, 5), pad = cpu_arg_i(c, 6);
    opr_tensor_view *out = c->outputs[0];
    if (!g || !w || !indices || !offsets || g->ndim != 2 || w->ndim != 2 || g->shape[1] != w->shape[1] ||
        !is_float(g->dtype) || w->dtype != g->dtype || out->numel != indices->numel)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected grad [B, D], weight [N, D] of one floating dtype", op);
    if (mode != 0) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: only mode 0 (sum) has per_sample_weights", op);
    bag_arrays a;
    int rc = load_bags(c, op, indices, offsets, w->shape[0], &a);
    if (rc) {
        free_bags(&a);
        return rc;
    }
    const int64_t B = g->shape[0], D = g->shape[1];
    for (int64_t i = 0; i < a.n; i++) {
        const int64_t b = opc_ebag_bag_of(a.off, a.noff, B, i), r = a.idx[i];
        double dot = 0;
        for (int64_t d = 0; b < B && r != pad && d < D; d++) dot += at2(g, b, d) * at2(w, r, d);
        put(out, i, dot);
    }
    free_bags(&a);
    return OPR_OK;
}

int cpu_register_embedding_bag(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = cpu_register(self, "_embedding_bag", fl, k_embedding_bag);
    if (rc == OPR_OK) rc = cpu_register(self, "embedding_bag_weight_backward", fl, k_embedding_bag_weight_backward);
    if (rc == OPR_OK)
        rc = cpu_register(self, "_embedding_bag_per_sample_weights_backward", fl, k_embedding_bag_psw_backward);
    return rc;
}
