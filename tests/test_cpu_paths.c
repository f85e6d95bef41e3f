/* The CPU plugin's layout-specific loops of amax / amin, maximum / minimum, cumsum,
 * index / index_put and scatter_reduce, against plain reference loops written here:
 * each op on a contiguous input (its vector or row-wise path), on a transposed view (its
 * element-by-element path) and over inner and outer dims, at sizes past the plugin's
 * parallel threshold, with NaN, ties, signed zeros and empty dims. Where the order of
 * the additions is part of the contract (cumsum's running sums, index_put's repeated
 * rows, scatter_reduce's rows in index order) the results are compared bit for bit, so
 * a loop that reordered them would show. The registry's samples (test_aten_samples,
 * opreg check) cover the small shapes. */
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;
static void setup(void) { ctx = tu_ctx(); tu_seed(17); }
static void teardown(void) { tu_ctx_free(ctx); }

/* R x C: past CPU_PAR_THRESHOLD (32768 elements), so that the parallel loops run. */
enum { R = 260, C = 150 };

/* An element-wise check: the assertion runs only on a mismatch, since check records
 * every assertion it runs (a write to a pipe), which would dominate this suite's time
 * over its few million elements. */
#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) ck_assert_msg(cond, __VA_ARGS__);      \
    } while (0)

