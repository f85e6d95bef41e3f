/* Segment CPU kernels, behind the ops on jagged tensors: segment_sum, segment_expand,
 * segment_softmax, segment_log_softmax, jagged_to_padded and padded_to_jagged
 * (registry/ops/core.yaml, "segments"). The values are rows [total, D...] cut into B
 * segments by i64 offsets [B + 1]; the offsets come from the caller and are checked
 * here before any row is touched. Inputs may have any strides; outputs are the host's
 * contiguous allocations. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_segment.h"

#include <math.h>
#include <stdlib.h>

/* Rows of a tensor: `lead` leading dims indexed by the kernel (1 for values, 2 for a
 * padded [B, N, ...]) and the inner elements of every row, addressed through ioff. */
typedef struct seg_rows {
    int64_t inner;          /* elements per row: the product of the dims after `lead` */
    int64_t stride[2];      /* strides of the leading dims */
    int64_t *ioff;          /* offset of inner element j within a row */
} seg_rows;

static int seg_rows_of(const opr_kernel_call *c, const char *op, const opr_tensor_view *v, int lead, seg_rows *r)
{
    r->inner = 1;
    for (int d = lead; d < v->ndim; d++) r->inner *= v->shape[d];
    for (int d = 0; d < lead; d++) r->stride[d] = v->strides[d];
    r->ioff = malloc((size_t)(r->inner ? r->inner : 1) * sizeof *r->ioff);
    if (!r->ioff) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
    opr_tensor_view in = *v; /* the inner dims alone */
    in.ndim = v->ndim - lead;
    in.shape = v->shape + lead;
    in.strides = v->strides + lead;
    for (int64_t j = 0; j < r->inner; j++) r->ioff[j] = cpu_offset_of(&in, j);
    return OPR_OK;
}

/* The offsets on the host, checked: 0 first, never decreasing, `total` last, and no
 * segment longer than max_len (when max_len >= 0). */
static int64_t *seg_offsets(const opr_kernel_call *c, const char *op, const opr_tensor_view *o, int64_t total,
                            int64_t max_len, int *rc)
{
    const int64_t n = o->shape[0], b = n - 1;
    if (n < 1) { *rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s: offsets need at least one entry", op); return NULL; }
    int64_t *h = malloc((size_t)n * sizeof *h);
    if (!h) { *rc = CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op); return NULL; }
    for (int64_t i = 0; i < n; i++) h[i] = ((const int64_t *)o->data)[i * o->strides[0]];
    char why[OPC_WHY_SIZE];
    if (!opc_offsets_check(op, h, b, total, max_len, why, sizeof why)) {
        *rc = CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
        free(h);
        return NULL;
    }
    *rc = OPR_OK;
    return h;
}

/* ------------------------------------------------------------------ segment_sum, segment_expand */

#define SEG_SUM(NAME, T)                                                                              \
    static void NAME(const char *x, const seg_rows *r, const int64_t *o, int64_t nseg, bool mean, T *out) \
    {                                                                                                 \
        _Pragma("omp parallel for if (o[nseg] * r->inner >= CPU_PAR_THRESHOLD)")                      \
        for (int64_t b = 0; b < nseg; b++) {                                                          \
            T *dst = out + b * r->inner;                                                              \
            for (int64_t j = 0; j < r->inner; j++) dst[j] = 0;                                        \
            for (int64_t row = o[b]; row < o[b + 1]; row++) {                                         \
                const T *src = (const T *)x + row * r->stride[0];                                     \
                for (int64_t j = 0; j < r->inner; j++) dst[j] += src[r->ioff[j]];                     \
            }                                                                                         \
            if (mean)                                                                                 \
                for (int64_t j = 0; j < r->inner; j++) dst[j] /= (T)(o[b + 1] - o[b]);                \
        }                                                                                             \
    }
SEG_SUM(seg_sum_f32, float)
SEG_SUM(seg_sum_f64, double)

#define SEG_EXPAND(NAME, T)                                                                           \
    static void NAME(const char *x, const seg_rows *r, const int64_t *o, int64_t nseg, bool mean, T *out) \
    {                                                                                                 \
        _Pragma("omp parallel for if (o[nseg] * r->inner >= CPU_PAR_THRESHOLD)")                      \
        for (int64_t b = 0; b < nseg; b++) {                                                          \
            const T *src = (const T *)x + b * r->stride[0];                                           \
            const T scale = mean ? (T)1 / (T)(o[b + 1] - o[b]) : (T)1;                                \
            for (int64_t row = o[b]; row < o[b + 1]; row++)                                           \
                for (int64_t j = 0; j < r->inner; j++) out[row * r->inner + j] = src[r->ioff[j]] * scale; \
        }                                                                                             \
    }
