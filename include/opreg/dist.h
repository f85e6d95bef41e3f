/*
 * opreg across processes: process groups for the collective ops.
 *
 * The collectives are ops like any other (registry/ops/dist.yaml: all_reduce,
 * all_gather, reduce_scatter, broadcast_from, reduce_to, gather_to, scatter_from,
 * all_to_all_single, send, recv), with derivative formulas, run with
 * opr_call; their `group` argument is an opr_group's id (0: the world group). A plugin
 * provides the groups on an existing engine: the MPI plugin (plugins/mpi) for a
 * process started by mpirun, with CPU kernels on MPI. docs/distributed.md has the
 * ops, their formulas, how to launch and what is tested where.
 *
 * Errors: a peer that died or a collective the others never join fails after the
 * time-out (opr_dist_set_timeout, default 60 s) with OPR_ERR_BACKEND and a message
 * naming the collective, on every rank still alive; nothing hangs. MPI cannot cancel a
 * collective, so the one that timed out keeps its buffers (a late peer may still
 * complete it, writing them) and its group is broken: every later call on the group
 * fails at once with OPR_ERR_BACKEND, "group 0 is broken: all_reduce timed out at
 * collective 12 after 2 s; ..." (the helper's: "... at step 3 (bucket 0 of 2): ...").
 * Exit then (see opr_dist_finalize), and let the launcher restart the job.
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

/* Whether ctx has process groups (a loaded plugin provides them). why (may be NULL;
 * NUL-terminated, at most len bytes) says which plugin provides them, or when none
 * does, what to load. */
OPR_API bool opr_dist_available(opr_ctx *ctx, char *why, size_t len);
/* The world group (id 0) of this process as its launcher started it, initialising the
 * engine on the first call (a process started without mpirun is a world of one).
 * OPR_ERR_NOT_FOUND when no plugin provides groups. */
OPR_API opr_status opr_dist_world(opr_ctx *ctx, opr_group *world);
/* A sub-group of parent: the members that pass the same color (>= 0), ranked by key
 * then by their rank in parent; collective over parent. A negative color leaves this
 * process out (*out gets id -1, rank -1, size 0). The members first agree, within the
 * time-out, that all of them are splitting and have room for a group (at most 63 split
 * groups live per process): a member that is missing, runs another collective or has
 * 63 live groups fails the split on every member (OPR_ERR_BACKEND after the time-out,
 * which breaks parent; OPR_ERR_INVALID; OPR_ERR_NOMEM naming the rank), and no member
 * makes the group. */
OPR_API opr_status opr_dist_split(opr_ctx *ctx, const opr_group *parent, int32_t color, int32_t key,
                                  opr_group *out);
/* Frees a group split off (the world group is not freed). A broken group's
 * communicator is kept (a late peer may still complete its collective); its id goes. */
OPR_API opr_status opr_dist_group_free(opr_ctx *ctx, opr_group *group);
/* Waits until every member of group has called it (torch.distributed.barrier), within
 * the time-out; a member that never comes fails the others with OPR_ERR_BACKEND after
 * it, and the group is broken then, as after any collective's time-out. group->size
 * must be the group's (from opr_dist_world or opr_dist_split). */
OPR_API opr_status opr_dist_barrier(opr_ctx *ctx, const opr_group *group);
/* How long a collective (and opr_dist_split, and the shutdown's check that every member
 * is there) waits for its peers before it fails, in seconds: more than 0, at most
 * OPR_DIST_TIMEOUT_MAX_S (a week); infinity, NaN and larger values are refused
 * (OPR_ERR_INVALID), so that a dead peer always ends in an error. Process-wide. */
#define OPR_DIST_TIMEOUT_MAX_S 604800.0
OPR_API opr_status opr_dist_set_timeout(opr_ctx *ctx, double seconds);
/* Ends the engine in this process (MPI_Finalize): call once, after the last
 * collective; no group of any context is usable after, nor again in this process.
 * (Otherwise the last context's opr_ctx_free does it, logging a warning where it had to
 * skip MPI_Finalize.) MPI_Finalize waits for every process of the job, for ever on a
 * dead one: so it runs only when no group is broken and every member of the world
 * reaches it within the time-out; otherwise it is skipped and this returns
 * OPR_ERR_BACKEND within the time-out, saying what happened ("MPI_Finalize skipped ...:
 * group 0 is broken: ..."). The process should then exit; mpirun counts a process
 * that exits without MPI_Finalize as failed and ends the others, unless run with
 * --mca orte_allowed_exit_without_sync 1. A member that gets here more than the time-out
 * after the others counts as stalled: raise the time-out before long work on one rank
 * alone at the end. */
OPR_API opr_status opr_dist_finalize(opr_ctx *ctx);

/* ------------------------------------------------------------------ data parallel */

