/* opreg check --rerun-failed (check_rerun.h). The report is opreg's own JSON
 * (check_report.c writes it), read with jansson, strictly: a file that is not one JSON
 * document, or not an `opreg-check` one, is refused rather than guessed at. */
#include "check_rerun.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the report */

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got = 1; buf && got;) {
        if (n == cap) {
            char *grown = cap < (1u << 30) ? realloc(buf, (cap *= 2) + 1) : NULL;
            if (!grown) { free(buf); buf = NULL; break; }
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: %s", path, bad ? "read error (is it a regular file?)" : "out of memory (too large?)");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Which verdicts a rerun repeats: those that fail the run whatever the options. */
static bool failed(const char *verdict)
{
    return !strcmp(verdict, "fail") || !strcmp(verdict, "unsupported") || !strcmp(verdict, "crashed") ||
           !strcmp(verdict, "timed out");
}

static const char *str_of(const json_t *v) { return json_string_value(v); }

/* One record of the report into out: 0, or 2 with the reason in err. */
static int take_record(opr_ctx *ctx, const json_t *rec, int index, check_rerun_rec *out, char *err, size_t len)
{
    const char *op = str_of(json_object_get(rec, "op")), *backend = str_of(json_object_get(rec, "backend"));
    const char *variant = str_of(json_object_get(rec, "variant")), *phase = str_of(json_object_get(rec, "phase"));
    const json_t *dtype = json_object_get(rec, "dtype"), *sample = json_object_get(rec, "sample"),
                 *cand = json_object_get(rec, "candidate");
    if (!op || !backend || !variant || !phase || !dtype || !sample || !cand ||
        (!json_is_string(dtype) && !json_is_null(dtype)) || (!json_is_number(sample) && !json_is_null(sample)) ||
        (!json_is_string(cand) && !json_is_null(cand)) || strlen(variant) >= sizeof out->variant ||
        strlen(phase) >= sizeof out->phase || (json_is_string(cand) && strlen(str_of(cand)) >= sizeof out->candidate)) {
        snprintf(err, len, "record %d lacks one of op, backend, dtype, sample, variant, phase, candidate (or one is "
                 "malformed)", index);
        return 2;
    }
    memset(out, 0, sizeof *out);
    for (int i = 0; i < opr_op_count(ctx) && !out->op; i++)
        if (!strcmp(opr_op_name(opr_op_at(ctx, i)), op)) out->op = opr_op_at(ctx, i);
    if (!out->op) {
        snprintf(err, len, "record %d names op '%.100s', which is not defined here (load its YAML with --yaml, its "
                 "plugin with --plugin)", index, op);
        return 2;
    }
    out->dev_type = -1;
    for (int t = 0; t < opr_device_type_count(ctx) && t < CHECK_MAX_TYPES; t++)
        if (!strcmp(opr_device_type_name(ctx, t), backend)) out->dev_type = t;
    if (out->dev_type < 0) {
        snprintf(err, len, "record %d names backend '%.100s', which no loaded plugin provides (load it with --plugin; "
                 "see opreg info)", index, backend);
        return 2;
    }
    /* version 3 names the ordinal per record; a version 2 report only in its backends
     * ("npu:1"), which check_rerun_load reads for records without one */
    const json_t *ordinal = json_object_get(rec, "ordinal");
    const double ord = json_number_value(ordinal); /* 0 for a non-number */
    out->ordinal = -1;
    if (ordinal && !(json_is_number(ordinal) && ord >= 0 && ord == (int)ord &&
                     ord < opr_device_type_ordinals(ctx, out->dev_type))) {
        snprintf(err, len, "record %d: ordinal %g is not an ordinal of %s (it has %d)", index, json_is_number(ordinal) ? ord : -1.0,
                 backend, opr_device_type_ordinals(ctx, out->dev_type));
        return 2;
    }
    if (ordinal) out->ordinal = (int)ord;
    opr_dtype dt = OPR_F32;
    if (json_is_string(dtype) && opr_dtype_parse(str_of(dtype), &dt)) {
        snprintf(err, len, "record %d: unknown dtype '%.40s'", index, str_of(dtype));
        return 2;
    }
    out->dtype = json_is_string(dtype) ? (int)dt : -1;
    const double num = json_number_value(sample);
    if (json_is_number(sample) && !(num >= 0 && num < 1e6 && num == (int)num)) {
        snprintf(err, len, "record %d: sample %g is not a sample index", index, num);
        return 2;
    }
    out->sample = json_is_number(sample) ? (int)num : -1;
    snprintf(out->variant, sizeof out->variant, "%s", variant);
    snprintf(out->phase, sizeof out->phase, "%s", phase);
    snprintf(out->candidate, sizeof out->candidate, "%s", json_is_string(cand) ? str_of(cand) : "");
    return 0;
}

int check_rerun_load(opr_ctx *ctx, const char *path, check_rerun **out, char *err, size_t len)
{
    *out = NULL;
    size_t n = 0;
    char *text = read_file(path, &n, err, len);
    if (!text) return 2;
    json_error_t jerr;
    json_t *doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!doc) {
        snprintf(err, len, "%s is not JSON (%s at byte %d): --rerun-failed takes the output of opreg check --format "
                 "json", path, jerr.text, jerr.position);
        return 2;
    }
    const char *schema = str_of(json_object_get(doc, "schema"));
    const json_t *records = json_object_get(doc, "records"), *backends = json_object_get(doc, "backends");
    if (!schema || strcmp(schema, "opreg-check") || !json_is_array(records) || !json_is_array(backends)) {
        snprintf(err, len, "%s is not a report of opreg check --format json (no \"schema\": \"opreg-check\" with "
                 "\"backends\" and \"records\")", path);
        json_decref(doc);
        return 2;
    }
    check_rerun *rr = calloc(1, sizeof *rr);
    int status = rr ? 0 : 2;
    if (!rr) snprintf(err, len, "out of memory");
    for (int i = 0; !status && i < (int)json_array_size(records); i++) {
        const json_t *rec = json_array_get(records, (size_t)i);
        const char *verdict = str_of(json_object_get(rec, "verdict"));
        if (!json_is_object(rec) || !verdict) {
            snprintf(err, len, "%s: record %d is not an object with a verdict", path, i);
            status = 2;
        } else if (failed(verdict)) {
            check_rerun_rec *grown = realloc(rr->recs, (size_t)(rr->n + 1) * sizeof *grown);
            if (!grown) { snprintf(err, len, "out of memory"); status = 2; break; }
            rr->recs = grown;
            char why[400];
            if ((status = take_record(ctx, rec, i, &rr->recs[rr->n], why, sizeof why)))
                snprintf(err, len, "%s: %s", path, why);
            else
                rr->n++;
        }
    }
    /* a version 2 record: the ordinal its backend ran on is in the backends ("vdev:1"),
     * one per device type */
    for (int k = 0; !status && k < rr->n; k++) {
        check_rerun_rec *r = &rr->recs[k];
        for (int i = 0; r->ordinal < 0 && i < (int)json_array_size(backends); i++) {
            const char *b = str_of(json_array_get(backends, (size_t)i)), *colon = b ? strchr(b, ':') : NULL;
            const char *name = opr_device_type_name(ctx, r->dev_type);
            if (colon && !strncmp(name, b, (size_t)(colon - b)) && !name[colon - b]) r->ordinal = atoi(colon + 1);
        }
        if (r->ordinal < 0) r->ordinal = 0;
        if (r->ordinal >= opr_device_type_ordinals(ctx, r->dev_type)) {
            snprintf(err, len, "%s: backend %s ran on ordinal %d, which this run does not have", path,
                     opr_device_type_name(ctx, r->dev_type), r->ordinal);
            status = 2;
        }
    }
    json_decref(doc);
    if (status) { check_rerun_free(rr); return status; }
    *out = rr;
    return 0;
}

void check_rerun_free(check_rerun *r)
{
    if (!r) return;
    free(r->recs);
    free(r);
}

bool check_rerun_wants(const check_cfg *c, const opr_op *op, opr_device dev, const char *phase, int dtype, int sample,
                       const char *variant, const char *candidate)
{
    if (!c->rerun) return true;
    for (int i = 0; i < c->rerun->n; i++) {
        const check_rerun_rec *r = &c->rerun->recs[i];
        if (r->op != op || r->dev_type != dev.type || r->ordinal != dev.index) continue;
        if (r->sample < 0 && r->dtype < 0) return true; /* a lost unit: all of it again */
        if (!strcmp(r->phase, phase) && r->dtype == dtype && r->sample == sample &&
            !strcmp(r->variant, variant ? variant : "") && !strcmp(r->candidate, candidate ? candidate : ""))
            return true;
    }
    return false;
}

bool check_rerun_unit(const check_cfg *c, const opr_op *op, opr_device dev)
{
    if (!c->rerun) return true;
    for (int i = 0; i < c->rerun->n; i++) {
        const check_rerun_rec *r = &c->rerun->recs[i];
        if (r->op == op && r->dev_type == dev.type && r->ordinal == dev.index) return true;
    }
    return false;
}
