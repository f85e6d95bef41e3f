/* The CPU plugin's vector loops (plugins/cpu/cpu_vmath.h), every ISA table the machine
 * can run, checked directly: a large output (streaming stores, from any alignment of y)
 * holds bit for bit what the same function writes in small pieces (normal stores);
 * relu keeps NaN and -0 like `x < 0 ? 0 : x`; the maximum passes over NaN, amax / amin
 * and maximum / minimum propagate it; the eight-row column sum adds in its documented
 * order. The op-level suites (test_kernels and its ISA-capped runs) check
 * the values themselves. */
#include "plugins/cpu/cpu_vmath.h"

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool runs_here(const cpu_vmath *t)
{
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(t->isa, "avx512")) return avx2 && __builtin_cpu_supports("avx512f");
    if (!strcmp(t->isa, "avx2")) return avx2;
    return true;
}

static const cpu_vmath *const tables[] = {&cpu_vmath_sse2, &cpu_vmath_avx2, &cpu_vmath_avx512};

/* Table i, or NULL (the test is skipped, and says why) where this CPU cannot run it. */
static const cpu_vmath *table_here(int i)
{
    if (runs_here(tables[i])) return tables[i];
    printf("skipped: this CPU lacks %s\n", tables[i]->isa);
    return NULL;
}

/* Values over [-20, 20) with NaN, infinities and signed zeros among them. */
static double value(int64_t i)
{
    switch (i % 997) {
    case 5: return NAN;
    case 6: return INFINITY;
    case 7: return -INFINITY;
    case 8: return 0.0;
    case 9: return -0.0;
    default: return (double)((i * 7919) % 40000) / 1000.0 - 20.0;
    }
}

#define MAP_CHECK(T, FN, NAME)                                                                          \
    do {                                                                                                \
        const int64_t n = CPU_VM_STREAM_BYTES / (int64_t)sizeof(T) + 37;                                \
        T *x = malloc((size_t)n * sizeof(T)), *want = malloc((size_t)n * sizeof(T));                    \
        T *buf = aligned_alloc(64, ((size_t)(n + 16) * sizeof(T) + 63) / 64 * 64);                      \
        ck_assert(x && want && buf);                                                                    \
        for (int64_t i = 0; i < n; i++) x[i] = (T)value(i);                                             \
        for (int64_t i = 0; i < n; i += 4096) FN(n - i < 4096 ? n - i : 4096, x + i, want + i);         \
        for (int off = 0; off < 4; off++) { /* y aligned, then 1..3 elements past a vector */           \
            memset(buf, 0x55, (size_t)(n + 16) * sizeof(T));                                            \
            FN(n, x, buf + off);                                                                        \
            ck_assert_msg(!memcmp(buf + off, want, (size_t)n * sizeof(T)), "%s %s %s: offset %d differs", \
                          t->isa, NAME, #T, off);                                                       \
            for (int k = 0; k < off; k++) /* nothing before y written */                                \
                ck_assert_msg(((unsigned char *)buf)[k * sizeof(T)] == 0x55, "%s %s: wrote before y", t->isa, NAME); \
        }                                                                                               \
        FN(n, x, x); /* in place */                                                                     \
        ck_assert_msg(!memcmp(x, want, (size_t)n * sizeof(T)), "%s %s %s: in place differs", t->isa, NAME, #T); \
        free(x);                                                                                        \
        free(want);                                                                                     \
        free(buf);                                                                                      \
    } while (0)

START_TEST(large_outputs_equal_small_pieces)
{
    const cpu_vmath *t = table_here(_i);
    if (!t) return;
    const struct {
        const char *name;
        cpu_vfn_f32 f32;
        cpu_vfn_f64 f64;
    } fns[] = {
        {"exp", t->exp_f32, t->exp_f64},         {"log", t->log_f32, t->log_f64},
        {"tanh", t->tanh_f32, t->tanh_f64},      {"erf", t->erf_f32, t->erf_f64},
        {"sigmoid", t->sigmoid_f32, t->sigmoid_f64}, {"sqrt", t->sqrt_f32, t->sqrt_f64},
        {"relu", t->relu_f32, t->relu_f64},
    };
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        MAP_CHECK(float, fns[k].f32, fns[k].name);
        MAP_CHECK(double, fns[k].f64, fns[k].name);
    }
}
END_TEST

START_TEST(relu_keeps_nan_and_negative_zero)
{
    const cpu_vmath *t = table_here(_i);
    if (!t) return;
    enum { N = 37 }; /* full vectors and a tail */
    float xf[N], yf[N];
    double xd[N], yd[N];
    for (int i = 0; i < N; i++) xd[i] = xf[i] = (float)value(i);
    xd[0] = xf[0] = -0.0f;
    xd[1] = xf[1] = NAN;
    xd[N - 1] = xf[N - 1] = -NAN;
    t->relu_f32(N, xf, yf);
    t->relu_f64(N, xd, yd);
    for (int i = 0; i < N; i++) {
        const float wf = xf[i] < 0 ? 0 : xf[i];
        const double wd = xd[i] < 0 ? 0 : xd[i];
        ck_assert_msg(!memcmp(&yf[i], &wf, sizeof wf), "%s relu f32 of %g gave %g", t->isa, xf[i], yf[i]);
        ck_assert_msg(!memcmp(&yd[i], &wd, sizeof wd), "%s relu f64 of %g gave %g", t->isa, xd[i], yd[i]);
    }
}
END_TEST

START_TEST(max_passes_over_nan)
{
    const cpu_vmath *t = table_here(_i);
    if (!t) return;
    enum { N = 1000 };
    static float xf[N];
    static double xd[N];
    for (int i = 0; i < N; i++) xd[i] = xf[i] = (float)value(i + 400); /* NaN at 602, inf at 603 */
    xd[600] = xf[600] = 25.0f; /* the largest, past the first 64 */
    const int64_t lens[] = {0, 1, 5, 63, 64, 65, 601, N};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        double want = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            if (xd[i] > want) want = xd[i];
        ck_assert_msg(t->max_f32(n, xf) == (float)want, "%s max f32 of %lld: %g, not %g", t->isa, (long long)n,
                      t->max_f32(n, xf), want);
        ck_assert_msg(t->max_f64(n, xd) == want, "%s max f64 of %lld: %g, not %g", t->isa, (long long)n,
                      t->max_f64(n, xd), want);
    }
    float nanf_[70];
    for (int i = 0; i < 70; i++) nanf_[i] = NAN;
    ck_assert_msg(t->max_f32(70, nanf_) == -INFINITY, "%s: max of NaNs is %g", t->isa, t->max_f32(70, nanf_));
}
END_TEST

