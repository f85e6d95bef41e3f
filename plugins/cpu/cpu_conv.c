/* Convolution kernels (f32 and f64; f16 and bf16 through f32): convolution,
 * convolution_backward_weight, and convolution_backward, which also serves as the fused
 * backward convolution_backward_fused.
 *
 * Every direction is an unfold (im2col) or fold (col2im) of the "big" image and one GEMM
 * per sample and group (plugins/common/opc_conv.h names the big and small images):
 *   small  = W_g  @ unfold(big)              (a convolution; the gradient of a transposed one's input)
 *   big    = fold(W_g^T @ small)             (a transposed convolution; the gradient of a convolution's input)
 *   dW_g  += small @ unfold(big)^T           (the weight's gradient, summed over the batch)
 * A 1x1 kernel with stride 1 and no padding needs no unfold: the image is its own matrix.
 * The f64 path is the conformance reference; it uses the same BLAS calls as f32 (dgemm),
 * whose sums are exact enough for that (the reference's tolerance is 1e-10 relative). */
#include "cpu_blas.h"
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_conv.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ unfold and fold */

/* The geometry's per-dim values, flattened for the loops. */
#define CONV_DIMS(g)                                                                                          \
    const int64_t K1 = (g)->k[1], K2 = (g)->k[2], O0 = (g)->ss[0], O1 = (g)->ss[1],          \
                  O2 = (g)->ss[2], I0 = (g)->sb[0], I1 = (g)->sb[1], I2 = (g)->sb[2], S0 = (g)->st[0],        \
                  S1 = (g)->st[1], S2 = (g)->st[2], P0 = (g)->pad[0], P1 = (g)->pad[1], P2 = (g)->pad[2],     \
                  D0 = (g)->dil[0], D1 = (g)->dil[1], D2 = (g)->dil[2]

/* unfold: col[(c, k0, k1, k2), (o0, o1, o2)] = big[c, o * stride + k * dilation - pad]
 * (0 in the padding), for the channels of one group (big: [channels, *sb] contiguous).
 * fold: the adjoint, big += col summed onto the positions it came from. One row of col
 * per (c, k); the rows are independent in unfold, and in fold those of one channel c
 * write the same plane, so fold splits the channels between the threads. */
