/* One unit of `opreg check` (check_run.h). */
#include "check_run.h"
#include "check_perf.h"
#include "check_rerun.h"
#include "check_sample.h"
#include "check_supervisor.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ARGS CHECK_MAX_ARGS
#define MAX_OUTS CHECK_MAX_OUTS

static const opr_dtype all_dtypes[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16, OPR_I32};
#define NDTYPES (int)(sizeof all_dtypes / sizeof all_dtypes[0])

void check_describe_unit(const check_cfg *c, int u, check_record *r)
{
    const opr_op *op = c->ops[u / c->ntypes];
    for (int i = 0; i < opr_op_count(c->ctx); i++)
        if (opr_op_at(c->ctx, i) == op) r->op = i;
    r->dev_type = c->types[u % c->ntypes];
    r->ordinal = c->ordinals[u % c->ntypes];
}

static int variant_count(const check_cfg *c, const opr_op *op, int s)
{
    return c->variants ? opr_op_sample_variant_count(op, s) : 1;
}

/* Builds variant v of sample s in dtype dt on dev: 0, or the status (nothing built). */
static int dtypes_of(const check_cfg *c, const opr_op *op, opr_device dev, bool backward, opr_dtype *dts)
{
    int n = 0;
    /* the CPU against itself: f32 (its f64 is the reference); an op without f32 (the
     * bitwise ops) in its first dtype, whose layout and size variants are then compared
     * with the samples as written */
    opr_dtype cpu_dt = OPR_F32;
    for (int d = 0; d < NDTYPES && !opr_op_supports_dtype(op, OPR_F32); d++)
        if (opr_op_supports_dtype(op, all_dtypes[d])) {
            cpu_dt = all_dtypes[d];
            break;
        }
    for (int d = 0; d < NDTYPES; d++) {
        opr_dtype dt = all_dtypes[d];
        if (c->dtype_mask && !(c->dtype_mask & (1u << dt))) continue;
        if (dev.type == 0 && dt != cpu_dt && !(backward && dt == OPR_F64)) continue;
        if (backward && !opr_dtype_is_floating(dt)) continue;
        if (opr_op_supports_dtype(op, dt)) dts[n++] = dt;
    }
    return n;
}

/* A kernel is registered for (op, device, dtype): an UNSUPPORTED from it is a run-time
 * refusal, not a missing kernel. */
static bool registered(const opr_op *op, int dev_type, opr_dtype dt)
{
    opr_kernel_info info = {.struct_size = sizeof info};
    return opr_op_kernel_info(op, dev_type, dt, &info) == OPR_OK;
}

static bool forward_fails(const check_cfg *c, const opr_op *op, opr_device dev);

/* The ops the forward expression of a composite op calls that fail on dev, ", "-joined
 * into failing (room len). */
static void failing_callees(const check_cfg *c, const opr_op *op, opr_device dev, char *failing, size_t len)
{
    failing[0] = '\0';
    for (const char *p = opr_op_forward(op); p && *p;) {
        if (!isalpha((unsigned char)*p) && *p != '_') { p++; continue; }
        const char *start = p;
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '.') p++;
        if (*p != '(') continue; /* an argument's name, not a call */
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(p - start), start);
        const opr_op *callee = opr_op_find(c->ctx, name);
        if (callee && callee != op && forward_fails(c, callee, dev)) check_list_add(failing, len, name);
    }
}

/* Who a wrong forward is held to: the op's kernel; for a composite op, the failing ops
 * its forward calls (a dep record: it is wrong only through them), else its formula. */
static void blame_forward(const check_cfg *c, const opr_op *op, opr_device dev, check_record *r)
{
    if (!opr_op_is_composite(op)) {
        snprintf(r->culprit, sizeof r->culprit, "forward kernel %s", opr_op_name(op));
        return;
    }
    char failing[sizeof r->culprit];
    failing_callees(c, op, dev, failing, sizeof failing);
    if (failing[0]) {
        r->verdict = CV_DEP;
        snprintf(r->culprit, sizeof r->culprit, "%s", failing);
    } else {
        snprintf(r->culprit, sizeof r->culprit, "forward formula %s", opr_op_name(op));
    }
}

/* A kernel is registered for op on dev_type in some dtype (an op's reference: runs on
 * the CPU without one). */
