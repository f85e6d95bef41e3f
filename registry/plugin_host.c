/* The host API table (opr_host_api) a plugin's init and kernels call: kernel and device
 * registrations are staged (plugin_staging.h) and checked here, committed by
 * plugin_load.c once init has succeeded; YAML loading, errors and logging go to the
 * context. */
#include "plugin_staging.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* What to call a plugin in a log line while its init runs (it may set no name). */
static const char *log_source(const staging *st)
{
    return st->cand->self.name ? st->cand->self.name : "opreg";
}


void plugin_remark(candidate *c, const char *fmt, ...)
{
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t old = c->why ? strlen(c->why) : 0;
    char *why = realloc(c->why, old + 2 + strlen(text) + 1);
    if (!why) return;
    snprintf(why + old, 2 + strlen(text) + 1, "%s%s", old ? "; " : "", text);
    c->why = why;
}

const char *plugin_dtype_list(uint32_t mask, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int dt = 0; dt < OPR_DTYPE_COUNT && at < len; dt++)
        if (mask & OPR_DTYPE_BIT(dt)) {
            int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", opr_dtype_name((opr_dtype)dt));
            at += n > 0 ? (size_t)n : 0;
        }
    return buf;
}

/* The staging of self with the plugin's descriptor copied into own (only the bytes its
 * struct_size covers); NULL, with the error staged, when there is none or it is bad. */
static staging *desc_in(opr_plugin *self, void *own, size_t own_size, const void *desc, size_t size_0,
                        const char *type, const char *fn)
{
    staging *st = staging_of(self);
    if (!st) return NULL;
    char why[256];
    if (abi_struct_in(own, own_size, desc, size_0, type, why, sizeof why)) {
        stage_error(st, "%s: %s", fn, why);
        return NULL;
    }
    return st;
}

