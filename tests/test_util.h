/* Helpers shared by the test suites: a context with the build tree's plugins, random
 * tensors, and comparisons. */
#ifndef OPREG_TEST_UTIL_H
#define OPREG_TEST_UTIL_H

#include <check.h>
#include <opreg/opreg.h>

/* Context with the built-in YAML and the build tree's plugins (as set by ctest's
 * environment); fails the test if creation fails. */
opr_ctx *tu_ctx(void);
/* Frees ctx and asserts no tensor was leaked. */
void tu_ctx_free(opr_ctx *ctx);

/* Reproducible uniform random numbers in [lo, hi). */
void tu_seed(uint64_t seed);
double tu_uniform(double lo, double hi);

/* New CPU tensor of random values in [lo, hi) (f32/f64), or [lo, hi) integers (i64),
 * or random 0/1 (bool). */
opr_tensor *tu_rand(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, double lo, double hi);
/* New CPU f64 tensor holding v (row-major); fails the test if it cannot be made. */
opr_tensor *tu_f64(opr_ctx *ctx, int ndim, const int64_t *shape, const double *v);
/* New CPU f64 tensor whose element i (row-major) is i: each result element of a view
 * or a gather then names where it came from. */
opr_tensor *tu_iota(opr_ctx *ctx, int ndim, const int64_t *shape);
/* Copies any tensor to a freshly malloc'd f64 array (row-major); caller frees. */
double *tu_to_f64(const opr_tensor *t);

/* Calls op by name with one output; fails the test with opr_last_error() on error. */
opr_tensor *tu_call1(opr_ctx *ctx, const char *op, const opr_value *args, int nargs);
/* Expects the call to fail with `status`, and the message to contain `needle`. */
void tu_expect_fail(opr_ctx *ctx, const char *op, const opr_value *args, int nargs, int nres, int status,
                    const char *needle);

/* Whether Tensor argument a of op may require grad in a call: not one the op writes in
 * place (batch norm's running statistics); any of a composite op without derivative
 * entries (its parts record); else one its derivative candidates name
 * ("self, mat2 (kernel mm_backward)"). */
bool tu_arg_differentiable(const opr_op *op, int a);

/* Runs a suite and returns the process exit status. */
int tu_run(Suite *s);

#endif
