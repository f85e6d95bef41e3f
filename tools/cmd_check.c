/* opreg check: cross-backend conformance. For every op with samples, every dtype the
 * backend runs it in is compared with the CPU plugin in f64 (forward), and so is every
 * backward candidate x requires-grad mask. Without another backend the CPU plugin is
 * checked against itself, f32 against f64. */
#include "cli.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 16

typedef struct tally {
    int pass, fail, nimpl;
    char first_failure[1400];
} tally;

static bool verbose;

/* read_rc: the status of the copy, when it failed */
static double *to_f64(const opr_tensor *t, int *read_rc)
{
    int64_t n = opr_tensor_numel(t);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    int rc = out ? opr_tensor_copy_to_host_f64(t, out, n) : OPR_ERR_NOMEM;
    if (rc) { free(out); if (!*read_rc) *read_rc = rc; return NULL; }
    return out;
}

/* Tolerance of dtype dt against an f64 reference. */
static void tolerance(opr_dtype dt, double *rtol, double *atol)
{
    switch (dt) {
    case OPR_F32: *rtol = 1e-4; *atol = 1e-5; break;
    case OPR_F16: case OPR_BF16: *rtol = 2e-2; *atol = 1e-2; break;
    case OPR_F64: *rtol = 1e-9; *atol = 1e-12; break;
    default: *rtol = 0; *atol = 0; break;
    }
}

/* Compares got (any dtype) with ref; on mismatch writes why into why. A result the
 * backend cannot copy back (a strided view on a device without a copy kernel) sets
 * *nimpl instead. */
static bool same_values(const opr_tensor *ref, const opr_tensor *got, char *why, size_t len, bool *nimpl)
{
    char a[96], b[96];
    if (opr_tensor_ndim(ref) != opr_tensor_ndim(got) ||
        memcmp(opr_tensor_shape(ref), opr_tensor_shape(got), (size_t)opr_tensor_ndim(ref) * sizeof(int64_t))) {
        snprintf(why, len, "shape %s, reference %s", opr_tensor_describe(got, a, sizeof a), opr_tensor_describe(ref, b, sizeof b));
        return false;
    }
    double rtol, atol;
    tolerance(opr_tensor_dtype(got), &rtol, &atol);
    int read_rc = 0;
    double *r = to_f64(ref, &read_rc), *g = to_f64(got, &read_rc);
    bool ok = r && g;
    if (!ok) snprintf(why, len, "reading the result back failed: %s", opr_last_error());
    if (!ok && (read_rc == OPR_ERR_NOT_FOUND || read_rc == OPR_ERR_UNSUPPORTED)) *nimpl = true;
    for (int64_t i = 0; ok && i < opr_tensor_numel(ref); i++) {
        bool both_nan = isnan(r[i]) && isnan(g[i]);
        if (!both_nan && !(fabs(r[i] - g[i]) <= atol + rtol * fabs(r[i])) && r[i] != g[i]) {
            snprintf(why, len, "element %lld: %.9g, reference %.9g", (long long)i, g[i], r[i]);
            ok = false;
        }
    }
    free(r);
    free(g);
    return ok;
}

static void record(tally *t, bool ok, const char *what)
{
    if (ok) { t->pass++; return; }
    t->fail++;
    if (!t->first_failure[0]) snprintf(t->first_failure, sizeof t->first_failure, "%s", what);
    if (verbose) fprintf(stderr, "  FAIL %s\n", what);
}

