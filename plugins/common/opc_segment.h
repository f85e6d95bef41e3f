/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the offsets of the
 * segment kernels behind jagged tensors (segment_sum, ..., padded_to_jagged), checked the
 * same way on every backend before any row is touched. */
#ifndef OPREG_OPC_SEGMENT_H
#define OPREG_OPC_SEGMENT_H

#include "opc_why.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Checks host offsets o[0..nseg]: 0 first, never decreasing, `total` last, and no segment
 * longer than max_len when max_len >= 0. False with the message in why. */
static inline bool opc_offsets_check(const char *op, const int64_t *o, int64_t nseg, int64_t total, int64_t max_len,
                                     char *why, size_t why_size)
{
    const char *bad = NULL;
    int64_t at = 0;
    if (o[0] != 0) bad = "offsets must start at 0";
    for (int64_t i = 0; i < nseg && !bad; i++) {
        at = i + 1;
        if (o[i + 1] < o[i]) bad = "offsets must not decrease";
        else if (o[i + 1] > total) bad = "offsets run past the end of the rows";
        else if (max_len >= 0 && o[i + 1] - o[i] > max_len) bad = "a segment is longer than max_len";
    }
    if (!bad && o[nseg] != total) { bad = "offsets must end at the number of rows"; at = nseg; }
    if (!bad) return true;
    snprintf(why, why_size, "%s: %s (offsets[%lld] = %lld, %lld rows%s)", op, bad, (long long)at, (long long)o[at],
             (long long)total, max_len >= 0 ? ", see max_len" : "");
    return false;
}

#endif
