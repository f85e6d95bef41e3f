/* Runs the units of a conformance run in supervised worker processes, so that a
 * kernel that crashes, aborts or hangs costs one unit, not the report. The parent never
 * runs a kernel: it forks a worker from its loaded context, reads the worker's records
 * from a pipe, and when the worker dies or a unit runs past its time limit, it records
 * the unit as crashed or timed out (naming the phase the worker announced last), and
 * forks a fresh worker for the next unit. */
#ifndef OPREG_CHECK_SUPERVISOR_H
#define OPREG_CHECK_SUPERVISOR_H

#include "check_record.h"

#include <stdbool.h>
#include <stddef.h>

/* The per-unit time limit of opreg check and opreg gradcheck (--timeout), in seconds. */
#define CHECK_TIMEOUT_DEFAULT_S 300

typedef struct check_sup {
    int nunits;
    double timeout_s;   /* per unit; <= 0: none */
    bool no_fork;       /* run every unit in this process (for gdb) */
    /* Runs unit u (in the worker); reports through check_emit. */
    void (*run_unit)(int u, void *data);
    /* Receives each record in the parent, in the order sent; for a crashed or timed
     * out unit, a CV_CRASHED / CV_TIMEOUT record with the unit's op and backend as
     * describe_unit fills them. */
    void (*take)(const check_record *r, void *data);
    /* Fills op, dev_type (and whatever else) of a record about unit u. */
    void (*describe_unit)(int u, check_record *r, void *data);
    void *data;
} check_sup;

/* Runs every unit; returns 0, or -1 when no worker could be started (errno). */
int check_supervise(const check_sup *s);

/* Worker side: sends r to the parent (or hands it to take() without fork). */
void check_emit(const check_record *r);
/* Worker side: what the worker is doing now, e.g. "mul forward, sample 0, f32"; the
 * parent names it when the worker dies or hangs. */
void check_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Worker side: a buffer the parent can read after the worker is gone, for
 * opr_kernel_trace_set; *len gets its size. */
char *check_kernel_slot(size_t *len);

#endif