/* Appends item to a ", "-separated list unless it is there already. */
static void list_add(char *list, size_t size, const char *item)
{
    size_t n = strlen(item), used = strlen(list);
    for (const char *p = list; (p = strstr(p, item)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return;
    if (used + n + 3 < size) snprintf(list + used, size - used, "%s%s", used ? ", " : "", item);
}

typedef struct sample_run {
    opr_value args[MAX_ARGS];
    int nargs, nowned;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    opr_tensor *outs[4];
    int nouts;              /* the op's outputs, or the pieces of an op returning Tensor[] */
    int rc;
} sample_run;

static void run_free(sample_run *r)
{
    for (int i = 0; i < r->nowned; i++) opr_tensor_release(r->owned[i]);
    for (int i = 0; i < 4; i++) opr_tensor_release(r->outs[i]);
    memset(r, 0, sizeof *r);
}

/* Builds sample s in dtype dt on dev and runs op (rc in r->rc). */
static int run_sample(const opr_op *op, int s, opr_dtype dt, opr_device dev, sample_run *r)
{
    memset(r, 0, sizeof *r);
    int rc = opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, r->args, &r->nargs, r->owned, &r->nowned);
    if (rc) return rc;
    r->rc = opr_op_result_count(op, r->args, r->nargs, &r->nouts);
    if (!r->rc && r->nouts > 4) r->rc = OPR_ERR_UNSUPPORTED; /* a sample of more pieces than compared: skipped */
    if (!r->rc) r->rc = opr_call(op, r->args, r->nargs, r->outs, r->nouts);
    return OPR_OK;
}

/* The forward results of every op on every backend, computed when first asked for:
 * by the op's own row, or earlier, when a formula that calls the op fails. */
typedef struct fwd_result {
    bool done;
    tally t;
    char nimpl_dtypes[64]; /* dtypes the op allows that the backend does not run */
} fwd_result;

static fwd_result *fwd_memo; /* [op index * MAX_TYPES + device type] */
#define MAX_TYPES 8

static int op_index(const opr_ctx *ctx, const opr_op *op)
{
    for (int i = 0; i < opr_op_count(ctx); i++)
        if (opr_op_at(ctx, i) == op) return i;
    return -1;
}

/* Dtypes checked on dev: every one the op allows, or f32 alone on the CPU (against
 * f64) for the forward; the CPU's backward also runs in f64 against finite differences. */
static int dtypes_of(const opr_op *op, opr_device dev, bool backward, opr_dtype *dts)
{
    static const opr_dtype all[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16};
    int n = 0;
    for (int d = 0; d < 6; d++) {
        if (dev.type == 0 && all[d] != OPR_F32 && !(backward && all[d] == OPR_F64)) continue;
        if (opr_op_supports_dtype(op, all[d])) dts[n++] = all[d];
    }
    return n;
}

static const fwd_result *forward_of(opr_ctx *ctx, const opr_op *op, opr_device dev)
{
    int i = op_index(ctx, op);
    if (i < 0 || dev.type >= MAX_TYPES) return NULL;
    fwd_result *f = &fwd_memo[i * MAX_TYPES + dev.type];
    if (f->done) return f;
    f->done = true;
    opr_dtype dts[6];
    int ndts = dtypes_of(op, dev, false, dts);
    for (int s = 0; s < opr_op_sample_count(op); s++) {
        for (int k = 0; k < ndts; k++) {
            opr_dtype dt = dts[k];
            sample_run ref, got;
            /* integral and bool ops are their own reference dtype */
            opr_dtype ref_dt = opr_dtype_is_floating(dt) ? OPR_F64 : dt;
            if (run_sample(op, s, ref_dt, (opr_device){0, 0}, &ref) || ref.rc) { run_free(&ref); continue; }
            if (run_sample(op, s, dt, dev, &got)) { run_free(&ref); continue; }
            char what[256], why[160] = "";
            if (got.rc == OPR_ERR_UNSUPPORTED || got.rc == OPR_ERR_NOT_FOUND) {
                f->t.nimpl++;
                list_add(f->nimpl_dtypes, sizeof f->nimpl_dtypes, opr_dtype_name(dt));
            } else {
                bool ok = !got.rc && got.nouts == ref.nouts, nimpl = false;
                if (!got.rc && !ok) snprintf(why, sizeof why, "%d pieces, the reference %d", got.nouts, ref.nouts);
                for (int o = 0; ok && o < ref.nouts; o++)
                    ok = same_values(ref.outs[o], got.outs[o], why, sizeof why, &nimpl);
                snprintf(what, sizeof what, "%s sample %d %s forward: %s", opr_op_name(op), s, opr_dtype_name(dt),
                         got.rc ? opr_last_error() : why);
                if (nimpl) {
                    f->t.nimpl++;
                    list_add(f->nimpl_dtypes, sizeof f->nimpl_dtypes, opr_dtype_name(dt));
                } else {
                    record(&f->t, ok, what);
                }
            }
            run_free(&ref);
            run_free(&got);
        }
    }
    return f;
}

/* What the backward rows of one op on one backend found. */
typedef struct bwd_tally {
    tally t;
    char depends[128];     /* failing ops (forward) that the failing formulas call */
    char nimpl_cands[512]; /* candidates the backend cannot run */
} bwd_tally;

/* opr_gradcheck on sample s in dtype dt: every candidate x requires-grad mask against
 * finite differences in f64; a failure is blamed on what opr_gradcheck found, or, where
 * a formula is right on the CPU and wrong here, on the ops it calls that fail here. */
static void check_backward(opr_ctx *ctx, const opr_op *op, int s, opr_dtype dt, opr_device dev, bwd_tally *b)
{
    sample_run r;
    if (opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, r.args, &r.nargs, r.owned, &r.nowned)) return;
    memset(r.outs, 0, sizeof r.outs);
    opr_gradcheck_result res = {.struct_size = sizeof res};
    int rc = opr_gradcheck(op, r.args, r.nargs, NULL, 0, NULL, &res);
    char err[1024];
    snprintf(err, sizeof err, "%s", opr_last_error());
    run_free(&r);
    char what[1400];
    if (rc && rc != OPR_ERR_MISMATCH) {
        if (rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED) { b->t.nimpl++; return; }
        snprintf(what, sizeof what, "%s sample %d %s backward could not be checked: %s", opr_op_name(op), s,
                 opr_dtype_name(dt), err);
        record(&b->t, false, what);
        return;
    }
    b->t.pass += res.passed;
    b->t.nimpl += res.not_available;
    if (res.not_available_list[0]) {
        char copy[sizeof res.not_available_list];
        snprintf(copy, sizeof copy, "%s", res.not_available_list);
        for (char *save = NULL, *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save))
            if (strncmp(item + (*item == ' '), "[forward in ", 12)) /* those are the n/i dtypes */
                list_add(b->nimpl_cands, sizeof b->nimpl_cands, item + (*item == ' '));
    }
    if (!res.failed) return;
    if (res.culprit == OPR_GC_HELPER) {
        char helpers[sizeof res.helpers], failing[128] = "";
        snprintf(helpers, sizeof helpers, "%s", res.helpers);
        for (char *save = NULL, *h = strtok_r(helpers, ", ", &save); h; h = strtok_r(NULL, ", ", &save)) {
            const opr_op *callee = opr_op_find(ctx, h);
            const fwd_result *f = callee && callee != op ? forward_of(ctx, callee, dev) : NULL;
            if (f && f->t.fail) list_add(failing, sizeof failing, h);
        }
        if (failing[0]) {
            list_add(b->depends, sizeof b->depends, failing);
            if (verbose) fprintf(stderr, "  %s sample %d %s: depends on failing %s: %s\n", opr_op_name(op), s,
                                 opr_dtype_name(dt), failing, res.detail);
            return;
        }
    }
    static const char *const kinds[] = {"", "forward kernel", "derivative formula", "fused backward kernel",
                                        "an op the formula calls", "error"};
    snprintf(what, sizeof what, "%s sample %d %s backward: culprit: %s %s: %s", opr_op_name(op), s, opr_dtype_name(dt),
             kinds[res.culprit <= OPR_GC_ERROR ? res.culprit : OPR_GC_ERROR], res.culprit_name, res.detail);
    b->t.fail += res.failed - 1;
    record(&b->t, false, what);
}

