/* Plugin discovery and loading (docs/plugin-abi.md: the ABI rules 1-8, discovery,
 * refusals, kernel precedence, the device contract).
 *
 * A plugin's registrations are staged while its init runs and committed only when
 * init succeeded, its ABI major matches and every registration was valid; a broken
 * plugin therefore leaves nothing behind and never stops the others. A plugin that is
 * part of the application (opr_plugin_register) goes through the same staging and
 * checks, only without dlopen. Loaded plugins are dlclose'd only when their context
 * is freed. The host API table init calls, where registrations are staged, is
 * plugin_host.c. */
#include "plugin_staging.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A list of "(op, device, dtype) of plugin P" items for a remark: the first few, then
 * a count of the rest. */
typedef struct item_list {
    int n;
    char text[384];
} item_list;

static void item_add(item_list *l, const char *op, const char *device, int dt, const char *plugin)
{
    if (l->n++ >= 4) return;
    size_t at = strlen(l->text);
    snprintf(l->text + at, sizeof l->text - at, "%s%s (%s, %s) of plugin %s", at ? ", " : "", op, device,
             opr_dtype_name((opr_dtype)dt), plugin);
}

static const char *item_more(const item_list *l, char *buf, size_t len)
{
    if (l->n > 4) snprintf(buf, len, " and %d more", l->n - 4);
    else buf[0] = '\0';
    return buf;
}

/* The device contract (plugin.h): every device type needs a copy_ kernel for the
 * dtypes its kernels handle, or strided tensors on it cannot be copied or read back.
 * Checked for the devices a plugin just registered; a warning, not a refusal. */
static void check_device_contract(opr_ctx *ctx, staging *st, candidate *c)
{
    opr_op *copy = registry_find(ctx, "copy_");
    for (int i = 0; i < st->ndevices; i++) {
        const char *name = st->device_names[i];
        int t = opr_device_type_find(ctx, name);
        if (t <= 0) continue; /* cpu: the host copies itself */
        uint32_t used = 0;
        for (int k = 0; k < st->nkernels; k++)
            if (!strcmp(st->kernels[k].device_name, name)) used |= st->kernels[k].dtypes;
        const kernel_entry *ck = copy ? atomic_load(&copy->kernels[t]) : NULL;
        char msg[384], list[64];
        if (!ck)
            snprintf(msg, sizeof msg, "device '%s' has no copy_ kernel: strided tensors on it cannot be copied, made "
                     "contiguous or read back, and view ops do not count as runnable there", name);
        else if (used & ~ck->dtypes)
            snprintf(msg, sizeof msg, "device '%s': its copy_ kernel lacks %s, which its other kernels handle: "
                     "strided tensors of those dtypes cannot be copied there", name,
                     plugin_dtype_list(used & ~ck->dtypes, list, sizeof list));
        else
            continue;
        opr_log_emit(OPR_LOG_WARN, c->name, "plugin %s: %s", c->path, msg);
        plugin_remark(c, "%s", msg);
    }
}

/* Whether the staged plugin provides device `name` itself (the CPU plugin describes
 * "cpu"): its kernels for that device come before those other plugins added to it. */
static bool owns_device(const staging *st, const char *name)
{
    for (int i = 0; i < st->ndevices; i++)
        if (!strcmp(st->devices[i].name, name)) return true;
    return false;
}

