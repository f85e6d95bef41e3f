/* Kernels of the helper ops that derivative formulas call (registry/ops/core.yaml,
 * "gradient helpers"): sum_to (reduce a broadcast gradient back to an input's shape),
 * new_zeros, sign, narrow_scatter and diag_backward. The fused backward kernels live in
 * cpu_backward.c. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_diagonal.h"
#include "../common/opc_strided_copy.h"

#include <string.h>

#define SUM_TO(T)                                                                                  \
    static void sum_to_##T(const opr_tensor_view *x, opr_tensor_view *out, const int64_t *ostr)   \
    {                                                                                              \
        T *o = out->data;                                                                          \
        const T *in = x->data;                                                                     \
        for (int64_t i = 0; i < out->numel; i++) o[i] = 0;                                        \
        cpu_walk w = {.ndim = x->ndim, .nops = 2, .shape = x->shape};                             \
        memcpy(w.strides[0], x->strides, (size_t)x->ndim * sizeof(int64_t));                     \
        memcpy(w.strides[1], ostr, (size_t)x->ndim * sizeof(int64_t));                           \
        cpu_walk_seek(&w, 0);                                                                      \
        for (int64_t i = 0; i < x->numel; i++, cpu_walk_next(&w)) o[w.off[1]] += in[w.off[0]];   \
    }
SUM_TO(float)
SUM_TO(double)

/* The common case (a bias gradient): x contiguous, summed over leading dims only, so x
 * reads as R rows of C = numel(out) columns. Columns are split into blocks that threads
 * take whole; each block accumulates in double over the rows. */
#define ROWS_BLOCK 256
#define SUM_ROWS(T)                                                                                \
    static void sum_rows_##T(const T *in, T *o, int64_t rows, int64_t cols, double scale)          \
    {                                                                                              \
        int64_t nblocks = (cols + ROWS_BLOCK - 1) / ROWS_BLOCK;                                   \
        _Pragma("omp parallel for if (rows * cols >= CPU_PAR_THRESHOLD)")                          \
        for (int64_t b = 0; b < nblocks; b++) {                                                    \
            int64_t c0 = b * ROWS_BLOCK, n = cols - c0 < ROWS_BLOCK ? cols - c0 : ROWS_BLOCK;      \
            double acc[ROWS_BLOCK] = {0};                                                          \
            for (int64_t r = 0; r < rows; r++) {                                                   \
                const T *row = in + r * cols + c0;                                                 \
                for (int64_t j = 0; j < n; j++) acc[j] += row[j];                                  \
            }                                                                                      \
            for (int64_t j = 0; j < n; j++) o[c0 + j] = (T)(scale * acc[j]);                       \
        }                                                                                          \
    }
SUM_ROWS(float)
SUM_ROWS(double)

/* True when summing x to out only removes (or collapses) leading dims of contiguous x. */
static bool leading_dims_only(const opr_tensor_view *x, const opr_tensor_view *out, const int64_t *ostr)
{
    if (!cpu_is_contiguous(x) || out->numel == 0) return false;
    int32_t d = 0;
    while (d < x->ndim && ostr[d] == 0) d++; /* the reduced leading dims */
    int64_t expect = 1;
    for (int32_t k = x->ndim - 1; k >= d; k--) {
        if (x->shape[k] != 1 && ostr[k] != expect) return false;
        expect *= x->shape[k];
    }
    return expect == out->numel;
}

bool cpu_sum_rows(const opr_tensor_view *x, opr_tensor_view *out, const int64_t *ostr, double scale)
{
    if (!leading_dims_only(x, out, ostr) || (x->dtype != OPR_F32 && x->dtype != OPR_F64)) return false;
    int64_t cols = out->numel, rows = x->numel / cols;
    if (x->dtype == OPR_F32) sum_rows_float(x->data, out->data, rows, cols, scale);
    else sum_rows_double(x->data, out->data, rows, cols, scale);
    return true;
}

/* sum_to(self, size): self's shape broadcasts from `size`; sum over the broadcast dims. */
static int k_sum_to(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    int64_t ostr[OPR_MAX_DIMS];
    /* out is contiguous with out->shape; read it as expanded to x's shape */
    int64_t contig[OPR_MAX_DIMS];
    opc_contig_strides(out->ndim, out->shape, contig);
    opr_tensor_view as_strided = *out;
    as_strided.strides = contig;
    if (!opc_bcast_strides(&as_strided, x->ndim, x->shape, ostr))
        return CPU_FAIL(c, OPR_ERR_INVALID, "sum_to: a tensor of %d dims cannot be summed to %d dims of these sizes",
                        x->ndim, out->ndim);
    if (cpu_sum_rows(x, out, ostr, 1.0)) {
        /* done: summed over leading dims */
    } else if (x->dtype == OPR_F32) {
        sum_to_float(x, out, ostr);
    } else {
        sum_to_double(x, out, ostr);
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ data movement */

static bool same_shape(const opr_tensor_view *a, int32_t ndim, const int64_t *shape)
{
    if (a->ndim != ndim) return false;
    for (int32_t d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d]) return false;
    return true;
}

/* new_zeros(self, size): zeros of self's dtype (self's data is not read). Zero bits are
 * the zero of every dtype. */
static int k_new_zeros(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    if (out->numel) memset(out->data, 0, (size_t)out->numel * cpu_dtype_size(out->dtype));
    return OPR_OK;
}

#define SIGN(T, SUF)                                                                             \
    static void sign_##SUF(const opr_tensor_view *x, opr_tensor_view *out)                       \
    {                                                                                            \
        T *o = out->data;                                                                        \
        const T *in = x->data;                                                                   \
        cpu_walk w;                                                                              \
        memset(&w, 0, sizeof w);                                                                 \
        w.ndim = x->ndim;                                                                        \
        w.nops = 1;                                                                              \
        w.shape = x->shape;                                                                      \
        memcpy(w.strides[0], x->strides, (size_t)x->ndim * sizeof(int64_t));                   \
        cpu_walk_seek(&w, 0);                                                                    \
        for (int64_t i = 0; i < x->numel; i++, cpu_walk_next(&w)) {                             \
            const T v = in[w.off[0]];                                                            \
            o[i] = (T)((v > 0) - (v < 0)); /* NaN stays NaN below */                             \
            if (v != v) o[i] = v;                                                                \
        }                                                                                        \
    }
SIGN(float, f32)
SIGN(double, f64)
SIGN(int64_t, i64)
SIGN(int32_t, i32)

/* sign(self): -1, 0 or 1 (NaN for NaN). */
static int k_sign(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    switch (out->dtype) {
    case OPR_F32: sign_f32(x, out); break;
    case OPR_F64: sign_f64(x, out); break;
    case OPR_I64: sign_i64(x, out); break;
    case OPR_I32: sign_i32(x, out); break;
    default: return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "sign: dtype %s is not supported on cpu", cpu_dtype_name(out->dtype));
    }
    return OPR_OK;
}

