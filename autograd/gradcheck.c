/* opr_gradcheck: an op's gradients against central finite differences in f64.
 *
 * The reference is never another derivative candidate: a wrong fused kernel or a wrong
 * formula must not become the yardstick of the others (the mistake `opreg check` made
 * when it compared every candidate with the one chosen by cost). The finite differences
 * run the op's forward on the CPU in f64; every candidate is forced in turn
 * (opr_op_force_grad_candidate, the mechanism the plan tests use) for every
 * requires-grad mask, and a failure is attributed by running the same candidate once
 * more on the CPU in f64, where the ops its formula calls are the reference ones. */
#include "autograd.h"
#include "gradcheck_plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_MAX_T OPR_SAMPLE_MAX_TENSORS /* tensors of one call, list items included */
/* Gradient tolerance against finite differences taken in f32 (step 1e-3): their error is
 * about eps^2 from the truncation and 1e-7 / eps from the rounding (opreg.h). */
#define GC_F32_REF_ATOL 1e-3
#define GC_F32_REF_RTOL 1e-2

/* One tensor of the call: a Tensor argument or an item of a Tensor[] one. */
typedef struct gc_tensor {
    int arg, item;     /* item -1: a plain Tensor argument */
    opr_dtype dtype;
    int ndim;
    int64_t shape[OPR_MAX_DIMS];
    int64_t numel;
    double *vals;      /* its values, exactly, in f64 */
    bool checked;      /* floating and among the inputs asked for */
    double *num;       /* numeric gradient, computed when first needed */
} gc_tensor;

typedef struct gc {
    const opr_op *op;
    opr_ctx *ctx;
    const opr_value *args;
    int nargs;
    opr_device dev, ref_dev;
    opr_dtype dt;              /* floating dtype under test */
    opr_dtype ref_dt;          /* of the reference: f64, or f32 where ref_dev has no f64 */
    gc_tensor t[GC_MAX_T];
    int nt;
    int in[GC_MAX_T];          /* indices in t of the checked inputs */
    int nin;
    int nout;
    bool out_float[OPR_MAX_OUTS];
    int out_ndim[OPR_MAX_OUTS];
    int64_t out_shape[OPR_MAX_OUTS][OPR_MAX_DIMS];
    int64_t out_numel[OPR_MAX_OUTS];
    opr_dtype out_dt[OPR_MAX_OUTS];
    double *ref_out[OPR_MAX_OUTS]; /* reference forward, unperturbed */
    double *v[OPR_MAX_OUTS];   /* grad_output weights (floating outputs) */
    double eps, atol, rtol;
    opr_gradcheck_result *res;
    bool na_declined;      /* the last GC_NA: a kernel's supports declined the call */
    char plan_ran[160];    /* the plan chosen by cost in the last analytic() on dev, as opr_node_info.plan */
} gc;

/* A built call: arguments and the tensors made for it. */
typedef struct gc_call {
    opr_value v[OPR_MAX_ARGS];
    opr_tensor *t[GC_MAX_T];
    opr_tensor *lists[OPR_MAX_ARGS][GC_MAX_T];
    int n;
} gc_call;

static void call_free(gc_call *c)
{
    for (int i = 0; i < GC_MAX_T; i++) opr_tensor_release(c->t[i]);
    memset(c, 0, sizeof *c);
}

static double *host_f64(const opr_tensor *t)
{
    int64_t n = opr_tensor_numel(t);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) { opr_fail(OPR_ERR_NOMEM, "gradcheck: out of memory"); return NULL; }
    if (opr_tensor_copy_to_host_f64(t, out, n)) { free(out); return NULL; }
    return out;
}

static opr_tensor *tensor_of(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, const double *v,
                             int64_t numel, opr_device dev)
{
    size_t es = opr_elem_size(dt);
    unsigned char *raw = malloc((size_t)(numel ? numel : 1) * es);
    if (!raw) { opr_fail(OPR_ERR_NOMEM, "gradcheck: out of memory"); return NULL; }
    for (int64_t i = 0; i < numel; i++) opr_dtype_store(dt, v[i], raw + (size_t)i * es);
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, raw, dev);
    free(raw);
    return t;
}

/* Builds the call on dev with floating tensors in dt; tensors whose bit is set in rg
 * require grad; tensor `pert` (or -1) gets delta added to element `pel`. */
