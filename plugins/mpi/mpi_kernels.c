/* The collectives of registry/ops/dist.yaml on CPU tensors, f32 and f64, over MPI's
 * non-blocking collectives waited on with the time-out (mpi_requests.c). Inputs may be
 * strided: they are packed into contiguous buffers first (outputs are contiguous).
 * MPI reads and writes only buffers of the kernel's own, copied into the output once
 * the collective is done: the host frees the output of a call that fails, and a
 * collective that timed out may still be completed by a late peer. */
#include "mpi_state.h"

#include <opreg/plugin_util.h>

#include "../common/opc_collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const opr_tensor_view *tensor_arg(const opr_kernel_call *call, int i)
{
    return call->args[i]->kind == OPR_ARG_TENSOR ? call->args[i]->u.t : NULL;
}

/* Copies the elements of src, in row-major order, to the contiguous dst. */
static void pack(void *dst, const opr_tensor_view *src)
{
    const size_t es = opu_dtype_size(src->dtype);
    if (opu_is_contiguous(src)) {
        memcpy(dst, src->data, (size_t)src->numel * es);
        return;
    }
    opu_iter it;
    memset(&it, 0, sizeof it);
    it.ndim = src->ndim;
    it.nops = 1;
    it.shape = src->shape;
    for (int d = 0; d < src->ndim; d++) it.strides[0][d] = src->strides[d];
    opu_iter_seek(&it, 0);
    for (int64_t i = 0; i < src->numel; i++, opu_iter_next(&it))
        memcpy((char *)dst + (size_t)i * es, (const char *)src->data + (size_t)it.off[0] * es, es);
}

static void scale(void *buf, opr_dtype dt, int64_t n, int by)
{
    if (by <= 1) return;
    if (dt == OPR_F32) for (int64_t i = 0; i < n; i++) ((float *)buf)[i] /= (float)by;
    else for (int64_t i = 0; i < n; i++) ((double *)buf)[i] /= by;
}

/* What every collective starts with: its group's communicator, size and rank, the MPI
 * type, its number on the group; fails the call with the reason. */
typedef struct coll {
    const char *name;
    MPI_Comm comm;
    int size, rank;
    MPI_Datatype type;
    int64_t group;
    uint64_t seq;
    char what[96];
} coll;

static int fail(const opr_kernel_call *call, int rc, const char *why)
{
    call->host->set_error(call, "%s", why);
    return rc;
}

/* Waits for a started request (mrc: what starting it returned). MPI may still write a
 * request that failed: own0 and own1, the buffers it uses (malloc'd by the kernel,
 * never the host's output), are then parked with it instead of freed. On success they
 * stay the caller's. */
static int coll_finish(const opr_kernel_call *call, coll *c, int mrc, MPI_Request *req, void *own0, void *own1)
{
    char why[768];
    int rc;
    if (mrc != MPI_SUCCESS) {
        rc = mpid_error(mrc, c->what, why, sizeof why);
        free(own0);
        free(own1);
    } else if ((rc = mpid_wait(req, c->group, c->seq, c->name, c->what, why, sizeof why))) {
        mpid_park(*req, own0, own1);
    }
    return rc ? fail(call, rc, why) : OPR_OK;
}

/* Every member gathers what the others are about to run and fails where one differs
 * (plugins/common/opc_collective.h): one small collective per call. */
static int same_collective(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self, coll *c)
{
    char *all = calloc((size_t)c->size + 1, OPC_COLL_SIG); /* every member's, then this one's */
    if (!all) return fail(call, OPR_ERR_NOMEM, "out of memory");
    char *mine = all + (size_t)c->size * OPC_COLL_SIG;
    opc_coll_describe(call, group_arg, self, mine);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(mine, OPC_COLL_SIG, MPI_CHAR, all, OPC_COLL_SIG, MPI_CHAR, c->comm, &req);
    mpid_unlock();
    int rc = coll_finish(call, c, mrc, &req, all, NULL);
    if (rc) return rc; /* all: freed or parked */
    char why[640];
    if (opc_coll_mismatch(all, c->size, mine, c->what, why, sizeof why) >= 0) rc = fail(call, OPR_ERR_INVALID, why);
    free(all);
    return rc;
}

