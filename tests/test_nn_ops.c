/* The ops of registry/ops/nn.yaml: embedding, dropout, triu / tril, masked_fill,
 * argmax / argmin. Values against hand-computed cases and against PyTorch
 * (oracle/nn_ops.py, skipped with a note where no python3 has torch), gradients
 * against finite differences (opr_gradcheck), the refused calls, and dropout's
 * generator: reproducible from opr_manual_seed, fresh for every call, the statistics
 * of its mask, and nothing of tensor size saved for backward. With the emulated CUDA
 * plugin (OPREG_TEST_EMU) the same mask and the same errors on the device. */
#include "tests/oracle_files.h"
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)

static opr_tensor *f64_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

static opr_tensor *i64_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, const int64_t *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_I64, ndim, shape, v, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

static opr_tensor *bool_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, const uint8_t *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_BOOL, ndim, shape, v, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* t has shape `shape` and exactly the values `want`. */
static void expect_values(const opr_tensor *t, int ndim, const int64_t *shape, const double *want, const char *what)
{
    ck_assert_msg(opr_tensor_ndim(t) == ndim, "%s: %d-d, expected %d-d", what, opr_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_msg(opr_tensor_size(t, d) == shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                      (long long)opr_tensor_size(t, d), (long long)shape[d]);
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < opr_tensor_numel(t); i++) {
        const double got = v[i];
        if (!(got == want[i] || (isnan(got) && isnan(want[i])))) {
            free(v);
            ck_abort_msg("%s[%lld] is %.17g, expected %.17g", what, (long long)i, got, want[i]);
        }
    }
    free(v);
}

