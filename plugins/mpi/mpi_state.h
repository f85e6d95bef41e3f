/* The MPI plugin's process-wide state: MPI is initialised once per process, whatever
 * number of contexts load the plugin, and every collective waits on a request with the
 * time-out instead of blocking in MPI (mpi_groups.c). */
#ifndef OPREG_MPI_STATE_H
#define OPREG_MPI_STATE_H

#include <opreg/plugin.h>

#include <mpi.h>
#include <stddef.h>

/* Live groups (id 0 is the world) and outstanding non-blocking reductions. */
#define MPID_MAX_GROUPS 64
#define MPID_MAX_REQUESTS 256

/* MPI is initialised (by this plugin or the application): 0, or an error status with
 * the reason in why. */
int mpid_ensure(char *why, size_t why_len);
/* The communicator of group id, or MPI_COMM_NULL with the reason in why. */
MPI_Comm mpid_comm(int64_t id, char *why, size_t why_len);
/* MPI_FLOAT / MPI_DOUBLE for f32 / f64, else MPI_DATATYPE_NULL. */
MPI_Datatype mpid_type(opr_dtype dt);
/* Waits for *req within the time-out; `what` names the collective in the messages
 * ("all_reduce on group 0"). A peer that never joins: OPR_ERR_BACKEND, "timed out". */
int mpid_wait(MPI_Request *req, const char *what, char *why, size_t why_len);
/* The text of MPI error code rc in why ("WHAT: MPI_ERR_..."); returns OPR_ERR_BACKEND. */
int mpid_error(int rc, const char *what, char *why, size_t why_len);
/* Serialises MPI calls when MPI gave less than MPI_THREAD_MULTIPLE. */
void mpid_lock(void);
void mpid_unlock(void);

/* The group provider and its lifetime (one use per context that loaded the plugin). */
extern const opr_group_provider mpid_provider;
void mpid_context_opened(void);
void mpid_context_closed(void);

/* Registers the collectives' CPU kernels (mpi_kernels.c). */
int mpid_register_kernels(const opr_host_api *host, opr_plugin *self);

#endif