static int coll_begin(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self, coll *c)
{
    char why[512];
    c->name = call->op;
    c->group = call->args[group_arg]->u.i;
    int rc = mpid_group(c->group, true, &c->comm, &c->seq, why, sizeof why);
    if (rc) return fail(call, rc, why);
    MPI_Comm_size(c->comm, &c->size);
    MPI_Comm_rank(c->comm, &c->rank);
    c->type = mpid_type(self->dtype);
    if (c->type == MPI_DATATYPE_NULL) return fail(call, OPR_ERR_UNSUPPORTED, "f32 and f64 only");
    if (self->numel > 0x7fffffff) return fail(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    snprintf(c->what, sizeof c->what, "%s on group %lld (rank %d of %d)", c->name, (long long)c->group, c->rank,
             c->size);
    return same_collective(call, group_arg, self, c);
}

/* A buffer of n elements of dt of the kernel's own (MPI writes it; the host's output
 * may be freed when the call fails). */
static void *staging(const opr_kernel_call *call, opr_dtype dt, int64_t n)
{
    void *b = malloc((size_t)n * opu_dtype_size(dt) + 1);
    if (!b) fail(call, OPR_ERR_NOMEM, "out of memory");
    return b;
}

/* The staged result into the output, freed. */
static int deliver(opr_tensor_view *out, void *buf)
{
    memcpy(out->data, buf, (size_t)out->numel * opu_dtype_size(out->dtype));
    free(buf);
    return OPR_OK;
}

static MPI_Op reduce_op(const char *op)
{
    return !strcmp(op, "max") ? MPI_MAX : !strcmp(op, "min") ? MPI_MIN : MPI_SUM;
}

/* all_reduce(self, op, group): in place in a staging buffer. */
static int k_all_reduce(const opr_kernel_call *call)
{
    const opr_tensor_view *self = tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    const char *op = call->args[1]->u.s;
    coll c;
    int rc = coll_begin(call, 2, self, &c);
    void *buf = rc ? NULL : staging(call, self->dtype, self->numel);
    if (!buf) return rc ? rc : OPR_ERR_NOMEM;
    pack(buf, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)self->numel, c.type, reduce_op(op), c.comm, &req);
    mpid_unlock();
    if ((rc = coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    if (!strcmp(op, "mean")) scale(buf, out->dtype, out->numel, c.size);
    return deliver(out, buf);
}

/* all_gather(self, group): [size * n, ...], this rank's rows packed in place. */
static int k_all_gather(const opr_kernel_call *call)
{
    const opr_tensor_view *self = tensor_arg(call, 0);
    coll c;
    int rc = coll_begin(call, 1, self, &c);
    if (rc) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    opc_coll_dim0_shape(self, c.size, 1, shape, why, sizeof why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    void *buf = staging(call, self->dtype, out->numel);
    if (!buf) return OPR_ERR_NOMEM;
    const size_t es = opu_dtype_size(self->dtype);
    pack((char *)buf + (size_t)c.rank * (size_t)self->numel * es, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)self->numel, c.type, c.comm, &req);
    mpid_unlock();
    if ((rc = coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    return deliver(out, buf);
}

/* reduce_scatter(self, op, group): rows [rank * n, (rank + 1) * n) of the sum. */
static int k_reduce_scatter(const opr_kernel_call *call)
{
    const opr_tensor_view *self = tensor_arg(call, 0);
    const char *op = call->args[1]->u.s;
    coll c;
    int rc = coll_begin(call, 2, self, &c);
    if (rc) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    if (opc_coll_dim0_shape(self, c.size, 0, shape, why, sizeof why)) return fail(call, OPR_ERR_INVALID, why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    void *packed = staging(call, self->dtype, self->numel), *buf = packed ? staging(call, out->dtype, out->numel) : NULL;
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    pack(packed, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ireduce_scatter_block(packed, buf, (int)out->numel, c.type, MPI_SUM, c.comm, &req);
    mpid_unlock();
    if ((rc = coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    if (!strcmp(op, "mean")) scale(buf, out->dtype, out->numel, c.size);
    return deliver(out, buf);
}

static int root_of(const opr_kernel_call *call, const coll *c, int *root)
{
    char why[128];
    return opc_coll_root(call, c->size, root, why, sizeof why) ? fail(call, OPR_ERR_INVALID, why) : OPR_OK;
}

/* broadcast_from(self, root, group): root's self everywhere. */
static int k_broadcast(const opr_kernel_call *call)
{
    const opr_tensor_view *self = tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    coll c;
    int root, rc = coll_begin(call, 2, self, &c);
    if (rc || (rc = root_of(call, &c, &root))) return rc;
    void *buf = staging(call, self->dtype, self->numel);
    if (!buf) return OPR_ERR_NOMEM;
    if (c.rank == root) pack(buf, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ibcast(buf, (int)self->numel, c.type, root, c.comm, &req);
    mpid_unlock();
    if ((rc = coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    return deliver(out, buf);
}

/* reduce_to(self, root, group): the sum on root, zeros elsewhere. */
static int k_reduce(const opr_kernel_call *call)
{
    const opr_tensor_view *self = tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    coll c;
    int root, rc = coll_begin(call, 2, self, &c);
    if (rc || (rc = root_of(call, &c, &root))) return rc;
    void *packed = staging(call, self->dtype, self->numel), *buf = packed ? staging(call, out->dtype, out->numel) : NULL;
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    pack(packed, self);
    memset(buf, 0, (size_t)out->numel * opu_dtype_size(out->dtype));
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ireduce(packed, buf, (int)self->numel, c.type, MPI_SUM, root, c.comm, &req);
    mpid_unlock();
    if ((rc = coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    return deliver(out, buf);
}

int mpid_register_kernels(const opr_host_api *host, opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } kernels[] = {
        {"all_reduce", k_all_reduce}, {"all_gather", k_all_gather}, {"reduce_scatter", k_reduce_scatter},
        {"broadcast_from", k_broadcast}, {"reduce_to", k_reduce},
    };
    int rc = OPR_OK;
    for (size_t i = 0; !rc && i < sizeof kernels / sizeof kernels[0]; i++) {
        opr_kernel_desc k = {.struct_size = sizeof k, .op = kernels[i].op, .device = "cpu",
                             .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64), .fn = kernels[i].fn};
        rc = host->register_kernel(self, &k);
    }
    return rc;
}