static void usage(void)
{
    printf("usage: opreg check [--backend NAME] [--ops PATTERN] [--no-backward] [-v] [--plugin PATH]...\n\n"
           "Runs every op that has samples in its YAML entry on each loaded backend other than\n"
           "the CPU reference, in every dtype the op allows, and compares the outputs with the\n"
           "CPU plugin in f64. Then the backward, with opr_gradcheck (see opreg gradcheck): every\n"
           "derivative candidate (formulas, fused kernels, fast variants) x requires-grad mask\n"
           "against finite differences in f64 on the CPU, never against another candidate.\n"
           "Without another backend (or with --backend cpu) the CPU plugin is checked against\n"
           "itself: forward f32 against f64, backward in f32 and f64. PATTERN is a shell glob on\n"
           "op names (e.g. 'index_*').\n"
           "Prints a table (op x backend: pass, FAIL, dep = its failures come from ops its\n"
           "formulas call, n/i = not implemented, - = no samples); each FAIL names its culprit\n"
           "(forward kernel, derivative formula, fused backward kernel), and an op whose\n"
           "formula is right on the CPU but calls an op failing on the backend says 'depends\n"
           "on failing OP'. -v lists every failure, and per op the dtypes and derivative\n"
           "candidates the backend does not implement. The CPU fallback (opr_cpu_fallback_set)\n"
           "is off here: an op without a kernel on the backend is n/i, not the CPU's result.\n"
           "Exits 1 if anything failed.\n");
}

