/* Autograd engine suite: accumulation, graph shapes, retain_graph, release of saved
 * tensors, no_grad, requires_grad propagation, leaf gradients, zero_grad, detach,
 * opr_autograd_grad, error messages, in-place refusal, create_graph (second
 * derivatives against finite differences of the first) and plan introspection.
 *
 * Values are f64; expected gradients are computed on the host. Memory checks use
 * opr_memory_stats' current_bytes, which counts every live storage exactly. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGS(...) (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value))
#define TV(t) opr_v_tensor(t)

static opr_ctx *ctx;

static void setup(void)
{
    ctx = tu_ctx();
    tu_seed(0xa11ce);
    opr_grad_mode_set(true);
}

static void teardown(void)
{
    opr_grad_mode_set(true);
    tu_ctx_free(ctx);
    ctx = NULL;
}

/* Calls an op; fails the test with the message (and whether a formula is missing). */
static opr_tensor *call(const char *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(ctx, op, args, nargs, &out, 1);
    ck_assert_msg(rc == OPR_OK, "%s failed: %s: %s", op, opr_status_name(rc), opr_last_error());
    return out;
}
#define CALL(op, ...) call(op, ARGS(__VA_ARGS__))

static opr_tensor *leaf(int ndim, const int64_t *shape, bool rg)
{
    opr_tensor *t = tu_rand(ctx, OPR_F64, ndim, shape, -1, 1);
    if (rg) ck_assert_int_eq(opr_set_requires_grad(t, true), OPR_OK);
    return t;
}

static opr_tensor *sum_all(opr_tensor *t) { return CALL("sum", TV(t)); }

static void backward(opr_tensor *root, opr_tensor *grad, const opr_backward_opts *o)
{
    int rc = opr_backward(root, grad, o);
    ck_assert_msg(rc == OPR_OK, "backward: %s: %s", opr_status_name(rc), opr_last_error());
}

static uint64_t mem(void)
{
    opr_mem_stats s = {.struct_size = sizeof s};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &s), OPR_OK);
    return s.current_bytes;
}

static uint64_t nbytes(const opr_tensor *t) { return (uint64_t)opr_tensor_numel(t) * opr_dtype_size(opr_tensor_dtype(t)); }

/* Compares t (any layout) with expected values: |a - e| <= tol * (1 + |e|). */
static void expect_values(const opr_tensor *t, const double *want, int64_t n, double tol, const char *what)
{
    ck_assert_msg(t != NULL, "%s: no tensor", what);
    ck_assert_msg(opr_tensor_numel(t) == n, "%s: %lld elements, expected %lld", what, (long long)opr_tensor_numel(t),
                  (long long)n);
    double *got = tu_to_f64(t);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
            double g = got[i];
            free(got);
            ck_abort_msg("%s[%lld]: got %.15g, expected %.15g", what, (long long)i, g, want[i]);
        }
    free(got);
}

/* ------------------------------------------------------------------ accumulation and graphs */

START_TEST(accumulate_mul_x_x)
{
    int64_t s[1] = {5};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("mul", TV(x), TV(x));
    opr_tensor *z = sum_all(y);
    backward(z, NULL, NULL);
    double *xv = tu_to_f64(x), want[5];
    for (int i = 0; i < 5; i++) want[i] = 2 * xv[i];
    expect_values(opr_grad(x), want, 5, 1e-14, "d sum(x*x) / dx");
    free(xv);
    opr_tensor_release(z);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

/* opr_backward_opts.leaf_ready: once per leaf, when its gradient is whole (x reaches
 * the loss through two paths, w through one), before the pass ends. */
static int ready_calls[2];
static double ready_grad0[2];
static opr_tensor *ready_leaves[2];
static void on_ready(opr_tensor *leaf, void *user)
{
    (void)user;
    for (int i = 0; i < 2; i++)
        if (leaf == ready_leaves[i]) {
            double g[5] = {0};
            ready_calls[i]++;
            ck_assert_int_eq(opr_tensor_copy_to_host_f64(opr_grad(leaf), g, 5), OPR_OK);
            ready_grad0[i] = g[0];
        }
}

START_TEST(leaf_ready_once_when_whole)
{
    int64_t s[1] = {5};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, true);
    opr_tensor *xx = CALL("mul", TV(x), TV(x)), *xw = CALL("mul", TV(xx), TV(w)), *y = CALL("add", TV(xw), TV(x));
    opr_tensor *z = sum_all(y);
    ready_leaves[0] = x;
    ready_leaves[1] = w;
    ready_calls[0] = ready_calls[1] = 0;
    opr_backward_opts o = {.struct_size = sizeof o, .leaf_ready = on_ready};
    ck_assert_int_eq(opr_backward(z, NULL, &o), OPR_OK);
    ck_assert_int_eq(ready_calls[0], 1);
    ck_assert_int_eq(ready_calls[1], 1);
    double *xv = tu_to_f64(x), *wv = tu_to_f64(w);
    /* d/dx (x^2 w + x) = 2 x w + 1, all of it by the time of the call */
    ck_assert(fabs(ready_grad0[0] - (2 * xv[0] * wv[0] + 1)) < 1e-14);
    ck_assert(fabs(ready_grad0[1] - xv[0] * xv[0]) < 1e-14);
    free(xv);
    free(wv);
    opr_tensor *all[] = {z, y, xw, xx, w, x};
    for (int i = 0; i < 6; i++) opr_tensor_release(all[i]);
}
END_TEST

