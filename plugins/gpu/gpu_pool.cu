/* Pooling kernels (f32, f64, f16, bf16): max_pool2d/3d_with_indices, avg_pool2d/3d and their
 * backward, _adaptive_avg_pool2d/3d and their backward, with the results of the CPU
 * kernels (plugins/cpu/cpu_pool.c).
 *
 * Every tensor is seen as planes (the leading dims, [N, C] or [C]) of up to 3 spatial
 * dims, padded with size-1 dims in front (plugins/common/opc_pool.h), so one kernel
 * serves 2-d and 3-d. As PyTorch's CUDA kernels: the forward runs one thread per output
 * element; the backward of the average poolings one thread per input element, which
 * gathers the share of every window that covers it (no atomics; sums in a fixed order,
 * so the result does not depend on the schedule). Window sums accumulate in double,
 * halves included (gk_to_d), rounded to the storage type once.
 * max pooling's backward is a formula (a scatter_add at the indices), not a kernel.
 * Strided inputs are made contiguous first; outputs are contiguous. */
#include "gpu_common.cuh"

#include "../common/opc_pool.h"

#include <math.h>

namespace {

/* Row-major position e of a plane (sizes n[3]) as three coordinates. */
GK_DEV void coords(int64_t e, const int64_t *n, int64_t *c)
{
    c[2] = e % n[2];
    c[1] = e / n[2] % n[1];
    c[0] = e / (n[1] * n[2]);
}

/* ------------------------------------------------------------------ max */

/* y, idx: [planes, out_vol]; x: [planes, in_vol]. The largest element of each window
 * and its flat index in the plane: the first of equal maxima, the last NaN (as the CPU
 * kernel and PyTorch); padding never wins. */
template <class T>
__global__ void k_max_pool(int64_t total, opc_pool g, const T *x, T *y, int64_t *idx)
{
    GK_LOOP(e, total)
    {
        int64_t o[3];
        coords(e % g.out_vol, g.out, o);
        const T *xp = x + e / g.out_vol * g.in_vol;
        double best = 0;
        int64_t at = -1;
        for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
            const int64_t i0 = o[0] * g.st[0] - g.pad[0] + k0 * g.dil[0];
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
                const int64_t i1 = o[1] * g.st[1] - g.pad[1] + k1 * g.dil[1];
                if (i1 < 0 || i1 >= g.in[1]) continue;
                for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                    const int64_t i2 = o[2] * g.st[2] - g.pad[2] + k2 * g.dil[2];
                    if (i2 < 0 || i2 >= g.in[2]) continue;
                    const int64_t i = (i0 * g.in[1] + i1) * g.in[2] + i2;
                    const double v = gk_to_d(xp[i]);
                    if (at < 0 || v > best || gk_isnan(v)) {
                        best = v;
                        at = i;
                    }
                }
            }
        }
        y[e] = gk_from_d<T>(at < 0 ? -INFINITY : best);
        idx[e] = at;
    }
}

/* ------------------------------------------------------------------ average */

/* The window of output cell o along dim d: [*lo, *hi) within the input, and its size
 * with the padding it covers (PyTorch's pool_size before the window is clipped). */
GK_DEV void avg_window(const opc_pool &g, int d, int64_t o, int64_t *lo, int64_t *hi, int64_t *padded)
{
    const int64_t s = o * g.st[d] - g.pad[d];
    int64_t e = s + g.k[d];
    if (e > g.in[d] + g.pad[d]) e = g.in[d] + g.pad[d];
    *padded = e - s;
    *lo = s < 0 ? 0 : s;
    *hi = e > g.in[d] ? g.in[d] : e;
}

/* The divisor of output cell o (3 coordinates): divisor_override, or the window's size
 * with (count_include_pad) or without the padding; 0 for a window outside the input. */
GK_DEV double avg_divisor(const opc_pool &g, const int64_t *o, int64_t *lo, int64_t *hi)
{
    int64_t padded[3];
    for (int d = 0; d < 3; d++) avg_window(g, d, o[d], &lo[d], &hi[d], &padded[d]);
    if (lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]) return 0;
    if (g.divisor_override) return (double)g.divisor_override;
    if (g.count_include_pad) return (double)(padded[0] * padded[1] * padded[2]);
    return (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
}

