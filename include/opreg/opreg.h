/*
 * opreg — tensor operators on backends loaded at run time.
 *
 * Conventions of this header:
 *  - Functions that can fail return an opr_status (0 = OPR_OK, negative = error) or
 *    NULL, and leave a message in opr_last_error() (thread-local). Nothing aborts.
 *  - `_new` returns an object the caller owns and frees with the matching `_free`
 *    (contexts) or `opr_tensor_release` (tensors, which are reference counted).
 *  - Borrowed pointers (`const char *` names, `const opr_op *`) live as long as the
 *    context that returned them.
 *  - A context may be used from several threads for dispatch; registry mutations
 *    (loading YAML or plugins) are serialised internally, and op lookups and listings
 *    may run while another thread loads. Backward passes may run on several threads
 *    at once, also into shared leaves (see opr_grad and opr_backward for the limits).
 */
#ifndef OPREG_OPREG_H
#define OPREG_OPREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OPR_API __attribute__((visibility("default")))
#else
#define OPR_API
#endif

#define OPR_VERSION_MAJOR 0
#define OPR_VERSION_MINOR 1
#define OPR_VERSION_PATCH 0

/* Structs that cross the API start with struct_size and only ever grow at the end:
 * set struct_size = sizeof(the struct) as your header defines it. The library accepts
 * any size from the struct's first version up (the *_STRUCT_SIZE_0_1 constants below:
 * the size up to its last field in version 0.1), reads only what your size covers
 * (the rest counts as zero) and writes no further. */
#define OPR_STRUCT_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

/* Most dimensions a tensor may have. */
#define OPR_MAX_DIMS 8

/* ------------------------------------------------------------------ status */

typedef enum opr_status {
    OPR_OK = 0,
    OPR_ERR_INVALID = -1,     /* bad argument: shape, dtype, device, NULL, count */
    OPR_ERR_NOT_FOUND = -2,   /* no such op, plugin, device or kernel */
    OPR_ERR_NOMEM = -3,       /* allocation failed */
    OPR_ERR_BACKEND = -4,     /* a kernel or device reported failure */
    OPR_ERR_PARSE = -5,       /* YAML, schema or expression error */
    OPR_ERR_ABI = -6,         /* plugin ABI major version mismatch */
    OPR_ERR_UNSUPPORTED = -7, /* valid request that this build or backend can't do */
    OPR_ERR_IO = -8,          /* file could not be opened or read */
    OPR_ERR_REFUSED = -9,     /* refused on purpose (e.g. world-writable plugin) */
    OPR_ERR_MISMATCH = -10    /* a check ran and its results disagree with the reference
                                 (opr_gradcheck) */
} opr_status;

/* Short constant name of a status code ("OPR_ERR_INVALID"); never NULL. */
OPR_API const char *opr_status_name(int status);

/* Message describing the last error on this thread. Valid until the next opreg call
 * on this thread fails. Never NULL; "" when nothing has failed yet. */
OPR_API const char *opr_last_error(void);

/* True when the last failure on this thread (an OPR_ERR_UNSUPPORTED) is a refusal a
 * kernel declared in advance through its `supports` (ABI 2.2), as opposed to a kernel
 * that ran and returned OPR_ERR_UNSUPPORTED itself, or no kernel at all; a failure
 * wrapped in context by an outer call keeps it. opreg check makes the first a
 * `declined` verdict and the second a failure (docs/conformance.md). */
OPR_API bool opr_last_error_declined(void);

/* ------------------------------------------------------------------ version, log */

/* Version of the library that is running (which may be newer than the header a
 * program was compiled with): "major.minor.patch". */
OPR_API const char *opr_version(void);
/* Plugin ABI version the running library implements (see plugin.h). */
OPR_API void opr_abi_version(unsigned *major, unsigned *minor);

typedef enum opr_log_level { OPR_LOG_DEBUG = 0, OPR_LOG_INFO, OPR_LOG_WARN, OPR_LOG_ERROR } opr_log_level;
/* Receives log messages: level, source (a plugin's name, or "opreg"), the message
 * (one line, no newline; valid during the call) and the user data given to
 * opr_log_set. May be called from any thread, also several at once. */
typedef void (*opr_log_fn)(opr_log_level level, const char *source, const char *message, void *user_data);
/* Sets the process-wide log callback; NULL restores the default, which writes
 * warnings and errors to stderr and drops the rest. */
OPR_API void opr_log_set(opr_log_fn fn, void *user_data);

/* ------------------------------------------------------------------ dtypes */

typedef enum opr_dtype {
    OPR_F32 = 0,
    OPR_F64 = 1,
    OPR_I64 = 2,
    OPR_BOOL = 3, /* one byte, 0 or 1 */
    OPR_F16 = 4,  /* IEEE binary16; ops whose schema lists it compute it (the CPU plugin: in f32, rounded back) */
    OPR_BF16 = 5, /* bfloat16; the same */
    OPR_I32 = 6,  /* int32 (torch.int32); appended, so the values above keep their ABI */
    OPR_DTYPE_COUNT
} opr_dtype;

/* True for f32, f64, f16 and bf16: the dtypes that can require grad. */
static inline bool opr_dtype_is_floating(opr_dtype dt)
{
    return dt == OPR_F32 || dt == OPR_F64 || dt == OPR_F16 || dt == OPR_BF16;
}
/* Bytes per element; 0 for an invalid dtype. */
OPR_API size_t opr_dtype_size(opr_dtype dtype);
/* "f32", "f64", "i64", "bool", "f16", "bf16", "i32"; "?" for an invalid dtype. */
OPR_API const char *opr_dtype_name(opr_dtype dtype);
/* Parses a dtype name (also accepts "float32", "float64", "int64", "float", "double",
 * "long", "float16", "half", "bfloat16", "int32" and "int"). Returns OPR_OK or
 * OPR_ERR_INVALID. */
OPR_API opr_status opr_dtype_parse(const char *name, opr_dtype *out);

/* IEEE half (f16) and bfloat16 values from and to float, rounding to nearest even:
 * for filling or reading f16/bf16 tensors from the host. */
OPR_API uint16_t opr_f16_from_float(float f);
OPR_API float opr_f16_to_float(uint16_t h);
OPR_API uint16_t opr_bf16_from_float(float f);
OPR_API float opr_bf16_to_float(uint16_t h);

/* ------------------------------------------------------------------ context */

typedef struct opr_ctx opr_ctx;

/* Options of opr_ctx_new. The built-in op definitions are read from yaml_dir, else
 * $OPREG_YAML_DIR, else the first that exists of: the share/opreg/ops directory of the
 * installation that libopreg.so belongs to (found from the library's own location, so
 * a moved prefix still works) and, only for the build tree's own library, the source
 * registry/ops; when neither exists, opr_ctx_new fails naming both. Extra op files are
 * added after the built-in ones (which they may use: an extra op's formula may call
 * mul): first the entries of $OPREG_YAML_PATH (colon-separated; only when the built-in
 * ops are loaded), then yaml_paths; each entry is a YAML file or a directory of *.yaml
 * files; one that cannot be read, is not a regular file (a FIFO, a link to a device),
 * or has an invalid entry, fails opr_ctx_new naming the file, whether it is named
 * itself or lies in a directory named. Plugins come last (their kernels may be for the extra ops): plugin_paths, then
 * opr_plugin_discover. */
typedef struct opr_ctx_opts {
    size_t struct_size;            /* sizeof(opr_ctx_opts) */
    bool skip_builtin_yaml;        /* do not load the installed registry/ops YAML files */
    bool skip_plugin_discovery;    /* do not call opr_plugin_discover */
    const char *yaml_dir;          /* overrides where the built-in op YAML is read from */
    const char *const *plugin_paths; /* explicit plugin files or directories, loaded first */
    int n_plugin_paths;
    /* Newer than 0.1.0 (a program built with an older header passes a smaller
     * struct_size and gets none): extra op files or directories, loaded after the
     * built-in ops and $OPREG_YAML_PATH. */
    const char *const *yaml_paths;
    int n_yaml_paths;
} opr_ctx_opts;
#define OPR_CTX_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_ctx_opts, n_plugin_paths)

/* The CPU fallback: a call on a device that has no kernel for the op (or not for its
 * dtype) runs the CPU kernel on copies of the tensors, and the results are copied
 * back to the device; autograd records the call on the device tensors as usual, so
 * backward formulas fall back the same way. In-place ops, and ops the CPU has no kernel
 * for either, never fall back. The first fallback of each (op, device type) is
 * reported in the log (opr_log_set) as a warning naming both. On by default; off, such
 * a call fails with "OP: no kernel for device D". `opreg plan --backend D` marks the
 * formulas that would fall back. Returns the previous setting; thread-safe. */
OPR_API bool opr_cpu_fallback_set(opr_ctx *ctx, bool on);

