/* opr_plugin_probe for the ROCm plugin, in plain C and without calling the HIP runtime
 * (which would start the HSA runtime): a usable machine has the amdgpu kernel driver's
 * /dev/kfd open to us and at least one GPU node (simd_count > 0) in the KFD topology,
 * which is what rocm_agent_enumerator reads too. The plugin itself links the HIP
 * runtime, so it loads only where libamdhip64 is installed; elsewhere the host reports
 * the dlopen failure. */
#include <opreg/plugin.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len);

#define KFD_NODES "/sys/class/kfd/kfd/topology/nodes"

static int gpu_nodes(void)
{
    DIR *d = opendir(KFD_NODES);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[512], line[256];
        snprintf(path, sizeof path, "%s/%s/properties", KFD_NODES, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long simd = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "simd_count %ld", &simd) == 1) break;
        fclose(f);
        if (simd > 0) n++;
    }
    closedir(d);
    return n;
}

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    char dummy[8];
    if (!why || !why_len) {
        why = dummy;
        why_len = sizeof dummy;
    }
    if (access("/dev/kfd", R_OK | W_OK) != 0) {
        snprintf(why, why_len, "no ROCm driver (/dev/kfd not present or not accessible)");
        return 0;
    }
    const int n = gpu_nodes();
    if (n < 1) {
        snprintf(why, why_len, "no ROCm-capable GPU");
        return 0;
    }
    snprintf(why, why_len, "%d ROCm GPU(s)", n);
    return 20;
}
