/* Advanced indexing: index.Tensor(self, Tensor?[] indices) and index_put(_)(self,
 * indices, values, accumulate), the twins of plugins/cpu/cpu_adv_index.c. The result's
 * layout is opc_adv_index_plan's (plugins/common/opc_adv_index.h); every index tensor
 * is checked against its dim before anything is written (one min/max pass each, read
 * back to the host), so a failing index_put_ leaves self untouched.
 *
 * Accumulation uses atomicAdd (f32, f64, i64 wrapping), so floating sums over repeated
 * indices are not bitwise reproducible from run to run; bool accumulates as a logical
 * or (PyTorch's bool +=), which needs no atomics since every writer writes 1. */
#include "gpu_common.cuh"
#include "../common/opc_adv_index.h"

namespace {

/* What a kernel needs of opc_adv_index, by value: result shape, strides of the
 * indexed tensor and of the other operand (index's output, index_put's values) per
 * result dim, and each index tensor with its strides, dim size and self stride. */
struct adv_geom {
    int32_t ndim, nidx;
    int64_t shape[GK_MAXD];
    int64_t xst[GK_MAXD];
    int64_t ost[GK_MAXD];
    const int64_t *idx[GK_MAXD];
    int64_t isize[GK_MAXD], ixst[GK_MAXD];
    int64_t ist[GK_MAXD][GK_MAXD];
};

GK_DEV void adv_offsets(const adv_geom &g, int64_t i, int64_t *xo, int64_t *oo)
{
    int64_t coord[GK_MAXD];
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
        const int64_t q = i / g.shape[d];
        coord[d] = i - q * g.shape[d];
        i = q;
    }
    int64_t x = 0, o = 0;
    for (int32_t d = 0; d < g.ndim; d++) {
        x += coord[d] * g.xst[d];
        o += coord[d] * g.ost[d];
    }
    for (int32_t k = 0; k < g.nidx; k++) {
        int64_t p = 0;
        for (int32_t d = 0; d < g.ndim; d++) p += coord[d] * g.ist[k][d];
        int64_t v = g.idx[k][p];
        if (v < 0) v += g.isize[k];
        x += v * g.ixst[k];
    }
    *xo = x;
    *oo = o;
}

template <class E> __global__ void k_gather_adv(int64_t n, adv_geom g, E *out, const E *x)
{
    GK_LOOP(i, n)
    {
        int64_t xo, oo;
        adv_offsets(g, i, &xo, &oo);
        out[oo] = x[xo];
    }
}

template <class E> __global__ void k_put_adv(int64_t n, adv_geom g, E *out, const E *v)
{
    GK_LOOP(i, n)
    {
        int64_t xo, vo;
        adv_offsets(g, i, &xo, &vo);
        out[xo] = v[vo];
    }
}

template <class T> __global__ void k_accumulate_adv(int64_t n, adv_geom g, T *out, const T *v)
{
    GK_LOOP(i, n)
    {
        int64_t xo, vo;
        adv_offsets(g, i, &xo, &vo);
        gk_atomic_add(out + xo, v[vo]);
    }
}

__global__ void k_or_adv(int64_t n, adv_geom g, uint8_t *out, const uint8_t *v)
{
    GK_LOOP(i, n)
    {
        int64_t xo, vo;
        adv_offsets(g, i, &xo, &vo);
        if (v[vo]) out[xo] = 1;
    }
}

/* The layout of indexing a tensor of x's shape with strides st by argument 1 (into
 * g, ost left zero), with every index value checked against its dim. */