#define CONV_FOLDS(T, SUF)                                                                                    \
    static void unfold_##SUF(const opc_conv *g, int64_t channels, const T *big, T *col)                        \
    {                                                                                                         \
        CONV_DIMS(g);                                                                                         \
        const int64_t rows = channels * g->kvol;                                                              \
        _Pragma("omp parallel for if (rows * g->svol >= CPU_PAR_THRESHOLD) schedule(static)")                 \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            const int64_t c = r / g->kvol, kk = r % g->kvol;                                                  \
            const int64_t k0 = kk / (K1 * K2), k1 = kk / K2 % K1, k2 = kk % K2;                               \
            const T *src = big + c * g->bvol;                                                                 \
            T *dst = col + r * g->svol;                                                                       \
            for (int64_t o0 = 0; o0 < O0; o0++) {                                                             \
                const int64_t i0 = o0 * S0 - P0 + k0 * D0;                                                    \
                for (int64_t o1 = 0; o1 < O1; o1++) {                                                         \
                    const int64_t i1 = o1 * S1 - P1 + k1 * D1;                                                \
                    T *d = dst + (o0 * O1 + o1) * O2;                                                         \
                    if (i0 < 0 || i0 >= I0 || i1 < 0 || i1 >= I1) {                                           \
                        memset(d, 0, (size_t)O2 * sizeof(T));                                                 \
                        continue;                                                                             \
                    }                                                                                         \
                    const T *s = src + (i0 * I1 + i1) * I2;                                                   \
                    const int64_t base = k2 * D2 - P2;                                                        \
                    if (S2 == 1 && base >= 0 && base + O2 <= I2) {                                            \
                        memcpy(d, s + base, (size_t)O2 * sizeof(T));                                          \
                        continue;                                                                             \
                    }                                                                                         \
                    for (int64_t o2 = 0; o2 < O2; o2++) {                                                     \
                        const int64_t i2 = o2 * S2 + base;                                                    \
                        d[o2] = i2 >= 0 && i2 < I2 ? s[i2] : (T)0;                                            \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }                                                                                                         \
    static void fold_##SUF(const opc_conv *g, int64_t channels, const T *col, T *big)                          \
    {                                                                                                         \
        CONV_DIMS(g);                                                                                         \
        _Pragma("omp parallel for if (channels * g->kvol * g->svol >= CPU_PAR_THRESHOLD) schedule(static)")   \
        for (int64_t c = 0; c < channels; c++) {                                                              \
            T *dst = big + c * g->bvol;                                                                       \
            memset(dst, 0, (size_t)g->bvol * sizeof(T));                                                      \
            for (int64_t kk = 0; kk < g->kvol; kk++) {                                                        \
                const int64_t k0 = kk / (K1 * K2), k1 = kk / K2 % K1, k2 = kk % K2;                           \
                const T *src = col + (c * g->kvol + kk) * g->svol;                                            \
                for (int64_t o0 = 0; o0 < O0; o0++) {                                                         \
                    const int64_t i0 = o0 * S0 - P0 + k0 * D0;                                                \
                    if (i0 < 0 || i0 >= I0) continue;                                                         \
                    for (int64_t o1 = 0; o1 < O1; o1++) {                                                     \
                        const int64_t i1 = o1 * S1 - P1 + k1 * D1;                                            \
                        if (i1 < 0 || i1 >= I1) continue;                                                     \
                        const T *s = src + (o0 * O1 + o1) * O2;                                               \
                        T *d = dst + (i0 * I1 + i1) * I2;                                                     \
                        const int64_t base = k2 * D2 - P2;                                                    \
                        for (int64_t o2 = 0; o2 < O2; o2++) {                                                 \
                            const int64_t i2 = o2 * S2 + base;                                                \
                            if (i2 >= 0 && i2 < I2) d[i2] += s[o2];                                           \
                        }                                                                                     \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }
CONV_FOLDS(float, f32)
CONV_FOLDS(double, f64)

/* ------------------------------------------------------------------ the three directions */

/* Whether the unfold of big is big itself (a 1x1 kernel, stride 1, no padding). */
static bool unfold_is_identity(const opc_conv *g)
{
    for (int d = 0; d < 3; d++)
        if (g->k[d] != 1 || g->st[d] != 1 || g->pad[d] != 0) return false;
    return true;
}

/* small, big: contiguous [N, C, *spatial]; w: contiguous [C_s, C_b / groups, *k];
 * col: scratch of (C_b / groups) * kvol * svol elements, unused (may be NULL) when the
 * unfold is the identity. */
#define CONV_DIRECTIONS(T, SUF, GEMM)                                                                         \
    static void to_small_##SUF(const opc_conv *g, const T *big, const T *w, T *small, T *col)                  \
    {                                                                                                         \
        const int64_t cbg = g->cb / g->groups, csg = g->cs / g->groups, kdim = cbg * g->kvol;                 \
        const bool id = unfold_is_identity(g);                                                                \
        for (int64_t n = 0; n < g->n; n++)                                                                    \
            for (int64_t gr = 0; gr < g->groups; gr++) {                                                      \
                const T *b = big + (n * g->cb + gr * cbg) * g->bvol;                                          \
                if (!id) unfold_##SUF(g, cbg, b, col);                                                        \
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)csg, (blasint)g->svol, (blasint)kdim, \
                     1, w + gr * csg * kdim, (blasint)kdim, id ? b : col, (blasint)g->svol, 0,                \
                     small + (n * g->cs + gr * csg) * g->svol, (blasint)g->svol);                             \
            }                                                                                                 \
    }                                                                                                         \
    static void to_big_##SUF(const opc_conv *g, const T *small, const T *w, T *big, T *col)                    \
    {                                                                                                         \
        const int64_t cbg = g->cb / g->groups, csg = g->cs / g->groups, kdim = cbg * g->kvol;                 \
        const bool id = unfold_is_identity(g);                                                                \
        for (int64_t n = 0; n < g->n; n++)                                                                    \
            for (int64_t gr = 0; gr < g->groups; gr++) {                                                      \
                T *b = big + (n * g->cb + gr * cbg) * g->bvol;                                                \
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)kdim, (blasint)g->svol, (blasint)csg,  \
                     1, w + gr * csg * kdim, (blasint)kdim, small + (n * g->cs + gr * csg) * g->svol,         \
                     (blasint)g->svol, 0, id ? b : col, (blasint)g->svol);                                    \
                if (!id) fold_##SUF(g, cbg, col, b);                                                          \
            }                                                                                                 \
    }                                                                                                         \
    static void weight_grad_##SUF(const opc_conv *g, const T *small, const T *big, T *dw, T *col)              \
    {                                                                                                         \
        const int64_t cbg = g->cb / g->groups, csg = g->cs / g->groups, kdim = cbg * g->kvol;                 \
        const bool id = unfold_is_identity(g);                                                                \
        memset(dw, 0, (size_t)(g->cs * kdim) * sizeof(T));                                                    \
        for (int64_t n = 0; n < g->n; n++)                                                                    \
            for (int64_t gr = 0; gr < g->groups; gr++) {                                                      \
                const T *b = big + (n * g->cb + gr * cbg) * g->bvol;                                          \
                if (!id) unfold_##SUF(g, cbg, b, col);                                                        \
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)csg, (blasint)kdim, (blasint)g->svol,  \
                     1, small + (n * g->cs + gr * csg) * g->svol, (blasint)g->svol, id ? b : col,             \
                     (blasint)g->svol, 1, dw + gr * csg * kdim, (blasint)kdim);                               \
            }                                                                                                 \
    }
CONV_DIRECTIONS(float, f32, cblas_sgemm)
CONV_DIRECTIONS(double, f64, cblas_dgemm)

typedef enum conv_dir { TO_SMALL, TO_BIG, WEIGHT_GRAD } conv_dir;

/* Runs one direction in dtype dt. a, b: the operands in the order of the macros above
 * (to_small: big, w; to_big: small, w; weight_grad: small, big). */
static int conv_run(const opr_kernel_call *c, opr_dtype dt, const opc_conv *g, conv_dir dir, const void *a, const void *b,
                    void *out)
{
    const bool f32 = dt == OPR_F32;
    const size_t es = f32 ? sizeof(float) : sizeof(double);
    void *col = NULL;
    if (!unfold_is_identity(g) && g->n > 0) {
        const int64_t cbg = g->cb / g->groups, elems = cbg * g->kvol * g->svol;
        if (elems > BLAS_INT_MAX || g->svol > BLAS_INT_MAX)
            return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: an unfolded image of %lld elements is too large for BLAS", c->op,
                            (long long)elems);
        if (!(col = malloc((size_t)(elems ? elems : 1) * es)))
            return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for an unfolded image (%lld elements)", c->op,
                            (long long)elems);
    }
    switch (dir) {
    case TO_SMALL: f32 ? to_small_f32(g, a, b, out, col) : to_small_f64(g, a, b, out, col); break;
    case TO_BIG: f32 ? to_big_f32(g, a, b, out, col) : to_big_f64(g, a, b, out, col); break;
    case WEIGHT_GRAD: f32 ? weight_grad_f32(g, a, b, out, col) : weight_grad_f64(g, a, b, out, col); break;
    }
    free(col);
    return OPR_OK;
}

