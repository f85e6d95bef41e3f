/* Kernel correctness suite: every op of registry/ops/core.yaml that has a kernel is run
 * through opr_call_by_name and compared with a plain C reference computed in double on
 * the host, in every dtype the op lists, on contiguous, transposed, narrowed, expanded
 * (stride 0) and strided inputs, with broadcasting, empty, size-1 and 0-d tensors. The
 * host views are checked for values too, and large cases make the OpenMP paths run.
 *
 * Tolerances: |got - expected| <= tol * (|expected| + 1), tol = 1e-5 for f32 and 1e-12
 * for f64 (exact for i64 and bool); products compare against tol * (|expected| +
 * sum |a||b|), the scale of the rounding error of a dot product. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_KEEP 16384

/* ------------------------------------------------------------------ per-test state */

static opr_ctx *ctx;
static opr_tensor *keep_t[MAX_KEEP]; /* tensors released by teardown */
static int n_keep_t;
static void *keep_m[MAX_KEEP]; /* host buffers freed by teardown */
static int n_keep_m;
static char what[256]; /* the case under test, quoted by failed assertions */

#define WHAT(...) snprintf(what, sizeof what, __VA_ARGS__)
/* ck_assert_msg records a checkpoint on every evaluation (a pipe write in fork mode);
 * loops over elements use this instead, which only reaches Check on failure. */
#define REQUIRE(cond, ...)                         \
    do {                                           \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);    \
    } while (0)

static void setup(void)
{
    ctx = tu_ctx();
    n_keep_t = n_keep_m = 0;
    what[0] = 0;
    tu_seed(0x5eed1234);
}

static void teardown(void)
{
    for (int i = n_keep_t - 1; i >= 0; i--) opr_tensor_release(keep_t[i]);
    for (int i = 0; i < n_keep_m; i++) free(keep_m[i]);
    n_keep_t = n_keep_m = 0;
    tu_ctx_free(ctx);
    ctx = NULL;
}

static opr_tensor *K(opr_tensor *t)
{
    REQUIRE(t != NULL, "%s: NULL tensor: %s", what, opr_last_error());
    REQUIRE(n_keep_t < MAX_KEEP, "too many tensors");
    keep_t[n_keep_t++] = t;
    return t;
}

static void *KM(void *p)
{
    REQUIRE(p != NULL && n_keep_m < MAX_KEEP, "out of memory or too many buffers");
    keep_m[n_keep_m++] = p;
    return p;
}

static double *dalloc(int64_t n) { return KM(calloc((size_t)(n ? n : 1), sizeof(double))); }

static const opr_dtype FLOATS[] = {OPR_F32, OPR_F64};
static const opr_dtype NUMERIC[] = {OPR_F32, OPR_F64, OPR_I64};
static const opr_dtype ALL4[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL};

/* ------------------------------------------------------------------ calls */

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define CALL(op, ...) K(tu_call1(ctx, op, ARGS(__VA_ARGS__)))
#define CALL2(op, v, i, ...) call2(op, ARGS(__VA_ARGS__), v, i)
#define TV(t) opr_v_tensor(t)
#define SH(...) (const int64_t[]){__VA_ARGS__}

static void call2(const char *op, const opr_value *args, int nargs, opr_tensor **v, opr_tensor **i)
{
    opr_tensor *out[2] = {NULL, NULL};
    int rc = opr_call_by_name(ctx, op, args, nargs, out, 2);
    ck_assert_msg(rc == OPR_OK, "%s: %s failed: %s", what, op, opr_last_error());
    *v = K(out[0]);
    *i = K(out[1]);
}

/* ------------------------------------------------------------------ host arrays */

/* A tensor's values in row-major logical order, as doubles. */
typedef struct {
    int nd;
    int64_t sh[OPR_MAX_DIMS];
    int64_t n;
    double *v;
} H;

static int64_t numel_of(int nd, const int64_t *sh)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sh[d];
    return n;
}

/* nd is checked before the shape is copied: with an unchecked count as the copy
 * size, gcc -O3 reports a possible overflow of sh. */
static H H_new(int nd, const int64_t *sh)
{
    REQUIRE(nd >= 0 && nd <= OPR_MAX_DIMS, "reference array with %d dimensions", nd);
    H h = {.nd = nd, .n = numel_of(nd, sh)};
    for (int d = 0; d < nd; d++) h.sh[d] = sh[d];
    h.v = dalloc(h.n);
    return h;
}

static H H_of(const opr_tensor *t)
{
    H h;
    memset(&h, 0, sizeof h);
    h.nd = opr_tensor_ndim(t);
    if (h.nd) memcpy(h.sh, opr_tensor_shape(t), (size_t)h.nd * sizeof *h.sh);
    h.n = opr_tensor_numel(t);
    h.v = KM(tu_to_f64(t));
    return h;
}

static void unravel(int64_t i, int nd, const int64_t *sh, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = sh[d] ? i % sh[d] : 0;
        i = sh[d] ? i / sh[d] : 0;
    }
}

static int64_t ravel(int nd, const int64_t *sh, const int64_t *idx)
{
    int64_t o = 0;
    for (int d = 0; d < nd; d++) o = o * sh[d] + idx[d];
    return o;
}

/* Element of h at position idx of an ond-d broadcast result (right-aligned). */
static double at_bcast(const H *h, int ond, const int64_t *idx)
{
    const int s = ond - h->nd;
    int64_t o = 0;
    for (int d = 0; d < h->nd; d++) o = o * h->sh[d] + (h->sh[d] == 1 ? 0 : idx[d + s]);
    return h->v[o];
}

static int bcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out)
{
    const int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)], y = i < n - nb ? 1 : b[i - (n - nb)];
        REQUIRE(x == y || x == 1 || y == 1, "%s: reference shapes do not broadcast", what);
        out[i] = x == 1 ? y : x;
    }
    return n;
}

static int wrapd(int64_t d, int nd) { return (int)(d < 0 ? d + (nd ? nd : 1) : d); }

/* Rows of h along dim: element j of row (o, in) is at (o * len + j) * inner + in. */
static void row_geom(const H *h, int dim, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = *inner = 1;
    *len = h->nd ? h->sh[dim] : 1;
    for (int d = 0; d < dim; d++) *outer *= h->sh[d];
    for (int d = dim + 1; d < h->nd; d++) *inner *= h->sh[d];
}

static H H_transpose2(const H *h)
{
    const int64_t sh[2] = {h->sh[1], h->sh[0]};
    H t = H_new(2, sh);
    for (int64_t i = 0; i < h->sh[0]; i++)
        for (int64_t j = 0; j < h->sh[1]; j++) t.v[j * h->sh[0] + i] = h->v[i * h->sh[1] + j];
    return t;
}

/* ------------------------------------------------------------------ comparisons */

static double tol_of(opr_dtype dt) { return dt == OPR_F32 ? 1e-5 : dt == OPR_F64 ? 1e-12 : 0; }

static void expect_shape(const opr_tensor *t, opr_dtype dt, int nd, const int64_t *sh)
{
    ck_assert_msg(t != NULL, "%s: no result", what);
    ck_assert_msg(opr_tensor_dtype(t) == dt, "%s: dtype %s, expected %s", what, opr_dtype_name(opr_tensor_dtype(t)),
                  opr_dtype_name(dt));
    ck_assert_msg(opr_tensor_ndim(t) == nd, "%s: %d dims, expected %d", what, opr_tensor_ndim(t), nd);
    for (int d = 0; d < nd; d++)
        ck_assert_msg(opr_tensor_size(t, d) == sh[d], "%s: size %lld at dim %d, expected %lld", what,
                      (long long)opr_tensor_size(t, d), d, (long long)sh[d]);
}

/* t has dtype dt, ref's shape, and ref's values within tol * (|ref| + scale), where
 * scale is 1 when NULL. NaN must match NaN. */
static void expect_close(const opr_tensor *t, opr_dtype dt, const H *ref, double tol, const double *scale)
{
    expect_shape(t, dt, ref->nd, ref->sh);
    H g = H_of(t);
    for (int64_t i = 0; i < ref->n; i++) {
        const double r = ref->v[i], x = g.v[i];
        if (isnan(r)) {
            REQUIRE(isnan(x), "%s: element %lld is %.17g, expected NaN", what, (long long)i, x);
            continue;
        }
        if (isinf(r)) {
            REQUIRE(x == r, "%s: element %lld is %.17g, expected %g", what, (long long)i, x, r);
            continue;
        }
        const double lim = tol * (fabs(r) + (scale ? scale[i] : 1.0));
        REQUIRE(fabs(x - r) <= lim, "%s: element %lld is %.17g, expected %.17g (tolerance %.3g)", what,
                      (long long)i, x, r, lim);
    }
}

#define EXPECT(t, dt, ref) expect_close((t), (dt), &(ref), tol_of(dt), NULL)
#define EXPECT_EXACT(t, dt, ref) expect_close((t), (dt), &(ref), 0, NULL)

/* ------------------------------------------------------------------ inputs */

static opr_tensor *T_vals(opr_dtype dt, int nd, const int64_t *sh, const double *v)
{
    const int64_t n = numel_of(nd, sh);
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    ck_assert_ptr_nonnull(buf);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case OPR_F32: ((float *)buf)[i] = (float)v[i]; break;
        case OPR_F64: ((double *)buf)[i] = v[i]; break;
        case OPR_I64: ((int64_t *)buf)[i] = (int64_t)v[i]; break;
        case OPR_BOOL: ((uint8_t *)buf)[i] = v[i] != 0; break;
        default: ck_abort_msg("T_vals: unsupported dtype");
        }
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, nd, sh, buf, OPR_CPU);
    free(buf);
    return K(t);
}

static opr_tensor *T_idx(int n, const int64_t *v)
{
    double d[64] = {0};
    ck_assert(n <= 64);
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    const int64_t sh[1] = {n};
    return T_vals(OPR_I64, 1, sh, d);
}

/* G_REAL: uniform in [lo, hi) (tu_rand); G_INT: integers in [lo, hi) in any dtype, so
 * that ties and equal values occur. */
enum { G_REAL, G_INT };

static opr_tensor *T_gen(int g, opr_dtype dt, int nd, const int64_t *sh, double lo, double hi)
{
    if (g == G_REAL) return K(tu_rand(ctx, dt, nd, sh, lo, hi));
    const int64_t n = numel_of(nd, sh);
    double *v = dalloc(n);
    for (int64_t i = 0; i < n; i++) v[i] = floor(tu_uniform(lo, hi));
    return T_vals(dt, nd, sh, v);
}

/* Layouts of an input with a given logical shape. */
enum { L_C, L_T, L_N, L_E, L_S, L_NLAY };
static const char *const lay_name[] = {"contiguous", "transposed", "narrowed", "expanded", "strided"};

typedef struct {
    int nd;
    int64_t sh[4];
    int lay;
} spec;

/* L_T: a transpose of the last two dims; L_N: narrowed in the last dim (row stride larger
 * than the row); L_E: expanded (stride 0) in the first dim of size > 1; L_S: every
 * stride doubled (a narrowed, squeezed extra dim). Falls back to contiguous where the
 * layout does not apply. */
static opr_tensor *T_lay(int lay, int g, opr_dtype dt, int nd, const int64_t *sh, double lo, double hi)
{
    int64_t bs[OPR_MAX_DIMS];
    if (nd) memcpy(bs, sh, (size_t)nd * sizeof *bs);
    opr_tensor *t = NULL;
    if (lay == L_T && nd >= 2) {
        bs[nd - 2] = sh[nd - 1];
        bs[nd - 1] = sh[nd - 2];
        t = K(opr_tensor_transpose(T_gen(g, dt, nd, bs, lo, hi), nd - 2, nd - 1));
    } else if (lay == L_N && nd >= 1) {
        bs[nd - 1] = sh[nd - 1] + 3;
        t = K(opr_tensor_narrow(T_gen(g, dt, nd, bs, lo, hi), nd - 1, 1, sh[nd - 1]));
    } else if (lay == L_E) {
        for (int d = 0; d < nd && !t; d++)
            if (sh[d] > 1) {
                bs[d] = 1;
                t = K(opr_tensor_expand(T_gen(g, dt, nd, bs, lo, hi), sh, nd));
            }
    } else if (lay == L_S && nd < OPR_MAX_DIMS) {
        bs[nd] = 2;
        opr_tensor *n = K(opr_tensor_narrow(T_gen(g, dt, nd + 1, bs, lo, hi), nd, 1, 1));
        t = K(opr_tensor_squeeze(n, nd));
    }
    if (!t) return T_gen(g, dt, nd, sh, lo, hi);
    ck_assert_int_eq(opr_tensor_ndim(t), nd);
    for (int d = 0; d < nd; d++) ck_assert_int_eq(opr_tensor_size(t, d), sh[d]);
    return t;
}

/* Values suited to the dtype: reals in [-2, 2), integers in [-9, 10), random bools. */
static opr_tensor *T_any(const spec *s, opr_dtype dt)
{
    if (dt == OPR_BOOL) return T_lay(s->lay, G_INT, dt, s->nd, s->sh, 0, 2);
    if (dt == OPR_I64) return T_lay(s->lay, G_INT, dt, s->nd, s->sh, -9, 10);
    return T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -2, 2);
}

/* Random i64 index tensor of a shape with values in [0, hi). */
static opr_tensor *T_rindex(int nd, const int64_t *sh, int64_t hi, int lay)
{
    return T_lay(lay, G_INT, OPR_I64, nd, sh, 0, (double)hi);
}

/* ------------------------------------------------------------------ elementwise: unary */

#define U1(name, expr)                                                                    \
    static double u_##name(double x, double a, double b)                                  \
    {                                                                                     \
        (void)a;                                                                          \
        (void)b;                                                                          \
        return (expr);                                                                    \
    }
U1(neg, -x)
U1(exp, exp(x))
U1(log, log(x))
U1(sqrt, sqrt(x))
U1(abs, fabs(x))
U1(relu, x < 0 ? 0 : x)
U1(sigmoid, 1 / (1 + exp(-x)))
U1(tanh, tanh(x))
static double u_pow(double x, double a, double b)
{
    (void)b;
    return pow(x, a);
}
static double u_clamp(double x, double a, double b) { return fmin(fmax(x, a), b); }

typedef struct {
    const char *op;
    double (*f)(double, double, double);
    double lo, hi;  /* input range */
    int nscalar;    /* scalar arguments passed after self */
    bool given[2];  /* false: pass None */
    double a, b;    /* the scalars; for the reference, -inf/+inf stand for None */
    bool i64;       /* core.yaml lists i64 for the op (and the scalars are integers) */
} unary_case;

static const unary_case unary_cases[] = {
    {"neg", u_neg, -3, 3, 0, {false, false}, 0, 0, true},
    {"exp", u_exp, -3, 3, 0, {false, false}, 0, 0, false},
    {"log", u_log, 0.05, 5, 0, {false, false}, 0, 0, false},
    {"sqrt", u_sqrt, 0, 4, 0, {false, false}, 0, 0, false},
    {"abs", u_abs, -3, 3, 0, {false, false}, 0, 0, true},
    {"relu", u_relu, -3, 3, 0, {false, false}, 0, 0, true},
    {"sigmoid", u_sigmoid, -8, 8, 0, {false, false}, 0, 0, false},
    {"tanh", u_tanh, -3, 3, 0, {false, false}, 0, 0, false},
    {"pow", u_pow, -3, 3, 1, {true, false}, 2, 0, false},
    {"pow", u_pow, 0, 4, 1, {true, false}, 0.5, 0, false},
    {"pow", u_pow, -2, 2, 1, {true, false}, 3, 0, false},
    {"pow", u_pow, 0.1, 3, 1, {true, false}, -1.5, 0, false},
    {"pow", u_pow, -2, 2, 1, {true, false}, 0, 0, false},
    {"pow", u_pow, 0, 3, 1, {true, false}, 1.7, 0, false},
    {"clamp", u_clamp, -3, 3, 2, {true, false}, -0.5, INFINITY, false},
    {"clamp", u_clamp, -3, 3, 2, {false, true}, -INFINITY, 0.7, false},
    {"clamp", u_clamp, -3, 3, 2, {true, true}, -0.5, 0.7, false},
    {"clamp", u_clamp, -3, 3, 1, {true, false}, -0.5, INFINITY, false}, /* max left to its default */
    {"clamp", u_clamp, -3, 3, 2, {true, false}, -2, INFINITY, true},
    {"clamp", u_clamp, -3, 3, 2, {false, true}, -INFINITY, 3, true},
    {"clamp", u_clamp, -3, 3, 2, {true, true}, -4, 1, true},
    {"clamp", u_clamp, -3, 3, 1, {true, false}, 0, INFINITY, true},
    {"clamp_min", u_clamp, -3, 3, 1, {true, false}, 0.2, INFINITY, false},
    {"clamp_min", u_clamp, -3, 3, 1, {true, false}, 1, INFINITY, true},
};

/* Shapes and layouts every unary op runs on. */
static const spec unary_shapes[] = {
    {2, {5, 6}, L_C}, {2, {5, 6}, L_T}, {2, {5, 6}, L_N}, {2, {5, 6}, L_E}, {2, {5, 6}, L_S},
    {3, {2, 3, 4}, L_T}, {2, {0, 3}, L_C}, {0, {0}, L_C}, {0, {0}, L_S}, {3, {1, 4, 1}, L_C},
    {1, {7}, L_N}, {2, {1, 1}, L_E},
};

START_TEST(t_unary)
{
    const unary_case *u = &unary_cases[_i];
    for (int di = 0; di < (u->i64 ? 3 : 2); di++)
        for (int ci = 0; ci < NELEM(unary_shapes); ci++) {
            const opr_dtype dt = NUMERIC[di];
            const spec *s = &unary_shapes[ci];
            WHAT("%s(a=%g, b=%g) %s %d-d %s", u->op, u->a, u->b, opr_dtype_name(dt), s->nd, lay_name[s->lay]);
            opr_tensor *x = dt == OPR_I64 ? T_lay(s->lay, G_INT, dt, s->nd, s->sh, -9, 10)
                                          : T_lay(s->lay, G_REAL, dt, s->nd, s->sh, u->lo, u->hi);
            const opr_value args[3] = {TV(x), u->given[0] ? opr_v_double(u->a) : opr_v_none(),
                                       u->given[1] ? opr_v_double(u->b) : opr_v_none()};
            opr_tensor *y = K(tu_call1(ctx, u->op, args, 1 + u->nscalar));
            H hx = H_of(x), r = H_new(hx.nd, hx.sh);
            for (int64_t i = 0; i < hx.n; i++) r.v[i] = u->f(hx.v[i], u->a, u->b);
            EXPECT(y, dt, r);
        }
}
END_TEST

/* ------------------------------------------------------------------ elementwise: binary */

static double b_add(double x, double y, double a) { return x + a * y; }
static double b_sub(double x, double y, double a) { return x - a * y; }
static double b_mul(double x, double y, double a) { (void)a; return x * y; }
static double b_div(double x, double y, double a) { (void)a; return x / y; }

static const struct {
    const char *op;
    double (*f)(double, double, double);
    bool has_alpha;
    double alpha;
    double blo, bhi; /* range of `other` */
    bool i64;        /* core.yaml lists i64 (and alpha is an integer) */
} binary_cases[] = {
    {"add", b_add, false, 1, -3, 3, true},   {"add", b_add, true, 2.5, -3, 3, false},
    {"add", b_add, true, -1, -3, 3, true},   {"add", b_add, true, 3, -3, 3, true},
    {"sub", b_sub, false, 1, -3, 3, true},   {"sub", b_sub, true, 0.5, -3, 3, false},
    {"sub", b_sub, true, -2, -3, 3, true},   {"mul", b_mul, false, 1, -3, 3, true},
    {"div", b_div, false, 1, 0.5, 2, false},
};

