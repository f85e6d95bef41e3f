/* One unit of `opreg check` (check_run.h). */
#include "check_run.h"
#include "check_supervisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ARGS 16
#define MAX_OUTS 4

static const opr_dtype all_dtypes[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16};
#define NDTYPES (int)(sizeof all_dtypes / sizeof all_dtypes[0])

void check_describe_unit(const check_cfg *c, int u, check_record *r)
{
    const opr_op *op = c->ops[u / c->ntypes];
    for (int i = 0; i < opr_op_count(c->ctx); i++)
        if (opr_op_at(c->ctx, i) == op) r->op = i;
    r->dev_type = c->types[u % c->ntypes];
}

void check_tolerance(const opr_op *op, opr_dtype dt, double *rtol, double *atol)
{
    switch (dt) { /* the defaults (docs/conformance.md, "Tolerances") */
    case OPR_F32: *rtol = 1e-4; *atol = 1e-5; break;
    case OPR_F16: case OPR_BF16: *rtol = 2e-2; *atol = 1e-2; break;
    case OPR_F64: *rtol = 1e-9; *atol = 1e-12; break;
    default: *rtol = 0; *atol = 0; break;
    }
    opr_op_tolerance(op, dt, rtol, atol);
}

static check_record new_record(const check_cfg *c, int u, const char *phase, opr_dtype dt, int sample,
                               const char *variant)
{
    check_record r;
    memset(&r, 0, sizeof r);
    r.kind = CR_RESULT;
    r.unit = u;
    check_describe_unit(c, u, &r);
    r.dtype = (int)dt;
    r.sample = sample;
    r.count = 1;
    r.max_error = r.rtol = r.atol = (double)NAN;
    snprintf(r.phase, sizeof r.phase, "%s", phase);
    snprintf(r.variant, sizeof r.variant, "%s", variant ? variant : "");
    return r;
}

/* ---------------------------------------------------------------- samples */

typedef struct sample_run {
    opr_value args[MAX_ARGS];
    int nargs, nowned;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    opr_tensor *outs[MAX_OUTS];
    int nouts;  /* the op's outputs, or the pieces of an op returning Tensor[] */
    int rc;     /* of the op's call */
    char err[1024];
} sample_run;

static void run_free(sample_run *r)
{
    for (int i = 0; i < r->nowned; i++) opr_tensor_release(r->owned[i]);
    for (int i = 0; i < MAX_OUTS; i++) opr_tensor_release(r->outs[i]);
    memset(r, 0, sizeof *r);
}

static int variant_count(const check_cfg *c, const opr_op *op, int s)
{
    return c->variants ? opr_op_sample_variant_count(op, s) : 1;
}

/* Builds variant v of sample s in dtype dt on dev: 0, or the status (nothing built). */
static int build_sample(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                        size_t label_len)
{
    memset(r, 0, sizeof *r);
    return opr_op_sample_variant_args(op, s, v, dt, dev, (uint64_t)s + 1, r->args, &r->nargs, r->owned, &r->nowned,
                                      label, label_len);
}

/* Runs op on the built sample: its status in r->rc, its error in r->err. */
static void call_sample(const opr_op *op, sample_run *r)
{
    r->rc = opr_op_result_count(op, r->args, r->nargs, &r->nouts);
    if (!r->rc && r->nouts > MAX_OUTS) r->rc = OPR_ERR_UNSUPPORTED; /* more pieces than compared */
    if (!r->rc) r->rc = opr_call(op, r->args, r->nargs, r->outs, r->nouts);
    if (r->rc) snprintf(r->err, sizeof r->err, "%s", opr_last_error());
}

static int run_sample(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                      size_t label_len)
{
    int rc = build_sample(op, s, v, dt, dev, r, label, label_len);
    if (!rc) call_sample(op, r);
    return rc;
}

/* Gives the f64 tensors of ref the values of their twins in low (the same sample built
 * in a narrower floating dtype on the CPU), so that the reference computes in f64 on
 * exactly the inputs the backend gets: a comparison of two values that round to the
 * same f16 must give the same answer on both sides. */
