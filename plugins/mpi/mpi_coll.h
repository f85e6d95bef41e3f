/* What the MPI plugin's kernel files (mpi_kernels.c, mpi_rooted.c, mpi_p2p.c) share:
 * reading a collective's arguments, packing strided inputs, the buffers MPI writes
 * (the kernel's own, never the host's output: the host frees the output of a call that
 * fails, and a request that timed out may still be completed by a late peer) and the
 * wait that parks them on a failure. */
#ifndef OPREG_MPI_COLL_H
#define OPREG_MPI_COLL_H

#include "mpi_state.h"

#include <opreg/plugin_util.h>

/* What every collective starts with: its group's communicator, size and rank, the MPI
 * type, its number on the group. */
typedef struct mpid_coll {
    const char *name;
    MPI_Comm comm;
    int size, rank;
    MPI_Datatype type;
    int64_t group;
    uint64_t seq;
    char what[96];
} mpid_coll;

/* Argument i's tensor, or NULL when it is not one. */
const opr_tensor_view *mpid_tensor_arg(const opr_kernel_call *call, int i);
/* Copies the elements of src, in row-major order, to the contiguous dst. */
void mpid_pack(void *dst, const opr_tensor_view *src);
/* Fails the call with why; returns rc. */
int mpid_fail(const opr_kernel_call *call, int rc, const char *why);
/* Reads the group (argument group_arg), checks self's dtype and size, and checks that
 * every member runs the same collective (plugins/common/opc_collective.h; any_rows:
 * the members' sizes of dim 0 may differ, as all_to_all_single's). Fails the call. */
int mpid_coll_begin(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self, bool any_rows,
                    mpid_coll *c);
/* Waits for a started request (mrc: what starting it returned). On a failure own0 and
 * own1 (malloc'd by the kernel) are parked with the request, which MPI may still
 * write, instead of freed; on success they stay the caller's. */
int mpid_coll_finish(const opr_kernel_call *call, mpid_coll *c, int mrc, MPI_Request *req, void *own0, void *own1);
/* A malloc'd buffer of n elements of dt (the call fails with OPR_ERR_NOMEM: NULL). */
void *mpid_staging(const opr_kernel_call *call, opr_dtype dt, int64_t n);
/* The staged result into the output, then freed; OPR_OK. */
int mpid_deliver(opr_tensor_view *out, void *buf);
/* The group rank of world rank `world_rank` (PyTorch's src / dst numbering) in c's
 * group into *rank; fails the call (OPR_ERR_INVALID) when it is no member. arg names
 * the argument in the message. */
int mpid_world_to_group(const opr_kernel_call *call, const mpid_coll *c, int64_t world_rank, const char *arg,
                        int *rank);
/* The MPI reduction of op ("sum", "prod", "max", "min", "band", "bor", "bxor"; "mean"
 * sums) on dtype dt: bool reduces logically (sum, bor and max: any; prod, band and
 * min: all; bxor: odd count). */
MPI_Op mpid_reduce_op(const char *op, opr_dtype dt);

/* The kernels of the other files, registered by mpid_register_kernels. */
int mpid_k_gather_to(const opr_kernel_call *call);
int mpid_k_scatter_from(const opr_kernel_call *call);
int mpid_k_all_to_all_single(const opr_kernel_call *call);
int mpid_k_send(const opr_kernel_call *call);
int mpid_k_recv(const opr_kernel_call *call);

#endif
