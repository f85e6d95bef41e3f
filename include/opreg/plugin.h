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

#define OPR_ABI_MAJOR 2
#define OPR_ABI_MINOR 3

/* OPR_STRUCT_SIZE(type, last) (opreg.h) is the size of a struct up to and including
 * its field `last`: what struct_size must at least be for a reader to use `last`. The
 * OPR_*_STRUCT_SIZE_2_0 constants below pin each struct's size at ABI 2.0, the
 * OPR_*_STRUCT_SIZE_2_1 ones at 2.1 and the _2_2 ones at 2.2; a side that fills
 * struct_size with sizeof may give more (a newer minor), never less than 2.0. Fields carry the ABI minor that added
 * them; a plugin reads a 2.1 or 2.2 field of a host struct (or calls such a host
 * function) only when that struct's struct_size covers it. */

#define OPR_PLUGIN_INIT_SYMBOL "opr_plugin_init"
#define OPR_PLUGIN_PROBE_SYMBOL "opr_plugin_probe"

#if defined(__GNUC__)
#define OPR_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define OPR_PLUGIN_EXPORT
#endif

/* What a kernel sees of a tensor: a strided view. */
typedef struct opr_tensor_view {
    size_t struct_size;     /* 2.0 */
    void *data;             /* 2.0: element [0,...,0], storage offset already applied */
    opr_dtype dtype;        /* 2.0 */
    int32_t ndim;           /* 2.0 */
    const int64_t *shape;   /* 2.0: ndim entries */
    const int64_t *strides; /* 2.0: ndim entries, in elements; 0 for broadcast dims */
    opr_device device;      /* 2.0 */
    int64_t numel;          /* 2.0 */
} opr_tensor_view;
#define OPR_TENSOR_VIEW_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_tensor_view, numel)

typedef enum opr_arg_kind {
    OPR_ARG_NONE = 0,       /* an optional argument that was not given */
    OPR_ARG_TENSOR,
    OPR_ARG_TENSOR_LIST,
    OPR_ARG_INT,
    OPR_ARG_DOUBLE,
    OPR_ARG_BOOL,
    OPR_ARG_INT_LIST,
    OPR_ARG_STRING,
    OPR_ARG_DOUBLE_LIST     /* 2.3: a float[] argument (the union's dl); only ops with a
                               float[] in their schema receive one */
} opr_arg_kind;

/* One argument of a kernel call, in schema order, defaults already filled in. Lists of
 * structs are arrays of pointers, so that the struct can grow without breaking the
 * indexing of a plugin built against a smaller one. */
typedef struct opr_kernel_arg {
    size_t struct_size;     /* 2.0 */
    opr_arg_kind kind;      /* 2.0 */
    union {
        const opr_tensor_view *t;
        struct { const opr_tensor_view *const *items; int32_t n; } tl; /* a Tensor?[]'s None item: NULL */
        int64_t i;
        double d;
        bool b;
        struct { const int64_t *items; int32_t n; } il;
        const char *s;
        struct { const double *items; int32_t n; } dl; /* same size as il: the union does not grow */
    } u;                    /* 2.0 */
} opr_kernel_arg;
#define OPR_KERNEL_ARG_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_kernel_arg, u)

struct opr_host_api;

typedef struct opr_kernel_call {
    size_t struct_size;                   /* 2.0 */
    const char *op;                       /* 2.0: op or backward-entry name */
    const opr_kernel_arg *const *args;    /* 2.0: nargs pointers, schema order */
    int32_t nargs;                        /* 2.0 */
    opr_tensor_view *const *outputs;      /* 2.0: nout pointers; the views are
                                             preallocated by the host; data == NULL for
                                             an output whose shape depends on the data:
                                             the kernel calls host->alloc_output for it */
    int32_t nout;                         /* 2.0 */
    uint64_t grad_input_mask;             /* 2.0: fused backward entries: bit i = input i wanted */
    const struct opr_host_api *host;      /* 2.0 */
    void *host_call;                      /* 2.0: opaque to the plugin */
    void *kernel_data;                    /* 2.0: opr_kernel_desc.data */
} opr_kernel_call;
#define OPR_KERNEL_CALL_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_kernel_call, kernel_data)