static int build_call(const gc *g, opr_device dev, opr_dtype dt, uint32_t rg, int pert, int64_t pel, double delta,
                      gc_call *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < g->nt; i++) {
        const gc_tensor *t = &g->t[i];
        opr_dtype tdt = opr_dtype_is_floating(t->dtype) ? dt : t->dtype;
        double saved = 0;
        if (i == pert) { saved = t->vals[pel]; t->vals[pel] += delta; }
        c->t[i] = tensor_of(g->ctx, tdt, t->ndim, t->shape, t->vals, t->numel, dev);
        if (i == pert) t->vals[pel] = saved;
        if (!c->t[i]) return opr_error_status();
        if ((rg >> i) & 1) {
            int rc = opr_set_requires_grad(c->t[i], true);
            if (rc) return rc;
        }
        if (t->item >= 0) c->lists[t->arg][t->item] = c->t[i];
    }
    for (int a = 0; a < g->nargs; a++) {
        opr_value v = g->args[a];
        if (v.kind == OPR_V_TENSOR) {
            for (int i = 0; i < g->nt; i++)
                if (g->t[i].arg == a) v = opr_v_tensor(c->t[i]);
        } else if (v.kind == OPR_V_TENSOR_LIST) {
            v = opr_v_tensors(c->lists[a], v.u.tl.n);
        } else if (v.kind == OPR_V_STRING && a == g->op->dtype_arg) {
            opr_dtype named;
            if (!opr_dtype_parse(v.u.s, &named) && opr_dtype_is_floating(named)) v = opr_v_string(opr_dtype_name(dt));
        } else if (v.kind == OPR_V_STRING && a == g->op->device_arg) {
            v = opr_v_string(g->ctx->devices[dev.type].name);
        }
        c->v[a] = v;
    }
    c->n = g->nargs;
    return OPR_OK;
}

/* Runs the op of g on call c. An op returning a Tensor[] gives one output here: its
 * pieces flattened and concatenated, through reshape and cat, so that the gradient
 * weights of that output flow back into each piece (and a piece no weight reaches does
 * not occur: every piece has its weights). */
static int call_op(const gc *g, const gc_call *c, opr_tensor **outs)
{
    const opr_op *op = g->op;
    if (!op->list_out) return opr_call(op, c->v, c->n, outs, op->nout);
    int n = 0;
    int rc = opr_op_result_count(op, c->v, c->n, &n);
    if (rc) return rc;
    if (n < 1) return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s gives no pieces for these arguments", op->name);
    opr_tensor **pieces = calloc((size_t)n * 2, sizeof *pieces), **flat = pieces + n;
    if (!pieces) return opr_fail(OPR_ERR_NOMEM, "opr_gradcheck: out of memory");
    const opr_op *contiguous = registry_engine_op(g->ctx, ENGINE_OP_CONTIGUOUS);
    const opr_op *reshape = registry_engine_op(g->ctx, ENGINE_OP_RESHAPE), *cat = opr_op_find(g->ctx, "cat");
    if (!contiguous || !reshape || !cat) rc = opr_fail(OPR_ERR_NOT_FOUND, "opr_gradcheck: %s: needs contiguous, reshape "
                                                       "and cat to check a list result", op->name);
    if (!rc) rc = opr_call(op, c->v, c->n, pieces, n);
    for (int k = 0; k < n && !rc; k++) {
        opr_tensor *dense = NULL;
        opr_value a = opr_v_tensor(pieces[k]);
        rc = opr_call(contiguous, &a, 1, &dense, 1);
        int64_t numel = opr_tensor_numel(pieces[k]);
        opr_value r[2] = {opr_v_tensor(dense), opr_v_ints(&numel, 1)};
        if (!rc) rc = opr_call(reshape, r, 2, &flat[k], 1);
        opr_tensor_release(dense);
    }
    opr_value ca[2] = {opr_v_tensors(flat, n), opr_v_int(0)};
    if (!rc) rc = opr_call(cat, ca, 2, outs, 1);
    for (int k = 0; k < 2 * n; k++) opr_tensor_release(pieces[k]);
    free(pieces);
    return rc;
}

/* The op without grad on dev in dt, outputs as f64 (perturbed as build_call says). */
static int forward(const gc *g, opr_device dev, opr_dtype dt, int pert, int64_t pel, double delta, double **vals)
{
    gc_call c;
    bool prev = opr_grad_mode_set(false);
    opr_tensor *outs[OPR_MAX_OUTS] = {NULL};
    int rc = build_call(g, dev, dt, 0, pert, pel, delta, &c);
    if (!rc) rc = call_op(g, &c, outs);
    opr_grad_mode_set(prev);
    for (int k = 0; !rc && k < g->nout; k++)
        if (!(vals[k] = host_f64(outs[k]))) rc = opr_error_status();
    for (int k = 0; k < g->nout; k++) opr_tensor_release(outs[k]);
    call_free(&c);
    return rc;
}