/* Pairs of operands: same shape in several layouts, broadcasting, 0-d, empty, size 1. */
static const struct {
    spec a, b;
} binary_shapes[] = {
    {{2, {4, 5}, L_C}, {2, {4, 5}, L_C}},       {{2, {4, 5}, L_T}, {2, {4, 5}, L_N}},
    {{2, {4, 5}, L_E}, {2, {4, 5}, L_T}},       {{2, {4, 5}, L_S}, {2, {4, 5}, L_E}},
    {{2, {3, 1}, L_C}, {1, {4}, L_C}},          {{1, {4}, L_E}, {2, {3, 1}, L_S}},
    {{3, {2, 1, 4}, L_C}, {2, {3, 1}, L_C}},    {{3, {2, 1, 4}, L_T}, {2, {3, 1}, L_E}},
    {{0, {0}, L_C}, {2, {3, 4}, L_C}},          {{2, {3, 4}, L_T}, {0, {0}, L_C}},
    {{2, {0, 4}, L_C}, {1, {4}, L_C}},          {{2, {1, 1}, L_C}, {1, {1}, L_C}},
    {{3, {2, 3, 4}, L_N}, {3, {2, 3, 4}, L_T}}, {{0, {0}, L_S}, {0, {0}, L_C}},
    {{2, {3, 4}, L_C}, {0, {0}, L_S}},          {{2, {3, 4}, L_C}, {2, {3, 1}, L_C}},
};

START_TEST(t_binary)
{
    const double alpha = binary_cases[_i].alpha;
    const char *op = binary_cases[_i].op;
    for (int di = 0; di < (binary_cases[_i].i64 ? 3 : 2); di++)
        for (int ci = 0; ci < NELEM(binary_shapes); ci++) {
            const opr_dtype dt = NUMERIC[di];
            const spec *sa = &binary_shapes[ci].a, *sb = &binary_shapes[ci].b;
            WHAT("%s(alpha=%g) %s %d-d %s with %d-d %s", op, alpha, opr_dtype_name(dt), sa->nd, lay_name[sa->lay],
                 sb->nd, lay_name[sb->lay]);
            const int g = dt == OPR_I64 ? G_INT : G_REAL;
            opr_tensor *a = T_lay(sa->lay, g, dt, sa->nd, sa->sh, dt == OPR_I64 ? -9 : -3, dt == OPR_I64 ? 10 : 3);
            opr_tensor *b = dt == OPR_I64 ? T_lay(sb->lay, g, dt, sb->nd, sb->sh, -9, 10)
                                          : T_lay(sb->lay, g, dt, sb->nd, sb->sh, binary_cases[_i].blo, binary_cases[_i].bhi);
            opr_tensor *y = binary_cases[_i].has_alpha ? CALL(op, TV(a), TV(b), opr_v_double(alpha))
                                                       : CALL(op, TV(a), TV(b));
            H ha = H_of(a), hb = H_of(b);
            int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
            const int nd = bcast_shape(ha.nd, ha.sh, hb.nd, hb.sh, sh);
            H r = H_new(nd, sh);
            for (int64_t i = 0; i < r.n; i++) {
                unravel(i, nd, sh, idx);
                r.v[i] = binary_cases[_i].f(at_bcast(&ha, nd, idx), at_bcast(&hb, nd, idx), alpha);
            }
            EXPECT(y, dt, r);
        }
}
END_TEST

/* Integer alpha given as an int value is accepted for a float argument. */
START_TEST(t_add_int_alpha)
{
    const spec s = {2, {3, 4}, L_C};
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        const opr_dtype dt = NUMERIC[di];
        WHAT("add alpha=int 3 %s", opr_dtype_name(dt));
        opr_tensor *a = T_any(&s, dt), *b = T_any(&s, dt);
        opr_tensor *y = CALL("add", TV(a), TV(b), opr_v_int(3));
        H ha = H_of(a), hb = H_of(b), r = H_new(2, s.sh);
        for (int64_t i = 0; i < r.n; i++) r.v[i] = ha.v[i] + 3 * hb.v[i];
        EXPECT(y, dt, r);
    }
}
END_TEST

/* ------------------------------------------------------------------ comparisons */

static double c_eq(double x, double y) { return x == y; }
static double c_ne(double x, double y) { return x != y; }
static double c_gt(double x, double y) { return x > y; }
static double c_lt(double x, double y) { return x < y; }
static double c_ge(double x, double y) { return x >= y; }
static double c_le(double x, double y) { return x <= y; }

static const struct {
    const char *op;
    double (*f)(double, double);
    bool with_bool;
} compare_cases[] = {
    {"eq", c_eq, true}, {"ne", c_ne, true}, {"gt", c_gt, false},
    {"lt", c_lt, false}, {"ge", c_ge, false}, {"le", c_le, false},
};

START_TEST(t_compare)
{
    const char *op = compare_cases[_i].op;
    const int ndt = compare_cases[_i].with_bool ? 4 : 3;
    for (int di = 0; di < ndt; di++)
        for (int ci = 0; ci < NELEM(binary_shapes); ci++) {
            const opr_dtype dt = ALL4[di];
            const spec *sa = &binary_shapes[ci].a, *sb = &binary_shapes[ci].b;
            WHAT("%s %s %d-d %s with %d-d %s", op, opr_dtype_name(dt), sa->nd, lay_name[sa->lay], sb->nd,
                 lay_name[sb->lay]);
            /* small integers, so that equal values are common */
            const double lo = dt == OPR_BOOL ? 0 : -2, hi = dt == OPR_BOOL ? 2 : 3;
            opr_tensor *a = T_lay(sa->lay, G_INT, dt, sa->nd, sa->sh, lo, hi);
            opr_tensor *b = T_lay(sb->lay, G_INT, dt, sb->nd, sb->sh, lo, hi);
            opr_tensor *y = CALL(op, TV(a), TV(b));
            H ha = H_of(a), hb = H_of(b);
            int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
            const int nd = bcast_shape(ha.nd, ha.sh, hb.nd, hb.sh, sh);
            H r = H_new(nd, sh);
            for (int64_t i = 0; i < r.n; i++) {
                unravel(i, nd, sh, idx);
                r.v[i] = compare_cases[_i].f(at_bcast(&ha, nd, idx), at_bcast(&hb, nd, idx));
            }
            EXPECT_EXACT(y, OPR_BOOL, r);
        }
}
END_TEST

/* Comparisons of reals that differ by little: no rounding in f32/f64. */
START_TEST(t_compare_reals)
{
    const int64_t sh[1] = {4};
    const double a[4] = {1.0, 1.0 + 1e-7, -0.0, 3.5}, b[4] = {1.0 + 1e-7, 1.0, 0.0, 3.5};
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        opr_tensor *x = T_vals(dt, 1, sh, a), *y = T_vals(dt, 1, sh, b);
        H hx = H_of(x), hy = H_of(y);
        for (int k = 0; k < NELEM(compare_cases); k++) {
            WHAT("%s %s near-equal reals", compare_cases[k].op, opr_dtype_name(dt));
            H r = H_new(1, sh);
            for (int i = 0; i < 4; i++) r.v[i] = compare_cases[k].f(hx.v[i], hy.v[i]);
            EXPECT_EXACT(CALL(compare_cases[k].op, TV(x), TV(y)), OPR_BOOL, r);
        }
    }
}
END_TEST

/* ------------------------------------------------------------------ where */

static const struct {
    spec c, a, b;
} where_shapes[] = {
    {{2, {3, 4}, L_C}, {2, {3, 4}, L_C}, {2, {3, 4}, L_C}},
    {{2, {3, 4}, L_T}, {2, {3, 4}, L_N}, {2, {3, 4}, L_E}},
    {{2, {3, 4}, L_S}, {2, {3, 4}, L_T}, {2, {3, 4}, L_S}},
    {{2, {3, 1}, L_C}, {1, {4}, L_C}, {3, {2, 1, 1}, L_C}},
    {{3, {2, 1, 4}, L_C}, {2, {3, 1}, L_C}, {0, {0}, L_C}},
    {{0, {0}, L_C}, {2, {3, 4}, L_T}, {1, {4}, L_E}},
    {{2, {0, 4}, L_C}, {1, {4}, L_C}, {1, {1}, L_C}},
    {{0, {0}, L_C}, {0, {0}, L_C}, {0, {0}, L_C}},
};

START_TEST(t_where)
{
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int ci = 0; ci < NELEM(where_shapes); ci++) {
            const opr_dtype dt = NUMERIC[di];
            const spec *sc = &where_shapes[ci].c, *sa = &where_shapes[ci].a, *sb = &where_shapes[ci].b;
            WHAT("where %s case %d (cond %d-d %s, self %d-d %s, other %d-d %s)", opr_dtype_name(dt), ci, sc->nd,
                 lay_name[sc->lay], sa->nd, lay_name[sa->lay], sb->nd, lay_name[sb->lay]);
            opr_tensor *c = T_any(sc, OPR_BOOL), *a = T_any(sa, dt), *b = T_any(sb, dt);
            opr_tensor *y = CALL("where", TV(c), TV(a), TV(b));
            H hc = H_of(c), ha = H_of(a), hb = H_of(b);
            int64_t sh[OPR_MAX_DIMS], t[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
            int nd = bcast_shape(hc.nd, hc.sh, ha.nd, ha.sh, t);
            nd = bcast_shape(nd, t, hb.nd, hb.sh, sh);
            H r = H_new(nd, sh);
            for (int64_t i = 0; i < r.n; i++) {
                unravel(i, nd, sh, idx);
                r.v[i] = at_bcast(&hc, nd, idx) != 0 ? at_bcast(&ha, nd, idx) : at_bcast(&hb, nd, idx);
            }
            EXPECT_EXACT(y, dt, r);
        }
}
END_TEST

/* ------------------------------------------------------------------ reductions */

enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_NORM };

/* Mask of reduced dims; n == 0 (None or []) reduces all. A 0-d tensor has one dim 0. */
static uint32_t dims_mask(int nd, const int64_t *dims, int n)
{
    if (n <= 0) return nd ? (1u << nd) - 1 : 1u;
    uint32_t m = 0;
    for (int i = 0; i < n; i++) m |= 1u << wrapd(dims[i], nd);
    return m;
}

/* Reduction of x over the dims in mask. For R_MAX/R_MIN, *arg gets the first position of
 * the extreme in the reduced dims (row-major), when arg is not NULL. */
static void ref_reduce(const H *x, uint32_t mask, bool keep, int kind, double p, H *val, H *arg)
{
    int64_t osh[OPR_MAX_DIMS] = {0}, ksh[OPR_MAX_DIMS] = {0}, rsh[OPR_MAX_DIMS] = {0};
    int on = 0, rn = 0;
    for (int d = 0; d < x->nd; d++) {
        const bool red = (mask >> d) & 1;
        ksh[d] = red ? 1 : x->sh[d];
        if (red) rsh[rn++] = x->sh[d];
        if (!red) osh[on++] = x->sh[d];
        else if (keep) osh[on++] = 1;
    }
    *val = H_new(on, osh);
    H a = H_new(on, osh);
    const int64_t nred = numel_of(rn, rsh);
    for (int64_t o = 0; o < val->n; o++) {
        val->v[o] = kind == R_PROD ? 1 : 0;
        a.v[o] = -1;
    }
    int64_t idx[OPR_MAX_DIMS], kidx[OPR_MAX_DIMS], ridx[OPR_MAX_DIMS];
    for (int64_t i = 0; i < x->n; i++) {
        unravel(i, x->nd, x->sh, idx);
        int r = 0;
        for (int d = 0; d < x->nd; d++) {
            const bool red = (mask >> d) & 1;
            if (red) ridx[r++] = idx[d];
            kidx[d] = red ? 0 : idx[d];
        }
        const int64_t o = ravel(x->nd, ksh, kidx), ri = ravel(rn, rsh, ridx);
        const double v = x->v[i];
        double *acc = &val->v[o];
        switch (kind) {
        case R_SUM: case R_MEAN: *acc += v; break;
        case R_PROD: *acc *= v; break;
        case R_NORM: *acc += pow(fabs(v), p); break;
        case R_MAX: if (a.v[o] < 0 || v > *acc) { *acc = v; a.v[o] = (double)ri; } break;
        case R_MIN: if (a.v[o] < 0 || v < *acc) { *acc = v; a.v[o] = (double)ri; } break;
        }
    }
    for (int64_t o = 0; o < val->n; o++) {
        if (kind == R_MEAN) val->v[o] = nred ? val->v[o] / (double)nred : NAN;
        if (kind == R_NORM) val->v[o] = pow(val->v[o], 1 / p);
    }
    if (arg) *arg = a;
}

/* sum/mean(x, dims, keepdim); ndims < 0 passes None. */
static void check_sum_like(const char *op, opr_tensor *x, int ndims, const int64_t *dims, bool keep, bool pass_keep)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    const opr_value dv = ndims < 0 ? opr_v_none() : opr_v_ints(dims, ndims);
    opr_tensor *y = pass_keep ? CALL(op, TV(x), dv, opr_v_bool(keep)) : CALL(op, TV(x), dv);
    H hx = H_of(x), r;
    ref_reduce(&hx, dims_mask(hx.nd, dims, ndims), keep, strcmp(op, "mean") ? R_SUM : R_MEAN, 0, &r, NULL);
    EXPECT(y, dt, r);
}

static const struct {
    int n; /* -1: None */
    int64_t d[3];
} sum_dims[] = {
    {-1, {0}}, {0, {0}}, {1, {0}}, {1, {1}}, {1, {2}}, {1, {-1}}, {2, {0, 2}}, {2, {-1, -3}}, {3, {0, 1, 2}}, {2, {2, 1}},
};

/* Other shapes: column sums (reduced elements far apart, outputs adjacent), empty
 * tensors, 0-d, size-1 dims. */
static const struct {
    spec x;
    int n;
    int64_t d[3];
} sum_extra[] = {
    {{2, {7, 20}, L_C}, 1, {0}},     {{3, {5, 3, 70}, L_C}, 1, {0}},  {{3, {5, 3, 70}, L_C}, 2, {0, 1}},
    {{2, {20, 5}, L_T}, 1, {1}},     {{2, {20, 9}, L_T}, 1, {0}},     {{2, {6, 9}, L_N}, 1, {0}},
    {{2, {6, 9}, L_S}, 1, {0}},      {{2, {0, 3}, L_C}, 1, {0}},      {{2, {0, 3}, L_C}, -1, {0}},
    {{2, {3, 0}, L_C}, 1, {1}},      {{2, {3, 0}, L_C}, 1, {0}},      {{0, {0}, L_C}, -1, {0}},
    {{0, {0}, L_C}, 1, {0}},         {{0, {0}, L_S}, 1, {-1}},        {{3, {1, 1, 1}, L_C}, -1, {0}},
    {{3, {1, 4, 1}, L_E}, 1, {1}},   {{3, {1, 4, 1}, L_C}, 2, {0, 2}}, {{1, {9}, L_E}, 1, {0}},
    {{4, {2, 3, 4, 5}, L_T}, 2, {1, 3}}, {{4, {2, 3, 4, 5}, L_S}, 3, {0, 2, 3}},
    {{2, {7, 20}, L_E}, 1, {0}},     {{3, {6, 2, 9}, L_E}, 2, {0, 1}}, {{3, {9, 4, 5}, L_T}, 2, {0, 1}},
};

START_TEST(t_sum_mean)
{
    const char *op = _i ? "mean" : "sum";
    const int64_t sh[3] = {3, 4, 5};
    for (int di = 0; di < (_i ? 2 : 3); di++) {
        const opr_dtype dt = NUMERIC[di];
        for (int lay = 0; lay < L_NLAY; lay++) {
            opr_tensor *x = dt == OPR_I64 ? T_lay(lay, G_INT, dt, 3, sh, -9, 10) : T_lay(lay, G_REAL, dt, 3, sh, -2, 2);
            for (int k = 0; k < NELEM(sum_dims); k++)
                for (int keep = 0; keep < 2; keep++) {
                    WHAT("%s %s [3,4,5] %s dims #%d keepdim=%d", op, opr_dtype_name(dt), lay_name[lay], k, keep);
                    check_sum_like(op, x, sum_dims[k].n, sum_dims[k].d, keep, true);
                }
        }
        for (int k = 0; k < NELEM(sum_extra); k++)
            for (int keep = 0; keep < 2; keep++) {
                const spec *s = &sum_extra[k].x;
                WHAT("%s %s extra case %d (%d-d %s) keepdim=%d", op, opr_dtype_name(dt), k, s->nd, lay_name[s->lay],
                     keep);
                check_sum_like(op, T_any(s, dt), sum_extra[k].n, sum_extra[k].d, keep, true);
            }
        /* defaults: dim=None, keepdim=False */
        WHAT("%s %s defaults", op, opr_dtype_name(dt));
        opr_tensor *x = T_any(&(spec){2, {3, 4}, L_T}, dt);
        opr_tensor *y = CALL(op, TV(x));
        H hx = H_of(x), r;
        ref_reduce(&hx, dims_mask(2, NULL, 0), false, _i ? R_MEAN : R_SUM, 0, &r, NULL);
        EXPECT(y, dt, r);
        check_sum_like(op, x, 1, (const int64_t[]){-2}, false, false);
    }
}
END_TEST

START_TEST(t_prod)
{
    static const struct {
        spec x;
        bool has_dim;
        int64_t dim;
    } cases[] = {
        {{2, {3, 4}, L_C}, false, 0}, {{2, {3, 4}, L_C}, true, 0},  {{2, {3, 4}, L_T}, true, 1},
        {{2, {3, 4}, L_N}, true, -1}, {{2, {3, 4}, L_E}, true, 0},  {{2, {3, 4}, L_S}, false, 0},
        {{3, {2, 3, 4}, L_T}, true, 1}, {{3, {2, 3, 4}, L_C}, true, -3}, {{2, {0, 3}, L_C}, false, 0},
        {{2, {0, 3}, L_C}, true, 0},  {{2, {0, 3}, L_C}, true, 1},  {{0, {0}, L_C}, false, 0},
        {{0, {0}, L_C}, true, 0},     {{2, {1, 5}, L_C}, true, 0},  {{1, {30}, L_C}, false, 0},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++)
            for (int keep = 0; keep < 2; keep++) {
                const opr_dtype dt = NUMERIC[di];
                const spec *s = &cases[k].x;
                WHAT("prod %s case %d (%d-d %s) keepdim=%d", opr_dtype_name(dt), k, s->nd, lay_name[s->lay], keep);
                /* i64: values in {-1, 0, 1, 2}, so that products stay exact and in range */
                opr_tensor *x = dt == OPR_I64 ? T_lay(s->lay, G_INT, dt, s->nd, s->sh, -1, 3)
                                              : T_lay(s->lay, G_REAL, dt, s->nd, s->sh, 0.5, 1.5);
                opr_tensor *y = CALL("prod", TV(x), cases[k].has_dim ? opr_v_int(cases[k].dim) : opr_v_none(),
                                     opr_v_bool(keep));
                H hx = H_of(x), r;
                ref_reduce(&hx, dims_mask(hx.nd, &cases[k].dim, cases[k].has_dim), keep, R_PROD, 0, &r, NULL);
                EXPECT(y, dt, r);
            }
}
END_TEST

START_TEST(t_max_min_all)
{
    static const spec shapes[] = {
        {2, {4, 5}, L_C}, {2, {4, 5}, L_T}, {2, {4, 5}, L_N}, {2, {4, 5}, L_E}, {2, {4, 5}, L_S},
        {1, {7}, L_C}, {0, {0}, L_C}, {3, {1, 1, 1}, L_C}, {3, {2, 3, 4}, L_T},
    };
    for (int op = 0; op < 2; op++)
        for (int di = 0; di < NELEM(NUMERIC); di++)
            for (int k = 0; k < NELEM(shapes); k++) {
                const opr_dtype dt = NUMERIC[di];
                WHAT("%s %s %d-d %s", op ? "min" : "max", opr_dtype_name(dt), shapes[k].nd, lay_name[shapes[k].lay]);
                opr_tensor *x = T_any(&shapes[k], dt);
                opr_tensor *y = CALL(op ? "min" : "max", TV(x));
                H hx = H_of(x), r;
                ref_reduce(&hx, dims_mask(hx.nd, NULL, 0), false, op ? R_MIN : R_MAX, 0, &r, NULL);
                EXPECT_EXACT(y, dt, r);
            }
    const spec e = {2, {0, 3}, L_C};
    tu_expect_fail(ctx, "max", ARGS(TV(T_any(&e, OPR_F32))), 1, OPR_ERR_INVALID, "numel(self) > 0");
    tu_expect_fail(ctx, "min", ARGS(TV(T_any(&e, OPR_F64))), 1, OPR_ERR_INVALID, "numel(self) > 0");
}
END_TEST

