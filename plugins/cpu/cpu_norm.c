/* Normalisation and activation kernels: layer_norm, its fused backward
 * layer_norm_backward, ATen's native_layer_norm (layer_norm's kernel, which also writes
 * the row statistics) and native_layer_norm_backward (from those statistics), gelu and
 * gelu_backward (f32 and f64; the layer norm ops also f16 and bf16, through f32).
 *
 * layer_norm works on the rows x cols view of input (cols = numel(normalized_shape)):
 * the statistics of a row are accumulated in double, two passes (mean, then the sum of
 * squared deviations) as the result must not lose digits to cancellation. The backward
 * recomputes mean and rstd per row from input, so autograd saves input and weight only
 * (core needs no multi-output forward for it). gelu computes in the tensor's dtype, as
 * PyTorch's CPU kernel does; its tanh form 0.5 x (1 + tanh(u)) is evaluated as the equal
 * x sigmoid(2 u) = x / (1 + exp(-2 u)): one exp is cheaper than a tanh, and 1 + tanh(u)
 * loses the digits of a small result to cancellation where the sigmoid does not. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"
#include "../common/opc_norm.h"

#include <math.h>
#include <stdlib.h>

static int check_float(const opr_kernel_call *c, const char *what, const opr_tensor_view *v, opr_dtype dt)
{
    if (!v) return OPR_OK;
    if (v->dtype != OPR_F32 && v->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s", c->op, cpu_dtype_name(v->dtype));
    if (v->dtype != dt)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: %s is %s, expected %s", c->op, what, cpu_dtype_name(v->dtype), cpu_dtype_name(dt));
    return OPR_OK;
}

/* normalized_shape (argument ai) as a list. */
static bool int_list(const opr_kernel_call *c, int ai, const int64_t **items, int32_t *n)
{
    if (c->args[ai]->kind != OPR_ARG_INT_LIST) return false;
    *items = c->args[ai]->u.il.items;
    *n = c->args[ai]->u.il.n;
    return true;
}

/* Partial sums of a row: element j goes to acc[j % LN_NACC] (the tail to acc[0]), added
 * pairwise at the end. Independent chains instead of one add after another, and the
 * same order for every CPU and thread count. */
#define LN_NACC 8
static inline double ln_total(double *acc)
{
    for (int w = LN_NACC / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) acc[k] += acc[k + w];
    return acc[0];
}

/* The rows x cols loops per dtype, on contiguous data (w, b, g' NULL when absent):
 *   stats:    mean and 1 / sqrt(biased variance + eps) of each row, into st[2r], st[2r+1]
 *   forward:  y = (x - mean) * rstd * w + b
 *   grad_in:  dx = rstd * (g' - mean(g') - xhat * mean(g' * xhat)), g' = g * w
 *   grad_par: dw = sum over rows of g * xhat, db = sum of g (row order, in double) */
