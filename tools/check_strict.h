/* opreg check --strict: what a green run would otherwise hide, found in the parent
 * after the run from the context and the records (check_strict.c). Each finding fails
 * the run:
 *   - a loaded plugin skipped kernels for ops the registry does not define (a misspelt
 *     op name: the kernel is not registered, the op shows n/i);
 *   - a selected op with a kernel on a backend under test of which nothing was compared
 *     (no samples, or every record n/i, declined or not checked);
 *   - a kernel registered on a backend under test for a dtype no comparison ran in, and
 *     a fused backward kernel no comparison ran (with the backward checked).
 * The CPU checked against itself has no coverage findings: its f64 kernels are the
 * reference. */
#ifndef OPREG_CHECK_STRICT_H
#define OPREG_CHECK_STRICT_H

#include "check_run.h"

#include <stddef.h>

/* Calls finding(message, data) for each finding, in a stable order; returns how many. */
int check_strict(const check_cfg *c, const check_record *recs, size_t nrecs,
                 void (*finding)(const char *message, void *data), void *data);

#endif
