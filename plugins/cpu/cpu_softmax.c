/* softmax and log_softmax on the CPU, one slice (every index of the other dims) at a
 * time: the slice's max, exp(x - max) and its sum, then one scaling pass. Contiguous
 * slices run on the vector loops of cpu_vmath.h (max, exp(x - m), sum); strided ones
 * are gathered in chunks so that they do the same arithmetic. The sum is kept in double. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"
#include "../common/opc_reduce.h"

#include <tgmath.h> /* log(x) picks the float or double version from x's type */

/* One slice of len elements (input stride sx, output stride so). The max is subtracted
 * before exp so nothing overflows; the sum is kept in double and applied as one
 * reciprocal, like PyTorch. A NaN anywhere in the slice makes the whole slice NaN, as in
 * PyTorch (the max passes over it, its exp makes the sum NaN); so does an all -inf
 * slice (-inf - -inf is NaN) and a +inf (inf - inf). */
typedef void (*sm_row_fn)(const void *x, void *o, int64_t len, int64_t sx, int64_t so, const void *next);

/* The slice's largest element that is not NaN (cpu_vmath.h's vector max for a
 * contiguous slice; the same rule element by element for a strided one). */
#define SM_SLICE_MAX(name, T, VMAX)                                                      \
    static T name(const T *x, int64_t len, int64_t sx)                                   \
    {                                                                                    \
        if (sx == 1) return VMAX(len, x);                                                \
        T m = -INFINITY;                                                                 \
        for (int64_t i = 0; i < len; i++) m = x[i * sx] > m ? x[i * sx] : m;             \
        return m;                                                                        \
    }
SM_SLICE_MAX(sm_max_f32, float, cpu_vm.max_f32)
SM_SLICE_MAX(sm_max_f64, double, cpu_vm.max_f64)

/* exp(x - m) through the vector function of cpu_vmath.h, in chunks of a fixed size so
 * that the contiguous and the strided case do the same arithmetic (the sum of each
 * chunk is added in order). Stores the values at o (stride so) unless o is NULL;
 * returns their sum, in double. While the exponentials are computed from cache, the
 * next contiguous slice (next, if not NULL) is prefetched: its first pass (the max)
 * then finds it there, and memory and arithmetic overlap. */
#define SM_CHUNK 256
#define SM_EXP_SUM(name, T, VEXPSUB, VSUM)                                               \
    static double name(const T *x, int64_t sx, T m, int64_t len, T *o, int64_t so, const T *next) \
    {                                                                                    \
        T buf[SM_CHUNK];                                                                 \
        double s = 0;                                                                    \
        for (int64_t i0 = 0; i0 < len; i0 += SM_CHUNK) {                                 \
            const int64_t n = len - i0 < SM_CHUNK ? len - i0 : SM_CHUNK;                 \
            if (next)                                                                    \
                for (int64_t k = 0; k < n; k += 64 / (int64_t)sizeof(T)) __builtin_prefetch(next + i0 + k); \
            /* contiguous output: work in place there, no copy back */                   \
            T *e = o && so == 1 ? o + i0 : buf;                                          \
            const T *src = x + i0;                                                       \
            if (sx != 1) {                                                               \
                for (int64_t k = 0; k < n; k++) e[k] = x[(i0 + k) * sx];                 \
                src = e;                                                                 \
            }                                                                            \
            VEXPSUB(n, src, m, e);                                                       \
            s += VSUM(n, e);                                                             \
            if (o && e == buf)                                                           \
                for (int64_t k = 0; k < n; k++) o[(i0 + k) * so] = buf[k];               \
        }                                                                                \
        return s;                                                                        \
    }
SM_EXP_SUM(sm_exp_sum_f32, float, cpu_vm.expsub_f32, cpu_vm.sum_f32)
SM_EXP_SUM(sm_exp_sum_f64, double, cpu_vm.expsub_f64, cpu_vm.sum_f64)

/* Max, exp and sum, then one scaling pass (softmax: times the reciprocal of the sum,
 * like PyTorch; log_softmax: minus m + log(sum)). */
