/* Kernels of the scans of registry/ops/reduction.yaml: cumsum. Each line along dim is
 * summed in order (so the result does not depend on the thread count), f32 in double
 * as PyTorch's CPU cumsum accumulates, i64 in unsigned arithmetic so that an overflow
 * wraps (as in PyTorch) instead of being undefined; i32 likewise, into an i64 output
 * (PyTorch's cumsum of int32 gives int64). Inputs may be any strided views;
 * outputs are the host's contiguous tensors.
 *
 * Two loops, the same sums: along the innermost dim, lines run in parallel, each a
 * running sum; along an outer dim of a contiguous input (a line's elements far apart),
 * whole rows are added into a row of running sums instead (out row k = out row k - 1 +
 * x row k), which reads and writes memory in order and vectorises across the row. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_flip_scan.h"

#include <string.h>

/* One line: n elements step xs apart in x, os apart in out. */
#define CUMSUM_LINE(NAME, T, TO, ACC, STORE)                                                       \
    static void NAME(const T *x, int64_t xs, TO *out, int64_t os, int64_t n)                      \
    {                                                                                              \
        ACC acc = 0;                                                                               \
        for (int64_t k = 0; k < n; k++) {                                                          \
            acc += (ACC)x[k * xs];                                                                 \
            out[k * os] = STORE;                                                                   \
        }                                                                                          \
    }
CUMSUM_LINE(line_f32, float, float, double, (float)acc)
CUMSUM_LINE(line_f64, double, double, double, acc)
CUMSUM_LINE(line_i64, int64_t, int64_t, uint64_t, (int64_t)acc)
CUMSUM_LINE(line_i32, int32_t, int64_t, uint64_t, (int64_t)acc)

/* Columns of running sums a row of the scan is cut into (double accumulators, 8 KiB:
 * in L1 next to the rows streaming through). */
#define SCAN_COLS 1024

/* Lines along an outer dim of contiguous x and out, seen as [outer, n, inner]: the
 * running sums of columns [c0, c0 + w) of block o, row by row. */
#define CUMSUM_ROWS(NAME, T, TO, ACC, STORE)                                                       \
    static void NAME(const T *x, TO *out, int64_t n, int64_t inner, int64_t o, int64_t c0, int64_t w) \
    {                                                                                              \
        ACC acc[SCAN_COLS];                                                                        \
        for (int64_t j = 0; j < w; j++) acc[j] = 0;                                                \
        const int64_t base = o * n * inner + c0;                                                   \
        for (int64_t k = 0; k < n; k++) {                                                          \
            const T *xr = x + base + k * inner;                                                    \
            TO *orow = out + base + k * inner;                                                     \
            for (int64_t j = 0; j < w; j++) {                                                      \
                acc[j] += (ACC)xr[j];                                                              \
                orow[j] = STORE;                                                                   \
            }                                                                                      \
        }                                                                                          \
    }
CUMSUM_ROWS(rows_f32, float, float, double, (float)acc[j])
CUMSUM_ROWS(rows_f64, double, double, double, acc[j])
CUMSUM_ROWS(rows_i64, int64_t, int64_t, uint64_t, (int64_t)acc[j])
CUMSUM_ROWS(rows_i32, int32_t, int64_t, uint64_t, (int64_t)acc[j])

/* cumsum along dim d of contiguous x into out, where the dims after d hold inner > 1
 * elements: tasks of (outer block, column block), in parallel; a row is cut into one
 * block per thread (SCAN_COLS at most, 256 at least, so that a block still streams). */
static void cumsum_rows(const opr_tensor_view *x, opr_tensor_view *out, int32_t d, int64_t inner)
{
    const int64_t n = x->shape[d], outer = x->numel / (n * inner);
    const bool par = x->numel >= CPU_PAR_THRESHOLD;
    const int64_t width = cpu_col_block(inner, par, 256, SCAN_COLS);
    const int64_t ncb = (inner + width - 1) / width, ntask = outer * ncb;
#pragma omp parallel for schedule(static) if (par && ntask > 1)
    for (int64_t t = 0; t < ntask; t++) {
        const int64_t o = t / ncb, c0 = t % ncb * width, w = inner - c0 < width ? inner - c0 : width;
        if (x->dtype == OPR_F32) rows_f32(x->data, out->data, n, inner, o, c0, w);
        else if (x->dtype == OPR_F64) rows_f64(x->data, out->data, n, inner, o, c0, w);
        else if (x->dtype == OPR_I64) rows_i64(x->data, out->data, n, inner, o, c0, w);
        else rows_i32(x->data, out->data, n, inner, o, c0, w);
    }
}

static int k_cumsum(const opr_kernel_call *c)
{
    const opr_tensor_view *x = cpu_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    char why[OPC_WHY_SIZE];
    int32_t d;
    if (!x) return CPU_FAIL(c, OPR_ERR_INVALID, "cumsum: self must be a tensor");
    if (!opc_cumsum_args("cumsum", x, cpu_arg_i(c, 1), out, &d, why, sizeof why))
        return CPU_FAIL(c, OPR_ERR_INVALID, "%s", why);
    if (x->dtype != OPR_F32 && x->dtype != OPR_F64 && x->dtype != OPR_I64 && x->dtype != OPR_I32)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "cumsum: dtype %s is not supported on cpu", cpu_dtype_name(x->dtype));
    if (out->numel == 0) return OPR_OK;
    if (d >= 0 && cpu_is_contiguous(x) && cpu_is_contiguous(out)) {
        int64_t inner = 1;
        for (int32_t q = d + 1; q < x->ndim; q++) inner *= x->shape[q];
        if (inner > 1) {
            cumsum_rows(x, out, d, inner);
            return OPR_OK;
        }
    }
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
            else if (x->dtype == OPR_I64)
                line_i64((const int64_t *)x->data + w.off[0], xs, (int64_t *)out->data + w.off[1], os, n);
            else line_i32((const int32_t *)x->data + w.off[0], xs, (int64_t *)out->data + w.off[1], os, n);
        }
    }
    return OPR_OK;
}

int cpu_register_scan(opr_plugin *self)
{
    const uint32_t num = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) | OPR_DTYPE_BIT(OPR_I32);
    return cpu_register(self, "cumsum", num, k_cumsum);
}