/* amax/amin: NaN anywhere wins, else the extremum (-inf / +inf for none); maximum /
 * minimum: NaN from either side, else the larger / smaller, the first at a tie, bit for
 * bit (signed zeros); addto: y + x. Lengths around the 32 lanes and the vector widths. */
START_TEST(extrema_keep_nan)
{
    const cpu_vmath *t = table_here(_i);
    if (!t) return;
    enum { N = 1000 };
    static float af[N], bf[N], yf[N];
    static double ad[N], bd[N], yd[N];
    for (int i = 0; i < N; i++) {
        ad[i] = af[i] = (float)value(i + 100); /* NaN at 902, inf at 903, -inf at 904 */
        bd[i] = bf[i] = i % 3 ? (float)value(i * 3 + 1) : af[i];
    }
    ad[7] = af[7] = -0.0f, bd[7] = bf[7] = 0.0f, bd[8] = bf[8] = NAN;
    const int64_t lens[] = {0, 1, 5, 31, 32, 33, 100, 902, 903, N};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        double mx = -INFINITY, mn = INFINITY;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(ad[i])) { mx = mn = NAN; break; }
            mx = ad[i] > mx ? ad[i] : mx;
            mn = ad[i] < mn ? ad[i] : mn;
        }
        const double got[4] = {t->amax_f32(n, af), t->amax_f64(n, ad), t->amin_f32(n, af), t->amin_f64(n, ad)};
        const double want[4] = {(float)mx, mx, (float)mn, mn};
        for (int k = 0; k < 4; k++)
            ck_assert_msg(got[k] == want[k] || (isnan(got[k]) && isnan(want[k])), "%s %s of %lld: %g, not %g", t->isa,
                          k < 2 ? "amax" : "amin", (long long)n, got[k], want[k]);
    }
    for (int m = 0; m < 2; m++) {
        (m ? t->maximum_f32 : t->minimum_f32)(N, af, bf, yf);
        (m ? t->maximum_f64 : t->minimum_f64)(N, ad, bd, yd);
        for (int i = 0; i < N; i++) {
            const float a = af[i], b = bf[i];
            const float wf = isnan(a) ? a : isnan(b) ? b : (m ? b > a : b < a) ? b : a;
            const double wd = isnan(ad[i]) ? ad[i] : isnan(bd[i]) ? bd[i] : (m ? bd[i] > ad[i] : bd[i] < ad[i]) ? bd[i] : ad[i];
            ck_assert_msg(!memcmp(&yf[i], &wf, sizeof wf) || (isnan(yf[i]) && isnan(wf)), "%s %s f32 [%d]", t->isa,
                          m ? "maximum" : "minimum", i);
            ck_assert_msg(!memcmp(&yd[i], &wd, sizeof wd) || (isnan(yd[i]) && isnan(wd)), "%s %s f64 [%d]", t->isa,
                          m ? "maximum" : "minimum", i);
        }
    }
    memcpy(yf, bf, sizeof yf);
    memcpy(yd, bd, sizeof yd);
    t->addto_f32(N - 3, af, yf);
    t->addto_f64(N - 3, ad, yd);
    for (int i = 0; i < N; i++) {
        const float wf = i < N - 3 ? bf[i] + af[i] : bf[i];
        const double wd = i < N - 3 ? bd[i] + ad[i] : bd[i];
        ck_assert_msg(!memcmp(&yf[i], &wf, sizeof wf) || (isnan(yf[i]) && isnan(wf)), "%s addto f32 [%d]", t->isa, i);
        ck_assert_msg(!memcmp(&yd[i], &wd, sizeof wd) || (isnan(yd[i]) && isnan(wd)), "%s addto f64 [%d]", t->isa, i);
    }
}
END_TEST