/* ------------------------------------------------------------------ operands */

/* out[n, c, :] += bias[c] over out's spatial elements (out contiguous [N, C, *]). */
static void add_bias(const opr_tensor_view *bias, opr_tensor_view *out)
{
    const int64_t n = out->shape[0], ch = out->shape[1], inner = n && ch ? out->numel / (n * ch) : 0;
    const bool f32 = out->dtype == OPR_F32;
    _Pragma("omp parallel for if (out->numel >= CPU_PAR_THRESHOLD) schedule(static)")
    for (int64_t r = 0; r < n * ch; r++) {
        const int64_t cc = r % ch;
        if (f32) {
            const float b = ((const float *)bias->data)[cc * bias->strides[0]];
            float *o = (float *)out->data + r * inner;
            for (int64_t i = 0; i < inner; i++) o[i] += b;
        } else {
            const double b = ((const double *)bias->data)[cc * bias->strides[0]];
            double *o = (double *)out->data + r * inner;
            for (int64_t i = 0; i < inner; i++) o[i] += b;
        }
    }
}

/* bias gradient: db[c] = the sum of grad[:, c, ...] (grad contiguous [N, C, *]), in
 * double, in order. */
static void bias_grad(const opr_tensor_view *grad, const void *gd, opr_tensor_view *db)
{
    const int64_t n = grad->shape[0], ch = grad->shape[1], inner = n && ch ? grad->numel / (n * ch) : 0;
    const bool f32 = grad->dtype == OPR_F32;
    for (int64_t cc = 0; cc < ch; cc++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t off = (i * ch + cc) * inner;
            for (int64_t j = 0; j < inner; j++) acc += f32 ? (double)((const float *)gd)[off + j] : ((const double *)gd)[off + j];
        }
        if (f32) ((float *)db->data)[cc] = (float)acc;
        else ((double *)db->data)[cc] = acc;
    }
}