/* Commits a staged plugin: devices first, then kernels. Precedence is per (op,
 * device, dtype): a kernel fills the dtypes no earlier plugin provides; a dtype
 * already provided keeps its kernel unless this one overrides it explicitly, or this
 * plugin provides the device and the earlier kernel was not an explicit override (so
 * a plugin found first on the path cannot take over, say, cpu add by accident).
 * Either way the slot names both plugins, and the plugin gets a remark; nothing is
 * shadowed silently. */
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
        /* a speed left at 0 (or NaN) would make every estimate on the device inf or NaN:
         * it takes the built-in CPU device's defaults instead */
        const opr_device_desc *cpu = &ctx->devices[0].desc;
        if (!(d->flops_per_s > 0)) e->desc.flops_per_s = cpu->flops_per_s;
        if (!(d->bytes_per_s > 0)) e->desc.bytes_per_s = cpu->bytes_per_s;
        if (!(d->launch_ns >= 0)) e->desc.launch_ns = cpu->launch_ns;
        e->plugin_name = c->name;
        atomic_store(&ctx->n_devices, t + 1);
    }
    item_list kept = {0}, overridden = {0}, reclaimed = {0};
    for (int i = 0; i < st->nkernels; i++) {
        const staged_kernel *k = &st->kernels[i];
        opr_op *op = registry_find(ctx, k->op);
        int dev = opr_device_type_find(ctx, k->device_name);
        kernel_entry *e = entries[i];
        if (!op || dev < 0) { free(e); continue; }
        /* published entries never change: the new one is a copy with this plugin's slots */
        kernel_entry *old = atomic_load(&op->kernels[dev]);
        if (old) *e = *old;
        else memset(e, 0, sizeof *e);
        e->replaced = old;
        const dtype_kernel mine = {.fn = k->fn, .data = k->data, .plugin = c->name, .supports = k->supports,
                                   .cost_ns = k->cost_ns};
        for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
            uint32_t bit = OPR_DTYPE_BIT(dt);
            dtype_kernel *slot = &e->by_dtype[dt];
            if (!(k->dtypes & bit)) continue;
            if (!(e->dtypes & bit)) { /* missing: filled; an override still wins over a later plugin */
                *slot = mine;
                slot->overrides = (k->override_dtypes & bit) != 0;
                e->dtypes |= bit;
            } else if (k->override_dtypes & bit) { /* explicit: replaced, both named */
                item_add(&overridden, k->op, k->device_name, dt, slot->plugin);
                const char *was = slot->plugin;
                *slot = mine;
                slot->shadowed = was;
                slot->overrides = true;
            } else if (!slot->overrides && owns_device(st, k->device_name)) { /* the device's own plugin */
                item_add(&reclaimed, k->op, k->device_name, dt, slot->plugin);
                const char *was = slot->plugin;
                *slot = mine;
                slot->shadowed = was;
            } else { /* provided already: the earlier one stays, both named */
                item_add(&kept, k->op, k->device_name, dt, slot->plugin);
                /* an override loaded first shadows the first plugin that provides the dtype after it */
                if (!slot->overrides || !slot->shadowed) slot->shadowed = c->name;
            }
        }
        atomic_store_explicit(&op->kernels[dev], e, memory_order_release);
    }
    free(entries);
    char more[32];
    if (overridden.n) {
        plugin_remark(c, "overrides %d kernel(s) of earlier plugins: %s%s", overridden.n, overridden.text,
               item_more(&overridden, more, sizeof more));
        opr_log_emit(OPR_LOG_INFO, c->name, "plugin %s overrides %d kernel(s) of earlier plugins: %s%s", c->path,
                 overridden.n, overridden.text, more);
    }
    if (kept.n) {
        plugin_remark(c, "%d kernel(s) already provided by an earlier plugin were not replaced: %s%s (only missing "
               "dtypes are filled; override_dtypes replaces)", kept.n, kept.text, item_more(&kept, more, sizeof more));
        opr_log_emit(OPR_LOG_INFO, c->name, "plugin %s: %d kernel(s) already provided by an earlier plugin were not "
                 "replaced: %s%s", c->path, kept.n, kept.text, more);
    }
    if (reclaimed.n) {
        plugin_remark(c, "provides the kernels of its own device in place of %d kernel(s) earlier plugins added without "
               "override_dtypes: %s%s", reclaimed.n, reclaimed.text, item_more(&reclaimed, more, sizeof more));
        opr_log_emit(OPR_LOG_WARN, c->name, "plugin %s provides the kernels of its own device in place of %d kernel(s) "
                 "earlier plugins added without override_dtypes: %s%s", c->path, reclaimed.n, reclaimed.text, more);
    }
    if (st->nskipped)
        plugin_remark(c, "skipped %d kernel(s) for ops the registry does not define: %s%s", st->nskipped, st->skipped,
               st->skipped_more ? ", ..." : "");
    if (st->has_group && ctx->group_plugin) {
        plugin_remark(c, "its process groups (%s) are not used: plugin %s provides them", st->group.name,
                      ctx->group_plugin);
    } else if (st->has_group) {
        ctx->group_provider = st->group;
        ctx->group_plugin = c->name;
    }
    check_device_contract(ctx, st, c);
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

static int run_init(opr_ctx *ctx, candidate *c, opr_plugin_init_fn init, const char *dir);

