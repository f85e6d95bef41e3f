/* gather_to, scatter_from, all_to_all_single, send and recv (registry/ops/dist.yaml)
 * on CUDA tensors, on NCCL's point to point (ncclSend / ncclRecv between
 * ncclGroupStart and ncclGroupEnd, as PyTorch's NCCL backend does them), on the
 * communicators and with the checks and time-out of gpu_nccl.cu. dst and src are world
 * ranks, translated with the members' world ranks learnt when the group's communicator
 * was made.
 *
 * send and recv are not collective, so they cannot make a communicator: they use the
 * one the group's first collective made, and before there is one they return
 * OPR_ERR_UNSUPPORTED, so that dispatch runs them on MPI (host copies) where the CPU
 * fallback is on. NCCL has no tags and delivers a pair's messages in order: each
 * message is a header (what was sent, the tag) and then the data, and a recv whose
 * tag, dtype or shape is not the next message's fails naming both (having taken the
 * data off the line, so that the next message still lines up). */
#include "gpu_common.cuh"

#if !defined(GPU_BACKEND_HIP) && defined(GPU_HAVE_NCCL)

#include "gpu_nccl.cuh"

#include "../common/opc_collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace gk_nccl {

namespace {

/* world_rank (argument `arg`) as a rank of c's group into *rank; fails the call. */
int group_rank_of(coll *c, int64_t world_rank, const char *arg, int *rank)
{
    *rank = member_rank(c->group, world_rank);
    if (*rank >= 0) return OPR_OK;
    return GK_FAIL(c->k.call, OPR_ERR_INVALID, "%s: %s %lld is not a member of group %lld (a rank of the world, as in "
                   "PyTorch)", c->what, arg, (long long)world_rank, (long long)c->group);
}

size_t elem(const coll *c) { return gk_dtype_size(c->self->dtype); }

/* Copies n bytes on the device, on the call's stream. */
int copy_on_device(coll *c, void *dst, const void *src, size_t n)
{
    if (!n) return OPR_OK;
    GK_TRY(&c->k, gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToDevice, c->k.stream));
    return OPR_OK;
}

} // namespace

