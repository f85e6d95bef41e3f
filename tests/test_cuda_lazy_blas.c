/* The CUDA plugin loads cuBLAS only when a device is first set up (plugins/gpu/
 * gpu_cublas.h): opening the plugin, as discovery does on every machine, must not map
 * libcublas; and the loader must find it and every function the plugin calls. Runs
 * without a GPU (nothing here needs a device). Usage: test_cuda_lazy_blas PLUGIN.so */
#define _GNU_SOURCE
#include "plugins/gpu/gpu_cublas.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

static int cublas_mapped(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcublas")) *(const char **)data = info->dlpi_name;
    return 0;
}

static const char *mapped_cublas(void)
{
    const char *name = NULL;
    dl_iterate_phdr(cublas_mapped, &name);
    return name;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
        return 2;
    }
    if (mapped_cublas()) {
        fprintf(stderr, "FAIL: %s is mapped before anything was loaded\n", mapped_cublas());
        return 1;
    }
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "FAIL: cannot open %s: %s\n", argv[1], dlerror());
        return 1;
    }
    if (mapped_cublas()) {
        fprintf(stderr, "FAIL: opening the CUDA plugin mapped %s\n", mapped_cublas());
        return 1;
    }
    char why[512];
    if (gk_cublas_load(why, sizeof why)) {
        fprintf(stderr, "FAIL: gk_cublas_load: %s\n", why);
        return 1;
    }
    if (!mapped_cublas() || !gk_cublas.create || !gk_cublas.destroy || !gk_cublas.set_stream || !gk_cublas.gemm_ex ||
        !gk_cublas.gemm_strided_batched_ex || !gk_cublas.status_string) {
        fprintf(stderr, "FAIL: gk_cublas_load succeeded without cuBLAS and all of its functions\n");
        return 1;
    }
    /* a call through the table that needs no device */
    const char *ok = cublasGetStatusString(CUBLAS_STATUS_SUCCESS), *bad = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
    if (!ok || !bad || !ok[0] || !strcmp(ok, bad)) {
        fprintf(stderr, "FAIL: cublasGetStatusString gave '%s' and '%s' for two statuses\n", ok ? ok : "(null)",
                bad ? bad : "(null)");
        return 1;
    }
    if (gk_cublas_load(why, sizeof why)) {
        fprintf(stderr, "FAIL: a second gk_cublas_load failed: %s\n", why);
        return 1;
    }
    printf("the CUDA plugin opens without cuBLAS; cuBLAS loads on demand (%s)\n", mapped_cublas());
    dlclose(plugin);
    return 0;
}
