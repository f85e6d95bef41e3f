/* layer_norm, var, std, gelu and gelu_backward (registry/ops/nn_norm.yaml):
 *   - values against PyTorch 1.13 (the constants below were printed by torch 1.13's
 *     F.layer_norm, torch.var / torch.std, F.gelu and autograd on the same inputs, in
 *     f64; the script is quoted before each table);
 *   - gradients of every candidate and requires-grad mask against finite differences
 *     (opr_gradcheck), on the CPU and, where the build has it, the emulated CUDA device;
 *   - the plan lists both layer_norm candidates, and the fused kernel saves no more than
 *     the formulas (opr_autograd_walk's saved_bytes), exactly input and weight;
 *   - refused calls: normalized_shape not the trailing dims, weight or bias of the wrong
 *     shape, a bad `approximate`. */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-12

static opr_tensor *from(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, const double *v)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    opr_tensor *t64 = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    ck_assert_ptr_nonnull(t64);
    if (dt == OPR_F64) return t64;
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, f, OPR_CPU);
    free(f);
    opr_tensor_release(t64);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void expect_values(const opr_tensor *t, const double *want, int64_t n, double tol, const char *what)
{
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *got = tu_to_f64(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s: element %lld: %.17g, PyTorch %.17g", what,
                      (long long)i, got[i], want[i]);
    free(got);
}

/* ------------------------------------------------------------------ PyTorch values */

/* x = [[0.5, -1.25, 2, 0.75], [3, 1, -2, 0], [-0.5, 0.25, 1.5, -1.75]], w = [1.5, -0.5, 2,
 * 0.25], b = [0.1, 0.2, -0.3, 0.4]; y = F.layer_norm(x, [4], w, b, 1e-5); v the
 * grad_output below; gx, gw, gb = torch.autograd.grad(y, (x, w, b), v) */
static const double LN_X[12] = {0.5, -1.25, 2.0, 0.75, 3.0, 1.0, -2.0, 0.0, -0.5, 0.25, 1.5, -1.75};
static const double LN_W[4] = {1.5, -0.5, 2.0, 0.25}, LN_B[4] = {0.1, 0.2, -0.3, 0.4};
static const double LN_V[12] = {1.0, -2.0, 0.5, 3.0, 0.25, 1.0, -1.0, 2.0, -0.5, 0.75, 1.5, -1.0};
static const double LN_Y[12] = {0.1, 0.954826603772164, 2.2879769272188484, 0.453916185983726, 2.1801225356585543,
                                0.06132516428942972, -3.0734967142114056, 0.3306625821447149, -0.376997330959362,
                                0.04100088968021268, 2.455984578876314, 0.0555019276404608};
static const double LN_GX[12] = {0.377413301886082, -0.07147016241395177, -0.038869920472104025, -0.26707321900002634,
                                 -0.14667352228653735, -0.16800954016787778, -0.30401969377281607, 0.6187027562272313,
                                 -0.6705378027601702, -0.9724530038776322, 0.8563419456168118, 0.7866488610209907};
static const double LN_GW[4] = {0.5056861995962131, 3.5351547519894777, 4.100731023067651, 1.4702871784005878};
static const double LN_GB[4] = {0.75, -0.25, 1.0, 4.0};
/* F.layer_norm(x.reshape(2, 2, 3), [2, 3], None, None, 0.1) */
static const double LN2_Y[12] = {-0.3696948196568264, -1.6636266884557187, 0.7393896393136528, -0.1848474098284132,
                                 1.4787792786273055, 0.0, -1.2798167972341816, 0.33679389400899523,
                                 -0.06735877880179897, 0.5388702304143923, 1.549251912441378, -1.0777404608287844};

/* layer_norm(LN_X, [4], LN_W, LN_B) and its gradients for grad_output LN_V, with the
 * candidate `cand` forced (-1: chosen by cost). */
