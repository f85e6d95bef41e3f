/* The MPI plugin's process-wide state: MPI is initialised once per process, whatever
 * number of contexts load the plugin, and every collective waits on a request with the
 * time-out instead of blocking in MPI.
 *
 * Ownership across a time-out: MPI cannot cancel a collective, so a request that timed
 * out may still write its buffers whenever a late peer joins (inside any later MPI
 * call, on any group). Such a request and the buffers it may write are parked
 * (mpi_requests.c) and freed only once MPI completes it, and its group is broken
 * (mpi_groups.c): every later call on it fails at once, saying why. */
#ifndef OPREG_MPI_STATE_H
#define OPREG_MPI_STATE_H

#include <opreg/plugin.h>

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Live groups, the world (id 0) included: each holds an MPI communicator, a scarce
 * resource (OpenMPI's context ids). */
#define MPID_MAX_GROUPS 64
/* The longest time-out accepted (seconds): a week. A collective must end. */
#define MPID_MAX_TIMEOUT_S 604800.0

/* MPI is initialised (by this plugin or the application): 0, or an error status with
 * the reason in why. */
int mpid_ensure(char *why, size_t why_len);
/* The communicator of group id into *comm. For a collective (collective true) the
 * group's count of collectives goes up by one and *seq gets it (seq may be NULL), and
 * parked requests are given a chance to finish; otherwise (point to point) *seq gets
 * the number of the group's last collective. OPR_ERR_INVALID: not a live group;
 * OPR_ERR_BACKEND: the group is broken ("group 0 is broken: all_reduce timed out at
 * collective 12 ..."). */
int mpid_group(int64_t id, bool collective, MPI_Comm *comm, uint64_t *seq, char *why, size_t why_len);
/* Marks group id broken, the reason printf-style ("all_reduce timed out at ..."); the
 * first reason stays. */
void mpid_break(int64_t id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The time-out in seconds. */
double mpid_timeout(void);
/* MPI_FLOAT, MPI_DOUBLE, MPI_INT64_T, MPI_INT32_T, MPI_UINT8_T for f32, f64, i64, i32, bool, else
 * MPI_DATATYPE_NULL. */
MPI_Datatype mpid_type(opr_dtype dt);
/* Waits for *req, collective seq on group, within the time-out; op names it short for
 * the group's broken message ("all_reduce"), what long for errors ("all_reduce on
 * group 0 (rank 0 of 2)"). On a failure (time-out: OPR_ERR_BACKEND, "timed out") the
 * group is broken and *req is still MPI's: the caller parks it with the buffers it
 * may write (mpid_park), never frees them. */
int mpid_wait(MPI_Request *req, int64_t group, uint64_t seq, const char *op, const char *what, char *why,
              size_t why_len);
/* Keeps req and up to two buffers it may write (malloc'd; NULL for none or for a
 * buffer the caller keeps) until MPI completes it, then frees them. */
void mpid_park(MPI_Request req, void *buf0, void *buf1);
/* Completes what it can of the parked requests (they move forward only inside MPI
 * calls); frees the buffers of those done. */
void mpid_reap(void);
/* The text of MPI error code rc in why ("WHAT: MPI_ERR_..."); returns OPR_ERR_BACKEND. */
int mpid_error(int rc, const char *what, char *why, size_t why_len);
/* Serialises MPI calls when MPI gave less than MPI_THREAD_MULTIPLE. */
void mpid_lock(void);
void mpid_unlock(void);
void mpid_set_serialise(bool on);

/* The provider's request functions (mpi_requests.c). */
int mpid_all_reduce_start(void *data, int64_t group, void *buf, int64_t n, opr_dtype dtype, const char *op,
                          int64_t *req, char *why, size_t why_len);
int mpid_wait_request(void *data, int64_t req, char *why, size_t why_len);
int mpid_poll(void *data, int64_t req, int *done, char *why, size_t why_len);
int mpid_all_gather_bytes(void *data, int64_t group, const void *mine, void *all, size_t bytes, char *why,
                          size_t why_len);

/* The group provider and its lifetime (one use per context that loaded the plugin).
 * mpid_context_closed: when the last context goes, MPI is finalised; an error status
 * and why when that could not be done cleanly (after a fault: skipped, see
 * mpi_groups.c). */
extern const opr_group_provider mpid_provider;
void mpid_context_opened(void);
int mpid_context_closed(char *why, size_t why_len);

/* Registers the collectives' CPU kernels (mpi_kernels.c). */
int mpid_register_kernels(const opr_host_api *host, opr_plugin *self);

#endif
