/* Convolution kernels (f32, f64; f16 and bf16 through f32): convolution,
 * convolution_backward_weight, and convolution_backward, which also serves as the fused backward
 * convolution_backward_fused. The same three directions as the CPU's
 * (plugins/cpu/cpu_conv.c), on the geometry of plugins/common/opc_conv.h (the "big" and
 * "small" images):
 *   small  = W_g  @ unfold(big)        a convolution; the gradient of a transposed one's input
 *   big    = fold(W_g^T @ small)       a transposed convolution; the gradient of a convolution's input
 *   dW_g  += small @ unfold(big)^T     the weight's gradient, summed over the batch
 * unfold (im2col) runs one thread per element of the column matrix. fold (col2im) runs
 * one thread per element of the big image, which gathers the column entries that land
 * on it: no atomics, and every sum in a fixed order (the result does not depend on the
 * schedule). A 1x1 kernel with stride 1 and no padding needs neither: the image is its
 * own column matrix. The GEMMs are the plugin's (gk_gemm: cuBLAS, or the tiled kernel
 * where there is none), one call per group over a chunk of samples for the images (a
 * strided batch: the weight is shared), one call per sample over the groups for the
 * weight's gradient (which accumulates with beta = 1). The f64 path is the reference
 * opreg check compares with; no vendor convolution library here (cuDNN comes later,
 * behind dlopen). f16 and bf16 run the f32 path on widened copies of their operands,
 * the result rounded once (as the CPU plugin computes them, cpu_half.c); a bias is added
 * to the rounded result. */
#include "gpu_common.cuh"

#include "../common/opc_conv.h"

namespace {

/* At most this many elements of unfolded image per chunk of samples (at least one
 * sample): 64 MiB of f32, enough to batch the small images of a CNN. */
const int64_t COL_BUDGET = (int64_t)1 << 24;

bool unfold_is_identity(const opc_conv *g)
{
    for (int d = 0; d < 3; d++)
        if (g->k[d] != 1 || g->st[d] != 1 || g->pad[d] != 0) return false;
    return true;
}

/* ------------------------------------------------------------------ unfold and fold */

/* unfold: col[s, c, kk, o] = big[s, c, o * stride + k * dilation - pad] (0 in the
 * padding) for `count` = samples * C_b rows (s, c) of the contiguous big image; col is
 * [samples, C_b, kvol, svol], so a group's rows of one sample form one matrix
 * [C_b / groups * kvol, svol]. One thread per element of col. */
template <class T>
__global__ void k_unfold(int64_t total, opc_conv g, const T *big, T *col)
{
    GK_LOOP(e, total)
    {
        const int64_t o = e % g.svol, r = e / g.svol, kk = r % g.kvol, sc = r / g.kvol;
        const int64_t o2 = o % g.ss[2], o1 = o / g.ss[2] % g.ss[1], o0 = o / (g.ss[1] * g.ss[2]);
        const int64_t k2 = kk % g.k[2], k1 = kk / g.k[2] % g.k[1], k0 = kk / (g.k[1] * g.k[2]);
        const int64_t i0 = o0 * g.st[0] - g.pad[0] + k0 * g.dil[0];
        const int64_t i1 = o1 * g.st[1] - g.pad[1] + k1 * g.dil[1];
        const int64_t i2 = o2 * g.st[2] - g.pad[2] + k2 * g.dil[2];
        const bool in = i0 >= 0 && i0 < g.sb[0] && i1 >= 0 && i1 < g.sb[1] && i2 >= 0 && i2 < g.sb[2];
        col[e] = in ? big[sc * g.bvol + (i0 * g.sb[1] + i1) * g.sb[2] + i2] : (T)0;
    }
}

/* fold, the adjoint of unfold: big[s, c, i] = the sum of col[s, c, kk, o] over the
 * (kk, o) that unfold read from i. One thread per element of big (total = samples * C_b
 * * bvol): along each dim, o = (i + pad - k * dilation) / stride where that divides. */
template <class T>
__global__ void k_fold(int64_t total, opc_conv g, const T *col, T *big)
{
    GK_LOOP(e, total)
    {
        const int64_t i = e % g.bvol, sc = e / g.bvol;
        const int64_t i2 = i % g.sb[2], i1 = i / g.sb[2] % g.sb[1], i0 = i / (g.sb[1] * g.sb[2]);
        const T *cs = col + sc * g.kvol * g.svol;
        T acc = (T)0;
        for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
            const int64_t t0 = i0 + g.pad[0] - k0 * g.dil[0];
            if (t0 < 0 || t0 % g.st[0] || t0 / g.st[0] >= g.ss[0]) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
                const int64_t t1 = i1 + g.pad[1] - k1 * g.dil[1];
                if (t1 < 0 || t1 % g.st[1] || t1 / g.st[1] >= g.ss[1]) continue;
                for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                    const int64_t t2 = i2 + g.pad[2] - k2 * g.dil[2];
                    if (t2 < 0 || t2 % g.st[2] || t2 / g.st[2] >= g.ss[2]) continue;
                    const int64_t kk = (k0 * g.k[1] + k1) * g.k[2] + k2;
                    const int64_t o = (t0 / g.st[0] * g.ss[1] + t1 / g.st[1]) * g.ss[2] + t2 / g.st[2];
                    acc += cs[kk * g.svol + o];
                }
            }
        }
        big[e] = acc;
    }
}