static void check_arg_reduce(const char *op, opr_tensor *x, int64_t dim, bool keep)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *v, *ix;
    CALL2(op, &v, &ix, TV(x), opr_v_int(dim), opr_v_bool(keep));
    H hx = H_of(x), r, ri;
    ref_reduce(&hx, dims_mask(hx.nd, &dim, 1), keep, strcmp(op, "min.dim") ? R_MAX : R_MIN, 0, &r, &ri);
    EXPECT_EXACT(v, dt, r);
    EXPECT_EXACT(ix, OPR_I64, ri);
}

START_TEST(t_max_min_dim)
{
    const char *op = _i ? "min.dim" : "max.dim";
    static const struct {
        spec x;
        int64_t dim;
    } cases[] = {
        {{2, {4, 5}, L_C}, 0},   {{2, {4, 5}, L_C}, 1},    {{2, {4, 5}, L_T}, -1},   {{2, {4, 5}, L_T}, 0},
        {{2, {4, 5}, L_N}, 1},   {{2, {4, 5}, L_E}, 0},    {{2, {4, 5}, L_E}, 1},    {{2, {4, 5}, L_S}, -2},
        {{3, {2, 3, 4}, L_T}, 1}, {{3, {2, 3, 4}, L_C}, -1}, {{2, {1, 6}, L_C}, 0},   {{2, {3, 0}, L_C}, 0},
        {{1, {40}, L_C}, 0},     {{1, {1}, L_C}, -1},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++)
            for (int keep = 0; keep < 2; keep++) {
                const opr_dtype dt = NUMERIC[di];
                const spec *s = &cases[k].x;
                WHAT("%s %s case %d (%d-d %s, dim %lld) keepdim=%d", op, opr_dtype_name(dt), k, s->nd,
                     lay_name[s->lay], (long long)cases[k].dim, keep);
                /* integers in [0, 3): ties, whose first index must be reported */
                check_arg_reduce(op, T_lay(s->lay, G_INT, dt, s->nd, s->sh, 0, 3), cases[k].dim, keep);
                check_arg_reduce(op, T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -2, 2), cases[k].dim, keep);
            }
    /* rows long enough for the vectorised scan: the first NaN wins over every value,
     * also over a later extremum, and the first of equal extrema otherwise */
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int nan_at = -1; nan_at < 64; nan_at += 23) {
            const opr_dtype dt = FLOATS[di];
            double v[2 * 64];
            for (int i = 0; i < 64; i++) v[i] = v[64 + i] = (double)(i % 7) - 3; /* ties: +-3 at i = 6, 13, ... */
            for (int r = 0; nan_at >= 0 && r < 2; r++) v[64 * r + nan_at] = v[64 * r + nan_at + 17] = NAN;
            float vf[2 * 64];
            for (int i = 0; i < 2 * 64; i++) vf[i] = (float)v[i];
            WHAT("%s %s rows of 64, NaN at %d", op, opr_dtype_name(dt), nan_at);
            opr_tensor *x = K(opr_tensor_from_data(ctx, dt, 2, (int64_t[]){2, 64},
                                                   dt == OPR_F32 ? (void *)vf : (void *)v, (opr_device){0, 0}));
            if (nan_at < 0) check_arg_reduce(op, x, 1, false); /* its reference has no NaN rule */
            opr_tensor *val, *ix;
            CALL2(op, &val, &ix, TV(x), opr_v_int(1), opr_v_bool(false));
            const int64_t *got = opr_tensor_data(ix);
            const int64_t want = nan_at >= 0 ? nan_at : _i ? 0 : 6;
            ck_assert_msg(got[0] == want && got[1] == want, "%s: index %lld, %lld; expected %lld", what,
                          (long long)got[0], (long long)got[1], (long long)want);
            double *vals = KM(tu_to_f64(val));
            ck_assert_msg(nan_at >= 0 ? isnan(vals[0]) && isnan(vals[1]) : vals[0] == (_i ? -3 : 3) && vals[1] == vals[0],
                          "%s: values %g, %g", what, vals[0], vals[1]);
        }
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        WHAT("%s %s empty dim", op, opr_dtype_name(NUMERIC[di]));
        opr_tensor *x = T_any(&(spec){2, {0, 3}, L_C}, NUMERIC[di]);
        tu_expect_fail(ctx, op, ARGS(TV(x), opr_v_int(0)), 2, OPR_ERR_INVALID, "size(self, dim) > 0");
    }
}
END_TEST

START_TEST(t_norm)
{
    static const double ps[] = {1, 2, 3, 1.5, 0.5};
    static const spec shapes[] = {
        {2, {4, 5}, L_C}, {2, {4, 5}, L_T}, {2, {4, 5}, L_N}, {2, {4, 5}, L_E}, {2, {4, 5}, L_S},
        {0, {0}, L_C}, {2, {0, 3}, L_C}, {3, {2, 3, 4}, L_T}, {1, {1}, L_C},
    };
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int pi = 0; pi < NELEM(ps); pi++)
            for (int k = 0; k < NELEM(shapes); k++) {
                const opr_dtype dt = FLOATS[di];
                WHAT("norm p=%g %s %d-d %s", ps[pi], opr_dtype_name(dt), shapes[k].nd, lay_name[shapes[k].lay]);
                opr_tensor *x = T_any(&shapes[k], dt);
                opr_tensor *y = CALL("norm", TV(x), opr_v_double(ps[pi]));
                H hx = H_of(x), r;
                ref_reduce(&hx, dims_mask(hx.nd, NULL, 0), false, R_NORM, ps[pi], &r, NULL);
                EXPECT(y, dt, r);
            }
    /* default p = 2 */
    WHAT("norm default p");
    opr_tensor *x = T_any(&(spec){2, {3, 3}, L_C}, OPR_F64);
    H hx = H_of(x), r;
    ref_reduce(&hx, dims_mask(2, NULL, 0), false, R_NORM, 2, &r, NULL);
    EXPECT(CALL("norm", TV(x)), OPR_F64, r);
}
END_TEST

/* softmax / log_softmax along dim, and (softmax) every row summing to 1. */
static void check_softmax(bool logsm, opr_tensor *x, int64_t dim)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *y = CALL(logsm ? "log_softmax" : "softmax", TV(x), opr_v_int(dim));
    H hx = H_of(x), r = H_new(hx.nd, hx.sh);
    int64_t outer, len, inner;
    row_geom(&hx, wrapd(dim, hx.nd), &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < len; j++) m = fmax(m, hx.v[(o * len + j) * inner + in]);
            for (int64_t j = 0; j < len; j++) s += exp(hx.v[(o * len + j) * inner + in] - m);
            for (int64_t j = 0; j < len; j++) {
                const double v = hx.v[(o * len + j) * inner + in] - m;
                r.v[(o * len + j) * inner + in] = logsm ? v - log(s) : exp(v) / s;
            }
        }
    EXPECT(y, dt, r);
    if (logsm) return;
    H g = H_of(y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double s = 0;
            for (int64_t j = 0; j < len; j++) s += g.v[(o * len + j) * inner + in];
            REQUIRE(len == 0 || fabs(s - 1) <= 10 * tol_of(dt), "%s: row (%lld, %lld) sums to %.17g", what,
                          (long long)o, (long long)in, s);
        }
}

START_TEST(t_softmax)
{
    const bool logsm = _i;
    static const struct {
        spec x;
        int64_t dim;
    } cases[] = {
        {{2, {4, 6}, L_C}, 1},    {{2, {4, 6}, L_C}, 0},    {{2, {4, 6}, L_T}, -1},   {{2, {4, 6}, L_T}, 0},
        {{2, {4, 6}, L_N}, 1},    {{2, {4, 6}, L_E}, 0},    {{2, {4, 6}, L_E}, 1},    {{2, {4, 6}, L_S}, -2},
        {{3, {2, 3, 5}, L_C}, 1}, {{3, {2, 3, 5}, L_T}, -3}, {{1, {1}, L_C}, 0},      {{1, {9}, L_C}, -1},
        {{2, {5, 0}, L_C}, 1},    {{2, {5, 0}, L_C}, 0},    {{2, {3, 1}, L_C}, 1},
        /* rows long enough for the vector loops, with a tail */
        {{2, {3, 300}, L_C}, 1},  {{2, {3, 300}, L_T}, 1},  {{2, {300, 3}, L_C}, 0},
    };
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = FLOATS[di];
            const spec *s = &cases[k].x;
            WHAT("%s %s case %d (%d-d %s, dim %lld)", logsm ? "log_softmax" : "softmax", opr_dtype_name(dt), k, s->nd,
                 lay_name[s->lay], (long long)cases[k].dim);
            check_softmax(logsm, T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -5, 5), cases[k].dim);
        }
    /* large logits: subtracting the max keeps exp finite */
    WHAT("%s large logits", logsm ? "log_softmax" : "softmax");
    const int64_t sh[2] = {2, 3};
    const double v[6] = {1000, 1001, 1002, -1000, -1001, -999};
    check_softmax(logsm, T_vals(OPR_F64, 2, sh, v), 1);
    check_softmax(logsm, T_vals(OPR_F32, 2, sh, v), 1);
    WHAT("%s with -inf entries", logsm ? "log_softmax" : "softmax");
    const double w[6] = {-INFINITY, 0, 1, 2, -INFINITY, -INFINITY};
    check_softmax(logsm, T_vals(OPR_F64, 2, sh, w), 1);
    check_softmax(logsm, T_vals(OPR_F32, 2, sh, w), 1);
    /* a NaN or a +inf anywhere in a row makes that row NaN (as in PyTorch), the other
     * rows are untouched: rows of 100, past the vector loops' lanes */
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int bad = 0; bad < 2; bad++) {
            const opr_dtype dt = FLOATS[di];
            WHAT("%s %s row with %s", logsm ? "log_softmax" : "softmax", opr_dtype_name(dt), bad ? "+inf" : "NaN");
            double v3[300];
            for (int i = 0; i < 300; i++) v3[i] = sin(i * 0.37) * 3;
            v3[170] = bad ? INFINITY : NAN; /* row 1, past 64 elements */
            opr_tensor *x = T_vals(dt, 2, SH(3, 100), v3);
            H g = H_of(CALL(logsm ? "log_softmax" : "softmax", TV(x), opr_v_int(1)));
            for (int i = 0; i < 300; i++)
                REQUIRE(isnan(g.v[i]) == (i >= 100 && i < 200), "%s: element %d is %g", what, i, g.v[i]);
        }
}
END_TEST

/* ------------------------------------------------------------------ linear algebra */

/* Offset of the batch position idx (onb dims, broadcast) in an array of nb batch dims sh. */
static int64_t batch_at(int nb, const int64_t *sh, int onb, const int64_t *idx)
{
    int64_t o = 0;
    for (int d = 0; d < nb; d++) o = o * sh[d] + (sh[d] == 1 ? 0 : idx[d + onb - nb]);
    return o;
}

/* torch.matmul semantics; *scale gets sum |a||b| per output element. */
static void ref_matmul(const H *a, const H *b, H *out, H *scale)
{
    const bool a1 = a->nd == 1, b1 = b->nd == 1;
    const int64_t m = a1 ? 1 : a->sh[a->nd - 2], k = a->sh[a->nd - 1], n = b1 ? 1 : b->sh[b->nd - 1];
    ck_assert_int_eq(k, b1 ? b->sh[0] : b->sh[b->nd - 2]);
    const int na = a->nd > 2 ? a->nd - 2 : 0, nb = b->nd > 2 ? b->nd - 2 : 0;
    int64_t sh[OPR_MAX_DIMS + 2], idx[OPR_MAX_DIMS];
    const int nbt = bcast_shape(na, a->sh, nb, b->sh, sh);
    int on = nbt;
    if (!a1) sh[on++] = m;
    if (!b1) sh[on++] = n;
    *out = H_new(on, sh);
    *scale = H_new(on, sh);
    const int64_t nbatch = numel_of(nbt, sh);
    for (int64_t bi = 0; bi < nbatch; bi++) {
        unravel(bi, nbt, sh, idx);
        const double *pa = a->v + batch_at(na, a->sh, nbt, idx) * m * k;
        const double *pb = b->v + batch_at(nb, b->sh, nbt, idx) * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, sa = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    s += pa[i * k + kk] * pb[kk * n + j];
                    sa += fabs(pa[i * k + kk] * pb[kk * n + j]);
                }
                out->v[(bi * m + i) * n + j] = s;
                scale->v[(bi * m + i) * n + j] = sa;
            }
    }
}

static void check_matmul(const char *op, opr_tensor *a, opr_tensor *b, double tol)
{
    const opr_dtype dt = opr_tensor_dtype(a);
    opr_tensor *y = CALL(op, TV(a), TV(b));
    H ha = H_of(a), hb = H_of(b), r, s;
    ref_matmul(&ha, &hb, &r, &s);
    expect_close(y, dt, &r, tol, s.v);
}

static const int mm_lays[][2] = {{L_C, L_C}, {L_T, L_C}, {L_C, L_T}, {L_T, L_T}, {L_N, L_N},
                                 {L_E, L_C}, {L_C, L_E}, {L_S, L_S}, {L_N, L_T}};

START_TEST(t_mm)
{
    static const int64_t sizes[][3] = {{3, 4, 5}, {1, 7, 1}, {6, 1, 3}, {5, 6, 2}, {1, 5, 4}, {4, 5, 1}};
    static const int64_t empty[][3] = {{0, 3, 4}, {3, 0, 4}, {3, 4, 0}, {0, 0, 0}};
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        for (int k = 0; k < NELEM(sizes); k++)
            for (int l = 0; l < NELEM(mm_lays); l++) {
                WHAT("mm %s [%lld,%lld]x[%lld,%lld] %s x %s", opr_dtype_name(dt), (long long)sizes[k][0],
                     (long long)sizes[k][1], (long long)sizes[k][1], (long long)sizes[k][2], lay_name[mm_lays[l][0]],
                     lay_name[mm_lays[l][1]]);
                const int64_t sa[2] = {sizes[k][0], sizes[k][1]}, sb[2] = {sizes[k][1], sizes[k][2]};
                check_matmul("mm", T_lay(mm_lays[l][0], G_REAL, dt, 2, sa, -1, 1),
                             T_lay(mm_lays[l][1], G_REAL, dt, 2, sb, -1, 1), tol_of(dt));
            }
        for (int k = 0; k < NELEM(empty); k++)
            for (int l = 0; l < 4; l++) {
                WHAT("mm %s empty [%lld,%lld]x[%lld,%lld] %s x %s", opr_dtype_name(dt), (long long)empty[k][0],
                     (long long)empty[k][1], (long long)empty[k][1], (long long)empty[k][2], lay_name[mm_lays[l][0]],
                     lay_name[mm_lays[l][1]]);
                const int64_t sa[2] = {empty[k][0], empty[k][1]}, sb[2] = {empty[k][1], empty[k][2]};
                check_matmul("mm", T_lay(mm_lays[l][0], G_REAL, dt, 2, sa, -1, 1),
                             T_lay(mm_lays[l][1], G_REAL, dt, 2, sb, -1, 1), tol_of(dt));
            }
        /* a long inner dimension, and a product large enough for threaded BLAS */
        for (int l = 0; l < 4; l++) {
            WHAT("mm %s big K %s x %s", opr_dtype_name(dt), lay_name[mm_lays[l][0]], lay_name[mm_lays[l][1]]);
            const int64_t sa[2] = {8, 700}, sb[2] = {700, 6};
            check_matmul("mm", T_lay(mm_lays[l][0], G_REAL, dt, 2, sa, -1, 1),
                         T_lay(mm_lays[l][1], G_REAL, dt, 2, sb, -1, 1), dt == OPR_F32 ? 1e-4 : 1e-12);
            WHAT("mm %s 96x128x80 %s x %s", opr_dtype_name(dt), lay_name[mm_lays[l][0]], lay_name[mm_lays[l][1]]);
            const int64_t sc[2] = {96, 128}, sd[2] = {128, 80};
            check_matmul("mm", T_lay(mm_lays[l][0], G_REAL, dt, 2, sc, -1, 1),
                         T_lay(mm_lays[l][1], G_REAL, dt, 2, sd, -1, 1), dt == OPR_F32 ? 1e-4 : 1e-12);
        }
    }
}
END_TEST

START_TEST(t_bmm)
{
    static const int64_t sizes[][4] = {{3, 2, 4, 5}, {1, 3, 3, 3}, {4, 1, 6, 1}, {2, 5, 1, 3}, {0, 2, 3, 4},
                                       {2, 0, 3, 4}, {2, 3, 0, 4}};
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(sizes); k++)
            for (int l = 0; l < NELEM(mm_lays); l++) {
                const opr_dtype dt = FLOATS[di];
                const int64_t *z = sizes[k];
                WHAT("bmm %s [%lld,%lld,%lld]x[%lld,%lld,%lld] %s x %s", opr_dtype_name(dt), (long long)z[0],
                     (long long)z[1], (long long)z[2], (long long)z[0], (long long)z[2], (long long)z[3],
                     lay_name[mm_lays[l][0]], lay_name[mm_lays[l][1]]);
                const int64_t sa[3] = {z[0], z[1], z[2]}, sb[3] = {z[0], z[2], z[3]};
                check_matmul("bmm", T_lay(mm_lays[l][0], G_REAL, dt, 3, sa, -1, 1),
                             T_lay(mm_lays[l][1], G_REAL, dt, 3, sb, -1, 1), tol_of(dt));
            }
}
END_TEST

START_TEST(t_matmul)
{
    static const struct {
        spec a, b;
    } cases[] = {
        {{1, {4}, L_C}, {1, {4}, L_C}},                 {{1, {4}, L_S}, {1, {4}, L_E}},
        {{1, {4}, L_N}, {2, {4, 3}, L_T}},              {{1, {4}, L_C}, {2, {4, 3}, L_C}},
        {{2, {3, 4}, L_T}, {1, {4}, L_E}},              {{2, {3, 4}, L_C}, {1, {4}, L_S}},
        {{3, {2, 3, 4}, L_C}, {2, {4, 5}, L_C}},        {{3, {2, 3, 4}, L_T}, {2, {4, 5}, L_T}},
        {{3, {2, 3, 4}, L_N}, {2, {4, 5}, L_C}},        {{3, {2, 3, 4}, L_E}, {2, {4, 5}, L_C}},
        {{3, {2, 3, 4}, L_S}, {2, {4, 5}, L_N}},        {{2, {4, 5}, L_C}, {3, {2, 5, 3}, L_T}},
        {{2, {4, 5}, L_T}, {3, {2, 5, 3}, L_C}},        {{4, {2, 1, 3, 4}, L_C}, {3, {5, 4, 2}, L_C}},
        {{4, {2, 1, 3, 4}, L_T}, {3, {5, 4, 2}, L_T}},  {{4, {2, 1, 3, 4}, L_S}, {3, {5, 4, 2}, L_E}},
        {{3, {2, 3, 4}, L_C}, {1, {4}, L_C}},           {{3, {2, 3, 4}, L_T}, {1, {4}, L_C}},
        {{1, {4}, L_C}, {3, {2, 4, 3}, L_C}},           {{1, {4}, L_C}, {3, {2, 4, 3}, L_T}},
        {{3, {1, 3, 4}, L_C}, {3, {2, 4, 5}, L_N}},     {{3, {2, 3, 4}, L_T}, {3, {2, 4, 5}, L_T}},
        {{3, {2, 1, 4}, L_C}, {2, {4, 5}, L_C}},        {{3, {2, 1, 4}, L_S}, {2, {4, 5}, L_T}},
        {{3, {2, 0, 4}, L_C}, {2, {4, 5}, L_C}},        {{3, {2, 3, 0}, L_C}, {2, {0, 5}, L_C}},
        {{4, {3, 2, 4, 5}, L_C}, {4, {3, 2, 5, 2}, L_T}}, {{3, {6, 4, 5}, L_C}, {2, {5, 7}, L_S}},
    };
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = FLOATS[di];
            const spec *sa = &cases[k].a, *sb = &cases[k].b;
            WHAT("matmul %s case %d (%d-d %s x %d-d %s)", opr_dtype_name(dt), k, sa->nd, lay_name[sa->lay], sb->nd,
                 lay_name[sb->lay]);
            check_matmul("matmul", T_lay(sa->lay, G_REAL, dt, sa->nd, sa->sh, -1, 1),
                         T_lay(sb->lay, G_REAL, dt, sb->nd, sb->sh, -1, 1), tol_of(dt));
        }
}
END_TEST

