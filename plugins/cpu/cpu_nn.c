/* Kernels of the neural-network ops (registry/ops/nn.yaml): embedding and its
 * backward, dropout_seeded and native_dropout, triu / tril, argmax / argmin. (dropout and masked_fill are
 * composite ops: they run through dropout_seeded and where.) Inputs may be any strided
 * views; outputs are the host's contiguous tensors. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_nn.h"
#include "../common/opc_rng.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ embedding */

/* Fails unless every index lies in [0, num_weights); checked before anything is
 * written, so a failing call leaves its output untouched. */
static int check_embedding_indices(const opr_kernel_call *c, const char *op, const opr_tensor_view *indices,
                                   int64_t num_weights)
{
    if (indices->numel == 0) return OPR_OK;
    int64_t mn, mx;
    cpu_minmax_i64(indices, &mn, &mx);
    char why[OPC_WHY_SIZE];
    return opc_embedding_in_range(op, mn, mx, num_weights, why, sizeof why) ? OPR_OK
                                                                            : CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
}

/* The row index of every position of indices, in row-major order (a contiguous copy,
 * so the loops below read them directly). NULL when out of memory. */
static int64_t *indices_flat(const opr_tensor_view *indices)
{
    int64_t *flat = malloc((size_t)(indices->numel ? indices->numel : 1) * sizeof *flat);
    if (!flat) return NULL;
    const int64_t *ip = indices->data;
    cpu_walk w = {.ndim = indices->ndim, .nops = 1, .shape = indices->shape};
    memcpy(w.strides[0], indices->strides, (size_t)indices->ndim * sizeof(int64_t));
    cpu_walk_seek(&w, 0);
    for (int64_t i = 0; i < indices->numel; i++, cpu_walk_next(&w)) flat[i] = ip[w.off[0]];
    return flat;
}

/* out[n, :] = weight[indices[n], :], elements moved as bytes (any dtype). */
static int k_embedding(const opr_kernel_call *c)
{
    const opr_tensor_view *wt = cpu_arg_t(c, 0), *indices = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!wt || !indices) return CPU_FAIL(c, OPR_ERR_INVALID, "embedding: weight and indices must be tensors");
    if (!opc_embedding_args("embedding", wt, indices, out, "output", why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int rc = check_embedding_indices(c, "embedding", indices, wt->shape[0]);
    if (rc || out->numel == 0) return rc;
    int64_t *flat = indices_flat(indices);
    if (!flat) return CPU_FAIL(c, OPR_ERR_NOMEM, "embedding: out of memory");
    const int64_t n = indices->numel, D = wt->shape[1], rs = wt->strides[0], cs = wt->strides[1];
    const size_t es = cpu_dtype_size(out->dtype);
    const char *src = wt->data;
    char *dst = out->data;
    _Pragma("omp parallel for if (n * D >= CPU_PAR_THRESHOLD)")
    for (int64_t r = 0; r < n; r++) {
        const char *row = src + flat[r] * rs * (int64_t)es;
        char *o = dst + r * D * (int64_t)es;
        if (cs == 1) memcpy(o, row, (size_t)D * es);
        else for (int64_t j = 0; j < D; j++) memcpy(o + j * (int64_t)es, row + j * cs * (int64_t)es, es);
    }
    free(flat);
    return OPR_OK;
}

/* out = zeros [num_weights, D]; out[indices[n], :] += grad_output[n, :] unless
 * indices[n] == padding_idx. One thread, in index order: the sums over repeated indices
 * are the same from run to run. */
#define EMBEDDING_BACKWARD(T)                                                                              \
    static void embedding_backward_##T(const opr_tensor_view *g, const int64_t *flat, int64_t n,            \
                                       int64_t padding_idx, opr_tensor_view *out)                          \
    {                                                                                                      \
        T *o = out->data;                                                                                  \
        const T *gp = g->data;                                                                             \
        const int64_t D = out->shape[1];                                                                   \
        memset(o, 0, (size_t)out->numel * sizeof(T));                                                      \
        cpu_walk w = {.ndim = g->ndim, .nops = 1, .shape = g->shape};                                      \
        memcpy(w.strides[0], g->strides, (size_t)g->ndim * sizeof(int64_t));                              \
        cpu_walk_seek(&w, 0);                                                                              \
        for (int64_t r = 0; r < n; r++) {                                                                  \
            T *row = o + flat[r] * D;                                                                      \
            const bool skip = flat[r] == padding_idx;                                                      \
            for (int64_t j = 0; j < D; j++, cpu_walk_next(&w))                                            \
                if (!skip) row[j] += gp[w.off[0]];                                                         \
        }                                                                                                  \
    }
