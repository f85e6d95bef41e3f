/* Plugin loader: every refusal the loader can make, with its status, its message (the
 * path plus a specific phrase) and the candidate's `why`; that a refused plugin leaves
 * nothing behind and never stops the others (the real CPU plugin still loads and
 * computes in the same context); accepted minor skew; idempotence; directory loads;
 * OPREG_PLUGIN_PATH discovery. The fixture plugins are built by tests/fixtures. */
#include "test_util.h"

#include <opreg/plugin.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef OPREG_FIXTURE_DIR
#error "OPREG_FIXTURE_DIR must be defined (tests/fixtures/CMakeLists.txt)"
#endif
#ifndef OPREG_CPU_PLUGIN_FILE
#error "OPREG_CPU_PLUGIN_FILE must be defined (tests/fixtures/CMakeLists.txt)"
#endif

/* ------------------------------------------------------------------ helpers */

/* Path of fixture `name` (libNAME.so); a few rotating buffers. */
static const char *fx(const char *name)
{
    static char bufs[8][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX, "%s/lib%s.so", OPREG_FIXTURE_DIR, name);
    ck_assert_msg(access(b, R_OK) == 0, "fixture %s missing: %s", b, strerror(errno));
    return b;
}

/* The real CPU plugin: the first OPREG_PLUGIN_PATH directory that has it, else the
 * build tree's. */
static const char *cpu_plugin(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("OPREG_PLUGIN_PATH");
    while (env && *env) {
        size_t n = strcspn(env, ":");
        snprintf(path, sizeof path, "%.*s/libopreg_cpu.so", (int)n, env);
        if (n && access(path, R_OK) == 0) return path;
        env += n + (env[n] == ':');
    }
    snprintf(path, sizeof path, "%s", OPREG_CPU_PLUGIN_FILE);
    ck_assert_msg(access(path, R_OK) == 0, "CPU plugin %s missing", path);
    return path;
}

static const char *real_path(const char *path)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    ck_assert_msg(realpath(path, b) != NULL, "realpath(%s): %s", path, strerror(errno));
    return b;
}

static void assert_has(const char *hay, const char *needle, const char *what)
{
    ck_assert_msg(hay != NULL, "%s is NULL (expected it to contain '%s')", what, needle);
    ck_assert_msg(strstr(hay, needle) != NULL, "%s '%s' lacks '%s'", what, hay, needle);
}

/* A context with the built-in YAML and no plugin at all. */
static opr_ctx *bare_ctx(void)
{
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "opr_ctx_new: %s", opr_last_error());
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 0);
    ck_assert_int_eq(opr_device_type_count(ctx), 1);
    return ctx;
}

/* Candidate whose path is realpath(path); fails the test if absent. */
static opr_plugin_candidate candidate_for(const opr_ctx *ctx, const char *path)
{
    const char *real = real_path(path);
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, i, &c), OPR_OK);
        ck_assert_uint_eq(c.struct_size, sizeof c);
        if (c.path && !strcmp(c.path, real)) return c;
    }
    ck_abort_msg("no candidate for %s", real);
    return (opr_plugin_candidate){0};
}

static const opr_plugin_candidate *candidate_named(const opr_ctx *ctx, const char *name, opr_plugin_candidate *out)
{
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, i, out), OPR_OK);
        if (out->name && !strcmp(out->name, name)) return out;
    }
    return NULL;
}

/* Loads `path`, expects `status`, and checks that opr_last_error() names the file and
 * every phrase, that exactly one refused candidate was added whose `why` has every
 * phrase, and that no op or device appeared. NULL-terminated phrases. */
static opr_plugin_candidate expect_refused(opr_ctx *ctx, const char *path, int status, const char *const *phrases)
{
    int ncand = opr_plugin_candidate_count(ctx), nops = opr_op_count(ctx), ndev = opr_device_type_count(ctx);
    int rc = opr_plugin_load(ctx, path);
    ck_assert_msg(rc == status, "load %s: expected %s, got %s (%s)", path, opr_status_name(status),
                  opr_status_name(rc), opr_last_error());
    const char *real = real_path(path);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", opr_last_error());
    assert_has(msg, real, "opr_last_error()");
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), ncand + 1);
    opr_plugin_candidate c = {.struct_size = sizeof c};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, ncand, &c), OPR_OK);
    ck_assert_str_eq(c.path, real);
    ck_assert_msg(!c.loaded, "%s: refused plugin marked loaded", path);
    for (int i = 0; phrases[i]; i++) {
        assert_has(msg, phrases[i], "opr_last_error()");
        assert_has(c.why, phrases[i], "candidate why");
    }
    ck_assert_int_eq(opr_op_count(ctx), nops);
    ck_assert_int_eq(opr_device_type_count(ctx), ndev);
    return c;
}

/* Nothing from the refused fixtures reached the op table: no CPU kernel at all yet. */
static void expect_no_cpu_kernels(opr_ctx *ctx)
{
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "add"), 0));
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "neg"), 0));
    opr_tensor *out = NULL;
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 1, (int64_t[]){2}, OPR_CPU);
    opr_value args[2] = {opr_v_tensor(a), opr_v_tensor(a)};
    ck_assert_int_eq(opr_call_by_name(ctx, "add", args, 2, &out, 1), OPR_ERR_NOT_FOUND);
    assert_has(opr_last_error(), "no kernel for device cpu", "opr_last_error()");
    ck_assert_ptr_null(out);
    opr_tensor_release(a);
}

