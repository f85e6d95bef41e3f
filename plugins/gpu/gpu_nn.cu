/* Kernels of the neural-network ops (registry/ops/nn.yaml): embedding and its backward,
 * dropout_seeded and native_dropout, triu / tril, argmax / argmin. The argument checks are those of the
 * CPU plugin (plugins/common/opc_nn.h); embedding's indices are checked (a min/max
 * pass read back to the host, gk_index_range) before anything is written.
 *
 * dropout_seeded draws element i's number from (seed, i) alone (plugins/common/
 * opc_rng.h), so its mask is the CPU plugin's bit for bit. embedding_backward adds
 * rows with atomicAdd: sums over repeated indices are not bitwise reproducible from
 * run to run (as scatter_add). argmax / argmin give each output position one thread,
 * which scans its slice in order (the first extremum wins, as on the CPU). */
#include "gpu_common.cuh"
#include "../common/opc_nn.h"
#include "../common/opc_rng.h"

namespace {

/* Calls f with a value of the compute type of a floating dtype (f32, else f64). */
template <class F> void by_float_type(opr_dtype dt, F &&f)
{
    if (dt == OPR_F32) f(0.0f);
    else f(0.0);
}

int check_floating(const opr_kernel_call *c, const char *op, opr_dtype dt)
{
    if (dt == OPR_F32 || dt == OPR_F64) return OPR_OK;
    return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(dt), GPU_NAME);
}

/* The indices of the call, contiguous (v itself or a copy in buf), after checking that
 * they all lie in [0, num_weights). */
int embedding_indices(const gk_ctx *k, const opr_tensor_view *indices, int64_t num_weights, gk_buf *buf,
                      const int64_t **flat)
{
    *flat = (const int64_t *)indices->data;
    if (indices->numel == 0) return OPR_OK;
    int64_t mn, mx;
    int rc = gk_index_range(k, indices, &mn, &mx);
    if (rc) return rc;
    char why[OPC_WHY_SIZE];
    if (!opc_embedding_in_range(k->op, mn, mx, num_weights, why, sizeof why))
        return GK_FAIL(k->call, OPR_ERR_INVALID, "%s", why);
    if (gk_is_contiguous(indices)) return OPR_OK;
    int64_t st[GK_MAXD];
    if ((rc = gk_contiguous_copy(k, indices, buf, st))) return rc;
    *flat = buf->as<int64_t>();
    return OPR_OK;
}

/* ------------------------------------------------------------------ embedding */

template <class T>
__global__ void k_embedding(int64_t n, int64_t D, T *out, const T *w, int64_t rs, int64_t cs, const int64_t *idx)
{
    GK_LOOP(i, n)
    {
        const int64_t r = i / D, j = i - r * D;
        out[i] = w[idx[r] * rs + j * cs];
    }
}

int k_embedding_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "embedding", &k);
    if (rc) return rc;
    const opr_tensor_view *wt = gk_arg_t(c, 0), *indices = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!wt || !indices) return GK_FAIL(c, OPR_ERR_INVALID, "embedding: weight and indices must be tensors");
    if (!opc_embedding_args("embedding", wt, indices, out, "output", why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = check_floating(c, "embedding", wt->dtype))) return rc;
    gk_buf ibuf;
    const int64_t *idx;
    if ((rc = embedding_indices(&k, indices, wt->shape[0], &ibuf, &idx))) return rc;
    const int64_t n = out->numel, D = wt->shape[1];
    if (n == 0) return OPR_OK;
    by_float_type(wt->dtype, [&](auto z) {
        using T = decltype(z);
        gk_launch(k_embedding<T>, gk_blocks(n), GK_THREADS, 0, k.stream, n, D, (T *)out->data, (const T *)wt->data,
                  wt->strides[0], wt->strides[1], idx);
    });
    return gk_launched(&k, "embedding kernel");
}

/* out[idx[r], j] += g[r, j] for every element of g (walked by geometry gg) unless
 * idx[r] is padding_idx. */