START_TEST(t_linear)
{
    static const spec inputs[] = {
        {3, {2, 3, 4}, L_C}, {3, {2, 3, 4}, L_T}, {3, {2, 3, 4}, L_N}, {3, {2, 3, 4}, L_S},
        {1, {4}, L_C}, {2, {3, 4}, L_T}, {2, {0, 4}, L_C}, {4, {2, 1, 3, 4}, L_E},
    };
    WHAT("linear with in_features = 0");
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int bias = 0; bias < 2; bias++) {
            const opr_dtype dt = FLOATS[di];
            opr_tensor *x = T_any(&(spec){2, {3, 0}, L_C}, dt), *w = T_any(&(spec){2, {5, 0}, L_C}, dt);
            opr_tensor *b = T_any(&(spec){1, {5}, L_C}, dt);
            opr_tensor *y = bias ? CALL("linear", TV(x), TV(w), TV(b)) : CALL("linear", TV(x), TV(w));
            H hb = H_of(b), r = H_new(2, SH(3, 5));
            for (int64_t i = 0; i < 15; i++) r.v[i] = bias ? hb.v[i % 5] : 0;
            EXPECT_EXACT(y, dt, r);
        }
    static const int wlays[] = {L_C, L_T, L_S, L_E};
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(inputs); k++)
            for (int wl = 0; wl < NELEM(wlays); wl++)
                for (int bias = 0; bias < 4; bias++) { /* omitted, None, contiguous, strided */
                    const opr_dtype dt = FLOATS[di];
                    const spec *s = &inputs[k];
                    WHAT("linear %s input %d-d %s, weight %s, bias mode %d", opr_dtype_name(dt), s->nd,
                         lay_name[s->lay], lay_name[wlays[wl]], bias);
                    const int64_t wsh[2] = {5, 4}, bsh[1] = {5};
                    opr_tensor *x = T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -1, 1);
                    opr_tensor *w = T_lay(wlays[wl], G_REAL, dt, 2, wsh, -1, 1);
                    opr_tensor *b = bias >= 2 ? T_lay(bias == 2 ? L_C : L_S, G_REAL, dt, 1, bsh, -1, 1) : NULL;
                    opr_tensor *y = bias == 0 ? CALL("linear", TV(x), TV(w))
                                    : bias == 1 ? CALL("linear", TV(x), TV(w), opr_v_none())
                                                : CALL("linear", TV(x), TV(w), TV(b));
                    H hx = H_of(x), hw = H_of(w), wt = H_transpose2(&hw), r, sc;
                    ref_matmul(&hx, &wt, &r, &sc);
                    if (b) {
                        H hb = H_of(b);
                        for (int64_t i = 0; i < r.n; i++) {
                            r.v[i] += hb.v[i % 5];
                            sc.v[i] += fabs(hb.v[i % 5]);
                        }
                    }
                    expect_close(y, dt, &r, tol_of(dt), sc.v);
                }
}
END_TEST

START_TEST(t_addmm)
{
    static const spec selfs[] = {
        {2, {3, 5}, L_C}, {2, {3, 5}, L_T}, {2, {3, 5}, L_S}, {1, {5}, L_C}, {2, {3, 1}, L_C},
        {0, {0}, L_C}, {2, {1, 5}, L_E}, {1, {1}, L_C},
    };
    static const double ba[][2] = {{1, 1}, {0.5, 2}, {0, 1.5}, {-1, 0.25}, {2, 0}};
    static const int mlays[][2] = {{L_C, L_C}, {L_T, L_T}, {L_N, L_S}};
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(selfs); k++)
            for (int c = 0; c < NELEM(ba); c++)
                for (int l = 0; l < NELEM(mlays); l++)
                    for (int kk = 0; kk < 2; kk++) { /* inner dimension 4, or 0 */
                        const opr_dtype dt = FLOATS[di];
                        const spec *s = &selfs[k];
                        const double beta = ba[c][0], alpha = ba[c][1];
                        WHAT("addmm %s self %d-d %s beta=%g alpha=%g mats %s,%s k=%d", opr_dtype_name(dt), s->nd,
                             lay_name[s->lay], beta, alpha, lay_name[mlays[l][0]], lay_name[mlays[l][1]],
                             kk ? 0 : 4);
                        const int64_t s1[2] = {3, kk ? 0 : 4}, s2[2] = {kk ? 0 : 4, 5};
                        opr_tensor *self = T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -1, 1);
                        opr_tensor *m1 = T_lay(mlays[l][0], G_REAL, dt, 2, s1, -1, 1);
                        opr_tensor *m2 = T_lay(mlays[l][1], G_REAL, dt, 2, s2, -1, 1);
                        opr_tensor *y = (beta == 1 && alpha == 1)
                                            ? CALL("addmm", TV(self), TV(m1), TV(m2))
                                            : CALL("addmm", TV(self), TV(m1), TV(m2), opr_v_double(beta),
                                                   opr_v_double(alpha));
                        H hs = H_of(self), h1 = H_of(m1), h2 = H_of(m2), r, sc;
                        ref_matmul(&h1, &h2, &r, &sc);
                        int64_t idx[2];
                        for (int64_t i = 0; i < r.n; i++) {
                            unravel(i, 2, r.sh, idx);
                            const double sv = at_bcast(&hs, 2, idx);
                            r.v[i] = beta * sv + alpha * r.v[i];
                            sc.v[i] = fabs(beta * sv) + fabs(alpha) * sc.v[i];
                        }
                        expect_close(y, dt, &r, tol_of(dt), sc.v);
                    }
}
END_TEST

START_TEST(t_cdist)
{
    /* Values in [lo, hi). Both sides above 25 rows with 8 columns or more take the GEMM
     * path (plugins/cpu/cpu_cdist_gemm.c); points far from the origin relative to their
     * distances (values in [100, 101)) make its |x1|^2 + |x2|^2 - 2 x1 x2^T cancel, which
     * the kernel must repair. */
    static const struct {
        spec a, b;
        double lo, hi;
    } cases[] = {
        {{2, {3, 4}, L_C}, {2, {5, 4}, L_C}, -2, 2},          {{2, {3, 4}, L_T}, {2, {5, 4}, L_N}, -2, 2},
        {{2, {3, 4}, L_S}, {2, {5, 4}, L_E}, -2, 2},          {{3, {2, 3, 4}, L_C}, {3, {2, 5, 4}, L_T}, -2, 2},
        {{3, {2, 3, 4}, L_N}, {3, {1, 5, 4}, L_C}, -2, 2},    {{3, {2, 3, 4}, L_E}, {3, {2, 5, 4}, L_S}, -2, 2},
        {{2, {0, 4}, L_C}, {2, {5, 4}, L_C}, -2, 2},          {{2, {3, 4}, L_C}, {2, {0, 4}, L_C}, -2, 2},
        {{2, {3, 0}, L_C}, {2, {5, 0}, L_C}, -2, 2},          {{2, {1, 1}, L_C}, {2, {1, 1}, L_C}, -2, 2},
        {{4, {2, 2, 3, 6}, L_T}, {4, {2, 2, 4, 6}, L_C}, -2, 2},
        {{2, {30, 9}, L_C}, {2, {27, 9}, L_C}, -2, 2},        {{2, {3, 16}, L_T}, {2, {40, 16}, L_C}, -2, 2},
        {{3, {2, 26, 8}, L_C}, {3, {1, 33, 8}, L_T}, -2, 2},  {{2, {30, 16}, L_C}, {2, {28, 16}, L_C}, 100, 101},
    };
    for (int di = 0; di < NELEM(FLOATS); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = FLOATS[di];
            const spec *sa = &cases[k].a, *sb = &cases[k].b;
            WHAT("cdist %s case %d (%d-d %s, %d-d %s)", opr_dtype_name(dt), k, sa->nd, lay_name[sa->lay], sb->nd,
                 lay_name[sb->lay]);
            opr_tensor *a = T_lay(sa->lay, G_REAL, dt, sa->nd, sa->sh, cases[k].lo, cases[k].hi);
            opr_tensor *b = T_lay(sb->lay, G_REAL, dt, sb->nd, sb->sh, cases[k].lo, cases[k].hi);
            opr_tensor *y = k % 2 ? CALL("cdist", TV(a), TV(b)) : CALL("cdist", TV(a), TV(b), opr_v_double(2));
            H ha = H_of(a), hb = H_of(b);
            const int nd = ha.nd, nbd = nd - 2;
            const int64_t P = ha.sh[nd - 2], M = ha.sh[nd - 1], R = hb.sh[nd - 2];
            int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
            memcpy(sh, ha.sh, sizeof sh);
            sh[nd - 1] = R;
            H r = H_new(nd, sh);
            const int64_t nbatch = numel_of(nbd, ha.sh);
            for (int64_t bi = 0; bi < nbatch; bi++) {
                unravel(bi, nbd, ha.sh, idx);
                const double *pa = ha.v + bi * P * M, *pb = hb.v + batch_at(nbd, hb.sh, nbd, idx) * R * M;
                for (int64_t i = 0; i < P; i++)
                    for (int64_t j = 0; j < R; j++) {
                        double s = 0;
                        for (int64_t m = 0; m < M; m++) s += (pa[i * M + m] - pb[j * M + m]) * (pa[i * M + m] - pb[j * M + m]);
                        r.v[(bi * P + i) * R + j] = sqrt(s);
                    }
            }
            EXPECT(y, dt, r);
        }
    for (int di = 0; di < NELEM(FLOATS); di++) {
        WHAT("cdist %s of 40 rows with themselves: exactly 0 on the diagonal", opr_dtype_name(FLOATS[di]));
        opr_tensor *x = T_lay(L_C, G_REAL, FLOATS[di], 2, (const int64_t[]){40, 16}, -2, 2);
        H d = H_of(CALL("cdist", TV(x), TV(x)));
        for (int i = 0; i < 40; i++) REQUIRE(d.v[i * 41] == 0, "%s: distance %d to itself is %g", what, i, d.v[i * 41]);
    }
    WHAT("cdist p < 0");
    opr_tensor *a = T_any(&(spec){2, {3, 4}, L_C}, OPR_F32), *b = T_any(&(spec){2, {5, 4}, L_C}, OPR_F32);
    tu_expect_fail(ctx, "cdist", ARGS(TV(a), TV(b), opr_v_double(-1)), 1, OPR_ERR_INVALID, "p >= 0");
}
END_TEST

/* Dtypes outside an op's `dtypes:` list in core.yaml are refused before any kernel runs. */
START_TEST(t_dtype_refusals)
{
    const spec s = {2, {3, 4}, L_C};
    opr_tensor *i = T_any(&s, OPR_I64), *b = T_any(&s, OPR_BOOL), *f = T_any(&s, OPR_F32);
    static const struct {
        const char *op;
        opr_dtype dt;
        int extra; /* 0: self only; 1: self, dim 0; 2: self, self */
    } refused[] = {
        {"neg", OPR_BOOL, 0},  {"abs", OPR_BOOL, 0},    {"relu", OPR_BOOL, 0},       {"sum", OPR_BOOL, 0},
        {"max", OPR_BOOL, 0},  {"prod", OPR_BOOL, 0},   {"exp", OPR_I64, 0},         {"log", OPR_I64, 0},
        {"sqrt", OPR_I64, 0},  {"tanh", OPR_I64, 0},    {"sigmoid", OPR_I64, 0},     {"mean", OPR_I64, 0},
        {"norm", OPR_I64, 0},  {"softmax", OPR_I64, 1}, {"log_softmax", OPR_I64, 1},
        {"add", OPR_BOOL, 2},  {"mul", OPR_BOOL, 2},    {"gt", OPR_BOOL, 2},         {"le", OPR_BOOL, 2},
        {"mm", OPR_I64, 2},    {"matmul", OPR_I64, 2},  {"cdist", OPR_I64, 2},       {"sort", OPR_BOOL, 0},
        {"mode", OPR_BOOL, 0}, {"min", OPR_BOOL, 0},
    };
    for (int k = 0; k < NELEM(refused); k++) {
        WHAT("%s on %s", refused[k].op, opr_dtype_name(refused[k].dt));
        opr_tensor *x = refused[k].dt == OPR_I64 ? i : b;
        const opr_op *op = opr_op_find(ctx, refused[k].op);
        ck_assert_ptr_nonnull(op);
        const int nres = opr_op_num_outputs(op);
        if (refused[k].extra == 0)
            tu_expect_fail(ctx, refused[k].op, ARGS(TV(x)), nres, OPR_ERR_INVALID, "is not supported by this op");
        else if (refused[k].extra == 1)
            tu_expect_fail(ctx, refused[k].op, ARGS(TV(x), opr_v_int(0)), nres, OPR_ERR_INVALID,
                           "is not supported by this op");
        else
            tu_expect_fail(ctx, refused[k].op, ARGS(TV(x), TV(refused[k].op[0] == 'm' && refused[k].op[1] != 'u'
                                                                    ? K(opr_tensor_transpose(x, 0, 1))
                                                                    : x)),
                           nres, OPR_ERR_INVALID, "is not supported by this op");
    }
    WHAT("index_add on bool, arange to bool");
    tu_expect_fail(ctx, "index_add", ARGS(TV(b), opr_v_int(0), TV(T_idx(1, SH(0))), TV(T_any(&(spec){2, {1, 4}, L_C}, OPR_BOOL))), 1,
                   OPR_ERR_INVALID, "is not supported by this op");
    tu_expect_fail(ctx, "arange", ARGS(opr_v_double(0), opr_v_double(3), opr_v_double(1), opr_v_string("bool")), 1,
                   OPR_ERR_INVALID, "is not supported by this op");
    WHAT("mixed dtypes");
    tu_expect_fail(ctx, "add", ARGS(TV(f), TV(T_any(&s, OPR_F64))), 1, OPR_ERR_INVALID, "no implicit casts");
    WHAT("i64 add/sub with a fractional alpha");
    tu_expect_fail(ctx, "add", ARGS(TV(i), TV(i), opr_v_double(2.5)), 1, OPR_ERR_INVALID, "alpha");
    tu_expect_fail(ctx, "sub", ARGS(TV(i), TV(i), opr_v_double(-0.5)), 1, OPR_ERR_INVALID, "alpha");
}
END_TEST

/* ------------------------------------------------------------------ indexing */

START_TEST(t_diag)
{
    static const int64_t offs1[] = {0, 2, -1, -3};
    static const int64_t offs2[] = {0, 1, 3, -2, 4, 5, -4, -6};
    for (int di = 0; di < NELEM(ALL4); di++) {
        const opr_dtype dt = ALL4[di];
        static const spec v1[] = {{1, {4}, L_C}, {1, {4}, L_E}, {1, {4}, L_S}, {1, {1}, L_C}, {1, {0}, L_C}};
        for (int k = 0; k < NELEM(v1); k++)
            for (int o = 0; o < NELEM(offs1); o++) {
                WHAT("diag %s 1-d [%lld] %s offset %lld", opr_dtype_name(dt), (long long)v1[k].sh[0],
                     lay_name[v1[k].lay], (long long)offs1[o]);
                opr_tensor *x = T_any(&v1[k], dt);
                opr_tensor *y = o ? CALL("diag", TV(x), opr_v_int(offs1[o])) : CALL("diag", TV(x));
                H hx = H_of(x);
                const int64_t off = offs1[o], n = hx.sh[0] + llabs(off), sh[2] = {n, n};
                H r = H_new(2, sh);
                for (int64_t i = 0; i < hx.sh[0]; i++)
                    r.v[(i + (off < 0 ? -off : 0)) * n + i + (off > 0 ? off : 0)] = hx.v[i];
                EXPECT_EXACT(y, dt, r);
            }
        static const spec m2[] = {{2, {4, 5}, L_C}, {2, {4, 5}, L_T}, {2, {4, 5}, L_N}, {2, {4, 5}, L_S},
                                  {2, {5, 4}, L_C}, {2, {0, 3}, L_C}};
        for (int k = 0; k < NELEM(m2); k++)
            for (int o = 0; o < NELEM(offs2); o++) {
                WHAT("diag %s 2-d [%lld,%lld] %s offset %lld", opr_dtype_name(dt), (long long)m2[k].sh[0],
                     (long long)m2[k].sh[1], lay_name[m2[k].lay], (long long)offs2[o]);
                opr_tensor *x = T_any(&m2[k], dt);
                opr_tensor *y = CALL("diag", TV(x), opr_v_int(offs2[o]));
                H hx = H_of(x);
                const int64_t off = offs2[o], r0 = off < 0 ? -off : 0, c0 = off > 0 ? off : 0;
                int64_t len = hx.sh[0] - r0 < hx.sh[1] - c0 ? hx.sh[0] - r0 : hx.sh[1] - c0;
                if (len < 0) len = 0;
                H r = H_new(1, &len);
                for (int64_t i = 0; i < len; i++) r.v[i] = hx.v[(i + r0) * hx.sh[1] + i + c0];
                EXPECT_EXACT(y, dt, r);
            }
    }
}
END_TEST

/* out = x with dim replaced by index (0-d or 1-d). */
static void check_index_select(opr_tensor *x, int64_t dim, opr_tensor *index)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *y = CALL("index_select", TV(x), opr_v_int(dim), TV(index));
    H hx = H_of(x), hi = H_of(index);
    const int d = wrapd(dim, hx.nd);
    int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
    memcpy(sh, hx.sh, sizeof sh);
    sh[d] = hi.n;
    H r = H_new(hx.nd, sh);
    for (int64_t i = 0; i < r.n; i++) {
        unravel(i, hx.nd, sh, idx);
        idx[d] = (int64_t)hi.v[idx[d]];
        r.v[i] = hx.v[ravel(hx.nd, hx.sh, idx)];
    }
    EXPECT_EXACT(y, dt, r);
}

START_TEST(t_index_select)
{
    for (int di = 0; di < NELEM(ALL4); di++) {
        const opr_dtype dt = ALL4[di];
        static const int lays[] = {L_C, L_T, L_S, L_E};
        for (int l = 0; l < NELEM(lays); l++) {
            WHAT("index_select %s [4,5] %s", opr_dtype_name(dt), lay_name[lays[l]]);
            opr_tensor *x = T_any(&(spec){2, {4, 5}, lays[l]}, dt);
            check_index_select(x, 0, T_idx(3, (const int64_t[]){2, 0, 2}));
            check_index_select(x, 1, T_idx(4, (const int64_t[]){4, 1, 1, 0}));
            check_index_select(x, -1, T_idx(1, (const int64_t[]){3}));
            check_index_select(x, -2, T_idx(0, NULL));
            const double three = 3;
            check_index_select(x, 1, T_vals(OPR_I64, 0, NULL, &three)); /* 0-d index */
            const int64_t ish[1] = {6};
            check_index_select(x, 0, T_rindex(1, ish, 4, L_S));          /* strided index */
            check_index_select(x, 1, T_rindex(1, ish, 5, L_E));          /* stride-0 index */
        }
        WHAT("index_select %s 3-d", opr_dtype_name(dt));
        opr_tensor *x3 = T_any(&(spec){3, {2, 3, 4}, L_T}, dt);
        check_index_select(x3, 1, T_idx(5, (const int64_t[]){1, 1, 0, 2, 2}));
        check_index_select(x3, 2, T_idx(2, (const int64_t[]){2, 0}));
        check_index_select(T_any(&(spec){2, {0, 3}, L_C}, dt), 1, T_idx(2, (const int64_t[]){2, 0}));
    }
}
END_TEST

