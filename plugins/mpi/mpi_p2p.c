/* send and recv (registry/ops/dist.yaml) on CPU tensors: point to point between two
 * members of a group, matched by (source, tag) on the group's communicator, which the
 * collectives do not disturb (MPI keeps point-to-point and collective traffic apart).
 *
 * Each message starts with a header of OPC_COLL_SIG bytes saying what the sender sent
 * ("f64 [6, 2]"), so that a recv whose self has another dtype or shape fails with both
 * (MPI alone would truncate, or fill part of the buffer). recv probes for the message
 * with the time-out, then receives it whole (MPI_Mrecv of the matched message), so a
 * recv that times out leaves nothing in flight; a send that times out (its peer never
 * received) parks its buffer with the request (mpi_requests.c). Either breaks the
 * group, as a collective's time-out does: the peer is dead or out of step. */
#include "mpi_coll.h"

#include "../common/opc_collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A point-to-point call: the group's communicator, this rank and the peer's in the
 * group's numbering, the tag. */
typedef struct p2p {
    mpid_coll c;
    int peer, tag;
    char name[64]; /* "send to rank 1 with tag 2": what a broken group's message names */
} p2p;

/* "f64 [6, 2]" of t into sig (OPC_COLL_SIG bytes, NUL-padded). */
static void describe(const opr_tensor_view *t, char *sig)
{
    memset(sig, 0, OPC_COLL_SIG);
    int n = snprintf(sig, OPC_COLL_SIG, "%s [", opu_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && n < OPC_COLL_SIG; d++)
        n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < OPC_COLL_SIG) snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "]");
}

/* The group (argument 3), the peer (argument 1, a world rank: PyTorch's dst / src) and
 * the tag (argument 2, 0 to 32767 by the schema's check). */
static int p2p_begin(const opr_kernel_call *call, const char *peer_arg, p2p *p)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    mpid_coll *c = &p->c;
    char why[512];
    c->name = call->op;
    c->group = call->args[3]->u.i;
    c->seq = 0;
    /* not a collective: the group's count of collectives stays as the others see it */
    int rc = mpid_group(c->group, false, &c->comm, &c->seq, why, sizeof why);
    if (rc) return mpid_fail(call, rc, why);
    MPI_Comm_size(c->comm, &c->size);
    MPI_Comm_rank(c->comm, &c->rank);
    c->type = mpid_type(self->dtype);
    if (c->type == MPI_DATATYPE_NULL) return mpid_fail(call, OPR_ERR_UNSUPPORTED, "f32, f64, i64, i32 and bool only");
    if (self->numel > 0x7fffffff / 8) return mpid_fail(call, OPR_ERR_UNSUPPORTED, "more than 2^28 - 1 elements");
    p->tag = (int)call->args[2]->u.i;
    snprintf(c->what, sizeof c->what, "%s with tag %d on group %lld (rank %d of %d)", c->name, p->tag,
             (long long)c->group, c->rank, c->size);
    if ((rc = mpid_world_to_group(call, c, call->args[1]->u.i, peer_arg, &p->peer))) return rc;
    snprintf(p->name, sizeof p->name, "%s %s rank %d with tag %d", c->name, peer_arg[0] == 'd' ? "to" : "from",
             p->peer, p->tag);
    c->name = p->name;
    if (p->peer == c->rank) {
        snprintf(why, sizeof why, "%s: %s %lld is this rank (PyTorch refuses it too: it would wait for itself)",
                 c->what, peer_arg, (long long)call->args[1]->u.i);
        return mpid_fail(call, OPR_ERR_INVALID, why);
    }
    return OPR_OK;
}

/* send(self, dst, tag, group): zeros of self's shape once dst has the message. */
int mpid_k_send(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    p2p p;
    int rc = p2p_begin(call, "dst", &p);
    if (rc) return rc;
    const size_t bytes = (size_t)self->numel * opu_dtype_size(self->dtype);
    char *msg = malloc(OPC_COLL_SIG + bytes + 1);
    if (!msg) return mpid_fail(call, OPR_ERR_NOMEM, "out of memory");
    describe(self, msg);
    mpid_pack(msg + OPC_COLL_SIG, self);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Isend(msg, (int)(OPC_COLL_SIG + bytes), MPI_BYTE, p.peer, p.tag, p.c.comm, &req);
    mpid_unlock();
    if ((rc = mpid_coll_finish(call, &p.c, mrc, &req, msg, NULL))) return rc;
    free(msg);
    memset(out->data, 0, (size_t)out->numel * opu_dtype_size(out->dtype));
    return OPR_OK;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* recv(self, src, tag, group): src's message, which must have self's dtype and shape. */
int mpid_k_recv(const opr_kernel_call *call)
{
    const opr_tensor_view *self = mpid_tensor_arg(call, 0);
    opr_tensor_view *out = call->outputs[0];
    p2p p;
    int rc = p2p_begin(call, "src", &p);
    if (rc) return rc;
    char why[640];
    const double limit = mpid_timeout(), deadline = now_s() + limit;
    long pause_ns = 1000;
    MPI_Message m;
    MPI_Status st;
    for (;;) {
        int found = 0;
        mpid_lock();
        int mrc = MPI_Improbe(p.peer, p.tag, p.c.comm, &found, &m, &st);
        mpid_unlock();
        if (mrc != MPI_SUCCESS) {
            mpid_break(p.c.group, "%s failed after collective %llu", p.name, (unsigned long long)p.c.seq);
            return mpid_fail(call, mpid_error(mrc, p.c.what, why, sizeof why), why);
        }
        if (found) break;
        if (now_s() > deadline) {
            mpid_break(p.c.group, "%s timed out after collective %llu, after %g s", p.name, (unsigned long long)p.c.seq,
                       limit);
            snprintf(why, sizeof why, "%s: timed out after %g s waiting for rank %d's send (it may have died, or not "
                     "sent with this tag; opr_dist_set_timeout sets the limit); group %lld is broken from now on",
                     p.c.what, limit, p.peer, (long long)p.c.group);
            return mpid_fail(call, OPR_ERR_BACKEND, why);
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 200000) pause_ns *= 2; /* 1 us up to 0.2 ms between polls */
    }
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    char *msg = malloc((size_t)count + 1);
    if (!msg) { /* the matched message must still be taken off MPI's hands */
        char none;
        mpid_lock();
        MPI_Mrecv(&none, 0, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        mpid_unlock();
        return mpid_fail(call, OPR_ERR_NOMEM, "out of memory");
    }
    /* the message has arrived: receiving it completes without waiting on the peer */
    mpid_lock();
    int mrc = MPI_Mrecv(msg, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) {
        free(msg);
        return mpid_fail(call, mpid_error(mrc, p.c.what, why, sizeof why), why);
    }
    char want[OPC_COLL_SIG];
    describe(self, want);
    const size_t bytes = (size_t)self->numel * opu_dtype_size(self->dtype);
    if (count < OPC_COLL_SIG || memcmp(msg, want, OPC_COLL_SIG) || (size_t)count != OPC_COLL_SIG + bytes) {
        snprintf(why, sizeof why, "%s: rank %d sent %.*s, this recv expects %.*s", p.c.what, p.peer, OPC_COLL_SIG,
                 count >= OPC_COLL_SIG ? msg : "a message of another kind", OPC_COLL_SIG, want);
        free(msg);
        return mpid_fail(call, OPR_ERR_INVALID, why);
    }
    memcpy(out->data, msg + OPC_COLL_SIG, bytes);
    free(msg);
    return OPR_OK;
}
