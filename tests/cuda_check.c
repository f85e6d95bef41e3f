/* opreg_cuda_check: what `opreg check --backend cuda` does not cover, through the
 * public API. `opreg check` compares every op with the CPU, and every backward
 * candidate with finite differences, on the registry's samples, whose tensors are all
 * contiguous; the GPU kernels have separate paths for strided operands (transposed
 * GEMM operands, strided elementwise and reduction geometry, strided index/scatter
 * views, in-place writes through views),
 * which this program exercises:
 *
 *   opreg_cuda_check [--device cuda:N] [--op NAME] [--no-grad] [--verbose]
 *
 * 1. device basics: host <-> device round trips of several sizes (empty to 24 MiB),
 *    memory statistics (nothing in use afterwards), sync;
 * 2. forward parity on strided layouts: every op with `samples:`, every sample and
 *    dtype the op allows, with every tensor argument of 2+ dims replaced by a
 *    transposed (non-contiguous) view of the same values, on the CPU and on the device
 *    (opr_op_sample_args draws the same numbers on every backend); outputs must agree
 *    (i64/bool exactly, f64 to 1e-9, f32 to 1e-4 relative) and an error on one side
 *    must be an error on the other. The CPU plugin only stores f16/bf16 (no arithmetic
 *    kernels), so a half case is compared against an f32 CPU reference computed on
 *    the very values the device got (its half inputs read back), its floating outputs
 *    rounded to the half type and compared to 1e-2; a half dtype the device kernel does
 *    not implement counts as skipped;
 * 3. gradient parity on the same strided leaves: every op with derivative candidates,
 *    f64 and f32, each candidate forced in turn (the fused backward kernels included),
 *    all floating tensor inputs requiring grad, the same output gradients both sides;
 * 4. large sizes, contiguous and strided, f64 and f32: the paths small samples never
 *    reach (split reductions, multi-chunk mask scans, sorts in global scratch, tiled
 *    and batched GEMMs, many repeated scatter indices).
 *
 * On a machine without a GPU it runs against the emulated CUDA plugin (tests/gpu_emu,
 * plugin "cuda-emu", device "cuda": the same kernel sources on a CPU stand-in for the
 * CUDA runtime), loaded by pointing OPREG_PLUGIN_PATH at the build's plugins-emu
 * directory.
 *
 * Exit status: 0 all passed, 1 some failed, 77 no usable device (the reason printed). */
#include <opreg/opreg.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXARGS 16
#define MAXOUT 4
#define MAXIN 32

static opr_ctx *ctx;
static opr_device dev;
static const char *only_op;
static int verbose;
static int n_pass, n_fail, n_skip;

/* ------------------------------------------------------------------ host data */

/* The half types, which the CPU plugin stores but has no arithmetic kernels for. */
static bool is_half(opr_dtype dt)
{
    return dt == OPR_F16 || dt == OPR_BF16;
}

/* The values of t (any device, any layout) as doubles; NULL on failure. */
static double *values_of(opr_tensor *t, int64_t *n)
{
    *n = opr_tensor_numel(t);
    opr_tensor *h = opr_tensor_to(t, OPR_CPU);
    opr_tensor *c = h ? opr_tensor_contiguous(h) : NULL;
    double *out = malloc((size_t)(*n ? *n : 1) * sizeof *out);
    const bool ok = c && out && opr_tensor_copy_to_host_f64(c, out, *n) == OPR_OK;
    opr_tensor_release(c);
    opr_tensor_release(h);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static bool close_enough(double a, double b, opr_dtype dt)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (dt == OPR_I64 || dt == OPR_I32 || dt == OPR_BOOL) return a == b;
    if (isinf(a) || isinf(b)) return a == b;
    const double rtol = dt == OPR_F64 ? 1e-9 : dt == OPR_F32 ? 1e-4 : 1e-2;
    const double atol = dt == OPR_F64 ? 1e-12 : dt == OPR_F32 ? 1e-5 : 1e-2;
    return fabs(a - b) <= atol + rtol * fmax(fabs(a), fabs(b));
}

/* v as the half type dt stores it (overflow to infinity included). */
static double round_to_half(double v, opr_dtype dt)
{
    return dt == OPR_F16 ? opr_f16_to_float(opr_f16_from_float((float)v))
                         : opr_bf16_to_float(opr_bf16_from_float((float)v));
}

