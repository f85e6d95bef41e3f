/* Pooling kernels (f32 and f64; f16 and bf16 through them, cpu_half.c):
 * max_pool2d/3d_with_indices, avg_pool2d/3d and their
 * backward, _adaptive_avg_pool2d/3d and their backward.
 *
 * Every tensor is seen as planes (the leading dims, [N, C] or [C]) of up to 3 spatial
 * dims, padded with size-1 dims in front so one set of loops serves 2-d and 3-d
 * (plugins/common/opc_pool.h). The planes are independent: the threads split them.
 * Window sums are accumulated in double, as PyTorch's CPU kernels accumulate in their
 * accumulate type. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_pool.h"

#include <math.h>
#include <stdlib.h>

static int fail_geometry(const opr_kernel_call *c, const char *why) { return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why); }

#define PAR_PLANES(g) _Pragma("omp parallel for if ((g)->planes * (g)->in_vol >= CPU_PAR_THRESHOLD) schedule(static)")

/* ------------------------------------------------------------------ max */

#define MAX_POOL(T, SUF)                                                                                      \
    static void max_pool_##SUF(const opc_pool *g, const T *x, T *y, int64_t *idx)                              \
    {                                                                                                         \
        PAR_PLANES(g)                                                                                         \
        for (int64_t pl = 0; pl < g->planes; pl++) {                                                          \
            const T *xp = x + pl * g->in_vol;                                                                 \
            int64_t o = pl * g->out_vol;                                                                      \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)                                                        \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)                                                    \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {                                         \
                        T best = (T)-INFINITY;                                                                \
                        int64_t at = -1;                                                                      \
                        for (int64_t k0 = 0; k0 < g->k[0]; k0++) {                                            \
                            const int64_t i0 = o0 * g->st[0] - g->pad[0] + k0 * g->dil[0];                    \
                            if (i0 < 0 || i0 >= g->in[0]) continue;                                           \
                            for (int64_t k1 = 0; k1 < g->k[1]; k1++) {                                        \
                                const int64_t i1 = o1 * g->st[1] - g->pad[1] + k1 * g->dil[1];                \
                                if (i1 < 0 || i1 >= g->in[1]) continue;                                       \
                                for (int64_t k2 = 0; k2 < g->k[2]; k2++) {                                    \
                                    const int64_t i2 = o2 * g->st[2] - g->pad[2] + k2 * g->dil[2];            \
                                    if (i2 < 0 || i2 >= g->in[2]) continue;                                   \
                                    const int64_t i = (i0 * g->in[1] + i1) * g->in[2] + i2;                   \
                                    const T v = xp[i];                                                        \
                                    if (at < 0 || v > best || isnan(v)) { /* the last NaN, as PyTorch */      \
                                        best = v;                                                             \
                                        at = i;                                                               \
                                    }                                                                         \
                                }                                                                             \
                            }                                                                                 \
                        }                                                                                     \
                        y[o] = best;                                                                          \
                        idx[o] = at;                                                                          \
                    }                                                                                         \
        }                                                                                                     \
    }
MAX_POOL(float, f32)
MAX_POOL(double, f64)

/* max_pool2d_with_indices / max_pool3d_with_indices: args (self, kernel_size, stride,
 * padding, dilation, ceil_mode); outputs (values, indices). */
