/* The table, JSON and JUnit output of opreg check (check_report.h). The parent keeps
 * every record: a run of all ops over two backends makes a few thousand. */
#include "check_report.h"
#include "check_rerun.h"
#include "check_strict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NOTES 12

typedef struct cell {
    int count[CV_COUNT];
    int units_done;
    char first_fail[2200];
    char rerun[200];          /* the options that rerun the first failure (or dep) alone */
    bool rerun_is_fail;       /* rerun is the first FAIL's (the note shown), not a dep's */
    char lost[2100];          /* crashed / timed out: the supervisor's message */
    char depends[128];        /* failing ops the failing formulas call */
    char nimpl_dtypes[64];
    char nimpl_cands[512];
    char nimpl_variants[256];
    char unsupported[2100];   /* the first run-time refusal */
    char unchecked[2100];     /* the first NOT CHECKED reason */
    char declined[2100];      /* the first refusal a kernel's supports declared */
    char pass_note[600];      /* how a pass was judged, where it is not the default */
    double perf_ns, perf_ref_ns;
    char notes_verbose[2200]; /* -v: every failure and refusal, whole lines (fits a note) */
    int verbose_dropped;      /* -v lines that did not fit: said as "... N more" */
} cell;

struct check_report {
    const check_cfg *cfg;
    check_report_opts o;
    cell *cells;              /* [op * ntypes + backend] */
    check_record *recs;
    size_t nrecs, cap;
    int next_row;             /* the first op whose row is not printed yet */
    int failures, dependents, unchecked, unsupported, declined;
    bool any_perf;
    char (*strict)[512];      /* --strict: the findings (check_strict.h) */
    int nstrict, strict_cap;
};

const char *check_verdict_name(check_verdict v)
{
    static const char *const names[CV_COUNT] = {"pass", "fail", "dep", "n/i", "unsupported", "declined",
                                                "not checked", "crashed", "timed out"};
    return v >= 0 && v < CV_COUNT ? names[v] : "?";
}

void check_json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
}

void check_xml_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if (ch < 0x20 && ch != '\n' && ch != '\t') fputc('?', f); /* not allowed in XML 1.0 */
            else fputc(ch, f);
        }
    }
}

/* The backend's name as given: "npu", or "npu:1" on another ordinal than 0. */
static const char *backend_label(const check_cfg *c, int k, char *buf, size_t len)
{
    const char *name = opr_device_type_name(c->ctx, c->types[k]);
    if (!c->ordinals[k]) return name;
    snprintf(buf, len, "%s:%d", name, c->ordinals[k]);
    return buf;
}

check_report *check_report_new(const check_cfg *c, const check_report_opts *o)
{
    check_report *rep = calloc(1, sizeof *rep);
    if (!rep) return NULL;
    rep->cfg = c;
    rep->o = *o;
    rep->cells = calloc((size_t)(c->nops ? c->nops : 1) * (size_t)c->ntypes, sizeof *rep->cells);
    if (!rep->cells) { free(rep); return NULL; }
    for (int i = 0; i < c->nops * c->ntypes; i++) rep->cells[i].perf_ns = rep->cells[i].perf_ref_ns = NAN;
    if (!o->json) {
        printf("%-18s", "op");
        char label[48];
        for (int k = 0; k < c->ntypes; k++) printf(" %-22s", backend_label(c, k, label, sizeof label));
        printf("\n");
        fflush(stdout);
    }
    return rep;
}