/* Kernels of the checked devices and of the CPU reference that shadow another
 * plugin's (opreg info lists them all): what runs here, and whether the reference
 * itself was replaced. */
static void print_precedence(opr_ctx *ctx, const int *types, int ntypes)
{
    for (int i = 0; i < opr_op_count(ctx); i++)
        for (int k = -1; k < ntypes; k++) {
            const int t = k < 0 ? 0 : types[k];
            if (k >= 0 && t == 0) continue; /* the cpu once */
            for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
                opr_kernel_info info = {.struct_size = sizeof info};
                if (opr_op_kernel_info(opr_op_at(ctx, i), t, (opr_dtype)dt, &info) || !info.shadowed) continue;
                const char *op = opr_op_name(opr_op_at(ctx, i)), *dev = opr_device_type_name(ctx, t);
                if (info.overrides)
                    printf("note  %s (%s, %s): plugin %s overrides plugin %s%s\n", op, dev, opr_dtype_name((opr_dtype)dt),
                           info.plugin, info.shadowed, t == 0 ? ": the CPU reference itself is replaced" : "");
                else
                    printf("note  %s (%s, %s): plugin %s runs it; plugin %s's is not used\n", op, dev,
                           opr_dtype_name((opr_dtype)dt), info.plugin, info.shadowed);
            }
        }
}

