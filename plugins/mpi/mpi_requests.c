/* Requests: every wait polls its request against the time-out, so that a peer that
 * died or never joined makes the collective fail on the ranks still alive instead of
 * hanging them; a request that failed so is parked with its buffers until MPI lets go
 * of them (a late peer may still complete it, writing them); the data-parallel
 * helper's non-blocking all-reduces live in a table that grows as needed. */
#include "mpi_state.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;  /* MPI calls, below MPI_THREAD_MULTIPLE */
static bool serialise;

void mpid_lock(void)
{
    if (serialise) pthread_mutex_lock(&call_lock);
}

void mpid_unlock(void)
{
    if (serialise) pthread_mutex_unlock(&call_lock);
}

void mpid_set_serialise(bool on) { serialise = on; }

int mpid_error(int rc, const char *what, char *why, size_t why_len)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(why, why_len, "%s: MPI error: %s", what, text);
    return OPR_ERR_BACKEND;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int mpid_wait(MPI_Request *req, int64_t group, uint64_t seq, const char *op, const char *what, char *why,
              size_t why_len)
{
    MPI_Comm c;
    int brc = mpid_group(group, false, &c, NULL, why, why_len);
    if (brc == OPR_ERR_BACKEND) return brc; /* broken meanwhile: waiting could only time out again */
    const double limit = mpid_timeout(), deadline = now_s() + limit;
    long pause_ns = 1000;
    for (;;) {
        int done = 0;
        mpid_lock();
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        mpid_unlock();
        if (rc != MPI_SUCCESS) {
            mpid_break(group, "%s failed at collective %llu", op, (unsigned long long)seq);
            return mpid_error(rc, what, why, why_len);
        }
        if (done) return OPR_OK;
        if (now_s() > deadline) {
            mpid_break(group, "%s timed out at collective %llu after %g s", op, (unsigned long long)seq, limit);
            snprintf(why, why_len, "%s: timed out after %g s waiting for the other members (one may have died, or "
                     "not called the same collective; opr_dist_set_timeout sets the limit); group %lld is broken "
                     "from now on", what, limit, (long long)group);
            return OPR_ERR_BACKEND;
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 200000) pause_ns *= 2; /* 1 us up to 0.2 ms between polls */
    }
}

/* ------------------------------------------------------------------ parked requests */

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER; /* taken before call_lock, never after */
static struct parked {
    MPI_Request req;
    void *buf[2];
} *parked;
static int nparked, parked_cap;

void mpid_park(MPI_Request req, void *buf0, void *buf1)
{
    pthread_mutex_lock(&park_lock);
    if (nparked == parked_cap) {
        int cap = parked_cap ? 2 * parked_cap : 16;
        struct parked *p = realloc(parked, (size_t)cap * sizeof *p);
        if (!p) { /* nowhere to keep them: leaked, which is safe (MPI may write them) */
            pthread_mutex_unlock(&park_lock);
            return;
        }
        parked = p;
        parked_cap = cap;
    }
    parked[nparked++] = (struct parked){req, {buf0, buf1}};
    pthread_mutex_unlock(&park_lock);
}

void mpid_reap(void)
{
    pthread_mutex_lock(&park_lock);
    for (int i = 0; i < nparked;) {
        int done = 0;
        mpid_lock();
        int rc = MPI_Test(&parked[i].req, &done, MPI_STATUS_IGNORE);
        mpid_unlock();
        if (rc == MPI_SUCCESS && done) { /* MPI has let go of the buffers */
            free(parked[i].buf[0]);
            free(parked[i].buf[1]);
            parked[i] = parked[--nparked];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&park_lock);
}

/* ------------------------------------------------------------------ the helper's reductions */

/* One non-blocking all-reduce of the data-parallel helper. Each is allocated on its
 * own, so that a pointer to its request stays valid while the table grows. */
struct pending {
    bool used, mean;
    MPI_Request req;
    void *buf;
    int64_t n;
    opr_dtype dtype;
    int size;
    int64_t group;
    uint64_t seq;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending **table;
static int64_t table_len;

/* A free entry's index, the table grown when full; -1 when out of memory. */
static int64_t take_entry(void)
{
    pthread_mutex_lock(&table_lock);
    int64_t i = 0;
    while (i < table_len && table[i]->used) i++;
    if (i == table_len) {
        int64_t len = table_len ? 2 * table_len : 64;
        struct pending **t = realloc(table, (size_t)len * sizeof *t);
        if (t) table = t;
        for (int64_t k = table_len; t && k < len; k++)
            if (!(table[k] = calloc(1, sizeof **table))) { len = k; break; }
        if (t && len > table_len) table_len = len;
        if (i == table_len) i = -1;
    }
    if (i >= 0) table[i]->used = true;
    pthread_mutex_unlock(&table_lock);
    return i;
}

static struct pending *entry(int64_t req)
{
    pthread_mutex_lock(&table_lock);
    struct pending *p = req >= 0 && req < table_len && table[req]->used ? table[req] : NULL;
    pthread_mutex_unlock(&table_lock);
    return p;
}

static void drop_entry(struct pending *p)
{
    pthread_mutex_lock(&table_lock);
    p->used = false;
    pthread_mutex_unlock(&table_lock);
}

int mpid_all_reduce_start(void *data, int64_t group, void *buf, int64_t n, opr_dtype dtype, const char *op,
                          int64_t *req, char *why, size_t why_len)
{
    (void)data;
    MPI_Comm c;
    uint64_t seq = 0;
    int rc = mpid_group(group, true, &c, &seq, why, why_len);
    if (rc) return rc;
    MPI_Datatype t = mpid_type(dtype);
    bool mean = op && !strcmp(op, "mean");
    if (t == MPI_DATATYPE_NULL || n < 0 || n > 0x7fffffff || !(mean || (op && !strcmp(op, "sum")))) {
        snprintf(why, why_len, "all_reduce_start: f32 or f64, at most 2^31 - 1 elements, sum or mean");
        return OPR_ERR_INVALID;
    }
    int64_t i = take_entry();
    if (i < 0) {
        snprintf(why, why_len, "all_reduce_start: out of memory for the request");
        return OPR_ERR_NOMEM;
    }
    struct pending *p = entry(i);
    *p = (struct pending){.used = true, .mean = mean, .buf = buf, .n = n, .dtype = dtype, .group = group, .seq = seq};
    mpid_lock();
    MPI_Comm_size(c, &p->size);
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, MPI_SUM, c, &p->req);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) {
        drop_entry(p);
        return mpid_error(mrc, "all_reduce_start", why, why_len);
    }
    *req = i;
    return OPR_OK;
}

