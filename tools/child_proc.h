/* Child processes that run untrusted code (a plugin's init, a kernel) for the CLI's
 * supervisors (check_supervisor.c, plugin_probe.c). One mechanism owns every fd and
 * process such a child makes, whatever the code in it does:
 *   - the child runs in a process group of its own, killed as a whole, so a process a
 *     kernel starts in the background dies with its worker;
 *   - every fd made here is close-on-exec in the parent, so nothing the child execs
 *     holds the parent's pipe open;
 *   - the child's stdout and stderr are a pipe of their own that the parent relays to
 *     its stderr (never its stdout: that is the report), its stdin /dev/null;
 *   - every wait has a deadline, whether or not the child closed its pipe.
 * Linux (POSIX with pipe2). */
#ifndef OPREG_CHILD_PROC_H
#define OPREG_CHILD_PROC_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct child_proc {
    pid_t pid;   /* also the id of its process group */
    int fd;      /* the parent's end of the message pipe (non-blocking), -1 once closed */
    int out_fd;  /* the parent's end of the child's stdout/stderr, -1 once closed or not relayed */
} child_proc;

/* Forks a child: returns 1 in the child, with *child_fd the write end of the message
 * pipe (its stdout and stderr redirected as relay_output says: true, to the relay
 * pipe; false, stdout to /dev/null and stderr kept); 0 in the parent with c filled; -1
 * with errno when no child could be made (nothing left open). */
int child_spawn(child_proc *c, bool relay_output, int *child_fd);

/* Monotonic seconds, the clock of every deadline here. */
double child_now(void);

/* The milliseconds left until deadline for poll() (-1: deadline <= 0, none; capped at
 * a minute, so that a far deadline cannot overflow). */
int child_wait_ms(double deadline);

/* Copies what the child has written to its stdout/stderr to the parent's stderr; call
 * when out_fd polls readable. Closes out_fd at end of file. */
void child_relay(child_proc *c);

/* Reaps the child, waiting at most until deadline (<= 0: no limit); on expiry the
 * group is killed first. Kills the rest of the group in any case (a background
 * process the child left) and closes c's fds. Returns 1 when the deadline expired,
 * else 0; *status gets the waitpid status. */
int child_reap(child_proc *c, double deadline, int *status);

#endif
