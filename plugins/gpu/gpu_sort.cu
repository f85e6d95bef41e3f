/* Sorting kernels: sort, topk, mode (f32, f64, i64, i32), as plugins/cpu/cpu_sort.c: every
 * row along dim is sorted stably (ties keep their original order), NaN above every
 * number; sort writes the row, topk its first k entries (always sorted, so sorted=False
 * is satisfied too), mode the longest run of equal values (the smallest such value on
 * ties; NaNs never compare equal) with the index of its last occurrence.
 *
 * One block per row runs a bitonic sorting network on (value, position) pairs. The
 * network is not stable by itself, but ties are broken by position, which makes the
 * order total and the result exactly the stable one. Rows padded to a power of two
 * up to 2048 sort in shared memory; longer rows sort in global scratch (in batches of
 * rows so the scratch stays bounded). */
#include "gpu_common.cuh"
#include "../common/opc_sort.h"

#include <type_traits>

namespace {

#define SORT_SMEM_N 2048
#define SORT_SCRATCH_MAX ((size_t)256 << 20)

enum rows_kind { ROWS_SORT, ROWS_TOPK, ROWS_MODE };

struct rows_args {
    gk_geom rg; /* over self's shape with dim set to 1; st: self, values, indices */
    int64_t nrows, n, k, N;
    int64_t xs, vs, is;
    bool desc;
    int kind;
};

template <class T> GK_DEV bool val_less(T a, T b)
{
    if constexpr (std::is_same<T, int64_t>::value || std::is_same<T, int32_t>::value) return a < b;
    else return a == a && (b != b || a < b); /* NaN above every number */
}

/* Whether (va, ia) goes before (vb, ib). Positions >= n are padding and go last. */
template <class T> GK_DEV bool before(T va, int64_t ia, T vb, int64_t ib, int64_t n, bool desc)
{
    if (ia >= n) return false;
    if (ib >= n) return true;
    const bool lt = desc ? val_less(vb, va) : val_less(va, vb);
    const bool gt = desc ? val_less(va, vb) : val_less(vb, va);
    return lt || (!gt && ia < ib);
}

/* Sorts N (a power of two) pairs in v/ix with the block's threads. */
template <class T> __device__ void bitonic(T *v, int64_t *ix, int64_t N, int64_t n, bool desc)
{
    for (int64_t k = 2; k <= N; k <<= 1) {
        for (int64_t j = k >> 1; j > 0; j >>= 1) {
            for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
                const int64_t l = i ^ j;
                if (l <= i) continue;
                const bool up = (i & k) == 0;
                const bool sw = up ? before(v[l], ix[l], v[i], ix[i], n, desc) : before(v[i], ix[i], v[l], ix[l], n, desc);
                if (sw) {
                    const T tv = v[i];
                    v[i] = v[l];
                    v[l] = tv;
                    const int64_t ti = ix[i];
                    ix[i] = ix[l];
                    ix[l] = ti;
                }
            }
            __syncthreads();
        }
    }
}

/* Loads row r, sorts it in v/ix (shared or global scratch of N pairs) and writes the
 * result. Called by every thread of the block. */
template <class T>
__device__ void do_row(const rows_args &a, int64_t r, const T *x, T *values, int64_t *indices, T *v, int64_t *ix)
{
    int64_t off[3];
    gk_offsets<3>(a.rg, r, off);
    const T *xr = x + off[0];
    for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
        v[i] = i < a.n ? xr[i * a.xs] : xr[0];
        ix[i] = i < a.n ? i : a.n;
    }
    __syncthreads();
    bitonic<T>(v, ix, a.N, a.n, a.kind == ROWS_MODE ? false : a.desc);
    if (a.kind == ROWS_MODE) {
        if (threadIdx.x == 0) {
            T best = v[a.n - 1];
            int64_t best_i = ix[a.n - 1], best_count = 0;
            for (int64_t lo = 0, hi; lo < a.n; lo = hi) {
                for (hi = lo + 1; hi < a.n && v[lo] == v[hi]; hi++) {
                }
                if (hi - lo > best_count) {
                    best_count = hi - lo;
                    best = v[hi - 1];
                    best_i = ix[hi - 1];
                }
            }
            values[off[1]] = best;
            indices[off[2]] = best_i;
        }
    } else {
        for (int64_t i = threadIdx.x; i < a.k; i += blockDim.x) {
            values[off[1] + i * a.vs] = v[i];
            indices[off[2] + i * a.is] = ix[i];
        }
    }
    __syncthreads(); /* the scratch is reused by the next row */
}

