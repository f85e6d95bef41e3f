/* test_dist_ports --torch FILE: torch.distributed's results (tests/dist/ports_torch.py,
 * "KEY RANK v0 v1 ..." a line) and the comparison of this rank's with them. Included
 * by test_dist_ports.c after its values() and N. */
#ifndef OPREG_TESTS_PORTS_TORCH_REF_H
#define OPREG_TESTS_PORTS_TORCH_REF_H

#include "dist_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* With --torch FILE: torch.distributed's results, "KEY RANK v0 v1 ..." a line. */
typedef struct torch_result {
    char key[48];
    int rank, n;
    double v[3 * N * 3];
} torch_result;
static torch_result *torch_ref;
static int ntorch, torch_compared;
static double torch_worst;

static bool read_torch_ref(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        torch_result *grown = realloc(torch_ref, sizeof *torch_ref * (size_t)(ntorch + 1));
        if (!grown) break;
        torch_ref = grown;
        torch_result *t = &torch_ref[ntorch];
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok || strlen(tok) >= sizeof t->key) continue;
        snprintf(t->key, sizeof t->key, "%s", tok);
        tok = strtok_r(NULL, " \n", &save);
        if (!tok) continue;
        t->rank = atoi(tok);
        t->n = 0;
        while ((tok = strtok_r(NULL, " \n", &save)) && t->n < (int)(sizeof t->v / sizeof t->v[0]))
            t->v[t->n++] = strtod(tok, NULL);
        ntorch++;
    }
    fclose(f);
    return ntorch > 0;
}

/* y (this rank's result of KEY on the world group) against torch.distributed's. */
static void torch_compare(const char *key, opr_tensor *y, opr_dtype dt)
{
    if (!torch_ref || dt == OPR_BOOL) return;
    const torch_result *t = NULL;
    for (int k = 0; k < ntorch && !t; k++)
        if (!strcmp(torch_ref[k].key, key) && torch_ref[k].rank == world.rank) t = &torch_ref[k];
    CHECK(t, "PyTorch's file has no %s for rank %d", key, world.rank);
    if (!t) return;
    int64_t n;
    double *got = values(y, &n), worst = 0;
    CHECK(n == t->n, "%s: %lld elements, PyTorch %d", key, (long long)n, t->n);
    for (int64_t i = 0; i < n && n == t->n; i++) worst = fmax(worst, fabs(got[i] - t->v[i]) / (1 + fabs(t->v[i])));
    CHECK(worst <= (dt == OPR_F32 ? 1e-5 : 1e-12), "%s: %g from PyTorch's", key, worst);
    torch_worst = fmax(torch_worst, worst);
    torch_compared++;
    free(got);
}

#endif
