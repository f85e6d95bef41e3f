/* Normalisation and activation kernels: layer_norm, its fused backward
 * layer_norm_backward, ATen's native_layer_norm (layer_norm's kernel, also writing the
 * row statistics) and native_layer_norm_backward (from those statistics), gelu and
 * gelu_backward (f32, f64; the layer norm ops also f16 and bf16, through f32), with
 * the results of the CPU kernels (plugins/cpu/cpu_norm.c): row statistics in double,
 * two passes, and the backward recomputing mean and rstd from input so that autograd
 * saves input and weight only.
 *
 * layer_norm runs one thread per row of the rows x cols view (cols =
 * numel(normalized_shape)), the column sums of the weight and bias gradients one thread
 * per column: simple and deterministic (no atomics), and enough for the row lengths of
 * a small transformer; a block-per-row version is the next step where rows are long.
 * Strided inputs are made contiguous first. */
#include "gpu_common.cuh"

#include "../common/opc_norm.h"

#include <math.h>

namespace {

GK_DEV float n_erf(float x) { return erff(x); }
GK_DEV double n_erf(double x) { return erf(x); }
GK_DEV float n_tanh(float x) { return tanhf(x); }
GK_DEV double n_tanh(double x) { return tanh(x); }
GK_DEV float n_exp(float x) { return expf(x); }
GK_DEV double n_exp(double x) { return exp(x); }

int check_float(const opr_kernel_call *c, const char *op, const char *what, const opr_tensor_view *v, opr_dtype dt)
{
    if (!v) return OPR_OK;
    if (v->dtype != OPR_F32 && v->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", op, GPU_RUNTIME_NAME, gk_dtype_name(v->dtype));
    return gk_check_dtype(c, op, what, v, dt);
}

bool int_list(const opr_kernel_call *c, int ai, const int64_t **items, int32_t *n)
{
    if (ai >= c->nargs || c->args[ai]->kind != OPR_ARG_INT_LIST) return false;
    *items = c->args[ai]->u.il.items;
    *n = c->args[ai]->u.il.n;
    return true;
}

/* ------------------------------------------------------------------ layer_norm */

template <class T>
GK_DEV void row_stats(const T *xr, int64_t cols, double eps, double *mean, double *rstd)
{
    double s = 0;
    for (int64_t j = 0; j < cols; j++) s += (double)xr[j];
    const double m = cols ? s / (double)cols : 0;
    double ss = 0;
    for (int64_t j = 0; j < cols; j++) {
        const double d = (double)xr[j] - m;
        ss += d * d;
    }
    *mean = m;
    *rstd = 1 / sqrt((cols ? ss / (double)cols : 0) + eps);
}

/* mo, ro: where each row's mean and rstd go (native_layer_norm), or null. */
template <class T>
__global__ void k_ln_forward(int64_t rows, int64_t cols, double eps, const T *x, const T *w, const T *b, T *y, T *mo, T *ro)
{
    GK_LOOP(r, rows)
    {
        const T *xr = x + r * cols;
        double m, rs;
        row_stats(xr, cols, eps, &m, &rs);
        if (mo) {
            mo[r] = (T)m;
            ro[r] = (T)rs;
        }
        for (int64_t j = 0; j < cols; j++) {
            double v = ((double)xr[j] - m) * rs;
            if (w) v *= (double)w[j];
            if (b) v += (double)b[j];
            y[r * cols + j] = (T)v;
        }
    }
}

template <class T>
__global__ void k_ln_stats(int64_t rows, int64_t cols, double eps, const T *x, double *stats)
{
    GK_LOOP(r, rows) row_stats(x + r * cols, cols, eps, &stats[2 * r], &stats[2 * r + 1]);
}

/* The interleaved (mean, rstd) pairs from native_layer_norm's statistics. */
template <class T>
__global__ void k_ln_pack_stats(int64_t rows, const T *mean, const T *rstd, double *stats)
{
    GK_LOOP(r, rows)
    {
        stats[2 * r] = (double)mean[r];
        stats[2 * r + 1] = (double)rstd[r];
    }
}

/* dx = rstd * (g' - mean(g') - xhat * mean(g' * xhat)), g' = g * weight. */
template <class T>
__global__ void k_ln_grad_input(int64_t rows, int64_t cols, const double *stats, const T *g, const T *x, const T *w, T *gx)
{
    GK_LOOP(r, rows)
    {
        const double m = stats[2 * r], rs = stats[2 * r + 1];
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < cols; j++) {
            const double gj = (double)g[r * cols + j] * (w ? (double)w[j] : 1.0);
            sg += gj;
            sgx += gj * ((double)x[r * cols + j] - m) * rs;
        }
        const double a = sg / (double)cols, bb = sgx / (double)cols;
        for (int64_t j = 0; j < cols; j++) {
            const double gj = (double)g[r * cols + j] * (w ? (double)w[j] : 1.0);
            const double xh = ((double)x[r * cols + j] - m) * rs;
            gx[r * cols + j] = (T)(rs * (gj - a - xh * bb));
        }
    }
}

/* Column sums over the rows: gw = sum g * xhat, gb = sum g (either may be NULL). */
template <class T>
__global__ void k_ln_grad_params(int64_t rows, int64_t cols, const double *stats, const T *g, const T *x, T *gw, T *gb)
{
    GK_LOOP(j, cols)
    {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            const double gj = (double)g[r * cols + j];
            if (gw) sw += gj * ((double)x[r * cols + j] - stats[2 * r]) * stats[2 * r + 1];
            sb += gj;
        }
        if (gw) gw[j] = (T)sw;
        if (gb) gb[j] = (T)sb;
    }
}

