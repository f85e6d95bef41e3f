/* The collectives across processes, run under mpirun (tests/dist/dist_check.sh):
 *
 *   test_dist SIZE          every collective's values on every rank against a
 *                           single-process reference (each rank can make every rank's
 *                           input), in f32 and f64, contiguous and strided; their
 *                           gradients against finite differences across ranks (f64);
 *                           a sub-group split by parity; members that call
 *                           different collectives all fail, naming the one that differs
 *   test_dist SIZE --die    the last rank exits mid-step; every other rank's next
 *                           collective must fail within the time-out, with a message,
 *                           and its opr_ctx_free return at once, logging why it
 *                           skipped MPI_Finalize
 *   ... --device D          the same on device D's tensors (cuda: the NCCL kernels),
 *                           rank r on ordinal r modulo D's count, with the CPU fallback
 *                           off, so that no collective can run on the CPU instead
 *
 * Each rank prints "rank R/N: all K checks passed" or the failures; exit status 1 on a
 * failure. Links libopreg only: the MPI plugin is found in the build tree. */
#include "dist_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROWS 6 /* divisible by 2 and 3 members, for reduce_scatter */
#define COLS 2
#define N (ROWS * COLS)

static opr_device dev = OPR_CPU; /* where the inputs live (--device) */

static opr_tensor *on_dev(opr_tensor *t) { return dist_test_to(t, dev); }

/* Rank r's input, element i: distinct on every rank and element (no ties for max). */
static double input(int r, int i) { return sin(1.0 + 7.3 * r + 0.37 * i) + 0.01 * r; }

/* Rank r's input as a [ROWS, COLS] tensor, contiguous or the transpose of a
 * [COLS, ROWS] one (strided). perturb: added to element `at`. */
static opr_tensor *make_input(int r, opr_dtype dt, bool strided, int at, double perturb)
{
    double v[N];
    for (int i = 0; i < N; i++) v[i] = input(r, i) + (i == at ? perturb : 0);
    if (!strided) {
        opr_tensor *d = on_dev(opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){ROWS, COLS}, v, OPR_CPU));
        if (dt == OPR_F64) return d;
        opr_value a[2] = {opr_v_tensor(d), opr_v_string("f32")};
        opr_tensor *f = NULL;
        opr_call(opr_op_find(ctx, "to"), a, 2, &f, 1);
        opr_tensor_release(d);
        return f;
    }
    double tv[N]; /* [COLS, ROWS] holding v transposed */
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) tv[j * ROWS + i] = v[i * COLS + j];
    opr_tensor *base = on_dev(opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){COLS, ROWS}, tv, OPR_CPU));
    opr_tensor *cast = base;
    if (dt == OPR_F32) {
        opr_value a[2] = {opr_v_tensor(base), opr_v_string("f32")};
        opr_call(opr_op_find(ctx, "to"), a, 2, &cast, 1);
        opr_tensor_release(base);
    }
    opr_value a[1] = {opr_v_tensor(cast)};
    opr_tensor *t = NULL;
    opr_call(opr_op_find(ctx, "t"), a, 1, &t, 1);
    opr_tensor_release(cast);
    return t;
}

typedef struct coll {
    const char *name; /* the op */
    const char *op;   /* its reduction, or NULL */
    int root;         /* broadcast / reduce: -1 none */
} coll;

static int run(const coll *c, opr_tensor *x, int64_t group, opr_tensor **y)
{
    opr_value a[4];
    int n = 0;
    a[n++] = opr_v_tensor(x);
    if (c->root >= 0) a[n++] = opr_v_int(c->root); /* reduce_to(self, root, op, group) */
    if (c->op) a[n++] = opr_v_string(c->op);
    a[n++] = opr_v_int(group);
    *y = NULL;
    return opr_call(opr_op_find(ctx, c->name), a, n, y, 1);
}

/* The reference of c on this rank, from every member's input (members: the ranks of
 * world in the group, in order; me: this rank's index among them). Returns its numel. */