static opr_tensor *from(opr_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, data, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* The elements of t in its dtype, row-major (malloc'd). */
static void *host(const opr_tensor *t, size_t es)
{
    const size_t n = (size_t)opr_tensor_numel(t);
    void *p = malloc((n ? n : 1) * es);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(opr_tensor_copy_to_host(t, p, n * es), OPR_OK);
    return p;
}

static opr_tensor *transposed(opr_tensor *t)
{
    opr_tensor *v = opr_tensor_transpose(t, 0, 1);
    ck_assert_ptr_nonnull(v);
    return v;
}

/* ------------------------------------------------------------------ amax / amin */

/* fill 0: random values with planted specials: NaN in rows 3 and 200 (both signs of the
 * NaN), a row and a column of zeros of both signs, the extremum of row 5 tied three
 * times. 1, 2: all negative, all positive (an extremum does not start from 0). */
static void fill_values(double *v, int fill)
{
    for (int i = 0; i < R * C; i++) v[i] = fill == 1 ? tu_uniform(-100, -1) : fill == 2 ? tu_uniform(1, 100) : tu_uniform(-100, 100);
    if (fill) return;
    v[3 * C + 7] = NAN;
    v[200 * C + C - 1] = -NAN;
    for (int j = 0; j < C; j++) v[9 * C + j] = j % 2 ? -0.0 : 0.0;
    for (int i = 0; i < R; i++) v[i * C + 11] = i % 3 ? -0.0 : 0.0;
    v[5 * C + 1] = v[5 * C + 50] = v[5 * C + C - 1] = 500;
}

/* The reference extremum of v[start + k * step], k < n; NaN wins. */
static double ref_ext(const double *v, int64_t start, int64_t step, int64_t n, bool max)
{
    double m = max ? -INFINITY : INFINITY;
    for (int64_t k = 0; k < n; k++) {
        const double x = v[start + k * step];
        if (isnan(x)) return NAN;
        if (max ? x > m : x < m) m = x;
    }
    return m;
}

static void expect_same(double got, double want, const char *what, int64_t i)
{
    if (isnan(want)) EXPECT(isnan(got), "%s [%lld]: %g, not NaN", what, (long long)i, got);
    else EXPECT(got == want, "%s [%lld]: %.17g, not %.17g", what, (long long)i, got, want);
}

START_TEST(extrema_every_layout)
{
    static double v[R * C];
    fill_values(v, _i);
    const opr_dtype dts[] = {OPR_F32, OPR_F64};
    const int64_t shape[2] = {R, C}, d0[1] = {0}, d1[1] = {1};
    for (int t = 0; t < 2; t++) {
        opr_tensor *x;
        if (dts[t] == OPR_F32) {
            static float f[R * C];
            for (int i = 0; i < R * C; i++) f[i] = (float)v[i];
            x = from(OPR_F32, 2, shape, f);
        } else {
            x = from(OPR_F64, 2, shape, v);
        }
        opr_tensor *xt = transposed(x); /* [C, R]: element (j, i) is v[i * C + j] */
        for (int mx = 0; mx < 2; mx++) {
            const char *op = mx ? "amax" : "amin";
            /* over dim 1 (rows, contiguous), dim 0 (the column path), every dim (the
             * split path), and the transposed view's dims (strided slices) */
            const struct {
                opr_tensor *in;
                const int64_t *dim;
                int ndim;
                int64_t n_out, n_red, out_step, red_step;
            } cases[] = {
                {x, d1, 1, R, C, C, 1},    {x, d0, 1, C, R, 1, C},    {x, NULL, 0, 1, R * C, 0, 1},
                {xt, d0, 1, R, C, C, 1},   {xt, d1, 1, C, R, 1, C},
            };
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                opr_value a[3] = {opr_v_tensor(cases[k].in), opr_v_ints(cases[k].dim, cases[k].ndim), opr_v_bool(k == 1)};
                opr_tensor *y = tu_call1(ctx, op, a, 3);
                ck_assert_int_eq(opr_tensor_numel(y), cases[k].n_out);
                double *got = tu_to_f64(y);
                for (int64_t o = 0; o < cases[k].n_out; o++) {
                    /* the input as f32 where it is: the extremum is one of its values */
                    double want = ref_ext(v, o * cases[k].out_step, cases[k].red_step, cases[k].n_red, mx);
                    if (dts[t] == OPR_F32) want = (float)want;
                    char what[64];
                    snprintf(what, sizeof what, "%s %s case %zu", op, dts[t] == OPR_F32 ? "f32" : "f64", k);
                    expect_same(got[o], want, what, o);
                }
                free(got);
                opr_tensor_release(y);
            }
        }
        /* [20, 30, 65] over dims 0 and 2: slices of two strides, folded element by
         * element */
        const int64_t s3[3] = {20, 30, 65}, d02[2] = {0, 2};
        opr_tensor *x3 = opr_tensor_view_shape(x, s3, 3);
        for (int mx = 0; mx < 2; mx++) {
            opr_tensor *y = tu_call1(ctx, mx ? "amax" : "amin", (opr_value[]){opr_v_tensor(x3), opr_v_ints(d02, 2)}, 2);
            double *got = tu_to_f64(y);
            for (int o = 0; o < 30; o++) {
                double want = mx ? -INFINITY : INFINITY;
                for (int p = 0; p < 20 && !isnan(want); p++)
                    for (int q = 0; q < 65; q++) {
                        const double u = dts[t] == OPR_F32 ? (float)v[p * 1950 + o * 65 + q] : v[p * 1950 + o * 65 + q];
                        if (isnan(u)) { want = NAN; break; }
                        if (mx ? u > want : u < want) want = u;
                    }
                expect_same(got[o], want, mx ? "amax [20, 30, 65] dims 0, 2" : "amin [20, 30, 65] dims 0, 2", o);
            }
            free(got);
            opr_tensor_release(y);
        }
        opr_tensor_release(x3);
        opr_tensor_release(xt);
        opr_tensor_release(x);
    }
}
END_TEST

START_TEST(extrema_i64_and_empty)
{
    static int64_t v[R * C];
    static double w[R * C];
    for (int i = 0; i < R * C; i++) w[i] = (double)(v[i] = (int64_t)tu_uniform(-1e6, 1e6));
    v[7] = INT64_MIN;
    v[R * C - 1] = INT64_MAX;
    w[7] = -INFINITY; /* stand-ins that order the same */
    w[R * C - 1] = INFINITY;
    const int64_t shape[2] = {R, C}, d0[1] = {0}, d1[1] = {1};
    opr_tensor *x = from(OPR_I64, 2, shape, v);
    for (int mx = 0; mx < 2; mx++)
        for (int d = 0; d < 2; d++) {
            opr_value a[2] = {opr_v_tensor(x), opr_v_ints(d ? d1 : d0, 1)};
            opr_tensor *y = tu_call1(ctx, mx ? "amax" : "amin", a, 2);
            int64_t *got = host(y, sizeof(int64_t));
            const int64_t n_out = d ? R : C;
            for (int64_t o = 0; o < n_out; o++) {
                const double want = ref_ext(w, d ? o * C : o, d ? 1 : C, d ? C : R, mx);
                const int64_t wi = isinf(want) ? (want > 0 ? INT64_MAX : INT64_MIN) : (int64_t)want;
                EXPECT(got[o] == wi, "%s i64 dim %d [%lld]", mx ? "amax" : "amin", d, (long long)o);
            }
            free(got);
            opr_tensor_release(y);
        }
    opr_tensor_release(x);
    /* kept dims may be empty; a reduced one may not */
    const int64_t e0[2] = {0, 5}, e1[2] = {5, 0};
    opr_tensor *a0 = opr_tensor_new(ctx, OPR_F32, 2, e0, OPR_CPU), *a1 = opr_tensor_new(ctx, OPR_F32, 2, e1, OPR_CPU);
    opr_tensor *y = tu_call1(ctx, "amax", (opr_value[]){opr_v_tensor(a0), opr_v_ints(d1, 1)}, 2);
    ck_assert_int_eq(opr_tensor_numel(y), 0);
    opr_tensor_release(y);
    tu_expect_fail(ctx, "amin", (opr_value[]){opr_v_tensor(a1), opr_v_ints(d1, 1)}, 2, 1, OPR_ERR_INVALID, "check failed");
    opr_tensor_release(a0);
    opr_tensor_release(a1);
}
END_TEST

/* ------------------------------------------------------------------ maximum / minimum */

/* PyTorch's rule: NaN if either is NaN, else the larger (smaller), the first at a tie. */
static double ref_pick(double a, double b, bool max)
{
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return (max ? b > a : b < a) ? b : a;
}

START_TEST(maximum_minimum_nan_and_zeros)
{
    enum { N = 40000 };
    static double a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = tu_uniform(-4, 4);
        b[i] = i % 5 ? tu_uniform(-4, 4) : a[i];
    }
    a[10] = NAN, b[11] = NAN, a[12] = b[12] = NAN;
    a[13] = -0.0, b[13] = 0.0, a[14] = 0.0, b[14] = -0.0, a[15] = INFINITY, b[16] = -INFINITY;
    const int64_t n[1] = {N}, rc[2] = {200, 200};
    for (int t = 0; t < 2; t++) {
        const opr_dtype dt = t ? OPR_F64 : OPR_F32;
        static float af[N], bf[N];
        for (int i = 0; i < N; i++) af[i] = (float)a[i], bf[i] = (float)b[i];
        opr_tensor *x = from(dt, 1, n, t ? (void *)a : (void *)af), *y = from(dt, 1, n, t ? (void *)b : (void *)bf);
        /* the same elements as transposed [200, 200] views: the strided loop */
        opr_tensor *x2 = from(dt, 2, rc, t ? (void *)a : (void *)af), *y2 = from(dt, 2, rc, t ? (void *)b : (void *)bf);
        opr_tensor *xt = transposed(x2), *yt = transposed(y2);
        for (int mx = 0; mx < 2; mx++) {
            const char *op = mx ? "maximum" : "minimum";
            opr_tensor *r = tu_call1(ctx, op, (opr_value[]){opr_v_tensor(x), opr_v_tensor(y)}, 2);
            opr_tensor *rt = tu_call1(ctx, op, (opr_value[]){opr_v_tensor(xt), opr_v_tensor(yt)}, 2);
            double *g = tu_to_f64(r), *gt = tu_to_f64(rt);
            for (int i = 0; i < N; i++) {
                const double want = ref_pick(t ? a[i] : af[i], t ? b[i] : bf[i], mx);
                expect_same(g[i], want, op, i);
                /* rt[j, k] = op(x[k, j], y[k, j]) */
                const int j = i / 200, k = i % 200;
                expect_same(gt[i], ref_pick(t ? a[k * 200 + j] : af[k * 200 + j], t ? b[k * 200 + j] : bf[k * 200 + j], mx),
                            op, i);
            }
            /* a tie of zeros gives the first operand, sign included */
            ck_assert_msg(signbit(g[13]) && !signbit(g[14]), "%s: the zeros' signs are not the first operand's", op);
            free(g);
            free(gt);
            opr_tensor_release(r);
            opr_tensor_release(rt);
        }
        opr_tensor_release(xt);
        opr_tensor_release(yt);
        opr_tensor_release(x2);
        opr_tensor_release(y2);
        opr_tensor_release(x);
        opr_tensor_release(y);
    }
}
END_TEST