static void expect_values(const opr_tensor *t, const double *want, int64_t n)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *got = tu_to_f64(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %lld: got %g, want %g", (long long)i, got[i], want[i]);
    free(got);
}

/* Loads the real CPU plugin into ctx (after whatever was refused there) and checks
 * that it is in use without remark and computes add and neg. */
static void expect_cpu_works(opr_ctx *ctx)
{
    const char *cpu = cpu_plugin();
    int rc = opr_plugin_load(ctx, cpu);
    ck_assert_msg(rc == OPR_OK, "CPU plugin %s: %s", cpu, opr_last_error());
    opr_plugin_candidate c = candidate_for(ctx, cpu);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.name, "cpu");
    ck_assert_msg(c.why == NULL, "CPU plugin has a remark: %s", c.why);
    ck_assert_int_gt(c.score, 0);
    float av[3] = {1, 2, 3}, bv[3] = {10, 20, 30};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, av, OPR_CPU);
    opr_tensor *b = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, bv, OPR_CPU);
    opr_value args[3] = {opr_v_tensor(a), opr_v_tensor(b), opr_v_double(2)};
    opr_tensor *sum = tu_call1(ctx, "add", args, 3);
    expect_values(sum, (double[]){21, 42, 63}, 3);
    opr_tensor *neg = tu_call1(ctx, "neg", args, 1);
    expect_values(neg, (double[]){-1, -2, -3}, 3);
    opr_tensor_release(sum);
    opr_tensor_release(neg);
    opr_tensor_release(a);
    opr_tensor_release(b);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "rb");
    ck_assert_msg(in != NULL, "open %s: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    ck_assert_msg(out != NULL, "create %s: %s", to, strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_int_eq(chmod(to, mode), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "create %s: %s", path, strerror(errno));
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A private temporary directory (mode 0700). */
static char *temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    char *dir = malloc(PATH_MAX);
    ck_assert_ptr_nonnull(dir);
    snprintf(dir, PATH_MAX, "%s/opreg_loader_XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    ck_assert_int_eq(chmod(dir, 0700), 0);
    return dir;
}

static char *join(const char *dir, const char *name)
{
    char *p = malloc(PATH_MAX);
    ck_assert_ptr_nonnull(p);
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

static void remove_dir(char *dir)
{
    chmod(dir, 0700);
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = join(dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static const char *const fx_triple_yaml =
    "- name: fx_triple(Tensor self) -> Tensor\n"
    "  shape: sizes(self)\n"
    "  flops: numel(self)\n";

static void load_fx_triple_op(opr_ctx *ctx)
{
    int n = -1;
    int rc = opr_registry_load_yaml_string(ctx, fx_triple_yaml, "fx_triple.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "fx_triple YAML: %s", opr_last_error());
    ck_assert_int_eq(n, 1);
}

#define PHRASES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ------------------------------------------------------------------ refusals */

START_TEST(test_no_entry_symbol)
{
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_noentry"), OPR_ERR_NOT_FOUND,
                                            PHRASES("no opr_plugin_init symbol", "undefined symbol: opr_plugin_init"));
    ck_assert_ptr_null(c.name);
    ck_assert_ptr_null(c.version);
    ck_assert_int_eq(c.score, -1);
    ck_assert_uint_eq(c.abi_major, 0);
    ck_assert_uint_eq(c.abi_minor, 0);
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_abi_major_older)
{
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_abi_old"), OPR_ERR_ABI,
                                            PHRASES("ABI 1.7", "older", "host ABI 2.3", "major versions must match"));
    ck_assert_uint_eq(c.abi_major, 1);
    ck_assert_uint_eq(c.abi_minor, 7);
    ck_assert_str_eq(c.name, "fx_abi_old");
    ck_assert_str_eq(c.version, "0.0.1");
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx); /* the staged bogus add was dropped: the CPU one is in use */
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_abi_major_newer)
{
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_abi_new"), OPR_ERR_ABI,
                                            PHRASES("ABI 3.3", "newer", "host ABI 2.3"));
    ck_assert_uint_eq(c.abi_major, 3);
    ck_assert_uint_eq(c.abi_minor, 3);
    ck_assert_ptr_null(strstr(c.why, "older"));
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_init_fails)
{
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_init_fail"), OPR_ERR_BACKEND,
                                            PHRASES("init failed", "OPR_ERR_BACKEND", "fx_init_fail: simulated failure 7"));
    ck_assert_str_eq(c.name, "fx_init_fail");
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST


START_TEST(test_kernel_registered_twice)
{
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_kernel_twice"), OPR_ERR_INVALID, PHRASES("kernel 'neg' on cpu registered twice"));
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_function_pointer)
{
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_null_fn"), OPR_ERR_INVALID, PHRASES("'neg' has a NULL function pointer"));
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_probe_says_unusable)
{
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_probe_zero"), OPR_ERR_UNSUPPORTED,
                                            PHRASES("skipped", "no fxwidget hardware found (0 devices)"));
    ck_assert_int_eq(c.score, 0);
    ck_assert_ptr_null(c.name); /* init never ran */
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_no_plugin_name)
{
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_no_name"), OPR_ERR_INVALID, PHRASES("did not set a plugin name"));
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_device_registered_twice)
{
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_device_twice"), OPR_ERR_INVALID, PHRASES("'fxdup'", "registered twice"));
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxdup", &dev), OPR_ERR_NOT_FOUND);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

typedef struct log_capture {
    int n;
    opr_log_level level;
    char source[32], message[1024];
} log_capture;

static void capture_log(opr_log_level level, const char *source, const char *message, void *user_data)
{
    log_capture *c = user_data;
    c->n++;
    c->level = level;
    snprintf(c->source, sizeof c->source, "%s", source);
    snprintf(c->message, sizeof c->message, "%s", message);
}

START_TEST(test_plugin_log_reaches_the_application)
{
    log_capture got = {0};
    opr_log_set(capture_log, &got);
    opr_ctx *ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_good")), OPR_OK);
    opr_log_set(NULL, NULL);
    ck_assert_int_eq(got.n, 1);
    ck_assert_int_eq(got.level, OPR_LOG_INFO);
    ck_assert_str_eq(got.source, "fx_good");
    ck_assert_str_eq(got.message, "device fxgood ready, 1 ordinal(s)");
    unsigned major = 99, minor = 99;
    opr_abi_version(&major, &minor);
    ck_assert_uint_eq(major, OPR_ABI_MAJOR);
    ck_assert_uint_eq(minor, OPR_ABI_MINOR);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", OPR_VERSION_MAJOR, OPR_VERSION_MINOR, OPR_VERSION_PATCH);
    ck_assert_str_eq(opr_version(), want);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_too_many_device_types)
{
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_many_devices"), OPR_ERR_UNSUPPORTED, PHRASES("no room for device type 'fxm7'", "at most 8"));
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxm0", &dev), OPR_ERR_NOT_FOUND); /* nothing of it committed */
    ck_assert_int_eq(opr_device_type_count(ctx), 1);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_not_a_shared_object)
{
    char *dir = temp_dir();
    char *junk = join(dir, "libjunk.so");
    write_text(junk, "this is not an ELF file\n");
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, junk, OPR_ERR_NOT_FOUND, PHRASES("dlopen failed"));
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
    free(junk);
    remove_dir(dir);
}
END_TEST

