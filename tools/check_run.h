/* The work of one unit of `opreg check` (one op on one backend), run in a worker:
 * every sample and layout/size variant of the forward in every dtype against the CPU
 * in f64, then every derivative candidate against finite differences, each verdict
 * sent as a check_record. */
#ifndef OPREG_CHECK_RUN_H
#define OPREG_CHECK_RUN_H

#include "check_record.h"

#include <opreg/opreg.h>

#include <stdbool.h>

/* The backends under test, as columns: a device type on one ordinal (--ordinals all
 * gives a device type a column per ordinal). */
#define CHECK_MAX_TYPES 32

typedef struct check_cfg {
    opr_ctx *ctx;
    int types[CHECK_MAX_TYPES], ntypes;  /* the backends under test: a column's device type */
    int ordinals[CHECK_MAX_TYPES];       /* and its ordinal (--backend xpu:1, --ordinals all) */
    const opr_op **ops;                  /* the selected ops, in registry order */
    int nops;
    bool backward;                       /* false: --no-backward */
    bool perf;                           /* --perf: time the large variant too */
    bool variants;                       /* false: --no-variants, the samples as written */
    bool large;                          /* false: --no-large, the variants but "large" */
    unsigned dtype_mask;                 /* bit per opr_dtype selected (--dtype); 0: all */
    int only_sample;                     /* --sample N: that sample alone; -1: all */
    const char *only_variant;            /* --variant LABEL: that variant alone ("" as written); NULL: all */
    const struct check_rerun *rerun;     /* --rerun-failed: the failed records to rerun alone (check_rerun.h); NULL: all */
} check_cfg;

/* Runs unit u = op index * ntypes + backend index. */
void check_run_unit(const check_cfg *c, int u);
/* Fills the op and backend of a record about unit u. */
void check_describe_unit(const check_cfg *c, int u, check_record *r);
/* Whether record r is about backend column k (its device type and ordinal). */
static inline bool check_record_on(const check_cfg *c, int k, const check_record *r)
{
    return r->dev_type == c->types[k] && r->ordinal == c->ordinals[k];
}

#endif
