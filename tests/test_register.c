/* Registration rules beyond refusals (test_loader.c has those): kernel precedence per
 * (op, device, dtype), with explicit overrides; in-process plugins
 * (opr_plugin_register) checked exactly like files; a plugin's YAML found relative to
 * its directory and given as text; the device contract (copy_). Fixture plugins come
 * from tests/fixtures; the plugins registered in process are defined here. */
#include "test_util.h"

#include <opreg/plugin.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixtures/fx_copy.h"

#ifndef OPREG_FIXTURE_DIR
#error "OPREG_FIXTURE_DIR must be defined (tests/fixtures/CMakeLists.txt)"
#endif
#ifndef OPREG_CPU_PLUGIN_FILE
#error "OPREG_CPU_PLUGIN_FILE must be defined (tests/fixtures/CMakeLists.txt)"
#endif

/* ------------------------------------------------------------------ helpers */

/* Path of fixture `name` in the fixture directory, or in its subdirectory `sub`. */
static const char *fx_in(const char *sub, const char *name)
{
    static char bufs[8][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX, "%s%s%s/lib%s.so", OPREG_FIXTURE_DIR, sub ? "/" : "", sub ? sub : "", name);
    ck_assert_msg(access(b, R_OK) == 0, "fixture %s missing: %s", b, strerror(errno));
    return b;
}
#define fx(name) fx_in(NULL, name)

static const char *real_path(const char *path)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    ck_assert_msg(realpath(path, b) != NULL, "realpath(%s): %s", path, strerror(errno));
    return b;
}

static opr_ctx *bare_ctx(void)
{
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "opr_ctx_new: %s", opr_last_error());
    return ctx;
}

static void load_ok(opr_ctx *ctx, const char *path)
{
    int rc = opr_plugin_load(ctx, path);
    ck_assert_msg(rc == OPR_OK, "%s: %s", path, opr_last_error());
}

static opr_plugin_candidate candidate_named(const opr_ctx *ctx, const char *name)
{
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, i, &c), OPR_OK);
        if (c.name && !strcmp(c.name, name)) return c;
    }
    ck_abort_msg("no candidate named %s", name);
    return (opr_plugin_candidate){0};
}

static opr_plugin_candidate last_candidate(const opr_ctx *ctx)
{
    opr_plugin_candidate c = {.struct_size = sizeof c};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, opr_plugin_candidate_count(ctx) - 1, &c), OPR_OK);
    return c;
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