/* Compares the CPU result a with the device result b (shape, dtype, values); writes
 * what differs into why. half_ref: the CPU ran in f32 for a half device case, so an
 * f32 a stands for an f16/bf16 b; its values are rounded to b's type first, since the
 * device rounds its results too (an f32 reference can exceed the half range where the
 * device gives infinity), and compared with the half tolerance. */
static bool same_tensor(opr_tensor *a, opr_tensor *b, bool half_ref, char *why, size_t len)
{
    if (!a || !b) {
        snprintf(why, len, "%s result missing", a ? "device" : "cpu");
        return !a && !b;
    }
    char da[96], db[96];
    const opr_dtype dta = opr_tensor_dtype(a), dtb = opr_tensor_dtype(b);
    const bool rounded = half_ref && dta == OPR_F32 && is_half(dtb);
    bool shape = (dta == dtb || rounded) && opr_tensor_ndim(a) == opr_tensor_ndim(b);
    for (int d = 0; shape && d < opr_tensor_ndim(a); d++) shape = opr_tensor_size(a, d) == opr_tensor_size(b, d);
    if (!shape) {
        snprintf(why, len, "cpu gives %s, device gives %s", opr_tensor_describe(a, da, sizeof da),
                 opr_tensor_describe(b, db, sizeof db));
        return false;
    }
    int64_t n, m;
    double *va = values_of(a, &n), *vb = values_of(b, &m);
    bool ok = va && vb;
    if (!ok) snprintf(why, len, "cannot read values back: %s", opr_last_error());
    for (int64_t i = 0; ok && i < n; i++) {
        const double ref = rounded ? round_to_half(va[i], dtb) : va[i];
        if (!close_enough(ref, vb[i], dtb)) {
            snprintf(why, len, "element %lld: cpu %.17g%s, device %.17g", (long long)i, va[i],
                     rounded ? " (f32 reference)" : "", vb[i]);
            ok = false;
        }
    }
    free(va);
    free(vb);
    return ok;
}

/* ------------------------------------------------------------------ reporting */

static void result(bool ok, const char *what, const char *detail)
{
    if (ok) {
        n_pass++;
        if (verbose) printf("ok    %s\n", what);
    } else {
        n_fail++;
        printf("FAIL  %s: %s\n", what, detail);
    }
}

/* ------------------------------------------------------------------ arguments */

typedef struct {
    opr_value v[MAXARGS];
    int n;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nowned;
    opr_tensor *extra[MAXARGS * 8];
    int nextra;
    opr_tensor *lists[MAXARGS][8]; /* strided copies of Tensor[] items */
} args;

static void args_free(args *a)
{
    for (int i = 0; i < a->nowned; i++) opr_tensor_release(a->owned[i]);
    for (int i = 0; i < a->nextra; i++) opr_tensor_release(a->extra[i]);
    a->nowned = a->nextra = 0;
}

/* The same values as t through a transposed layout (last two dims), or t itself. */
static opr_tensor *strided_twin(args *a, opr_tensor *t)
{
    if (!t || opr_tensor_ndim(t) < 2 || a->nextra + 2 > (int)(sizeof a->extra / sizeof a->extra[0])) return t;
    const int nd = opr_tensor_ndim(t);
    opr_tensor *tr = opr_tensor_transpose(t, nd - 2, nd - 1);
    opr_tensor *c = tr ? opr_tensor_contiguous(tr) : NULL;
    opr_tensor *back = c ? opr_tensor_transpose(c, nd - 2, nd - 1) : NULL;
    opr_tensor_release(tr);
    opr_tensor_release(c);
    if (!back) return t;
    if (opr_requires_grad(t)) opr_set_requires_grad(back, true);
    a->extra[a->nextra++] = back;
    return back;
}

/* Overwrites the f32 CPU tensor ref with the values of t, a half tensor of the same
 * shape on the device. */
static int take_values(opr_tensor *ref, opr_tensor *t)
{
    int64_t n;
    double *v = values_of(t, &n);
    float *f = v && n == opr_tensor_numel(ref) ? malloc((size_t)(n ? n : 1) * sizeof *f) : NULL;
    int rc = f ? OPR_OK : OPR_ERR_INVALID;
    for (int64_t i = 0; f && i < n; i++) f[i] = (float)v[i]; /* exact: every half value is a float */
    if (f) rc = opr_tensor_copy_from_host(ref, f, (size_t)n * sizeof *f);
    free(v);
    free(f);
    return rc;
}