static void check_masked_select(opr_tensor *x, opr_tensor *mask)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *y = CALL("masked_select", TV(x), TV(mask));
    H hx = H_of(x), hm = H_of(mask);
    int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
    const int nd = bcast_shape(hx.nd, hx.sh, hm.nd, hm.sh, sh);
    const int64_t n = numel_of(nd, sh);
    double *vals = dalloc(n);
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, sh, idx);
        if (at_bcast(&hm, nd, idx) != 0) vals[cnt++] = at_bcast(&hx, nd, idx);
    }
    H r = H_new(1, &cnt);
    if (cnt) memcpy(r.v, vals, (size_t)cnt * sizeof *vals);
    EXPECT_EXACT(y, dt, r);
}

START_TEST(t_masked_select)
{
    static const struct {
        spec x, m;
    } cases[] = {
        {{2, {3, 4}, L_C}, {2, {3, 4}, L_C}}, {{2, {3, 4}, L_T}, {1, {4}, L_C}},   {{2, {3, 1}, L_C}, {2, {3, 4}, L_T}},
        {{2, {3, 4}, L_S}, {2, {3, 4}, L_E}}, {{2, {0, 4}, L_C}, {1, {4}, L_C}},   {{0, {0}, L_C}, {0, {0}, L_C}},
        {{1, {4}, L_N}, {3, {2, 3, 4}, L_S}}, {{0, {0}, L_C}, {2, {2, 3}, L_C}},   {{2, {300, 200}, L_C}, {2, {300, 200}, L_C}},
        {{2, {300, 200}, L_T}, {1, {200}, L_C}},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            WHAT("masked_select %s case %d (%d-d %s, mask %d-d %s)", opr_dtype_name(dt), k, cases[k].x.nd,
                 lay_name[cases[k].x.lay], cases[k].m.nd, lay_name[cases[k].m.lay]);
            check_masked_select(T_any(&cases[k].x, dt), T_any(&cases[k].m, OPR_BOOL));
        }
    WHAT("masked_select all false / all true");
    const int64_t sh[2] = {2, 3};
    const double f[6] = {0}, t[6] = {1, 1, 1, 1, 1, 1};
    check_masked_select(T_any(&(spec){2, {2, 3}, L_T}, OPR_F32), T_vals(OPR_BOOL, 2, sh, f));
    check_masked_select(T_any(&(spec){2, {2, 3}, L_T}, OPR_F64), T_vals(OPR_BOOL, 2, sh, t));
}
END_TEST

/* out[p] = x[p with p[dim] = index[p]] */
static void check_gather(opr_tensor *x, int64_t dim, opr_tensor *index)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *y = CALL("gather", TV(x), opr_v_int(dim), TV(index));
    H hx = H_of(x), hi = H_of(index);
    const int d = wrapd(dim, hx.nd);
    int64_t idx[OPR_MAX_DIMS];
    H r = H_new(hi.nd, hi.sh);
    for (int64_t i = 0; i < r.n; i++) {
        unravel(i, hi.nd, hi.sh, idx);
        if (hx.nd) idx[d] = (int64_t)hi.v[i];
        r.v[i] = hx.v[ravel(hx.nd, hx.sh, idx)];
    }
    EXPECT_EXACT(y, dt, r);
}

START_TEST(t_gather)
{
    static const struct {
        spec x;
        int64_t dim;
        spec index;
    } cases[] = {
        {{2, {3, 4}, L_C}, 0, {2, {2, 4}, L_C}},   {{2, {3, 4}, L_T}, 1, {2, {3, 2}, L_C}},
        {{2, {3, 4}, L_S}, -1, {2, {2, 6}, L_T}},  {{2, {3, 4}, L_N}, 0, {2, {5, 3}, L_S}},
        {{2, {3, 4}, L_E}, 1, {2, {3, 4}, L_E}},   {{3, {2, 3, 4}, L_T}, 1, {3, {2, 5, 3}, L_C}},
        {{3, {2, 3, 4}, L_C}, -3, {3, {4, 2, 2}, L_T}}, {{2, {3, 4}, L_C}, 1, {2, {0, 2}, L_C}},
        {{2, {3, 4}, L_C}, 0, {2, {1, 1}, L_C}},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            const spec *sx = &cases[k].x, *si = &cases[k].index;
            WHAT("gather %s case %d (self %d-d %s, dim %lld, index %s)", opr_dtype_name(dt), k, sx->nd,
                 lay_name[sx->lay], (long long)cases[k].dim, lay_name[si->lay]);
            const int64_t size = sx->sh[wrapd(cases[k].dim, sx->nd)];
            check_gather(T_any(sx, dt), cases[k].dim, T_rindex(si->nd, si->sh, size, si->lay));
        }
    for (int di = 0; di < NELEM(ALL4); di++) {
        WHAT("gather %s 0-d", opr_dtype_name(ALL4[di]));
        const double zero = 0;
        check_gather(T_any(&(spec){0, {0}, L_S}, ALL4[di]), 0, T_vals(OPR_I64, 0, NULL, &zero));
        check_gather(T_any(&(spec){0, {0}, L_C}, ALL4[di]), -1, T_vals(OPR_I64, 0, NULL, &zero));
    }
}
END_TEST

/* out = x; out[p with dim -> index[p[dim]]] += alpha * source[p] for every p of source */
static H ref_index_add(const H *hx, int64_t dim, const H *hi, const H *hs, double alpha)
{
    const int d = wrapd(dim, hx->nd);
    H r = H_new(hx->nd, hx->sh);
    memcpy(r.v, hx->v, (size_t)hx->n * sizeof *r.v);
    int64_t idx[OPR_MAX_DIMS];
    for (int64_t i = 0; i < hs->n; i++) {
        unravel(i, hs->nd, hs->sh, idx);
        if (hx->nd) idx[d] = (int64_t)hi->v[idx[d]];
        r.v[ravel(hx->nd, hx->sh, idx)] += alpha * hs->v[i];
    }
    return r;
}

static const struct {
    spec x;
    int64_t dim;
    int n;
    int64_t index[6];
    spec src;
} index_add_cases[] = {
    {{2, {4, 3}, L_C}, 0, 5, {1, 3, 1, 0, 1}, {2, {5, 3}, L_C}},
    {{2, {4, 3}, L_T}, 0, 5, {1, 3, 1, 0, 1}, {2, {5, 3}, L_T}},
    {{2, {3, 4}, L_C}, 1, 2, {2, 0}, {2, {3, 2}, L_S}},
    {{2, {3, 4}, L_S}, -1, 6, {3, 3, 0, 1, 3, 2}, {2, {3, 6}, L_N}},
    {{3, {2, 3, 4}, L_T}, 1, 4, {0, 2, 2, 1}, {3, {2, 4, 4}, L_C}},
    {{2, {3, 4}, L_C}, 0, 0, {0}, {2, {0, 4}, L_C}},
    {{2, {3, 4}, L_C}, 1, 3, {1, 1, 1}, {2, {3, 3}, L_E}},
    {{0, {0}, L_C}, 0, 1, {0}, {0, {0}, L_S}},
    {{1, {5}, L_S}, -1, 4, {4, 0, 4, 2}, {1, {4}, L_C}},
};

START_TEST(t_index_add)
{
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(index_add_cases); k++)
            for (int a = 0; a < 3; a++) { /* alpha omitted, 2, 2.5 (floats) or -3 (i64) */
                const opr_dtype dt = NUMERIC[di];
                const double alpha = a == 0 ? 1 : a == 1 ? 2 : dt == OPR_I64 ? -3 : 2.5;
                const spec *sx = &index_add_cases[k].x, *ss = &index_add_cases[k].src;
                WHAT("index_add %s case %d (self %s, source %s) alpha=%g", opr_dtype_name(dt), k, lay_name[sx->lay],
                     lay_name[ss->lay], alpha);
                opr_tensor *x = T_any(sx, dt), *s = T_any(ss, dt);
                opr_tensor *ix = T_idx(index_add_cases[k].n, index_add_cases[k].index);
                const int64_t dim = index_add_cases[k].dim;
                opr_tensor *y = a == 0 ? CALL("index_add", TV(x), opr_v_int(dim), TV(ix), TV(s))
                                       : CALL("index_add", TV(x), opr_v_int(dim), TV(ix), TV(s), opr_v_double(alpha));
                H hx = H_of(x), hi = H_of(ix), hs = H_of(s), r = ref_index_add(&hx, dim, &hi, &hs, alpha);
                EXPECT(y, dt, r);
                /* self is not modified */
                H after = H_of(x);
                for (int64_t i = 0; i < hx.n; i++) REQUIRE(after.v[i] == hx.v[i], "%s: self modified", what);
            }
    /* large enough for the threaded path: many rows, repeated indices */
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        const opr_dtype dt = NUMERIC[di];
        WHAT("index_add %s big", opr_dtype_name(dt));
        opr_tensor *x = T_any(&(spec){2, {1000, 40}, L_C}, dt), *s = T_any(&(spec){2, {1000, 50}, L_T}, dt);
        const int64_t ish[1] = {50};
        opr_tensor *ix = T_rindex(1, ish, 40, L_C);
        opr_tensor *y = CALL("index_add", TV(x), opr_v_int(1), TV(ix), TV(s), opr_v_double(2));
        H hx = H_of(x), hi = H_of(ix), hs = H_of(s), r = ref_index_add(&hx, 1, &hi, &hs, 2);
        EXPECT(y, dt, r);
    }
}
END_TEST

/* out = x; out[p with p[dim] = index[p]] += src[p] for every p of index */
START_TEST(t_scatter_add)
{
    static const struct {
        spec x;
        int64_t dim;
        spec index, src;
    } cases[] = {
        {{2, {3, 5}, L_C}, 0, {2, {4, 3}, L_C}, {2, {4, 5}, L_C}},
        {{2, {3, 5}, L_T}, 0, {2, {4, 5}, L_S}, {2, {4, 5}, L_T}},
        {{2, {3, 5}, L_C}, 1, {2, {2, 6}, L_C}, {2, {3, 7}, L_N}},
        {{2, {3, 5}, L_S}, -1, {2, {3, 8}, L_T}, {2, {3, 8}, L_S}},
        {{3, {2, 3, 4}, L_T}, 1, {3, {2, 5, 3}, L_C}, {3, {2, 5, 4}, L_C}},
        {{2, {3, 5}, L_C}, 0, {2, {0, 5}, L_C}, {2, {2, 5}, L_C}},
        {{2, {3, 5}, L_C}, 1, {2, {3, 4}, L_C}, {2, {3, 4}, L_E}},
        {{0, {0}, L_C}, 0, {0, {0}, L_C}, {0, {0}, L_S}},
        {{1, {6}, L_S}, -1, {1, {9}, L_C}, {1, {10}, L_N}},
        {{2, {200, 300}, L_T}, 1, {2, {200, 400}, L_C}, {2, {200, 400}, L_S}},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = NUMERIC[di];
            const spec *sx = &cases[k].x, *si = &cases[k].index, *ss = &cases[k].src;
            WHAT("scatter_add %s case %d (self %s, index %s, src %s)", opr_dtype_name(dt), k, lay_name[sx->lay],
                 lay_name[si->lay], lay_name[ss->lay]);
            const int d = wrapd(cases[k].dim, sx->nd);
            opr_tensor *x = T_any(sx, dt), *s = T_any(ss, dt), *ix = T_rindex(si->nd, si->sh, sx->nd ? sx->sh[d] : 1, si->lay);
            opr_tensor *y = CALL("scatter_add", TV(x), opr_v_int(cases[k].dim), TV(ix), TV(s));
            H hx = H_of(x), hi = H_of(ix), hs = H_of(s), r = H_new(hx.nd, hx.sh);
            memcpy(r.v, hx.v, (size_t)hx.n * sizeof *r.v);
            int64_t idx[OPR_MAX_DIMS];
            for (int64_t i = 0; i < hi.n; i++) {
                unravel(i, hi.nd, hi.sh, idx);
                const double v = hs.v[ravel(hs.nd, hs.sh, idx)];
                if (hx.nd) idx[d] = (int64_t)hi.v[i];
                r.v[ravel(hx.nd, hx.sh, idx)] += v;
            }
            EXPECT(y, dt, r);
        }
}
END_TEST

static void check_cat(int n, opr_tensor *const *ts, int64_t dim, bool pass_dim)
{
    const opr_dtype dt = opr_tensor_dtype(ts[0]);
    opr_tensor *y = pass_dim ? CALL("cat", opr_v_tensors(ts, n), opr_v_int(dim)) : CALL("cat", opr_v_tensors(ts, n));
    H hs[8];
    int ref = -1;
    for (int i = 0; i < n; i++) {
        hs[i] = H_of(ts[i]);
        if (ref < 0 && !(hs[i].nd == 1 && hs[i].sh[0] == 0)) ref = i;
    }
    if (ref < 0) {
        const int64_t z = 0;
        H r = H_new(1, &z);
        EXPECT_EXACT(y, dt, r);
        return;
    }
    const int nd = hs[ref].nd, d = wrapd(dim, nd);
    int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
    memcpy(sh, hs[ref].sh, sizeof sh);
    sh[d] = 0;
    for (int i = 0; i < n; i++)
        if (!(hs[i].nd == 1 && hs[i].sh[0] == 0)) sh[d] += hs[i].sh[d];
    H r = H_new(nd, sh);
    for (int64_t o = 0; o < r.n; o++) {
        unravel(o, nd, sh, idx);
        int64_t p = idx[d];
        for (int i = 0; i < n; i++) {
            if (hs[i].nd == 1 && hs[i].sh[0] == 0) continue;
            if (p < hs[i].sh[d]) {
                idx[d] = p;
                r.v[o] = hs[i].v[ravel(nd, hs[i].sh, idx)];
                break;
            }
            p -= hs[i].sh[d];
        }
    }
    EXPECT_EXACT(y, dt, r);
}

START_TEST(t_cat)
{
    static const struct {
        int n;
        spec t[3];
        int64_t dim;
    } cases[] = {
        {2, {{2, {2, 3}, L_C}, {2, {4, 3}, L_T}}, 0},
        {3, {{2, {2, 3}, L_C}, {2, {2, 1}, L_E}, {2, {2, 4}, L_N}}, 1},
        {3, {{2, {2, 3}, L_S}, {2, {2, 1}, L_C}, {2, {2, 4}, L_T}}, -1},
        {3, {{3, {2, 3, 4}, L_T}, {3, {2, 1, 4}, L_C}, {3, {2, 2, 4}, L_S}}, 1},
        {3, {{3, {2, 3, 4}, L_C}, {3, {2, 3, 1}, L_C}, {3, {2, 3, 2}, L_E}}, 2},
        {3, {{1, {0}, L_C}, {2, {2, 3}, L_C}, {2, {1, 3}, L_T}}, 0},
        {2, {{2, {2, 3}, L_C}, {1, {0}, L_C}}, 1},
        {2, {{2, {0, 3}, L_C}, {2, {2, 3}, L_C}}, 0},
        {1, {{2, {3, 2}, L_T}}, -2},
        {2, {{1, {3}, L_C}, {1, {4}, L_S}}, 0},
        {2, {{1, {0}, L_C}, {1, {0}, L_C}}, 0},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            WHAT("cat %s case %d dim %lld", opr_dtype_name(dt), k, (long long)cases[k].dim);
            opr_tensor *ts[3];
            for (int i = 0; i < cases[k].n; i++) ts[i] = T_any(&cases[k].t[i], dt);
            check_cat(cases[k].n, ts, cases[k].dim, cases[k].dim != 0 || k % 2);
        }
}
END_TEST

/* ------------------------------------------------------------------ sort, topk, mode */

/* Stable insertion sort of (v, ix) pairs; equal values keep their order. */
static void stable_sort(int64_t n, double *v, int64_t *ix, bool desc)
{
    for (int64_t i = 1; i < n; i++) {
        const double kv = v[i];
        const int64_t ki = ix[i];
        int64_t j = i;
        while (j > 0 && (desc ? v[j - 1] < kv : v[j - 1] > kv)) {
            v[j] = v[j - 1];
            ix[j] = ix[j - 1];
            j--;
        }
        v[j] = kv;
        ix[j] = ki;
    }
}

/* The first k entries of each row of x along dim, sorted stably. For topk, distinct
 * values make the result unique; for sort, k is the row length. */
static void check_sorted(const char *op, opr_tensor *x, int64_t dim, int64_t k, bool desc, int nargs)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *v, *ix;
    if (!strcmp(op, "sort")) {
        if (nargs == 1) CALL2(op, &v, &ix, TV(x));
        else if (nargs == 2) CALL2(op, &v, &ix, TV(x), opr_v_int(dim));
        else CALL2(op, &v, &ix, TV(x), opr_v_int(dim), opr_v_bool(desc));
    } else {
        if (nargs == 2) CALL2(op, &v, &ix, TV(x), opr_v_int(k));
        else CALL2(op, &v, &ix, TV(x), opr_v_int(k), opr_v_int(dim), opr_v_bool(desc), opr_v_bool(true));
    }
    H hx = H_of(x);
    const int d = wrapd(dim, hx.nd);
    int64_t outer, len, inner, sh[OPR_MAX_DIMS];
    row_geom(&hx, d, &outer, &len, &inner);
    memcpy(sh, hx.sh, sizeof sh);
    if (hx.nd) sh[d] = k;
    H rv = H_new(hx.nd, sh), ri = H_new(hx.nd, sh);
    double *buf = dalloc(len);
    int64_t *ib = KM(malloc((size_t)(len ? len : 1) * sizeof *ib));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            for (int64_t j = 0; j < len; j++) {
                buf[j] = hx.v[(o * len + j) * inner + in];
                ib[j] = j;
            }
            stable_sort(len, buf, ib, desc);
            for (int64_t j = 0; j < k; j++) {
                rv.v[(o * k + j) * inner + in] = buf[j];
                ri.v[(o * k + j) * inner + in] = (double)ib[j];
            }
        }
    EXPECT_EXACT(v, dt, rv);
    EXPECT_EXACT(ix, OPR_I64, ri);
}

START_TEST(t_sort)
{
    static const struct {
        spec x;
        int64_t dim;
    } cases[] = {
        {{2, {4, 9}, L_C}, -1}, {{2, {4, 9}, L_C}, 0},  {{2, {4, 9}, L_T}, 1},  {{2, {4, 9}, L_T}, 0},
        {{2, {4, 9}, L_S}, -1}, {{2, {4, 9}, L_N}, 0},  {{2, {4, 9}, L_E}, 0},  {{2, {3, 50}, L_C}, -1},
        {{2, {70, 3}, L_T}, 0}, {{1, {5}, L_C}, 0},     {{0, {0}, L_C}, 0},     {{0, {0}, L_C}, -1},
        {{2, {0, 3}, L_C}, -1}, {{2, {0, 3}, L_C}, 0},  {{3, {2, 3, 33}, L_S}, 2}, {{2, {1, 1}, L_C}, 1},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++)
            for (int desc = 0; desc < 2; desc++) {
                const opr_dtype dt = NUMERIC[di];
                const spec *s = &cases[k].x;
                WHAT("sort %s case %d (%d-d %s, dim %lld) descending=%d", opr_dtype_name(dt), k, s->nd,
                     lay_name[s->lay], (long long)cases[k].dim, desc);
                /* integers in [0, 4): many equal values, so stability shows */
                opr_tensor *x = T_lay(s->lay, G_INT, dt, s->nd, s->sh, 0, 4);
                const int d = wrapd(cases[k].dim, s->nd);
                check_sorted("sort", x, cases[k].dim, s->nd ? s->sh[d] : 1, desc, 3);
                check_sorted("sort", T_lay(s->lay, G_REAL, dt, s->nd, s->sh, -5, 5), cases[k].dim,
                             s->nd ? s->sh[d] : 1, desc, 3);
            }
    /* defaults: dim=-1, ascending */
    WHAT("sort defaults");
    opr_tensor *x = T_lay(L_T, G_INT, OPR_F32, 2, (const int64_t[]){5, 6}, 0, 3);
    check_sorted("sort", x, -1, 6, false, 1);
    check_sorted("sort", x, 0, 5, false, 2);
}
END_TEST

