/* opr_plugin_probe for the CUDA plugin, in plain C so it stays free of the runtime:
 * it asks the driver directly (dlopen of libcuda.so.1, cuInit, cuDeviceGetCount). The
 * driver API creates no context for these calls, and nothing else is touched, so the
 * probe is side-effect free and safe on machines without a driver or a GPU. The
 * plugin links libcudart, which loads the driver lazily on its first call, so the
 * .so itself can be dlopen'ed anywhere the runtime library resolves. */
#include <opreg/plugin.h>

#include <dlfcn.h>
#include <stdio.h>

#include <cuda_runtime_api.h> /* CUDART_VERSION: the runtime this plugin was built with */

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_version_fn)(int *version);

#define CU_SUCCESS 0
#define CU_ERROR_STUB_LIBRARY 34
#define CU_ERROR_NO_DEVICE 100

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len);

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    char dummy[8];
    if (!why || !why_len) {
        why = dummy;
        why_len = sizeof dummy;
    }
    /* Kept loaded: the runtime opens the same library again when the plugin is used,
     * and unloading a driver that cuInit has set up is not supported. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 not found)");
        return 0;
    }
    cu_init_fn cu_init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn cu_count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    cu_version_fn cu_version = (cu_version_fn)dlsym(h, "cuDriverGetVersion");
    if (!cu_init || !cu_count) {
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 lacks cuInit/cuDeviceGetCount)");
        return 0;
    }
    int version = 0;
    if (cu_version && cu_version(&version) == CU_SUCCESS && version > 0 && version < CUDART_VERSION) {
        snprintf(why, why_len, "CUDA driver %d.%d is older than the runtime %d.%d this plugin was built with",
                 version / 1000, version % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return 0;
    }
    int rc = cu_init(0);
    if (rc == CU_ERROR_NO_DEVICE) {
        snprintf(why, why_len, "no CUDA-capable device");
        return 0;
    }
    if (rc == CU_ERROR_STUB_LIBRARY) {
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 is the toolkit's stub library)");
        return 0;
    }
    if (rc != CU_SUCCESS) {
        snprintf(why, why_len, "no CUDA-capable device (cuInit failed with error %d)", rc);
        return 0;
    }
    int count = 0;
    if (cu_count(&count) != CU_SUCCESS || count < 1) {
        snprintf(why, why_len, "no CUDA-capable device");
        return 0;
    }
    snprintf(why, why_len, "%d CUDA device(s)", count);
    return 20;
}