/* Guard mode, for conformance checks (`opreg check`); slow, off by default. While on,
 * every kernel call of ctx (forward kernels run by opr_call, fused backward kernels run
 * by backward) is checked:
 *  - each output the library allocates gets 64 bytes of canary before and after its
 *    data (written with the device's copy_from_host, read back with its copy_to_host,
 *    so any device works). A kernel that returned OPR_OK but changed them fails the
 *    call with OPR_ERR_BACKEND: "relu on npu wrote 1 element past its output (kernel
 *    of plugin P, found in guard mode)" ("before its output", the count of damaged
 *    elements, the output's name when the kernel has several: " 'indices'", or for a
 *    fused backward kernel the input whose gradient it is).
 *    The output stays an ordinary tensor: its storage holds the canaries, and its
 *    storage offset (opr_tensor_offset) skips the front one, so it is not 0.
 *    On a device whose memory is host memory (the CPU, a plugin device flagged
 *    OPR_DEVICE_HOST_MEMORY) the output also ends its own mapping, followed by 64 KiB
 *    of inaccessible pages (the canary after it then runs up to them, 64 to 127
 *    bytes): a kernel reaching further past it faults there (SIGSEGV) instead of
 *    corrupting other memory, and opr_kernel_guard_overrun names the fault.
 *    Outputs a kernel allocates itself (data-dependent shapes, host->alloc_output) and
 *    the tensor an in-place op writes are not guarded.
 *  - each tensor input (items of Tensor[] too) is copied to the host before the call
 *    (the bytes its view spans) and compared after: "mul on npu changed its input
 *    'self' (...)". An in-place op's `self`, and inputs overlapping it, are not
 *    compared. Findings of one call are joined with "; ".
 * A kernel that fails is reported as usual, unchecked. The mode is read once per
 * kernel call: set it while no call runs to know which calls it covers. Returns the
 * previous setting (false for a NULL ctx). */
OPR_API bool opr_kernel_guards_set(opr_ctx *ctx, bool on);
/* For a fault handler (SIGSEGV, SA_SIGINFO): when addr (si_addr) lies in the guard pages
 * after a guarded output that is still alive, the number of bytes between the end of
 * that output's data and addr (>= 64); else -1. Async-signal-safe: it reads a fixed
 * table, takes no lock and allocates nothing. */
OPR_API int64_t opr_kernel_guard_overrun(const void *addr);
/* Kernel trace (for conformance supervisors): while buf is set, the host writes "OP on
 * DEVICE (plugin P)" into buf (len bytes, NUL-terminated, truncated) before every
 * kernel call of ctx and empties it when the kernel returns, so that a process that
 * shares buf with the caller (a MAP_SHARED page before fork) can name the kernel a
 * crash or a hang happened in. The writes are plain stores, not synchronised: meant for
 * one thread calling kernels. NULL turns it off. buf must outlive the setting. */
OPR_API void opr_kernel_trace_set(opr_ctx *ctx, char *buf, size_t len);

/* Seeds the context's random generator, which ops that draw randomness (dropout: the
 * `random:` key of their YAML entry) use: each such call takes the generator's next
 * 64-bit seed (one SplitMix64 step), so two calls differ, and the same seed followed by
 * the same calls gives the same results, on every backend (the kernels derive each
 * element's random number from that seed and the element's index alone). A new
 * context behaves as if seeded with 0. Thread-safe; calls from several threads at once
 * each get a distinct seed, in an order that depends on the scheduling. */
OPR_API void opr_manual_seed(opr_ctx *ctx, uint64_t seed);

/* Creates a context: loads the op definitions, then discovers and loads plugins (see
 * opr_plugin_discover). opts may be NULL for the defaults. A plugin that is refused
 * does not make this fail: see opr_plugin_candidate_get. Returns NULL on failure (for
 * example unreadable built-in YAML), and when memory runs out anywhere, also while
 * loading plugins: a context is complete or not made. */
OPR_API opr_ctx *opr_ctx_new(const opr_ctx_opts *opts);

/* Frees the context, its registry, devices and plugins. Tensors created in it must be
 * released first; a tensor that outlives its context is a caller bug (reported by
 * opr_ctx_free returning the number of live tensors, 0 when clean). */
OPR_API int opr_ctx_free(opr_ctx *ctx);

/* ------------------------------------------------------------------ plugins */

/* Loads one plugin file, or every *.so in a directory. Idempotent: a file already
 * loaded (same inode) is skipped. Returns OPR_OK if every file loaded or was already
 * loaded, else the first error (OPR_ERR_NOMEM before any other); refusals are also
 * listed by opr_plugin_candidate_get. A file that ran out of memory is not recorded as
 * refused: loading it again tries again. A directory refused as a whole (world-writable
 * without the sticky bit: OPR_ERR_REFUSED) or that cannot be read (OPR_ERR_IO), and a
 * dangling symbolic link (OPR_ERR_NOT_FOUND, "dangling symbolic link to T") are listed
 * as refused candidates too, with that path.
 * A plugin whose probe says it cannot run here (no device) gives OPR_ERR_UNSUPPORTED
 * when loaded by file name, and is merely skipped when its directory is loaded. */
OPR_API opr_status opr_plugin_load(opr_ctx *ctx, const char *path);

/* Loads the plugins of, in order: OPREG_PLUGIN_PATH (colon-separated), the
 * lib/opreg/plugins directory of the installation that libopreg.so belongs to (found
 * from the library's own location, so a moved prefix still works), then, only for the
 * build tree's own library, the build's plugin directory. Deduplicated; safe to call
 * repeatedly.
 * Refused plugins are recorded, not returned: OPR_OK, or OPR_ERR_NOMEM when memory ran
 * out (the search stops there). */
OPR_API opr_status opr_plugin_discover(opr_ctx *ctx);

/* The plugin files opr_ctx_new(opts) would open (opts NULL: the defaults), in the
 * order it would consider them, without opening any: the explicit plugin_paths, then,
 * unless skip_plugin_discovery, the search path of opr_plugin_discover; a directory
 * contributes its *.so as the loader reads it. Each file appears once, by its real
 * path; what the loader opens nothing of (a path that does not exist, a dangling link,
 * a directory refused as world-writable or unreadable) contributes nothing. For tools
 * that vet each file before a context loads it (opreg info runs each plugin's init in
 * a child process first). *paths, *n of them, is freed with opr_plugin_files_free.
 * OPR_OK, OPR_ERR_INVALID for NULL results, OPR_ERR_NOMEM (nothing returned). */
OPR_API opr_status opr_plugin_files(const opr_ctx_opts *opts, char ***paths, int *n);
/* Frees what opr_plugin_files returned. */
OPR_API void opr_plugin_files_free(char **paths, int n);

/* Records plugin file `path` as refused with the reason `why`, without opening it: it
 * is listed by opr_plugin_candidate_get (its real path, `why`, not loaded), and every
 * later load of the same file (same inode, by any path) is refused with that reason
 * (OPR_ERR_REFUSED). For a tool that found elsewhere that the file must not be loaded
 * (opreg info: its init crashed in a child process). OPR_OK, also when the file was
 * refused already (the first reason stays); OPR_ERR_NOT_FOUND when path does not
 * exist; OPR_ERR_INVALID for NULL arguments or a file that is loaded already;
 * OPR_ERR_NOMEM (nothing recorded). */
OPR_API opr_status opr_plugin_refuse(opr_ctx *ctx, const char *path, const char *why);

typedef struct opr_plugin_candidate {
    size_t struct_size;
    const char *path;    /* file that was considered (or directory, or dangling link) */
    const char *name;    /* plugin name, NULL if it never got that far */
    const char *version; /* plugin version string, or NULL */
    unsigned abi_major, abi_minor; /* what the plugin declared (0.0 if unknown) */
    int score;           /* probe score: 0 unusable here, higher preferred; -1 when no
                            probe ran: the file has none, or was refused before its probe
                            could run (dlopen failed, no opr_plugin_init symbol) */
    bool loaded;         /* true if in use */
    const char *why;     /* reason for refusal or skip; NULL when loaded without remark */
} opr_plugin_candidate; /* all fields since 0.1 */
#define OPR_PLUGIN_CANDIDATE_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_plugin_candidate, why)

/* Registers a plugin that is part of the application (or of a test) instead of a
 * shared object: init is called exactly as the loader calls a plugin's
 * opr_plugin_init (typed opr_plugin_init_fn in plugin.h), with the same host table, the
 * same staging and the same validation, refusals and messages, so that what passes here
 * passes in a .so and the other way round. dir (may be NULL) becomes self->dir, against
 * which host->load_yaml resolves relative paths (NULL: they are used as given, relative
 * to the working directory).
 * The registration is listed by opr_plugin_candidate_get like a file, with the path
 * "(in-process)"; its `why` says why it was refused. Registering an init whose plugin
 * name is already loaded is skipped like a second copy of a file (OPR_ERR_REFUSED).
 * Returns OPR_OK, or the status of the refusal: OPR_ERR_ABI, OPR_ERR_INVALID (an
 * invalid registration, no name), the status init returned, OPR_ERR_REFUSED, or
 * OPR_ERR_NOMEM (nothing recorded). OPR_ERR_INVALID without a record for a NULL ctx or
 * init. The code init points at must stay valid as long as the context. */