int cmd_check(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { usage(); return 0; }
    const char *backend = NULL, *pattern = "*";
    bool backward = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc) pattern = argv[++i];
        else if (!strcmp(argv[i], "--no-backward")) backward = false;
        else if (!strcmp(argv[i], "-v")) verbose = true;
        else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) i++;
        else { fprintf(stderr, "opreg check: unknown option '%s' (see --help)\n", argv[i]); return 2; }
    }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    opr_cpu_fallback_set(ctx, false); /* a backend's own kernels are checked, not the cpu's */
    int types[MAX_TYPES], ntypes = 0;
    if (backend) {
        opr_device d;
        if (opr_device_parse(ctx, backend, &d) || d.type >= MAX_TYPES) {
            fprintf(stderr, "opreg check: %s (see opreg info)\n", opr_last_error());
            opr_ctx_free(ctx);
            return 2;
        }
        types[ntypes++] = d.type;
    } else {
        for (int t = 1; t < opr_device_type_count(ctx) && ntypes < MAX_TYPES; t++) types[ntypes++] = t;
        if (!ntypes) types[ntypes++] = 0;
    }
    fwd_memo = calloc((size_t)(opr_op_count(ctx) ? opr_op_count(ctx) : 1) * MAX_TYPES, sizeof *fwd_memo);
    if (!fwd_memo) { fprintf(stderr, "opreg check: out of memory\n"); opr_ctx_free(ctx); return 1; }
    printf("opreg check: %s against the CPU plugin in f64%s\n", ntypes == 1 && types[0] == 0 ? "cpu f32" : "each backend",
           backward ? ", backward against finite differences in f64" : ", forward only");
    print_precedence(ctx, types, ntypes);
    printf("%-18s", "op");
    for (int k = 0; k < ntypes; k++) printf(" %-22s", opr_device_type_name(ctx, types[k]));
    printf("\n");
    int failures = 0, dependents = 0, ops = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        if (fnmatch(pattern, opr_op_name(op), 0)) continue;
        if (opr_op_num_outputs(op) < 1 || opr_op_num_args(op) <= 0) continue; /* fused backward slots */
        ops++;
        printf("%-18s", opr_op_name(op));
        char notes[8][1600];
        int nnotes = 0;
        for (int k = 0; k < ntypes; k++) {
            char cell[64];
            opr_device dev = {types[k], 0};
            const char *dname = opr_device_type_name(ctx, dev.type);
            if (!opr_op_sample_count(op)) {
                snprintf(cell, sizeof cell, "-");
            } else if (!opr_op_has_kernel(op, dev.type)) {
                snprintf(cell, sizeof cell, "n/i");
            } else {
                const fwd_result *f = forward_of(ctx, op, dev);
                bwd_tally b = {0};
                if (backward && opr_op_grad_candidate_count(op) > 0) {
                    opr_dtype dts[6];
                    int n = dtypes_of(op, dev, true, dts);
                    for (int s = 0; s < opr_op_sample_count(op); s++)
                        for (int d = 0; d < n; d++) {
                            if (!opr_dtype_is_floating(dts[d])) continue;
                            /* a wrong forward is the culprit of its own wrong gradients */
                            if (f->t.fail) continue;
                            check_backward(ctx, op, s, dts[d], dev, &b);
                        }
                }
                int pass = f->t.pass + b.t.pass, fail = f->t.fail + b.t.fail, nimpl = f->t.nimpl + b.t.nimpl;
                failures += fail;
                if (fail) snprintf(cell, sizeof cell, "FAIL %d/%d", fail, pass + fail);
                else if (b.depends[0]) snprintf(cell, sizeof cell, "dep %.18s", b.depends);
                else if (pass) snprintf(cell, sizeof cell, "pass %d%s", pass, nimpl ? " (+n/i)" : "");
                else snprintf(cell, sizeof cell, nimpl ? "n/i" : "-");
                if (b.depends[0]) dependents++;
                if (fail && nnotes < 8)
                    snprintf(notes[nnotes++], sizeof notes[0], "FAIL %s on %s: %s", opr_op_name(op), dname,
                             f->t.fail ? f->t.first_failure : b.t.first_failure);
                if (!fail && b.depends[0] && nnotes < 8)
                    snprintf(notes[nnotes++], sizeof notes[0], "%s on %s: depends on failing %s", opr_op_name(op),
                             dname, b.depends);
                if (verbose && (f->nimpl_dtypes[0] || b.nimpl_cands[0]) && nnotes < 8)
                    snprintf(notes[nnotes++], sizeof notes[0], "n/i %s on %s:%s%s%s%s", opr_op_name(op), dname,
                             f->nimpl_dtypes[0] ? " dtypes " : "", f->nimpl_dtypes,
                             b.nimpl_cands[0] ? " candidates " : "", b.nimpl_cands);
            }
            printf(" %-22s", cell);
        }
        printf("\n");
        for (int n = 0; n < nnotes; n++) printf("  %s\n", notes[n]);
        fflush(stdout);
        fflush(stderr);
    }
    printf("%d op(s) checked, %d failure(s)", ops, failures);
    if (dependents) printf(", %d op(s) failing only through ops their formulas call", dependents);
    printf("\n");
    free(fwd_memo);
    fwd_memo = NULL;
    opr_ctx_free(ctx);
    return failures || dependents ? 1 : 0;
}