static void expect_same(const opr_tensor *a, const opr_tensor *b, const char *what)
{
    ck_assert_int_eq(opr_tensor_numel(a), opr_tensor_numel(b));
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    for (int64_t i = 0; i < opr_tensor_numel(a); i++)
        ck_assert_msg(x[i] == y[i], "%s: element %lld differs: %.17g vs %.17g", what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

static void gradcheck(opr_ctx *ctx, const char *op, const opr_value *args, int nargs)
{
    opr_gradcheck_result res = {.struct_size = sizeof res};
    const int rc = opr_gradcheck(opr_op_find(ctx, op), args, nargs, NULL, 0, NULL, &res);
    ck_assert_msg(rc == OPR_OK, "%s: gradcheck %s: %s", op, opr_status_name(rc), opr_last_error());
    ck_assert_msg(res.checked > 0 && res.failed == 0, "%s: %d checked, %d failed", op, res.checked, res.failed);
}

/* ------------------------------------------------------------------ embedding */

/* weight [4, 2] = 0..7 row-major: row r is {2r, 2r + 1}. */
static const double W42[8] = {0, 1, 2, 3, 4, 5, 6, 7};

START_TEST(test_embedding_values)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *w = f64_tensor(ctx, 2, (int64_t[]){4, 2}, W42);
    opr_tensor *idx = i64_tensor(ctx, 2, (int64_t[]){2, 2}, (int64_t[]){1, 3, 1, 0});
    opr_tensor *out = tu_call1(ctx, "embedding", ARGS(TV(w), TV(idx)));
    expect_values(out, 3, (int64_t[]){2, 2, 2}, (double[]){2, 3, 6, 7, 2, 3, 0, 1}, "embedding 2-d indices");
    /* a 0-d index picks one row: shape [D] */
    opr_tensor *i0 = i64_tensor(ctx, 0, NULL, (int64_t[]){2});
    opr_tensor *row = tu_call1(ctx, "embedding", ARGS(TV(w), TV(i0)));
    expect_values(row, 1, (int64_t[]){2}, (double[]){4, 5}, "embedding 0-d index");
    /* a transposed (non-contiguous) weight holding the same matrix */
    opr_tensor *wt_data = f64_tensor(ctx, 2, (int64_t[]){2, 4}, (double[]){0, 2, 4, 6, 1, 3, 5, 7});
    opr_tensor *wt = tu_call1(ctx, "t", ARGS(TV(wt_data)));
    opr_tensor *out2 = tu_call1(ctx, "embedding", ARGS(TV(wt), TV(idx)));
    expect_values(out2, 3, (int64_t[]){2, 2, 2}, (double[]){2, 3, 6, 7, 2, 3, 0, 1}, "embedding strided weight");
    /* strided indices: the transpose of idx */
    opr_tensor *idx_t = tu_call1(ctx, "t", ARGS(TV(idx)));
    opr_tensor *out3 = tu_call1(ctx, "embedding", ARGS(TV(w), TV(idx_t)));
    expect_values(out3, 3, (int64_t[]){2, 2, 2}, (double[]){2, 3, 2, 3, 6, 7, 0, 1}, "embedding strided indices");
    opr_tensor *all[] = {w, idx, out, i0, row, wt_data, wt, out2, idx_t, out3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

typedef struct walk_log {
    int n;
    char op[8][32];
    uint64_t saved[8], inputs[8];
} walk_log;

static void log_node(void *ud, const opr_node_info *info)
{
    walk_log *l = ud;
    if (l->n >= 8) return;
    snprintf(l->op[l->n], sizeof l->op[0], "%s", info->op);
    l->saved[l->n] = info->saved_bytes;
    l->inputs[l->n] = info->all_inputs_bytes;
    l->n++;
}

/* Repeated indices add their gradient rows up; the padding row gets none. */
START_TEST(test_embedding_grad_duplicates_and_padding)
{
    opr_ctx *ctx = tu_ctx();
    const double r[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    /* indices 1, 3, 1, 0, 1 against grad rows r0..r4: row 0 = r3, row 1 = r0 + r2 + r4,
     * row 2 = 0, row 3 = r1 */
    const double want_nopad[8] = {7, 8, 1 + 5 + 9, 2 + 6 + 10, 0, 0, 3, 4};
    const double want_pad1[8] = {7, 8, 0, 0, 0, 0, 3, 4};
    for (int pad = 0; pad < 2; pad++) {
        opr_tensor *w = f64_tensor(ctx, 2, (int64_t[]){4, 2}, W42);
        ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
        opr_tensor *idx = i64_tensor(ctx, 1, (int64_t[]){5}, (int64_t[]){1, 3, 1, 0, 1});
        opr_tensor *g = f64_tensor(ctx, 2, (int64_t[]){5, 2}, r);
        opr_tensor *out = tu_call1(ctx, "embedding", ARGS(TV(w), TV(idx), opr_v_int(pad ? 1 : -1)));
        /* the forward still reads the padding row (PyTorch's semantics) */
        expect_values(out, 2, (int64_t[]){5, 2}, (double[]){2, 3, 6, 7, 2, 3, 0, 1, 2, 3}, "embedding forward");
        walk_log log = {0};
        ck_assert_int_eq(opr_autograd_walk(out, log_node, &log), 1);
        ck_assert_str_eq(log.op[0], "embedding");
        ck_assert_msg(log.saved[0] == 5 * sizeof(int64_t), "embedding saved %llu bytes, expected the indices only",
                      (unsigned long long)log.saved[0]);
        ck_assert_int_eq(opr_backward(out, g, NULL), OPR_OK);
        expect_values(opr_grad(w), 2, (int64_t[]){4, 2}, pad ? want_pad1 : want_nopad, "embedding weight grad");
        opr_tensor_release(out);
        opr_tensor_release(g);
        opr_tensor_release(idx);
        opr_tensor_release(w);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_embedding_errors)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *w = f64_tensor(ctx, 2, (int64_t[]){4, 2}, W42);
    opr_tensor *high = i64_tensor(ctx, 1, (int64_t[]){3}, (int64_t[]){0, 4, 1});
    opr_tensor *neg = i64_tensor(ctx, 1, (int64_t[]){2}, (int64_t[]){-1, 0});
    opr_tensor *fidx = f64_tensor(ctx, 1, (int64_t[]){1}, (double[]){1});
    opr_tensor *w1 = f64_tensor(ctx, 1, (int64_t[]){4}, W42);
    tu_expect_fail(ctx, "embedding", ARGS(TV(w), TV(high)), 1, OPR_ERR_INVALID, "index 4 is out of range");
    tu_expect_fail(ctx, "embedding", ARGS(TV(w), TV(neg)), 1, OPR_ERR_INVALID, "index -1 is out of range");
    tu_expect_fail(ctx, "embedding", ARGS(TV(w), TV(fidx)), 1, OPR_ERR_INVALID, "must be i64");
    tu_expect_fail(ctx, "embedding", ARGS(TV(w1), TV(high)), 1, OPR_ERR_INVALID, "dim(weight) == 2");
    tu_expect_fail(ctx, "embedding", ARGS(TV(w), TV(neg), opr_v_int(4)), 1, OPR_ERR_INVALID, "padding_idx < size(weight, 0)");
    /* the backward helper checks its indices too */
    opr_tensor *g = f64_tensor(ctx, 2, (int64_t[]){3, 2}, W42);
    tu_expect_fail(ctx, "embedding_backward", ARGS(TV(g), TV(high), opr_v_int(4)), 1, OPR_ERR_INVALID, "out of range");
#ifdef OPREG_TEST_EMU
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    opr_tensor *dw = opr_tensor_to(w, dev), *dhigh = opr_tensor_to(high, dev), *dneg = opr_tensor_to(neg, dev);
    tu_expect_fail(ctx, "embedding", ARGS(TV(dw), TV(dhigh)), 1, OPR_ERR_INVALID, "index 4 is out of range");
    tu_expect_fail(ctx, "embedding", ARGS(TV(dw), TV(dneg)), 1, OPR_ERR_INVALID, "index -1 is out of range");
    opr_tensor_release(dw);
    opr_tensor_release(dhigh);
    opr_tensor_release(dneg);
#endif
    opr_tensor *all[] = {w, high, neg, fidx, w1, g};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_embedding_gradcheck)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(11);
    opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){5, 3}, -1, 1);
    opr_tensor *idx = i64_tensor(ctx, 2, (int64_t[]){2, 3}, (int64_t[]){4, 0, 4, 2, 2, 4});
    gradcheck(ctx, "embedding", ARGS(TV(w), TV(idx)));
    /* padding_idx not among the indices: the padding branch of the formula, checkable */
    gradcheck(ctx, "embedding", ARGS(TV(w), TV(idx), opr_v_int(1)));
    /* embedding_backward is linear in grad_output, padding rows dropped: checkable */
    opr_tensor *g = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 3, 3}, -1, 1);
    gradcheck(ctx, "embedding_backward", ARGS(TV(g), TV(idx), opr_v_int(5), opr_v_int(2)));
    gradcheck(ctx, "embedding_backward", ARGS(TV(g), TV(idx), opr_v_int(6)));
    opr_tensor_release(w);
    opr_tensor_release(idx);
    opr_tensor_release(g);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ dropout */

