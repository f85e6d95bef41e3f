/*
 * opreg plugin ABI.
 *
 * A plugin is a shared object exporting one required entry point:
 *
 *     int opr_plugin_init(const opr_host_api *host, opr_plugin *self);
 *
 * and optionally a side-effect-free probe:
 *
 *     int opr_plugin_probe(char *why, size_t why_len);
 *
 * The probe returns a score: 0 = unusable on this machine (write the reason into
 * `why`), higher = preferred. It must not create device contexts, allocate device
 * memory or print; the host calls it before init to decide whether to load at all.
 *
 * Plugins never link against libopreg: everything they need from the host comes
 * through the opr_host_api table (SQLite's extension model). They include this header
 * for types only.
 *
 * Versioning: ABI major.minor. The host refuses a plugin whose major differs from its
 * own and names both versions. Minor skew is accepted either way; every struct that
 * crosses the boundary starts with struct_size and only ever grows at the end, so each
 * side reads only the fields the other side knows.
 *
 * Lifetimes: whoever allocates frees. Strings and descriptors passed to the host are
 * copied during the call. Pointers the host hands a kernel (views, args) are valid for
 * that call only. A plugin is never unloaded while its context lives.
 *
 * docs/plugin-abi.md states these rules in full (numbered 1-8), with discovery, the
 * reasons a plugin is refused and the calling convention of kernels.
 */
#ifndef OPREG_PLUGIN_H
#define OPREG_PLUGIN_H

#include "opreg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPR_ABI_MAJOR 1
#define OPR_ABI_MINOR 0

#define OPR_PLUGIN_INIT_SYMBOL "opr_plugin_init"
#define OPR_PLUGIN_PROBE_SYMBOL "opr_plugin_probe"

#if defined(__GNUC__)
#define OPR_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define OPR_PLUGIN_EXPORT
#endif

/* What a kernel sees of a tensor: a strided view. */
typedef struct opr_tensor_view {
    size_t struct_size;
    void *data;             /* element [0,...,0], storage offset already applied */
    opr_dtype dtype;
    int32_t ndim;
    const int64_t *shape;   /* ndim entries */
    const int64_t *strides; /* ndim entries, in elements; 0 for broadcast dims */
    opr_device device;
    int64_t numel;
} opr_tensor_view;

typedef enum opr_arg_kind {
    OPR_ARG_NONE = 0,       /* an optional argument that was not given */
    OPR_ARG_TENSOR,
    OPR_ARG_TENSOR_LIST,
    OPR_ARG_INT,
    OPR_ARG_DOUBLE,
    OPR_ARG_BOOL,
    OPR_ARG_INT_LIST,
    OPR_ARG_STRING
} opr_arg_kind;

/* One argument of a kernel call, in schema order, defaults already filled in. */
typedef struct opr_kernel_arg {
    opr_arg_kind kind;
    union {
        const opr_tensor_view *t;
        struct { const opr_tensor_view *items; int32_t n; } tl;
        int64_t i;
        double d;
        bool b;
        struct { const int64_t *items; int32_t n; } il;
        const char *s;
    } u;
} opr_kernel_arg;

struct opr_host_api;

typedef struct opr_kernel_call {
    size_t struct_size;
    const char *op;                 /* op or backward-entry name */
    const opr_kernel_arg *args;     /* schema order */
    int32_t nargs;
    opr_tensor_view *outputs;       /* preallocated by the host; data == NULL for an
                                       output whose shape depends on the data: the
                                       kernel calls host->alloc_output for it */
    int32_t nout;
    uint64_t grad_input_mask;       /* fused backward entries: bit i = input i wanted */
    const struct opr_host_api *host;
    void *host_call;                /* opaque to the plugin */
    void *kernel_data;              /* opr_kernel_desc.data */
} opr_kernel_call;