START_TEST(accumulate_add_x_x)
{
    int64_t s[1] = {5};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("add", TV(x), TV(x));
    opr_tensor *z = sum_all(y);
    backward(z, NULL, NULL);
    double want[5] = {2, 2, 2, 2, 2};
    expect_values(opr_grad(x), want, 5, 1e-14, "d sum(x+x) / dx");
    opr_tensor_release(z);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

/* x -> a = exp(x) -> b = a * w, c = exp(a) -> d = b * c -> sum: two paths from a. */
START_TEST(diamond)
{
    int64_t s[1] = {6};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, false);
    opr_tensor *a = CALL("exp", TV(x));
    opr_tensor *b = CALL("mul", TV(a), TV(w));
    opr_tensor *c = CALL("exp", TV(a));
    opr_tensor *d = CALL("mul", TV(b), TV(c));
    opr_tensor *L = sum_all(d);
    backward(L, NULL, NULL);
    double *xv = tu_to_f64(x), *wv = tu_to_f64(w), want[6];
    for (int i = 0; i < 6; i++) {
        double av = exp(xv[i]);
        want[i] = wv[i] * exp(av) * (1 + av) * av; /* d(a w e^a)/da * da/dx */
    }
    expect_values(opr_grad(x), want, 6, 1e-12, "diamond d/dx");
    ck_assert_ptr_null(opr_grad(w));
    ck_assert_ptr_null(opr_grad(a)); /* non-leaf: no .grad */
    free(xv);
    free(wv);
    opr_tensor *ts[] = {L, d, c, b, a, w, x};
    for (int i = 0; i < 7; i++) opr_tensor_release(ts[i]);
}
END_TEST

/* ------------------------------------------------------------------ retain_graph and memory */

START_TEST(second_backward_without_retain_graph_fails)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *z = sum_all(y);
    backward(z, NULL, NULL);
    int rc = opr_backward(z, NULL, NULL);
    ck_assert_msg(rc != OPR_OK, "a second backward through freed saved tensors succeeded");
    ck_assert_msg(strstr(opr_last_error(), "retain_graph") != NULL, "message does not mention retain_graph: %s",
                  opr_last_error());
    opr_tensor_release(z);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

START_TEST(retain_graph_accumulates)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *z = sum_all(y);
    opr_backward_opts keep = {.struct_size = sizeof keep, .retain_graph = true};
    backward(z, NULL, &keep);
    backward(z, NULL, &keep);
    double *xv = tu_to_f64(x), want[4];
    for (int i = 0; i < 4; i++) want[i] = 2 * exp(xv[i]);
    expect_values(opr_grad(x), want, 4, 1e-14, "two retained backwards");
    backward(z, NULL, NULL); /* a third one, which frees */
    for (int i = 0; i < 4; i++) want[i] = 3 * exp(xv[i]);
    expect_values(opr_grad(x), want, 4, 1e-14, "three backwards");
    ck_assert_int_ne(opr_backward(z, NULL, NULL), OPR_OK);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "retain_graph"));
    free(xv);
    opr_tensor_release(z);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

/* exp saves its result; once backward has run, that storage goes. */
START_TEST(saved_tensors_released_after_backward)
{
    uint64_t base = mem();
    int64_t s[2] = {64, 64};
    opr_tensor *x = leaf(2, s, true);
    uint64_t bx = nbytes(x);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *z = sum_all(y);
    uint64_t by = nbytes(y), bz = nbytes(z);
    opr_tensor_release(y); /* still held by the exp node, as its saved result */
    ck_assert_uint_eq(mem() - base, bx + by + bz);
    backward(z, NULL, NULL);
    /* the saved result is gone; x.grad (one more bx) is there */
    ck_assert_msg(mem() - base == bx + bz + bx, "after backward %llu bytes are held, expected %llu",
                  (unsigned long long)(mem() - base), (unsigned long long)(bx + bz + bx));
    ck_assert_int_eq(opr_zero_grad(x), OPR_OK);
    ck_assert_uint_eq(mem() - base, bx + bz);
    opr_tensor_release(z);
    opr_tensor_release(x);
    ck_assert_uint_eq(mem(), base);
}
END_TEST