/* Central differences of <v, f> with respect to every element of tensor ti. */
static int numeric(gc *g, int ti)
{
    gc_tensor *t = &g->t[ti];
    if (t->num) return OPR_OK;
    double *num = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *num);
    if (!num) return opr_fail(OPR_ERR_NOMEM, "gradcheck: out of memory");
    for (int64_t e = 0; e < t->numel; e++) {
        double *vp[OPR_MAX_OUTS] = {NULL}, *vm[OPR_MAX_OUTS] = {NULL};
        int rc = forward(g, g->ref_dev, g->ref_dt, ti, e, g->eps, vp);
        if (!rc) rc = forward(g, g->ref_dev, g->ref_dt, ti, e, -g->eps, vm);
        double acc = 0;
        for (int k = 0; !rc && k < g->nout; k++) {
            if (!g->out_float[k]) continue;
            for (int64_t j = 0; j < g->out_numel[k]; j++) {
                double diff = vp[k][j] - vm[k][j];
                if (diff != 0) acc += g->v[k][j] * diff; /* untouched outputs add no rounding */
            }
        }
        for (int k = 0; k < OPR_MAX_OUTS; k++) { free(vp[k]); free(vm[k]); }
        if (rc) {
            free(num);
            return opr_fail_wrap(rc, "gradcheck: %s: reference forward for finite differences", g->op->name);
        }
        num[e] = acc / (2 * g->eps);
    }
    t->num = num;
    return OPR_OK;
}

static void tolerance(opr_dtype dt, bool forward_out, double *atol, double *rtol)
{
    switch (dt) {
    case OPR_F64: *atol = forward_out ? 1e-12 : 1e-7; *rtol = forward_out ? 1e-9 : 1e-5; break;
    case OPR_F32: *atol = 1e-5; *rtol = 1e-4; break;
    case OPR_F16: case OPR_BF16: *atol = 1e-2; *rtol = 2e-2; break;
    default: *atol = 0; *rtol = 0; break;
    }
}

/* a within tolerance of n (equal infinities included). nan_equal: a NaN matches a NaN,
 * for the forward, where the device only has to agree with the reference; gradients
 * pass it false, as torch.autograd.gradcheck does (NaN is a mismatch, even with NaN). */
static bool close_to(double a, double n, double atol, double rtol, bool nan_equal)
{
    if (isnan(a) || isnan(n)) return nan_equal && isnan(a) && isnan(n);
    return a == n || fabs(a - n) <= atol + rtol * fmax(fabs(a), fabs(n));
}

static void describe_mask(const gc *g, uint32_t rg, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->nt && used + 1 < len; i++) {
        if (!((rg >> i) & 1)) continue;
        const gc_tensor *t = &g->t[i];
        int k = t->item >= 0 ? snprintf(buf + used, len - used, "%s%s[%d]", used ? ", " : "", g->op->args[t->arg].name, t->item)
                             : snprintf(buf + used, len - used, "%s%s", used ? ", " : "", g->op->args[t->arg].name);
        if (k > 0) used += (size_t)k < len - used ? (size_t)k : len - used - 1;
    }
}

/* "self, mat2 (kernel mm_backward)", "fast self", "plan chosen by cost" */
static const char *cand_label(const opr_op *op, int cand, char *buf, size_t len)
{
    if (cand < 0) return "plan chosen by cost";
    snprintf(buf, len, "%s", op->deriv->cands[cand].label);
    return buf;
}

typedef enum { GC_PASS, GC_FAIL, GC_NA, GC_ERROR } gc_outcome;

/* Gradients for mask rg with the candidate now forced on dev in dt, compared with the
 * finite differences on the inputs that `judge` selects. On GC_FAIL and GC_ERROR, why
 * says what happened. */
