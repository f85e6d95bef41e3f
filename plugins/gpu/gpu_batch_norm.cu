/* Batch and group normalization kernels (f32, f64, f16, bf16): native_batch_norm, its backward
 * native_batch_norm_backward (also the fused backward native_batch_norm_backward_fused of
 * training calls), native_group_norm and native_group_norm_backward (the kernel of
 * _native_batch_norm_legit and its variants too), with the results of the CPU kernels
 * (plugins/cpu/cpu_batch_norm.c).
 *
 * input is seen as [N, C, inner] (inner: the product of the trailing dims). Each
 * statistic is a block-wide reduction, one block per channel (batch norm) or per sample
 * group (group norm): the threads stride through its elements and combine their partial
 * sums in a shared-memory tree (no warp shuffles, so 64-wide wavefronts work; no
 * atomics, so the sums do not depend on the schedule). Sums are in double (halves
 * widened by gk_to_d, every result rounded to the storage type once) and two-pass
 * (the mean, then the squared deviations), as the variance must not lose digits to
 * cancellation. Thread 0 of the block then writes the per-channel results (saved
 * statistics, running statistics in place, weight and bias gradients) and the
 * coefficients, in double, of an elementwise pass that runs one thread per element.
 * Strided inputs are made contiguous first; outputs are contiguous, the per-channel
 * tensors given as arguments (running statistics, weight, bias) are read and written
 * through their stride. */
#include "gpu_common.cuh"
#include "../common/opc_batch_norm_legit.h"

#include <math.h>
#include <stdio.h>

namespace {

/* A 1-d per-channel tensor on the device: data and stride (data NULL: absent). */
template <class T> struct vec {
    T *p;
    int64_t st;
    GK_DEV double at(int64_t i, double dflt) const { return p ? gk_to_d(p[i * st]) : dflt; }
    GK_DEV void set(int64_t i, double v) const
    {
        if (p) p[i * st] = gk_from_d<T>(v);
    }
};

template <class T> vec<T> vec_of(const opr_tensor_view *v) { return vec<T>{v ? (T *)v->data : nullptr, v ? v->strides[0] : 0}; }

/* The sum of v over the block's threads (blockDim.x a power of 2, sh one double per
 * thread); every thread gets it. */
GK_DEV double block_sum(double v, double *sh)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads(); /* sh is reused by the next sum */
    return r;
}

/* Element j of channel k's slice (n samples of inner elements each, C channels). */
GK_DEV int64_t chan_at(int64_t k, int64_t j, int64_t ch, int64_t inner) { return (j / inner * ch + k) * inner + j % inner; }

/* ------------------------------------------------------------------ batch norm forward */

/* One block per channel k: training computes the batch mean and biased variance of x
 * (m = N * inner elements), writes save_mean / save_invstd and updates the running
 * statistics (unbiased variance); eval reads the running ones. coef[2k], coef[2k + 1]:
 * the scale and shift of y = x * scale + shift (weight and bias folded in). */
template <class T>
__global__ void k_bn_stats(int64_t ch, int64_t m, int64_t inner, const T *x, bool train, double momentum, double eps,
                           vec<const T> w, vec<const T> b, vec<T> rm, vec<T> rv, T *save_mean, T *save_invstd, double *coef)
{
    __shared__ double sh[GK_THREADS];
    for (int64_t k = blockIdx.x; k < ch; k += gridDim.x) {
        double mean, invstd;
        if (train) {
            double s = 0, ss = 0;
            for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += gk_to_d(x[chan_at(k, j, ch, inner)]);
            mean = block_sum(s, sh) / (double)m;
            for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
                const double d = gk_to_d(x[chan_at(k, j, ch, inner)]) - mean;
                ss += d * d;
            }
            ss = block_sum(ss, sh);
            invstd = 1 / sqrt(ss / (double)m + eps);
            if (threadIdx.x == 0) {
                save_mean[k] = gk_from_d<T>(mean);
                save_invstd[k] = gk_from_d<T>(invstd);
                rm.set(k, (1 - momentum) * rm.at(k, 0) + momentum * mean);
                rv.set(k, (1 - momentum) * rv.at(k, 0) + momentum * ss / (double)(m - 1));
            }
        } else {
            mean = rm.at(k, 0);
            invstd = 1 / sqrt(rv.at(k, 0) + eps);
        }
        if (threadIdx.x == 0) {
            const double scale = invstd * w.at(k, 1);
            coef[2 * k] = scale;
            coef[2 * k + 1] = b.at(k, 0) - mean * scale;
        }
    }
}

