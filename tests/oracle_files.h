/* Running a PyTorch script of tests/oracle on tensors and reading back what it wrote
 * (the file format of oracle/oracle_io.py), for suites that compare values with
 * PyTorch. The python3 is found as test_oracle.c describes: $OPREG_PYTHON when set,
 * else python3 on PATH, then /usr/bin/python3, whichever imports torch. */
#ifndef OPREG_TEST_ORACLE_FILES_H
#define OPREG_TEST_ORACLE_FILES_H

#include <opreg/opreg.h>

#include <stdbool.h>

#define OF_MAXREC 128

typedef struct of_rec {
    char name[64];
    int ndim;
    int64_t shape[OPR_MAX_DIMS];
    int64_t numel;
    double *v;
} of_rec;

typedef struct of_recs {
    of_rec r[OF_MAXREC];
    int n;
} of_recs;

/* Finds a python3 with torch; false (the interpreters tried in why) when none has it. */
bool of_find_python(char *why, size_t why_len);
/* The interpreter of_find_python found ("" before it found one), for a suite's log. */
const char *of_python(void);
/* Runs `dir`/`script`.py on the named f64 / i64 tensors (the test fails when it fails)
 * and reads what it wrote into out; of_recs_free releases it. */
void of_run(const char *dir, const char *script, const char *const *names, opr_tensor *const *ts, int n, of_recs *out);
void of_recs_free(of_recs *rs);
/* Asserts that t (any dtype) has the shape of record `name` and its values within
 * tol * (1 + |reference|). */
void of_expect_close(const of_recs *rs, const char *name, const opr_tensor *t, double tol);

/* Whether a NaN in opreg and in torch at the same place counts as equal: it does where
 * PyTorch's own value may be NaN (a loss averaged over no rows is 0/0). */
typedef enum of_nan { OF_NAN_FAILS, OF_NAN_MATCHES_NAN } of_nan;

/* of_expect_close for suites that check many cases with one record name: `what` (the
 * program or case) leads each failure message; nan says how NaN compares. */
void of_expect_close_case(const of_recs *rs, const char *what, const char *name, const opr_tensor *t, double tol,
                          of_nan nan);

#endif
