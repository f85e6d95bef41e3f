/* Threads suite: one context shared by NTHREADS threads, as opreg.h allows. Forward
 * ops on every thread; separate graphs with per-thread grad mode; backward passes that
 * all accumulate into one shared leaf; op listing, lookup and the error log while
 * another thread loads YAML; plan explanation; and contexts of their own created on
 * several threads at once. The suite passes in every build, and
 * the ThreadSanitizer build (make tsan) also finds the races that happen to give the
 * right numbers.
 *
 * Workers do not call Check (it is not thread-safe): each records its first failure,
 * and the main thread asserts after joining. Values are small multiples of 1/4 in f64,
 * so every sum is exact whatever the order of additions. */
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 8
#define TV(t) opr_v_tensor(t)

typedef struct worker {
    int id;
    opr_ctx *ctx;
    void *shared;   /* the scenario's common data */
    char err[512];  /* first failure, "" when none */
} worker;

static pthread_barrier_t start_line;
static void *(*worker_fn)(worker *);

/* Every worker starts once all are created, so that their loops overlap. */
static void *start_worker(void *arg)
{
    pthread_barrier_wait(&start_line);
    return worker_fn(arg);
}

static void *wfail(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *wfail(worker *w, const char *fmt, ...)
{
    if (w->err[0]) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return NULL;
}

/* Starts n workers on fn together, joins them and asserts none failed. */
static void run_workers(opr_ctx *ctx, void *shared, int n, void *(*fn)(worker *))
{
    worker w[NTHREADS + 1];
    pthread_t tid[NTHREADS + 1];
    ck_assert_int_le(n, NTHREADS + 1);
    ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, (unsigned)n), 0);
    worker_fn = fn;
    for (int i = 0; i < n; i++) {
        w[i] = (worker){.id = i, .ctx = ctx, .shared = shared};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, start_worker, &w[i]), 0);
    }
    for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_join(tid[i], NULL), 0);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < n; i++) ck_assert_msg(!w[i].err[0], "thread %d: %s", i, w[i].err);
}

/* One-output call; NULL (and the message in w) on failure. */
static opr_tensor *call(worker *w, const char *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    int rc = opr_call_by_name(w->ctx, op, args, nargs, &out, 1);
    if (rc) wfail(w, "%s: %s: %s", op, opr_status_name(rc), opr_last_error());
    return out;
}

static opr_tensor *f64_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    return opr_tensor_from_data(ctx, OPR_F64, ndim, shape, v, OPR_CPU);
}

/* Quarter steps in [-2, 2): exact in f64, and their sums and products stay exact. */
static double quarter(int i, int salt) { return (double)((i * 7 + salt * 3) % 17 - 8) * 0.25; }

/* t is f64 with exactly the values want[0..n) (t holds at most 64 elements). */
static bool same_values(const opr_tensor *t, const double *want, int64_t n)
{
    double got[64];
    if (!t || n > 64 || opr_tensor_dtype(t) != OPR_F64 || opr_tensor_numel(t) != n ||
        opr_tensor_copy_to_host(t, got, (size_t)n * sizeof *got))
        return false;
    return !memcmp(got, want, (size_t)n * sizeof *got);
}

static uint64_t current_bytes(opr_ctx *ctx)
{
    opr_mem_stats s = {.struct_size = sizeof s};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &s), OPR_OK);
    return s.current_bytes;
}

/* ------------------------------------------------------------------ forward */

/* Large enough that every operand goes through the CPU allocator's block cache. */
#define FWD_N 96
#define FWD_ITERS 12