static int round_like(sample_run *ref, const sample_run *low)
{
    for (int a = 0; a < ref->nargs && a < low->nargs; a++) {
        const opr_value *x = &ref->args[a], *y = &low->args[a];
        int n = x->kind == OPR_V_TENSOR ? 1 : x->kind == OPR_V_TENSOR_LIST ? x->u.tl.n : 0;
        if (y->kind != x->kind || (x->kind == OPR_V_TENSOR_LIST && y->u.tl.n != n)) continue;
        for (int k = 0; k < n; k++) {
            opr_tensor *t = x->kind == OPR_V_TENSOR ? x->u.t : x->u.tl.items[k];
            const opr_tensor *lt = y->kind == OPR_V_TENSOR ? y->u.t : y->u.tl.items[k];
            int64_t numel = opr_tensor_numel(t);
            if (!t || !lt || opr_tensor_dtype(t) != OPR_F64 || opr_tensor_dtype(lt) == OPR_F64 ||
                opr_tensor_numel(lt) != numel)
                continue;
            double *v = malloc((size_t)(numel ? numel : 1) * sizeof *v);
            int rc = v ? opr_tensor_copy_to_host_f64(lt, v, numel) : OPR_ERR_NOMEM;
            if (!rc) rc = opr_tensor_copy_from_host(t, v, (size_t)numel * sizeof *v);
            free(v);
            if (rc) return rc;
        }
    }
    return OPR_OK;
}

/* The CPU reference of variant v of sample s for dtype dt: in f64 on dt's values
 * (integral and bool ops are their own reference). */
static int run_reference(const opr_op *op, int s, int v, opr_dtype dt, sample_run *ref, char *label, size_t label_len)
{
    opr_device cpu = {0, 0};
    opr_dtype ref_dt = opr_dtype_is_floating(dt) ? OPR_F64 : dt;
    int rc = build_sample(op, s, v, ref_dt, cpu, ref, label, label_len);
    if (!rc && ref_dt != dt) {
        sample_run low;
        rc = build_sample(op, s, v, dt, cpu, &low, label, label_len);
        if (!rc) rc = round_like(ref, &low);
        run_free(&low);
        if (rc) run_free(ref);
    }
    if (!rc) call_sample(op, ref);
    return rc;
}

/* read_rc: the status of the copy, when it failed */
static double *to_f64(const opr_tensor *t, int *read_rc)
{
    int64_t n = opr_tensor_numel(t);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    int rc = out ? opr_tensor_copy_to_host_f64(t, out, n) : OPR_ERR_NOMEM;
    if (rc) { free(out); if (!*read_rc) *read_rc = rc; return NULL; }
    return out;
}

/* Compares got with ref into r (verdict, max_error, tolerance, message). A result the
 * backend cannot copy back (a strided view on a device without a copy kernel) is n/i. */
static void compare(const opr_op *op, const opr_tensor *ref, const opr_tensor *got, int out, check_record *r)
{
    char a[96], b[96];
    if (opr_tensor_ndim(ref) != opr_tensor_ndim(got) ||
        memcmp(opr_tensor_shape(ref), opr_tensor_shape(got), (size_t)opr_tensor_ndim(ref) * sizeof(int64_t))) {
        r->verdict = CV_FAIL;
        snprintf(r->message, sizeof r->message, "output %d: shape %s, reference %s", out,
                 opr_tensor_describe(got, a, sizeof a), opr_tensor_describe(ref, b, sizeof b));
        return;
    }
    double rtol, atol;
    check_tolerance(op, opr_tensor_dtype(got), &rtol, &atol);
    r->rtol = rtol;
    r->atol = atol;
    int read_rc = 0;
    double *rv = to_f64(ref, &read_rc), *gv = to_f64(got, &read_rc);
    if (!rv || !gv) {
        bool ni = read_rc == OPR_ERR_NOT_FOUND || read_rc == OPR_ERR_UNSUPPORTED;
        r->verdict = ni ? CV_NI : CV_FAIL;
        snprintf(r->message, sizeof r->message, "reading the result back failed: %s", opr_last_error());
    }
    /* On the large variant an element can be a sum of thousands of products, whose
     * rounding in f32 is not bounded by its own magnitude (cancellation): there the
     * relative term is taken against the output's largest |reference|. */
    double scale = 0;
    for (int64_t i = 0; rv && gv && !strcmp(r->variant, "large") && i < opr_tensor_numel(ref); i++)
        if (isfinite(rv[i]) && fabs(rv[i]) > scale) scale = fabs(rv[i]);
    double worst = isnan(r->max_error) ? 0 : r->max_error;
    for (int64_t i = 0; rv && gv && i < opr_tensor_numel(ref); i++) {
        if (isnan(rv[i]) && isnan(gv[i])) continue;
        double err = rv[i] == gv[i] ? 0 : fabs(rv[i] - gv[i]);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        if (!(err <= atol + rtol * fmax(fabs(rv[i]), scale)) && r->verdict == CV_PASS) {
            r->verdict = CV_FAIL;
            snprintf(r->message, sizeof r->message, "output %d element %lld: %.9g, reference %.9g", out, (long long)i,
                     gv[i], rv[i]);
        }
    }
    r->max_error = worst;
    free(rv);
    free(gv);
}

