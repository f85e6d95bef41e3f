/*
 * opreg across processes: process groups for the collective ops.
 *
 * The collectives are ops like any other (registry/ops/dist.yaml: all_reduce,
 * all_gather, reduce_scatter, broadcast_from, reduce_to), with derivative formulas, run with
 * opr_call; their `group` argument is an opr_group's id (0: the world group). A plugin
 * provides the groups on an existing engine: the MPI plugin (plugins/mpi) for a
 * process started by mpirun, with CPU kernels on MPI. docs/distributed.md has the
 * ops, their formulas, how to launch and what is tested where.
 *
 * Errors: a peer that died or a collective the others never join fails after the
 * time-out (opr_dist_set_timeout, default 60 s) with OPR_ERR_BACKEND and a message
 * naming the collective, on every rank still alive; nothing hangs.
 */
#ifndef OPREG_DIST_H
#define OPREG_DIST_H

#include "opreg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A process group: its id for the ops' `group` argument, this process's rank in it
 * and the number of members. */
typedef struct opr_group {
    int64_t id;
    int32_t rank;
    int32_t size;
} opr_group;

/* Whether ctx has process groups (a loaded plugin provides them); when not, why says
 * what to load (NUL-terminated, at most len bytes; why may be NULL). */
OPR_API bool opr_dist_available(opr_ctx *ctx, char *why, size_t len);
/* The world group (id 0) of this process as its launcher started it, initialising the
 * engine on the first call (a process started without mpirun is a world of one).
 * OPR_ERR_NOT_FOUND when no plugin provides groups. */
OPR_API opr_status opr_dist_world(opr_ctx *ctx, opr_group *world);
/* A sub-group of parent: the members that pass the same color (>= 0), ranked by key
 * then by their rank in parent; collective over parent. A negative color leaves this
 * process out (*out gets id -1, rank -1, size 0). */
OPR_API opr_status opr_dist_split(opr_ctx *ctx, const opr_group *parent, int32_t color, int32_t key,
                                  opr_group *out);
/* Frees a group split off (the world group is not freed). */
OPR_API opr_status opr_dist_group_free(opr_ctx *ctx, opr_group *group);
/* How long a collective waits for its peers before it fails, in seconds (> 0). */
OPR_API opr_status opr_dist_set_timeout(opr_ctx *ctx, double seconds);
/* Ends the engine in this process (MPI_Finalize): call once, after the last
 * collective; no group of any context is usable after, nor again in this process. */
OPR_API opr_status opr_dist_finalize(opr_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
