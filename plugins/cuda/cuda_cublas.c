/* gk_cublas_load (plugins/gpu/gpu_cublas.h): libcublas opened with dlopen the first time
 * a CUDA device is set up. The toolkit's library directory the plugin was built
 * against is tried first (the plugin's RUNPATH does not apply to dlopen), then the
 * dynamic loader's own search. Kept loaded for the life of the process. */
#define _GNU_SOURCE
#include "../gpu/gpu_cublas.h"

#include "../common/opc_dlsyms.h"

#include <pthread.h>
#include <stdio.h>

#define CUBLAS_STR_(x) #x
#define CUBLAS_STR(x) CUBLAS_STR_(x)
#define CUBLAS_SONAME "libcublas.so." CUBLAS_STR(CUBLAS_VER_MAJOR)

gk_cublas_api gk_cublas;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512] = "cuBLAS not loaded"; /* empty once loaded */

static void load(void)
{
    void *h = NULL;
#ifdef OPREG_CUDA_LIBRARY_DIR
    h = dlopen(OPREG_CUDA_LIBRARY_DIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error, "cannot load cuBLAS (%s): %s", CUBLAS_SONAME, dlerror());
        return;
    }
    static const opc_dlsym syms[] = {
        {"cublasCreate_v2", offsetof(gk_cublas_api, create)},
        {"cublasDestroy_v2", offsetof(gk_cublas_api, destroy)},
        {"cublasSetStream_v2", offsetof(gk_cublas_api, set_stream)},
        {"cublasGemmEx", offsetof(gk_cublas_api, gemm_ex)},
        {"cublasGemmStridedBatchedEx", offsetof(gk_cublas_api, gemm_strided_batched_ex)},
        {"cublasGetStatusString", offsetof(gk_cublas_api, status_string)},
    };
    gk_cublas_api api;
    if (opc_dlsyms(h, CUBLAS_SONAME, syms, sizeof syms / sizeof syms[0], &api, load_error, sizeof load_error)) return;
    gk_cublas = api;
    load_error[0] = '\0';
}

int gk_cublas_load(char *why, size_t why_len)
{
    pthread_once(&once, load);
    if (!load_error[0]) return 0;
    if (why && why_len) snprintf(why, why_len, "%s", load_error);
    return -1;
}