EMBEDDING_BACKWARD(float)
EMBEDDING_BACKWARD(double)

static int k_embedding_backward(const opr_kernel_call *c)
{
    const opr_tensor_view *g = cpu_arg_t(c, 0), *indices = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!g || !indices) return CPU_FAIL(c, OPR_ERR_INVALID, "embedding_backward: grad_output and indices must be tensors");
    if (!opc_embedding_args("embedding_backward", out, indices, g, "grad_output", why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    int rc = check_embedding_indices(c, "embedding_backward", indices, out->shape[0]);
    if (rc) return rc;
    int64_t *flat = indices_flat(indices);
    if (!flat) return CPU_FAIL(c, OPR_ERR_NOMEM, "embedding_backward: out of memory");
    const int64_t padding_idx = cpu_arg_i(c, 3);
    if (out->dtype == OPR_F32) embedding_backward_float(g, flat, indices->numel, padding_idx, out);
    else if (out->dtype == OPR_F64) embedding_backward_double(g, flat, indices->numel, padding_idx, out);
    else rc = CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "embedding_backward: dtype %s", cpu_dtype_name(out->dtype));
    free(flat);
    return rc;
}

/* ------------------------------------------------------------------ dropout_seeded */

/* out[i] = keep(seed, i) ? x[i] * scale : 0, i the row-major position (opc_rng.h);
 * mask (native_dropout's, contiguous bool; NULL for dropout_seeded) gets keep. With
 * train false (native_dropout in eval) out is x and mask all true. */
#define DROPOUT(T)                                                                                          \
    static void dropout_##T(const opr_tensor_view *x, opr_tensor_view *out, uint64_t seed, double p, bool train, \
                            uint8_t *mask)                                                                 \
    {                                                                                                      \
        const T scale = p < 1 ? (T)(1.0 / (1.0 - p)) : (T)0, *xp = x->data;                                \
        T *o = out->data;                                                                                  \
        const int64_t n = out->numel;                                                                      \
        _Pragma("omp parallel if (n >= CPU_PAR_THRESHOLD)")                                                \
        {                                                                                                  \
            int64_t lo, hi;                                                                                \
            cpu_thread_range(n, &lo, &hi);                                                                 \
            cpu_walk w = {.ndim = x->ndim, .nops = 1, .shape = x->shape};                                  \
            memcpy(w.strides[0], x->strides, (size_t)x->ndim * sizeof(int64_t));                           \
            cpu_walk_seek(&w, lo);                                                                         \
            for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {                                        \
                const bool keep = !train || opc_dropout_keeps(seed, (uint64_t)i, p);                       \
                o[i] = keep ? (train ? xp[w.off[0]] * scale : xp[w.off[0]]) : (T)0;                        \
                if (mask) mask[i] = keep;                                                                  \
            }                                                                                              \
        }                                                                                                  \
    }
DROPOUT(float)
DROPOUT(double)

static int k_dropout_seeded(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    const double p = cpu_arg_d(c, 1);
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: input must be a tensor");
    if (!(p >= 0 && p <= 1)) return CPU_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: p must lie in [0, 1], got %g", p);
    if (!cpu_arg_given(c, 2)) /* the host draws one when the caller gives none */
        return CPU_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: no seed");
    if (out->dtype != x->dtype || !opc_same_shape(x->ndim, x->shape, out))
        return CPU_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: output must have input's shape and dtype");
    const uint64_t seed = (uint64_t)cpu_arg_i(c, 2);
    if (x->dtype == OPR_F32) dropout_float(x, out, seed, p, true, NULL);
    else if (x->dtype == OPR_F64) dropout_double(x, out, seed, p, true, NULL);
    else return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "dropout_seeded: dtype %s", cpu_dtype_name(x->dtype));
    return OPR_OK;
}

/* native_dropout: args (input, p, train (bool or None: training), seed); outputs the
 * result and the bool mask, both contiguous. */