/* Returns OPR_OK or an error status after host->set_error(call, ...) with the detail.
 *
 * Forward kernels get the op's arguments in schema order and its preallocated
 * outputs. Fused backward kernels (registered under the name a derivative entry gives
 * in `kernel:`, e.g. "mm_backward") get:
 *   args:    the gradient of each forward output (where none flowed: zeros for a
 *            floating output, OPR_ARG_NONE for an integer or bool one),
 *            then every forward argument in schema order (tensors the plan did not
 *            save and Tensor[] arguments are OPR_ARG_NONE; scalars and strings as in
 *            the forward call),
 *            then every forward output (OPR_ARG_NONE unless saved);
 *   outputs: one per input the entry covers, in the order of its YAML key
 *            ("self, mat2"), shaped and typed like that input, contiguous;
 *            grad_input_mask bit p set = output p wanted; the others are all zero
 *            but struct_size: data and shape NULL, ndim 0, numel 0 (nothing to write;
 *            take the input's shape from the argument list).
 * A kernel that cannot take a call's arguments (a shape or layout its hardware lacks)
 * returns OPR_ERR_UNSUPPORTED after host->set_error: "not for these arguments". With the
 * CPU fallback on (opr_cpu_fallback_set), the host then runs a forward op on the CPU with
 * copies and replaces a fused backward kernel by the op's derivative formulas (2.2;
 * logged once per op, device and message); with it off, the call fails with the message. */
typedef int (*opr_kernel_fn)(const opr_kernel_call *call);

/* Dtype bit for opr_kernel_desc.dtypes. */
#define OPR_DTYPE_BIT(dt) (1u << (unsigned)(dt))

/* Precedence is per (op, device, dtype): a kernel fills only the dtypes that no plugin
 * loaded before it provides for its (op, device); for a dtype already provided, the
 * earlier kernel stays (the later plugin gets a remark naming both) unless the later
 * one lists that dtype in override_dtypes, which replaces it (shown by `opreg info`,
 * naming both plugins). A kernel for an op the registry does not define is skipped
 * with a log line and a remark, not refused: registrations are optional. */
typedef struct opr_kernel_desc {
    size_t struct_size;  /* 2.0 */
    const char *op;      /* 2.0: op name as in the YAML ("add") or a backward kernel name */
    const char *device;  /* 2.0: device type name: "cpu", "cuda", "rocm" */
    uint32_t dtypes;     /* 2.0: OPR_DTYPE_BIT mask of the common dtype it handles */
    opr_kernel_fn fn;    /* 2.0 */
    void *data;          /* 2.0: handed back as call->kernel_data */
    uint32_t override_dtypes; /* 2.1: the dtypes of `dtypes` for which this kernel
                                 replaces the one an earlier plugin provides (0: fill
                                 only the missing dtypes); a bit outside `dtypes` is
                                 refused */
    /* 2.2, optional: whether fn takes a call, asked before it runs. `call` is the call
     * as fn would get it (args, outputs with their dtypes, shapes and strides,
     * grad_input_mask, kernel_data), except that no data may be read or written:
     * output data is NULL (an in-place op's output is its self argument). When the
     * planner asks (before it picks a fused backward kernel, on metadata alone) every
     * data pointer is NULL, every view contiguous, every tensor argument given (the
     * call itself may get OPR_ARG_NONE for one the plan does not save) and host and
     * host_call are NULL. Return true to take the call; false after writing the
     * reason (NUL-terminated, at most why_len bytes) into why. Must be fast,
     * thread-safe, free of side effects and depend on the call's metadata alone:
     * plans are cached per metadata. A refused forward call runs on the CPU with
     * copies when the CPU fallback is on (else it fails with OPR_ERR_UNSUPPORTED and
     * the reason); a refused fused backward kernel is not chosen, its gradients come
     * from the op's derivative formulas. */
    bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len);
    /* 2.2, optional: the estimated time of fn on `call` (given as to supports), in ns,
     * which replaces the registry's estimate (flops and bytes at the device's rates,
     * plus one launch) wherever the planner costs this kernel on this device: a fused
     * backward kernel against the formulas, a forward op a formula calls, an op
     * against its alternative. NaN or a negative value: no estimate (the registry's
     * is used). Same rules as supports: fast, thread-safe, no side effects. */
    double (*cost_ns)(const opr_kernel_call *call);
} opr_kernel_desc;
#define OPR_KERNEL_DESC_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_kernel_desc, data)
#define OPR_KERNEL_DESC_STRUCT_SIZE_2_1 OPR_STRUCT_SIZE(opr_kernel_desc, override_dtypes)
#define OPR_KERNEL_DESC_STRUCT_SIZE_2_2 OPR_STRUCT_SIZE(opr_kernel_desc, cost_ns)