/* A tensor of distinct values (a shuffled range, scaled for floats). */
static opr_tensor *T_distinct(opr_dtype dt, const spec *s)
{
    opr_tensor *base = T_lay(s->lay, G_INT, dt, s->nd, s->sh, 0, 1);
    const int64_t n = opr_tensor_numel(base);
    double *v = dalloc(n);
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)floor(tu_uniform(0, (double)(i + 1)));
        const double t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    if (dt != OPR_I64)
        for (int64_t i = 0; i < n; i++) v[i] = v[i] * 0.37 - 5;
    /* write the values through the view, keeping its layout */
    CALL("copy_", TV(base), TV(T_vals(dt, s->nd, s->sh, v)));
    return base;
}

START_TEST(t_topk)
{
    static const struct {
        spec x;
        int64_t dim, k;
    } cases[] = {
        {{2, {4, 10}, L_C}, -1, 3}, {{2, {4, 10}, L_C}, -1, 0},  {{2, {4, 10}, L_C}, -1, 10}, {{2, {4, 10}, L_T}, 1, 4},
        {{2, {4, 10}, L_T}, 0, 2},  {{2, {4, 10}, L_S}, 0, 4},   {{2, {4, 10}, L_N}, 1, 1},   {{2, {3, 40}, L_C}, 1, 25},
        {{1, {7}, L_C}, 0, 3},      {{1, {1}, L_C}, 0, 1},       {{1, {5}, L_S}, -1, 0},      {{2, {0, 5}, L_C}, 1, 2},
        {{3, {2, 3, 20}, L_T}, 1, 2},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++)
            for (int largest = 0; largest < 2; largest++) {
                const opr_dtype dt = NUMERIC[di];
                const spec *s = &cases[k].x;
                WHAT("topk %s case %d (%d-d %s, dim %lld, k %lld) largest=%d", opr_dtype_name(dt), k, s->nd,
                     lay_name[s->lay], (long long)cases[k].dim, (long long)cases[k].k, largest);
                check_sorted("topk", T_distinct(dt, s), cases[k].dim, cases[k].k, largest, 5);
            }
    WHAT("topk defaults (dim=-1, largest)");
    check_sorted("topk", T_distinct(OPR_F64, &(spec){2, {3, 8}, L_T}), -1, 3, true, 2);
    /* ties: only the values are specified */
    WHAT("topk with ties");
    const int64_t sh[1] = {6};
    const double v[6] = {1, 3, 3, 2, 3, 1};
    opr_tensor *tv, *ti;
    CALL2("topk", &tv, &ti, TV(T_vals(OPR_F32, 1, sh, v)), opr_v_int(4));
    const int64_t k4 = 4;
    H r = H_new(1, &k4);
    const double want[4] = {3, 3, 3, 2};
    memcpy(r.v, want, sizeof want);
    EXPECT_EXACT(tv, OPR_F32, r);
    H hi = H_of(ti);
    for (int i = 0; i < 4; i++) REQUIRE(v[(int)hi.v[i]] == want[i], "topk ties: index %g holds %g", hi.v[i], v[(int)hi.v[i]]);
}
END_TEST

static void check_mode(opr_tensor *x, int64_t dim, bool keep, int nargs)
{
    const opr_dtype dt = opr_tensor_dtype(x);
    opr_tensor *v, *ix;
    if (nargs == 1) CALL2("mode", &v, &ix, TV(x));
    else CALL2("mode", &v, &ix, TV(x), opr_v_int(dim), opr_v_bool(keep));
    H hx = H_of(x);
    const int d = wrapd(dim, hx.nd);
    int64_t outer, len, inner, sh[OPR_MAX_DIMS] = {0};
    row_geom(&hx, d, &outer, &len, &inner);
    int on = 0;
    for (int i = 0; i < hx.nd; i++)
        if (i != d) sh[on++] = hx.sh[i];
        else if (keep) sh[on++] = 1;
    H rv = H_new(on, sh), ri = H_new(on, sh);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double best = 0;
            int64_t best_n = 0, last = -1;
            for (int64_t j = 0; j < len; j++) {
                const double c = hx.v[(o * len + j) * inner + in];
                int64_t cnt = 0, lj = -1;
                for (int64_t q = 0; q < len; q++)
                    if (hx.v[(o * len + q) * inner + in] == c) {
                        cnt++;
                        lj = q;
                    }
                if (cnt > best_n || (cnt == best_n && c < best)) {
                    best = c;
                    best_n = cnt;
                    last = lj;
                }
            }
            rv.v[o * inner + in] = best;
            ri.v[o * inner + in] = (double)last;
        }
    EXPECT_EXACT(v, dt, rv);
    EXPECT_EXACT(ix, OPR_I64, ri);
}

START_TEST(t_mode)
{
    static const struct {
        spec x;
        int64_t dim;
    } cases[] = {
        {{2, {4, 12}, L_C}, -1}, {{2, {4, 12}, L_C}, 0}, {{2, {4, 12}, L_T}, 1}, {{2, {4, 12}, L_T}, 0},
        {{2, {4, 12}, L_S}, -1}, {{2, {4, 12}, L_N}, 0}, {{2, {4, 12}, L_E}, 0}, {{3, {2, 3, 7}, L_T}, 1},
        {{1, {5}, L_C}, 0},      {{1, {1}, L_C}, 0},     {{2, {3, 1}, L_C}, 1},  {{2, {3, 40}, L_C}, 1},
    };
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(cases); k++)
            for (int keep = 0; keep < 2; keep++) {
                const opr_dtype dt = NUMERIC[di];
                const spec *s = &cases[k].x;
                WHAT("mode %s case %d (%d-d %s, dim %lld) keepdim=%d", opr_dtype_name(dt), k, s->nd,
                     lay_name[s->lay], (long long)cases[k].dim, keep);
                check_mode(T_lay(s->lay, G_INT, dt, s->nd, s->sh, -2, 2), cases[k].dim, keep, 3);
            }
    WHAT("mode ties and defaults");
    const int64_t sh[2] = {2, 6};
    const double v[12] = {3, 1, 3, 1, 2, 2, /* three values twice: 1 wins, last at 3 */
                          5, 5, 4, 4, 4, 5};
    check_mode(T_vals(OPR_F64, 2, sh, v), -1, false, 1);
    check_mode(T_vals(OPR_I64, 2, sh, v), -1, true, 3);
}
END_TEST

/* ------------------------------------------------------------------ scatter into diagonals, masks */

START_TEST(t_diagonal_scatter)
{
    static const struct {
        spec x;
        int64_t off, d1, d2;
        int src_lay;
    } cases[] = {
        {{2, {4, 5}, L_C}, 0, 0, 1, L_C},    {{2, {4, 5}, L_T}, 2, 0, 1, L_S},   {{2, {4, 5}, L_S}, -1, 0, 1, L_C},
        {{2, {4, 5}, L_N}, 5, 0, 1, L_C},    {{2, {4, 5}, L_C}, -4, 0, 1, L_C},  {{2, {4, 5}, L_C}, 1, 1, 0, L_E},
        {{3, {2, 3, 4}, L_C}, 1, 1, 2, L_T}, {{3, {2, 3, 4}, L_T}, -1, 0, 2, L_C}, {{3, {2, 3, 4}, L_C}, 0, -1, 0, L_S},
        {{2, {0, 3}, L_C}, 0, 0, 1, L_C},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            const spec *sx = &cases[k].x;
            const int64_t off = cases[k].off;
            const int d1 = wrapd(cases[k].d1, sx->nd), d2 = wrapd(cases[k].d2, sx->nd);
            WHAT("diagonal_scatter %s case %d (self %s, offset %lld, dims %d %d, src %s)", opr_dtype_name(dt), k,
                 lay_name[sx->lay], (long long)off, d1, d2, lay_name[cases[k].src_lay]);
            const int64_t r0 = off < 0 ? -off : 0, c0 = off > 0 ? off : 0;
            int64_t len = sx->sh[d1] - r0 < sx->sh[d2] - c0 ? sx->sh[d1] - r0 : sx->sh[d2] - c0;
            if (len < 0) len = 0;
            int64_t ssh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS], sidx[OPR_MAX_DIMS];
            int sn = 0;
            for (int d = 0; d < sx->nd; d++)
                if (d != d1 && d != d2) ssh[sn++] = sx->sh[d];
            ssh[sn++] = len;
            opr_tensor *x = T_any(sx, dt);
            opr_tensor *src = T_lay(cases[k].src_lay, dt == OPR_BOOL ? G_INT : G_REAL, dt, sn, ssh,
                                    dt == OPR_BOOL ? 0 : -9, dt == OPR_BOOL ? 2 : 9);
            opr_tensor *y = (off == 0 && d1 == 0 && d2 == 1)
                                ? CALL("diagonal_scatter", TV(x), TV(src))
                                : CALL("diagonal_scatter", TV(x), TV(src), opr_v_int(off), opr_v_int(cases[k].d1),
                                       opr_v_int(cases[k].d2));
            H hx = H_of(x), hs = H_of(src), r = H_new(hx.nd, hx.sh);
            memcpy(r.v, hx.v, (size_t)hx.n * sizeof *r.v);
            for (int64_t i = 0; i < hs.n; i++) {
                unravel(i, sn, ssh, sidx);
                for (int d = 0, j = 0; d < hx.nd; d++)
                    if (d != d1 && d != d2) idx[d] = sidx[j++];
                idx[d1] = sidx[sn - 1] + r0;
                idx[d2] = sidx[sn - 1] + c0;
                r.v[ravel(hx.nd, hx.sh, idx)] = hs.v[i];
            }
            EXPECT_EXACT(y, dt, r);
        }
}
END_TEST

START_TEST(t_masked_scatter)
{
    static const struct {
        spec x, m, src;
    } cases[] = {
        {{2, {3, 4}, L_C}, {2, {3, 4}, L_C}, {1, {20}, L_C}},
        {{2, {3, 4}, L_T}, {1, {4}, L_C}, {2, {3, 5}, L_T}},
        {{2, {3, 1}, L_C}, {2, {3, 4}, L_S}, {1, {12}, L_C}},
        {{2, {2, 3}, L_S}, {2, {2, 3}, L_E}, {1, {6}, L_S}},
        {{2, {3, 4}, L_N}, {0, {0}, L_C}, {2, {4, 4}, L_C}},
        {{2, {0, 4}, L_C}, {1, {4}, L_C}, {1, {1}, L_C}},
        {{0, {0}, L_C}, {0, {0}, L_C}, {1, {2}, L_C}},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            WHAT("masked_scatter %s case %d (self %s, mask %d-d %s, source %s)", opr_dtype_name(dt), k,
                 lay_name[cases[k].x.lay], cases[k].m.nd, lay_name[cases[k].m.lay], lay_name[cases[k].src.lay]);
            opr_tensor *x = T_any(&cases[k].x, dt), *m = T_any(&cases[k].m, OPR_BOOL), *s = T_any(&cases[k].src, dt);
            opr_tensor *y = CALL("masked_scatter", TV(x), TV(m), TV(s));
            H hx = H_of(x), hm = H_of(m), hs = H_of(s);
            int64_t sh[OPR_MAX_DIMS], idx[OPR_MAX_DIMS];
            const int nd = bcast_shape(hx.nd, hx.sh, hm.nd, hm.sh, sh);
            H r = H_new(nd, sh);
            int64_t used = 0;
            for (int64_t i = 0; i < r.n; i++) {
                unravel(i, nd, sh, idx);
                r.v[i] = at_bcast(&hm, nd, idx) != 0 ? hs.v[used++] : at_bcast(&hx, nd, idx);
            }
            EXPECT_EXACT(y, dt, r);
        }
}
END_TEST

/* ------------------------------------------------------------------ factories */

static const char *const dtype_str[] = {"f32", "f64", "i64", "bool"};

START_TEST(t_fill_factories)
{
    static const struct {
        int nd;
        int64_t sh[3];
    } shapes[] = {{2, {2, 3}}, {0, {0}}, {2, {0, 4}}, {3, {1, 1, 1}}, {1, {40000}}};
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(shapes); k++) {
            const opr_dtype dt = ALL4[di];
            const double fv = dt == OPR_I64 ? -7 : dt == OPR_BOOL ? 1 : 2.5;
            WHAT("zeros/ones/full %s %d-d", dtype_str[di], shapes[k].nd);
            const opr_value size = opr_v_ints(shapes[k].sh, shapes[k].nd);
            opr_tensor *z = CALL("zeros", size, opr_v_string(dtype_str[di]));
            opr_tensor *o = CALL("ones", size, opr_v_string(dtype_str[di]), opr_v_string("cpu"));
            opr_tensor *f = CALL("full", size, opr_v_double(fv), opr_v_string(dtype_str[di]));
            H r = H_new(shapes[k].nd, shapes[k].sh);
            EXPECT_EXACT(z, dt, r);
            for (int64_t i = 0; i < r.n; i++) r.v[i] = 1;
            EXPECT_EXACT(o, dt, r);
            for (int64_t i = 0; i < r.n; i++) r.v[i] = fv;
            EXPECT_EXACT(f, dt, r);
        }
    WHAT("factory defaults (f32)");
    const int64_t sh[2] = {3, 2};
    H r = H_new(2, sh);
    EXPECT_EXACT(CALL("zeros", opr_v_ints(sh, 2)), OPR_F32, r);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = 1;
    EXPECT_EXACT(CALL("ones", opr_v_ints(sh, 2)), OPR_F32, r);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = -0.25;
    EXPECT_EXACT(CALL("full", opr_v_ints(sh, 2), opr_v_double(-0.25)), OPR_F32, r);
    WHAT("full bool with a nonzero non-one value, full f32 rounding, full f64 with an int value");
    for (int64_t i = 0; i < r.n; i++) r.v[i] = 1;
    EXPECT_EXACT(CALL("full", opr_v_ints(sh, 2), opr_v_double(2.5), opr_v_string("bool")), OPR_BOOL, r);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = (float)0.1;
    EXPECT_EXACT(CALL("full", opr_v_ints(sh, 2), opr_v_double(0.1)), OPR_F32, r);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = 3;
    EXPECT_EXACT(CALL("full", opr_v_ints(sh, 2), opr_v_int(3), opr_v_string("f64")), OPR_F64, r);
}
END_TEST

START_TEST(t_arange)
{
    static const struct {
        double start, end, step;
        const char *dt;
        int nargs; /* 2: start, end; 3: + step; 4: + dtype */
    } cases[] = {
        {0, 5, 1, "f32", 2},       {0, 5, 1, "i64", 4},       {1, -2, -0.5, "f32", 4},  {10, 0, -3, "i64", 4},
        {0.5, 2, 0.25, "f64", 4},  {2, 2, 1, "f32", 2},       {3, 1, 1, "i64", 4},      {-3, 3, 1.5, "f32", 3},
        {0, 40000, 1, "i64", 4},   {0, 40000, 1, "f32", 4},   {5, -40000, -1, "f64", 4}, {-1, 1, 0.125, "f64", 4},
        {0, 1, 1, "i64", 4},       {7, 8, 3, "f32", 3},
    };
    for (int k = 0; k < NELEM(cases); k++) {
        opr_dtype dt;
        ck_assert_int_eq(opr_dtype_parse(cases[k].dt, &dt), OPR_OK);
        const double a = cases[k].start, b = cases[k].end, s = cases[k].step;
        WHAT("arange(%g, %g, %g, %s)", a, b, s, cases[k].dt);
        opr_tensor *y = cases[k].nargs == 2   ? CALL("arange", opr_v_double(a), opr_v_double(b))
                        : cases[k].nargs == 3 ? CALL("arange", opr_v_double(a), opr_v_double(b), opr_v_double(s))
                                              : CALL("arange", opr_v_double(a), opr_v_double(b), opr_v_double(s),
                                                     opr_v_string(cases[k].dt));
        int64_t n = (int64_t)ceil((b - a) / s);
        if (n < 0) n = 0;
        H r = H_new(1, &n);
        for (int64_t i = 0; i < n; i++) r.v[i] = dt == OPR_F32 ? (double)(float)(a + (double)i * s) : a + (double)i * s;
        EXPECT_EXACT(y, dt, r);
    }
}
END_TEST

START_TEST(t_like)
{
    static const spec shapes[] = {{2, {3, 4}, L_T}, {2, {3, 4}, L_E}, {0, {0}, L_C}, {2, {0, 2}, L_C}, {3, {2, 3, 4}, L_S}};
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(shapes); k++) {
            const opr_dtype dt = ALL4[di];
            WHAT("zeros_like/ones_like %s %d-d %s", opr_dtype_name(dt), shapes[k].nd, lay_name[shapes[k].lay]);
            opr_tensor *x = T_any(&shapes[k], dt);
            opr_tensor *z = CALL("zeros_like", TV(x)), *o = CALL("ones_like", TV(x));
            H r = H_new(shapes[k].nd, shapes[k].sh);
            EXPECT_EXACT(z, dt, r);
            for (int64_t i = 0; i < r.n; i++) r.v[i] = 1;
            EXPECT_EXACT(o, dt, r);
            ck_assert_msg(!opr_tensor_shares_storage(z, x) && !opr_tensor_shares_storage(o, x), "%s: result aliases self",
                          what);
        }
}
END_TEST

/* ------------------------------------------------------------------ in place */

/* An in-place op's result is self: same storage, shape, strides and offset. */
static void expect_is_self(const opr_tensor *r, const opr_tensor *self)
{
    ck_assert_msg(opr_tensor_shares_storage(r, self), "%s: result does not alias self", what);
    ck_assert_msg(opr_tensor_offset(r) == opr_tensor_offset(self), "%s: result offset differs from self's", what);
    ck_assert_int_eq(opr_tensor_ndim(r), opr_tensor_ndim(self));
    for (int d = 0; d < opr_tensor_ndim(self); d++) {
        ck_assert_int_eq(opr_tensor_size(r, d), opr_tensor_size(self, d));
        ck_assert_int_eq(opr_tensor_stride(r, d), opr_tensor_stride(self, d));
    }
}

/* Values of self after an in-place op, checked through self and through its base. */
static void expect_through_base(opr_tensor *base, const H *want_base)
{
    EXPECT_EXACT(base, opr_tensor_dtype(base), *want_base);
}