/* narrow_scatter(self, src, dim, start): self with narrow(dim, start, size(src, dim))
 * replaced by src. start may be negative (counted from the end, as narrow does). */
static int k_narrow_scatter(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *src = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    int32_t dim;
    if (x->ndim == 0 || !cpu_wrap_dim(cpu_arg_i(c, 2), x->ndim, &dim))
        return CPU_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: dim %lld out of range for a %d-d tensor",
                        (long long)cpu_arg_i(c, 2), (int)x->ndim);
    if (src->dtype != x->dtype)
        return CPU_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: src is %s but self is %s", cpu_dtype_name(src->dtype),
                        cpu_dtype_name(x->dtype));
    const int64_t size = x->shape[dim];
    int64_t start = cpu_arg_i(c, 3);
    if (start < 0) start += size;
    bool ok = src->ndim == x->ndim && start >= 0 && start <= size;
    for (int32_t d = 0; ok && d < x->ndim; d++)
        ok = d == dim ? src->shape[d] <= size - start : src->shape[d] == x->shape[d];
    if (!ok)
        return CPU_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: src must have self's shape except at dim %d, where it must fit "
                        "from start %lld into size %lld", (int)dim, (long long)cpu_arg_i(c, 3), (long long)size);
    if (!same_shape(out, x->ndim, x->shape))
        return CPU_FAIL(c, OPR_ERR_INVALID, "narrow_scatter: output shape must equal self's");
    const size_t es = cpu_dtype_size(x->dtype);
    opc_copy_strided(es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides);
    char *base = (char *)out->data + start * out->strides[dim] * (int64_t)es;
    opc_copy_strided(es, src->ndim, src->shape, base, out->strides, src->data, src->strides);
    return OPR_OK;
}

/* diag_backward(self, size, diagonal): the adjoint of diag. For a 1-d input of diag
 * (size [n]) the gradient is diagonal `diagonal` of self [n + |k|, n + |k|]; for a 2-d
 * input (size [r, c]) it is an r x c zero matrix with self on that diagonal. */
static int k_diag_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    const int64_t k = cpu_arg_i(c, 2);
    char why[OPC_WHY_SIZE];
    int64_t len;
    if (!opc_diag_backward_shapes(g, out, k, &len, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t row0 = opc_diagonal_row0(k), col0 = opc_diagonal_col0(k);
    const size_t es = cpu_dtype_size(out->dtype);
    if (out->ndim == 1) {
        const int64_t gst[1] = {g->strides[0] + g->strides[1]};
        const char *src = (const char *)g->data + (row0 * g->strides[0] + col0 * g->strides[1]) * (int64_t)es;
        opc_copy_strided(es, 1, &len, out->data, out->strides, src, gst);
        return OPR_OK;
    }
    if (out->numel) memset(out->data, 0, (size_t)out->numel * es);
    if (!len) return OPR_OK; /* the diagonal lies outside: its offset may be anywhere in int64 */
    const int64_t ost[1] = {out->strides[0] + out->strides[1]};
    char *dst = (char *)out->data + (row0 * out->strides[0] + col0 * out->strides[1]) * (int64_t)es;
    opc_copy_strided(es, 1, &len, dst, ost, g->data, g->strides);
    return OPR_OK;
}

int cpu_register_grad(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    /* The helpers that only move bytes serve the half types too (storage-only here). */
    const uint32_t all = fl | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_F16) |
                         OPR_DTYPE_BIT(OPR_BF16) | OPR_DTYPE_BIT(OPR_I32);
    /* sum_to and sign also compute in f16 and bf16, through f32 (cpu_half.c) */
    const struct { const char *op; uint32_t dtypes; opr_kernel_fn fn; bool upcast; } table[] = {
        {"sum_to", fl, k_sum_to, true},
        {"new_zeros", all, k_new_zeros, false},
        {"sign", fl | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32), k_sign, true},
        {"narrow_scatter", all, k_narrow_scatter, false},
        {"diag_backward", all, k_diag_backward, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = (table[i].upcast ? cpu_register_upcast : cpu_register)(self, table[i].op, table[i].dtypes,
                                                                        table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