static gc_outcome analytic(gc *g, opr_device dev, opr_dtype dt, uint32_t rg, uint32_t judge, char *why, size_t len)
{
    gc_call c;
    opr_tensor *outs[OPR_MAX_OUTS] = {NULL}, *gos[OPR_MAX_OUTS] = {NULL}, *fouts[OPR_MAX_OUTS];
    opr_tensor *inputs[GC_MAX_T], *grads[GC_MAX_T] = {NULL};
    int tin[GC_MAX_T], nin = 0, nf = 0;
    gc_outcome res = GC_ERROR;
    double atol, rtol;
    tolerance(dt, false, &atol, &rtol);
    if (g->atol > 0) atol = g->atol;
    if (g->rtol > 0) rtol = g->rtol;
    bool prev = opr_grad_mode_set(true);
    int rc = build_call(g, dev, dt, rg, -1, 0, 0, &c);
    if (!rc) rc = call_op(g, &c, outs);
    if (!rc && g->op->deriv->forced < 0 && dev.type == g->dev.type && dt == g->dt) /* what a failure of the plan ran */
        gc_plan_of(outs[0], g->op, g->plan_ran, sizeof g->plan_ran);
    for (int k = 0; !rc && k < g->nout; k++) {
        if (!g->out_float[k]) continue;
        if (!(gos[nf] = tensor_of(g->ctx, opr_tensor_dtype(outs[k]), g->out_ndim[k], g->out_shape[k], g->v[k],
                                  g->out_numel[k], dev)))
            rc = opr_error_status();
        fouts[nf++] = outs[k];
    }
    for (int i = 0; i < g->nt; i++)
        if ((rg >> i) & 1) { tin[nin] = i; inputs[nin++] = c.t[i]; }
    if (!rc) rc = opr_autograd_grad(fouts, gos, nf, inputs, nin, grads, NULL);
    opr_grad_mode_set(prev);
    if (rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED) {
        snprintf(why, len, "%s", opr_last_error());
        g->na_declined = rc == OPR_ERR_UNSUPPORTED && opr_last_error_declined();
        res = GC_NA;
        goto done;
    }
    if (rc) { snprintf(why, len, "%s: %s", opr_status_name(rc), opr_last_error()); goto done; }
    for (int j = 0; j < nin; j++) {
        int ti = tin[j];
        gc_tensor *t = &g->t[ti];
        if (!((judge >> ti) & 1)) continue;
        if (grads[j] && (opr_tensor_ndim(grads[j]) != t->ndim ||
                         memcmp(opr_tensor_shape(grads[j]), t->shape, (size_t)t->ndim * sizeof(int64_t)))) {
            char d[96];
            snprintf(why, len, "gradient of %s is %s, not the input's shape", g->op->args[t->arg].name,
                     opr_tensor_describe(grads[j], d, sizeof d));
            res = GC_FAIL;
            goto done;
        }
        double *a = grads[j] ? host_f64(grads[j]) : calloc((size_t)(t->numel ? t->numel : 1), sizeof *a);
        if (!a) { snprintf(why, len, "reading the gradient back: %s", opr_last_error()); goto done; }
        if ((rc = numeric(g, ti))) { free(a); snprintf(why, len, "%s", opr_last_error()); goto done; }
        /* f16 and bf16: the relative term against the gradient's largest |numeric| too.
         * A formula run in half precision rounds every intermediate, and where it
         * subtracts nearly equal terms (batch norm's g - mean(g) - xhat mean(g xhat)) the
         * error is a fraction of those terms, not of the small difference. */
        double scale = 0;
        for (int64_t e = 0; (dt == OPR_F16 || dt == OPR_BF16) && e < t->numel; e++)
            if (isfinite(t->num[e])) scale = fmax(scale, fabs(t->num[e]));
        for (int64_t e = 0; e < t->numel; e++) {
            if (close_to(a[e], t->num[e], atol + rtol * scale, rtol, false)) continue;
            char item[24] = "";
            if (t->item >= 0) snprintf(item, sizeof item, "[%d]", t->item);
            snprintf(why, len, "d/d %s%s element %lld: analytic %.9g, numeric %.9g%s", g->op->args[t->arg].name, item,
                     (long long)e, a[e], t->num[e], grads[j] ? "" : " (no gradient returned: taken as 0)");
            free(a);
            res = GC_FAIL;
            goto done;
        }
        free(a);
    }
    res = GC_PASS;
done:
    for (int k = 0; k < OPR_MAX_OUTS; k++) { opr_tensor_release(outs[k]); opr_tensor_release(gos[k]); }
    for (int j = 0; j < nin; j++) opr_tensor_release(grads[j]);
    call_free(&c);
    return res;
}