/* ------------------------------------------------------------------ cumsum */

/* cumsum of t (contiguous shape[0..2], or its transpose when `tr`) along dim d against
 * running sums in the plugin's documented order and precision (f32 in double), bit for
 * bit. */
static void check_cumsum_f32(const int64_t *shape, int ndim, int d, bool tr)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    float *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)tu_uniform(-1, 1) * (float)(1 + i % 97);
    opr_tensor *x = from(OPR_F32, ndim, shape, v), *in = tr ? transposed(x) : opr_tensor_retain(x);
    opr_tensor *y = tu_call1(ctx, "cumsum", (opr_value[]){opr_v_tensor(in), opr_v_int(d)}, 2);
    float *got = host(y, sizeof(float));
    /* logical shape and strides of `in` over v */
    int64_t sh[3], st[3], cs = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        sh[k] = shape[k];
        st[k] = cs;
        cs *= shape[k];
    }
    if (tr) {
        int64_t t0 = sh[0]; sh[0] = sh[1]; sh[1] = t0;
        t0 = st[0]; st[0] = st[1]; st[1] = t0;
    }
    for (int k = ndim; k < 3; k++) sh[k] = 1, st[k] = 0;
    int64_t ost[3] = {sh[1] * sh[2], sh[2], 1};
    for (int64_t i0 = 0; i0 < (d == 0 ? 1 : sh[0]); i0++)
        for (int64_t i1 = 0; i1 < (d == 1 ? 1 : sh[1]); i1++)
            for (int64_t i2 = 0; i2 < (d == 2 ? 1 : sh[2]); i2++) {
                double acc = 0;
                for (int64_t k = 0; k < sh[d]; k++) {
                    int64_t idx[3] = {i0, i1, i2};
                    idx[d] = k;
                    acc += (double)v[idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2]];
                    const float want = (float)acc, g = got[idx[0] * ost[0] + idx[1] * ost[1] + idx[2] * ost[2]];
                    EXPECT(!memcmp(&g, &want, sizeof g), "cumsum dim %d%s at [%lld %lld %lld]: %.9g, not %.9g", d,
                                  tr ? " (transposed)" : "", (long long)idx[0], (long long)idx[1], (long long)idx[2], g,
                                  want);
                }
            }
    free(got);
    free(v);
    opr_tensor_release(y);
    opr_tensor_release(in);
    opr_tensor_release(x);
}

