/* Older minors of ABI 2 keep loading: plugins built against 2.0 and 2.1 (fixtures
 * fx_abi20 and fx_abi21, whose structs stop at those minors' sizes) load into this host,
 * are listed with the minor they declared, and their device and kernels work; the
 * fields a newer minor added read as zero (no OPR_DEVICE_HOST_MEMORY: canaries only). */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

#ifndef OPREG_FIXTURE_DIR
#error "OPREG_FIXTURE_DIR must be defined (tests/fixtures/CMakeLists.txt)"
#endif

static void load_and_run(const char *file, const char *name, unsigned minor, const char *device)
{
    opr_ctx *ctx = tu_ctx();
    char path[512];
    snprintf(path, sizeof path, "%s/old_abi/%s", OPREG_FIXTURE_DIR, file);
    ck_assert_msg(opr_plugin_load(ctx, path) == OPR_OK, "%s: %s", path, opr_last_error());
    bool found = false;
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        ck_assert_int_eq(opr_plugin_candidate_get(ctx, i, &c), OPR_OK);
        if (!c.name || strcmp(c.name, name)) continue;
        found = true;
        ck_assert_msg(c.loaded, "%s: %s", name, c.why ? c.why : "");
        ck_assert_uint_eq(c.abi_major, 2);
        ck_assert_uint_eq(c.abi_minor, minor);
    }
    ck_assert(found);
    opr_device dev;
    ck_assert_int_eq(opr_device_parse(ctx, device, &dev), OPR_OK);
    float v[3] = {1, -2, 3}, got[3];
    opr_tensor *x = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){3}, v, dev);
    ck_assert_ptr_nonnull(x);
    for (int guards = 0; guards < 2; guards++) { /* guard mode on a 2.0 device: canaries */
        opr_kernel_guards_set(ctx, guards);
        opr_tensor *y = tu_call1(ctx, "neg", (opr_value[]){opr_v_tensor(x)}, 1);
        ck_assert_int_eq(opr_tensor_copy_to_host(y, got, sizeof got), OPR_OK);
        for (int k = 0; k < 3; k++) ck_assert(got[k] == -v[k]);
        if (guards) ck_assert_int_eq(opr_kernel_guard_overrun((const char *)opr_tensor_data(y) + 3 * sizeof(float) + 64), -1);
        opr_tensor_release(y);
    }
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}

START_TEST(test_abi_2_0_plugin_loads) { load_and_run("libfx_abi20.so", "fx_abi20", 0, "fxold20"); }
END_TEST

START_TEST(test_abi_2_1_plugin_loads) { load_and_run("libfx_abi21.so", "fx_abi21", 1, "fxold21"); }
END_TEST

int main(void)
{
    Suite *s = suite_create("abi_compat");
    TCase *tc = tcase_create("old_minors");
    tcase_add_test(tc, test_abi_2_0_plugin_loads);
    tcase_add_test(tc, test_abi_2_1_plugin_loads);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
