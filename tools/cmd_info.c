/* opreg info: what the loader found; each plugin tried in a child process first. */
#include "cli.h"
#include "plugin_probe.h"

#include <opreg/dist.h>
#include <opreg/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_info(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg info [--plugin PATH]... [--yaml FILE]... [--no-isolate] [--probe-timeout SECONDS]\n"
               "                  [--require PLUGIN]...\n\n"
               "Lists every plugin file considered (explicit paths, OPREG_PLUGIN_PATH, the plugin\n"
               "directory of libopreg.so's installation, or the build tree's), with its name,\n"
               "version, ABI, probe score and whether it was loaded or why not (or its remarks:\n"
               "kernels skipped or not replaced, device warnings); then the devices and the number\n"
               "of ops that can run on each; then every (op, device, dtype) whose kernel shadows\n"
               "another plugin's, naming both (explicit overrides, kernels kept from the plugin\n"
               "loaded first, and a device's own plugin's kernels over others added to it).\n\n"
               "Each plugin file is first loaded alone in a child process: one whose init (or\n"
               "shutdown) crashes, ends the process or runs past the time limit is listed as\n"
               "\"init crashed (SIGSEGV)\", \"init timed out after N s\" and so on, and is not\n"
               "loaded; the others load as usual.\n\n"
               "  --no-isolate           load the plugins in this process only, without the\n"
               "                         child processes (a crashing plugin takes info down)\n"
               "  --probe-timeout S      time limit of one plugin's child, in seconds (default %g)\n"
               "  --require PLUGIN       exit 1 unless a plugin of that name is loaded (for CI: a\n"
               "                         plugin that was refused or crashed fails the step)\n\n"
               "Exit status: 0 when the listing was printed, whatever the plugins did (a refused,\n"
               "crashed or timed-out plugin is listed, not an error); 1 when no context could be\n"
               "made or a --require'd plugin is not loaded; 2 for a bad option.\n", PROBE_TIMEOUT_DEFAULT);
        return 0;
    }
    bool isolate = true;
    double timeout_s = PROBE_TIMEOUT_DEFAULT;
    const char *required[CLI_MAX_PLUGINS];
    int nrequired = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--plugin") || !strcmp(a, "--yaml") || !strcmp(a, "--require")) {
            if (i + 1 >= argc) { fprintf(stderr, "opreg info: %s needs a value (see --help)\n", a); return 2; }
            if (!strcmp(a, "--require") && nrequired < CLI_MAX_PLUGINS) required[nrequired++] = argv[i + 1];
            i++;
        } else if (!strcmp(argv[i], "--no-isolate")) {
            isolate = false;
        } else if (!strcmp(argv[i], "--probe-timeout")) {
            char *end = NULL;
            timeout_s = i + 1 < argc ? strtod(argv[++i], &end) : 0;
            if (!end || *end || !(timeout_s > 0 && timeout_s < 1e6)) {
                fprintf(stderr, "opreg info: --probe-timeout needs a number of seconds > 0\n");
                return 2;
            }
        } else {
            fprintf(stderr, "opreg info: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    opr_ctx *ctx = isolate ? cli_ctx_new_isolated(argc, argv, timeout_s) : cli_ctx_new(argc, argv);
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
        struct stat sb;
        if (!c.name && !stat(c.path, &sb) && S_ISDIR(sb.st_mode)) { /* a directory refused as a whole */
            snprintf(guess, sizeof guess, "(dir)");
        } else if (!c.name) { /* init never ran: name it after its file, libopreg_cuda.so -> cuda */
            const char *base = strrchr(c.path, '/') ? strrchr(c.path, '/') + 1 : c.path;
            if (!strncmp(base, "lib", 3)) base += 3;
            if (!strncmp(base, "opreg_", 6)) base += 6;
            snprintf(guess, sizeof guess, "%.*s", (int)strcspn(base, "."), base);
        }
        char score[16] = "-"; /* no probe ran */
        if (c.score >= 0) snprintf(score, sizeof score, "%d", c.score);
        printf("  %-8s %-8s ABI %u.%u  score %-3s %s\n           %s\n", c.name ? c.name : guess,
               c.version ? c.version : "-", c.abi_major, c.abi_minor, score,
               c.loaded ? "loaded" : "not loaded", c.path);
        if (c.why) printf("           %s\n", c.why);
    }
    printf("\ndevices:\n");
    int nops = opr_op_count(ctx);
    const opr_op *copy = opr_op_find(ctx, "copy_");
    for (int t = 0; t < opr_device_type_count(ctx); t++) {
        int with_kernel = 0;
        for (int i = 0; i < nops; i++) with_kernel += opr_op_has_kernel(opr_op_at(ctx, i), t);
        /* the device contract (plugin.h): without copy_, views cannot be read back and
         * are not counted */
        bool no_copy = t > 0 && !opr_op_has_kernel(copy, t);
        printf("  %-6s %d ordinal(s), %d of %d ops runnable%s\n", opr_device_type_name(ctx, t),
               opr_device_type_ordinals(ctx, t), with_kernel, nops,
               no_copy ? " (no copy_ kernel: views cannot be read back, not counted)" : "");
    }
    char why[256];
    if (opr_dist_available(ctx, why, sizeof why))
        printf("\nprocess groups: available, %s; mpirun -np N starts a world of N\n", why);
    else
        printf("\nprocess groups: none (%s)\n", why);
    bool header = false;
    for (int i = 0; i < nops; i++)
        for (int t = 0; t < opr_device_type_count(ctx); t++)
            for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
                opr_kernel_info k = {.struct_size = sizeof k};
                if (opr_op_kernel_info(opr_op_at(ctx, i), t, (opr_dtype)dt, &k) || !k.shadowed) continue;
                if (!header) printf("\nkernel precedence (op (device, dtype): the plugin whose kernel runs):\n");
                header = true;
                if (k.overrides)
                    printf("  %s (%s, %s): plugin %s overrides plugin %s\n", opr_op_name(opr_op_at(ctx, i)),
                           opr_device_type_name(ctx, t), opr_dtype_name((opr_dtype)dt), k.plugin, k.shadowed);
                else
                    printf("  %s (%s, %s): plugin %s runs it; plugin %s's is not used\n",
                           opr_op_name(opr_op_at(ctx, i)), opr_device_type_name(ctx, t),
                           opr_dtype_name((opr_dtype)dt), k.plugin, k.shadowed);
            }
    const char *errs = opr_registry_errors(ctx);
    if (errs[0]) printf("\nop definitions refused:\n%s", errs);
    int status = 0;
    for (int r = 0; r < nrequired; r++) {
        const char *why = "no plugin of that name was found";
        bool loaded = false;
        for (int i = 0; i < n && !loaded; i++) {
            opr_plugin_candidate c = {.struct_size = sizeof c};
            if (opr_plugin_candidate_get(ctx, i, &c) || !c.name || strcmp(c.name, required[r])) continue;
            loaded = c.loaded;
            if (!loaded && c.why) why = c.why;
        }
        if (!loaded) {
            fprintf(stderr, "opreg info: required plugin %s is not loaded: %s\n", required[r], why);
            status = 1;
        }
    }
    opr_ctx_free(ctx);
    return status;
}
