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
    char first_failure[256];
} tally;

static bool verbose;

static double *to_f64(const opr_tensor *t)
{
    int64_t n = opr_tensor_numel(t);
    size_t es = opr_dtype_size(opr_tensor_dtype(t));
    unsigned char *raw = malloc((size_t)(n ? n : 1) * es);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!raw || !out || opr_tensor_copy_to_host(t, raw, (size_t)n * es)) { free(raw); free(out); return NULL; }
    for (int64_t i = 0; i < n; i++) {
        switch (opr_tensor_dtype(t)) {
        case OPR_F32: out[i] = ((float *)raw)[i]; break;
        case OPR_F64: out[i] = ((double *)raw)[i]; break;
        case OPR_I64: out[i] = (double)((int64_t *)raw)[i]; break;
        case OPR_BOOL: out[i] = raw[i]; break;
        case OPR_F16: out[i] = opr_f16_to_float(((uint16_t *)raw)[i]); break;
        case OPR_BF16: out[i] = opr_bf16_to_float(((uint16_t *)raw)[i]); break;
        default: out[i] = NAN; break;
        }
    }
    free(raw);
    return out;
}

/* A tensor of dtype dt (floating) on dev holding the values v, rounded to dt. */
static opr_tensor *tensor_from_f64(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, const double *v,
                                   opr_device dev)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    unsigned char *raw = malloc((size_t)(n ? n : 1) * opr_dtype_size(dt));
    if (!raw) return NULL;
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case OPR_F32: ((float *)raw)[i] = (float)v[i]; break;
        case OPR_F16: ((uint16_t *)raw)[i] = opr_f16_from_float((float)v[i]); break;
        case OPR_BF16: ((uint16_t *)raw)[i] = opr_bf16_from_float((float)v[i]); break;
        default: ((double *)raw)[i] = v[i]; break;
        }
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, raw, dev);
    free(raw);
    return t;
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

/* Compares got (any dtype) with ref; on mismatch writes why into why. */
static bool same_values(const opr_tensor *ref, const opr_tensor *got, char *why, size_t len)
{
    char a[96], b[96];
    if (opr_tensor_ndim(ref) != opr_tensor_ndim(got) ||
        memcmp(opr_tensor_shape(ref), opr_tensor_shape(got), (size_t)opr_tensor_ndim(ref) * sizeof(int64_t))) {
        snprintf(why, len, "shape %s, reference %s", opr_tensor_describe(got, a, sizeof a), opr_tensor_describe(ref, b, sizeof b));
        return false;
    }
    double rtol, atol;
    tolerance(opr_tensor_dtype(got), &rtol, &atol);
    double *r = to_f64(ref), *g = to_f64(got);
    bool ok = r && g;
    if (!ok) snprintf(why, len, "reading the result back failed: %s", opr_last_error());
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

typedef struct sample_run {
    opr_value args[MAX_ARGS];
    int nargs, nowned;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    opr_tensor *outs[4];
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
    r->rc = opr_call(op, r->args, r->nargs, r->outs, opr_op_num_outputs(op));
    return OPR_OK;
}

/* Float tensor arguments of a sample run (positions in args). */
static int float_inputs(const opr_op *op, const sample_run *r, int *pos)
{
    int n = 0;
    for (int a = 0; a < r->nargs; a++)
        if (opr_op_arg_kind(op, a) == OPR_V_TENSOR && r->args[a].kind == OPR_V_TENSOR &&
            opr_dtype_is_floating(opr_tensor_dtype(r->args[a].u.t)))
            pos[n++] = a;
    return n;
}

/* Gradients of output 0 (weighted by a fixed random tensor) w.r.t. the inputs in mask. */
static int grads_of(const opr_op *op, int s, opr_dtype dt, opr_device dev, unsigned mask, opr_tensor **grads, int *ng)
{
    sample_run r;
    int rc = opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, r.args, &r.nargs, r.owned, &r.nowned);
    if (rc) return rc;
    memset(r.outs, 0, sizeof r.outs);
    int pos[MAX_ARGS], n = float_inputs(op, &r, pos);
    opr_tensor *inputs[MAX_ARGS];
    *ng = 0;
    for (int i = 0; i < n; i++)
        if ((mask >> i) & 1) {
            opr_set_requires_grad(r.args[pos[i]].u.t, true);
            inputs[(*ng)++] = r.args[pos[i]].u.t;
        }
    rc = opr_call(op, r.args, r.nargs, r.outs, opr_op_num_outputs(op));
    opr_tensor *weight = NULL;
    if (!rc) { /* deterministic weights cycling through -0.65, -0.4, ..., 0.85 */
        int64_t numel = opr_tensor_numel(r.outs[0]);
        double *w = malloc((size_t)(numel ? numel : 1) * sizeof *w);
        for (int64_t i = 0; w && i < numel; i++) w[i] = ((i % 7) - 3) * 0.25 + 0.1;
        weight = w ? tensor_from_f64(opr_tensor_ctx(r.outs[0]), opr_tensor_dtype(r.outs[0]), opr_tensor_ndim(r.outs[0]),
                                     opr_tensor_shape(r.outs[0]), w, dev) : NULL;
        free(w);
        rc = weight ? opr_autograd_grad(&r.outs[0], &weight, 1, inputs, *ng, grads, NULL) : OPR_ERR_NOMEM;
    }
    opr_tensor_release(weight);
    run_free(&r);
    return rc;
}

