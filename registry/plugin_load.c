/* Plugin discovery and loading (docs/plugin-abi.md: the ABI rules 1-8, discovery,
 * refusals).
 *
 * A plugin's registrations are staged while its init runs and committed only when
 * init succeeded, its ABI major matches and every registration was valid; a broken
 * plugin therefore leaves nothing behind and never stops the others. Loaded plugins
 * are dlclose'd only when their context is freed. */
#include "registry.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct staged_kernel {
    char op[64];
    int device;              /* device type index, or -1 for a device staged by this plugin */
    char device_name[32];
    kernel_entry entry;
} staged_kernel;

typedef struct candidate {
    char *path;
    char *name, *version, *why;
    unsigned abi_major, abi_minor;
    int score;
    int status;              /* refusal status (0 when loaded or not yet decided) */
    bool loaded;
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
} staging;

struct opr_plugin_set {
    candidate **items;
    int n, cap;
};

int plugins_new(opr_ctx *ctx)
{
    ctx->plugins = calloc(1, sizeof *ctx->plugins);
    return ctx->plugins ? OPR_OK : opr_fail(OPR_ERR_NOMEM, "out of memory");
}

void plugins_free(opr_ctx *ctx)
{
    struct opr_plugin_set *set = ctx->plugins;
    if (!set) return;
    for (int i = 0; i < set->n; i++) {
        candidate *c = set->items[i];
        if (c->loaded && c->self.shutdown) c->self.shutdown(&c->self);
        /* Only plugins whose init never ran are closed early; the rest close here. */
        if (c->handle) dlclose(c->handle);
        free(c->path); free(c->name); free(c->version); free(c->why);
        free(c);
    }
    free(set->items);
    free(set);
    ctx->plugins = NULL;
}

/* ------------------------------------------------------------------ host API table */

