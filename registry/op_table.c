/* The op table of a context and the public op accessors. Lookups by name take the
 * registry lock; opr_call never does (it holds the op pointer). */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

int registry_new(opr_ctx *ctx)
{
    ctx->reg = calloc(1, sizeof *ctx->reg);
    return ctx->reg ? OPR_OK : opr_fail(OPR_ERR_NOMEM, "out of memory creating the registry");
}

void registry_free(opr_ctx *ctx)
{
    if (!ctx->reg) return;
    for (int i = 0; i < ctx->reg->n; i++) op_free(ctx->reg->ops[i]);
    free(ctx->reg->ops);
    free(ctx->reg->errors);
    free(ctx->reg);
    ctx->reg = NULL;
}

opr_op *registry_find(const opr_ctx *ctx, const char *name)
{
    for (int i = 0; i < ctx->reg->n; i++)
        if (!strcmp(ctx->reg->ops[i]->name, name)) return ctx->reg->ops[i];
    return NULL;
}

const opr_op *registry_engine_op(opr_ctx *ctx, int which)
{
    static const char *const names[ENGINE_OP_COUNT] = {"add"};
    opr_op *op = atomic_load_explicit(&ctx->reg->engine_ops[which], memory_order_acquire);
    if (op) return op;
    pthread_mutex_lock(&ctx->lock);
    op = registry_find(ctx, names[which]);
    pthread_mutex_unlock(&ctx->lock);
    if (!op) opr_fail(OPR_ERR_NOT_FOUND, "the autograd engine needs the '%s' op", names[which]);
    else atomic_store_explicit(&ctx->reg->engine_ops[which], op, memory_order_release);
    return op;
}

int registry_add(opr_ctx *ctx, opr_op *op)
{
    opr_registry *r = ctx->reg;
    if (registry_find(ctx, op->name))
        return opr_fail(OPR_ERR_INVALID, "%s:%d:1: op '%s' is already defined", op->file, op->line, op->name);
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 64;
        opr_op **ops = realloc(r->ops, (size_t)cap * sizeof *ops);
        if (!ops) return opr_fail(OPR_ERR_NOMEM, "out of memory growing the op table");
        r->ops = ops;
        r->cap = cap;
    }
    op->ctx = ctx;
    r->ops[r->n++] = op;
    return OPR_OK;
}

void registry_note_error(opr_ctx *ctx, const char *msg)
{
    opr_registry *r = ctx->reg;
    size_t n = strlen(msg);
    char *e = realloc(r->errors, r->errors_len + n + 2);
    if (!e) return;
    memcpy(e + r->errors_len, msg, n);
    e[r->errors_len + n] = '\n';
    e[r->errors_len + n + 1] = '\0';
    r->errors = e;
    r->errors_len += n + 1;
}

const char *opr_registry_errors(const opr_ctx *ctx)
{
    return ctx && ctx->reg && ctx->reg->errors ? ctx->reg->errors : "";
}

const opr_op *opr_op_find(const opr_ctx *ctx, const char *name)
{
    if (!ctx || !name) { opr_fail(OPR_ERR_INVALID, "opr_op_find: NULL argument"); return NULL; }
    pthread_mutex_lock((pthread_mutex_t *)&ctx->lock);
    opr_op *op = registry_find(ctx, name);
    pthread_mutex_unlock((pthread_mutex_t *)&ctx->lock);
    if (!op) opr_fail(OPR_ERR_NOT_FOUND, "no op named '%s'", name);
    return op;
}

int opr_op_count(const opr_ctx *ctx) { return ctx && ctx->reg ? ctx->reg->n : 0; }

const opr_op *opr_op_at(const opr_ctx *ctx, int i)
{
    if (!ctx || i < 0 || i >= ctx->reg->n) { opr_fail(OPR_ERR_INVALID, "opr_op_at: index %d out of range", i); return NULL; }
    return ctx->reg->ops[i];
}

const char *opr_op_name(const opr_op *op) { return op ? op->name : NULL; }
const char *opr_op_schema(const opr_op *op) { return op ? op->schema : NULL; }
int opr_op_num_args(const opr_op *op) { return op ? op->nargs : -1; }
int opr_op_num_outputs(const opr_op *op) { return op ? op->nout : -1; }

const char *opr_op_arg_name(const opr_op *op, int i)
{
    return op && i >= 0 && i < op->nargs ? op->args[i].name : NULL;
}

int opr_op_arg_kind(const opr_op *op, int i)
{
    static const opr_value_kind kinds[] = {
        [ARG_TENSOR] = OPR_V_TENSOR, [ARG_TENSOR_LIST] = OPR_V_TENSOR_LIST, [ARG_INT] = OPR_V_INT,
        [ARG_FLOAT] = OPR_V_DOUBLE, [ARG_BOOL] = OPR_V_BOOL, [ARG_INT_LIST] = OPR_V_INT_LIST, [ARG_STR] = OPR_V_STRING,
    };
    return op && i >= 0 && i < op->nargs ? (int)kinds[op->args[i].type] : -1;
}

bool opr_op_supports_dtype(const opr_op *op, opr_dtype dtype)
{
    return op && (unsigned)dtype < OPR_DTYPE_COUNT && (op->dtypes & OPR_DTYPE_BIT(dtype));
}

bool opr_op_has_kernel(const opr_op *op, int device_type)
{
    if (!op || device_type < 0 || device_type >= OPR_MAX_DEVICE_TYPES) return false;
    return op->view != VIEW_NONE || atomic_load(&((opr_op *)op)->kernels[device_type]) != NULL;
}