template <class T>
__global__ void k_rows_shared(rows_args a, const T *x, T *values, int64_t *indices)
{
    GPU_DYNAMIC_SHARED(unsigned long long, smem_raw); /* 8-byte aligned */
    int64_t *ix = (int64_t *)smem_raw;
    T *v = (T *)(ix + a.N);
    for (int64_t r = blockIdx.x; r < a.nrows; r += gridDim.x) do_row<T>(a, r, x, values, indices, v, ix);
}

/* Rows [r0, r0 + gridDim.x * ...) with per-block global scratch. */
template <class T>
__global__ void k_rows_global(rows_args a, int64_t r0, int64_t r1, const T *x, T *values, int64_t *indices,
                              T *sv, int64_t *six)
{
    T *v = sv + (int64_t)blockIdx.x * a.N;
    int64_t *ix = six + (int64_t)blockIdx.x * a.N;
    for (int64_t r = r0 + blockIdx.x; r < r1; r += gridDim.x) do_row<T>(a, r, x, values, indices, v, ix);
}

template <class T>
int rows_launch(const gk_ctx *k, rows_args &a, const void *x, void *values, int64_t *indices)
{
    const int threads = a.N <= 64 ? 64 : a.N <= 128 ? 128 : GK_THREADS;
    if (a.N <= SORT_SMEM_N) {
        const size_t smem = (size_t)a.N * (sizeof(T) + sizeof(int64_t));
        const unsigned blocks = (unsigned)(a.nrows < 65535 ? a.nrows : 65535);
        gk_launch(k_rows_shared<T>, blocks, threads, smem, k->stream, a, (const T *)x, (T *)values, indices);
        return gk_launched(k, "sort kernel");
    }
    const size_t per_row = (size_t)a.N * (sizeof(T) + sizeof(int64_t));
    int64_t batch = (int64_t)(SORT_SCRATCH_MAX / per_row);
    if (batch < 1) batch = 1;
    if (batch > 1024) batch = 1024;
    if (batch > a.nrows) batch = a.nrows;
    gk_buf sv, six;
    int rc = sv.alloc(k, (size_t)batch * a.N * sizeof(T));
    if (!rc) rc = six.alloc(k, (size_t)batch * a.N * sizeof(int64_t));
    if (rc) return rc;
    /* one launch over all rows: block b reuses its own slice of the scratch */
    gk_launch(k_rows_global<T>, (unsigned)batch, GK_THREADS, 0, k->stream, a, 0, a.nrows, (const T *)x, (T *)values, indices,
                                                                     sv.as<T>(), six.as<int64_t>());
    return gk_launched(k, "sort kernel");
}

