/* libFuzzer harness: the input as an op definition file, through
 * opr_registry_load_yaml on a temporary file (the file reader, then the same loader
 * as fuzz_yaml_string, NUL bytes included), in a context holding only the built-in
 * ops and the CPU plugin, and every op it added run as fuzz_yaml_string runs them. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char path[4096];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) { /* one file per process, rewritten for each input */
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/opreg_fuzz_%ld.yaml", dir && dir[0] ? dir : "/tmp", (long)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f)) abort();
    opr_ctx *ctx = fz_yaml_ctx();
    int first = opr_op_count(ctx), n = 0;
    opr_registry_load_yaml(ctx, path, &n);
    if (n > 0) fz_exercise_ops(ctx, first);
    fz_yaml_done(ctx, first, n);
    return 0;
}
