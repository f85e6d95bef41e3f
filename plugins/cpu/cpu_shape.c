/* Kernels of the Core ATen shape ops of registry/ops/shape.yaml that are no view or
 * composite: flip and as_strided_scatter. flip reads self through a view with the
 * flipped dims' strides negated (opc_flip_view), so it is one strided copy, by element
 * size: every dtype shares it. Inputs may be any strided views; outputs are the host's
 * contiguous tensors. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_as_strided.h"
#include "../common/opc_flip_scan.h"
#include "../common/opc_strided_copy.h"

static int k_flip(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int64_t st[OPR_MAX_DIMS], base = 0, ost[OPR_MAX_DIMS];
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "flip: self must be a tensor");
    if (!opc_flip_view("flip", x, c->args[1], out, st, &base, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (out->numel == 0) return OPR_OK;
    const size_t es = cpu_dtype_size(x->dtype);
    cpu_view_strides(out, ost);
    opc_copy_strided(es, x->ndim, x->shape, out->data, ost, (const char *)x->data + base * (int64_t)es, st);
    return OPR_OK;
}

/* out[p] += src[i] for the position p of each element i of src in the strided view
 * (w: operand 0 the view of out, 1 src), in src's row-major order: where the view
 * overlaps itself the sums run in that order, so results do not vary from run to run
 * (one thread for that reason). bool adds as a logical or; halves add in float, each
 * sum rounded back. */
#define ACCUMULATE(T, OP)                                                                     \
    do {                                                                                      \
        T *o = (T *)base;                                                                     \
        const T *s = (const T *)src->data;                                                    \
        for (int64_t i = 0; i < src->numel; i++, cpu_walk_next(&w)) o[w.off[0]] OP s[w.off[1]]; \
    } while (0)
#define ACCUMULATE_HALF(TO_F32, FROM_F32)                                                     \
    do {                                                                                      \
        uint16_t *o = (uint16_t *)base;                                                       \
        const uint16_t *s = (const uint16_t *)src->data;                                      \
        for (int64_t i = 0; i < src->numel; i++, cpu_walk_next(&w))                           \
            o[w.off[0]] = FROM_F32(TO_F32(o[w.off[0]]) + TO_F32(s[w.off[1]]));                \
    } while (0)

/* as_strided_scatter(self, src, size, stride, storage_offset, accumulate): self's
 * elements in row-major order, then src written (or added) through the view of them
 * with that geometry. */
static int k_as_strided_scatter(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0), *src = cpu_arg_t(c, 1);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int64_t off, ost[OPR_MAX_DIMS];
    if (!opc_as_strided_scatter_args(x, src, out, c->args[2], c->args[3], c->args[4], &off, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    const size_t es = cpu_dtype_size(x->dtype);
    cpu_view_strides(out, ost);
    opc_copy_strided(es, x->ndim, x->shape, out->data, ost, x->data, x->strides);
    if (src->numel == 0) return OPR_OK;
    const int32_t n = c->args[2]->u.il.n;
    const int64_t *size = c->args[2]->u.il.items, *stride = c->args[3]->u.il.items;
    char *base = (char *)out->data + off * (int64_t)es;
    if (!cpu_arg_b(c, 5)) { /* overlapping positions: one of the values written there */
        opc_copy_strided(es, n, size, base, stride, src->data, src->strides);
        return OPR_OK;
    }
    cpu_walk w = {.ndim = n, .nops = 2, .shape = size};
    memcpy(w.strides[0], stride, (size_t)n * sizeof *stride);
    memcpy(w.strides[1], src->strides, (size_t)n * sizeof *stride);
    cpu_walk_seek(&w, 0);
    switch (x->dtype) {
    case OPR_F32: ACCUMULATE(float, +=); break;
    case OPR_F64: ACCUMULATE(double, +=); break;
    case OPR_I64: ACCUMULATE(int64_t, +=); break;
    case OPR_I32: ACCUMULATE(int32_t, +=); break;
    case OPR_BOOL: ACCUMULATE(uint8_t, |=); break;
    case OPR_F16: ACCUMULATE_HALF(opu_f16_to_f32, opu_f32_to_f16); break;
    case OPR_BF16: ACCUMULATE_HALF(opu_bf16_to_f32, opu_f32_to_bf16); break;
    default: return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "as_strided_scatter: dtype %s", cpu_dtype_name(x->dtype));
    }
    return OPR_OK;
}
#undef ACCUMULATE
#undef ACCUMULATE_HALF

int cpu_register_shape(opr_plugin *self)
{
    const uint32_t all = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) |
                         OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16) |
                         OPR_DTYPE_BIT(OPR_I32);
    int rc = cpu_register(self, "flip", all, k_flip);
    return rc ? rc : cpu_register(self, "as_strided_scatter", all, k_as_strided_scatter);
}