static int k_max_pool(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *y = c->outputs[0], *ix = c->outputs[1];
    const int nd = !strncmp(c->op, "max_pool3d", 10) ? 3 : 2;
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (!x || c->nout < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected (self, kernel_size, ...) and 2 outputs", c->op);
    if (!opc_pool_geometry(c->op, nd, x, y, c->args[1], c->args[2], c->args[3], c->args[4], &g, why, sizeof why))
        return fail_geometry(c, why);
    if (y->numel == 0) return OPR_OK;
    void *owned;
    const void *px = cpu_dense(x, &owned);
    if (!px) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    if (x->dtype == OPR_F32) max_pool_f32(&g, px, y->data, ix->data);
    else max_pool_f64(&g, px, y->data, ix->data);
    free(owned);
    return OPR_OK;
}

/* ------------------------------------------------------------------ average */

/* The window of output cell o along dim d: [*lo, *hi) within the input, and its size
 * with the padding it covers (PyTorch's pool_size before the window is clipped). */
static inline void avg_window(const opc_pool *g, int d, int64_t o, int64_t *lo, int64_t *hi, int64_t *padded)
{
    int64_t s = o * g->st[d] - g->pad[d], e = s + g->k[d];
    if (e > g->in[d] + g->pad[d]) e = g->in[d] + g->pad[d];
    *padded = e - s;
    *lo = s < 0 ? 0 : s;
    *hi = e > g->in[d] ? g->in[d] : e;
}

/* The divisor of a window (divisor_override 0: none). */
static inline double avg_divisor(const opc_pool *g, const int64_t *padded, const int64_t *lo, const int64_t *hi)
{
    if (g->divisor_override) return (double)g->divisor_override;
    if (g->count_include_pad) return (double)(padded[0] * padded[1] * padded[2]);
    return (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
}

/* forward: y = the window means; backward (grad_in != NULL): grad_in += dy / divisor
 * over each window (grad_in zeroed first). */
#define AVG_POOL(T, SUF)                                                                                      \
    static void avg_pool_##SUF(const opc_pool *g, const T *x, T *y)                                            \
    {                                                                                                         \
        PAR_PLANES(g)                                                                                         \
        for (int64_t pl = 0; pl < g->planes; pl++) {                                                          \
            const T *xp = x + pl * g->in_vol;                                                                 \
            int64_t o = pl * g->out_vol;                                                                      \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)                                                        \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)                                                    \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {                                         \
                        int64_t lo[3], hi[3], padded[3];                                                      \
                        const int64_t oc[3] = {o0, o1, o2};                                                   \
                        for (int d = 0; d < 3; d++) avg_window(g, d, oc[d], &lo[d], &hi[d], &padded[d]);      \
                        if (lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]) {                             \
                            y[o] = 0;                                                                         \
                            continue;                                                                         \
                        }                                                                                     \
                        double acc = 0;                                                                       \
                        for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)                                            \
                            for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)                                        \
                                for (int64_t i2 = lo[2]; i2 < hi[2]; i2++)                                    \
                                    acc += (double)xp[(i0 * g->in[1] + i1) * g->in[2] + i2];                  \
                        y[o] = (T)(acc / avg_divisor(g, padded, lo, hi));                                     \
                    }                                                                                         \
        }                                                                                                     \
    }                                                                                                         \
    static void avg_pool_backward_##SUF(const opc_pool *g, const T *dy, T *dx)                                 \
    {                                                                                                         \
        PAR_PLANES(g)                                                                                         \
        for (int64_t pl = 0; pl < g->planes; pl++) {                                                          \
            T *dp = dx + pl * g->in_vol;                                                                      \
            for (int64_t i = 0; i < g->in_vol; i++) dp[i] = 0;                                                \
            int64_t o = pl * g->out_vol;                                                                      \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)                                                        \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)                                                    \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {                                         \
                        int64_t lo[3], hi[3], padded[3];                                                      \
                        const int64_t oc[3] = {o0, o1, o2};                                                   \
                        for (int d = 0; d < 3; d++) avg_window(g, d, oc[d], &lo[d], &hi[d], &padded[d]);      \
                        if (lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]) continue;                     \
                        const T share = (T)((double)dy[o] / avg_divisor(g, padded, lo, hi));                  \
                        for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)                                            \
                            for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)                                        \
                                for (int64_t i2 = lo[2]; i2 < hi[2]; i2++)                                    \
                                    dp[(i0 * g->in[1] + i1) * g->in[2] + i2] += share;                        \
                    }                                                                                         \
        }                                                                                                     \
    }
AVG_POOL(float, f32)
AVG_POOL(double, f64)

/* avg_pool2d / avg_pool3d: args (self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override). avg_pool2d_backward / avg_pool3d_backward: args
 * (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override); self is read for its shape only (the output has it). */
static int k_avg_pool(const opr_kernel_call *c)
{
    const bool backward = strstr(c->op, "_backward") != NULL;
    const int nd = !strncmp(c->op, "avg_pool3d", 10) ? 3 : 2, a = backward ? 1 : 0;
    const opr_tensor_view *in = backward ? c->outputs[0] : cpu_arg_t(c, 0), *out = backward ? cpu_arg_t(c, 0) : c->outputs[0];
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (!in || !out) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected tensor arguments", c->op);
    if (!opc_pool_geometry(c->op, nd, in, out, c->args[a + 1], c->args[a + 2], c->args[a + 3], NULL, &g, why, sizeof why))
        return fail_geometry(c, why);
    g.count_include_pad = cpu_arg_b(c, a + 5);
    g.divisor_override = cpu_arg_given(c, a + 6) ? cpu_arg_i(c, a + 6) : 0;
    if (c->args[a + 6]->kind != OPR_ARG_NONE && g.divisor_override == 0)
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s: divisor_override must not be 0", c->op);
    if (c->outputs[0]->numel == 0) return OPR_OK;
    void *owned;
    const void *src = cpu_dense(backward ? out : in, &owned);
    if (!src) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    const bool f32 = c->outputs[0]->dtype == OPR_F32;
    if (backward) f32 ? avg_pool_backward_f32(&g, src, c->outputs[0]->data) : avg_pool_backward_f64(&g, src, c->outputs[0]->data);
    else f32 ? avg_pool_f32(&g, src, c->outputs[0]->data) : avg_pool_f64(&g, src, c->outputs[0]->data);
    free(owned);
    return OPR_OK;
}

