/* Shared by the libFuzzer harnesses: the contexts they run in, and running whatever a
 * freshly loaded op offers (its samples, a call, its gradient plans). */
#ifndef OPREG_FUZZ_COMMON_H
#define OPREG_FUZZ_COMMON_H

#include <opreg/opreg.h>

#include <stddef.h>
#include <stdint.h>

/* A context with the built-in op definitions (read from the source tree) and, when
 * with_cpu is set, the CPU plugin of the build tree; no other discovery. Aborts when
 * it cannot be created: the harness could test nothing. */
opr_ctx *fz_ctx_new(bool with_cpu);
/* Frees ctx; aborts when tensors were left alive (a leak in the library or harness). */
void fz_ctx_free(opr_ctx *ctx);

/* The context for one op definition input (built-in ops, CPU plugin): the last one
 * again while inputs add no op to it (most fuzzed inputs are refused), else a fresh
 * one. */
opr_ctx *fz_yaml_ctx(void);
/* After an input loaded into fz_yaml_ctx() with n_loaded ops added (`first`: the op
 * count before): aborts when ops were added although none was reported (an entry half
 * registered); drops the context when it gained ops, so that the next input finds only
 * the built-in ones and behaves as it does when replayed alone. */
void fz_yaml_done(opr_ctx *ctx, int first, int n_loaded);

/* Runs every op from index `first` on: each sample (opr_op_sample_args), or arguments
 * made up from the schema when it has none; a call, the gradient plans for each
 * tensor input, and backward through its formulas. Errors are expected; crashes,
 * leaks and UB are what is looked for. */
void fz_exercise_ops(opr_ctx *ctx, int first);

#endif