START_TEST(t_copy_)
{
    for (int di = 0; di < NELEM(ALL4); di++) {
        const opr_dtype dt = ALL4[di];
        /* broadcast src into a contiguous self */
        WHAT("copy_ %s broadcast src", opr_dtype_name(dt));
        opr_tensor *self = T_any(&(spec){2, {3, 4}, L_C}, dt), *src = T_any(&(spec){1, {4}, L_S}, dt);
        opr_tensor *r = CALL("copy_", TV(self), TV(src));
        expect_is_self(r, self);
        H hs = H_of(src), want = H_new(2, (const int64_t[]){3, 4});
        for (int64_t i = 0; i < 12; i++) want.v[i] = hs.v[i % 4];
        EXPECT_EXACT(self, dt, want);
        EXPECT_EXACT(r, dt, want);

        /* into a transposed view: the base sees the transpose */
        WHAT("copy_ %s into a transposed self", opr_dtype_name(dt));
        opr_tensor *base = T_any(&(spec){2, {4, 3}, L_C}, dt);
        opr_tensor *tv = K(opr_tensor_transpose(base, 0, 1));
        opr_tensor *src2 = T_any(&(spec){2, {3, 4}, L_N}, dt);
        r = CALL("copy_", TV(tv), TV(src2));
        expect_is_self(r, tv);
        ck_assert(opr_tensor_shares_storage(r, base));
        H h2 = H_of(src2);
        EXPECT_EXACT(tv, dt, h2);
        H wb = H_transpose2(&h2);
        expect_through_base(base, &wb);

        /* broadcast src ([3,1]) into a transposed self, and a column of the base */
        WHAT("copy_ %s broadcast into a transposed self", opr_dtype_name(dt));
        opr_tensor *src3 = T_any(&(spec){2, {3, 1}, L_C}, dt);
        r = CALL("copy_", TV(tv), TV(src3));
        expect_is_self(r, tv);
        H h3 = H_of(src3), w3 = H_new(2, (const int64_t[]){3, 4});
        for (int64_t i = 0; i < 12; i++) w3.v[i] = h3.v[i / 4];
        EXPECT_EXACT(tv, dt, w3);
        H wb3 = H_transpose2(&w3);
        expect_through_base(base, &wb3);

        /* into a narrowed window: the rest of the base is untouched */
        WHAT("copy_ %s into a narrowed self", opr_dtype_name(dt));
        opr_tensor *base4 = T_any(&(spec){2, {3, 6}, L_C}, dt);
        H before = H_of(base4);
        opr_tensor *win = K(opr_tensor_narrow(base4, 1, 2, 3));
        opr_tensor *src4 = T_any(&(spec){2, {3, 3}, L_T}, dt);
        r = CALL("copy_", TV(win), TV(src4));
        expect_is_self(r, win);
        H h4 = H_of(src4);
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 3; j++) before.v[i * 6 + 2 + j] = h4.v[i * 3 + j];
        expect_through_base(base4, &before);

        /* src overlapping self: x.copy_(x.t()) gives the transpose of the old x */
        WHAT("copy_ %s from an overlapping view", opr_dtype_name(dt));
        opr_tensor *sq = T_any(&(spec){2, {4, 4}, L_C}, dt);
        H hsq = H_of(sq), wsq = H_transpose2(&hsq);
        r = CALL("copy_", TV(sq), TV(K(opr_tensor_transpose(sq, 0, 1))));
        expect_is_self(r, sq);
        EXPECT_EXACT(sq, dt, wsq);

        /* a view copied onto itself */
        WHAT("copy_ %s onto itself", opr_dtype_name(dt));
        opr_tensor *same = T_any(&(spec){2, {3, 4}, L_T}, dt);
        H hsame = H_of(same);
        r = CALL("copy_", TV(same), TV(same));
        expect_is_self(r, same);
        EXPECT_EXACT(same, dt, hsame);

        /* shifted overlapping windows of one vector, in both directions */
        for (int dir = 0; dir < 2; dir++) {
            WHAT("copy_ %s overlapping shift %s", opr_dtype_name(dt), dir ? "left" : "right");
            opr_tensor *vec = T_any(&(spec){1, {10}, L_C}, dt);
            H hv = H_of(vec), wv = H_of(vec);
            for (int64_t i = 0; i < 9; i++) wv.v[dir ? i : i + 1] = hv.v[dir ? i + 1 : i];
            opr_tensor *dst = K(opr_tensor_narrow(vec, 0, dir ? 0 : 1, 9)), *from = K(opr_tensor_narrow(vec, 0, dir ? 1 : 0, 9));
            r = CALL("copy_", TV(dst), TV(from));
            expect_is_self(r, dst);
            expect_through_base(vec, &wv);
        }

        /* writing through an expanded self is refused, and self is left as it was */
        WHAT("copy_/fill_/masked_fill_ %s into an expanded self", opr_dtype_name(dt));
        opr_tensor *row = T_any(&(spec){2, {1, 4}, L_C}, dt);
        H hrow = H_of(row);
        opr_tensor *ex = K(opr_tensor_expand(row, SH(3, 4), 2));
        tu_expect_fail(ctx, "copy_", ARGS(TV(ex), TV(T_any(&(spec){2, {3, 4}, L_C}, dt))), 1, OPR_ERR_INVALID,
                       "same memory location");
        tu_expect_fail(ctx, "fill_", ARGS(TV(ex), opr_v_double(1)), 1, OPR_ERR_INVALID, "same memory location");
        tu_expect_fail(ctx, "masked_fill_", ARGS(TV(ex), TV(T_any(&(spec){1, {4}, L_C}, OPR_BOOL)), opr_v_double(1)), 1,
                       OPR_ERR_INVALID, "same memory location");
        if (dt != OPR_BOOL)
            tu_expect_fail(ctx, "index_add_",
                           ARGS(TV(ex), opr_v_int(1), TV(T_idx(1, SH(0))), TV(T_any(&(spec){2, {3, 1}, L_C}, dt))), 1,
                           OPR_ERR_INVALID, "same memory location");
        EXPECT_EXACT(row, dt, hrow);

        /* 0-d into 0-d, 0-d broadcast into [2,3], empty */
        WHAT("copy_ %s 0-d and empty", opr_dtype_name(dt));
        opr_tensor *z0 = T_any(&(spec){0, {0}, L_C}, dt), *z1 = T_any(&(spec){0, {0}, L_S}, dt);
        r = CALL("copy_", TV(z0), TV(z1));
        expect_is_self(r, z0);
        H hz = H_of(z1);
        EXPECT_EXACT(z0, dt, hz);
        opr_tensor *m = T_any(&(spec){2, {2, 3}, L_T}, dt);
        r = CALL("copy_", TV(m), TV(z1));
        H wm = H_new(2, (const int64_t[]){2, 3});
        for (int64_t i = 0; i < 6; i++) wm.v[i] = hz.v[0];
        EXPECT_EXACT(m, dt, wm);
        opr_tensor *e = T_any(&(spec){2, {0, 3}, L_C}, dt);
        r = CALL("copy_", TV(e), TV(T_any(&(spec){1, {3}, L_C}, dt)));
        expect_is_self(r, e);
    }
}
END_TEST

START_TEST(t_fill_)
{
    for (int di = 0; di < NELEM(ALL4); di++) {
        const opr_dtype dt = ALL4[di];
        const double v = dt == OPR_I64 ? 7 : dt == OPR_BOOL ? 1 : -2.5;
        WHAT("fill_ %s transposed self", opr_dtype_name(dt));
        opr_tensor *base = T_any(&(spec){2, {4, 3}, L_C}, dt);
        opr_tensor *tv = K(opr_tensor_transpose(base, 0, 1));
        opr_tensor *r = CALL("fill_", TV(tv), opr_v_double(v));
        expect_is_self(r, tv);
        H w = H_new(2, (const int64_t[]){4, 3});
        for (int64_t i = 0; i < 12; i++) w.v[i] = v;
        expect_through_base(base, &w);

        WHAT("fill_ %s narrowed self", opr_dtype_name(dt));
        opr_tensor *b2 = T_any(&(spec){2, {3, 6}, L_C}, dt);
        H before = H_of(b2);
        opr_tensor *win = K(opr_tensor_narrow(b2, 1, 1, 3));
        r = CALL("fill_", TV(win), opr_v_int(dt == OPR_BOOL ? 0 : 4));
        expect_is_self(r, win);
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 1; j < 4; j++) before.v[i * 6 + j] = dt == OPR_BOOL ? 0 : 4;
        expect_through_base(b2, &before);

        WHAT("fill_ %s 0-d, empty and big", opr_dtype_name(dt));
        opr_tensor *z = T_any(&(spec){0, {0}, L_C}, dt);
        r = CALL("fill_", TV(z), opr_v_double(v));
        H wz = H_new(0, NULL);
        wz.v[0] = v;
        EXPECT_EXACT(z, dt, wz);
        r = CALL("fill_", TV(T_any(&(spec){2, {0, 3}, L_C}, dt)), opr_v_double(v));
        opr_tensor *big = T_any(&(spec){2, {300, 200}, L_T}, dt);
        r = CALL("fill_", TV(big), opr_v_double(v));
        H wbig = H_new(2, (const int64_t[]){300, 200});
        for (int64_t i = 0; i < wbig.n; i++) wbig.v[i] = v;
        EXPECT_EXACT(big, dt, wbig);
    }
    WHAT("fill_ f32 rounding");
    opr_tensor *x = T_any(&(spec){1, {3}, L_C}, OPR_F32);
    CALL("fill_", TV(x), opr_v_double(0.1));
    H w = H_new(1, (const int64_t[]){3});
    for (int i = 0; i < 3; i++) w.v[i] = (float)0.1;
    EXPECT_EXACT(x, OPR_F32, w);
}
END_TEST

START_TEST(t_index_add_)
{
    for (int di = 0; di < NELEM(NUMERIC); di++)
        for (int k = 0; k < NELEM(index_add_cases); k++)
            for (int a = 0; a < 2; a++) {
                const opr_dtype dt = NUMERIC[di];
                const double alpha = a ? (dt == OPR_I64 ? 3 : 0.75) : 1;
                const spec *sx = &index_add_cases[k].x, *ss = &index_add_cases[k].src;
                if (sx->lay == L_E) continue;
                WHAT("index_add_ %s case %d (self %s, source %s) alpha=%g", opr_dtype_name(dt), k, lay_name[sx->lay],
                     lay_name[ss->lay], alpha);
                opr_tensor *x = T_any(sx, dt), *s = T_any(ss, dt);
                opr_tensor *ix = T_idx(index_add_cases[k].n, index_add_cases[k].index);
                const int64_t dim = index_add_cases[k].dim;
                H hx = H_of(x), hi = H_of(ix), hs = H_of(s), r = ref_index_add(&hx, dim, &hi, &hs, alpha);
                opr_tensor *y = a ? CALL("index_add_", TV(x), opr_v_int(dim), TV(ix), TV(s), opr_v_double(alpha))
                                  : CALL("index_add_", TV(x), opr_v_int(dim), TV(ix), TV(s));
                expect_is_self(y, x);
                EXPECT(x, dt, r);
            }
    /* into a transposed view of a base, the base sees the sums */
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        const opr_dtype dt = NUMERIC[di];
        WHAT("index_add_ %s through a transposed view", opr_dtype_name(dt));
        opr_tensor *base = T_any(&(spec){2, {4, 3}, L_C}, dt);
        opr_tensor *tv = K(opr_tensor_transpose(base, 0, 1));
        opr_tensor *s = T_any(&(spec){2, {3, 3}, L_C}, dt), *ix = T_idx(3, (const int64_t[]){0, 2, 0});
        H hx = H_of(tv), hi = H_of(ix), hs = H_of(s), r = ref_index_add(&hx, 1, &hi, &hs, 1);
        opr_tensor *y = CALL("index_add_", TV(tv), opr_v_int(1), TV(ix), TV(s));
        expect_is_self(y, tv);
        EXPECT(tv, dt, r);
        H rb = H_transpose2(&r);
        EXPECT(base, dt, rb);

        WHAT("index_add_ %s with a source that is a window of self", opr_dtype_name(dt));
        opr_tensor *x = T_any(&(spec){2, {4, 3}, L_C}, dt);
        opr_tensor *win = K(opr_tensor_narrow(x, 0, 0, 2)), *ix2 = T_idx(2, SH(1, 0));
        H hx2 = H_of(x), hw = H_of(win), hi2 = H_of(ix2), r2 = ref_index_add(&hx2, 0, &hi2, &hw, 1);
        y = CALL("index_add_", TV(x), opr_v_int(0), TV(ix2), TV(win));
        expect_is_self(y, x);
        EXPECT(x, dt, r2);
    }
}
END_TEST

START_TEST(t_masked_fill_)
{
    static const struct {
        spec x, m;
    } cases[] = {
        {{2, {3, 4}, L_C}, {2, {3, 4}, L_C}}, {{2, {3, 4}, L_T}, {1, {4}, L_C}},    {{2, {3, 4}, L_N}, {2, {3, 1}, L_S}},
        {{2, {3, 4}, L_S}, {0, {0}, L_C}},    {{2, {0, 4}, L_C}, {1, {4}, L_C}},    {{0, {0}, L_C}, {0, {0}, L_C}},
        {{2, {300, 200}, L_T}, {2, {300, 200}, L_C}},
    };
    for (int di = 0; di < NELEM(ALL4); di++)
        for (int k = 0; k < NELEM(cases); k++) {
            const opr_dtype dt = ALL4[di];
            const double v = dt == OPR_I64 ? -4 : dt == OPR_BOOL ? 1 : 1.25;
            WHAT("masked_fill_ %s case %d (self %s, mask %d-d %s)", opr_dtype_name(dt), k, lay_name[cases[k].x.lay],
                 cases[k].m.nd, lay_name[cases[k].m.lay]);
            opr_tensor *x = T_any(&cases[k].x, dt), *m = T_any(&cases[k].m, OPR_BOOL);
            H hx = H_of(x), hm = H_of(m);
            int64_t idx[OPR_MAX_DIMS];
            for (int64_t i = 0; i < hx.n; i++) {
                unravel(i, hx.nd, hx.sh, idx);
                if (at_bcast(&hm, hx.nd, idx) != 0) hx.v[i] = v;
            }
            opr_tensor *y = CALL("masked_fill_", TV(x), TV(m), opr_v_double(v));
            expect_is_self(y, x);
            EXPECT_EXACT(x, dt, hx);
        }
}
END_TEST

/* ------------------------------------------------------------------ views */

/* y has shape (nd, sh) and y[i] = x[off + sum i_d * st[d]], x read in row-major order. */
static void expect_strided(const opr_tensor *y, opr_dtype dt, const H *x, int nd, const int64_t *sh,
                           const int64_t *st, int64_t off)
{
    H r = H_new(nd, sh);
    int64_t idx[OPR_MAX_DIMS];
    for (int64_t i = 0; i < r.n; i++) {
        unravel(i, nd, sh, idx);
        int64_t o = off;
        for (int d = 0; d < nd; d++) o += idx[d] * st[d];
        r.v[i] = x->v[o];
    }
    EXPECT_EXACT(y, dt, r);
}

START_TEST(t_views)
{
    static const opr_dtype dts[] = {OPR_F64, OPR_I64, OPR_BOOL, OPR_F32};
    for (int di = 0; di < NELEM(dts); di++) {
        const opr_dtype dt = dts[di];
        /* x: [2,3,4] contiguous, strides 12, 4, 1 */
        opr_tensor *x = T_any(&(spec){3, {2, 3, 4}, L_C}, dt), *m = T_any(&(spec){2, {3, 4}, L_C}, dt);
        H hx = H_of(x), hm = H_of(m);
        WHAT("t %s", opr_dtype_name(dt));
        expect_strided(CALL("t", TV(m)), dt, &hm, 2, SH(4, 3), SH(1, 4), 0);
        opr_tensor *v1 = T_any(&(spec){1, {5}, L_C}, dt);
        H hv1 = H_of(v1);
        expect_strided(CALL("t", TV(v1)), dt, &hv1, 1, SH(5), SH(1), 0);
        WHAT("transpose %s", opr_dtype_name(dt));
        expect_strided(CALL("transpose", TV(x), opr_v_int(0), opr_v_int(-1)), dt, &hx, 3, SH(4, 3, 2), SH(1, 4, 12), 0);
        expect_strided(CALL("transpose", TV(x), opr_v_int(1), opr_v_int(1)), dt, &hx, 3, SH(2, 3, 4), SH(12, 4, 1), 0);
        WHAT("permute %s", opr_dtype_name(dt));
        expect_strided(CALL("permute", TV(x), opr_v_ints(SH(2, 0, 1), 3)), dt, &hx, 3, SH(4, 2, 3), SH(1, 12, 4), 0);
        expect_strided(CALL("permute", TV(x), opr_v_ints(SH(-2, -1, 0), 3)), dt, &hx, 3, SH(3, 4, 2), SH(4, 1, 12), 0);
        WHAT("reshape %s", opr_dtype_name(dt));
        expect_strided(CALL("reshape", TV(x), opr_v_ints(SH(6, -1), 2)), dt, &hx, 2, SH(6, 4), SH(4, 1), 0);
        expect_strided(CALL("reshape", TV(x), opr_v_ints(SH(24), 1)), dt, &hx, 1, SH(24), SH(1), 0);
        opr_tensor *xt = K(opr_tensor_transpose(x, 0, 2)); /* [4,3,2], needs a copy */
        H hxt = H_of(xt);
        expect_strided(CALL("reshape", TV(xt), opr_v_ints(SH(-1), 1)), dt, &hxt, 1, SH(24), SH(1), 0);
        expect_strided(CALL("reshape", TV(xt), opr_v_ints(SH(2, 2, 3, 2), 4)), dt, &hxt, 4, SH(2, 2, 3, 2),
                       SH(12, 6, 2, 1), 0);
        opr_tensor *s0 = T_any(&(spec){0, {0}, L_C}, dt);
        H hs0 = H_of(s0);
        expect_strided(CALL("reshape", TV(s0), opr_v_ints(SH(1, 1), 2)), dt, &hs0, 2, SH(1, 1), SH(0, 0), 0);
        WHAT("expand %s", opr_dtype_name(dt));
        opr_tensor *c = T_any(&(spec){2, {3, 1}, L_C}, dt);
        H hc = H_of(c);
        expect_strided(CALL("expand", TV(c), opr_v_ints(SH(2, 3, 4), 3)), dt, &hc, 3, SH(2, 3, 4), SH(0, 1, 0), 0);
        expect_strided(CALL("expand", TV(c), opr_v_ints(SH(-1, 5), 2)), dt, &hc, 2, SH(3, 5), SH(1, 0), 0);
        WHAT("unsqueeze %s", opr_dtype_name(dt));
        expect_strided(CALL("unsqueeze", TV(x), opr_v_int(1)), dt, &hx, 4, SH(2, 1, 3, 4), SH(12, 0, 4, 1), 0);
        expect_strided(CALL("unsqueeze", TV(x), opr_v_int(-1)), dt, &hx, 4, SH(2, 3, 4, 1), SH(12, 4, 1, 0), 0);
        expect_strided(CALL("unsqueeze", TV(xt), opr_v_int(0)), dt, &hxt, 4, SH(1, 4, 3, 2), SH(0, 6, 2, 1), 0);
        WHAT("squeeze %s", opr_dtype_name(dt));
        opr_tensor *q = T_any(&(spec){4, {1, 3, 1, 4}, L_C}, dt);
        H hq = H_of(q);
        expect_strided(CALL("squeeze", TV(q)), dt, &hq, 2, SH(3, 4), SH(4, 1), 0);
        expect_strided(CALL("squeeze", TV(q), opr_v_none()), dt, &hq, 2, SH(3, 4), SH(4, 1), 0);
        expect_strided(CALL("squeeze", TV(q), opr_v_int(2)), dt, &hq, 3, SH(1, 3, 4), SH(0, 4, 1), 0);
        expect_strided(CALL("squeeze", TV(q), opr_v_int(1)), dt, &hq, 4, SH(1, 3, 1, 4), SH(0, 4, 0, 1), 0);
        WHAT("narrow %s", opr_dtype_name(dt));
        expect_strided(CALL("narrow", TV(x), opr_v_int(1), opr_v_int(1), opr_v_int(2)), dt, &hx, 3, SH(2, 2, 4),
                       SH(12, 4, 1), 4);
        expect_strided(CALL("narrow", TV(x), opr_v_int(-1), opr_v_int(0), opr_v_int(3)), dt, &hx, 3, SH(2, 3, 3),
                       SH(12, 4, 1), 0);
        expect_strided(CALL("narrow", TV(x), opr_v_int(0), opr_v_int(1), opr_v_int(0)), dt, &hx, 3, SH(0, 3, 4),
                       SH(12, 4, 1), 0);
        WHAT("diagonal %s", opr_dtype_name(dt));
        expect_strided(CALL("diagonal", TV(m)), dt, &hm, 1, SH(3), SH(5), 0);
        expect_strided(CALL("diagonal", TV(m), opr_v_int(1)), dt, &hm, 1, SH(3), SH(5), 1);
        expect_strided(CALL("diagonal", TV(m), opr_v_int(-2)), dt, &hm, 1, SH(1), SH(5), 8);
        expect_strided(CALL("diagonal", TV(m), opr_v_int(4)), dt, &hm, 1, SH(0), SH(5), 0);
        expect_strided(CALL("diagonal", TV(x), opr_v_int(0), opr_v_int(1), opr_v_int(2)), dt, &hx, 2, SH(2, 3),
                       SH(12, 5), 0);
        expect_strided(CALL("diagonal", TV(x), opr_v_int(-1), opr_v_int(0), opr_v_int(2)), dt, &hx, 2, SH(3, 1),
                       SH(4, 13), 12);
        expect_strided(CALL("diagonal", TV(x), opr_v_int(1), opr_v_int(-1), opr_v_int(0)), dt, &hx, 2, SH(3, 1),
                       SH(4, 13), 12);
        WHAT("contiguous %s", opr_dtype_name(dt));
        opr_tensor *ct = CALL("contiguous", TV(xt));
        ck_assert(opr_tensor_is_contiguous(ct));
        expect_strided(ct, dt, &hxt, 3, SH(4, 3, 2), SH(6, 2, 1), 0);
        opr_tensor *cx = CALL("contiguous", TV(x));
        ck_assert(opr_tensor_shares_storage(cx, x));
        expect_strided(cx, dt, &hx, 3, SH(2, 3, 4), SH(12, 4, 1), 0);
    }
}
END_TEST