#define SM_SOFTMAX(name, T, SUF, LOG)                                                    \
    static void name(const void *xv, void *ov, int64_t len, int64_t sx, int64_t so, const void *nextv) \
    {                                                                                    \
        const T *x = (const T *)xv, *next = sx == 1 ? (const T *)nextv : NULL;           \
        T *o = (T *)ov;                                                                  \
        const T m = sm_max_##SUF(x, len, sx);                                            \
        if (LOG) {                                                                       \
            const T lse = (T)log(sm_exp_sum_##SUF(x, sx, m, len, NULL, 0, next));        \
            for (int64_t i = 0; i < len; i++) o[i * so] = x[i * sx] - m - lse;           \
        } else {                                                                         \
            const T inv = (T)(1 / sm_exp_sum_##SUF(x, sx, m, len, o, so, next));         \
            for (int64_t i = 0; i < len; i++) o[i * so] *= inv;                          \
        }                                                                                \
    }

SM_SOFTMAX(softmax_f32, float, f32, 0)
SM_SOFTMAX(softmax_f64, double, f64, 0)
SM_SOFTMAX(log_softmax_f32, float, f32, 1)
SM_SOFTMAX(log_softmax_f64, double, f64, 1)

static const sm_row_fn softmax_fns[OPR_DTYPE_COUNT] = {
    [OPR_F32] = softmax_f32, [OPR_F64] = softmax_f64,
};
static const sm_row_fn log_softmax_fns[OPR_DTYPE_COUNT] = {
    [OPR_F32] = log_softmax_f32, [OPR_F64] = log_softmax_f64,
};

/* The dtypes a softmax table has kernels for, as an OPR_DTYPE_BIT mask. */
static uint32_t sm_mask(const sm_row_fn *t)
{
    uint32_t m = 0;
    for (int d = 0; d < OPR_DTYPE_COUNT; d++)
        if (t[d]) m |= OPR_DTYPE_BIT(d);
    return m;
}

/* The slices of a softmax: every index of the dims other than `dim`. */
typedef struct sm_slices {
    sm_row_fn fn;
    int32_t ndim;
    int64_t shape[OPR_MAX_DIMS];
    int64_t st[2][OPR_MAX_DIMS]; /* input, output */
    int64_t len, sx, so;
    const char *x;
    char *o;
    size_t esz;
} sm_slices;

static void sm_slices_run(const sm_slices *s, int64_t lo, int64_t hi)
{
    cpu_walk w;
    w.ndim = s->ndim;
    w.nops = 2;
    w.shape = s->shape;
    for (int k = 0; k < 2; k++)
        for (int32_t d = 0; d < s->ndim; d++) w.strides[k][d] = s->st[k][d];
    cpu_walk_seek(&w, lo);
    const int64_t esz = (int64_t)s->esz;
    for (int64_t i = lo; i < hi; i++) {
        const char *x = s->x + w.off[0] * esz;
        char *o = s->o + w.off[1] * esz;
        cpu_walk_next(&w);
        s->fn(x, o, s->len, s->sx, s->so, i + 1 < hi ? s->x + w.off[0] * esz : NULL);
    }
}

static int sm_run(const opr_kernel_call *c, const char *op, const sm_row_fn *fns)
{
    const opr_tensor_view *in, *out;
    int32_t dim;
    char why[OPC_WHY_SIZE];
    const int rc = opc_softmax_begin(c, op, sm_mask(fns), "CPU", &in, &out, &dim, why, sizeof why);
    if (rc) return CPU_FAIL(c, rc, "%s", why);
    if (in->numel == 0) return OPR_OK;

    sm_slices s;
    s.fn = fns[in->dtype];
    int64_t ist[OPR_MAX_DIMS], ost[OPR_MAX_DIMS];
    cpu_view_strides(in, ist);
    cpu_view_strides(out, ost);
    /* A 0-d tensor is one slice of one element. */
    s.len = in->ndim ? in->shape[dim] : 1;
    s.sx = in->ndim ? ist[dim] : 0;
    s.so = in->ndim ? ost[dim] : 0;
    s.ndim = 0;
    for (int32_t d = 0; d < in->ndim; d++) {
        if (d == dim) continue;
        s.shape[s.ndim] = in->shape[d];
        s.st[0][s.ndim] = ist[d];
        s.st[1][s.ndim++] = ost[d];
    }
    s.ndim = cpu_coalesce(s.ndim, s.shape, 2, s.st);
    s.x = (const char *)in->data;
    s.o = (char *)out->data;
    s.esz = cpu_dtype_size(in->dtype);

    const int64_t nslice = in->numel / s.len;
    if (in->numel < CPU_PAR_THRESHOLD || nslice == 1) {
        sm_slices_run(&s, 0, nslice);
        return OPR_OK;
    }
    const int64_t nblk = nslice < 1024 ? nslice : 1024;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblk; b++)
        sm_slices_run(&s, nslice * b / nblk, nslice * (b + 1) / nblk);
    return OPR_OK;
}

static int k_softmax(const opr_kernel_call *c)
{
    return sm_run(c, "softmax", softmax_fns);
}
static int k_log_softmax(const opr_kernel_call *c)
{
    return sm_run(c, "log_softmax", log_softmax_fns);
}

int cpu_register_softmax(opr_plugin *self)
{
    int rc = cpu_register(self, "softmax", sm_mask(softmax_fns), k_softmax);
    return rc ? rc : cpu_register(self, "log_softmax", sm_mask(log_softmax_fns), k_log_softmax);
}