struct opr_host_api;
struct opr_plugin;
OPR_API opr_status opr_plugin_register(opr_ctx *ctx,
                                       int (*init)(const struct opr_host_api *host, struct opr_plugin *self),
                                       const char *dir);

/* Number of plugin files considered so far (loaded, refused or skipped). */
OPR_API int opr_plugin_candidate_count(const opr_ctx *ctx);
/* Fills *out with candidate i. Strings are borrowed from the context. */
OPR_API opr_status opr_plugin_candidate_get(const opr_ctx *ctx, int i, opr_plugin_candidate *out);

/* ------------------------------------------------------------------ devices */

typedef struct opr_device {
    int32_t type;  /* index in the context's device table; 0 is always "cpu" */
    int32_t index; /* device ordinal */
} opr_device;

#define OPR_CPU ((opr_device){0, 0})

/* Parses "cpu", "cuda", "cuda:1". OPR_ERR_NOT_FOUND if no loaded plugin provides it. */
OPR_API opr_status opr_device_parse(const opr_ctx *ctx, const char *name, opr_device *out);
/* Writes "cuda:0" into buf; returns buf (or "?" when the device is unknown). */
OPR_API const char *opr_device_format(const opr_ctx *ctx, opr_device dev, char *buf, size_t len);
/* Number of device types known (cpu first) and their names. */
OPR_API int opr_device_type_count(const opr_ctx *ctx);
OPR_API const char *opr_device_type_name(const opr_ctx *ctx, int type);
/* Number of ordinals of a device type (1 for cpu). */
OPR_API int opr_device_type_ordinals(const opr_ctx *ctx, int type);
/* Waits until all work queued on the device is done. */
OPR_API opr_status opr_device_sync(opr_ctx *ctx, opr_device dev);

typedef struct opr_mem_stats {
    size_t struct_size;
    uint64_t current_bytes; /* bytes held by live tensor storages */
    uint64_t peak_bytes;    /* highest current_bytes since creation or last reset */
    uint64_t reserved_bytes;/* bytes the device allocator holds (>= current with caching) */
    uint64_t n_allocs;      /* storages allocated so far */
} opr_mem_stats; /* all fields since 0.1 */
#define OPR_MEM_STATS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_mem_stats, n_allocs)

/* Memory statistics of one device, counted exactly for every storage. */
OPR_API opr_status opr_memory_stats(const opr_ctx *ctx, opr_device dev, opr_mem_stats *out);
/* Sets peak_bytes to current_bytes. */
OPR_API opr_status opr_memory_reset_peak(opr_ctx *ctx, opr_device dev);

/* ------------------------------------------------------------------ tensors */

typedef struct opr_tensor opr_tensor;

/* New tensor with contiguous layout. Contents are zero. shape may be NULL if ndim==0.
 * Sizes must not be negative, and a tensor (or view) holds at most 2^60 - 1 elements,
 * so its size in bytes fits in int64: a larger shape is OPR_ERR_INVALID ("too many
 * elements"), a shape that fits but cannot be allocated OPR_ERR_NOMEM. */
OPR_API opr_tensor *opr_tensor_new(opr_ctx *ctx, opr_dtype dtype, int ndim,
                                   const int64_t *shape, opr_device dev);
/* New tensor filled from host memory holding numel elements laid out contiguously.
 * For bool, any non-zero byte is stored as 1 (also in opr_tensor_copy_from_host). */
OPR_API opr_tensor *opr_tensor_from_data(opr_ctx *ctx, opr_dtype dtype, int ndim,
                                         const int64_t *shape, const void *data,
                                         opr_device dev);
/* Copies the tensor's elements, in row-major logical order, to host memory.
 * nbytes must be at least numel * element size. Works for any layout and device. */
OPR_API opr_status opr_tensor_copy_to_host(const opr_tensor *t, void *dst, size_t nbytes);
/* The same, converted to double (bool as 0/1, f16/bf16 widened): n, the room in dst,
 * must be at least numel. For tests, checks and printing. */
OPR_API opr_status opr_tensor_copy_to_host_f64(const opr_tensor *t, double *dst, int64_t n);
/* Copies from host memory into the tensor (any layout), in row-major logical order. */
OPR_API opr_status opr_tensor_copy_from_host(opr_tensor *t, const void *src, size_t nbytes);

/* Reference counting: retain returns t; release frees the tensor (and its storage,
 * when no view holds it) at the last reference. Both accept NULL. Safe to call from
 * several threads on the same tensor. */
OPR_API opr_tensor *opr_tensor_retain(opr_tensor *t);
OPR_API void opr_tensor_release(opr_tensor *t);

/* Accessors. On a NULL tensor they return NULL, -1, 0 or an invalid dtype/device
 * rather than crashing. Shape and stride arrays have opr_tensor_ndim entries and live
 * as long as the tensor. */
OPR_API opr_ctx *opr_tensor_ctx(const opr_tensor *t);
OPR_API opr_dtype opr_tensor_dtype(const opr_tensor *t);
OPR_API int opr_tensor_ndim(const opr_tensor *t);
/* Size of dimension d (negative d counts from the end); -1 if out of range. */
OPR_API int64_t opr_tensor_size(const opr_tensor *t, int d);
/* Stride in elements of dimension d; 0 if out of range. */
OPR_API int64_t opr_tensor_stride(const opr_tensor *t, int d);
OPR_API const int64_t *opr_tensor_shape(const opr_tensor *t);
OPR_API const int64_t *opr_tensor_strides(const opr_tensor *t);
OPR_API int64_t opr_tensor_offset(const opr_tensor *t); /* storage offset in elements */
OPR_API int64_t opr_tensor_numel(const opr_tensor *t);
OPR_API opr_device opr_tensor_device(const opr_tensor *t);
/* True when the elements lie in row-major order without gaps (a tensor without
 * elements always does). */
OPR_API bool opr_tensor_is_contiguous(const opr_tensor *t);
/* Address of element [0,...,0] (device memory for device tensors). */
OPR_API void *opr_tensor_data(const opr_tensor *t);
/* True when both tensors view the same storage. */
OPR_API bool opr_tensor_shares_storage(const opr_tensor *a, const opr_tensor *b);
/* Formats "[2, 3] f32 cpu" into buf; returns buf. */
OPR_API const char *opr_tensor_describe(const opr_tensor *t, char *buf, size_t len);

/* Views share storage with their base; all return a new reference or NULL. */
OPR_API opr_tensor *opr_tensor_transpose(opr_tensor *t, int d0, int d1);
OPR_API opr_tensor *opr_tensor_permute(opr_tensor *t, const int *dims, int ndims);
OPR_API opr_tensor *opr_tensor_expand(opr_tensor *t, const int64_t *shape, int ndim);
OPR_API opr_tensor *opr_tensor_narrow(opr_tensor *t, int dim, int64_t start, int64_t length);
OPR_API opr_tensor *opr_tensor_diagonal(opr_tensor *t, int64_t offset, int d0, int d1);
OPR_API opr_tensor *opr_tensor_unsqueeze(opr_tensor *t, int dim);
OPR_API opr_tensor *opr_tensor_squeeze(opr_tensor *t, int dim); /* dim = OPR_ALL_DIMS: all */
/* View when the strides allow it; OPR_ERR_INVALID otherwise (see opr_tensor_reshape). */
OPR_API opr_tensor *opr_tensor_view_shape(opr_tensor *t, const int64_t *shape, int ndim);
/* A view when possible, else a contiguous copy. One entry of shape may be -1. */
OPR_API opr_tensor *opr_tensor_reshape(opr_tensor *t, const int64_t *shape, int ndim);
/* t itself (new reference) when contiguous, else a contiguous copy. */
OPR_API opr_tensor *opr_tensor_contiguous(opr_tensor *t);
/* Copy on another device (a new reference to t when already there). */
OPR_API opr_tensor *opr_tensor_to(opr_tensor *t, opr_device dev);

#define OPR_ALL_DIMS INT32_MIN

/* DLPack (dlpack.h). Export is zero-copy: the DLManagedTensor holds a reference to the
 * tensor until its deleter runs. Import is zero-copy too, for CPU memory and for the memory
 * of a device a loaded plugin provides (cuda, rocm): the tensor calls the
 * DLManagedTensor's deleter when its storage is freed; on failure the caller keeps
 * ownership of the DLManagedTensor. bool travels as uint8 (DLPack 0.6 has no bool): an
 * imported uint8 tensor becomes bool, and is refused (OPR_ERR_INVALID) if a byte is
 * neither 0 nor 1. Negative strides are refused (OPR_ERR_UNSUPPORTED); so are
 * (OPR_ERR_INVALID) a NULL data pointer with elements to hold, an ndim outside
 * 0..OPR_MAX_DIMS, negative sizes, and sizes, strides and offset that reach past
 * int64 elements. */
