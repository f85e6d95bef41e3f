/* The supervisor of a conformance run (check_supervisor.h). One worker at a time: the
 * runs are short and the kernels themselves use every core. The worker announces each
 * phase in a shared page rather than through the pipe, so a phase costs a string copy,
 * and the parent can read the last one after the worker is gone. */
#define _GNU_SOURCE
#include "check_supervisor.h"

#include "child_proc.h"

#include <opreg/opreg.h>

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

typedef struct shared_state {
    char phase[512];
    char kernel[192]; /* opr_kernel_trace_set: the kernel running, "" between kernels */
    char fault[96];   /* a fault in a guard page: "writing N bytes past the end of an output" */
} shared_state;

static shared_state *shared;       /* MAP_SHARED: the worker writes, the parent reads */
static shared_state local_state;   /* without fork */
static int emit_fd = -1;           /* the worker's end of the pipe */
static const check_sup *in_process; /* --no-fork: records go straight to take() */

_Static_assert(sizeof(check_record) <= PIPE_BUF, "a record must arrive in one write");

void check_emit(const check_record *r)
{
    if (in_process) { in_process->take(r, in_process->data); return; }
    const char *p = (const char *)r;
    size_t left = sizeof *r;
    while (left) { /* one write (<= PIPE_BUF) unless interrupted */
        ssize_t n = write(emit_fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3); /* the parent is gone */
        p += n;
        left -= (size_t)n;
    }
}

void check_phase(const char *fmt, ...)
{
    shared_state *s = shared ? shared : &local_state;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->phase, sizeof s->phase, fmt, ap);
    va_end(ap);
}

char *check_kernel_slot(size_t *len)
{
    *len = sizeof local_state.kernel;
    return (shared ? shared : &local_state)->kernel;
}

static void unit_record(const check_sup *s, int u, check_record *r)
{
    memset(r, 0, sizeof *r);
    r->kind = CR_UNIT_BEGIN;
    r->unit = u;
    r->dtype = -1;
    r->sample = -1;
    s->describe_unit(u, r, s->data);
}

/* Appends the decimal digits of v to p; returns the new end. */
static char *put_u64(char *p, uint64_t v)
{
    char digits[24];
    int n = 0;
    do digits[n++] = (char)('0' + v % 10); while ((v /= 10));
    while (n) *p++ = digits[--n];
    return p;
}

static char *put_str(char *p, const char *s)
{
    while (*s) *p++ = *s++;
    return p;
}

/* SIGSEGV/SIGBUS in the worker: a fault in the guard pages after an output
 * (opr_kernel_guard_overrun) is described in the shared page for the parent. Returning
 * retries the access with the default action back (SA_RESETHAND), which ends the
 * worker with the same signal; a signal sent rather than caused is sent again. Only
 * async-signal-safe work here. */
static void on_fault(int sig, siginfo_t *si, void *context)
{
    if (si->si_code <= 0) { /* sent (raise, kill): returning would not repeat it */
        raise(sig);
        return;
    }
    int64_t past = opr_kernel_guard_overrun(si->si_addr);
    if (past < 0 || !shared) return;
    const char *access = "reading or writing ";
#if defined(__x86_64__)
    const ucontext_t *uc = context;
    access = uc->uc_mcontext.gregs[REG_ERR] & 2 ? "writing " : "reading "; /* page-fault error code: W */
#else
    (void)context;
#endif
    char *p = put_str(shared->fault, access);
    p = put_u64(p, (uint64_t)past);
    p = put_str(p, past == 1 ? " byte" : " bytes");
    p = put_str(p, " past the end of an output (guard page)");
    *p = 0;
}

static void run_worker(const check_sup *s, int first, int fd)
{
    emit_fd = fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    for (int u = first; u < s->nunits; u++) {
        check_record r;
        unit_record(s, u, &r);
        check_phase("unit start");
        check_emit(&r);
        s->run_unit(u, s->data);
        unit_record(s, u, &r);
        r.kind = CR_UNIT_END;
        check_emit(&r);
    }
}

/* Reads one whole record; 1 on success, 0 at end of file, -1 on error or when the rest
 * of a begun record does not come by deadline. */
static int read_record(int fd, check_record *r, double deadline)
{
    char *p = (char *)r;
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fd, p + got, sizeof *r - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) { /* the rest of a record a kernel cut short (fd non-blocking): not for ever */
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int wait = child_wait_ms(deadline);
            if (wait == 0 || (poll(&pfd, 1, wait) == 0 && deadline > 0 && child_now() >= deadline)) return -1;
            continue;
        }
        if (n < 0) return -1;
        if (n == 0) return got ? -1 : 0;
        got += (size_t)n;
    }
    return 1;
}

