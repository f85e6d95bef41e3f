/* opreg check --rerun-failed REPORT (check_rerun.c): the records that failed in a
 * previous `--format json` report, read back as a selection, so that a CI reruns
 * exactly those (with -v, under a debugger with --no-fork) rather than the whole run. */
#ifndef OPREG_CHECK_RERUN_H
#define OPREG_CHECK_RERUN_H

#include "check_run.h"

#include <stdbool.h>
#include <stddef.h>

/* One failed record of the report, as the report names it. */
typedef struct check_rerun_rec {
    const opr_op *op;
    int dev_type;
    int ordinal;        /* "vdev:1" in the record's backend */
    int dtype;          /* opr_dtype, -1: the record is not tied to one */
    int sample;         /* -1: the whole unit (a crash or a time-out) */
    char variant[48];
    char phase[16];     /* "forward", "backward", "unit" */
    char candidate[96]; /* "" for none */
} check_rerun_rec;

typedef struct check_rerun check_rerun;
struct check_rerun {
    check_rerun_rec *recs;
    int n;
};

/* Reads the JSON report at path against ctx: 0 and *out (check_rerun_free), or 2 with
 * the reason in err (room len): not a `opreg check --format json` report, or naming an
 * op or a backend that ctx does not have. A report without failures gives n == 0. */
int check_rerun_load(opr_ctx *ctx, const char *path, check_rerun **out, char *err, size_t len);
void check_rerun_free(check_rerun *r);

/* Whether the run selects this piece of work: always without --rerun-failed, else when
 * a failed record names it (candidate and variant "" for none). */
bool check_rerun_wants(const check_cfg *c, const opr_op *op, opr_device dev, const char *phase, int dtype, int sample,
                       const char *variant, const char *candidate);
/* Whether anything of op on dev is selected (a cell of the table that is not). */
bool check_rerun_unit(const check_cfg *c, const opr_op *op, opr_device dev);

#endif
