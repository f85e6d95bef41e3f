/* Private definitions of the registry layer: op schemas, the op table, kernels. */
#ifndef OPREG_REGISTRY_H
#define OPREG_REGISTRY_H

#include "expr.h"

#include <limits.h>

#define OPR_MAX_OUTS 4

typedef enum arg_type {
    ARG_TENSOR, ARG_TENSOR_LIST, ARG_INT, ARG_FLOAT, ARG_BOOL, ARG_INT_LIST, ARG_STR,
    ARG_SCALAR,             /* a number (int, float or bool), wrapped in the op's dtype T */
    ARG_FLOAT_LIST          /* `float[]`, `float[]?` (upsample's scale_factors): OPR_V_DOUBLE_LIST */
} arg_type;

typedef struct op_arg {
    char *name;
    arg_type type;
    bool optional;          /* `Type?`: None accepted */
    bool has_default;
    opr_kernel_arg def;     /* default value; int lists point at def_ints */
    int64_t def_ints[OPR_MAX_DIMS];
    char *def_str;
    int fixed_dtype;        /* tensor args: -1 = takes part in the common dtype T */
    int list_len;           /* `int[N]`, `bool[N]`: N (an int default stands for N copies), else 0 */
    bool bool_items;        /* `bool[N]`: an int list of 0 / 1 items */
    bool written;           /* `Tensor(a!)`: the op writes this argument in place */
    bool none_items;        /* `Tensor?[]` (ATen's indices): a Tensor[] whose items may be None
                               (NULL), each i64 (a bool mask is expanded to its nonzero's
                               columns before the call: index_masks.c), outside T */
} op_arg;

/* The kernel of one (op, device type) for one dtype. */
typedef struct dtype_kernel {
    opr_kernel_fn fn;
    void *data;
    const char *plugin;     /* name of the plugin providing it (owned by the plugin set) */
    const char *shadowed;   /* a plugin whose kernel for this dtype is not used, or NULL */
    bool overrides;         /* plugin took the dtype from shadowed by an explicit override */
    bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len); /* 2.2, may be NULL */
    double (*cost_ns)(const opr_kernel_call *call);                          /* 2.2, may be NULL */
} dtype_kernel;

/* The kernels of one (op, device type), one slot per dtype: precedence is per dtype
 * (plugin_load.c). A published entry never changes: a commit that changes one
 * publishes a changed copy, and the old one stays reachable through `replaced` until
 * the op is freed, since a reader may still hold it. */
typedef struct kernel_entry {
    uint32_t dtypes;        /* OPR_DTYPE_BIT mask of the slots that have a kernel */
    dtype_kernel by_dtype[OPR_DTYPE_COUNT];
    struct kernel_entry *replaced;
} kernel_entry;

/* The slot of dtype dt, NULL when the entry (may be NULL) has no kernel for it. */
static inline const dtype_kernel *kernel_for(const kernel_entry *k, int dt)
{
    return k && dt >= 0 && dt < OPR_DTYPE_COUNT && (k->dtypes & OPR_DTYPE_BIT(dt)) ? &k->by_dtype[dt] : NULL;
}

/* Asking kernel k about a call before it runs (ABI 2.2; kernel_query.c): NULL when k
 * takes call (or has no supports), else its reason, in why; true with *ns when its
 * cost_ns gives an estimate for call. */
const char *kquery_refusal(const dtype_kernel *k, const opr_kernel_call *call, char *why, size_t why_len);
bool kquery_cost(const dtype_kernel *k, const opr_kernel_call *call, double *ns);
/* The largest estimate kquery_cost gives (1e15 ns, about 11.6 days): larger answers,
 * infinity included, are taken as this. */
#define KQUERY_COST_MAX_NS 1e15

/* Output dtype rules. */
#define OUT_DTYPE_T (-1)    /* the common dtype of the plain tensor arguments */
#define OUT_DTYPE_ARG (-2)  /* named by the str argument op->dtype_arg */
#define OUT_DTYPE_ACC (-3)  /* acc(T): T, except i64 for an i32 T (PyTorch's sum, prod, cumsum) */

/* The dtype of an acc(T) output for the common dtype t. */
static inline opr_dtype out_dtype_acc(opr_dtype t) { return t == OPR_I32 ? OPR_I64 : t; }

