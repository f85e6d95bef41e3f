/* opreg check --rerun-failed (check_rerun.h). The report is opreg's own JSON
 * (check_report.c writes it), read with a small strict JSON reader: a file that is not
 * one JSON document, or not an `opreg-check` one, is refused rather than guessed at. */
#include "check_rerun.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- a JSON reader */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int type;
    double num;
    char *str;         /* J_STR */
    struct jv *items;  /* J_ARR, J_OBJ: n values */
    char **keys;       /* J_OBJ: n keys */
    int n;
} jv;

typedef struct jreader {
    const char *p, *end;
    const char *why; /* the first error */
} jreader;

#define JSON_MAX_DEPTH 64 /* the report nests three levels */

static void jv_free(jv *v)
{
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

static void skip_ws(jreader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static bool fail(jreader *r, const char *why)
{
    if (!r->why) r->why = why;
    return false;
}

/* A string at r->p (its opening quote): the text, \uXXXX below 0x80 decoded, others
 * kept as '?' (opreg's names are ASCII). */
static bool read_string(jreader *r, char **out)
{
    size_t cap = 32, n = 0;
    char *s = malloc(cap);
    if (!s) return fail(r, "out of memory");
    for (r->p++;; r->p++) {
        if (r->p >= r->end) { free(s); return fail(r, "an unterminated string"); }
        char ch = *r->p;
        if (ch == '"') break;
        if ((unsigned char)ch < 0x20) { free(s); return fail(r, "a control character in a string"); }
        if (ch == '\\') {
            if (++r->p >= r->end) { free(s); return fail(r, "an unterminated string"); }
            switch (*r->p) {
            case '"': case '\\': case '/': ch = *r->p; break;
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': {
                unsigned code = 0;
                for (int k = 0; k < 4; k++) {
                    char h = ++r->p < r->end ? *r->p : 0;
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) { free(s); return fail(r, "a bad \\u escape"); }
                    code = code * 16 + (unsigned)d;
                }
                ch = code < 0x80 ? (char)code : '?';
                break;
            }
            default: free(s); return fail(r, "a bad escape in a string");
            }
        }
        if (n + 2 > cap) {
            char *grown = realloc(s, cap *= 2);
            if (!grown) { free(s); return fail(r, "out of memory"); }
            s = grown;
        }
        s[n++] = ch;
    }
    r->p++;
    s[n] = '\0';
    *out = s;
    return true;
}

static bool read_value(jreader *r, jv *v, int depth);

/* An array or an object at r->p: values appended one by one. */
static bool read_items(jreader *r, jv *v, int depth, bool object)
{
    char close = object ? '}' : ']';
    v->type = object ? J_OBJ : J_ARR;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) { r->p++; return true; }
    for (int cap = 0;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            jv *items = realloc(v->items, (size_t)cap * sizeof *items);
            if (items) v->items = items;
            char **keys = object ? realloc(v->keys, (size_t)cap * sizeof *keys) : NULL;
            if (keys) v->keys = keys;
            if (!items || (object && !keys)) return fail(r, "out of memory");
        }
        skip_ws(r);
        char *key = NULL;
        if (object) {
            if (r->p >= r->end || *r->p != '"') return fail(r, "an object key that is not a string");
            if (!read_string(r, &key)) return false;
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':') { free(key); return fail(r, "a key without ':'"); }
            r->p++;
        }
        memset(&v->items[v->n], 0, sizeof v->items[0]);
        if (object) v->keys[v->n] = key;
        v->n++;
        if (!read_value(r, &v->items[v->n - 1], depth + 1)) return false;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') { r->p++; continue; }
        if (r->p < r->end && *r->p == close) { r->p++; return true; }
        return fail(r, object ? "an object without its '}'" : "an array without its ']'");
    }
}

static bool read_value(jreader *r, jv *v, int depth)
{
    if (depth > JSON_MAX_DEPTH) return fail(r, "nesting too deep");
    skip_ws(r);
    if (r->p >= r->end) return fail(r, "a missing value");
    switch (*r->p) {
    case '{': return read_items(r, v, depth, true);
    case '[': return read_items(r, v, depth, false);
    case '"': v->type = J_STR; return read_string(r, &v->str);
    default: break;
    }
    static const struct { const char *word; int type; double num; } words[] = {
        {"null", J_NULL, 0}, {"true", J_BOOL, 1}, {"false", J_BOOL, 0}};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t len = strlen(words[k].word);
        if ((size_t)(r->end - r->p) >= len && !strncmp(r->p, words[k].word, len)) {
            v->type = words[k].type;
            v->num = words[k].num;
            r->p += len;
            return true;
        }
    }
    char buf[64];
    size_t len = strspn(r->p, "+-0123456789.eE");
    if (!len || len >= sizeof buf || r->p + len > r->end) return fail(r, "an unexpected character");
    memcpy(buf, r->p, len);
    buf[len] = '\0';
    char *end;
    v->type = J_NUM;
    v->num = strtod(buf, &end);
    if (*end) return fail(r, "a malformed number");
    r->p += len;
    return true;
}

