/* Kernels of the scans of registry/ops/reduction.yaml: cumsum. One thread per line
 * along dim sums it in order, as the CPU plugin does (f32 in double, i64 and i32 in
 * unsigned 64-bit arithmetic so that an overflow wraps; i32 into an i64 output), so
 * both give the same sums. */
#include "gpu_common.cuh"
#include "../common/opc_flip_scan.h"

namespace {

template <class T> struct scan_acc { typedef T type; };
template <> struct scan_acc<float> { typedef double type; };
template <> struct scan_acc<int64_t> { typedef unsigned long long type; };
template <> struct scan_acc<int32_t> { typedef unsigned long long type; };
/* the output element: i64 for an i32 input */
template <class T> struct scan_out { typedef T type; };
template <> struct scan_out<int32_t> { typedef int64_t type; };

/* Line l starts at the offsets g gives for l (x, out) and has n elements xs / os apart. */
template <class T>
__global__ void k_cumsum(int64_t lines, gk_geom g, const T *x, int64_t xs, typename scan_out<T>::type *out, int64_t os,
                         int64_t n)
{
    GK_LOOP(l, lines)
    {
        int64_t off[2];
        gk_offsets<2>(g, l, off);
        typename scan_acc<T>::type acc = 0;
        for (int64_t k = 0; k < n; k++) {
            acc += (typename scan_acc<T>::type)x[off[0] + k * xs];
            out[off[1] + k * os] = (typename scan_out<T>::type)acc;
        }
    }
}

int k_cumsum_op(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "cumsum", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d;
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "cumsum: self must be a tensor");
    if (!opc_cumsum_args("cumsum", x, gk_arg_i(c, 1), out, &d, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64 && x->dtype != OPR_I32)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "cumsum: dtype %s is not supported on %s", gk_dtype_name(x->dtype), GPU_NAME);
    if (out->numel == 0) return OPR_OK;
    int64_t shape[OPR_MAX_DIMS], ost[OPR_MAX_DIMS];
    opc_contig_strides(out->ndim, out->shape, ost);
    const int64_t *os_all = out->ndim ? out->strides : ost;
    for (int32_t q = 0; q < x->ndim; q++) shape[q] = q == d ? 1 : x->shape[q];
    const int64_t n = d >= 0 ? x->shape[d] : 1, xs = d >= 0 ? x->strides[d] : 0, os = d >= 0 ? os_all[d] : 0;
    const int64_t lines = out->numel / n;
    gk_geom g;
    const int64_t *st[2] = {x->strides, os_all};
    gk_geom_make(&g, x->ndim, shape, 2, st);
    if (x->dtype == OPR_F32)
        gk_launch(k_cumsum<float>, gk_blocks(lines), GK_THREADS, 0, k.stream, lines, g, (const float *)x->data, xs,
                  (float *)out->data, os, n);
    else if (x->dtype == OPR_F64)
        gk_launch(k_cumsum<double>, gk_blocks(lines), GK_THREADS, 0, k.stream, lines, g, (const double *)x->data, xs,
                  (double *)out->data, os, n);
    else if (x->dtype == OPR_I64)
        gk_launch(k_cumsum<int64_t>, gk_blocks(lines), GK_THREADS, 0, k.stream, lines, g, (const int64_t *)x->data, xs,
                  (int64_t *)out->data, os, n);
    else
        gk_launch(k_cumsum<int32_t>, gk_blocks(lines), GK_THREADS, 0, k.stream, lines, g, (const int32_t *)x->data, xs,
                  (int64_t *)out->data, os, n);
    return gk_launched(&k, "cumsum kernel");
}

} // namespace

int gk_register_scan(opr_plugin *self) { return gk_register(self, "cumsum", GK_NUMERIC | GK_I32, k_cumsum_op); }
