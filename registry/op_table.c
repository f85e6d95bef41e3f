/* The op table of a context and the public op accessors. Readers (opr_op_find,
 * opr_op_count, opr_op_at, the autograd engine and the loaders' duplicate checks) take
 * no lock, so a thread may list or look up ops while another loads YAML or a plugin:
 * additions are serialised by ctx->lock, an entry is stored before the count that
 * makes it visible, and the slots never move (chunks allocated once, kept until the
 * context is freed). Ops are never freed before the context either: those of a plugin
 * whose init failed are retired, not freed, since a reader may hold one. */
#include "composite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int registry_new(opr_ctx *ctx)
{
    ctx->reg = calloc(1, sizeof *ctx->reg);
    if (!ctx->reg) return opr_fail(OPR_ERR_NOMEM, "out of memory creating the registry");
    pthread_mutex_init(&ctx->reg->errors_lock, NULL);
    return OPR_OK;
}

/* Slot i: chunk k holds the OPS_CHUNK0 << k entries from OPS_CHUNK0 * (2^k - 1) on. */
static _Atomic(opr_op *) *slot(const opr_registry *r, int i)
{
    unsigned pos = (unsigned)i / OPS_CHUNK0 + 1;
    int k = 31 - __builtin_clz(pos);
    return &r->chunks[k][i - OPS_CHUNK0 * ((1 << k) - 1)];
}

static opr_op *entry(const opr_registry *r, int i)
{
    return atomic_load_explicit(slot(r, i), memory_order_acquire);
}

void registry_free(opr_ctx *ctx)
{
    opr_registry *r = ctx->reg;
    if (!r) return;
    int n = atomic_load(&r->n);
    for (int i = 0; i < n; i++) op_free(entry(r, i));
    for (int i = 0; i < r->nretired; i++) op_free(r->retired[i]);
    for (int k = 0; k < OPS_NCHUNKS; k++) free(r->chunks[k]);
    free(r->retired);
    free(r->errors);
    pthread_mutex_destroy(&r->errors_lock);
    free(r);
    ctx->reg = NULL;
}

int registry_count(const opr_ctx *ctx) { return atomic_load_explicit(&ctx->reg->n, memory_order_acquire); }

/* Whether op is in the overload set `name` (len chars): "max" holds max and max.dim. */
static bool in_set(const opr_op *op, const char *name, size_t len)
{
    return (size_t)op->base_len == len && !strncmp(op->name, name, len);
}

/* Whether op answers to name exactly: its own name, or "gt.Tensor" for an op written
 * "gt" with `overload: Tensor`. */
static bool answers_to(const opr_op *op, const char *name)
{
    if (!strcmp(op->name, name)) return true;
    const char *dot = strchr(name, '.');
    return dot && op->overload && !op->name[op->base_len] && in_set(op, name, (size_t)(dot - name)) &&
           !strcmp(op->overload, dot + 1);
}

/* ------------------------------------------------------------------ the name index */

/* Every op is in the chain of its overload set (set_next, registration order), whose
 * first op is in the chain of its hash bucket (bucket_next). Links are published with
 * release stores under ctx->lock and read without a lock, like the table; an op
 * dropped by registry_truncate is unlinked but never freed before the context, so a
 * reader standing on it still finds its way on. */

static unsigned bucket_of(const char *name, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h % OPS_BUCKETS;
}

static opr_op *next_of(_Atomic(opr_op *) *link) { return atomic_load_explicit(link, memory_order_acquire); }

/* The name op is indexed under: its overload set's, or, for an op made without a
 * schema (a fused backward kernel's slot, base_len 0, in no set), its whole name. */
static size_t key_len(const opr_op *op) { return op->base_len ? (size_t)op->base_len : strlen(op->name); }

/* The first op indexed under `name` (len chars), or NULL. */
static opr_op *set_head(const opr_registry *r, const char *name, size_t len)
{
    for (opr_op *op = next_of((_Atomic(opr_op *) *)&r->buckets[bucket_of(name, len)]); op; op = next_of(&op->bucket_next))
        if (key_len(op) == len && !strncmp(op->name, name, len)) return op;
    return NULL;
}

static void index_add(opr_registry *r, opr_op *op)
{
    atomic_store_explicit(&op->set_next, NULL, memory_order_relaxed);
    atomic_store_explicit(&op->bucket_next, NULL, memory_order_relaxed);
    opr_op *head = set_head(r, op->name, key_len(op));
    _Atomic(opr_op *) *link = head ? &head->set_next : &r->buckets[bucket_of(op->name, key_len(op))];
    while (next_of(link)) link = head ? &next_of(link)->set_next : &next_of(link)->bucket_next; /* to the tail */
    atomic_store_explicit(link, op, memory_order_release);
}

