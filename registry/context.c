/* Context creation: devices, the op registry from the built-in YAML, then plugins. */
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_dir(const char *p)
{
    struct stat sb;
    return p && p[0] && !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

/* Loads every *.yaml of dir in name order. Entry errors are logged in the registry
 * and do not fail the context; an unreadable directory does. */
static int load_yaml_dir(opr_ctx *ctx, const char *dir, bool every_error)
{
    char **paths;
    int n;
    int rc = dir_list(dir, ".yaml", false, "op definition directory", &paths, &n);
    for (int i = 0; i < n && !(every_error && rc); i++) {
        int r = yaml_load_file(ctx, paths[i], NULL);
        if ((every_error || r == OPR_ERR_IO || r == OPR_ERR_NOMEM) && !rc) rc = r;
    }
    dir_list_free(paths, n);
    return rc;
}

/* Where the built-in op YAML is read from: opts->yaml_dir, OPREG_YAML_DIR, then the
 * first existing one of the library's own directories (install_data_dirs), kept in
 * found. When none of those exists, fails naming every directory tried. */
static int builtin_yaml_dir(const opr_ctx_opts *opts, data_dir found[DATA_DIRS_MAX], const char **dir)
{
    *dir = NULL;
    if (opts && opts->yaml_dir) { *dir = opts->yaml_dir; return OPR_OK; }
    const char *env = getenv("OPREG_YAML_DIR");
    if (env && env[0]) { *dir = env; return OPR_OK; }
    int n = install_data_dirs(DATA_OP_YAML, found);
    if (n < 0) return opr_fail_wrap(n, "opr_ctx_new: looking for the op definitions");
    for (int i = 0; i < n; i++)
        if (is_dir(found[i])) { *dir = found[i]; return OPR_OK; }
    if (!n) return opr_fail(OPR_ERR_IO, "opr_ctx_new: cannot find the op definitions: the path of "
                            "libopreg.so is unknown (set OPREG_YAML_DIR)");
    char tried[1024] = "";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(tried);
        snprintf(tried + len, sizeof tried - len, "%s'%s'", i ? ", " : "", found[i]);
    }
    return opr_fail(OPR_ERR_IO, "opr_ctx_new: cannot find the op definitions in %s (set OPREG_YAML_DIR)", tried);
}

/* One extra op file or directory (OPREG_YAML_PATH, opts->yaml_paths); from says which.
 * A bad file in a directory fails as the same file named alone would: the user's own
 * op files are not dropped silently (the first error stops, its message kept). */
static int load_extra_yaml(opr_ctx *ctx, const char *path, const char *from)
{
    int rc = is_dir(path) ? load_yaml_dir(ctx, path, true) : yaml_load_file(ctx, path, NULL);
    return rc ? opr_fail_wrap(rc, "opr_ctx_new: %s entry '%s'", from, path) : OPR_OK;
}

/* The entries of $OPREG_YAML_PATH, then opts->yaml_paths. */
static int load_extra_yamls(opr_ctx *ctx, const opr_ctx_opts *opts)
{
    const char *env = opts->skip_builtin_yaml ? NULL : getenv("OPREG_YAML_PATH");
    while (env && *env) {
        size_t n = strcspn(env, ":");
        if (n) {
            char path[4096];
            if (n >= sizeof path) return opr_fail(OPR_ERR_INVALID, "opr_ctx_new: an OPREG_YAML_PATH entry is too long");
            memcpy(path, env, n);
            path[n] = 0;
            int rc = load_extra_yaml(ctx, path, "OPREG_YAML_PATH");
            if (rc) return rc;
        }
        env += n + (env[n] == ':');
    }
    for (int i = 0; i < opts->n_yaml_paths && opts->yaml_paths; i++) {
        int rc = opts->yaml_paths[i] ? load_extra_yaml(ctx, opts->yaml_paths[i], "yaml_paths") : OPR_OK;
        if (rc) return rc;
    }
    return OPR_OK;
}

opr_ctx *registry_ctx_new(const opr_ctx_opts *opts, const opr_autograd_iface *autograd, reg_record_fn record)
{
    opr_ctx_opts own; /* the caller's options as this library's struct: NULL means all defaults */
    if (opr_struct_in(&own, sizeof own, opts, OPR_CTX_OPTS_STRUCT_SIZE_0_1, "opr_ctx_new", "opr_ctx_opts")) return NULL;
    opts = &own;
    opr_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) { opr_fail(OPR_ERR_NOMEM, "opr_ctx_new: out of memory"); return NULL; }
    ctx->autograd = autograd;
    /* Recursive: a plugin's init may load its own YAML while the loader holds the lock. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    opr_devices_init(ctx);
    dispatch_init(ctx);
    if (!ctx->devices[0].desc.data) {
        opr_fail(OPR_ERR_NOMEM, "opr_ctx_new: out of memory");
        opr_ctx_free(ctx);
        return NULL;
    }
    if (registry_new(ctx) || plugins_new(ctx)) { opr_ctx_free(ctx); return NULL; }
    ctx->reg->record = record;
    if (!(opts && opts->skip_builtin_yaml)) {
        data_dir found[DATA_DIRS_MAX];
        const char *dir;
        int rc = builtin_yaml_dir(opts, found, &dir);
        if (!rc) {
            rc = is_dir(dir) ? load_yaml_dir(ctx, dir, false) : OPR_ERR_IO;
            if (rc == OPR_ERR_NOMEM) opr_fail_wrap(rc, "opr_ctx_new: reading the op definitions in '%s'", dir);
            else if (rc) opr_fail(OPR_ERR_IO, "opr_ctx_new: cannot read the op definitions in '%s' (set OPREG_YAML_DIR)", dir);
        }
        if (rc) {
            opr_ctx_free(ctx);
            return NULL;
        }
    }
    if (load_extra_yamls(ctx, opts)) {
        opr_ctx_free(ctx);
        return NULL;
    }
    /* A plugin that is refused leaves the context usable without it; running out of
     * memory while loading one would leave a context that silently lacks kernels. */
    int rc = OPR_OK;
    for (int i = 0; opts && i < opts->n_plugin_paths && rc != OPR_ERR_NOMEM; i++)
        if (opts->plugin_paths && opts->plugin_paths[i]) rc = opr_plugin_load(ctx, opts->plugin_paths[i]);
    if (rc != OPR_ERR_NOMEM && !(opts && opts->skip_plugin_discovery)) rc = opr_plugin_discover(ctx);
    if (rc == OPR_ERR_NOMEM) {
        opr_fail_wrap(rc, "opr_ctx_new: loading plugins");
        opr_ctx_free(ctx);
        return NULL;
    }
    opr_error_clear();
    return ctx;
}

int opr_ctx_free(opr_ctx *ctx)
{
    if (!ctx) return 0;
    int live = (int)atomic_load(&ctx->live_tensors);
    plugins_free(ctx);
    registry_free(ctx);
    opr_devices_free(ctx);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return live;
}
