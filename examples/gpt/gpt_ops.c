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
        OP(add), OP(sub), OP(mul), OP(div), OP(neg), OP(sqrt), OP(tanh), OP(mean), OP(sum), OP(linear),
        OP(matmul), OP(softmax), OP(log_softmax), OP(gather), OP(index_select), OP(reshape), OP(transpose),
        OP(contiguous), OP(narrow), OP(unsqueeze), OP(where), OP(arange), OP(ge),
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

opr_tensor *gpt_scalar(const opr_tensor *like, double v)
{
    if (!like) return NULL;
    const float f = (float)v;
    const opr_dtype dt = opr_tensor_dtype(like);
    if (dt != OPR_F32 && dt != OPR_F64) {
        gpt_fail(OPR_ERR_INVALID, "gpt: a constant like a %s tensor: the model computes in f32 or f64", opr_dtype_name(dt));
        return NULL;
    }
    opr_tensor *t = opr_tensor_from_data(opr_tensor_ctx(like), dt, 0, NULL, dt == OPR_F32 ? (const void *)&f : (const void *)&v,
                                         opr_tensor_device(like));
    if (!t) gpt_fail(OPR_ERR_NOMEM, "gpt: constant %g: %s", v, opr_last_error());
    return t;
}

void gpt_release(opr_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) opr_tensor_release(ts[i]);
}
