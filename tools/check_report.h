/* What `opreg check` prints from the records of its workers: the table (a row per op,
 * a cell per backend, notes under the row in the table's order, a legend, a summary),
 * the JSON document (--format json) and the JUnit file (--junit). */
#ifndef OPREG_CHECK_REPORT_H
#define OPREG_CHECK_REPORT_H

#include "check_run.h"

#include <stdio.h>

typedef struct check_report check_report;

typedef struct check_report_opts {
    bool verbose;         /* -v: every failure, and what a backend does not implement */
    bool json;            /* --format json: the JSON document on stdout instead of the table */
    bool allow_unchecked; /* NOT CHECKED does not fail the run (run-time UNSUPPORTED always does) */
    bool strict;          /* --strict: check_strict.h's findings fail the run */
    const char *junit;    /* file for the JUnit XML, or NULL */
} check_report_opts;

check_report *check_report_new(const check_cfg *c, const check_report_opts *o);
/* Takes one record (the supervisor's take callback). */
void check_report_take(check_report *rep, const check_record *r);
/* Prints what is left (summary, JSON, JUnit) and returns the exit status: 0, or 1 when
 * anything failed, was unsupported at run time, was not checked (without
 * allow_unchecked) or is a --strict finding; 1 also when the JUnit file could not be
 * written. */
int check_report_finish(check_report *rep);
void check_report_free(check_report *rep);

/* Writes s as the body of a JSON string (without quotes) / XML attribute or text. */
void check_json_str(FILE *f, const char *s);
void check_xml_str(FILE *f, const char *s);

#endif