/* Dtypes checked on dev: every one the op allows (and --dtype selects), or f32 alone
 * on the CPU (against f64) for the forward; the CPU's backward also runs in f64. */
static int dtypes_of(const check_cfg *c, const opr_op *op, opr_device dev, bool backward, opr_dtype *dts)
{
    int n = 0;
    for (int d = 0; d < NDTYPES; d++) {
        opr_dtype dt = all_dtypes[d];
        if (c->dtype_mask && !(c->dtype_mask & (1u << dt))) continue;
        if (dev.type == 0 && dt != OPR_F32 && !(backward && dt == OPR_F64)) continue;
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

/* The forward of sample s, variant v, dtype dt on dev against the CPU in f64: a record,
 * or nothing when the variant does not apply (the CPU reference refuses it). Returns
 * the verdict, -1 for none. */
static int check_forward_one(const check_cfg *c, int u, const opr_op *op, int s, int v, opr_dtype dt, opr_device dev,
                             bool emit, bool large_ok)
{
    char label[48] = "";
    sample_run ref, got;
    check_phase("%s forward, sample %d, %s (the CPU reference)", opr_op_name(op), s, opr_dtype_name(dt));
    int brc = run_reference(op, s, v, dt, &ref, label, sizeof label);
    if (brc || ref.rc) {
        int verdict = -1;
        /* A variant, or a sample whose arguments the op refuses in this dtype (an alpha
         * of -0.5 for i64), does not apply; a sample the CPU cannot run is not checked. */
        bool refused = brc == OPR_ERR_INVALID || ref.rc == OPR_ERR_INVALID;
        if (v == 0 && emit && !refused) {
            check_record r = new_record(c, u, "forward", dt, s, label);
            r.verdict = CV_NOT_CHECKED;
            snprintf(r.message, sizeof r.message, "the CPU reference could not run the sample: %s",
                     brc ? opr_last_error() : ref.err);
            check_emit(&r);
            verdict = CV_NOT_CHECKED;
        }
        run_free(&ref);
        return verdict;
    }
    if (!large_ok && !strcmp(label, "large")) { run_free(&ref); return -1; }
    check_phase("%s forward, sample %d%s%s%s, %s", opr_op_name(op), s, label[0] ? " [" : "", label, label[0] ? "]" : "",
                opr_dtype_name(dt));
    check_record r = new_record(c, u, "forward", dt, s, label);
    brc = run_sample(op, s, v, dt, dev, &got, label, sizeof label);
    if (brc) {
        r.verdict = CV_FAIL;
        snprintf(r.message, sizeof r.message, "the sample's arguments could not be made on the backend: %s",
                 opr_last_error());
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
        for (int o = 0; o < ref.nouts && r.verdict == CV_PASS; o++) compare(op, ref.outs[o], got.outs[o], o, &r);
    }
    run_free(&ref);
    run_free(&got);
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

/* Appends item to a ", "-separated list unless it is there already. */
static void list_add(char *list, size_t size, const char *item)
{
    size_t n = strlen(item), used = strlen(list);
    for (const char *p = list; (p = strstr(p, item)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return;
    if (used + n + 3 < size) snprintf(list + used, size - used, "%s%s", used ? ", " : "", item);
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

/* Candidate cand (-1: the plan chosen by cost) of sample s in dtype dt, with
 * opr_gradcheck. A failure is blamed on what opr_gradcheck found, or, where a formula is
 * right on the CPU and wrong here, on the ops it calls that fail here (CV_DEP). */
static int check_backward_one(const check_cfg *c, int u, const opr_op *op, int s, int cand, opr_dtype dt,
                              opr_device dev)
{
    const char *label = cand < 0 ? "plan chosen by cost" : opr_op_grad_candidate_label(op, cand);
    check_phase("%s backward [%s], sample %d, %s", opr_op_name(op), label, s, opr_dtype_name(dt));
    check_record r = new_record(c, u, "backward", dt, s, "");
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
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    if (rc && rc != OPR_ERR_MISMATCH) {
        bool ni = rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED;
        r.verdict = ni ? CV_NI : CV_FAIL;
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
                if (callee && callee != op && forward_fails(c, callee, dev)) list_add(failing, sizeof failing, h);
            }
            if (failing[0]) {
                r.verdict = CV_DEP;
                snprintf(r.culprit, sizeof r.culprit, "%s", failing);
            }
        }
    } else if (res.passed) {
        r.count = res.passed;
        r.verdict = CV_PASS;
    } else if (!res.not_available) {
        return CV_PASS; /* the candidate covers no input this sample differentiates */
    } else {
        bool runtime = cand >= 0 && kernel_registered(c->ctx, op, cand, dev.type, dt);
        r.count = res.not_available;
        r.verdict = runtime ? CV_UNSUPPORTED : CV_NI;
        snprintf(r.message, sizeof r.message, "%snot available: %s", runtime ? "unsupported at run time: " : "",
                 res.not_available_list);
        if (res.not_available_why[0])
            snprintf(r.message + strlen(r.message), sizeof r.message - strlen(r.message), " (%s)",
                     res.not_available_why);
    }
    check_emit(&r);
    return r.verdict;
}

/* ---------------------------------------------------------------- fused kernels on variants */

/* Sets requires-grad on the tensor arguments candidate cand covers (its label: "self,
 * other (kernel vfma_backward)"), collecting them in ins; returns how many, -1 when an
 * input cannot take it. */
static int cover_inputs(const opr_op *op, int cand, sample_run *r, opr_tensor **ins)
{
    char names[96];
    snprintf(names, sizeof names, "%s", opr_op_grad_candidate_label(op, cand));
    names[strcspn(names, "(")] = '\0';
    int n = 0;
    for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        int a = opr_op_arg_index(op, name);
        if (a < 0 || a >= r->nargs || r->args[a].kind != OPR_V_TENSOR) return -1;
        if (opr_set_requires_grad(r->args[a].u.t, true)) return -1;
        ins[n++] = r->args[a].u.t;
    }
    return n;
}

/* The gradients of the covered inputs, for grad_outputs of fixed pseudo-random values;
 * outs and grads (n_in of them) are the caller's to release. */
static int grads_of(const opr_op *op, sample_run *r, opr_tensor **ins, int n_in, opr_tensor **grads)
{
    bool prev = opr_grad_mode_set(true);
    call_sample(op, r);
    opr_grad_mode_set(prev);
    if (r->rc) return r->rc;
    opr_tensor *gos[MAX_OUTS] = {NULL}, *fouts[MAX_OUTS];
    int nf = 0, rc = OPR_OK;
    for (int o = 0; o < r->nouts && !rc; o++) {
        opr_dtype dt = opr_tensor_dtype(r->outs[o]);
        if (dt != OPR_F32 && dt != OPR_F64) continue;
        int64_t n = opr_tensor_numel(r->outs[o]);
        size_t es = dt == OPR_F32 ? 4 : 8;
        unsigned char *v = malloc((size_t)(n ? n : 1) * es);
        if (!v) { rc = OPR_ERR_NOMEM; break; }
        for (int64_t i = 0; i < n; i++) { /* the same numbers on both sides */
            double x = 0.5 + 0.5 * sin(0.7 * (double)i + o);
            if (dt == OPR_F32) ((float *)v)[i] = (float)x;
            else ((double *)v)[i] = x;
        }
        gos[nf] = opr_tensor_from_data(opr_tensor_ctx(r->outs[o]), dt, opr_tensor_ndim(r->outs[o]),
                                       opr_tensor_shape(r->outs[o]), v, opr_tensor_device(r->outs[o]));
        free(v);
        if (!gos[nf]) { rc = OPR_ERR_NOMEM; break; }
        fouts[nf++] = r->outs[o];
    }
    if (!rc) rc = opr_autograd_grad(fouts, gos, nf, ins, n_in, grads, NULL);
    for (int k = 0; k < nf; k++) opr_tensor_release(gos[k]);
    return rc;
}

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
    if (run_reference(op, s, v, dt, &ref, label, sizeof label) || ref.rc) { run_free(&ref); return; }
    for (int o = 0; o < ref.nouts; o++) opr_tensor_release(ref.outs[o]);
    memset(ref.outs, 0, sizeof ref.outs);
    opr_tensor *ref_in[MAX_ARGS], *got_in[MAX_ARGS], *ref_g[MAX_ARGS] = {NULL}, *got_g[MAX_ARGS] = {NULL};
    int n_in = cover_inputs(op, cand, &ref, ref_in);
    int prev = -1;
    opr_op_force_grad_candidate(op, -1);
    if (n_in <= 0 || grads_of(op, &ref, ref_in, n_in, ref_g)) { run_free(&ref); return; } /* does not apply */
    check_phase("%s backward [%s], sample %d [%s], %s", opr_op_name(op), opr_op_grad_candidate_label(op, cand), s, label,
                opr_dtype_name(dt));
    check_record r = new_record(c, u, "backward", dt, s, label);
    snprintf(r.candidate, sizeof r.candidate, "%s", opr_op_grad_candidate_label(op, cand));
    int rc = build_sample(op, s, v, dt, dev, &got, label, sizeof label);
    if (!rc && cover_inputs(op, cand, &got, got_in) != n_in) rc = OPR_ERR_INVALID;
    if (!rc) {
        opr_op_force_grad_candidate(op, cand);
        rc = grads_of(op, &got, got_in, n_in, got_g);
        opr_op_force_grad_candidate(op, prev);
    }
    if (rc == OPR_ERR_UNSUPPORTED || rc == OPR_ERR_NOT_FOUND) {
        r.verdict = CV_NI;
        snprintf(r.message, sizeof r.message, "%s", opr_last_error());
    } else if (rc) {
        r.verdict = CV_FAIL;
        snprintf(r.culprit, sizeof r.culprit, "fused backward kernel");
        snprintf(r.message, sizeof r.message, "%s: %s", opr_status_name(rc), opr_last_error());
    } else {
        r.count = n_in;
        for (int k = 0; k < n_in && r.verdict == CV_PASS; k++) {
            if (!ref_g[k] || !got_g[k]) continue;
            compare(op, ref_g[k], got_g[k], k, &r);
        }
        if (r.verdict == CV_FAIL) { /* compare() says "output K": here K is the K-th covered input */
            snprintf(r.culprit, sizeof r.culprit, "fused backward kernel %.70s", strstr(r.candidate, "kernel ") + 7);
            r.culprit[strcspn(r.culprit, ")")] = '\0';
            char what[sizeof r.message];
            snprintf(what, sizeof what, "%s", r.message);
            snprintf(r.message, sizeof r.message, "the gradient, against the CPU's in f64: %.1990s", what);
        }
    }
    for (int k = 0; k < n_in; k++) { opr_tensor_release(ref_g[k]); opr_tensor_release(got_g[k]); }
    run_free(&ref);
    run_free(&got);
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
            char label[48];
            sample_run r;
            check_phase("%s forward, sample %d, %s (the schema's dtypes on the CPU)", opr_op_name(op), s,
                        opr_dtype_name(dt));
            if (run_sample(op, s, 0, dt, cpu, &r, label, sizeof label)) { run_free(&r); continue; }
            if (r.rc == OPR_ERR_UNSUPPORTED || r.rc == OPR_ERR_NOT_FOUND) {
                check_record rec = new_record(c, u, "forward", dt, s, "");
                rec.verdict = CV_FAIL;
                snprintf(rec.culprit, sizeof rec.culprit, "schema %s", opr_op_name(op));
                snprintf(rec.message, sizeof rec.message,
                         "the schema lists dtype %s, which the CPU kernel refuses: %.1900s", opr_dtype_name(dt), r.err);
                check_emit(&rec);
                run_free(&r);
                break;
            }
            run_free(&r);
        }
    }
}