/* A 1-d tensor of dtype dt (f32 or f64) on the cpu holding v[0..n). */
static opr_tensor *vec(opr_ctx *ctx, opr_dtype dt, const double *v, int n)
{
    float f[8];
    for (int i = 0; i < n && i < 8; i++) f[i] = (float)v[i];
    opr_tensor *t = opr_tensor_from_data(ctx, dt, 1, (int64_t[]){n}, dt == OPR_F32 ? (const void *)f : (const void *)v,
                                         OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* add(a, b, alpha 2) in dtype dt on the cpu, for a = {1, 2}, b = {10, 20}. */
static void expect_add(opr_ctx *ctx, opr_dtype dt, double plus)
{
    opr_tensor *a = vec(ctx, dt, (double[]){1, 2}, 2), *b = vec(ctx, dt, (double[]){10, 20}, 2);
    opr_value args[3] = {opr_v_tensor(a), opr_v_tensor(b), opr_v_double(2)};
    opr_tensor *r = tu_call1(ctx, "add", args, 3);
    expect_values(r, (double[]){21 + plus, 42 + plus}, 2);
    opr_tensor_release(r);
    opr_tensor_release(a);
    opr_tensor_release(b);
}

static opr_kernel_info kernel_info(opr_ctx *ctx, const char *op, int device_type, opr_dtype dt)
{
    opr_kernel_info k = {.struct_size = sizeof k};
    int rc = opr_op_kernel_info(opr_op_find(ctx, op), device_type, dt, &k);
    ck_assert_msg(rc == OPR_OK, "%s: %s", op, opr_last_error());
    return k;
}

typedef struct log_capture {
    int n;
    opr_log_level level;
    char source[32], message[1024];
} log_capture;

static void capture_log(opr_log_level level, const char *source, const char *message, void *user_data)
{
    log_capture *c = user_data;
    if (level < OPR_LOG_WARN) return; /* the warnings only */
    c->n++;
    c->level = level;
    snprintf(c->source, sizeof c->source, "%s", source);
    snprintf(c->message, sizeof c->message, "%s", message);
}

/* ------------------------------------------------------------------ in-process plugins */

static void *dev_alloc(void *data, int32_t ordinal, size_t n) { (void)data; (void)ordinal; return malloc(n ? n : 1); }
static void dev_free(void *data, int32_t ordinal, void *p, size_t n) { (void)data; (void)ordinal; (void)n; free(p); }
static int dev_copy(void *data, int32_t ordinal, void *dst, const void *src, size_t n)
{
    (void)data; (void)ordinal;
    if (n) memcpy(dst, src, n);
    return OPR_OK;
}

static opr_device_desc host_memory_device(const char *name)
{
    return (opr_device_desc){
        .struct_size = sizeof(opr_device_desc), .name = name, .count = 1,
        .alloc = dev_alloc, .free = dev_free, .copy_to_host = dev_copy,
        .copy_from_host = dev_copy, .copy_device = dev_copy,
    };
}

/* out = -self * (*(double *)kernel_data), f32 or f64, any strides. */
static int k_scaled_neg(const opr_kernel_call *call)
{
    const double scale = call->kernel_data ? *(const double *)call->kernel_data : 1;
    const opr_tensor_view *a = call->args[0]->u.t;
    opr_tensor_view *o = call->outputs[0];
    int64_t idx[OPR_MAX_DIMS] = {0};
    for (int64_t k = 0; k < o->numel; k++) {
        int64_t ia = 0, io = 0;
        for (int d = 0; d < o->ndim; d++) { ia += idx[d] * a->strides[d]; io += idx[d] * o->strides[d]; }
        double x = a->dtype == OPR_F64 ? ((const double *)a->data)[ia] : ((const float *)a->data)[ia];
        if (o->dtype == OPR_F64) ((double *)o->data)[io] = -scale * x;
        else ((float *)o->data)[io] = (float)(-scale * x);
        for (int d = o->ndim - 1; d >= 0 && ++idx[d] == o->shape[d]; d--) idx[d] = 0;
    }
    return OPR_OK;
}

static const double ten = 10;

static void set_header(opr_plugin *self, const char *name)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = name;
    self->version = "0.0.1";
}

/* A complete in-process backend: device "ipdev" with neg (scaled by 10) and copy_. */
static int init_ipdev(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ipdev");
    opr_device_desc dev = host_memory_device("ipdev");
    int rc = host->register_device(self, &dev);
    if (rc) return rc;
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "neg", .device = "ipdev",
        .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), .fn = k_scaled_neg, .data = (void *)&ten,
    };
    if ((rc = host->register_kernel(self, &k))) return rc;
    return fx_register_copy(host, self, "ipdev");
}

/* The mistake of fixture fx_null_fn, in process. */
static int init_null_fn(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_null_fn");
    opr_kernel_desc k = {.struct_size = sizeof k, .op = "neg", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F32)};
    host->register_kernel(self, &k);
    return OPR_OK;
}

/* Asks to override a dtype its kernel does not handle. */
static int init_bad_override(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_bad_override");
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "neg", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F32),
        .fn = k_scaled_neg, .override_dtypes = OPR_DTYPE_BIT(OPR_F64),
    };
    return host->register_kernel(self, &k);
}

/* neg on cpu for f32 and f64, overriding f64 only: f32 is filled only if missing. */
static int init_neg_override_f64(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_neg_f64");
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "neg", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64),
        .fn = k_scaled_neg, .data = (void *)&ten, .override_dtypes = OPR_DTYPE_BIT(OPR_F64),
    };
    return host->register_kernel(self, &k);
}

/* Registers device "fxgood", which fixture fx_good provides. */
static int init_dup_device(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_dup_device");
    opr_device_desc dev = host_memory_device("fxgood");
    return host->register_device(self, &dev);
}