/* y[s, c, :] += bias[c] over y contiguous [N, C, inner]; bias read with its stride. */
template <class T>
__global__ void k_add_bias(int64_t total, int64_t ch, int64_t inner, const T *bias, int64_t bstride, T *y)
{
    GK_LOOP(e, total) y[e] = gk_from_d<T>(gk_to_d(y[e]) + gk_to_d(bias[(e / inner % ch) * bstride]));
}

template <class T>
int launch_unfold(const gk_ctx *k, const opc_conv *g, int64_t samples, const void *big, void *col)
{
    const int64_t total = samples * g->cb * g->kvol * g->svol;
    if (total == 0) return OPR_OK;
    gk_launch(k_unfold<T>, gk_blocks(total), GK_THREADS, 0, k->stream, total, *g, (const T *)big, (T *)col);
    return gk_launched(k, "unfold kernel");
}

template <class T>
int launch_fold(const gk_ctx *k, const opc_conv *g, int64_t samples, const void *col, void *big)
{
    const int64_t total = samples * g->cb * g->bvol;
    if (total == 0) return OPR_OK;
    gk_launch(k_fold<T>, gk_blocks(total), GK_THREADS, 0, k->stream, total, *g, (const T *)col, (T *)big);
    return gk_launched(k, "fold kernel");
}

/* ------------------------------------------------------------------ the three directions */

typedef enum conv_dir { TO_SMALL, TO_BIG, WEIGHT_GRAD } conv_dir;

/* Runs one direction in dtype T on contiguous operands (plugins/common/opc_conv.h's
 * layouts: small, big [N, C, *spatial], w [C_s, C_b / groups, *k]):
 *   TO_SMALL:    out = small from a = big, b = w
 *   TO_BIG:      out = big from a = small, b = w
 *   WEIGHT_GRAD: out = dw from a = small, b = big */