/* ---------------------------------------------------------------- perf */

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Best of a few calls of the op on prepared arguments, with the device synchronised. */
static double time_call(const opr_op *op, sample_run *r, opr_device dev)
{
    double best = INFINITY;
    for (int rep = 0; rep < 5; rep++) {
        opr_tensor *outs[MAX_OUTS] = {NULL};
        double t0 = now_ns();
        int rc = opr_call(op, r->args, r->nargs, outs, r->nouts);
        if (!rc) rc = opr_device_sync(opr_tensor_ctx(r->owned[0]), dev);
        double t = now_ns() - t0;
        for (int o = 0; o < MAX_OUTS; o++) opr_tensor_release(outs[o]);
        if (rc) return NAN;
        if (t < best) best = t;
    }
    return best;
}

/* --perf: the op on its largest variant (the "large" one where it has it) in f32, on
 * the backend and on the CPU. */
static void check_perf(const check_cfg *c, int u, const opr_op *op, opr_device dev)
{
    if (!opr_op_supports_dtype(op, OPR_F32) || !opr_op_sample_count(op)) return;
    int s = 0, v = 0;
    char label[48] = "";
    for (int i = 0; i < opr_op_sample_count(op) && !v; i++)
        for (int k = 1; k < opr_op_sample_variant_count(op, i) && !v; k++) {
            opr_value args[MAX_ARGS];
            opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
            int nargs = 0, nowned = 0;
            if (opr_op_sample_variant_args(op, i, k, OPR_F32, (opr_device){0, 0}, 1, args, &nargs, owned, &nowned,
                                           label, sizeof label) == OPR_OK && !strcmp(label, "large")) {
                s = i;
                v = k;
            }
            for (int j = 0; j < nowned; j++) opr_tensor_release(owned[j]);
        }
    check_phase("%s perf, sample %d [%s], f32", opr_op_name(op), s, v ? "large" : "");
    sample_run on_dev, on_cpu;
    check_record r = new_record(c, u, "perf", OPR_F32, s, v ? "large" : "");
    r.kind = CR_PERF;
    r.ns = r.ref_ns = NAN;
    if (!run_sample(op, s, v, OPR_F32, dev, &on_dev, label, sizeof label) && !on_dev.rc && on_dev.nowned)
        r.ns = time_call(op, &on_dev, dev);
    if (!run_sample(op, s, v, OPR_F32, (opr_device){0, 0}, &on_cpu, label, sizeof label) && !on_cpu.rc &&
        on_cpu.nowned)
        r.ref_ns = time_call(op, &on_cpu, (opr_device){0, 0});
    run_free(&on_dev);
    run_free(&on_cpu);
    check_emit(&r);
}

