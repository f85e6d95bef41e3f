/* Kernels of the random factories (registry/ops/random.yaml): rand, randn, randperm,
 * with the CPU plugin's argument checks. Element i's number is a pure function of
 * (seed, i) (plugins/common/opc_rng.h, docs/random.md), so every thread and launch
 * order gives the CPU plugin's numbers: bit for bit for rand, and for randn wherever
 * the device's log, sqrt and cos round as the C library's do (the emulated runtime;
 * on a real device an f64 result may differ in its last bit). randperm's shuffle is
 * sequential: it runs on the host and the permutation is copied over. */
#include "gpu_common.cuh"
#include "../common/opc_rng.h"

#include <stdlib.h>

namespace {

template <class T> GK_DEV T uniform_of(uint64_t seed, uint64_t i);
template <> GK_DEV float uniform_of<float>(uint64_t seed, uint64_t i) { return opc_rng_uniform_f32(seed, i); }
template <> GK_DEV double uniform_of<double>(uint64_t seed, uint64_t i) { return opc_rng_uniform(seed, i); }

template <class T> __global__ void k_random(int64_t n, T *o, uint64_t seed, bool normal)
{
    GK_LOOP(i, n) o[i] = normal ? (T)opc_rng_normal(seed, (uint64_t)i) : uniform_of<T>(seed, (uint64_t)i);
}

/* The seed argument (the last one: the host drew it if the call gave none). */
int seed_of(const opr_kernel_call *c, const char *op, uint64_t *seed)
{
    if (c->nargs < 1 || !gk_arg_given(c, c->nargs - 1)) return GK_FAIL(c, OPR_ERR_INVALID, "%s: no seed", op);
    *seed = (uint64_t)gk_arg_i(c, c->nargs - 1);
    return OPR_OK;
}

int fill_random(const opr_kernel_call *c, const char *op, bool normal)
{
    gk_ctx k;
    int rc = gk_begin(c, op, &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    uint64_t seed;
    if ((rc = seed_of(c, op, &seed))) return rc;
    const int64_t n = out->numel;
    if (out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported on %s", op, gk_dtype_name(out->dtype),
                       GPU_NAME);
    if (n == 0) return OPR_OK;
    if (out->dtype == OPR_F32)
        gk_launch(k_random<float>, gk_blocks(n), GK_THREADS, 0, k.stream, n, (float *)out->data, seed, normal);
    else
        gk_launch(k_random<double>, gk_blocks(n), GK_THREADS, 0, k.stream, n, (double *)out->data, seed, normal);
    return gk_launched(&k, normal ? "randn kernel" : "rand kernel");
}

int k_rand(const opr_kernel_call *c) { return fill_random(c, "rand", false); }
int k_randn(const opr_kernel_call *c) { return fill_random(c, "randn", true); }

/* randperm(n, ..., seed): opc_randperm on the host, in out's dtype, copied to out. */
int k_randperm(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "randperm", &k);
    if (rc) return rc;
    opr_tensor_view *out = c->outputs[0];
    uint64_t seed;
    if ((rc = seed_of(c, "randperm", &seed))) return rc;
    const int64_t n = gk_arg_i(c, 0);
    if (n < 0 || out->numel != n) return GK_FAIL(c, OPR_ERR_INVALID, "randperm: n must be >= 0, got %lld", (long long)n);
    if (out->dtype != OPR_I64 && out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return GK_FAIL(c, OPR_ERR_UNSUPPORTED, "randperm: dtype %s is not supported on %s", gk_dtype_name(out->dtype),
                       GPU_NAME);
    if (n == 0) return OPR_OK;
    /* malloc, not std::vector: a size the host cannot hold is an error, not an exception */
    const size_t es = gk_dtype_size(out->dtype);
    int64_t *perm = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    void *host = es == sizeof(int64_t) && out->dtype == OPR_I64 ? (void *)perm : malloc((size_t)n * es);
    if (!perm || !host) {
        free(perm);
        if (host != perm) free(host);
        return GK_FAIL(c, OPR_ERR_NOMEM, "randperm: out of host memory for %lld indices", (long long)n);
    }
    opc_randperm(seed, n, perm);
    for (int64_t i = 0; out->dtype != OPR_I64 && i < n; i++) {
        if (out->dtype == OPR_F32) ((float *)host)[i] = (float)perm[i];
        else ((double *)host)[i] = (double)perm[i];
    }
    rc = gk_from_host(&k, out->data, host, (size_t)n * es);
    if (host != perm) free(host);
    free(perm);
    return rc;
}

} // namespace

int gk_register_random(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = gk_register(self, "rand", fl, k_rand);
    if (rc == OPR_OK) rc = gk_register(self, "randn", fl, k_randn);
    if (rc == OPR_OK) rc = gk_register(self, "randperm", fl | OPR_DTYPE_BIT(OPR_I64), k_randperm);
    return rc;
}
