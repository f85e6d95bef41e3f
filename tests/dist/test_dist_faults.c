/* Faults across processes, run under mpirun (tests/dist/dist_check.sh --fault MODE),
 * with short time-outs; every rank checks its own messages and wall times:
 *
 *   test_dist_faults N late     the last rank is 4 s late for a data-parallel step
 *                               after a 1 s time-out: the others fail within the
 *                               time-out, say "group 0 is broken: all_reduce timed out
 *                               at step 1" on every later call, free the helper and
 *                               reuse the memory while the late rank's reduction
 *                               completes theirs (it must write only buffers still
 *                               kept); a sub-group still works; opr_dist_finalize
 *                               returns at once, saying it skipped MPI_Finalize
 *   test_dist_faults N stall    the last rank reaches shutdown 3 s after the others:
 *                               their opr_ctx_free returns within the 1 s time-out
 *                               and logs what happened
 *   test_dist_faults N limits   time-outs must be finite (INFINITY, NaN, 1e308
 *                               refused); a split that would pass the live-group limit
 *                               on one rank fails on every rank, and the world stays
 *                               usable; more than 256 buckets; a split a member never
 *                               joins fails within the time-out
 *   test_dist_faults N agree    helpers with different bucket sizes or parameters on
 *                               one rank fail at opr_ddp_new on every rank, naming it,
 *                               the group usable after; a rank that skips a step makes
 *                               every rank fail, naming the rank and the steps; a rank
 *                               whose own step fails makes the others fail, naming it
 *   test_dist_faults N p2p      after a 1 s time-out, rank 0 waits for a message rank 1
 *                               never sends, rank 1 sends 2 MiB (past MPI's eager
 *                               limit) that rank 0 never receives: both fail within the
 *                               time-out, naming the peer and tag, and the group is
 *                               broken for every later call (rank 1's message buffer
 *                               stays parked with its request; its tensor is freed)
 *
 * Each rank prints "rank R/N: all K checks passed" or its failures. A process whose
 * group broke exits without MPI_Finalize: mpirun runs with orte_allowed_exit_without_sync. */
#include "dist_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ELEMS 4096 /* per parameter: a 64 KiB bucket, below malloc's mmap threshold (reused once freed) */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static opr_tensor *filled(int64_t n, double v)
{
    double *buf = malloc((size_t)n * sizeof *buf);
    for (int64_t i = 0; i < n; i++) buf[i] = v + 0.001 * (double)i;
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, 1, &n, buf, OPR_CPU);
    free(buf);
    return t;
}

/* all_reduce(x, sum) on group; the status, y set on success. */
static int sum_on(int64_t group, opr_tensor *x, double *first)
{
    opr_tensor *y = NULL;
    opr_value a[3] = {opr_v_tensor(x), opr_v_string("sum"), opr_v_int(group)};
    int rc = opr_call(opr_op_find(ctx, "all_reduce"), a, 3, &y, 1);
    if (!rc && first) {
        int64_t n = opr_tensor_numel(y);
        double *all = malloc((size_t)n * sizeof *all);
        opr_tensor_copy_to_host_f64(y, all, n);
        *first = all[0];
        free(all);
    }
    opr_tensor_release(y);
    return rc;
}

/* sum(p0 * c) + sum(p1 * c): each parameter's gradient is c. */
static opr_tensor *loss_of(opr_tensor *const *p, int np, opr_tensor *c)
{
    opr_tensor *total = NULL;
    for (int k = 0; k < np; k++) {
        opr_tensor *m = NULL, *s = NULL, *t = NULL;
        opr_call(opr_op_find(ctx, "mul"), (opr_value[]){opr_v_tensor(p[k]), opr_v_tensor(c)}, 2, &m, 1);
        opr_call(opr_op_find(ctx, "sum"), (opr_value[]){opr_v_tensor(m)}, 1, &s, 1);
        if (total) {
            opr_call(opr_op_find(ctx, "add"), (opr_value[]){opr_v_tensor(total), opr_v_tensor(s)}, 2, &t, 1);
            opr_tensor_release(total);
            opr_tensor_release(s);
            total = t;
        } else {
            total = s;
        }
        opr_tensor_release(m);
    }
    return total;
}

static void params(opr_tensor **p, int np, int64_t n)
{
    for (int k = 0; k < np; k++) {
        p[k] = filled(n, 0.5 + k);
        opr_set_requires_grad(p[k], true);
    }
}

static void release_all(opr_tensor **t, int n)
{
    for (int i = 0; i < n; i++) opr_tensor_release(t[i]);
}

