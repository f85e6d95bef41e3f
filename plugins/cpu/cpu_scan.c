/* Kernels of the scans of registry/ops/reduction.yaml: cumsum. Each line along dim is
 * summed in order (so the result does not depend on the thread count), f32 in double
 * as PyTorch's CPU cumsum accumulates, i64 in unsigned arithmetic so that an overflow
 * wraps (as in PyTorch) instead of being undefined. Lines run in parallel. Inputs may be
 * any strided views; outputs are the host's contiguous tensors. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_flip_scan.h"

#include <string.h>

/* One line: n elements step xs apart in x, os apart in out. */
#define CUMSUM_LINE(NAME, T, ACC, STORE)                                                           \
    static void NAME(const T *x, int64_t xs, T *out, int64_t os, int64_t n)                       \
    {                                                                                              \
        ACC acc = 0;                                                                               \
        for (int64_t k = 0; k < n; k++) {                                                          \
            acc += (ACC)x[k * xs];                                                                 \
            out[k * os] = STORE;                                                                   \
        }                                                                                          \
    }
CUMSUM_LINE(line_f32, float, double, (float)acc)
CUMSUM_LINE(line_f64, double, double, acc)
CUMSUM_LINE(line_i64, int64_t, uint64_t, (int64_t)acc)

static int k_cumsum(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d;
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "cumsum: self must be a tensor");
    if (!opc_cumsum_args("cumsum", x, cpu_arg_i(c, 1), out, &d, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "cumsum: dtype %s is not supported on cpu", cpu_dtype_name(x->dtype));
    if (out->numel == 0) return OPR_OK;
    /* the lines: every index of the other dims (dim d of the walk has size 1) */
    int64_t shape[OPR_MAX_DIMS], xst[OPR_MAX_DIMS], ost[OPR_MAX_DIMS];
    cpu_view_strides(out, ost);
    memcpy(xst, x->strides, (size_t)x->ndim * sizeof *xst);
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    const int64_t n = d >= 0 ? shape[d] : 1, xs = d >= 0 ? xst[d] : 0, os = d >= 0 ? ost[d] : 0;
    if (d >= 0) shape[d] = 1;
    const int64_t lines = out->numel / n;
    const int32_t nd = x->ndim;
    _Pragma("omp parallel if (out->numel >= CPU_PAR_THRESHOLD)")
    {
        int64_t lo, hi;
        cpu_thread_range(lines, &lo, &hi);
        cpu_walk w = {.ndim = nd, .nops = 2, .shape = shape};
        memcpy(w.strides[0], xst, (size_t)nd * sizeof(int64_t));
        memcpy(w.strides[1], ost, (size_t)nd * sizeof(int64_t));
        cpu_walk_seek(&w, lo);
        for (int64_t l = lo; l < hi; l++, cpu_walk_next(&w)) {
            if (x->dtype == OPR_F32) line_f32((const float *)x->data + w.off[0], xs, (float *)out->data + w.off[1], os, n);
            else if (x->dtype == OPR_F64)
                line_f64((const double *)x->data + w.off[0], xs, (double *)out->data + w.off[1], os, n);
            else line_i64((const int64_t *)x->data + w.off[0], xs, (int64_t *)out->data + w.off[1], os, n);
        }
    }
    return OPR_OK;
}

int cpu_register_scan(opr_plugin *self)
{
    const uint32_t num = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64);
    return cpu_register(self, "cumsum", num, k_cumsum);
}