SEG_EXPAND(seg_expand_f32, float)
SEG_EXPAND(seg_expand_f64, double)

static int k_segment_sum_like(const opr_kernel_call *c, const char *op, bool expand)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *offs = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const bool mean = cpu_arg_b(c, expand ? 3 : 2);
    const int64_t nseg = offs->shape[0] - 1, rows = expand ? out->shape[0] : x->shape[0];
    int rc;
    int64_t *o = seg_offsets(c, op, offs, rows, -1, &rc);
    if (!o) return rc;
    seg_rows r;
    if ((rc = seg_rows_of(c, op, x, 1, &r))) { free(o); return rc; }
    if (x->dtype == OPR_F32) (expand ? seg_expand_f32 : seg_sum_f32)(x->data, &r, o, nseg, mean, out->data);
    else (expand ? seg_expand_f64 : seg_sum_f64)(x->data, &r, o, nseg, mean, out->data);
    free(r.ioff);
    free(o);
    return OPR_OK;
}

static int k_segment_sum(const opr_kernel_call *c) { return k_segment_sum_like(c, "segment_sum", false); }
static int k_segment_expand(const opr_kernel_call *c) { return k_segment_sum_like(c, "segment_expand", true); }

/* ------------------------------------------------------------------ segment (log_)softmax */

/* Per segment and column: the max, the sum of exp(x - max), then the outputs; the
 * column's statistics live in per-thread rows of `inner` accumulators. */
#define SEG_SOFTMAX(NAME, T, EXP, LOG)                                                                \
    static int NAME(const char *x, const seg_rows *r, const int64_t *o, int64_t nseg, bool log_out, T *out) \
    {                                                                                                 \
        int failed = 0;                                                                               \
        _Pragma("omp parallel if (o[nseg] * r->inner >= CPU_PAR_THRESHOLD)")                          \
        {                                                                                             \
            T *mx = malloc((size_t)(r->inner ? 2 * r->inner : 1) * sizeof *mx);                       \
            if (!mx) {                                                                                \
                _Pragma("omp atomic write") failed = 1;                                               \
            }                                                                                         \
            T *sum = mx ? mx + r->inner : NULL;                                                       \
            _Pragma("omp for")                                                                        \
            for (int64_t b = 0; b < nseg; b++) {                                                      \
                if (!mx) continue;                                                                    \
                for (int64_t j = 0; j < r->inner; j++) { mx[j] = -(T)INFINITY; sum[j] = 0; }          \
                for (int64_t row = o[b]; row < o[b + 1]; row++) {                                     \
                    const T *src = (const T *)x + row * r->stride[0];                                 \
                    for (int64_t j = 0; j < r->inner; j++)                                            \
                        if (src[r->ioff[j]] > mx[j] || src[r->ioff[j]] != src[r->ioff[j]]) mx[j] = src[r->ioff[j]]; \
                }                                                                                     \
                for (int64_t row = o[b]; row < o[b + 1]; row++) {                                     \
                    const T *src = (const T *)x + row * r->stride[0];                                 \
                    T *dst = out + row * r->inner;                                                    \
                    for (int64_t j = 0; j < r->inner; j++) {                                          \
                        dst[j] = EXP(src[r->ioff[j]] - mx[j]);                                        \
                        sum[j] += dst[j];                                                             \
                    }                                                                                 \
                }                                                                                     \
                for (int64_t row = o[b]; row < o[b + 1]; row++) {                                     \
                    const T *src = (const T *)x + row * r->stride[0];                                 \
                    T *dst = out + row * r->inner;                                                    \
                    for (int64_t j = 0; j < r->inner; j++)                                            \
                        dst[j] = log_out ? src[r->ioff[j]] - mx[j] - LOG(sum[j]) : dst[j] / sum[j];   \
                }                                                                                     \
            }                                                                                         \
            free(mx);                                                                                 \
        }                                                                                             \
        return failed;                                                                                \
    }
SEG_SOFTMAX(seg_softmax_f32, float, expf, logf)
SEG_SOFTMAX(seg_softmax_f64, double, exp, log)

static int k_segment_softmax_like(const opr_kernel_call *c, const char *op, bool log_out)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *offs = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const int64_t nseg = offs->shape[0] - 1;
    int rc;
    int64_t *o = seg_offsets(c, op, offs, x->shape[0], -1, &rc);
    if (!o) return rc;
    seg_rows r;
    if ((rc = seg_rows_of(c, op, x, 1, &r))) { free(o); return rc; }
    int failed = x->dtype == OPR_F32 ? seg_softmax_f32(x->data, &r, o, nseg, log_out, out->data)
                                     : seg_softmax_f64(x->data, &r, o, nseg, log_out, out->data);
    free(r.ioff);
    free(o);
    return failed ? CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op) : OPR_OK;
}