struct DLManagedTensor;
OPR_API struct DLManagedTensor *opr_tensor_to_dlpack(opr_tensor *t);
OPR_API opr_tensor *opr_tensor_from_dlpack(opr_ctx *ctx, struct DLManagedTensor *m);

/* ------------------------------------------------------------------ jagged tensors */

/* A jagged tensor is a batch of B sequences of different lengths, [B, ragged, D...]:
 * one dense `values` tensor [total, D...] holding every sequence's rows one after the
 * other, and i64 `offsets` [B + 1] on the same device (sequence b is values rows
 * offsets[b] .. offsets[b+1]-1). Dimension 1 is the ragged one.
 *
 * The offsets form a structure shared by every tensor made from it: the results of
 * ops on a jagged tensor reuse their input's structure (no copy), so checking that two
 * operands match is O(1) when they share it and O(B) otherwise.
 *
 * Accessors on a jagged tensor: opr_tensor_ndim counts the ragged dim; opr_tensor_size
 * and opr_tensor_shape give B for dim 0 and OPR_SIZE_RAGGED for dim 1; numel, dtype,
 * device and data are those of the values; opr_tensor_stride of dims 0 and 1 is 0.
 *
 * Ops (opr_call) accept jagged tensors where their YAML entry has a `jagged:` rule
 * (`opreg ops --jagged` lists them; docs/jagged.md): elementwise ops (jagged with
 * jagged of the same structure, or with a dense tensor that broadcasts over the
 * non-ragged dims: [D...], or [B, 1, D...]), linear and matmul with a dense weight,
 * sum and mean over the ragged dim (a dense [B, D...] result) or over other dims,
 * softmax and log_softmax over the ragged dim, and full reductions. Any other op
 * refuses a jagged argument with an error naming it (OPR_ERR_UNSUPPORTED).
 *
 * Autograd: a jagged tensor's autograd state is its values'. opr_set_requires_grad,
 * opr_grad (a jagged gradient of the same structure), opr_zero_grad, opr_backward and
 * opr_autograd_grad take jagged tensors. Views (opr_tensor_transpose, ...), DLPack
 * export and opr_tensor_copy_to_host/from_host refuse them: go through
 * opr_jagged_values or opr_jagged_to_padded. opr_tensor_to and opr_tensor_contiguous
 * work (the offsets move along). */

/* opr_tensor_size / opr_tensor_shape of a jagged tensor's ragged dim. */
#define OPR_SIZE_RAGGED (-2)

/* Wraps values [total, D...] (1 to OPR_MAX_DIMS - 1 dims) with offsets (i64, 1-d,
 * B + 1 >= 1 entries, on values' device): zero-copy, values keeps its data and its
 * autograd state (gradients of the jagged tensor reach values). The offsets must start
 * at 0, never decrease and end at total: otherwise OPR_ERR_INVALID naming the first
 * entry at fault, and nothing is kept. The offsets are read once (a copy to the host);
 * changing the offsets tensor afterwards does not change the jagged tensor. */
OPR_API opr_tensor *opr_jagged_from_values(opr_tensor *values, opr_tensor *offsets);
/* Wraps values (same total rows) with the structure of the jagged tensor `like`,
 * sharing it: O(1), no copy, no check of the offsets. */
OPR_API opr_tensor *opr_jagged_like(opr_tensor *values, const opr_tensor *like);
/* A jagged tensor copying n >= 1 dense tensors [L_i, D...] (same dtype, device and
 * D...; L_i may be 0) one after the other. Like PyTorch's nested_tensor(list), the
 * result is a new leaf: gradients do not flow back into the list. */
OPR_API opr_tensor *opr_jagged_from_list(opr_ctx *ctx, opr_tensor *const *items, int n);
/* A jagged tensor of the first lengths[b] rows of each padded[b] (padded: [B, N, D...],
 * n == B lengths in 0..N). Recorded by autograd (the padding gets no gradient). */
OPR_API opr_tensor *opr_jagged_from_padded(opr_tensor *padded, const int64_t *lengths, int n);
/* The dense [B, max_len, D...] tensor of a jagged one, rows past each sequence's end
 * set to pad_value (max_len: the longest sequence). Recorded by autograd. */
OPR_API opr_tensor *opr_jagged_to_padded(opr_tensor *t, double pad_value);

/* True for a jagged tensor. */
OPR_API bool opr_tensor_is_jagged(const opr_tensor *t);
/* The values [total, D...] of a jagged tensor: a new reference to the very tensor it
 * wraps (zero-copy; writes and gradients are shared). NULL for a dense tensor. */
OPR_API opr_tensor *opr_jagged_values(const opr_tensor *t);
/* The offsets tensor (i64 [B + 1], on the values' device): a new reference. NULL for a
 * dense tensor. */
OPR_API opr_tensor *opr_jagged_offsets(const opr_tensor *t);
/* The offsets on the host (B + 1 entries), living as long as t; NULL for a dense tensor. */
OPR_API const int64_t *opr_jagged_offsets_host(const opr_tensor *t);
/* Length of the longest sequence (0 when B is 0); -1 for a dense tensor. */
OPR_API int64_t opr_jagged_max_length(const opr_tensor *t);
/* True when both are jagged with equal offsets (O(1) when they share the structure). */
OPR_API bool opr_jagged_same_structure(const opr_tensor *a, const opr_tensor *b);

/* ------------------------------------------------------------------ vmap */

/* opr_vmap runs a function of one sample over a whole batch, functorch-style
 * (docs/vmap.md). The callback gets per-sample tensors: for a batched input, a
 * *batched tensor* whose batch dim is invisible (its shape is one sample's), for an
 * unbatched input the tensor itself. It calls ordinary ops (opr_call) on them; each op
 * runs once for the whole batch by its YAML `batch:` rule (`opreg ops --batching`), or,
 * without one, by a loop over the samples (correct, slower). It fills out[0..nout-1]
 * with new references and returns OPR_OK, or an error status. An output may also be
 * one of the inputs as it is (out[k] = in[i], the identity, batched or not), with or
 * without a reference of the callback's: the host takes one for it when the input
 * gained no reference during the callback (so a callback that returns an input
 * without retaining it must not keep another reference to it meanwhile, e.g. through
 * an op recorded by autograd that saved it: retain it then). A returned opr_status (OPR_ERR_INVALID .. OPR_ERR_MISMATCH) is what
 * opr_vmap returns, with the callback's message (or one saying it left none); any
 * other nonzero value becomes OPR_ERR_BACKEND with a message naming the value.
 *
 * Autograd: inside the callback, opr_autograd_grad of a per-sample loss with respect
 * to tensors from outside (unbatched parameters) gives per-sample gradients (batched
 * tensors: return them as outputs), functorch's vmap(grad(f)); the backward formulas
 * run on batched tensors through the same rules. Gradients also flow through opr_vmap
 * from outside: the outputs are ordinary tensors recorded from the inputs (vjp of vmap).
 *
 * Batched tensors live as long as the call, on its thread: one kept and used after
 * opr_vmap returned, or used on another thread while the call runs, is refused
 * (OPR_ERR_INVALID, the message saying which). Views (opr_tensor_transpose, ...), DLPack export and host
 * copies refuse them: inside the callback use the ops (transpose, reshape, ...).
 * No op of this version draws random numbers; docs/vmap.md states the rule for those
 * that will. Ops with data-dependent output shapes (masked_select) work with an
 * unbatched mask and refuse a batched one. */
typedef opr_status (*opr_vmap_fn)(void *user, opr_tensor *const *in, int nin, opr_tensor **out, int nout);

typedef struct opr_vmap_opts {
    size_t struct_size;
    int64_t chunk_size; /* run the callback on chunks of at most this many samples (bounds
                           memory); 0: the whole batch at once. At most 16384 chunks (a
                           smaller chunk is OPR_ERR_UNSUPPORTED) */
} opr_vmap_opts; /* all fields since 0.1 */
#define OPR_VMAP_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_vmap_opts, chunk_size)

/* Most opr_vmap calls nested inside each other on one thread. */
#define OPR_VMAP_MAX_DEPTH 8

/* Maps fn over dim in_dims[i] of each in[i] (-1: in[i] is unbatched, the same for every
 * sample; in_dims NULL: dim 0 of every input). Every batched input must have the same
 * size there, the batch size N (at least one input must be batched). Output k gets the
 * batch at dim out_dims[k] (negative counts from the end of the output's dims; out_dims
 * NULL: 0); an unbatched output of the callback (the same for every sample) is expanded
 * to the batch. in, in_dims, out and out_dims have nin and nout entries; out receives
 * new references, or NULLs on error. opts may be NULL. Nested calls (an opr_vmap inside
 * the callback of another) map the inner batch inside the outer one. */