void check_list_add(char *list, size_t size, const char *item)
{
    size_t n = strlen(item), used = strlen(list);
    for (const char *p = list; (p = strstr(p, item)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return;
    if (used + n + 3 < size) snprintf(list + used, size - used, "%s%s", used ? ", " : "", item);
}

/* "mul sample 0 [transposed self] f32 forward" / "... f64 backward [self]" */
static void describe(const check_report *rep, const check_record *r, char *buf, size_t len)
{
    const char *op = opr_op_name(opr_op_at(rep->cfg->ctx, r->op));
    int n = snprintf(buf, len, "%s", op);
    if (r->sample >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " sample %d", r->sample);
    if (r->variant[0] && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " [%s]", r->variant);
    if (r->dtype >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " %s", opr_dtype_name((opr_dtype)r->dtype));
    if ((size_t)n < len && strcmp(r->phase, "unit")) n += snprintf(buf + n, len - (size_t)n, " %s", r->phase);
    if (r->candidate[0] && (size_t)n < len) snprintf(buf + n, len - (size_t)n, " [%s]", r->candidate);
}

static int op_row(const check_report *rep, int op_index)
{
    const opr_op *op = opr_op_at(rep->cfg->ctx, op_index);
    for (int i = 0; i < rep->cfg->nops; i++)
        if (rep->cfg->ops[i] == op) return i;
    return -1;
}

/* The column of the backend (device type and ordinal) record r is about; -1: none. */
static int backend_col(const check_report *rep, const check_record *r)
{
    for (int k = 0; k < rep->cfg->ntypes; k++)
        if (check_record_on(rep->cfg, k, r)) return k;
    return -1;
}

/* "--backend npu --ops mul --sample 0 --variant 'transposed self' --dtype f32": the
 * selection that reruns record r alone (with the run's own --plugin and --yaml). */
static void rerun_options(const check_report *rep, const check_record *r, char *buf, size_t len)
{
    const check_cfg *c = rep->cfg;
    int k = backend_col(rep, r);
    char label[48];
    int n = snprintf(buf, len, "--backend %s --ops '%s'", k >= 0 ? backend_label(c, k, label, sizeof label) : "?",
                     opr_op_name(opr_op_at(c->ctx, r->op)));
    if (r->sample >= 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " --sample %d --variant '%s'", r->sample, r->variant);
    if (r->dtype >= 0 && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " --dtype %s%s", opr_dtype_name((opr_dtype)r->dtype),
                 strcmp(r->phase, "forward") ? "" : " --no-backward");
}

static void print_row(check_report *rep, int row)
{
    const check_cfg *c = rep->cfg;
    const opr_op *op = c->ops[row];
    char notes[MAX_NOTES][2300];
    int nnotes = 0;
    if (!rep->o.json) printf("%-18s", opr_op_name(op));
    for (int k = 0; k < c->ntypes; k++) {
        cell *x = &rep->cells[row * c->ntypes + k];
        char dlabel[48];
        const char *dname = backend_label(c, k, dlabel, sizeof dlabel);
        int pass = x->count[CV_PASS], fail = x->count[CV_FAIL], ni = x->count[CV_NI];
        int unsup = x->count[CV_UNSUPPORTED], lost = x->count[CV_CRASHED] + x->count[CV_TIMEOUT];
        int declined = x->count[CV_DECLINED], unchecked = x->count[CV_NOT_CHECKED];
        char txt[64];
        /* --rerun-failed: a cell nothing of which failed is not run ("-") */
        bool selected = check_rerun_unit(c, op, (opr_device){c->types[k], c->ordinals[k]});
        bool ran = selected && opr_op_sample_count(op) && opr_op_has_kernel(op, c->types[k]);
        if (!opr_op_sample_count(op) || !selected) snprintf(txt, sizeof txt, "-");
        else if (!ran) snprintf(txt, sizeof txt, "n/i");
        else if (lost) snprintf(txt, sizeof txt, "%s", x->count[CV_CRASHED] ? "CRASHED" : "TIMED OUT");
        else if (fail) snprintf(txt, sizeof txt, "FAIL %d/%d", fail, pass + fail);
        else if (x->depends[0]) snprintf(txt, sizeof txt, "dep %.18s", x->depends);
        else if (pass)
            snprintf(txt, sizeof txt, "pass %d%s%s%s%s", pass, ni ? " +n/i" : "", unsup ? " +unsup" : "",
                     unchecked ? " +unchecked" : "", declined ? " +declined" : "");
        else if (unsup) snprintf(txt, sizeof txt, "UNSUPPORTED");
        else if (declined && !unchecked) snprintf(txt, sizeof txt, "declined");
        else snprintf(txt, sizeof txt, "NOT CHECKED");
        /* a unit that ran and left no record at all compared nothing either */
        if (ran && !lost && !fail && !x->depends[0] && !pass && !unsup && !declined && !unchecked) unchecked = 1;
        rep->failures += fail + lost;
        if (!fail && !lost && x->depends[0]) rep->dependents++;
        rep->unchecked += unchecked;
        rep->unsupported += unsup;
        rep->declined += declined;
        if (!rep->o.json) printf(" %-22s", txt);
        if (nnotes < MAX_NOTES && lost)
            snprintf(notes[nnotes++], sizeof notes[0], "%s %s on %s: %s", x->count[CV_CRASHED] ? "CRASHED" : "TIMED OUT",
                     opr_op_name(op), dname, x->lost);
        if (nnotes < MAX_NOTES && fail)
            snprintf(notes[nnotes++], sizeof notes[0], "FAIL %s on %s: %s", opr_op_name(op), dname, x->first_fail);
        if (nnotes < MAX_NOTES && (fail || x->depends[0]) && !lost && x->rerun[0])
            snprintf(notes[nnotes++], sizeof notes[0], "rerun it alone: opreg check %s", x->rerun);
        if (nnotes < MAX_NOTES && !fail && !lost && x->depends[0])
            snprintf(notes[nnotes++], sizeof notes[0], "%s on %s: depends on failing %s", opr_op_name(op), dname,
                     x->depends);
        if (nnotes < MAX_NOTES && unsup)
            snprintf(notes[nnotes++], sizeof notes[0], "UNSUPPORTED %s on %s: %s", opr_op_name(op), dname,
                     x->unsupported);
        if (nnotes < MAX_NOTES && unchecked && !lost)
            snprintf(notes[nnotes++], sizeof notes[0], "NOT CHECKED %s on %s: %s", opr_op_name(op), dname,
                     x->unchecked[0] ? x->unchecked : "nothing could be compared");
        if (nnotes < MAX_NOTES && declined && !lost)
            snprintf(notes[nnotes++], sizeof notes[0], "declined %s on %s: %d call(s) its kernels' supports declined, "
                     "the first: %.2150s", opr_op_name(op), dname, declined, x->declined);
        if (nnotes < MAX_NOTES && x->pass_note[0] && !fail && !lost)
            snprintf(notes[nnotes++], sizeof notes[0], "note %s on %s: %s", opr_op_name(op), dname, x->pass_note);
        if (nnotes < MAX_NOTES && rep->o.verbose && x->notes_verbose[0])
            snprintf(notes[nnotes++], sizeof notes[0], "%s", x->notes_verbose);
        if (nnotes < MAX_NOTES && rep->o.verbose && x->verbose_dropped)
            snprintf(notes[nnotes++], sizeof notes[0], "... %d more for %s on %s (every record: --format json)",
                     x->verbose_dropped, opr_op_name(op), dname);
        if (nnotes < MAX_NOTES && rep->o.verbose && (x->nimpl_dtypes[0] || x->nimpl_cands[0] || x->nimpl_variants[0]))
            snprintf(notes[nnotes++], sizeof notes[0], "n/i %s on %s:%s%s%s%s%s%s", opr_op_name(op), dname,
                     x->nimpl_dtypes[0] ? " dtypes " : "", x->nimpl_dtypes, x->nimpl_cands[0] ? " candidates " : "",
                     x->nimpl_cands, x->nimpl_variants[0] ? " variants " : "", x->nimpl_variants);
    }
    if (rep->o.json) return;
    printf("\n");
    for (int n = 0; n < nnotes; n++) printf("  %s\n", notes[n]);
    fflush(stdout);
}

/* A row is printed when its op's units are over: when a record of a later op arrives,
 * or at the end (units run in the table's order). */
static void flush_rows(check_report *rep, int upto)
{
    while (rep->next_row < upto && rep->next_row < rep->cfg->nops) print_row(rep, rep->next_row++);
}


void check_report_take(check_report *rep, const check_record *r)
{
    if (r->unit >= 0) flush_rows(rep, r->unit / rep->cfg->ntypes);
    const check_cfg *c = rep->cfg;
    if (rep->nrecs == rep->cap) {
        size_t cap = rep->cap ? rep->cap * 2 : 256;
        check_record *grown = realloc(rep->recs, cap * sizeof *grown);
        if (grown) { rep->recs = grown; rep->cap = cap; }
    }
    if (rep->nrecs < rep->cap) rep->recs[rep->nrecs++] = *r;
    int row = op_row(rep, r->op), col = backend_col(rep, r);
    if (row < 0 || col < 0) return;
    cell *x = &rep->cells[row * c->ntypes + col];
    char what[600];
    describe(rep, r, what, sizeof what);
    if (r->kind == CR_PERF) {
        if (!r->candidate[0]) { /* the forward's; the backward candidates' are read from the records */
            x->perf_ns = r->ns;
            x->perf_ref_ns = r->ref_ns;
        }
        rep->any_perf = true;
        return;
    }
    if (r->verdict < 0 || r->verdict >= CV_COUNT) return;
    if (r->verdict != CV_DEP) x->count[r->verdict] += r->count > 0 ? r->count : 1; /* dep: neither pass nor fail */
    switch (r->verdict) {
    case CV_PASS:
        if (r->message[0] && !x->pass_note[0]) snprintf(x->pass_note, sizeof x->pass_note, "%.590s", r->message);
        break;
    case CV_FAIL:
        if (!x->rerun_is_fail) rerun_options(rep, r, x->rerun, sizeof x->rerun);
        x->rerun_is_fail = true;
        if (!x->first_fail[0])
            snprintf(x->first_fail, sizeof x->first_fail, "%.500s: %s%.96s%s%.1400s", what,
                     r->culprit[0] ? "culprit: " : "", r->culprit, r->culprit[0] ? ": " : "", r->message);
        break;
    case CV_DEP:
        if (!x->rerun[0]) rerun_options(rep, r, x->rerun, sizeof x->rerun);
        check_list_add(x->depends, sizeof x->depends, r->culprit);
        break;
    case CV_NI:
        if (!strcmp(r->phase, "forward") && r->variant[0]) {
            char item[56];
            snprintf(item, sizeof item, "[%s]", r->variant);
            check_list_add(x->nimpl_variants, sizeof x->nimpl_variants, item);
        } else if (!strcmp(r->phase, "forward") && r->dtype >= 0)
            check_list_add(x->nimpl_dtypes, sizeof x->nimpl_dtypes, opr_dtype_name((opr_dtype)r->dtype));
        else if (r->candidate[0]) {
            char item[100];
            snprintf(item, sizeof item, "[%s]", r->candidate);
            check_list_add(x->nimpl_cands, sizeof x->nimpl_cands, item);
        }
        break;
    case CV_UNSUPPORTED:
        if (!x->unsupported[0]) snprintf(x->unsupported, sizeof x->unsupported, "%.600s: %.1400s", what, r->message);
        break;
    case CV_DECLINED:
        if (!x->declined[0]) snprintf(x->declined, sizeof x->declined, "%.600s: %.1400s", what, r->message);
        break;
    case CV_NOT_CHECKED:
        if (!x->unchecked[0]) snprintf(x->unchecked, sizeof x->unchecked, "%.600s: %.1400s", what, r->message);
        break;
    case CV_CRASHED:
    case CV_TIMEOUT:
        snprintf(x->lost, sizeof x->lost, "%.2040s", r->message);
        break;
    default: break;
    }
    /* -v: every failure and every refusal (a kernel's supports or OPR_ERR_UNSUPPORTED), with its reason */
    if (rep->o.verbose && (r->verdict == CV_FAIL || r->verdict == CV_DEP || r->verdict == CV_UNSUPPORTED ||
                           r->verdict == CV_DECLINED || r->verdict == CV_NOT_CHECKED)) {
        size_t used = strlen(x->notes_verbose);
        const char *tag = r->verdict == CV_FAIL ? "FAIL" : r->verdict == CV_DEP ? "dep" : check_verdict_name(r->verdict);
        /* a refusal's reason once, not once per sample and variant */
        bool refusal = r->verdict == CV_UNSUPPORTED || r->verdict == CV_DECLINED || r->verdict == CV_NOT_CHECKED;
        bool told = refusal && r->message[0] && strstr(x->notes_verbose, r->message);
        char line[sizeof x->notes_verbose];
        int n = snprintf(line, sizeof line, "%s%s %s: %s%s%s", used ? "\n  " : "", tag, what, r->culprit,
                         r->culprit[0] ? ": " : "", r->message);
        if (!told && n >= 0 && used + (size_t)n < sizeof x->notes_verbose) memcpy(x->notes_verbose + used, line, (size_t)n + 1);
        else if (!told) x->verbose_dropped++; /* whole lines or none: a cut one would read as the whole */
    }
}

static void json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v)) fprintf(f, ", \"%s\": %.6g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

static void write_json(check_report *rep, int status)
{
    const check_cfg *c = rep->cfg;
    printf("{\"schema\": \"opreg-check\", \"version\": 3, \"opreg\": \"%s\",\n \"backends\": [", opr_version());
    char label[48];
    for (int k = 0; k < c->ntypes; k++) printf("%s\"%s\"", k ? ", " : "", backend_label(c, k, label, sizeof label));
    printf("],\n \"records\": [");
    size_t n = 0;
    for (size_t i = 0; i < rep->nrecs; i++) {
        const check_record *r = &rep->recs[i];
        if (r->kind != CR_RESULT) continue;
        printf("%s\n  {\"op\": \"", n++ ? "," : "");
        check_json_str(stdout, opr_op_name(opr_op_at(c->ctx, r->op)));
        printf("\", \"backend\": \"%s\", \"ordinal\": %d, \"dtype\": ", opr_device_type_name(c->ctx, r->dev_type),
               r->ordinal);
        if (r->dtype >= 0) printf("\"%s\"", opr_dtype_name((opr_dtype)r->dtype));
        else printf("null");
        if (r->sample >= 0) printf(", \"sample\": %d", r->sample);
        else printf(", \"sample\": null");
        printf(", \"variant\": \"");
        check_json_str(stdout, r->variant);
        printf("\", \"phase\": \"%s\", \"candidate\": ", r->phase);
        if (r->candidate[0]) { printf("\""); check_json_str(stdout, r->candidate); printf("\""); }
        else printf("null");
        printf(", \"verdict\": \"%s\", \"count\": %d", check_verdict_name((check_verdict)r->verdict), r->count);
        printf(", \"error\": ");
        if (r->verdict != CV_PASS && r->message[0]) { printf("\""); check_json_str(stdout, r->message); printf("\""); }
        else printf("null");
        if (r->verdict == CV_PASS && r->message[0]) { printf(", \"note\": \""); check_json_str(stdout, r->message); printf("\""); }
        printf(", \"culprit\": ");
        if (r->culprit[0]) { printf("\""); check_json_str(stdout, r->culprit); printf("\""); }
        else printf("null");
        json_num(stdout, "max_error", r->max_error);
        json_num(stdout, "rtol", r->rtol);
        json_num(stdout, "atol", r->atol);
        printf("}");
    }
    printf("\n ],\n \"perf\": [");
    n = 0;
    for (size_t i = 0; i < rep->nrecs; i++) {
        const check_record *r = &rep->recs[i];
        if (r->kind != CR_PERF) continue;
        printf("%s\n  {\"op\": \"", n++ ? "," : "");
        check_json_str(stdout, opr_op_name(opr_op_at(c->ctx, r->op)));
        printf("\", \"backend\": \"%s\", \"ordinal\": %d, \"variant\": \"%s\", \"candidate\": ",
               opr_device_type_name(c->ctx, r->dev_type), r->ordinal, r->variant);
        if (r->candidate[0]) { printf("\""); check_json_str(stdout, r->candidate); printf("\""); }
        else printf("null");
        json_num(stdout, "ns", r->ns);
        json_num(stdout, "cpu_ns", r->ref_ns);
        json_num(stdout, "ratio", r->ns / r->ref_ns);
        printf("}");
    }
    printf("\n ],\n \"strict\": [");
    for (int i = 0; i < rep->nstrict; i++) {
        printf("%s\n  \"", i ? "," : "");
        check_json_str(stdout, rep->strict[i]);
        printf("\"");
    }
    printf("%s],\n \"summary\": {\"ops\": %d, \"failures\": %d, \"dependents\": %d, \"not_checked\": %d, "
           "\"unsupported\": %d, \"declined\": %d, \"strict\": %d, \"exit_status\": %d}}\n",
           rep->nstrict ? "\n " : "", c->nops, rep->failures, rep->dependents, rep->unchecked, rep->unsupported,
           rep->declined, rep->nstrict, status);
}

/* One testcase per op x backend x dtype (the records without a dtype: their own, "op"). */
static int write_junit(check_report *rep)
{
    const check_cfg *c = rep->cfg;
    FILE *f = fopen(rep->o.junit, "w");
    if (!f) { fprintf(stderr, "opreg check: cannot write %s\n", rep->o.junit); return 1; }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"opreg check\">\n");
    for (int k = 0; k < c->ntypes; k++) {
        char dlabel[48];
        const char *dname = backend_label(c, k, dlabel, sizeof dlabel);
        /* gather the testcases first: the suite's counts come before them */
        int tests = 0, failures = 0, skipped = 0;
        for (int pass = 0; pass < 2; pass++) {
            if (pass) fprintf(f, " <testsuite name=\"%s\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\">\n",
                              dname, tests, failures, skipped);
            for (int row = 0; row < c->nops; row++)
                for (int dt = -1; dt < OPR_DTYPE_COUNT; dt++) {
                    int nrec = 0, bad = 0, good = 0, unchecked = 0;
                    const check_record *first_bad = NULL, *first_other = NULL;
                    int opi = -1;
                    for (size_t i = 0; i < rep->nrecs; i++) {
                        const check_record *r = &rep->recs[i];
                        if (r->kind != CR_RESULT || !check_record_on(c, k, r) || r->dtype != dt ||
                            op_row(rep, r->op) != row)
                            continue;
                        opi = r->op;
                        nrec++;
                        bool is_bad = r->verdict == CV_FAIL || r->verdict == CV_DEP || r->verdict == CV_CRASHED ||
                                      r->verdict == CV_TIMEOUT || r->verdict == CV_UNSUPPORTED ||
                                      (!rep->o.allow_unchecked && r->verdict == CV_NOT_CHECKED);
                        if (r->verdict == CV_PASS) good++;
                        if (r->verdict == CV_NOT_CHECKED) unchecked++;
                        if (is_bad && !bad++) first_bad = r;
                        if (!is_bad && r->verdict != CV_PASS && (!first_other || r->verdict == CV_NOT_CHECKED))
                            first_other = r;
                    }
                    if (!nrec) continue;
                    if (!pass) {
                        tests++;
                        if (bad || (!good && unchecked && !rep->o.allow_unchecked)) failures++;
                        else if (!good) skipped++;
                        continue;
                    }
                    fprintf(f, "  <testcase classname=\"opreg.check.%s\" name=\"", dname);
                    check_xml_str(f, opr_op_name(opr_op_at(c->ctx, opi)));
                    if (dt >= 0) fprintf(f, " %s", opr_dtype_name((opr_dtype)dt));
                    fprintf(f, "\">");
                    if (first_bad) {
                        char what[600];
                        describe(rep, first_bad, what, sizeof what);
                        fprintf(f, "<failure type=\"%s\" message=\"", check_verdict_name((check_verdict)first_bad->verdict));
                        check_xml_str(f, what);
                        fprintf(f, ": ");
                        check_xml_str(f, first_bad->culprit);
                        fprintf(f, "%s", first_bad->culprit[0] ? ": " : "");
                        check_xml_str(f, first_bad->message);
                        fprintf(f, "\">%d of %d record(s) failed</failure>", bad, nrec);
                    } else if (!good && first_other) {
                        bool fails = unchecked && !rep->o.allow_unchecked;
                        char what[600];
                        describe(rep, first_other, what, sizeof what);
                        fprintf(f, "<%s message=\"%s: ", fails ? "failure type=\"not checked\"" : "skipped",
                                check_verdict_name((check_verdict)first_other->verdict));
                        check_xml_str(f, what);
                        fprintf(f, ": ");
                        check_xml_str(f, first_other->message);
                        fprintf(f, "\"/>");
                    }
                    fprintf(f, "</testcase>\n");
                }
        }
        fprintf(f, " </testsuite>\n");
    }
    fprintf(f, "</testsuites>\n");
    return fclose(f) ? 1 : 0;
}

