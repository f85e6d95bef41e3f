/* Private definitions of the core layer: context, devices, storage, tensors, errors.
 * Included by the files of core/ directly and, through registry/expr.h, by registry/
 * and autograd/: the library's own code only. Plugins see opr_tensor_view instead;
 * tools, tests and bench see only include/opreg/ (docs/architecture.md, "Layers"). */
#ifndef OPREG_CORE_H
#define OPREG_CORE_H

#include <opreg/opreg.h>
#include <opreg/plugin.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#define OPR_MAX_DEVICE_TYPES 8
#define OPR_MAX_ORDINALS 16

/* ------------------------------------------------------------------ errors */

/* Formats the thread-local error message and returns `status` (so callers can write
 * `return opr_fail(OPR_ERR_INVALID, "...")`). */
int opr_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same but prefixes the current message: "context: <previous message>". */
int opr_fail_wrap(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void opr_error_vset(const char *fmt, va_list ap);
void opr_error_clear(void);
/* Marks the failure just set (by opr_fail) as a kernel's supports declining the call:
 * opr_last_error_declined() is true until the next opr_fail or clear. */
void opr_error_mark_declined(void);
/* Status given to the last opr_fail/opr_fail_wrap on this thread: what a caller of a
 * function that returns NULL on failure passes on. OPR_ERR_NOMEM when nothing has
 * failed since the last clear (an allocation that failed without a message). */
int opr_error_status(void);

/* Formats and delivers one log message (core/log.c). */
void opr_log_vemit(opr_log_level level, const char *source, const char *fmt, va_list ap);
void opr_log_emit(opr_log_level level, const char *source, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Structs of the public API that start with struct_size (core/struct_size.c).
 * opr_struct_in copies the caller's struct at src (NULL: all defaults) into the
 * library's dst of dst_size bytes, zero where the caller's is shorter; opr_struct_out
 * copies the library's src into the caller's dst, no further than dst's struct_size.
 * Both refuse a struct_size below `minimum`, the size of the struct's first version. */
int opr_struct_in(void *dst, size_t dst_size, const void *src, size_t minimum, const char *who, const char *type);
/* The copy under both opr_struct_in and the plugin loader's abi_struct_in: zeroes dst,
 * reads src's struct_size into *given, and copies no further than it, unless it is
 * below minimum (then false, and nothing is copied). */
bool opr_struct_read(void *dst, size_t dst_size, const void *src, size_t minimum, size_t *given);
int opr_struct_out(void *dst, const void *src, size_t src_size, size_t minimum, const char *who, const char *type);

/* ------------------------------------------------------------------ devices */

typedef struct opr_dev_stats {
    _Atomic uint64_t current;
    _Atomic uint64_t peak;
    _Atomic uint64_t n_allocs;
} opr_dev_stats;

typedef struct opr_device_entry {
    char name[32];
    opr_device_desc desc;          /* copied from the plugin (cpu: host defaults) */
    const char *plugin_name;       /* plugin that registered it, NULL for built-in cpu */
    opr_dev_stats stats[OPR_MAX_ORDINALS];
} opr_device_entry;

/* ------------------------------------------------------------------ storage + tensor */

typedef struct opr_storage {
    _Atomic int refs;
    void *data;
    size_t nbytes;
    opr_device dev;
    opr_ctx *ctx;
    struct DLManagedTensor *dl_owner; /* imported through DLPack: freed by its deleter */
    bool borrowed;                    /* wraps caller memory for one copy: never freed */
    bool inline_data;                 /* data lives in the header's block */
    _Atomic uint32_t version;         /* bumped by every in-place write, so autograd can
                                         tell a saved tensor was changed after saving */
} opr_storage;

/* Shape metadata, embedded in every tensor so that shape expressions can run on
 * tensors and on bare metadata alike. It includes the layout in the storage (PyTorch's
 * TensorGeometry): a graph node keeps it for a tensor its formulas read only through
 * metadata, so that as_strided's gradient knows its input's strides and offset. */
typedef struct opr_meta {
    opr_dtype dtype;
    int32_t ndim;
    int64_t numel;
    int64_t shape[OPR_MAX_DIMS];
    int64_t strides[OPR_MAX_DIMS]; /* in elements; the first ndim are set */
    int64_t offset;                /* into the storage, in elements */
} opr_meta;

struct opr_node;

/* The structure of jagged tensors (core/jagged.c): offsets shared, reference counted,
 * by every jagged tensor made from them. Immutable once made. */
typedef struct opr_ragged {
    _Atomic int refs;
    opr_tensor *offsets;   /* i64 [batch + 1], on the values' device */
    int64_t *host;         /* the same offsets on the host, validated */
    int64_t batch, total, max_len;
} opr_ragged;

struct opr_tensor {
    _Atomic int refs;
    opr_meta m;               /* shape, strides and storage offset */
    opr_storage *storage;
    opr_ctx *ctx;
    /* autograd */
    bool requires_grad;
    opr_tensor *grad;         /* accumulated leaf gradient */
    struct opr_node *grad_fn; /* node that produced this tensor, NULL for leaves */
    int32_t output_nr;
    /* jagged tensors (core/jagged.c): the fields above give the logical shape
     * [B, OPR_SIZE_RAGGED, D...] and share the values' storage; the values themselves,
     * with the autograd state, are jag_values. NULL for dense tensors. */
    opr_tensor *jag_values;
    opr_ragged *ragged;
    _Atomic(opr_tensor *) jag_grad; /* jagged wrapper of jag_values' grad (opr_grad) */
    /* batched tensors of opr_vmap (core/batched.c): the fields above describe one
     * sample over bt_phys, whose dim 0 is the batch; bt_level is the opr_vmap call
     * that made it. Unlike a jagged tensor it has its own autograd state (the
     * per-sample graph). NULL and 0 for other tensors. */
    opr_tensor *bt_phys;
    int64_t bt_level;
};

/* ------------------------------------------------------------------ context */

struct opr_registry;
struct opr_plugin_set;

/* What core needs of the autograd layer, which lies above it (core <- registry <-
 * autograd): autograd fills this table on every context it creates
 * (autograd/context_new.c), and core reaches autograd only through it. */
typedef struct opr_autograd_iface {
    /* drops a reference to the node that produced a tensor (its grad_fn) */
    void (*node_release)(struct opr_node *node);
    /* whether a leaf's grad has a graph (create_graph), read under the leaf's lock */
    bool (*leaf_grad_has_graph)(const opr_tensor *leaf);
    /* called before a reference to such a leaf is dropped: frees the loop
     * leaf -> grad -> graph -> leaf when nothing else holds it */
    void (*leaf_cycle_collect)(opr_tensor *leaf);
} opr_autograd_iface;

struct opr_ctx {
    pthread_mutex_t lock;          /* registry and plugin mutations */
    opr_device_entry devices[OPR_MAX_DEVICE_TYPES];
    _Atomic int n_devices;
    struct opr_registry *reg;
    struct opr_plugin_set *plugins;
    _Atomic long live_tensors;
    /* Copies between two tensors of one non-CPU device when either is not contiguous;
     * set by the registry, which runs the device's copy_ kernel. */
    int (*device_strided_copy)(opr_ctx *ctx, opr_tensor *dst, const opr_tensor *src);
    const opr_autograd_iface *autograd; /* set with the context; never NULL after */
    _Atomic bool cpu_fallback_off; /* opr_cpu_fallback_set(ctx, false) (registry/fallback.c) */
    /* hashes of the (op, device, reason) run-time refusals already logged (fallback.c) */
    _Atomic uint64_t refusals_logged[64];
    _Atomic bool kernel_guards;    /* opr_kernel_guards_set (registry/kernel_guard.c) */
    char *_Atomic kernel_trace;    /* opr_kernel_trace_set: the kernel running now, or NULL */
    size_t kernel_trace_len;
    _Atomic uint64_t rng_state;    /* the random generator (core/rng.c): 0 in a new context */
    /* process groups (distributed/group.c): the provider a plugin registered, whose plugin
     * name is group_plugin (NULL: none); set at commit, under lock */
    opr_group_provider group_provider;
    const char *group_plugin;
};

/* An index of the positions of pointers in a caller's array, which keeps its order
 * (core/ptr_index.c): zero-initialised it is empty. build indexes items[0, n) with
 * room for `room` items in all (OPR_ERR_NOMEM with a message); find gives p's
 * position or -1; add records items[pos] (the caller's new last item, within room). */
typedef struct opr_ptr_index {
    int *slots; /* cap entries: a position in the caller's array, or -1 */
    int cap;
} opr_ptr_index;
int opr_ptr_index_build(opr_ptr_index *ix, void *const *items, int n, int room);
int opr_ptr_index_find(const opr_ptr_index *ix, void *const *items, const void *p);
void opr_ptr_index_add(opr_ptr_index *ix, void *const *items, int pos);
void opr_ptr_index_free(opr_ptr_index *ix);

/* The next seed of the context's random generator (core/rng.c): one SplitMix64 step,
 * atomic, so concurrent calls each get their own. */
uint64_t opr_rng_next_seed(opr_ctx *ctx);

/* Device entry for a tensor's device, or NULL. */
static inline opr_device_entry *opr_dev_entry(opr_ctx *ctx, opr_device dev)
{
    if (dev.type < 0 || dev.type >= atomic_load(&ctx->n_devices)) return NULL;
    if (dev.index < 0 || dev.index >= ctx->devices[dev.type].desc.count) return NULL;
    return &ctx->devices[dev.type];
}

/* Finds a device type by name; -1 if unknown. */
int opr_device_type_find(const opr_ctx *ctx, const char *name);

/* Storage allocation through the device allocator, counted in memory statistics.
 * nbytes may be 0 (a valid, unique, non-NULL pointer is still returned). */
opr_storage *opr_storage_new(opr_ctx *ctx, opr_device dev, size_t nbytes);
void opr_storage_release(opr_storage *s);

/* Element size without a call (hot paths); valid dtypes only. */
static inline size_t opr_elem_size(opr_dtype dt)
{
    static const unsigned char sizes[OPR_DTYPE_COUNT] = {4, 8, 8, 1, 2, 2, 4};
    return sizes[dt];
}

/* Writes v as one element of dt at dst (opr_elem_size(dt) bytes): rounded to f32,
 * f16 or bf16, truncated for i64 and i32, v != 0 for bool. */
void opr_dtype_store(opr_dtype dt, double v, void *dst);
/* opr_dtype_store for a number from a caller (a Scalar or float argument): OPR_ERR_INVALID,
 * in PyTorch's words, for one the dtype cannot hold (i64: NaN, infinities and values
 * outside [-2^63, 2^63)), nothing written. */
int opr_number_store(opr_dtype dt, double v, void *dst);

/* Most elements a tensor (or view) may have: its size in bytes, at 8 bytes per element,
 * fits in int64, so kernels can compute any byte offset without overflow. */
#define OPR_MAX_NUMEL (INT64_MAX / 8)

/* Checks a shape that may come from a caller: ndim in range, shape non-NULL when
 * ndim > 0, no negative size, and no element count past OPR_MAX_NUMEL (the product of
 * the non-zero sizes, so that strides cannot wrap either). Writes the element count to
 * *numel when numel is not NULL. The one check every allocation and view goes through;
 * `who` starts the error message. */
int opr_shape_check(const int64_t *shape, int ndim, int64_t *numel, const char *who);
/* Length of the diagonal at `offset` (> 0 above the main one, < 0 below) of a rows x
 * cols matrix, for any int64 offset; 0 when it lies outside. */
static inline int64_t opr_diagonal_length(int64_t rows, int64_t cols, int64_t offset)
{
    if (offset >= 0) return offset >= cols ? 0 : (cols - offset < rows ? cols - offset : rows);
    return offset <= -rows ? 0 : (rows + offset < cols ? rows + offset : cols);
}
/* The product of the sizes (saturating at INT64_MAX, for shapes not checked yet), and
 * the row-major strides of a contiguous tensor of that shape (saturating too). */
int64_t opr_meta_numel(const int64_t *shape, int ndim);
void opr_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides);

/* A tensor header with its counters and autograd fields initialised; the caller sets
 * shape, strides and storage (a full calloc shows up in the cost of small ops). */
opr_tensor *opr_tensor_alloc_header(opr_ctx *ctx);
/* New uninitialised contiguous tensor (kernels fill it). */
opr_tensor *opr_tensor_empty(opr_ctx *ctx, opr_dtype dtype, int ndim, const int64_t *shape,
                             opr_device dev);
/* New tensor header viewing `base`'s storage with the given geometry. */
opr_tensor *opr_tensor_make_view(opr_tensor *base, int ndim, const int64_t *shape,
                                 const int64_t *strides, int64_t offset);
/* resize_ (core/resize.c): t takes `shape`, contiguous from its storage offset, its
 * storage kept when it reaches the last element (its elements stay in storage order),
 * else replaced by a larger one with the same bytes first and zeros after, which only a
 * storage no other tensor shares may be. Bumps the storage's version. `who` starts
 * error messages; nothing changes on failure. */
int opr_tensor_resize(opr_tensor *t, const int64_t *shape, int ndim, const char *who);
/* Fills a plugin view of t (shape/strides point into t). */
void opr_tensor_fill_view(const opr_tensor *t, opr_tensor_view *v);
/* The view of a contiguous tensor of metadata m on dev with no data (what a kernel's
 * supports and cost_ns see before anything is allocated): its strides are written to
 * strides (OPR_MAX_DIMS entries), which, like m, must outlive the view. */
void opr_meta_fill_view(const opr_meta *m, opr_device dev, int64_t *strides, opr_tensor_view *v);
/* A tensor over memory opreg did not allocate (not counted in memory statistics).
 * With an owner (DLPack import) the owner's deleter runs when the storage is freed;
 * without one the memory is the caller's and is never freed here. strides NULL means
 * contiguous. */
struct DLManagedTensor;
opr_tensor *opr_tensor_over_memory(opr_ctx *ctx, opr_device dev, void *data, opr_dtype dtype, int ndim,
                                   const int64_t *shape, const int64_t *strides, int64_t offset,
                                   struct DLManagedTensor *owner);
/* Copies src into dst (same shape, same dtype; any layouts; any devices). */
int opr_tensor_copy_into(opr_tensor *dst, const opr_tensor *src);

/* ------------------------------------------------------------------ jagged (jagged.c) */

/* A new jagged header over values with structure r (both retained). values must have
 * r->total rows, 1 to OPR_MAX_DIMS - 1 dims and r's device. */
opr_tensor *opr_jagged_wrap(opr_tensor *values, opr_ragged *r);
/* A structure from host offsets (batch + 1 entries), validated against total; the
 * device tensor is made from them on dev. `who` starts error messages. */
opr_ragged *opr_ragged_from_host(opr_ctx *ctx, const int64_t *offsets, int64_t batch, int64_t total,
                                 opr_device dev, const char *who);
void opr_ragged_release(opr_ragged *r);
/* Whether two structures are equal: O(1) when they are the same object. */
bool opr_ragged_equal(const opr_ragged *a, const opr_ragged *b);
/* Fails naming both operands and the first sequence whose length differs. */
int opr_ragged_mismatch(const char *who, const char *a_name, const opr_ragged *a, const char *b_name,
                        const opr_ragged *b);
/* Fails for a jagged tensor given to a function that only takes dense ones. */
int opr_jagged_refuse(const opr_tensor *t, const char *who);
/* ------------------------------------------------------------------ batched (batched.c) */

/* A batched tensor at `level` over phys (retained), whose dim 0 is the batch. */
opr_tensor *opr_batched_wrap(opr_tensor *phys, int64_t level);
/* The thread's opr_vmap levels: push returns a new level (0 when nested too deep, -1
 * out of memory), pop removes the innermost. */
int64_t opr_vmap_level_push(void);
void opr_vmap_level_pop(void);
/* Whether level belongs to an opr_vmap still running on this thread. */
bool opr_vmap_level_active(int64_t level);
/* NULL when level is active on this thread; otherwise what its opr_vmap is, for a
 * message on a batched tensor of that level: "an opr_vmap that has returned" or "an
 * opr_vmap still running on another thread". */
const char *opr_vmap_level_gone(int64_t level);
/* Fails for a batched tensor given to a function that only takes plain ones. */
int opr_batched_refuse(const opr_tensor *t, const char *who);
/* A new header of t without its autograd history: for a batched tensor a batched
 * tensor over the same physical one, else a view of the same storage. */
opr_tensor *opr_tensor_alias(opr_tensor *t);
/* Refuses jagged and batched tensors for dense-only functions (0 when t is plain). */
static inline int opr_layout_refuse(const opr_tensor *t, const char *who)
{
    if (t && t->ragged) return opr_jagged_refuse(t, who);
    if (t && t->bt_phys) return opr_batched_refuse(t, who);
    return 0;
}

/* The autograd-carrying tensor behind t: its values when jagged, else t itself. */
static inline opr_tensor *opr_jagged_base(const opr_tensor *t)
{
    return t && t->ragged ? t->jag_values : (opr_tensor *)t;
}


/* Creates the built-in cpu device entry (type 0); frees what it holds. */
void opr_devices_init(opr_ctx *ctx);
void opr_devices_free(opr_ctx *ctx);

/* The CPU allocator with its cache of large blocks (cpu_cache.c). */
void *cpu_cache_new(void);
void cpu_cache_free(void *cache);
void *cpu_cache_alloc(void *cache, int32_t ordinal, size_t nbytes);
void cpu_cache_release(void *cache, int32_t ordinal, void *ptr, size_t nbytes);
/* Bytes kept in the cache, not in any tensor. */
uint64_t cpu_cache_cached(void *cache);

#endif /* OPREG_CORE_H */