static int check_float(const opr_kernel_call *c, const opr_tensor_view *v, opr_dtype dt)
{
    if (!v || v->dtype == dt) return OPR_OK;
    return CPU_FAIL(c, OPR_ERR_INVALID, "%s: operands of dtypes %s and %s", c->op, cpu_dtype_name(v->dtype), cpu_dtype_name(dt));
}

/* The geometry of a call: big, small and weight shapes (the caller picks which tensor
 * is which by `transposed`), the per-dim args at ai (stride, padding, dilation). */
static int geometry(const opr_kernel_call *c, int32_t ndim, const int64_t *big, const int64_t *small, const int64_t *w, int ai,
                    int64_t groups, opc_conv *g)
{
    char why[OPC_WHY_SIZE];
    if (!opc_conv_geometry(c->op, ndim, big, small, w, c->args[ai], c->args[ai + 1], c->args[ai + 2], groups, g, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

/* ------------------------------------------------------------------ kernels */

/* convolution: args (input, weight, bias, stride, padding, dilation, transposed,
 * output_padding, groups). */
static int k_convolution(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 1), *bias = cpu_arg_t(c, 2);
    opr_tensor_view *y = c->outputs[0];
    const bool tr = cpu_arg_b(c, 6);
    if (!x || !w) return CPU_FAIL(c, OPR_ERR_INVALID, "convolution: expected input and weight tensors");
    int rc = check_float(c, x, y->dtype);
    if (!rc) rc = check_float(c, w, y->dtype);
    if (!rc) rc = check_float(c, bias, y->dtype);
    opc_conv g;
    if (!rc) rc = geometry(c, x->ndim, tr ? y->shape : x->shape, tr ? x->shape : y->shape, w->shape, 3, cpu_arg_i(c, 8), &g);
    if (rc || y->numel == 0) return rc;
    void *ox, *ow;
    const void *px = cpu_dense(x, &ox), *pw = cpu_dense(w, &ow);
    if (!px || !pw) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "convolution: out of memory for a contiguous copy");
    else rc = conv_run(c, y->dtype, &g, tr ? TO_BIG : TO_SMALL, px, pw, y->data);
    if (!rc && bias) add_bias(bias, y);
    free(ox);
    free(ow);
    return rc;
}

/* convolution_backward_weight: args (grad_output, input, weight_size, stride, padding,
 * dilation, transposed, groups). A transposed convolution's big image is its output. */
static int k_convolution_backward_weight(const opr_kernel_call *c)
{
    const opr_tensor_view *gy = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1);
    opr_tensor_view *dw = c->outputs[0];
    const bool tr = cpu_arg_b(c, 6);
    if (!gy || !x) return CPU_FAIL(c, OPR_ERR_INVALID, "convolution_backward_weight: expected grad_output and input tensors");
    int rc = check_float(c, gy, dw->dtype);
    if (!rc) rc = check_float(c, x, dw->dtype);
    opc_conv g;
    if (!rc) rc = geometry(c, x->ndim, tr ? gy->shape : x->shape, tr ? x->shape : gy->shape, dw->shape, 3, cpu_arg_i(c, 7), &g);
    if (rc || dw->numel == 0) return rc;
    void *og, *ox;
    const void *pg = cpu_dense(gy, &og), *px = cpu_dense(x, &ox);
    if (!pg || !px) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "convolution_backward_weight: out of memory for a contiguous copy");
    else rc = conv_run(c, dw->dtype, &g, WEIGHT_GRAD, tr ? px : pg, tr ? pg : px, dw->data);
    free(og);
    free(ox);
    return rc;
}

