/* Child processes for untrusted code (child_proc.h). */
#define _GNU_SOURCE
#include "child_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The process group of the child alive now (one at a time), for the signal handler:
 * a parent stopped by ^C or a CI's SIGTERM takes its worker down with it, or a hung
 * worker would outlive the run (it is not in the terminal's foreground group). */
static volatile sig_atomic_t live_group;

static void on_stop_signal(int sig)
{
    if (live_group > 0) kill(-(pid_t)live_group, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void forward_stop_signals(void)
{
    static bool done;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    if (done) return;
    done = true;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) || old.sa_handler != SIG_DFL) continue; /* ignored or handled: keep */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

double child_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int child_wait_ms(double deadline)
{
    if (deadline <= 0) return -1;
    double left = deadline - child_now();
    if (left <= 0) return 0;
    return left > 60 ? 60000 : (int)(left * 1000) + 1;
}

static void close_pair(int *fds)
{
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
}

int child_spawn(child_proc *c, bool relay_output, int *child_fd)
{
    int msg[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipe2(msg, O_CLOEXEC)) return -1;
    if (relay_output && pipe2(out, O_CLOEXEC)) {
        int e = errno;
        close_pair(msg);
        errno = e;
        return -1;
    }
    /* the parent's ends never block: a writer the group left behind, or a kernel writing
     * half a record into the message pipe, must not hold the parent past its deadline */
    fcntl(msg[0], F_SETFL, fcntl(msg[0], F_GETFL) | O_NONBLOCK);
    if (out[0] >= 0) fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    forward_stop_signals();
    fflush(stdout); /* or the child's copy of the buffers is written twice */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close_pair(msg);
        close_pair(out);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        close(msg[0]);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) dup2(null, STDIN_FILENO); /* dup2's copy is inherited, as stdin should be */
        if (relay_output) {
            close(out[0]);
            dup2(out[1], STDOUT_FILENO);
            dup2(out[1], STDERR_FILENO);
            close(out[1]);
        } else if (null >= 0) {
            dup2(null, STDOUT_FILENO);
        }
        if (null > STDERR_FILENO) close(null);
        *child_fd = msg[1];
        return 1;
    }
    setpgid(pid, pid); /* as the child does: whichever runs first, the group exists before we kill it */
    live_group = pid;
    close(msg[1]);
    if (out[1] >= 0) close(out[1]);
    c->pid = pid;
    c->fd = msg[0];
    c->out_fd = out[0];
    return 0;
}

void child_relay(child_proc *c)
{
    char buf[4096];
    for (int chunk = 0; chunk < 16; chunk++) { /* bounded: a child that never stops writing cannot hold us here */
        ssize_t n = read(c->out_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) {
            close(c->out_fd);
            c->out_fd = -1;
            return;
        }
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(STDERR_FILENO, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break; /* our stderr is gone: drop it */
            done += w;
        }
    }
}

int child_reap(child_proc *c, double deadline, int *status)
{
    int timed_out = 0, nap_ms = 1;
    for (;;) {
        siginfo_t si;
        si.si_pid = 0;
        /* WNOWAIT: an exited child stays a zombie, so its pid (the group's id) cannot be
         * reused before the group is killed below */
        int rc = waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0 || si.si_pid) break;
        if (deadline > 0 && child_now() >= deadline) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = c->out_fd, .events = POLLIN};
        int wait = child_wait_ms(deadline);
        if (wait < 0 || wait > nap_ms) wait = nap_ms;
        if (poll(&p, c->out_fd >= 0 ? 1 : 0, wait) > 0) child_relay(c);
        if (nap_ms < 50) nap_ms *= 2; /* a child that closed its pipe usually exits at once */
    }
    kill(-c->pid, SIGKILL); /* the child on expiry, and in any case what it left in its group */
    while (waitpid(c->pid, status, 0) < 0 && errno == EINTR) {}
    live_group = 0;
    if (c->out_fd >= 0) child_relay(c); /* what is there now; never waits for the rest */
    if (c->out_fd >= 0) close(c->out_fd);
    if (c->fd >= 0) close(c->fd);
    c->out_fd = c->fd = -1;
    return timed_out;
}