static void na_add(gc *g, int cand, const char *why)
{
    if (!g->res->not_available_why[0] && why)
        snprintf(g->res->not_available_why, sizeof g->res->not_available_why, "%s", why);
    char *list = g->res->not_available_list;
    size_t size = sizeof g->res->not_available_list;
    char item[160], lb[128];
    snprintf(item, sizeof item, "[%s]", cand_label(g->op, cand, lb, sizeof lb));
    if (strstr(list, item)) return;
    size_t used = strlen(list);
    if (used + strlen(item) + 3 < size) snprintf(list + used, size - used, "%s%s", used ? ", " : "", item);
}

/* Records the first failure with its culprit and leaves it in opr_last_error. */
static void blame(gc *g, opr_gradcheck_culprit who, int cand, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void blame(gc *g, opr_gradcheck_culprit who, int cand, const char *name, const char *fmt, ...)
{
    g->res->failed++;
    if (g->res->culprit != OPR_GC_NONE) return;
    g->res->culprit = who;
    g->res->candidate = cand;
    snprintf(g->res->culprit_name, sizeof g->res->culprit_name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->res->detail, sizeof g->res->detail, fmt, ap);
    va_end(ap);
}

/* One (mask, candidate) combination; cand -1 is the plan chosen by cost. */
static void check_one(gc *g, uint32_t rg, int cand)
{
    const opr_op *op = g->op;
    deriv_info *d = op->deriv;
    uint32_t argmask = 0, judge = rg;
    for (int i = 0; i < g->nt; i++)
        if ((rg >> i) & 1) argmask |= 1u << g->t[i].arg;
    if (cand >= 0) {
        if (!(d->cands[cand].covers & argmask)) return; /* covers none of them */
        judge = 0;
        for (int i = 0; i < g->nt; i++)
            if (((rg >> i) & 1) && ((d->cands[cand].covers >> g->t[i].arg) & 1)) judge |= 1u << i;
    }
    int prev = d->forced;
    char why[600] = "", mask[160], devname[48];
    describe_mask(g, rg, mask, sizeof mask);
    opr_device_format(g->ctx, g->dev, devname, sizeof devname);
    opr_op_force_grad_candidate(op, cand);
    gc_outcome r = analytic(g, g->dev, g->dt, rg, judge, why, sizeof why);
    g->res->checked++;
    if (r == GC_PASS) { g->res->passed++; goto out; }
    if (r == GC_NA) {
        g->res->not_available++;
        g->res->declined += g->na_declined;
        g->res->checked--;
        na_add(g, cand, why);
        goto out;
    }
    char lb[200];
    const char *label = cand_label(op, cand, lb, sizeof lb);
    const char *dtn = opr_dtype_name(g->dt);
    /* the plan chosen by cost is held to the candidates it ran, and says which */
    uint64_t ran = cand >= 0 ? (cand < 64 ? 1ull << cand : ~0ull) : gc_plan_cands(op, g->plan_ran);
    int ran_kernel = -1;
    bool ran_formula = false;
    for (int i = 0; cand < 0 && ran != ~0ull && i < d->ncands; i++) {
        if (!((ran >> i) & 1)) continue;
        if (d->cands[i].kernel && ran_kernel < 0) ran_kernel = i;
        if (!d->cands[i].kernel) ran_formula = true;
    }
    if (cand < 0 && g->plan_ran[0]) {
        snprintf(lb, sizeof lb, "plan chosen by cost, which ran %s", g->plan_ran);
        label = lb;
    }
    if (r == GC_ERROR) {
        blame(g, OPR_GC_ERROR, cand, op->name, "%s: candidate [%s], mask {%s}, on %s %s: %s", op->name, label, mask,
              devname, dtn, why);
        goto out;
    }
    if (cand < 0 && ran_kernel >= 0 && !ran_formula) {
        blame(g, OPR_GC_KERNEL, cand, d->cands[ran_kernel].kernel->name,
              "%s: the fused backward kernel %s is wrong on %s %s (candidate [%s], mask {%s}): %s", op->name,
              d->cands[ran_kernel].kernel->name, devname, dtn, label, mask, why);
        goto out;
    }
    if (cand >= 0 && d->cands[cand].kernel) {
        blame(g, OPR_GC_KERNEL, cand, d->cands[cand].kernel->name,
              "%s: the fused backward kernel %s is wrong on %s %s (candidate [%s], mask {%s}): %s", op->name,
              d->cands[cand].kernel->name, devname, dtn, label, mask, why);
        goto out;
    }
    /* a formula: right or wrong where its helper ops are the reference ones? */
    char why_ref[600] = "";
    gc_outcome on_ref = GC_FAIL;
    if (g->dev.type != g->ref_dev.type || g->dt != g->ref_dt)
        on_ref = analytic(g, g->ref_dev, g->ref_dt, rg, judge, why_ref, sizeof why_ref);
    char helpers[sizeof g->res->helpers];
    gc_helpers_of(op, ran, argmask, helpers, sizeof helpers);
    if (g->res->culprit == OPR_GC_NONE) memcpy(g->res->helpers, helpers, sizeof helpers);
    if (on_ref == GC_PASS) {
        blame(g, OPR_GC_HELPER, cand, helpers,
              "%s: the derivative formula [%s] is right on the CPU in f64 but wrong on %s %s (mask {%s}): an op it "
              "calls is wrong there (%s): %s", op->name, label, devname, dtn, mask, helpers, why);
    } else if (on_ref == GC_FAIL) {
        blame(g, OPR_GC_FORMULA, cand, op->name,
              "%s: the derivative formula [%s] is wrong (mask {%s}, on %s %s%s): %s", op->name, label, mask, devname,
              dtn, g->dev.type != g->ref_dev.type || g->dt != g->ref_dt ? ", and on the CPU in f64 too" : "",
              why);
    } else { /* the CPU cannot run it: the formula is all there is to blame */
        blame(g, OPR_GC_FORMULA, cand, op->name,
              "%s: the derivative formula [%s] is wrong on %s %s (mask {%s}; not run on the CPU in f64 to tell it "
              "from the ops it calls: %s): %s", op->name, label, devname, dtn, mask, why_ref, why);
    }
out:
    opr_op_force_grad_candidate(op, prev);
}

/* The forward on the device against the reference forward. */
static bool forward_agrees(gc *g)
{
    double *got[OPR_MAX_OUTS] = {NULL};
    char devname[48];
    opr_device_format(g->ctx, g->dev, devname, sizeof devname);
    int rc = forward(g, g->dev, g->dt, -1, 0, 0, got);
    bool ok = true;
    if (rc == OPR_ERR_NOT_FOUND || rc == OPR_ERR_UNSUPPORTED) {
        g->res->not_available++;
        ok = false;
        snprintf(g->res->not_available_list, sizeof g->res->not_available_list, "[forward in %s]", opr_dtype_name(g->dt));
    } else if (rc) {
        blame(g, OPR_GC_ERROR, -1, g->op->name, "%s: forward on %s %s failed: %s", g->op->name, devname,
              opr_dtype_name(g->dt), opr_last_error());
        ok = false;
    }
    for (int k = 0; ok && k < g->nout; k++) {
        double atol, rtol;
        tolerance(g->out_dt[k], true, &atol, &rtol);
        for (int64_t e = 0; ok && e < g->out_numel[k]; e++) {
            if (close_to(got[k][e], g->ref_out[k][e], atol, rtol, true)) continue;
            blame(g, OPR_GC_FORWARD, -1, g->op->name, "%s: the forward kernel is wrong on %s %s: output %d element %lld: "
                  "%.9g, reference %.9g", g->op->name, devname, opr_dtype_name(g->dt), k, (long long)e, got[k][e],
                  g->ref_out[k][e]);
            g->res->checked++;
            ok = false;
        }
    }
    for (int k = 0; k < OPR_MAX_OUTS; k++) free(got[k]);
    return ok;
}

static int setup(gc *g, const char *const *inputs, int n_inputs, const opr_gradcheck_opts *o)
{
    const opr_op *op = g->op;
    bool have_dev = false, have_dt = false;
    for (int a = 0; a < g->nargs; a++) {
        const opr_value *v = &g->args[a];
        int n = v->kind == OPR_V_TENSOR ? 1 : v->kind == OPR_V_TENSOR_LIST ? v->u.tl.n : 0;
        for (int it = 0; it < n; it++) {
            opr_tensor *src = v->kind == OPR_V_TENSOR ? v->u.t : v->u.tl.items[it];
            if (!src && v->kind == OPR_V_TENSOR_LIST && a < op->nargs && op->args[a].none_items) continue; /* None index */
            if (!src) return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s: NULL tensor in argument %d", op->name, a);
            if (g->nt == GC_MAX_T)
                return opr_fail(OPR_ERR_UNSUPPORTED, "opr_gradcheck: %s: more than %d tensors", op->name, GC_MAX_T);
            int rc = opr_layout_refuse(src, "opr_gradcheck");
            if (rc) return rc;
            gc_tensor *t = &g->t[g->nt++];
            t->arg = a;
            t->item = v->kind == OPR_V_TENSOR ? -1 : it;
            t->dtype = opr_tensor_dtype(src);
            t->ndim = opr_tensor_ndim(src);
            memcpy(t->shape, opr_tensor_shape(src), (size_t)t->ndim * sizeof(int64_t));
            t->numel = opr_tensor_numel(src);
            if (!(t->vals = host_f64(src))) return opr_error_status();
            if (!have_dev) { g->dev = opr_tensor_device(src); have_dev = true; }
            if (!have_dt && opr_dtype_is_floating(t->dtype)) { g->dt = t->dtype; have_dt = true; }
            /* all inputs: those a candidate differentiates (not batch norm's running
             * statistics, which it writes, nor a tensor read for its shape only) */
            bool asked = !inputs && op->deriv && ((op->deriv->differentiable >> a) & 1);
            for (int k = 0; inputs && k < n_inputs; k++)
                asked |= inputs[k] && !strcmp(inputs[k], op->args[a].name);
            t->checked = asked && opr_dtype_is_floating(t->dtype);
            if (t->checked) g->in[g->nin++] = g->nt - 1;
        }
    }
    for (int k = 0; inputs && k < n_inputs; k++) {
        bool found = false;
        for (int a = 0; a < op->nargs; a++) found |= inputs[k] && !strcmp(inputs[k], op->args[a].name);
        if (!found)
            return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s has no argument named '%s'", op->name,
                            inputs[k] ? inputs[k] : "(null)");
    }
    if (!g->nin) return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s: no floating tensor input to check", op->name);
    if (!op->deriv) return opr_fail(OPR_ERR_UNSUPPORTED, "opr_gradcheck: %s is not differentiable", op->name);
    g->eps = o->eps > 0 ? o->eps : 1e-6;
    g->atol = o->atol;
    g->rtol = o->rtol;
    g->ref_dev = opr_op_has_kernel(op, 0) ? OPR_CPU : g->dev;
    g->ref_dt = OPR_F64;
    opr_kernel_info ki = {.struct_size = sizeof ki};
    if (g->ref_dev.type == g->dev.type && g->dev.type != 0 && opr_op_kernel_info(op, g->dev.type, OPR_F64, &ki)) {
        /* Only the device runs the op, and not in f64: finite differences in f32 there,
         * with a step and a gradient tolerance for f32 (opreg.h, opr_gradcheck). */
        g->ref_dt = OPR_F32;
        if (!(o->eps > 0)) g->eps = 1e-3;
        if (!(g->atol > 0)) g->atol = GC_F32_REF_ATOL;
        if (!(g->rtol > 0)) g->rtol = GC_F32_REF_RTOL;
    }
    /* the reference forward: the outputs' values, shapes and dtypes */
    g->nout = op->nout;
    gc_call c;
    opr_tensor *outs[OPR_MAX_OUTS] = {NULL};
    bool prev = opr_grad_mode_set(false);
    int rc = build_call(g, g->ref_dev, g->ref_dt, 0, -1, 0, 0, &c);
    if (!rc) rc = call_op(g, &c, outs);
    opr_grad_mode_set(prev);
    if (rc) rc = opr_fail_wrap(rc, "opr_gradcheck: %s: the reference forward in %s failed", op->name,
                               opr_dtype_name(g->ref_dt));
    for (int k = 0; !rc && k < g->nout; k++) {
        g->out_dt[k] = opr_tensor_dtype(outs[k]);
        g->out_float[k] = opr_dtype_is_floating(g->out_dt[k]) && opr_op_output_differentiable(op, k);
        g->out_ndim[k] = opr_tensor_ndim(outs[k]);
        memcpy(g->out_shape[k], opr_tensor_shape(outs[k]), (size_t)g->out_ndim[k] * sizeof(int64_t));
        g->out_numel[k] = opr_tensor_numel(outs[k]);
        if (!(g->ref_out[k] = host_f64(outs[k]))) rc = opr_error_status();
    }
    for (int k = 0; k < g->nout; k++) opr_tensor_release(outs[k]);
    call_free(&c);
    if (rc) return rc;
    /* the device's outputs take the device's dtype (f32 under test gives f32 outputs) */
    uint64_t s = o->seed ? o->seed : 0x243f6a8885a308d3ull;
    bool any = false;
    for (int k = 0; k < g->nout; k++) {
        if (opr_dtype_is_floating(g->out_dt[k]) && g->dt != g->ref_dt) g->out_dt[k] = g->dt;
        if (!g->out_float[k]) continue;
        any = true;
        if (!(g->v[k] = malloc((size_t)(g->out_numel[k] ? g->out_numel[k] : 1) * sizeof(double))))
            return opr_fail(OPR_ERR_NOMEM, "opr_gradcheck: out of memory");
        for (int64_t e = 0; e < g->out_numel[k]; e++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            double u = -1 + 2 * (double)(s >> 11) / 9007199254740992.0;
            /* rounded to the output's dtype, so that both sides weigh by the same numbers */
            unsigned char b[8];
            opr_dtype_store(g->out_dt[k], u, b);
            g->v[k][e] = g->out_dt[k] == OPR_F32 ? *(float *)b : g->out_dt[k] == OPR_F16 ? opr_f16_to_float(*(uint16_t *)b)
                         : g->out_dt[k] == OPR_BF16 ? opr_bf16_to_float(*(uint16_t *)b) : u;
        }
    }
    if (!any) return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s has no floating output", op->name);
    return OPR_OK;
}