/* A device type a plugin provides, with its allocator, copies and its speed (the
 * autograd cost model compares candidates with these). For "cpu", which the host
 * provides itself, only the speed fields are read.
 *
 * The device contract. Besides the five memory functions (alloc, free, copy_to_host,
 * copy_from_host, copy_device: required, else the plugin is refused), a device type
 * must have kernels for:
 *   copy_   (Tensor self, Tensor src), for every dtype its other kernels handle: the
 *           host runs it for every strided copy on the device (contiguous(), reshape
 *           of a non-contiguous view, reading a view back, moving a view to another
 *           device). Without it the plugin still loads, with a warning in the log and
 *           in its remark ("device 'D' has no copy_ kernel: ..."), and the host's view
 *           ops do not count as runnable there (opr_op_has_kernel, `opreg info`).
 * and, for autograd on the device, should have `add` (gradient accumulation) and
 * `new_zeros` (gradients of unused outputs); missing ones fail only the calls that
 * need them. Every other op is optional: calls of an op without a kernel on the
 * device fail with "no kernel for device D". */
typedef struct opr_device_desc {
    size_t struct_size;    /* 2.0 */
    const char *name;      /* 2.0: "cuda" */
    int32_t count;         /* 2.0: ordinals available */
    double flops_per_s;    /* 2.0: sustained GEMM rate, f32 */
    double bytes_per_s;    /* 2.0: memory bandwidth */
    double launch_ns;      /* 2.0: per-kernel overhead */
    void *data;            /* 2.0: handed back to every function below */
    void *(*alloc)(void *data, int32_t ordinal, size_t nbytes);          /* 2.0: NULL on failure */
    void (*free)(void *data, int32_t ordinal, void *ptr, size_t nbytes); /* 2.0 */
    int (*copy_to_host)(void *data, int32_t ordinal, void *dst, const void *src, size_t n);   /* 2.0 */
    int (*copy_from_host)(void *data, int32_t ordinal, void *dst, const void *src, size_t n); /* 2.0 */
    int (*copy_device)(void *data, int32_t ordinal, void *dst, const void *src, size_t n);    /* 2.0 */
    int (*sync)(void *data, int32_t ordinal);                            /* 2.0 */
    /* 2.0: bytes the allocator holds, including cached free blocks (optional). */
    uint64_t (*reserved)(void *data, int32_t ordinal);
    uint64_t flags;        /* 2.2: OPR_DEVICE_* bits below; 0 for a 2.0 or 2.1 plugin */
} opr_device_desc;
#define OPR_DEVICE_DESC_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_device_desc, reserved)
#define OPR_DEVICE_DESC_STRUCT_SIZE_2_2 OPR_STRUCT_SIZE(opr_device_desc, flags)
/* 2.2: the device's memory is ordinary host memory, and its kernels take any host
 * pointer as a tensor's data (not only what its alloc returned): guard mode
 * (opr_kernel_guards_set) may then put an inaccessible page after each output it
 * allocates on the device, so that a kernel reaching far past one faults there. */
#define OPR_DEVICE_HOST_MEMORY (UINT64_C(1) << 0)

/* 2.2: process groups for collective ops (all_reduce, all_gather, ...: registry/ops/
 * dist.yaml), provided by a plugin on an existing engine (MPI). One per context; the
 * public API (opreg/dist.h) calls these. A group is an int64 id of the provider's
 * choosing; the collective ops' `group` argument carries it to the kernels, 0 meaning
 * the world group; an id is not reused after group_free, so that a plugin may keep
 * state per group id (an NCCL communicator). Every function returns OPR_OK or an error status after writing
 * the reason into why (NUL-terminated, at most why_len bytes); a collective that
 * waits on a peer longer than the time-out returns OPR_ERR_BACKEND with a reason that
 * says so, never hangs. Called from any thread. */
