/* Built-in shape functions of the convolution and pooling ops (registry/ops/
 * convolution.yaml, pooling.yaml): their output sizes follow PyTorch's formulas per
 * spatial dimension, which the expression language cannot loop over itself. Like every
 * built-in they read metadata only. Per-dimension parameters (stride, padding, ...) are
 * int lists of one item (used for every dimension) or one item per spatial dimension,
 * as ATen's convolution and pooling ops take them. */
#include "expr.h"

#include <stdio.h>

static int want(bool ok, const char *fn, const char *what)
{
    return ok ? OPR_OK : opr_fail(OPR_ERR_INVALID, "%s: expected %s", fn, what);
}

/* Per-dimension parameters and spatial sizes beyond this are refused, so that the
 * output-size arithmetic (products of two of them, sums of a few) cannot overflow. */
#define SPATIAL_MAX ((int64_t)1 << 30)

static bool is_int(const mval *v, int64_t *out)
{
    if (v->k == MV_INT) { *out = v->u.i; return true; }
    if (v->k == MV_BOOL) { *out = v->u.b; return true; }
    return false;
}

/* Item d of the per-dimension parameter l for nd spatial dims (an empty list gives
 * `dflt`), into *out; an error for a list of another length. */
static int param(const mval *l, int d, int nd, int64_t dflt, const char *fn, const char *name, int64_t *out)
{
    if (l->k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "%s: %s must be an int list", fn, name);
    if (l->n == 0) { *out = dflt; return OPR_OK; }
    if (l->n != 1 && l->n != nd)
        return opr_fail(OPR_ERR_INVALID, "%s: %s has %d items; expected 1 or %d (one per spatial dim)", fn, name, l->n, nd);
    *out = l->u.l[l->n == 1 ? 0 : d];
    if (*out < -SPATIAL_MAX || *out > SPATIAL_MAX)
        return opr_fail(OPR_ERR_INVALID, "%s: %s %lld is out of range", fn, name, (long long)*out);
    return OPR_OK;
}

/* Whether the spatial sizes of t from dim `from` on are within SPATIAL_MAX. */
static int spatial_ok(const opr_meta *t, int from, const char *fn)
{
    for (int d = from; d < t->ndim; d++)
        if (t->shape[d] > SPATIAL_MAX)
            return opr_fail(OPR_ERR_INVALID, "%s: a spatial size of %lld is out of range", fn, (long long)t->shape[d]);
    return OPR_OK;
}

static void out_list(mval *out, int n)
{
    out->k = MV_LIST;
    out->n = n;
}

/* conv_shape(input, weight, stride, padding, dilation, transposed, output_padding,
 * groups): the output shape of ATen's convolution. input [N, C_in, *spatial], weight
 * [C_out, C_in / groups, *kernel] (transposed: [C_in, C_out / groups, *kernel]). */
int expr_bi_conv_shape(const mval *a, int n, mval *out)
{
    (void)n;
    static const char fn[] = "conv_shape";
    int64_t tr = 0, groups = 0;
    int rc = want(a[0].k == MV_TENSOR && a[1].k == MV_TENSOR, fn, "tensors input and weight");
    if (!rc) rc = want(is_int(&a[5], &tr) && is_int(&a[7], &groups), fn, "transposed and groups as numbers");
    if (rc) return rc;
    const opr_meta *x = a[0].u.t, *w = a[1].u.t;
    /* an input without the batch dim (conv2d's unbatched [C, H, W]) gives one without */
    const int lead = x->ndim == w->ndim - 1 ? 1 : 2;
    if (w->ndim < 3 || w->ndim > 5 || x->ndim < w->ndim - 1 || x->ndim > w->ndim)
        return opr_fail(OPR_ERR_INVALID, "%s: weight must have 3 to 5 dims and input as many, or one fewer (no batch dim); got %d and %d",
                        fn, x->ndim, w->ndim);
    if (groups < 1) return opr_fail(OPR_ERR_INVALID, "%s: groups must be positive, got %lld", fn, (long long)groups);
    if ((rc = spatial_ok(x, lead, fn)) || (rc = spatial_ok(w, 2, fn))) return rc;
    const int nd = w->ndim - 2;
    out_list(out, x->ndim);
    if (lead == 2) out->u.l[0] = x->shape[0];
    out->u.l[lead - 1] = tr ? w->shape[1] * groups : w->shape[0];
    for (int d = 0; d < nd; d++) {
        int64_t s = 1, p = 0, dl = 1, op = 0;
        if ((rc = param(&a[2], d, nd, 1, fn, "stride", &s)) || (rc = param(&a[3], d, nd, 0, fn, "padding", &p)) ||
            (rc = param(&a[4], d, nd, 1, fn, "dilation", &dl)) ||
            (tr && (rc = param(&a[6], d, nd, 0, fn, "output_padding", &op))))
            return rc;
        if (s < 1 || dl < 1 || p < 0 || op < 0)
            return opr_fail(OPR_ERR_INVALID, "%s: stride and dilation must be positive, padding and output_padding not negative", fn);
        const int64_t in = x->shape[lead + d], span = dl * (w->shape[2 + d] - 1) + 1;
        int64_t o = tr ? (in - 1) * s - 2 * p + span + op : (in + 2 * p - span) / s + 1;
        if (o < 1)
            return opr_fail(OPR_ERR_INVALID, "%s: spatial dim %d: the output size would be %lld (input %lld, kernel span %lld, "
                            "padding %lld, stride %lld)", fn, d, (long long)o, (long long)in, (long long)span, (long long)p,
                            (long long)s);
        out->u.l[lead + d] = o;
    }
    return OPR_OK;
}