/* Validates the outputs (opc_rows_plan) and runs the rows of self along dim. */
int run_rows(const gk_ctx *k, const opr_kernel_call *c, rows_args *j, int32_t dim, const int32_t *out_dims)
{
    const char *op = c->op;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    if (c->nout < 2) return GK_FAIL(c, OPR_ERR_INVALID, "%s: expected 2 outputs", op);
    const opr_tensor_view *vals = c->outputs[0], *idx = c->outputs[1];
    char why[OPC_WHY_SIZE];
    opc_rows r;
    if (!opc_rows_plan(op, x, vals, idx, dim, j->k, out_dims, &r, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    j->n = r.n;
    j->xs = r.x_step;
    j->vs = r.v_step;
    j->is = r.i_step;
    j->nrows = r.nrows;
    if (j->nrows == 0 || j->k == 0 || j->n == 0) return OPR_OK;
    int64_t N = 1;
    while (N < j->n) N <<= 1;
    j->N = N;
    const int64_t *st[3] = {r.x_st, r.v_st, r.i_st};
    gk_geom_make(&j->rg, x->ndim, r.shape, 3, st);
    switch (x->dtype) {
    case OPR_F32: return rows_launch<float>(k, *j, x->data, vals->data, (int64_t *)idx->data);
    case OPR_F64: return rows_launch<double>(k, *j, x->data, vals->data, (int64_t *)idx->data);
    case OPR_I64: return rows_launch<int64_t>(k, *j, x->data, vals->data, (int64_t *)idx->data);
    case OPR_I32: return rows_launch<int32_t>(k, *j, x->data, vals->data, (int64_t *)idx->data);
    default:
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(x->dtype), GPU_NAME);
    }
}

int begin_rows(const opr_kernel_call *c, const char *op, int dim_arg, gk_ctx *k, int32_t *dim)
{
    int rc = gk_begin(c, op, k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "%s: self is not a tensor", op);
    char why[OPC_WHY_SIZE];
    if (!opc_dim_arg(op, gk_arg_i(c, dim_arg), x->ndim, dim, why, sizeof why))
        return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    return OPR_OK;
}

int k_sort(const opr_kernel_call *c)
{
    gk_ctx k;
    int32_t dim, out_dims[GK_MAXD];
    int rc = begin_rows(c, "sort", 1, &k, &dim);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opc_rows_out_dims(x->ndim, dim, false, out_dims);
    rows_args j;
    memset(&j, 0, sizeof j);
    j.kind = ROWS_SORT;
    j.desc = gk_arg_b(c, 2);
    j.k = x->ndim ? x->shape[dim] : 1;
    return run_rows(&k, c, &j, dim, out_dims);
}

int k_topk(const opr_kernel_call *c)
{
    gk_ctx k;
    int32_t dim, out_dims[GK_MAXD];
    int rc = begin_rows(c, "topk", 2, &k, &dim);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    const int64_t kk = gk_arg_i(c, 1);
    char why[OPC_WHY_SIZE];
    if (!opc_topk_k(kk, dim, x->ndim ? x->shape[dim] : 1, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opc_rows_out_dims(x->ndim, dim, false, out_dims);
    rows_args j;
    memset(&j, 0, sizeof j);
    j.kind = ROWS_TOPK;
    j.desc = gk_arg_b(c, 3);
    j.k = x->ndim ? kk : 1; /* a 0-d self gives its element even for k = 0 (PyTorch) */
    return run_rows(&k, c, &j, dim, out_dims);
}

int k_mode(const opr_kernel_call *c)
{
    gk_ctx k;
    int32_t dim, out_dims[GK_MAXD];
    int rc = begin_rows(c, "mode", 1, &k, &dim);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    char why[OPC_WHY_SIZE];
    if (!opc_mode_rows(x, dim, why, sizeof why)) return GK_FAIL(c, OPR_ERR_INVALID, "%s", why);
    opc_rows_out_dims(x->ndim, dim, !gk_arg_b(c, 2), out_dims);
    rows_args j;
    memset(&j, 0, sizeof j);
    j.kind = ROWS_MODE;
    j.k = 1;
    return run_rows(&k, c, &j, dim, out_dims);
}

} // namespace

int gk_register_sort(opr_plugin *self)
{
    const uint32_t dtypes = GK_NUMERIC | GK_I32;
    int rc;
    if ((rc = gk_register(self, "sort", dtypes, k_sort)) != OPR_OK) return rc;
    if ((rc = gk_register(self, "topk", dtypes, k_topk)) != OPR_OK) return rc;
    return gk_register(self, "mode", dtypes, k_mode);
}
