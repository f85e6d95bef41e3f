/* Process groups on MPI: the opr_group_provider of this plugin. MPI is initialised on
 * the first opr_dist_world (a process that never asks pays nothing but the library's
 * load). A group whose collective failed or timed out is broken: its communicator may
 * still have a collective in flight that a late peer completes, so it is never freed
 * nor used again, and every later call on it says what broke it. Splitting agrees
 * first, within the time-out, that every member is there and has room for the group,
 * so that MPI's blocking split starts only when it can finish on every member. */
#define _GNU_SOURCE /* dladdr */
#include "mpi_state.h"

#include "../common/opc_collective.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* the fields below; no MPI call under it */
static pthread_mutex_t finalize_lock = PTHREAD_MUTEX_INITIALIZER;
static bool inited, finalized, we_inited;
static int contexts;
static double timeout_s = 60;
static struct group {
    MPI_Comm comm;     /* MPI_COMM_NULL: a free slot */
    bool reserved;     /* taken by a split under way */
    int64_t id;        /* never reused, so that other plugins may key state on it (NCCL communicators) */
    uint64_t seq;      /* collectives started on it */
    char broken[256];  /* why it is unusable; "" while usable */
} groups[MPID_MAX_GROUPS]; /* slot 0: the world */
static int64_t next_id = 1;

/* OpenMPI loads its components with dlopen and resolves them against libmpi's symbols,
 * which a plugin's RTLD_LOCAL load hides: made global before MPI_Init. */
