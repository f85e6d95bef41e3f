/* Running each plugin's init in a child process before the tool's own context loads
 * it (plugin_probe.c): plugins run in-process by design, but opreg info (and opreg
 * check) is what a vendor runs on an untrusted build, and must outlive a plugin that
 * crashes or hangs in init. */
#ifndef OPREG_PLUGIN_PROBE_H
#define OPREG_PLUGIN_PROBE_H

#include <opreg/opreg.h>

typedef enum probe_verdict {
    PROBE_OK,        /* the child made its context (loaded or refused: no matter) and freed it */
    PROBE_CRASHED,   /* the child died of a signal, or exited without reporting */
    PROBE_TIMED_OUT  /* the child was still running at the time limit (killed) */
} probe_verdict;

typedef struct probe_result {
    char *path;          /* the plugin file, as opr_plugin_files gives it */
    probe_verdict verdict;
    int signal;          /* PROBE_CRASHED by a signal: its number, else 0 */
    char message[128];   /* PROBE_OK: empty; else "init crashed (SIGSEGV)", "init timed out after 10 s" */
} probe_result;

/* The default time limit of one plugin's probe, in seconds. */
#define PROBE_TIMEOUT_DEFAULT 10.0

/* Probes path: a child process creates a context with the built-in YAML (opts'
 * yaml_dir, skip_builtin_yaml) and that plugin alone, frees it and reports through a
 * pipe; the parent waits at most timeout_s seconds. Fills *r (r->path is not set).
 * Returns 0, or -1 when no child could be started (errno; *r says so). */
int probe_plugin(const char *path, const opr_ctx_opts *opts, double timeout_s, probe_result *r);

/* Probes every plugin file opr_ctx_new(opts) would open (opr_plugin_files), one child
 * each. *out (n entries) is freed with probe_results_free. OPR_OK or the error of
 * opr_plugin_files (OPR_ERR_NOMEM) with opr_last_error set. */
int probe_plugins(const opr_ctx_opts *opts, double timeout_s, probe_result **out, int *n);
void probe_results_free(probe_result *r, int n);

/* Creates the context opts describe with every plugin whose probe did not come back
 * OK refused with the probe's message (opr_plugin_refuse): listed, never loaded; the
 * others load as opr_ctx_new would load them. NULL with opr_last_error on failure. */
opr_ctx *probe_ctx_new(const opr_ctx_opts *opts, const probe_result *r, int n);

/* cli_ctx_new (cli.h) with every plugin probed in a child process first and those that
 * crashed or hung there refused (listed with the reason, never loaded): for the
 * commands a vendor runs on an untrusted build. Prints the error and returns NULL on
 * failure. */
opr_ctx *cli_ctx_new_isolated(int argc, char **argv, double timeout_s);
#endif
