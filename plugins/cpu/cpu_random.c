/* Kernels of the random factories (registry/ops/random.yaml): rand, randn, randperm.
 * Every number is a pure function of the call's seed and the element's index
 * (plugins/common/opc_rng.h, docs/random.md), so the threads may split the elements in
 * any way and the CUDA/HIP plugin gives the same values. The plain C library's log,
 * sqrt and cos make randn's numbers rather than SLEEF's: SLEEF's vectors round
 * differently from the device's scalar functions, and the point of these kernels is
 * that every backend agrees. Outputs are the host's contiguous tensors. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "../common/opc_rng.h"

#include <stdlib.h>

/* The seed argument (the last one: the host drew it if the call gave none). */
static int seed_of(const opr_kernel_call *c, const char *op, uint64_t *seed)
{
    if (c->nargs < 1 || !cpu_arg_given(c, c->nargs - 1)) return CPU_FAIL(c, OPR_ERR_INVALID, "%s: no seed", op);
    *seed = (uint64_t)cpu_arg_i(c, c->nargs - 1);
    return OPR_OK;
}

/* rand (normal false) or randn (normal true) into out, f32 or f64. */
static int fill_random(const opr_kernel_call *c, bool normal)
{
    opr_tensor_view *out = c->outputs[0];
    uint64_t seed;
    int rc = seed_of(c, c->op, &seed);
    if (rc) return rc;
    const int64_t n = out->numel;
    const bool par = n >= CPU_PAR_THRESHOLD;
    if (out->dtype == OPR_F32) {
        float *o = out->data;
        if (normal) {
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) o[i] = (float)opc_rng_normal(seed, (uint64_t)i);
        } else {
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) o[i] = opc_rng_uniform_f32(seed, (uint64_t)i);
        }
    } else if (out->dtype == OPR_F64) {
        double *o = out->data;
        if (normal) {
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) o[i] = opc_rng_normal(seed, (uint64_t)i);
        } else {
#pragma omp parallel for if (par)
            for (int64_t i = 0; i < n; i++) o[i] = opc_rng_uniform(seed, (uint64_t)i);
        }
    } else {
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "%s: dtype %s is not supported", c->op, cpu_dtype_name(out->dtype));
    }
    return OPR_OK;
}

static int k_rand(const opr_kernel_call *c) { return fill_random(c, false); }
static int k_randn(const opr_kernel_call *c) { return fill_random(c, true); }

/* randperm(n, ..., seed): the shuffle of opc_randperm, converted to out's dtype. */
static int k_randperm(const opr_kernel_call *c)
{
    opr_tensor_view *out = c->outputs[0];
    uint64_t seed;
    int rc = seed_of(c, "randperm", &seed);
    if (rc) return rc;
    const int64_t n = cpu_arg_i(c, 0);
    if (n < 0 || out->numel != n) return CPU_FAIL(c, OPR_ERR_INVALID, "randperm: n must be >= 0, got %lld", (long long)n);
    if (out->dtype != OPR_I64 && out->dtype != OPR_F32 && out->dtype != OPR_F64)
        return CPU_FAIL(c, OPR_ERR_UNSUPPORTED, "randperm: dtype %s is not supported", cpu_dtype_name(out->dtype));
    int64_t *perm = out->dtype == OPR_I64 ? out->data : malloc((size_t)(n ? n : 1) * sizeof *perm);
    if (!perm) return CPU_FAIL(c, OPR_ERR_NOMEM, "randperm: out of memory for %lld indices", (long long)n);
    opc_randperm(seed, n, perm);
    if (out->dtype == OPR_F32)
        for (int64_t i = 0; i < n; i++) ((float *)out->data)[i] = (float)perm[i];
    else if (out->dtype == OPR_F64)
        for (int64_t i = 0; i < n; i++) ((double *)out->data)[i] = (double)perm[i];
    if (perm != out->data) free(perm);
    return OPR_OK;
}

int cpu_register_random(opr_plugin *self)
{
    const uint32_t fl = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64);
    int rc = cpu_register(self, "rand", fl, k_rand);
    if (rc == OPR_OK) rc = cpu_register(self, "randn", fl, k_randn);
    if (rc == OPR_OK) rc = cpu_register(self, "randperm", fl | OPR_DTYPE_BIT(OPR_I64), k_randperm);
    return rc;
}