static bool registered_anywhere(const opr_op *op, int dev_type)
{
    for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++)
        if (registered(op, dev_type, (opr_dtype)dt)) return true;
    return false;
}

/* The forward of sample s, variant v, dtype dt on dev against the CPU in f64: a record,
 * or nothing when the variant does not apply (the CPU reference refuses it). Returns
 * the verdict, -1 for none. */
static int check_forward_one(const check_cfg *c, int u, const opr_op *op, int s, int v, opr_dtype dt, opr_device dev,
                             bool emit, bool large_ok)
{
    char label[48] = "";
    sample_run ref, got;
    check_phase("%s forward, sample %d, %s (the CPU reference)", opr_op_name(op), s, opr_dtype_name(dt));
    int brc = check_sample_reference(op, s, v, dt, &ref, label, sizeof label);
    if (emit && ((c->only_variant && strcmp(label, c->only_variant)) || /* --variant: another one */
                 !check_rerun_wants(c, op, dev, "forward", (int)dt, s, label, ""))) {
        check_sample_free(&ref);
        return -1;
    }
    if (brc || ref.rc) {
        int verdict = -1;
        /* A variant, or a sample whose arguments the op refuses in this dtype (an alpha
         * of -0.5 for i64), does not apply; a sample the CPU cannot run is not checked. */
        bool refused = brc == OPR_ERR_INVALID || ref.rc == OPR_ERR_INVALID;
        if (v == 0 && emit && !refused) { /* n/i when the backend has no kernel for dt either */
            bool ni = !opr_op_is_composite(op) && !registered(op, dev.type, dt);
            check_record r = check_new_record(c, u, "forward", dt, s, label);
            r.verdict = ni ? CV_NI : CV_NOT_CHECKED;
            /* an op only the backend runs: say what would give its forward a reference */
            bool no_cpu = !opr_op_is_composite(op) && !opr_op_has_kernel(op, 0);
            snprintf(r.message, sizeof r.message, "the CPU reference could not run the sample: %s%s",
                     brc ? opr_last_error() : ref.err,
                     no_cpu ? " (register a kernel for \"cpu\" too, or give the op a reference: expression, and its "
                              "forward is compared)" : "");
            check_emit(&r);
            verdict = r.verdict;
        }
        check_sample_free(&ref);
        return verdict;
    }
    if (!large_ok && !strcmp(label, "large")) { check_sample_free(&ref); return -1; }
    check_phase("%s forward, sample %d%s%s%s, %s", opr_op_name(op), s, label[0] ? " [" : "", label, label[0] ? "]" : "",
                opr_dtype_name(dt));
    check_record r = check_new_record(c, u, "forward", dt, s, label);
    brc = check_sample_run(op, s, v, dt, dev, &got, label, sizeof label);
    if (brc) {
        r.verdict = CV_FAIL;
        snprintf(r.message, sizeof r.message, "the sample's arguments could not be made on the backend: %s",
                 opr_last_error());
    } else if (got.declined) { /* the plugin said so up front: its own verdict, not a failure */
        r.verdict = CV_DECLINED;
        snprintf(r.message, sizeof r.message, "%s", got.err);
    } else if (got.rc == OPR_ERR_UNSUPPORTED || got.rc == OPR_ERR_NOT_FOUND) {
        bool runtime = got.rc == OPR_ERR_UNSUPPORTED && registered(op, dev.type, dt);
        r.verdict = runtime ? CV_UNSUPPORTED : CV_NI;
        snprintf(r.message, sizeof r.message, "%s%s", runtime ? "unsupported at run time: " : "", got.err);
    } else if (got.rc) {
        r.verdict = CV_FAIL;
        snprintf(r.message, sizeof r.message, "%s: %s", opr_status_name(got.rc), got.err);
    } else if (got.nouts != ref.nouts) {
        r.verdict = CV_FAIL;
        snprintf(r.message, sizeof r.message, "%d pieces, the reference %d", got.nouts, ref.nouts);
    } else {
        r.count = ref.nouts;
        for (int o = 0; o < ref.nouts && r.verdict == CV_PASS; o++) check_compare(op, ref.outs[o], got.outs[o], o, &r);
    }
    if (r.verdict == CV_FAIL && !brc) { /* what the kernel got, to tell the layout at a glance */
        char args[700];
        size_t used = strlen(r.message);
        check_describe_args(op, &got, args, sizeof args);
        if (args[0]) snprintf(r.message + used, sizeof r.message - used, " (arguments: %s)", args);
    }
    check_sample_free(&ref);
    check_sample_free(&got);
    /* the callees of a composite are looked at only for a record (not from forward_fails) */
    if (r.verdict == CV_FAIL && brc == OPR_OK && emit) blame_forward(c, op, dev, &r);
    if (emit) check_emit(&r);
    return r.verdict;
}