START_TEST(cumsum_rows_and_lines)
{
    const int64_t m[2] = {R, C}, t3[3] = {7, 40, 150};
    check_cumsum_f32(m, 2, 0, false); /* outer dim: row by row */
    check_cumsum_f32(m, 2, 1, false); /* lines */
    check_cumsum_f32(m, 2, 0, true);  /* strided lines */
    check_cumsum_f32(m, 2, 1, true);
    check_cumsum_f32(t3, 3, 1, false); /* a middle dim: rows in each of 7 blocks */
    check_cumsum_f32(t3, 3, 0, false);
    /* i64 wraps on the row path too */
    const int64_t s[2] = {3, 40};
    int64_t v[120];
    for (int i = 0; i < 120; i++) v[i] = INT64_MAX - i;
    opr_tensor *x = from(OPR_I64, 2, s, v);
    opr_tensor *y = tu_call1(ctx, "cumsum", (opr_value[]){opr_v_tensor(x), opr_v_int(0)}, 2);
    int64_t *g = host(y, sizeof(int64_t));
    for (int j = 0; j < 40; j++) {
        uint64_t acc = 0;
        for (int i = 0; i < 3; i++) {
            acc += (uint64_t)v[i * 40 + j];
            EXPECT(g[i * 40 + j] == (int64_t)acc, "cumsum i64 [%d %d]", i, j);
        }
    }
    free(g);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------ index, index_put */

enum { NI = 600 }; /* rows taken, with repeats, from R */

static opr_tensor *row_index(int64_t *iv)
{
    for (int k = 0; k < NI; k++) iv[k] = (int64_t)tu_uniform(-R, R); /* negative: from the end */
    iv[1] = iv[0];
    const int64_t n[1] = {NI};
    return from(OPR_I64, 1, n, iv);
}

START_TEST(index_rows)
{
    static float v[R * C];
    for (int i = 0; i < R * C; i++) v[i] = (float)tu_uniform(-1, 1);
    int64_t iv[NI];
    const int64_t shape[2] = {R, C};
    opr_tensor *x = from(OPR_F32, 2, shape, v), *idx = row_index(iv);
    opr_tensor *items[1] = {idx};
    /* x[i] (whole contiguous rows) and x.T[i] (rows of a strided view) */
    for (int tr = 0; tr < 2; tr++) {
        opr_tensor *in = tr ? transposed(x) : opr_tensor_retain(x);
        if (tr) /* x.T has C rows */
            for (int k = 0; k < NI; k++) iv[k] = iv[k] % C;
        opr_tensor *it = tr ? from(OPR_I64, 1, (const int64_t[]){NI}, iv) : opr_tensor_retain(idx);
        items[0] = it;
        opr_tensor *y = tu_call1(ctx, "index.Tensor", (opr_value[]){opr_v_tensor(in), opr_v_tensors(items, 1)}, 2);
        float *g = host(y, sizeof(float));
        const int64_t cols = tr ? R : C;
        for (int k = 0; k < NI; k++) {
            const int64_t r = iv[k] < 0 ? iv[k] + (tr ? C : R) : iv[k];
            for (int64_t j = 0; j < cols; j++) {
                const float want = tr ? v[j * C + r] : v[r * C + j];
                EXPECT(g[k * cols + j] == want, "index%s row %d col %lld", tr ? " (transposed)" : "", k,
                              (long long)j);
            }
        }
        free(g);
        opr_tensor_release(y);
        opr_tensor_release(it);
        opr_tensor_release(in);
    }
    opr_tensor_release(idx);
    opr_tensor_release(x);
}
END_TEST

/* index_put(accumulate=True) of NI rows (repeats included) into R x C against the sum
 * in index order, bit for bit: the row-wise adds, split between threads by columns,
 * keep that order. Values contiguous, broadcast (one row) and transposed. */
START_TEST(index_put_accumulate_order)
{
    static float v[R * C], vals[NI * C], want[R * C];
    for (int i = 0; i < R * C; i++) v[i] = (float)tu_uniform(-1, 1);
    for (int i = 0; i < NI * C; i++) vals[i] = (float)tu_uniform(-1, 1) * (float)(1 + i % 1000);
    int64_t iv[NI];
    const int64_t shape[2] = {R, C}, vshape[2] = {NI, C}, vtshape[2] = {C, NI}, row[1] = {C};
    opr_tensor *x = from(OPR_F32, 2, shape, v), *idx = row_index(iv);
    opr_tensor *items[1] = {idx};
    static float valst[C * NI];
    for (int k = 0; k < NI; k++)
        for (int j = 0; j < C; j++) valst[j * NI + k] = vals[k * C + j];
    opr_tensor *vc = from(OPR_F32, 2, vshape, vals), *vrow = from(OPR_F32, 1, row, vals);
    opr_tensor *vtb = from(OPR_F32, 2, vtshape, valst), *vt = transposed(vtb);
    opr_tensor *vs[3] = {vc, vrow, vt};
    for (int c = 0; c < 3; c++) {
        memcpy(want, v, sizeof want);
        for (int k = 0; k < NI; k++) {
            const int64_t r = iv[k] < 0 ? iv[k] + R : iv[k];
            for (int j = 0; j < C; j++) want[r * C + j] += c == 1 ? vals[j] : vals[k * C + j];
        }
        opr_value a[4] = {opr_v_tensor(x), opr_v_tensors(items, 1), opr_v_tensor(vs[c]), opr_v_bool(true)};
        opr_tensor *y = tu_call1(ctx, "index_put", a, 4);
        float *g = host(y, sizeof(float));
        ck_assert_msg(!memcmp(g, want, sizeof want), "index_put accumulate, values %s: sums differ",
                      c == 0 ? "contiguous" : c == 1 ? "broadcast" : "transposed");
        free(g);
        opr_tensor_release(y);
    }
    /* in place, the same sums */
    opr_value a[4] = {opr_v_tensor(x), opr_v_tensors(items, 1), opr_v_tensor(vt), opr_v_bool(true)};
    opr_tensor *y = tu_call1(ctx, "index_put_", a, 4);
    ck_assert_ptr_eq(y, x);
    float *g = host(x, sizeof(float));
    ck_assert(!memcmp(g, want, sizeof want));
    free(g);
    opr_tensor_release(y);
    opr_tensor_release(vt);
    opr_tensor_release(vtb);
    opr_tensor_release(vrow);
    opr_tensor_release(vc);
    opr_tensor_release(idx);
    opr_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------ scatter_reduce */

/* scatter_reduce along dim 0 of a [S, W] self with a [N, W] index (or dim 1 of a
 * [B, S, W] one): the blocked traversal. Every reduction, with and without self,
 * against the reduction of each column in index order (f64, bit for bit; mean divides
 * once at the end, as PyTorch). */
START_TEST(scatter_reduce_blocked)
{
    enum { B = 3, S = 40, N = 110, W = 300 };
    static double self[B * S * W], src[B * N * W], want[B * S * W];
    static int64_t idx[B * N * W];
    static int count[B * S * W];
    for (int i = 0; i < B * S * W; i++) self[i] = tu_uniform(0.5, 1.5);
    for (int i = 0; i < B * N * W; i++) {
        src[i] = tu_uniform(0.5, 1.5);
        idx[i] = (int64_t)tu_uniform(0, S);
    }
    src[5] = NAN; /* reaches one place of batch 0 */
    const int64_t xs[3] = {B, S, W}, is[3] = {B, N, W};
    static const char *const reds[] = {"sum", "prod", "mean", "amax", "amin"};
    for (int nd = 2; nd <= 3; nd++) {
        /* 2-D: batch 0 alone (the first elements of each array) */
        opr_tensor *x = from(OPR_F64, nd, xs + 3 - nd, self), *ix = from(OPR_I64, nd, is + 3 - nd, idx);
        opr_tensor *s = from(OPR_F64, nd, is + 3 - nd, src);
        const int nb = nd == 3 ? B : 1;
        for (int r = 0; r < 5; r++)
            for (int inc = 0; inc < 2; inc++) {
                memcpy(want, self, sizeof want);
                memset(count, 0, sizeof count);
                for (int b = 0; b < nb; b++)
                    for (int w = 0; w < W; w++) {
                        for (int k = 0; k < N; k++) { /* identities first where self is left out */
                            const int o = (b * S + (int)idx[(b * N + k) * W + w]) * W + w;
                            if (!inc) want[o] = r == 1 ? 1 : r == 3 ? -INFINITY : r == 4 ? INFINITY : 0;
                        }
                        for (int k = 0; k < N; k++) {
                            const int o = (b * S + (int)idx[(b * N + k) * W + w]) * W + w;
                            const double u = src[(b * N + k) * W + w];
                            double *p = &want[o];
                            if (r == 0 || r == 2) *p += u;
                            else if (r == 1) *p *= u;
                            else if (r == 3) *p = isnan(u) || u > *p ? u : *p;
                            else *p = isnan(u) || u < *p ? u : *p;
                            count[o]++;
                        }
                    }
                if (r == 2)
                    for (int o = 0; o < nb * S * W; o++)
                        if (count[o] + inc > 1) want[o] /= count[o] + inc;
                opr_value a[6] = {opr_v_tensor(x), opr_v_int(nd - 2), opr_v_tensor(ix), opr_v_tensor(s),
                                  opr_v_string(reds[r]), opr_v_bool(inc)};
                opr_tensor *y = tu_call1(ctx, "scatter_reduce.two", a, 6);
                double *g = host(y, sizeof(double));
                for (int o = 0; o < nb * S * W; o++)
                    EXPECT(!memcmp(&g[o], &want[o], sizeof g[o]) || (isnan(g[o]) && isnan(want[o])),
                                  "scatter_reduce %s include_self=%d %d-d [%d]: %.17g, not %.17g", reds[r], inc, nd, o,
                                  g[o], want[o]);
                free(g);
                opr_tensor_release(y);
            }
        opr_tensor_release(s);
        opr_tensor_release(ix);
        opr_tensor_release(x);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_paths");
    TCase *tc = tcase_create("cpu_paths");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, extrema_every_layout, 0, 3);
    tcase_add_test(tc, extrema_i64_and_empty);
    tcase_add_test(tc, maximum_minimum_nan_and_zeros);
    tcase_add_test(tc, cumsum_rows_and_lines);
    tcase_add_test(tc, index_rows);
    tcase_add_test(tc, index_put_accumulate_order);
    tcase_add_test(tc, scatter_reduce_blocked);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
