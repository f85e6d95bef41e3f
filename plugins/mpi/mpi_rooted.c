/* gather_to, scatter_from and all_to_all_single (registry/ops/dist.yaml) on CPU
 * tensors over MPI's non-blocking Igather, Iscatter and Ialltoallv, with the buffers
 * and the time-out of the other collectives (mpi_coll.h). dst and src are ranks of the
 * world, as in PyTorch: each member translates them to the group's numbering, the same
 * way on every member (the same-collective check has compared them), so that a rank
 * that is no member fails every member alike. */
#include "mpi_coll.h"

#include "../common/opc_collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* gather_to(self, dst, group): [size * n, ...] on dst, zeros elsewhere. */
int mpid_k_gather_to(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    mpid_coll c;
    int root, rc = mpid_coll_begin(call, 2, self, false, &c);
    if (rc || (rc = mpid_world_to_group(call, &c, call->args[1]->u.i, "dst", &root))) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    opc_coll_dim0_shape(self, c.size, 1, shape, why, sizeof why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    if (out->numel > 0x7fffffff) return mpid_fail(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    void *packed = mpid_staging(call, self->dtype, self->numel), *buf = packed ? mpid_staging(call, out->dtype, out->numel) : NULL;
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    mpid_pack(packed, self);
    memset(buf, 0, (size_t)out->numel * opu_dtype_size(out->dtype)); /* what the others return */
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Igather(packed, (int)self->numel, c.type, buf, (int)self->numel, c.type, root, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    return mpid_deliver(out, buf);
}

/* scatter_from(self, src, group): part `rank` of src's self, [size(self, 0) / size, ...]. */
int mpid_k_scatter_from(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    mpid_coll c;
    int root, rc = mpid_coll_begin(call, 2, self, false, &c);
    if (rc || (rc = mpid_world_to_group(call, &c, call->args[1]->u.i, "src", &root))) return rc;
    int64_t shape[OPR_MAX_DIMS];
    char why[160];
    if (opc_coll_dim0_shape(self, c.size, 0, shape, why, sizeof why)) return mpid_fail(call, OPR_ERR_INVALID, why);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    /* only the root's self is read: the others send nothing */
    void *packed = NULL;
    if (c.rank == root && !(packed = mpid_staging(call, self->dtype, self->numel))) return OPR_ERR_NOMEM;
    void *buf = mpid_staging(call, out->dtype, out->numel);
    if (!buf) { free(packed); return OPR_ERR_NOMEM; }
    if (packed) mpid_pack(packed, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iscatter(packed, (int)out->numel, c.type, buf, (int)out->numel, c.type, root, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, packed, buf))) return rc;
    free(packed);
    return mpid_deliver(out, buf);
}

/* Every member's input and output splits (and whether its own were valid) gathered:
 * all members then agree on the layout, or all fail naming the first member at fault. */
static int agree_splits(const opr_kernel_call *call, mpid_coll *c, const int64_t *in, const int64_t *out,
                        const char *own_error)
{
    const int n = OPC_COLL_SPLIT_RECORD(c->size);
    int64_t *all = mpid_staging(call, OPR_I64, (int64_t)n * (c->size + 1));
    if (!all) return OPR_ERR_NOMEM;
    int64_t *mine = all + (size_t)n * (size_t)c->size;
    opc_coll_split_record(in, out, c->size, own_error, mine);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, c->comm, &req);
    mpid_unlock();
    int rc = mpid_coll_finish(call, c, mrc, &req, all, NULL);
    if (rc) return rc;
    char why[512];
    rc = opc_coll_splits_agree(all, c->size, own_error, c->what, why, sizeof why) ? mpid_fail(call, OPR_ERR_INVALID, why)
                                                                                  : OPR_OK;
    free(all);
    return rc;
}

/* all_to_all_single(self, output_split_sizes, input_split_sizes, group) */
int mpid_k_all_to_all_single(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    mpid_coll c;
    int rc = mpid_coll_begin(call, 3, self, true, &c);
    if (rc) return rc;
    int64_t *in = calloc(2 * (size_t)c.size, sizeof *in), *out_rows = in ? in + c.size : NULL;
    if (!in) return mpid_fail(call, OPR_ERR_NOMEM, "out of memory");
    char own[256] = "";
    if (!opc_coll_split_rows(call->args[2], "input_split_sizes", 1, self->shape[0], c.size, in, own, sizeof own))
        opc_coll_split_rows(call->args[1], "output_split_sizes", 0, self->shape[0], c.size, out_rows, own, sizeof own);
    if ((rc = agree_splits(call, &c, in, out_rows, own))) { free(in); return rc; }
    const int64_t row = self->shape[0] ? self->numel / self->shape[0] : 0;
    int64_t shape[OPR_MAX_DIMS], total = 0;
    for (int r = 0; r < c.size; r++) total += out_rows[r];
    memcpy(shape, self->shape, sizeof(int64_t) * (size_t)self->ndim);
    shape[0] = total;
    if (total * row > 0x7fffffff) { free(in); return mpid_fail(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements"); }
    /* MPI reads the counts until the request completes: one block with the packed input,
     * so that a request that fails parks both */
    const size_t counts_bytes = (4 * sizeof(int) * (size_t)c.size + 15) / 16 * 16;
    char *block = malloc(counts_bytes + (size_t)self->numel * opu_dtype_size(self->dtype) + 1);
    if (!block) { free(in); return mpid_fail(call, OPR_ERR_NOMEM, "out of memory"); }
    int *counts = (int *)(void *)block, *sdisp = counts + c.size, *rcounts = sdisp + c.size, *rdisp = rcounts + c.size;
    void *packed = block + counts_bytes;
    int64_t so = 0, ro = 0;
    for (int r = 0; r < c.size; r++) {
        counts[r] = (int)(in[r] * row);
        sdisp[r] = (int)so;
        rcounts[r] = (int)(out_rows[r] * row);
        rdisp[r] = (int)ro;
        so += in[r] * row;
        ro += out_rows[r] * row;
    }
    free(in);
    if ((rc = call->host->alloc_output(call, 0, self->ndim, shape))) { free(block); return rc; }
    opr_tensor_view *out = call->outputs[0];
    void *buf = mpid_staging(call, out->dtype, out->numel);
    if (!buf) { free(block); return OPR_ERR_NOMEM; }
    mpid_pack(packed, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Ialltoallv(packed, counts, sdisp, c.type, buf, rcounts, rdisp, c.type, c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &c, mrc, &req, block, buf))) return rc;
    free(block);
    return mpid_deliver(out, buf);
}