static opr_tensor *ones(opr_ctx *ctx, opr_dtype dt, int64_t n)
{
    opr_tensor *t = tu_call1(ctx, "ones", ARGS(opr_v_ints((int64_t[]){n}, 1), opr_v_string(opr_dtype_name(dt))));
    return t;
}

static opr_tensor *dropout(opr_ctx *ctx, opr_tensor *x, double p, bool train)
{
    return tu_call1(ctx, "dropout", ARGS(TV(x), opr_v_double(p), opr_v_bool(train)));
}

static bool same_values(const opr_tensor *a, const opr_tensor *b)
{
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    bool same = true;
    for (int64_t i = 0; i < opr_tensor_numel(a) && same; i++) same = x[i] == y[i];
    free(x);
    free(y);
    return same;
}

START_TEST(test_dropout_reproducible)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = ones(ctx, OPR_F32, 1000);
    opr_manual_seed(ctx, 1234);
    opr_tensor *a = dropout(ctx, x, 0.5, true), *b = dropout(ctx, x, 0.5, true);
    ck_assert_msg(!same_values(a, b), "two dropout calls drew the same mask");
    opr_manual_seed(ctx, 1234);
    opr_tensor *c = dropout(ctx, x, 0.5, true), *d = dropout(ctx, x, 0.5, true);
    expect_same(a, c, "first call after the same seed");
    expect_same(b, d, "second call after the same seed");
    opr_manual_seed(ctx, 1235);
    opr_tensor *e = dropout(ctx, x, 0.5, true);
    ck_assert_msg(!same_values(a, e), "another seed gave the same mask");
    /* another context seeded alike draws alike */
    opr_ctx *ctx2 = tu_ctx();
    opr_tensor *x2 = ones(ctx2, OPR_F32, 1000);
    opr_manual_seed(ctx2, 1234);
    opr_tensor *a2 = dropout(ctx2, x2, 0.5, true);
    expect_same(a, a2, "the same seed in another context");
    opr_tensor *all[] = {x, a, b, c, d, e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    opr_tensor_release(x2);
    opr_tensor_release(a2);
    tu_ctx_free(ctx2);
    tu_ctx_free(ctx);
}
END_TEST

/* Zeros with probability p, the rest exactly 1 / (1 - p) (x = 1), and two masks
 * independent: they differ in about 2 p (1 - p) of the places. */