START_TEST(eight_rows_in_their_order)
{
    const cpu_vmath *t = table_here(_i);
    if (!t) return;
    enum { W = 45, LD = 50 }; /* rows of 45 columns, 50 apart */
    float xf[8 * LD];
    double xd[8 * LD], wide[8 * LD], accf[W], accd[W], wantf[W], wantd[W];
    /* magnitudes 1e-3..1e3, so that the order of the additions shows in the rounding
     * (f32 values, exact in double, add up exactly in any order: their sum is checked) */
    for (int i = 0; i < 8 * LD; i++) {
        xd[i] = value(i + 10) * pow(10, i % 7 - 3) * (1 + i * 1e-9);
        xf[i] = (float)xd[i];
        wide[i] = xf[i];
    }
    for (int c = 0; c < W; c++) {
        accf[c] = accd[c] = wantf[c] = wantd[c] = c * 0.25;
        const double *r = xd + c, *q = wide + c;
        wantd[c] += ((r[0] + r[LD]) + (r[2 * LD] + r[3 * LD])) + ((r[4 * LD] + r[5 * LD]) + (r[6 * LD] + r[7 * LD]));
        wantf[c] += ((q[0] + q[LD]) + (q[2 * LD] + q[3 * LD])) + ((q[4 * LD] + q[5 * LD]) + (q[6 * LD] + q[7 * LD]));
    }
    t->addrow8_f32(W, xf, LD, accf);
    t->addrow8_f64(W, xd, LD, accd);
    for (int c = 0; c < W; c++) {
        ck_assert_msg(!memcmp(&accf[c], &wantf[c], sizeof wantf[c]), "%s addrow8 f32 column %d", t->isa, c);
        ck_assert_msg(!memcmp(&accd[c], &wantd[c], sizeof wantd[c]), "%s addrow8 f64 column %d", t->isa, c);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_vmath");
    TCase *tc = tcase_create("cpu_vmath");
    const int n = (int)(sizeof tables / sizeof tables[0]);
    tcase_add_loop_test(tc, large_outputs_equal_small_pieces, 0, n);
    tcase_add_loop_test(tc, relu_keeps_nan_and_negative_zero, 0, n);
    tcase_add_loop_test(tc, max_passes_over_nan, 0, n);
    tcase_add_loop_test(tc, extrema_keep_nan, 0, n);
    tcase_add_loop_test(tc, eight_rows_in_their_order, 0, n);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