/* An empty dim list may come as (NULL, 0): opr_call accepts it and it reduces all. */
START_TEST(t_sum_null_empty_dims)
{
    for (int di = 0; di < NELEM(FLOATS); di++) {
        WHAT("sum %s with dim = opr_v_ints(NULL, 0)", opr_dtype_name(FLOATS[di]));
        check_sum_like("sum", T_any(&(spec){2, {3, 4}, L_C}, FLOATS[di]), 0, NULL, false, true);
        check_sum_like("mean", T_any(&(spec){2, {3, 4}, L_T}, FLOATS[di]), 0, NULL, true, true);
    }
}
END_TEST

/* Views compose with kernels: a view made by call_by_name feeds a kernel. */
START_TEST(t_views_feed_kernels)
{
    opr_tensor *x = T_any(&(spec){3, {2, 3, 4}, L_C}, OPR_F64);
    opr_tensor *p = CALL("permute", TV(x), opr_v_ints(SH(2, 0, 1), 3));
    opr_tensor *e = CALL("expand", TV(CALL("unsqueeze", TV(CALL("narrow", TV(x), opr_v_int(2), opr_v_int(1),
                                                                  opr_v_int(1))),
                                          opr_v_int(0))),
                         opr_v_ints(SH(4, 2, 3, 1), 4));
    WHAT("exp of a permuted view");
    H hp = H_of(p), r = H_new(hp.nd, hp.sh);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = exp(hp.v[i]);
    EXPECT(CALL("exp", TV(p)), OPR_F64, r);
    WHAT("sum of an expanded narrowed view");
    H he = H_of(e), rs;
    ref_reduce(&he, dims_mask(4, SH(0, 3), 2), false, R_SUM, 0, &rs, NULL);
    EXPECT(CALL("sum", TV(e), opr_v_ints(SH(0, 3), 2)), OPR_F64, rs);
}
END_TEST

/* Up to OPR_MAX_DIMS dims: broadcasting, reductions, softmax, arg-reductions, matmul. */
START_TEST(t_many_dims)
{
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        WHAT("add %s 8-d transposed + 8-d expanded", opr_dtype_name(dt));
        opr_tensor *a = T_lay(L_T, G_REAL, dt, 8, SH(2, 1, 2, 3, 1, 2, 2, 3), -1, 1);
        opr_tensor *b = T_lay(L_E, G_REAL, dt, 8, SH(2, 3, 2, 3, 2, 2, 1, 3), -1, 1);
        opr_tensor *y = CALL("add", TV(a), TV(b), opr_v_double(-2));
        H ha = H_of(a), hb = H_of(b), r = H_new(8, SH(2, 3, 2, 3, 2, 2, 2, 3));
        int64_t idx[OPR_MAX_DIMS];
        for (int64_t i = 0; i < r.n; i++) {
            unravel(i, 8, r.sh, idx);
            r.v[i] = at_bcast(&ha, 8, idx) - 2 * at_bcast(&hb, 8, idx);
        }
        EXPECT(y, dt, r);
        WHAT("sum/mean %s 8-d", opr_dtype_name(dt));
        opr_tensor *yt = K(opr_tensor_transpose(y, 0, 5));
        for (int keep = 0; keep < 2; keep++) {
            check_sum_like("sum", yt, 3, SH(1, 3, -1), keep, true);
            check_sum_like("mean", yt, 4, SH(0, 2, 4, 6), keep, true);
            check_sum_like("sum", yt, -1, NULL, keep, true);
            check_arg_reduce("max.dim", yt, 6, keep);
            check_arg_reduce("min.dim", yt, -8, keep);
        }
        WHAT("softmax %s 8-d", opr_dtype_name(dt));
        check_softmax(false, yt, 4);
        check_softmax(true, yt, -1);
        WHAT("7-d strided unary and sort %s", opr_dtype_name(dt));
        opr_tensor *s7 = T_lay(L_S, G_INT, dt, 7, SH(2, 2, 1, 3, 2, 1, 5), 0, 3);
        check_sorted("sort", s7, 3, 3, true, 3);
        check_mode(s7, -1, true, 3);
        WHAT("matmul %s 6-d x 5-d", opr_dtype_name(dt));
        check_matmul("matmul", T_lay(L_T, G_REAL, dt, 6, SH(2, 1, 2, 1, 3, 4), -1, 1),
                     T_lay(L_S, G_REAL, dt, 5, SH(3, 2, 1, 4, 5), -1, 1), tol_of(dt));
    }
}
END_TEST

/* ------------------------------------------------------------------ big inputs (OpenMP paths) */

START_TEST(t_big_add)
{
    const int64_t sh[2] = {400, 300}, row[1] = {300};
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        static const int lays[][2] = {{L_C, L_C}, {L_T, L_C}, {L_C, L_S}, {L_N, L_E}};
        for (int l = 0; l < NELEM(lays); l++) {
            WHAT("add big %s %s + %s alpha=2", opr_dtype_name(dt), lay_name[lays[l][0]], lay_name[lays[l][1]]);
            opr_tensor *a = T_lay(lays[l][0], G_REAL, dt, 2, sh, -1, 1), *b = T_lay(lays[l][1], G_REAL, dt, 2, sh, -1, 1);
            opr_tensor *y = CALL("add", TV(a), TV(b), opr_v_double(2));
            H ha = H_of(a), hb = H_of(b), r = H_new(2, sh);
            for (int64_t i = 0; i < r.n; i++) r.v[i] = ha.v[i] + 2 * hb.v[i];
            EXPECT(y, dt, r);
        }
        WHAT("add big %s broadcast row", opr_dtype_name(dt));
        opr_tensor *a = T_lay(L_T, G_REAL, dt, 2, sh, -1, 1), *b = T_lay(L_C, G_REAL, dt, 1, row, -1, 1);
        opr_tensor *y = CALL("add", TV(a), TV(b));
        H ha = H_of(a), hb = H_of(b), r = H_new(2, sh);
        for (int64_t i = 0; i < r.n; i++) r.v[i] = ha.v[i] + hb.v[i % 300];
        EXPECT(y, dt, r);
        WHAT("sub big %s 3-d broadcast", opr_dtype_name(dt));
        opr_tensor *c = T_lay(L_C, G_REAL, dt, 3, SH(50, 1, 400), -1, 1), *d = T_lay(L_S, G_REAL, dt, 2, SH(30, 1), -1, 1);
        y = CALL("sub", TV(c), TV(d), opr_v_double(0.5));
        H hc = H_of(c), hd = H_of(d), r3 = H_new(3, SH(50, 30, 400));
        int64_t idx[3];
        for (int64_t i = 0; i < r3.n; i++) {
            unravel(i, 3, r3.sh, idx);
            r3.v[i] = at_bcast(&hc, 3, idx) - 0.5 * at_bcast(&hd, 3, idx);
        }
        EXPECT(y, dt, r3);
    }
}
END_TEST

START_TEST(t_big_reduce)
{
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        WHAT("sum big %s all", opr_dtype_name(dt));
        opr_tensor *v = T_lay(L_C, G_REAL, dt, 1, SH(150001), -1, 1);
        check_sum_like("sum", v, -1, NULL, false, true);
        check_sum_like("mean", v, -1, NULL, true, true);
        opr_tensor *vs = T_lay(L_S, G_REAL, dt, 1, SH(150001), -1, 1);
        check_sum_like("sum", vs, -1, NULL, false, true);
        check_sum_like("mean", vs, 0, SH(0), false, true);
        static const int lays[] = {L_C, L_T, L_N};
        for (int l = 0; l < NELEM(lays); l++) {
            opr_tensor *x = T_lay(lays[l], G_REAL, dt, 2, SH(403, 300), -1, 1);
            for (int d = 0; d < 2; d++)
                for (int keep = 0; keep < 2; keep++) {
                    WHAT("sum/mean big %s [403,300] %s dim %d keepdim %d", opr_dtype_name(dt), lay_name[lays[l]], d,
                         keep);
                    const int64_t dim = d;
                    check_sum_like("sum", x, 1, &dim, keep, true);
                    check_sum_like("mean", x, 1, &dim, keep, true);
                }
            WHAT("sum big %s [403,300] %s all", opr_dtype_name(dt), lay_name[lays[l]]);
            check_sum_like("sum", x, 0, SH(0), false, true);
            WHAT("sum big i64 [403,300] %s", lay_name[lays[l]]);
            opr_tensor *xi = T_lay(lays[l], G_INT, OPR_I64, 2, SH(403, 300), -1000, 1000);
            check_sum_like("sum", xi, 1, SH(0), false, true);
            check_sum_like("sum", xi, 1, SH(1), true, true);
            check_sum_like("sum", xi, -1, NULL, false, true);
            if (l == 0) check_sum_like("sum", T_lay(L_T, G_INT, OPR_I64, 2, SH(3, 50000), -9, 10), 1, SH(1), false, true);
        }
        for (int l = 0; l < 2; l++) {
            WHAT("sum/mean/prod big %s [3,50000] %s (few long slices)", opr_dtype_name(dt), lay_name[l ? L_T : L_C]);
            opr_tensor *x = T_lay(l ? L_T : L_C, G_REAL, dt, 2, SH(3, 50000), 0.9999, 1.0001);
            check_sum_like("sum", x, 1, SH(1), false, true);
            check_sum_like("mean", x, 1, SH(-1), true, true);
            H hx = H_of(x), r;
            ref_reduce(&hx, 2, false, R_PROD, 0, &r, NULL);
            EXPECT(CALL("prod", TV(x), opr_v_int(1)), dt, r);
            ref_reduce(&hx, 2, true, R_PROD, 0, &r, NULL);
            EXPECT(CALL("prod", TV(x), opr_v_int(-1), opr_v_bool(true)), dt, r);
        }
        WHAT("prod/norm/max big %s", opr_dtype_name(dt));
        opr_tensor *p = T_lay(L_T, G_REAL, dt, 2, SH(300, 200), 0.999, 1.001);
        H hp = H_of(p), r;
        ref_reduce(&hp, 3, false, R_PROD, 0, &r, NULL);
        EXPECT(CALL("prod", TV(p)), dt, r);
        ref_reduce(&hp, 1, false, R_PROD, 0, &r, NULL);
        EXPECT(CALL("prod", TV(p), opr_v_int(0)), dt, r);
        ref_reduce(&hp, 3, false, R_NORM, 2, &r, NULL);
        EXPECT(CALL("norm", TV(p)), dt, r);
        ref_reduce(&hp, 3, false, R_NORM, 3, &r, NULL);
        EXPECT(CALL("norm", TV(p), opr_v_double(3)), dt, r);
        ref_reduce(&hp, 3, false, R_MAX, 0, &r, NULL);
        EXPECT_EXACT(CALL("max", TV(p)), dt, r);
        ref_reduce(&hp, 3, false, R_MIN, 0, &r, NULL);
        EXPECT_EXACT(CALL("min", TV(p)), dt, r);
    }
}
END_TEST

START_TEST(t_big_arg_reduce)
{
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        const opr_dtype dt = NUMERIC[di];
        /* few long rows: the slices are split between threads; the extreme appears twice
         * in a row, and the first index must win */
        const int64_t sh[2] = {2, 50000};
        double *v = dalloc(100000);
        for (int64_t i = 0; i < 100000; i++) v[i] = tu_uniform(-1, 1);
        v[30000] = v[45000] = 5;
        v[50000 + 20001] = v[50000 + 49999] = 5;
        v[10] = v[49000] = -5;
        v[50000 + 7] = v[50000 + 8] = -5;
        opr_tensor *x = T_vals(dt, 2, sh, v);
        opr_tensor *xt = K(opr_tensor_transpose(CALL("contiguous", TV(K(opr_tensor_transpose(x, 0, 1)))), 0, 1));
        for (int op = 0; op < 2; op++) {
            WHAT("%s big %s split rows, transposed input", op ? "min.dim" : "max.dim", opr_dtype_name(dt));
            check_arg_reduce(op ? "min.dim" : "max.dim", xt, 1, false);
            WHAT("%s big %s split rows", op ? "min.dim" : "max.dim", opr_dtype_name(dt));
            check_arg_reduce(op ? "min.dim" : "max.dim", x, 1, false);
            check_arg_reduce(op ? "min.dim" : "max.dim", x, -1, true);
            WHAT("%s big %s many outputs", op ? "min.dim" : "max.dim", opr_dtype_name(dt));
            check_arg_reduce(op ? "min.dim" : "max.dim", T_lay(L_T, G_INT, dt, 2, SH(40000, 3), 0, 3), 1, false);
            check_arg_reduce(op ? "min.dim" : "max.dim", T_lay(L_C, G_INT, dt, 2, SH(5, 40000), 0, 3), 0, false);
        }
    }
}
END_TEST

START_TEST(t_big_softmax)
{
    for (int di = 0; di < NELEM(FLOATS); di++) {
        const opr_dtype dt = FLOATS[di];
        static const int lays[] = {L_C, L_T};
        for (int l = 0; l < NELEM(lays); l++)
            for (int d = 0; d < 2; d++)
                for (int lg = 0; lg < 2; lg++) {
                    WHAT("%s big %s [300,400] %s dim %d", lg ? "log_softmax" : "softmax", opr_dtype_name(dt),
                         lay_name[lays[l]], d);
                    check_softmax(lg, T_lay(lays[l], G_REAL, dt, 2, SH(300, 400), -4, 4), d);
                }
        WHAT("softmax big %s one long row", opr_dtype_name(dt));
        check_softmax(false, T_lay(L_C, G_REAL, dt, 1, SH(120000), -4, 4), 0);
    }
}
END_TEST

START_TEST(t_big_index)
{
    for (int di = 0; di < NELEM(ALL4); di++) {
        const opr_dtype dt = ALL4[di];
        WHAT("big index ops %s", opr_dtype_name(dt));
        opr_tensor *x = T_any(&(spec){2, {400, 300}, L_T}, dt);
        check_index_select(x, 0, T_rindex(1, SH(60), 400, L_C));
        check_gather(x, 1, T_rindex(2, SH(400, 100), 300, L_C));
        check_masked_select(x, T_any(&(spec){1, {300}, L_C}, OPR_BOOL));
        opr_tensor *ts[2] = {x, T_any(&(spec){2, {400, 50}, L_S}, dt)};
        check_cat(2, ts, 1, true);
        opr_tensor *m = T_any(&(spec){2, {400, 300}, L_C}, OPR_BOOL), *src = T_any(&(spec){2, {400, 300}, L_T}, dt);
        opr_tensor *ms = CALL("masked_scatter", TV(x), TV(m), TV(src));
        H hx = H_of(x), hm = H_of(m), hs = H_of(src), rms = H_new(2, SH(400, 300));
        for (int64_t i = 0, used = 0; i < rms.n; i++) rms.v[i] = hm.v[i] != 0 ? hs.v[used++] : hx.v[i];
        EXPECT_EXACT(ms, dt, rms);
        opr_tensor *d = T_any(&(spec){2, {300, 300}, L_T}, dt);
        H hd = H_of(d);
        H r = H_new(1, SH(300));
        for (int i = 0; i < 300; i++) r.v[i] = hd.v[i * 301];
        EXPECT_EXACT(CALL("diag", TV(d)), dt, r);
    }
    for (int di = 0; di < NELEM(NUMERIC); di++) {
        const opr_dtype dt = NUMERIC[di];
        WHAT("big sort/topk/mode %s", opr_dtype_name(dt));
        check_sorted("sort", T_lay(L_T, G_INT, dt, 2, SH(200, 300), 0, 50), 1, 300, true, 3);
        check_sorted("sort", T_lay(L_C, G_INT, dt, 2, SH(2, 40000), 0, 1000), -1, 40000, false, 3);
        check_sorted("topk", T_distinct(dt, &(spec){2, {200, 300}, L_C}), 1, 7, true, 5);
        check_mode(T_lay(L_C, G_INT, dt, 2, SH(300, 200), 0, 20), 1, false, 3);
    }
}
END_TEST

/* ------------------------------------------------------------------ suite */

static void add_case(Suite *s, const char *name, const TTest *t, int lo, int hi)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    if (hi > lo) tcase_add_loop_test(tc, t, lo, hi);
    else tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

int main(void)
{
    Suite *s = suite_create("kernels");
    add_case(s, "unary", t_unary, 0, NELEM(unary_cases));
    add_case(s, "binary", t_binary, 0, NELEM(binary_cases));
    add_case(s, "add_int_alpha", t_add_int_alpha, 0, 0);
    add_case(s, "compare", t_compare, 0, NELEM(compare_cases));
    add_case(s, "compare_reals", t_compare_reals, 0, 0);
    add_case(s, "where", t_where, 0, 0);
    add_case(s, "sum_mean", t_sum_mean, 0, 2);
    add_case(s, "prod", t_prod, 0, 0);
    add_case(s, "max_min_all", t_max_min_all, 0, 0);
    add_case(s, "max_min_dim", t_max_min_dim, 0, 2);
    add_case(s, "norm", t_norm, 0, 0);
    add_case(s, "softmax", t_softmax, 0, 2);
    add_case(s, "mm", t_mm, 0, 0);
    add_case(s, "bmm", t_bmm, 0, 0);
    add_case(s, "matmul", t_matmul, 0, 0);
    add_case(s, "linear", t_linear, 0, 0);
    add_case(s, "addmm", t_addmm, 0, 0);
    add_case(s, "cdist", t_cdist, 0, 0);
    add_case(s, "dtype_refusals", t_dtype_refusals, 0, 0);
    add_case(s, "diag", t_diag, 0, 0);
    add_case(s, "index_select", t_index_select, 0, 0);
    add_case(s, "masked_select", t_masked_select, 0, 0);
    add_case(s, "gather", t_gather, 0, 0);
    add_case(s, "index_add", t_index_add, 0, 0);
    add_case(s, "scatter_add", t_scatter_add, 0, 0);
    add_case(s, "cat", t_cat, 0, 0);
    add_case(s, "sort", t_sort, 0, 0);
    add_case(s, "topk", t_topk, 0, 0);
    add_case(s, "mode", t_mode, 0, 0);
    add_case(s, "diagonal_scatter", t_diagonal_scatter, 0, 0);
    add_case(s, "masked_scatter", t_masked_scatter, 0, 0);
    add_case(s, "fill_factories", t_fill_factories, 0, 0);
    add_case(s, "arange", t_arange, 0, 0);
    add_case(s, "like", t_like, 0, 0);
    add_case(s, "copy_", t_copy_, 0, 0);
    add_case(s, "fill_", t_fill_, 0, 0);
    add_case(s, "index_add_", t_index_add_, 0, 0);
    add_case(s, "masked_fill_", t_masked_fill_, 0, 0);
    add_case(s, "views", t_views, 0, 0);
    add_case(s, "views_feed_kernels", t_views_feed_kernels, 0, 0);
    add_case(s, "sum_null_empty_dims", t_sum_null_empty_dims, 0, 0);
    add_case(s, "many_dims", t_many_dims, 0, 0);
    add_case(s, "big_add", t_big_add, 0, 0);
    add_case(s, "big_reduce", t_big_reduce, 0, 0);
    add_case(s, "big_arg_reduce", t_big_arg_reduce, 0, 0);
    add_case(s, "big_softmax", t_big_softmax, 0, 0);
    add_case(s, "big_index", t_big_index, 0, 0);
    return tu_run(s);
}