template <class T>
__global__ void k_embedding_backward(int64_t n, int64_t D, gk_geom gg, T *out, const T *g, const int64_t *idx,
                                     int64_t padding_idx)
{
    GK_LOOP(i, n)
    {
        const int64_t r = i / D, j = i - r * D, row = idx[r];
        if (row == padding_idx) continue;
        int64_t off[1];
        gk_offsets<1>(gg, i, off);
        gk_atomic_add(&out[row * D + j], g[off[0]]);
    }
}

int k_embedding_backward_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "embedding_backward", &k);
    if (rc) return rc;
    const opr_tensor_view *g = gk_arg_t(c, 0), *indices = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!g || !indices) return GK_FAIL(c, OPR_ERR_INVALID, "embedding_backward: grad_output and indices must be tensors");
    if (!opc_embedding_args("embedding_backward", out, indices, g, "grad_output", why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if ((rc = check_floating(c, "embedding_backward", out->dtype))) return rc;
    gk_buf ibuf;
    const int64_t *idx;
    if ((rc = embedding_indices(&k, indices, out->shape[0], &ibuf, &idx))) return rc;
    if (out->numel) GK_TRY(&k, gpuMemsetAsync(out->data, 0, (size_t)out->numel * gk_dtype_size(out->dtype), k.stream));
    const int64_t n = g->numel, D = out->shape[1];
    if (n == 0) return OPR_OK;
    gk_geom gg;
    const int64_t *st[1] = {g->strides};
    gk_geom_make(&gg, g->ndim, g->shape, 1, st);
    const int64_t padding_idx = gk_arg_i(c, 3);
    by_float_type(out->dtype, [&](auto z) {
        using T = decltype(z);
        gk_launch(k_embedding_backward<T>, gk_blocks(n), GK_THREADS, 0, k.stream, n, D, gg, (T *)out->data,
                  (const T *)g->data, idx, padding_idx);
    });
    return gk_launched(&k, "embedding_backward kernel");
}

/* ------------------------------------------------------------------ dropout_seeded */

/* g: operand 0 the output, 1 the input, over the output's shape (row-major i); mask
 * (native_dropout's, contiguous bool; null for dropout_seeded) gets keep. With train
 * false (native_dropout in eval) out is x and mask all true. */
template <class T>
__global__ void k_dropout(int64_t n, gk_geom g, T *out, const T *x, uint64_t seed, double p, T scale, bool train, uint8_t *mask)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        const bool keep = !train || opc_dropout_keeps(seed, (uint64_t)i, p);
        out[off[0]] = keep ? (train ? x[off[1]] * scale : x[off[1]]) : (T)0;
        if (mask) mask[i] = keep;
    }
}

/* k_dropout over out's shape for dropout_seeded and native_dropout (mask: null, or
 * native_dropout's contiguous bool mask). */
int launch_dropout(const gk_ctx *k, const opr_tensor_view *x, opr_tensor_view *out, uint64_t seed, double p, bool train,
                   uint8_t *mask, const char *what)
{
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    gk_geom g;
    const int64_t *st[2] = {out->strides, x->strides};
    gk_geom_make(&g, out->ndim, out->shape, 2, st);
    by_float_type(x->dtype, [&](auto z) {
        using T = decltype(z);
        gk_launch(k_dropout<T>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (T *)out->data, (const T *)x->data, seed,
                  p, p < 1 ? (T)(1.0 / (1.0 - p)) : (T)0, train, mask);
    });
    return gk_launched(k, what);
}

int k_dropout_seeded_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "dropout_seeded", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    const double p = gk_arg_d(c, 1);
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: input must be a tensor");
    if (!(p >= 0 && p <= 1)) return GK_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: p must lie in [0, 1], got %g", p);
    if (!gk_arg_given(c, 2)) return GK_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: no seed");
    if (out->dtype != x->dtype || !gk_same_shape(x->ndim, x->shape, out))
        return GK_FAIL(c, OPR_ERR_INVALID, "dropout_seeded: output must have input's shape and dtype");
    if ((rc = check_floating(c, "dropout_seeded", x->dtype))) return rc;
    return launch_dropout(&k, x, out, (uint64_t)gk_arg_i(c, 2), p, true, nullptr, "dropout_seeded kernel");
}