START_TEST(test_nonexistent_path)
{
    opr_ctx *ctx = bare_ctx();
    const char *missing = "/nonexistent/opreg-test/libnope.so";
    ck_assert_int_eq(opr_plugin_load(ctx, missing), OPR_ERR_NOT_FOUND);
    assert_has(opr_last_error(), missing, "opr_last_error()");
    assert_has(opr_last_error(), "does not exist", "opr_last_error()");
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 0);
    ck_assert_int_eq(opr_plugin_load(ctx, ""), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_load(ctx, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_load(NULL, cpu_plugin()), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 0);
    opr_plugin_candidate c = {.struct_size = sizeof c};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 0, &c), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, -1, &c), OPR_ERR_INVALID);
    expect_cpu_works(ctx);
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 1, &c), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 0, NULL), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ world-writable */

START_TEST(test_world_writable_file)
{
    char *dir = temp_dir();
    char *copy = join(dir, "libfx_good.so");
    copy_file(fx("fx_good"), copy, 0666);
    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, copy, OPR_ERR_REFUSED, PHRASES("refused", "file is world-writable"));
    ck_assert_ptr_null(c.name); /* never dlopen'd */
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_ERR_NOT_FOUND);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
    free(copy);
    remove_dir(dir);
}
END_TEST

START_TEST(test_world_writable_directory)
{
    char *dir = temp_dir();
    char *copy = join(dir, "libfx_good.so");
    copy_file(fx("fx_good"), copy, 0644);
    ck_assert_int_eq(chmod(dir, 0777), 0); /* no sticky bit */
    const char *real_dir = real_path(dir);

    opr_ctx *ctx = bare_ctx();
    opr_plugin_candidate c = expect_refused(ctx, copy, OPR_ERR_REFUSED, PHRASES("refused", "directory", "is world-writable"));
    assert_has(c.why, real_dir, "candidate why");
    ck_assert_ptr_null(c.name);
    /* the directory itself is refused before anything in it is considered, and listed
     * as refused with the reason (opreg info), once however often it is loaded */
    for (int again = 0; again < 2; again++) {
        ck_assert_int_eq(opr_plugin_load(ctx, dir), OPR_ERR_REFUSED);
        assert_has(opr_last_error(), real_dir, "opr_last_error()");
        assert_has(opr_last_error(), "world-writable", "opr_last_error()");
        ck_assert_int_eq(opr_plugin_candidate_count(ctx), 2);
        opr_plugin_candidate d = candidate_for(ctx, dir);
        ck_assert(!d.loaded);
        ck_assert_ptr_null(d.name);
        assert_has(d.why, "refused: directory", "directory candidate why");
        assert_has(d.why, real_dir, "directory candidate why");
        assert_has(d.why, "is world-writable", "directory candidate why");
    }
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_ERR_NOT_FOUND);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);

    /* with the sticky bit (like /tmp) others cannot replace the file: accepted */
    ck_assert_int_eq(chmod(dir, 01777), 0);
    ctx = bare_ctx();
    int rc = opr_plugin_load(ctx, copy);
    ck_assert_msg(rc == OPR_OK, "sticky directory: %s", opr_last_error());
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_OK);
    tu_ctx_free(ctx);
    free(copy);
    remove_dir(dir);
}
END_TEST

/* A dangling link in a plugin directory, or named itself, is listed as refused with
 * its target rather than dropped: the plugin someone meant to install is missing. */