/* The arguments of sample `sample` in dt on d, transposed twins in place of the tensors
 * of 2+ dims when strided. like: the device's arguments of a half case when this is its
 * f32 CPU reference; the tensors that are half there take their values, so the
 * reference computes on the numbers the device got (rounded to the half type), not on
 * the unrounded ones opr_op_sample_args draws for f32. */
static int build(const opr_op *op, int sample, opr_dtype dt, opr_device d, bool strided, const args *like, args *a)
{
    memset(a, 0, sizeof *a);
    int rc = opr_op_sample_args(op, sample, dt, d, 1000 + (uint64_t)sample, a->v, &a->n, a->owned, &a->nowned);
    for (int i = 0; !rc && like && i < a->n; i++) {
        const opr_value *lv = &like->v[i], *v = &a->v[i];
        if (i >= like->n || lv->kind != v->kind) {
            rc = OPR_ERR_INVALID;
        } else if (v->kind == OPR_V_TENSOR) {
            if (opr_tensor_dtype(v->u.t) == OPR_F32 && is_half(opr_tensor_dtype(lv->u.t)))
                rc = take_values(v->u.t, lv->u.t);
        } else if (v->kind == OPR_V_TENSOR_LIST) {
            if (lv->u.tl.n != v->u.tl.n) rc = OPR_ERR_INVALID;
            for (int j = 0; !rc && j < v->u.tl.n; j++)
                if (v->u.tl.items[j] && opr_tensor_dtype(v->u.tl.items[j]) == OPR_F32 && is_half(opr_tensor_dtype(lv->u.tl.items[j])))
                    rc = take_values(v->u.tl.items[j], lv->u.tl.items[j]);
        }
    }
    if (rc || !strided) return rc;
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].kind == OPR_V_TENSOR) {
            a->v[i].u.t = strided_twin(a, a->v[i].u.t);
        } else if (a->v[i].kind == OPR_V_TENSOR_LIST && a->v[i].u.tl.n <= 8) {
            for (int j = 0; j < a->v[i].u.tl.n; j++) /* a None index item stays None */
                a->lists[i][j] = a->v[i].u.tl.items[j] ? strided_twin(a, a->v[i].u.tl.items[j]) : NULL;
            a->v[i].u.tl.items = a->lists[i];
        }
    }
    return OPR_OK;
}

static bool has_strided_arg(const args *a)
{
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].kind == OPR_V_TENSOR && opr_tensor_ndim(a->v[i].u.t) >= 2) return true;
        if (a->v[i].kind == OPR_V_TENSOR_LIST)
            for (int j = 0; j < a->v[i].u.tl.n; j++)
                if (a->v[i].u.tl.items[j] && opr_tensor_ndim(a->v[i].u.tl.items[j]) >= 2) return true;
    }
    return false;
}

/* ------------------------------------------------------------------ 1. device basics */

static void check_device(void)
{
    static const int64_t sizes[] = {0, 1, 7, 1000, 1 << 20, 3 * (1 << 20) + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        double *h = malloc((size_t)(n ? n : 1) * sizeof *h), *back = malloc((size_t)(n ? n : 1) * sizeof *back);
        for (int64_t i = 0; i < n; i++) h[i] = (double)i * 0.5 - 3;
        opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, 1, &n, h, dev);
        bool ok = t && opr_tensor_copy_to_host(t, back, (size_t)n * sizeof *back) == OPR_OK;
        for (int64_t i = 0; ok && i < n; i++) ok = back[i] == h[i];
        char what[64];
        snprintf(what, sizeof what, "device round trip of %lld f64", (long long)n);
        result(ok, what, opr_last_error());
        opr_tensor_release(t);
        free(h);
        free(back);
    }
    opr_mem_stats st = {.struct_size = sizeof st};
    bool ok = opr_memory_stats(ctx, dev, &st) == OPR_OK && st.current_bytes == 0 &&
              opr_device_sync(ctx, dev) == OPR_OK;
    char detail[160];
    snprintf(detail, sizeof detail, "current %llu, peak %llu, reserved %llu bytes", (unsigned long long)st.current_bytes,
             (unsigned long long)st.peak_bytes, (unsigned long long)st.reserved_bytes);
    result(ok, "memory statistics after the round trips", detail);
}