START_TEST(retained_graph_keeps_saved_tensors)
{
    uint64_t base = mem();
    int64_t s[2] = {32, 32};
    opr_tensor *x = leaf(2, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *z = sum_all(y);
    uint64_t bx = nbytes(x), by = nbytes(y), bz = nbytes(z);
    opr_tensor_release(y);
    opr_backward_opts keep = {.struct_size = sizeof keep, .retain_graph = true};
    backward(z, NULL, &keep);
    ck_assert_uint_eq(mem() - base, bx + by + bz + bx);
    opr_tensor_release(z); /* the graph goes with its last output */
    ck_assert_uint_eq(mem() - base, 2 * bx);
    opr_tensor_release(x);
    ck_assert_uint_eq(mem(), base);
}
END_TEST

/* ------------------------------------------------------------------ grad mode and flags */

START_TEST(no_grad_records_nothing)
{
    uint64_t base = mem();
    int64_t s[2] = {16, 16};
    opr_tensor *x = leaf(2, s, true);
    uint64_t bx = nbytes(x);
    ck_assert(opr_grad_mode_enabled());
    bool prev = opr_grad_mode_set(false);
    ck_assert(prev);
    ck_assert(!opr_grad_mode_enabled());
    opr_tensor *y = CALL("exp", TV(x));
    ck_assert_msg(!opr_requires_grad(y), "an output computed under no_grad requires grad");
    opr_tensor *z = sum_all(y);
    ck_assert(!opr_requires_grad(z));
    uint64_t by = nbytes(y), bz = nbytes(z);
    opr_tensor_release(y); /* nothing saved it: its storage goes */
    ck_assert_uint_eq(mem() - base, bx + bz);
    int rc = opr_backward(z, NULL, NULL);
    ck_assert_int_ne(rc, OPR_OK);
    ck_assert_msg(strstr(opr_last_error(), "does not require grad") != NULL, "%s", opr_last_error());
    opr_tensor_release(z);
    ck_assert(!opr_grad_mode_set(true));
    /* the same with grad on keeps y alive as exp's saved result */
    y = CALL("exp", TV(x));
    ck_assert(opr_requires_grad(y));
    z = sum_all(y);
    opr_tensor_release(y);
    ck_assert_uint_eq(mem() - base, bx + by + bz);
    opr_tensor_release(z);
    opr_tensor_release(x);
    ck_assert_uint_eq(mem(), base);
}
END_TEST

START_TEST(requires_grad_propagation)
{
    int64_t s[1] = {3};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, false);
    ck_assert(opr_requires_grad(x));
    ck_assert(!opr_requires_grad(w));
    opr_tensor *xw = CALL("mul", TV(x), TV(w));
    opr_tensor *ww = CALL("mul", TV(w), TV(w));
    opr_tensor *e = CALL("exp", TV(xw));
    ck_assert(opr_requires_grad(xw));
    ck_assert(!opr_requires_grad(ww));
    ck_assert(opr_requires_grad(e));
    /* integers can't require grad; a non-leaf can't be made a constant */
    opr_tensor *i = tu_rand(ctx, OPR_I64, 1, s, 0, 5);
    ck_assert_int_eq(opr_set_requires_grad(i, true), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_set_requires_grad(e, false), OPR_ERR_INVALID);
    ck_assert(opr_requires_grad(e));
    /* a comparison of a tensor that requires grad gives a bool that does not */
    opr_tensor *b = CALL("gt", TV(x), TV(w));
    ck_assert(!opr_requires_grad(b));
    opr_tensor *ts[] = {b, i, e, ww, xw, w, x};
    for (int k = 0; k < 7; k++) opr_tensor_release(ts[k]);
}
END_TEST

START_TEST(leaf_gradients)
{
    int64_t s[2] = {2, 3};
    opr_tensor *x = leaf(2, s, true), *w = leaf(2, s, true), *c = leaf(2, s, false);
    opr_tensor *xw = CALL("mul", TV(x), TV(w));
    opr_tensor *xwc = CALL("mul", TV(xw), TV(c));
    opr_tensor *L = sum_all(xwc);
    backward(L, NULL, NULL);
    double *xv = tu_to_f64(x), *wv = tu_to_f64(w), *cv = tu_to_f64(c), gx[6], gw[6];
    for (int i = 0; i < 6; i++) { gx[i] = wv[i] * cv[i]; gw[i] = xv[i] * cv[i]; }
    expect_values(opr_grad(x), gx, 6, 1e-14, "grad x");
    expect_values(opr_grad(w), gw, 6, 1e-14, "grad w");
    ck_assert_ptr_null(opr_grad(c));
    ck_assert_ptr_null(opr_grad(xw));
    ck_assert_ptr_null(opr_grad(L));
    /* shape and dtype of .grad are those of the leaf */
    ck_assert_int_eq(opr_tensor_ndim(opr_grad(x)), 2);
    ck_assert_int_eq(opr_tensor_size(opr_grad(x), 1), 3);
    ck_assert_int_eq(opr_tensor_dtype(opr_grad(x)), OPR_F64);
    ck_assert(!opr_requires_grad(opr_grad(x)));
    free(xv);
    free(wv);
    free(cv);
    opr_tensor *ts[] = {L, xwc, xw, c, w, x};
    for (int k = 0; k < 6; k++) opr_tensor_release(ts[k]);
}
END_TEST