START_TEST(test_dangling_symlink)
{
    char *dir = temp_dir();
    char *link = join(dir, "libfx_gone.so"), *target = join(dir, "libfx_moved_away.so");
    ck_assert_int_eq(symlink(target, link), 0);
    char want_path[PATH_MAX];
    snprintf(want_path, sizeof want_path, "%s/libfx_gone.so", real_path(dir));
    opr_ctx *ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_load(ctx, dir), OPR_ERR_NOT_FOUND);
    for (int by_name = 0; by_name < 2; by_name++) {
        assert_has(opr_last_error(), want_path, "opr_last_error()");
        assert_has(opr_last_error(), "dangling symbolic link to", "opr_last_error()");
        ck_assert_int_eq(opr_plugin_candidate_count(ctx), 1);
        opr_plugin_candidate c = {.struct_size = sizeof c};
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, 0, &c), OPR_OK);
        ck_assert_str_eq(c.path, want_path);
        ck_assert(!c.loaded);
        assert_has(c.why, "dangling symbolic link to ", "candidate why");
        assert_has(c.why, target, "candidate why");
        /* named itself, later: the same record, not a second one */
        if (!by_name) ck_assert_int_eq(opr_plugin_load(ctx, link), OPR_ERR_NOT_FOUND);
    }
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
    free(link);
    free(target);
    remove_dir(dir);
}
END_TEST

/* opr_plugin_files lists what a context would open, without opening it;
 * opr_plugin_refuse keeps a file out of a context with the caller's reason. */