/* ------------------------------------------------------------------ late */

static void late_run(void)
{
    const bool late = world.rank == world.size - 1;
    opr_group all;
    CHECK(opr_dist_split(ctx, &world, 0, world.rank, &all) == OPR_OK, "split: %s", opr_last_error());
    opr_tensor *p[2], *c = filled(ELEMS, 1 + world.rank);
    params(p, 2, ELEMS);
    opr_ddp *ddp = NULL;
    CHECK(opr_ddp_new(ctx, &world, p, 2, NULL, &ddp) == OPR_OK, "opr_ddp_new: %s", opr_last_error());
    if (!ddp) return;
    opr_tensor *l = loss_of(p, 2, c);
    CHECK(opr_ddp_backward(ddp, l, NULL) == OPR_OK, "step 0: %s", opr_last_error());
    opr_tensor_release(l);
    for (int k = 0; k < 2; k++) opr_zero_grad(p[k]);
    opr_dist_set_timeout(ctx, 1);
    if (late) sleep(4);
    l = loss_of(p, 2, c);
    double t0 = now();
    int rc = opr_ddp_backward(ddp, l, NULL);
    double took = now() - t0;
    opr_tensor_release(l);
    if (!late) {
        CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "group 0 is broken: all_reduce timed out at step 1 "
                                             "(bucket 0 of 1)") && strstr(opr_last_error(), "timed out after 1 s"),
              "the late step: %d %s", rc, opr_last_error());
        CHECK(took < 2.5, "the time-out took %.2f s", took);
        printf("rank %d/%d: the late peer was reported after %.1f s: %s\n", world.rank, world.size, took,
               opr_last_error());
    } else {
        /* its reduction met the others' (kept) in flight; the step check then finds them gone */
        CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "group 0 is broken: "), "the late rank's step: %d %s",
              rc, opr_last_error());
    }
    /* every later call on the group says so, at once */
    l = loss_of(p, 2, c);
    t0 = now();
    rc = opr_ddp_backward(ddp, l, NULL);
    CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "opr_ddp_backward: group 0 is broken: ") &&
              now() - t0 < 0.5, "the step after: %d %s", rc, opr_last_error());
    opr_tensor_release(l);
    t0 = now();
    rc = sum_on(0, c, NULL);
    CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "group 0 is broken: ") && now() - t0 < 0.5,
          "all_reduce on the broken world: %d %s", rc, opr_last_error());
    if (!late) printf("rank %d/%d: then: %s\n", world.rank, world.size, opr_last_error());
    /* the helper goes; its bucket must not: memory reused now must stay as written
     * while the late rank completes the reduction into the bucket */
    opr_ddp_free(ddp);
    enum { BLOCKS = 16 };
    unsigned char *blocks[BLOCKS];
    const size_t bytes = 2 * ELEMS * sizeof(double) + 8;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(bytes);
        memset(blocks[i], 0xa5, bytes);
    }
    opr_dist_set_timeout(ctx, 10);
    double got = 0;
    rc = sum_on(all.id, c, &got); /* waits for the late rank, driving MPI meanwhile */
    double want = 0;
    for (int r = 0; r < world.size; r++) want += 1 + r;
    CHECK(rc == OPR_OK && got == want, "all_reduce on the sub-group after: %d %g (want %g) %s", rc, got, want,
          rc ? opr_last_error() : "");
    rc = sum_on(all.id, c, &got); /* and once more, the late rank's reduction long done */
    CHECK(rc == OPR_OK, "a second all_reduce on the sub-group: %s", opr_last_error());
    int bad = 0;
    for (int i = 0; i < BLOCKS; i++) {
        for (size_t j = 0; j < bytes; j++) bad += blocks[i][j] != 0xa5;
        free(blocks[i]);
    }
    CHECK(bad == 0, "%d bytes of memory reused after opr_ddp_free were written by the late reduction", bad);
    t0 = now();
    rc = opr_dist_finalize(ctx);
    took = now() - t0;
    CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "MPI_Finalize skipped") &&
              strstr(opr_last_error(), "group 0 is broken: "), "opr_dist_finalize: %d %s", rc, opr_last_error());
    CHECK(took < 1, "opr_dist_finalize took %.2f s", took);
    printf("rank %d/%d: opr_dist_finalize returned after %.2f s: %s\n", world.rank, world.size, took, opr_last_error());
    release_all(p, 2);
    opr_tensor_release(c);
}

/* ------------------------------------------------------------------ stall */