/* The directory part of an absolute path, into buf ("/" for a file in the root). */
static const char *dirname_of(const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    if (slash == buf) slash[1] = '\0';
    else *slash = '\0';
    return buf;
}

/* The candidate of the file (or directory, or link) sb describes, if it was
 * considered already. */
static candidate *candidate_of(opr_ctx *ctx, const struct stat *sb)
{
    for (int i = 0; i < ctx->plugins->n; i++) {
        candidate *o = ctx->plugins->items[i];
        if (!o->in_process && o->st_dev == sb->st_dev && o->st_ino == sb->st_ino) return o;
    }
    return NULL;
}

/* What loading a path considered before returns: a refused path stays refused, with
 * the same reason. */
static int considered(const candidate *o)
{
    if (o->loaded || !o->status) return OPR_OK;
    return opr_fail(o->status, "plugin %s: %s", o->path, o->why ? o->why : "refused earlier");
}

/* A new candidate for the path sb describes, with its identity; NULL without memory. */
static candidate *candidate_new(opr_ctx *ctx, const char *path, const struct stat *sb)
{
    candidate *c = candidate_add(ctx, path);
    if (c) {
        c->st_dev = sb->st_dev;
        c->st_ino = sb->st_ino;
    }
    return c;
}

/* A plugin path that is not loaded and has no file to open: recorded as a refused
 * candidate (listed by opreg info), never dropped silently. */
static int refuse_path(opr_ctx *ctx, const char *path, const struct stat *sb, int status, const char *why)
{
    candidate *o = candidate_of(ctx, sb);
    if (o) return considered(o);
    candidate *c = candidate_new(ctx, path, sb);
    if (!c) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    return refuse(c, status, "%s", why);
}

/* path is a symbolic link whose target does not exist: refused naming the target. The
 * candidate is the link itself, in its directory's real path. */
static int refuse_dangling(opr_ctx *ctx, const char *path, const struct stat *lsb)
{
    char target[PATH_MAX], dir[PATH_MAX], real_dir[PATH_MAX], where[2 * PATH_MAX], why[PATH_MAX + 64];
    ssize_t len = readlink(path, target, sizeof target - 1);
    target[len > 0 ? len : 0] = '\0';
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", (int)(base - path), path);
    if (!realpath(dir[0] ? dir : ".", real_dir)) snprintf(real_dir, sizeof real_dir, "%s", dir);
    snprintf(where, sizeof where, "%s/%s", strcmp(real_dir, "/") ? real_dir : "", base);
    snprintf(why, sizeof why, "dangling symbolic link to %s", len > 0 ? target : "(unreadable)");
    return refuse_path(ctx, where, lsb, OPR_ERR_NOT_FOUND, why);
}

static int load_file(opr_ctx *ctx, const char *path)
{
    struct stat sb;
    char real[PATH_MAX];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    if (stat(real, &sb)) {
        if (!lstat(path, &sb) && S_ISLNK(sb.st_mode)) return refuse_dangling(ctx, path, &sb);
        return opr_fail(OPR_ERR_NOT_FOUND, "plugin %s: cannot stat", path);
    }
    candidate *o = candidate_of(ctx, &sb); /* same file: idempotent */
    if (o) return considered(o);
    candidate *c = candidate_new(ctx, real, &sb);
    if (!c) return opr_fail(OPR_ERR_NOMEM, "out of memory");

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

    c->handle = h; /* init runs: never closed before the context */
    return run_init(ctx, c, init, dirname_of(real, dir, sizeof dir));
}

/* Runs init of candidate c with staging, decides, and commits or rolls back: the same
 * for a file and for an in-process registration. */
static int run_init(opr_ctx *ctx, candidate *c, opr_plugin_init_fn init, const char *dir)
{
    staging st = {.ctx = ctx, .cand = c, .dir = dir};
    c->self = (opr_plugin){.struct_size = sizeof(opr_plugin), .host_private = &st, .dir = dir};
    opr_error_clear();
    pthread_mutex_lock(&ctx->lock);
    int nops_before = registry_count(ctx); /* host->load_yaml during init adds after these */
    int rc = init(plugin_host_api(), &c->self);
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
        if (c->abi_minor > OPR_ABI_MINOR)
            plugin_remark(c, "plugin ABI %u.%u is newer than host %d.%d (accepted)", c->abi_major, c->abi_minor,
                   OPR_ABI_MAJOR, OPR_ABI_MINOR);
    }
    if (!c->loaded) { /* staged registrations are dropped; so are the ops it defined */
        registry_truncate(ctx, nops_before);
    }
    pthread_mutex_unlock(&ctx->lock);
    c->self.host_private = NULL;
    c->self.dir = NULL; /* it pointed into the caller's buffer */
    free(st.kernels);
    if (!c->loaded && (rc == OPR_ERR_NOMEM || st.nomem)) return forget_candidate(ctx, c);
    return rc;
}