static void *forward_worker(worker *w)
{
    const int64_t shape[2] = {FWD_N, FWD_N};
    double *a = malloc(FWD_N * FWD_N * sizeof *a), *b = malloc(FWD_N * FWD_N * sizeof *b);
    if (!a || !b) { free(a); free(b); return wfail(w, "out of memory"); }
    for (int i = 0; i < FWD_N * FWD_N; i++) { a[i] = quarter(i, w->id); b[i] = quarter(i, w->id + 5); }
    double want = 0; /* sum(mm(a, b) + a), on the host */
    for (int i = 0; i < FWD_N; i++)
        for (int j = 0; j < FWD_N; j++) {
            want += a[i * FWD_N + j];
            for (int k = 0; k < FWD_N; k++) want += a[i * FWD_N + k] * b[k * FWD_N + j];
        }
    uint64_t allocs = 0;
    for (int it = 0; it < FWD_ITERS && !w->err[0]; it++) {
        opr_tensor *ta = f64_tensor(w->ctx, 2, shape, a), *tb = f64_tensor(w->ctx, 2, shape, b);
        opr_tensor *p = ta && tb ? call(w, "mm", (opr_value[]){TV(ta), TV(tb)}, 2) : NULL;
        opr_tensor *q = p ? call(w, "add", (opr_value[]){TV(p), TV(ta)}, 2) : NULL;
        opr_tensor *s = q ? call(w, "sum", (opr_value[]){TV(q)}, 1) : NULL;
        double got = 0;
        if (!s) wfail(w, "iteration %d: %s", it, ta && tb ? "an op failed" : opr_last_error());
        else if (opr_tensor_copy_to_host(s, &got, sizeof got) || got != want)
            wfail(w, "iteration %d: sum(mm(a, b) + a) = %.17g, expected %.17g", it, got, want);
        opr_mem_stats st = {.struct_size = sizeof st};
        if (opr_memory_stats(w->ctx, OPR_CPU, &st) || st.peak_bytes < st.current_bytes ||
            st.reserved_bytes < st.current_bytes || st.n_allocs < allocs)
            wfail(w, "memory statistics inconsistent: current %llu, peak %llu, reserved %llu, allocs %llu after %llu",
                  (unsigned long long)st.current_bytes, (unsigned long long)st.peak_bytes,
                  (unsigned long long)st.reserved_bytes, (unsigned long long)st.n_allocs, (unsigned long long)allocs);
        allocs = st.n_allocs;
        opr_tensor *all[] = {s, q, p, tb, ta};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    free(a);
    free(b);
    return NULL;
}

START_TEST(forward_ops_on_every_thread)
{
    opr_ctx *ctx = tu_ctx();
    uint64_t before = current_bytes(ctx);
    run_workers(ctx, NULL, NTHREADS, forward_worker);
    ck_assert_uint_eq(current_bytes(ctx), before); /* every storage was counted back */
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ separate graphs */

#define SEP_N 64
#define SEP_ITERS 40

/* Each thread: its own leaf x, loss sum(x * x * c), backward, compare with 2 c x.
 * Then one more op, under no_grad on odd threads: its output requires grad exactly
 * when this thread's grad mode is on, whatever the other threads' modes are. */
static void *separate_graphs_worker(worker *w)
{
    double xv[SEP_N], cv[SEP_N], want[SEP_N];
    for (int i = 0; i < SEP_N; i++) {
        xv[i] = quarter(i, w->id);
        cv[i] = quarter(i, w->id + 11);
        want[i] = 2 * (cv[i] * xv[i]);
    }
    const int64_t n = SEP_N;
    opr_tensor *x = f64_tensor(w->ctx, 1, &n, xv), *c = f64_tensor(w->ctx, 1, &n, cv);
    if (!x || !c || opr_set_requires_grad(x, true)) wfail(w, "setup: %s", opr_last_error());
    for (int it = 0; it < SEP_ITERS && !w->err[0]; it++) {
        opr_tensor *xx = call(w, "mul", (opr_value[]){TV(x), TV(x)}, 2);
        opr_tensor *y = xx ? call(w, "mul", (opr_value[]){TV(xx), TV(c)}, 2) : NULL;
        opr_tensor *s = y ? call(w, "sum", (opr_value[]){TV(y)}, 1) : NULL;
        int rc = s ? opr_backward(s, NULL, NULL) : OPR_OK;
        if (rc) wfail(w, "backward: %s", opr_last_error());
        else if (s && !same_values(opr_grad(x), want, SEP_N)) wfail(w, "iteration %d: d sum(x x c)/dx is not 2 c x", it);
        opr_zero_grad(x);
        bool no_grad = w->id % 2;
        bool prev = opr_grad_mode_set(!no_grad);
        opr_tensor *z = call(w, "mul", (opr_value[]){TV(x), TV(c)}, 2);
        opr_grad_mode_set(prev);
        if (z && opr_requires_grad(z) == no_grad)
            wfail(w, "mul under grad mode %s: requires_grad %d", no_grad ? "off" : "on", opr_requires_grad(z));
        opr_tensor *all[] = {z, s, y, xx};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    opr_tensor_release(x);
    opr_tensor_release(c);
    return NULL;
}

START_TEST(separate_graphs_and_grad_mode_per_thread)
{
    opr_ctx *ctx = tu_ctx();
    run_workers(ctx, NULL, NTHREADS, separate_graphs_worker);
    ck_assert(opr_grad_mode_enabled()); /* the workers' modes stayed on their threads */
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ shared leaf */

#define LEAF_N 16
#define LEAF_ITERS 200

typedef struct leaf_case {
    opr_tensor *x, *c; /* x requires grad; d sum(x * c)/dx = c */
    double cv[LEAF_N];
} leaf_case;

/* LEAF_ITERS backward passes of sum(x * c) into the shared x; every tenth pass also
 * opr_autograd_grad, which must return c and leave x's gradient alone. */
static void *shared_leaf_worker(worker *w)
{
    leaf_case *lc = w->shared;
    for (int it = 0; it < LEAF_ITERS && !w->err[0]; it++) {
        opr_tensor *y = call(w, "mul", (opr_value[]){TV(lc->x), TV(lc->c)}, 2);
        opr_tensor *s = y ? call(w, "sum", (opr_value[]){TV(y)}, 1) : NULL;
        if (s && it % 10 == 0) {
            opr_backward_opts keep = {.struct_size = sizeof keep, .retain_graph = true};
            opr_tensor *g = NULL;
            if (opr_autograd_grad(&s, NULL, 1, &lc->x, 1, &g, &keep)) wfail(w, "autograd_grad: %s", opr_last_error());
            else if (!same_values(g, lc->cv, LEAF_N)) wfail(w, "autograd_grad: d sum(x c)/dx is not c");
            opr_tensor_release(g);
        }
        if (s && opr_backward(s, NULL, NULL)) wfail(w, "backward %d: %s", it, opr_last_error());
        opr_tensor_release(s);
        opr_tensor_release(y);
    }
    return NULL;
}

START_TEST(backward_into_one_shared_leaf)
{
    opr_ctx *ctx = tu_ctx();
    leaf_case lc;
    double xv[LEAF_N];
    for (int i = 0; i < LEAF_N; i++) { xv[i] = quarter(i, 1); lc.cv[i] = quarter(i, 2); }
    const int64_t n = LEAF_N;
    lc.x = f64_tensor(ctx, 1, &n, xv);
    lc.c = f64_tensor(ctx, 1, &n, lc.cv);
    ck_assert_ptr_nonnull(lc.x);
    ck_assert_ptr_nonnull(lc.c);
    ck_assert_int_eq(opr_set_requires_grad(lc.x, true), OPR_OK);
    /* twice: from no gradient (the first pass stores), then onto the one left there */
    for (int round = 1; round <= 2; round++) {
        run_workers(ctx, &lc, NTHREADS, shared_leaf_worker);
        double want[LEAF_N];
        for (int i = 0; i < LEAF_N; i++) want[i] = (double)(round * NTHREADS * LEAF_ITERS) * lc.cv[i];
        ck_assert_ptr_nonnull(opr_grad(lc.x));
        double *got = tu_to_f64(opr_grad(lc.x));
        for (int i = 0; i < LEAF_N; i++)
            ck_assert_msg(got[i] == want[i], "round %d: grad[%d] = %.17g, expected %d * c = %.17g", round, i, got[i],
                          round * NTHREADS * LEAF_ITERS, want[i]);
        free(got);
    }
    opr_tensor_release(lc.x);
    opr_tensor_release(lc.c);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ registry */

#define LOAD_ROUNDS 60
#define READERS 4

typedef struct load_case {
    _Atomic int done;  /* the loader finished */
    int base_ops;      /* ops before the loads */
} load_case;

/* Round k: a view op with a derivative, a binary op with a fused backward kernel slot
 * (three table entries), and on odd rounds an entry with an unknown shape function
 * (one error line). */
static void round_yaml(int k, char *buf, size_t len)
{
    snprintf(buf, len,
             "- name: thr%d_t(Tensor self) -> Tensor\n"
             "  view: t\n"
             "  shape: transpose_shape(self, 0, -1)\n"
             "  self: t(grad)\n"
             "- name: thr%d_mul(Tensor self, Tensor other) -> Tensor\n"
             "  shape: broadcast(self, other)\n"
             "  self: mul(grad, other)\n"
             "  other: mul(grad, self)\n"
             "  self, other:\n"
             "    kernel: thr%d_mul_backward\n"
             "%s",
             k, k, k, k % 2 ? "- name: thr_bad(Tensor self) -> Tensor\n  shape: no_such_function(self)\n" : "");
}

static void *loader_worker(worker *w)
{
    load_case *lc = w->shared;
    char text[1024];
    for (int k = 0; k < LOAD_ROUNDS && !w->err[0]; k++) {
        round_yaml(k, text, sizeof text);
        int n = -1;
        int rc = opr_registry_load_yaml_string(w->ctx, text, "threads.yaml", &n);
        if (rc != (k % 2 ? OPR_ERR_PARSE : OPR_OK) || n != 2)
            wfail(w, "round %d: %s, %d loaded: %s", k, opr_status_name(rc), n, opr_last_error());
    }
    atomic_store(&lc->done, 1);
    return NULL;
}

/* Lists every op, finds each by name, and runs and explains a freshly loaded op,
 * until the loader is done. */
static void *lister_worker(worker *w)
{
    load_case *lc = w->shared;
    int prev_count = 0;
    const int64_t shape[2] = {2, 3};
    opr_tensor *a = opr_tensor_new(w->ctx, OPR_F64, 2, shape, OPR_CPU);
    if (!a) return wfail(w, "setup: %s", opr_last_error());
    for (bool last = false; !last && !w->err[0];) {
        last = atomic_load(&lc->done); /* one more pass after the loader finished */
        int count = opr_op_count(w->ctx);
        if (count < prev_count || count < lc->base_ops) { wfail(w, "op count went from %d to %d", prev_count, count); break; }
        prev_count = count;
        for (int i = 0; i < count && !w->err[0]; i++) {
            const opr_op *op = opr_op_at(w->ctx, i);
            const char *name = opr_op_name(op);
            if (!op || !name || opr_op_find(w->ctx, name) != op) wfail(w, "op %d of %d: '%s' not found again", i, count, name);
        }
        char name[32];
        snprintf(name, sizeof name, "thr%d_t", (count - lc->base_ops) / 3 - 1);
        const opr_op *tv = count > lc->base_ops ? opr_op_find(w->ctx, name) : NULL;
        if (tv) { /* a loaded op works as soon as it can be found */
            char buf[2048];
            opr_tensor *r = call(w, name, (opr_value[]){TV(a)}, 1);
            if (r && opr_tensor_size(r, 0) != 3) wfail(w, "%s of a [2, 3] tensor has %lld rows", name, (long long)opr_tensor_size(r, 0));
            opr_tensor_release(r);
            if (opr_plan_explain(tv, (opr_value[]){TV(a)}, 1, (const char *[]){"self"}, 1, buf, sizeof buf))
                wfail(w, "explain %s: %s", name, opr_last_error());
        }
    }
    opr_tensor_release(a);
    return NULL;
}

/* Reads the error log and the op count only (calls that need no other lookup), and
 * checks that the log grows by whole lines, until the loader is done. */
static void *error_log_worker(worker *w)
{
    load_case *lc = w->shared;
    char *prev = strdup("");
    if (!prev) return wfail(w, "out of memory");
    for (bool last = false; !last && !w->err[0];) {
        last = atomic_load(&lc->done);
        const opr_op *newest = opr_op_at(w->ctx, opr_op_count(w->ctx) - 1);
        if (!newest || !opr_op_name(newest)) wfail(w, "the newest op is missing: %s", opr_last_error());
        const char *errs = opr_registry_errors(w->ctx);
        size_t len = strlen(errs), plen = strlen(prev);
        if (len < plen || memcmp(errs, prev, plen) || (len && errs[len - 1] != '\n'))
            wfail(w, "error log changed other than by appending lines: '%s' then '%s'", prev, errs);
        free(prev);
        if (!(prev = strdup(errs))) return wfail(w, "out of memory");
    }
    free(prev);
    return NULL;
}

static void *registry_worker(worker *w)
{
    if (w->id == 0) return loader_worker(w);
    return w->id % 2 ? error_log_worker(w) : lister_worker(w);
}

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

START_TEST(registry_reads_while_loading)
{
    opr_ctx *ctx = tu_ctx();
    load_case lc = {.base_ops = opr_op_count(ctx)};
    int base_errors = count_substr(opr_registry_errors(ctx), "\n");
    run_workers(ctx, &lc, 1 + READERS, registry_worker);
    ck_assert_int_eq(opr_op_count(ctx), lc.base_ops + 3 * LOAD_ROUNDS);
    for (int k = 0; k < LOAD_ROUNDS; k++) {
        char name[32];
        snprintf(name, sizeof name, "thr%d_mul_backward", k);
        ck_assert_msg(opr_op_find(ctx, name) != NULL, "%s: %s", name, opr_last_error());
    }
    const char *errs = opr_registry_errors(ctx);
    ck_assert_int_eq(count_substr(errs, "\n"), base_errors + LOAD_ROUNDS / 2);
    ck_assert_int_eq(count_substr(errs, "no_such_function"), LOAD_ROUNDS / 2);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ plans */

#define PLAN_SHAPES 6

typedef struct plan_case {
    int64_t dims[PLAN_SHAPES][3]; /* mm of [m, k] by [k, n] */
    char want[PLAN_SHAPES][3][2048]; /* explanations from a fresh context, per input set */
    uint64_t want_bytes[PLAN_SHAPES][3];
} plan_case;

static const char *const plan_inputs[3][2] = {{"self"}, {"mat2"}, {"self", "mat2"}};
static const int plan_ninputs[3] = {1, 1, 2};

static int explain(opr_ctx *ctx, const int64_t *d, int set, char *buf, size_t len, uint64_t *bytes)
{
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){d[0], d[1]}, OPR_CPU);
    opr_tensor *b = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){d[1], d[2]}, OPR_CPU);
    const opr_op *mm = opr_op_find(ctx, "mm");
    opr_value args[2] = {TV(a), TV(b)};
    int rc = a && b && mm ? OPR_OK : OPR_ERR_NOMEM;
    if (!rc) rc = opr_plan_explain(mm, args, 2, plan_inputs[set], plan_ninputs[set], buf, len);
    if (!rc) rc = opr_plan_saved_bytes(mm, args, 2, plan_inputs[set], plan_ninputs[set], bytes);
    opr_tensor_release(a);
    opr_tensor_release(b);
    return rc;
}

/* Every shape and input set, starting at a different one on each thread, so the
 * threads fill the plan cache of mm at the same time; then a backward through mm,
 * whose recording reads the same cache. */
static void *plan_worker(worker *w)
{
    plan_case *pc = w->shared;
    for (int i = 0; i < PLAN_SHAPES * 3 && !w->err[0]; i++) {
        int s = (i + w->id) % PLAN_SHAPES, set = (i / PLAN_SHAPES + w->id) % 3;
        char buf[2048];
        uint64_t bytes = 0;
        if (explain(w->ctx, pc->dims[s], set, buf, sizeof buf, &bytes)) wfail(w, "explain: %s", opr_last_error());
        else if (strcmp(buf, pc->want[s][set]) || bytes != pc->want_bytes[s][set])
            wfail(w, "shape %d, inputs %d: explained\n%s\nbut alone\n%s", s, set, buf, pc->want[s][set]);
    }
    const int64_t *d = pc->dims[w->id % PLAN_SHAPES];
    opr_tensor *a = opr_tensor_new(w->ctx, OPR_F32, 2, (int64_t[]){d[0], d[1]}, OPR_CPU);
    opr_tensor *b = opr_tensor_new(w->ctx, OPR_F32, 2, (int64_t[]){d[1], d[2]}, OPR_CPU);
    if (!a || !b || opr_set_requires_grad(a, true) || opr_set_requires_grad(b, true)) wfail(w, "setup: %s", opr_last_error());
    opr_tensor *p = w->err[0] ? NULL : call(w, "mm", (opr_value[]){TV(a), TV(b)}, 2);
    opr_tensor *s = p ? call(w, "sum", (opr_value[]){TV(p)}, 1) : NULL;
    if (s && opr_backward(s, NULL, NULL)) wfail(w, "backward: %s", opr_last_error());
    if (s && (!opr_grad(a) || !opr_grad(b))) wfail(w, "backward through mm left a gradient out");
    opr_tensor *all[] = {s, p, b, a};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    return NULL;
}

START_TEST(plan_explain_on_every_thread)
{
    static plan_case pc = {.dims = {{1, 64, 64}, {64, 1, 64}, {64, 64, 1}, {8, 8, 8}, {256, 4, 256}, {3, 100, 7}}};
    opr_ctx *alone = tu_ctx();
    for (int s = 0; s < PLAN_SHAPES; s++)
        for (int set = 0; set < 3; set++)
            ck_assert_msg(!explain(alone, pc.dims[s], set, pc.want[s][set], sizeof pc.want[s][set], &pc.want_bytes[s][set]),
                          "%s", opr_last_error());
    tu_ctx_free(alone);
    opr_ctx *ctx = tu_ctx();
    run_workers(ctx, &pc, NTHREADS, plan_worker);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ contexts */

#define CTX_THREADS 4
#define CTX_PER_THREAD 3

/* Contexts of their own, created and used at the same time on several threads (a
 * documented use): every creation runs the CPU plugin's init, which must not race with
 * another's, nor with kernels running in a context already made (the vector-math
 * dispatch, the error path). */
static void *context_worker(worker *w)
{
    const double x[4] = {0, 0.25, -0.5, 1};
    for (int k = 0; k < CTX_PER_THREAD && !w->err[0]; k++) {
        opr_ctx *ctx = opr_ctx_new(NULL);
        if (!ctx) return wfail(w, "opr_ctx_new: %s", opr_last_error());
        worker in = {.id = w->id, .ctx = ctx};
        opr_tensor *t = f64_tensor(ctx, 1, (int64_t[]){4}, x), *e = t ? call(&in, "exp", (opr_value[]){TV(t)}, 1) : NULL;
        double got[4] = {0}, off = 0; /* the vector loops (SLEEF) are within 1 ulp of libm */
        if (e && !opr_tensor_copy_to_host(e, got, sizeof got))
            for (int i = 0; i < 4; i++) off = fmax(off, fabs(got[i] - exp(x[i])) / exp(x[i]));
        if (!e) wfail(w, "context %d: %s", k, in.err[0] ? in.err : opr_last_error());
        else if (!(off < 1e-15))
            wfail(w, "context %d: exp gave %g %g %g %g", k, got[0], got[1], got[2], got[3]);
        /* a kernel's error goes through the host table the plugin keeps */
        opr_tensor *bad = NULL, *i64 = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){1}, (int64_t[]){0}, OPR_CPU);
        if (!w->err[0] && (!i64 || opr_call_by_name(ctx, "fill_", (opr_value[]){TV(i64), opr_v_double(1e19)}, 2, &bad, 1) !=
                                       OPR_ERR_INVALID || !strstr(opr_last_error(), "without overflow")))
            wfail(w, "context %d: fill_ with 1e19 into i64 was not refused: %s", k, opr_last_error());
        opr_tensor_release(bad);
        opr_tensor_release(i64);
        opr_tensor_release(e);
        opr_tensor_release(t);
        int live = opr_ctx_free(ctx);
        if (live) wfail(w, "context %d: %d tensors leaked", k, live);
    }
    return NULL;
}

START_TEST(contexts_created_on_several_threads)
{
    run_workers(NULL, NULL, CTX_THREADS, context_worker);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("shared_context");
    tcase_add_test(tc, forward_ops_on_every_thread);
    tcase_add_test(tc, separate_graphs_and_grad_mode_per_thread);
    tcase_add_test(tc, backward_into_one_shared_leaf);
    tcase_add_test(tc, registry_reads_while_loading);
    tcase_add_test(tc, plan_explain_on_every_thread);
    suite_add_tcase(s, tc);
    TCase *own = tcase_create("own_contexts");
    tcase_add_test(own, contexts_created_on_several_threads);
    suite_add_tcase(s, own);
    return tu_run(s);
}