/* How an op takes jagged tensors (its YAML `jagged:` key; registry/jagged_call.c). */
typedef enum jagged_kind {
    JAGGED_NONE = 0,    /* refused */
    JAGGED_ELEMENTWISE, /* on the values; dense operands broadcast over the non-ragged dims */
    JAGGED_ROWS,        /* argument 0 jagged, on its values row by row; the others dense */
    JAGGED_DIM,         /* a reduction or softmax over the dim(s) named by an argument */
    JAGGED_ALL          /* over every element: on the values, a dense result */
} jagged_kind;

typedef struct jagged_rule {
    jagged_kind kind;
    int dim_arg;            /* JAGGED_DIM: the argument giving the dim(s) */
    expr *ragged;           /* JAGGED_DIM: the op over the ragged dim, an expression of the
                               arguments (self the values) and `offsets`; NULL: refused */
    char *ragged_text;      /* "dim, ragged: EXPR" (opr_op_jagged_rule) */
    bool ragged_keeps_rows; /* its result has the values' rows: jagged, not [B, ...] */
    _Atomic bool linked;    /* the expression's calls resolved (lazily, like a forward) */
} jagged_rule;

/* How an op runs on batched tensors of opr_vmap (its YAML `batch:` key, or its view
 * kind; registry/vmap_call.c). Without one it loops over the samples. */
typedef enum batch_kind {
    BATCH_LOOP = 0,       /* no rule: one call per sample, results stacked */
    BATCH_ELEMENTWISE,    /* batched operands padded to one rank, unbatched ones broadcast */
    BATCH_DIMS,           /* dims named by arguments shifted past the batch dim */
    BATCH_MATMUL,         /* matmul broadcasting, 1-d batched operands made 2-d */
    BATCH_BATCH_DIMS,     /* leading batch dims that must match: unbatched operands expanded */
    BATCH_ROWS,           /* only argument 0 may be batched; the op works on its leading dims */
    BATCH_SIZE,           /* an int[] argument is a per-sample shape (sum_to) */
    BATCH_UNBATCHED,      /* the result does not depend on the batched values (new_zeros) */
    BATCH_DATA_DEPENDENT, /* argument 0 batched, the others unbatched; the flat result split */
    BATCH_VIEW            /* a host view (op->view): its dims shifted */
} batch_kind;

/* `alternative:`: an op computing the same function another way (a composite op),
 * run instead of the op's kernel where the cost model finds it cheaper
 * (registry/alternative.c). `kernel_rate:` says how fast the op's own kernel runs, as a
 * fraction of the device's GEMM rate (opr_device_desc.flops_per_s), per device type. */
#define ALT_MAX_RATES 8
typedef struct alt_rule {
    char *name;                    /* NULL: the op has no alternative */
    int line, col;                 /* of the name, for errors found at the first call */
    _Atomic(struct opr_op *) op;   /* resolved and checked at the first call */
    char *rate_device[ALT_MAX_RATES];
    double rate[ALT_MAX_RATES];
    int nrates;
    double default_rate;           /* devices not listed; 1 unless `default:` says */
} alt_rule;

typedef struct batch_rule {
    batch_kind kind;
    uint32_t dim_args;    /* BATCH_DIMS: int / int[] arguments naming dims of argument 0 */
    uint32_t expand_args; /* BATCH_DIMS: tensor arguments expanded to the batch when unbatched */
    int size_arg;         /* BATCH_SIZE: the int[] argument */
} batch_rule;

/* The ops the host implements (`view:`; host_ops.c): views, and the resizes, which
 * change their argument's own header (in place: output 0 is self). */
typedef enum view_kind {
    VIEW_NONE = 0, VIEW_T, VIEW_TRANSPOSE, VIEW_PERMUTE, VIEW_RESHAPE, VIEW_EXPAND,
    VIEW_UNSQUEEZE, VIEW_SQUEEZE, VIEW_NARROW, VIEW_DIAGONAL, VIEW_CONTIGUOUS,
    VIEW_SLICE,         /* slice.Tensor: narrow with a step */
    VIEW_AS_STRIDED,    /* as_strided: any geometry within the storage */
    VIEW_RESIZE,        /* resize_ */
    VIEW_RESIZE_OUTPUT, /* _resize_output_: resize_ of an out= argument */
    VIEW_KIND_COUNT
} view_kind;

/* Runs the host op of op (op->view) on its checked arguments k (self: k[0]'s tensor):
 * its result, a new reference, or NULL with the error set (host_ops.c). */
