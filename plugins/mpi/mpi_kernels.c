/* The collectives of registry/ops/dist.yaml on CPU tensors (f32, f64, i64, i32, bool), over
 * MPI's non-blocking collectives waited on with the time-out (mpi_requests.c). Inputs
 * may be strided: they are packed into contiguous buffers first (outputs are
 * contiguous). MPI reads and writes only buffers of the kernel's own, copied into the
 * output once the collective is done: the host frees the output of a call that fails,
 * and a collective that timed out may still be completed by a late peer. This file has
 * the reductions, broadcast and the shared helpers (mpi_coll.h); mpi_rooted.c gather,
 * scatter and all-to-all; mpi_p2p.c send and recv. */
#include "mpi_coll.h"

#include "../common/opc_collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const opr_tensor_view *mpid_tensor_arg(const opr_kernel_call *call, int i)
{
    return call->args[i]->kind == OPR_ARG_TENSOR ? call->args[i]->u.t : NULL;
}

/* Copies the elements of src, in row-major order, to the contiguous dst. */
void mpid_pack(void *dst, const opr_tensor_view *src)
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

int mpid_fail(const opr_kernel_call *call, int rc, const char *why)
{
    call->host->set_error(call, "%s", why);
    return rc;
}

int mpid_coll_finish(const opr_kernel_call *call, mpid_coll *c, int mrc, MPI_Request *req, void *own0, void *own1)
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
    return rc ? mpid_fail(call, rc, why) : OPR_OK;
}

/* Every member gathers what the others are about to run and fails where one differs
 * (plugins/common/opc_collective.h): one small collective per call. */
static int same_collective(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self, bool any_rows,
                           mpid_coll *c)
{
    char *all = calloc((size_t)c->size + 1, OPC_COLL_SIG); /* every member's, then this one's */
    if (!all) return mpid_fail(call, OPR_ERR_NOMEM, "out of memory");
    char *mine = all + (size_t)c->size * OPC_COLL_SIG;
    opc_coll_describe_rows(call, group_arg, self, any_rows, mine);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(mine, OPC_COLL_SIG, MPI_CHAR, all, OPC_COLL_SIG, MPI_CHAR, c->comm, &req);
    mpid_unlock();
    int rc = mpid_coll_finish(call, c, mrc, &req, all, NULL);
    if (rc) return rc; /* all: freed or parked */
    char why[640];
    if (opc_coll_mismatch(all, c->size, mine, c->what, why, sizeof why) >= 0) rc = mpid_fail(call, OPR_ERR_INVALID, why);
    free(all);
    return rc;
}