/* Whether op's forward fails on dev (its samples as written, every dtype): the ops a
 * failing formula calls are blamed with it. Memoised per worker. */
static signed char *fails_memo; /* [op index * CHECK_MAX_TYPES + type]: 0 unknown, 1 no, 2 yes */

static bool forward_fails(const check_cfg *c, const opr_op *op, opr_device dev)
{
    int n = opr_op_count(c->ctx), i = 0;
    while (i < n && opr_op_at(c->ctx, i) != op) i++;
    if (i == n || dev.type >= CHECK_MAX_TYPES) return false;
    if (!fails_memo && !(fails_memo = calloc((size_t)n * CHECK_MAX_TYPES, 1))) return false;
    signed char *m = &fails_memo[i * CHECK_MAX_TYPES + dev.type];
    if (*m) return *m == 2;
    *m = 1;
    if (!opr_op_has_kernel(op, dev.type)) return false;
    opr_dtype dts[NDTYPES];
    int ndts = dtypes_of(c, op, dev, false, dts);
    for (int s = 0; s < opr_op_sample_count(op) && *m == 1; s++)
        for (int k = 0; k < ndts && *m == 1; k++)
            if (check_forward_one(c, -1, op, s, 0, dts[k], dev, false, false) == CV_FAIL) *m = 2;
    return *m == 2;
}

/* The fused kernel of candidate cand is registered on dev for dt. */
static bool kernel_registered(const opr_ctx *ctx, const opr_op *op, int cand, int dev_type, opr_dtype dt)
{
    const char *label = opr_op_grad_candidate_label(op, cand), *k = label ? strstr(label, "kernel ") : NULL;
    if (!k) return false;
    char name[96];
    snprintf(name, sizeof name, "%s", k + 7);
    name[strcspn(name, " ,])")] = '\0';
    const opr_op *slot = opr_op_find((opr_ctx *)ctx, name);
    return slot && registered(slot, dev_type, dt);
}

/* Sample s in dtype dt has a floating tensor argument: one that gradients can be checked
 * for. A sample of integer tensors only (fmod's on i64) checks the forward alone. */
static bool sample_has_floating(const opr_op *op, int s, opr_dtype dt, opr_device dev)
{
    opr_value args[MAX_ARGS];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    bool floating = false;
    if (opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, args, &nargs, owned, &nowned)) return true; /* let it fail there */
    for (int a = 0; a < nargs; a++)
        floating = floating || (args[a].kind == OPR_V_TENSOR && opr_dtype_is_floating(opr_tensor_dtype(args[a].u.t)));
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    return floating;
}

/* Candidate cand (-1: the plan chosen by cost) of sample s in dtype dt, with
 * opr_gradcheck. A failure is blamed on what opr_gradcheck found, or, where a formula is
 * right on the CPU and wrong here, on the ops it calls that fail here (CV_DEP). */