/* Unlinks op, the newest of the ops left (registry_truncate drops from the end). */
static void index_remove(opr_registry *r, opr_op *op)
{
    opr_op *head = set_head(r, op->name, key_len(op));
    _Atomic(opr_op *) *link = head && head != op ? &head->set_next : &r->buckets[bucket_of(op->name, key_len(op))];
    bool in_chain_of_set = head && head != op;
    while (next_of(link) && next_of(link) != op)
        link = in_chain_of_set ? &next_of(link)->set_next : &next_of(link)->bucket_next;
    if (next_of(link) == op)
        atomic_store_explicit(link, in_chain_of_set ? next_of(&op->set_next) : next_of(&op->bucket_next),
                              memory_order_release);
}

/* The ops name may be: those of its set (up to a '.'), or one indexed under it whole. */
opr_op *registry_find_exact(const opr_ctx *ctx, const char *name)
{
    size_t base = strcspn(name, "."), whole = strlen(name);
    for (opr_op *op = set_head(ctx->reg, name, base); op; op = next_of(&op->set_next))
        if (answers_to(op, name)) return op;
    for (opr_op *op = whole != base ? set_head(ctx->reg, name, whole) : NULL; op; op = next_of(&op->set_next))
        if (answers_to(op, name)) return op;
    return NULL;
}

int registry_overloads(const opr_ctx *ctx, const char *name, const opr_op **out, int cap)
{
    int found = 0;
    for (const opr_op *op = set_head(ctx->reg, name, strlen(name)); op; op = next_of((_Atomic(opr_op *) *)&op->set_next)) {
        if (!op->base_len) continue; /* a kernel slot: in no overload set */
        if (found < cap && out) out[found] = op;
        found++;
    }
    return found;
}

opr_op *registry_find(const opr_ctx *ctx, const char *name)
{
    size_t base = strcspn(name, "."), whole = strlen(name);
    for (opr_op *op = set_head(ctx->reg, name, base); op; op = next_of(&op->set_next))
        if (!strcmp(op->name, name)) return op;
    for (opr_op *op = whole != base ? set_head(ctx->reg, name, whole) : NULL; op; op = next_of(&op->set_next))
        if (!strcmp(op->name, name)) return op;
    return NULL;
}

const opr_op *registry_engine_op(opr_ctx *ctx, int which)
{
    static const char *const names[ENGINE_OP_COUNT] = {
        [ENGINE_OP_ADD] = "add", [ENGINE_OP_RESHAPE] = "reshape", [ENGINE_OP_SEGMENT_EXPAND] = "segment_expand",
        [ENGINE_OP_JAGGED_TO_PADDED] = "jagged_to_padded", [ENGINE_OP_PADDED_TO_JAGGED] = "padded_to_jagged",
        [ENGINE_OP_EXPAND] = "expand", [ENGINE_OP_UNSQUEEZE] = "unsqueeze", [ENGINE_OP_NARROW] = "narrow",
        [ENGINE_OP_NARROW_SCATTER] = "narrow_scatter", [ENGINE_OP_NEW_ZEROS] = "new_zeros", [ENGINE_OP_MATMUL] = "matmul",
        [ENGINE_OP_TRANSPOSE] = "transpose", [ENGINE_OP_PERMUTE] = "permute", [ENGINE_OP_CONTIGUOUS] = "contiguous",
    };
    opr_op *op = atomic_load_explicit(&ctx->reg->engine_ops[which], memory_order_acquire);
    if (op) return op;
    op = registry_find(ctx, names[which]);
    if (!op) opr_fail(OPR_ERR_NOT_FOUND, "opreg itself needs the '%s' op (is the built-in YAML loaded?)", names[which]);
    else atomic_store_explicit(&ctx->reg->engine_ops[which], op, memory_order_release);
    return op;
}

int registry_add(opr_ctx *ctx, opr_op *op)
{
    opr_registry *r = ctx->reg;
    char full[256];
    snprintf(full, sizeof full, "%.*s.%s", op->base_len, op->name, op->overload ? op->overload : "");
    const opr_op *dup = registry_find_exact(ctx, op->name);
    if (!dup && op->overload) dup = registry_find_exact(ctx, full);
    if (dup)
        return opr_fail(OPR_ERR_INVALID, "%s:%d:1: op '%s' is already defined (as '%s', %s:%d)", op->file, op->line,
                        op->overload ? full : op->name, dup->name, dup->file ? dup->file : "?", dup->line);
    int n = atomic_load_explicit(&r->n, memory_order_relaxed);
    int k = 31 - __builtin_clz((unsigned)n / OPS_CHUNK0 + 1);
    if (k >= OPS_NCHUNKS) return opr_fail(OPR_ERR_NOMEM, "the op table is full");
    if (!r->chunks[k] && !(r->chunks[k] = calloc((size_t)OPS_CHUNK0 << k, sizeof *r->chunks[k])))
        return opr_fail(OPR_ERR_NOMEM, "out of memory growing the op table");
    op->ctx = ctx;
    atomic_store_explicit(slot(r, n), op, memory_order_release);
    atomic_store_explicit(&r->n, n + 1, memory_order_release);
    index_add(r, op);
    return OPR_OK;
}