static void check_layer_norm_values(opr_ctx *ctx, opr_dtype dt, int cand, double tol)
{
    const opr_op *op = opr_op_find(ctx, "layer_norm");
    ck_assert_ptr_nonnull(op);
    ck_assert_int_eq(opr_op_force_grad_candidate(op, cand), OPR_OK);
    opr_tensor *x = from(ctx, dt, 2, (int64_t[]){3, 4}, LN_X), *w = from(ctx, dt, 1, (int64_t[]){4}, LN_W);
    opr_tensor *b = from(ctx, dt, 1, (int64_t[]){4}, LN_B), *v = from(ctx, dt, 2, (int64_t[]){3, 4}, LN_V);
    opr_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ck_assert_int_eq(opr_set_requires_grad(in[i], true), OPR_OK);
    const int64_t ns[1] = {4};
    opr_value a[5] = {opr_v_tensor(x), opr_v_ints(ns, 1), opr_v_tensor(w), opr_v_tensor(b), opr_v_double(1e-5)};
    opr_tensor *y = tu_call1(ctx, "layer_norm", a, 5);
    expect_values(y, LN_Y, 12, tol, "layer_norm");
    opr_tensor *g[3] = {NULL, NULL, NULL};
    ck_assert_msg(opr_autograd_grad(&y, &v, 1, in, 3, g, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(g[0], LN_GX, 12, tol, "layer_norm input grad");
    expect_values(g[1], LN_GW, 4, tol, "layer_norm weight grad");
    expect_values(g[2], LN_GB, 4, tol, "layer_norm bias grad");
    opr_tensor *r[] = {x, w, b, v, y, g[0], g[1], g[2]};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    ck_assert_int_eq(opr_op_force_grad_candidate(op, -1), OPR_OK);
}

static int candidate_index(const opr_op *op, const char *needle)
{
    for (int i = 0; i < opr_op_grad_candidate_count(op); i++)
        if (strstr(opr_op_grad_candidate_label(op, i), needle)) return i;
    return -1;
}

START_TEST(test_layer_norm_matches_pytorch)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *op = opr_op_find(ctx, "layer_norm");
    const int fused = candidate_index(op, "kernel layer_norm_backward");
    ck_assert_int_ge(fused, 0);
    /* by cost, each candidate forced (the separate formulas cover one input each) */
    check_layer_norm_values(ctx, OPR_F64, -1, TOL);
    check_layer_norm_values(ctx, OPR_F64, fused, TOL);
    check_layer_norm_values(ctx, OPR_F32, fused, 1e-5);
    for (int i = 0; i < opr_op_grad_candidate_count(op); i++)
        if (i != fused) check_layer_norm_values(ctx, OPR_F64, i, TOL);

    /* no weight and bias, two normalised dims, a larger eps */
    opr_tensor *x = from(ctx, OPR_F64, 3, (int64_t[]){2, 2, 3}, LN_X);
    const int64_t ns[2] = {2, 3};
    opr_value a[5] = {opr_v_tensor(x), opr_v_ints(ns, 2), opr_v_none(), opr_v_none(), opr_v_double(0.1)};
    opr_tensor *y = tu_call1(ctx, "layer_norm", a, 5);
    expect_values(y, LN2_Y, 12, TOL, "layer_norm over [2, 3]");
    /* a transposed (strided) input gives the same as its contiguous copy */
    opr_tensor *xt = opr_tensor_transpose(x, 0, 1), *xc = opr_tensor_contiguous(xt);
    a[0] = opr_v_tensor(xt);
    opr_tensor *yt = tu_call1(ctx, "layer_norm", a, 5);
    a[0] = opr_v_tensor(xc);
    opr_tensor *yc = tu_call1(ctx, "layer_norm", a, 5);
    double *vc = tu_to_f64(yc);
    expect_values(yt, vc, 12, 0, "layer_norm of a strided input");
    free(vc);
    opr_tensor *r[] = {x, y, xt, xc, yt, yc};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* a = [[1, 2, 4], [-3, 0.5, 7]]: torch.var(a), torch.var(a, dim=[1], correction=0),
 * torch.std(a, dim=[0], keepdim=True), torch.var(a, dim=[1], correction=2) */
START_TEST(test_var_std_match_pytorch)
{
    opr_ctx *ctx = tu_ctx();
    const double av[6] = {1.0, 2.0, 4.0, -3.0, 0.5, 7.0};
    opr_tensor *a = from(ctx, OPR_F64, 2, (int64_t[]){2, 3}, av);
    const int64_t d0[1] = {0}, d1[1] = {1};
    opr_tensor *v_all = tu_call1(ctx, "var", (opr_value[]){opr_v_tensor(a)}, 1);
    expect_values(v_all, (double[]){11.441666666666666}, 1, TOL, "var over everything");
    ck_assert_int_eq(opr_tensor_ndim(v_all), 0);
    opr_tensor *v_d1 = tu_call1(ctx, "var", (opr_value[]){opr_v_tensor(a), opr_v_ints(d1, 1), opr_v_int(0)}, 3);
    expect_values(v_d1, (double[]){1.5555555555555554, 17.166666666666668}, 2, TOL, "var dim 1 correction 0");
    opr_tensor *s_d0 = tu_call1(ctx, "std", (opr_value[]){opr_v_tensor(a), opr_v_ints(d0, 1), opr_v_int(1), opr_v_bool(true)}, 4);
    expect_values(s_d0, (double[]){2.8284271247461903, 1.0606601717798212, 2.1213203435596424}, 3, TOL, "std dim 0 keepdim");
    ck_assert_int_eq(opr_tensor_ndim(s_d0), 2);
    opr_tensor *v_c2 = tu_call1(ctx, "var", (opr_value[]){opr_v_tensor(a), opr_v_ints(d1, 1), opr_v_int(2)}, 3);
    expect_values(v_c2, (double[]){4.666666666666666, 51.5}, 2, TOL, "var correction 2");
    /* one element with Bessel's correction: 0 / 0, NaN as in PyTorch */
    opr_tensor *one = from(ctx, OPR_F64, 1, (int64_t[]){1}, av);
    opr_tensor *v_one = tu_call1(ctx, "var", (opr_value[]){opr_v_tensor(one)}, 1);
    double *nv = tu_to_f64(v_one);
    ck_assert(isnan(nv[0]));
    free(nv);
    opr_tensor *r[] = {a, v_all, v_d1, s_d0, v_c2, one, v_one};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* g = [-3, -1, -0.5, 0, 0.3, 1, 2.5]: F.gelu(g), F.gelu(g, approximate="tanh") and the
 * gradients of their sums */
static const double GE_X[7] = {-3.0, -1.0, -0.5, 0.0, 0.3, 1.0, 2.5};
static const double GE_NONE[7] = {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                                  0.1853734266566858, 0.841344746068543, 2.4844758366855597};
static const double GE_TANH[7] = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                  0.18537092354275922, 0.8411919906082768, 2.484915733910001};
static const double GE_GNONE[7] = {-0.01194564720418392, -0.08331547058768635, 0.13250487534383712, 0.5,
                                   0.7323277668271099, 1.0833154705876864, 1.037611085908145};
static const double GE_GTANH[7] = {-0.011584166630969648, -0.08296408384578252, 0.13263009646535764, 0.5,
                                   0.7322954516388018, 1.0829640838457826, 1.037951576212666};

START_TEST(test_gelu_matches_pytorch)
{
    opr_ctx *ctx = tu_ctx();
    const opr_dtype dts[2] = {OPR_F64, OPR_F32};
    for (int k = 0; k < 2; k++) {
        const double tol = dts[k] == OPR_F64 ? TOL : 2e-6;
        for (int th = 0; th < 2; th++) {
            opr_tensor *x = from(ctx, dts[k], 1, (int64_t[]){7}, GE_X);
            ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
            opr_value a[2] = {opr_v_tensor(x), opr_v_string(th ? "tanh" : "none")};
            opr_tensor *y = tu_call1(ctx, "gelu", a, 2);
            expect_values(y, th ? GE_TANH : GE_NONE, 7, tol, th ? "gelu tanh" : "gelu none");
            opr_tensor *ones = from(ctx, dts[k], 1, (int64_t[]){7}, (double[]){1, 1, 1, 1, 1, 1, 1}), *gx = NULL;
            ck_assert_msg(opr_autograd_grad(&y, &ones, 1, &x, 1, &gx, NULL) == OPR_OK, "%s", opr_last_error());
            expect_values(gx, th ? GE_GTANH : GE_GNONE, 7, tol, th ? "gelu tanh grad" : "gelu none grad");
            opr_tensor *r[] = {x, y, ones, gx};
            for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
        }
    }
    /* the default is "none" */
    opr_tensor *x = from(ctx, OPR_F64, 1, (int64_t[]){7}, GE_X);
    opr_tensor *y = tu_call1(ctx, "gelu", (opr_value[]){opr_v_tensor(x)}, 1);
    expect_values(y, GE_NONE, 7, TOL, "gelu default");
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ gradcheck */

/* opr_gradcheck of op on its YAML samples in f64 on dev: every candidate, every mask. */
static void gradcheck_samples(opr_ctx *ctx, const char *name, opr_device dev)
{
    const opr_op *op = opr_op_find(ctx, name);
    ck_assert_ptr_nonnull(op);
    const int n = opr_op_sample_count(op);
    ck_assert_int_gt(n, 0);
    for (int s = 0; s < n; s++) {
        opr_value args[12]; /* the most arguments a schema has */
        opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
        int nargs = 0, nowned = 0;
        ck_assert_msg(opr_op_sample_args(op, s, OPR_F64, dev, 7 + (uint64_t)s, args, &nargs, owned, &nowned) == OPR_OK, "%s",
                      opr_last_error());
        opr_gradcheck_result res = {.struct_size = sizeof res};
        const opr_status rc = opr_gradcheck(op, args, nargs, NULL, 0, NULL, &res);
        ck_assert_msg(rc == OPR_OK, "%s sample %d: %s", name, s, res.detail[0] ? res.detail : opr_last_error());
        ck_assert_int_gt(res.passed, 0);
        ck_assert_int_eq(res.failed, 0);
        for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    }
}

START_TEST(test_gradcheck_cpu)
{
    opr_ctx *ctx = tu_ctx();
    const opr_device cpu = OPR_CPU;
    const char *ops[] = {"layer_norm", "var", "std", "gelu", "gelu_backward"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) gradcheck_samples(ctx, ops[i], cpu);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_gradcheck_emulated_cuda)
{
#ifndef OPREG_TEST_EMU
    printf("test_gradcheck_emulated_cuda: skipped (no emulated CUDA plugin in this build)\n");
    return;
#endif
    opr_ctx *ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    const char *ops[] = {"layer_norm", "var", "std", "gelu", "gelu_backward"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        ck_assert_msg(opr_op_has_kernel(opr_op_find(ctx, ops[i]), dev.type), "%s on cuda", ops[i]);
        gradcheck_samples(ctx, ops[i], dev);
    }
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ plans, saved bytes */

static void on_node(void *ud, const opr_node_info *info)
{
    if (strcmp(info->op, "layer_norm") == 0) *(uint64_t *)ud = info->saved_bytes;
}

/* Bytes the layer_norm node saves with candidate cand forced, every input requiring grad. */
static uint64_t layer_norm_saved(opr_ctx *ctx, int cand, bool with_weight)
{
    const opr_op *op = opr_op_find(ctx, "layer_norm");
    ck_assert_int_eq(opr_op_force_grad_candidate(op, cand), OPR_OK);
    tu_seed(5);
    opr_tensor *x = tu_rand(ctx, OPR_F32, 3, (int64_t[]){4, 16, 32}, -1, 1);
    opr_tensor *w = tu_rand(ctx, OPR_F32, 1, (int64_t[]){32}, 0.5, 2), *b = tu_rand(ctx, OPR_F32, 1, (int64_t[]){32}, -1, 1);
    opr_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ck_assert_int_eq(opr_set_requires_grad(in[i], true), OPR_OK);
    const int64_t ns[1] = {32};
    opr_value a[4] = {opr_v_tensor(x), opr_v_ints(ns, 1), with_weight ? opr_v_tensor(w) : opr_v_none(), opr_v_tensor(b)};
    opr_tensor *y = tu_call1(ctx, "layer_norm", a, 4);
    uint64_t saved = UINT64_MAX;
    ck_assert_int_eq(opr_autograd_walk(y, on_node, &saved), 1);
    for (int i = 0; i < 3; i++) opr_tensor_release(in[i]);
    opr_tensor_release(y);
    ck_assert_int_eq(opr_op_force_grad_candidate(op, -1), OPR_OK);
    return saved;
}

START_TEST(test_layer_norm_plan_and_saved_bytes)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *op = opr_op_find(ctx, "layer_norm");
    const int fused = candidate_index(op, "kernel layer_norm_backward"), formula = candidate_index(op, "input");
    ck_assert_int_ge(fused, 0);
    ck_assert_int_ge(formula, 0);
    ck_assert_int_ne(fused, formula);

    /* the plan shows both ways to get input's gradient and picks one */
    const int64_t ns[1] = {512};
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){64, 512}, OPR_CPU);
    opr_tensor *w = opr_tensor_new(ctx, OPR_F32, 1, ns, OPR_CPU), *b = opr_tensor_new(ctx, OPR_F32, 1, ns, OPR_CPU);
    opr_value a[4] = {opr_v_tensor(x), opr_v_ints(ns, 1), opr_v_tensor(w), opr_v_tensor(b)};
    const char *rg[3] = {"input", "weight", "bias"};
    char buf[8192];
    ck_assert_msg(opr_plan_explain(op, a, 4, rg, 3, buf, sizeof buf) == OPR_OK, "%s", opr_last_error());
    ck_assert_msg(strstr(buf, "layer_norm_backward") && strstr(buf, "[input]"), "plan:\n%s", buf);
    uint64_t planned = 0;
    ck_assert_int_eq(opr_plan_saved_bytes(op, a, 4, rg, 3, &planned), OPR_OK);
    /* whichever wins, it saves input and weight (f32), nothing of batch size more */
    ck_assert_int_eq(planned, (64 * 512 + 512) * 4);
    opr_tensor_release(x);
    opr_tensor_release(w);
    opr_tensor_release(b);

    /* recorded nodes: the fused kernel saves no more than the formulas, which read the
     * same tensors: input [4, 16, 32] and weight [32] in f32; without weight, input only */
    const uint64_t want = (4 * 16 * 32 + 32) * 4;
    ck_assert_int_eq(layer_norm_saved(ctx, fused, true), want);
    ck_assert_int_eq(layer_norm_saved(ctx, -1, true), want);
    ck_assert_int_le(layer_norm_saved(ctx, fused, true), layer_norm_saved(ctx, formula, true));
    ck_assert_int_eq(layer_norm_saved(ctx, fused, false), 4 * 16 * 32 * 4);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ jagged */

/* layer_norm and gelu on a jagged [2, ragged, 4] tensor run on its values: the same
 * numbers as on the dense values, the structure kept, and the gradient reaches them. */
START_TEST(test_jagged_rows)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(11);
    opr_tensor *values = tu_rand(ctx, OPR_F64, 2, (int64_t[]){5, 4}, -2, 2);
    const int64_t offs[3] = {0, 2, 5};
    opr_tensor *offsets = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){3}, offs, OPR_CPU);
    opr_tensor *j = opr_jagged_from_values(values, offsets);
    ck_assert_msg(j != NULL, "%s", opr_last_error());
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, 0.5, 2);
    const int64_t ns[1] = {4};
    opr_tensor *yd = tu_call1(ctx, "layer_norm", (opr_value[]){opr_v_tensor(values), opr_v_ints(ns, 1), opr_v_tensor(w)}, 3);
    ck_assert_int_eq(opr_set_requires_grad(j, true), OPR_OK);
    opr_tensor *yj = tu_call1(ctx, "layer_norm", (opr_value[]){opr_v_tensor(j), opr_v_ints(ns, 1), opr_v_tensor(w)}, 3);
    ck_assert(opr_tensor_is_jagged(yj));
    opr_tensor *yv = opr_jagged_values(yj);
    double *want = tu_to_f64(yd);
    expect_values(yv, want, 20, TOL, "layer_norm on jagged values");
    free(want);
    opr_tensor *gj = tu_call1(ctx, "gelu", (opr_value[]){opr_v_tensor(yj)}, 1);
    ck_assert(opr_tensor_is_jagged(gj));
    opr_tensor *gv = opr_jagged_values(gj);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(gv)}, 1);
    ck_assert_msg(opr_backward(s, NULL, NULL) == OPR_OK, "%s", opr_last_error());
    const opr_tensor *gx = opr_grad(j); /* borrowed */
    ck_assert_ptr_nonnull(gx);
    ck_assert(opr_tensor_is_jagged(gx));
    opr_tensor *r[] = {values, offsets, j, w, yd, yj, yv, gj, gv, s};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ refused calls */