static int k_native_dropout(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    const double p = cpu_arg_d(c, 1);
    const bool train = !cpu_arg_given(c, 2) || cpu_arg_b(c, 2);
    if (!x || c->nout < 2) return CPU_FAIL(c, OPR_ERR_INVALID, "native_dropout: expected (input, p, train, seed), 2 outputs");
    opr_tensor_view *out = c->outputs[0], *mask = c->outputs[1];
    if (!(p >= 0 && p <= 1)) return CPU_FAIL(c, OPR_ERR_INVALID, "native_dropout: p must lie in [0, 1], got %g", p);
    if (train && !cpu_arg_given(c, 3)) return CPU_FAIL(c, OPR_ERR_INVALID, "native_dropout: no seed");
    if (out->dtype != x->dtype || mask->dtype != OPR_BOOL || !opc_same_shape(x->ndim, x->shape, out) ||
        !opc_same_shape(x->ndim, x->shape, mask))
        return CPU_FAIL(c, OPR_ERR_INVALID, "native_dropout: outputs must have input's shape, input's dtype and bool");
    const uint64_t seed = train ? (uint64_t)cpu_arg_i(c, 3) : 0;
    if (x->dtype == OPR_F32) dropout_float(x, out, seed, p, train, mask->data);
    else if (x->dtype == OPR_F64) dropout_double(x, out, seed, p, train, mask->data);
    else return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "native_dropout: dtype %s", cpu_dtype_name(x->dtype));
    return OPR_OK;
}

/* ------------------------------------------------------------------ triu / tril */

/* out = x where the element's column - row is >= diagonal (upper) or <= diagonal
 * (lower), else 0; by element size, so every dtype shares one loop. */
#define TRIANGLE(E)                                                                                          \
    static void triangle_##E(const opr_tensor_view *x, opr_tensor_view *out, bool upper, int64_t diagonal) \
    {                                                                                                      \
        const E *xp = x->data;                                                                             \
        E *o = out->data;                                                                                  \
        const int64_t n = out->numel;                                                                      \
        const int32_t nd = x->ndim;                                                                        \
        _Pragma("omp parallel if (n >= CPU_PAR_THRESHOLD)")                                                \
        {                                                                                                  \
            int64_t lo, hi;                                                                                \
            cpu_thread_range(n, &lo, &hi);                                                                 \
            cpu_walk w = {.ndim = nd, .nops = 1, .shape = x->shape};                                       \
            memcpy(w.strides[0], x->strides, (size_t)nd * sizeof(int64_t));                                \
            cpu_walk_seek(&w, lo);                                                                         \
            for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {                                        \
                const int64_t off = w.idx[nd - 1] - w.idx[nd - 2];                                         \
                o[i] = (upper ? off >= diagonal : off <= diagonal) ? xp[w.off[0]] : (E)0;                  \
            }                                                                                              \
        }                                                                                                  \
    }
TRIANGLE(uint8_t)
TRIANGLE(uint32_t)
TRIANGLE(uint64_t)

static int triangle(const opr_kernel_call *c, const char *op, bool upper)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: self must be a tensor", op);
    if (!opc_triangle_args(op, x, out, why, sizeof why)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t diagonal = cpu_arg_i(c, 1);
    switch (cpu_dtype_size(x->dtype)) {
    case 1: triangle_uint8_t(x, out, upper, diagonal); return OPR_OK;
    case 4: triangle_uint32_t(x, out, upper, diagonal); return OPR_OK;
    case 8: triangle_uint64_t(x, out, upper, diagonal); return OPR_OK;
    default: return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s", op, cpu_dtype_name(x->dtype));
    }
}

static int k_triu(const opr_kernel_call *c) { return triangle(c, "triu", true); }
static int k_tril(const opr_kernel_call *c) { return triangle(c, "tril", false); }

/* ------------------------------------------------------------------ argmax / argmin */

/* Whether v replaces best as the extremum: strictly beyond it (so the first of equal
 * elements stays), and NaN beats every number (the first NaN stays). */
#define BEATS(T)                                                                                           \
    static inline bool beats_##T(T v, T best, bool largest)                                                \
    {                                                                                                      \
        if (best != best) return false;                                                                    \
        if (v != v) return true;                                                                           \
        return largest ? v > best : v < best;                                                              \
    }
BEATS(float)
BEATS(double)
BEATS(int64_t)
BEATS(int32_t)

/* For each of the `outer` positions (walked by w over self without the reduced dim),
 * the index of the extremum among `len` elements `step` apart. */