/* ------------------------------------------------------------------ 2. forward parity */

static const opr_dtype all_dtypes[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16, OPR_I32};

/* The tensors a call gives: the op's outputs, or the pieces of an op returning a
 * Tensor[] (split), each compared as an output; at most MAXOUT (else 0: the call is
 * then refused for the wrong count, on both sides). */
static int outputs_for(const opr_op *op, const opr_value *v, int n)
{
    int count = 0;
    if (opr_op_result_count(op, v, n, &count) || count > MAXOUT) return opr_op_num_outputs(op);
    return count;
}

static void check_forward(const opr_op *op)
{
    const char *name = opr_op_name(op);
    int nout = opr_op_num_outputs(op);
    for (int s = 0; s < opr_op_sample_count(op); s++)
        for (size_t di = 0; di < sizeof all_dtypes / sizeof all_dtypes[0]; di++) {
            const opr_dtype dt = all_dtypes[di];
            if (!opr_op_supports_dtype(op, dt)) continue;
            args ac, ag;
            char what[160], why[1536] = "";
            snprintf(what, sizeof what, "%s sample %d %s strided", name, s, opr_dtype_name(dt));
            /* The CPU has no half arithmetic: an f32 reference on the device's values. */
            const bool half = is_half(dt);
            int rc_g = build(op, s, dt, dev, true, NULL, &ag);
            int rc_c = build(op, s, half ? OPR_F32 : dt, OPR_CPU, true, half && !rc_g ? &ag : NULL, &ac);
            if (rc_c || rc_g || !has_strided_arg(&ac)) {
                if (!rc_c != !rc_g) {
                    snprintf(why, sizeof why, "sample arguments built on the %s only: %s", rc_c ? "device" : "cpu",
                             opr_last_error());
                    result(false, what, why);
                } else {
                    n_skip++;
                }
                args_free(&ac);
                args_free(&ag);
                continue;
            }
            opr_tensor *oc[MAXOUT] = {NULL}, *og[MAXOUT] = {NULL};
            nout = outputs_for(op, ac.v, ac.n);
            rc_c = opr_call(op, ac.v, ac.n, oc, nout);
            char msg_c[512];
            snprintf(msg_c, sizeof msg_c, "%s", opr_last_error());
            rc_g = opr_call(op, ag.v, ag.n, og, nout);
            bool ok = true;
            if (half && rc_g == OPR_ERR_UNSUPPORTED && !rc_c) {
                /* The device kernel lacks the half dtype: nothing to compare (the CPU would
                 * refuse the half dtype as well; only its f32 reference ran). */
                n_skip++;
                if (verbose) printf("skip  %s: device: %s\n", what, opr_last_error());
                for (int k = 0; k < nout; k++) opr_tensor_release(oc[k]);
                args_free(&ac);
                args_free(&ag);
                continue;
            }
            if (rc_c || rc_g) {
                ok = rc_c && rc_g;
                snprintf(why, sizeof why, "cpu: %s%s%s; device: %s%s%.500s", opr_status_name(rc_c), rc_c ? " " : "",
                         rc_c ? msg_c : "", opr_status_name(rc_g), rc_g ? " " : "", rc_g ? opr_last_error() : "");
                if (ok && verbose) printf("      (both refused: %s)\n", why);
            } else {
                for (int k = 0; k < nout && ok; k++) {
                    ok = same_tensor(oc[k], og[k], half, why, sizeof why);
                    if (!ok) {
                        char tmp[1536];
                        snprintf(tmp, sizeof tmp, "output %d: %.1400s", k, why);
                        snprintf(why, sizeof why, "%s", tmp);
                    }
                }
            }
            result(ok, what, why);
            for (int k = 0; k < nout; k++) {
                opr_tensor_release(oc[k]);
                opr_tensor_release(og[k]);
            }
            args_free(&ac);
            args_free(&ag);
        }
}

/* ------------------------------------------------------------------ 3. gradient parity */

/* Forward with every floating tensor argument requiring grad, then the gradients of
 * the floating outputs weighted by fixed pseudo-random output gradients. grads[i] is
 * the gradient of inputs[i] (NULL where none flows). */
