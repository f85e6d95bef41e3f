/* A stand-in for libnccl.so.2 behind the emulated CUDA plugin, over MPI: the NCCL
 * kernels of plugins/gpu/gpu_nccl.cu (bootstrap, communicator cache, packing, the
 * dtype and reduction mapping, errors) run under mpirun on machines without a GPU.
 * Emulated streams run their work at once, so each call completes before it returns.
 *
 * ncclCommInitRank must build a communicator of exactly the ranks holding one id
 * without a parent that all of them share: the id names its root's world rank and a
 * tag; every member sends its world rank and NCCL rank to the root, which answers
 * with the members in NCCL rank order, and the members then make the communicator
 * with MPI_Comm_create_group (collective over the members only). */
#define GPU_EMU_NCCL_STREAM void *
#include "gpu_emu_nccl.h"

#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ncclComm {
    MPI_Comm comm;
    int rank, size;
};

typedef struct {
    char magic[8]; /* "emunccl" */
    int32_t root;  /* world rank */
    int32_t tag;
} emu_id;

#define TAG_BASE 7000 /* point-to-point tags of the bootstrap: below MPI_TAG_UB's guaranteed 32767 */

static char last_error[256];

static ncclResult_t fail(ncclResult_t rc, const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s", msg);
    return rc;
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static int32_t next_tag;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return fail(ncclSystemError, "the NCCL stand-in needs MPI initialised");
    emu_id e = {"emunccl", 0, TAG_BASE + (next_tag++ % 1000) * 2};
    MPI_Comm_rank(MPI_COMM_WORLD, &e.root);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &e, sizeof e);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    emu_id e;
    memcpy(&e, id.internal, sizeof e);
    if (memcmp(e.magic, "emunccl", 8) || nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRank: not an id of the stand-in, or a bad rank");
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int32_t mine[2] = {me, rank}, *members = malloc(sizeof(int32_t) * (size_t)nranks);
    if (!members) return fail(ncclSystemError, "out of memory");
    MPI_Request sent;
    MPI_Isend(mine, 2, MPI_INT32_T, e.root, e.tag, MPI_COMM_WORLD, &sent);
    if (me == e.root) {
        for (int i = 0; i < nranks; i++) {
            int32_t got[2];
            MPI_Recv(got, 2, MPI_INT32_T, MPI_ANY_SOURCE, e.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            members[got[1]] = got[0];
        }
        for (int i = 0; i < nranks; i++)
            MPI_Send(members, nranks, MPI_INT32_T, members[i], e.tag + 1, MPI_COMM_WORLD);
    }
    MPI_Recv(members, nranks, MPI_INT32_T, e.root, e.tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&sent, MPI_STATUS_IGNORE);
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nranks, members, &group);
    free(members);
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return fail(ncclSystemError, "out of memory");
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, e.tag, &c->comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) {
        free(c);
        return fail(ncclSystemError, "MPI_Comm_create_group failed");
    }
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclInvalidArgument;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->comm);
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    (void)comm;
    *async_error = ncclSuccess;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "unhandled system error";
    default: return "internal error";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

static MPI_Datatype type_of(ncclDataType_t t)
{
    return t == ncclFloat64 ? MPI_DOUBLE : t == ncclInt64 ? MPI_INT64_T : t == ncclInt32 ? MPI_INT32_T
           : t == ncclUint8 ? MPI_UINT8_T : MPI_FLOAT;
}

static size_t size_of(ncclDataType_t t) { return t == ncclFloat64 || t == ncclInt64 ? 8 : t == ncclUint8 ? 1 : 4; }

static MPI_Op op_of(ncclRedOp_t op)
{
    return op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : op == ncclProd ? MPI_PROD : MPI_SUM;
}

static void average(void *buf, size_t n, ncclDataType_t t, int by)
{
    if (t == ncclFloat64) for (size_t i = 0; i < n; i++) ((double *)buf)[i] /= by;
    else for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= (float)by;
}

static ncclResult_t check(ncclComm_t comm, size_t count, ncclDataType_t t, ncclRedOp_t op)
{
    if (!comm || count > 0x7fffffff) return fail(ncclInvalidArgument, "bad communicator or count");
    if (t != ncclFloat32 && t != ncclFloat64 && t != ncclInt64 && t != ncclInt32 && t != ncclUint8)
        return fail(ncclInvalidArgument, "the stand-in has f32, f64, i64, i32 and uint8 only");
    if (op == ncclAvg && t != ncclFloat32 && t != ncclFloat64) return fail(ncclInvalidArgument, "ncclAvg of an integer");
    return ncclSuccess;
}

static ncclResult_t done(int mpi_rc) { return mpi_rc == MPI_SUCCESS ? ncclSuccess : fail(ncclSystemError, "MPI failed"); }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, count, type, op);
    if (rc) return rc;
    rc = done(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, type_of(type), op_of(op), comm->comm));
    if (!rc && op == ncclAvg) average(recv, count, type, comm->size);
    return rc;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, count, type, ncclSum);
    if (rc) return rc;
    size_t es = size_of(type);
    if (comm->rank == root && send != recv) memmove(recv, send, count * es);
    return done(MPI_Bcast(recv, (int)count, type_of(type), root, comm->comm));
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, count, type, op);
    if (rc) return rc;
    const void *src = comm->rank == root && send == recv ? MPI_IN_PLACE : send;
    rc = done(MPI_Reduce(src, recv, (int)count, type_of(type), op_of(op), root, comm->comm));
    if (!rc && op == ncclAvg && comm->rank == root) average(recv, count, type, comm->size);
    return rc;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, sendcount, type, ncclSum);
    if (rc) return rc;
    return done(MPI_Allgather(send, (int)sendcount, type_of(type), recv, (int)sendcount, type_of(type), comm->comm));
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, recvcount, type, op);
    if (rc) return rc;
    rc = done(MPI_Reduce_scatter_block(send, recv, (int)recvcount, type_of(type), op_of(op), comm->comm));
    if (!rc && op == ncclAvg) average(recv, recvcount, type, comm->size);
    return rc;
}

/* Point to point: NCCL matches a pair's sends and receives in order, as MPI does on one
 * tag; between ncclGroupStart and ncclGroupEnd they are started, and ncclGroupEnd
 * waits for them all (a root's receives from every member must all be posted before
 * any completes). One group at a time, on one thread, as the kernels use it. */
#define MAX_PENDING 64
static MPI_Request pending[MAX_PENDING];
static int npending, group_depth;

static ncclResult_t p2p_post(int rc, MPI_Request req)
{
    if (rc != MPI_SUCCESS) return fail(ncclSystemError, "MPI failed");
    if (group_depth == 0) return done(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (npending == MAX_PENDING) return fail(ncclInvalidUsage, "more than 64 sends and receives in one group");
    pending[npending++] = req;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, count, type, ncclSum);
    if (rc) return rc;
    if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclSend: no such peer");
    MPI_Request req;
    int mrc = MPI_Isend(send, (int)count, type_of(type), peer, 0, comm->comm, &req);
    return p2p_post(mrc, req);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, void *stream)
{
    (void)stream;
    ncclResult_t rc = check(comm, count, type, ncclSum);
    if (rc) return rc;
    if (peer < 0 || peer >= comm->size) return fail(ncclInvalidArgument, "ncclRecv: no such peer");
    MPI_Request req;
    int mrc = MPI_Irecv(recv, (int)count, type_of(type), peer, 0, comm->comm, &req);
    return p2p_post(mrc, req);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    int rc = MPI_Waitall(npending, pending, MPI_STATUSES_IGNORE);
    npending = 0;
    return done(rc);
}