/* y = x * coef[2c] + coef[2c + 1] for x, y contiguous [N, C, inner], c the channel. */
template <class T>
__global__ void k_bn_apply(int64_t total, int64_t ch, int64_t inner, const T *x, const double *coef, T *y)
{
    GK_LOOP(e, total)
    {
        const int64_t k = e / inner % ch;
        y[e] = gk_from_d<T>(gk_to_d(x[e]) * coef[2 * k] + coef[2 * k + 1]);
    }
}

/* ------------------------------------------------------------------ batch norm backward */

/* One block per channel k: sg = sum g, sgx = sum g * (x - mean); db = sg, dw = sgx *
 * invstd; coef[4k ..]: scale, a, b and mean of dx = scale * (g - a - (x - mean) * b).
 * train: mean / inv are the saved mean and invstd, dx = w invstd (g - mean(g) - xhat
 * mean(g xhat)); eval: the running mean and variance, dx = w invstd g. x may be NULL when
 * only db is wanted. */
template <class T>
__global__ void k_bn_backward_reduce(int64_t ch, int64_t m, int64_t inner, const T *g, const T *x, vec<const T> mean_v,
                                     vec<const T> inv_v, vec<const T> w, bool train, double eps, vec<T> dw, vec<T> db,
                                     double *coef)
{
    __shared__ double sh[GK_THREADS];
    for (int64_t k = blockIdx.x; k < ch; k += gridDim.x) {
        const double mean = mean_v.at(k, 0);
        const double invstd = !inv_v.p ? 0 : train ? inv_v.at(k, 0) : 1 / sqrt(inv_v.at(k, 0) + eps);
        double sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
            const int64_t i = chan_at(k, j, ch, inner);
            const double gv = gk_to_d(g[i]);
            sg += gv;
            if (x) sgx += gv * (gk_to_d(x[i]) - mean);
        }
        sg = block_sum(sg, sh);
        sgx = block_sum(sgx, sh);
        if (threadIdx.x == 0) {
            db.set(k, sg);
            dw.set(k, sgx * invstd);
            coef[4 * k] = w.at(k, 1) * invstd;
            coef[4 * k + 1] = train && m ? sg / (double)m : 0;
            coef[4 * k + 2] = train && m ? sgx * invstd * invstd / (double)m : 0;
            coef[4 * k + 3] = mean;
        }
    }
}

template <class T>
__global__ void k_bn_backward_apply(int64_t total, int64_t ch, int64_t inner, const T *g, const T *x, const double *coef, T *dx)
{
    GK_LOOP(e, total)
    {
        const double *c = coef + 4 * (e / inner % ch);
        dx[e] = gk_from_d<T>(c[0] * (gk_to_d(g[e]) - c[1] - (gk_to_d(x[e]) - c[3]) * c[2]));
    }
}

/* ------------------------------------------------------------------ group norm */

/* One block per row r = (sample, group) of len contiguous elements: mean and rstd =
 * 1 / sqrt(biased variance + eps), written to the outputs and to st[2r], st[2r + 1]. */
template <class T>
__global__ void k_gn_stats(int64_t rows, int64_t len, const T *x, double eps, T *mean_out, T *rstd_out, double *st)
{
    __shared__ double sh[GK_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * len;
        double s = 0, ss = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += gk_to_d(xr[j]);
        const double total = block_sum(s, sh), mean = len ? total / (double)len : 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            const double d = gk_to_d(xr[j]) - mean;
            ss += d * d;
        }
        ss = block_sum(ss, sh);
        if (threadIdx.x == 0) {
            const double rstd = 1 / sqrt((len ? ss / (double)len : 0) + eps);
            mean_out[r] = gk_from_d<T>(mean);
            rstd_out[r] = gk_from_d<T>(rstd);
            st[2 * r] = mean;
            st[2 * r + 1] = rstd;
        }
    }
}

/* y = (x - mean) * rstd * w[c] + b[c] over x, y contiguous [N, C, hw], C = groups * cg;
 * the row of element e is e / (cg * hw). */
