/* The PyTorch side of the benchmarks that compare with Python (fast_mode, jagged,
 * vmap): runs bench/SCRIPT with the first python3 that can import `module`
 * ($OPREG_PYTHON, python3 on PATH, then /usr/bin/python3, Debian's python3-torch) and
 * reads the `NAME VALUE` lines it prints. With `preload` (a path), that library is
 * preloaded into Python (bench/memhook.c: host memory counted for PyTorch).
 * Header-only (static inline), for the C drivers. */
#ifndef OPREG_BENCH_PYTHON_H
#define OPREG_BENCH_PYTHON_H

#include "bench_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills vals[i] for names[i] (n of them) from `script ARGS` (args: already quoted as
 * the shell needs). Returns 0 when every name was printed and the script succeeded,
 * -1 otherwise (no such python, or it failed). */
static inline int bench_python_figures(const char *module, const char *script, const char *args, const char *preload,
                                       const char *const *names, double *vals, int n)
{
    const char *pys[] = {getenv("OPREG_PYTHON"), "python3", "/usr/bin/python3"};
    for (int p = 0; p < 3; p++) {
        if (!pys[p]) continue;
        size_t len = strlen(args) + 1024;
        char *cmd = malloc(len);
        if (!cmd) return -1;
        snprintf(cmd, len, "'%s' -c 'import %s' 2>/dev/null && %s%s%s'%s' '%s/%s' %s 2>/dev/null", pys[p], module,
                 preload ? "LD_PRELOAD='" : "", preload ? preload : "", preload ? "' " : "", pys[p],
                 OPREG_BENCH_SOURCE_DIR, script, args);
        FILE *f = popen(cmd, "r");
        free(cmd);
        if (!f) continue;
        char name[128];
        double v;
        int got = 0;
        while (fscanf(f, "%127s %lf", name, &v) == 2)
            for (int i = 0; i < n; i++)
                if (!strcmp(name, names[i])) { vals[i] = v; got++; }
        if (pclose(f) == 0 && got == n) return 0;
    }
    return -1;
}

#endif
