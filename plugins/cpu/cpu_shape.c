/* Kernels of the Core ATen shape ops of registry/ops/shape.yaml that are no view or
 * composite: flip. flip reads self through a view with the flipped dims' strides
 * negated (opc_flip_view), so it is one strided copy, by element size: every dtype
 * shares it. Inputs may be any strided views; outputs are the host's contiguous
 * tensors. */
#include "cpu_common.h"
#include "cpu_kernels.h"
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

int cpu_register_shape(opr_plugin *self)
{
    const uint32_t all = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) |
                         OPR_DTYPE_BIT(OPR_BOOL) | OPR_DTYPE_BIT(OPR_F16) | OPR_DTYPE_BIT(OPR_BF16);
    return cpu_register(self, "flip", all, k_flip);
}