START_TEST(test_files_and_refuse)
{
    const char *paths[] = {fx("fx_good"), fx("fx_good"), "/nonexistent/libx.so", cpu_plugin()};
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true, .plugin_paths = paths,
                      .n_plugin_paths = 4};
    char **files;
    int n;
    ck_assert_int_eq(opr_plugin_files(&o, &files, &n), OPR_OK);
    ck_assert_int_eq(n, 2); /* once each, nothing for a missing path */
    ck_assert_str_eq(files[0], real_path(paths[0]));
    ck_assert_str_eq(files[1], real_path(paths[3]));
    opr_plugin_files_free(files, n);
    ck_assert_int_eq(opr_plugin_files(&o, NULL, &n), OPR_ERR_INVALID);

    opr_ctx *ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_refuse(ctx, paths[0], "init crashed (SIGSEGV)"), OPR_OK);
    ck_assert_int_eq(opr_plugin_refuse(ctx, paths[0], "another reason"), OPR_OK); /* the first stays */
    ck_assert_int_eq(opr_plugin_load(ctx, paths[0]), OPR_ERR_REFUSED);
    assert_has(opr_last_error(), "init crashed (SIGSEGV)", "opr_last_error()");
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 1);
    opr_plugin_candidate c = candidate_for(ctx, paths[0]);
    ck_assert(!c.loaded);
    ck_assert_str_eq(c.why, "init crashed (SIGSEGV)");
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_ERR_NOT_FOUND);
    expect_cpu_works(ctx);
    ck_assert_int_eq(opr_plugin_refuse(ctx, cpu_plugin(), "late"), OPR_ERR_INVALID); /* loaded already */
    ck_assert_int_eq(opr_plugin_refuse(ctx, "/nonexistent/libx.so", "gone"), OPR_ERR_NOT_FOUND);
    ck_assert_int_eq(opr_plugin_refuse(NULL, paths[0], "x"), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_desc_below_minimum)
{
    opr_ctx *ctx = bare_ctx();
    char sizes[160];
    /* the whole message, as docs/plugin-abi.md quotes it */
    snprintf(sizes, sizeof sizes, "opr_kernel_desc has struct_size %zu, below the ABI 2.0 minimum of %zu bytes "
             "(this host's opr_kernel_desc has %zu)", offsetof(opr_kernel_desc, data),
             (size_t)OPR_KERNEL_DESC_STRUCT_SIZE_2_0, sizeof(opr_kernel_desc));
    opr_plugin_candidate c = expect_refused(ctx, fx("fx_desc_short"), OPR_ERR_INVALID,
                                            PHRASES("register_kernel", "opr_kernel_desc", sizes));
    ck_assert_uint_eq(c.abi_major, OPR_ABI_MAJOR);
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ accepted plugins */

START_TEST(test_abi_minor_newer_accepted)
{
    opr_ctx *ctx = bare_ctx();
    load_fx_triple_op(ctx);
    const char *path = fx("fx_minor_new");
    int rc = opr_plugin_load(ctx, path);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    opr_plugin_candidate c = candidate_for(ctx, path);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.name, "fx_minor_new");
    ck_assert_str_eq(c.version, "2.99.0");
    ck_assert_uint_eq(c.abi_major, 2);
    ck_assert_uint_eq(c.abi_minor, 99);
    ck_assert_int_eq(c.score, -1); /* no probe */
    assert_has(c.why, "2.99", "candidate why");
    assert_has(c.why, "newer", "candidate why");
    assert_has(c.why, "accepted", "candidate why");

    /* its device */
    ck_assert_int_eq(opr_device_type_count(ctx), 2);
    ck_assert_str_eq(opr_device_type_name(ctx, 1), "fxdev");
    ck_assert_int_eq(opr_device_type_ordinals(ctx, 1), 2);
    opr_device d0, d1, bad;
    ck_assert_int_eq(opr_device_parse(ctx, "fxdev", &d0), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "fxdev:1", &d1), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "fxdev:2", &bad), OPR_ERR_NOT_FOUND);
    ck_assert_int_eq(d1.type, 1);
    ck_assert_int_eq(d1.index, 1);

    /* the user op's kernel, on cpu and on the fake device (through a transposed view) */
    const opr_op *triple = opr_op_find(ctx, "fx_triple");
    ck_assert_ptr_nonnull(triple);
    ck_assert(opr_op_has_kernel(triple, 0));
    ck_assert(opr_op_has_kernel(triple, 1));
    float av[4] = {1, 2, 3, 4};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F32, 2, (int64_t[]){2, 2}, av, OPR_CPU);
    opr_value args[3] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "fx_triple", args, 1);
    expect_values(r, (double[]){3, 6, 9, 12}, 4);
    opr_tensor_release(r);

    opr_tensor *ad = opr_tensor_to(a, d0);
    ck_assert_msg(ad != NULL, "to fxdev: %s", opr_last_error());
    ck_assert_int_eq(opr_tensor_device(ad).type, 1);
    opr_tensor *adt = opr_tensor_transpose(ad, 0, 1);
    ck_assert_ptr_nonnull(adt);
    args[0] = opr_v_tensor(adt);
    opr_tensor *out = NULL;
    ck_assert_int_eq(opr_call(triple, args, 1, &out, 1), OPR_OK);
    ck_assert_int_eq(opr_tensor_device(out).type, 1);
    ck_assert_int_eq(opr_tensor_device(out).index, 0);
    expect_values(out, (double[]){3, 9, 6, 12}, 4);
    opr_tensor_release(out);
    opr_tensor_release(adt);
    opr_tensor_release(ad);

    /* add on fxdev:1 with broadcasting and alpha */
    float bv[2] = {10, 20};
    opr_tensor *a1 = opr_tensor_from_data(ctx, OPR_F32, 2, (int64_t[]){2, 2}, av, d1);
    opr_tensor *b1 = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, bv, d1);
    ck_assert(a1 && b1);
    args[0] = opr_v_tensor(a1);
    args[1] = opr_v_tensor(b1);
    args[2] = opr_v_double(0.5);
    r = tu_call1(ctx, "add", args, 3);
    ck_assert_int_eq(opr_tensor_device(r).index, 1);
    expect_values(r, (double[]){6, 12, 8, 14}, 4);
    opr_tensor_release(r);

    /* a kernel error carries the plugin's detail; a missing kernel names the device */
    tu_expect_fail(ctx, "sub", args, 2, 1, OPR_ERR_UNSUPPORTED, "sub (fxdev, plugin fx_minor_new)");
    assert_has(opr_last_error(), "fxdev: sub is not implemented (3 inputs)", "opr_last_error()");
    ck_assert_ptr_null(strstr(opr_last_error(), "second detail"));
    tu_expect_fail(ctx, "mul", args, 2, 1, OPR_ERR_NOT_FOUND, "no kernel for device fxdev");
    opr_tensor_release(a1);
    opr_tensor_release(b1);

    opr_mem_stats st = {.struct_size = sizeof st};
    ck_assert_int_eq(opr_memory_stats(ctx, d1, &st), OPR_OK);
    ck_assert_uint_eq(st.current_bytes, 0);
    ck_assert_uint_ge(st.n_allocs, 3);

    /* the CPU plugin joins the same context; both devices keep working */
    expect_cpu_works(ctx);
    a1 = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, bv, d1);
    args[0] = args[1] = opr_v_tensor(a1);
    args[2] = opr_v_double(1);
    r = tu_call1(ctx, "add", args, 3);
    expect_values(r, (double[]){20, 40}, 2);
    opr_tensor_release(r);
    opr_tensor_release(a1);
    opr_tensor_release(a);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_abi_minor_newer_without_its_op)
{
    /* fx_triple is not defined: its two kernels are skipped (registrations are
     * optional), the rest of the plugin loads and says so */
    opr_ctx *ctx = bare_ctx();
    const char *path = fx("fx_minor_new");
    int rc = opr_plugin_load(ctx, path);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    opr_plugin_candidate c = candidate_for(ctx, path);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.why, "skipped 2 kernel(s) for ops the registry does not define: fx_triple; "
                            "device 'fxdev' has no copy_ kernel: strided tensors on it cannot be copied, made "
                            "contiguous or read back, and view ops do not count as runnable there; "
                            "plugin ABI 2.99 is newer than host 2.3 (accepted)");
    ck_assert_ptr_null(opr_op_find(ctx, "fx_triple"));
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxdev", &dev), OPR_OK);
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "add"), dev.type));
    expect_cpu_works(ctx);
    /* defining the op afterwards does not add the skipped kernels (considered once) */
    load_fx_triple_op(ctx);
    int n = opr_plugin_candidate_count(ctx);
    ck_assert_int_eq(opr_plugin_load(ctx, path), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), n);
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "fx_triple"), dev.type));
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_unknown_op_skipped)
{
    /* a kernel for an op no YAML defines is skipped with a log line, not refused */
    log_capture got = {0};
    opr_log_set(capture_log, &got);
    opr_ctx *ctx = bare_ctx();
    const char *path = fx("fx_unknown_op");
    int rc = opr_plugin_load(ctx, path);
    opr_log_set(NULL, NULL);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(got.n, 1);
    ck_assert_int_eq(got.level, OPR_LOG_INFO);
    ck_assert_str_eq(got.source, "fx_unknown_op");
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "plugin %s: kernel 'no_such_op_xyz' on fxunk skipped: the registry defines no op "
             "'no_such_op_xyz'", real_path(path));
    ck_assert_str_eq(got.message, want);
    opr_plugin_candidate c = candidate_for(ctx, path);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.why, "skipped 1 kernel(s) for ops the registry does not define: no_such_op_xyz");
    ck_assert_ptr_null(opr_op_find(ctx, "no_such_op_xyz"));
    /* the rest of the plugin is in use */
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxunk", &dev), OPR_OK);
    float v[2] = {1, -4};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, v, dev);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-1, 4}, 2);
    opr_tensor_release(r);
    opr_tensor_release(a);
    expect_no_cpu_kernels(ctx);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_two_devices)
{
    opr_ctx *ctx = bare_ctx();
    int rc = opr_plugin_load(ctx, fx("fx_two_devices"));
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    opr_plugin_candidate c = candidate_for(ctx, fx("fx_two_devices"));
    ck_assert(c.loaded);
    ck_assert_ptr_null(c.why);
    ck_assert_int_eq(opr_device_type_count(ctx), 3);
    opr_device da, db;
    ck_assert_int_eq(opr_device_parse(ctx, "fxa:1", &da), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "fxb", &db), OPR_OK);
    float v[3] = {1, -2, 3};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, v, da);
    opr_tensor *b = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, v, db);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-1, 2, -3}, 3);
    opr_tensor_release(r);
    args[0] = opr_v_tensor(b);
    r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-2, 4, -6}, 3);
    opr_tensor_release(r);
    opr_tensor_release(a);
    opr_tensor_release(b);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_plugin_ships_yaml)
{
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx);
    size_t nerr = strlen(opr_registry_errors(ctx));
    int rc = opr_plugin_load(ctx, fx("fx_yaml"));
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(opr_op_count(ctx), nops + 1);
    const opr_op *sq = opr_op_find(ctx, "fx_yaml_sq");
    ck_assert_ptr_nonnull(sq);
    ck_assert(opr_op_has_kernel(sq, 0));
    ck_assert_uint_eq(strlen(opr_registry_errors(ctx)), nerr); /* its YAML loaded cleanly */
    double v[3] = {1.5, -2, 3};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "fx_yaml_sq", args, 1);
    expect_values(r, (double[]){2.25, 4, 9}, 3);
    opr_tensor_release(r);
    opr_tensor_release(a);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_refused_plugin_yaml_is_rolled_back)
{
    /* a plugin that loaded op definitions and then failed leaves no op behind */
    opr_ctx *ctx = bare_ctx();
    expect_refused(ctx, fx("fx_yaml_fail"), OPR_ERR_UNSUPPORTED,
                   PHRASES("init failed", "OPR_ERR_UNSUPPORTED", "giving up after loading my YAML"));
    ck_assert_ptr_null(opr_op_find(ctx, "fx_yaml_orphan"));
    ck_assert_ptr_null(opr_op_find(ctx, "fx_yaml_orphan2"));
    /* the good variant loads in the same context */
    int rc = opr_plugin_load(ctx, fx("fx_yaml"));
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_ptr_nonnull(opr_op_find(ctx, "fx_yaml_sq"));
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ idempotence, dirs */

START_TEST(test_load_twice_is_idempotent)
{
    char *dir = temp_dir();
    char *link = join(dir, "libalias.so");
    ck_assert_int_eq(symlink(real_path(fx("fx_good")), link), 0);
    char dotted[PATH_MAX];
    snprintf(dotted, sizeof dotted, "%s/./libfx_good.so", OPREG_FIXTURE_DIR);

    opr_ctx *ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_good")), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 1);
    opr_plugin_candidate c = candidate_for(ctx, fx("fx_good"));
    ck_assert(c.loaded);
    ck_assert_str_eq(c.name, "fx_good");
    ck_assert_str_eq(c.version, "1.2.3");
    ck_assert_int_eq(c.score, 5);
    ck_assert_ptr_null(c.why);
    /* same file again, by another spelling, through a symlink: nothing new */
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_good")), OPR_OK);
    ck_assert_int_eq(opr_plugin_load(ctx, dotted), OPR_OK);
    ck_assert_int_eq(opr_plugin_load(ctx, link), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 1);
    ck_assert_int_eq(opr_device_type_count(ctx), 2);

    /* a refused file loaded again: still refused, same message, no new candidate */
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_abi_old")), OPR_ERR_ABI);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 2);
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_abi_old")), OPR_ERR_ABI);
    assert_has(opr_last_error(), real_path(fx("fx_abi_old")), "opr_last_error()");
    assert_has(opr_last_error(), "older", "opr_last_error()");
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 2);

    expect_cpu_works(ctx);
    ck_assert_int_eq(opr_plugin_load(ctx, cpu_plugin()), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 3);

    /* the fake device still computes */
    float v[2] = {1, -4};
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_OK);
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, v, dev);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-1, 4}, 2);
    opr_tensor_release(r);
    opr_tensor_release(a);
    tu_ctx_free(ctx);
    free(link);
    remove_dir(dir);
}
END_TEST