static int run_grad(const opr_op *op, int s, opr_dtype dt, opr_device d, opr_tensor **grads, int *nin, char *err,
                    size_t errlen)
{
    args a;
    int rc = build(op, s, dt, d, true, NULL, &a);
    if (rc) {
        snprintf(err, errlen, "sample args: %s", opr_last_error());
        return rc;
    }
    opr_tensor *inputs[MAXIN];
    *nin = 0;
    if (!has_strided_arg(&a)) {
        args_free(&a);
        snprintf(err, errlen, "no tensor argument of 2+ dims");
        return OPR_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < a.n; i++) {
        if (a.v[i].kind == OPR_V_TENSOR) {
            opr_tensor *t = a.v[i].u.t;
            opr_dtype tdt = opr_tensor_dtype(t);
            if ((tdt == OPR_F32 || tdt == OPR_F64) && *nin < MAXIN) {
                opr_set_requires_grad(t, true);
                inputs[(*nin)++] = t;
            }
        }
    }
    const int nout = outputs_for(op, a.v, a.n);
    opr_tensor *outs[MAXOUT] = {NULL}, *fouts[MAXOUT], *gos[MAXOUT] = {NULL};
    int nf = 0;
    rc = opr_call(op, a.v, a.n, outs, nout);
    if (rc) snprintf(err, errlen, "forward: %s: %s", opr_status_name(rc), opr_last_error());
    for (int k = 0; !rc && k < nout; k++) {
        const opr_dtype odt = opr_tensor_dtype(outs[k]);
        if (odt != OPR_F32 && odt != OPR_F64) continue;
        const int64_t n = opr_tensor_numel(outs[k]);
        double *g64 = malloc((size_t)(n ? n : 1) * sizeof *g64);
        float *g32 = malloc((size_t)(n ? n : 1) * sizeof *g32);
        uint64_t st = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
        for (int64_t i = 0; i < n; i++) {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            g64[i] = (double)(st >> 11) / 9007199254740992.0 * 2 - 1;
            g32[i] = (float)g64[i];
        }
        gos[nf] = opr_tensor_from_data(ctx, odt, opr_tensor_ndim(outs[k]), opr_tensor_shape(outs[k]),
                                       odt == OPR_F64 ? (void *)g64 : (void *)g32, d);
        fouts[nf++] = outs[k];
        free(g64);
        free(g32);
    }
    for (int i = 0; i < *nin; i++) grads[i] = NULL;
    if (!rc && nf && *nin) {
        rc = opr_autograd_grad(fouts, gos, nf, inputs, *nin, grads, NULL);
        if (rc) snprintf(err, errlen, "backward: %s: %s", opr_status_name(rc), opr_last_error());
    }
    for (int k = 0; k < nout; k++) opr_tensor_release(outs[k]);
    for (int k = 0; k < nf; k++) opr_tensor_release(gos[k]);
    args_free(&a);
    return rc;
}

static void check_grads(const opr_op *op)
{
    const char *name = opr_op_name(op);
    const int ncand = opr_op_grad_candidate_count(op);
    const size_t len = strlen(name);
    if (ncand <= 0 || (len && name[len - 1] == '_')) return;
    static const opr_dtype fl[] = {OPR_F64, OPR_F32};
    for (int s = 0; s < opr_op_sample_count(op); s++)
        for (size_t di = 0; di < 2; di++) {
            if (!opr_op_supports_dtype(op, fl[di])) continue;
            for (int ci = -1; ci < ncand; ci++) {
                opr_op_force_grad_candidate(op, ci);
                char what[256], why[1536] = "", err_c[512] = "", err_g[512] = "";
                snprintf(what, sizeof what, "grad %s sample %d %s strided candidate %s", name, s, opr_dtype_name(fl[di]),
                         ci < 0 ? "(planner's choice)" : opr_op_grad_candidate_label(op, ci));
                opr_tensor *gc[MAXIN] = {NULL}, *gg[MAXIN] = {NULL};
                int nc = 0, ng = 0;
                const int rc_c = run_grad(op, s, fl[di], OPR_CPU, gc, &nc, err_c, sizeof err_c);
                const int rc_g = run_grad(op, s, fl[di], dev, gg, &ng, err_g, sizeof err_g);
                if (rc_c && rc_g) {
                    n_skip++; /* e.g. a candidate that covers none of the inputs */
                    if (verbose) printf("skip  %s: %s\n", what, err_c);
                } else if (ci >= 0 && !rc_c && rc_g == OPR_ERR_NOT_FOUND && strstr(err_g, "with the forced candidate")) {
                    n_skip++; /* a fused backward kernel the device does not implement */
                    if (verbose) printf("skip  %s: not implemented on the device: %s\n", what, err_g);
                } else if (rc_c || rc_g || nc != ng) {
                    snprintf(why, sizeof why, "cpu: %s; device: %s", rc_c ? err_c : "ok", rc_g ? err_g : "ok");
                    result(false, what, why);
                } else {
                    bool ok = true;
                    for (int i = 0; i < nc && ok; i++) {
                        if (!gc[i] && !gg[i]) continue;
                        ok = same_tensor(gc[i], gg[i], false, why, sizeof why);
                        if (!ok) {
                            char tmp[1536];
                            snprintf(tmp, sizeof tmp, "input %d: %.1400s", i, why);
                            snprintf(why, sizeof why, "%s", tmp);
                        }
                    }
                    result(ok, what, why);
                }
                for (int i = 0; i < nc; i++) opr_tensor_release(gc[i]);
                for (int i = 0; i < ng; i++) opr_tensor_release(gg[i]);
            }
            opr_op_force_grad_candidate(op, -1);
        }
}