template <class T>
int conv_run(const gk_ctx *k, const opc_conv *g, conv_dir dir, const void *a, const void *b, void *out)
{
    const opr_dtype dt = sizeof(T) == sizeof(float) ? OPR_F32 : OPR_F64;
    const int64_t cbg = g->cb / g->groups, csg = g->cs / g->groups, kdim = cbg * g->kvol;
    const int64_t col_sample = g->cb * g->kvol * g->svol; /* one sample's column matrices */
    const int64_t big_sample = g->cb * g->bvol, small_sample = g->cs * g->svol;
    const bool id = unfold_is_identity(g);
    int rc;
    if (dir == WEIGHT_GRAD && g->n == 0) {
        GK_TRY(k, gpuMemsetAsync(out, 0, (size_t)(g->cs * kdim) * sizeof(T), k->stream));
        return OPR_OK;
    }
    int64_t chunk = g->n > 0 ? g->n : 1;
    if (!id && col_sample > 0 && chunk > COL_BUDGET / col_sample) chunk = COL_BUDGET / col_sample > 1 ? COL_BUDGET / col_sample : 1;
    gk_buf col;
    if (!id && (rc = col.alloc(k, (size_t)(chunk * col_sample) * sizeof(T)))) return rc;
    for (int64_t n0 = 0; n0 < g->n; n0 += chunk) {
        const int64_t cnt = g->n - n0 < chunk ? g->n - n0 : chunk;
        switch (dir) {
        case TO_SMALL: {
            const T *big = (const T *)a + n0 * big_sample, *w = (const T *)b;
            const T *m = id ? big : col.as<T>();
            if (!id && (rc = launch_unfold<T>(k, g, cnt, big, col.p))) return rc;
            T *small = (T *)out + n0 * small_sample;
            for (int64_t gr = 0; gr < g->groups; gr++)
                if ((rc = gk_gemm(k, dt, csg, g->svol, kdim, 1.0, w + gr * csg * kdim, kdim, 1, 0, m + gr * kdim * g->svol,
                                  g->svol, 1, col_sample, 0.0, small + gr * csg * g->svol, small_sample, cnt)))
                    return rc;
            break;
        }
        case TO_BIG: {
            const T *small = (const T *)a + n0 * small_sample, *w = (const T *)b;
            T *big = (T *)out + n0 * big_sample, *m = id ? big : col.as<T>();
            for (int64_t gr = 0; gr < g->groups; gr++) /* W_g^T: [kdim, csg] read through W_g's strides */
                if ((rc = gk_gemm(k, dt, kdim, g->svol, csg, 1.0, w + gr * csg * kdim, 1, kdim, 0, small + gr * csg * g->svol,
                                  g->svol, 1, small_sample, 0.0, m + gr * kdim * g->svol, col_sample, cnt)))
                    return rc;
            if (!id && (rc = launch_fold<T>(k, g, cnt, col.p, big))) return rc;
            break;
        }
        case WEIGHT_GRAD: {
            const T *big = (const T *)b + n0 * big_sample;
            if (!id && (rc = launch_unfold<T>(k, g, cnt, big, col.p))) return rc;
            for (int64_t s = 0; s < cnt; s++) { /* unfold(big)^T: [svol, kdim] read through its strides */
                const T *small = (const T *)a + (n0 + s) * small_sample, *m = (id ? big : col.as<T>()) + s * col_sample;
                if ((rc = gk_gemm(k, dt, csg, kdim, g->svol, 1.0, small, g->svol, 1, csg * g->svol, m, 1, g->svol,
                                  kdim * g->svol, n0 + s == 0 ? 0.0 : 1.0, out, csg * kdim, g->groups)))
                    return rc;
            }
            break;
        }
        }
    }
    return OPR_OK;
}

/* Elements of a contiguous f16 / bf16 operand, widened into f32 scratch. */
int widen(const gk_ctx *k, opr_dtype dt, int64_t n, const void *src, gk_buf *buf)
{
    int rc = buf->alloc(k, (size_t)n * sizeof(float));
    const int64_t one = 1;
    return rc ? rc : gk_convert_strided(k, OPR_F32, 1, &n, buf->p, &one, dt, src, &one);
}

int conv_dispatch(const gk_ctx *k, opr_dtype dt, const opc_conv *g, conv_dir dir, const void *a, const void *b, void *out)
{
    if (dt == OPR_F32) return conv_run<float>(k, g, dir, a, b, out);
    if (dt == OPR_F64) return conv_run<double>(k, g, dir, a, b, out);
    /* the halves: operand sizes by direction (opc_conv.h's layouts), in f32, rounded once */
    const int64_t big = g->n * g->cb * g->bvol, small = g->n * g->cs * g->svol, w = g->cs * (g->cb / g->groups) * g->kvol;
    const int64_t na = dir == TO_SMALL ? big : small, nb = dir == TO_SMALL || dir == TO_BIG ? w : big;
    const int64_t nout = dir == TO_SMALL ? small : dir == TO_BIG ? big : w, one = 1;
    gk_buf ba, bb, bo;
    int rc;
    if ((rc = widen(k, dt, na, a, &ba)) || (rc = widen(k, dt, nb, b, &bb)) || (rc = bo.alloc(k, (size_t)nout * sizeof(float))) ||
        (rc = conv_run<float>(k, g, dir, ba.p, bb.p, bo.p)))
        return rc;
    return gk_convert_strided(k, dt, 1, &nout, out, &one, OPR_F32, bo.p, &one);
}

/* ------------------------------------------------------------------ operands */