static int k_segment_softmax(const opr_kernel_call *c) { return k_segment_softmax_like(c, "segment_softmax", false); }
static int k_segment_log_softmax(const opr_kernel_call *c) { return k_segment_softmax_like(c, "segment_log_softmax", true); }

/* ------------------------------------------------------------------ padded <-> jagged */

/* Moves whole rows between the values [total, inner] and the padded [B, N, inner] of
 * any dtype (elements of es bytes). to_padded: padded[b, i] = values[o[b] + i]. */
static void seg_move_rows(const char *src, const seg_rows *sr, char *dst, int64_t inner, const int64_t *o,
                          int64_t nseg, int64_t n, size_t es, bool to_padded)
{
#pragma omp parallel for if (o[nseg] * inner >= CPU_PAR_THRESHOLD)
    for (int64_t b = 0; b < nseg; b++)
        for (int64_t i = 0; i < o[b + 1] - o[b]; i++) {
            const int64_t row = o[b] + i;
            /* source row: a values row, or padded[b, i]; destination: contiguous */
            const char *s = src + (to_padded ? row * sr->stride[0] : b * sr->stride[0] + i * sr->stride[1]) * (int64_t)es;
            char *d = dst + (to_padded ? b * n + i : row) * inner * (int64_t)es;
            for (int64_t j = 0; j < inner; j++) memcpy(d + j * (int64_t)es, s + sr->ioff[j] * (int64_t)es, es);
        }
}

static void fill_value(char *dst, int64_t count, opr_dtype dt, double v)
{
    const size_t es = cpu_dtype_size(dt);
    unsigned char one[8];
    switch (dt) {
    case OPR_F32: { float f = (float)v; memcpy(one, &f, es); break; }
    case OPR_F64: memcpy(one, &v, es); break;
    case OPR_I64: { int64_t i = (int64_t)v; memcpy(one, &i, es); break; }
    case OPR_I32: { int32_t i = (int32_t)v; memcpy(one, &i, es); break; }
    default: one[0] = v != 0; break; /* bool */
    }
    for (int64_t i = 0; i < count; i++) memcpy(dst + i * (int64_t)es, one, es);
}

static int k_jagged_to_padded(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *offs = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const int64_t nseg = offs->shape[0] - 1, max_len = cpu_arg_i(c, 2);
    int rc;
    int64_t *o = seg_offsets(c, "jagged_to_padded", offs, x->shape[0], max_len, &rc);
    if (!o) return rc;
    seg_rows r;
    if ((rc = seg_rows_of(c, "jagged_to_padded", x, 1, &r))) { free(o); return rc; }
    fill_value(out->data, out->numel, x->dtype, cpu_arg_d(c, 3));
    seg_move_rows(x->data, &r, out->data, r.inner, o, nseg, max_len, cpu_dtype_size(x->dtype), true);
    free(r.ioff);
    free(o);
    return OPR_OK;
}

static int k_padded_to_jagged(const opr_kernel_call *c)
{
    const opr_tensor_view *p = cpu_arg_t(c, 0), *offs = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    const int64_t nseg = offs->shape[0] - 1;
    int rc;
    int64_t *o = seg_offsets(c, "padded_to_jagged", offs, out->shape[0], p->shape[1], &rc);
    if (!o) return rc;
    seg_rows r;
    if ((rc = seg_rows_of(c, "padded_to_jagged", p, 2, &r))) { free(o); return rc; }
    seg_move_rows(p->data, &r, out->data, r.inner, o, nseg, p->shape[1], cpu_dtype_size(p->dtype), false);
    free(r.ioff);
    free(o);
    return OPR_OK;
}

int cpu_register_segment(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    const uint32_t all = fl | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32) | OPR_DTYPE_BIT(OPR_BOOL);
    static const struct { const char *op; bool any_dtype; opr_kernel_fn fn; } table[] = {
        { "segment_sum", false, k_segment_sum },
        { "segment_expand", false, k_segment_expand },
        { "segment_softmax", false, k_segment_softmax },
        { "segment_log_softmax", false, k_segment_log_softmax },
        { "jagged_to_padded", true, k_jagged_to_padded },
        { "padded_to_jagged", true, k_padded_to_jagged },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, table[i].any_dtype ? all : fl, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
