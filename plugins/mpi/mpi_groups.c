/* Process groups on MPI: the opr_group_provider of this plugin. MPI is initialised on
 * the first opr_dist_world (a process that never asks pays nothing but the library's
 * load), and every wait polls its request against the time-out, so that a peer that
 * died or never joined makes the collective fail on the ranks still alive instead of
 * hanging them. */
#define _GNU_SOURCE /* dladdr */
#include "mpi_state.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* the fields below */
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;  /* MPI calls, below MPI_THREAD_MULTIPLE */
static bool inited, finalized, we_inited, serialise;
static int contexts;
static double timeout_s = 60;
static MPI_Comm comms[MPID_MAX_GROUPS]; /* slot 0: the world */
static int64_t ids[MPID_MAX_GROUPS];    /* the id of each live slot: never reused, so that other plugins may key
                                           state on it (the CUDA plugin's NCCL communicators) */
static int64_t next_id = 1;
static struct pending {
    bool used, mean;
    MPI_Request req;
    void *buf;
    int64_t n;
    opr_dtype dtype;
    int size;
    int64_t group;
} pending[MPID_MAX_REQUESTS];

void mpid_lock(void)
{
    if (serialise) pthread_mutex_lock(&call_lock);
}

void mpid_unlock(void)
{
    if (serialise) pthread_mutex_unlock(&call_lock);
}

int mpid_error(int rc, const char *what, char *why, size_t why_len)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(why, why_len, "%s: MPI error: %s", what, text);
    return OPR_ERR_BACKEND;
}

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
            serialise = provided < MPI_THREAD_MULTIPLE;
            comms[0] = MPI_COMM_WORLD;
            ids[0] = 0;
            for (int i = 1; i < MPID_MAX_GROUPS; i++) comms[i] = MPI_COMM_NULL; /* not 0 in every MPI */
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
        if (comms[i] != MPI_COMM_NULL && ids[i] == id) return i;
    return -1;
}

MPI_Comm mpid_comm(int64_t id, char *why, size_t why_len)
{
    if (mpid_ensure(why, why_len)) return MPI_COMM_NULL;
    pthread_mutex_lock(&state_lock);
    int slot = slot_of(id);
    MPI_Comm c = slot >= 0 ? comms[slot] : MPI_COMM_NULL;
    pthread_mutex_unlock(&state_lock);
    if (c == MPI_COMM_NULL) snprintf(why, why_len, "group %lld is not a live group of this process", (long long)id);
    return c;
}