static void stage_error(staging *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void stage_error(staging *st, const char *fmt, ...)
{
    if (st->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->error, sizeof st->error, fmt, ap);
    va_end(ap);
}

static staging *staging_of(opr_plugin *self)
{
    return self ? (staging *)self->host_private : NULL;
}

static int host_register_kernel(opr_plugin *self, const opr_kernel_desc *desc)
{
    staging *st = staging_of(self);
    if (!st) return OPR_ERR_INVALID;
    opr_kernel_desc own; /* only the bytes the plugin's struct_size covers */
    char why[256];
    if (abi_struct_in(&own, sizeof own, desc, OPR_KERNEL_DESC_STRUCT_SIZE_2_0, "opr_kernel_desc", why, sizeof why)) {
        stage_error(st, "register_kernel: %s", why);
        return OPR_ERR_INVALID;
    }
    const opr_kernel_desc *d = &own;
    const char *op = d->op ? d->op : "(null)";
    if (!d->op || !d->device) { stage_error(st, "register_kernel: NULL op or device name"); return OPR_ERR_INVALID; }
    if (!d->fn) { stage_error(st, "register_kernel: kernel for '%s' has a NULL function pointer", op); return OPR_ERR_INVALID; }
    if (!registry_find(st->ctx, d->op)) { stage_error(st, "register_kernel: unknown op '%s'", op); return OPR_ERR_NOT_FOUND; }
    int dev = opr_device_type_find(st->ctx, d->device);
    bool staged_dev = false;
    for (int i = 0; i < st->ndevices && dev < 0 && !staged_dev; i++) staged_dev = !strcmp(st->device_names[i], d->device);
    if (dev < 0 && !staged_dev) {
        stage_error(st, "register_kernel: '%s' names unknown device '%s' (register_device it first)", op, d->device);
        return OPR_ERR_NOT_FOUND;
    }
    for (int i = 0; i < st->nkernels; i++)
        if (!strcmp(st->kernels[i].op, d->op) && !strcmp(st->kernels[i].device_name, d->device)) {
            stage_error(st, "register_kernel: kernel '%s' on %s registered twice", op, d->device);
            return OPR_ERR_INVALID;
        }
    if (strlen(d->op) >= sizeof st->kernels[0].op) { stage_error(st, "register_kernel: op name too long"); return OPR_ERR_INVALID; }
    if (st->nkernels == st->cap) {
        int cap = st->cap ? st->cap * 2 : 64;
        staged_kernel *k = realloc(st->kernels, (size_t)cap * sizeof *k);
        if (!k) { stage_error(st, "out of memory staging kernel '%s'", op); st->nomem = true; return OPR_ERR_NOMEM; }
        st->kernels = k;
        st->cap = cap;
    }
    staged_kernel *k = &st->kernels[st->nkernels++];
    snprintf(k->op, sizeof k->op, "%s", d->op);
    snprintf(k->device_name, sizeof k->device_name, "%s", d->device);
    k->entry = (kernel_entry){d->fn, d->data, d->dtypes, NULL};
    return OPR_OK;
}

static int host_register_device(opr_plugin *self, const opr_device_desc *desc)
{
    staging *st = staging_of(self);
    if (!st) return OPR_ERR_INVALID;
    opr_device_desc own; /* only the bytes the plugin's struct_size covers */
    char why[256];
    if (abi_struct_in(&own, sizeof own, desc, OPR_DEVICE_DESC_STRUCT_SIZE_2_0, "opr_device_desc", why, sizeof why)) {
        stage_error(st, "register_device: %s", why);
        return OPR_ERR_INVALID;
    }
    const opr_device_desc *d = &own;
    if (!d->name || !d->name[0] || strlen(d->name) >= sizeof st->device_names[0]) {
        stage_error(st, "register_device: device has no name or one too long");
        return OPR_ERR_INVALID;
    }
    bool is_cpu = !strcmp(d->name, "cpu");
    if (!is_cpu && (!d->alloc || !d->free || !d->copy_to_host || !d->copy_from_host || !d->copy_device)) {
        stage_error(st, "register_device: device '%s' lacks an allocator or copy function", d->name);
        return OPR_ERR_INVALID;
    }
    if (!is_cpu && opr_device_type_find(st->ctx, d->name) >= 0) {
        stage_error(st, "register_device: device '%s' is already provided by another plugin", d->name);
        return OPR_ERR_INVALID;
    }
    for (int i = 0; i < st->ndevices; i++)
        if (!strcmp(st->device_names[i], d->name)) {
            stage_error(st, "register_device: device '%s' registered twice", d->name);
            return OPR_ERR_INVALID;
        }
    if (d->count < 1 || d->count > OPR_MAX_ORDINALS) {
        stage_error(st, "register_device: '%s' has %d ordinals (1..%d allowed)", d->name, d->count, OPR_MAX_ORDINALS);
        return OPR_ERR_INVALID;
    }
    /* the context's device table has a fixed size: say so instead of dropping one */
    int types = atomic_load(&st->ctx->n_devices);
    for (int i = 0; i < st->ndevices; i++) types += strcmp(st->device_names[i], "cpu") != 0;
    if (!is_cpu && types >= OPR_MAX_DEVICE_TYPES) {
        stage_error(st, "register_device: no room for device type '%s': a context holds at most %d device types "
                    "(cpu included), %d are registered or staged", d->name, OPR_MAX_DEVICE_TYPES, types);
        return OPR_ERR_UNSUPPORTED;
    }
    st->devices[st->ndevices] = *d;
    snprintf(st->device_names[st->ndevices++], sizeof st->device_names[0], "%s", d->name);
    return OPR_OK;
}

static int host_load_yaml(opr_plugin *self, const char *path)
{
    staging *st = staging_of(self);
    if (!st || !path) return OPR_ERR_INVALID;
    return yaml_load_file(st->ctx, path, NULL);
}

static void host_set_error(const opr_kernel_call *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kcall_set_errorv(call, fmt, ap);
    va_end(ap);
}

static void host_log(opr_plugin *self, int level, const char *fmt, ...)
{
    if (!fmt) return;
    opr_log_level l = level < OPR_LOG_DEBUG ? OPR_LOG_DEBUG : level > OPR_LOG_ERROR ? OPR_LOG_ERROR : (opr_log_level)level;
    va_list ap;
    va_start(ap, fmt);
    opr_log_vemit(l, self && self->name ? self->name : "plugin", fmt, ap);
    va_end(ap);
}

static const opr_host_api host_api = {
    .struct_size = sizeof(opr_host_api),
    .abi_major = OPR_ABI_MAJOR,
    .abi_minor = OPR_ABI_MINOR,
    .register_kernel = host_register_kernel,
    .register_device = host_register_device,
    .load_yaml = host_load_yaml,
    .set_error = host_set_error,
    .log = host_log,
    .alloc_output = dispatch_alloc_output,
};

const opr_host_api *plugin_host_api(void) { return &host_api; }

/* ------------------------------------------------------------------ loading */

static candidate *candidate_add(opr_ctx *ctx, const char *path)
{
    struct opr_plugin_set *set = ctx->plugins;
    if (set->n == set->cap) {
        int cap = set->cap ? set->cap * 2 : 8;
        candidate **items = realloc(set->items, (size_t)cap * sizeof *items);
        if (!items) return NULL;
        set->items = items;
        set->cap = cap;
    }
    candidate *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) { free(c); return NULL; }
    c->score = -1;
    set->items[set->n++] = c;
    return c;
}