/* Device "ipnocopy" with neg and no copy_; device "iphalf" whose copy_ lacks f64. */
static int init_weak_devices(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_weak");
    opr_device_desc dev = host_memory_device("ipnocopy");
    int rc = host->register_device(self, &dev);
    if (rc) return rc;
    dev.name = "iphalf";
    if ((rc = host->register_device(self, &dev))) return rc;
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "neg", .device = "ipnocopy",
        .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), .fn = k_scaled_neg,
    };
    if ((rc = host->register_kernel(self, &k))) return rc;
    k.device = "iphalf";
    if ((rc = host->register_kernel(self, &k))) return rc;
    opr_kernel_desc c = {
        .struct_size = sizeof c, .op = "copy_", .device = "iphalf", .dtypes = OPR_DTYPE_BIT(OPR_F32),
        .fn = fx_copy_kernel,
    };
    return host->register_kernel(self, &c);
}

/* Loads ip_ops.yaml by a relative path (resolved against the directory given to
 * opr_plugin_register) and provides a cpu kernel for the op defined there. */
static int init_relative_yaml(const opr_host_api *host, opr_plugin *self)
{
    set_header(self, "ip_relative_yaml");
    if (!self->dir) return OPR_ERR_INVALID;
    int rc = host->load_yaml(self, "ip_ops.yaml");
    if (rc) return rc;
    opr_kernel_desc k = {
        .struct_size = sizeof k, .op = "ip_neg", .device = "cpu", .dtypes = OPR_DTYPE_BIT(OPR_F64), .fn = k_scaled_neg,
    };
    return host->register_kernel(self, &k);
}

/* ------------------------------------------------------------------ precedence */