/* ------------------------------------------------------------------ 4. large sizes */

/* The registry's samples are small; these cases reach the paths that only large
 * tensors take: split reductions, multi-chunk mask scans, sorting rows in global
 * scratch, multi-tile GEMMs, many repeated scatter indices. */
typedef struct {
    char kind;    /* 'f' floating (the case dtype), 'i' i64 in [0, hi), 'b' bool, 'd' float, 'n' int, 'B' bool scalar, 'l' int list */
    int ndim;
    int64_t shape[4]; /* for 'l': the list */
    double lo, hi;    /* range ('f': default [-1, 1]); 'd' / 'n' / 'B': value in lo */
} spec;

typedef struct {
    const char *op;
    int nargs;
    spec s[6];
} bigcase;

#define F1(a) {'f', 1, {a}, 0, 0}
#define F2(a, b) {'f', 2, {a, b}, 0, 0}
#define F3(a, b, c) {'f', 3, {a, b, c}, 0, 0}
#define I1(a, h) {'i', 1, {a}, 0, h}
#define I2(a, b, h) {'i', 2, {a, b}, 0, h}
#define B2(a, b) {'b', 2, {a, b}, 0, 0}
#define DV(v) {'d', 0, {0}, v, 0}
#define NV(v) {'n', 0, {0}, v, 0}
#define BV(v) {'B', 0, {0}, v, 0}
#define L1(a) {'l', 1, {a}, 0, 0}

static const bigcase bigcases[] = {
    {"sum", 1, {F1(100003)}},
    {"sum", 2, {F2(5000, 7), L1(0)}},
    {"sum", 2, {F2(7, 20000), L1(1)}},
    {"mean", 2, {F2(3, 70000), L1(1)}},
    {"max", 1, {F1(100000)}},
    {"min", 1, {F2(300, 400)}},
    {"max.dim", 2, {F2(4, 30000), NV(1)}},
    {"min.dim", 2, {F2(30000, 4), NV(0)}},
    {"max.dim", 2, {I2(3, 20000, 7), NV(1)}},
    {"prod", 1, {{'f', 1, {3000}, 0.999, 1.001}}},
    {"norm", 2, {F1(50000), DV(3)}},
    {"norm", 2, {F1(50000), DV(2)}},
    {"softmax", 2, {F2(3, 5000), NV(1)}},
    {"log_softmax", 2, {F2(5000, 3), NV(0)}},
    {"sort", 3, {F2(3, 5000), NV(1), BV(0)}},
    {"sort", 3, {F2(4, 1000), NV(1), BV(1)}},
    {"sort", 3, {I2(3, 3000, 50), NV(1), BV(0)}},
    {"sort", 3, {I2(2500, 3, 40), NV(0), BV(1)}},
    {"topk", 4, {F2(3, 5000), NV(17), NV(1), BV(1)}},
    {"topk", 4, {F2(3000, 3), NV(5), NV(0), BV(0)}},
    {"mode", 2, {I2(5, 3000, 20), NV(1)}},
    {"masked_select", 2, {F2(300, 70), B2(300, 70)}},
    {"masked_scatter", 3, {F2(300, 70), B2(300, 70), F1(21000)}},
    {"mm", 2, {F2(64, 300), F2(300, 200)}},
    {"mm", 2, {F2(130, 1), F2(1, 70)}},
    {"bmm", 2, {F3(5, 70, 33), F3(5, 33, 90)}},
    {"matmul", 2, {{'f', 4, {3, 1, 40, 50}, 0, 0}, F3(4, 50, 30)}},
    {"matmul", 2, {F1(300), F3(3, 300, 20)}},
    {"linear", 3, {F3(6, 20, 64), F2(48, 64), F1(48)}},
    {"addmm", 5, {F1(64), F2(80, 96), F2(96, 64), DV(0.5), DV(2)}},
    {"cdist", 3, {F3(2, 100, 16), F3(2, 120, 16), DV(2)}},
    {"index_select", 3, {F2(1000, 30), NV(0), I1(5000, 1000)}},
    {"gather", 3, {F2(200, 300), NV(1), I2(200, 400, 300)}},
    {"scatter_add", 4, {F2(50, 30), NV(0), I2(4000, 30, 50), F2(4000, 30)}},
    {"index_add", 5, {F2(50, 30), NV(0), I1(4000, 50), F2(4000, 30), DV(1.5)}},
    {"softmax", 2, {F2(40000, 2), NV(1)}},
    {"sum_to", 2, {F3(40, 300, 50), {'l', 2, {300, 1}, 0, 0}}},
};