void registry_truncate(opr_ctx *ctx, int n)
{
    opr_registry *r = ctx->reg;
    int cur = registry_count(ctx);
    if (n >= cur) return;
    atomic_store_explicit(&r->n, n, memory_order_release);
    for (int i = cur - 1; i >= n; i--) index_remove(r, entry(r, i)); /* newest first: each is a chain's tail */
    int need = r->nretired + (cur - n);
    if (need > r->cap_retired) {
        int cap = need > 2 * r->cap_retired ? need : 2 * r->cap_retired;
        opr_op **grown = realloc(r->retired, (size_t)cap * sizeof *grown);
        if (!grown) return; /* the dropped ops leak: freeing them could pull them from under a reader */
        r->retired = grown;
        r->cap_retired = cap;
    }
    for (int i = n; i < cur; i++) r->retired[r->nretired++] = entry(r, i);
}

const opr_op *opr_op_find(const opr_ctx *ctx, const char *name)
{
    if (!ctx || !name) { opr_fail(OPR_ERR_INVALID, "opr_op_find: NULL argument"); return NULL; }
    opr_op *op = registry_find_exact(ctx, name);
    const opr_op *first = NULL;
    if (!op && !strchr(name, '.') && registry_overloads(ctx, name, &first, 1)) return first;
    if (!op) opr_fail(OPR_ERR_NOT_FOUND, "no op named '%s'", name);
    return op;
}

int opr_op_overloads(const opr_ctx *ctx, const char *name, const opr_op **out, int cap)
{
    if (!ctx || !name || cap < 0 || (cap && !out)) return opr_fail(OPR_ERR_INVALID, "opr_op_overloads: NULL argument");
    const char *dot = strchr(name, '.');
    char base[128];
    if (dot) { /* "max.dim": the set of max */
        snprintf(base, sizeof base, "%.*s", (int)(dot - name), name);
        name = base;
    }
    return registry_overloads(ctx, name, out, cap);
}

const char *opr_op_overload_name(const opr_op *op) { return op ? op->overload : NULL; }

int opr_op_count(const opr_ctx *ctx) { return ctx && ctx->reg ? registry_count(ctx) : 0; }

const opr_op *opr_op_at(const opr_ctx *ctx, int i)
{
    if (!ctx || !ctx->reg || i < 0 || i >= registry_count(ctx)) {
        opr_fail(OPR_ERR_INVALID, "opr_op_at: index %d out of range", i);
        return NULL;
    }
    return entry(ctx->reg, i);
}

const char *opr_op_name(const opr_op *op) { return op ? op->name : NULL; }
const char *opr_op_schema(const opr_op *op) { return op ? op->schema : NULL; }
int opr_op_num_args(const opr_op *op) { return op ? op->nargs : -1; }

bool opr_op_output_differentiable(const opr_op *op, int k)
{
    /* the dtype is the call's: only the YAML's own verdicts are known here */
    return op && k >= 0 && k < op->nout && !op->nondifferentiable && !((op->out_nondiff >> k) & 1);
}
int opr_op_num_outputs(const opr_op *op) { return op ? op->nout : -1; }

int opr_op_output_dtype(const opr_op *op, int k)
{
    return op && k >= 0 && k < op->nout && op->out_dtype[k] >= 0 ? op->out_dtype[k] : -1;
}

const char *opr_op_arg_name(const opr_op *op, int i)
{
    return op && i >= 0 && i < op->nargs ? op->args[i].name : NULL;
}

int opr_op_arg_kind(const opr_op *op, int i)
{
    static const opr_value_kind kinds[] = {
        [ARG_TENSOR] = OPR_V_TENSOR, [ARG_TENSOR_LIST] = OPR_V_TENSOR_LIST, [ARG_INT] = OPR_V_INT,
        [ARG_FLOAT] = OPR_V_DOUBLE, [ARG_BOOL] = OPR_V_BOOL, [ARG_INT_LIST] = OPR_V_INT_LIST, [ARG_STR] = OPR_V_STRING,
        [ARG_SCALAR] = OPR_V_DOUBLE, [ARG_FLOAT_LIST] = OPR_V_DOUBLE_LIST,
    };
    return op && i >= 0 && i < op->nargs ? (int)kinds[op->args[i].type] : -1;
}