/* layer_norm and ATen's native_layer_norm: args (input, normalized_shape, weight, bias,
 * eps) for both; outputs contiguous: the result, and for native_layer_norm also each
 * row's mean and rstd. */
int k_layer_norm(const opr_kernel_call *c)
{
    const char *op = c->nout >= 3 ? "native_layer_norm" : "layer_norm";
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *w = gk_arg_t(c, 2), *b = gk_arg_t(c, 3);
    opr_tensor_view *y = c->outputs[0];
    const int64_t *ns;
    int32_t nns;
    char why[OPC_WHY_SIZE];
    if (!x || !int_list(c, 1, &ns, &nns)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected (input, normalized_shape, ...)", op);
    if ((rc = check_float(c, op, "input", x, x->dtype)) || (rc = check_float(c, op, "weight", w, x->dtype)) ||
        (rc = check_float(c, op, "bias", b, x->dtype)))
        return rc;
    int64_t rows, cols;
    if (!opc_layer_norm_geometry(op, x->ndim, x->shape, ns, nns, &rows, &cols, why, sizeof why) ||
        !opc_layer_norm_param(op, "weight", w, ns, nns, why, sizeof why) || !opc_layer_norm_param(op, "bias", b, ns, nns, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opr_tensor_view *mo = c->nout >= 3 ? c->outputs[1] : nullptr, *ro = c->nout >= 3 ? c->outputs[2] : nullptr;
    if (mo && (mo->numel != rows || ro->numel != rows || mo->dtype != x->dtype || ro->dtype != x->dtype))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: mean and rstd must hold one value per row (%lld)", op, (long long)rows);
    if (x->numel == 0) return OPR_OK;
    gk_buf bx, bw, bb;
    const void *px, *pw, *pb;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = gk_dense(&k, w, &bw, &pw)) || (rc = gk_dense(&k, b, &bb, &pb)))
        return rc;
    const double eps = gk_arg_d(c, 4);
    if (x->dtype == OPR_F32)
        gk_launch(k_ln_forward<float>, gk_blocks(rows), GK_THREADS, 0, k.stream, rows, cols, eps, (const float *)px,
                  (const float *)pw, (const float *)pb, (float *)y->data, mo ? (float *)mo->data : (float *)nullptr,
                  ro ? (float *)ro->data : (float *)nullptr);
    else
        gk_launch(k_ln_forward<double>, gk_blocks(rows), GK_THREADS, 0, k.stream, rows, cols, eps, (const double *)px,
                  (const double *)pw, (const double *)pb, (double *)y->data, mo ? (double *)mo->data : (double *)nullptr,
                  ro ? (double *)ro->data : (double *)nullptr);
    return gk_launched(&k, "layer_norm kernel");
}

/* mean, rstd: native_layer_norm's statistics (dense), or null to recompute them from x. */
template <class T>
void launch_ln_backward(const gk_ctx *k, int64_t rows, int64_t cols, double eps, double *stats, const void *g, const void *x,
                        const void *w, const void *mean, const void *rstd, opr_tensor_view *gx, opr_tensor_view *gw,
                        opr_tensor_view *gb)
{
    if ((gx || gw) && mean)
        gk_launch(k_ln_pack_stats<T>, gk_blocks(rows), GK_THREADS, 0, k->stream, rows, (const T *)mean, (const T *)rstd, stats);
    else if (gx || gw)
        gk_launch(k_ln_stats<T>, gk_blocks(rows), GK_THREADS, 0, k->stream, rows, cols, eps, (const T *)x, stats);
    if (gx)
        gk_launch(k_ln_grad_input<T>, gk_blocks(rows), GK_THREADS, 0, k->stream, rows, cols, (const double *)stats,
                  (const T *)g, (const T *)x, (const T *)w, (T *)gx->data);
    if (gw || gb)
        gk_launch(k_ln_grad_params<T>, gk_blocks(cols), GK_THREADS, 0, k->stream, rows, cols, (const double *)stats,
                  (const T *)g, (const T *)x, gw ? (T *)gw->data : (T *)nullptr, gb ? (T *)gb->data : (T *)nullptr);
}

/* The gradients gx, gw, gb (each null when not wanted) of layer normalization, with
 * each row's statistics read from mean and rstd (native_layer_norm_backward) or, when
 * they are null, recomputed from x with eps (layer_norm_backward). */
int ln_backward(const opr_kernel_call *c, const char *op, const opr_tensor_view *g, const opr_tensor_view *x, const int64_t *ns,
                int32_t nns, const opr_tensor_view *mean, const opr_tensor_view *rstd, const opr_tensor_view *w, double eps,
                opr_tensor_view *gx, opr_tensor_view *gw, opr_tensor_view *gb)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    if (!g) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected (grad, input, normalized_shape, ...)", op);
    if ((gx || gw) && !x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: input was not saved", op);
    if ((rc = check_float(c, op, "grad", g, g->dtype)) || (rc = check_float(c, op, "input", x, g->dtype)) ||
        (rc = check_float(c, op, "weight", w, g->dtype)) || (rc = check_float(c, op, "mean", mean, g->dtype)) ||
        (rc = check_float(c, op, "rstd", rstd, g->dtype)))
        return rc;
    int64_t rows, cols;
    if (!opc_layer_norm_geometry(op, g->ndim, g->shape, ns, nns, &rows, &cols, why, sizeof why) ||
        !opc_layer_norm_param(op, "weight", w, ns, nns, why, sizeof why) ||
        (gw && !opc_layer_norm_param(op, "the weight gradient", gw, ns, nns, why, sizeof why)) ||
        (gb && !opc_layer_norm_param(op, "the bias gradient", gb, ns, nns, why, sizeof why)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((x && !gk_same_shape(g->ndim, g->shape, x)) || (gx && !gk_same_shape(g->ndim, g->shape, gx)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad, input and the input gradient differ in shape", op);
    if ((gx || gw) && mean && (!rstd || mean->numel != rows || rstd->numel != rows))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: mean and rstd must hold one value per row (%lld)", op, (long long)rows);
    const bool stats_given = mean && (gx || gw);
    gk_buf bg, bx, bw, bm, br, bstats;
    const void *pg, *px, *pw, *pm, *pr;
    if ((rc = gk_dense(&k, g, &bg, &pg)) || (rc = gk_dense(&k, (gx || gw) ? x : nullptr, &bx, &px)) ||
        (rc = gk_dense(&k, gx ? w : nullptr, &bw, &pw)) || (rc = gk_dense(&k, stats_given ? mean : nullptr, &bm, &pm)) ||
        (rc = gk_dense(&k, stats_given ? rstd : nullptr, &br, &pr)))
        return rc;
    if ((rc = bstats.alloc(&k, (size_t)(rows ? rows : 1) * 2 * sizeof(double)))) return rc;
    if (g->dtype == OPR_F32)
        launch_ln_backward<float>(&k, rows, cols, eps, bstats.as<double>(), pg, px, pw, stats_given ? pm : nullptr,
                                  stats_given ? pr : nullptr, gx, gw, gb);
    else
        launch_ln_backward<double>(&k, rows, cols, eps, bstats.as<double>(), pg, px, pw, stats_given ? pm : nullptr,
                                   stats_given ? pr : nullptr, gx, gw, gb);
    return gk_launched(&k, op);
}

/* layer_norm_backward: args (grad, input, normalized_shape, weight, bias, eps, result);
 * outputs (input, weight, bias), contiguous, written where grad_input_mask asks. */
[[maybe_unused]] int k_layer_norm_backward(const opr_kernel_call *c)
{
    const char *op = "layer_norm_backward";
    const uint32_t m = c->grad_input_mask;
    const int64_t *ns;
    int32_t nns;
    if (c->nout < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 outputs", op);
    if (!int_list(c, 2, &ns, &nns)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected (grad, input, normalized_shape, ...)", op);
    return ln_backward(c, op, gk_arg_t(c, 0), gk_arg_t(c, 1), ns, nns, nullptr, nullptr, gk_arg_t(c, 3), gk_arg_d(c, 5),
                       (m & 1u) ? c->outputs[0] : nullptr, (m & 2u) ? c->outputs[1] : nullptr, (m & 4u) ? c->outputs[2] : nullptr);
}

/* ATen's native_layer_norm_backward: args (grad_out, input, normalized_shape, mean, rstd,
 * weight, bias, output_mask); outputs (input, weight, bias) where output_mask asks. */
int k_native_layer_norm_backward(const opr_kernel_call *c)
{
    const char *op = "native_layer_norm_backward";
    const int64_t *ns, *mask;
    int32_t nns, nmask;
    if (c->nout < 3 || !int_list(c, 2, &ns, &nns) || !int_list(c, 7, &mask, &nmask) || nmask != 3)
        return GK_FAIL(c, OPR_ERR_INVALID,
                       "%s: expected (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask) and 3 outputs", op);
    return ln_backward(c, op, gk_arg_t(c, 0), gk_arg_t(c, 1), ns, nns, gk_arg_t(c, 3), gk_arg_t(c, 4), gk_arg_t(c, 5), 0,
                       mask[0] ? c->outputs[0] : nullptr, mask[1] ? c->outputs[1] : nullptr, mask[2] ? c->outputs[2] : nullptr);
}

/* ------------------------------------------------------------------ gelu */

template <class T>
GK_DEV T gelu_value(T x, bool th)
{
    if (th) {
        const T inner = (T)OPC_GELU_M_SQRT_2_PI * (x + (T)OPC_GELU_CUBIC * x * x * x);
        return (T)0.5 * x * ((T)1 + n_tanh(inner));
    }
    return x * (T)0.5 * ((T)1 + n_erf(x * (T)OPC_GELU_M_SQRT1_2));
}

template <class T>
GK_DEV T gelu_grad(T dy, T x, bool th)
{
    if (th) {
        const T inner = (T)OPC_GELU_M_SQRT_2_PI * (x + (T)OPC_GELU_CUBIC * x * x * x);
        const T t = n_tanh(inner);
        const T dinner = (T)OPC_GELU_M_SQRT_2_PI * ((T)1 + (T)(3 * OPC_GELU_CUBIC) * x * x);
        return dy * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * dinner);
    }
    const T cdf = (T)0.5 * ((T)1 + n_erf(x * (T)OPC_GELU_M_SQRT1_2));
    const T pdf = n_exp((T)-0.5 * x * x) * (T)OPC_GELU_M_1_SQRT_2PI;
    return dy * (cdf + x * pdf);
}

/* NIN 1: y = gelu(a); NIN 2: y = gelu_backward(a, b). Operand 0 of the geometry is y. */
template <class T, int NIN>
__global__ void k_gelu_ew(int64_t n, gk_geom kg, bool th, T *y, const T *a, const T *b)
{
    GK_LOOP(i, n)
    {
        int64_t off[3];
        gk_offsets<NIN + 1>(kg, i, off);
        y[off[0]] = NIN == 1 ? gelu_value(a[off[1]], th) : gelu_grad(a[off[1]], b[off[2]], th);
    }
}

template <class T>
void launch_gelu(const gk_ctx *k, int nin, int64_t n, const gk_geom &kg, bool th, void *y, const void *a, const void *b)
{
    if (nin == 1) gk_launch(k_gelu_ew<T, 1>, gk_blocks(n), GK_THREADS, 0, k->stream, n, kg, th, (T *)y, (const T *)a, (const T *)b);
    else gk_launch(k_gelu_ew<T, 2>, gk_blocks(n), GK_THREADS, 0, k->stream, n, kg, th, (T *)y, (const T *)a, (const T *)b);
}

/* gelu (nin 1: self) and gelu_backward (nin 2: grad_output, self); approximate is the
 * argument after the tensors; inputs broadcast to the output. */
int gelu_common(const opr_kernel_call *c, const char *op, int nin)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    opr_tensor_view *y = c->outputs[0];
    const opr_tensor_view *in[2] = {gk_arg_t(c, 0), nin > 1 ? gk_arg_t(c, 1) : nullptr};
    char why[OPC_WHY_SIZE];
    bool th = false;
    const char *mode = nin < c->nargs && c->args[nin]->kind == OPR_ARG_STRING ? c->args[nin]->u.s : nullptr;
    if (!opc_gelu_mode(op, mode, &th, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int64_t st[3][GK_MAXD];
    opc_contig_strides(y->ndim, y->shape, st[0]);
    for (int i = 0; i < nin; i++) {
        if (!in[i]) return GK_FAIL(c, OPR_ERR_INVALID, "%s: argument %d must be a tensor", op, i);
        if ((rc = check_float(c, op, i == 0 && nin > 1 ? "grad_output" : "self", in[i], y->dtype))) return rc;
        if (!opc_bcast_strides(in[i], y->ndim, y->shape, st[i + 1]))
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: the inputs do not broadcast to the output", op);
    }
    if (y->numel == 0) return OPR_OK;
    gk_geom kg;
    const int64_t *sp[3] = {st[0], st[1], st[2]};
    gk_geom_make(&kg, y->ndim, y->shape, nin + 1, sp);
    const void *b = nin > 1 ? in[1]->data : nullptr;
    if (y->dtype == OPR_F32) launch_gelu<float>(&k, nin, y->numel, kg, th, y->data, in[0]->data, b);
    else launch_gelu<double>(&k, nin, y->numel, kg, th, y->data, in[0]->data, b);
    return gk_launched(&k, "gelu kernel");
}

int k_gelu(const opr_kernel_call *c) { return gelu_common(c, "gelu", 1); }
int k_gelu_backward(const opr_kernel_call *c) { return gelu_common(c, "gelu_backward", 2); }

} // namespace

/* Where the YAML does not define these ops, the host skips the kernels with a log line
 * (registrations are optional). */
int gk_register_norm(opr_plugin *self)
{
    /* upcast: f16 and bf16 layer norm through the f32 kernels on widened copies
     * (gpu_half.cu), every output rounded once, as the CPU plugin does (cpu_half.c) */
    const struct {
        const char *op;
        opr_kernel_fn fn;
        bool upcast;
    } table[] = {
        {"layer_norm", k_layer_norm, true},
        {"native_layer_norm", k_layer_norm, true},
        {"native_layer_norm_backward", k_native_layer_norm_backward, true},
#ifdef OPR_GK_LAYER_NORM_BACKWARD
        {"layer_norm_backward", k_layer_norm_backward, true},
#endif
        {"gelu", k_gelu, false},
        {"gelu_backward", k_gelu_backward, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? gk_register_upcast : gk_register)(self, table[i].op, GK_FLOATS, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