START_TEST(zero_grad_and_accumulation_across_graphs)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true);
    double *xv = tu_to_f64(x), want[4];
    for (int round = 1; round <= 2; round++) { /* two graphs accumulate into .grad */
        opr_tensor *y = CALL("mul", TV(x), TV(x));
        opr_tensor *L = sum_all(y);
        backward(L, NULL, NULL);
        opr_tensor_release(L);
        opr_tensor_release(y);
        for (int i = 0; i < 4; i++) want[i] = 2 * round * xv[i];
        expect_values(opr_grad(x), want, 4, 1e-14, "accumulated grad");
    }
    ck_assert_int_eq(opr_zero_grad(x), OPR_OK);
    ck_assert_ptr_null(opr_grad(x));
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *L = sum_all(y);
    backward(L, NULL, NULL);
    for (int i = 0; i < 4; i++) want[i] = exp(xv[i]);
    expect_values(opr_grad(x), want, 4, 1e-14, "grad after zero_grad");
    ck_assert_int_eq(opr_zero_grad(NULL), OPR_ERR_INVALID);
    free(xv);
    opr_tensor_release(L);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

START_TEST(detach)
{
    int64_t s[1] = {5};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *d = opr_tensor_detach(y);
    ck_assert_ptr_nonnull(d);
    ck_assert(opr_tensor_shares_storage(d, y));
    ck_assert(!opr_requires_grad(d));
    opr_tensor *dx = opr_tensor_detach(x);
    ck_assert(!opr_requires_grad(dx));
    ck_assert(opr_requires_grad(x)); /* the original is untouched */
    /* L = sum(detach(exp(x)) * x): exp(x) is a constant, dL/dx = exp(x) */
    opr_tensor *p = CALL("mul", TV(d), TV(x));
    opr_tensor *L = sum_all(p);
    backward(L, NULL, NULL);
    double *xv = tu_to_f64(x), want[5];
    for (int i = 0; i < 5; i++) want[i] = exp(xv[i]);
    expect_values(opr_grad(x), want, 5, 1e-14, "grad through a detached factor");
    /* ops on a detached tensor alone do not require grad */
    opr_tensor *dd = CALL("mul", TV(dx), TV(dx));
    ck_assert(!opr_requires_grad(dd));
    ck_assert_ptr_null(opr_tensor_detach(NULL));
    free(xv);
    opr_tensor *ts[] = {dd, L, p, dx, d, y, x};
    for (int k = 0; k < 7; k++) opr_tensor_release(ts[k]);
}
END_TEST

/* ------------------------------------------------------------------ opr_autograd_grad */

START_TEST(autograd_grad_leaves)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, true), *unused = leaf(1, s, true);
    opr_tensor *p = CALL("mul", TV(x), TV(w));
    opr_tensor *L = sum_all(p);
    opr_tensor *in[3] = {x, w, unused}, *g[3] = {NULL, NULL, NULL};
    int rc = opr_autograd_grad(&L, NULL, 1, in, 3, g, NULL);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    double *xv = tu_to_f64(x), *wv = tu_to_f64(w);
    expect_values(g[0], wv, 4, 1e-14, "dL/dx");
    expect_values(g[1], xv, 4, 1e-14, "dL/dw");
    ck_assert_msg(g[2] == NULL, "an input L does not depend on got a gradient");
    ck_assert_ptr_null(opr_grad(x)); /* .grad untouched */
    ck_assert_ptr_null(opr_grad(w));
    free(xv);
    free(wv);
    for (int i = 0; i < 3; i++) opr_tensor_release(g[i]);
    opr_tensor *ts[] = {L, p, unused, w, x};
    for (int k = 0; k < 5; k++) opr_tensor_release(ts[k]);
}
END_TEST