/* Returns OPR_OK or an error status after host->set_error(...) with the detail.
 *
 * Forward kernels get the op's arguments in schema order and its preallocated
 * outputs. Fused backward kernels (registered under the name a derivative entry gives
 * in `kernel:`, e.g. "mm_backward") get:
 *   args:    the gradient of each forward output (OPR_ARG_NONE where none flowed),
 *            then every forward argument in schema order (tensors the plan did not
 *            save are OPR_ARG_NONE; scalars as in the forward call),
 *            then every forward output (OPR_ARG_NONE unless saved);
 *   outputs: one per input the entry covers, in the order of its YAML key
 *            ("self, mat2"), shaped and typed like that input, contiguous;
 *            grad_input_mask bit p set = output p wanted (the others have data NULL). */
typedef int (*opr_kernel_fn)(const opr_kernel_call *call);

/* Dtype bit for opr_kernel_desc.dtypes. */
#define OPR_DTYPE_BIT(dt) (1u << (unsigned)(dt))

typedef struct opr_kernel_desc {
    size_t struct_size;
    const char *op;      /* op name as in the YAML ("add") or a backward kernel name */
    const char *device;  /* device type name: "cpu", "cuda", "rocm" */
    uint32_t dtypes;     /* OPR_DTYPE_BIT mask of the common dtype it handles */
    opr_kernel_fn fn;
    void *data;          /* handed back as call->kernel_data */
} opr_kernel_desc;

/* A device type a plugin provides, with its allocator, copies and its speed (the
 * autograd cost model compares candidates with these). For "cpu", which the host
 * provides itself, only the speed fields are read. */
typedef struct opr_device_desc {
    size_t struct_size;
    const char *name;      /* "cuda" */
    int32_t count;         /* ordinals available */
    double flops_per_s;    /* sustained GEMM rate, f32 */
    double bytes_per_s;    /* memory bandwidth */
    double launch_ns;      /* per-kernel overhead */
    void *data;            /* handed back to every function below */
    void *(*alloc)(void *data, int32_t ordinal, size_t nbytes);          /* NULL on failure */
    void (*free)(void *data, int32_t ordinal, void *ptr, size_t nbytes);
    int (*copy_to_host)(void *data, int32_t ordinal, void *dst, const void *src, size_t n);
    int (*copy_from_host)(void *data, int32_t ordinal, void *dst, const void *src, size_t n);
    int (*copy_device)(void *data, int32_t ordinal, void *dst, const void *src, size_t n);
    int (*sync)(void *data, int32_t ordinal);
    /* Bytes the allocator holds, including cached free blocks (optional). */
    uint64_t (*reserved)(void *data, int32_t ordinal);
} opr_device_desc;

/* Filled by the plugin in opr_plugin_init. The host sets struct_size before the call;
 * the plugin sets abi_major/abi_minor first of all. */
typedef struct opr_plugin {
    size_t struct_size;
    uint32_t abi_major;
    uint32_t abi_minor;
    const char *name;      /* static string, e.g. "cpu" */
    const char *version;   /* static string, e.g. "0.1.0" */
    void *data;            /* plugin private */
    void (*shutdown)(struct opr_plugin *self); /* optional; called at context free */
    void *host_private;    /* host private: do not touch */
} opr_plugin;

/* Services the host gives a plugin. Registration calls are staged during init and
 * committed only when init returns OPR_OK and every registration was valid. */
typedef struct opr_host_api {
    size_t struct_size;
    uint32_t abi_major;
    uint32_t abi_minor;
    int (*register_kernel)(opr_plugin *self, const opr_kernel_desc *desc);
    int (*register_device)(opr_plugin *self, const opr_device_desc *desc);
    /* Loads op definitions shipped with the plugin (absolute path). */
    int (*load_yaml)(opr_plugin *self, const char *path);
    /* Records the error detail for the current call (printf-style). */
    void (*set_error)(const char *fmt, ...);
    /* A message for the application's log (opr_log_set), level an opr_log_level. */
    void (*log)(opr_plugin *self, int level, const char *fmt, ...);
    /* Allocates output `index` of a call whose shape depends on the data, and fills
     * call->outputs[index]. */
    int (*alloc_output)(const opr_kernel_call *call, int32_t index, int32_t ndim,
                        const int64_t *shape);
} opr_host_api;

typedef int (*opr_plugin_init_fn)(const opr_host_api *host, opr_plugin *self);
typedef int (*opr_plugin_probe_fn)(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* OPREG_PLUGIN_H */