typedef struct opr_group_provider {
    size_t struct_size;   /* 2.2 */
    const char *name;     /* 2.2: the engine, "mpi" */
    void *data;           /* 2.2: handed back to every function below */
    /* 2.2: the world group of this process as its launcher started it (mpirun),
     * initialising the engine on the first call: id (0), this process's rank, size. */
    int (*world)(void *data, int32_t *rank, int32_t *size, char *why, size_t why_len);
    /* 2.2: a sub-group of `group`: the members giving the same color, ranked by key
     * (MPI_Comm_split); collective over `group`, within the time-out; a limit on live
     * groups is agreed by every member before any of them makes the group. A negative
     * color: not a member (*out = -1). */
    int (*split)(void *data, int64_t group, int32_t color, int32_t key, int64_t *out, int32_t *rank,
                 int32_t *size, char *why, size_t why_len);
    int (*group_free)(void *data, int64_t group); /* 2.2: not the world group */
    /* 2.2: how long a collective waits for its peers before it fails (seconds > 0,
     * finite; the host passes at most OPR_DIST_TIMEOUT_MAX_S of opreg/dist.h). */
    int (*set_timeout)(void *data, double seconds);
    /* 2.2: a non-blocking sum or mean all-reduce, in place, of n contiguous elements of
     * dtype at buf (host memory), for the data-parallel helper; *req for wait. op is
     * "sum" or "mean". */
    int (*all_reduce_start)(void *data, int64_t group, void *buf, int64_t n, opr_dtype dtype, const char *op,
                            int64_t *req, char *why, size_t why_len);
    /* 2.2: waits for req (within the time-out) and frees it. On a failure (a time-out)
     * the transport may still write buf (a late peer completes the reduction): the
     * caller keeps buf allocated to the end of the process, and the provider treats
     * the group as broken (every later call on it fails, saying why). */
    int (*wait)(void *data, int64_t req, char *why, size_t why_len);
    /* 2.2: ends the engine in this process (MPI_Finalize): no group is usable after. */
    int (*finalize)(void *data, char *why, size_t why_len);
    /* 2.2, optional: drives req forward without blocking (MPI_Test): *done = 1 when it
     * is complete (then wait returns at once). An engine that progresses collectives
     * only inside its calls needs this for communication to overlap computation. */
    int (*poll)(void *data, int64_t req, int *done, char *why, size_t why_len);
    /* 2.2, optional: this process's rank in group, the group's size, and the time-out
     * (seconds), for the kernels of other plugins (host->group_info). */
    int (*group_info)(void *data, int64_t group, int32_t *rank, int32_t *size, double *timeout_s, char *why,
                      size_t why_len);
    /* 2.2, optional: every member's `bytes` bytes at mine, gathered into all (size *
     * bytes, in rank order) within the time-out; collective over group
     * (host->group_all_gather). */
    int (*all_gather_bytes)(void *data, int64_t group, const void *mine, void *all, size_t bytes, char *why,
                            size_t why_len);
} opr_group_provider;
#define OPR_GROUP_PROVIDER_STRUCT_SIZE_2_2 OPR_STRUCT_SIZE(opr_group_provider, all_gather_bytes)

/* Filled by the plugin in opr_plugin_init. The host sets struct_size before the call;
 * the plugin sets abi_major/abi_minor first of all. */
typedef struct opr_plugin {
    size_t struct_size;    /* 2.0: set by the host; the plugin may raise it to its own sizeof */
    uint32_t abi_major;    /* 2.0 */
    uint32_t abi_minor;    /* 2.0 */
    const char *name;      /* 2.0: static string, e.g. "cpu" */
    const char *version;   /* 2.0: static string, e.g. "0.1.0" */
    void *data;            /* 2.0: plugin private */
    void (*shutdown)(struct opr_plugin *self); /* 2.0: optional; called at context free */
    void *host_private;    /* 2.0: host private: do not touch */
    const char *dir;       /* 2.1: set by the host before init: the directory of the plugin
                              file (absolute, symbolic links resolved), or the directory an
                              in-process registration gave (may be NULL); valid during
                              init only: copy it to keep it */
} opr_plugin;
#define OPR_PLUGIN_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_plugin, host_private)
#define OPR_PLUGIN_STRUCT_SIZE_2_1 OPR_STRUCT_SIZE(opr_plugin, dir)

