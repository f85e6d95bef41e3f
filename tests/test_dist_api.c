/* Process groups in one process: the provider's registration (ABI 2.2) and the public
 * API's errors. A fake provider counts what the host asks; the collectives themselves
 * run across processes in tests/dist (label dist). */
#include "test_util.h"

#include <opreg/dist.h>
#include <opreg/plugin.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int world_calls, set_timeouts;
static double last_timeout;

static int f_world(void *data, int32_t *rank, int32_t *size, char *why, size_t len)
{
    (void)data; (void)why; (void)len;
    world_calls++;
    *rank = 0;
    *size = 1;
    return OPR_OK;
}
static int f_split(void *data, int64_t g, int32_t color, int32_t key, int64_t *out, int32_t *rank, int32_t *size,
                   char *why, size_t len)
{
    (void)data; (void)g; (void)key;
    if (color < 0) { *out = -1; *rank = -1; *size = 0; return OPR_OK; }
    snprintf(why, len, "fake: no sub-groups");
    return OPR_ERR_UNSUPPORTED;
}
static int f_free(void *data, int64_t g) { (void)data; (void)g; return OPR_OK; }
static int f_timeout(void *data, double s) { (void)data; set_timeouts++; last_timeout = s; return OPR_OK; }
static int f_start(void *data, int64_t g, void *buf, int64_t n, opr_dtype dt, const char *op, int64_t *req, char *why,
                   size_t len)
{
    (void)data; (void)g; (void)buf; (void)n; (void)dt; (void)op; (void)req; (void)why; (void)len;
    return OPR_OK;
}
static int f_wait(void *data, int64_t req, char *why, size_t len) { (void)data; (void)req; (void)why; (void)len; return OPR_OK; }
static int f_finalize(void *data, char *why, size_t len) { (void)data; (void)why; (void)len; return OPR_OK; }

static opr_group_provider fake = {
    .struct_size = sizeof(opr_group_provider), .name = "fake", .world = f_world, .split = f_split,
    .group_free = f_free, .set_timeout = f_timeout, .all_reduce_start = f_start, .wait = f_wait,
    .finalize = f_finalize,
};
static bool break_it; /* register one without wait */

static int init_fake(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "fakegroups";
    self->version = "0";
    opr_group_provider p = fake;
    if (break_it) p.wait = NULL;
    return host->register_group_provider(self, &p);
}

static int init_second(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "moregroups";
    self->version = "0";
    return host->register_group_provider(self, &fake);
}

static opr_ctx *bare_ctx(void)
{
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    return ctx;
}

START_TEST(no_provider)
{
    opr_ctx *ctx = bare_ctx();
    char why[256];
    ck_assert(!opr_dist_available(ctx, why, sizeof why));
    ck_assert_msg(strstr(why, "no loaded plugin provides process groups"), "%s", why);
    opr_group g;
    ck_assert_int_eq(opr_dist_world(ctx, &g), OPR_ERR_NOT_FOUND);
    ck_assert_msg(strstr(opr_last_error(), "no process groups: no loaded plugin provides them"), "%s", opr_last_error());
    /* the collectives are defined, but have no kernel */
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1);
    tu_expect_fail(ctx, "all_reduce", (opr_value[]){opr_v_tensor(x)}, 1, 1, OPR_ERR_NOT_FOUND,
                   "all_reduce: no kernel for device cpu");
    opr_tensor_release(x);
    opr_ctx_free(ctx);
}
END_TEST