START_TEST(test_fill_only_missing_dtypes)
{
    /* a plugin that provides add on cpu for f64 only, loaded before the CPU plugin (as
     * from OPREG_PLUGIN_PATH), without override_dtypes: the CPU plugin, which provides
     * the device, takes its kernel back, naming both; f32 add was never affected */
    opr_ctx *ctx = bare_ctx();
    load_ok(ctx, fx_in("cpu_add", "fx_cpu_add"));
    load_ok(ctx, OPREG_CPU_PLUGIN_FILE);
    expect_add(ctx, OPR_F32, 0);
    expect_add(ctx, OPR_F64, 0);
    ck_assert_ptr_null(candidate_named(ctx, "fx_cpu_add").why);
    ck_assert_str_eq(candidate_named(ctx, "cpu").why,
                     "provides the kernels of its own device in place of 1 kernel(s) earlier plugins added without "
                     "override_dtypes: add (cpu, f64) of plugin fx_cpu_add");
    opr_kernel_info k = kernel_info(ctx, "add", 0, OPR_F64);
    ck_assert_str_eq(k.plugin, "cpu");
    ck_assert_str_eq(k.shadowed, "fx_cpu_add");
    ck_assert(!k.overrides);
    k = kernel_info(ctx, "add", 0, OPR_F32);
    ck_assert_str_eq(k.plugin, "cpu");
    ck_assert_ptr_null(k.shadowed);
    tu_ctx_free(ctx);

    /* the other way round: the CPU plugin's kernels stay, nothing is filled */
    ctx = bare_ctx();
    load_ok(ctx, OPREG_CPU_PLUGIN_FILE);
    load_ok(ctx, fx_in("cpu_add", "fx_cpu_add"));
    expect_add(ctx, OPR_F32, 0);
    expect_add(ctx, OPR_F64, 0);
    ck_assert_ptr_null(candidate_named(ctx, "cpu").why);
    ck_assert_str_eq(candidate_named(ctx, "fx_cpu_add").why,
                     "1 kernel(s) already provided by an earlier plugin were not replaced: add (cpu, f64) of plugin "
                     "cpu (only missing dtypes are filled; override_dtypes replaces)");
    k = kernel_info(ctx, "add", 0, OPR_F64);
    ck_assert_str_eq(k.plugin, "cpu");
    ck_assert_str_eq(k.shadowed, "fx_cpu_add");
    ck_assert(!k.overrides);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_explicit_override_per_dtype)
{
    opr_ctx *ctx = bare_ctx();
    load_ok(ctx, OPREG_CPU_PLUGIN_FILE);
    load_ok(ctx, fx_in("cpu_add", "fx_cpu_override"));
    expect_add(ctx, OPR_F64, 1000); /* overridden */
    expect_add(ctx, OPR_F32, 0);    /* not asked for: the CPU plugin's */
    ck_assert_str_eq(candidate_named(ctx, "fx_cpu_override").why,
                     "overrides 1 kernel(s) of earlier plugins: add (cpu, f64) of plugin cpu");
    opr_kernel_info k = kernel_info(ctx, "add", 0, OPR_F64);
    ck_assert_str_eq(k.plugin, "fx_cpu_override");
    ck_assert_str_eq(k.shadowed, "cpu");
    ck_assert(k.overrides);
    k = kernel_info(ctx, "add", 0, OPR_F32);
    ck_assert_str_eq(k.plugin, "cpu");
    ck_assert_ptr_null(k.shadowed);

    /* in process: neg for f32 and f64 with an override of f64 only */
    ck_assert_int_eq(opr_plugin_register(ctx, init_neg_override_f64, NULL), OPR_OK);
    ck_assert_str_eq(last_candidate(ctx).why, "overrides 1 kernel(s) of earlier plugins: neg (cpu, f64) of plugin cpu; "
                                              "1 kernel(s) already provided by an earlier plugin were not replaced: "
                                              "neg (cpu, f32) of plugin cpu (only missing dtypes are filled; "
                                              "override_dtypes replaces)");
    opr_tensor *a = vec(ctx, OPR_F64, (double[]){1, -2}, 2), *a32 = vec(ctx, OPR_F32, (double[]){1, -2}, 2);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-10, 20}, 2);
    opr_tensor_release(r);
    args[0] = opr_v_tensor(a32);
    r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-1, 2}, 2);
    opr_tensor_release(r);
    opr_tensor_release(a32);
    opr_tensor_release(a);

    /* an override of a dtype nobody provides just fills it */
    k = kernel_info(ctx, "neg", 0, OPR_F64);
    ck_assert_str_eq(k.plugin, "ip_neg_f64");
    ck_assert(k.overrides);
    opr_kernel_info none = {.struct_size = sizeof none};
    ck_assert_int_eq(opr_op_kernel_info(opr_op_find(ctx, "neg"), 0, OPR_BOOL, &none), OPR_ERR_NOT_FOUND); /* no neg of bool */
    ck_assert_int_eq(opr_op_kernel_info(opr_op_find(ctx, "t"), 0, OPR_F32, &none), OPR_ERR_NOT_FOUND); /* a view */
    ck_assert_int_eq(opr_op_kernel_info(NULL, 0, OPR_F32, &none), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_op_kernel_info(opr_op_find(ctx, "neg"), 99, OPR_F32, &none), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_override_loaded_first)
{
    /* an explicit override wins whatever the load order: loaded before the CPU plugin
     * (an explicit path), it keeps f64 add when the CPU plugin, which provides the
     * device, comes after it; the CPU plugin's remark and the kernel info name both */
    opr_ctx *ctx = bare_ctx();
    load_ok(ctx, fx_in("cpu_add", "fx_cpu_override"));
    load_ok(ctx, OPREG_CPU_PLUGIN_FILE);
    expect_add(ctx, OPR_F64, 1000); /* the override's */
    expect_add(ctx, OPR_F32, 0);    /* not asked for: the CPU plugin's */
    ck_assert_str_eq(candidate_named(ctx, "cpu").why,
                     "1 kernel(s) already provided by an earlier plugin were not replaced: add (cpu, f64) of plugin "
                     "fx_cpu_override (only missing dtypes are filled; override_dtypes replaces)");
    opr_kernel_info k = kernel_info(ctx, "add", 0, OPR_F64);
    ck_assert_str_eq(k.plugin, "fx_cpu_override");
    ck_assert_str_eq(k.shadowed, "cpu");
    ck_assert(k.overrides);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_override_outside_dtypes_refused)
{
    opr_ctx *ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_bad_override, NULL), OPR_ERR_INVALID);
    /* init passed register_kernel's status on: the refusal says which registration */
    ck_assert_str_eq(opr_last_error(), "plugin (in-process): refused: init failed with OPR_ERR_INVALID: register_kernel: "
                                       "'neg' on cpu overrides dtypes it does not handle (override_dtypes: f64; "
                                       "dtypes: f32)");
    opr_plugin_candidate c = last_candidate(ctx);
    ck_assert(!c.loaded);
    ck_assert_str_eq(c.name, "ip_bad_override");
    ck_assert_str_eq(c.path, "(in-process)");
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "neg"), 0));
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_duplicate_device_names_the_other_plugin)
{
    opr_ctx *ctx = bare_ctx();
    load_ok(ctx, fx("fx_good"));
    ck_assert_int_eq(opr_plugin_register(ctx, init_dup_device, NULL), OPR_ERR_INVALID);
    ck_assert_str_eq(opr_last_error(), "plugin (in-process): refused: init failed with OPR_ERR_INVALID: "
                                       "register_device: device 'fxgood' is already provided by plugin fx_good");
    ck_assert_str_eq(last_candidate(ctx).why, "refused: init failed with OPR_ERR_INVALID: register_device: device "
                                              "'fxgood' is already provided by plugin fx_good");
    ck_assert_int_eq(opr_device_type_count(ctx), 2);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ in process */

START_TEST(test_in_process_plugin)
{
    opr_ctx *ctx = bare_ctx();
    int n = opr_plugin_candidate_count(ctx);
    ck_assert_int_eq(opr_plugin_register(ctx, init_ipdev, NULL), OPR_OK);
    ck_assert_int_eq(opr_plugin_candidate_count(ctx), n + 1);
    opr_plugin_candidate c = last_candidate(ctx);
    ck_assert(c.loaded);
    ck_assert_str_eq(c.path, "(in-process)");
    ck_assert_str_eq(c.name, "ipdev");
    ck_assert_str_eq(c.version, "0.0.1");
    ck_assert_uint_eq(c.abi_major, OPR_ABI_MAJOR);
    ck_assert_int_eq(c.score, -1);
    ck_assert_ptr_null(c.why);
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "ipdev", &dev), OPR_OK);
    /* runs, also on a transposed view read back through its copy_ */
    float v[4] = {1, 2, 3, 4};
    opr_tensor *h = opr_tensor_from_data(ctx, OPR_F32, 2, (int64_t[]){2, 2}, v, OPR_CPU);
    opr_tensor *a = opr_tensor_to(h, dev);
    ck_assert_ptr_nonnull(a);
    opr_tensor *at = opr_tensor_transpose(a, 0, 1);
    opr_value args[1] = {opr_v_tensor(at)};
    opr_tensor *r = tu_call1(ctx, "neg", args, 1);
    expect_values(r, (double[]){-10, -30, -20, -40}, 4);
    expect_values(at, (double[]){1, 3, 2, 4}, 4);
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "transpose"), dev.type));
    opr_tensor_release(r);
    opr_tensor_release(at);
    opr_tensor_release(a);
    opr_tensor_release(h);
    /* registered again: its device is provided already, by itself */
    ck_assert_int_eq(opr_plugin_register(ctx, init_ipdev, NULL), OPR_ERR_INVALID);
    ck_assert_str_eq(opr_last_error(), "plugin (in-process): refused: init failed with OPR_ERR_INVALID: "
                                       "register_device: device 'ipdev' is already provided by plugin ipdev");
    ck_assert_int_eq(opr_device_type_count(ctx), 2);
    /* a second registration of a plugin name is skipped like a second copy of a file */
    ck_assert_int_eq(opr_plugin_register(ctx, init_neg_override_f64, NULL), OPR_OK);
    ck_assert_int_eq(opr_plugin_register(ctx, init_neg_override_f64, NULL), OPR_ERR_REFUSED);
    ck_assert_str_eq(opr_last_error(), "plugin (in-process): skipped: a plugin named 'ip_neg_f64' is already loaded");
    /* misuse */
    ck_assert_int_eq(opr_plugin_register(NULL, init_ipdev, NULL), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_plugin_register(ctx, NULL, NULL), OPR_ERR_INVALID);
    ck_assert_str_eq(opr_last_error(), "opr_plugin_register: NULL context or init function");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_in_process_same_validation_as_files)
{
    /* the same mistake refused with the same reason, in a .so and in process */
    opr_ctx *ctx = bare_ctx();
    const char *path = fx("fx_null_fn");
    ck_assert_int_eq(opr_plugin_load(ctx, path), OPR_ERR_INVALID);
    char file_msg[PATH_MAX + 256];
    snprintf(file_msg, sizeof file_msg, "%s", opr_last_error());
    ck_assert_int_eq(opr_plugin_register(ctx, init_null_fn, NULL), OPR_ERR_INVALID);
    const char *why = "refused: register_kernel: kernel for 'neg' has a NULL function pointer";
    char want[PATH_MAX + 256];
    snprintf(want, sizeof want, "plugin %s: %s", real_path(path), why);
    ck_assert_str_eq(file_msg, want);
    snprintf(want, sizeof want, "plugin (in-process): %s", why);
    ck_assert_str_eq(opr_last_error(), want);
    ck_assert_str_eq(last_candidate(ctx).why, why);
    ck_assert(!last_candidate(ctx).loaded);
    ck_assert(!opr_op_has_kernel(opr_op_find(ctx, "neg"), 0));
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ plugin YAML */

static char *temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    char *dir = malloc(PATH_MAX);
    ck_assert_ptr_nonnull(dir);
    snprintf(dir, PATH_MAX, "%s/opreg_register_XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    ck_assert_int_eq(chmod(dir, 0700), 0);
    return dir;
}

static void write_file(const char *dir, const char *name, const void *data, size_t n, mode_t mode)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, mode), 0);
}

