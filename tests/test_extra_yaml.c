/* Extra op files added after the built-in ones (opr_ctx_opts.yaml_paths and
 * $OPREG_YAML_PATH): their ops may call built-in ones, plugins loaded afterwards see
 * them, and an entry that cannot be loaded (or a bad file in a directory entry, or
 * one that is not a regular file) fails opr_ctx_new naming it. */
#define _GNU_SOURCE /* setenv */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* swiglu_c(self, gate) = self * sigmoid(gate), composite over built-in ops */
static const char *swiglu_yaml =
    "- name: swiglu_c(Tensor self, Tensor gate) -> Tensor\n"
    "  shape: broadcast(sizes(self), sizes(gate))\n"
    "  forward: mul(self, sigmoid(gate))\n";

static char dir[64], file[96], bad[96];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/opreg_extra_yaml_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/swiglu.yaml", dir);
    snprintf(bad, sizeof bad, "%s/bad.yaml", dir);
    write_file(file, swiglu_yaml);
    write_file(bad, "- name: broken(Tensor self) -> Tensor\n  nonsense_key: 1\n  shape: sizes(self)\n");
}

static void teardown(void)
{
    unlink(file);
    unlink(bad);
    rmdir(dir);
    unsetenv("OPREG_YAML_PATH");
}

/* The test environment's options (built-in YAML, the build tree's plugins) plus the
 * extra paths. */
static opr_ctx *ctx_with(const char *const *paths, int n)
{
    opr_ctx_opts opts = {.struct_size = sizeof opts, .yaml_dir = getenv("OPREG_YAML_DIR"), .yaml_paths = paths,
                         .n_yaml_paths = n};
    return opr_ctx_new(&opts);
}

static void check_swiglu(opr_ctx *ctx)
{
    const opr_op *op = opr_op_find(ctx, "swiglu_c");
    ck_assert_ptr_nonnull(op);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "mul")); /* added to the built-ins, not instead */
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, (const double[]){2, -1}, OPR_CPU);
    opr_tensor *g = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, (const double[]){0, 1}, OPR_CPU);
    opr_tensor *y = tu_call1(ctx, "swiglu_c", (opr_value[]){opr_v_tensor(x), opr_v_tensor(g)}, 2);
    double v[2];
    ck_assert_int_eq(opr_tensor_copy_to_host(y, v, sizeof v), OPR_OK);
    ck_assert(fabs(v[0] - 1) < 1e-15 && fabs(v[1] + 1 / (1 + exp(-1.0))) < 1e-15);
    opr_tensor_release(y);
    opr_tensor_release(g);
    opr_tensor_release(x);
}

