/* Kernels that exist for gradients: sum_to (reduce a broadcast gradient back to an
 * input's shape). The fused backward kernels live in cpu_backward.c. */
#include "cpu_common.h"
#include "cpu_kernels.h"

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

/* sum_to(self, size): self's shape broadcasts from `size`; sum over the broadcast dims. */
static int k_sum_to(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = &c->outputs[0];
    int64_t ostr[OPR_MAX_DIMS];
    /* out is contiguous with out->shape; read it as expanded to x's shape */
    int64_t contig[OPR_MAX_DIMS];
    int64_t s = 1;
    for (int d = out->ndim - 1; d >= 0; d--) { contig[d] = s; s *= out->shape[d]; }
    opr_tensor_view as_strided = *out;
    as_strided.strides = contig;
    if (!cpu_bcast_strides(&as_strided, x->ndim, x->shape, ostr))
        return CPU_FAIL(OPR_ERR_INVALID, "sum_to: a tensor of %d dims cannot be summed to %d dims of these sizes",
                        x->ndim, out->ndim);
    if (x->dtype == OPR_F32) sum_to_float(x, out, ostr);
    else sum_to_double(x, out, ostr);
    return OPR_OK;
}

int cpu_register_grad(opr_plugin *self)
{
    return cpu_register(self, "sum_to", OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), k_sum_to);
}