static int64_t reference(const coll *c, const int *members, int size, int me, double *out)
{
    if (!strcmp(c->name, "all_reduce")) {
        for (int i = 0; i < N; i++) {
            double acc = !strcmp(c->op, "max") ? -INFINITY : !strcmp(c->op, "min") ? INFINITY : 0;
            for (int s = 0; s < size; s++) {
                double v = input(members[s], i);
                acc = !strcmp(c->op, "max") ? fmax(acc, v) : !strcmp(c->op, "min") ? fmin(acc, v) : acc + v;
            }
            out[i] = !strcmp(c->op, "mean") ? acc / size : acc;
        }
        return N;
    }
    if (!strcmp(c->name, "all_gather")) {
        for (int s = 0; s < size; s++)
            for (int i = 0; i < N; i++) out[s * N + i] = input(members[s], i);
        return (int64_t)size * N;
    }
    if (!strcmp(c->name, "reduce_scatter")) {
        int64_t part = N / size;
        for (int64_t i = 0; i < part; i++) {
            double acc = 0;
            for (int s = 0; s < size; s++) acc += input(members[s], (int)(me * part + i));
            out[i] = !strcmp(c->op, "mean") ? acc / size : acc;
        }
        return part;
    }
    if (!strcmp(c->name, "broadcast_from")) {
        for (int i = 0; i < N; i++) out[i] = input(members[c->root], i);
        return N;
    }
    for (int i = 0; i < N; i++) { /* reduce_to */
        double acc = 0;
        for (int s = 0; s < size; s++) acc += input(members[s], i);
        out[i] = me == c->root ? acc : 0;
    }
    return N;
}

static double *read_host(opr_tensor *t, int64_t *n)
{
    *n = opr_tensor_numel(t);
    double *v = calloc((size_t)*n + 1, sizeof *v);
    opr_tensor *d = t;
    if (opr_tensor_dtype(t) != OPR_F64) {
        opr_value a[2] = {opr_v_tensor(t), opr_v_string("f64")};
        opr_call(opr_op_find(ctx, "to"), a, 2, &d, 1);
    }
    opr_value a[1] = {opr_v_tensor(d)};
    opr_tensor *c = NULL;
    opr_call(opr_op_find(ctx, "contiguous"), a, 1, &c, 1);
    opr_tensor_copy_to_host(c, v, (size_t)*n * sizeof *v);
    opr_tensor_release(c);
    if (d != t) opr_tensor_release(d);
    return v;
}

static const coll colls[] = {
    {"all_reduce", "sum", -1}, {"all_reduce", "mean", -1}, {"all_reduce", "max", -1}, {"all_reduce", "min", -1},
    {"all_gather", NULL, -1},  {"reduce_scatter", "sum", -1}, {"reduce_scatter", "mean", -1},
    {"broadcast_from", NULL, 0},    {"reduce_to", "sum", 0},
};
#define NCOLLS ((int)(sizeof colls / sizeof colls[0]))

static void describe(const coll *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", c->name, c->op ? " " : "", c->op ? c->op : "");
}

/* Values on the world and on a parity sub-group. */
static void check_values(const opr_group *g, const int *members, int me)
{
    for (int k = 0; k < NCOLLS; k++) {
        coll c = colls[k];
        if (c.root >= 0) c.root = g->size - 1; /* the last member: not rank 0 alone */
        char what[64];
        describe(&c, what, sizeof what);
        double want[4 * N];
        int64_t nwant = reference(&c, members, g->size, me, want);
        for (int dt = 0; dt < 2; dt++)
            for (int strided = 0; strided < 2; strided++) {
                opr_tensor *x = make_input(world.rank, dt ? OPR_F64 : OPR_F32, strided, -1, 0), *y;
                int rc = run(&c, x, g->id, &y);
                CHECK(rc == OPR_OK, "%s (group %lld): %s", what, (long long)g->id, opr_last_error());
                CHECK(rc || opr_tensor_device(y).type == dev.type, "%s: the result left the device", what);
                if (!rc) {
                    int64_t n;
                    double *got = read_host(y, &n);
                    CHECK(n == nwant, "%s: %lld elements, want %lld", what, (long long)n, (long long)nwant);
                    double tol = dt ? 1e-13 : 2e-6, worst = 0;
                    for (int64_t i = 0; i < n && n == nwant; i++) worst = fmax(worst, fabs(got[i] - want[i]));
                    CHECK(worst <= tol * (g->size + 1), "%s %s %s group %lld: max error %g", what, dt ? "f64" : "f32",
                          strided ? "strided" : "contiguous", (long long)g->id, worst);
                    free(got);
                }
                opr_tensor_release(y);
                opr_tensor_release(x);
            }
    }
}

/* sum over ranks of <w_rank, y_rank> (every rank gets it). */
static double global_loss(opr_tensor *y, const double *w)
{
    int64_t n;
    double *v = read_host(y, &n), l = 0;
    for (int64_t i = 0; i < n; i++) l += w[i] * v[i];
    free(v);
    opr_tensor *lt = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){1}, &l, OPR_CPU), *sum = NULL;
    coll s = {"all_reduce", "sum", -1};
    if (run(&s, lt, 0, &sum)) { opr_tensor_release(lt); return NAN; }
    opr_tensor_copy_to_host(sum, &l, sizeof l);
    opr_tensor_release(sum);
    opr_tensor_release(lt);
    return l;
}

