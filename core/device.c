/* Device table: the built-in CPU device and those plugins register; names, parsing,
 * memory statistics. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cpu_copy(void *data, int32_t ordinal, void *dst, const void *src, size_t n)
{
    (void)data; (void)ordinal;
    if (n) memmove(dst, src, n);
    return OPR_OK;
}

void opr_devices_init(opr_ctx *ctx)
{
    opr_device_entry *e = &ctx->devices[0];
    memset(e, 0, sizeof *e);
    strcpy(e->name, "cpu");
    e->desc = (opr_device_desc){
        .struct_size = sizeof e->desc, .name = e->name, .count = 1,
        .flops_per_s = 20e9, .bytes_per_s = 10e9, .launch_ns = 200,
        .data = cpu_cache_new(), .alloc = cpu_cache_alloc, .free = cpu_cache_release,
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy, .copy_device = cpu_copy, .flags = OPR_DEVICE_HOST_MEMORY,
    };
    atomic_store(&ctx->n_devices, 1);
}

void opr_devices_free(opr_ctx *ctx)
{
    cpu_cache_free(ctx->devices[0].desc.data);
    ctx->devices[0].desc.data = NULL;
}

int opr_device_type_find(const opr_ctx *ctx, const char *name)
{
    int n = atomic_load(&ctx->n_devices);
    for (int i = 0; i < n; i++)
        if (!strcmp(ctx->devices[i].name, name)) return i;
    return -1;
}

opr_status opr_device_parse(const opr_ctx *ctx, const char *name, opr_device *out)
{
    if (!ctx || !name || !out) return opr_fail(OPR_ERR_INVALID, "opr_device_parse: NULL argument");
    char type[32];
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    if (len == 0 || len >= sizeof type)
        return opr_fail(OPR_ERR_INVALID, "bad device name '%s' (expected e.g. cpu or cuda:0)", name);
    memcpy(type, name, len);
    type[len] = '\0';
    long ordinal = 0;
    if (colon) {
        char *end;
        ordinal = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || ordinal < 0)
            return opr_fail(OPR_ERR_INVALID, "bad device ordinal in '%s'", name);
    }
    int t = opr_device_type_find(ctx, type);
    if (t < 0) return opr_fail(OPR_ERR_NOT_FOUND, "no loaded backend provides device '%s'", type);
    if (ordinal >= ctx->devices[t].desc.count)
        return opr_fail(OPR_ERR_NOT_FOUND, "device '%s' has %d ordinal(s); %ld requested",
                        type, ctx->devices[t].desc.count, ordinal);
    *out = (opr_device){t, (int32_t)ordinal};
    return OPR_OK;
}

const char *opr_device_format(const opr_ctx *ctx, opr_device dev, char *buf, size_t len)
{
    if (!buf || !len) return "?";
    opr_device_entry *e = ctx ? opr_dev_entry((opr_ctx *)ctx, dev) : NULL;
    if (!e) snprintf(buf, len, "?");
    else if (dev.type == 0) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "%s:%d", e->name, dev.index);
    return buf;
}

int opr_device_type_count(const opr_ctx *ctx) { return ctx ? atomic_load(&ctx->n_devices) : 0; }

const char *opr_device_type_name(const opr_ctx *ctx, int type)
{
    if (!ctx || type < 0 || type >= atomic_load(&ctx->n_devices)) return NULL;
    return ctx->devices[type].name;
}

int opr_device_type_ordinals(const opr_ctx *ctx, int type)
{
    if (!ctx || type < 0 || type >= atomic_load(&ctx->n_devices)) return 0;
    return ctx->devices[type].desc.count;
}

opr_status opr_device_sync(opr_ctx *ctx, opr_device dev)
{
    opr_device_entry *e = ctx ? opr_dev_entry(ctx, dev) : NULL;
    if (!e) return opr_fail(OPR_ERR_INVALID, "opr_device_sync: unknown device");
    return e->desc.sync ? e->desc.sync(e->desc.data, dev.index) : OPR_OK;
}

opr_status opr_memory_stats(const opr_ctx *ctx, opr_device dev, opr_mem_stats *out)
{
    opr_device_entry *e = ctx ? opr_dev_entry((opr_ctx *)ctx, dev) : NULL;
    if (!e || !out) return opr_fail(OPR_ERR_INVALID, "opr_memory_stats: unknown device or NULL output");
    opr_dev_stats *s = &e->stats[dev.index];
    opr_mem_stats m = {.struct_size = sizeof m};
    m.current_bytes = atomic_load(&s->current);
    m.peak_bytes = atomic_load(&s->peak);
    /* An allocation on another thread raises current before peak: between the two
     * loads peak may trail the current it has not seen yet. */
    if (m.peak_bytes < m.current_bytes) m.peak_bytes = m.current_bytes;
    m.n_allocs = atomic_load(&s->n_allocs);
    m.reserved_bytes = dev.type == 0 ? m.current_bytes + cpu_cache_cached(e->desc.data)
                       : e->desc.reserved ? e->desc.reserved(e->desc.data, dev.index) : m.current_bytes;
    return opr_struct_out(out, &m, sizeof m, OPR_MEM_STATS_STRUCT_SIZE_0_1, "opr_memory_stats", "opr_mem_stats");
}

opr_status opr_memory_reset_peak(opr_ctx *ctx, opr_device dev)
{
    opr_device_entry *e = ctx ? opr_dev_entry(ctx, dev) : NULL;
    if (!e) return opr_fail(OPR_ERR_INVALID, "opr_memory_reset_peak: unknown device");
    opr_dev_stats *s = &e->stats[dev.index];
    atomic_store(&s->peak, atomic_load(&s->current));
    return OPR_OK;
}