#define ARG_EXTREMUM(T)                                                                                    \
    static void arg_extremum_##T(const T *xp, cpu_walk *w, int64_t outer, int64_t len, int64_t step,        \
                                 bool largest, int64_t *o)                                                 \
    {                                                                                                      \
        cpu_walk_seek(w, 0);                                                                               \
        for (int64_t r = 0; r < outer; r++, cpu_walk_next(w)) {                                           \
            const T *p = xp + w->off[0];                                                                   \
            int64_t bi = 0;                                                                                \
            T best = p[0];                                                                                 \
            for (int64_t k = 1; k < len; k++)                                                              \
                if (beats_##T(p[k * step], best, largest)) { best = p[k * step]; bi = k; }                \
            o[r] = bi;                                                                                     \
        }                                                                                                  \
    }
ARG_EXTREMUM(float)
ARG_EXTREMUM(double)
ARG_EXTREMUM(int64_t)
ARG_EXTREMUM(int32_t)

static int arg_extremum(const opr_kernel_call *c, const char *op, bool largest)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d;
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: self must be a tensor", op);
    if (!opc_arg_extremum_args(op, x, cpu_arg_given(c, 1), cpu_arg_i(c, 1), out, &d, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const opr_tensor_view *src = x;
    opr_tensor_view flat;
    int64_t one_shape[1], one_stride[1] = {1};
    void *copy = NULL;
    if (d < 0 && x->ndim > 0) { /* every dim: the flattened tensor, contiguous */
        if (!cpu_is_contiguous(x)) {
            const size_t es = cpu_dtype_size(x->dtype);
            if (!(copy = malloc((size_t)x->numel * es))) return CPU_FAIL(c, OPR_ERR_NOMEM, "%s: out of memory", op);
            cpu_walk w = {.ndim = x->ndim, .nops = 1, .shape = x->shape};
            memcpy(w.strides[0], x->strides, (size_t)x->ndim * sizeof(int64_t));
            cpu_walk_seek(&w, 0);
            for (int64_t i = 0; i < x->numel; i++, cpu_walk_next(&w))
                memcpy((char *)copy + i * (int64_t)es, (const char *)x->data + w.off[0] * (int64_t)es, es);
        }
        one_shape[0] = x->numel;
        flat = *x;
        flat.data = copy ? copy : x->data;
        flat.ndim = 1;
        flat.shape = one_shape;
        flat.strides = one_stride;
        src = &flat;
        d = 0;
    }
    /* walk self without dim d (a 0-d self: one position of one element) */
    int64_t oshape[OPR_MAX_DIMS];
    cpu_walk w = {.nops = 1, .shape = oshape};
    for (int32_t k = 0; k < src->ndim; k++) {
        if (k == d) continue;
        oshape[w.ndim] = src->shape[k];
        w.strides[0][w.ndim++] = src->strides[k];
    }
    const int64_t len = d >= 0 ? src->shape[d] : 1, step = d >= 0 ? src->strides[d] : 0;
    const int64_t outer = len ? src->numel / len : 0;
    int rc = OPR_OK;
    switch (src->dtype) {
    case OPR_F32: arg_extremum_float(src->data, &w, outer, len, step, largest, out->data); break;
    case OPR_F64: arg_extremum_double(src->data, &w, outer, len, step, largest, out->data); break;
    case OPR_I64: arg_extremum_int64_t(src->data, &w, outer, len, step, largest, out->data); break;
    case OPR_I32: arg_extremum_int32_t(src->data, &w, outer, len, step, largest, out->data); break;
    default: rc = CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s", op, cpu_dtype_name(src->dtype));
    }
    free(copy);
    return rc;
}

static int k_argmax(const opr_kernel_call *c) { return arg_extremum(c, "argmax", true); }
static int k_argmin(const opr_kernel_call *c) { return arg_extremum(c, "argmin", false); }

int cpu_register_nn(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    const uint32_t num = fl | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32);
    const struct { const char *op; uint32_t dtypes; opr_kernel_fn fn; } table[] = {
        {"embedding", fl, k_embedding},
        {"embedding_backward", fl, k_embedding_backward},
        {"dropout_seeded", fl, k_dropout_seeded},
        {"native_dropout", fl, k_native_dropout},
        {"triu", num | OPR_DTYPE_BIT(OPR_BOOL), k_triu},
        {"tril", num | OPR_DTYPE_BIT(OPR_BOOL), k_tril},
        {"argmax", num, k_argmax},
        {"argmin", num, k_argmin},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = cpu_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