OPR_API opr_status opr_vmap(opr_ctx *ctx, opr_vmap_fn fn, void *user, opr_tensor *const *in, const int *in_dims,
                            int nin, opr_tensor **out, const int *out_dims, int nout, const opr_vmap_opts *opts);
/* True for a batched tensor (inside an opr_vmap callback). */
OPR_API bool opr_tensor_is_batched(const opr_tensor *t);
/* ------------------------------------------------------------------ autograd state */

/* Marks a leaf tensor as requiring grad (floating dtypes only). */
OPR_API opr_status opr_set_requires_grad(opr_tensor *t, bool requires_grad);
OPR_API bool opr_requires_grad(const opr_tensor *t);
/* Accumulated gradient of a leaf (borrowed reference), or NULL. The reference lasts
 * until the gradient is replaced: by opr_zero_grad(t), or by the next backward pass
 * that adds to t's gradient (the sum is a new tensor). So call opr_grad(t), and use
 * what it returned, only while no backward pass into t runs on another thread (join
 * those first); retain it (opr_tensor_retain) to keep it past a later backward.
 * Backward passes into the same leaf, and opr_zero_grad, may run on several threads
 * at once: each addition to the gradient is atomic. */
OPR_API opr_tensor *opr_grad(const opr_tensor *t);
/* Thread-local grad mode (default on). Returns the previous mode. While it is off
 * (no_grad), ops record nothing and their outputs do not require grad. */
OPR_API bool opr_grad_mode_set(bool enabled);
OPR_API bool opr_grad_mode_enabled(void);
/* Thread-local special-gradient mode (default on). Off is "fast mode": nodes recorded
 * while it is off use the ops' fast derivative variants (the YAML `fast:` key), which
 * skip the special-case subgradients (norm at 0, cdist at a zero distance, prod with
 * zeros, ties of max/min, ...) and may give NaN or inf exactly there; away from those
 * points they equal the normal gradients. The mode is read when a node is recorded,
 * not at backward: a graph built in fast mode runs its fast formulas whenever and on
 * whichever thread backward runs. registry/README.md lists every op's special points
 * and what fast mode gives there. Returns the previous mode. */
OPR_API bool opr_special_grads_set(bool enabled);
OPR_API bool opr_special_grads_enabled(void);
/* Drops the accumulated gradient of t. */
OPR_API opr_status opr_zero_grad(opr_tensor *t);
/* A new tensor sharing t's storage, cut off from the graph (requires_grad false). */
OPR_API opr_tensor *opr_tensor_detach(opr_tensor *t);

typedef struct opr_backward_opts {
    size_t struct_size;
    bool retain_graph;  /* keep saved tensors so the graph can be run again */
    bool create_graph;  /* record the backward pass itself (for higher derivatives).
                           Into a leaf, this makes a loop (the gradient's graph holds the
                           leaf): it is freed once nothing outside the loop holds the
                           leaf, so releasing the leaf is enough. */
    /* 0.2, optional (opr_backward only): called once for each leaf of the pass when its
     * .grad holds every contribution of this pass, on the thread running backward,
     * while the rest of the backward still runs (the data-parallel helper starts its
     * reductions from it). It may read opr_grad(leaf); it must not run backward, nor
     * change the leaf or its gradient. */
    void (*leaf_ready)(opr_tensor *leaf, void *user);
    void *leaf_ready_user; /* 0.2: handed to leaf_ready */
} opr_backward_opts; /* fields since 0.1 unless marked */
#define OPR_BACKWARD_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_backward_opts, create_graph)
#define OPR_BACKWARD_OPTS_STRUCT_SIZE_0_2 OPR_STRUCT_SIZE(opr_backward_opts, leaf_ready_user)

/* Accumulates d(root)/d(leaf), weighted by grad, into every leaf that requires grad and
 * that root depends on. grad may be NULL when root has one element (it is then 1).
 * opts may be NULL (both false). Saved tensors are released as each node finishes
 * unless retain_graph. Threads may run backward passes at once, also into the same
 * leaves (each addition to a leaf's gradient is atomic); two passes must not run
 * through the same recorded op at once (a non-leaf tensor both graphs reach). The
 * same holds for opr_autograd_grad. Except with create_graph: while a leaf's gradient
 * holds a graph, use that leaf (ops, backward, release) from one thread at a time. */
OPR_API opr_status opr_backward(opr_tensor *root, opr_tensor *grad, const opr_backward_opts *opts);

/* Gradients of outputs (weighted by grad_outputs; NULL entries or a NULL array mean 1
 * for one-element outputs) with respect to inputs, returned in grads (new references;
 * NULL where an input does not influence the outputs). Leaves' .grad is untouched. */
OPR_API opr_status opr_autograd_grad(opr_tensor *const *outputs, opr_tensor *const *grad_outputs, int n_outputs,
                              opr_tensor *const *inputs, int n_inputs, opr_tensor **grads,
                              const opr_backward_opts *opts);

/* ------------------------------------------------------------------ ops */

typedef struct opr_op opr_op;

typedef enum opr_value_kind {
    OPR_V_NONE = 0,
    OPR_V_TENSOR,
    OPR_V_TENSOR_LIST,
    OPR_V_INT,
    OPR_V_DOUBLE,
    OPR_V_BOOL,
    OPR_V_INT_LIST,
    OPR_V_STRING,
    OPR_V_DOUBLE_LIST       /* a float[] argument (ATen's float[]?: upsample's scale_factors) */
} opr_value_kind;

/* One argument of opr_call, in schema order. Pointers are borrowed for the call. */
typedef struct opr_value {
    opr_value_kind kind;
    union {
        opr_tensor *t;
        struct { opr_tensor *const *items; int n; } tl;
        int64_t i;
        double d;
        bool b;
        struct { const int64_t *items; int n; } il;
        const char *s;
        struct { const double *items; int n; } dl;
    } u;
} opr_value;

static inline opr_value opr_v_none(void) { opr_value v; v.kind = OPR_V_NONE; v.u.i = 0; return v; }
static inline opr_value opr_v_tensor(opr_tensor *t) { opr_value v; v.kind = OPR_V_TENSOR; v.u.t = t; return v; }
static inline opr_value opr_v_tensors(opr_tensor *const *ts, int n) { opr_value v; v.kind = OPR_V_TENSOR_LIST; v.u.tl.items = ts; v.u.tl.n = n; return v; }
static inline opr_value opr_v_int(int64_t i) { opr_value v; v.kind = OPR_V_INT; v.u.i = i; return v; }
static inline opr_value opr_v_double(double d) { opr_value v; v.kind = OPR_V_DOUBLE; v.u.d = d; return v; }
static inline opr_value opr_v_bool(bool b) { opr_value v; v.kind = OPR_V_BOOL; v.u.b = b; return v; }
static inline opr_value opr_v_ints(const int64_t *items, int n) { opr_value v; v.kind = OPR_V_INT_LIST; v.u.il.items = items; v.u.il.n = n; return v; }
static inline opr_value opr_v_string(const char *s) { opr_value v; v.kind = OPR_V_STRING; v.u.s = s; return v; }
static inline opr_value opr_v_doubles(const double *items, int n) { opr_value v; v.kind = OPR_V_DOUBLE_LIST; v.u.dl.items = items; v.u.dl.n = n; return v; }

/* Overloads. As in PyTorch, one op name may stand for several schemas, each an op of
 * its own: "max" is max(Tensor self) and max.dim(Tensor self, int dim, ...); "gt" is
 * gt (also found as gt.Tensor) and gt.Scalar. opr_op_resolve (below) picks one by the
 * arguments; opr_op_find finds one by name. */

/* Finds an op by name: "mm", "max.dim" (one overload exactly), or "gt.Tensor" for an op
 * written "gt" that declares that overload name. A plain name without an op of exactly
 * that name gives the first overload of the set. Look it up once and keep the pointer. */
OPR_API const opr_op *opr_op_find(const opr_ctx *ctx, const char *name);
/* The overload set of name ("max", or "max.dim" for the same set), in the order the
 * ops were added: fills out with up to cap of them (out may be NULL when cap is 0) and
 * returns how many there are; 0 when none, a negative status on NULL arguments. */
OPR_API int opr_op_overloads(const opr_ctx *ctx, const char *name, const opr_op **out, int cap);
/* The op's overload name ("dim" for max.dim, "Tensor" for gt), NULL when it has none.
 * The op's name (opr_op_name) is as written, with its overload: "max.dim", "gt". */
OPR_API const char *opr_op_overload_name(const opr_op *op);
/* The ops in the order they were added. Both take no lock: while another thread
 * loads, the count only grows (except when a plugin whose init failed takes back the
 * ops it defined) and an op, once returned, lives as long as the context. */
OPR_API int opr_op_count(const opr_ctx *ctx);
OPR_API const opr_op *opr_op_at(const opr_ctx *ctx, int i);
OPR_API const char *opr_op_name(const opr_op *op);
/* The schema as written, "mm(Tensor self, Tensor mat2) -> Tensor". */
OPR_API const char *opr_op_schema(const opr_op *op);
OPR_API int opr_op_num_args(const opr_op *op);
/* Number of outputs in the schema; 1 for an op returning a Tensor[] (whose length
 * depends on the arguments: opr_op_result_count). */
