/* What plugin_load.c (loading, staging, commit) and plugin_host.c (the host API table
 * a plugin's init calls) share: a plugin file considered (candidate) and the
 * registrations it stages while its init runs. Private to the registry layer. */
#ifndef OPREG_PLUGIN_STAGING_H
#define OPREG_PLUGIN_STAGING_H

#include "registry.h"

#include <sys/types.h>

typedef struct staged_kernel {
    char op[64];
    char device_name[32];
    opr_kernel_fn fn;
    void *data;
    uint32_t dtypes;
    uint32_t override_dtypes; /* within dtypes */
    bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len); /* 2.2, may be NULL */
    double (*cost_ns)(const opr_kernel_call *call);                          /* 2.2, may be NULL */
} staged_kernel;

typedef struct candidate {
    char *path;
    char *name, *version, *why;
    unsigned abi_major, abi_minor;
    int score;
    int status;              /* refusal status (0 when loaded or not yet decided) */
    bool loaded;
    bool in_process;         /* opr_plugin_register: no file */
    dev_t st_dev;
    ino_t st_ino;
    void *handle;            /* kept open while loaded */
    opr_plugin self;
} candidate;

typedef struct staging {
    opr_ctx *ctx;
    candidate *cand;
    staged_kernel *kernels;
    int nkernels, cap;
    opr_device_desc devices[OPR_MAX_DEVICE_TYPES];
    char device_names[OPR_MAX_DEVICE_TYPES][32];
    int ndevices;
    char error[512];         /* first invalid registration */
    bool nomem;              /* a registration ran out of memory */
    const char *dir;         /* relative host->load_yaml paths are resolved against it */
    int nskipped;            /* kernels for ops the registry does not define */
    char skipped[256];       /* their op names, comma-separated (as many as fit) */
    bool skipped_more;       /* some did not fit */
    opr_group_provider group; /* register_group_provider (2.2) */
    bool has_group;
} staging;

/* Appends a remark to a loaded plugin's `why` ("; " between remarks). Without memory
 * for it the remark is lost, not the plugin. */
void plugin_remark(candidate *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The search path of opr_plugin_discover, in order: the entries of OPREG_PLUGIN_PATH,
 * then the library's own plugin directories that exist (plugin_files.c). *paths is
 * freed with dir_list_free. OPR_OK or OPR_ERR_NOMEM. */
int plugin_search_path(char ***paths, int *n);
/* "f32, f64" for an OPR_DTYPE_BIT mask, in buf. */
const char *plugin_dtype_list(uint32_t mask, char *buf, size_t len);

#endif
