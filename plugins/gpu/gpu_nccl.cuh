/* What the NCCL kernels (gpu_nccl.cu: the reductions, broadcast, the communicators;
 * gpu_nccl_p2p.cu: gather, scatter, all-to-all, send and recv over NCCL's point to
 * point) share. Private to plugins/gpu. */
#ifndef OPREG_GPU_NCCL_CUH
#define OPREG_GPU_NCCL_CUH

#include "gpu_common.cuh"

#include GPU_NCCL_HEADER

#include <stdio.h>
#include <string.h>

namespace gk_nccl {

/* The NCCL functions this file calls, loaded with dlopen. */
struct nccl_api {
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    const char *(*get_error_string)(ncclResult_t);
    const char *(*get_last_error)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, gpuStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, gpuStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, gpuStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, gpuStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
};

extern nccl_api nccl;

/* What every collective starts with. */
struct coll {
    gk_ctx k;
    const opr_tensor_view *self;
    int64_t group;
    int32_t rank, size;
    int root; /* of a rooted collective */
    double timeout_s;
    ncclDataType_t type;
    ncclComm_t comm;
    const void *send; /* self's elements, contiguous: self's data or packed */
    gk_buf packed;
    char what[96];
};

/* How coll_begin reads a collective's arguments. */
enum coll_flags {
    COLL_ROOTED = 1,     /* argument 1 is the root */
    COLL_ROOT_SENDS = 2, /* only the root's self is read (broadcast): the others do not pack it */
    COLL_ANY_ROWS = 4,   /* the members' sizes of dim 0 may differ (all_to_all_single) */
};

/* The NCCL type of an opreg dtype (bool: its byte, as uint8). */
ncclDataType_t nccl_type(opr_dtype dt);
/* Fails the call with NCCL's message for r in where. */
int fail_nccl(const coll *c, const char *where, ncclResult_t r);
/* Checks the call, finds or makes the group's communicator after the same-collective
 * check (any_rows: dim 0 may differ by member), and packs self into c->send (unless
 * COLL_ROOT_SENDS and not the root). */
int coll_begin(const opr_kernel_call *call, int group_arg, int flags, coll *c);
/* Waits for the collective just enqueued (r: what enqueuing it returned) against the
 * time-out; a failure aborts the communicator and breaks the group. */
int coll_wait(coll *c, const char *where, ncclResult_t r);
/* The group's communicator on this device when one was made (by a collective: every
 * member makes it at once), else NULL; the group's broken reason in why (empty when
 * it is not broken). */
ncclComm_t existing_comm(int64_t group, int ordinal, char *why, size_t why_len);

/* The group rank of world rank world_rank in group (learnt with its communicator), or
 * -1 when it is no member or the group has no communicator yet. */
int member_rank(int64_t group, int64_t world_rank);
/* NCCL loaded on first use: "" when it is, else why not. */
const char *nccl_load_error();

/* Runs an NCCL call that enqueues work (the emulation's stand-in moves the data in the
 * call, so device memory is opened around it). */
template <class F> ncclResult_t enqueue(F f)
{
    gpu_library_access_begin();
    ncclResult_t r = f();
    gpu_library_access_end();
    return r;
}

/* The kernels of gpu_nccl_p2p.cu. */
int k_gather_to(const opr_kernel_call *call);
int k_scatter_from(const opr_kernel_call *call);
int k_all_to_all_single(const opr_kernel_call *call);
int k_send(const opr_kernel_call *call);
int k_recv(const opr_kernel_call *call);

} // namespace gk_nccl

#endif
