/* The ops the GPT example calls, looked up once by name (as a PyTorch program imports
 * torch), a call helper that lets a chain of calls be written without a check after
 * each one, and the example's error message. Everything here uses only the public API
 * (opreg/opreg.h). */
#ifndef OPREG_EXAMPLE_GPT_OPS_H
#define OPREG_EXAMPLE_GPT_OPS_H

#include <opreg/opreg.h>

#include <stdarg.h>

typedef struct gpt_ops {
    const opr_op *add, *linear, *reshape, *transpose, *contiguous, *split, *arange, *embedding, *layer_norm, *gelu,
        *dropout, *scaled_dot_product_attention, *cross_entropy;
} gpt_ops;

/* Finds every op of gpt_ops in ctx. OPR_ERR_NOT_FOUND naming the first one missing. */
opr_status gpt_ops_init(opr_ctx *ctx, gpt_ops *ops);

/* opr_call of an op with one output. A NULL tensor among the arguments means an
 * earlier call of the chain failed: nothing runs and NULL comes back, the first
 * failure's message staying in gpt_error(). On failure of this call, NULL with
 * opr_last_error() copied to gpt_error(). */
opr_tensor *gpt_call(const opr_op *op, const opr_value *args, int nargs);
#define GPT_CALL(op, ...)                                                                                  \
    gpt_call((op), (opr_value[]){__VA_ARGS__}, (int)(sizeof((opr_value[]){__VA_ARGS__}) / sizeof(opr_value)))

/* Releases n tensors (NULLs allowed). */
void gpt_release(opr_tensor **ts, int n);
#define GPT_RELEASE(...)                                                                                   \
    gpt_release((opr_tensor *[]){__VA_ARGS__}, (int)(sizeof((opr_tensor *[]){__VA_ARGS__}) / sizeof(opr_tensor *)))

/* Records a failure: the message (printf-style) becomes gpt_error(); returns status. */
opr_status gpt_fail(opr_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message of this thread's last failure in the example's code, "" when none. */
const char *gpt_error(void);

#endif