START_TEST(autograd_grad_non_leaf)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, false);
    opr_tensor *a = CALL("exp", TV(x));
    opr_tensor *p = CALL("mul", TV(a), TV(w));
    opr_tensor *L = sum_all(p);
    opr_tensor *in[2] = {a, x}, *g[2] = {NULL, NULL};
    opr_backward_opts keep = {.struct_size = sizeof keep, .retain_graph = true};
    int rc = opr_autograd_grad(&L, NULL, 1, in, 2, g, &keep);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    double *xv = tu_to_f64(x), *wv = tu_to_f64(w), gx[4];
    for (int i = 0; i < 4; i++) gx[i] = wv[i] * exp(xv[i]);
    expect_values(g[0], wv, 4, 1e-14, "dL/da (non-leaf)");
    expect_values(g[1], gx, 4, 1e-14, "dL/dx");
    opr_tensor_release(g[0]);
    opr_tensor_release(g[1]);
    /* only the non-leaf */
    rc = opr_autograd_grad(&L, NULL, 1, in, 1, g, NULL);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    expect_values(g[0], wv, 4, 1e-14, "dL/da alone");
    ck_assert_ptr_null(opr_grad(x));
    free(xv);
    free(wv);
    opr_tensor_release(g[0]);
    opr_tensor *ts[] = {L, p, a, w, x};
    for (int k = 0; k < 5; k++) opr_tensor_release(ts[k]);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(backward_non_scalar_without_grad_fails)
{
    int64_t s[1] = {3};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    int rc = opr_backward(y, NULL, NULL);
    ck_assert_int_eq(rc, OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "one-element") != NULL, "unclear message: %s", opr_last_error());
    ck_assert_ptr_null(opr_grad(x));
    /* the graph is intact: with a grad it runs */
    double ones[3] = {1, 1, 1};
    opr_tensor *g = opr_tensor_from_data(ctx, OPR_F64, 1, s, ones, OPR_CPU);
    backward(y, g, NULL);
    ck_assert_ptr_nonnull(opr_grad(x));
    opr_tensor_release(g);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

START_TEST(backward_wrong_shape_grad_fails)
{
    int64_t s[1] = {3}, s4[1] = {4}, s13[2] = {1, 3};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *y = CALL("exp", TV(x));
    opr_tensor *g4 = opr_tensor_new(ctx, OPR_F64, 1, s4, OPR_CPU);
    opr_tensor *g13 = opr_tensor_new(ctx, OPR_F64, 2, s13, OPR_CPU);
    opr_tensor *g32 = opr_tensor_new(ctx, OPR_F32, 1, s, OPR_CPU);
    opr_tensor *bad[3] = {g4, g13, g32};
    for (int i = 0; i < 3; i++) {
        int rc = opr_backward(y, bad[i], NULL);
        ck_assert_int_eq(rc, OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), "does not match") != NULL, "unclear message: %s", opr_last_error());
        ck_assert_ptr_null(opr_grad(x));
    }
    for (int i = 0; i < 3; i++) opr_tensor_release(bad[i]);
    opr_tensor_release(y);
    opr_tensor_release(x);
}
END_TEST

