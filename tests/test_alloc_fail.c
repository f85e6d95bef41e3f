/* Allocation failure, swept: for every N, the Nth allocation made by this thread during
 * context creation (reading a subset of the op files: op_file_subset), and then during a
 * forward + backward program, fails. Of libyaml's
 * own allocations during context creation (about 60% of its ~37k) the sweep takes the
 * first and the last of each run of consecutive ones and every 8th in between: each
 * run is one call opreg makes into libyaml, and a failure anywhere inside it comes back
 * through that call's return, which the first and last points already exercise. Each run must
 * end in OPR_ERR_NOMEM (or succeed, when the failed allocation had a fallback), leave no
 * block allocated, and leave the context usable with the same results as before.
 *
 * The failing allocator is alloc_hook.c: only the arming thread's allocations fail,
 * so worker threads of OpenBLAS and OpenMP are never hit. Not built under the
 * sanitizers, which bring their own allocator. */
#include "alloc_hook.h"
#include "test_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ the program */

/* y = sum(relu(x @ w + b) * x2), backward into w and b; writes the loss and grads to
 * out (1 + 12 + 3 doubles). Returns OPR_OK or the first failing status; everything it
 * made is released either way. */
static int program(opr_ctx *ctx, double *out)
{
    const double xv[8] = {0.5, -1, 2, 0.25, 1, 1.5, -0.5, 2};
    const double wv[12] = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.0, 1.1, 1.2};
    const double bv[3] = {0.05, -0.1, 0.2};
    opr_tensor *x = NULL, *w = NULL, *b = NULL, *mm = NULL, *lin = NULL, *act = NULL, *y = NULL;
    int rc = OPR_OK;
#define STEP(expr) do { if (!rc && !(expr)) rc = OPR_ERR_NOMEM; } while (0)
#define CALL(name, res, ...)                                                                           \
    do {                                                                                               \
        opr_value a_[] = {__VA_ARGS__};                                                                \
        if (!rc) rc = opr_call_by_name(ctx, name, a_, (int)(sizeof a_ / sizeof a_[0]), &(res), 1);     \
    } while (0)
    STEP(x = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){2, 4}, xv, OPR_CPU));
    STEP(w = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){4, 3}, wv, OPR_CPU));
    STEP(b = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, bv, OPR_CPU));
    if (!rc) rc = opr_set_requires_grad(w, true);
    if (!rc) rc = opr_set_requires_grad(b, true);
    CALL("mm", mm, opr_v_tensor(x), opr_v_tensor(w));
    CALL("add", lin, opr_v_tensor(mm), opr_v_tensor(b));
    CALL("relu", act, opr_v_tensor(lin));
    CALL("sum", y, opr_v_tensor(act));
    if (!rc) rc = opr_backward(y, NULL, NULL);
    if (!rc) rc = opr_tensor_copy_to_host(y, out, sizeof(double));
    if (!rc) rc = opr_tensor_copy_to_host(opr_grad(w), out + 1, 12 * sizeof(double));
    if (!rc) rc = opr_tensor_copy_to_host(opr_grad(b), out + 13, 3 * sizeof(double));
    opr_tensor *all[] = {x, w, b, mm, lin, act, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    return rc;
#undef STEP
#undef CALL
}

static opr_ctx_opts ctx_opts(void)
{
    return (opr_ctx_opts){.struct_size = sizeof(opr_ctx_opts)};
}

/* One context made and freed first: one-time set-up of the libraries underneath
 * (OpenBLAS, the dynamic loader's caches) stays out of the counts. */
static void warm_up(void)
{
    opr_ctx_opts o = ctx_opts();
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    double r[16];
    ck_assert_int_eq(program(ctx, r), OPR_OK);
    ck_assert_int_eq(opr_ctx_free(ctx), 0);
}

/* Whether allocation n of a recorded run is swept: every one but libyaml's inside a run
 * of its consecutive allocations, of which the ends and every 8th are; run_pos is n's
 * place in its run (0: the first). */
static bool swept(const bool *from_libyaml, long points, long n, long run_pos)
{
    if (!from_libyaml[n] || run_pos == 0 || n == points - 1 || !from_libyaml[n + 1]) return true;
    return run_pos % 8 == 0;
}

/* The op files the context sweep reads: it creates a context once per allocation point,
 * so its time grows with the square of what the files hold, and these have every kind
 * of entry (kernels, composites, overloads, fused kernel entries, written arguments,
 * samples, Tensor[] results) whose loading can fail; the other files take the same
 * paths. */
static const char *const subset_files[] = {"core", "scalar", "nn", "nn_norm", "convolution", "normalization"};
#define N_SUBSET (sizeof subset_files / sizeof subset_files[0])

/* Symbolic links to them in a new directory, whose path goes to *dir. */
static void op_file_subset(char *dir, size_t cap)
{
    const char *src = getenv("OPREG_YAML_DIR");
    ck_assert_msg(src != NULL, "OPREG_YAML_DIR is not set");
    snprintf(dir, cap, "/tmp/opreg_alloc_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (size_t i = 0; i < N_SUBSET; i++) {
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s.yaml", src, subset_files[i]);
        snprintf(to, sizeof to, "%s/%s.yaml", dir, subset_files[i]);
        ck_assert_msg(symlink(from, to) == 0, "symlink %s: %s", to, strerror(errno));
    }
}