MPI_Datatype mpid_type(opr_dtype dt)
{
    return dt == OPR_F32 ? MPI_FLOAT : dt == OPR_F64 ? MPI_DOUBLE : MPI_DATATYPE_NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int mpid_wait(MPI_Request *req, const char *what, char *why, size_t why_len)
{
    pthread_mutex_lock(&state_lock);
    const double limit = timeout_s;
    pthread_mutex_unlock(&state_lock);
    const double deadline = now_s() + limit;
    long pause_ns = 1000;
    for (;;) {
        int done = 0;
        mpid_lock();
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        mpid_unlock();
        if (rc != MPI_SUCCESS) return mpid_error(rc, what, why, why_len);
        if (done) return OPR_OK;
        if (now_s() > deadline) {
            /* the request stays with MPI (a collective cannot be cancelled): this rank
             * should stop using the group */
            snprintf(why, why_len, "%s: timed out after %g s waiting for the other members (one may have died, or "
                     "not called the same collective; opr_dist_set_timeout sets the limit)", what, limit);
            return OPR_ERR_BACKEND;
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 200000) pause_ns *= 2; /* 1 us up to 0.2 ms between polls */
    }
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

static int p_split(void *data, int64_t group, int32_t color, int32_t key, int64_t *out, int32_t *rank, int32_t *size,
                   char *why, size_t why_len)
{
    (void)data;
    MPI_Comm parent = mpid_comm(group, why, why_len);
    if (parent == MPI_COMM_NULL) return OPR_ERR_INVALID;
    MPI_Comm c = MPI_COMM_NULL;
    mpid_lock();
    int mrc = MPI_Comm_split(parent, color < 0 ? MPI_UNDEFINED : color, key, &c);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) return mpid_error(mrc, "split", why, why_len);
    *out = -1;
    *rank = -1;
    *size = 0;
    if (c == MPI_COMM_NULL) return OPR_OK;
    pthread_mutex_lock(&state_lock);
    int slot = 1;
    while (slot < MPID_MAX_GROUPS && comms[slot] != MPI_COMM_NULL) slot++;
    int64_t id = -1;
    if (slot < MPID_MAX_GROUPS) {
        comms[slot] = c;
        ids[slot] = id = next_id++;
    }
    pthread_mutex_unlock(&state_lock);
    if (slot == MPID_MAX_GROUPS) {
        MPI_Comm_free(&c);
        snprintf(why, why_len, "split: %d groups are live already (free some with opr_dist_group_free)",
                 MPID_MAX_GROUPS - 1);
        return OPR_ERR_NOMEM;
    }
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int r = 0, n = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    *out = id;
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
    bool live = slot > 0;
    MPI_Comm c = live ? comms[slot] : MPI_COMM_NULL;
    if (live) comms[slot] = MPI_COMM_NULL;
    pthread_mutex_unlock(&state_lock);
    if (!live) return OPR_ERR_INVALID;
    mpid_lock();
    MPI_Comm_free(&c);
    mpid_unlock();
    return OPR_OK;
}

static int p_set_timeout(void *data, double seconds)
{
    (void)data;
    if (!(seconds > 0)) return OPR_ERR_INVALID;
    pthread_mutex_lock(&state_lock);
    timeout_s = seconds;
    pthread_mutex_unlock(&state_lock);
    return OPR_OK;
}

static int p_all_reduce_start(void *data, int64_t group, void *buf, int64_t n, opr_dtype dtype, const char *op,
                              int64_t *req, char *why, size_t why_len)
{
    (void)data;
    MPI_Comm c = mpid_comm(group, why, why_len);
    if (c == MPI_COMM_NULL) return OPR_ERR_INVALID;
    MPI_Datatype t = mpid_type(dtype);
    bool mean = op && !strcmp(op, "mean");
    if (t == MPI_DATATYPE_NULL || n < 0 || n > 0x7fffffff || !(mean || (op && !strcmp(op, "sum")))) {
        snprintf(why, why_len, "all_reduce_start: f32 or f64, at most 2^31 - 1 elements, sum or mean");
        return OPR_ERR_INVALID;
    }
    pthread_mutex_lock(&state_lock);
    int slot = 0;
    while (slot < MPID_MAX_REQUESTS && pending[slot].used) slot++;
    if (slot < MPID_MAX_REQUESTS) pending[slot] = (struct pending){.used = true, .mean = mean, .buf = buf, .n = n,
                                                                   .dtype = dtype, .group = group};
    pthread_mutex_unlock(&state_lock);
    if (slot == MPID_MAX_REQUESTS) {
        snprintf(why, why_len, "all_reduce_start: %d reductions outstanding already", MPID_MAX_REQUESTS);
        return OPR_ERR_NOMEM;
    }
    struct pending *p = &pending[slot];
    mpid_lock();
    MPI_Comm_size(c, &p->size);
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, MPI_SUM, c, &p->req);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) {
        pthread_mutex_lock(&state_lock);
        p->used = false;
        pthread_mutex_unlock(&state_lock);
        return mpid_error(mrc, "all_reduce_start", why, why_len);
    }
    *req = slot;
    return OPR_OK;
}

static int p_wait(void *data, int64_t req, char *why, size_t why_len)
{
    (void)data;
    if (req < 0 || req >= MPID_MAX_REQUESTS || !pending[req].used) {
        snprintf(why, why_len, "wait: request %lld is not outstanding", (long long)req);
        return OPR_ERR_INVALID;
    }
    struct pending *p = &pending[req];
    char what[64];
    snprintf(what, sizeof what, "all_reduce of %lld elements on group %lld", (long long)p->n, (long long)p->group);
    int rc = mpid_wait(&p->req, what, why, why_len);
    if (!rc && p->mean && p->size > 1) {
        if (p->dtype == OPR_F32) for (int64_t i = 0; i < p->n; i++) ((float *)p->buf)[i] /= (float)p->size;
        else for (int64_t i = 0; i < p->n; i++) ((double *)p->buf)[i] /= p->size;
    }
    if (!rc) { /* a timed-out request stays MPI's: its slot is not reused */
        pthread_mutex_lock(&state_lock);
        p->used = false;
        pthread_mutex_unlock(&state_lock);
    }
    return rc;
}

