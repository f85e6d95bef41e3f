/* libFuzzer harness: the input as a captured program file (docs/program-format.md),
 * through opr_program_load_buffer in a context with the built-in ops and the CPU
 * plugin. A file is untrusted: every input must be refused with an error or loaded,
 * never crash, leak or read out of bounds. A loaded program is not run (a valid file
 * may ask for any amount of work); loading already resolves every op and checks every
 * reference and argument kind. */
#include "fuzz_common.h"

#include <opreg/program.h>

#include <stdlib.h>

static opr_ctx *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fz_ctx_new(true); /* loading a program adds nothing to the context */
    opr_program *p = NULL;
    if (!opr_program_load_buffer(ctx, data, size, NULL, &p)) opr_program_free(p);
    return 0;
}
