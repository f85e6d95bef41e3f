/* The records of a conformance run (opreg check, opreg gradcheck): what a worker
 * found, one record per op x backend x dtype x sample/variant x candidate. Workers send
 * them to the supervising parent through a pipe as fixed-size structs (smaller than
 * PIPE_BUF, so each write arrives whole); the parent prints the table, the JSON and the
 * JUnit file from them (docs/conformance.md describes each field). */
#ifndef OPREG_CHECK_RECORD_H
#define OPREG_CHECK_RECORD_H

#include <stddef.h>
#include <stdint.h>

typedef enum check_verdict {
    CV_PASS,        /* compared, within tolerance */
    CV_FAIL,        /* compared, wrong (message and culprit say how) */
    CV_DEP,         /* wrong only through an op its formula calls that fails here */
    CV_NI,          /* not implemented: no kernel registered for this dtype or candidate */
    CV_UNSUPPORTED, /* a registered kernel returned OPR_ERR_UNSUPPORTED for these arguments */
    CV_DECLINED,    /* a kernel's supports (ABI 2.2) declined these arguments in advance: not a failure */
    CV_NOT_CHECKED, /* nothing could be compared (the reason is the message) */
    CV_CRASHED,     /* the worker died (signal or abort) in this unit */
    CV_TIMEOUT,     /* the unit ran past its time limit */
    CV_COUNT
} check_verdict;

/* Lower-case names, as in the JSON ("pass", "fail", ...). */
const char *check_verdict_name(check_verdict v);
/* Appends item to the ", "-separated list (room size) unless it is there already. */
void check_list_add(char *list, size_t size, const char *item);

typedef enum check_kind {
    CR_RESULT,     /* a verdict */
    CR_UNIT_BEGIN, /* the worker starts unit `unit` */
    CR_UNIT_END,   /* the worker finished unit `unit` */
    CR_PERF        /* --perf: timing of the large variant (ns, ref_ns) */
} check_kind;

typedef struct check_record {
    int kind;          /* check_kind */
    int unit;          /* index of the unit of work (op x backend) */
    int op;            /* index of the op in the context (opr_op_at) */
    int dev_type;      /* backend under test */
    int ordinal;       /* and its ordinal */
    int dtype;         /* opr_dtype, -1: not tied to one */
    int sample;        /* -1: not tied to one */
    int count;         /* how many comparisons the record stands for (masks x outputs) */
    int verdict;       /* check_verdict */
    char variant[48];  /* "" for the sample as written, else e.g. "transposed self" */
    char phase[16];    /* "forward", "backward", "unit" */
    char candidate[96];/* backward: the candidate's label, "plan chosen by cost" */
    char culprit[96];  /* FAIL: "derivative formula vfma", "fused backward kernel X", ... */
    double max_error;  /* forward: largest |got - reference|; NaN where not measured */
    double rtol, atol; /* the tolerance applied; NaN where not measured */
    double ns, ref_ns; /* CR_PERF: time on the backend and on the CPU */
    char message[2048];
} check_record;

#endif