/* conv_transpose_padding(input, grad, weight, stride, padding, dilation): the
 * output_padding that makes the transposed convolution of grad (the output of a
 * convolution of input) as large as input again: the rows a stride left out at the end. */
int expr_bi_conv_transpose_padding(const mval *a, int n, mval *out)
{
    (void)n;
    static const char fn[] = "conv_transpose_padding";
    int rc = want(a[0].k == MV_TENSOR && a[1].k == MV_TENSOR && a[2].k == MV_TENSOR, fn, "tensors input, grad and weight");
    if (rc) return rc;
    const opr_meta *x = a[0].u.t, *g = a[1].u.t, *w = a[2].u.t;
    if (x->ndim < 3 || g->ndim != x->ndim || w->ndim != x->ndim)
        return opr_fail(OPR_ERR_INVALID, "%s: input, grad and weight must have the same 3 to 5 dims", fn);
    if ((rc = spatial_ok(x, 2, fn)) || (rc = spatial_ok(g, 2, fn)) || (rc = spatial_ok(w, 2, fn))) return rc;
    const int nd = x->ndim - 2;
    out_list(out, nd);
    for (int d = 0; d < nd; d++) {
        int64_t s = 1, p = 0, dl = 1;
        if ((rc = param(&a[3], d, nd, 1, fn, "stride", &s)) || (rc = param(&a[4], d, nd, 0, fn, "padding", &p)) ||
            (rc = param(&a[5], d, nd, 1, fn, "dilation", &dl)))
            return rc;
        out->u.l[d] = x->shape[2 + d] - ((g->shape[2 + d] - 1) * s - 2 * p + dl * (w->shape[2 + d] - 1) + 1);
        if (out->u.l[d] < 0) out->u.l[d] = 0; /* an empty grad: nothing to pad */
    }
    return OPR_OK;
}

/* pool_shape(self, nd, kernel_size, stride, padding, dilation, ceil_mode): the output
 * shape of an nd-d max or average pooling over the last nd dims of self (the dims before
 * them are kept: [N, C] or [C]). stride [] means kernel_size; ceil_mode rounds up, but a
 * window may not start in the right padding (PyTorch's pooling_output_shape). */