int mpid_coll_begin(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self, bool any_rows,
                    mpid_coll *c)
{
    char why[512];
    c->name = call->op;
    c->group = call->args[group_arg]->u.i;
    int rc = mpid_group(c->group, true, &c->comm, &c->seq, why, sizeof why);
    if (rc) return mpid_fail(call, rc, why);
    MPI_Comm_size(c->comm, &c->size);
    MPI_Comm_rank(c->comm, &c->rank);
    c->type = mpid_type(self->dtype);
    if (c->type == MPI_DATATYPE_NULL) return mpid_fail(call, OPR_ERR_UNSUPPORTED, "f32, f64, i64, i32 and bool only");
    if (self->numel > 0x7fffffff) return mpid_fail(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    snprintf(c->what, sizeof c->what, "%s on group %lld (rank %d of %d)", c->name, (long long)c->group, c->rank,
             c->size);
    return same_collective(call, group_arg, self, any_rows, c);
}

void *mpid_staging(const opr_kernel_call *call, opr_dtype dt, int64_t n)
{
    void *b = malloc((size_t)n * opu_dtype_size(dt) + 1);
    if (!b) mpid_fail(call, OPR_ERR_NOMEM, "out of memory");
    return b;
}

int mpid_deliver(opr_tensor_view *out, void *buf)
{
    memcpy(out->data, buf, (size_t)out->numel * opu_dtype_size(out->dtype));
    free(buf);
    return OPR_OK;
}

MPI_Op mpid_reduce_op(const char *op, opr_dtype dt)
{
    if (dt == OPR_BOOL) /* 0 or 1 in a byte: MPI's logical reductions keep it so */
        return !strcmp(op, "bxor") ? MPI_LXOR
               : (!strcmp(op, "prod") || !strcmp(op, "band") || !strcmp(op, "min")) ? MPI_LAND : MPI_LOR;
    return !strcmp(op, "max") ? MPI_MAX : !strcmp(op, "min") ? MPI_MIN : !strcmp(op, "prod") ? MPI_PROD
           : !strcmp(op, "band") ? MPI_BAND : !strcmp(op, "bor") ? MPI_BOR : !strcmp(op, "bxor") ? MPI_BXOR : MPI_SUM;
}

int mpid_world_to_group(const opr_kernel_call *call, const mpid_coll *c, int64_t world_rank, const char *arg,
                        int *rank)
{
    char why[192];
    int wsize = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    int r = MPI_UNDEFINED;
    if (world_rank >= 0 && world_rank < wsize) {
        MPI_Group world, mine;
        const int w = (int)world_rank;
        mpid_lock();
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        MPI_Comm_group(c->comm, &mine);
        MPI_Group_translate_ranks(world, 1, &w, mine, &r);
        MPI_Group_free(&mine);
        MPI_Group_free(&world);
        mpid_unlock();
    }
    if (r == MPI_UNDEFINED || r < 0) {
        snprintf(why, sizeof why, "%s: %s %lld is not a member of group %lld (a rank of the world, of %d, as in "
                 "PyTorch)", c->what, arg, (long long)world_rank, (long long)c->group, wsize);
        return mpid_fail(call, OPR_ERR_INVALID, why);
    }
    *rank = r;
    return OPR_OK;
}

/* all_reduce(self, op, group): in place in a staging buffer. */
static int k_all_reduce(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    const char *op = call->args[1]->u.s;
    mpid_coll c;
    int rc = mpid_coll_begin(call, 2, self, false, &c);
    void *buf = rc ? NULL : mpid_staging(call, self->dtype, self->numel);
    if (!buf) return rc ? rc : OPR_ERR_NOMEM;
    mpid_pack(buf, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)self->numel, c.type, mpid_reduce_op(op, self->dtype), c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    if (!strcmp(op, "mean")) scale(buf, out->dtype, out->numel, c.size);
    return mpid_deliver(out, buf);
}

/* all_gather(self, group): [size * n, ...], this rank's rows packed in place. */
static int k_all_gather(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    mpid_coll c;
    int rc = mpid_coll_begin(call, 1, self, false, &c);
    if (rc) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    opc_coll_dim0_shape(self, c.size, 1, shape, why, sizeof why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    void *buf = mpid_staging(call, self->dtype, out->numel);
    if (!buf) return OPR_ERR_NOMEM;
    const size_t es = opu_dtype_size(self->dtype);
    mpid_pack((char *)buf + (size_t)c.rank * (size_t)self->numel * es, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)self->numel, c.type, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    return mpid_deliver(out, buf);
}

/* reduce_scatter(self, op, group): rows [rank * n, (rank + 1) * n) of the sum. */
static int k_reduce_scatter(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    const char *op = call->args[1]->u.s;
    mpid_coll c;
    int rc = mpid_coll_begin(call, 2, self, false, &c);
    if (rc) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    if (opc_coll_dim0_shape(self, c.size, 0, shape, why, sizeof why)) return mpid_fail(call, OPR_ERR_INVALID, why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    void *packed = mpid_staging(call, self->dtype, self->numel), *buf = packed ? mpid_staging(call, out->dtype, out->numel) : NULL;
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    mpid_pack(packed, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ireduce_scatter_block(packed, buf, (int)out->numel, c.type, MPI_SUM, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    if (!strcmp(op, "mean")) scale(buf, out->dtype, out->numel, c.size);
    return mpid_deliver(out, buf);
}

static int root_of(const opr_kernel_call *call, const mpid_coll *c, int *root)
{
    char why[128];
    return opc_coll_root(call, c->size, root, why, sizeof why) ? mpid_fail(call, OPR_ERR_INVALID, why) : OPR_OK;
}

/* broadcast_from(self, root, group): root's self everywhere. */
static int k_broadcast(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    mpid_coll c;
    int root, rc = mpid_coll_begin(call, 2, self, false, &c);
    if (rc || (rc = root_of(call, &c, &root))) return rc;
    void *buf = mpid_staging(call, self->dtype, self->numel);
    if (!buf) return OPR_ERR_NOMEM;
    if (c.rank == root) mpid_pack(buf, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ibcast(buf, (int)self->numel, c.type, root, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, buf, NULL))) return rc;
    return mpid_deliver(out, buf);
}

/* reduce_to(self, root, op, group): the reduction on root, zeros elsewhere. */
static int k_reduce(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    const char *op = call->args[2]->u.s;
    mpid_coll c;
    int root, rc = mpid_coll_begin(call, 3, self, false, &c);
    if (rc || (rc = root_of(call, &c, &root))) return rc;
    void *packed = mpid_staging(call, self->dtype, self->numel), *buf = packed ? mpid_staging(call, out->dtype, out->numel) : NULL;
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    mpid_pack(packed, self);
    memset(buf, 0, (size_t)out->numel * opu_dtype_size(out->dtype));
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ireduce(packed, buf, (int)self->numel, c.type, mpid_reduce_op(op, self->dtype), root, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    return mpid_deliver(out, buf);
}

int mpid_register_kernels(const opr_host_api *host, opr_plugin *self)
{
    static const struct { const char *op; opr_kernel_fn fn; } kernels[] = {
        {"all_reduce", k_all_reduce}, {"all_gather", k_all_gather}, {"reduce_scatter", k_reduce_scatter},
        {"broadcast_from", k_broadcast}, {"reduce_to", k_reduce}, {"gather_to", mpid_k_gather_to},
        {"scatter_from", mpid_k_scatter_from}, {"all_to_all_single", mpid_k_all_to_all_single},
        {"send", mpid_k_send}, {"recv", mpid_k_recv},
    };
    int rc = OPR_OK;
    for (size_t i = 0; !rc && i < sizeof kernels / sizeof kernels[0]; i++) {
        opr_kernel_desc k = {.struct_size = sizeof k, .op = kernels[i].op, .device = "cpu",
                             .dtypes = OPR_DTYPE_BIT(OPR_F32) | OPR_DTYPE_BIT(OPR_F64) | OPR_DTYPE_BIT(OPR_I64) |
                                       OPR_DTYPE_BIT(OPR_I32) | OPR_DTYPE_BIT(OPR_BOOL),
                             .fn = kernels[i].fn};
        rc = host->register_kernel(self, &k);
    }
    return rc;
}