static void op_file_subset_free(const char *dir)
{
    for (size_t i = 0; i < N_SUBSET; i++) {
        char to[4096];
        snprintf(to, sizeof to, "%s/%s.yaml", dir, subset_files[i]);
        unlink(to);
    }
    rmdir(dir);
}

START_TEST(context_creation)
{
    warm_up();
    char subset[64];
    op_file_subset(subset, sizeof subset);
    opr_ctx_opts o = ctx_opts();
    o.yaml_dir = subset;
    long n = 0, failures = 0, libyaml_leaks = 0;
    /* what a clean context holds, made once: the sweep's time is context creations */
    opr_ctx *ref = opr_ctx_new(&o);
    ck_assert_ptr_nonnull(ref);
    bool *from_libyaml;
    alloc_hook_record_start();
    opr_ctx *recorded = opr_ctx_new(&o);
    long points = alloc_hook_record_stop(&from_libyaml);
    ck_assert_ptr_nonnull(recorded);
    ck_assert_int_eq(opr_ctx_free(recorded), 0);
    ck_assert_msg(points > 0, "the allocations of a context creation could not be recorded");
    long skipped = 0, run_pos = 0;
    for (;; n++) {
        if (n < points) {
            run_pos = n > 0 && from_libyaml[n] && from_libyaml[n - 1] ? run_pos + 1 : 0;
            if (!swept(from_libyaml, points, n, run_pos)) { skipped++; continue; }
        }
        long before = alloc_hook_live_blocks();
        alloc_hook_arm(n);
        opr_ctx *ctx = opr_ctx_new(&o);
        bool hit = alloc_hook_fired();
        alloc_hook_disarm();
        if (!ctx) {
            ck_assert_msg(hit, "N=%ld: opr_ctx_new failed without a failed allocation: %s", n, opr_last_error());
            ck_assert_msg(strstr(opr_last_error(), "out of memory") != NULL, "N=%ld: '%s' does not say out of memory",
                          n, opr_last_error());
            failures++;
        } else {
            /* complete or nothing: every op of a clean context, each with its kernel */
            ck_assert_msg(opr_op_count(ctx) == opr_op_count(ref), "N=%ld: %d ops instead of %d", n,
                          opr_op_count(ctx), opr_op_count(ref));
            for (int i = 0; i < opr_op_count(ref); i++) {
                const opr_op *want = opr_op_at(ref, i);
                const opr_op *have = opr_op_find(ctx, opr_op_name(want));
                ck_assert_msg(have != NULL, "N=%ld: op %s missing", n, opr_op_name(want));
                ck_assert_msg(opr_op_has_kernel(have, 0) == opr_op_has_kernel(want, 0), "N=%ld: %s lost its kernel",
                              n, opr_op_name(want));
            }
            ck_assert_int_eq(opr_ctx_free(ctx), 0);
        }
        /* libyaml 0.2.5 leaks when growing its document's node list fails: loader.c's
         * yaml_parser_load_sequence and _mapping then free the tag and anchor but not
         * the new node's item stack. Its leaks are counted, not failed; opreg's are. */
        long leaked = alloc_hook_live_blocks() - before;
        if (leaked && hit && alloc_hook_fired_in_libyaml()) libyaml_leaks++;
        else ck_assert_msg(leaked == 0, "N=%ld: %ld block(s) leaked", n, leaked);
        if (!hit) break; /* ran to the end without reaching the Nth allocation */
    }
    ck_assert_int_eq(opr_ctx_free(ref), 0);
    alloc_hook_record_free(from_libyaml);
    /* the run that reached its end without a failure made as many as the recorded one */
    ck_assert_msg(n == points, "context creation made %ld allocations, %ld when recorded", n, points);
    printf("context creation: %ld of %ld allocation points swept (%ld inside runs of libyaml's left out), %ld ended "
           "in an out-of-memory error, %ld leaked inside libyaml\n", n - skipped, n, skipped, failures, libyaml_leaks);
    op_file_subset_free(subset);
}
END_TEST

START_TEST(forward_and_backward)
{
    warm_up();
    opr_ctx_opts o = ctx_opts();
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_ptr_nonnull(ctx);
    double want[16], got[16];
    ck_assert_int_eq(program(ctx, want), OPR_OK);
    long n = 0, failures = 0;
    for (;; n++) {
        long before = alloc_hook_live_blocks();
        alloc_hook_arm(n);
        int rc = program(ctx, got);
        bool hit = alloc_hook_fired();
        alloc_hook_disarm();
        ck_assert_msg(rc == OPR_OK || rc == OPR_ERR_NOMEM, "N=%ld: %s (%s)", n, opr_status_name(rc), opr_last_error());
        if (rc) failures++;
        else ck_assert_mem_eq(got, want, sizeof want);
        ck_assert_msg(alloc_hook_live_blocks() == before, "N=%ld: %ld block(s) leaked", n,
                      alloc_hook_live_blocks() - before);
        /* still usable, with the same results */
        ck_assert_int_eq(program(ctx, got), OPR_OK);
        ck_assert_mem_eq(got, want, sizeof want);
        if (!hit) break;
    }
    ck_assert_int_eq(opr_ctx_free(ctx), 0);
    printf("forward + backward: %ld allocation points swept, %ld ended in OPR_ERR_NOMEM\n", n, failures);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alloc_fail");
    TCase *tc = tcase_create("alloc_fail");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, forward_and_backward);
    tcase_add_test(tc, context_creation);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