START_TEST(test_dropout_statistics)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t n = 200000;
    const double p = 0.3;
    for (int k = 0; k < 2; k++) {
        const opr_dtype dt = k ? OPR_F64 : OPR_F32;
        opr_tensor *x = ones(ctx, dt, n);
        opr_manual_seed(ctx, 7 + (uint64_t)k);
        opr_tensor *a = dropout(ctx, x, p, true), *b = dropout(ctx, x, p, true);
        double *va = tu_to_f64(a), *vb = tu_to_f64(b);
        const double kept = dt == OPR_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);
        int64_t zeros = 0, differ = 0;
        for (int64_t i = 0; i < n; i++) {
            ck_assert_msg(va[i] == 0 || va[i] == kept, "%s element %lld is %.17g: neither 0 nor 1/(1-p)",
                          opr_dtype_name(dt), (long long)i, va[i]);
            zeros += va[i] == 0;
            differ += (va[i] == 0) != (vb[i] == 0);
        }
        /* 6 standard deviations of a binomial proportion */
        const double frac = (double)zeros / (double)n, sd = sqrt(p * (1 - p) / (double)n);
        ck_assert_msg(fabs(frac - p) < 6 * sd, "%s: %.5f of the elements dropped, expected %.2f", opr_dtype_name(dt), frac, p);
        const double q = 2 * p * (1 - p), fd = (double)differ / (double)n;
        ck_assert_msg(fabs(fd - q) < 6 * sqrt(q * (1 - q) / (double)n), "%s: two masks differ in %.5f, expected %.3f",
                      opr_dtype_name(dt), fd, q);
        free(va);
        free(vb);
        opr_tensor_release(a);
        opr_tensor_release(b);
        opr_tensor_release(x);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_dropout_special_cases)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(3);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){6, 5}, -2, 2);
    /* p = 0 and train = False: x itself, and nothing drawn from the generator */
    opr_manual_seed(ctx, 99);
    opr_tensor *i0 = dropout(ctx, x, 0, true), *i1 = dropout(ctx, x, 0.5, false);
    ck_assert_ptr_eq(i0, x);
    ck_assert_ptr_eq(i1, x);
    opr_tensor *after = dropout(ctx, x, 0.5, true);
    opr_manual_seed(ctx, 99);
    opr_tensor *fresh = dropout(ctx, x, 0.5, true);
    expect_same(after, fresh, "identity calls drew randomness");
    /* p = 1: zeros */
    opr_tensor *z = dropout(ctx, x, 1, true);
    double zeros[30] = {0};
    expect_values(z, 2, (int64_t[]){6, 5}, zeros, "dropout p = 1");
    /* p outside [0, 1] */
    tu_expect_fail(ctx, "dropout", ARGS(TV(x), opr_v_double(1.5)), 1, OPR_ERR_INVALID, "p <= 1");
    tu_expect_fail(ctx, "dropout", ARGS(TV(x), opr_v_double(-0.1)), 1, OPR_ERR_INVALID, "p >= 0");
    tu_expect_fail(ctx, "dropout_seeded", ARGS(TV(x), opr_v_double(2), opr_v_int(1)), 1, OPR_ERR_INVALID, "p <= 1");
    /* the seeded op: the same seed gives the same mask; elements are x / (1 - p) or 0 */
    opr_tensor *s1 = tu_call1(ctx, "dropout_seeded", ARGS(TV(x), opr_v_double(0.25), opr_v_int(5)));
    opr_tensor *s2 = tu_call1(ctx, "dropout_seeded", ARGS(TV(x), opr_v_double(0.25), opr_v_int(5)));
    expect_same(s1, s2, "dropout_seeded with one seed");
    double *vx = tu_to_f64(x), *vs = tu_to_f64(s1);
    for (int i = 0; i < 30; i++) ck_assert(vs[i] == 0 || vs[i] == vx[i] * (1 / 0.75));
    free(vx);
    free(vs);
    opr_tensor *all[] = {x, i0, i1, after, fresh, z, s1, s2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* Backward regenerates the mask from the seed: the node saves no tensor (0 bytes),
 * and the gradient is the mask scaled, which for x = 1 is the output itself. */
START_TEST(test_dropout_backward_saves_nothing)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = ones(ctx, OPR_F32, 2048);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_manual_seed(ctx, 5);
    opr_tensor *y = dropout(ctx, x, 0.25, true);
    walk_log log = {0};
    ck_assert_int_eq(opr_autograd_walk(y, log_node, &log), 1);
    ck_assert_str_eq(log.op[0], "dropout_seeded");
    ck_assert_msg(log.saved[0] == 0, "dropout saved %llu bytes", (unsigned long long)log.saved[0]);
    ck_assert_int_eq(log.inputs[0], 2048 * sizeof(float));
    opr_tensor *g = ones(ctx, OPR_F32, 2048);
    ck_assert_int_eq(opr_backward(y, g, NULL), OPR_OK);
    expect_same(opr_grad(x), y, "dropout gradient");
    opr_tensor_release(g);
    opr_tensor_release(y);
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

static long max_rss_kib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* Every recorded call draws a new seed, which must not make a plan of its own: keyed
 * on the seed, 20000 calls retired 20000 cached plans (about 29 MB). */
START_TEST(test_dropout_plans_reused)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = ones(ctx, OPR_F32, 64);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    const opr_op *op = opr_op_find(ctx, "dropout");
    const long before = max_rss_kib();
    for (int i = 0; i < 20000; i++) {
        opr_tensor *y = NULL;
        ck_assert_int_eq(opr_call(op, ARGS(TV(x), opr_v_double(0.5)), &y, 1), OPR_OK);
        opr_tensor_release(y);
    }
    const long grown = max_rss_kib() - before;
#ifdef __SANITIZE_ADDRESS__
    /* ASan keeps freed blocks in its quarantine, so the process grows whatever the
     * cache does: the plain build checks the growth */
    (void)grown;
#else
    ck_assert_msg(grown < 8 * 1024, "20000 dropout calls grew the process by %ld KiB", grown);
#endif
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_dropout_gradcheck)
{
    opr_ctx *ctx = tu_ctx();
    tu_seed(4);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){4, 5}, -1, 1);
    gradcheck(ctx, "dropout_seeded", ARGS(TV(x), opr_v_double(0.4), opr_v_int(123)));
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* The mask is a function of (seed, position) alone: the device gives the CPU's. */
START_TEST(test_dropout_device_matches_cpu)
{
#ifndef OPREG_TEST_EMU
    printf("test_dropout_device_matches_cpu: skipped (no emulated CUDA plugin in this build)\n");
    return;
#else
    opr_ctx *ctx = tu_ctx();
    opr_device dev;
    ck_assert_msg(opr_device_parse(ctx, "cuda:0", &dev) == OPR_OK, "%s", opr_last_error());
    tu_seed(5);
    for (int k = 0; k < 2; k++) {
        opr_tensor *x = tu_rand(ctx, k ? OPR_F64 : OPR_F32, 3, (int64_t[]){3, 50, 7}, -1, 1);
        opr_tensor *dx = opr_tensor_to(x, dev);
        opr_manual_seed(ctx, 77);
        opr_tensor *cpu = dropout(ctx, x, 0.35, true);
        opr_manual_seed(ctx, 77);
        opr_tensor *gpu = dropout(ctx, dx, 0.35, true);
        expect_same(cpu, gpu, "dropout on cuda vs cpu");
        opr_tensor_release(x);
        opr_tensor_release(dx);
        opr_tensor_release(cpu);
        opr_tensor_release(gpu);
    }
    tu_ctx_free(ctx);
#endif
}
END_TEST