opr_tensor *host_op_run(const opr_op *op, opr_tensor *self, const opr_kernel_arg *k);

struct opr_op {
    char *name;                /* as written: "max.dim", "gt" */
    int base_len;              /* length of the overload set's name, "max" */
    /* the name index (op_table.c): the next op of the overload set, in registration
     * order; for a set's first op, the next set's first op in its hash bucket */
    _Atomic(opr_op *) set_next, bucket_next;
    char *overload;            /* "dim" (after the '.'), or the `overload:` key, or NULL */
    bool has_scalars;          /* a Scalar argument: wrapped-number promotion applies */
    bool int_to_float;         /* `int_to_float: true`: an integer or bool T computes in f32 (promote.c) */
    bool no_scalar_promotion;  /* `scalar_promotion: false`: a Scalar takes self's dtype (fill, pad value) */
    char *schema;
    opr_ctx *ctx;
    char *file;
    int line;
    op_arg args[OPR_MAX_ARGS];
    int nargs;
    char *out_names[OPR_MAX_OUTS];
    int nout;
    bool inplace;              /* name ends in '_': output 0 is `self` */
    bool has_written;          /* some argument is `Tensor(a!)`: the op writes it in place */
    bool has_index_list;       /* some argument is `Tensor?[]` (index_masks.c) */
    bool list_out;             /* `-> Tensor[]`: `count` pieces, piece i the `forward` with `i`
                                  bound (list_call.c); nout is 1, its slot the pieces' list */
    expr *count;               /* list_out: the number of pieces, over the arguments */
    bool nondifferentiable;    /* `differentiable: false`: outputs are constants */
    uint32_t out_nondiff;      /* `output_differentiability`: bit k set: output k is a constant */
    uint32_t dtypes;           /* OPR_DTYPE_BIT mask allowed for T */
    int out_dtype[OPR_MAX_OUTS];
    int dtype_arg;             /* str argument naming the output dtype, or -1 */
    int device_arg;            /* str argument named "device" (factories), or -1 */
    expr *checks[8];
    int nchecks;
    expr *shapes[OPR_MAX_OUTS];
    int same_shape_args[2];    /* shape is broadcast(a, b) of these tensor args, else -1 */
    bool dynamic_shape;        /* the kernel allocates output 0 */
    expr *flops;
    expr *identity_if;         /* when true, the result is `self` itself (a new header) */
    view_kind view;
    _Atomic(kernel_entry *) kernels[OPR_MAX_DEVICE_TYPES];
    struct deriv_info *deriv;  /* derivative candidates, NULL if not differentiable */
    struct op_sample *samples; /* example inputs (`samples:`), for conformance checks */
    double tol_rtol[OPR_DTYPE_COUNT], tol_atol[OPR_DTYPE_COUNT]; /* `tolerance:` */
    uint32_t tol_rtol_set, tol_atol_set; /* OPR_DTYPE_BIT of the dtypes it gives each for */
    int nsamples;
    struct opr_op *backward_of;/* set on fused backward kernel slots ("mm_backward") */
    struct composite_def *composite; /* `forward:` ops (composite.h), NULL for kernel ops */
    /* `reference:` (composite.h): what the CPU runs for this op where no plugin registers
     * a CPU kernel for it, so an op only a device runs has a reference forward */
    struct composite_def *reference;
    jagged_rule jagged;        /* `jagged:`: how it takes jagged tensors */
    batch_rule batch;          /* `batch:`: how it runs on batched tensors (opr_vmap) */
    alt_rule alt;              /* `alternative:`, `kernel_rate:` */
    _Atomic uint32_t fallback_warned; /* device types its CPU fallback was reported for */
    bool random;               /* `random: ARG`: the call draws a seed when ARG is None */
    int random_arg;            /* that `int?` argument (valid when `random` is set) */
};

/* The value an omitted argument takes (its default; None when it has none). */
static inline opr_value op_arg_default(const op_arg *a)
{
    const opr_kernel_arg *d = &a->def;
    switch (d->kind) {
    case OPR_ARG_INT: return opr_v_int(d->u.i);
    case OPR_ARG_DOUBLE: return opr_v_double(d->u.d);
    case OPR_ARG_BOOL: return opr_v_bool(d->u.b);
    case OPR_ARG_INT_LIST: return opr_v_ints(d->u.il.items, d->u.il.n);
    case OPR_ARG_STRING: return opr_v_string(d->u.s);
    case OPR_ARG_DOUBLE_LIST: return opr_v_doubles(d->u.dl.items, d->u.dl.n);
    default: return opr_v_none();
    }
}