/* In-place ops on a tensor that requires grad are refused before anything changes. */
START_TEST(inplace_change_of_saved_tensor_detected)
{
    /* y = x * w saves w (x requires grad); changing w in place afterwards must make
     * backward fail instead of giving a gradient computed from the new values */
    int64_t s[1] = {3};
    opr_tensor *x = leaf(1, s, true), *w = leaf(1, s, false);
    opr_tensor *y = CALL("mul", TV(x), TV(w)), *z = sum_all(y);
    opr_tensor *same = CALL("fill_", TV(w), opr_v_double(0));
    opr_tensor_release(same);
    int rc = opr_backward(z, NULL, NULL);
    ck_assert_int_eq(rc, OPR_ERR_INVALID);
    ck_assert_msg(strstr(opr_last_error(), "modified in place") && strstr(opr_last_error(), "'other'"),
                  "message: %s", opr_last_error());
    ck_assert_ptr_null(opr_grad(x));
    opr_tensor *all[] = {x, w, y, z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
}
END_TEST

START_TEST(declared_constant_ops_do_not_propagate)
{
    /* zeros_like is `differentiable: false`: its output is a constant */
    int64_t s[1] = {3};
    opr_tensor *x = leaf(1, s, true);
    opr_tensor *z = CALL("zeros_like", TV(x));
    ck_assert(!opr_requires_grad(z));
    opr_tensor_release(z);
    opr_tensor_release(x);
}
END_TEST

START_TEST(inplace_on_requires_grad_refused)
{
    int64_t s[1] = {4};
    opr_tensor *x = leaf(1, s, true), *src = leaf(1, s, false);
    double *before = tu_to_f64(x);
    uint8_t mask[4] = {1, 0, 1, 1};
    opr_tensor *m = opr_tensor_from_data(ctx, OPR_BOOL, 1, s, mask, OPR_CPU);
    int64_t idx[2] = {0, 2}, is[1] = {2};
    opr_tensor *index = opr_tensor_from_data(ctx, OPR_I64, 1, is, idx, OPR_CPU);
    opr_tensor *source = leaf(1, is, false);
    struct { const char *op; opr_value args[4]; int n; } cases[] = {
        {"fill_", {TV(x), opr_v_double(3)}, 2},
        {"copy_", {TV(x), TV(src)}, 2},
        {"masked_fill_", {TV(x), TV(m), opr_v_double(-7)}, 3},
        {"index_add_", {TV(x), opr_v_int(0), TV(index), TV(source)}, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        opr_tensor *out = NULL;
        int rc = opr_call_by_name(ctx, cases[c].op, cases[c].args, cases[c].n, &out, 1);
        double *after = tu_to_f64(x);
        bool same = memcmp(before, after, 4 * sizeof(double)) == 0;
        free(after);
        opr_tensor_release(out);
        ck_assert_msg(rc != OPR_OK, "%s on a tensor that requires grad was allowed (and %s the data)", cases[c].op,
                      same ? "kept" : "changed");
        ck_assert_msg(same, "%s was refused but changed the data", cases[c].op);
        ck_assert_msg(strstr(opr_last_error(), "grad") != NULL, "%s: unclear message: %s", cases[c].op, opr_last_error());
    }
    /* under no_grad the same in-place op is fine */
    opr_grad_mode_set(false);
    opr_tensor *out = NULL;
    ck_assert_int_eq(opr_call_by_name(ctx, "fill_", ARGS(TV(x), opr_v_double(3)), &out, 1), OPR_OK);
    opr_grad_mode_set(true);
    double three[4] = {3, 3, 3, 3};
    expect_values(x, three, 4, 0, "fill_ under no_grad");
    free(before);
    opr_tensor *ts[] = {out, source, index, m, src, x};
    for (int k = 0; k < 6; k++) opr_tensor_release(ts[k]);
}
END_TEST

/* ------------------------------------------------------------------ create_graph */

typedef opr_tensor *(*fwd_fn)(opr_tensor *const *in);

static opr_tensor *f_mul(opr_tensor *const *in) { return CALL("mul", TV(in[0]), TV(in[1])); }
static opr_tensor *f_exp(opr_tensor *const *in) { return CALL("exp", TV(in[0])); }
static opr_tensor *f_tanh(opr_tensor *const *in) { return CALL("tanh", TV(in[0])); }
/* exp(sum(x, dim=1)): the second derivative runs back through sum's formula */
static opr_tensor *f_sum(opr_tensor *const *in)
{
    int64_t d = 1;
    opr_tensor *s = CALL("sum", TV(in[0]), opr_v_ints(&d, 1));
    opr_tensor *e = CALL("exp", TV(s));
    opr_tensor_release(s);
    return e;
}
static opr_tensor *f_mm(opr_tensor *const *in) { return CALL("mm", TV(in[0]), TV(in[1])); }
static opr_tensor *f_matmul(opr_tensor *const *in) { return CALL("matmul", TV(in[0]), TV(in[1])); }

#define MAXIN 3

/* First gradients of <go, f(x)> with respect to every input (NULL: zero). */
static int first_grads(fwd_fn f, opr_tensor *const *x, int n, opr_tensor *go, bool create, opr_tensor **g)
{
    opr_tensor *y = f(x);
    opr_backward_opts o = {.struct_size = sizeof o, .create_graph = create};
    int rc = opr_autograd_grad(&y, &go, 1, x, n, g, &o);
    opr_tensor_release(y);
    return rc;
}

/* S = sum_i <u_i, g_i> on the host. */
static double dot_grads(opr_tensor *const *g, double *const *u, opr_tensor *const *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (!g[i]) continue;
        double *gv = tu_to_f64(g[i]);
        for (int64_t e = 0; e < opr_tensor_numel(x[i]); e++) s += u[i][e] * gv[e];
        free(gv);
    }
    return s;
}

/* d/dx_j <u, g(x)> by create_graph twice, against central differences of the first
 * gradient (eps 1e-6; rtol 1e-5, atol 1e-7). */
static void second_order(const char *name, fwd_fn f, int n, const int *ndims, const int64_t (*shapes)[3])
{
    opr_tensor *x[MAXIN], *u[MAXIN], *g[MAXIN] = {NULL}, *h[MAXIN] = {NULL};
    double *xv[MAXIN], *uv[MAXIN];
    for (int i = 0; i < n; i++) {
        x[i] = leaf(ndims[i], shapes[i], true);
        u[i] = leaf(ndims[i], shapes[i], false);
        xv[i] = tu_to_f64(x[i]);
        uv[i] = tu_to_f64(u[i]);
    }
    opr_tensor *y0 = f(x);
    opr_tensor *go = tu_rand(ctx, OPR_F64, opr_tensor_ndim(y0), opr_tensor_shape(y0), -1, 1);
    opr_tensor_release(y0);
    int rc = first_grads(f, x, n, go, true, g);
    ck_assert_msg(rc == OPR_OK, "%s: first gradients with create_graph: %s", name, opr_last_error());
    opr_tensor *outs[MAXIN], *gos[MAXIN];
    int nout = 0;
    for (int i = 0; i < n; i++)
        if (g[i] && opr_requires_grad(g[i])) { outs[nout] = g[i]; gos[nout++] = u[i]; }
    ck_assert_msg(nout > 0, "%s: no first gradient requires grad under create_graph", name);
    rc = opr_autograd_grad(outs, gos, nout, x, n, h, NULL);
    ck_assert_msg(rc == OPR_OK, "%s: second gradients: %s", name, opr_last_error());
    const double eps = 1e-6;
    for (int j = 0; j < n; j++) {
        double *hv = h[j] ? tu_to_f64(h[j]) : NULL;
        for (int64_t e = 0; e < opr_tensor_numel(x[j]); e++) {
            double sv[2];
            for (int side = 0; side < 2; side++) {
                double *pv = malloc((size_t)opr_tensor_numel(x[j]) * sizeof *pv);
                memcpy(pv, xv[j], (size_t)opr_tensor_numel(x[j]) * sizeof *pv);
                pv[e] += side ? -eps : eps;
                opr_tensor *xp[MAXIN], *gp[MAXIN] = {NULL};
                for (int i = 0; i < n; i++) {
                    xp[i] = i == j ? opr_tensor_from_data(ctx, OPR_F64, ndims[i], shapes[i], pv, OPR_CPU)
                                   : opr_tensor_from_data(ctx, OPR_F64, ndims[i], shapes[i], xv[i], OPR_CPU);
                    opr_set_requires_grad(xp[i], true);
                }
                free(pv);
                rc = first_grads(f, xp, n, go, false, gp);
                ck_assert_msg(rc == OPR_OK, "%s: first gradients: %s", name, opr_last_error());
                sv[side] = dot_grads(gp, uv, xp, n);
                for (int i = 0; i < n; i++) { opr_tensor_release(gp[i]); opr_tensor_release(xp[i]); }
            }
            double num = (sv[0] - sv[1]) / (2 * eps), ana = hv ? hv[e] : 0;
            if (!(fabs(ana - num) <= 1e-7 + 1e-5 * fmax(fabs(ana), fabs(num)))) {
                free(hv);
                ck_abort_msg("%s: second derivative d<u, g>/dx%d[%lld]: create_graph gives %.10g, finite differences %.10g",
                             name, j, (long long)e, ana, num);
            }
        }
        free(hv);
    }
    for (int i = 0; i < n; i++) {
        opr_tensor_release(g[i]);
        opr_tensor_release(h[i]);
        opr_tensor_release(u[i]);
        opr_tensor_release(x[i]);
        free(xv[i]);
        free(uv[i]);
    }
    opr_tensor_release(go);
}

START_TEST(create_graph_mul)
{
    const int nd[] = {2, 2};
    const int64_t sh[][3] = {{3, 4}, {3, 4}};
    second_order("mul", f_mul, 2, nd, sh);
}
END_TEST

START_TEST(create_graph_mul_broadcast)
{
    const int nd[] = {2, 1};
    const int64_t sh[][3] = {{3, 4}, {4}};
    second_order("mul (broadcast)", f_mul, 2, nd, sh);
}
END_TEST

START_TEST(create_graph_exp)
{
    const int nd[] = {2};
    const int64_t sh[][3] = {{2, 3}};
    second_order("exp", f_exp, 1, nd, sh);
}
END_TEST

START_TEST(create_graph_tanh)
{
    const int nd[] = {1};
    const int64_t sh[][3] = {{5}};
    second_order("tanh", f_tanh, 1, nd, sh);
}
END_TEST

START_TEST(create_graph_sum)
{
    const int nd[] = {2};
    const int64_t sh[][3] = {{3, 4}};
    second_order("exp(sum(x, 1))", f_sum, 1, nd, sh);
}
END_TEST

START_TEST(create_graph_mm)
{
    const int nd[] = {2, 2};
    const int64_t sh[][3] = {{3, 4}, {4, 2}};
    second_order("mm", f_mm, 2, nd, sh);
}
END_TEST

START_TEST(create_graph_matmul)
{
    const int nd[] = {3, 2};
    const int64_t sh[][3] = {{2, 3, 4}, {4, 2}};
    second_order("matmul (batched x 2-d)", f_matmul, 2, nd, sh);
}
END_TEST

/* ------------------------------------------------------------------ plans */

START_TEST(plan_mm_saves_the_other_operand)
{
    const opr_op *mm = opr_op_find(ctx, "mm");
    int64_t sa[2] = {64, 512}, sb[2] = {512, 512};
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 2, sa, OPR_CPU), *b = opr_tensor_new(ctx, OPR_F32, 2, sb, OPR_CPU);
    opr_value args[2] = {TV(a), TV(b)};
    static char text[16384];
    const char *self_name = "self", *mat2_name = "mat2";
    int rc = opr_plan_explain(mm, args, 2, &self_name, 1, text, sizeof text);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    const char *chosen = strstr(text, "chosen:");
    ck_assert_msg(chosen != NULL, "no 'chosen:' in\n%s", text);
    ck_assert_msg(strstr(chosen, "saves {mat2}") != NULL, "the chosen plan does not save exactly mat2:\n%s", text);
    ck_assert_msg(strstr(chosen, "1.00 MiB") != NULL, "the chosen plan does not say 1.00 MiB:\n%s", text);
    uint64_t bytes = 0;
    ck_assert_int_eq(opr_plan_saved_bytes(mm, args, 2, &self_name, 1, &bytes), OPR_OK);
    ck_assert_uint_eq(bytes, 512 * 512 * 4);
    /* mat2 requires grad: only self is saved */
    rc = opr_plan_explain(mm, args, 2, &mat2_name, 1, text, sizeof text);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    chosen = strstr(text, "chosen:");
    ck_assert_msg(chosen && strstr(chosen, "saves {self}") != NULL, "the chosen plan does not save exactly self:\n%s", text);
    ck_assert_msg(strstr(chosen, "128.0 KiB") != NULL, "the chosen plan does not say 128.0 KiB:\n%s", text);
    ck_assert_int_eq(opr_plan_saved_bytes(mm, args, 2, &mat2_name, 1, &bytes), OPR_OK);
    ck_assert_uint_eq(bytes, 64 * 512 * 4);
    /* both: both are saved */
    const char *both[2] = {"self", "mat2"};
    ck_assert_int_eq(opr_plan_saved_bytes(mm, args, 2, both, 2, &bytes), OPR_OK);
    ck_assert_uint_eq(bytes, (64 * 512 + 512 * 512) * 4);
    /* misuse */
    const char *bogus = "nope";
    ck_assert_int_eq(opr_plan_saved_bytes(mm, args, 2, &bogus, 1, &bytes), OPR_ERR_INVALID);
    ck_assert_int_ne(opr_plan_saved_bytes(mm, args, 2, NULL, 0, &bytes), OPR_OK);
    opr_tensor_release(a);
    opr_tensor_release(b);
}
END_TEST