int check_float(const opr_kernel_call *c, const opr_tensor_view *v, opr_dtype dt)
{
    if (!v) return OPR_OK;
    if (!((GK_FLOATS | GK_HALVES) & GK_BIT(dt)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", c->op, GPU_RUNTIME_NAME, gk_dtype_name(dt));
    return gk_check_dtype(c, c->op, "an operand", v, dt);
}

/* The geometry of a call: big, small and weight shapes (the caller picks which tensor
 * is which by `transposed`), the per-dim args at ai (stride, padding, dilation). */
int geometry(const opr_kernel_call *c, int32_t ndim, const int64_t *big, const int64_t *small, const int64_t *w, int ai,
             int64_t groups, opc_conv *g)
{
    char why[OPC_WHY_SIZE];
    if (ai + 2 >= c->nargs ||
        !opc_conv_geometry(c->op, ndim, big, small, w, c->args[ai], c->args[ai + 1], c->args[ai + 2], groups, g, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", ai + 2 >= c->nargs ? "convolution: too few arguments" : why);
    return OPR_OK;
}

template <class T>
void launch_add_bias(const gk_ctx *k, int64_t total, int64_t ch, int64_t inner, const void *bias, int64_t bstride, void *y)
{
    gk_launch(k_add_bias<T>, gk_blocks(total), GK_THREADS, 0, k->stream, total, ch, inner, (const T *)bias, bstride, (T *)y);
}

/* out (contiguous [N, C, *]) += bias[c]. */
int add_bias(const gk_ctx *k, const opr_tensor_view *bias, opr_tensor_view *y)
{
    const int64_t ch = y->shape[1], inner = y->numel / (y->shape[0] * ch);
    if (bias->ndim != 1 || bias->shape[0] != ch)
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s: bias must have shape [%lld]", k->op, (long long)ch);
    GK_FLOAT_DISPATCH(y->dtype, launch_add_bias, k, y->numel, ch, inner, bias->data, bias->strides[0], y->data);
    return gk_launched(k, "bias kernel");
}

/* ------------------------------------------------------------------ kernels */

/* convolution: args (input, weight, bias, stride, padding, dilation, transposed,
 * output_padding, groups); output contiguous. output_padding is implied by the output's
 * shape, which the geometry checks. */
int k_convolution(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "convolution", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *w = gk_arg_t(c, 1), *bias = gk_arg_t(c, 2);
    opr_tensor_view *y = c->outputs[0];
    const bool tr = gk_arg_b(c, 6);
    if (!x || !w) return GK_FAIL(c, OPR_ERR_INVALID, "convolution: expected input and weight tensors");
    if ((rc = check_float(c, x, y->dtype)) || (rc = check_float(c, w, y->dtype)) || (rc = check_float(c, bias, y->dtype)))
        return rc;
    opc_conv g;
    if ((rc = geometry(c, x->ndim, tr ? y->shape : x->shape, tr ? x->shape : y->shape, w->shape, 3, gk_arg_i(c, 8), &g)))
        return rc;
    if (y->numel == 0) return OPR_OK;
    gk_buf bx, bw;
    const void *px, *pw;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = gk_dense(&k, w, &bw, &pw))) return rc;
    if ((rc = conv_dispatch(&k, y->dtype, &g, tr ? TO_BIG : TO_SMALL, px, pw, y->data))) return rc;
    return bias ? add_bias(&k, bias, y) : OPR_OK;
}

/* convolution_backward_weight: args (grad_output, input, weight_size, stride, padding,
 * dilation, transposed, groups); output: the weight's gradient, contiguous. A transposed
 * convolution's big image is its output (here grad_output). */
int k_convolution_backward_weight(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "convolution_backward_weight", &k);
    if (rc) return rc;
    const opr_tensor_view *gy = gk_arg_t(c, 0), *x = gk_arg_t(c, 1);
    opr_tensor_view *dw = c->outputs[0];
    const bool tr = gk_arg_b(c, 6);
    if (!gy || !x) return GK_FAIL(c, OPR_ERR_INVALID, "convolution_backward_weight: expected grad_output and input tensors");
    if ((rc = check_float(c, gy, dw->dtype)) || (rc = check_float(c, x, dw->dtype))) return rc;
    opc_conv g;
    if ((rc = geometry(c, x->ndim, tr ? gy->shape : x->shape, tr ? x->shape : gy->shape, dw->shape, 3, gk_arg_i(c, 7), &g)))
        return rc;
    if (dw->numel == 0) return OPR_OK;
    gk_buf bg, bx;
    const void *pg, *px;
    if ((rc = gk_dense(&k, gy, &bg, &pg)) || (rc = gk_dense(&k, x, &bx, &px))) return rc;
    return conv_dispatch(&k, dw->dtype, &g, WEIGHT_GRAD, tr ? px : pg, tr ? pg : px, dw->data);
}

/* convolution_backward (ATen's op) and convolution_backward_fused (convolution's fused
 * backward), as on the CPU:
 *   convolution_backward: args (grad_output, input, weight, bias_sizes, stride, padding,
 *     dilation, transposed, output_padding, groups, output_mask), the mask a list of 3
 *     ints; the outputs the mask leaves out are empty;
 *   convolution_backward_fused: args (grad, input, weight, bias, stride, ..., groups,
 *     result), each tensor NONE unless the plan saved it, the mask in grad_input_mask,
 *     unwanted outputs with NULL data.
 * The arguments sit at the same places; the shapes of input and weight come from their
 * gradients where the plan did not save them. Outputs (input, weight, bias gradients)
 * contiguous; the bias gradient is grad summed over every dim but 1, in double. */
int k_convolution_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    unsigned mask = c->grad_input_mask;
    if (!mask && c->nargs > 10 && c->args[10]->kind == OPR_ARG_INT_LIST)
        for (int i = 0; i < c->args[10]->u.il.n && i < 3; i++) mask |= (c->args[10]->u.il.items[i] ? 1u : 0u) << i;
    if (c->nout < 3 || c->nargs < 10) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 10 or more arguments and 3 outputs", c->op);
    opr_tensor_view *dx = mask & 1 ? c->outputs[0] : nullptr, *dw = mask & 2 ? c->outputs[1] : nullptr;
    opr_tensor_view *db = mask & 4 ? c->outputs[2] : nullptr;
    const opr_tensor_view *gy = gk_arg_t(c, 0), *x = gk_arg_t(c, 1), *w = gk_arg_t(c, 2);
    const bool tr = gk_arg_b(c, 7);
    if (!gy) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output", c->op);
    if ((dx && !w) || (dw && !x)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: %s was not given", c->op, dx && !w ? "weight" : "input");
    if ((rc = check_float(c, gy, gy->dtype)) || (rc = check_float(c, x, gy->dtype)) || (rc = check_float(c, w, gy->dtype)))
        return rc;
    const int64_t *xs = x ? x->shape : dx ? dx->shape : nullptr, *ws = w ? w->shape : dw ? dw->shape : nullptr;
    opc_conv g;
    if (dx || dw) {
        if (!xs || !ws) return GK_FAIL(c, OPR_ERR_INVALID, "%s: the shapes of input and weight are unknown", c->op);
        if ((rc = geometry(c, gy->ndim, tr ? gy->shape : xs, tr ? xs : gy->shape, ws, 4, gk_arg_i(c, 9), &g))) return rc;
    }
    gk_buf bg, bx, bw;
    const void *pg = nullptr, *px = nullptr, *pw = nullptr;
    if ((dx && dx->numel) || (dw && dw->numel)) {
        if ((rc = gk_dense(&k, gy, &bg, &pg)) || (rc = gk_dense(&k, dw ? x : nullptr, &bx, &px)) ||
            (rc = gk_dense(&k, dx ? w : nullptr, &bw, &pw)))
            return rc;
    }
    if (dx && dx->numel && (rc = conv_dispatch(&k, gy->dtype, &g, tr ? TO_SMALL : TO_BIG, pg, pw, dx->data))) return rc;
    if (dw && dw->numel && (rc = conv_dispatch(&k, gy->dtype, &g, WEIGHT_GRAD, tr ? px : pg, tr ? pg : px, dw->data))) return rc;
    if (db && db->numel) {
        if (gy->ndim < 2 || db->numel != gy->shape[1])
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: the bias gradient has %lld elements for %lld channels", c->op,
                           (long long)db->numel, (long long)(gy->ndim < 2 ? 0 : gy->shape[1]));
        const uint32_t sum_mask = ((1u << gy->ndim) - 1u) & ~2u;
        if (gy->numel == 0) {
            GK_TRY(&k, gpuMemsetAsync(db->data, 0, (size_t)db->numel * gk_dtype_size(db->dtype), k.stream));
            return OPR_OK;
        }
        return gk_sum_dims(&k, gy, sum_mask, db, 1.0);
    }
    return OPR_OK;
}

} // namespace

/* Where the YAML does not define these ops, the host skips the kernels with a log line
 * (registrations are optional). */
int gk_register_conv(opr_plugin *self)
{
    const struct {
        const char *op;
        opr_kernel_fn fn;
    } table[] = {
        {"convolution", k_convolution},
        {"convolution_backward_weight", k_convolution_backward_weight},
        {"convolution_backward", k_convolution_backward},
#ifdef OPR_GK_CONVOLUTION_BACKWARD
        {"convolution_backward_fused", k_convolution_backward},
#endif
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, GK_FLOATS | GK_HALVES, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
