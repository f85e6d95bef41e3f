/* Helpers shared by the CPU kernels: argument access, dimension wrapping, broadcast
 * strides, merging of dims and a strided n-d index walker. Header-only so each kernel file stays
 * self-contained; everything is static inline. The walker, the contiguity test and the
 * dtype sizes are those of the installed <opreg/plugin_util.h>, which every plugin can
 * use: one implementation for opreg's own kernels and everyone else's. */
#ifndef OPREG_CPU_COMMON_H
#define OPREG_CPU_COMMON_H

#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include "../common/opc_dtype.h"
#include "../common/opc_shape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Loops over at least this many elements run with OpenMP; smaller ones stay on one
 * thread because a parallel region costs microseconds. */
#define CPU_PAR_THRESHOLD 32768

/* Errors go to the host table of the call's own context: the plugin keeps no host
 * pointer of its own, which contexts initialised on several threads would race on. */
#define CPU_FAIL(call, status, ...) ((call)->host->set_error((call), __VA_ARGS__), (status))

static inline const opr_tensor_view *cpu_arg_t(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_TENSOR ? c->args[i]->u.t : NULL;
}
static inline int64_t cpu_arg_i(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_INT ? c->args[i]->u.i
         : c->args[i]->kind == OPR_ARG_DOUBLE ? (int64_t)c->args[i]->u.d : 0;
}
static inline double cpu_arg_d(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_DOUBLE ? c->args[i]->u.d
         : c->args[i]->kind == OPR_ARG_INT ? (double)c->args[i]->u.i : 0.0;
}
static inline bool cpu_arg_b(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind == OPR_ARG_BOOL ? c->args[i]->u.b : cpu_arg_i(c, i) != 0;
}
static inline bool cpu_arg_given(const opr_kernel_call *c, int i)
{
    return c->args[i]->kind != OPR_ARG_NONE;
}

/* Wraps a possibly negative dim into [0, ndim) (plugins/common/opc_shape.h). */
static inline bool cpu_wrap_dim(int64_t d, int32_t ndim, int32_t *out) { return opc_wrap_dim(d, ndim, out); }

/* opc_coalesce, keeping one dim (of size 1, strides 0) for a single element. */
static inline int32_t cpu_coalesce(int32_t nd, int64_t *shape, int nops, int64_t st[][OPR_MAX_DIMS])
{
    const int32_t m = opc_coalesce(nd, shape, nops, st);
    if (m) return m;
    shape[0] = 1;
    for (int k = 0; k < nops; k++) st[k][0] = 0;
    return 1;
}

/* Strides of a view; contiguous ones if a view comes without (defensive: the ABI
 * always passes them for ndim > 0). */
static inline void cpu_view_strides(const opr_tensor_view *v, int64_t *st)
{
    int64_t expect = 1;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        st[d] = v->strides ? v->strides[d] : expect;
        expect *= v->shape[d];
    }
}

/* Walks the row-major index space of `shape`, keeping up to 4 element offsets in
 * step (one per operand, each with its own strides): opu_iter of plugin_util.h, whose
 * fields (ndim, nops, shape, idx, strides, off) the kernels fill and read directly. */
typedef opu_iter cpu_walk;

/* Positions the walker at linear index `start` (so parallel chunks can start anywhere). */
static inline void cpu_walk_seek(cpu_walk *w, int64_t start) { opu_iter_seek(w, start); }

static inline void cpu_walk_next(cpu_walk *w) { opu_iter_next(w); }

/* The host's rule (opu_is_contiguous): size-1 dims and empty tensors do not count. */
static inline bool cpu_is_contiguous(const opr_tensor_view *v) { return opu_is_contiguous(v); }

/* Offset in elements of logical row-major element `i` of v. */
static inline int64_t cpu_offset_of(const opr_tensor_view *v, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        int64_t n = v->shape[d];
        off += (i % n) * v->strides[d];
        i /= n;
    }
    return off;
}


/* Element size and name of a dtype: plugins do not link libopreg, so they cannot call
 * opr_dtype_size / opr_dtype_name. */
static inline size_t cpu_dtype_size(opr_dtype t) { return opu_dtype_size(t); }
static inline const char *cpu_dtype_name(opr_dtype t) { return opu_dtype_name(t); }

/* First item of chunk c when n items are cut into nchunks nearly equal chunks. */
static inline int64_t cpu_chunk_lo(int64_t n, int64_t nchunks, int64_t c)
{
    return n / nchunks * c + (c < n % nchunks ? c : n % nchunks);
}

/* The slice [*lo, *hi) of n items that the calling OpenMP thread owns. Parallel loops
 * over strided views use this instead of `omp for` so that each thread positions its
 * walker once (cpu_walk_seek) and then only steps it. */
static inline void cpu_thread_range(int64_t n, int64_t *lo, int64_t *hi)
{
#ifdef _OPENMP
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    int64_t t = 0, nt = 1;
#endif
    *lo = cpu_chunk_lo(n, nt, t);
    *hi = cpu_chunk_lo(n, nt, t + 1);
}

/* The width of the blocks a row of n columns is cut into, one per thread of a parallel
 * loop (par; else the whole row), but at least lo columns (a block still streams) and at
 * most hi (its accumulators stay in cache). */
static inline int64_t cpu_col_block(int64_t n, bool par, int64_t lo, int64_t hi)
{
#ifdef _OPENMP
    const int64_t nthr = par ? omp_get_max_threads() : 1;
#else
    const int64_t nthr = 1;
    (void)par;
#endif
    const int64_t w = (n + nthr - 1) / nthr;
    return w < lo ? lo : w > hi ? hi : w;
}

/* The smallest and largest value of a non-empty i64 view (the range checks of index
 * arguments, before anything is written): a plain loop in four lanes of each where the
 * view is contiguous, a walk elsewhere; in parallel over large views. */
static inline void cpu_minmax_i64(const opr_tensor_view *t, int64_t *mn_out, int64_t *mx_out)
{
    const int64_t *p = t->data, n = t->numel;
    const bool contig = cpu_is_contiguous(t);
    int64_t mn = INT64_MAX, mx = INT64_MIN;
#pragma omp parallel if (n >= CPU_PAR_THRESHOLD) reduction(min : mn) reduction(max : mx)
    {
        int64_t lo, hi;
        cpu_thread_range(n, &lo, &hi);
        if (contig) {
            int64_t a[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX}, b[4] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
            int64_t i = lo;
            for (; i + 4 <= hi; i += 4)
                for (int k = 0; k < 4; k++) {
                    a[k] = p[i + k] < a[k] ? p[i + k] : a[k];
                    b[k] = p[i + k] > b[k] ? p[i + k] : b[k];
                }
            for (; i < hi; i++) {
                a[0] = p[i] < a[0] ? p[i] : a[0];
                b[0] = p[i] > b[0] ? p[i] : b[0];
            }
            for (int k = 0; k < 4; k++) {
                mn = a[k] < mn ? a[k] : mn;
                mx = b[k] > mx ? b[k] : mx;
            }
        } else if (lo < hi) {
            cpu_walk w = {.ndim = t->ndim, .nops = 1, .shape = t->shape};
            memcpy(w.strides[0], t->strides, (size_t)t->ndim * sizeof(int64_t));
            cpu_walk_seek(&w, lo);
            for (int64_t i = lo; i < hi; i++, cpu_walk_next(&w)) {
                const int64_t v = p[w.off[0]];
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
        }
    }
    *mn_out = mn;
    *mx_out = mx;
}

#endif /* OPREG_CPU_COMMON_H */
