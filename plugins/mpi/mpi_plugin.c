/* The MPI plugin: process groups (opreg/dist.h) and the collectives of
 * registry/ops/dist.yaml on CPU tensors, on the MPI library the cluster already has
 * (Debian's OpenMPI here). Loading it starts nothing: MPI is initialised on the first
 * opr_dist_world, and finalised when the last context that loaded the plugin goes (or
 * by opr_dist_finalize). docs/distributed.md says how to launch and what is tested. */
#include "mpi_state.h"

#include <stdatomic.h>
#include <stdio.h>

/* The same table for every context, stored by each context's init, which may run on
 * several threads at once (atomic: no data race). */
static _Atomic(const opr_host_api *) host_api;

/* A context's free cannot fail: what went wrong at the end (MPI_Finalize skipped after
 * a fault) goes to the log, as a warning. */
static void mpi_shutdown(opr_plugin *self)
{
    char why[768] = "";
    const opr_host_api *host = atomic_load_explicit(&host_api, memory_order_relaxed);
    if (mpid_context_closed(why, sizeof why) && host) host->log(self, OPR_LOG_WARN, "%s", why);
}

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    return 1; /* usable wherever its MPI library loads; a process not started by mpirun is a world of one */
}

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "mpi";
    self->version = "0.1.0";
    if (host->abi_major != OPR_ABI_MAJOR || host->struct_size < OPR_HOST_API_STRUCT_SIZE_2_2) {
        host->set_error(NULL, "mpi: needs opreg's plugin ABI %d.2 or newer (the host has %u.%u)", OPR_ABI_MAJOR,
                        host->abi_major, host->abi_minor);
        return OPR_ERR_ABI;
    }
    atomic_store_explicit(&host_api, host, memory_order_relaxed);
    self->shutdown = mpi_shutdown;
    int rc = host->register_group_provider(self, &mpid_provider);
    if (!rc) rc = mpid_register_kernels(host, self);
    if (!rc) mpid_context_opened();
    return rc;
}