/* Slots of an op's expressions: args, then outputs by name, then `result`. */
static inline int op_nslots(const opr_op *op) { return op->nargs + op->nout + 1; }

/* The op table's slots live in chunks of OPS_CHUNK0, 2 * OPS_CHUNK0, 4 * OPS_CHUNK0, ...
 * entries, each allocated once and never moved, so readers need no lock (op_table.c). */
#define OPS_CHUNK0 64
#define OPS_NCHUNKS 24
/* Hash buckets of the name index: lookups by name cost a chain, not the table (20k ops
 * loaded in one file were quadratic). */
#define OPS_BUCKETS 4096

/* Records a call into the autograd graph (tensors[i]: argument i, NULL for
 * non-tensors; slots: the arguments' metadata values; sets the outputs' grad_fn). The
 * autograd layer, above the registry, sets it on each context it creates: the
 * registry never calls autograd by name. */
typedef int (*reg_record_fn)(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_tensor **outs,
                             opr_device dev, bool list_requires_grad);

/* Records a call of a list-returning op (op->list_out) as one node whose outputs are
 * the npieces pieces; otherwise as reg_record_fn. Set by the autograd layer. */
typedef int (*reg_record_list_fn)(const opr_op *op, opr_tensor *const *tensors, const mval *slots,
                                  opr_tensor **pieces, int npieces, opr_device dev);

/* The ops the library itself calls (the autograd engine, jagged tensors), cached
 * after the first lookup. */
enum { ENGINE_OP_ADD, ENGINE_OP_RESHAPE, ENGINE_OP_SEGMENT_EXPAND, ENGINE_OP_JAGGED_TO_PADDED,
       ENGINE_OP_PADDED_TO_JAGGED, ENGINE_OP_EXPAND, ENGINE_OP_UNSQUEEZE, ENGINE_OP_NARROW, ENGINE_OP_NARROW_SCATTER,
       ENGINE_OP_NEW_ZEROS, ENGINE_OP_MATMUL, ENGINE_OP_TRANSPOSE, ENGINE_OP_PERMUTE, ENGINE_OP_CONTIGUOUS,
       ENGINE_OP_COUNT };

typedef struct opr_registry {
    _Atomic(opr_op *) *chunks[OPS_NCHUNKS];
    _Atomic int n;             /* entries visible to readers */
    _Atomic(opr_op *) buckets[OPS_BUCKETS]; /* first ops of overload sets, by hash of the set's name */
    opr_op **retired;          /* dropped by registry_truncate: readers may still hold them */
    int nretired, cap_retired;
    pthread_mutex_t errors_lock;
    char *errors;              /* every load error, newline-separated */
    size_t errors_len;
    _Atomic(opr_op *) engine_ops[ENGINE_OP_COUNT]; /* registry_engine_op's cache */
    reg_record_fn record;      /* set by the autograd layer with the context */
    reg_record_list_fn record_list;
} opr_registry;

/* Parses a schema string into op (name, args, outputs). src locates it for errors. */
int schema_parse(opr_op *op, const char *schema, const expr_src *src);
void op_free(opr_op *op);

int registry_new(opr_ctx *ctx);
/* opr_ctx_new below the autograd layer: the context with its devices, op table, YAML
 * and plugins, using the autograd layer's table and recorder (context.c). */
opr_ctx *registry_ctx_new(const opr_ctx_opts *opts, const opr_autograd_iface *autograd, reg_record_fn record);
void registry_free(opr_ctx *ctx);
/* Adds an op (takes ownership); fails on a duplicate name. Call with ctx->lock held. */
int registry_add(opr_ctx *ctx, opr_op *op);
/* Number of ops in the table. */
int registry_count(const opr_ctx *ctx);
/* Drops the ops after the first n (those of a plugin whose init failed). They are kept
 * until the context is freed, as a reader may hold one. Call with ctx->lock held. */