static int p_poll(void *data, int64_t req, int *done, char *why, size_t why_len)
{
    (void)data;
    *done = 0;
    if (req < 0 || req >= MPID_MAX_REQUESTS || !pending[req].used) {
        snprintf(why, why_len, "poll: request %lld is not outstanding", (long long)req);
        return OPR_ERR_INVALID;
    }
    if (pending[req].req == MPI_REQUEST_NULL) { *done = 1; return OPR_OK; } /* completed by an earlier poll */
    mpid_lock();
    int rc = MPI_Test(&pending[req].req, done, MPI_STATUS_IGNORE);
    mpid_unlock();
    return rc == MPI_SUCCESS ? OPR_OK : mpid_error(rc, "poll", why, why_len);
}

static int p_group_info(void *data, int64_t group, int32_t *rank, int32_t *size, double *timeout, char *why,
                        size_t why_len)
{
    (void)data;
    MPI_Comm c = mpid_comm(group, why, why_len);
    if (c == MPI_COMM_NULL) return OPR_ERR_INVALID;
    int r = 0, n = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    *rank = r;
    *size = n;
    pthread_mutex_lock(&state_lock);
    *timeout = timeout_s;
    pthread_mutex_unlock(&state_lock);
    return OPR_OK;
}

static int p_all_gather_bytes(void *data, int64_t group, const void *mine, void *all, size_t bytes, char *why,
                              size_t why_len)
{
    (void)data;
    MPI_Comm c = mpid_comm(group, why, why_len);
    if (c == MPI_COMM_NULL) return OPR_ERR_INVALID;
    if (bytes > 0x7fffffff) {
        snprintf(why, why_len, "all_gather_bytes: more than 2^31 - 1 bytes");
        return OPR_ERR_INVALID;
    }
    char what[64];
    snprintf(what, sizeof what, "all_gather_bytes on group %lld", (long long)group);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c, &req);
    mpid_unlock();
    return mrc == MPI_SUCCESS ? mpid_wait(&req, what, why, why_len) : mpid_error(mrc, what, why, why_len);
}

static int finalize_locked(char *why, size_t why_len)
{
    if (!inited || finalized) return OPR_OK;
    for (int i = 1; i < MPID_MAX_GROUPS; i++)
        if (comms[i] != MPI_COMM_NULL) MPI_Comm_free(&comms[i]);
    finalized = true;
    if (!we_inited) return OPR_OK; /* the application's MPI: its to finalize */
    int mrc = MPI_Finalize();
    return mrc == MPI_SUCCESS ? OPR_OK : mpid_error(mrc, "MPI_Finalize", why, why_len);
}

static int p_finalize(void *data, char *why, size_t why_len)
{
    (void)data;
    pthread_mutex_lock(&state_lock);
    int rc = finalize_locked(why, why_len);
    pthread_mutex_unlock(&state_lock);
    return rc;
}

void mpid_context_opened(void)
{
    pthread_mutex_lock(&state_lock);
    contexts++;
    pthread_mutex_unlock(&state_lock);
}

/* The last context to go finalises what this plugin started (mpirun counts a rank
 * that exits without MPI_Finalize as failed). */
void mpid_context_closed(void)
{
    char why[256];
    pthread_mutex_lock(&state_lock);
    if (--contexts == 0) finalize_locked(why, sizeof why);
    pthread_mutex_unlock(&state_lock);
}

const opr_group_provider mpid_provider = {
    .struct_size = sizeof(opr_group_provider), .name = "mpi", .world = p_world, .split = p_split,
    .group_free = p_group_free, .set_timeout = p_set_timeout, .all_reduce_start = p_all_reduce_start,
    .wait = p_wait, .finalize = p_finalize, .poll = p_poll, .group_info = p_group_info,
    .all_gather_bytes = p_all_gather_bytes,
};
