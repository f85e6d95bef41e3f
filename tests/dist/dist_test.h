/* What the programs run under mpirun (test_dist.c, test_ddp.c) share: the context, the
 * world, and CHECK, which counts a check and prints a failure with the rank. Each
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

/* The verdict line; the exit status. */
static int report(void)
{
    if (failures) printf("rank %d/%d: %d of %d checks failed\n", world.rank, world.size, failures, checks);
    else printf("rank %d/%d: all %d checks passed\n", world.rank, world.size, checks);
    fflush(stdout);
    return failures ? 1 : 0;
}

#endif