static int refuse(candidate *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(candidate *c, int status, const char *fmt, ...)
{
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    free(c->why);
    c->why = strdup(why);
    c->status = status;
    return opr_fail(status, "plugin %s: %s", c->path, why);
}

/* Commits a staged plugin: devices first, then kernels (already-provided kernels stay
 * with the plugin that came first, with a remark). */
static int commit(opr_ctx *ctx, staging *st, candidate *c)
{
    /* Every kernel entry is allocated before anything is published: running out of
     * memory here leaves the context as it was. */
    kernel_entry **entries = calloc((size_t)st->nkernels + 1, sizeof *entries);
    for (int i = 0; entries && i < st->nkernels; i++)
        if (!(entries[i] = malloc(sizeof **entries))) {
            for (int j = 0; j < i; j++) free(entries[j]);
            free(entries);
            entries = NULL;
        }
    if (!entries) return opr_fail(OPR_ERR_NOMEM, "out of memory committing the kernels of %s", c->name);
    for (int i = 0; i < st->ndevices; i++) {
        const opr_device_desc *d = &st->devices[i];
        if (!strcmp(d->name, "cpu")) { /* speed description of the built-in CPU device */
            opr_device_desc *cpu = &ctx->devices[0].desc;
            if (d->flops_per_s > 0) cpu->flops_per_s = d->flops_per_s;
            if (d->bytes_per_s > 0) cpu->bytes_per_s = d->bytes_per_s;
            if (d->launch_ns > 0) cpu->launch_ns = d->launch_ns;
            continue;
        }
        int t = atomic_load(&ctx->n_devices); /* room was checked when it was staged */
        opr_device_entry *e = &ctx->devices[t];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", d->name);
        e->desc = *d; /* staged through abi_struct_in: fields the plugin lacks are zero */
        e->desc.struct_size = sizeof e->desc;
        e->desc.name = e->name;
        e->plugin_name = c->name;
        atomic_store(&ctx->n_devices, t + 1);
    }
    int skipped = 0;
    for (int i = 0; i < st->nkernels; i++) {
        staged_kernel *k = &st->kernels[i];
        opr_op *op = registry_find(ctx, k->op);
        int dev = opr_device_type_find(ctx, k->device_name);
        kernel_entry *e = entries[i];
        if (!op || dev < 0) { free(e); continue; }
        *e = k->entry;
        e->plugin = c->name;
        kernel_entry *expected = NULL;
        if (!atomic_compare_exchange_strong(&op->kernels[dev], &expected, e)) { free(e); skipped++; }
    }
    free(entries);
    if (skipped) {
        char why[128];
        snprintf(why, sizeof why, "%d kernel(s) already provided by an earlier plugin were not replaced", skipped);
        c->why = strdup(why); /* a remark: without memory for it, none */
    }
    return OPR_OK;
}

/* Out of memory is no verdict on the plugin: the candidate just added (the last one)
 * is dropped, so that a later load tries the file again. */
static int forget_candidate(opr_ctx *ctx, candidate *c)
{
    struct opr_plugin_set *set = ctx->plugins;
    char msg[1024];
    snprintf(msg, sizeof msg, "plugin %s: out of memory while loading%s%s", c->path, c->why ? ": " : "",
             c->why ? c->why : "");
    if (set->n && set->items[set->n - 1] == c) set->n--;
    if (c->handle) dlclose(c->handle); /* RTLD_NODELETE: only the reference goes */
    free(c->path); free(c->name); free(c->version); free(c->why);
    free(c);
    return opr_fail(OPR_ERR_NOMEM, "%s", msg);
}

static bool name_loaded(opr_ctx *ctx, const char *name, const candidate *self)
{
    for (int i = 0; i < ctx->plugins->n; i++) {
        candidate *o = ctx->plugins->items[i];
        if (o != self && o->loaded && o->name && !strcmp(o->name, name)) return true;
    }
    return false;
}

static int load_file(opr_ctx *ctx, const char *path)
{
    struct stat sb;
    char real[PATH_MAX];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    if (stat(real, &sb)) return opr_fail(OPR_ERR_NOT_FOUND, "plugin %s: cannot stat", path);
    for (int i = 0; i < ctx->plugins->n; i++) { /* same file: idempotent */
        candidate *o = ctx->plugins->items[i];
        if (o->st_dev != sb.st_dev || o->st_ino != sb.st_ino) continue;
        if (o->loaded || !o->status) return OPR_OK;
        /* considered once: a refused file stays refused, with the same reason */
        return opr_fail(o->status, "plugin %s: %s", o->path, o->why ? o->why : "refused earlier");
    }
    candidate *c = candidate_add(ctx, real);
    if (!c) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    c->st_dev = sb.st_dev;
    c->st_ino = sb.st_ino;

    /* A world-writable file or directory lets anyone put code into this process. */
    if (sb.st_mode & S_IWOTH) return refuse(c, OPR_ERR_REFUSED, "refused: file is world-writable");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        struct stat db;
        if (!stat(dir[0] ? dir : "/", &db) && (db.st_mode & S_IWOTH) && !(db.st_mode & S_ISVTX))
            return refuse(c, OPR_ERR_REFUSED, "refused: directory %s is world-writable", dir);
    }

    dlerror();
    /* RTLD_NODELETE: dlclose at context free only drops the reference. Unmapping a
     * plugin would also unload the runtimes it pulled in (libgomp, OpenBLAS) under
     * their own live state and threads, and leave any late call into it dangling. */
    void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *err = dlerror();
        int rc = refuse(c, OPR_ERR_NOT_FOUND, "dlopen failed: %s", err ? err : "(no message)");
        return err && strstr(err, "annot allocate memory") ? forget_candidate(ctx, c) : rc;
    }
    dlerror();
    opr_plugin_init_fn init = (opr_plugin_init_fn)dlsym(h, OPR_PLUGIN_INIT_SYMBOL);
    if (!init) {
        const char *err = dlerror();
        int rc = refuse(c, OPR_ERR_NOT_FOUND, "no %s symbol: %s", OPR_PLUGIN_INIT_SYMBOL, err ? err : "symbol is NULL");
        dlclose(h);
        return rc;
    }
    opr_plugin_probe_fn probe = (opr_plugin_probe_fn)dlsym(h, OPR_PLUGIN_PROBE_SYMBOL);
    if (probe) {
        char why[256] = "";
        c->score = probe(why, sizeof why);
        if (c->score <= 0) {
            int rc = refuse(c, OPR_ERR_UNSUPPORTED, "skipped: %s", why[0] ? why : "probe says unusable here");
            dlclose(h);
            return rc;
        }
    }

    staging st = {.ctx = ctx, .cand = c};
    c->self = (opr_plugin){.struct_size = sizeof(opr_plugin), .host_private = &st};
    c->handle = h; /* init ran: never closed before the context */
    opr_error_clear();
    pthread_mutex_lock(&ctx->lock);
    int nops_before = registry_count(ctx); /* host->load_yaml during init adds after these */
    int rc = init(&host_api, &c->self);
    opr_plugin filled; /* the plugin fills the host's struct; it must leave struct_size as it was */
    char why[256] = "";
    if (abi_struct_in(&filled, sizeof filled, &c->self, OPR_PLUGIN_STRUCT_SIZE_2_0, "opr_plugin", why, sizeof why) ==
            OPR_OK && c->self.struct_size != sizeof c->self)
        snprintf(why, sizeof why, "opr_plugin: init changed struct_size from %zu to %zu", sizeof c->self,
                 c->self.struct_size);
    c->abi_major = c->self.abi_major;
    c->abi_minor = c->self.abi_minor;
    if (c->self.name) c->name = strdup(c->self.name);
    if (c->self.version) c->version = strdup(c->self.version);
    if ((c->self.name && !c->name) || (c->self.version && !c->version))
        st.nomem = true; /* not "init did not set a plugin name" */
    if (c->self.abi_major != OPR_ABI_MAJOR) {
        rc = refuse(c, OPR_ERR_ABI, "refused: plugin ABI %u.%u is %s than host ABI %d.%d (major versions must match)",
                    c->abi_major, c->abi_minor, c->abi_major < OPR_ABI_MAJOR ? "older" : "newer",
                    OPR_ABI_MAJOR, OPR_ABI_MINOR);
    } else if (why[0]) {
        rc = refuse(c, OPR_ERR_ABI, "refused: %s", why);
    } else if (rc != OPR_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", opr_last_error());
        /* init often just passes on a registration's error code: say which one */
        rc = refuse(c, rc < 0 ? rc : OPR_ERR_BACKEND, "refused: init failed with %s%s%s%s%s", opr_status_name(rc),
                    detail[0] || st.error[0] ? ": " : "", detail, detail[0] && st.error[0] ? "; " : "", st.error);
    } else if (st.error[0]) {
        rc = refuse(c, OPR_ERR_INVALID, "refused: %s", st.error);
    } else if (!c->name) {
        rc = refuse(c, OPR_ERR_INVALID, "refused: init did not set a plugin name");
    } else if (name_loaded(ctx, c->name, c)) {
        rc = refuse(c, OPR_ERR_REFUSED, "skipped: a plugin named '%s' is already loaded", c->name);
    } else if ((rc = commit(ctx, &st, c)) != OPR_OK) {
        /* out of memory: nothing was published */
    } else {
        c->loaded = true;
        if (c->abi_minor > OPR_ABI_MINOR && !c->why) {
            char why[128];
            snprintf(why, sizeof why, "plugin ABI %u.%u is newer than host %d.%d (accepted)", c->abi_major,
                     c->abi_minor, OPR_ABI_MAJOR, OPR_ABI_MINOR);
            c->why = strdup(why);
        }
    }
    if (!c->loaded) { /* staged registrations are dropped; so are the ops it defined */
        registry_truncate(ctx, nops_before);
    }
    pthread_mutex_unlock(&ctx->lock);
    c->self.host_private = NULL;
    free(st.kernels);
    if (!c->loaded && (rc == OPR_ERR_NOMEM || st.nomem)) return forget_candidate(ctx, c);
    return rc;
}