static const char *perf_txt(double ns, double ref_ns, char *txt, size_t len)
{
    snprintf(txt, len, "-");
    if (isfinite(ns) && isfinite(ref_ns) && ref_ns > 0) snprintf(txt, len, "%.2fx (%.0f us)", ns / ref_ns, ns / 1e3);
    return txt;
}

/* The rows under op's of its backward candidates, in the order the records came. */
static void print_perf_backward(const check_report *rep, int row)
{
    const check_cfg *c = rep->cfg;
    for (size_t i = 0; i < rep->nrecs; i++) {
        const check_record *r = &rep->recs[i];
        if (r->kind != CR_PERF || !r->candidate[0] || op_row(rep, r->op) != row) continue;
        bool shown = false; /* a label once, whatever the backend that sent it first */
        for (size_t j = 0; j < i && !shown; j++)
            shown = rep->recs[j].kind == CR_PERF && rep->recs[j].op == r->op && !strcmp(rep->recs[j].candidate, r->candidate);
        if (shown) continue;
        char head[160];
        snprintf(head, sizeof head, "  [%s]", r->candidate);
        if (strlen(head) <= 18) printf("%-18s", head);
        else printf("%s\n%-18s", head, ""); /* a long label on a line of its own */
        for (int k = 0; k < c->ntypes; k++) {
            double ns = NAN, ref_ns = NAN;
            for (size_t j = i; j < rep->nrecs; j++) {
                const check_record *q = &rep->recs[j];
                if (q->kind == CR_PERF && q->op == r->op && check_record_on(c, k, q) && !strcmp(q->candidate, r->candidate)) {
                    ns = q->ns;
                    ref_ns = q->ref_ns;
                    break;
                }
            }
            char txt[64];
            printf(" %-22s", perf_txt(ns, ref_ns, txt, sizeof txt));
        }
        printf("\n");
    }
}