int expr_bi_pool_shape(const mval *a, int n, mval *out)
{
    (void)n;
    static const char fn[] = "pool_shape";
    int64_t ceil_mode = 0, nd64 = 0;
    int rc = want(a[0].k == MV_TENSOR && is_int(&a[1], &nd64) && a[2].k == MV_LIST && is_int(&a[6], &ceil_mode), fn,
                  "(tensor, nd, kernel_size, stride, padding, dilation, ceil_mode)");
    if (rc) return rc;
    const opr_meta *x = a[0].u.t;
    const int nd = nd64 >= 1 && nd64 <= 3 ? (int)nd64 : 0;
    if (!nd || x->ndim < nd + 1 || x->ndim > nd + 2)
        return opr_fail(OPR_ERR_INVALID, "%s: a %lld-d pooling takes a %lld-d or %lld-d input, got %d dims", fn, (long long)nd64,
                        (long long)nd64 + 1, (long long)nd64 + 2, x->ndim);
    if ((rc = spatial_ok(x, x->ndim - nd, fn))) return rc;
    out_list(out, x->ndim);
    const int lead = x->ndim - nd;
    for (int i = 0; i < lead; i++) out->u.l[i] = x->shape[i];
    for (int d = 0; d < nd; d++) {
        int64_t k = 1, s = 1, p = 0, dl = 1;
        if ((rc = param(&a[2], d, nd, 0, fn, "kernel_size", &k)) || (rc = param(&a[3], d, nd, k, fn, "stride", &s)) ||
            (rc = param(&a[4], d, nd, 0, fn, "padding", &p)) || (rc = param(&a[5], d, nd, 1, fn, "dilation", &dl)))
            return rc;
        if (k < 1 || s < 1 || dl < 1 || p < 0)
            return opr_fail(OPR_ERR_INVALID, "%s: kernel_size, stride and dilation must be positive, padding not negative", fn);
        if (p > k / 2)
            return opr_fail(OPR_ERR_INVALID, "%s: padding %lld should be at most half of the kernel size %lld", fn, (long long)p,
                            (long long)k);
        const int64_t in = x->shape[lead + d], span = dl * (k - 1) + 1, room = in + 2 * p - span;
        if (room < 0)
            return opr_fail(OPR_ERR_INVALID, "%s: spatial dim %d: the window (%lld) is larger than the padded input (%lld)", fn, d,
                            (long long)span, (long long)(in + 2 * p));
        int64_t o = (ceil_mode ? room + s - 1 : room) / s + 1;
        if (ceil_mode && (o - 1) * s >= in + p) o--;
        out->u.l[lead + d] = o;
    }
    return OPR_OK;
}

/* dims_except(t, d): every dim of t but d, in order ([0, 2, 3] for a 4-d t and d 1):
 * the dims a per-channel reduction sums over. */
int expr_bi_dims_except(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t d = 0;
    int rc = want(a[0].k == MV_TENSOR && is_int(&a[1], &d), "dims_except", "(tensor, dim)");
    if (rc) return rc;
    const int nd = a[0].u.t->ndim;
    if (d < -nd || d >= nd) return opr_fail(OPR_ERR_INVALID, "dims_except: dim %lld out of range for %d dims", (long long)d, nd);
    if (d < 0) d += nd;
    out_list(out, 0);
    for (int i = 0; i < nd; i++)
        if (i != d) out->u.l[out->n++] = i;
    return OPR_OK;
}

/* range(start, end): the ints start, start + 1, ..., end - 1 (empty when end <= start),
 * at most OPR_MAX_DIMS of them: a list of dims, as `reduce` takes (layer norm's
 * normalized dims, range(dim(input) - len(normalized_shape), dim(input))). */
int expr_bi_range(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t lo = 0, hi = 0;
    int rc = want(is_int(&a[0], &lo) && is_int(&a[1], &hi), "range", "(int, int)");
    if (rc) return rc;
    if (hi > lo && hi - lo > OPR_MAX_DIMS)
        return opr_fail(OPR_ERR_INVALID, "range: %lld items, more than the %d a list of dims holds", (long long)(hi - lo),
                        OPR_MAX_DIMS);
    out_list(out, 0);
    for (int64_t v = lo; v < hi; v++) out->u.l[out->n++] = v;
    return OPR_OK;
}

/* channel_shape(t): [size(t, 1), 1, ..., 1], dim(t) - 1 items: the shape a per-channel
 * vector ([C]) takes to broadcast against t ([N, C, *spatial]). */
int expr_bi_channel_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int rc = want(a[0].k == MV_TENSOR && a[0].u.t->ndim >= 2, "channel_shape", "a tensor of at least 2 dims ([N, C, ...])");
    if (rc) return rc;
    out_list(out, a[0].u.t->ndim - 1);
    out->u.l[0] = a[0].u.t->shape[1];
    for (int i = 1; i < out->n; i++) out->u.l[i] = 1;
    return OPR_OK;
}