opr_status opr_gradcheck(const opr_op *op, const opr_value *args, int nargs, const char *const *inputs, int n_inputs,
                         const opr_gradcheck_opts *opts, opr_gradcheck_result *res)
{
    opr_gradcheck_opts o = {0};
    opr_gradcheck_result r = {.struct_size = sizeof r, .candidate = -1};
    if (!op || (!args && nargs) || nargs < 0 || nargs > op->nargs || (n_inputs && !inputs) || n_inputs < 0)
        return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: bad arguments");
    int rc = opr_struct_in(&o, sizeof o, opts, OPR_GRADCHECK_OPTS_STRUCT_SIZE_0_1, "opr_gradcheck", "opr_gradcheck_opts");
    if (rc) return rc;
    if (res && res->struct_size < OPR_GRADCHECK_RESULT_STRUCT_SIZE_0_1)
        return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: opr_gradcheck_result.struct_size %zu is too small",
                        res->struct_size);
    /* 0 is the default; a NaN or negative value would otherwise fall back to it
     * silently, and an infinite one makes a check that cannot fail */
    if (o.eps != 0 && !(isfinite(o.eps) && o.eps > 0))
        return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: eps %g must be finite and positive (0: the default)", o.eps);
    if (!(isfinite(o.atol) && o.atol >= 0) || !(isfinite(o.rtol) && o.rtol >= 0))
        return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s %g must be finite and not negative (0: the default)",
                        isfinite(o.atol) && o.atol >= 0 ? "rtol" : "atol", isfinite(o.atol) && o.atol >= 0 ? o.rtol : o.atol);
    if (o.one_candidate && (o.candidate < -1 || o.candidate >= opr_op_grad_candidate_count(op)))
        return opr_fail(OPR_ERR_INVALID, "opr_gradcheck: %s has no candidate %d", op->name, o.candidate);
    gc *g = calloc(1, sizeof *g);
    if (!g) return opr_fail(OPR_ERR_NOMEM, "opr_gradcheck: out of memory");
    *g = (gc){.op = op, .ctx = op->ctx, .args = args, .nargs = nargs, .dt = OPR_F64, .res = &r};
    rc = setup(g, inputs, n_inputs, &o);
    if (!rc && forward_agrees(g)) {
        uint32_t full = 0;
        for (int j = 0; j < g->nin; j++) full |= 1u << g->in[j];
        for (uint32_t m = 1; m < (1u << g->nin); m++) {
            uint32_t rg = 0;
            for (int j = 0; j < g->nin; j++)
                if ((m >> j) & 1) rg |= 1u << g->in[j];
            if (o.full_mask_only && rg != full) continue;
            if (o.one_candidate) {
                check_one(g, rg, o.candidate);
                continue;
            }
            for (int c = 0; c < op->deriv->ncands; c++) check_one(g, rg, c);
            check_one(g, rg, -1);
        }
    }
    for (int i = 0; i < g->nt; i++) { free(g->t[i].vals); free(g->t[i].num); }
    for (int k = 0; k < OPR_MAX_OUTS; k++) { free(g->ref_out[k]); free(g->v[k]); }
    free(g);
    if (res) opr_struct_out(res, &r, sizeof r, OPR_GRADCHECK_RESULT_STRUCT_SIZE_0_1, "opr_gradcheck",
                            "opr_gradcheck_result");
    if (rc) return rc;
    if (r.failed) return opr_fail(OPR_ERR_MISMATCH, "%s", r.detail);
    return OPR_OK;
}