static uint64_t big_state;

static double big_uniform(double lo, double hi)
{
    big_state ^= big_state << 13;
    big_state ^= big_state >> 7;
    big_state ^= big_state << 17;
    return lo + (hi - lo) * (double)(big_state >> 11) / 9007199254740992.0;
}

/* The same tensor on the CPU and on the device. */
static bool big_tensor(const spec *sp, opr_dtype fdt, opr_tensor **tc, opr_tensor **tg)
{
    int64_t n = 1;
    for (int d = 0; d < sp->ndim; d++) n *= sp->shape[d];
    const opr_dtype dt = sp->kind == 'i' ? OPR_I64 : sp->kind == 'b' ? OPR_BOOL : fdt;
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    if (!buf) return false;
    for (int64_t i = 0; i < n; i++) {
        const double lo = sp->kind == 'f' && sp->lo == sp->hi ? -1 : sp->lo, hi = sp->kind == 'f' && sp->lo == sp->hi ? 1 : sp->hi;
        const double v = big_uniform(lo, hi);
        switch (dt) {
        case OPR_F32: ((float *)buf)[i] = (float)v; break;
        case OPR_F64: ((double *)buf)[i] = v; break;
        case OPR_I64: ((int64_t *)buf)[i] = (int64_t)floor(v); break;
        default: ((uint8_t *)buf)[i] = big_uniform(0, 1) < 0.5; break;
        }
    }
    *tc = opr_tensor_from_data(ctx, dt, sp->ndim, sp->shape, buf, OPR_CPU);
    *tg = opr_tensor_from_data(ctx, dt, sp->ndim, sp->shape, buf, dev);
    free(buf);
    return *tc && *tg;
}