START_TEST(test_second_copy_same_name)
{
    /* a second copy of the CPU plugin (another inode, same plugin name) is skipped */
    char *dir = temp_dir();
    char *copy = join(dir, "libopreg_cpu_copy.so");
    copy_file(cpu_plugin(), copy, 0755);
    opr_ctx *ctx = bare_ctx();
    expect_cpu_works(ctx);
    opr_plugin_candidate c = expect_refused(ctx, copy, OPR_ERR_REFUSED,
                                            PHRASES("skipped", "a plugin named 'cpu' is already loaded"));
    ck_assert_str_eq(c.name, "cpu");
    /* a second copy of fx_good: its device is already provided; the reason is kept */
    char *good = join(dir, "libfx_good_copy.so");
    copy_file(fx("fx_good"), good, 0755);
    ck_assert_int_eq(opr_plugin_load(ctx, fx("fx_good")), OPR_OK);
    expect_refused(ctx, good, OPR_ERR_INVALID, PHRASES("init failed", "device 'fxgood' is already provided by plugin fx_good"));
    ck_assert_int_eq(opr_device_type_count(ctx), 2);
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
    free(copy);
    free(good);
    remove_dir(dir);
}
END_TEST

START_TEST(test_directory_load)
{
    char *dir = temp_dir();
    const char *names[] = {"libfx_good.so", "libfx_abi_old.so", "libfx_probe_zero.so"};
    const char *srcs[] = {"fx_good", "fx_abi_old", "fx_probe_zero"};
    char *paths[3];
    for (int i = 0; i < 3; i++) {
        paths[i] = join(dir, names[i]);
        copy_file(fx(srcs[i]), paths[i], 0755);
    }
    char *hidden = join(dir, ".libfx_hidden.so"), *text = join(dir, "README.txt");
    copy_file(fx("fx_noentry"), hidden, 0755);
    write_text(text, "not a plugin\n");

    opr_ctx *ctx = bare_ctx();
    /* sorted order: abi_old (refused, the first error), good (loaded), probe_zero (skipped) */
    ck_assert_int_eq(opr_plugin_load(ctx, dir), OPR_ERR_ABI);
    assert_has(opr_last_error(), real_path(paths[1]), "opr_last_error()");
    assert_has(opr_last_error(), "older", "opr_last_error()");
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 3);
    opr_plugin_candidate c = {.struct_size = sizeof c};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 0, &c), OPR_OK);
    ck_assert_str_eq(c.path, real_path(paths[1]));
    ck_assert(!c.loaded);
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 1, &c), OPR_OK);
    ck_assert_str_eq(c.path, real_path(paths[0]));
    ck_assert(c.loaded);
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, 2, &c), OPR_OK);
    ck_assert_str_eq(c.path, real_path(paths[2]));
    ck_assert(!c.loaded);
    assert_has(c.why, "skipped", "candidate why");
    /* again: nothing new */
    ck_assert_int_ne(opr_plugin_load(ctx, dir), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 3);

    /* the directory of the real CPU plugin */
    char cpu_dir[PATH_MAX];
    snprintf(cpu_dir, sizeof cpu_dir, "%s", cpu_plugin());
    *strrchr(cpu_dir, '/') = '\0';
    int rc = opr_plugin_load(ctx, cpu_dir);
    ck_assert_msg(rc == OPR_OK, "%s: %s", cpu_dir, opr_last_error());
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
    for (int i = 0; i < 3; i++) free(paths[i]);
    free(hidden);
    free(text);
    remove_dir(dir);
}
END_TEST