static void copy_into(const char *from, const char *dir, const char *name)
{
    FILE *in = fopen(from, "rb");
    ck_assert_msg(in != NULL, "open %s: %s", from, strerror(errno));
    ck_assert_int_eq(fseek(in, 0, SEEK_END), 0);
    long n = ftell(in);
    rewind(in);
    char *buf = malloc((size_t)n);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, in), (size_t)n);
    fclose(in);
    write_file(dir, name, buf, (size_t)n, 0755);
    free(buf);
}

static void remove_dir(char *dir, const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    free(dir);
}

START_TEST(test_plugin_yaml_relative_and_string)
{
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx);
    load_ok(ctx, fx("fx_yaml_rel"));
    ck_assert_ptr_null(candidate_named(ctx, "fx_yaml_rel").why);
    ck_assert_int_eq(opr_op_count(ctx), nops + 2);
    double v[3] = {1.5, -2, 3};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = tu_call1(ctx, "fx_rel_sq", args, 1);
    expect_values(r, (double[]){2.25, 4, 9}, 3);
    opr_tensor_release(r);
    r = tu_call1(ctx, "fx_str_neg", args, 1);
    expect_values(r, (double[]){-1.5, 2, -3}, 3);
    opr_tensor_release(r);
    opr_tensor_release(a);
    tu_ctx_free(ctx);

    /* copied elsewhere without its YAML: the relative path is looked up next to the
     * copy (not in the working directory, not next to the original), and the plugin
     * is refused with nothing left behind */
    char *dir = temp_dir();
    copy_into(fx("fx_yaml_rel"), dir, "libfx_yaml_rel.so");
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s/libfx_yaml_rel.so", dir);
    ctx = bare_ctx();
    nops = opr_op_count(ctx);
    ck_assert_int_eq(opr_plugin_load(ctx, copy), OPR_ERR_IO);
    char want[2 * PATH_MAX];
    snprintf(want, sizeof want, "fx_yaml_rel: load_yaml of fx_yaml_rel_ops.yaml in %s failed", real_path(dir));
    ck_assert_msg(strstr(opr_last_error(), want), "'%s' lacks '%s'", opr_last_error(), want);
    ck_assert_int_eq(opr_op_count(ctx), nops);
    tu_ctx_free(ctx);

    /* with the YAML beside it, the copy loads (a new context: a refusal is final) */
    static const char yaml[] = "- name: fx_rel_sq(Tensor self) -> Tensor\n  shape: sizes(self)\n";
    write_file(dir, "fx_yaml_rel_ops.yaml", yaml, sizeof yaml - 1, 0644);
    ctx = bare_ctx();
    load_ok(ctx, copy);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "fx_rel_sq"));
    tu_ctx_free(ctx);

    /* in process: relative to the directory given */
    static const char ip_yaml[] = "- name: ip_neg(Tensor self) -> Tensor\n  shape: sizes(self)\n";
    write_file(dir, "ip_ops.yaml", ip_yaml, sizeof ip_yaml - 1, 0644);
    ctx = bare_ctx();
    ck_assert_int_eq(opr_plugin_register(ctx, init_relative_yaml, NULL), OPR_ERR_INVALID); /* no dir */
    ck_assert_int_eq(opr_plugin_register(ctx, init_relative_yaml, dir), OPR_OK);
    a = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU);
    args[0] = opr_v_tensor(a);
    r = tu_call1(ctx, "ip_neg", args, 1);
    expect_values(r, (double[]){-1.5, 2, -3}, 3);
    opr_tensor_release(r);
    opr_tensor_release(a);
    tu_ctx_free(ctx);
    remove_dir(dir, (const char *const[]){"libfx_yaml_rel.so", "fx_yaml_rel_ops.yaml", "ip_ops.yaml", NULL});
}
END_TEST