START_TEST(provider_registered_and_used)
{
    opr_ctx *ctx = bare_ctx();
    break_it = false;
    world_calls = set_timeouts = 0;
    ck_assert_int_eq(opr_plugin_register(ctx, init_fake, NULL), OPR_OK);
    char why[256];
    ck_assert(opr_dist_available(ctx, why, sizeof why));
    ck_assert_msg(strstr(why, "plugin fakegroups (fake)"), "%s", why);
    opr_group g;
    ck_assert_int_eq(opr_dist_world(ctx, &g), OPR_OK);
    ck_assert(g.id == 0 && g.rank == 0 && g.size == 1 && world_calls == 1);
    ck_assert_int_eq(opr_dist_set_timeout(ctx, 0), OPR_ERR_INVALID); /* refused before the provider */
    /* a collective must end: no infinite, NaN or astronomic time-out */
    const double endless[] = {INFINITY, NAN, 1e308, OPR_DIST_TIMEOUT_MAX_S * 2};
    for (size_t i = 0; i < sizeof endless / sizeof endless[0]; i++) {
        ck_assert_int_eq(opr_dist_set_timeout(ctx, endless[i]), OPR_ERR_INVALID);
        ck_assert_msg(strstr(opr_last_error(), "at most 604800 s"), "%s", opr_last_error());
    }
    ck_assert_int_eq(set_timeouts, 0);
    ck_assert_int_eq(opr_dist_set_timeout(ctx, 2.5), OPR_OK);
    ck_assert(set_timeouts == 1 && last_timeout == 2.5);
    opr_group sub;
    ck_assert_int_eq(opr_dist_split(ctx, &g, 0, 0, &sub), OPR_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(opr_last_error(), "opr_dist_split: fake: no sub-groups"), "%s", opr_last_error());
    ck_assert_int_eq(opr_dist_split(ctx, &g, -1, 0, &sub), OPR_OK);
    ck_assert(sub.id == -1 && sub.size == 0);
    /* a second provider is not used: its plugin's remark names the first */
    ck_assert_int_eq(opr_plugin_register(ctx, init_second, NULL), OPR_OK);
    ck_assert(opr_dist_available(ctx, why, sizeof why) && strstr(why, "fakegroups"));
    bool remarked = false;
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        opr_plugin_candidate_get(ctx, i, &c);
        if (c.name && !strcmp(c.name, "moregroups") && c.why)
            remarked = strstr(c.why, "its process groups (fake) are not used: plugin fakegroups provides them");
    }
    ck_assert(remarked);
    opr_ctx_free(ctx);
}
END_TEST

START_TEST(incomplete_provider_refused)
{
    opr_ctx *ctx = bare_ctx();
    break_it = true;
    ck_assert_int_eq(opr_plugin_register(ctx, init_fake, NULL), OPR_ERR_INVALID);
    opr_plugin_candidate c = {.struct_size = sizeof c};
    ck_assert_int_eq(opr_plugin_candidate_get(ctx, opr_plugin_candidate_count(ctx) - 1, &c), OPR_OK);
    ck_assert_msg(c.why && strstr(c.why, "register_group_provider: a NULL name or function"), "%s", c.why);
    ck_assert(!opr_dist_available(ctx, NULL, 0));
    break_it = false;
    opr_ctx_free(ctx);
}
END_TEST

/* all_reduce saves for backward only what its op's formula reads: nothing for sum and
 * mean, self and the result for max and min (no kernel needed to plan it). */
START_TEST(all_reduce_saves_by_op)
{
    opr_ctx *ctx = tu_ctx();
    const opr_op *op = opr_op_find(ctx, "all_reduce");
    ck_assert_ptr_nonnull(op);
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){8, 4}, OPR_CPU);
    const char *self_name = "self";
    static const struct { const char *op; uint64_t bytes; } want[] = {
        {"sum", 0}, {"max", 2 * 32 * sizeof(float)}, {"mean", 0}, {"min", 2 * 32 * sizeof(float)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        opr_value args[3] = {opr_v_tensor(x), opr_v_string(want[i].op), opr_v_int(0)};
        uint64_t bytes = 1;
        ck_assert_int_eq(opr_plan_saved_bytes(op, args, 3, &self_name, 1, &bytes), OPR_OK);
        ck_assert_msg(bytes == want[i].bytes, "all_reduce(%s) saves %llu bytes, want %llu", want[i].op,
                      (unsigned long long)bytes, (unsigned long long)want[i].bytes);
    }
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist_api");
    TCase *tc = tcase_create("groups");
    tcase_add_test(tc, no_provider);
    tcase_add_test(tc, provider_registered_and_used);
    tcase_add_test(tc, incomplete_provider_refused);
    tcase_add_test(tc, all_reduce_saves_by_op);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