static void print_perf(const check_report *rep)
{
    const check_cfg *c = rep->cfg;
    printf("\nperf: the large variant in f32, time on the backend / time on the CPU: the forward (best of 5\n"
           "calls), then under it each [backward candidate] (best of 3 forward-and-backward runs with it\n"
           "forced, against the CPU's plan chosen by cost for the same inputs)\n%-18s", "op");
    char label[48];
    for (int k = 0; k < c->ntypes; k++) printf(" %-22s", backend_label(c, k, label, sizeof label));
    printf("\n");
    for (int row = 0; row < c->nops; row++) {
        printf("%-18s", opr_op_name(c->ops[row]));
        for (int k = 0; k < c->ntypes; k++) {
            const cell *x = &rep->cells[row * c->ntypes + k];
            char txt[64];
            printf(" %-22s", perf_txt(x->perf_ns, x->perf_ref_ns, txt, sizeof txt));
        }
        printf("\n");
        print_perf_backward(rep, row);
    }
}

static void take_finding(const char *message, void *data)
{
    check_report *rep = data;
    if (rep->nstrict == rep->strict_cap) {
        int cap = rep->strict_cap ? rep->strict_cap * 2 : 16;
        char(*grown)[512] = realloc(rep->strict, (size_t)cap * sizeof *grown);
        if (!grown) return;
        rep->strict = grown;
        rep->strict_cap = cap;
    }
    snprintf(rep->strict[rep->nstrict++], sizeof rep->strict[0], "%s", message);
    if (!rep->o.json) printf("  STRICT %s\n", message);
}