template <class T>
__global__ void k_gn_apply(int64_t total, int64_t ch, int64_t hw, int64_t cg, const T *x, const double *st, vec<const T> w,
                           vec<const T> b, T *y)
{
    GK_LOOP(e, total)
    {
        const int64_t r = e / (cg * hw), k = e / hw % ch;
        const double scale = st[2 * r + 1] * w.at(k, 1), shift = b.at(k, 0) - st[2 * r] * scale;
        y[e] = gk_from_d<T>(gk_to_d(x[e]) * scale + shift);
    }
}

/* ------------------------------------------------------------------ entry points */

/* Blocks for one block per item (grid-stride beyond). */
unsigned item_blocks(int64_t items) { return (unsigned)(items < 65535 ? (items > 0 ? items : 1) : 65535); }

/* Every given tensor has dtype dt (f32, f64, f16 or bf16), and the per-channel ones C elements in
 * one dim. */
int check_operands(const opr_kernel_call *c, opr_dtype dt, int64_t ch, const opr_tensor_view *const *vecs, int nvecs)
{
    if (!((GK_FLOATS | GK_HALVES) & GK_BIT(dt)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", c->op, GPU_RUNTIME_NAME, gk_dtype_name(dt));
    for (int i = 0; i < nvecs; i++) {
        const opr_tensor_view *v = vecs[i];
        if (!v) continue;
        if (v->dtype != dt)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: operands of dtypes %s and %s", c->op, gk_dtype_name(v->dtype), gk_dtype_name(dt));
        if (v->ndim != 1 || v->shape[0] != ch)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: a per-channel tensor must have shape [%lld]", c->op, (long long)ch);
    }
    return OPR_OK;
}

template <class T>
void launch_bn_forward(const gk_ctx *k, int64_t n, int64_t ch, int64_t inner, const void *x, bool train, double momentum,
                       double eps, const opr_tensor_view *const *v, opr_tensor_view *y, opr_tensor_view *sm,
                       opr_tensor_view *si, double *coef)
{
    gk_launch(k_bn_stats<T>, item_blocks(ch), GK_THREADS, 0, k->stream, ch, n * inner, inner, (const T *)x, train, momentum,
              eps, vec_of<const T>(v[0]), vec_of<const T>(v[1]), vec_of<T>(v[2]), vec_of<T>(v[3]),
              train ? (T *)sm->data : (T *)nullptr, train ? (T *)si->data : (T *)nullptr, coef);
    if (y->numel)
        gk_launch(k_bn_apply<T>, gk_blocks(y->numel), GK_THREADS, 0, k->stream, y->numel, ch, inner, (const T *)x,
                  (const double *)coef, (T *)y->data);
}

/* native_batch_norm: args (input, weight, bias, running_mean, running_var, training,
 * momentum, eps); outputs (out, save_mean, save_invstd), the last two empty in eval.
 * Training writes running_mean and running_var (where given) in place. */
int k_batch_norm(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *w = gk_arg_t(c, 1), *b = gk_arg_t(c, 2);
    const opr_tensor_view *rm = gk_arg_t(c, 3), *rv = gk_arg_t(c, 4);
    const bool train = gk_arg_b(c, 5);
    const double momentum = gk_arg_d(c, 6), eps = gk_arg_d(c, 7);
    if (c->nout < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 outputs", c->op);
    opr_tensor_view *y = c->outputs[0], *sm = c->outputs[1], *si = c->outputs[2];
    if (!x || x->ndim < 2) return GK_FAIL(c, OPR_ERR_INVALID, "%s: input must have at least 2 dims", c->op);
    const int64_t n = x->shape[0], ch = x->shape[1], inner = n && ch ? x->numel / (n * ch) : 0;
    const opr_tensor_view *vecs[] = {w, b, rm, rv, train ? sm : nullptr, train ? si : nullptr};
    if ((rc = check_operands(c, x->dtype, ch, vecs, 6))) return rc;
    if (!train && (!rm || !rv)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: eval needs running_mean and running_var", c->op);
    if (train && n * inner == 0 && ch) return GK_FAIL(c, OPR_ERR_INVALID, "%s: training needs at least one value per channel", c->op);
    if (train && ((rm && (rc = gk_check_writable(c, c->op, rm))) || (rv && (rc = gk_check_writable(c, c->op, rv)))))
        return rc;
    if (ch == 0) return OPR_OK;
    gk_buf bx, bcoef;
    const void *px;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = bcoef.alloc(&k, (size_t)ch * 2 * sizeof(double)))) return rc;
    GK_FLOAT_DISPATCH(x->dtype, launch_bn_forward, &k, n, ch, inner, px, train, momentum, eps, vecs, y, sm, si, bcoef.as<double>());
    return gk_launched(&k, "batch norm kernel");
}

/* The backward of one call: mean / invstd are the saved statistics (train) or the
 * running mean and variance (eval). */
typedef struct bn_backward {
    const opr_tensor_view *g, *x, *w, *mean, *invstd;
    bool train;
    double eps;
    opr_tensor_view *dx, *dw, *db;
} bn_backward;

template <class T>
void launch_bn_backward(const gk_ctx *k, const bn_backward *p, int64_t ch, int64_t m, int64_t inner, const void *g,
                        const void *x, double *coef)
{
    gk_launch(k_bn_backward_reduce<T>, item_blocks(ch), GK_THREADS, 0, k->stream, ch, m, inner, (const T *)g, (const T *)x,
              vec_of<const T>(p->mean), vec_of<const T>(p->invstd), vec_of<const T>(p->w), p->train, p->eps,
              vec_of<T>(p->dw), vec_of<T>(p->db), coef);
    if (p->dx && p->dx->numel)
        gk_launch(k_bn_backward_apply<T>, gk_blocks(p->dx->numel), GK_THREADS, 0, k->stream, p->dx->numel, ch, inner,
                  (const T *)g, (const T *)x, (const double *)coef, (T *)p->dx->data);
}

int bn_backward_run(const opr_kernel_call *c, const bn_backward *p)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    const opr_tensor_view *g = p->g, *x = p->x;
    if (!g || g->ndim < 2 || (x && (x->ndim != g->ndim || x->numel != g->numel)))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad and input must have the same shape of at least 2 dims", c->op);
    if ((p->dx || p->dw) && (!x || !p->mean || !p->invstd))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: input and the statistics are needed for these gradients", c->op);
    const int64_t n = g->shape[0], ch = g->shape[1], inner = n && ch ? g->numel / (n * ch) : 0;
    const opr_tensor_view *vecs[] = {p->w, p->mean, p->invstd, p->dw, p->db};
    if ((rc = check_operands(c, g->dtype, ch, vecs, 5))) return rc;
    if (x && x->dtype != g->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad and input differ in dtype", c->op);
    if (p->dx && (p->dx->dtype != g->dtype || p->dx->numel != g->numel))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: the input gradient must be shaped like grad", c->op);
    if (ch == 0 || (!p->dx && !p->dw && !p->db)) return OPR_OK;
    gk_buf bg, bx, bcoef;
    const void *pg, *px;
    if ((rc = gk_dense(&k, g, &bg, &pg)) || (rc = gk_dense(&k, (p->dx || p->dw) ? x : nullptr, &bx, &px)) ||
        (rc = bcoef.alloc(&k, (size_t)ch * 4 * sizeof(double))))
        return rc;
    GK_FLOAT_DISPATCH(g->dtype, launch_bn_backward, &k, p, ch, n * inner, inner, pg, px, bcoef.as<double>());
    return gk_launched(&k, "batch norm backward kernel");
}

/* native_batch_norm_backward: args (grad_out, input, weight, running_mean, running_var,
 * save_mean, save_invstd, train, eps, output_mask); outputs (input, weight, bias
 * gradients), those left out by the mask empty. */
int k_batch_norm_backward(const opr_kernel_call *c)
{
    unsigned mask = 0;
    if (c->nargs < 10 || c->nout < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 10 arguments and 3 outputs", c->op);
    for (int i = 0; c->args[9]->kind == OPR_ARG_INT_LIST && i < c->args[9]->u.il.n && i < 3; i++)
        mask |= (c->args[9]->u.il.items[i] ? 1u : 0u) << i;
    const bool train = gk_arg_b(c, 7);
    bn_backward p;
    p.g = gk_arg_t(c, 0);
    p.x = gk_arg_t(c, 1);
    p.w = gk_arg_t(c, 2);
    p.mean = gk_arg_t(c, train ? 5 : 3);
    p.invstd = gk_arg_t(c, train ? 6 : 4);
    p.train = train;
    p.eps = gk_arg_d(c, 8);
    p.dx = mask & 1 ? c->outputs[0] : nullptr;
    p.dw = mask & 2 ? c->outputs[1] : nullptr;
    p.db = mask & 4 ? c->outputs[2] : nullptr;
    return bn_backward_run(c, &p);
}

/* native_batch_norm_backward_fused (native_batch_norm's fused backward): args (the 3
 * output gradients, input, weight, bias, running_mean, running_var, training, momentum,
 * eps, out, save_mean, save_invstd), each tensor NONE unless the plan saved it; the mask
 * in grad_input_mask. Training calls only (fused_supports). */
[[maybe_unused]] int k_batch_norm_backward_fused(const opr_kernel_call *c)
{
    if (c->nargs < 14 || c->nout < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 14 arguments and 3 outputs", c->op);
    if (!gk_arg_b(c, 8)) return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: eval calls use the formulas", c->op);
    bn_backward p;
    p.g = gk_arg_t(c, 0);
    p.x = gk_arg_t(c, 3);
    p.w = gk_arg_t(c, 4);
    p.mean = gk_arg_t(c, 12);
    p.invstd = gk_arg_t(c, 13);
    p.train = true;
    p.eps = gk_arg_d(c, 10);
    p.dx = c->grad_input_mask & 1 ? c->outputs[0] : nullptr;
    p.dw = c->grad_input_mask & 2 ? c->outputs[1] : nullptr;
    p.db = c->grad_input_mask & 4 ? c->outputs[2] : nullptr;
    return bn_backward_run(c, &p);
}

/* Eval-mode calls are declined: their formulas (a scale by the running statistics) are
 * as cheap as the kernel, and the kernel would have to read what the plan saves for
 * training. */
[[maybe_unused]] bool fused_supports(const opr_kernel_call *c, char *why, size_t why_len)
{
    if (c->nargs > 8 && gk_arg_b(c, 8)) return true;
    snprintf(why, why_len, "eval-mode batch norm: its formulas read the running statistics");
    return false;
}

template <class T>
void launch_gn(const gk_ctx *k, int64_t rows, int64_t len, int64_t ch, int64_t hw, const void *x, double eps,
               const opr_tensor_view *w, const opr_tensor_view *b, opr_tensor_view *y, opr_tensor_view *mo,
               opr_tensor_view *ro, double *st)
{
    gk_launch(k_gn_stats<T>, item_blocks(rows), GK_THREADS, 0, k->stream, rows, len, (const T *)x, eps, (T *)mo->data,
              (T *)ro->data, st);
    if (y->numel)
        gk_launch(k_gn_apply<T>, gk_blocks(y->numel), GK_THREADS, 0, k->stream, y->numel, ch, hw, len / (hw ? hw : 1),
                  (const T *)x, (const double *)st, vec_of<const T>(w), vec_of<const T>(b), (T *)y->data);
}

/* native_group_norm: args (input, weight, bias, N, C, HxW, group, eps); outputs (out,
 * mean [N, group], rstd [N, group]). */
int k_group_norm(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *w = gk_arg_t(c, 1), *b = gk_arg_t(c, 2);
    const int64_t n = gk_arg_i(c, 3), ch = gk_arg_i(c, 4), hw = gk_arg_i(c, 5), groups = gk_arg_i(c, 6);
    const double eps = gk_arg_d(c, 7);
    if (c->nout < 3) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 3 outputs", c->op);
    opr_tensor_view *y = c->outputs[0], *mo = c->outputs[1], *ro = c->outputs[2];
    if (!x || groups < 1 || ch % groups || x->numel != n * ch * hw || mo->numel != n * groups || ro->numel != n * groups)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: input of %lld elements is not N x C x HxW = %lld x %lld x %lld in %lld groups",
                       c->op, x ? (long long)x->numel : 0LL, (long long)n, (long long)ch, (long long)hw, (long long)groups);
    const opr_tensor_view *vecs[] = {w, b};
    if ((rc = check_operands(c, x->dtype, ch, vecs, 2))) return rc;
    const int64_t rows = n * groups, len = ch / groups * hw;
    if (rows == 0) return OPR_OK;
    gk_buf bx, bst;
    const void *px;
    if ((rc = gk_dense(&k, x, &bx, &px)) || (rc = bst.alloc(&k, (size_t)rows * 2 * sizeof(double)))) return rc;
    GK_FLOAT_DISPATCH(x->dtype, launch_gn, &k, rows, len, ch, hw, px, eps, w, b, y, mo, ro, bst.as<double>());
    return gk_launched(&k, "group norm kernel");
}

/* native_group_norm_backward, one block per (sample, group) row of len elements:
 * grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_out * weight,
 * xhat = (x - mean) * rstd. */
template <class T>
__global__ void k_gn_bwd_dx(int64_t rows, int64_t len, int64_t hw, int64_t cg, int64_t groups, const T *dy, const T *x,
                            const T *mean, const T *rstd, vec<const T> w, T *dx)
{
    __shared__ double sh[GK_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t off = r * len, c0 = (r % groups) * cg;
        const double mu = gk_to_d(mean[r]), rs = gk_to_d(rstd[r]);
        double s1 = 0, s2 = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            const double g = gk_to_d(dy[off + j]) * w.at(c0 + j / hw, 1);
            s1 += g;
            s2 += g * (gk_to_d(x[off + j]) - mu) * rs;
        }
        const double m1 = block_sum(s1, sh) / (double)len, m2 = block_sum(s2, sh) / (double)len;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            const double g = gk_to_d(dy[off + j]) * w.at(c0 + j / hw, 1);
            dx[off + j] = gk_from_d<T>(rs * (g - m1 - (gk_to_d(x[off + j]) - mu) * rs * m2));
        }
    }
}

/* One block per channel k: grad_weight = sum(grad_out * xhat), grad_bias = sum(grad_out)
 * over the samples and HxW (dw or db NULL: not asked for). */
template <class T>
__global__ void k_gn_bwd_dwdb(int64_t ch, int64_t n, int64_t hw, int64_t cg, int64_t groups, const T *dy, const T *x,
                              const T *mean, const T *rstd, T *dw, T *db)
{
    __shared__ double sh[GK_THREADS];
    for (int64_t k = blockIdx.x; k < ch; k += gridDim.x) {
        double sw = 0, sb = 0;
        for (int64_t j = threadIdx.x; j < n * hw; j += blockDim.x) {
            const int64_t i = j / hw, r = i * groups + k / cg, off = (i * ch + k) * hw + j % hw;
            const double g = gk_to_d(dy[off]);
            sw += g * (gk_to_d(x[off]) - gk_to_d(mean[r])) * gk_to_d(rstd[r]);
            sb += g;
        }
        sw = block_sum(sw, sh);
        sb = block_sum(sb, sh);
        if (threadIdx.x == 0) {
            if (dw) dw[k] = gk_from_d<T>(sw);
            if (db) db[k] = gk_from_d<T>(sb);
        }
    }
}

template <class T>
void launch_gn_backward(const gk_ctx *k, int64_t n, int64_t ch, int64_t hw, int64_t groups, const void *const *p,
                        const opr_tensor_view *w, opr_tensor_view *dx, opr_tensor_view *dw, opr_tensor_view *db)
{
    const int64_t cg = ch / groups, rows = n * groups, len = cg * hw;
    const T *dy = (const T *)p[0], *x = (const T *)p[1], *mean = (const T *)p[2], *rstd = (const T *)p[3];
    if (dx && rows && len)
        gk_launch(k_gn_bwd_dx<T>, item_blocks(rows), GK_THREADS, 0, k->stream, rows, len, hw, cg, groups, dy, x, mean, rstd,
                  vec_of<const T>(w), (T *)dx->data);
    if ((dw || db) && ch)
        gk_launch(k_gn_bwd_dwdb<T>, item_blocks(ch), GK_THREADS, 0, k->stream, ch, n, hw, cg, groups, dy, x, mean, rstd,
                  dw ? (T *)dw->data : (T *)nullptr, db ? (T *)db->data : (T *)nullptr);
}

/* native_group_norm_backward: args (grad_out, input, mean, rstd, weight, N, C, HxW,
 * group, output_mask); outputs (grad_input, grad_weight, grad_bias), each empty where
 * output_mask says no. */
int k_group_norm_backward(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, c->op, &k);
    if (rc) return rc;
    const opr_tensor_view *dy = gk_arg_t(c, 0), *x = gk_arg_t(c, 1), *mt = gk_arg_t(c, 2), *rt = gk_arg_t(c, 3);
    const opr_tensor_view *w = gk_arg_t(c, 4);
    const int64_t n = gk_arg_i(c, 5), ch = gk_arg_i(c, 6), hw = gk_arg_i(c, 7), groups = gk_arg_i(c, 8);
    unsigned mask = 0;
    for (int i = 0; c->nargs > 9 && c->args[9]->kind == OPR_ARG_INT_LIST && i < c->args[9]->u.il.n && i < 3; i++)
        mask |= (c->args[9]->u.il.items[i] ? 1u : 0u) << i;
    if (!dy || !x || !mt || !rt || c->nout < 3 || groups < 1 || ch % groups || x->numel != n * ch * hw || dy->numel != x->numel ||
        mt->numel != n * groups || rt->numel != n * groups)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: grad_out and input must be N x C x HxW = %lld x %lld x %lld, mean and rstd "
                       "N x group (group %lld dividing C)", c->op, (long long)n, (long long)ch, (long long)hw, (long long)groups);
    const opr_tensor_view *vecs[] = {w};
    if ((rc = check_operands(c, x->dtype, ch, vecs, 1))) return rc;
    const opr_tensor_view *src[4] = {dy, x, mt, rt};
    for (int i = 0; i < 4; i++)
        if (src[i]->dtype != x->dtype) return GK_FAIL(c, OPR_ERR_INVALID, "%s: operands of different dtypes", c->op);
    opr_tensor_view *dx = mask & 1 ? c->outputs[0] : nullptr, *dw = mask & 2 ? c->outputs[1] : nullptr;
    opr_tensor_view *db = mask & 4 ? c->outputs[2] : nullptr;
    gk_buf bufs[4];
    const void *p[4];
    for (int i = 0; i < 4; i++)
        if ((rc = gk_dense(&k, src[i], &bufs[i], &p[i]))) return rc;
    GK_FLOAT_DISPATCH(x->dtype, launch_gn_backward, &k, n, ch, hw, groups, p, w, dx, dw, db);
    return gk_launched(&k, "group norm backward kernel");
}