/* gather_to(self, dst, group): [size * n, ...] on dst, zeros on the others */
int k_gather_to(const opr_kernel_call *call)
{
    coll c;
    int root, rc = coll_begin(call, 2, 0, &c);
    if (rc || (rc = group_rank_of(&c, gk_arg_i(call, 1), "dst", &root))) return rc;
    int64_t shape[GK_MAXD];
    char why[160];
    opc_coll_dim0_shape(c.self, c.size, 1, shape, why, sizeof why);
    if ((rc = gk_host->alloc_output(call, 0, c.self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    const size_t n = (size_t)c.self->numel, bytes = n * elem(&c);
    char *recv = (char *)out->data;
    if (c.rank != root) GK_TRY(&c.k, gpuMemsetAsync(out->data, 0, (size_t)out->numel * elem(&c), c.k.stream));
    else if ((rc = copy_on_device(&c, recv + (size_t)root * bytes, c.send, bytes))) return rc;
    ncclResult_t r = enqueue([&] {
        ncclResult_t e = nccl.group_start();
        for (int p = 0; p < c.size && e == ncclSuccess; p++)
            if (c.rank == root && p != root) e = nccl.recv(recv + (size_t)p * bytes, n, c.type, p, c.comm, c.k.stream);
        if (c.rank != root && e == ncclSuccess) e = nccl.send(c.send, n, c.type, root, c.comm, c.k.stream);
        ncclResult_t end = nccl.group_end();
        return e != ncclSuccess ? e : end;
    });
    return coll_wait(&c, "ncclSend / ncclRecv (gather)", r);
}

/* scatter_from(self, src, group): part `rank` of src's self */
int k_scatter_from(const opr_kernel_call *call)
{
    coll c;
    int root, rc = coll_begin(call, 2, 0, &c);
    if (rc || (rc = group_rank_of(&c, gk_arg_i(call, 1), "src", &root))) return rc;
    int64_t shape[GK_MAXD];
    char why[160];
    if (opc_coll_dim0_shape(c.self, c.size, 0, shape, why, sizeof why))
        return GK_FAIL(call, OPR_ERR_INVALID, "%s: %s", c.what, why);
    if ((rc = gk_host->alloc_output(call, 0, c.self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    const size_t n = (size_t)out->numel, bytes = n * elem(&c);
    const char *send = (const char *)c.send;
    if (c.rank == root && (rc = copy_on_device(&c, out->data, send + (size_t)root * bytes, bytes))) return rc;
    ncclResult_t r = enqueue([&] {
        ncclResult_t e = nccl.group_start();
        for (int p = 0; p < c.size && e == ncclSuccess; p++)
            if (c.rank == root && p != root) e = nccl.send(send + (size_t)p * bytes, n, c.type, p, c.comm, c.k.stream);
        if (c.rank != root && e == ncclSuccess) e = nccl.recv(out->data, n, c.type, root, c.comm, c.k.stream);
        ncclResult_t end = nccl.group_end();
        return e != ncclSuccess ? e : end;
    });
    return coll_wait(&c, "ncclSend / ncclRecv (scatter)", r);
}

/* all_to_all_single(self, output_split_sizes, input_split_sizes, group) */
int k_all_to_all_single(const opr_kernel_call *call)
{
    coll c;
    int rc = coll_begin(call, 3, COLL_ANY_ROWS, &c);
    if (rc) return rc;
    const int rec = OPC_COLL_SPLIT_RECORD(c.size);
    int64_t *in = (int64_t *)calloc((size_t)rec * ((size_t)c.size + 2), sizeof(int64_t));
    if (!in) return GK_FAIL(call, OPR_ERR_NOMEM, "%s: out of memory", c.what);
    int64_t *out_rows = in + c.size, *mine = out_rows + c.size, *all = mine + rec;
    char own[256] = "", why[640];
    const int64_t dim0 = c.self->shape[0];
    if (!opc_coll_split_rows(call->args[2], "input_split_sizes", 1, dim0, c.size, in, own, sizeof own))
        opc_coll_split_rows(call->args[1], "output_split_sizes", 0, dim0, c.size, out_rows, own, sizeof own);
    opc_coll_split_record(in, out_rows, c.size, own, mine);
    rc = gk_host->group_all_gather(call, c.group, mine, all, sizeof(int64_t) * (size_t)rec, why, sizeof why);
    if (rc) rc = GK_FAIL(call, rc, "%s: %s", c.what, why);
    else if (opc_coll_splits_agree(all, c.size, own, c.what, why, sizeof why)) rc = GK_FAIL(call, OPR_ERR_INVALID, "%s", why);
    int64_t shape[GK_MAXD], total = 0;
    for (int p = 0; p < c.size; p++) total += out_rows[p];
    const size_t row = dim0 ? (size_t)(c.self->numel / dim0) : 0, es = elem(&c);
    if (!rc && (int64_t)row * total > 0x7fffffff) rc = GK_FAIL(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    memcpy(shape, c.self->shape, sizeof(int64_t) * (size_t)c.self->ndim);
    shape[0] = total;
    if (!rc) rc = gk_host->alloc_output(call, 0, c.self->ndim, shape);
    if (rc) { free(in); return rc; }
    char *recv = (char *)call->outputs[0]->data;
    const char *send = (const char *)c.send;
    size_t so = 0, ro = 0;
    for (int p = 0; p < c.rank; p++) { so += (size_t)in[p]; ro += (size_t)out_rows[p]; }
    rc = copy_on_device(&c, recv + ro * row * es, send + so * row * es, (size_t)in[c.rank] * row * es);
    ncclResult_t r = ncclSuccess;
    if (!rc)
        r = enqueue([&] {
            ncclResult_t e = nccl.group_start();
            size_t s_off = 0, r_off = 0;
            for (int p = 0; p < c.size && e == ncclSuccess; p++) {
                const size_t ns = (size_t)in[p] * row, nr = (size_t)out_rows[p] * row;
                if (p != c.rank && ns) e = nccl.send(send + s_off * es, ns, c.type, p, c.comm, c.k.stream);
                if (p != c.rank && nr && e == ncclSuccess) e = nccl.recv(recv + r_off * es, nr, c.type, p, c.comm, c.k.stream);
                s_off += ns;
                r_off += nr;
            }
            ncclResult_t end = nccl.group_end();
            return e != ncclSuccess ? e : end;
        });
    free(in);
    return rc ? rc : coll_wait(&c, "ncclSend / ncclRecv (all-to-all)", r);
}

namespace {

/* What goes ahead of a message: what was sent (NUL-padded), its tag and bytes. */
struct header {
    char sig[48];
    int64_t tag;
    int64_t bytes;
};

/* A point-to-point call's start: NCCL loaded, the group's existing communicator, the
 * peer (argument 1, a world rank) in the group's numbering. */
int p2p_begin(const opr_kernel_call *call, const char *peer_arg, coll *c, int *peer)
{
    c->self = gk_arg_t(call, 0);
    c->group = gk_arg_i(call, 3);
    c->comm = nullptr;
    snprintf(c->what, sizeof c->what, "%s with tag %lld on group %lld", call->op, (long long)gk_arg_i(call, 2),
             (long long)c->group);
    int rc = gk_begin(call, call->op, &c->k);
    if (rc) return rc;
    const char *err = nccl_load_error();
    if (err[0]) return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "%s", err);
    if (c->self->numel > 0x7fffffff) return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    c->type = nccl_type(c->self->dtype);
    char why[512];
    if ((rc = gk_host->group_info(call, c->group, &c->rank, &c->size, &c->timeout_s, why, sizeof why)))
        return GK_FAIL(call, rc, "%s: %s", c->what, why);
    c->comm = existing_comm(c->group, c->k.ordinal, why, sizeof why);
    if (why[0])
        return GK_FAIL(call, OPR_ERR_BACKEND, "%s: group %lld is broken: %s; it cannot be used again (exit, and let "
                       "the launcher restart the job)", c->what, (long long)c->group, why);
    if (!c->comm) /* only a collective can make one: every member must take part */
        return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "%s: the group has no NCCL communicator on %s device %d yet (its "
                       "first collective makes it); on the CPU (MPI) instead where the fallback is on", c->what,
                       GPU_NAME, c->k.ordinal);
    snprintf(c->what, sizeof c->what, "%s with tag %lld on group %lld (rank %d of %d, %s device %d)", call->op,
             (long long)gk_arg_i(call, 2), (long long)c->group, c->rank, c->size, GPU_NAME, c->k.ordinal);
    const int64_t w = gk_arg_i(call, 1);
    if ((rc = group_rank_of(c, w, peer_arg, peer))) return rc;
    if (*peer == c->rank)
        return GK_FAIL(call, OPR_ERR_INVALID, "%s: %s %lld is this rank (PyTorch refuses it too: it would wait for "
                       "itself)", c->what, peer_arg, (long long)w);
    return OPR_OK;
}

/* The header of self and tag, NUL-padded: "f64 [6, 2]". */
header describe(const opr_tensor_view *t, int64_t tag)
{
    header h;
    memset(&h, 0, sizeof h);
    int n = snprintf(h.sig, sizeof h.sig, "%s [", gk_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && n < (int)sizeof h.sig; d++)
        n += snprintf(h.sig + n, sizeof h.sig - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < (int)sizeof h.sig) snprintf(h.sig + n, sizeof h.sig - (size_t)n, "]");
    h.tag = tag;
    h.bytes = t->numel * (int64_t)gk_dtype_size(t->dtype);
    return h;
}

} // namespace

/* send(self, dst, tag, group): zeros of self's shape once the message is out */
int k_send(const opr_kernel_call *call)
{
    coll c;
    int peer, rc = p2p_begin(call, "dst", &c, &peer);
    if (rc) return rc;
    gk_buf packed, hbuf;
    const void *data;
    if ((rc = gk_dense(&c.k, c.self, &packed, &data))) return rc;
    header h = describe(c.self, gk_arg_i(call, 2));
    if ((rc = hbuf.alloc(&c.k, sizeof h))) return rc;
    GK_TRY(&c.k, gpuMemcpyAsync(hbuf.p, &h, sizeof h, gpuMemcpyHostToDevice, c.k.stream));
    ncclResult_t r = enqueue([&] {
        ncclResult_t e = nccl.group_start();
        if (e == ncclSuccess) e = nccl.send(hbuf.p, sizeof h, ncclUint8, peer, c.comm, c.k.stream);
        if (e == ncclSuccess && h.bytes)
            e = nccl.send(data, (size_t)c.self->numel, c.type, peer, c.comm, c.k.stream);
        ncclResult_t end = nccl.group_end();
        return e != ncclSuccess ? e : end;
    });
    if ((rc = coll_wait(&c, "ncclSend", r))) return rc;
    opr_tensor_view *out = call->outputs[0];
    GK_TRY(&c.k, gpuMemsetAsync(out->data, 0, (size_t)out->numel * gk_dtype_size(out->dtype), c.k.stream));
    return OPR_OK;
}

/* recv(self, src, tag, group): the next message from src, which must be self's dtype
 * and shape with this tag */
int k_recv(const opr_kernel_call *call)
{
    coll c;
    int peer, rc = p2p_begin(call, "src", &c, &peer);
    if (rc) return rc;
    gk_buf hbuf;
    header got, want = describe(c.self, gk_arg_i(call, 2));
    if ((rc = hbuf.alloc(&c.k, sizeof got))) return rc;
    ncclResult_t r = enqueue([&] { return nccl.recv(hbuf.p, sizeof got, ncclUint8, peer, c.comm, c.k.stream); });
    if ((rc = coll_wait(&c, "ncclRecv", r))) return rc;
    GK_TRY(&c.k, gpuMemcpyAsync(&got, hbuf.p, sizeof got, gpuMemcpyDeviceToHost, c.k.stream));
    GK_TRY(&c.k, gpuStreamSynchronize(c.k.stream));
    got.sig[sizeof got.sig - 1] = '\0';
    opr_tensor_view *out = call->outputs[0];
    const bool same = !memcmp(&got, &want, sizeof got);
    if (!same && got.bytes > 0) { /* the data still comes: taken off the line, dropped */
        gk_buf drop;
        if ((rc = drop.alloc(&c.k, (size_t)got.bytes))) return rc;
        r = enqueue([&] { return nccl.recv(drop.p, (size_t)got.bytes, ncclUint8, peer, c.comm, c.k.stream); });
        if ((rc = coll_wait(&c, "ncclRecv", r))) return rc;
    }
    if (!same)
        return GK_FAIL(call, OPR_ERR_INVALID, "%s: rank %d sent %s with tag %lld, this recv expects %s with tag %lld "
                       "(NCCL delivers a pair's messages in order)", c.what, peer, got.sig, (long long)got.tag,
                       want.sig, (long long)want.tag);
    if (!want.bytes) return OPR_OK;
    r = enqueue([&] { return nccl.recv(out->data, (size_t)out->numel, c.type, peer, c.comm, c.k.stream); });
    return coll_wait(&c, "ncclRecv", r);
}

} // namespace gk_nccl

#endif