OPR_API int opr_op_num_outputs(const opr_op *op);
/* Whether op returns a Tensor[] ("split(Tensor self, int split_size, int dim=0) ->
 * Tensor[]"): its calls give as many tensors as its `count:` expression says for the
 * arguments. False for a NULL op. */
OPR_API bool opr_op_returns_list(const opr_op *op);
/* How many tensors opr_call(op, args, nargs, ...) gives, for an op returning a Tensor[]
 * (the arguments are checked as opr_call checks them; an op's `count:` may give 0);
 * for any other op its number of outputs. Pass that many
 * result slots to opr_call. Batched (opr_vmap) and jagged arguments are refused
 * (OPR_ERR_UNSUPPORTED) for list ops. */
OPR_API opr_status opr_op_result_count(const opr_op *op, const opr_value *args, int nargs, int *count);
/* Name of argument i, or NULL when out of range. */
OPR_API const char *opr_op_arg_name(const opr_op *op, int i);
/* Kind of value argument i takes (OPR_V_TENSOR, OPR_V_INT, ...), -1 when out of range.
 * A float argument also takes OPR_V_INT, a float[] one (OPR_V_DOUBLE_LIST) OPR_V_INT_LIST; a Scalar (reported as OPR_V_DOUBLE) takes
 * OPR_V_INT, OPR_V_DOUBLE or OPR_V_BOOL; an optional one also takes OPR_V_NONE. */
OPR_API int opr_op_arg_kind(const opr_op *op, int i);
/* The argument's type as the registry reads the schema: "Tensor", "Tensor?", "Tensor[]",
 * "int", "int?", "int[]", "int[]?", "bool[]" (ATen's bool[N]: an int list of 0 / 1),
 * "float", "float?", "float[]", "float[]?", "Scalar", "Scalar?", "bool", "bool?" or "str" (ATen's SymInt reads as int,
 * int[N] as int[]); NULL when out of range. A Scalar is a number (int, float or bool): with tensors of
 * another category it promotes them as PyTorch does for wrapped numbers (opr_call). */
OPR_API const char *opr_op_arg_type(const opr_op *op, int i);
/* Whether the op writes Tensor argument i in place although it is not an in-place op's
 * self (ATen's `Tensor(a!)`: batch norm's running statistics). Such an argument must not
 * require grad while grad mode is on; each call that completes bumps its version, so a
 * graph that saved it refuses to run backward (docs/formulas.md, "Schemas"). */
OPR_API bool opr_op_arg_written(const opr_op *op, int i);
/* True when argument i accepts None (OPR_V_NONE): its type ends in '?'. */
OPR_API bool opr_op_arg_optional(const opr_op *op, int i);
/* True when argument i has a default, which *out (may be NULL) receives: lists and
 * strings point into the op and live as long as it; None for `=None`. False when it
 * has none or i is out of range. */
OPR_API bool opr_op_arg_default(const opr_op *op, int i, opr_value *out);
/* The position of the argument named name in the schema, -1 when there is none. */
OPR_API int opr_op_arg_index(const opr_op *op, const char *name);
/* Name of output i ("values", "indices"; "result" for a single unnamed Tensor), NULL
 * when out of range; opr_op_output_index is the reverse (-1 when none). */
OPR_API const char *opr_op_output_name(const opr_op *op, int i);
OPR_API int opr_op_output_index(const opr_op *op, const char *name);
/* True if the op accepts dtype as its common dtype (its YAML `dtypes:`). */
OPR_API bool opr_op_supports_dtype(const opr_op *op, opr_dtype dtype);
/* True if the op can run on this device type: some loaded plugin has a kernel for it
 * there, or it is a view the host implements (on a device other than cpu only when
 * the device has a copy_ kernel, without which a view cannot be read back: plugin.h,
 * the device contract), or its alternative (below) can run there, or it is a composite
 * op (below) every op of whose forward can run there (looked up by name, through nested
 * composites; an op the forward calls that is not defined yet makes it false). Dtypes
 * are not considered. */
OPR_API bool opr_op_has_kernel(const opr_op *op, int device_type);
/* Which plugin provides an op's kernel on a device type for one dtype
 * (opr_op_kernel_info). Precedence is per (op, device, dtype): the first plugin loaded
 * that provides it, unless a later one overrode that dtype explicitly (plugin.h,
 * opr_kernel_desc.override_dtypes). */
typedef struct opr_kernel_info {
    size_t struct_size;
    const char *plugin;   /* the plugin whose kernel runs */
    const char *shadowed; /* a plugin whose kernel for the same (op, device, dtype) is
                             not used (the one overridden, or a later one that did not
                             ask to override), NULL when none */
    bool overrides;       /* plugin replaced shadowed's kernel by an explicit override */
} opr_kernel_info; /* all fields since 0.1 */
#define OPR_KERNEL_INFO_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_kernel_info, overrides)
/* Fills *out (struct_size set by the caller) for the kernel that runs op on
 * device_type for common dtype `dtype`. Strings live as long as the context.
 * OPR_ERR_NOT_FOUND when no plugin provides one (views and composite ops never have
 * one: see opr_op_has_kernel), OPR_ERR_INVALID for a NULL op or out, a device type out
 * of range or a struct_size too small. */
OPR_API opr_status opr_op_kernel_info(const opr_op *op, int device_type, opr_dtype dtype, opr_kernel_info *out);

/* True if the op is a composite op: defined in YAML by a `forward:` expression over
 * other ops instead of a kernel (docs/formulas.md, "Composite ops"). A composite with
 * derivative entries is recorded by autograd as one node with its own formulas;
 * without them its parts are recorded. */
OPR_API bool opr_op_is_composite(const opr_op *op);
/* Whether output k of op may carry gradients (when floating): false for every
 * output of an op with `differentiable: false`, and for those its YAML's
 * `output_differentiability` lists as false (batch norm's saved statistics); false for
 * a NULL op or k out of range. */
OPR_API bool opr_op_output_differentiable(const opr_op *op, int k);
/* The dtype output k always has when the op fixes it (its YAML `dtype:` / `dtypes_out:`
 * names one: comparisons give OPR_BOOL, argmax OPR_I64), else -1: the output follows
 * the call (the common dtype T, or a factory's dtype argument). -1 too for a NULL op or
 * k out of range. */
OPR_API int opr_op_output_dtype(const opr_op *op, int k);
/* The forward expression of a composite op as written ("a = EXPR; EXPR" when it has
 * lets), or NULL for other ops. Lives as long as the op. */
OPR_API const char *opr_op_forward(const opr_op *op);

/* The name of the op's alternative (its YAML `alternative:`; docs/formulas.md,
 * "Alternatives"): a composite op with the same arguments computing the same function
 * another way, run instead of this op's kernel where it is estimated cheaper. NULL when
 * the op has none. Lives as long as the op. */
OPR_API const char *opr_op_alternative(const opr_op *op);
/* The op that opr_call(op, args, nargs, ...) would run: op itself, or its alternative
 * when the cost model estimates that cheaper on the arguments' device and shapes (or
 * op has no kernel for that device or dtype). kernel_ns and alternative_ns (each may be
 * NULL) get the two estimates in nanoseconds, INFINITY for one that cannot run there
 * (and both INFINITY for an op without an alternative). NULL on invalid arguments, with
 * opr_last_error. Plain (not batched or jagged) arguments. */
OPR_API const opr_op *opr_op_choose(const opr_op *op, const opr_value *args, int nargs, double *kernel_ns,
                                    double *alternative_ns);

/* How the op takes jagged tensors (its YAML `jagged:` rule; docs/jagged.md):
 * "elementwise", "rows", "all", "dim" (a reduction or softmax over a dim argument), or
 * "dim, ragged: EXPR" when it also runs over the ragged dim (EXPR is what it runs there);
 * NULL when the op refuses jagged tensors. Lives as long as the op. */
OPR_API const char *opr_op_jagged_rule(const opr_op *op);
/* How the op runs on batched tensors of opr_vmap (its YAML `batch:` rule; docs/vmap.md):
 * "elementwise", "dims", "matmul", "batch_dims", "rows", "size", "unbatched",
 * "data_dependent", "view" (a host view, by its kind), or "loop" when it has none and
 * runs once per sample (correct, slower; a composite op without a rule runs its forward
 * on the batch instead). NULL for a NULL op. */
OPR_API const char *opr_op_batching_rule(const opr_op *op);