/* native_dropout: args (input, p, train (bool or None: training), seed); outputs the
 * result and the bool mask, both contiguous. */
int k_native_dropout_op(const opr_kernel_call *c)
{
    gk_ctx k;
    const char *op = "native_dropout";
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    const double p = gk_arg_d(c, 1);
    const bool train = !gk_arg_given(c, 2) || gk_arg_b(c, 2);
    if (!x || c->nout < 2) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected (input, p, train, seed), 2 outputs", op);
    opr_tensor_view *out = c->outputs[0], *mask = c->outputs[1];
    if (!(p >= 0 && p <= 1)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: p must lie in [0, 1], got %g", op, p);
    if (train && !gk_arg_given(c, 3)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: no seed", op);
    if (out->dtype != x->dtype || mask->dtype != OPR_BOOL || !gk_same_shape(x->ndim, x->shape, out) ||
        !gk_same_shape(x->ndim, x->shape, mask))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: outputs must have input's shape, input's dtype and bool", op);
    if ((rc = check_floating(c, op, x->dtype))) return rc;
    return launch_dropout(&k, x, out, train ? (uint64_t)gk_arg_i(c, 3) : 0, p, train, (uint8_t *)mask->data,
                          "native_dropout kernel");
}

/* ------------------------------------------------------------------ triu / tril */

/* Element i (row-major over [..., R, C]) is kept where its column - row is >= diagonal
 * (upper) or <= diagonal (lower). */
template <class E>
__global__ void k_triangle(int64_t n, gk_geom g, int64_t R, int64_t C, E *out, const E *x, bool upper,
                           int64_t diagonal)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        const int64_t q = i / C, col = i - q * C, row = q % R, d = col - row;
        out[off[0]] = (upper ? d >= diagonal : d <= diagonal) ? x[off[1]] : (E)0;
    }
}

int triangle(const opr_kernel_call *c, const char *op, bool upper)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: self must be a tensor", op);
    if (!opc_triangle_args(op, x, out, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const int64_t n = out->numel;
    if (n == 0) return OPR_OK;
    const int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1], diagonal = gk_arg_i(c, 1);
    gk_geom g;
    const int64_t *st[2] = {out->strides, x->strides};
    gk_geom_make(&g, out->ndim, out->shape, 2, st);
    const size_t es = gk_dtype_size(x->dtype);
    if (es == 1)
        gk_launch(k_triangle<uint8_t>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, R, C, (uint8_t *)out->data,
                  (const uint8_t *)x->data, upper, diagonal);
    else if (es == 4)
        gk_launch(k_triangle<uint32_t>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, R, C, (uint32_t *)out->data,
                  (const uint32_t *)x->data, upper, diagonal);
    else if (es == 8)
        gk_launch(k_triangle<unsigned long long>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, R, C,
                  (unsigned long long *)out->data, (const unsigned long long *)x->data, upper, diagonal);
    else
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(x->dtype), GPU_NAME);
    return gk_launched(&k, "triangle kernel");
}

int k_triu_op(const opr_kernel_call *c) { return triangle(c, "triu", true); }
int k_tril_op(const opr_kernel_call *c) { return triangle(c, "tril", false); }

/* ------------------------------------------------------------------ argmax / argmin */

/* Whether v replaces best: strictly beyond it (the first of equal elements stays), NaN
 * beating every number (the first NaN stays). */
template <class T> GK_DEV bool beats(T v, T best, bool largest)
{
    if (gk_isnan(best)) return false;
    if (gk_isnan(v)) return true;
    return largest ? v > best : v < best;
}

/* Output position r: its slice starts at the offset g gives for r and has len elements
 * step apart. */
