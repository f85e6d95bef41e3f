/* The oneDNN plugin (plugins/onednn) for the benchmarks that run opreg with it over the
 * CPU plugin as well as without it (conv.c, finetune.c): where CMake built it
 * (OPREG_BENCH_ONEDNN_PLUGIN, bench/CMakeLists.txt), and a context that loads it.
 * Header-only (static inline), for the C drivers. */
#ifndef OPREG_BENCH_ONEDNN_H
#define OPREG_BENCH_ONEDNN_H

#include <opreg/opreg.h>

#include <stdio.h>
#include <string.h>

#ifndef OPREG_BENCH_ONEDNN_PLUGIN
#define OPREG_BENCH_ONEDNN_PLUGIN NULL
#endif

/* A context with the oneDNN plugin loaded over the CPU plugin, or NULL (why says why). */
static inline opr_ctx *bench_onednn_ctx(char *why, size_t why_len)
{
    const char *path = OPREG_BENCH_ONEDNN_PLUGIN;
    if (!path) {
        snprintf(why, why_len, "the oneDNN plugin was not built (no libdnnl-dev at configure time)");
        return NULL;
    }
    const opr_ctx_opts o = {.struct_size = sizeof o, .plugin_paths = &path, .n_plugin_paths = 1};
    opr_ctx *ctx = opr_ctx_new(&o);
    opr_kernel_info k = {.struct_size = sizeof k};
    if (!ctx) {
        snprintf(why, why_len, "%s", opr_last_error());
        return NULL;
    }
    /* the figures are only oneDNN's if its kernel is the one that runs */
    if (opr_op_kernel_info(opr_op_find(ctx, "convolution"), OPR_CPU.type, OPR_F32, &k) || !k.plugin ||
        strcmp(k.plugin, "onednn")) {
        snprintf(why, why_len, "%s did not load or does not run f32 convolution (plugin %s does)", path,
                 k.plugin ? k.plugin : "none");
        opr_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

#endif