/* convolution_backward (ATen's op: args (grad_output, input, weight, bias_sizes, stride,
 * padding, dilation, transposed, output_padding, groups, output_mask), the outputs the mask
 * leaves out are empty) and convolution_backward_fused (convolution's fused backward:
 * args (grad, input, weight, bias, stride, ..., groups, result), each tensor NONE unless
 * the plan saved it, the mask in grad_input_mask, unwanted outputs with NULL data). The
 * arguments sit at the same places; the shapes of input and weight come from their
 * gradients where the plan did not save them. */
static int k_convolution_backward(const opr_kernel_call *c)
{
    const bool fused = c->grad_input_mask != 0;
    unsigned mask = c->grad_input_mask;
    if (!fused && c->args[10]->kind == OPR_ARG_INT_LIST)
        for (int i = 0; i < c->args[10]->u.il.n && i < 3; i++) mask |= (c->args[10]->u.il.items[i] ? 1u : 0u) << i;
    if (c->nout < 3) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 outputs", c->op);
    opr_tensor_view *dx = mask & 1 ? c->outputs[0] : NULL, *dw = mask & 2 ? c->outputs[1] : NULL, *db = mask & 4 ? c->outputs[2] : NULL;
    const opr_tensor_view *gy = cpu_arg_t(c, 0), *x = cpu_arg_t(c, 1), *w = cpu_arg_t(c, 2);
    const bool tr = cpu_arg_b(c, 7);
    if (!gy) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected grad_output", c->op);
    if ((dx && !w) || (dw && !x)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s was not given", c->op, dx && !w ? "weight" : "input");
    const int64_t *xs = x ? x->shape : dx ? dx->shape : NULL, *ws = w ? w->shape : dw ? dw->shape : NULL;
    int rc = check_float(c, x, gy->dtype);
    if (!rc) rc = check_float(c, w, gy->dtype);
    opc_conv g;
    if (!rc && (dx || dw)) {
        if (!xs || !ws) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the shapes of input and weight are unknown", c->op);
        rc = geometry(c, gy->ndim, tr ? gy->shape : xs, tr ? xs : gy->shape, ws, 4, cpu_arg_i(c, 9), &g);
    }
    if (rc) return rc;
    void *og = NULL, *ox = NULL, *ow = NULL;
    const void *pg = cpu_dense(gy, &og), *px = dw ? cpu_dense(x, &ox) : NULL, *pw = dx ? cpu_dense(w, &ow) : NULL;
    if (!pg || (dw && !px) || (dx && !pw)) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    if (!rc && dx && dx->numel) rc = conv_run(c, gy->dtype, &g, tr ? TO_SMALL : TO_BIG, pg, pw, dx->data);
    if (!rc && dw && dw->numel) rc = conv_run(c, gy->dtype, &g, WEIGHT_GRAD, tr ? px : pg, tr ? pg : px, dw->data);
    if (!rc && db && db->numel) {
        if (db->numel != gy->shape[1]) rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s: the bias gradient has %lld elements for %lld channels",
                                                     c->op, (long long)db->numel, (long long)gy->shape[1]);
        else bias_grad(gy, pg, db);
    }
    free(og);
    free(ox);
    free(ow);
    return rc;
}

int cpu_register_conv(opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"convolution", k_convolution},
        {"convolution_backward_weight", k_convolution_backward_weight},
        {"convolution_backward", k_convolution_backward},
        {"convolution_backward_fused", k_convolution_backward},
    };
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register_upcast(self, table[i].op, dtypes, table[i].fn);
        if (rc) return rc;
    }
    return OPR_OK;
}