void registry_truncate(opr_ctx *ctx, int n);
/* Appends a line to the registry's error log (error_log.c). */
void registry_note_error(opr_ctx *ctx, const char *msg);
/* Lock-free lookup by the name an op is written with; NULL if absent. */
opr_op *registry_find(const opr_ctx *ctx, const char *name);
/* The same, also finding "gt.Tensor" for an op written "gt" with `overload: Tensor`. */
opr_op *registry_find_exact(const opr_ctx *ctx, const char *name);
/* The ops of the overload set `name` ("max": max, max.dim), in the order added: fills
 * out with up to cap of them and returns how many there are. */
int registry_overloads(const opr_ctx *ctx, const char *name, const opr_op **out, int cap);
const opr_op *registry_engine_op(opr_ctx *ctx, int which);

/* Loads YAML text (the registry lock is taken inside). */
int yaml_load_text(opr_ctx *ctx, const char *text, size_t len, const char *file, int *n_loaded);
int yaml_load_file(opr_ctx *ctx, const char *path, int *n_loaded);

/* One parsed sample (`samples:` of an entry; samples.c). A tensor is a shape with a
 * range to draw from, or explicit values (indices, offsets). */
#define SAMPLE_MAX_VALUES 16 /* most elements a tensor may list in `values:` */
typedef struct sample_tensor {
    int ndim;
    int64_t shape[OPR_MAX_DIMS];
    int dtype;               /* -1: the dtype under test */
    double lo, hi;
    int nvalues;             /* -1: values drawn in [lo, hi), else these, in order */
    double values[SAMPLE_MAX_VALUES];
} sample_tensor;

typedef struct sample_arg {
    bool given;
    int ntensors;            /* Tensor[]: how many; Tensor: 1, or 0 for a None sample */
    sample_tensor *tensors;
    mval value;              /* scalars */
} sample_arg;

typedef struct op_sample {
    sample_arg args[OPR_MAX_ARGS];
} op_sample;
void samples_free(opr_op *op);

/* How a variant of a sample changes its tensors (sample_variants.c), for
 * samples_build. k counts the sample's tensors in the order they are made (argument
 * order, a Tensor[]'s items in order). Either hook may be NULL. */
typedef struct sample_tweak {
    /* changes tensor k's shape and range before its values are drawn */
    void (*reshape)(const struct sample_tweak *tw, int k, sample_tensor *st);
    /* makes tensor k on dev from its logical values (numel elements of dt, row-major, on
     * the host): in place of opr_tensor_from_data */
    opr_tensor *(*make)(const struct sample_tweak *tw, int k, opr_ctx *ctx, opr_dtype dt, const sample_tensor *st,
                        const void *values, opr_device dev);
    const void *data;
} sample_tweak;
/* opr_op_sample_args with tweak tw (NULL: the sample as written). */
int samples_build(const opr_op *op, int i, const sample_tweak *tw, opr_dtype dtype, opr_device dev, uint64_t seed,
                  opr_value *args, int *nargs, opr_tensor **owned, int *nowned);

/* opr_call of an op that returns a Tensor[] (list_call.c). */
int list_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres);

/* opr_call of an op some of whose arguments are jagged (jagged_call.c). */
int jagged_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres);
/* Whether a Tensor?[] argument of the call holds a bool mask, and opr_call with each
 * mask replaced by its nonzero's i64 columns (index_masks.c). */
bool index_masks_present(const opr_op *op, const opr_value *args, int nargs);
int index_masks_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres);
/* opr_call of an op some of whose arguments are batched (vmap_call.c). */
int vmap_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres);
/* The layouts among the tensor arguments: LAYOUT_JAGGED | LAYOUT_BATCHED bits. */
enum { LAYOUT_JAGGED = 1, LAYOUT_BATCHED = 2 };
static inline unsigned tensor_layout(const opr_tensor *t)
{
    return !t ? 0u : (t->ragged ? (unsigned)LAYOUT_JAGGED : 0u) | (t->bt_phys ? (unsigned)LAYOUT_BATCHED : 0u);
}
static inline unsigned layouts_in_args(const opr_value *args, int nargs)
{
    unsigned l = 0;
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind == OPR_V_TENSOR) l |= tensor_layout(args[i].u.t);
        if (args[i].kind == OPR_V_TENSOR_LIST)
            for (int k = 0; k < args[i].u.tl.n && args[i].u.tl.items; k++) l |= tensor_layout(args[i].u.tl.items[k]);
    }
    return l;
}

