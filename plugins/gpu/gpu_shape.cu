/* Kernels of the Core ATen shape ops of registry/ops/shape.yaml that are no view or
 * composite: flip, as on the CPU a strided copy of self read through a view with the
 * flipped dims' strides negated (opc_flip_view), by element size (every dtype). */
#include "gpu_common.cuh"
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

} // namespace

int gk_register_shape(opr_plugin *self) { return gk_register(self, "flip", GK_ALL, k_flip_op); }