int check_report_finish(check_report *rep)
{
    flush_rows(rep, rep->cfg->nops);
    if (rep->o.strict) check_strict(rep->cfg, rep->recs, rep->nrecs, take_finding, rep);
    int status = rep->failures || rep->dependents || rep->unsupported || rep->nstrict ? 1 : 0;
    if (!rep->o.allow_unchecked && rep->unchecked) status = 1;
    if (!rep->o.json) {
        if (rep->any_perf) print_perf(rep);
        printf("\nlegend: pass N = N comparisons agreed (+n/i: some dtypes or candidates are not implemented;\n"
               "  +declined: a kernel's supports declined some arguments, not a failure; +unsup: a kernel\n"
               "  refused some at run time without declaring it; +unchecked: some could not be compared);\n"
               "  dep OP = wrong only through OP, which its formulas call and which fails here; FAIL f/t =\n"
               "  f of t comparisons wrong; n/i = no kernel on this backend; declined = its supports\n"
               "  declined every sample; UNSUPPORTED = the kernels refused every sample at run time; NOT\n"
               "  CHECKED = kernels exist but nothing could be compared; CRASHED / TIMED OUT = the worker\n"
               "  died or ran past --timeout in this op; - = the op has no samples. +unsup, UNSUPPORTED,\n"
               "  +unchecked and NOT CHECKED fail the run (the last two allowed by --allow-unchecked)\n");
        printf("%d op(s) checked, %d failure(s)", rep->cfg->nops, rep->failures);
        if (rep->dependents) printf(", %d op(s) failing only through ops their formulas call", rep->dependents);
        if (rep->unsupported) printf(", %d unsupported at run time", rep->unsupported);
        if (rep->unchecked) printf(", %d not checked%s", rep->unchecked, rep->o.allow_unchecked ? " (allowed)" : "");
        if (rep->declined) printf(", %d declined by supports", rep->declined);
        if (rep->nstrict) printf(", %d --strict finding(s)", rep->nstrict);
        printf("\n");
    }
    if (rep->o.junit && write_junit(rep)) status = 1;
    if (rep->o.json) write_json(rep, status);
    fflush(stdout);
    return status;
}

void check_report_free(check_report *rep)
{
    if (!rep) return;
    free(rep->cells);
    free(rep->recs);
    free(rep->strict);
    free(rep);
}