opr_status opr_plugin_load(opr_ctx *ctx, const char *path)
{
    if (!ctx || !path || !path[0]) return opr_fail(OPR_ERR_INVALID, "opr_plugin_load: NULL or empty path");
    struct stat sb;
    if (stat(path, &sb)) return opr_fail(OPR_ERR_NOT_FOUND, "plugin path %s does not exist", path);
    if (!S_ISDIR(sb.st_mode)) return load_file(ctx, path);
    if (sb.st_mode & S_IWOTH && !(sb.st_mode & S_ISVTX))
        return opr_fail(OPR_ERR_REFUSED, "plugin directory %s is world-writable: refused", path);
    char **names;
    int n;
    int listed = dir_list(path, ".so", true, "plugin directory", &names, &n);
    if (listed) return listed;
    int first = OPR_OK;
    char first_msg[1024] = "";
    for (int i = 0; i < n; i++) {
        int rc = load_file(ctx, names[i]);
        /* a plugin whose probe says "not usable here" is skipped, not an error, when a
         * whole directory is loaded (its reason stays in the candidate list) */
        if (rc == OPR_ERR_UNSUPPORTED) rc = OPR_OK;
        if (rc && (!first || (rc == OPR_ERR_NOMEM && first != OPR_ERR_NOMEM))) {
            first = rc;
            snprintf(first_msg, sizeof first_msg, "%s", opr_last_error());
        }
    }
    dir_list_free(names, n);
    if (first) opr_fail(first, "%s", first_msg);
    return first;
}