static int check_backward_one(const check_cfg *c, int u, const opr_op *op, int s, int cand, opr_dtype dt,
                              opr_device dev)
{
    const char *label = cand < 0 ? "plan chosen by cost" : opr_op_grad_candidate_label(op, cand);
    if (!check_rerun_wants(c, op, dev, "backward", (int)dt, s, "", label)) return -1;
    check_phase("%s backward [%s], sample %d, %s", opr_op_name(op), label, s, opr_dtype_name(dt));
    check_record r = check_new_record(c, u, "backward", dt, s, "");
    snprintf(r.candidate, sizeof r.candidate, "%s", label);
    opr_value args[MAX_ARGS];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    int rc = opr_op_sample_args(op, s, dt, dev, (uint64_t)s + 1, args, &nargs, owned, &nowned);
    opr_gradcheck_opts o = {.struct_size = sizeof o, .one_candidate = true, .candidate = cand};
    opr_gradcheck_result res = {.struct_size = sizeof res};
    if (!rc) rc = opr_gradcheck(op, args, nargs, NULL, 0, &o, &res);
    char err[1024];
    snprintf(err, sizeof err, "%s", opr_last_error());
    bool declined = rc == OPR_ERR_UNSUPPORTED && opr_last_error_declined();
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    if (rc && rc != OPR_ERR_MISMATCH) {
        bool ni = rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED;
        r.verdict = declined ? CV_DECLINED : ni ? CV_NI : CV_FAIL;
        snprintf(r.message, sizeof r.message, "%s%s", ni ? "" : "could not be checked: ", err);
    } else if (res.failed) {
        r.count = res.failed + res.passed;
        r.verdict = CV_FAIL;
        static const char *const kinds[] = {"", "forward kernel", "derivative formula", "fused backward kernel",
                                            "an op the formula calls", "error"};
        snprintf(r.culprit, sizeof r.culprit, "%s %s", kinds[res.culprit <= OPR_GC_ERROR ? res.culprit : OPR_GC_ERROR],
                 res.culprit_name);
        snprintf(r.message, sizeof r.message, "%s", res.detail);
        /* Blame the ops the formula calls when they fail here: always for a formula right
         * on the CPU, and for an op only this backend runs, whose formula's reference
         * run is on this backend too. */
        if (res.culprit == OPR_GC_HELPER || (res.culprit == OPR_GC_FORMULA && !opr_op_has_kernel(op, 0))) {
            char helpers[sizeof res.helpers], failing[96] = "";
            snprintf(helpers, sizeof helpers, "%s", res.helpers);
            for (char *save = NULL, *h = strtok_r(helpers, ", ", &save); h; h = strtok_r(NULL, ", ", &save)) {
                const opr_op *callee = opr_op_find(c->ctx, h);
                if (callee && callee != op && forward_fails(c, callee, dev)) check_list_add(failing, sizeof failing, h);
            }
            if (failing[0]) {
                r.verdict = CV_DEP;
                snprintf(r.culprit, sizeof r.culprit, "%s", failing);
            }
        }
    } else if (res.passed) {
        r.count = res.passed;
        r.verdict = CV_PASS;
        if (!opr_op_has_kernel(op, 0) && !registered(op, dev.type, OPR_F64)) { /* opr_gradcheck's f32 reference */
            r.atol = 1e-3;
            r.rtol = 1e-2;
            snprintf(r.message, sizeof r.message, "gradients against finite differences in f32 on the backend (no "
                     "CPU kernel, no f64 kernel there): atol 1e-3, rtol 1e-2");
        }
    } else if (!res.not_available) {
        return CV_PASS; /* the candidate covers no input this sample differentiates */
    } else {
        bool runtime = cand >= 0 && kernel_registered(c->ctx, op, cand, dev.type, dt);
        r.count = res.not_available;
        r.verdict = res.declined == res.not_available ? CV_DECLINED : runtime ? CV_UNSUPPORTED : CV_NI;
        snprintf(r.message, sizeof r.message, "%snot available: %s",
                 r.verdict == CV_UNSUPPORTED ? "unsupported at run time: " : "", res.not_available_list);
        if (res.not_available_why[0])
            snprintf(r.message + strlen(r.message), sizeof r.message - strlen(r.message), " (%s)",
                     res.not_available_why);
    }
    check_emit(&r);
    return r.verdict;
}

/* ---------------------------------------------------------------- fused kernels on variants */

/* A fused backward kernel (candidate cand) on variant v of sample s: its gradients on
 * the backend against the plan chosen by cost on the CPU in f64, on the same values. On
 * the samples as written the kernel was held to finite differences; on a variant
 * (a large one above all) those would cost two forwards per element, and the CPU's
 * formulas were held to them. */