/* The names of the plugins providing k's dtypes, comma-separated, into buf
 * (op_table.c). */
void kernel_plugins(const kernel_entry *k, char *buf, size_t len);

/* Whether the host's view ops count as runnable on device_type: always on cpu, else
 * only when the device has a copy_ kernel (op_table.c). */
bool views_run_on(const opr_ctx *ctx, int device_type);

/* "Tensor", "int", ... for a value's kind, as errors name it (dispatch.c). */
const char *value_kind_name(opr_value_kind k);

/* Installs the hook that copies strided tensors on accelerators (dispatch.c). */
void dispatch_init(opr_ctx *ctx);

/* Plugin set (plugin_load.c). */
int plugins_new(opr_ctx *ctx);
/* The host service table handed to plugins and kernels. */
const opr_host_api *plugin_host_api(void);
/* Copies the struct a plugin handed in at src (its first field the size_t struct_size)
 * into dst (dst_size bytes, this host's sizeof): min(struct_size, dst_size) bytes, the
 * rest zeroed. Refuses a NULL src or a struct_size below min_size (its OPR_*_2_0 size)
 * with OPR_ERR_INVALID and a message naming `name` and the sizes in why (abi_struct.c). */
int abi_struct_in(void *dst, size_t dst_size, const void *src, size_t min_size, const char *name, char *why,
                  size_t why_len);
/* The paths "dir/NAME" of dir's files whose NAME ends in suffix (and is longer than
 * it; hidden ones left out when skip_hidden), sorted (dir_list.c). *paths is freed
 * with dir_list_free. Errors name the directory as `what` ("plugin directory"):
 * OPR_ERR_NOMEM or OPR_ERR_IO. */
int dir_list(const char *dir, const char *suffix, bool skip_hidden, const char *what, char ***paths, int *n);
void dir_list_free(char **paths, int n);

/* The host's side of one kernel call (opr_kernel_call.host_call): what
 * host->alloc_output needs, and the error detail host->set_error binds to the call. */
typedef struct kcall_frame {
    opr_ctx *ctx;
    opr_device dev;
    bool may_alloc;                 /* data-dependent outputs: host->alloc_output allowed */
    opr_dtype out_dtype[OPR_MAX_OUTS];
    opr_tensor *outs[OPR_MAX_OUTS];
    atomic_int error_state;         /* KCALL_ERROR_*: the first detail wins, from any thread */
    bool guards;                    /* opr_kernel_guards_set was on when the call began */
    bool guard_failed;              /* error holds what the guards found, the whole message */
    uint32_t guarded;               /* bit i: output i has guard regions (kcall_output_new) */
    uint32_t page_guarded;          /* bit i: output i is followed by guard pages */
    char error[1024];               /* read only in state KCALL_ERROR_SET */
} kcall_frame;
enum { KCALL_ERROR_NONE, KCALL_ERROR_WRITING, KCALL_ERROR_SET };
/* Readies f for one call (cheap: the error text is not cleared) and clears this
 * thread's error, so that a detail a plugin set without its call is not mixed up with
 * an older message (kernel_call.c). */
void kcall_frame_init(kcall_frame *f, opr_ctx *ctx, opr_device dev, bool may_alloc);
/* host->set_error: into the frame of call, or this thread's error when call is NULL. */
void kcall_set_errorv(const opr_kernel_call *call, const char *fmt, va_list ap);
/* Fails a kernel call that returned rc (a positive rc becomes OPR_ERR_BACKEND) with
 * "WHAT: DETAIL": the detail the plugin set for the call, else what it set on this
 * thread without one, else "kernel failed without detail". */
int kcall_fail(const kcall_frame *f, int rc, const char *what);
/* Output i of a kernel call, contiguous, uninitialised, on f's device: with guard
 * regions around its data when f->guards (kernel_guard.c). */
opr_tensor *kcall_output_new(kcall_frame *f, int i, opr_dtype dtype, int ndim, const int64_t *shape);
/* Bytes of canary on each side of a guarded output: a multiple of every element size,
 * so that the data starts at a whole element offset, and as many elements as a vector
 * store of 16 floats overruns. */
#define GUARD_BYTES 64
#define GUARD_FILL 0xdb
/* A guarded output on dev, whose memory is host memory, at the end of a mapping of its
 * own followed by inaccessible pages (GUARD_BYTES of canary before the data,
 * guard_after_bytes after it); NULL where none can be made (the caller then uses
 * canaries alone; guard_page.c). */