/* Runs an op. args are in schema order; trailing arguments with defaults may be
 * omitted. results receives nres new references: the op's first nres outputs, nres
 * from 1 to its number of outputs (max.dim asked for 1 gives only the values); for an
 * op returning a Tensor[], exactly the count opr_op_result_count gives: its pieces, in
 * order (with autograd they are the outputs of one node, and a piece that gets no
 * gradient counts as zeros). In-place ops (name ending in '_') return a new reference
 * to `self`. On error nothing is mutated and results are set to NULL.
 * Dtypes: the Tensor arguments that take part in the common dtype must agree, with
 * PyTorch's exceptions for 0-d tensors and numbers: a 0-d tensor of the same category
 * (bool < integer < floating) as the others takes their dtype; one of a higher category
 * makes the result its dtype; a Scalar number of a higher category makes it f32 (a
 * float) or i64 (an int). Tensors that need it are converted by the `to` op, which
 * autograd records. Other mixes are refused (no implicit casts). */
OPR_API opr_status opr_call(const opr_op *op, const opr_value *args, int nargs,
                     opr_tensor **results, int nres);

/* One keyword argument: opr_kw("dim", opr_v_int(1)). */
typedef struct opr_kwarg {
    const char *name;
    opr_value value;
} opr_kwarg;
static inline opr_kwarg opr_kw(const char *name, opr_value value) { opr_kwarg k; k.name = name; k.value = value; return k; }

/* opr_call with keyword arguments after the positional ones, as PyTorch calls
 * max(x, dim=1, keepdim=True): each is put at its schema position; arguments skipped
 * before the last one given take their defaults (None for an optional one without).
 * An int is accepted for an int[] argument (a one-item list), as PyTorch does. Errors:
 * an unknown or repeated name, a missing argument without default, a wrong kind. */
OPR_API opr_status opr_call_kw(const opr_op *op, const opr_value *args, int nargs, const opr_kwarg *kwargs,
                               int nkw, opr_tensor **results, int nres);
/* The op of name's overload set that takes these arguments (kinds and keyword names,
 * not dtypes or shapes): the one needing the fewest conversions (an int for a float or
 * an int[]), the first defined on a tie. "max.dim" names one overload and is returned
 * as is; a set of one op is returned without checking (opr_call reports). NULL with
 * opr_last_error listing every schema and why it does not fit, or OPR_ERR_NOT_FOUND. */
OPR_API const opr_op *opr_op_resolve(const opr_ctx *ctx, const char *name, const opr_value *args, int nargs,
                                     const opr_kwarg *kwargs, int nkw);
/* Resolves name's overload for these arguments (opr_op_resolve) and calls it
 * (opr_call_kw). Slower than keeping the op: for tools, tests and dynamic callers.
 * opr_call_by_name is the same without keyword arguments. */
OPR_API opr_status opr_call_by_name_kw(opr_ctx *ctx, const char *name, const opr_value *args, int nargs,
                                       const opr_kwarg *kwargs, int nkw, opr_tensor **results, int nres);
OPR_API opr_status opr_call_by_name(opr_ctx *ctx, const char *name, const opr_value *args,
                             int nargs, opr_tensor **results, int nres);

/* One recorded node of a graph, as opr_autograd_walk reports it. */
typedef struct opr_node_info {
    size_t struct_size;
    const char *op;            /* op name */
    const char *plan;          /* chosen candidates, e.g. "[self] + [mat2]" */
    uint64_t saved_bytes;      /* bytes of the tensors this node saved for backward */
    uint64_t all_inputs_bytes; /* bytes of all its tensor inputs: what saving every input would cost */
    bool fast;                 /* recorded in fast mode (opr_special_grads_set(false)) */
} opr_node_info; /* all fields since 0.1; the library sets struct_size */
#define OPR_NODE_INFO_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_node_info, all_inputs_bytes)

/* Calls fn once for every node of the graph behind root (before backward frees the
 * saved tensors). Returns the number of nodes, or a negative status. */
OPR_API int opr_autograd_walk(const opr_tensor *root, void (*fn)(void *ud, const opr_node_info *info), void *ud);

/* ------------------------------------------------------------------ plans */

/* Explains how the gradients of op would be computed for these arguments (shapes are
 * what matters) when the inputs named in requires_grad need grad: every candidate set
 * with its estimated cost and saved bytes, the chosen one and why. Writes text into
 * buf. Returns OPR_OK, or an error if the op has no derivative for some input. */
OPR_API opr_status opr_plan_explain(const opr_op *op, const opr_value *args, int nargs,
                             const char *const *requires_grad, int n_requires_grad,
                             char *buf, size_t len);
/* Bytes the chosen plan saves for backward, for the same arguments. */
OPR_API opr_status opr_plan_saved_bytes(const opr_op *op, const opr_value *args, int nargs,
                                 const char *const *requires_grad, int n_requires_grad,
                                 uint64_t *bytes);
/* Derivative candidates of op (for tests and tools): their count and labels
 * ("self", "self, mat2 (kernel mm_backward)"). */
OPR_API int opr_op_grad_candidate_count(const opr_op *op);
OPR_API const char *opr_op_grad_candidate_label(const opr_op *op, int i);
/* Makes every plan of op use candidate i where it applies (-1 restores choice by
 * cost). Meant for tests; not to be changed while other threads use op. */
OPR_API opr_status opr_op_force_grad_candidate(const opr_op *op, int i);

/* ------------------------------------------------------------------ samples */

/* Most tensors one sample can create. */
#define OPR_SAMPLE_MAX_TENSORS 16

/* The tolerance the op's YAML entry gives for dtype (`tolerance:`, docs/formulas.md):
 * how far a backend's result may be from the CPU reference in f64 in `opreg check`,
 * |got - ref| <= atol + rtol * |ref|. Writes what the entry gives into *rtol / *atol
 * (each may be NULL) and leaves the other alone; false when it gives neither for dtype
 * (the defaults apply). */
OPR_API bool opr_op_tolerance(const opr_op *op, opr_dtype dtype, double *rtol, double *atol);

/* Number of example inputs the op's YAML entry gives (`samples:`). */
OPR_API int opr_op_sample_count(const opr_op *op);
/* Builds the arguments of sample i on dev: tensors in `dtype` (index and mask tensors
 * keep their own dtype; factories get dtype and device through their str arguments),
 * values drawn from a generator seeded with `seed`, so every dtype and backend gets
 * the same numbers. args (room for the op's argument count) and *nargs receive the
 * values for opr_call; the tensors created go to owned (room for
 * OPR_SAMPLE_MAX_TENSORS), *nowned of them, for the caller to release. */
OPR_API opr_status opr_op_sample_args(const opr_op *op, int i, opr_dtype dtype, opr_device dev, uint64_t seed,
                               opr_value *args, int *nargs, opr_tensor **owned, int *nowned);

/* Variants of sample i, for conformance checks: its count (0 for a bad op or index),
 * variant 0 being the sample itself as opr_op_sample_args builds it. Then, per tensor
 * argument NAME (an item of a Tensor[] is NAME[k]), as applies:
 *   "transposed NAME"   (last two sizes > 1, not empty) a view whose memory has the last two dims
 *                        swapped;
 *   "step-2 slice NAME" (more than one element) every second element, along each dim,
 *                        of a larger buffer;
 *   "offset NAME"       (at least one element) a contiguous view 3 elements into a
 *                        larger buffer;
 *   "stride-0 NAME"     (a size > 1; not for a tensor given by `values:`, nor for the
 *                        argument an in-place op writes) the innermost dim of size > 1
 *                        expanded from size 1, stride 0: its values are the plain
 *                        sample's first slice along that dim, repeated;
 * and for the whole sample:
 *   "size-0", "size-1"  the largest size value (of the tensors drawn at random, not
 *                        kept, see below) replaced by 0 (by 1; only when it is > 1) in
 *                        every tensor that has it, so that shapes stay consistent;
 *                        size-1 also lowers the range of an i64 tensor drawn below
 *                        that size, so that indices stay in range;
 *   "large"             every size > 1 that is not kept multiplied by one factor in
 *                        every tensor: the least factor that gives the largest tensor
 *                        at least 65536 elements, raised so that each scaled size
 *                        passes 64 unless that makes the largest tensor pass 2^20
 *                        elements, then lowered while the op's estimated work (its
 *                        `flops:`) passes 3e7 (a convolution's kernel and channels
 *                        grow too); not listed when no tensor can grow.
 * Sizes are kept by the size variants when they equal a size or a value of a tensor
 * given by `values:` (indices, offsets), which keep their shape and values, since such
 * sizes may be tied to those values. int and int[] arguments (a reshape's shape, a
 * `total:`) never change: a size variant they no longer fit is generated anyway and
 * left to the op's own checks to refuse (treat a refusal by the CPU reference as "the
 * variant does not apply"). A layout variant has the logical values of the plain
 * sample (stride-0: as said); the views are made by the library over a buffer copied
 * to dev with the device's own copy functions (the gaps hold NaN, or 0 for integer and
 * bool tensors). Values come from the same generator as opr_op_sample_args: the same
 * seed gives the same logical values on every device and dtype.
 * opr_op_sample_variant_args builds variant `variant` of sample i like
 * opr_op_sample_args (same args, nargs, owned and nowned; on failure nothing is left to
 * release), and writes its label into label (len bytes; may be NULL): "" for variant
 * 0, else as quoted above. OPR_ERR_INVALID for a variant index out of range. */