static char logged[2048];

static void capture(opr_log_level level, const char *source, const char *message, void *user)
{
    (void)user;
    if (level >= OPR_LOG_WARN && !logged[0]) snprintf(logged, sizeof logged, "%s: %s", source, message);
}

/* Returns the time opr_ctx_free took; the warning it logged is in `logged`. */
static double stall_run(void)
{
    opr_tensor *c = filled(4, 1);
    CHECK(sum_on(0, c, NULL) == OPR_OK, "a first all_reduce: %s", opr_last_error());
    opr_tensor_release(c);
    opr_dist_set_timeout(ctx, 1);
    if (world.rank == world.size - 1) sleep(3);
    opr_log_set(capture, NULL);
    double t0 = now();
    opr_ctx_free(ctx);
    ctx = NULL;
    return now() - t0;
}

/* ------------------------------------------------------------------ limits */

static void limits_run(void)
{
    const double bad[] = {INFINITY, NAN, 1e308, 0, -1, 604800.5};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(opr_dist_set_timeout(ctx, bad[i]) == OPR_ERR_INVALID && strstr(opr_last_error(), "at most 604800 s"),
              "a time-out of %g s: %s", bad[i], opr_last_error());
    CHECK(opr_dist_set_timeout(ctx, 604800) == OPR_OK, "a week: %s", opr_last_error());
    opr_dist_set_timeout(ctx, 2);
    /* rank 0 fills its table with groups of its own; a split of everyone then fails on
     * every rank, before MPI's split */
    opr_group mine[64];
    int made = 0;
    for (int i = 0; i < 70; i++) {
        opr_group g;
        if (opr_dist_split(ctx, &world, world.rank == 0 ? 0 : -1, 0, &g)) break;
        if (world.rank == 0) mine[made++] = g;
    }
    CHECK(world.rank != 0 || made == 63, "rank 0 made %d groups, want 63", made);
    CHECK(strstr(opr_last_error(), "rank 0 has 63 groups live already"), "the 64th split: %s", opr_last_error());
    opr_group g;
    double t0 = now();
    int rc = opr_dist_split(ctx, &world, 0, world.rank, &g);
    CHECK(rc == OPR_ERR_NOMEM && strstr(opr_last_error(), "rank 0 has 63 groups live already") && now() - t0 < 1,
          "a split past the limit on rank 0: %d %s", rc, opr_last_error());
    if (world.rank == 0) printf("rank 0/%d: %s\n", world.size, opr_last_error());
    opr_tensor *c = filled(4, 1);
    CHECK(sum_on(0, c, NULL) == OPR_OK, "the world after: %s", opr_last_error());
    if (world.rank == 0) opr_dist_group_free(ctx, &mine[--made]);
    CHECK(opr_dist_split(ctx, &world, 0, world.rank, &g) == OPR_OK && g.size == world.size, "a split after a free: %s",
          opr_last_error());
    opr_dist_group_free(ctx, &g);
    while (world.rank == 0 && made > 0) opr_dist_group_free(ctx, &mine[--made]);
    /* 300 one-element parameters, a bucket each */
    enum { NP = 300 };
    opr_tensor *p[NP];
    for (int k = 0; k < NP; k++) {
        p[k] = filled(1, k);
        opr_set_requires_grad(p[k], true);
    }
    opr_ddp *ddp = NULL;
    opr_ddp_opts o = {.struct_size = sizeof o, .bucket_mib = 1e-6};
    CHECK(opr_ddp_new(ctx, &world, p, NP, &o, &ddp) == OPR_OK, "opr_ddp_new: %s", opr_last_error());
    if (ddp) {
        CHECK(opr_ddp_bucket_count(ddp) == NP, "%d buckets", opr_ddp_bucket_count(ddp));
        opr_tensor *w = filled(1, 1 + world.rank);
        opr_tensor *loss = loss_of(p, NP, w); /* grad of each: 1 + rank; the mean (size + 1) / 2 */
        rc = opr_ddp_backward(ddp, loss, NULL);
        CHECK(rc == OPR_OK, "opr_ddp_backward with %d buckets: %s", NP, opr_last_error());
        double worst = 0;
        for (int k = 0; k < NP && !rc; k++) {
            double gk = NAN;
            opr_tensor_copy_to_host_f64(opr_grad(p[k]), &gk, 1);
            worst = fmax(worst, fabs(gk - (world.size + 1) / 2.0));
        }
        CHECK(!rc && worst < 1e-12, "the mean gradients are off by %g", worst);
        opr_tensor_release(loss);
        opr_tensor_release(w);
        opr_ddp_free(ddp);
    }
    release_all(p, NP);
    /* a split the last rank never joins: the others fail within the time-out */
    opr_dist_set_timeout(ctx, 1);
    if (world.rank == world.size - 1) {
        sleep(4); /* past the others' bound below: their split cannot have been joined */
    } else {
        t0 = now();
        rc = opr_dist_split(ctx, &world, 0, world.rank, &g);
        double took = now() - t0;
        CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "split on group 0") &&
                  strstr(opr_last_error(), "timed out after 1 s"), "a split without the last rank: %d %s", rc,
              opr_last_error());
        CHECK(took < 3, "the split's time-out took %.2f s", took); /* 1 s, and room for a loaded machine */
        printf("rank %d/%d: a split without the last rank failed after %.1f s: %s\n", world.rank, world.size, took,
               opr_last_error());
    }
    opr_tensor_release(c);
}