opr_tensor *guard_page_output(opr_ctx *ctx, opr_device dev, opr_dtype dtype, int ndim, const int64_t *shape,
                              int64_t numel);
/* The canary bytes after the data_bytes of a page-guarded output: GUARD_BYTES, and what
 * keeps the data GUARD_BYTES-aligned. */
size_t guard_after_bytes(size_t data_bytes);
/* Runs kernel k on call. With f->guards, also checks the guard regions of the outputs
 * kcall_output_new made and that the kernel left its inputs as they were (not the
 * argument an in-place forward op writes); what it finds fails the call with
 * OPR_ERR_BACKEND, for kcall_fail to report. fwd names the arguments: call is a forward
 * call of fwd when cover is NULL, else of fwd's fused backward kernel whose output p
 * is the gradient of fwd's argument cover[p] (kernel_guard.c). */
int kcall_run(kcall_frame *f, const dtype_kernel *k, const opr_kernel_call *call, const opr_op *fwd, const int *cover);
/* host->alloc_output (dispatch.c). */
int dispatch_alloc_output(const opr_kernel_call *call, int32_t index, int32_t ndim, const int64_t *shape);
/* The checks opr_call makes before it allocates anything (schema, context, device,
 * dtypes, the op's `check:` expressions), for callers that only plan: on success the
 * op's argument slots (op->nargs of them, defaults filled in), the device and the
 * common dtype. */
int dispatch_validate(const opr_op *op, const opr_value *args, int nargs, mval *slots, opr_device *dev,
                      opr_dtype *common);
void plugins_free(opr_ctx *ctx);
/* Runs a call of op, validated for device dev, on the CPU with copies in and out
 * (fallback.c), where fallback_applies and op has no kernel for the common dtype
 * (refusal NULL) or its kernel refused these arguments at run time (refusal: the
 * kernel's message, "mm (npu, plugin P): M > 4 not supported"). Records the node on
 * the device tensors when `record`. */
int fallback_call(const opr_op *op, const opr_value *args, int nargs, opr_tensor **results, int nres,
                  opr_tensor *const *tensors, const mval *slots, opr_device dev, opr_dtype common, bool record,
                  bool list_requires_grad, const char *refusal);
/* Logs a run-time refusal (OPR_ERR_UNSUPPORTED) that something else stands in for,
 * once per (what, device type, message) in ctx: "mm: ... refused the call (M > 4 not
 * supported): running it instead (reported once per reason; ...)". */
void fallback_log_refusal(opr_ctx *ctx, const char *what, int device_type, const char *refusal, const char *instead);
/* Implicit promotion (promote.c): true when some tensor of the call must be converted
 * to *target, the common dtype PyTorch's rules give for 0-d tensors and numbers. */
bool promote_target(const opr_op *op, const opr_value *args, int nargs, opr_dtype *target);
/* Runs op with those tensors converted by the `to` op (recorded by autograd). */
int promote_call(const opr_op *op, const opr_value *args, int nargs, opr_dtype target, opr_tensor **results, int nres);
/* Whether a call of op on device_type would run on the CPU through the fallback. */
bool fallback_applies(const opr_op *op, int device_type, opr_dtype common);

/* Which of op and its `alternative:` a call runs (alternative.c): *chosen is the
 * cheaper on the device (op on a tie), with both estimates in ns (INFINITY for one
 * that cannot run there). slots, dev, common: what dispatch_validate gave for op. */
int alt_choose(const opr_op *op, const opr_value *args, int nargs, const mval *slots, opr_device dev,
               opr_dtype common, const opr_op **chosen, double *kernel_ns, double *alt_ns);

/* Where the library's own op YAML and plugins lie (install_paths.c), in search order:
 * the install layout relative to libopreg.so, then, only when this library is the
 * build tree's, the source YAML or the build's plugin directory. */
typedef enum data_kind { DATA_OP_YAML, DATA_PLUGINS } data_kind;
#define DATA_DIRS_MAX 2
typedef char data_dir[PATH_MAX];
/* Fills dirs with the candidate directories of kind, whether they exist or not, and
 * returns how many (0 when the library's own path is unknown), or OPR_ERR_NOMEM. */
int install_data_dirs(data_kind kind, data_dir dirs[DATA_DIRS_MAX]);

#endif