/* ------------------------------------------------------------------ device contract */

START_TEST(test_device_without_copy_warned)
{
    log_capture got = {0};
    opr_log_set(capture_log, &got);
    opr_ctx *ctx = bare_ctx();
    int rc = opr_plugin_register(ctx, init_weak_devices, NULL);
    opr_log_set(NULL, NULL);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    const char *no_copy = "device 'ipnocopy' has no copy_ kernel: strided tensors on it cannot be copied, made "
                          "contiguous or read back, and view ops do not count as runnable there";
    const char *half = "device 'iphalf': its copy_ kernel lacks f64, which its other kernels handle: strided "
                       "tensors of those dtypes cannot be copied there";
    char want[1024];
    snprintf(want, sizeof want, "%s; %s", no_copy, half);
    ck_assert_str_eq(last_candidate(ctx).why, want);
    ck_assert_int_eq(got.n, 2); /* one warning per device */
    ck_assert_int_eq(got.level, OPR_LOG_WARN);
    ck_assert_str_eq(got.source, "ip_weak");
    snprintf(want, sizeof want, "plugin (in-process): %s", half);
    ck_assert_str_eq(got.message, want);

    /* runnable counts: view ops need copy_ on a device other than cpu */
    opr_device nc, hf;
    ck_assert_int_eq(opr_device_parse(ctx, "ipnocopy", &nc), OPR_OK);
    ck_assert_int_eq(opr_device_parse(ctx, "iphalf", &hf), OPR_OK);
    const opr_op *transpose = opr_op_find(ctx, "transpose");
    ck_assert(!opr_op_has_kernel(transpose, nc.type));
    ck_assert(opr_op_has_kernel(transpose, hf.type));
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "neg"), nc.type));

    /* and a view on it cannot be read back, with a clear error */
    float v[4] = {1, 2, 3, 4};
    opr_tensor *h = opr_tensor_from_data(ctx, OPR_F32, 2, (int64_t[]){2, 2}, v, OPR_CPU);
    opr_tensor *a = opr_tensor_to(h, nc);
    ck_assert_ptr_nonnull(a);
    opr_tensor *at = opr_tensor_transpose(a, 0, 1);
    ck_assert_ptr_nonnull(at);
    ck_assert_ptr_null(opr_tensor_contiguous(at));
    ck_assert_str_eq(opr_last_error(), "copy_: no kernel for device ipnocopy: no loaded plugin registers copy_ there");
    opr_tensor_release(at);
    opr_tensor_release(a);
    opr_tensor_release(h);
    tu_ctx_free(ctx);
}
END_TEST