/* ------------------------------------------------------------------ agree */

static void agree_run(void)
{
    opr_dist_set_timeout(ctx, 2);
    const int last = world.size - 1;
    opr_tensor *p[2], *c = filled(ELEMS, 1 + world.rank);
    params(p, 2, ELEMS);
    opr_ddp *ddp = NULL;
    /* a bucket size of its own on the last rank */
    opr_ddp_opts o = {.struct_size = sizeof o, .bucket_mib = world.rank == last ? 1e-3 : 0};
    int rc = opr_ddp_new(ctx, &world, p, 2, &o, &ddp);
    CHECK(rc == OPR_ERR_INVALID && !ddp && strstr(opr_last_error(), "the members' layouts differ") &&
              strstr(opr_last_error(), world.rank == last ? "rank 0 has 2 parameters in 1 buckets of 25 MiB"
                                                          : "buckets of 0.001 MiB"),
          "bucket_mib 0.001 on rank %d: %d %s", last, rc, opr_last_error());
    if (world.rank == 0) printf("rank 0/%d: %s\n", world.size, opr_last_error());
    /* another shape on the last rank */
    opr_tensor *q[2] = {p[0], world.rank == last ? filled(ELEMS / 2, 0) : opr_tensor_retain(p[1])};
    opr_set_requires_grad(q[1], true);
    rc = opr_ddp_new(ctx, &world, q, 2, NULL, &ddp);
    CHECK(rc == OPR_ERR_INVALID && !ddp && strstr(opr_last_error(), "the members' layouts differ: rank") &&
              strstr(opr_last_error(), "parameters differ from this rank's"),
          "another shape on rank %d: %d %s", last, rc, opr_last_error());
    if (world.rank == 0) printf("rank 0/%d: %s\n", world.size, opr_last_error());
    opr_tensor_release(q[1]);
    CHECK(sum_on(0, c, NULL) == OPR_OK, "the world after the layouts: %s", opr_last_error());
    /* the last rank skips step 2 */
    rc = opr_ddp_new(ctx, &world, p, 2, NULL, &ddp);
    CHECK(rc == OPR_OK, "opr_ddp_new: %s", opr_last_error());
    for (int step = 0; step < 4 && ddp; step++) {
        if (world.rank == last && step == 2) continue;
        opr_ddp_set_step(ddp, step);
        opr_tensor *l = loss_of(p, 2, c);
        rc = opr_ddp_backward(ddp, l, NULL);
        opr_tensor_release(l);
        for (int k = 0; k < 2; k++) opr_zero_grad(p[k]);
        if (step < 2) {
            CHECK(rc == OPR_OK, "step %d: %s", step, opr_last_error());
            continue;
        }
        char want[160];
        if (world.rank == last)
            snprintf(want, sizeof want, "the members are out of step: rank 0 is at step 2, this rank (%d) at step 3",
                     last);
        else
            snprintf(want, sizeof want, "the members are out of step: rank %d is at step 3, this rank (%d) at step 2",
                     last, world.rank);
        CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), want), "step %d after rank %d skipped one: %d %s", step,
              last, rc, opr_last_error());
        if (!rc || world.rank == 0 || world.rank == last)
            printf("rank %d/%d: %s\n", world.rank, world.size, opr_last_error());
        break;
    }
    opr_ddp_free(ddp);
    CHECK(sum_on(0, c, NULL) == OPR_OK, "the world after the skipped step: %s", opr_last_error());
    /* the last rank's own step fails (a gradient of the wrong shape): it still reduces
     * its buckets (zeros), and every other rank fails naming it */
    ddp = NULL;
    rc = opr_ddp_new(ctx, &world, p, 2, NULL, &ddp);
    CHECK(rc == OPR_OK, "opr_ddp_new again: %s", opr_last_error());
    if (ddp) {
        opr_tensor *l = loss_of(p, 2, c), *bad = world.rank == last ? filled(3, 1) : NULL;
        rc = opr_ddp_backward(ddp, l, bad);
        if (world.rank == last) {
            CHECK(rc != OPR_OK && !strstr(opr_last_error(), "failed step"), "the failing rank: %d %s", rc,
                  opr_last_error());
        } else {
            char want[96];
            snprintf(want, sizeof want, "rank %d failed step 0 (its own error says why)", last);
            CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), want), "after rank %d failed its step: %d %s", last,
                  rc, opr_last_error());
            if (world.rank == 0) printf("rank 0/%d: %s\n", world.size, opr_last_error());
        }
        for (int k = 0; k < 2; k++) opr_zero_grad(p[k]);
        opr_tensor_release(bad);
        opr_tensor_release(l);
        /* and the helper goes on: the next step succeeds everywhere */
        l = loss_of(p, 2, c);
        rc = opr_ddp_backward(ddp, l, NULL);
        CHECK(rc == OPR_OK, "the step after a rank failed one: %s", opr_last_error());
        opr_tensor_release(l);
        opr_ddp_free(ddp);
    }
    release_all(p, 2);
    opr_tensor_release(c);
}