static const jv *member(const jv *obj, const char *key)
{
    for (int i = 0; obj && obj->type == J_OBJ && i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

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

static const char *str_of(const jv *v) { return v && v->type == J_STR ? v->str : NULL; }

/* One record of the report into out: 0, or 2 with the reason in err. */
static int take_record(opr_ctx *ctx, const jv *rec, int index, check_rerun_rec *out, char *err, size_t len)
{
    const char *op = str_of(member(rec, "op")), *backend = str_of(member(rec, "backend"));
    const char *variant = str_of(member(rec, "variant")), *phase = str_of(member(rec, "phase"));
    const jv *dtype = member(rec, "dtype"), *sample = member(rec, "sample"), *cand = member(rec, "candidate");
    if (!op || !backend || !variant || !phase || !dtype || !sample || !cand ||
        (dtype->type != J_STR && dtype->type != J_NULL) || (sample->type != J_NUM && sample->type != J_NULL) ||
        (cand->type != J_STR && cand->type != J_NULL) || strlen(variant) >= sizeof out->variant ||
        strlen(phase) >= sizeof out->phase || (cand->str && strlen(cand->str) >= sizeof out->candidate)) {
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
    const jv *ordinal = member(rec, "ordinal");
    out->ordinal = -1;
    if (ordinal && !(ordinal->type == J_NUM && ordinal->num >= 0 && ordinal->num == (int)ordinal->num &&
                     ordinal->num < opr_device_type_ordinals(ctx, out->dev_type))) {
        snprintf(err, len, "record %d: ordinal %g is not an ordinal of %s (it has %d)", index, ordinal->type == J_NUM ? ordinal->num : -1.0,
                 backend, opr_device_type_ordinals(ctx, out->dev_type));
        return 2;
    }
    if (ordinal) out->ordinal = (int)ordinal->num;
    opr_dtype dt = OPR_F32;
    if (dtype->type == J_STR && opr_dtype_parse(dtype->str, &dt)) {
        snprintf(err, len, "record %d: unknown dtype '%.40s'", index, dtype->str);
        return 2;
    }
    out->dtype = dtype->type == J_STR ? (int)dt : -1;
    if (sample->type == J_NUM && !(sample->num >= 0 && sample->num < 1e6 && sample->num == (int)sample->num)) {
        snprintf(err, len, "record %d: sample %g is not a sample index", index, sample->num);
        return 2;
    }
    out->sample = sample->type == J_NUM ? (int)sample->num : -1;
    snprintf(out->variant, sizeof out->variant, "%s", variant);
    snprintf(out->phase, sizeof out->phase, "%s", phase);
    snprintf(out->candidate, sizeof out->candidate, "%s", cand->str ? cand->str : "");
    return 0;
}

int check_rerun_load(opr_ctx *ctx, const char *path, check_rerun **out, char *err, size_t len)
{
    *out = NULL;
    size_t n = 0;
    char *text = read_file(path, &n, err, len);
    if (!text) return 2;
    jreader r = {text, text + n, NULL};
    jv doc = {0};
    bool ok = read_value(&r, &doc, 0);
    skip_ws(&r);
    if (ok && r.p != r.end) ok = fail(&r, "text after the document");
    ptrdiff_t at = r.p - text;
    free(text);
    if (!ok) {
        snprintf(err, len, "%s is not JSON (%s at byte %td): --rerun-failed takes the output of opreg check --format "
                 "json", path, r.why, at);
        jv_free(&doc);
        return 2;
    }
    const char *schema = str_of(member(&doc, "schema"));
    const jv *records = member(&doc, "records"), *backends = member(&doc, "backends");
    if (!schema || strcmp(schema, "opreg-check") || !records || records->type != J_ARR || !backends ||
        backends->type != J_ARR) {
        snprintf(err, len, "%s is not a report of opreg check --format json (no \"schema\": \"opreg-check\" with "
                 "\"backends\" and \"records\")", path);
        jv_free(&doc);
        return 2;
    }
    check_rerun *rr = calloc(1, sizeof *rr);
    int status = rr ? 0 : 2;
    if (!rr) snprintf(err, len, "out of memory");
    for (int i = 0; !status && i < records->n; i++) {
        const jv *rec = &records->items[i];
        const char *verdict = str_of(member(rec, "verdict"));
        if (rec->type != J_OBJ || !verdict) {
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
        for (int i = 0; r->ordinal < 0 && i < backends->n; i++) {
            const char *b = str_of(&backends->items[i]), *colon = b ? strchr(b, ':') : NULL;
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
    jv_free(&doc);
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