#define LN_LOOPS(T, SUF)                                                                                         \
    static void ln_stats_##SUF(const T *xr, int64_t cols, double eps, double *st)                              \
    {                                                                                                          \
        double s[LN_NACC] = {0}, ss[LN_NACC] = {0};                                                            \
        int64_t j = 0;                                                                                         \
        for (; j + LN_NACC <= cols; j += LN_NACC)                                                              \
            for (int k = 0; k < LN_NACC; k++) s[k] += (double)xr[j + k];                                       \
        for (; j < cols; j++) s[0] += (double)xr[j];                                                           \
        const double m = cols ? ln_total(s) / (double)cols : 0;                                                \
        for (j = 0; j + LN_NACC <= cols; j += LN_NACC)                                                         \
            for (int k = 0; k < LN_NACC; k++) ss[k] += ((double)xr[j + k] - m) * ((double)xr[j + k] - m);      \
        for (; j < cols; j++) ss[0] += ((double)xr[j] - m) * ((double)xr[j] - m);                             \
        st[0] = m;                                                                                             \
        st[1] = 1 / sqrt((cols ? ln_total(ss) / (double)cols : 0) + eps);                                      \
    }                                                                                                          \
    static void ln_forward_##SUF(int64_t rows, int64_t cols, double eps, const T *x, const T *w, const T *b, T *y, \
                                 double *st_out)                                                               \
    {                                                                                                          \
        _Pragma("omp parallel for schedule(static) if (rows * cols >= CPU_PAR_THRESHOLD)")                     \
        for (int64_t r = 0; r < rows; r++) {                                                                   \
            const T *xr = x + r * cols;                                                                        \
            T *yr = y + r * cols;                                                                              \
            double st_row[2], *st = st_out ? st_out + 2 * r : st_row;                                          \
            ln_stats_##SUF(xr, cols, eps, st);                                                                 \
            for (int64_t j = 0; j < cols; j++) {                                                               \
                double v = ((double)xr[j] - st[0]) * st[1];                                                    \
                if (w) v *= (double)w[j];                                                                      \
                if (b) v += (double)b[j];                                                                      \
                yr[j] = (T)v;                                                                                  \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    static void ln_all_stats_##SUF(int64_t rows, int64_t cols, double eps, const T *x, double *st)             \
    {                                                                                                          \
        _Pragma("omp parallel for schedule(static) if (rows * cols >= CPU_PAR_THRESHOLD)")                     \
        for (int64_t r = 0; r < rows; r++) ln_stats_##SUF(x + r * cols, cols, eps, st + 2 * r);                \
    }                                                                                                          \
    static void ln_grad_input_##SUF(int64_t rows, int64_t cols, const double *st, const T *g, const T *x,      \
                                    const T *w, T *gx)                                                         \
    {                                                                                                          \
        _Pragma("omp parallel for schedule(static) if (rows * cols >= CPU_PAR_THRESHOLD)")                     \
        for (int64_t r = 0; r < rows; r++) {                                                                   \
            const T *gr = g + r * cols, *xr = x + r * cols;                                                    \
            const double m = st[2 * r], rs = st[2 * r + 1];                                                    \
            double sg[LN_NACC] = {0}, sgx[LN_NACC] = {0};                                                      \
            int64_t j = 0;                                                                                     \
            for (; j + LN_NACC <= cols; j += LN_NACC)                                                          \
                for (int k = 0; k < LN_NACC; k++) {                                                            \
                    const double gj = (double)gr[j + k] * (w ? (double)w[j + k] : 1.0);                        \
                    sg[k] += gj;                                                                               \
                    sgx[k] += gj * ((double)xr[j + k] - m) * rs;                                               \
                }                                                                                              \
            for (; j < cols; j++) {                                                                            \
                const double gj = (double)gr[j] * (w ? (double)w[j] : 1.0);                                    \
                sg[0] += gj;                                                                                   \
                sgx[0] += gj * ((double)xr[j] - m) * rs;                                                       \
            }                                                                                                  \
            const double a = ln_total(sg) / (double)cols, bb = ln_total(sgx) / (double)cols;                   \
            for (int64_t j = 0; j < cols; j++) {                                                               \
                const double gj = (double)gr[j] * (w ? (double)w[j] : 1.0);                                    \
                gx[r * cols + j] = (T)(rs * (gj - a - ((double)xr[j] - m) * rs * bb));                         \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    static void ln_grad_params_##SUF(int64_t rows, int64_t cols, const double *st, const T *g, const T *x,     \
                                     double *acc_w, double *acc_b)                                             \
    {                                                                                                          \
        for (int64_t r = 0; r < rows; r++) {                                                                   \
            const T *gr = g + r * cols;                                                                        \
            if (acc_w) {                                                                                       \
                const T *xr = x + r * cols;                                                                    \
                for (int64_t j = 0; j < cols; j++)                                                             \
                    acc_w[j] += (double)gr[j] * ((double)xr[j] - st[2 * r]) * st[2 * r + 1];                   \
            }                                                                                                  \
            if (acc_b)                                                                                         \
                for (int64_t j = 0; j < cols; j++) acc_b[j] += (double)gr[j];                                  \
        }                                                                                                      \
    }
LN_LOOPS(float, f32)
LN_LOOPS(double, f64)

/* Writes n doubles into the float view out (any strides). */
static void store_all(opr_tensor_view *out, const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t off = cpu_offset_of(out, i);
        if (out->dtype == OPR_F32) ((float *)out->data)[off] = (float)v[i];
        else ((double *)out->data)[off] = v[i];
    }
}

/* Element i (row-major) of the float view v, as a double. */
static double load_f64(const opr_tensor_view *v, int64_t i)
{
    const int64_t off = cpu_offset_of(v, i);
    return v->dtype == OPR_F32 ? (double)((const float *)v->data)[off] : ((const double *)v->data)[off];
}

/* Writes the interleaved (mean, rstd) pairs st[2r], st[2r + 1] of rows rows into the
 * views mean and rstd ([rows] elements each, any shape and strides). */
static void store_stats(opr_tensor_view *mean, opr_tensor_view *rstd, const double *st, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++) {
        const int64_t om = cpu_offset_of(mean, r), orr = cpu_offset_of(rstd, r);
        if (mean->dtype == OPR_F32) {
            ((float *)mean->data)[om] = (float)st[2 * r];
            ((float *)rstd->data)[orr] = (float)st[2 * r + 1];
        } else {
            ((double *)mean->data)[om] = st[2 * r];
            ((double *)rstd->data)[orr] = st[2 * r + 1];
        }
    }
}

/* layer_norm and ATen's native_layer_norm: args (input, normalized_shape, weight, bias,
 * eps) for both; outputs contiguous: the result, and for native_layer_norm also each
 * row's mean and rstd (input's shape with the normalized dims 1). */
static int k_layer_norm(const opr_kernel_call *c)
{
    const char *op = c->nout >= 3 ? "native_layer_norm" : "layer_norm";
    const opr_tensor_view *x = cpu_arg_t(c, 0), *w = cpu_arg_t(c, 2), *b = cpu_arg_t(c, 3);
    opr_tensor_view *y = c->outputs[0];
    const int64_t *ns;
    int32_t nns;
    char why[OPC_WHY_SIZE];
    if (!x || !int_list(c, 1, &ns, &nns)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected (input, normalized_shape, ...)", op);
    int rc = check_float(c, "input", x, x->dtype);
    if (!rc) rc = check_float(c, "weight", w, x->dtype);
    if (!rc) rc = check_float(c, "bias", b, x->dtype);
    if (rc) return rc;
    int64_t rows, cols;
    if (!opc_layer_norm_geometry(op, x->ndim, x->shape, ns, nns, &rows, &cols, why, sizeof why) ||
        !opc_layer_norm_param(op, "weight", w, ns, nns, why, sizeof why) ||
        !opc_layer_norm_param(op, "bias", b, ns, nns, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opr_tensor_view *mean = c->nout >= 3 ? c->outputs[1] : NULL, *rstd = c->nout >= 3 ? c->outputs[2] : NULL;
    if (mean && (mean->numel != rows || rstd->numel != rows || mean->dtype != x->dtype || rstd->dtype != x->dtype))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: mean and rstd must hold one %s per row (%lld)", op, cpu_dtype_name(x->dtype),
                        (long long)rows);
    void *ox, *ow, *ob;
    const void *px = cpu_dense(x, &ox), *pw = cpu_dense(w, &ow), *pb = cpu_dense(b, &ob);
    double *st = mean ? malloc((size_t)(rows ? rows : 1) * 2 * sizeof *st) : NULL;
    if (!px || (w && !pw) || (b && !pb) || (mean && !st)) rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", op);
    else if (x->dtype == OPR_F32) ln_forward_f32(rows, cols, cpu_arg_d(c, 4), px, pw, pb, y->data, st);
    else ln_forward_f64(rows, cols, cpu_arg_d(c, 4), px, pw, pb, y->data, st);
    if (!rc && mean) store_stats(mean, rstd, st, rows);
    free(ox);
    free(ow);
    free(ob);
    free(st);
    return rc;
}

/* The gradients gx, gw, gb (each NULL when not wanted) of layer normalization, from
 * grad g, input x and weight w, with each row's statistics read from the views mean
 * and rstd (native_layer_norm_backward) or, when they are NULL, recomputed from x
 * with eps (layer_norm_backward, which saves nothing else). */
static int ln_backward(const opr_kernel_call *c, const char *op, const opr_tensor_view *g, const opr_tensor_view *x,
                       const int64_t *ns, int32_t nns, const opr_tensor_view *mean, const opr_tensor_view *rstd,
                       const opr_tensor_view *w, double eps, opr_tensor_view *gx, opr_tensor_view *gw, opr_tensor_view *gb)
{
    char why[OPC_WHY_SIZE];
    if (!g) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected (grad, input, normalized_shape, ...)", op);
    if ((gx || gw) && !x) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: input was not saved", op);
    int rc = check_float(c, "grad", g, g->dtype);
    if (!rc) rc = check_float(c, "input", x, g->dtype);
    if (!rc) rc = check_float(c, "weight", w, g->dtype);
    if (!rc) rc = check_float(c, "mean", mean, g->dtype);
    if (!rc) rc = check_float(c, "rstd", rstd, g->dtype);
    if (rc) return rc;
    int64_t rows, cols;
    if (!opc_layer_norm_geometry(op, g->ndim, g->shape, ns, nns, &rows, &cols, why, sizeof why) ||
        !opc_layer_norm_param(op, "weight", w, ns, nns, why, sizeof why) ||
        (gw && !opc_layer_norm_param(op, "the weight gradient", gw, ns, nns, why, sizeof why)) ||
        (gb && !opc_layer_norm_param(op, "the bias gradient", gb, ns, nns, why, sizeof why)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((x && !opc_same_shape(g->ndim, g->shape, x)) || (gx && !opc_same_shape(g->ndim, g->shape, gx)))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: grad, input and the input gradient differ in shape", op);
    if ((gx || gw) && mean && (!rstd || mean->numel != rows || rstd->numel != rows))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: mean and rstd must hold one value per row (%lld)", op, (long long)rows);
    const bool f32 = g->dtype == OPR_F32;
    void *og, *ox, *ow;
    const void *pg = cpu_dense(g, &og), *px = cpu_dense((gx || gw) ? x : NULL, &ox);
    const void *pw = cpu_dense(gx ? w : NULL, &ow);
    double *st = (gx || gw) ? malloc((size_t)(rows ? rows : 1) * 2 * sizeof *st) : NULL;
    double *acc = (gw || gb) ? calloc((size_t)(cols ? cols : 1) * 2, sizeof *acc) : NULL;
    if (!pg || ((gx || gw) && (!px || !st)) || (gx && w && !pw) || ((gw || gb) && !acc)) {
        rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for scratch (%lld rows of %lld)", op, (long long)rows, (long long)cols);
    } else {
        if (st && mean) {
            for (int64_t r = 0; r < rows; r++) {
                st[2 * r] = load_f64(mean, r);
                st[2 * r + 1] = load_f64(rstd, r);
            }
        } else if (st) {
            if (f32) ln_all_stats_f32(rows, cols, eps, px, st);
            else ln_all_stats_f64(rows, cols, eps, px, st);
        }
        if (gx) {
            if (f32) ln_grad_input_f32(rows, cols, st, pg, px, pw, gx->data);
            else ln_grad_input_f64(rows, cols, st, pg, px, pw, gx->data);
        }
        if (acc) {
            if (f32) ln_grad_params_f32(rows, cols, st, pg, px, gw ? acc : NULL, gb ? acc + cols : NULL);
            else ln_grad_params_f64(rows, cols, st, pg, px, gw ? acc : NULL, gb ? acc + cols : NULL);
            if (gw) store_all(gw, acc, cols);
            if (gb) store_all(gb, acc + cols, cols);
        }
    }
    free(og);
    free(ox);
    free(ow);
    free(st);
    free(acc);
    return rc;
}

/* layer_norm_backward (layer_norm's fused backward): args (grad, input,
 * normalized_shape, weight, bias, eps, result); outputs (input, weight, bias),
 * contiguous, each written where grad_input_mask asks. input is saved whenever the
 * input or weight gradient is wanted, weight when the input gradient is. */
static int k_layer_norm_backward(const opr_kernel_call *c)
{
    const uint32_t m = c->grad_input_mask;
    if (c->nout < 3) return CPU_FAIL(c, OPR_ERR_INVALID, "layer_norm_backward: expected 3 outputs");
    const int64_t *ns;
    int32_t nns;
    if (!int_list(c, 2, &ns, &nns))
        return CPU_FAIL(c, OPR_ERR_INVALID, "layer_norm_backward: expected (grad, input, normalized_shape, ...)");
    return ln_backward(c, "layer_norm_backward", cpu_arg_t(c, 0), cpu_arg_t(c, 1), ns, nns, NULL, NULL, cpu_arg_t(c, 3),
                       cpu_arg_d(c, 5), (m & 1u) ? c->outputs[0] : NULL, (m & 2u) ? c->outputs[1] : NULL,
                       (m & 4u) ? c->outputs[2] : NULL);
}

/* ATen's native_layer_norm_backward: args (grad_out, input, normalized_shape, mean,
 * rstd, weight, bias, output_mask); outputs (input, weight, bias) where output_mask
 * asks (empty where it does not). */
static int k_native_layer_norm_backward(const opr_kernel_call *c)
{
    const char *op = "native_layer_norm_backward";
    const int64_t *ns, *mask;
    int32_t nns, nmask;
    if (c->nout < 3 || !int_list(c, 2, &ns, &nns) || !int_list(c, 7, &mask, &nmask) || nmask != 3)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected (grad_out, input, normalized_shape, mean, rstd, weight, bias, "
                                            "output_mask) and 3 outputs", op);
    return ln_backward(c, op, cpu_arg_t(c, 0), cpu_arg_t(c, 1), ns, nns, cpu_arg_t(c, 3), cpu_arg_t(c, 4), cpu_arg_t(c, 5), 0,
                       mask[0] ? c->outputs[0] : NULL, mask[1] ? c->outputs[1] : NULL, mask[2] ? c->outputs[2] : NULL);
}

/* ------------------------------------------------------------------ gelu */

#define GELU_FNS(T, SUF, ERF, EXP)                                                                          \
    static inline T gelu_##SUF(T x, bool th)                                                                \
    {                                                                                                       \
        if (th) {                                                                                           \
            const T inner = (T)OPC_GELU_M_SQRT_2_PI * (x + (T)OPC_GELU_CUBIC * x * x * x);                 \
            return x / ((T)1 + EXP((T)-2 * inner));                                                         \
        }                                                                                                   \
        return x * (T)0.5 * ((T)1 + ERF(x * (T)OPC_GELU_M_SQRT1_2));                                       \
    }                                                                                                       \
    static inline T gelu_grad_##SUF(T dy, T x, bool th)                                                     \
    {                                                                                                       \
        if (th) {                                                                                           \
            const T inner = (T)OPC_GELU_M_SQRT_2_PI * (x + (T)OPC_GELU_CUBIC * x * x * x);                 \
            const T s = (T)1 / ((T)1 + EXP((T)-2 * inner));                                                \
            const T dinner = (T)OPC_GELU_M_SQRT_2_PI * ((T)1 + (T)(3 * OPC_GELU_CUBIC) * x * x);           \
            return dy * (s + (T)2 * x * s * ((T)1 - s) * dinner);                                           \
        }                                                                                                   \
        const T cdf = (T)0.5 * ((T)1 + ERF(x * (T)OPC_GELU_M_SQRT1_2));                                    \
        const T pdf = EXP((T)-0.5 * x * x) * (T)OPC_GELU_M_1_SQRT_2PI;                                     \
        return dy * (cdf + x * pdf);                                                                        \
    }
GELU_FNS(float, f32, erff, expf)
GELU_FNS(double, f64, erf, exp)

/* gelu (nin 1: self) and gelu_backward (nin 2: grad_output, self), each input
 * broadcast to the contiguous output; approximate is the argument after them. */
/* gelu and its gradient on contiguous operands, in blocks: the polynomials are plain
 * loops the compiler vectorises, erf and exp are SLEEF's vector loops (a scalar tanhf per
 * element was about half of a transformer step's time). dy NULL: the forward. */
#define GELU_BLOCK 512
#define GELU_CONTIG(T, SUF)                                                                                 \
    static void gelu_block_##SUF(int64_t m, const T *x, const T *dy, T *y, bool th)                       \
    {                                                                                                       \
        T t[GELU_BLOCK], e[GELU_BLOCK];                                                                     \
        if (m <= 0) return; /* (the loops below then write before the vector calls read) */                 \
        if (th) {                                                                                           \
            for (int64_t i = 0; i < m; i++)                                                                 \
                t[i] = (T)(-2 * OPC_GELU_M_SQRT_2_PI) * (x[i] + (T)OPC_GELU_CUBIC * x[i] * x[i] * x[i]);    \
            cpu_vm.exp_##SUF(m, t, t);                                                                      \
            if (!dy) {                                                                                      \
                for (int64_t i = 0; i < m; i++) y[i] = x[i] / ((T)1 + t[i]);                                \
                return;                                                                                     \
            }                                                                                               \
            for (int64_t i = 0; i < m; i++) {                                                               \
                const T s = (T)1 / ((T)1 + t[i]);                                                           \
                const T dinner = (T)OPC_GELU_M_SQRT_2_PI * ((T)1 + (T)(3 * OPC_GELU_CUBIC) * x[i] * x[i]);  \
                y[i] = dy[i] * (s + (T)2 * x[i] * s * ((T)1 - s) * dinner);                                 \
            }                                                                                               \
            return;                                                                                         \
        }                                                                                                   \
        for (int64_t i = 0; i < m; i++) t[i] = x[i] * (T)OPC_GELU_M_SQRT1_2;                                \
        cpu_vm.erf_##SUF(m, t, t);                                                                          \
        if (!dy) {                                                                                          \
            for (int64_t i = 0; i < m; i++) y[i] = x[i] * (T)0.5 * ((T)1 + t[i]);                           \
            return;                                                                                         \
        }                                                                                                   \
        for (int64_t i = 0; i < m; i++) e[i] = (T)-0.5 * x[i] * x[i];                                       \
        cpu_vm.exp_##SUF(m, e, e);                                                                          \
        for (int64_t i = 0; i < m; i++)                                                                     \
            y[i] = dy[i] * ((T)0.5 * ((T)1 + t[i]) + x[i] * e[i] * (T)OPC_GELU_M_1_SQRT_2PI);               \
    }                                                                                                       \
    static void gelu_contig_##SUF(int64_t n, const T *x, const T *dy, T *y, bool th)                        \
    {                                                                                                       \
        _Pragma("omp parallel for if (n >= CPU_PAR_THRESHOLD) schedule(static)")                            \
        for (int64_t b = 0; b < n; b += GELU_BLOCK)                                                         \
            gelu_block_##SUF(n - b < GELU_BLOCK ? n - b : GELU_BLOCK, x + b, dy ? dy + b : NULL, y + b, th); \
    }
GELU_CONTIG(float, f32)
GELU_CONTIG(double, f64)

static bool contiguous_like(const opr_tensor_view *v, const opr_tensor_view *y)
{
    return v->numel == y->numel && v->ndim == y->ndim && cpu_is_contiguous(v) &&
           !memcmp(v->shape, y->shape, (size_t)y->ndim * sizeof *y->shape);
}

static int gelu_common(const opr_kernel_call *c, const char *op, int nin)
{
    opr_tensor_view *y = c->outputs[0];
    const opr_tensor_view *in[2] = {cpu_arg_t(c, 0), nin > 1 ? cpu_arg_t(c, 1) : NULL};
    char why[OPC_WHY_SIZE];
    bool th;
    const char *mode = c->args[nin]->kind == OPR_ARG_STRING ? c->args[nin]->u.s : NULL;
    if (!opc_gelu_mode(op, mode, &th, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    cpu_walk wk = {.ndim = y->ndim, .nops = nin, .shape = y->shape};
    for (int k = 0; k < nin; k++) {
        if (!in[k]) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: argument %d must be a tensor", op, k);
        int rc = check_float(c, k ? "self" : (nin > 1 ? "grad_output" : "self"), in[k], y->dtype);
        if (rc) return rc;
        if (!opc_bcast_strides(in[k], y->ndim, y->shape, wk.strides[k]))
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: the inputs do not broadcast to the output", op);
    }
    const int64_t n = y->numel;
    /* gelu(self) has self first; gelu_backward(grad_output, self) has it second */
    const opr_tensor_view *x = in[nin - 1], *dy = nin > 1 ? in[0] : NULL;
    if (cpu_is_contiguous(y) && contiguous_like(x, y) && (!dy || contiguous_like(dy, y))) {
        if (y->dtype == OPR_F32) gelu_contig_f32(n, x->data, dy ? dy->data : NULL, y->data, th);
        else gelu_contig_f64(n, x->data, dy ? dy->data : NULL, y->data, th);
        return OPR_OK;
    }
#pragma omp parallel if (n >= CPU_PAR_THRESHOLD)
    {
        int64_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        cpu_walk w = wk;
        cpu_walk_seek(&w, lo);
        for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {
            if (y->dtype == OPR_F32) {
                const float *a = in[0]->data, *b = nin > 1 ? in[1]->data : NULL;
                ((float *)y->data)[i] = nin > 1 ? gelu_grad_f32(a[w.off[0]], b[w.off[1]], th) : gelu_f32(a[w.off[0]], th);
            } else {
                const double *a = in[0]->data, *b = nin > 1 ? in[1]->data : NULL;
                ((double *)y->data)[i] = nin > 1 ? gelu_grad_f64(a[w.off[0]], b[w.off[1]], th) : gelu_f64(a[w.off[0]], th);
            }
        }
    }
    return OPR_OK;
}

static int k_gelu(const opr_kernel_call *c) { return gelu_common(c, "gelu", 1); }
static int k_gelu_backward(const opr_kernel_call *c) { return gelu_common(c, "gelu_backward", 2); }

int cpu_register_norm(opr_plugin *self)
{
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    /* upcast: f16 and bf16 layer norm through the f32 kernels (cpu_half.c), the
     * statistics in double and every output rounded once, as PyTorch's CUDA kernel
     * computes them */
    const struct { const char *op; opr_kernel_fn fn; bool upcast; } table[] = {
        {"layer_norm", k_layer_norm, true},
        {"layer_norm_backward", k_layer_norm_backward, true},
        {"native_layer_norm", k_layer_norm, true},
        {"native_layer_norm_backward", k_native_layer_norm_backward, true},
        {"gelu", k_gelu, false},
        {"gelu_backward", k_gelu_backward, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? cpu_register_upcast : cpu_register)(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