static void check_fused_variant(const check_cfg *c, int u, const opr_op *op, int s, int v, int cand, opr_dtype dt,
                                opr_device dev)
{
    char label[48] = "";
    sample_run ref, got;
    if (check_sample_reference(op, s, v, dt, &ref, label, sizeof label) || ref.rc ||
        (c->only_variant && strcmp(label, c->only_variant)) ||
        !check_rerun_wants(c, op, dev, "backward", (int)dt, s, label, opr_op_grad_candidate_label(op, cand))) {
        check_sample_free(&ref);
        return;
    }
    for (int o = 0; o < ref.nouts; o++) opr_tensor_release(ref.outs[o]);
    memset(ref.outs, 0, sizeof ref.outs);
    opr_tensor *ref_in[MAX_ARGS], *got_in[MAX_ARGS], *ref_g[MAX_ARGS] = {NULL}, *got_g[MAX_ARGS] = {NULL};
    int n_in = check_cover_inputs(op, cand, &ref, ref_in);
    int prev = -1;
    opr_op_force_grad_candidate(op, -1);
    if (n_in <= 0 || check_grads_of(op, &ref, ref_in, n_in, ref_g)) { check_sample_free(&ref); return; } /* does not apply */
    check_phase("%s backward [%s], sample %d [%s], %s", opr_op_name(op), opr_op_grad_candidate_label(op, cand), s, label,
                opr_dtype_name(dt));
    check_record r = check_new_record(c, u, "backward", dt, s, label);
    snprintf(r.candidate, sizeof r.candidate, "%s", opr_op_grad_candidate_label(op, cand));
    int rc = check_sample_build(op, s, v, dt, dev, &got, label, sizeof label);
    if (!rc && check_cover_inputs(op, cand, &got, got_in) != n_in) rc = OPR_ERR_INVALID;
    if (!rc) {
        opr_op_force_grad_candidate(op, cand);
        rc = check_grads_of(op, &got, got_in, n_in, got_g);
        opr_op_force_grad_candidate(op, prev);
    }
    if (rc == OPR_ERR_UNSUPPORTED || rc == OPR_ERR_NOT_FOUND) {
        r.verdict = rc == OPR_ERR_UNSUPPORTED && opr_last_error_declined() ? CV_DECLINED : CV_NI;
        snprintf(r.message, sizeof r.message, "%s", opr_last_error());
    } else if (rc) {
        r.verdict = CV_FAIL;
        snprintf(r.culprit, sizeof r.culprit, "fused backward kernel");
        snprintf(r.message, sizeof r.message, "%s: %s", opr_status_name(rc), opr_last_error());
    } else {
        r.count = n_in;
        for (int k = 0; k < n_in && r.verdict == CV_PASS; k++) {
            if (!ref_g[k] || !got_g[k]) continue;
            check_compare(op, ref_g[k], got_g[k], k, &r);
        }
        if (r.verdict == CV_FAIL) { /* check_compare() says "output K": here K is the K-th covered input */
            snprintf(r.culprit, sizeof r.culprit, "fused backward kernel %.70s", strstr(r.candidate, "kernel ") + 7);
            r.culprit[strcspn(r.culprit, ")")] = '\0';
            char what[sizeof r.message];
            snprintf(what, sizeof what, "%s", r.message);
            snprintf(r.message, sizeof r.message, "the gradient, against the CPU's in f64: %.1990s", what);
        }
    }
    for (int k = 0; k < n_in; k++) { opr_tensor_release(ref_g[k]); opr_tensor_release(got_g[k]); }
    check_sample_free(&ref);
    check_sample_free(&got);
    check_emit(&r);
}

/* On the CPU, which is every schema's promise: each dtype the schema lists that the
 * CPU forward is not compared in (all but f32) must at least run the samples there;
 * a kernel refusing it is a FAIL of the schema, not n/i. */
static void check_schema_dtypes(const check_cfg *c, int u, const opr_op *op)
{
    opr_device cpu = {0, 0};
    for (int d = 0; d < NDTYPES; d++) {
        opr_dtype dt = all_dtypes[d];
        if (dt == OPR_F32 || !opr_op_supports_dtype(op, dt) || (c->dtype_mask && !(c->dtype_mask & (1u << dt))))
            continue;
        for (int s = 0; s < opr_op_sample_count(op); s++) {
            if (!check_rerun_wants(c, op, cpu, "forward", (int)dt, s, "", "")) continue;
            char label[48];
            sample_run r;
            check_phase("%s forward, sample %d, %s (the schema's dtypes on the CPU)", opr_op_name(op), s,
                        opr_dtype_name(dt));
            if (check_sample_run(op, s, 0, dt, cpu, &r, label, sizeof label)) { check_sample_free(&r); continue; }
            if (r.rc == OPR_ERR_UNSUPPORTED || r.rc == OPR_ERR_NOT_FOUND) {
                check_record rec = check_new_record(c, u, "forward", dt, s, "");
                rec.verdict = CV_FAIL;
                snprintf(rec.culprit, sizeof rec.culprit, "schema %s", opr_op_name(op));
                snprintf(rec.message, sizeof rec.message,
                         "the schema lists dtype %s, which the CPU kernel refuses: %.1900s", opr_dtype_name(dt), r.err);
                check_emit(&rec);
                check_sample_free(&r);
                break;
            }
            check_sample_free(&r);
        }
    }
}