static void make_libmpi_global(void)
{
    Dl_info info;
    if (dladdr((void *)MPI_Init, &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

int mpid_ensure(char *why, size_t why_len)
{
    pthread_mutex_lock(&state_lock);
    int rc = OPR_OK;
    if (finalized) {
        snprintf(why, why_len, "MPI was finalized in this process (opr_dist_finalize): it cannot start again");
        rc = OPR_ERR_INVALID;
    } else if (!inited) {
        int already = 0, provided = MPI_THREAD_SINGLE;
        MPI_Initialized(&already);
        if (already) { /* the application's own MPI_Init: its to finalize */
            MPI_Query_thread(&provided);
        } else {
            make_libmpi_global();
            int mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
            if (mrc != MPI_SUCCESS) rc = mpid_error(mrc, "MPI_Init_thread", why, why_len);
            else we_inited = true;
        }
        if (!rc) {
            mpid_set_serialise(provided < MPI_THREAD_MULTIPLE);
            for (int i = 0; i < MPID_MAX_GROUPS; i++) groups[i] = (struct group){.comm = MPI_COMM_NULL}; /* not 0 in every MPI */
            groups[0].comm = MPI_COMM_WORLD;
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            inited = true;
        }
    }
    pthread_mutex_unlock(&state_lock);
    return rc;
}

/* The slot of live group id, or -1. Called with state_lock held. */
static int slot_of(int64_t id)
{
    for (int i = 0; i < MPID_MAX_GROUPS; i++)
        if (groups[i].comm != MPI_COMM_NULL && groups[i].id == id) return i;
    return -1;
}

int mpid_group(int64_t id, bool collective, MPI_Comm *comm, uint64_t *seq, char *why, size_t why_len)
{
    *comm = MPI_COMM_NULL;
    int rc = mpid_ensure(why, why_len);
    if (rc) return rc;
    if (collective) mpid_reap();
    pthread_mutex_lock(&state_lock);
    int slot = slot_of(id);
    if (slot < 0) {
        snprintf(why, why_len, "group %lld is not a live group of this process", (long long)id);
        rc = OPR_ERR_INVALID;
    } else if (groups[slot].broken[0]) {
        snprintf(why, why_len, "group %lld is broken: %s; it cannot be used again (exit, and let the launcher restart "
                 "the job)", (long long)id, groups[slot].broken);
        rc = OPR_ERR_BACKEND;
    } else {
        *comm = groups[slot].comm;
        if (collective && seq) *seq = ++groups[slot].seq;
        else if (collective) ++groups[slot].seq;
        else if (seq) *seq = groups[slot].seq; /* point to point: the last collective's */
    }
    pthread_mutex_unlock(&state_lock);
    return rc;
}

void mpid_break(int64_t id, const char *fmt, ...)
{
    pthread_mutex_lock(&state_lock);
    int slot = slot_of(id);
    if (slot >= 0 && !groups[slot].broken[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(groups[slot].broken, sizeof groups[slot].broken, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&state_lock);
}

double mpid_timeout(void)
{
    pthread_mutex_lock(&state_lock);
    double t = timeout_s;
    pthread_mutex_unlock(&state_lock);
    return t;
}

MPI_Datatype mpid_type(opr_dtype dt)
{
    return dt == OPR_F32    ? MPI_FLOAT
           : dt == OPR_F64  ? MPI_DOUBLE
           : dt == OPR_I64  ? MPI_INT64_T
           : dt == OPR_I32  ? MPI_INT32_T
           : dt == OPR_BOOL ? MPI_UINT8_T /* one byte, 0 or 1 */
                            : MPI_DATATYPE_NULL;
}

static int p_world(void *data, int32_t *rank, int32_t *size, char *why, size_t why_len)
{
    (void)data;
    int rc = mpid_ensure(why, why_len);
    if (rc) return rc;
    int r = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    *rank = r;
    *size = n;
    return OPR_OK;
}

/* A free slot reserved for a split, or -1 when MPID_MAX_GROUPS are live. */
static int reserve_slot(void)
{
    pthread_mutex_lock(&state_lock);
    int slot = 1;
    while (slot < MPID_MAX_GROUPS && (groups[slot].comm != MPI_COMM_NULL || groups[slot].reserved)) slot++;
    if (slot < MPID_MAX_GROUPS) groups[slot].reserved = true;
    else slot = -1;
    pthread_mutex_unlock(&state_lock);
    return slot;
}

static void release_slot(int slot)
{
    if (slot < 0) return;
    pthread_mutex_lock(&state_lock);
    groups[slot].reserved = false;
    pthread_mutex_unlock(&state_lock);
}

/* Every member of parent says, within the time-out, that it is splitting and whether it
 * has a free slot: the same record as the kernels' signatures (opc_collective.h), so
 * that a member running a collective instead is named, and the last byte the slot. */
static int agree_to_split(MPI_Comm parent, int64_t group, uint64_t seq, bool have_slot, char *why, size_t why_len)
{
    int size = 1, rank = 0;
    MPI_Comm_size(parent, &size);
    MPI_Comm_rank(parent, &rank);
    char *all = calloc((size_t)size + 1, OPC_COLL_SIG), *mine = all ? all + (size_t)size * OPC_COLL_SIG : NULL;
    if (!all) {
        snprintf(why, why_len, "split: out of memory");
        return OPR_ERR_NOMEM;
    }
    snprintf(mine, OPC_COLL_SIG, "split()");
    mine[OPC_COLL_SIG - 1] = have_slot;
    char what[96];
    snprintf(what, sizeof what, "split on group %lld (rank %d of %d)", (long long)group, rank, size);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(mine, OPC_COLL_SIG, MPI_CHAR, all, OPC_COLL_SIG, MPI_CHAR, parent, &req);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) {
        free(all);
        return mpid_error(mrc, what, why, why_len);
    }
    int rc = mpid_wait(&req, group, seq, "split", what, why, why_len);
    if (rc) {
        mpid_park(req, all, NULL);
        return rc;
    }
    for (int r = 0; r < size && !rc; r++) {
        const char *theirs = all + (size_t)r * OPC_COLL_SIG;
        if (memcmp(theirs, mine, OPC_COLL_SIG - 1)) {
            snprintf(why, why_len, "%s: the members called different collectives: this rank split(), rank %d %.*s",
                     what, r, OPC_COLL_SIG - 1, theirs);
            rc = OPR_ERR_INVALID;
        } else if (!theirs[OPC_COLL_SIG - 1]) {
            snprintf(why, why_len, "%s: rank %d has %d groups live already (free some with opr_dist_group_free); no "
                     "member made the group", what, r, MPID_MAX_GROUPS - 1);
            rc = OPR_ERR_NOMEM;
        }
    }
    free(all);
    return rc;
}

static int p_split(void *data, int64_t group, int32_t color, int32_t key, int64_t *out, int32_t *rank, int32_t *size,
                   char *why, size_t why_len)
{
    (void)data;
    *out = -1;
    *rank = -1;
    *size = 0;
    MPI_Comm parent;
    uint64_t seq = 0;
    int rc = mpid_group(group, true, &parent, &seq, why, why_len);
    if (rc) return rc;
    int slot = color < 0 ? -1 : reserve_slot(); /* a member that stays out needs no room */
    if ((rc = agree_to_split(parent, group, seq, color < 0 || slot >= 0, why, why_len))) {
        release_slot(slot);
        return rc;
    }
    MPI_Comm c = MPI_COMM_NULL;
    mpid_lock();
    int mrc = MPI_Comm_split(parent, color < 0 ? MPI_UNDEFINED : color, key, &c);
    mpid_unlock();
    if (mrc != MPI_SUCCESS || c == MPI_COMM_NULL) {
        release_slot(slot);
        return mrc != MPI_SUCCESS ? mpid_error(mrc, "split", why, why_len) : OPR_OK;
    }
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int r = 0, n = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    pthread_mutex_lock(&state_lock);
    groups[slot] = (struct group){.comm = c, .id = next_id++};
    *out = groups[slot].id;
    pthread_mutex_unlock(&state_lock);
    *rank = r;
    *size = n;
    return OPR_OK;
}

static int p_group_free(void *data, int64_t group)
{
    (void)data;
    char why[256];
    if (mpid_ensure(why, sizeof why)) return OPR_ERR_INVALID;
    pthread_mutex_lock(&state_lock);
    int slot = group > 0 ? slot_of(group) : -1;
    bool live = slot > 0, broken = live && groups[slot].broken[0];
    MPI_Comm c = live ? groups[slot].comm : MPI_COMM_NULL;
    if (live) groups[slot] = (struct group){.comm = MPI_COMM_NULL};
    pthread_mutex_unlock(&state_lock);
    if (!live) return OPR_ERR_INVALID;
    if (broken) return OPR_OK; /* its parked collective may still need the communicator: kept */
    mpid_lock();
    MPI_Comm_free(&c);
    mpid_unlock();
    return OPR_OK;
}

static int p_set_timeout(void *data, double seconds)
{
    (void)data;
    if (!(seconds > 0) || !isfinite(seconds) || seconds > MPID_MAX_TIMEOUT_S) return OPR_ERR_INVALID;
    pthread_mutex_lock(&state_lock);
    timeout_s = seconds;
    pthread_mutex_unlock(&state_lock);
    return OPR_OK;
}

static int p_group_info(void *data, int64_t group, int32_t *rank, int32_t *size, double *timeout, char *why,
                        size_t why_len)
{
    (void)data;
    MPI_Comm c;
    int rc = mpid_group(group, false, &c, NULL, why, why_len);
    if (rc) return rc;
    int r = 0, n = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    *rank = r;
    *size = n;
    *timeout = mpid_timeout();
    return OPR_OK;
}

/* MPI_Finalize waits for every process of the job: after a fault it would wait for ever
 * on a dead peer, and until a stalled one comes back. So it runs only when no group is
 * broken and every member of the world reaches a barrier within the time-out; else it is
 * skipped, with why saying what happened (the process should then exit; mpirun counts a
 * process that exits without MPI_Finalize as failed unless told otherwise). */
static int finalize_now(char *why, size_t why_len)
{
    pthread_mutex_lock(&finalize_lock);
    pthread_mutex_lock(&state_lock);
    bool skip = !inited || finalized, ours = we_inited;
    char fault[400] = "";
    for (int i = 0; i < MPID_MAX_GROUPS && !skip && !fault[0]; i++)
        if (groups[i].comm != MPI_COMM_NULL && groups[i].broken[0])
            snprintf(fault, sizeof fault, "group %lld is broken: %s", (long long)groups[i].id, groups[i].broken);
    pthread_mutex_unlock(&state_lock);
    if (skip) {
        pthread_mutex_unlock(&finalize_lock);
        return OPR_OK;
    }
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Does every member get here? Two rounds: a member that arrives after the others
     * gave up on the first still completes it (their barriers were posted), but finds
     * nobody at the second, and skips MPI_Finalize too instead of waiting for them. */
    for (int round = 1; round <= 2 && !fault[0] && ours && size > 1; round++) {
        MPI_Comm world;
        uint64_t seq = 0;
        char what[112];
        snprintf(what, sizeof what, "the shutdown barrier on group 0 (%d members)%s", size, round == 2 ? ", second round" : "");
        MPI_Request req;
        if (!mpid_group(0, true, &world, &seq, fault, sizeof fault)) {
            mpid_lock();
            int mrc = MPI_Ibarrier(world, &req);
            mpid_unlock();
            if (mrc != MPI_SUCCESS) mpid_error(mrc, what, fault, sizeof fault);
            else if (mpid_wait(&req, 0, seq, "the shutdown barrier", what, fault, sizeof fault)) mpid_park(req, NULL, NULL);
        }
    }
    pthread_mutex_lock(&state_lock);
    for (int i = 1; i < MPID_MAX_GROUPS && !fault[0]; i++)
        if (groups[i].comm != MPI_COMM_NULL) MPI_Comm_free(&groups[i].comm);
    finalized = true;
    pthread_mutex_unlock(&state_lock);
    int rc = OPR_OK;
    if (fault[0]) {
        snprintf(why, why_len, "MPI_Finalize skipped, since it would wait for the peers: %s; exit this process (under "
                 "mpirun, --mca orte_allowed_exit_without_sync 1 keeps that from ending the other ranks)", fault);
        rc = OPR_ERR_BACKEND;
    } else if (ours) {
        int mrc = MPI_Finalize();
        if (mrc != MPI_SUCCESS) rc = mpid_error(mrc, "MPI_Finalize", why, why_len);
    }
    pthread_mutex_unlock(&finalize_lock);
    return rc;
}

static int p_finalize(void *data, char *why, size_t why_len)
{
    (void)data;
    return finalize_now(why, why_len);
}

void mpid_context_opened(void)
{
    pthread_mutex_lock(&state_lock);
    contexts++;
    pthread_mutex_unlock(&state_lock);
}

/* The last context to go finalises what this plugin started (mpirun counts a rank
 * that exits without MPI_Finalize as failed). */
int mpid_context_closed(char *why, size_t why_len)
{
    pthread_mutex_lock(&state_lock);
    bool last = --contexts == 0;
    pthread_mutex_unlock(&state_lock);
    return last ? finalize_now(why, why_len) : OPR_OK;
}

const opr_group_provider mpid_provider = {
    .struct_size = sizeof(opr_group_provider), .name = "mpi", .world = p_world, .split = p_split,
    .group_free = p_group_free, .set_timeout = p_set_timeout, .all_reduce_start = mpid_all_reduce_start,
    .wait = mpid_wait_request, .finalize = p_finalize, .poll = mpid_poll, .group_info = p_group_info,
    .all_gather_bytes = mpid_all_gather_bytes,
};