static int host_register_kernel(opr_plugin *self, const opr_kernel_desc *desc)
{
    opr_kernel_desc own;
    staging *st = desc_in(self, &own, sizeof own, desc, OPR_KERNEL_DESC_STRUCT_SIZE_2_0, "opr_kernel_desc",
                          "register_kernel");
    if (!st) return OPR_ERR_INVALID;
    const opr_kernel_desc *d = &own;
    const char *op = d->op ? d->op : "(null)";
    if (!d->op || !d->device) { stage_error(st, "register_kernel: NULL op or device name"); return OPR_ERR_INVALID; }
    if (!d->fn) { stage_error(st, "register_kernel: kernel for '%s' has a NULL function pointer", op); return OPR_ERR_INVALID; }
    int dev = opr_device_type_find(st->ctx, d->device);
    bool staged_dev = false;
    for (int i = 0; i < st->ndevices && dev < 0 && !staged_dev; i++) staged_dev = !strcmp(st->device_names[i], d->device);
    if (dev < 0 && !staged_dev) {
        stage_error(st, "register_kernel: '%s' names unknown device '%s' (register_device it first)", op, d->device);
        return OPR_ERR_NOT_FOUND;
    }
    if (d->override_dtypes & ~d->dtypes) {
        char over[64], has[64];
        stage_error(st, "register_kernel: '%s' on %s overrides dtypes it does not handle (override_dtypes: %s; dtypes: %s)",
                    op, d->device, plugin_dtype_list(d->override_dtypes & ~d->dtypes, over, sizeof over),
                    plugin_dtype_list(d->dtypes, has, sizeof has));
        return OPR_ERR_INVALID;
    }
    /* Registrations are optional: a kernel for an op this registry does not define (a
     * plugin built for a newer op set, or one whose YAML was not loaded) is skipped,
     * said in the log and in the plugin's remark, and the rest of the plugin loads. */
    if (!registry_find(st->ctx, d->op)) {
        opr_log_emit(OPR_LOG_INFO, log_source(st), "plugin %s: kernel '%s' on %s skipped: the registry defines no op '%s'",
                 st->cand->path, op, d->device, op);
        size_t at = strlen(st->skipped);
        bool listed = false; /* one name per op, however many devices */
        for (const char *p = st->skipped; *p && !listed; p += strcspn(p, ",") + (p[strcspn(p, ",")] ? 2 : 0))
            listed = strcspn(p, ",") == strlen(op) && !strncmp(p, op, strlen(op));
        if (!listed && at + strlen(op) + 3 < sizeof st->skipped)
            snprintf(st->skipped + at, sizeof st->skipped - at, "%s%s", at ? ", " : "", op);
        else if (!listed)
            st->skipped_more = true;
        st->nskipped++;
        return OPR_OK;
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
    k->fn = d->fn;
    k->data = d->data;
    k->dtypes = d->dtypes;
    k->override_dtypes = d->override_dtypes;
    k->supports = d->supports;
    k->cost_ns = d->cost_ns;
    return OPR_OK;
}

static int host_register_device(opr_plugin *self, const opr_device_desc *desc)
{
    opr_device_desc own;
    staging *st = desc_in(self, &own, sizeof own, desc, OPR_DEVICE_DESC_STRUCT_SIZE_2_0, "opr_device_desc",
                          "register_device");
    if (!st) return OPR_ERR_INVALID;
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
    int other = is_cpu ? -1 : opr_device_type_find(st->ctx, d->name);
    if (other >= 0) {
        const char *by = st->ctx->devices[other].plugin_name;
        stage_error(st, "register_device: device '%s' is already provided by plugin %s", d->name, by ? by : "(host)");
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
    if (!st || !path || !path[0]) return OPR_ERR_INVALID;
    if (path[0] == '/' || !st->dir) return yaml_load_file(st->ctx, path, NULL);
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", st->dir, path) >= sizeof full)
        return opr_fail(OPR_ERR_INVALID, "load_yaml: path %s/%s is too long", st->dir, path);
    return yaml_load_file(st->ctx, full, NULL);
}

static int host_load_yaml_string(opr_plugin *self, const char *text, const char *name)
{
    staging *st = staging_of(self);
    if (!st || !text) return OPR_ERR_INVALID;
    char fallback[96];
    snprintf(fallback, sizeof fallback, "<yaml string of plugin %s>", self->name ? self->name : "?");
    return yaml_load_text(st->ctx, text, strlen(text), name ? name : fallback, NULL);
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

static int host_register_group_provider(opr_plugin *self, const opr_group_provider *p)
{
    opr_group_provider own;
    staging *st = desc_in(self, &own, sizeof own, p, OPR_GROUP_PROVIDER_STRUCT_SIZE_2_2, "opr_group_provider",
                          "register_group_provider");
    if (!st) return OPR_ERR_INVALID;
    if (!own.name || !own.world || !own.split || !own.group_free || !own.set_timeout || !own.all_reduce_start ||
        !own.wait || !own.finalize) {
        stage_error(st, "register_group_provider: a NULL name or function");
        return OPR_ERR_INVALID;
    }
    if (st->has_group) { stage_error(st, "register_group_provider: registered twice"); return OPR_ERR_INVALID; }
    st->group = own;
    st->has_group = true;
    return OPR_OK;
}

/* The context's provider for a kernel call's group service (has_fn: the provider
 * offers it), or NULL with the reason in why. */
static const opr_group_provider *call_provider(const opr_kernel_call *call, const char *fn,
                                               bool (*has_fn)(const opr_group_provider *), char *why, size_t why_len)
{
    const kcall_frame *f = call ? call->host_call : NULL;
    if (!why || !why_len) return NULL;
    if (!f) snprintf(why, why_len, "%s: only during a kernel call", fn);
    else if (!f->ctx->group_plugin)
        snprintf(why, why_len, "no process groups: no loaded plugin provides them (the MPI plugin is built where "
                 "MPI is found)");
    else if (!has_fn(&f->ctx->group_provider))
        snprintf(why, why_len, "%s: the %s provider (plugin %s) does not offer it", fn, f->ctx->group_provider.name,
                 f->ctx->group_plugin);
    else return &f->ctx->group_provider;
    return NULL;
}

static bool has_group_info(const opr_group_provider *p) { return p->group_info != NULL; }
static bool has_all_gather(const opr_group_provider *p) { return p->all_gather_bytes != NULL; }

static int provider_status(int rc, char *why, size_t why_len, const char *fn)
{
    if (rc && !why[0]) snprintf(why, why_len, "%s failed without detail", fn);
    return rc < 0 ? rc : rc ? OPR_ERR_BACKEND : OPR_OK;
}

static int host_group_info(const opr_kernel_call *call, int64_t group, int32_t *rank, int32_t *size,
                           double *timeout_s, char *why, size_t why_len)
{
    const opr_group_provider *p = call_provider(call, "group_info", has_group_info, why, why_len);
    if (!p) return OPR_ERR_NOT_FOUND;
    int32_t r = -1, n = 0;
    double t = 0;
    why[0] = '\0';
    int rc = provider_status(p->group_info(p->data, group, &r, &n, &t, why, why_len), why, why_len, "group_info");
    if (rc) return rc;
    if (rank) *rank = r;
    if (size) *size = n;
    if (timeout_s) *timeout_s = t;
    return OPR_OK;
}

static int host_group_all_gather(const opr_kernel_call *call, int64_t group, const void *mine, void *all, size_t bytes,
                                 char *why, size_t why_len)
{
    const opr_group_provider *p = call_provider(call, "group_all_gather", has_all_gather, why, why_len);
    if (!p) return OPR_ERR_NOT_FOUND;
    if (!mine || !all) {
        snprintf(why, why_len, "group_all_gather: NULL buffer");
        return OPR_ERR_INVALID;
    }
    why[0] = '\0';
    return provider_status(p->all_gather_bytes(p->data, group, mine, all, bytes, why, why_len), why, why_len,
                           "all_gather_bytes");
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
    .load_yaml_string = host_load_yaml_string,
    .register_group_provider = host_register_group_provider,
    .group_info = host_group_info,
    .group_all_gather = host_group_all_gather,
};

const opr_host_api *plugin_host_api(void) { return &host_api; }