/* ---------------------------------------------------------------- the unit */

/* --sample N selects sample s. */
static bool selected_sample(const check_cfg *c, int s) { return c->only_sample < 0 || s == c->only_sample; }

void check_run_unit(const check_cfg *c, int u)
{
    const opr_op *op = c->ops[u / c->ntypes];
    opr_device dev = {c->types[u % c->ntypes], c->ordinals[u % c->ntypes]};
    if (!opr_op_sample_count(op) || !opr_op_has_kernel(op, dev.type)) return; /* the table says "-" / "n/i" */
    if (!check_rerun_unit(c, op, dev)) return; /* --rerun-failed: nothing of it failed */
    size_t slot_len;
    char *slot = check_kernel_slot(&slot_len);
    opr_kernel_trace_set(c->ctx, slot, slot_len); /* the supervisor names the kernel a crash was in */
    opr_dtype dts[NDTYPES];
    int ndts = dtypes_of(c, op, dev, false, dts);
    bool forward_failed = false, backward_failed = false;
    if (dev.type == 0) check_schema_dtypes(c, u, op);
    for (int s = 0; s < opr_op_sample_count(op); s++)
        for (int v = 0; v < variant_count(c, op, s) && selected_sample(c, s); v++)
            for (int k = 0; k < ndts; k++) /* the large variant in the first dtype only: it is the slow one */
                switch (check_forward_one(c, u, op, s, v, dts[k], dev, true, k == 0 && c->large)) {
                case CV_FAIL: case CV_DEP: forward_failed = true; break;
                default: break;
                }
    /* a wrong forward is the culprit of its own wrong gradients */
    /* the backward runs on the samples as written: not for --variant LABEL */
    bool as_written = !c->only_variant || !c->only_variant[0];
    if (c->backward && as_written && !forward_failed && opr_op_grad_candidate_count(op) > 0) {
        /* An op only this backend runs: its formula is still checked, the ops it calls
         * falling back to the CPU where the backend lacks them. */
        bool vendor_only = !opr_op_is_composite(op) && !registered_anywhere(op, 0); /* a reference: is no kernel */
        bool prev = vendor_only ? opr_cpu_fallback_set(c->ctx, true) : false;
        ndts = dtypes_of(c, op, dev, true, dts);
        for (int s = 0; s < opr_op_sample_count(op); s++)
            for (int k = 0; k < ndts && selected_sample(c, s) && sample_has_floating(op, s, dts[k], dev); k++)
                for (int cand = 0; cand <= opr_op_grad_candidate_count(op); cand++) /* last: the plan */
                    switch (check_backward_one(c, u, op, s, cand < opr_op_grad_candidate_count(op) ? cand : -1,
                                               dts[k], dev)) {
                    case CV_FAIL: case CV_DEP: backward_failed = true; break;
                    default: break;
                    }
        if (vendor_only) opr_cpu_fallback_set(c->ctx, prev);
    }
    /* Then the backend's fused backward kernels on every variant, in f32 and f64, against
     * the CPU's plan: only when the formulas and kernels passed on the samples (the
     * CPU's plan is the reference there). */
    ndts = dtypes_of(c, op, dev, false, dts);
    for (int cand = 0; c->backward && !forward_failed && !backward_failed && cand < opr_op_grad_candidate_count(op);
         cand++)
        for (int k = 0; k < ndts; k++) {
            if ((dts[k] != OPR_F32 && dts[k] != OPR_F64) || !kernel_registered(c->ctx, op, cand, dev.type, dts[k]))
                continue;
            for (int s = 0; s < opr_op_sample_count(op); s++)
                for (int v = 1; v < variant_count(c, op, s) && selected_sample(c, s); v++) check_fused_variant(c, u, op, s, v, cand, dts[k], dev);
        }
    if (c->perf && !c->rerun) check_perf(c, u, op, dev); /* a rerun repeats failures, not timings */
}