START_TEST(test_yaml_paths_option)
{
    const char *paths[] = {file};
    opr_ctx *ctx = ctx_with(paths, 1);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    check_swiglu(ctx);
    tu_ctx_free(ctx);
    const char *dirs[] = {dir}; /* a bad file in a directory fails as it would named alone */
    ck_assert_ptr_null(ctx_with(dirs, 1));
    ck_assert_msg(strstr(opr_last_error(), "yaml_paths entry") && strstr(opr_last_error(), bad) &&
                  strstr(opr_last_error(), "nonsense_key"), "%s", opr_last_error());
    setenv("OPREG_YAML_PATH", dir, 1);
    ck_assert_ptr_null(ctx_with(NULL, 0));
    ck_assert_msg(strstr(opr_last_error(), "OPREG_YAML_PATH entry") && strstr(opr_last_error(), bad), "%s",
                  opr_last_error());
    unsetenv("OPREG_YAML_PATH");
    unlink(bad); /* the directory's *.yaml, all good now */
    ctx = ctx_with(dirs, 1);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    check_swiglu(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_yaml_path_env)
{
    char value[256];
    snprintf(value, sizeof value, "::%s:", file); /* empty entries are skipped */
    setenv("OPREG_YAML_PATH", value, 1);
    opr_ctx *ctx = ctx_with(NULL, 0);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    check_swiglu(ctx);
    tu_ctx_free(ctx);
    /* not without the built-in ops, whose additions they are */
    opr_ctx_opts bare = {.struct_size = sizeof bare, .skip_builtin_yaml = true, .skip_plugin_discovery = true};
    ctx = opr_ctx_new(&bare);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_null(opr_op_find(ctx, "swiglu_c"));
    opr_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_entries_fail)
{
    const char *missing[] = {"/nonexistent/ops.yaml"};
    ck_assert_ptr_null(ctx_with(missing, 1));
    ck_assert_msg(strstr(opr_last_error(), "opr_ctx_new: yaml_paths entry '/nonexistent/ops.yaml'"), "%s",
                  opr_last_error());
    const char *invalid[] = {file, bad};
    ck_assert_ptr_null(ctx_with(invalid, 2));
    ck_assert_msg(strstr(opr_last_error(), bad) && strstr(opr_last_error(), "nonsense_key"), "%s", opr_last_error());
    setenv("OPREG_YAML_PATH", "/nonexistent/env.yaml", 1);
    ck_assert_ptr_null(ctx_with(NULL, 0));
    ck_assert_msg(strstr(opr_last_error(), "OPREG_YAML_PATH entry '/nonexistent/env.yaml'"), "%s", opr_last_error());
}
END_TEST

/* Only regular files are read: a FIFO named *.yaml would block opr_ctx_new (no writer),
 * a link to /dev/zero would be read until memory runs out. */
START_TEST(test_not_regular_files_refused)
{
    char fifo[128], zero[128];
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", dir);
    snprintf(zero, sizeof zero, "%s/zero.yaml", dir);
    unlink(bad);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(symlink("/dev/zero", zero), 0);
    const char *one[] = {fifo};
    ck_assert_ptr_null(ctx_with(one, 1));
    ck_assert_msg(strstr(opr_last_error(), fifo) && strstr(opr_last_error(), "not a regular file"), "%s",
                  opr_last_error());
    one[0] = zero;
    ck_assert_ptr_null(ctx_with(one, 1));
    ck_assert_msg(strstr(opr_last_error(), zero) && strstr(opr_last_error(), "not a regular file"), "%s",
                  opr_last_error());
    const char *dirs[] = {dir};
    ck_assert_ptr_null(ctx_with(dirs, 1));
    ck_assert_msg(strstr(opr_last_error(), "not a regular file"), "%s", opr_last_error());
    unlink(fifo);
    unlink(zero);
}
END_TEST

/* Lookups by name go through an index: 20k ops in one file load in well under the 9 s
 * the linear duplicate checks took (a bound loose enough for a loaded sanitizer run),
 * and every one of them, and the built-ins, is still found. */
START_TEST(test_many_ops_load_fast)
{
    enum { N = 20000 };
    size_t cap = (size_t)N * 96;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    size_t used = 0;
    for (int i = 0; i < N; i++)
        used += (size_t)snprintf(text + used, cap - used,
                                 "- name: many_op%d(Tensor self) -> Tensor\n  shape: sizes(self)\n  forward: mul(self, 2)\n", i);
    opr_ctx *ctx = ctx_with(NULL, 0);
    ck_assert_ptr_nonnull(ctx);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int loaded = 0;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "many.yaml", &loaded), OPR_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(text);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_int_eq(loaded, N);
    ck_assert_msg(s < 5, "loading %d ops took %.1f s", N, s);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "many_op0"));
    ck_assert_ptr_nonnull(opr_op_find(ctx, "many_op19999"));
    ck_assert_ptr_nonnull(opr_op_find(ctx, "add.Scalar"));
    ck_assert_ptr_null(opr_op_find(ctx, "many_op20000"));
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("extra_yaml");
    TCase *tc = tcase_create("extra_yaml");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_yaml_paths_option);
    tcase_add_test(tc, test_yaml_path_env);
    tcase_add_test(tc, test_bad_entries_fail);
    tcase_add_test(tc, test_not_regular_files_refused);
    tcase_add_test(tc, test_many_ops_load_fast);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