static void check_big(void)
{
    static const opr_dtype fl[] = {OPR_F64, OPR_F32};
    for (size_t ci = 0; ci < sizeof bigcases / sizeof bigcases[0]; ci++) {
        const bigcase *bc = &bigcases[ci];
        const opr_op *op = opr_op_find(ctx, bc->op);
        if (!op || (only_op && strcmp(bc->op, only_op))) continue;
        for (size_t di = 0; di < 2; di++)
            for (int strided = 0; strided < 2; strided++) {
                args ac, ag;
                memset(&ac, 0, sizeof ac);
                memset(&ag, 0, sizeof ag);
                big_state = 0x2545f4914f6cdd1dull + ci;
                bool built = true;
                for (int i = 0; i < bc->nargs && built; i++) {
                    const spec *sp = &bc->s[i];
                    switch (sp->kind) {
                    case 'd': ac.v[i] = ag.v[i] = opr_v_double(sp->lo); break;
                    case 'n': ac.v[i] = ag.v[i] = opr_v_int((int64_t)sp->lo); break;
                    case 'B': ac.v[i] = ag.v[i] = opr_v_bool(sp->lo != 0); break;
                    case 'l': ac.v[i] = ag.v[i] = opr_v_ints(sp->shape, sp->ndim); break;
                    default: {
                        opr_tensor *tc = NULL, *tg = NULL;
                        built = big_tensor(sp, fl[di], &tc, &tg);
                        if (tc) ac.owned[ac.nowned++] = tc;
                        if (tg) ag.owned[ag.nowned++] = tg;
                        if (built) {
                            ac.v[i] = opr_v_tensor(strided ? strided_twin(&ac, tc) : tc);
                            ag.v[i] = opr_v_tensor(strided ? strided_twin(&ag, tg) : tg);
                        }
                    }
                    }
                }
                ac.n = ag.n = bc->nargs;
                char what[160], why[1536] = "";
                snprintf(what, sizeof what, "large %s #%zu %s%s", bc->op, ci, opr_dtype_name(fl[di]), strided ? " strided" : "");
                if (!built) {
                    result(false, what, "cannot build the inputs");
                } else {
                    const int nout = outputs_for(op, ac.v, ac.n);
                    opr_tensor *oc[MAXOUT] = {NULL}, *og[MAXOUT] = {NULL};
                    const int rc_c = opr_call(op, ac.v, ac.n, oc, nout);
                    char msg_c[512];
                    snprintf(msg_c, sizeof msg_c, "%s", opr_last_error());
                    const int rc_g = opr_call(op, ag.v, ag.n, og, nout);
                    bool ok = !rc_c && !rc_g;
                    if (!ok) {
                        snprintf(why, sizeof why, "cpu: %s %s; device: %s %.500s", opr_status_name(rc_c), rc_c ? msg_c : "",
                                 opr_status_name(rc_g), rc_g ? opr_last_error() : "");
                    }
                    for (int k = 0; ok && k < nout; k++) ok = same_tensor(oc[k], og[k], false, why, sizeof why);
                    result(ok, what, why);
                    for (int k = 0; k < nout; k++) {
                        opr_tensor_release(oc[k]);
                        opr_tensor_release(og[k]);
                    }
                }
                args_free(&ac);
                args_free(&ag);
            }
    }
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    const char *dev_name = "cuda:0";
    bool grads = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) dev_name = argv[++i];
        else if (!strcmp(argv[i], "--op") && i + 1 < argc) only_op = argv[++i];
        else if (!strcmp(argv[i], "--no-grad")) grads = false;
        else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--device cuda:N] [--op NAME] [--no-grad] [--verbose]\n", argv[0]);
            return 2;
        }
    }
    ctx = opr_ctx_new(NULL);
    if (!ctx) {
        fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error());
        return 1;
    }
    opr_cpu_fallback_set(ctx, false); /* the device's own kernels are under test */
    if (opr_device_parse(ctx, dev_name, &dev) != OPR_OK) {
        printf("no usable %s: %s\n", dev_name, opr_last_error());
        for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
            opr_plugin_candidate c = {.struct_size = sizeof c};
            opr_plugin_candidate_get(ctx, i, &c);
            printf("  %s: %s%s%s\n", c.path, c.loaded ? "loaded" : "not loaded", c.why ? ", " : "", c.why ? c.why : "");
        }
        opr_ctx_free(ctx);
        return 77;
    }
    if (!only_op) check_device();
    int missing = 0;
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        if (only_op && strcmp(opr_op_name(op), only_op)) continue;
        if (opr_op_has_kernel(op, 0) && !opr_op_has_kernel(op, dev.type)) {
            printf("note  %s has a cpu kernel but none on %s\n", opr_op_name(op), dev_name);
            missing++;
        }
        check_forward(op);
        if (grads) check_grads(op);
    }
    check_big();
    opr_mem_stats st = {.struct_size = sizeof st};
    opr_memory_stats(ctx, dev, &st);
    printf("\n%d passed, %d failed, %d skipped; %d op(s) without a device kernel\n", n_pass, n_fail, n_skip, missing);
    printf("%s memory: current %llu, peak %llu, reserved %llu bytes, %llu allocations\n", dev_name,
           (unsigned long long)st.current_bytes, (unsigned long long)st.peak_bytes,
           (unsigned long long)st.reserved_bytes, (unsigned long long)st.n_allocs);
    const int live = opr_ctx_free(ctx);
    if (live) printf("FAIL  %d tensor(s) leaked\n", live);
    return n_fail || live ? 1 : 0;
}