static void check_backward(const opr_op *op, int s, opr_dtype dt, opr_device dev, tally *t)
{
    sample_run probe;
    if (opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, probe.args, &probe.nargs, probe.owned, &probe.nowned)) return;
    memset(probe.outs, 0, sizeof probe.outs);
    int pos[MAX_ARGS], n = float_inputs(op, &probe, pos);
    run_free(&probe);
    int ncand = opr_op_grad_candidate_count(op);
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        opr_tensor *ref[MAX_ARGS] = {NULL};
        int nref = 0;
        opr_op_force_grad_candidate(op, -1);
        if (grads_of(op, s, OPR_F64, (opr_device){0, 0}, mask, ref, &nref)) {
            char what[256];
            snprintf(what, sizeof what, "%s sample %d mask %u: reference backward failed: %s", opr_op_name(op), s, mask,
                     opr_last_error());
            record(t, false, what);
            continue;
        }
        for (int c = 0; c < ncand; c++) {
            opr_tensor *got[MAX_ARGS] = {NULL};
            int ngot = 0;
            opr_op_force_grad_candidate(op, c);
            int rc = grads_of(op, s, dt, dev, mask, got, &ngot);
            opr_op_force_grad_candidate(op, -1);
            char what[256], why[160] = "";
            if (rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED) { t->nimpl++; continue; }
            bool ok = !rc;
            for (int i = 0; ok && i < nref; i++) ok = (!ref[i] && !got[i]) || (ref[i] && got[i] && same_values(ref[i], got[i], why, sizeof why));
            snprintf(what, sizeof what, "%s sample %d %s grad [%s] mask %u: %s", opr_op_name(op), s, opr_dtype_name(dt),
                     opr_op_grad_candidate_label(op, c), mask, rc ? opr_last_error() : why);
            record(t, ok, what);
            for (int i = 0; i < ngot; i++) opr_tensor_release(got[i]);
        }
        for (int i = 0; i < nref; i++) opr_tensor_release(ref[i]);
    }
}

