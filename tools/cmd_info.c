/* opreg info: what the loader found. */
#include "cli.h"

#include <opreg/plugin.h>
#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg info [--plugin PATH]...\n\n"
               "Lists every plugin file considered (explicit paths, OPREG_PLUGIN_PATH, the plugin\n"
               "directory of libopreg.so's installation, or the build tree's), with its name,\n"
               "version, ABI, probe score and whether it was loaded or why not; then the devices\n"
               "and the number of ops with kernels.\n");
        return 0;
    }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    unsigned abi_major, abi_minor;
    opr_abi_version(&abi_major, &abi_minor); /* the library's, which may differ from this header's */
    printf("opreg %s, plugin ABI %u.%u\n\nplugins:\n", opr_version(), abi_major, abi_minor);
    int n = opr_plugin_candidate_count(ctx);
    if (n == 0) printf("  (none found; set OPREG_PLUGIN_PATH or pass --plugin)\n");
    for (int i = 0; i < n; i++) {
        opr_plugin_candidate c = {.struct_size = sizeof c};
        opr_plugin_candidate_get(ctx, i, &c);
        char guess[64] = "?";
        if (!c.name) { /* init never ran: name it after its file, libopreg_cuda.so -> cuda */
            const char *base = strrchr(c.path, '/') ? strrchr(c.path, '/') + 1 : c.path;
            if (!strncmp(base, "lib", 3)) base += 3;
            if (!strncmp(base, "opreg_", 6)) base += 6;
            snprintf(guess, sizeof guess, "%.*s", (int)strcspn(base, "."), base);
        }
        printf("  %-8s %-8s ABI %u.%u  score %-3d %s\n           %s\n", c.name ? c.name : guess,
               c.version ? c.version : "-", c.abi_major, c.abi_minor, c.score,
               c.loaded ? "loaded" : "not loaded", c.path);
        if (c.why) printf("           %s\n", c.why);
    }
    printf("\ndevices:\n");
    int nops = opr_op_count(ctx);
    for (int t = 0; t < opr_device_type_count(ctx); t++) {
        int with_kernel = 0;
        for (int i = 0; i < nops; i++) with_kernel += opr_op_has_kernel(opr_op_at(ctx, i), t);
        printf("  %-6s %d ordinal(s), %d of %d ops runnable\n", opr_device_type_name(ctx, t),
               opr_device_type_ordinals(ctx, t), with_kernel, nops);
    }
    const char *errs = opr_registry_errors(ctx);
    if (errs[0]) printf("\nop definitions refused:\n%s", errs);
    opr_ctx_free(ctx);
    return 0;
}