/* Services the host gives a plugin. Registration calls are staged during init and
 * committed only when init returns OPR_OK and every registration was valid. */
typedef struct opr_host_api {
    size_t struct_size;    /* 2.0 */
    uint32_t abi_major;    /* 2.0 */
    uint32_t abi_minor;    /* 2.0 */
    int (*register_kernel)(opr_plugin *self, const opr_kernel_desc *desc);  /* 2.0 */
    int (*register_device)(opr_plugin *self, const opr_device_desc *desc);  /* 2.0 */
    /* 2.0: loads op definitions shipped with the plugin. Since 2.1 a relative path is
     * resolved against self->dir (the plugin file's directory); an absolute one is
     * used as it is. Same return codes as opr_registry_load_yaml; the ops are removed
     * again if the plugin is refused. Init only. */
    int (*load_yaml)(opr_plugin *self, const char *path);
    /* 2.0: records the error detail (printf-style) of the kernel call it is given,
     * whichever thread the plugin calls it from (a worker of its own pool, a stream
     * callback); the host reports it when that kernel returns an error status. The
     * first detail set for a call is kept. call NULL: the detail of what the host
     * asked of the plugin on this thread outside a kernel call (opr_plugin_init, a
     * device function). */
    void (*set_error)(const opr_kernel_call *call, const char *fmt, ...);
    /* 2.0: a message for the application's log (opr_log_set), level an opr_log_level. */
    void (*log)(opr_plugin *self, int level, const char *fmt, ...);
    /* 2.0: allocates output `index` of a call whose shape depends on the data, and
     * fills *call->outputs[index]. */
    int (*alloc_output)(const opr_kernel_call *call, int32_t index, int32_t ndim,
                        const int64_t *shape);
    /* 2.1: loads op definitions from YAML text the plugin carries (name stands for the
     * file in error messages, may be NULL); otherwise as load_yaml. Init only. */
    int (*load_yaml_string)(opr_plugin *self, const char *text, const char *name);
    /* 2.2: offers the context's process groups (one provider per context: a second is
     * refused). Init only; committed with the plugin's other registrations. */
    int (*register_group_provider)(opr_plugin *self, const opr_group_provider *provider);
    /* 2.2: during a kernel call, for collectives that run on an engine of the plugin's
     * own (NCCL) over the provider's groups: this process's rank in group, the group's
     * size and the collectives' time-out in seconds (any output may be NULL). An error
     * status with the reason in why where the context has no provider, the provider
     * lacks group_info, or the group is not live. */
    int (*group_info)(const opr_kernel_call *call, int64_t group, int32_t *rank, int32_t *size, double *timeout_s,
                      char *why, size_t why_len);
    /* 2.2: during a kernel call: every member's `bytes` bytes at mine, gathered into
     * all (size * bytes, rank order) over group, within the time-out (a bootstrap id,
     * a check that the members run the same collective). Collective; blocking. */
    int (*group_all_gather)(const opr_kernel_call *call, int64_t group, const void *mine, void *all, size_t bytes,
                            char *why, size_t why_len);
} opr_host_api;
#define OPR_HOST_API_STRUCT_SIZE_2_0 OPR_STRUCT_SIZE(opr_host_api, alloc_output)
#define OPR_HOST_API_STRUCT_SIZE_2_1 OPR_STRUCT_SIZE(opr_host_api, load_yaml_string)
#define OPR_HOST_API_STRUCT_SIZE_2_2 OPR_STRUCT_SIZE(opr_host_api, group_all_gather)

typedef int (*opr_plugin_init_fn)(const opr_host_api *host, opr_plugin *self);
typedef int (*opr_plugin_probe_fn)(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* OPREG_PLUGIN_H */
