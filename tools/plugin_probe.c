/* Probing plugins in child processes (plugin_probe.h). The child reports its progress
 * through a pipe, one byte per stage ('i': its context was made, so init returned;
 * 'd': the context was freed, so shutdown returned); the parent reads until the pipe
 * closes or the time limit, then reaps the child (child_proc.h: its own process group,
 * killed with whatever it started; stdout to /dev/null, as what the plugin prints is
 * the parent's own load's to print). A plugin that fails or is refused in
 * the child is no concern here: the parent's own load refuses it again with the
 * reason; only what would take the parent down (a signal, exit, a hang) is reported. */
#define _POSIX_C_SOURCE 200809L
#include "plugin_probe.h"

#include "child_proc.h"
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *signal_name(int sig, char *buf, size_t len)
{
    static const struct { int sig; const char *name; } names[] = {
        {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGILL, "SIGILL"}, {SIGFPE, "SIGFPE"},
        {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"}, {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
        {SIGTERM, "SIGTERM"}, {SIGPIPE, "SIGPIPE"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    snprintf(buf, len, "signal %d", sig);
    return buf;
}

static void quiet_log(opr_log_level level, const char *source, const char *message, void *user)
{
    (void)level, (void)source, (void)message, (void)user; /* the parent's own load logs it */
}

/* The child: the plugin alone in a context, made and freed; never returns. */
static void child_run(const char *path, const opr_ctx_opts *opts, int fd)
{
    opr_log_set(quiet_log, NULL);
    const char *paths[1] = {path};
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_builtin_yaml = opts && opts->skip_builtin_yaml,
                      .yaml_dir = opts ? opts->yaml_dir : NULL, .skip_plugin_discovery = true,
                      .plugin_paths = paths, .n_plugin_paths = 1, .yaml_paths = opts ? opts->yaml_paths : NULL,
                      .n_yaml_paths = opts ? opts->n_yaml_paths : 0};
    opr_ctx *ctx = opr_ctx_new(&o);
    if (write(fd, "i", 1) != 1) _exit(3);
    if (ctx) opr_ctx_free(ctx);
    if (write(fd, "d", 1) != 1) _exit(3);
    _exit(0);
}

int probe_plugin(const char *path, const opr_ctx_opts *opts, double timeout_s, probe_result *r)
{
    r->verdict = PROBE_OK;
    r->signal = 0;
    r->message[0] = '\0';
    child_proc c;
    int child_fd = -1;
    int spawned = child_spawn(&c, false, &child_fd); /* the child's stdout goes to /dev/null */
    if (spawned < 0) {
        snprintf(r->message, sizeof r->message, "not probed: %s", strerror(errno));
        return -1;
    }
    if (spawned > 0) child_run(path, opts, child_fd);
    char stage = 0; /* the last stage reported */
    const double deadline = child_now() + timeout_s;
    bool timed_out = false;
    while (c.fd >= 0) {
        int left_ms = child_wait_ms(deadline);
        if (left_ms == 0) break;
        struct pollfd p = {.fd = c.fd, .events = POLLIN};
        int rc = poll(&p, 1, left_ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) continue; /* the deadline comes round */
        char buf[8];
        ssize_t got = read(c.fd, buf, sizeof buf);
        if (got > 0) stage = buf[got - 1];
        else if (got == 0 || (errno != EINTR && errno != EAGAIN)) break;
    }
    /* the same deadline after the pipe closed: a child that closed it and hangs is still timed out */
    int status = 0;
    timed_out = child_reap(&c, deadline, &status);
    const char *what = stage == 'i' ? "shutdown" : "init";
    if (timed_out) {
        r->verdict = PROBE_TIMED_OUT;
        snprintf(r->message, sizeof r->message, "%s timed out after %g s", what, timeout_s);
        return 0;
    }
    char buf[32];
    if (WIFSIGNALED(status)) {
        r->verdict = PROBE_CRASHED;
        r->signal = WTERMSIG(status);
        snprintf(r->message, sizeof r->message, "%s crashed (%s)", what, signal_name(r->signal, buf, sizeof buf));
    } else if (stage != 'd') {
        r->verdict = PROBE_CRASHED;
        snprintf(r->message, sizeof r->message, "%s ended the process (exit status %d)", what,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return 0;
}

int probe_plugins(const opr_ctx_opts *opts, double timeout_s, probe_result **out, int *n)
{
    char **paths;
    int npaths;
    *out = NULL;
    *n = 0;
    int rc = opr_plugin_files(opts, &paths, &npaths);
    if (rc) return rc;
    probe_result *r = calloc((size_t)npaths + 1, sizeof *r);
    if (!r) {
        opr_plugin_files_free(paths, npaths);
        return OPR_ERR_NOMEM;
    }
    for (int i = 0; i < npaths; i++) {
        probe_plugin(paths[i], opts, timeout_s, &r[i]);
        r[i].path = paths[i]; /* taken over */
    }
    free(paths);
    *out = r;
    *n = npaths;
    return OPR_OK;
}

void probe_results_free(probe_result *r, int n)
{
    for (int i = 0; r && i < n; i++) free(r[i].path);
    free(r);
}

opr_ctx *probe_ctx_new(const opr_ctx_opts *opts, const probe_result *r, int n)
{
    opr_ctx_opts bare = {.struct_size = sizeof bare, .skip_plugin_discovery = true};
    if (opts) {
        bare.skip_builtin_yaml = opts->skip_builtin_yaml;
        bare.yaml_dir = opts->yaml_dir;
        bare.yaml_paths = opts->yaml_paths;
        bare.n_yaml_paths = opts->n_yaml_paths;
    }
    opr_ctx *ctx = opr_ctx_new(&bare);
    if (!ctx) return NULL;
    int rc = OPR_OK;
    for (int i = 0; i < n && rc != OPR_ERR_NOMEM; i++)
        if (r[i].verdict != PROBE_OK) rc = opr_plugin_refuse(ctx, r[i].path, r[i].message);
    /* then what opr_ctx_new does: the explicit paths, then discovery; refusals are
     * listed, only running out of memory fails */
    for (int i = 0; opts && opts->plugin_paths && i < opts->n_plugin_paths && rc != OPR_ERR_NOMEM; i++)
        if (opts->plugin_paths[i]) rc = opr_plugin_load(ctx, opts->plugin_paths[i]);
    if (rc != OPR_ERR_NOMEM && !(opts && opts->skip_plugin_discovery)) rc = opr_plugin_discover(ctx);
    if (rc == OPR_ERR_NOMEM) {
        opr_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* The context of cli_ctx_new, with every plugin probed in a child process first
 * (plugin_probe.h) and those that crashed or hung there refused. */
opr_ctx *cli_ctx_new_isolated(int argc, char **argv, double timeout_s)
{
    const char *paths[CLI_MAX_PLUGINS], *yamls[CLI_MAX_PLUGINS];
    opr_ctx_opts opts = cli_ctx_opts(argc, argv, paths, yamls);
    probe_result *r;
    int n;
    if (probe_plugins(&opts, timeout_s, &r, &n)) {
        fprintf(stderr, "opreg: %s\n", opr_last_error());
        return NULL;
    }
    opr_ctx *ctx = probe_ctx_new(&opts, r, n);
    if (!ctx) fprintf(stderr, "opreg: %s\n", opr_last_error());
    probe_results_free(r, n);
    return ctx;
}