START_TEST(test_fixture_directory)
{
    /* every fixture at once: the valid ones load, each broken one is refused on its own */
    opr_ctx *ctx = bare_ctx();
    load_fx_triple_op(ctx);
    int nops = opr_op_count(ctx);
    ck_assert_int_ne(opr_plugin_load(ctx, OPREG_FIXTURE_DIR), OPR_OK);
    const char *loaded[] = {"fx_good", "fx_minor_new", "fx_two_devices", "fx_yaml", "fx_unknown_op", "fx_yaml_rel"};
    int nloaded = 0;
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, i, &c), OPR_OK);
        bool want = false;
        for (size_t k = 0; k < sizeof loaded / sizeof loaded[0]; k++)
            want |= c.name && !strcmp(c.name, loaded[k]);
        ck_assert_msg(c.loaded == want, "%s (%s): loaded=%d why=%s", c.path, c.name ? c.name : "?", c.loaded,
                      c.why ? c.why : "");
        if (!c.loaded) ck_assert_msg(c.why && c.why[0], "%s refused without a reason", c.path);
        nloaded += c.loaded;
    }
    ck_assert_int_eq(nloaded, 6);
    int nfiles = 0;
    DIR *d = opendir(OPREG_FIXTURE_DIR);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        nfiles += e->d_name[0] != '.' && len > 3 && !strcmp(e->d_name + len - 3, ".so");
    }
    closedir(d);
    ck_assert_int_ge(nfiles, 15);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), nfiles);
    /* fx_yaml_sq, fx_rel_sq, fx_str_neg; no orphan of fx_yaml_fail */
    ck_assert_int_eq(opr_op_count(ctx), nops + 3);
    ck_assert_int_eq(opr_device_type_count(ctx), 6); /* cpu fxdev fxgood fxa fxb fxunk */
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ discovery */