const char *opr_op_arg_type(const opr_op *op, int i)
{
    static const char *const types[][2] = {
        [ARG_TENSOR] = {"Tensor", "Tensor?"}, [ARG_TENSOR_LIST] = {"Tensor[]", "Tensor[]"},
        [ARG_INT] = {"int", "int?"}, [ARG_FLOAT] = {"float", "float?"}, [ARG_BOOL] = {"bool", "bool?"},
        [ARG_INT_LIST] = {"int[]", "int[]?"}, [ARG_STR] = {"str", "str?"}, [ARG_SCALAR] = {"Scalar", "Scalar?"},
        [ARG_FLOAT_LIST] = {"float[]", "float[]?"},
    };
    if (op && i >= 0 && i < op->nargs && op->args[i].bool_items) return "bool[]";
    return op && i >= 0 && i < op->nargs ? types[op->args[i].type][op->args[i].optional] : NULL;
}

bool opr_op_arg_written(const opr_op *op, int i) { return op && i >= 0 && i < op->nargs && op->args[i].written; }

bool opr_op_arg_optional(const opr_op *op, int i) { return op && i >= 0 && i < op->nargs && op->args[i].optional; }

bool opr_op_arg_default(const opr_op *op, int i, opr_value *out)
{
    if (!op || i < 0 || i >= op->nargs || !op->args[i].has_default) return false;
    if (out) *out = op_arg_default(&op->args[i]);
    return true;
}

int opr_op_arg_index(const opr_op *op, const char *name)
{
    for (int i = 0; op && name && i < op->nargs; i++)
        if (!strcmp(op->args[i].name, name)) return i;
    return -1;
}

const char *opr_op_output_name(const opr_op *op, int i)
{
    return op && i >= 0 && i < op->nout ? op->out_names[i] : NULL;
}

int opr_op_output_index(const opr_op *op, const char *name)
{
    for (int i = 0; op && name && i < op->nout; i++)
        if (!strcmp(op->out_names[i], name)) return i;
    return -1;
}

bool opr_op_supports_dtype(const opr_op *op, opr_dtype dtype)
{
    return op && (unsigned)dtype < OPR_DTYPE_COUNT && (op->dtypes & OPR_DTYPE_BIT(dtype));
}

bool views_run_on(const opr_ctx *ctx, int device_type)
{
    /* the host copies strided tensors on the cpu itself; elsewhere through copy_ */
    if (device_type == 0) return true;
    opr_op *copy = registry_find(ctx, "copy_");
    return copy && atomic_load(&copy->kernels[device_type]) != NULL;
}

bool opr_op_has_kernel(const opr_op *op, int device_type)
{
    if (!op || device_type < 0 || device_type >= OPR_MAX_DEVICE_TYPES) return false;
    if (op->composite) return composite_runs_on(op, device_type);
    if (device_type == 0 && op->reference && !atomic_load(&((opr_op *)op)->kernels[0]))
        return composite_runs_on(op, 0); /* the CPU runs the reference */
    if (op->view != VIEW_NONE ? views_run_on(op->ctx, device_type)
                              : atomic_load(&((opr_op *)op)->kernels[device_type]) != NULL)
        return true;
    const opr_op *alt = op->alt.name ? registry_find(op->ctx, op->alt.name) : NULL;
    return alt && alt->composite && !alt->alt.name && composite_runs_on(alt, device_type);
}

void kernel_plugins(const kernel_entry *k, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int dt = 0; k && dt < OPR_DTYPE_COUNT; dt++) {
        const dtype_kernel *s = kernel_for(k, dt);
        bool seen = false;
        for (int e = 0; s && e < dt && !seen; e++) seen = kernel_for(k, e) && !strcmp(k->by_dtype[e].plugin, s->plugin);
        if (!s || seen || at >= len) continue;
        int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", s->plugin);
        at += n > 0 ? (size_t)n : 0;
    }
}

opr_status opr_op_kernel_info(const opr_op *op, int device_type, opr_dtype dtype, opr_kernel_info *out)
{
    if (!op || !out || device_type < 0 || device_type >= OPR_MAX_DEVICE_TYPES)
        return opr_fail(OPR_ERR_INVALID, "opr_op_kernel_info: NULL op or out, or device type %d out of range",
                        device_type);
    const dtype_kernel *s = kernel_for(atomic_load(&((opr_op *)op)->kernels[device_type]), dtype);
    if (!s)
        return opr_fail(OPR_ERR_NOT_FOUND, "%s: no plugin provides a kernel for dtype %s on device type %d", op->name,
                        opr_dtype_name(dtype), device_type);
    const opr_kernel_info mine = {
        .struct_size = sizeof mine, .plugin = s->plugin, .shadowed = s->shadowed, .overrides = s->overrides,
    };
    return opr_struct_out(out, &mine, sizeof mine, OPR_KERNEL_INFO_STRUCT_SIZE_0_1, "opr_op_kernel_info",
                          "opr_kernel_info");
}
