/* The samples of `opreg check` as it runs them (check_sample.h). */
#include "check_sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

check_record check_new_record(const check_cfg *c, int u, const char *phase, opr_dtype dt, int sample,
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



void check_sample_free(sample_run *r)
{
    for (int i = 0; i < r->nowned; i++) opr_tensor_release(r->owned[i]);
    for (int i = 0; i < CHECK_MAX_OUTS; i++) opr_tensor_release(r->outs[i]);
    memset(r, 0, sizeof *r);
}

int check_sample_build(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                        size_t label_len)
{
    memset(r, 0, sizeof *r);
    return opr_op_sample_variant_args(op, s, v, dt, dev, (uint64_t)s + 1, r->args, &r->nargs, r->owned, &r->nowned,
                                      label, label_len);
}

/* Runs op on the built sample: its status in r->rc, its error in r->err. */
void check_sample_call(const opr_op *op, sample_run *r)
{
    r->rc = opr_op_result_count(op, r->args, r->nargs, &r->nouts);
    if (!r->rc && r->nouts > CHECK_MAX_OUTS) r->rc = OPR_ERR_UNSUPPORTED; /* more pieces than compared */
    if (!r->rc) r->rc = opr_call(op, r->args, r->nargs, r->outs, r->nouts);
    if (r->rc) snprintf(r->err, sizeof r->err, "%s", opr_last_error());
    r->declined = r->rc == OPR_ERR_UNSUPPORTED && opr_last_error_declined();
}

int check_sample_run(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                      size_t label_len)
{
    int rc = check_sample_build(op, s, v, dt, dev, r, label, label_len);
    if (!rc) check_sample_call(op, r);
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
            if (!t || !lt) continue; /* a None item of a Tensor?[] */
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
int check_sample_reference(const opr_op *op, int s, int v, opr_dtype dt, sample_run *ref, char *label, size_t label_len)
{
    opr_device cpu = {0, 0};
    opr_dtype ref_dt = opr_dtype_is_floating(dt) ? OPR_F64 : dt;
    int rc = check_sample_build(op, s, v, ref_dt, cpu, ref, label, label_len);
    if (!rc && ref_dt != dt) {
        sample_run low;
        rc = check_sample_build(op, s, v, dt, cpu, &low, label, label_len);
        if (!rc) rc = round_like(ref, &low);
        check_sample_free(&low);
        if (rc) check_sample_free(ref);
    }
    if (!rc) check_sample_call(op, ref);
    return rc;
}

void check_describe_args(const opr_op *op, const sample_run *r, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int a = 0; a < r->nargs && a < opr_op_num_args(op) && used < len; a++) {
        if (r->args[a].kind != OPR_V_TENSOR || !r->args[a].u.t) continue;
        const opr_tensor *t = r->args[a].u.t;
        char d[96];
        int n = snprintf(buf + used, len - used, "%s%s %s strides [", used ? "; " : "", opr_op_arg_name(op, a),
                         opr_tensor_describe(t, d, sizeof d));
        for (int k = 0; n >= 0 && k < opr_tensor_ndim(t) && used + (size_t)n < len; k++)
            n += snprintf(buf + used + n, len - used - (size_t)n, "%s%lld", k ? ", " : "", (long long)opr_tensor_stride(t, k));
        if (n >= 0 && used + (size_t)n < len)
            n += snprintf(buf + used + n, len - used - (size_t)n, "] offset %lld", (long long)opr_tensor_offset(t));
        if (n < 0) break;
        used += (size_t)n;
    }
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
void check_compare(const opr_op *op, const opr_tensor *ref, const opr_tensor *got, int out, check_record *r)
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

/* ---------------------------------------------------------------- gradients */

int check_cover_inputs(const opr_op *op, int cand, sample_run *r, opr_tensor **ins)
{
    int n = 0;
    for (int c = cand < 0 ? 0 : cand; c < (cand < 0 ? opr_op_grad_candidate_count(op) : cand + 1); c++) {
        char names[96];
        snprintf(names, sizeof names, "%s", opr_op_grad_candidate_label(op, c));
        names[strcspn(names, "(")] = '\0';
        for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
            int a = opr_op_arg_index(op, name);
            if (a < 0 || a >= r->nargs || r->args[a].kind != OPR_V_TENSOR) return -1;
            bool seen = false;
            for (int k = 0; k < n; k++) seen |= ins[k] == r->args[a].u.t;
            if (seen) continue; /* the plan: an input two candidates cover, once */
            if (opr_set_requires_grad(r->args[a].u.t, true)) return -1;
            ins[n++] = r->args[a].u.t;
        }
    }
    return n;
}

int check_grads_of(const opr_op *op, sample_run *r, opr_tensor **ins, int n_in, opr_tensor **grads)
{
    bool prev = opr_grad_mode_set(true);
    check_sample_call(op, r);
    opr_grad_mode_set(prev);
    if (r->rc) return r->rc;
    opr_tensor *gos[CHECK_MAX_OUTS] = {NULL}, *fouts[CHECK_MAX_OUTS];
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
