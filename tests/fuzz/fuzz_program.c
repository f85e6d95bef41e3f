/* libFuzzer harness: the input as a captured program file (docs/program-format.md),
 * through opr_program_load_buffer in a context with the built-in ops and the CPU
 * plugin. A file is untrusted: every input must be refused with an error or loaded,
 * never crash, leak or read out of bounds. A loaded program is not run (a valid file
 * may ask for any amount of work); loading already resolves every op and checks every
 * reference and argument kind.
 *
 * An input starting with '{' is taken as the graph's JSON alone and wrapped in a small
 * container (three f32 tensors, "input/0", "param/w", "ref/0"): the graph sits in the
 * container as an escaped string, which mutations of a whole file rarely keep valid, so
 * the graph reader is reached far more often this way. */
#include "fuzz_common.h"

#include <opreg/program.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

static const char tensors[] = "{\"input/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"param/w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                              "\"ref/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                              "\"__metadata__\":{\"opreg.program\":\"";

/* The container around graph (n bytes), escaped as a JSON string; *len its size. */
static uint8_t *wrap(const uint8_t *graph, size_t n, size_t *len)
{
    const size_t cap = 8 + sizeof tensors + 6 * n + 8 + 24;
    uint8_t *f = malloc(cap);
    if (!f) return NULL;
    char *h = (char *)f + 8;
    size_t k = (size_t)sprintf(h, "%s", tensors);
    for (size_t i = 0; i < n; i++) {
        if (graph[i] == '"' || graph[i] == '\\') h[k++] = '\\', h[k++] = (char)graph[i];
        else if (graph[i] < 0x20) k += (size_t)sprintf(h + k, "\\u%04x", graph[i]);
        else h[k++] = (char)graph[i];
    }
    k += (size_t)sprintf(h + k, "\"}}");
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)k >> (8 * i));
    static const float data[6] = {1, 2, 0.5f, -1, 1.5f, 1};
    memcpy(f + 8 + k, data, sizeof data);
    *len = 8 + k + sizeof data;
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fz_ctx_new(true); /* loading a program adds nothing to the context */
    uint8_t *wrapped = NULL;
    if (size && data[0] == '{') {
        if (!(wrapped = wrap(data, size, &size))) return 0;
        data = wrapped;
    }
    opr_program *p = NULL;
    if (!opr_program_load_buffer(ctx, data, size, NULL, &p)) opr_program_free(p);
    free(wrapped);
    return 0;
}