int plan(const gk_ctx *k, const opr_kernel_call *c, const char *op, const opr_tensor_view *x, const int64_t *st,
         adv_geom *g)
{
    const opr_kernel_arg *list = c->args[1];
    if (list->kind != OPR_ARG_TENSOR_LIST) return GK_FAIL(c, OPR_ERR_INVALID, "%s: indices must be a tensor list", op);
    char why[OPC_WHY_SIZE];
    opc_adv_index a;
    if (!opc_adv_index_plan(op, x->ndim, x->shape, st, list->u.tl.items, list->u.tl.n, &a, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    memset(g, 0, sizeof *g);
    g->ndim = a.ndim;
    g->nidx = a.nidx;
    for (int32_t d = 0; d < a.ndim; d++) {
        g->shape[d] = a.shape[d];
        g->xst[d] = a.self_strides[d];
    }
    for (int32_t j = 0; j < a.nidx; j++) {
        const opr_tensor_view *t = a.idx[j];
        if (t->dtype != OPR_I64)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: tensors used as indices must be long or bool tensors", op);
        if (t->numel) {
            int64_t mn, mx;
            int rc = gk_index_range(k, t, &mn, &mx);
            if (rc) return rc;
            if (!opc_adv_index_in_range(op, mn, mx, a.idx_dim[j], a.idx_size[j], why, sizeof why))
                return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
        }
        g->idx[j] = (const int64_t *)t->data;
        g->isize[j] = a.idx_size[j];
        g->ixst[j] = a.idx_self_stride[j];
        for (int32_t d = 0; d < a.ndim; d++) g->ist[j][d] = a.idx_strides[j][d];
    }
    return OPR_OK;
}

int64_t geom_numel(const adv_geom &g)
{
    int64_t n = 1;
    for (int32_t d = 0; d < g.ndim; d++) n *= g.shape[d];
    return n;
}

/* Calls f with a value of the unsigned type of es bytes (1, 2, 4, else 8). */
template <class F> void by_elem_size(size_t es, F &&f)
{
    switch (es) {
    case 1: f(uint8_t()); break;
    case 2: f(uint16_t()); break;
    case 4: f(uint32_t()); break;
    default: f((unsigned long long)0); break;
    }
}

int k_index_op(const opr_kernel_call *c)
{
    const char *op = "index";
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: self must be a tensor", op);
    adv_geom g;
    if ((rc = plan(&k, c, op, x, x->strides, &g))) return rc;
    const int64_t n = geom_numel(g);
    if (g.ndim != out->ndim || n != out->numel || out->dtype != x->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: the output was sized for another result", op);
    if (n == 0) return OPR_OK;
    for (int32_t d = 0; d < g.ndim; d++) g.ost[d] = out->strides[d];
    by_elem_size(gk_dtype_size(x->dtype), [&](auto e) {
        using E = decltype(e);
        gk_launch(k_gather_adv<E>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (E *)out->data, (const E *)x->data);
    });
    return gk_launched(&k, "index kernel");
}

int k_index_put_op(const opr_kernel_call *c)
{
    const char *op = c->op;
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *val = gk_arg_t(c, 2);
    opr_tensor_view *out = c->outputs[0];
    if (!x || !val) return GK_FAIL(c, OPR_ERR_INVALID, "%s: self and values must be tensors", op);
    if (out->dtype != x->dtype || val->dtype != x->dtype)
        return GK_FAIL(c, OPR_ERR_INVALID, "%s: values and the output must have self's dtype", op);
    const bool acc = gk_arg_b(c, 3);
    for (int32_t d = 0; d < out->ndim; d++)
        if (out->shape[d] > 1 && out->strides[d] == 0)
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: more than one element of self refers to the same memory location "
                           "(dim %d is expanded)", op, (int)d);
    adv_geom g;
    if ((rc = plan(&k, c, op, out, out->strides, &g))) return rc;
    if (val->ndim > g.ndim) return GK_FAIL(c, OPR_ERR_INVALID, "%s: shape mismatch: value tensor cannot be broadcast to "
                                          "the indexing result", op);
    for (int32_t d = 0; d < g.ndim; d++) { /* values broadcast to the result, right-aligned */
        const int32_t dv = d - (g.ndim - val->ndim);
        if (dv >= 0 && val->shape[dv] != 1 && val->shape[dv] != g.shape[d])
            return GK_FAIL(c, OPR_ERR_INVALID, "%s: shape mismatch: value tensor cannot be broadcast to the indexing "
                           "result", op);
        g.ost[d] = dv >= 0 && val->shape[dv] != 1 ? val->strides[dv] : 0;
    }
    const size_t es = gk_dtype_size(x->dtype);
    if (out->data != x->data &&
        (rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->strides, x->data, x->strides)))
        return rc;
    const int64_t n = geom_numel(g);
    if (n == 0) return OPR_OK;
    if (!acc) {
        by_elem_size(es, [&](auto e) {
            using E = decltype(e);
            gk_launch(k_put_adv<E>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (E *)out->data, (const E *)val->data);
        });
    } else {
        switch (x->dtype) {
        case OPR_F32:
            gk_launch(k_accumulate_adv<float>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (float *)out->data,
                      (const float *)val->data);
            break;
        case OPR_F64:
            gk_launch(k_accumulate_adv<double>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (double *)out->data,
                      (const double *)val->data);
            break;
        case OPR_I64:
            gk_launch(k_accumulate_adv<int64_t>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (int64_t *)out->data,
                      (const int64_t *)val->data);
            break;
        case OPR_I32:
            gk_launch(k_accumulate_adv<int32_t>, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (int32_t *)out->data,
                      (const int32_t *)val->data);
            break;
        case OPR_BOOL:
            gk_launch(k_or_adv, gk_blocks(n), GK_THREADS, 0, k.stream, n, g, (uint8_t *)out->data,
                      (const uint8_t *)val->data);
            break;
        default:
            return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(x->dtype),
                           GPU_NAME);
        }
    }
    return gk_launched(&k, "index_put kernel");
}

} // namespace

int gk_register_adv_index(opr_plugin *self)
{
    const uint32_t dtypes = GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL);
    const struct {
        const char *op;
        opr_kernel_fn fn;
    } table[] = {
        {"index", k_index_op},
        {"index_put", k_index_put_op},
        {"index_put_", k_index_put_op},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int rc = gk_register(self, table[i].op, dtypes, table[i].fn);
        if (rc != OPR_OK) return rc;
    }
    return OPR_OK;
}