/* y: [planes, out_vol], the window means of x: [planes, in_vol] (0 for an empty window). */
template <class T>
__global__ void k_avg_pool(int64_t total, opc_pool g, const T *x, T *y)
{
    GK_LOOP(e, total)
    {
        int64_t o[3], lo[3], hi[3];
        coords(e % g.out_vol, g.out, o);
        const double div = avg_divisor(g, o, lo, hi);
        if (div == 0) {
            y[e] = gk_from_d<T>(0);
            continue;
        }
        const T *xp = x + e / g.out_vol * g.in_vol;
        double acc = 0;
        for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
            for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
                for (int64_t i2 = lo[2]; i2 < hi[2]; i2++) acc += gk_to_d(xp[(i0 * g.in[1] + i1) * g.in[2] + i2]);
        y[e] = gk_from_d<T>(acc / div);
    }
}

/* The output cells along dim d whose windows may cover input position i: [*first,
 * *last]. Average pooling: o * stride - pad <= i < o * stride - pad + kernel. */
GK_DEV void avg_covering(const opc_pool &g, int d, int64_t i, int64_t *first, int64_t *last)
{
    const int64_t t = i + g.pad[d] - g.k[d];
    *first = t < 0 ? 0 : t / g.st[d] + 1;
    const int64_t l = (i + g.pad[d]) / g.st[d];
    *last = l < g.out[d] - 1 ? l : g.out[d] - 1;
}

/* dx: [planes, in_vol]; each element the sum of dy / divisor over the windows that hold
 * it (dy: [planes, out_vol]). */
template <class T>
__global__ void k_avg_pool_backward(int64_t total, opc_pool g, const T *dy, T *dx)
{
    GK_LOOP(e, total)
    {
        int64_t i[3], first[3], last[3];
        coords(e % g.in_vol, g.in, i);
        for (int d = 0; d < 3; d++) avg_covering(g, d, i[d], &first[d], &last[d]);
        const T *dp = dy + e / g.in_vol * g.out_vol;
        double acc = 0;
        int64_t o[3], lo[3], hi[3];
        for (o[0] = first[0]; o[0] <= last[0]; o[0]++)
            for (o[1] = first[1]; o[1] <= last[1]; o[1]++)
                for (o[2] = first[2]; o[2] <= last[2]; o[2]++) {
                    const double div = avg_divisor(g, o, lo, hi);
                    if (div == 0 || i[0] < lo[0] || i[0] >= hi[0] || i[1] < lo[1] || i[1] >= hi[1] || i[2] < lo[2] ||
                        i[2] >= hi[2])
                        continue;
                    acc += gk_to_d(dp[(o[0] * g.out[1] + o[1]) * g.out[2] + o[2]]) / div;
                }
        dx[e] = gk_from_d<T>(acc);
    }
}

/* ------------------------------------------------------------------ adaptive average */

/* Output cell o of a dim of size `out` averages input rows [lo, hi) of `in`. */
GK_DEV int64_t adaptive_lo(int64_t o, int64_t in, int64_t out) { return o * in / out; }
GK_DEV int64_t adaptive_hi(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

template <class T>
__global__ void k_adaptive(int64_t total, opc_pool g, const T *x, T *y)
{
    GK_LOOP(e, total)
    {
        int64_t o[3], lo[3], hi[3];
        coords(e % g.out_vol, g.out, o);
        for (int d = 0; d < 3; d++) {
            lo[d] = adaptive_lo(o[d], g.in[d], g.out[d]);
            hi[d] = adaptive_hi(o[d], g.in[d], g.out[d]);
        }
        const T *xp = x + e / g.out_vol * g.in_vol;
        double acc = 0;
        for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
            for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
                for (int64_t i2 = lo[2]; i2 < hi[2]; i2++) acc += gk_to_d(xp[(i0 * g.in[1] + i1) * g.in[2] + i2]);
        y[e] = gk_from_d<T>(acc / (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])));
    }
}

/* dx (one thread per input element) gathers dy / count over the output cells whose
 * windows hold it: along each dim, floor(i * out / in) up to ceil((i + 1) * out / in) - 1. */