opr_status opr_plugin_discover(opr_ctx *ctx)
{
    if (!ctx) return opr_fail(OPR_ERR_INVALID, "opr_plugin_discover: NULL context");
    /* Refusals are recorded per candidate and discovery goes on; running out of
     * memory stops it, since the plugins found would depend on where it struck. */
    const char *env = getenv("OPREG_PLUGIN_PATH");
    if (env) {
        char *copy = strdup(env);
        if (!copy) return opr_fail(OPR_ERR_NOMEM, "out of memory reading OPREG_PLUGIN_PATH");
        int rc = OPR_OK;
        for (char *save = NULL, *p = strtok_r(copy, ":", &save); p && rc != OPR_ERR_NOMEM; p = strtok_r(NULL, ":", &save))
            rc = opr_plugin_load(ctx, p);
        free(copy);
        if (rc == OPR_ERR_NOMEM) return rc;
    }
    /* Then the plugin directory of the installation this library belongs to, and the
     * build's own only when this is the build tree's library (install_paths.c). */
    data_dir dirs[DATA_DIRS_MAX];
    int n = install_data_dirs(DATA_PLUGINS, dirs);
    if (n < 0) return opr_fail_wrap(n, "opr_plugin_discover");
    struct stat sb;
    for (int i = 0; i < n; i++)
        if (!stat(dirs[i], &sb) && opr_plugin_load(ctx, dirs[i]) == OPR_ERR_NOMEM) return OPR_ERR_NOMEM;
    return OPR_OK;
}

int opr_plugin_candidate_count(const opr_ctx *ctx) { return ctx && ctx->plugins ? ctx->plugins->n : 0; }

opr_status opr_plugin_candidate_get(const opr_ctx *ctx, int i, opr_plugin_candidate *out)
{
    if (!ctx || !out || i < 0 || i >= opr_plugin_candidate_count(ctx))
        return opr_fail(OPR_ERR_INVALID, "opr_plugin_candidate_get: index %d out of range", i);
    const candidate *c = ctx->plugins->items[i];
    const opr_plugin_candidate mine = {
        .struct_size = sizeof mine, .path = c->path, .name = c->name, .version = c->version,
        .abi_major = c->abi_major, .abi_minor = c->abi_minor, .score = c->score,
        .loaded = c->loaded, .why = c->why,
    };
    return opr_struct_out(out, &mine, sizeof mine, OPR_PLUGIN_CANDIDATE_STRUCT_SIZE_0_1, "opr_plugin_candidate_get",
                          "opr_plugin_candidate");
}