/* What the plan says is what recording keeps: mm with self requiring grad holds mat2
 * (released by the caller) and not self's data beyond the caller's own reference. */
START_TEST(plan_matches_recorded_memory)
{
    uint64_t base = mem();
    int64_t sa[2] = {64, 512}, sb[2] = {512, 512};
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 2, sa, OPR_CPU), *b = opr_tensor_new(ctx, OPR_F32, 2, sb, OPR_CPU);
    ck_assert_int_eq(opr_set_requires_grad(a, true), OPR_OK);
    opr_tensor *y = CALL("mm", TV(a), TV(b));
    opr_tensor *z = sum_all(y);
    uint64_t ba = nbytes(a), bb = nbytes(b), bz = nbytes(z);
    opr_tensor_release(b);
    opr_tensor_release(y);
    /* a is held by the caller and by the graph's edge; mat2 only as saved */
    ck_assert_uint_eq(mem() - base, ba + bb + bz);
    opr_tensor_release(z);
    ck_assert_uint_eq(mem() - base, ba);
    opr_tensor_release(a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autograd");
    TCase *eng = tcase_create("engine");
    tcase_add_checked_fixture(eng, setup, teardown);
    tcase_add_test(eng, accumulate_mul_x_x);
    tcase_add_test(eng, accumulate_add_x_x);
    tcase_add_test(eng, leaf_ready_once_when_whole);
    tcase_add_test(eng, diamond);
    tcase_add_test(eng, second_backward_without_retain_graph_fails);
    tcase_add_test(eng, retain_graph_accumulates);
    tcase_add_test(eng, saved_tensors_released_after_backward);
    tcase_add_test(eng, retained_graph_keeps_saved_tensors);
    tcase_add_test(eng, no_grad_records_nothing);
    tcase_add_test(eng, requires_grad_propagation);
    tcase_add_test(eng, leaf_gradients);
    tcase_add_test(eng, zero_grad_and_accumulation_across_graphs);
    tcase_add_test(eng, detach);
    tcase_add_test(eng, autograd_grad_leaves);
    tcase_add_test(eng, autograd_grad_non_leaf);
    tcase_add_test(eng, backward_non_scalar_without_grad_fails);
    tcase_add_test(eng, backward_wrong_shape_grad_fails);
    tcase_add_test(eng, inplace_on_requires_grad_refused);
    tcase_add_test(eng, inplace_change_of_saved_tensor_detected);
    tcase_add_test(eng, declared_constant_ops_do_not_propagate);
    suite_add_tcase(s, eng);
    TCase *cg = tcase_create("create_graph");
    tcase_add_checked_fixture(cg, setup, teardown);
    tcase_add_test(cg, create_graph_mul);
    tcase_add_test(cg, create_graph_mul_broadcast);
    tcase_add_test(cg, create_graph_exp);
    tcase_add_test(cg, create_graph_tanh);
    tcase_add_test(cg, create_graph_sum);
    tcase_add_test(cg, create_graph_mm);
    tcase_add_test(cg, create_graph_matmul);
    suite_add_tcase(s, cg);
    TCase *pl = tcase_create("plans");
    tcase_add_checked_fixture(pl, setup, teardown);
    tcase_add_test(pl, plan_mm_saves_the_other_operand);
    tcase_add_test(pl, plan_matches_recorded_memory);
    suite_add_tcase(s, pl);
    return tu_run(s);
}