/* Gradients of L = sum_r <w_r, c(x)_r> with respect to each rank's input, by autograd
 * (the derivative formulas, themselves collectives) against central differences in
 * which one rank at a time perturbs one element, all ranks stepping together. */
static void check_gradients(void)
{
    for (int k = 0; k < NCOLLS; k++) {
        const coll *c = &colls[k];
        char what[64];
        describe(c, what, sizeof what);
        opr_tensor *x = make_input(world.rank, OPR_F64, false, -1, 0), *y;
        opr_set_requires_grad(x, true);
        int rc = run(c, x, 0, &y);
        CHECK(rc == OPR_OK, "%s forward: %s", what, opr_last_error());
        if (rc) { opr_tensor_release(x); continue; }
        int64_t ny = opr_tensor_numel(y);
        double *w = calloc((size_t)ny, sizeof *w);
        for (int64_t i = 0; i < ny; i++) w[i] = cos(0.3 + 1.7 * world.rank + 0.61 * (double)i);
        opr_tensor *wt = on_dev(opr_tensor_from_data(ctx, OPR_F64, opr_tensor_ndim(y), opr_tensor_shape(y), w, OPR_CPU));
        rc = opr_backward(y, wt, NULL);
        CHECK(rc == OPR_OK, "%s backward: %s", what, opr_last_error());
        double g[N] = {0};
        if (!rc) opr_tensor_copy_to_host(opr_grad(x), g, sizeof g);
        const double h = 1e-6;
        for (int p = 0; p < world.size; p++)
            for (int i = 0; i < N; i++) {
                double l[2];
                for (int side = 0; side < 2; side++) {
                    double d = world.rank == p ? (side ? -h : h) : 0;
                    opr_tensor *xp = make_input(world.rank, OPR_F64, false, i, d), *yp = NULL;
                    l[side] = run(c, xp, 0, &yp) ? NAN : global_loss(yp, w);
                    opr_tensor_release(yp);
                    opr_tensor_release(xp);
                }
                double numeric = (l[0] - l[1]) / (2 * h);
                if (world.rank == p)
                    CHECK(fabs(numeric - g[i]) <= 1e-6 * (1 + fabs(numeric)), "%s: d/dx[%d] on rank %d: analytic %.10g, "
                          "numeric %.10g", what, i, p, g[i], numeric);
            }
        free(w);
        opr_tensor_release(wt);
        opr_tensor_release(y);
        opr_tensor_release(x);
    }
}

/* Bad arguments fail on every rank with a message, before any data moves (every rank
 * makes the same bad call). */
static void check_errors(void)
{
    opr_tensor *x = make_input(world.rank, OPR_F64, false, -1, 0), *y = NULL;
    coll c = {"all_reduce", "sum", -1};
    CHECK(run(&c, x, 7, &y) == OPR_ERR_INVALID && strstr(opr_last_error(), "group 7 is not a live group"),
          "unknown group: %s", opr_last_error());
    coll b = {"broadcast_from", NULL, world.size};
    CHECK(run(&b, x, 0, &y) == OPR_ERR_INVALID && strstr(opr_last_error(), "is not a member"), "root: %s",
          opr_last_error());
    coll m = {"all_reduce", "band", -1}; /* bitwise: i64, i32 and bool only */
    CHECK(run(&m, x, 0, &y) == OPR_ERR_INVALID, "op band of f64 was accepted");
    if (ROWS % world.size == 0 && world.size > 1) { /* 5 rows do not split */
        double v[5 * COLS] = {0};
        opr_tensor *odd = on_dev(opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){5, COLS}, v, OPR_CPU));
        coll r = {"reduce_scatter", "sum", -1};
        CHECK(run(&r, odd, 0, &y) == OPR_ERR_INVALID && strstr(opr_last_error(), "is not a multiple of the group's"),
              "reduce_scatter of 5 rows: %s", opr_last_error());
        opr_tensor_release(odd);
    }
    opr_tensor_release(x);
}

/* Members that call different collectives, or one on other shapes, all fail with a
 * message naming the one that differs; the group stays usable. */
static void check_mismatch(void)
{
    if (world.size < 2) return;
    opr_tensor *x = make_input(world.rank, OPR_F64, false, -1, 0), *y = NULL;
    coll sum = {"all_reduce", "sum", -1}, gather = {"all_gather", NULL, -1};
    int rc = run(world.rank == 0 ? &sum : &gather, x, 0, &y);
    const char *other = world.rank == 0 ? "rank 1 all_gather() f64 [6, 2]" : "rank 0 all_reduce(sum) f64 [6, 2]";
    CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), "the members called different collectives") &&
              strstr(opr_last_error(), other),
          "all_reduce against all_gather: %d %s", rc, opr_last_error());
    double v[3] = {1, 2, 3};
    opr_tensor *small = on_dev(opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU));
    rc = run(&sum, world.rank == world.size - 1 ? small : x, 0, &y);
    CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), world.rank == world.size - 1 ? "f64 [6, 2]" : "f64 [3]"),
          "all_reduce of other shapes: %d %s", rc, opr_last_error());
    rc = run(&sum, x, 0, &y);
    CHECK(rc == OPR_OK, "all_reduce after the mismatches: %s", opr_last_error());
    opr_tensor_release(y);
    opr_tensor_release(small);
    opr_tensor_release(x);
}