/* The CPU fallback: exp and mul have no kernel on ipdev, so they run on the CPU with
 * copies, forward and backward, reported once each; in-place ops do not fall back;
 * the plan marks it; opr_cpu_fallback_set turns it off. */
START_TEST(test_cpu_fallback)
{
    opr_ctx *ctx = tu_ctx();
    log_capture logs = {0};
    opr_log_set(capture_log, &logs);
    ck_assert_int_eq(opr_plugin_register(ctx, init_ipdev, NULL), OPR_OK);
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, "ipdev", &dev), OPR_OK);
    const double v[3] = {0.5, -1, 2};
    opr_tensor *h = vec(ctx, OPR_F64, v, 3), *x = opr_tensor_to(h, dev);
    ck_assert_int_eq(opr_set_requires_grad(x, true), OPR_OK);
    opr_value a = opr_v_tensor(x);
    opr_tensor *y = tu_call1(ctx, "exp", &a, 1);
    ck_assert_int_eq(opr_tensor_device(y).type, dev.type);
    expect_values(y, (double[]){exp(0.5), exp(-1), exp(2)}, 3);
    ck_assert_int_eq(logs.n, 1);
    ck_assert_str_eq(logs.message, "exp: no kernel on device ipdev for f64: running on the cpu with copies in and out "
                                   "(reported once; opr_cpu_fallback_set(ctx, false) makes it an error)");
    opr_tensor *y2 = tu_call1(ctx, "exp", &a, 1);
    ck_assert_int_eq(logs.n, 1); /* once per (op, device type) */
    /* backward: exp's formula mul(grad, result) falls back too, on the device tensors */
    opr_tensor *gx = NULL, *ones_h = vec(ctx, OPR_F64, (double[]){1, 1, 1}, 3), *ones = opr_tensor_to(ones_h, dev);
    opr_tensor_release(ones_h);
    ck_assert_msg(opr_autograd_grad(&y, &ones, 1, &x, 1, &gx, NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_device(gx).type, dev.type);
    expect_values(gx, (double[]){exp(0.5), exp(-1), exp(2)}, 3);
    ck_assert_int_eq(logs.n, 2);
    ck_assert(strstr(logs.message, "mul: no kernel on device ipdev for f64"));
    /* the plan says which formulas fall back */
    char buf[4096];
    const char *rg[1] = {"self"};
    ck_assert_int_eq(opr_plan_explain(opr_op_find(ctx, "exp"), &a, 1, rg, 1, buf, sizeof buf), OPR_OK);
    ck_assert_msg(strstr(buf, "falls back to the cpu (no kernel on this device): mul"), "%s", buf);
    /* the device's own kernel still runs (neg is scaled by 10 on ipdev) */
    opr_tensor *n = tu_call1(ctx, "neg", &a, 1);
    expect_values(n, (double[]){-5, 10, -20}, 3);
    /* in place: never (the result must be the device tensor itself) */
    opr_tensor *d = opr_tensor_to(h, dev);
    opr_value fa[2] = {opr_v_tensor(d), opr_v_double(1)};
    tu_expect_fail(ctx, "fill_", fa, 2, 1, OPR_ERR_NOT_FOUND, "fill_: no kernel for device ipdev");
    /* off */
    ck_assert(opr_cpu_fallback_set(ctx, false));
    tu_expect_fail(ctx, "exp", &a, 1, 1, OPR_ERR_NOT_FOUND, "exp: no kernel for device ipdev");
    ck_assert(!opr_cpu_fallback_set(ctx, true));
    opr_log_set(NULL, NULL);
    opr_tensor *r[] = {h, x, y, y2, gx, ones, n, d};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) opr_tensor_release(r[i]);
    tu_ctx_free(ctx);
}
END_TEST

static Suite *register_suite(void)
{
    Suite *s = suite_create("register");
    TCase *t = tcase_create("precedence");
    tcase_add_test(t, test_fill_only_missing_dtypes);
    tcase_add_test(t, test_explicit_override_per_dtype);
    tcase_add_test(t, test_override_loaded_first);
    tcase_add_test(t, test_override_outside_dtypes_refused);
    tcase_add_test(t, test_duplicate_device_names_the_other_plugin);
    suite_add_tcase(s, t);
    t = tcase_create("in_process");
    tcase_add_test(t, test_in_process_plugin);
    tcase_add_test(t, test_cpu_fallback);
    tcase_add_test(t, test_in_process_same_validation_as_files);
    tcase_add_test(t, test_plugin_yaml_relative_and_string);
    tcase_add_test(t, test_device_without_copy_warned);
    suite_add_tcase(s, t);
    return s;
}


int main(void) { return tu_run(register_suite()); }