opr_status opr_plugin_load(opr_ctx *ctx, const char *path)
{
    if (!ctx || !path || !path[0]) return opr_fail(OPR_ERR_INVALID, "opr_plugin_load: NULL or empty path");
    struct stat sb;
    if (stat(path, &sb)) {
        if (!lstat(path, &sb) && S_ISLNK(sb.st_mode)) return refuse_dangling(ctx, path, &sb);
        return opr_fail(OPR_ERR_NOT_FOUND, "plugin path %s does not exist", path);
    }
    if (!S_ISDIR(sb.st_mode)) return load_file(ctx, path);
    /* A directory that is refused or cannot be read is a candidate of its own, so that
     * what was not looked into is listed with the reason like a refused file. */
    char real[PATH_MAX], why[PATH_MAX + 64];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    if (sb.st_mode & S_IWOTH && !(sb.st_mode & S_ISVTX)) {
        snprintf(why, sizeof why, "refused: directory %s is world-writable", real);
        return refuse_path(ctx, real, &sb, OPR_ERR_REFUSED, why);
    }
    char **names;
    int n;
    int listed = dir_list(path, ".so", true, "plugin directory", &names, &n);
    if (listed == OPR_ERR_IO) {
        snprintf(why, sizeof why, "refused: %s", opr_last_error());
        return refuse_path(ctx, real, &sb, OPR_ERR_IO, why);
    }
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

opr_status opr_plugin_register(opr_ctx *ctx, opr_plugin_init_fn init, const char *dir)
{
    if (!ctx || !init) return opr_fail(OPR_ERR_INVALID, "opr_plugin_register: NULL context or init function");
    candidate *c = candidate_add(ctx, "(in-process)");
    if (!c) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    c->in_process = true;
    /* dir is the caller's: the staging and self->dir point at a copy for init's time */
    char own[PATH_MAX];
    if (dir && (size_t)snprintf(own, sizeof own, "%s", dir) >= sizeof own)
        return refuse(c, OPR_ERR_INVALID, "refused: directory %s is too long", dir);
    return run_init(ctx, c, init, dir ? own : NULL);
}

opr_status opr_plugin_discover(opr_ctx *ctx)
{
    if (!ctx) return opr_fail(OPR_ERR_INVALID, "opr_plugin_discover: NULL context");
    /* OPREG_PLUGIN_PATH, then the plugin directory of the installation this library
     * belongs to, and the build's own only when this is the build tree's library
     * (plugin_files.c, install_paths.c). Refusals are recorded per candidate and
     * discovery goes on; running out of memory stops it, since the plugins found would
     * depend on where it struck. */
    char **dirs;
    int n, rc = plugin_search_path(&dirs, &n);
    if (rc) return rc;
    for (int i = 0; i < n && rc != OPR_ERR_NOMEM; i++) rc = opr_plugin_load(ctx, dirs[i]);
    dir_list_free(dirs, n);
    return rc == OPR_ERR_NOMEM ? rc : OPR_OK;
}

opr_status opr_plugin_refuse(opr_ctx *ctx, const char *path, const char *why)
{
    if (!ctx || !path || !why) return opr_fail(OPR_ERR_INVALID, "opr_plugin_refuse: NULL argument");
    struct stat sb;
    char real[PATH_MAX];
    if (stat(path, &sb) || !realpath(path, real)) return opr_fail(OPR_ERR_NOT_FOUND, "plugin %s does not exist", path);
    const candidate *o = candidate_of(ctx, &sb);
    if (o && o->loaded) return opr_fail(OPR_ERR_INVALID, "opr_plugin_refuse: plugin %s is loaded already", o->path);
    if (o) return OPR_OK; /* refused already: its first reason stays */
    int rc = refuse_path(ctx, real, &sb, OPR_ERR_REFUSED, why);
    return rc == OPR_ERR_REFUSED ? OPR_OK : rc;
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
