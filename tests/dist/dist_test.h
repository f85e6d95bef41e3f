/* What the programs run under mpirun (test_dist.c, test_dist_ports.c, test_ddp.c,
 * test_dist_faults.c) share: the context, the world, their start, and CHECK, which counts a check and prints a failure with the rank. Each
 * program prints "rank R/N: all K checks passed" (tests/dist/dist_check.sh reads it). */
#ifndef OPREG_TESTS_DIST_TEST_H
#define OPREG_TESTS_DIST_TEST_H

#include <opreg/dist.h>
#include <opreg/opreg.h>

#include <stdio.h>

static opr_ctx *ctx;
static opr_group world;
static int checks, failures;

#define CHECK(cond, ...)                                                                                            \
    do {                                                                                                            \
        checks++;                                                                                                   \
        if (!(cond)) {                                                                                              \
            failures++;                                                                                             \
            printf("rank %d/%d: FAIL %s:%d: ", world.rank, world.size, __FILE__, __LINE__);                         \
            printf(__VA_ARGS__);                                                                                    \
            printf("\n");                                                                                           \
        }                                                                                                           \
    } while (0)

/* Creates the context and joins the world; with a device name (--device cuda), *dev is
 * that device on ordinal rank % count and nothing falls back to the CPU (dev may be NULL
 * without one). 0, or 1 having printed why. */
static inline int dist_test_start(const char *device, opr_device *dev)
{
    ctx = opr_ctx_new(NULL);
    if (!ctx) { printf("FAIL: opr_ctx_new: %s\n", opr_last_error()); return 1; }
    char why[256];
    if (!opr_dist_available(ctx, why, sizeof why)) { printf("FAIL: %s\n", why); return 1; }
    if (opr_dist_world(ctx, &world)) { printf("FAIL: opr_dist_world: %s\n", opr_last_error()); return 1; }
    if (device) {
        if (opr_device_parse(ctx, device, dev)) { printf("FAIL: --device %s: %s\n", device, opr_last_error()); return 1; }
        int count = opr_device_type_ordinals(ctx, dev->type);
        dev->index = count > 0 ? world.rank % count : 0;
        opr_cpu_fallback_set(ctx, false);
    }
    return 0;
}

/* t moved to dev (t released); t itself on the CPU. */
static inline opr_tensor *dist_test_to(opr_tensor *t, opr_device dev)
{
    if (!t || dev.type == OPR_CPU.type) return t;
    opr_tensor *d = opr_tensor_to(t, dev);
    opr_tensor_release(t);
    return d;
}

/* The verdict line; the exit status. */
static int report(void)
{
    if (failures) printf("rank %d/%d: %d of %d checks failed\n", world.rank, world.size, failures, checks);
    else printf("rank %d/%d: all %d checks passed\n", world.rank, world.size, checks);
    fflush(stdout);
    return failures ? 1 : 0;
}

#endif