/* Data-parallel training over a group, as PyTorch's DistributedDataParallel: every
 * member holds the same parameters and runs its share of the batch; opr_ddp_backward
 * averages the parameters' gradients over the group. The gradients are reduced in
 * buckets (about bucket_mib each, the first at most 1 MiB as in PyTorch; parameters in
 * reverse order, since backward reaches the last ones first), each bucket's
 * non-blocking all-reduce starting as soon as the backward engine has its last
 * gradient (opr_backward_opts.leaf_ready) and polled as the backward goes on; the call
 * returns once every bucket is in. CPU parameters, f32 or f64. */
typedef struct opr_ddp opr_ddp;

typedef struct opr_ddp_opts {
    size_t struct_size;
    double bucket_mib;  /* bucket capacity in MiB (a parameter larger than it gets a
                           bucket of its own); 0: 25, PyTorch's default */
} opr_ddp_opts;
#define OPR_DDP_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_ddp_opts, bucket_mib)

/* Makes the helper for the n parameters (f32 or f64 leaves that require grad, all on
 * one device, each given once) and broadcasts their values from the group's rank 0 to
 * the others (collective over group). CPU parameters are reduced in host buckets
 * through the group provider's non-blocking all-reduce; parameters on another device
 * (CUDA) in buckets on that device, by the all_reduce op there (NCCL), each call
 * waiting for its bucket. As many buckets as the data needs (no fixed limit); a bucket
 * holds at most 2^31 - 1 elements. The tensors stay the caller's; opts may be NULL.
 * Before the broadcast the members compare their layouts (number, dtypes, shapes and
 * device type of the parameters, bucket_mib, buckets): where one differs, or one
 * member refused its arguments, every member fails with OPR_ERR_INVALID naming the rank
 * ("the members' layouts differ: ..."), and the group stays usable. */
OPR_API opr_status opr_ddp_new(opr_ctx *ctx, const opr_group *group, opr_tensor *const *params, int n,
                               const opr_ddp_opts *opts, opr_ddp **out);
/* opr_backward(loss, grad, NULL), then every parameter's .grad is its mean over the
 * group: a parameter this member's loss did not reach counts as zeros here and still
 * gets the mean (a .grad is made for it), zeros where no member's loss reached it, so
 * that the replicas stay identical (PyTorch's DDP with find_unused_parameters).
 * Accumulates into .grad like opr_backward: zero the gradients between steps
 * (opr_zero_grad). The buckets are reduced in the same order on every member; after
 * them the members compare their step (opr_ddp_set_step) and whether their own step
 * failed: a member out of step fails every member with OPR_ERR_INVALID, "the members
 * are out of step: rank 2 is at step 3, this rank (0) at step 2"; a member that failed
 * fails the others with OPR_ERR_BACKEND naming it; no .grad is written then, and the
 * helper stays usable. A reduction that fails in flight (a time-out) breaks the helper
 * and its group: this call and every later one fail with OPR_ERR_BACKEND, "group 0 is
 * broken: all_reduce timed out at step 3 (bucket 0 of 2): ...", and the bucket stays
 * allocated to the end of the process (MPI may still write it). */
OPR_API opr_status opr_ddp_backward(opr_ddp *ddp, opr_tensor *loss, opr_tensor *grad);
/* The step the next opr_ddp_backward belongs to (>= 0; by default 0 for the first call,
 * then one more per call). Every member checks the others' step with every call: give
 * each call the training step (opr_ddp_set_step(ddp, step) before it), and a member that
 * skipped a step fails every member, naming it, instead of averaging unlike steps. */
OPR_API opr_status opr_ddp_set_step(opr_ddp *ddp, int64_t step);
/* The step the next opr_ddp_backward belongs to (-1 for NULL). */
OPR_API int64_t opr_ddp_step(const opr_ddp *ddp);
/* Buckets, and the bucket of parameter i. */
OPR_API int opr_ddp_bucket_count(const opr_ddp *ddp);
OPR_API int opr_ddp_bucket_of(const opr_ddp *ddp, int param);

/* What the last opr_ddp_backward did, in order (to check the overlap): a parameter's
 * gradient ready (index: the parameter), a bucket's reduction started or waited for
 * (index: the bucket), the backward engine finished (index -1), the members' step
 * check done (index -1; it starts after the last bucket is in). */
typedef enum opr_ddp_event_kind {
    OPR_DDP_GRAD_READY, OPR_DDP_BUCKET_STARTED, OPR_DDP_BACKWARD_DONE, OPR_DDP_BUCKET_DONE, OPR_DDP_STEP_CHECKED
} opr_ddp_event_kind;
typedef struct opr_ddp_event {
    opr_ddp_event_kind kind;
    int index;
    double t_us; /* since the call began */
} opr_ddp_event;
/* The events of the last opr_ddp_backward (valid until the next call or the free). */
OPR_API const opr_ddp_event *opr_ddp_events(const opr_ddp *ddp, int *n);
OPR_API void opr_ddp_free(opr_ddp *ddp);

#ifdef __cplusplus
}
#endif

#endif