/* ------------------------------------------------------------------ adaptive average */

static inline int64_t adaptive_lo(int64_t o, int64_t in, int64_t out) { return o * in / out; }
static inline int64_t adaptive_hi(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

#define ADAPTIVE(T, SUF)                                                                                      \
    static void adaptive_##SUF(const opc_pool *g, const T *x, T *y, T *dx, const T *dy)                        \
    {                                                                                                         \
        PAR_PLANES(g)                                                                                         \
        for (int64_t pl = 0; pl < g->planes; pl++) {                                                          \
            const T *xp = x ? x + pl * g->in_vol : NULL;                                                      \
            T *dp = dx ? dx + pl * g->in_vol : NULL;                                                          \
            if (dp)                                                                                           \
                for (int64_t i = 0; i < g->in_vol; i++) dp[i] = 0;                                            \
            int64_t o = pl * g->out_vol;                                                                      \
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)                                                        \
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)                                                    \
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++, o++) {                                         \
                        const int64_t l0 = adaptive_lo(o0, g->in[0], g->out[0]), h0 = adaptive_hi(o0, g->in[0], g->out[0]); \
                        const int64_t l1 = adaptive_lo(o1, g->in[1], g->out[1]), h1 = adaptive_hi(o1, g->in[1], g->out[1]); \
                        const int64_t l2 = adaptive_lo(o2, g->in[2], g->out[2]), h2 = adaptive_hi(o2, g->in[2], g->out[2]); \
                        const double cnt = (double)((h0 - l0) * (h1 - l1) * (h2 - l2));                       \
                        double acc = 0;                                                                       \
                        const T share = dp ? (T)((double)dy[o] / cnt) : (T)0;                                 \
                        for (int64_t i0 = l0; i0 < h0; i0++)                                                  \
                            for (int64_t i1 = l1; i1 < h1; i1++)                                              \
                                for (int64_t i2 = l2; i2 < h2; i2++) {                                        \
                                    const int64_t i = (i0 * g->in[1] + i1) * g->in[2] + i2;                   \
                                    if (dp) dp[i] += share;                                                   \
                                    else acc += (double)xp[i];                                                \
                                }                                                                             \
                        if (!dp) y[o] = (T)(acc / cnt);                                                       \
                    }                                                                                         \
        }                                                                                                     \
    }
ADAPTIVE(float, f32)
ADAPTIVE(double, f64)

/* _adaptive_avg_pool2d/3d: args (self, output_size); the backward ops: args
 * (grad_output, self), self read for its shape only. */
static int k_adaptive(const opr_kernel_call *c)
{
    const bool backward = strstr(c->op, "_backward") != NULL;
    const int nd = strstr(c->op, "pool3d") ? 3 : 2;
    const opr_tensor_view *in = backward ? c->outputs[0] : cpu_arg_t(c, 0), *out = backward ? cpu_arg_t(c, 0) : c->outputs[0];
    char why[OPC_WHY_SIZE];
    opc_pool g;
    if (!in || !out) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: expected tensor arguments", c->op);
    if (!opc_pool_planes(c->op, nd, in, out, &g, why, sizeof why)) return fail_geometry(c, why);
    for (int d = 0; d < 3; d++)
        if (g.out[d] == 0 && g.in[d] != 0 && g.planes)
            return CPU_FAIL(c, OPR_ERR_INVALID, "%s: an output size of 0 for a non-empty input", c->op);
    if (c->outputs[0]->numel == 0) return OPR_OK;
    void *owned;
    const void *src = cpu_dense(backward ? out : in, &owned);
    if (!src) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory for a contiguous copy", c->op);
    void *dst = c->outputs[0]->data;
    if (c->outputs[0]->dtype == OPR_F32) backward ? adaptive_f32(&g, NULL, NULL, dst, src) : adaptive_f32(&g, src, dst, NULL, NULL);
    else backward ? adaptive_f64(&g, NULL, NULL, dst, src) : adaptive_f64(&g, src, dst, NULL, NULL);
    free(owned);
    return OPR_OK;
}

int cpu_register_pool(opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } table[] = {
        {"max_pool2d_with_indices", k_max_pool}, {"max_pool3d_with_indices", k_max_pool},
        {"avg_pool2d", k_avg_pool}, {"avg_pool3d", k_avg_pool},
        {"avg_pool2d_backward", k_avg_pool}, {"avg_pool3d_backward", k_avg_pool},
        {"_adaptive_avg_pool2d", k_adaptive}, {"_adaptive_avg_pool3d", k_adaptive},
        {"_adaptive_avg_pool2d_backward", k_adaptive}, {"_adaptive_avg_pool3d_backward", k_adaptive},
    };
    const uint32_t dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register_upcast(self, table[i].op, dtypes, table[i].fn);
        if (rc) return rc;
    }
    return OPR_OK;
}