template <class T>
__global__ void k_adaptive_backward(int64_t total, opc_pool g, const T *dy, T *dx)
{
    GK_LOOP(e, total)
    {
        int64_t i[3], first[3], last[3];
        coords(e % g.in_vol, g.in, i);
        for (int d = 0; d < 3; d++) {
            first[d] = i[d] * g.out[d] / g.in[d];
            const int64_t l = ((i[d] + 1) * g.out[d] + g.in[d] - 1) / g.in[d] - 1;
            last[d] = l < g.out[d] - 1 ? l : g.out[d] - 1;
        }
        const T *dp = dy + e / g.in_vol * g.out_vol;
        double acc = 0;
        int64_t o[3], lo[3], hi[3];
        for (o[0] = first[0]; o[0] <= last[0]; o[0]++)
            for (o[1] = first[1]; o[1] <= last[1]; o[1]++)
                for (o[2] = first[2]; o[2] <= last[2]; o[2]++) {
                    bool in = true;
                    for (int d = 0; d < 3; d++) {
                        lo[d] = adaptive_lo(o[d], g.in[d], g.out[d]);
                        hi[d] = adaptive_hi(o[d], g.in[d], g.out[d]);
                        in = in && lo[d] <= i[d] && i[d] < hi[d];
                    }
                    if (in)
                        acc += gk_to_d(dp[(o[0] * g.out[1] + o[1]) * g.out[2] + o[2]]) /
                               (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
                }
        dx[e] = gk_from_d<T>(acc);
    }
}

/* ------------------------------------------------------------------ entry points */

/* The checks every pooling kernel starts with: the device, float tensors of one dtype. */
int begin(const opr_kernel_call *c, gk_ctx *k, const opr_tensor_view *src, const opr_tensor_view *dst)
{
    int rc = gk_begin(c, c->op, k);
    if (rc) return rc;
    if (!src || !dst) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected tensor arguments", c->op);
    if (!((GK_FLOATS | GK_HALVES) & GK_BIT(dst->dtype)))
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", c->op, GPU_RUNTIME_NAME, gk_dtype_name(dst->dtype));
    return gk_check_dtype(c, c->op, "the input", src, dst->dtype);
}

/* The average pooling kernel of one dtype: the forward (one thread per output element)
 * or the backward (one per input element); total: the elements of dst. */
template <class T>
void launch_avg(const gk_ctx *k, bool adaptive, bool backward, int64_t total, const opc_pool &g, const void *src, void *dst)
{
    void (*fn)(int64_t, opc_pool, const T *, T *) =
        adaptive ? (backward ? k_adaptive_backward<T> : k_adaptive<T>) : (backward ? k_avg_pool_backward<T> : k_avg_pool<T>);
    gk_launch(fn, gk_blocks(total), GK_THREADS, 0, k->stream, total, g, (const T *)src, (T *)dst);
}

/* The average poolings' common tail: src contiguous, then the kernel into c's output. */
int run_avg(const opr_kernel_call *c, gk_ctx *k, bool adaptive, bool backward, const opc_pool &g, const opr_tensor_view *src)
{
    opr_tensor_view *dst = c->outputs[0];
    if (dst->numel == 0) return OPR_OK;
    gk_buf bs;
    const void *ps;
    int rc = gk_dense(k, src, &bs, &ps);
    if (rc) return rc;
    GK_FLOAT_DISPATCH(dst->dtype, launch_avg, k, adaptive, backward, dst->numel, g, ps, dst->data); /* begin() checked */
    return gk_launched(k, "average pooling kernel");
}

template <class T>
void launch_max(const gk_ctx *k, int64_t total, const opc_pool &g, const void *x, void *y, int64_t *idx)
{
    gk_launch(k_max_pool<T>, gk_blocks(total), GK_THREADS, 0, k->stream, total, g, (const T *)x, (T *)y, idx);
}

/* max_pool2d_with_indices / max_pool3d_with_indices: args (self, kernel_size, stride,
 * padding, dilation, ceil_mode); outputs (values, i64 indices), contiguous. ceil_mode is
 * implied by the output's shape, which the geometry checks. */
int k_max_pool_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    int rc = begin(c, &k, x, c->outputs[0]);
    if (rc) return rc;
    opr_tensor_view *y = c->outputs[0], *ix = c->nout > 1 ? c->outputs[1] : nullptr;
    const int nd = !strncmp(c->op, "max_pool3d", 10) ? 3 : 2;
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (!ix || c->nargs < 5 || ix->dtype != OPR_I64)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected (self, kernel_size, ...) and 2 outputs", c->op);
    if (!opc_pool_geometry(c->op, nd, x, y, c->args[1], c->args[2], c->args[3], c->args[4], &g, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (y->numel == 0) return OPR_OK;
    gk_buf bx;
    const void *px;
    if ((rc = gk_dense(&k, x, &bx, &px))) return rc;
    GK_FLOAT_DISPATCH(y->dtype, launch_max, &k, y->numel, g, px, y->data, (int64_t *)ix->data); /* begin() checked */
    return gk_launched(&k, "max pooling kernel");
}

/* avg_pool2d / avg_pool3d: args (self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override). avg_pool2d_backward / avg_pool3d_backward: args
 * (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override); self is read for its shape only (the output has it). Output
 * contiguous. */
int k_avg_pool_op(const opr_kernel_call *c)
{
    const bool backward = strstr(c->op, "_backward") != nullptr;
    const int nd = !strncmp(c->op, "avg_pool3d", 10) ? 3 : 2, a = backward ? 1 : 0;
    /* in: the pooled image's shape, out: the pooled result's */
    const opr_tensor_view *in = backward ? c->outputs[0] : gk_arg_t(c, 0), *out = backward ? gk_arg_t(c, 0) : c->outputs[0];
    gk_ctx k;
    int rc = begin(c, &k, backward ? out : in, c->outputs[0]);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (c->nargs < a + 7) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected %d arguments", c->op, a + 7);
    if (!opc_pool_geometry(c->op, nd, in, out, c->args[a + 1], c->args[a + 2], c->args[a + 3], nullptr, &g, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    g.count_include_pad = gk_arg_b(c, a + 5);
    g.divisor_override = gk_arg_given(c, a + 6) ? gk_arg_i(c, a + 6) : 0;
    if (gk_arg_given(c, a + 6) && g.divisor_override == 0)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: divisor_override must not be 0", c->op);
    return run_avg(c, &k, false, backward, g, backward ? out : in);
}

/* _adaptive_avg_pool2d / _adaptive_avg_pool3d: args (self, output_size); the backward
 * ops: args (grad_output, self), self read for its shape only (the output has it).
 * Output contiguous. */
int k_adaptive_op(const opr_kernel_call *c)
{
    const bool backward = strstr(c->op, "_backward") != nullptr;
    const int nd = strstr(c->op, "pool3d") ? 3 : 2;
    const opr_tensor_view *in = backward ? c->outputs[0] : gk_arg_t(c, 0), *out = backward ? gk_arg_t(c, 0) : c->outputs[0];
    gk_ctx k;
    int rc = begin(c, &k, backward ? out : in, c->outputs[0]);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (!opc_pool_planes(c->op, nd, in, out, &g, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    for (int d = 0; d < 3; d++)
        if (g.out[d] == 0 && g.in[d] != 0 && g.planes)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: an output size of 0 for a non-empty input", c->op);
    return run_avg(c, &k, true, backward, g, backward ? out : in);
}

} // namespace

int gk_register_pool(opr_plugin *self)
{
    const struct {
        const char *op;
        opr_kernel_fn fn;
    } table[] = {
        {"max_pool2d_with_indices", k_max_pool_op},       {"max_pool3d_with_indices", k_max_pool_op},
        {"avg_pool2d", k_avg_pool_op},                    {"avg_pool3d", k_avg_pool_op},
        {"avg_pool2d_backward", k_avg_pool_op},           {"avg_pool3d_backward", k_avg_pool_op},
        {"_adaptive_avg_pool2d", k_adaptive_op},          {"_adaptive_avg_pool3d", k_adaptive_op},
        {"_adaptive_avg_pool2d_backward", k_adaptive_op}, {"_adaptive_avg_pool3d_backward", k_adaptive_op},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, GK_FLOATS | GK_HALVES, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