/* ---------------------------------------------------------------- the unit */

void check_run_unit(const check_cfg *c, int u)
{
    const opr_op *op = c->ops[u / c->ntypes];
    opr_device dev = {c->types[u % c->ntypes], 0};
    if (!opr_op_sample_count(op) || !opr_op_has_kernel(op, dev.type)) return; /* the table says "-" / "n/i" */
    size_t slot_len;
    char *slot = check_kernel_slot(&slot_len);
    opr_kernel_trace_set(c->ctx, slot, slot_len); /* the supervisor names the kernel a crash was in */
    opr_dtype dts[NDTYPES];
    int ndts = dtypes_of(c, op, dev, false, dts);
    bool forward_failed = false, backward_failed = false;
    if (dev.type == 0) check_schema_dtypes(c, u, op);
    for (int s = 0; s < opr_op_sample_count(op); s++)
        for (int v = 0; v < variant_count(c, op, s); v++)
            for (int k = 0; k < ndts; k++) /* the large variant in the first dtype only: it is the slow one */
                if (check_forward_one(c, u, op, s, v, dts[k], dev, true, k == 0 && c->large) == CV_FAIL)
                    forward_failed = true;
    /* a wrong forward is the culprit of its own wrong gradients */
    if (c->backward && !forward_failed && opr_op_grad_candidate_count(op) > 0) {
        /* An op only this backend runs: its formula is still checked, the ops it calls
         * falling back to the CPU where the backend lacks them. */
        bool vendor_only = !opr_op_has_kernel(op, 0);
        bool prev = vendor_only ? opr_cpu_fallback_set(c->ctx, true) : false;
        ndts = dtypes_of(c, op, dev, true, dts);
        for (int s = 0; s < opr_op_sample_count(op); s++)
            for (int k = 0; k < ndts; k++)
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
                for (int v = 1; v < variant_count(c, op, s); v++) check_fused_variant(c, u, op, s, v, cand, dts[k], dev);
        }
    if (c->perf) check_perf(c, u, op, dev);
}