static void lost_unit(const check_sup *s, int u, check_verdict v, const char *why)
{
    check_record r;
    unit_record(s, u, &r);
    r.kind = CR_RESULT;
    r.verdict = v;
    r.max_error = r.rtol = r.atol = (double)NAN;
    snprintf(r.phase, sizeof r.phase, "unit");
    const char *phase = shared->phase[0] ? shared->phase : "start-up", *kernel = shared->kernel;
    size_t op_len = strcspn(kernel, " ");
    /* a kernel of another op than the phase's (an op a formula calls, a fused kernel) */
    if (kernel[0] && (strncmp(phase, kernel, op_len) || phase[op_len] != ' '))
        snprintf(r.message, sizeof r.message, "%s in kernel %.190s, during %.500s", why, kernel, phase);
    else
        snprintf(r.message, sizeof r.message, "%s in %.500s", why, phase);
    s->take(&r, s->data);
}

static const char *signal_name(int sig)
{
    static char buf[32];
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev) snprintf(buf, sizeof buf, "SIG%s", abbrev);
    else snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

int check_supervise(const check_sup *s)
{
    if (s->no_fork) {
        in_process = s;
        for (int u = 0; u < s->nunits; u++) {
            check_phase("unit start");
            s->run_unit(u, s->data);
        }
        in_process = NULL;
        return 0;
    }
    shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) { shared = NULL; return -1; }
    int next = 0;
    while (next < s->nunits) {
        memset(shared, 0, sizeof *shared);
        child_proc w;
        int worker_fd = -1;
        int spawned = child_spawn(&w, true, &worker_fd);
        if (spawned < 0) {
            munmap(shared, sizeof *shared);
            shared = NULL;
            return -1;
        }
        if (spawned > 0) {
            run_worker(s, next, worker_fd);
            fflush(stdout); /* what a kernel printed goes to the relay, not lost */
            _exit(0);
        }
        int current = -1; /* the unit begun and not ended */
        /* Every wait has a deadline: a unit's from its start, and the worker's start-up
         * and the gaps between units get one too (a plugin's fork handler runs there). */
        const double limit = s->timeout_s > 0 ? s->timeout_s : 0;
        double deadline = limit > 0 ? child_now() + limit : 0;
        bool timed_out = false;
        while (w.fd >= 0) {
            struct pollfd pfd[2] = {{.fd = w.fd, .events = POLLIN}, {.fd = w.out_fd, .events = POLLIN}};
            int pr = poll(pfd, w.out_fd >= 0 ? 2 : 1, child_wait_ms(deadline));
            if (pr < 0 && errno == EINTR) continue;
            if (pr < 0) break;
            if (pr == 0) {
                if (deadline > 0 && child_now() >= deadline) { timed_out = true; break; }
                continue; /* a long deadline is waited for in steps */
            }
            if (w.out_fd >= 0 && pfd[1].revents) child_relay(&w);
            if (!pfd[0].revents) continue;
            check_record r;
            if (read_record(w.fd, &r, deadline) <= 0) break; /* closed: the worker is reaped below, on the same deadline */
            if (r.kind == CR_UNIT_BEGIN || r.kind == CR_UNIT_END) {
                if (r.unit < 0 || r.unit >= s->nunits) break; /* not a record of ours: treat as a lost worker */
                if (limit > 0) deadline = child_now() + limit;
                if (r.kind == CR_UNIT_BEGIN) current = r.unit;
                else { current = -1; next = r.unit + 1; }
                continue;
            }
            s->take(&r, s->data);
        }
        int status = 0;
        if (child_reap(&w, deadline, &status)) timed_out = true;
        if (current < 0 && !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue; /* done */
        int lost = current >= 0 ? current : next;
        if (lost >= s->nunits) break;
        char why[160];
        if (timed_out) snprintf(why, sizeof why, "timed out after %g s", s->timeout_s);
        else if (WIFSIGNALED(status) && shared->fault[0])
            snprintf(why, sizeof why, "crashed (%s) %.96s", signal_name(WTERMSIG(status)), shared->fault);
        else if (WIFSIGNALED(status)) snprintf(why, sizeof why, "crashed (%s)", signal_name(WTERMSIG(status)));
        else snprintf(why, sizeof why, "the worker exited with status %d", WEXITSTATUS(status));
        lost_unit(s, lost, timed_out ? CV_TIMEOUT : CV_CRASHED, why);
        next = lost + 1;
    }
    munmap(shared, sizeof *shared);
    shared = NULL;
    return 0;
}