OPR_API int opr_op_sample_variant_count(const opr_op *op, int i);
OPR_API opr_status opr_op_sample_variant_args(const opr_op *op, int i, int variant, opr_dtype dtype, opr_device dev,
                                              uint64_t seed, opr_value *args, int *nargs, opr_tensor **owned,
                                              int *nowned, char *label, size_t label_len);

/* ------------------------------------------------------------------ gradcheck */

/* What a failed gradcheck holds responsible (opr_gradcheck_result.culprit). */
typedef enum opr_gradcheck_culprit {
    OPR_GC_NONE = 0,   /* nothing failed */
    OPR_GC_FORWARD,    /* the op's forward kernel on the device under test disagrees with
                          the reference forward (culprit_name: the op) */
    OPR_GC_FORMULA,    /* a derivative formula (or fast variant) of the op is wrong: it
                          disagrees with finite differences on the reference backend too
                          (culprit_name: the op, candidate: which formula) */
    OPR_GC_KERNEL,     /* a fused backward kernel is wrong on the device under test
                          (culprit_name: the kernel, "mm_backward") */
    OPR_GC_HELPER,     /* the formula is right on the reference backend but wrong on the
                          device under test: an op it calls has a wrong kernel there
                          (helpers: the ops the formula calls) */
    OPR_GC_ERROR       /* the gradient could not be computed (a kernel or formula failed
                          with an error other than "not implemented"; detail says which) */
} opr_gradcheck_culprit;

typedef struct opr_gradcheck_opts {
    size_t struct_size;  /* sizeof(opr_gradcheck_opts) */
    double eps;          /* finite-difference step, in f64; 0: 1e-6; otherwise finite and
                            > 0 (NaN, infinite or negative: OPR_ERR_INVALID) */
    double atol, rtol;   /* gradient tolerance, |analytic - numeric| <= atol + rtol *
                            max(|analytic|, |numeric|); each 0: by the dtype of the inputs
                            (f64 1e-7 / 1e-5, f32 1e-5 / 1e-4, f16 and bf16 1e-2 / 2e-2);
                            otherwise finite and > 0 (NaN, infinite or negative:
                            OPR_ERR_INVALID). In f16 and bf16 the relative term is also
                            taken against the largest |numeric| of that input's gradient
                            (a formula run in half precision rounds every intermediate,
                            and a difference of nearly equal terms keeps their error).
                            A NaN gradient, analytic or numeric, is a
                            mismatch even against NaN (torch.autograd.gradcheck's rule).
                            The forward output is held to the same dtype table, f64 at
                            1e-12 / 1e-9 (there NaN agrees with NaN). */
    bool one_candidate;  /* false (default): every derivative candidate of the op forced
                            in turn (formulas, fused kernels, `fast:` variants), then the
                            plan chosen by cost. true: only `candidate` (-1: the plan
                            chosen by cost) */
    int candidate;       /* with one_candidate: the index opr_op_grad_candidate_label takes */
    bool full_mask_only; /* false (default): every non-empty subset of the checked inputs
                            as requires-grad mask; true: all of them at once */
    uint64_t seed;       /* seed of the grad_output weights; 0 is a fixed default */
} opr_gradcheck_opts; /* all fields since 0.1 */
#define OPR_GRADCHECK_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_gradcheck_opts, seed)

typedef struct opr_gradcheck_result {
    size_t struct_size;  /* set by the caller: sizeof(opr_gradcheck_result) */
    int checked;         /* (candidate, mask) combinations compared with the reference */
    int passed, failed;
    int not_available;   /* combinations the device cannot run: a forced fused kernel it
                            lacks, a dtype or an op a formula calls that it does not
                            implement */
    /* The first failure: */
    opr_gradcheck_culprit culprit;
    int candidate;       /* derivative candidate that failed; -1: the plan chosen by cost,
                            or not a backward failure */
    char culprit_name[64];  /* the op or kernel held responsible */
    char helpers[256];   /* OPR_GC_HELPER and OPR_GC_FORMULA: the ops the formula calls,
                            ", "-separated */
    char detail[1024];   /* the failure in words: candidate, requires-grad mask, input and
                            element, analytic vs numeric value */
    /* What not_available counts, as "[label]" items joined by ", " ("[self, mat2 kernel
     * mm_backward]", "[plan chosen by cost]", "[forward in f16]"). */
    char not_available_list[512];
    /* Added after the first 0.1 (filled only when struct_size covers it): why the first
     * combination counted in not_available could not run (the error of the kernel or
     * formula, the plugin's message included), "" if none. */
    char not_available_why[512];
    /* Added after not_available_why: how many of not_available a kernel's supports
     * (ABI 2.2) declined in advance (opr_last_error_declined), rather than a kernel
     * missing or refusing at run time. */
    int declined;
} opr_gradcheck_result; /* fields since 0.1 */
#define OPR_GRADCHECK_RESULT_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_gradcheck_result, not_available_list)

/* Checks the gradients of op at the point `args` against central finite differences in
 * f64 (torch.autograd.gradcheck's reference, in its vector-Jacobian form): for a fixed
 * pseudo-random grad_output v of every floating output, sum(v * (f(x + eps e_i) -
 * f(x - eps e_i))) / (2 eps) for every element i of every input checked. The finite
 * differences run the op's forward on the CPU in f64 (on the inputs' own device in f64
 * only when the CPU has no kernel for the op; in f32 there, with a step of 1e-3 and a
 * gradient tolerance of atol 1e-3 / rtol 1e-2 unless opts give others, when the device
 * has no f64 kernel for it either), never another derivative candidate.
 *
 * args: the op's arguments in schema order, as for opr_call; tensors may be on any
 * device and of any dtype, and are left untouched (every call runs on fresh contiguous
 * copies, so in-place ops are fine). The device and the floating dtype of the first
 * tensor argument are the ones under test. inputs: names of the tensor arguments to
 * differentiate (n_inputs of them; NULL: every floating tensor argument a derivative candidate names); every
 * floating tensor of a Tensor[] argument counts as one input of its own.
 *
 * First the forward on the device is compared with the reference forward; when it
 * disagrees, that is the failure (OPR_GC_FORWARD) and the gradients are not checked.
 * Then, per requires-grad mask and per candidate (see opr_gradcheck_opts), the
 * gradients from opr_autograd_grad are compared with the finite differences; a forced
 * candidate is judged on the inputs it covers. A failure is attributed: a fused kernel
 * candidate blames the kernel; a formula that fails on a device or dtype other than
 * CPU f64 is run again on the CPU in f64, where its helper ops are the reference ones:
 * wrong there too, the formula is wrong (OPR_GC_FORMULA), right there, an op it calls
 * is wrong on the device (OPR_GC_HELPER, the ops in `helpers`).
 *
 * An op returning a Tensor[] (split, chunk) is checked through one output: its pieces
 * flattened and concatenated in order (the calls must give at least one piece).
 *
 * Cost: two forward calls per element of every input checked (computed once, shared by
 * all masks and candidates), one backward per candidate and mask: meant for small
 * inputs such as the ops' samples.
 *
 * opts may be NULL (the defaults); res may be NULL, else its struct_size must be set.
 * Candidates are forced with opr_op_force_grad_candidate and the previous setting is
 * restored: do not use op from other threads meanwhile. Returns OPR_OK when every
 * combination passed (or was not available), OPR_ERR_MISMATCH when one failed (the
 * first failure, with its culprit, in res and in opr_last_error), or another error
 * when the check could not run (bad arguments, no floating input or output, the
 * reference forward failing). */
OPR_API opr_status opr_gradcheck(const opr_op *op, const opr_value *args, int nargs, const char *const *inputs,
                                 int n_inputs, const opr_gradcheck_opts *opts, opr_gradcheck_result *res);

/* ------------------------------------------------------------------ registry */

/* Loads op definitions from a YAML file. Entries with errors are refused (the error of
 * the first one is left in opr_last_error, with file:line:column) and the rest are
 * added. Returns OPR_OK when all entries loaded, OPR_ERR_PARSE when some were refused,
 * OPR_ERR_NOMEM when one was refused for want of memory (nothing of it is added),
 * OPR_ERR_IO when the file can't be read. *n_loaded (may be NULL) gets the count added. */
OPR_API opr_status opr_registry_load_yaml(opr_ctx *ctx, const char *path, int *n_loaded);
/* Same from a string; `name` is used in error messages in place of a file name. */
OPR_API opr_status opr_registry_load_yaml_string(opr_ctx *ctx, const char *text, const char *name,
                                          int *n_loaded);
/* Every error message the registry has collected while loading, one per line. The
 * text is this thread's copy, taken while no load was appending: valid until the next
 * opr_registry_errors call on this thread. */
OPR_API const char *opr_registry_errors(const opr_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* OPREG_OPREG_H */
