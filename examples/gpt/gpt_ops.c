/* Op lookup, the call helper and errors of the GPT example. */
#include "gpt_ops.h"

#include <stddef.h>
#include <stdio.h>

static _Thread_local char error_text[1024];

opr_status gpt_fail(opr_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return status;
}

const char *gpt_error(void) { return error_text; }

opr_status gpt_ops_init(opr_ctx *ctx, gpt_ops *ops)
{
    static const struct {
        const char *name;
        size_t offset;
    } table[] = {
#define OP(n) {#n, offsetof(gpt_ops, n)}
        OP(add),       OP(linear), OP(reshape), OP(transpose), OP(contiguous), OP(split),  OP(arange),
        OP(embedding), OP(layer_norm), OP(gelu), OP(dropout), OP(scaled_dot_product_attention),
        OP(cross_entropy),
#undef OP
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const opr_op *op = opr_op_find(ctx, table[i].name);
        if (!op) return gpt_fail(OPR_ERR_NOT_FOUND, "gpt: the registry has no op '%s': %s", table[i].name, opr_last_error());
        *(const opr_op **)(void *)((char *)ops + table[i].offset) = op;
    }
    return OPR_OK;
}

opr_tensor *gpt_call(const opr_op *op, const opr_value *args, int nargs)
{
    for (int i = 0; i < nargs; i++)
        if (args[i].kind == OPR_V_TENSOR && !args[i].u.t) return NULL;
    opr_tensor *out = NULL;
    if (opr_call(op, args, nargs, &out, 1)) gpt_fail(OPR_ERR_INVALID, "%s", opr_last_error());
    return out;
}

void gpt_release(opr_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) opr_tensor_release(ts[i]);
}
