/* oneDNN plugin entry points. It provides no device: it registers f32 kernels for the
 * CPU plugin's "cpu" device with override_dtypes, so that wherever it is loaded (before
 * or after the CPU plugin) its kernels run for f32 and the CPU plugin's for the other
 * dtypes, f64 the reference `opreg check` compares them with. The probe creates no
 * engine (it must be free of side effects): it only says which oneDNN it was built
 * against and the one it runs with. */
#include "onednn_common.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;

static void engine_create(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

dnnl_engine_t onednn_engine(void) { return engine; }

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    const dnnl_version_t *v = dnnl_version();
    if (why && why_len)
        snprintf(why, why_len, "oneDNN %d.%d.%d (built against %d.%d.%d)", v->major, v->minor, v->patch, DNNL_VERSION_MAJOR,
                 DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
    /* an older major than the headers' lacks functions this build calls */
    if (v->major != DNNL_VERSION_MAJOR) return 0;
    return 10; /* usable; which kernels run is override_dtypes' doing, not the score's */
}

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "onednn";
    self->version = "0.1.0";
    if (host->abi_major != OPR_ABI_MAJOR) return OPR_ERR_ABI;
    /* supports and override_dtypes are 2.1 and 2.2 fields: an older host would fill the
     * dtypes the CPU plugin lacks only, which is none */
    if (host->abi_minor < 2) {
        host->set_error(NULL, "onednn: needs a host of ABI 2.2 or later (supports, override_dtypes), this one is %u.%u",
                        (unsigned)host->abi_major, (unsigned)host->abi_minor);
        return OPR_ERR_ABI;
    }
    if (pthread_once(&engine_once, engine_create) || engine_status != dnnl_success) {
        host->set_error(NULL, "onednn: creating the CPU engine failed (status %d)", (int)engine_status);
        return OPR_ERR_BACKEND;
    }
    return onednn_register_conv(self, host);
}
