/* Kernels of the Core ATen shape ops of registry/ops/shape.yaml that are no view or
 * composite: flip, as on the CPU a strided copy of self read through a view with the
 * flipped dims' strides negated (opc_flip_view), by element size (every dtype), and
 * as_strided_scatter, whose accumulating form adds with gk_atomic_add (bool as a
 * logical or): where its view overlaps itself the floating sums are not bitwise
 * reproducible from run to run, unlike the CPU's. */
#include "gpu_common.cuh"
#include "../common/opc_as_strided.h"
#include "../common/opc_flip_scan.h"

namespace {

int k_flip_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "flip", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int64_t st[OPR_MAX_DIMS], base = 0, ost[OPR_MAX_DIMS];
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "flip: self must be a tensor");
    if (!opc_flip_view("flip", x, c->args[1], out, st, &base, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->numel == 0) return OPR_OK;
    const size_t es = gk_dtype_size(x->dtype);
    opc_contig_strides(out->ndim, out->shape, ost);
    return gk_copy_strided(&k, es, x->ndim, x->shape, out->data, out->ndim ? out->strides : ost,
                           (const char *)x->data + base * (int64_t)es, st);
}

/* out[view position of i] += src[i] over src's n elements (g: operand 0 the view of
 * out, 1 src). */
template <class T> __global__ void k_add_strided(int64_t n, gk_geom g, T *out, const T *src)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        gk_atomic_add(out + off[0], src[off[1]]);
    }
}

__global__ void k_or_strided(int64_t n, gk_geom g, uint8_t *out, const uint8_t *src)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        if (src[off[1]]) out[off[0]] = 1;
    }
}

/* as_strided_scatter(self, src, size, stride, storage_offset, accumulate): the CPU's
 * (plugins/cpu/cpu_shape.c). */
int k_as_strided_scatter_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "as_strided_scatter", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0), *src = gk_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int64_t off, ost[OPR_MAX_DIMS];
    if (!opc_as_strided_scatter_args(x, src, out, c->args[2], c->args[3], c->args[4], &off, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = gk_dtype_size(x->dtype);
    opc_contig_strides(out->ndim, out->shape, ost);
    if ((rc = gk_copy_strided(&k, es, x->ndim, x->shape, out->data, ost, x->data, x->strides))) return rc;
    if (src->numel == 0) return OPR_OK;
    const int32_t n = c->args[2]->u.il.n;
    const int64_t *size = c->args[2]->u.il.items, *stride = c->args[3]->u.il.items;
    char *base = (char *)out->data + off * (int64_t)es;
    if (!gk_arg_b(c, 5)) /* overlapping positions: one of the values written there */
        return gk_copy_strided(&k, es, n, size, base, stride, src->data, src->strides);
    gk_geom g;
    const int64_t *st[2] = {stride, src->strides};
    gk_geom_make(&g, n, size, 2, st);
    const int64_t m = src->numel;
    switch (x->dtype) {
    case OPR_F32: gk_launch(k_add_strided<float>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (float *)base, (const float *)src->data); break;
    case OPR_F64: gk_launch(k_add_strided<double>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (double *)base, (const double *)src->data); break;
    case OPR_I64: gk_launch(k_add_strided<int64_t>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (int64_t *)base, (const int64_t *)src->data); break;
    case OPR_I32: gk_launch(k_add_strided<int32_t>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (int32_t *)base, (const int32_t *)src->data); break;
    case OPR_BOOL: gk_launch(k_or_strided, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (uint8_t *)base, (const uint8_t *)src->data); break;
    case OPR_F16: gk_launch(k_add_strided<gpu_f16>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (gpu_f16 *)base, (const gpu_f16 *)src->data); break;
    case OPR_BF16: gk_launch(k_add_strided<gpu_bf16>, gk_blocks(m), GK_THREADS, 0, k.stream, m, g, (gpu_bf16 *)base, (const gpu_bf16 *)src->data); break;
    default: return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "as_strided_scatter: dtype %s", gk_dtype_name(x->dtype));
    }
    return gk_launched(&k, "as_strided_scatter kernel");
}

} // namespace

int gk_register_shape(opr_plugin *self)
{
    int rc = gk_register(self, "flip", GK_ALL | GK_I32, k_flip_op);
    return rc ? rc : gk_register(self, "as_strided_scatter", GK_ALL | GK_I32, k_as_strided_scatter_op);
}
