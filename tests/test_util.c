#include "test_util.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

opr_ctx *tu_ctx(void)
{
    opr_ctx *ctx = opr_ctx_new(NULL);
    ck_assert_msg(ctx != NULL, "opr_ctx_new: %s", opr_last_error());
    ck_assert_msg(opr_op_has_kernel(opr_op_find(ctx, "add"), 0), "CPU plugin not loaded (OPREG_PLUGIN_PATH=%s)",
                  getenv("OPREG_PLUGIN_PATH") ? getenv("OPREG_PLUGIN_PATH") : "unset");
    return ctx;
}

void tu_ctx_free(opr_ctx *ctx)
{
    int live = opr_ctx_free(ctx);
    ck_assert_msg(live == 0, "%d tensor(s) leaked", live);
}

static uint64_t state = 88172645463325252ull;

void tu_seed(uint64_t seed) { state = seed ? seed : 1; }

double tu_uniform(double lo, double hi)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return lo + (hi - lo) * (double)(state >> 11) / 9007199254740992.0;
}

opr_tensor *tu_f64(opr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    return t;
}

opr_tensor *tu_iota(opr_ctx *ctx, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    free(v);
    ck_assert_ptr_nonnull(t);
    return t;
}

opr_tensor *tu_rand(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    ck_assert_ptr_nonnull(buf);
    for (int64_t i = 0; i < n; i++) {
        double v = tu_uniform(lo, hi);
        switch (dt) {
        case OPR_F32: ((float *)buf)[i] = (float)v; break;
        case OPR_F64: ((double *)buf)[i] = v; break;
        case OPR_I64: ((int64_t *)buf)[i] = (int64_t)floor(v); break;
        case OPR_BOOL: ((uint8_t *)buf)[i] = v >= (lo + hi) / 2; break;
        default: ck_abort_msg("tu_rand: unsupported dtype");
        }
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, buf, OPR_CPU);
    free(buf);
    ck_assert_msg(t != NULL, "tu_rand: %s", opr_last_error());
    return t;
}

double *tu_to_f64(const opr_tensor *t)
{
    int64_t n = opr_tensor_numel(t);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    ck_assert(out);
    ck_assert_msg(opr_tensor_copy_to_host_f64(t, out, n) == OPR_OK, "tu_to_f64: %s", opr_last_error());
    return out;
}

opr_tensor *tu_call1(opr_ctx *ctx, const char *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_OK, "%s failed: %s", op, opr_last_error());
    return out;
}

void tu_expect_fail(opr_ctx *ctx, const char *op, const opr_value *args, int nargs, int nres, int status,
                    const char *needle)
{
    opr_tensor *out[4] = {NULL, NULL, NULL, NULL};
    int rc = opr_call_by_name(ctx, op, args, nargs, out, nres);
    ck_assert_msg(rc == status, "%s: expected %s, got %s (%s)", op, opr_status_name(status), opr_status_name(rc),
                  opr_last_error());
    for (int i = 0; i < 4; i++) ck_assert_ptr_null(out[i]);
    ck_assert_msg(strstr(opr_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", op, opr_last_error(), needle);
}

int tu_run(Suite *s)
{
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}

bool tu_arg_differentiable(const opr_op *op, int a)
{
    if (opr_op_arg_written(op, a)) return false;
    if (opr_op_is_composite(op) && opr_op_grad_candidate_count(op) == 0) return true;
    const char *name = opr_op_arg_name(op, a);
    const size_t n = strlen(name);
    for (int i = 0; i < opr_op_grad_candidate_count(op); i++) {
        const char *l = opr_op_grad_candidate_label(op, i);
        for (const char *p = l; (p = strstr(p, name)) != NULL; p += n)
            if ((p == l || p[-1] == ' ') && (p[n] == '\0' || p[n] == ',' || p[n] == ' ')) return true;
    }
    return false;
}
