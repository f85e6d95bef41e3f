/* libFuzzer harness: the input as op definitions, through
 * opr_registry_load_yaml_string, in a context holding only the built-in ops and the
 * CPU plugin (so that every input behaves the same whatever ran before it: an op name
 * taken by an earlier input would otherwise be refused as a duplicate). Every op the
 * input added is then run: its samples, a call, its gradient plans and backward, so
 * that shapes, checks, costs and formulas are evaluated too. */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    opr_ctx *ctx = fz_yaml_ctx();
    int first = opr_op_count(ctx), n = 0;
    opr_registry_load_yaml_string(ctx, text, "fuzz.yaml", &n);
    if (n > 0) fz_exercise_ops(ctx, first);
    fz_yaml_done(ctx, first, n);
    free(text);
    return 0;
}