/* ------------------------------------------------------------------ triu / tril */

START_TEST(test_triangles)
{
    opr_ctx *ctx = tu_ctx();
    /* x[b, i, j] = 100 b + 10 i + j + 1 (never 0), shape [2, 3, 4] */
    double xv[24], want[24];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) xv[b * 12 + i * 4 + j] = 100 * b + 10 * i + j + 1;
    opr_tensor *x = f64_tensor(ctx, 3, (int64_t[]){2, 3, 4}, xv);
    const int64_t diags[] = {-2, -1, 0, 1, 3, 5};
    for (size_t k = 0; k < sizeof diags / sizeof diags[0]; k++) {
        for (int upper = 0; upper < 2; upper++) {
            for (int b = 0; b < 2; b++)
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 4; j++) {
                        const bool keep = upper ? j - i >= diags[k] : j - i <= diags[k];
                        want[b * 12 + i * 4 + j] = keep ? xv[b * 12 + i * 4 + j] : 0;
                    }
            opr_tensor *y = tu_call1(ctx, upper ? "triu" : "tril", ARGS(TV(x), opr_v_int(diags[k])));
            char what[32];
            snprintf(what, sizeof what, "%s(x, %lld)", upper ? "triu" : "tril", (long long)diags[k]);
            expect_values(y, 3, (int64_t[]){2, 3, 4}, want, what);
            opr_tensor_release(y);
        }
    }
    /* bool and i64 take the same path */
    opr_tensor *bt = bool_tensor(ctx, 2, (int64_t[]){2, 2}, (uint8_t[]){1, 1, 1, 1});
    opr_tensor *bu = tu_call1(ctx, "tril", ARGS(TV(bt)));
    expect_values(bu, 2, (int64_t[]){2, 2}, (double[]){1, 0, 1, 1}, "tril of bools");
    opr_tensor *it = i64_tensor(ctx, 2, (int64_t[]){2, 3}, (int64_t[]){1, 2, 3, 4, 5, 6});
    opr_tensor *iu = tu_call1(ctx, "triu", ARGS(TV(it), opr_v_int(1)));
    expect_values(iu, 2, (int64_t[]){2, 3}, (double[]){0, 2, 3, 0, 0, 6}, "triu of i64");
    opr_tensor *v1 = f64_tensor(ctx, 1, (int64_t[]){3}, xv);
    tu_expect_fail(ctx, "triu", ARGS(TV(v1)), 1, OPR_ERR_INVALID, "dim(self) >= 2");
    tu_expect_fail(ctx, "tril", ARGS(TV(v1)), 1, OPR_ERR_INVALID, "dim(self) >= 2");
    gradcheck(ctx, "triu", ARGS(TV(x), opr_v_int(-1)));
    gradcheck(ctx, "tril", ARGS(TV(x), opr_v_int(1)));
    opr_tensor *all[] = {x, bt, bu, it, iu, v1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ masked_fill */

START_TEST(test_masked_fill)
{
    opr_ctx *ctx = tu_ctx();
    opr_tensor *x = f64_tensor(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_tensor *m = bool_tensor(ctx, 1, (int64_t[]){3}, (uint8_t[]){1, 0, 1});
    opr_tensor *y = tu_call1(ctx, "masked_fill", ARGS(TV(x), TV(m), opr_v_double(-1.5)));
    expect_values(y, 2, (int64_t[]){2, 3}, (double[]){-1.5, 2, -1.5, -1.5, 5, -1.5}, "masked_fill");
    opr_tensor *g = f64_tensor(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    ck_assert_int_eq(opr_backward(y, g, NULL), OPR_OK);
    expect_values(opr_grad(x), 2, (int64_t[]){2, 3}, (double[]){0, 2, 0, 0, 5, 0}, "masked_fill grad");
    /* the mask must be bool and broadcast to self (not the other way) */
    opr_tensor *fm = f64_tensor(ctx, 1, (int64_t[]){3}, (double[]){1, 0, 1});
    opr_tensor *big = bool_tensor(ctx, 3, (int64_t[]){2, 2, 3}, (uint8_t[12]){0});
    tu_expect_fail(ctx, "masked_fill", ARGS(TV(x), TV(fm), opr_v_double(0)), 1, OPR_ERR_INVALID, "must be bool");
    tu_expect_fail(ctx, "masked_fill", ARGS(TV(x), TV(big), opr_v_double(0)), 1, OPR_ERR_INVALID, "broadcastable_to(mask, self)");
    opr_tensor *xd = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 3, 4}, -1, 1);
    opr_tensor *md = tu_rand(ctx, OPR_BOOL, 2, (int64_t[]){3, 1}, 0, 1);
    gradcheck(ctx, "masked_fill", ARGS(TV(xd), TV(md), opr_v_double(2)));
    opr_tensor *all[] = {x, m, y, g, fm, big, xd, md};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ argmax / argmin */

static void expect_arg(opr_ctx *ctx, const char *op, opr_tensor *x, opr_value dim, bool keepdim, int ndim,
                       const int64_t *shape, const double *want)
{
    opr_tensor *r = tu_call1(ctx, op, ARGS(TV(x), dim, opr_v_bool(keepdim)));
    ck_assert_int_eq(opr_tensor_dtype(r), OPR_I64);
    ck_assert(!opr_requires_grad(r));
    expect_values(r, ndim, shape, want, op);
    opr_tensor_release(r);
}

START_TEST(test_arg_extrema)
{
    opr_ctx *ctx = tu_ctx();
    /* ties: the first index wins */
    opr_tensor *t = f64_tensor(ctx, 2, (int64_t[]){2, 3}, (double[]){1, 5, 5, 7, 0, 7});
    ck_assert_int_eq(opr_set_requires_grad(t, true), OPR_OK); /* no floating output: allowed */
    expect_arg(ctx, "argmax", t, opr_v_int(1), false, 1, (int64_t[]){2}, (double[]){1, 0});
    expect_arg(ctx, "argmin", t, opr_v_int(1), false, 1, (int64_t[]){2}, (double[]){0, 1});
    expect_arg(ctx, "argmax", t, opr_v_int(0), false, 1, (int64_t[]){3}, (double[]){1, 0, 1});
    expect_arg(ctx, "argmin", t, opr_v_int(-2), true, 2, (int64_t[]){1, 3}, (double[]){0, 1, 0});
    expect_arg(ctx, "argmax", t, opr_v_none(), false, 0, NULL, (double[]){3});
    expect_arg(ctx, "argmin", t, opr_v_none(), true, 2, (int64_t[]){1, 1}, (double[]){4});
    /* NaN is the extremum of both, the first one wins */
    opr_tensor *n = f64_tensor(ctx, 1, (int64_t[]){4}, (double[]){1, NAN, 3, NAN});
    expect_arg(ctx, "argmax", n, opr_v_none(), false, 0, NULL, (double[]){1});
    expect_arg(ctx, "argmin", n, opr_v_int(0), false, 0, NULL, (double[]){1});
    /* i64 and a 0-d tensor */
    opr_tensor *i = i64_tensor(ctx, 1, (int64_t[]){4}, (int64_t[]){-3, 9, 9, -3});
    expect_arg(ctx, "argmax", i, opr_v_none(), false, 0, NULL, (double[]){1});
    expect_arg(ctx, "argmin", i, opr_v_int(0), false, 0, NULL, (double[]){0});
    opr_tensor *s = f64_tensor(ctx, 0, NULL, (double[]){2});
    expect_arg(ctx, "argmax", s, opr_v_int(0), false, 0, NULL, (double[]){0});
    /* a strided view: argmax of t's transpose along dim 1 is argmax of t along dim 0 */
    opr_tensor *tt = tu_call1(ctx, "t", ARGS(TV(t)));
    expect_arg(ctx, "argmax", tt, opr_v_int(1), false, 1, (int64_t[]){3}, (double[]){1, 0, 1});
    expect_arg(ctx, "argmax", tt, opr_v_none(), false, 0, NULL, (double[]){1}); /* flattened t^T: 1 7 5 0 5 7 */
    /* empty and out-of-range dims are refused */
    opr_tensor *e = tu_rand(ctx, OPR_F64, 2, (int64_t[]){0, 3}, 0, 1);
    tu_expect_fail(ctx, "argmax", ARGS(TV(e)), 1, OPR_ERR_INVALID, "numel(self) > 0");
    tu_expect_fail(ctx, "argmin", ARGS(TV(t), opr_v_int(2)), 1, OPR_ERR_INVALID, "out of range");
    opr_tensor *all[] = {t, n, i, s, tt, e};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) opr_tensor_release(all[k]);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ PyTorch */

START_TEST(test_against_pytorch)
{
    char why[256];
    if (!of_find_python(why, sizeof why)) {
        printf("test_against_pytorch: skipped (no python3 with torch among: %s)\n", why);
        return;
    }
    opr_ctx *ctx = tu_ctx();
    tu_seed(2024);
    opr_tensor *w = tu_rand(ctx, OPR_F64, 2, (int64_t[]){6, 3}, -1, 1);
    ck_assert_int_eq(opr_set_requires_grad(w, true), OPR_OK);
    opr_tensor *idx = i64_tensor(ctx, 2, (int64_t[]){2, 5}, (int64_t[]){2, 5, 0, 2, 5, 3, 3, 1, 2, 0});
    opr_tensor *pad = i64_tensor(ctx, 0, NULL, (int64_t[]){2});
    opr_tensor *r = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 5, 3}, -1, 1);
    opr_tensor *x = tu_rand(ctx, OPR_F64, 3, (int64_t[]){2, 3, 4}, -1, 1);
    opr_tensor *xi = tu_rand(ctx, OPR_I64, 2, (int64_t[]){3, 4}, 0, 3); /* many ties */
    const int64_t mv[3] = {1, 0, 1};
    opr_tensor *mask_i = i64_tensor(ctx, 2, (int64_t[]){3, 1}, mv);
    opr_tensor *mask = bool_tensor(ctx, 2, (int64_t[]){3, 1}, (uint8_t[]){1, 0, 1});
    opr_tensor *value = f64_tensor(ctx, 0, NULL, (double[]){-7.5});
    const char *names[] = {"weight", "indices", "pad", "r", "x", "xi", "mask", "value"};
    opr_tensor *ins[] = {w, idx, pad, r, x, xi, mask_i, value};
    of_recs rs = {.n = 0};
    of_run(OPREG_ORACLE_DIR, "nn_ops", names, ins, 8, &rs);

    opr_tensor *emb = tu_call1(ctx, "embedding", ARGS(TV(w), TV(idx), opr_v_int(2)));
    of_expect_close(&rs, "emb", emb, 1e-15);
    ck_assert_int_eq(opr_backward(emb, r, NULL), OPR_OK);
    of_expect_close(&rs, "grad_weight", opr_grad(w), 1e-14);
    opr_tensor *keep[64];
    int nk = 0;
    double *wv = tu_to_f64(w);
    opr_tensor *wf = keep[nk++] = f64_tensor(ctx, 2, (int64_t[]){6, 3}, wv);
    free(wv);
    ck_assert_int_eq(opr_set_requires_grad(wf, true), OPR_OK);
    opr_tensor *embf = keep[nk++] = tu_call1(ctx, "embedding", ARGS(TV(wf), TV(idx), opr_v_int(2), opr_v_bool(true)));
    ck_assert_int_eq(opr_backward(embf, r, NULL), OPR_OK);
    of_expect_close(&rs, "grad_weight_freq", opr_grad(wf), 1e-14);
    for (int k = -1; k <= 2; k += 3) {
        char name[32];
        snprintf(name, sizeof name, "triu_%d", k);
        of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "triu", ARGS(TV(x), opr_v_int(k))), 0);
        snprintf(name, sizeof name, "tril_%d", k);
        of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "tril", ARGS(TV(x), opr_v_int(k))), 0);
    }
    /* d/dx sum(triu(x, -1) * c) with c = x's values (a constant): triu(c, -1); xl is a
     * leaf with x's values */
    double *xv = tu_to_f64(x);
    opr_tensor *xl = keep[nk++] = f64_tensor(ctx, 3, (int64_t[]){2, 3, 4}, xv);
    free(xv);
    ck_assert_int_eq(opr_set_requires_grad(xl, true), OPR_OK);
    opr_tensor *tx = keep[nk++] = tu_call1(ctx, "triu", ARGS(TV(xl), opr_v_int(-1)));
    ck_assert_int_eq(opr_backward(tx, x, NULL), OPR_OK);
    of_expect_close(&rs, "grad_triu", opr_grad(xl), 0);
    of_expect_close(&rs, "masked_fill", keep[nk++] = tu_call1(ctx, "masked_fill", ARGS(TV(x), TV(mask), opr_v_double(-7.5))), 0);
    opr_tensor *srcs[2] = {x, xi};
    const char *snames[2] = {"x", "xi"};
    for (int s = 0; s < 2; s++) {
        char name[48];
        for (int d = 0; d < opr_tensor_ndim(srcs[s]); d++) {
            snprintf(name, sizeof name, "argmax_%s_%d", snames[s], d);
            of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "argmax", ARGS(TV(srcs[s]), opr_v_int(d))), 0);
            snprintf(name, sizeof name, "argmin_%s_%d", snames[s], d);
            of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "argmin", ARGS(TV(srcs[s]), opr_v_int(d))), 0);
        }
        snprintf(name, sizeof name, "argmax_%s_all", snames[s]);
        of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "argmax", ARGS(TV(srcs[s]))), 0);
        snprintf(name, sizeof name, "argmin_%s_all", snames[s]);
        of_expect_close(&rs, name, keep[nk++] = tu_call1(ctx, "argmin", ARGS(TV(srcs[s]))), 0);
        snprintf(name, sizeof name, "argmax_%s_keep", snames[s]);
        of_expect_close(&rs, name,
                        keep[nk++] = tu_call1(ctx, "argmax", ARGS(TV(srcs[s]), opr_v_int(1), opr_v_bool(true))), 0);
    }
    of_recs_free(&rs);
    for (int k = 0; k < nk; k++) opr_tensor_release(keep[k]);
    opr_tensor *all[] = {w, idx, pad, r, x, xi, mask_i, mask, value, emb};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) opr_tensor_release(all[k]);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn_ops");
    TCase *tc = tcase_create("nn_ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_embedding_values);
    tcase_add_test(tc, test_embedding_grad_duplicates_and_padding);
    tcase_add_test(tc, test_embedding_errors);
    tcase_add_test(tc, test_embedding_gradcheck);
    tcase_add_test(tc, test_dropout_reproducible);
    tcase_add_test(tc, test_dropout_statistics);
    tcase_add_test(tc, test_dropout_special_cases);
    tcase_add_test(tc, test_dropout_backward_saves_nothing);
    tcase_add_test(tc, test_dropout_plans_reused);
    tcase_add_test(tc, test_dropout_gradcheck);
    tcase_add_test(tc, test_dropout_device_matches_cpu);
    tcase_add_test(tc, test_triangles);
    tcase_add_test(tc, test_masked_fill);
    tcase_add_test(tc, test_arg_extrema);
    tcase_add_test(tc, test_against_pytorch);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