int mpid_wait_request(void *data, int64_t req, char *why, size_t why_len)
{
    (void)data;
    struct pending *p = entry(req);
    if (!p) {
        snprintf(why, why_len, "wait: request %lld is not outstanding", (long long)req);
        return OPR_ERR_INVALID;
    }
    char what[96];
    snprintf(what, sizeof what, "all_reduce of %lld elements on group %lld", (long long)p->n, (long long)p->group);
    int rc = mpid_wait(&p->req, p->group, p->seq, "all_reduce", what, why, why_len);
    if (rc) {
        /* still MPI's: the caller keeps buf (the provider's contract), the request is
         * parked so that MPI may finish it */
        mpid_park(p->req, NULL, NULL);
    } else if (p->mean && p->size > 1) {
        if (p->dtype == OPR_F32) for (int64_t i = 0; i < p->n; i++) ((float *)p->buf)[i] /= (float)p->size;
        else for (int64_t i = 0; i < p->n; i++) ((double *)p->buf)[i] /= p->size;
    }
    drop_entry(p);
    return rc;
}

int mpid_poll(void *data, int64_t req, int *done, char *why, size_t why_len)
{
    (void)data;
    *done = 0;
    struct pending *p = entry(req);
    if (!p) {
        snprintf(why, why_len, "poll: request %lld is not outstanding", (long long)req);
        return OPR_ERR_INVALID;
    }
    if (p->req == MPI_REQUEST_NULL) { *done = 1; return OPR_OK; } /* completed by an earlier poll */
    mpid_lock();
    int rc = MPI_Test(&p->req, done, MPI_STATUS_IGNORE);
    mpid_unlock();
    return rc == MPI_SUCCESS ? OPR_OK : mpid_error(rc, "poll", why, why_len);
}

/* Through buffers of its own: the caller's (a kernel's stack, an output) may be gone
 * when a late peer completes a gather that timed out. */
int mpid_all_gather_bytes(void *data, int64_t group, const void *mine, void *all, size_t bytes, char *why,
                          size_t why_len)
{
    (void)data;
    MPI_Comm c;
    uint64_t seq = 0;
    int rc = mpid_group(group, true, &c, &seq, why, why_len);
    if (rc) return rc;
    if (bytes > 0x7fffffff) {
        snprintf(why, why_len, "all_gather_bytes: more than 2^31 - 1 bytes");
        return OPR_ERR_INVALID;
    }
    int size = 1;
    MPI_Comm_size(c, &size);
    char *in = malloc(bytes + 1), *out = malloc((size_t)size * bytes + 1);
    if (!in || !out) {
        free(in);
        free(out);
        snprintf(why, why_len, "all_gather_bytes: out of memory");
        return OPR_ERR_NOMEM;
    }
    memcpy(in, mine, bytes);
    char what[64];
    snprintf(what, sizeof what, "all_gather_bytes on group %lld", (long long)group);
    MPI_Request req;
    mpid_lock();
    int mrc = MPI_Iallgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c, &req);
    mpid_unlock();
    if (mrc != MPI_SUCCESS) rc = mpid_error(mrc, what, why, why_len);
    else if ((rc = mpid_wait(&req, group, seq, "all_gather_bytes", what, why, why_len))) {
        mpid_park(req, in, out);
        return rc;
    }
    if (!rc) memcpy(all, out, (size_t)size * bytes);
    free(in);
    free(out);
    return rc;
}