static int normal_run(void)
{
    check_errors();
    check_mismatch();
    int members[64];
    for (int r = 0; r < world.size; r++) members[r] = r;
    check_values(&world, members, world.rank);
    /* a sub-group of the ranks of one parity, ranked as in the world */
    opr_group sub;
    int rc = opr_dist_split(ctx, &world, world.rank % 2, world.rank, &sub);
    CHECK(rc == OPR_OK, "split: %s", opr_last_error());
    if (!rc) {
        int n = 0, me = -1;
        for (int r = world.rank % 2; r < world.size; r += 2) { if (r == world.rank) me = n; members[n++] = r; }
        CHECK(sub.size == n && sub.rank == me && sub.id > 0, "split: rank %d of %d (id %lld), want %d of %d", sub.rank,
              sub.size, (long long)sub.id, me, n);
        check_values(&sub, members, me);
        int64_t freed = sub.id;
        CHECK(opr_dist_group_free(ctx, &sub) == OPR_OK, "group_free: %s", opr_last_error());
        /* ids are not reused: plugins keep state per id (NCCL communicators) */
        CHECK(opr_dist_split(ctx, &world, 0, world.rank, &sub) == OPR_OK && sub.id != freed,
              "a split after group_free got id %lld again", (long long)freed);
        opr_dist_group_free(ctx, &sub);
    }
    check_gradients();
    return failures;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The last rank dies after one step; the others must get an error, not hang. */
static void die_run(void)
{
    opr_dist_set_timeout(ctx, 2);
    coll c = {"all_reduce", "sum", -1};
    opr_tensor *x = make_input(world.rank, OPR_F64, false, -1, 0), *y;
    CHECK(run(&c, x, 0, &y) == OPR_OK, "first step: %s", opr_last_error());
    opr_tensor_release(y);
    if (world.rank == world.size - 1) {
        fflush(stdout);
        _exit(3); /* mid-step, without a word to the others */
    }
    double t0 = now();
    int rc = run(&c, x, 0, &y);
    double took = now() - t0;
    CHECK(rc == OPR_ERR_BACKEND, "the step after a peer died returned %d", rc);
    CHECK(strstr(opr_last_error(), "timed out after 2 s waiting for the other members"), "message: %s",
          opr_last_error());
    CHECK(took < 10, "the error took %.1f s", took);
    if (!failures) printf("rank %d/%d: a dead peer was reported after %.1f s: %s\n", world.rank, world.size, took,
                          opr_last_error());
    opr_tensor_release(x);
}

static char logged[2048];

static void capture(opr_log_level level, const char *source, const char *message, void *user)
{
    (void)user;
    if (level >= OPR_LOG_WARN && !logged[0]) snprintf(logged, sizeof logged, "%s: %s", source, message);
}

/* After the dead peer: opr_ctx_free (the last context: MPI's shutdown) returns at once on
 * the survivors, logging that it skipped MPI_Finalize and why. */
static void shutdown_after_death(void)
{
    opr_log_set(capture, NULL);
    double t0 = now();
    opr_ctx_free(ctx);
    ctx = NULL;
    double took = now() - t0;
    opr_log_set(NULL, NULL);
    CHECK(took < 2, "opr_ctx_free took %.2f s after the dead peer", took);
    CHECK(strstr(logged, "MPI_Finalize skipped") && strstr(logged, "group 0 is broken: "), "opr_ctx_free logged: %s",
          logged);
    if (!failures) printf("rank %d/%d: opr_ctx_free returned after %.2f s, logging %s\n", world.rank, world.size, took,
                          logged);
}

int main(int argc, char **argv)
{
    int want = argc > 1 ? atoi(argv[1]) : 0;
    bool die = false;
    const char *device = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--die")) die = true;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    }
    if (dist_test_start(device, &dev)) return 1;
    CHECK(want == 0 || world.size == want, "the world has %d ranks, want %d", world.size, want);
    if (die) { /* the survivors end as usual: the shutdown knows the world is broken */
        die_run();
        shutdown_after_death();
        return report();
    }
    normal_run();
    int status = report();
    opr_ctx_free(ctx); /* the last context finalises MPI */
    return status;
}