/* _native_batch_norm_legit.no_stats and _native_batch_norm_legit_no_training: the
 * batch norm kernel above with the arguments they lack filled in. */
int k_batch_norm_legit_variant(const opr_kernel_call *c)
{
    opc_bn_legit m;
    if (!opc_bn_legit_call(c, &m)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: unexpected argument count %d", c->op, (int)c->nargs);
    return k_batch_norm(&m.call);
}

} // namespace

int gk_register_batch_norm(opr_plugin *self)
{
    int rc = gk_register(self, "native_batch_norm", GK_FLOATS | GK_HALVES, k_batch_norm);
    if (!rc) rc = gk_register(self, "native_batch_norm_backward", GK_FLOATS | GK_HALVES, k_batch_norm_backward);
    if (!rc) rc = gk_register(self, "_native_batch_norm_legit", GK_FLOATS | GK_HALVES, k_batch_norm);
    if (!rc) rc = gk_register(self, "_native_batch_norm_legit.no_stats", GK_FLOATS | GK_HALVES, k_batch_norm_legit_variant);
    if (!rc) rc = gk_register(self, "_native_batch_norm_legit_no_training", GK_FLOATS | GK_HALVES, k_batch_norm_legit_variant);
    if (!rc) rc = gk_register(self, "native_group_norm", GK_FLOATS | GK_HALVES, k_group_norm);
    if (!rc) rc = gk_register(self, "native_group_norm_backward", GK_FLOATS | GK_HALVES, k_group_norm_backward);
#ifdef OPR_GK_BATCH_NORM_BACKWARD
    if (!rc) rc = gk_register_supports(self, "native_batch_norm_backward_fused", GK_FLOATS | GK_HALVES, k_batch_norm_backward_fused, fused_supports);
    if (!rc) rc = gk_register_supports(self, "_native_batch_norm_legit_backward_fused", GK_FLOATS | GK_HALVES, k_batch_norm_backward_fused, fused_supports);
#endif
    return rc;
}