template <class T>
__global__ void k_arg_extremum(int64_t outer, gk_geom g, const T *x, int64_t len, int64_t step, bool largest,
                               int64_t *out)
{
    GK_LOOP(r, outer)
    {
        int64_t off[1];
        gk_offsets<1>(g, r, off);
        const T *p = x + off[0];
        int64_t bi = 0;
        T best = p[0];
        for (int64_t j = 1; j < len; j++) {
            const T v = p[j * step];
            if (beats(v, best, largest)) { best = v; bi = j; }
        }
        out[r] = bi;
    }
}

int arg_extremum(const opr_kernel_call *c, const char *op, bool largest)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d;
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: self must be a tensor", op);
    if (!opc_arg_extremum_args(op, x, gk_arg_given(c, 1), gk_arg_i(c, 1), out, &d, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64 && x->dtype != OPR_I32)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(x->dtype), GPU_NAME);
    /* the slices: along dim d, or (every dim) the one slice of the flattened tensor */
    gk_buf flat;
    const void *data = x->data;
    int64_t oshape[GK_MAXD] = {0}, ost[GK_MAXD] = {0};
    int32_t ond = 0;
    int64_t len = 1, step = 0;
    if (d < 0 && x->ndim > 0) {
        int64_t st[GK_MAXD];
        if (!gk_is_contiguous(x)) {
            if ((rc = gk_contiguous_copy(&k, x, &flat, st))) return rc;
            data = flat.p;
        }
        len = x->numel;
        step = 1;
    } else if (d >= 0) {
        for (int32_t q = 0; q < x->ndim; q++) {
            if (q == d) continue;
            oshape[ond] = x->shape[q];
            ost[ond++] = x->strides[q];
        }
        len = x->shape[d];
        step = x->strides[d];
    }
    const int64_t outer = x->numel / len;
    gk_geom g;
    const int64_t *st[1] = {ost};
    gk_geom_make(&g, ond, oshape, 1, st);
    if (x->dtype == OPR_F32)
        gk_launch(k_arg_extremum<float>, gk_blocks(outer), GK_THREADS, 0, k.stream, outer, g, (const float *)data, len,
                  step, largest, (int64_t *)out->data);
    else if (x->dtype == OPR_F64)
        gk_launch(k_arg_extremum<double>, gk_blocks(outer), GK_THREADS, 0, k.stream, outer, g, (const double *)data,
                  len, step, largest, (int64_t *)out->data);
    else if (x->dtype == OPR_I64)
        gk_launch(k_arg_extremum<int64_t>, gk_blocks(outer), GK_THREADS, 0, k.stream, outer, g, (const int64_t *)data,
                  len, step, largest, (int64_t *)out->data);
    else
        gk_launch(k_arg_extremum<int32_t>, gk_blocks(outer), GK_THREADS, 0, k.stream, outer, g, (const int32_t *)data,
                  len, step, largest, (int64_t *)out->data);
    return gk_launched(&k, "argmax/argmin kernel");
}

int k_argmax_op(const opr_kernel_call *c) { return arg_extremum(c, "argmax", true); }
int k_argmin_op(const opr_kernel_call *c) { return arg_extremum(c, "argmin", false); }

} // namespace

int gk_register_nn(opr_plugin *self)
{
    const uint32_t fl = GK_FLOATS, num = GK_NUMERIC | GK_I32;
    const struct {
        const char *op;
        uint32_t dtypes;
        opr_kernel_fn fn;
    } table[] = {
        {"embedding", fl, k_embedding_op},
        {"embedding_backward", fl, k_embedding_backward_op},
        {"dropout_seeded", fl, k_dropout_seeded_op},
        {"native_dropout", fl, k_native_dropout_op},
        {"triu", num | GK_BIT(OPR_BOOL), k_triu_op},
        {"tril", num | GK_BIT(OPR_BOOL), k_tril_op},
        {"argmax", num, k_argmax_op},
        {"argmin", num, k_argmin_op},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, table[i].dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
