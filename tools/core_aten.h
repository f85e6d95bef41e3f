/* The Core ATen opset (registry/core_aten.tsv, compiled into the CLI) and opreg's
 * coverage of it: `opreg ops --core-aten`. */
#ifndef OPREG_TOOLS_CORE_ATEN_H
#define OPREG_TOOLS_CORE_ATEN_H

#include <opreg/opreg.h>
#include <stdbool.h>

typedef struct core_aten_entry {
    const char *name;     /* "slice" */
    const char *overload; /* "Tensor"; "" for the default overload */
    const char *schema;   /* as native_functions.yaml writes it */
    bool in_1_13;         /* the same name.overload exists in PyTorch 1.13 */
} core_aten_entry;

extern const core_aten_entry core_aten_list[];
extern const int core_aten_count;

/* Prints one line per overload (defined or missing, its formulas, the device types it
 * runs on, and what is wrong with it), then the totals. Returns the number of defined
 * overloads with a problem (no CPU kernel, no formula where the op is differentiable,
 * argument names other than ATen's), plus the missing ones when require_all. */
int core_aten_report(opr_ctx *ctx, bool require_all);

#endif
