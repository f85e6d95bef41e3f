/* Process groups (opreg/dist.h): the public API over the provider a plugin registered
 * (opr_host_api.register_group_provider). The host keeps no state of its own: the
 * provider owns its groups, so every context in the process sees the same world. */
#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const opr_group_provider *dist_provider(opr_ctx *ctx)
{
    if (!ctx) { opr_fail(OPR_ERR_INVALID, "NULL context"); return NULL; }
    if (!ctx->group_plugin) {
        opr_fail(OPR_ERR_NOT_FOUND, "no process groups: no loaded plugin provides them (the MPI plugin, "
                 "libopreg_mpi.so, is built where MPI is found; opreg info lists the plugins)");
        return NULL;
    }
    return &ctx->group_provider;
}

int dist_fail(int rc, const char *what, const char *why)
{
    return opr_fail(rc < 0 ? rc : OPR_ERR_BACKEND, "%s: %s", what, why[0] ? why : "failed without detail");
}

bool opr_dist_available(opr_ctx *ctx, char *why, size_t len)
{
    bool ok = ctx && ctx->group_plugin;
    if (why && len) {
        if (ok) snprintf(why, len, "provided by plugin %s (%s)", ctx->group_plugin, ctx->group_provider.name);
        else snprintf(why, len, "no loaded plugin provides process groups (the MPI plugin is built where MPI is found)");
    }
    return ok;
}

opr_status opr_dist_world(opr_ctx *ctx, opr_group *world)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    if (!world) return opr_fail(OPR_ERR_INVALID, "opr_dist_world: NULL group");
    char why[512] = "";
    int32_t rank = 0, size = 0;
    int rc = p->world(p->data, &rank, &size, why, sizeof why);
    if (rc) return dist_fail(rc, "opr_dist_world", why);
    *world = (opr_group){.id = 0, .rank = rank, .size = size};
    return OPR_OK;
}

opr_status opr_dist_split(opr_ctx *ctx, const opr_group *parent, int32_t color, int32_t key, opr_group *out)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    if (!parent || !out) return opr_fail(OPR_ERR_INVALID, "opr_dist_split: NULL group");
    char why[512] = "";
    int64_t id = -1;
    int32_t rank = -1, size = 0;
    int rc = p->split(p->data, parent->id, color, key, &id, &rank, &size, why, sizeof why);
    if (rc) return dist_fail(rc, "opr_dist_split", why);
    *out = (opr_group){.id = id, .rank = rank, .size = size};
    return OPR_OK;
}

opr_status opr_dist_group_free(opr_ctx *ctx, opr_group *group)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    if (!group) return opr_fail(OPR_ERR_INVALID, "opr_dist_group_free: NULL group");
    if (group->id <= 0) return OPR_OK; /* the world group, or none */
    int rc = p->group_free(p->data, group->id);
    if (rc) return opr_fail(rc, "opr_dist_group_free: group %lld is not a live group", (long long)group->id);
    *group = (opr_group){.id = -1, .rank = -1, .size = 0};
    return OPR_OK;
}

opr_status opr_dist_set_timeout(opr_ctx *ctx, double seconds)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    /* a collective must end: no infinite or astronomic wait, which would make a dead
     * peer hang every member */
    if (!(seconds > 0) || !isfinite(seconds) || seconds > OPR_DIST_TIMEOUT_MAX_S)
        return opr_fail(OPR_ERR_INVALID, "opr_dist_set_timeout: %g s is not a time-out (more than 0, at most %g s)",
                        seconds, OPR_DIST_TIMEOUT_MAX_S);
    int rc = p->set_timeout(p->data, seconds);
    return rc ? opr_fail(rc, "opr_dist_set_timeout: the %s provider refused %g s", p->name, seconds) : OPR_OK;
}

opr_status opr_dist_finalize(opr_ctx *ctx)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    char why[512] = "";
    int rc = p->finalize(p->data, why, sizeof why);
    return rc ? dist_fail(rc, "opr_dist_finalize", why) : OPR_OK;
}

opr_status opr_dist_barrier(opr_ctx *ctx, const opr_group *group)
{
    const opr_group_provider *p = dist_provider(ctx);
    if (!p) return opr_error_status();
    if (!group) return opr_fail(OPR_ERR_INVALID, "opr_dist_barrier: NULL group");
    /* an all-gather of one byte: no member gets the others' bytes before every member
     * has sent its own, which is all a barrier is; it has the provider's time-out and
     * breaks the group on it like any collective */
    if (p->struct_size < OPR_STRUCT_SIZE(opr_group_provider, all_gather_bytes) || !p->all_gather_bytes)
        return opr_fail(OPR_ERR_UNSUPPORTED, "opr_dist_barrier: the %s provider has no all_gather_bytes", p->name);
    if (group->size < 1 || group->size > (1 << 24))
        return opr_fail(OPR_ERR_INVALID, "opr_dist_barrier: group %lld has %d members", (long long)group->id,
                        group->size);
    char mine = 1, *all = calloc((size_t)group->size, 1), why[512] = "";
    if (!all) return opr_fail(OPR_ERR_NOMEM, "opr_dist_barrier: out of memory");
    int rc = p->all_gather_bytes(p->data, group->id, &mine, all, 1, why, sizeof why);
    free(all);
    return rc ? dist_fail(rc, "opr_dist_barrier", why) : OPR_OK;
}