START_TEST(test_discovery_from_env)
{
    char *dir = temp_dir();
    char *copy = join(dir, "libfx_good.so");
    copy_file(fx("fx_good"), copy, 0755);
    const char *old = getenv("OPREG_PLUGIN_PATH");
    char *saved = old ? strdup(old) : NULL;
    char cpu_dir[PATH_MAX];
    snprintf(cpu_dir, sizeof cpu_dir, "%s", cpu_plugin());
    *strrchr(cpu_dir, '/') = '\0';
    char env[3 * PATH_MAX];
    snprintf(env, sizeof env, "/nonexistent/opreg-plugins:%s::%s", dir, cpu_dir);
    ck_assert_int_eq(setenv("OPREG_PLUGIN_PATH", env, 1), 0);

    opr_ctx *ctx = opr_ctx_new(NULL);
    ck_assert_msg(ctx != NULL, "opr_ctx_new: %s", opr_last_error());
    opr_plugin_candidate c = candidate_for(ctx, copy);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.name, "fx_good");
    opr_plugin_candidate cpu = {.struct_size = sizeof cpu};
    ck_assert_ptr_nonnull(candidate_named(ctx, "cpu", &cpu));
    ck_assert(cpu.loaded);
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "fxgood", &dev), OPR_OK);
    /* rediscovery is deduplicated */
    int n = opr_plugin_candidate_count(ctx);
    ck_assert_int_eq(opr_plugin_discover(ctx), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), n);
    expect_cpu_works(ctx);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), n);
    tu_ctx_free(ctx);

    if (saved) setenv("OPREG_PLUGIN_PATH", saved, 1);
    else unsetenv("OPREG_PLUGIN_PATH");
    free(saved);
    free(copy);
    remove_dir(dir);
}
END_TEST

START_TEST(test_ctx_opts_plugin_paths)
{
    const char *paths[] = {fx("fx_abi_old"), fx("fx_good"), cpu_plugin()};
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true, .plugin_paths = paths,
                      .n_plugin_paths = 3};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "a refused plugin must not fail opr_ctx_new: %s", opr_last_error());
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), 3);
    ck_assert(!candidate_for(ctx, paths[0]).loaded);
    ck_assert(candidate_for(ctx, paths[1]).loaded);
    ck_assert(candidate_for(ctx, paths[2]).loaded);
    ck_assert_str_eq(opr_last_error(), ""); /* opr_ctx_new succeeded */
    expect_cpu_works(ctx);
    tu_ctx_free(ctx);
}

/* The GPU plugins, where they were built, decline on a machine without the device or
 * driver: the probe says why, nothing is registered, and the CPU plugin loaded beside
 * them in the same context keeps working. On a machine with the device they load. */
START_TEST(test_gpu_plugins_decline_without_device)
{
    const char *names[] = {"cuda", "rocm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s", cpu_plugin());
        char *slash = strrchr(path, '/');
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libopreg_%s.so", names[i]);
        if (access(path, R_OK) != 0) {
            printf("%s plugin not built here (no %s compiler): nothing to check\n", names[i],
                   i == 0 ? "nvcc" : "hipcc");
            continue;
        }
        opr_ctx *ctx = bare_ctx();
        ck_assert_int_eq(opr_plugin_load(ctx, cpu_plugin()), OPR_OK);
        int ndev = opr_device_type_count(ctx);
        int rc = opr_plugin_load(ctx, path);
        opr_plugin_candidate c = candidate_for(ctx, path);
        if (rc == OPR_OK) {
            printf("%s plugin loaded: this machine has the device\n", names[i]);
            ck_assert(c.loaded);
        } else {
            ck_assert_int_eq(rc, OPR_ERR_UNSUPPORTED);
            assert_has(opr_last_error(), "skipped: no ", "opr_last_error()");
            assert_has(c.why, "skipped: no ", "candidate why");
            ck_assert_int_eq(c.score, 0);
            ck_assert(!c.loaded);
            ck_assert_int_eq(opr_device_type_count(ctx), ndev);
            opr_device d;
            ck_assert_int_eq(opr_device_parse(ctx, names[i], &d), OPR_ERR_NOT_FOUND);
        }
        expect_cpu_works(ctx);
        tu_ctx_free(ctx);
    }
}
END_TEST


static Suite *loader_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *t = tcase_create("refusals");
    tcase_add_test(t, test_no_entry_symbol);
    tcase_add_test(t, test_gpu_plugins_decline_without_device);
    tcase_add_test(t, test_abi_major_older);
    tcase_add_test(t, test_abi_major_newer);
    tcase_add_test(t, test_desc_below_minimum);
    tcase_add_test(t, test_init_fails);
    tcase_add_test(t, test_kernel_registered_twice);
    tcase_add_test(t, test_null_function_pointer);
    tcase_add_test(t, test_probe_says_unusable);
    tcase_add_test(t, test_no_plugin_name);
    tcase_add_test(t, test_device_registered_twice);
    tcase_add_test(t, test_not_a_shared_object);
    tcase_add_test(t, test_nonexistent_path);
    tcase_add_test(t, test_world_writable_file);
    tcase_add_test(t, test_world_writable_directory);
    tcase_add_test(t, test_dangling_symlink);
    tcase_add_test(t, test_files_and_refuse);
    suite_add_tcase(s, t);
    t = tcase_create("accepted");
    tcase_add_test(t, test_abi_minor_newer_accepted);
    tcase_add_test(t, test_abi_minor_newer_without_its_op);
    tcase_add_test(t, test_unknown_op_skipped);
    tcase_add_test(t, test_two_devices);
    tcase_add_test(t, test_plugin_ships_yaml);
    tcase_add_test(t, test_refused_plugin_yaml_is_rolled_back);
    suite_add_tcase(s, t);
    t = tcase_create("paths");
    tcase_add_test(t, test_load_twice_is_idempotent);
    tcase_add_test(t, test_second_copy_same_name);
    tcase_add_test(t, test_directory_load);
    tcase_add_test(t, test_too_many_device_types);
    tcase_add_test(t, test_plugin_log_reaches_the_application);
    tcase_add_test(t, test_fixture_directory);
    tcase_add_test(t, test_discovery_from_env);
    tcase_add_test(t, test_ctx_opts_plugin_paths);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(loader_suite()); }