static void check_op(const opr_op *op, opr_device dev, const opr_dtype *dts, int ndts, bool backward, tally *t)
{
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
                t->nimpl++;
            } else {
                bool ok = !got.rc;
                for (int o = 0; ok && o < opr_op_num_outputs(op); o++)
                    ok = same_values(ref.outs[o], got.outs[o], why, sizeof why);
                /* in-place ops: self itself must hold the result */
                snprintf(what, sizeof what, "%s sample %d %s forward: %s", opr_op_name(op), s, opr_dtype_name(dt),
                         got.rc ? opr_last_error() : why);
                record(t, ok, what);
            }
            run_free(&ref);
            run_free(&got);
            if (backward && opr_dtype_is_floating(dt) && opr_op_grad_candidate_count(op) > 0) check_backward(op, s, dt, dev, t);
        }
    }
}

static void usage(void)
{
    printf("usage: opreg check [--backend NAME] [--ops PATTERN] [--no-backward] [-v] [--plugin PATH]...\n\n"
           "Runs every op that has samples in its YAML entry on each loaded backend other than\n"
           "the CPU reference, in every dtype the op allows, and compares the outputs with the\n"
           "CPU plugin in f64; then every backward candidate x requires-grad mask likewise.\n"
           "Without another backend (or with --backend cpu) the CPU plugin is checked against\n"
           "itself, f32 against f64. PATTERN is a shell glob on op names (e.g. 'index_*').\n"
           "Prints a table (op x backend: pass, FAIL, n/i = not implemented, - = no samples)\n"
           "and exits 1 if anything failed.\n");
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
    int types[8], ntypes = 0;
    if (backend) {
        opr_device d;
        if (opr_device_parse(ctx, backend, &d)) {
            fprintf(stderr, "opreg check: %s (see opreg info)\n", opr_last_error());
            opr_ctx_free(ctx);
            return 2;
        }
        types[ntypes++] = d.type;
    } else {
        for (int t = 1; t < opr_device_type_count(ctx) && ntypes < 8; t++) types[ntypes++] = t;
        if (!ntypes) types[ntypes++] = 0;
    }
    printf("opreg check: %s against the CPU plugin in f64%s\n", ntypes == 1 && types[0] == 0 ? "cpu f32" : "each backend",
           backward ? ", forward and backward" : ", forward only");
    printf("%-18s", "op");
    for (int k = 0; k < ntypes; k++) printf(" %-22s", opr_device_type_name(ctx, types[k]));
    printf("\n");
    int failures = 0, ops = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        if (fnmatch(pattern, opr_op_name(op), 0)) continue;
        if (opr_op_num_outputs(op) < 1 || opr_op_num_args(op) <= 0) continue; /* fused backward slots */
        ops++;
        printf("%-18s", opr_op_name(op));
        for (int k = 0; k < ntypes; k++) {
            char cell[64];
            opr_device dev = {types[k], 0};
            if (!opr_op_sample_count(op)) {
                snprintf(cell, sizeof cell, "-");
            } else if (!opr_op_has_kernel(op, dev.type)) {
                snprintf(cell, sizeof cell, "n/i");
            } else {
                opr_dtype all[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16};
                opr_dtype dts[6];
                int n = 0;
                for (int d = 0; d < 6; d++) {
                    if (dev.type == 0 && all[d] != OPR_F32) continue; /* cpu: f32 against f64 */
                    if (opr_op_supports_dtype(op, all[d])) dts[n++] = all[d];
                }
                tally t = {0};
                check_op(op, dev, dts, n, backward, &t);
                failures += t.fail;
                if (t.fail) snprintf(cell, sizeof cell, "FAIL %d/%d", t.fail, t.pass + t.fail);
                else if (t.pass) snprintf(cell, sizeof cell, "pass %d%s", t.pass, t.nimpl ? " (+n/i)" : "");
                else snprintf(cell, sizeof cell, t.nimpl ? "n/i" : "-");
                if (t.fail && !verbose) fprintf(stderr, "  %s\n", t.first_failure);
            }
            printf(" %-22s", cell);
        }
        printf("\n");
        fflush(stdout);
    }
    printf("%d op(s) checked, %d failure(s)\n", ops, failures);
    opr_ctx_free(ctx);
    return failures ? 1 : 0;
}