START_TEST(test_refused_calls)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(9);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 4}, -1, 1);
    opr_tensor *w3 = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1), *w4 = tu_rand(ctx, OPR_F64, 1, (int64_t[]){4}, -1, 1);
    opr_tensor *w14 = tu_rand(ctx, OPR_F64, 2, (int64_t[]){1, 4}, -1, 1);
    const int64_t ns3[1] = {3}, ns14[2] = {1, 4}, ns34[2] = {3, 4}, ns234[3] = {2, 3, 4};
    /* not the trailing dims: size differs, a 1 that only broadcasts, more dims than input */
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns3, 1)}, 2, 1, OPR_ERR_INVALID,
                   "normalized_shape");
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns14, 2)}, 2, 1, OPR_ERR_INVALID,
                   "normalized_shape[0] is 1 but input's dim 0 is 3");
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns234, 3)}, 2, 1, OPR_ERR_INVALID,
                   "normalized_shape");
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(NULL, 0)}, 2, 1, OPR_ERR_INVALID,
                   "normalized_shape");
    /* weight / bias of the wrong shape */
    const int64_t ns4[1] = {4};
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns4, 1), opr_v_tensor(w3)}, 3, 1,
                   OPR_ERR_INVALID, "weight");
    tu_expect_fail(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns4, 1), opr_v_tensor(w14)}, 3, 1,
                   OPR_ERR_INVALID, "weight");
    tu_expect_fail(ctx, "layer_norm",
                   (opr_value[]){opr_v_tensor(x), opr_v_ints(ns34, 2), opr_v_none(), opr_v_tensor(w4)}, 4, 1,
                   OPR_ERR_INVALID, "bias");
    /* approximate other than "none" / "tanh" */
    tu_expect_fail(ctx, "gelu", (opr_value[]){opr_v_tensor(x), opr_v_string("erf")}, 2, 1, OPR_ERR_INVALID, "approximate");
    tu_expect_fail(ctx, "gelu_backward", (opr_value[]){opr_v_tensor(x), opr_v_tensor(x), opr_v_string("Tanh")}, 3, 1,
                   OPR_ERR_INVALID, "approximate");
    /* the right calls still work */
    opr_tensor *ok = tu_call1(ctx, "layer_norm", (opr_value[]){opr_v_tensor(x), opr_v_ints(ns34, 2)}, 2);
    opr_tensor *r[] = {x, w3, w4, w14, ok};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("norm_ops");
    TCase *tc = tcase_create("norm_ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_layer_norm_matches_pytorch);
    tcase_add_test(tc, test_var_std_match_pytorch);
    tcase_add_test(tc, test_gelu_matches_pytorch);
    tcase_add_test(tc, test_gradcheck_cpu);
    tcase_add_test(tc, test_gradcheck_emulated_cuda);
    tcase_add_test(tc, test_layer_norm_plan_and_saved_bytes);
    tcase_add_test(tc, test_jagged_rows);
    tcase_add_test(tc, test_refused_calls);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