static void p2p_run(void)
{
    opr_dist_set_timeout(ctx, 1);
    if (world.rank > 1) return; /* ranks 0 and 1 only */
    const int64_t n = world.rank == 0 ? 4 : (int64_t)1 << 18;
    opr_tensor *x = filled(n, 1.0), *y = NULL;
    opr_value a[4] = {opr_v_tensor(x), opr_v_int(1 - world.rank), opr_v_int(world.rank + 1), opr_v_int(0)};
    const double t0 = now();
    int rc = opr_call(opr_op_find(ctx, world.rank == 0 ? "recv" : "send"), a, 4, &y, 1);
    const double took = now() - t0;
    CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "timed out after 1 s"), "%s that nobody matches: %d %s",
          world.rank == 0 ? "recv" : "send", rc, opr_last_error());
    CHECK(world.rank == 1 || strstr(opr_last_error(), "waiting for rank 1's send"), "recv's message: %s",
          opr_last_error());
    CHECK(took < 3, "the time-out took %.2f s", took);
    opr_tensor_release(x); /* the tensor goes; the kernel's own copy stays with MPI */
    x = filled(4, 1.0);
    double first = 0;
    rc = sum_on(0, x, &first);
    CHECK(rc == OPR_ERR_BACKEND && strstr(opr_last_error(), "group 0 is broken: ") &&
              strstr(opr_last_error(), world.rank == 0 ? "recv from rank 1 with tag 1 timed out" : "send"),
          "the collective after: %d %s", rc, opr_last_error());
    opr_tensor_release(x);
}

int main(int argc, char **argv)
{
    int want = argc > 1 ? atoi(argv[1]) : 0;
    const char *mode = argc > 2 ? argv[2] : "";
    if (dist_test_start(NULL, NULL)) return 1;
    CHECK(want == 0 || world.size == want, "the world has %d ranks, want %d", world.size, want);
    if (!strcmp(mode, "late")) late_run();
    else if (!strcmp(mode, "limits")) limits_run();
    else if (!strcmp(mode, "agree")) agree_run();
    else if (!strcmp(mode, "p2p")) p2p_run();
    else if (!strcmp(mode, "stall")) {
        double took = stall_run();
        CHECK(took < 2.5, "opr_ctx_free took %.2f s", took);
        /* the late rank completes the others' first barrier, finds nobody at the second
         * and skips MPI_Finalize too (it would wait for processes that have exited) */
        CHECK(world.rank == world.size - 1 || (strstr(logged, "MPI_Finalize skipped") &&
                                               strstr(logged, "shutdown barrier") &&
                                               strstr(logged, "timed out after 1 s")),
              "what opr_ctx_free logged: %s", logged);
        printf("rank %d/%d: opr_ctx_free returned after %.2f s, logging %s\n", world.rank, world.size, took, logged);
    } else {
        CHECK(0, "mode '%s': late, stall, limits, agree or p2p", mode);
    }
    int status = report();
    opr_ctx_free(ctx); /* after a fault: MPI_Finalize is skipped */
    return status;
}
