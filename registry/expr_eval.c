/* Name resolution and metadata evaluation of expressions, with the built-in shape
 * functions. Evaluation never touches tensor data, only shapes and scalars. */
#include "expr.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef int (*builtin_fn)(const mval *a, int n, mval *out);

static int want_tensor(const mval *v, const char *fn)
{
    return v->k == MV_TENSOR ? OPR_OK : opr_fail(OPR_ERR_INVALID, "%s: expected a tensor argument", fn);
}

/* Whether an integral double converts to int64 without undefined behaviour. */
static bool fits_int64(double d) { return d >= -0x1p63 && d < 0x1p63; }

static bool as_int(const mval *v, int64_t *out)
{
    if (v->k == MV_INT) { *out = v->u.i; return true; }
    if (v->k == MV_BOOL) { *out = v->u.b; return true; }
    if (v->k == MV_FLOAT && v->u.d == floor(v->u.d) && fits_int64(v->u.d)) { *out = (int64_t)v->u.d; return true; }
    return false;
}

static bool as_num(const mval *v, double *out)
{
    if (v->k == MV_INT) { *out = (double)v->u.i; return true; }
    if (v->k == MV_FLOAT) { *out = v->u.d; return true; }
    if (v->k == MV_BOOL) { *out = v->u.b; return true; }
    return false;
}

/* Shape of a tensor or an int list value. */
static bool as_shape(const mval *v, const int64_t **shape, int *n)
{
    if (v->k == MV_TENSOR) { *shape = v->u.t->shape; *n = v->u.t->ndim; return true; }
    if (v->k == MV_LIST) { *shape = v->u.l; *n = v->n; return true; }
    return false;
}

static int wrap(int64_t d, int ndim, const char *fn, int *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n)
        return opr_fail(OPR_ERR_INVALID, "%s: dim %lld out of range for %d dims", fn, (long long)d, ndim);
    *out = (int)(d < 0 ? d + n : d);
    return OPR_OK;
}

static void set_list(mval *out, const int64_t *l, int n)
{
    out->k = MV_LIST;
    out->n = n;
    if (n) memcpy(out->u.l, l, (size_t)n * sizeof *l);
}

bool shape_broadcast(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int *nout)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)];
        int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1) return false;
        out[i] = x == 1 ? y : x;
    }
    *nout = n;
    return true;
}

static int bi_size(const mval *a, int n, mval *out)
{
    (void)n;
    int d = 0;
    int64_t di;
    if (want_tensor(&a[0], "size")) return OPR_ERR_INVALID;
    if (!as_int(&a[1], &di)) return opr_fail(OPR_ERR_INVALID, "size: dim must be an int");
    if (a[0].u.t->ndim == 0) return opr_fail(OPR_ERR_INVALID, "size: tensor has no dimensions");
    if (wrap(di, a[0].u.t->ndim, "size", &d)) return OPR_ERR_INVALID;
    out->k = MV_INT;
    out->u.i = a[0].u.t->shape[d];
    return OPR_OK;
}

static int bi_sizes(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "sizes")) return OPR_ERR_INVALID;
    set_list(out, a[0].u.t->shape, a[0].u.t->ndim);
    return OPR_OK;
}

static int bi_dtype_name(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "dtype_name")) return OPR_ERR_INVALID;
    out->k = MV_STR;
    out->u.s = opr_dtype_name(a[0].u.t->dtype);
    return OPR_OK;
}

static int bi_dim(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "dim")) return OPR_ERR_INVALID;
    out->k = MV_INT;
    out->u.i = a[0].u.t->ndim;
    return OPR_OK;
}

static int bi_numel(const mval *a, int n, mval *out)
{
    (void)n;
    const int64_t *s;
    int nd;
    if (!as_shape(&a[0], &s, &nd)) return opr_fail(OPR_ERR_INVALID, "numel: expected a tensor or a shape");
    out->k = MV_INT;
    /* a list is any ints: its product may be negative or past int64 */
    return opr_shape_check(s, nd, &out->u.i, "numel");
}

static int broadcast_all(const mval *a, int n, int64_t *shape, int *nd, const char *fn)
{
    *nd = 0;
    for (int i = 0; i < n; i++) {
        const int64_t *s;
        int ns;
        if (a[i].k == MV_NONE) continue; /* optional tensors that were not given */
        if (!as_shape(&a[i], &s, &ns)) return opr_fail(OPR_ERR_INVALID, "%s: expected tensors or shapes", fn);
        int64_t tmp[OPR_MAX_DIMS];
        int nt;
        if (!shape_broadcast(shape, *nd, s, ns, tmp, &nt)) return OPR_ERR_INVALID;
        memcpy(shape, tmp, (size_t)nt * sizeof *tmp);
        *nd = nt;
    }
    return OPR_OK;
}

static void fmt_shape(char *buf, size_t len, const int64_t *s, int n)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && k < len; i++) k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)s[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static int bi_broadcast(const mval *a, int n, mval *out)
{
    int64_t shape[OPR_MAX_DIMS];
    int nd;
    if (broadcast_all(a, n, shape, &nd, "broadcast")) {
        char msg[512] = "shapes do not broadcast:";
        for (int i = 0; i < n; i++) {
            const int64_t *s;
            int ns;
            char one[96];
            if (!as_shape(&a[i], &s, &ns)) continue;
            fmt_shape(one, sizeof one, s, ns);
            strncat(msg, " ", sizeof msg - strlen(msg) - 1);
            strncat(msg, one, sizeof msg - strlen(msg) - 1);
        }
        return opr_fail(OPR_ERR_INVALID, "%s", msg);
    }
    set_list(out, shape, nd);
    return OPR_OK;
}

static int bi_broadcastable(const mval *a, int n, mval *out)
{
    int64_t shape[OPR_MAX_DIMS];
    int nd;
    out->k = MV_BOOL;
    out->u.b = broadcast_all(a, n, shape, &nd, "broadcastable") == OPR_OK;
    return OPR_OK;
}

/* a broadcasts to exactly b's shape */
static int bi_broadcastable_to(const mval *a, int n, mval *out)
{
    (void)n;
    const int64_t *sa, *sb;
    int na, nb;
    if (!as_shape(&a[0], &sa, &na) || !as_shape(&a[1], &sb, &nb))
        return opr_fail(OPR_ERR_INVALID, "broadcastable_to: expected tensors or shapes");
    int64_t tmp[OPR_MAX_DIMS];
    int nt;
    out->k = MV_BOOL;
    out->u.b = na <= nb && shape_broadcast(sa, na, sb, nb, tmp, &nt) && !memcmp(tmp, sb, (size_t)nb * sizeof *sb);
    return OPR_OK;
}

/* reduce(t, dims, keepdim): dims None / [] = all; an int or a list of ints. */
static int bi_reduce(const mval *a, int n, mval *out)
{
    if (want_tensor(&a[0], "reduce")) return OPR_ERR_INVALID;
    const opr_meta *t = a[0].u.t;
    bool keep = n > 2 && a[2].k == MV_BOOL && a[2].u.b;
    bool red[OPR_MAX_DIMS] = {false};
    bool all = n < 2 || a[1].k == MV_NONE || (a[1].k == MV_LIST && a[1].n == 0);
    if (!all) {
        int64_t single;
        int count = a[1].k == MV_LIST ? a[1].n : 1;
        for (int i = 0; i < count; i++) {
            int64_t di;
            if (a[1].k == MV_LIST) di = a[1].u.l[i];
            else if (as_int(&a[1], &single)) di = single;
            else return opr_fail(OPR_ERR_INVALID, "reduce: dim must be an int or a list of ints");
            int d = 0;
            if (wrap(di, t->ndim, "reduce", &d)) return OPR_ERR_INVALID;
            if (red[d]) return opr_fail(OPR_ERR_INVALID, "dim %d appears twice in the reduction dims", d);
            red[d] = true;
        }
    }
    int64_t shape[OPR_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (all || red[d]) { if (keep) shape[nd++] = 1; }
        else shape[nd++] = t->shape[d];
    }
    set_list(out, shape, nd);
    return OPR_OK;
}

/* set(list, i, v): the list with entry i (negative counts from the end) replaced. */
static int bi_set(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t i, v;
    if (a[0].k != MV_LIST || !as_int(&a[1], &i) || !as_int(&a[2], &v))
        return opr_fail(OPR_ERR_INVALID, "set: expected (list, int, int)");
    int d = 0;
    if (a[0].n == 0) return opr_fail(OPR_ERR_INVALID, "dim %lld out of range for a 0-d tensor", (long long)i);
    if (wrap(i, a[0].n, "set", &d)) return OPR_ERR_INVALID;
    *out = a[0];
    out->u.l[d] = v;
    return OPR_OK;
}

static int bi_matmul_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "matmul_shape") || want_tensor(&a[1], "matmul_shape")) return OPR_ERR_INVALID;
    const opr_meta *x = a[0].u.t, *y = a[1].u.t;
    if (x->ndim == 0 || y->ndim == 0)
        return opr_fail(OPR_ERR_INVALID, "matmul: both arguments need at least one dimension, got %d and %d", x->ndim,
                        y->ndim);
    int64_t xk = x->shape[x->ndim - 1];
    int64_t yk = y->ndim == 1 ? y->shape[0] : y->shape[y->ndim - 2];
    if (xk != yk)
        return opr_fail(OPR_ERR_INVALID, "matmul: inner dimensions differ (%lld vs %lld)", (long long)xk, (long long)yk);
    int64_t shape[OPR_MAX_DIMS];
    int nd = 0;
    if (x->ndim >= 2 || y->ndim >= 2) {
        int nbx = x->ndim > 2 ? x->ndim - 2 : 0, nby = y->ndim > 2 ? y->ndim - 2 : 0;
        if (!shape_broadcast(x->shape, nbx, y->shape, nby, shape, &nd))
            return opr_fail(OPR_ERR_INVALID, "matmul: batch dimensions do not broadcast");
        if (x->ndim >= 2) shape[nd++] = x->shape[x->ndim - 2];
        if (y->ndim >= 2) shape[nd++] = y->shape[y->ndim - 1];
    }
    if (nd > OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "matmul: too many dims");
    set_list(out, shape, nd);
    return OPR_OK;
}

static int bi_cat_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t di;
    if (!mval_is_list(&a[0]) || !as_int(&a[1], &di)) return opr_fail(OPR_ERR_INVALID, "cat_shape: expected (tensors, int)");
    if (a[0].n == 0) return opr_fail(OPR_ERR_INVALID, "cat: expected a non-empty list of tensors");
    /* `grads` in a formula holds NULL for outputs that got no gradient */
    for (int i = 0; i < a[0].n; i++)
        if (!mval_item(&a[0], i)) return opr_fail(OPR_ERR_INVALID, "cat: tensor %d is None", i);
    const opr_meta *ref = NULL;
    /* 1-d empty tensors are skipped, as PyTorch does for legacy reasons */
    for (int i = 0; i < a[0].n && !ref; i++) {
        const opr_meta *m = mval_item(&a[0], i);
        if (!(m->ndim == 1 && m->shape[0] == 0)) ref = m;
    }
    if (!ref) { int64_t z = 0; set_list(out, &z, 1); return OPR_OK; }
    int d = 0;
    if (ref->ndim == 0) return opr_fail(OPR_ERR_INVALID, "cat: zero-dimensional tensor cannot be concatenated");
    if (wrap(di, ref->ndim, "cat", &d)) return OPR_ERR_INVALID;
    int64_t total = 0;
    for (int i = 0; i < a[0].n; i++) {
        const opr_meta *m = mval_item(&a[0], i);
        if (m->ndim == 1 && m->shape[0] == 0) continue;
        if (m->ndim != ref->ndim)
            return opr_fail(OPR_ERR_INVALID, "cat: tensor %d has %d dims, expected %d", i, m->ndim, ref->ndim);
        for (int k = 0; k < m->ndim; k++)
            if (k != d && m->shape[k] != ref->shape[k])
                return opr_fail(OPR_ERR_INVALID, "cat: tensor %d has size %lld in dim %d, expected %lld", i,
                                (long long)m->shape[k], k, (long long)ref->shape[k]);
        total += m->shape[d];
    }
    set_list(out, ref->shape, ref->ndim);
    out->u.l[d] = total;
    return OPR_OK;
}

/* cat_offset(ts, d, i): where item i of the tensor list ts starts along dim d of
 * cat(ts, d), the sum of the sizes along d of the items before it (1-d empty items,
 * which cat skips, count 0). Gives the piece of a cat's gradient that belongs to item i. */
static int bi_cat_offset(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t di, ii;
    if (!mval_is_list(&a[0]) || !as_int(&a[1], &di) || !as_int(&a[2], &ii))
        return opr_fail(OPR_ERR_INVALID, "cat_offset: expected (tensors, int, int)");
    if (ii < 0 || ii >= a[0].n)
        return opr_fail(OPR_ERR_INVALID, "cat_offset: item %lld out of range for %d tensors", (long long)ii, a[0].n);
    int64_t at = 0;
    for (int k = 0; k < (int)ii; k++) {
        const opr_meta *m = mval_item(&a[0], k);
        if (!m) return opr_fail(OPR_ERR_INVALID, "cat_offset: tensor %d is None", k);
        if (m->ndim == 1 && m->shape[0] == 0) continue;
        int d = 0;
        if (wrap(di, m->ndim, "cat_offset", &d)) return OPR_ERR_INVALID;
        at += m->ndim ? m->shape[d] : 1;
    }
    out->k = MV_INT;
    out->u.i = at;
    return OPR_OK;
}

/* "[2, 3]" into buf. */
static void format_shape(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < ndim && at < len; k++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* stack_shape(ts, d): the shape of stack(ts, d): the items' common shape with the
 * number of items inserted at d (from -dim-1 to dim); error when the items' shapes
 * differ or the list is empty. */
static int bi_stack_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t di;
    if (!mval_is_list(&a[0]) || !as_int(&a[1], &di)) return opr_fail(OPR_ERR_INVALID, "stack_shape: expected (tensors, int)");
    if (a[0].n == 0) return opr_fail(OPR_ERR_INVALID, "stack: expected a non-empty list of tensors");
    const opr_meta *ref = mval_item(&a[0], 0);
    for (int i = 0; i < a[0].n; i++) {
        const opr_meta *m = mval_item(&a[0], i);
        if (!m) return opr_fail(OPR_ERR_INVALID, "stack: tensor %d is None", i);
        if (m->ndim != ref->ndim || memcmp(m->shape, ref->shape, (size_t)m->ndim * sizeof *m->shape)) {
            char want[96], got[96];
            format_shape(ref->shape, ref->ndim, want, sizeof want);
            format_shape(m->shape, m->ndim, got, sizeof got);
            return opr_fail(OPR_ERR_INVALID, "stack: tensor %d has shape %s, tensor 0 has %s (stack needs equal shapes)",
                            i, got, want);
        }
    }
    if (ref->ndim + 1 > OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "stack: more than %d dims", OPR_MAX_DIMS);
    if (di < -(int64_t)ref->ndim - 1 || di > ref->ndim)
        return opr_fail(OPR_ERR_INVALID, "stack: dim %lld out of range for %d-d tensors (from %d to %d)", (long long)di,
                        ref->ndim, -ref->ndim - 1, ref->ndim);
    int d = (int)(di < 0 ? di + ref->ndim + 1 : di);
    out->k = MV_LIST;
    out->n = 0;
    for (int k = 0; k < ref->ndim; k++) {
        if (k == d) out->u.l[out->n++] = a[0].n;
        out->u.l[out->n++] = ref->shape[k];
    }
    if (d == ref->ndim) out->u.l[out->n++] = a[0].n;
    return OPR_OK;
}

/* len(ts): the number of items of a tensor list, an int list or a float list. */
static int bi_len(const mval *a, int n, mval *out)
{
    (void)n;
    if (!mval_is_list(&a[0]) && a[0].k != MV_LIST && a[0].k != MV_FLIST)
        return opr_fail(OPR_ERR_INVALID, "len: expected a list");
    out->k = MV_INT;
    out->u.i = a[0].n;
    return OPR_OK;
}

static int bi_diag_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t k;
    if (want_tensor(&a[0], "diag_shape") || !as_int(&a[1], &k)) return opr_fail(OPR_ERR_INVALID, "diag_shape: expected (tensor, int)");
    const opr_meta *t = a[0].u.t;
    /* diag's `check:` says so, but the cost model evaluates a formula's calls without
     * their checks: a 0-d tensor has no shape[0] or shape[1] to read */
    if (t->ndim != 1 && t->ndim != 2)
        return opr_fail(OPR_ERR_INVALID, "diag_shape: expected a 1-d or 2-d tensor, got %d dims", t->ndim);
    if (t->ndim == 1) {
        int64_t s;
        if (k == INT64_MIN || __builtin_add_overflow(t->shape[0], k < 0 ? -k : k, &s))
            return opr_fail(OPR_ERR_INVALID, "diag_shape: diagonal %lld out of range", (long long)k);
        int64_t sh[2] = {s, s};
        set_list(out, sh, 2);
    } else {
        int64_t len = opr_diagonal_length(t->shape[0], t->shape[1], k);
        set_list(out, &len, 1);
    }
    return OPR_OK;
}

static int minmax(const mval *a, mval *out, bool want_max)
{
    int64_t x, y;
    if (as_int(&a[0], &x) && as_int(&a[1], &y) && a[0].k != MV_FLOAT && a[1].k != MV_FLOAT) {
        out->k = MV_INT;
        out->u.i = (x > y) == want_max ? x : y;
        return OPR_OK;
    }
    double dx, dy;
    if (!as_num(&a[0], &dx) || !as_num(&a[1], &dy)) return opr_fail(OPR_ERR_INVALID, "max/min: expected numbers");
    out->k = MV_FLOAT;
    out->u.d = (dx > dy) == want_max ? dx : dy;
    return OPR_OK;
}
static int bi_max(const mval *a, int n, mval *out) { (void)n; return minmax(a, out, true); }
static int bi_min(const mval *a, int n, mval *out) { (void)n; return minmax(a, out, false); }

static int rounding(const mval *a, mval *out, double (*f)(double), const char *fn)
{
    double d;
    if (!as_num(&a[0], &d)) return opr_fail(OPR_ERR_INVALID, "%s: expected a number", fn);
    double r = f(d);
    if (!isfinite(r)) return opr_fail(OPR_ERR_INVALID, "%s: %g is not finite", fn, d);
    if (!fits_int64(r)) return opr_fail(OPR_ERR_INVALID, "%s: %g is out of the int64 range", fn, d);
    out->k = MV_INT;
    out->u.i = (int64_t)r;
    return OPR_OK;
}
static int bi_ceil(const mval *a, int n, mval *out) { (void)n; return rounding(a, out, ceil, "ceil"); }
static int bi_floor(const mval *a, int n, mval *out) { (void)n; return rounding(a, out, floor, "floor"); }


/* Shapes of the host views, so that formulas using them can be costed on metadata. */
static int bi_transpose_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t x, y;
    int i = 0, j = 0;
    if (want_tensor(&a[0], "transpose_shape") || !as_int(&a[1], &x) || !as_int(&a[2], &y))
        return opr_fail(OPR_ERR_INVALID, "transpose_shape: expected (tensor, int, int)");
    const opr_meta *t = a[0].u.t;
    set_list(out, t->shape, t->ndim);
    if (t->ndim == 0) return OPR_OK;
    if (wrap(x, t->ndim, "transpose", &i) || wrap(y, t->ndim, "transpose", &j)) return OPR_ERR_INVALID;
    out->u.l[i] = t->shape[j];
    out->u.l[j] = t->shape[i];
    return OPR_OK;
}

static int bi_permute_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "permute_shape") || a[1].k != MV_LIST || a[1].n != a[0].u.t->ndim)
        return opr_fail(OPR_ERR_INVALID, "permute_shape: expected (tensor, one dim per dimension)");
    const opr_meta *t = a[0].u.t;
    out->k = MV_LIST;
    out->n = t->ndim;
    for (int k = 0; k < t->ndim; k++) {
        int d = 0;
        if (wrap(a[1].u.l[k], t->ndim, "permute", &d)) return OPR_ERR_INVALID;
        out->u.l[k] = t->shape[d];
    }
    return OPR_OK;
}

static int bi_reshape_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "reshape_shape") || a[1].k != MV_LIST)
        return opr_fail(OPR_ERR_INVALID, "reshape_shape: expected (tensor, int list)");
    *out = a[1];
    int64_t known = 1;
    int infer = -1;
    for (int k = 0; k < out->n; k++) {
        if (out->u.l[k] == -1) infer = k;
        else if (__builtin_mul_overflow(known, out->u.l[k], &known))
            return opr_fail(OPR_ERR_INVALID, "reshape: the sizes overflow int64");
    }
    if (infer >= 0) out->u.l[infer] = known ? a[0].u.t->numel / known : 0;
    return OPR_OK;
}

static int bi_expand_shape(const mval *a, int n, mval *out)
{
    (void)n;
    if (want_tensor(&a[0], "expand_shape") || a[1].k != MV_LIST)
        return opr_fail(OPR_ERR_INVALID, "expand_shape: expected (tensor, int list)");
    const opr_meta *t = a[0].u.t;
    *out = a[1];
    for (int k = 0; k < out->n; k++) {
        int src = k - (out->n - t->ndim);
        if (out->u.l[k] == -1 && src >= 0) out->u.l[k] = t->shape[src];
    }
    return OPR_OK;
}

static int bi_unsqueeze_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t di;
    int d = 0;
    if (want_tensor(&a[0], "unsqueeze_shape") || !as_int(&a[1], &di))
        return opr_fail(OPR_ERR_INVALID, "unsqueeze_shape: expected (tensor, int)");
    const opr_meta *t = a[0].u.t;
    if (t->ndim >= OPR_MAX_DIMS || wrap(di, t->ndim + 1, "unsqueeze", &d)) return OPR_ERR_INVALID;
    out->k = MV_LIST;
    out->n = t->ndim + 1;
    for (int k = 0, j = 0; k < out->n; k++) out->u.l[k] = k == d ? 1 : t->shape[j++];
    return OPR_OK;
}

/* squeeze_shape(t), squeeze_shape(t, d) or squeeze_shape(t, [d, ...]) (squeeze.dims:
 * only the listed dims that are 1 go). */
static int bi_squeeze_shape(const mval *a, int n, mval *out)
{
    int64_t di = 0;
    bool only[OPR_MAX_DIMS] = {false}, any = false;
    if (want_tensor(&a[0], "squeeze_shape")) return OPR_ERR_INVALID;
    const opr_meta *t = a[0].u.t;
    if (n > 1 && a[1].k == MV_LIST) {
        for (int i = 0; i < a[1].n; i++) {
            int d = 0;
            if (wrap(a[1].u.l[i], t->ndim, "squeeze", &d)) return OPR_ERR_INVALID;
            only[d] = any = true;
        }
        if (!any) return bi_sizes(a, 1, out); /* [] squeezes nothing */
    } else if (n > 1 && a[1].k != MV_NONE) {
        int d = 0;
        if (!as_int(&a[1], &di) || wrap(di, t->ndim, "squeeze", &d)) return OPR_ERR_INVALID;
        only[d] = any = true;
    }
    out->k = MV_LIST;
    out->n = 0;
    for (int k = 0; k < t->ndim; k++)
        if (!(t->shape[k] == 1 && (!any || only[k]))) out->u.l[out->n++] = t->shape[k];
    return OPR_OK;
}

static int bi_diagonal_shape(const mval *a, int n, mval *out)
{
    (void)n;
    int64_t off, x, y;
    int i = 0, j = 0;
    if (want_tensor(&a[0], "diagonal_shape") || !as_int(&a[1], &off) || !as_int(&a[2], &x) || !as_int(&a[3], &y))
        return opr_fail(OPR_ERR_INVALID, "diagonal_shape: expected (tensor, int, int, int)");
    const opr_meta *t = a[0].u.t;
    if (t->ndim < 2 || wrap(x, t->ndim, "diagonal", &i) || wrap(y, t->ndim, "diagonal", &j) || i == j)
        return opr_fail(OPR_ERR_INVALID, "diagonal: needs two distinct dims of a tensor with >= 2 dims");
    int64_t len = opr_diagonal_length(t->shape[i], t->shape[j], off);
    out->k = MV_LIST;
    out->n = 0;
    for (int k = 0; k < t->ndim; k++)
        if (k != i && k != j) out->u.l[out->n++] = t->shape[k];
    out->u.l[out->n++] = len;
    return OPR_OK;
}

static const struct builtin {
    const char *name;
    int min_args, max_args; /* max -1: variadic */
    builtin_fn fn;
} builtins[] = {
    {"size", 2, 2, bi_size}, {"sizes", 1, 1, bi_sizes}, {"dim", 1, 1, bi_dim}, {"dtype_name", 1, 1, bi_dtype_name},
    {"numel", 1, 1, bi_numel}, {"broadcast", 1, -1, bi_broadcast},
    {"broadcastable", 2, -1, bi_broadcastable}, {"broadcastable_to", 2, 2, bi_broadcastable_to},
    {"reduce", 1, 3, bi_reduce}, {"set", 3, 3, bi_set}, {"matmul_shape", 2, 2, bi_matmul_shape},
    {"cat_shape", 2, 2, bi_cat_shape}, {"diag_shape", 2, 2, bi_diag_shape},
    {"max", 2, 2, bi_max}, {"min", 2, 2, bi_min}, {"ceil", 1, 1, bi_ceil}, {"floor", 1, 1, bi_floor},
    {"transpose_shape", 3, 3, bi_transpose_shape}, {"permute_shape", 2, 2, bi_permute_shape},
    {"reshape_shape", 2, 2, bi_reshape_shape}, {"expand_shape", 2, 2, bi_expand_shape},
    {"unsqueeze_shape", 2, 2, bi_unsqueeze_shape}, {"squeeze_shape", 1, 2, bi_squeeze_shape},
    {"diagonal_shape", 4, 4, bi_diagonal_shape}, {"cat_offset", 3, 3, bi_cat_offset}, {"len", 1, 1, bi_len},
    {"stack_shape", 2, 2, bi_stack_shape},
    {"conv_shape", 8, 8, expr_bi_conv_shape}, {"conv_transpose_padding", 6, 6, expr_bi_conv_transpose_padding},
    {"pool_shape", 7, 7, expr_bi_pool_shape}, {"dims_except", 2, 2, expr_bi_dims_except}, {"range", 2, 2, expr_bi_range},
    {"channel_shape", 1, 1, expr_bi_channel_shape},
    {"pad_shape", 2, 2, expr_bi_pad_shape}, {"neg_ints", 1, 1, expr_bi_neg_ints},
    {"reduce_perm", 2, 2, expr_bi_reduce_perm}, {"reduce_flat", 2, 2, expr_bi_reduce_flat},
    {"list_sum", 1, 2, expr_bi_list_sum}, {"repeat_shape", 3, 3, expr_bi_repeat_shape},
    {"index_shape", 2, 2, expr_bi_index_shape},
    {"strides", 1, 1, expr_bi_strides}, {"storage_offset", 1, 1, expr_bi_storage_offset},
    {"min_storage_size", 3, 3, expr_bi_min_storage_size}, {"maybe_overlap", 2, 2, expr_bi_maybe_overlap},
    /* select(cond, a, b): a if cond is truthy, else b; only the chosen one is
     * evaluated (so a formula runs, and is costed for, one branch). Evaluated in
     * expr_eval_with, not through a builtin_fn. */
    {"select", 3, 3, NULL},
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

bool expr_builtin_reads_meta(int builtin)
{
    /* no built-in ever reads tensor data; select hands one argument on as it is */
    return builtin >= 0 && builtin < N_BUILTINS && builtins[builtin].fn;
}

bool expr_builtin_is_select(int builtin) { return builtin >= 0 && builtin < N_BUILTINS && !builtins[builtin].fn; }

static int resolve(expr *e, const char *const *names, int nnames, const expr_src *src, bool ops_allowed)
{
    for (int i = 0; i < e->nargs; i++) {
        int rc = resolve(e->args[i], names, nnames, src, ops_allowed);
        if (rc) return rc;
    }
    if (e->kind == EXPR_NAME) {
        for (int i = 0; i < nnames; i++)
            if (names[i] && !strcmp(names[i], e->name)) { e->slot = i; return OPR_OK; }
        return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: unknown name '%s'", src->file, e->line, e->col, e->name);
    }
    if (e->kind == EXPR_CALL) {
        for (int b = 0; b < N_BUILTINS; b++) {
            if (strcmp(builtins[b].name, e->name)) continue;
            if (e->nargs < builtins[b].min_args || (builtins[b].max_args >= 0 && e->nargs > builtins[b].max_args))
                return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: '%s' takes %d to %d arguments, got %d", src->file,
                                e->line, e->col, e->name, builtins[b].min_args, builtins[b].max_args, e->nargs);
            e->builtin = b;
            return OPR_OK;
        }
        if (ops_allowed) return OPR_OK; /* an op: linked once every file is loaded */
        return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: unknown function '%s'", src->file, e->line, e->col, e->name);
    }
    return OPR_OK;
}

int expr_resolve(expr *e, const char *const *names, int nnames, const expr_src *src)
{
    return resolve(e, names, nnames, src, false);
}

int expr_resolve_formula(expr *e, const char *const *names, int nnames, const expr_src *src)
{
    return resolve(e, names, nnames, src, true);
}

static int arith(int op, const mval *x, const mval *y, mval *out)
{
    int64_t a, b;
    bool ints = x->k != MV_FLOAT && y->k != MV_FLOAT && as_int(x, &a) && as_int(y, &b);
    if (ints && op != EOP_DIV) {
        out->k = MV_INT;
        /* Operands come from callers' sizes and ints: a wrapped result would become a
         * small or negative size, so overflow is an error. */
        bool wrapped = false;
        switch (op) {
        case EOP_ADD: wrapped = __builtin_add_overflow(a, b, &out->u.i); break;
        case EOP_SUB: wrapped = __builtin_sub_overflow(a, b, &out->u.i); break;
        case EOP_MUL: wrapped = __builtin_mul_overflow(a, b, &out->u.i); break;
        case EOP_MOD:
            if (!b) return opr_fail(OPR_ERR_INVALID, "modulo by zero");
            out->u.i = b == -1 ? 0 : a % b;
            break;
        }
        if (wrapped)
            return opr_fail(OPR_ERR_INVALID, "integer overflow in %lld %c %lld", (long long)a,
                            op == EOP_ADD ? '+' : op == EOP_SUB ? '-' : '*', (long long)b);
        return OPR_OK;
    }
    double da, db;
    if (!as_num(x, &da) || !as_num(y, &db)) return opr_fail(OPR_ERR_INVALID, "arithmetic on non-numbers");
    out->k = MV_FLOAT;
    switch (op) {
    case EOP_ADD: out->u.d = da + db; break;
    case EOP_SUB: out->u.d = da - db; break;
    case EOP_MUL: out->u.d = da * db; break;
    case EOP_DIV: out->u.d = da / db; break;
    case EOP_MOD: out->u.d = fmod(da, db); break;
    }
    return OPR_OK;
}

static bool values_equal(const mval *x, const mval *y)
{
    if (x->k == MV_LIST && y->k == MV_LIST)
        return x->n == y->n && !memcmp(x->u.l, y->u.l, (size_t)x->n * sizeof(int64_t));
    if (x->k == MV_FLIST || y->k == MV_FLIST) { /* item by item, as numbers: [2.0, 1.5] == [2.0, 1.5] */
        if (x->k != y->k || x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (x->u.fl[i] != y->u.fl[i]) return false;
        return true;
    }
    if (x->k == MV_NONE || y->k == MV_NONE) return x->k == y->k;
    if (x->k == MV_STR && y->k == MV_STR) return !strcmp(x->u.s, y->u.s);
    double a, b;
    return as_num(x, &a) && as_num(y, &b) && a == b;
}

bool expr_truthy(const mval *v)
{
    switch (v->k) {
    case MV_BOOL: return v->u.b;
    case MV_INT: return v->u.i != 0;
    case MV_FLOAT: return v->u.d != 0;
    case MV_NONE: return false;
    default: return true;
    }
}

int expr_eval(const expr *e, const mval *slots, mval *out) { return expr_eval_with(e, slots, NULL, out); }

int expr_eval_with(const expr *e, const mval *slots, const expr_hooks *h, mval *out)
{
    switch (e->kind) {
    case EXPR_INT: out->k = MV_INT; out->u.i = e->i; return OPR_OK;
    case EXPR_FLOAT: out->k = MV_FLOAT; out->u.d = e->d; return OPR_OK;
    case EXPR_BOOL: out->k = MV_BOOL; out->u.b = e->b; return OPR_OK;
    case EXPR_NONE: out->k = MV_NONE; return OPR_OK;
    case EXPR_STR: out->k = MV_STR; out->u.s = e->name; return OPR_OK;
    case EXPR_NAME: *out = slots[e->slot]; return OPR_OK;
    case EXPR_LIST: {
        if (e->nargs > OPR_MAX_DIMS) return opr_fail(OPR_ERR_INVALID, "list longer than %d", OPR_MAX_DIMS);
        mval v[OPR_MAX_DIMS];
        bool floats = false; /* an item that is not a whole number makes a float list ([1.5, 2]) */
        for (int i = 0; i < e->nargs; i++) {
            int rc = expr_eval_with(e->args[i], slots, h, &v[i]);
            if (rc) return rc;
            int64_t k;
            floats |= v[i].k == MV_FLOAT && !as_int(&v[i], &k);
        }
        out->k = floats ? MV_FLIST : MV_LIST;
        out->n = e->nargs;
        for (int i = 0; i < e->nargs; i++)
            if (floats ? !as_num(&v[i], &out->u.fl[i]) : !as_int(&v[i], &out->u.l[i]))
                return opr_fail(OPR_ERR_INVALID, "list items must be numbers (ints, or floats for a float list)");
        return OPR_OK;
    }
    case EXPR_CALL: {
        mval a[OPR_MAX_ARGS];
        if ((e->builtin < 0 && !(h && h->call)) || e->nargs > OPR_MAX_ARGS)
            return opr_fail(OPR_ERR_INVALID, "'%s' is not evaluable on metadata", e->name);
        if (expr_builtin_is_select(e->builtin)) {
            mval c;
            int rc = expr_eval_with(e->args[0], slots, h, &c);
            return rc ? rc : expr_eval_with(e->args[expr_truthy(&c) ? 1 : 2], slots, h, out);
        }
        for (int i = 0; i < e->nargs; i++) {
            int rc = expr_eval_with(e->args[i], slots, h, &a[i]);
            if (rc) return rc;
        }
        return e->builtin >= 0 ? builtins[e->builtin].fn(a, e->nargs, out) : h->call(h->ud, e, a, e->nargs, out);
    }
    case EXPR_UNARY: {
        mval v;
        int rc = expr_eval_with(e->args[0], slots, h, &v);
        if (rc) return rc;
        if (e->op == EOP_NOT) { out->k = MV_BOOL; out->u.b = !expr_truthy(&v); return OPR_OK; }
        mval zero = {.k = MV_INT};
        return arith(EOP_SUB, &zero, &v, out);
    }
    case EXPR_INDEX: {
        mval l, i;
        int rc = expr_eval_with(e->args[0], slots, h, &l);
        if (!rc) rc = expr_eval_with(e->args[1], slots, h, &i);
        if (rc) return rc;
        int64_t k;
        int d = 0;
        /* wrap() lets index 0 through for 0 items (a 0-d tensor's dim 0): not here */
        if ((mval_is_list(&l) || l.k == MV_LIST || l.k == MV_FLIST) && l.n == 0)
            return opr_fail(OPR_ERR_INVALID, "index into an empty list");
        if (mval_is_list(&l) && as_int(&i, &k)) { /* grads[k], results[k], tensors[i] */
            if (wrap(k, l.n, "index", &d)) return OPR_ERR_INVALID;
            if (!mval_item(&l, d)) { out->k = MV_NONE; return OPR_OK; }
            out->k = MV_TENSOR;
            out->u.t = mval_item(&l, d);
            return OPR_OK;
        }
        if (l.k == MV_FLIST && as_int(&i, &k)) { /* scale_factors[0] */
            if (wrap(k, l.n, "index", &d)) return OPR_ERR_INVALID;
            out->k = MV_FLOAT;
            out->u.d = l.u.fl[d];
            return OPR_OK;
        }
        if (l.k != MV_LIST || !as_int(&i, &k)) return opr_fail(OPR_ERR_INVALID, "only int and float lists can be indexed");
        if (wrap(k, l.n, "index", &d)) return OPR_ERR_INVALID;
        out->k = MV_INT;
        out->u.i = l.u.l[d];
        return OPR_OK;
    }
    case EXPR_BINARY: {
        mval x, y;
        int rc = expr_eval_with(e->args[0], slots, h, &x);
        if (rc) return rc;
        if (e->op == EOP_AND || e->op == EOP_OR) { /* short-circuit */
            bool tx = expr_truthy(&x);
            if ((e->op == EOP_AND && !tx) || (e->op == EOP_OR && tx)) { out->k = MV_BOOL; out->u.b = tx; return OPR_OK; }
            if ((rc = expr_eval_with(e->args[1], slots, h, &y))) return rc;
            out->k = MV_BOOL;
            out->u.b = expr_truthy(&y);
            return OPR_OK;
        }
        if ((rc = expr_eval_with(e->args[1], slots, h, &y))) return rc;
        if (e->op <= EOP_MOD) return arith(e->op, &x, &y, out);
        out->k = MV_BOOL;
        if (e->op == EOP_EQ) { out->u.b = values_equal(&x, &y); return OPR_OK; }
        if (e->op == EOP_NE) { out->u.b = !values_equal(&x, &y); return OPR_OK; }
        double a, b;
        if (!as_num(&x, &a) || !as_num(&y, &b)) return opr_fail(OPR_ERR_INVALID, "comparison of non-numbers");
        out->u.b = e->op == EOP_LT ? a < b : e->op == EOP_LE ? a <= b : e->op == EOP_GT ? a > b : a >= b;
        return OPR_OK;
    }
    }
    return opr_fail(OPR_ERR_INVALID, "bad expression node");
}

void mval_of_kernel_arg(const opr_kernel_arg *k, mval *m)
{
    switch (k->kind) {
    case OPR_ARG_INT: m->k = MV_INT; m->u.i = k->u.i; break;
    case OPR_ARG_DOUBLE: m->k = MV_FLOAT; m->u.d = k->u.d; break;
    case OPR_ARG_BOOL: m->k = MV_BOOL; m->u.b = k->u.b; break;
    case OPR_ARG_STRING: m->k = MV_STR; m->u.s = k->u.s; break;
    case OPR_ARG_INT_LIST:
        m->k = MV_LIST;
        m->n = k->u.il.n;
        if (k->u.il.n) memcpy(m->u.l, k->u.il.items, (size_t)k->u.il.n * sizeof(int64_t));
        break;
    case OPR_ARG_DOUBLE_LIST:
        m->k = MV_FLIST;
        m->n = k->u.dl.n;
        if (k->u.dl.n) memcpy(m->u.fl, k->u.dl.items, (size_t)k->u.dl.n * sizeof(double));
        break;
    default: m->k = MV_NONE; break;
    }
}

bool kernel_arg_of_mval(const mval *m, opr_kernel_arg *k)
{
    *k = (opr_kernel_arg){.struct_size = sizeof *k, .kind = OPR_ARG_NONE};
    switch (m->k) {
    case MV_INT: k->kind = OPR_ARG_INT; k->u.i = m->u.i; return true;
    case MV_FLOAT: k->kind = OPR_ARG_DOUBLE; k->u.d = m->u.d; return true;
    case MV_BOOL: k->kind = OPR_ARG_BOOL; k->u.b = m->u.b; return true;
    case MV_LIST: k->kind = OPR_ARG_INT_LIST; k->u.il.items = m->u.l; k->u.il.n = m->n; return true;
    case MV_FLIST: k->kind = OPR_ARG_DOUBLE_LIST; k->u.dl.items = m->u.fl; k->u.dl.n = m->n; return true;
    case MV_STR: k->kind = OPR_ARG_STRING; k->u.s = m->u.s; return true;
    case MV_NONE: return true;
    default: return false;
    }
}

static const char *op_text(int op)
{
    static const char *t[] = {"", "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "-", "!"};
    return op > 0 && op <= EOP_NOT ? t[op] : "?";
}

void expr_format(const expr *e, char *buf, size_t len)
{
    size_t k = strlen(buf);
    if (k + 1 >= len) return;
    char *p = buf + k;
    size_t room = len - k;
    switch (e->kind) {
    case EXPR_INT: snprintf(p, room, "%lld", (long long)e->i); return;
    case EXPR_FLOAT: snprintf(p, room, "%g", e->d); return;
    case EXPR_BOOL: snprintf(p, room, "%s", e->b ? "True" : "False"); return;
    case EXPR_NONE: snprintf(p, room, "None"); return;
    case EXPR_STR: snprintf(p, room, "\"%s\"", e->name); return;
    case EXPR_NAME: snprintf(p, room, "%s", e->name); return;
    case EXPR_UNARY: snprintf(p, room, "%s", op_text(e->op)); expr_format(e->args[0], buf, len); return;
    case EXPR_BINARY:
        expr_format(e->args[0], buf, len);
        k = strlen(buf);
        if (k < len) snprintf(buf + k, len - k, " %s ", op_text(e->op));
        expr_format(e->args[1], buf, len);
        return;
    case EXPR_INDEX:
        expr_format(e->args[0], buf, len);
        strncat(buf, "[", len - strlen(buf) - 1);
        expr_format(e->args[1], buf, len);
        strncat(buf, "]", len - strlen(buf) - 1);
        return;
    case EXPR_CALL:
    case EXPR_LIST:
        if (e->kind == EXPR_CALL) snprintf(p, room, "%s(", e->name);
        else snprintf(p, room, "[");
        for (int i = 0; i < e->nargs; i++) {
            if (i) strncat(buf, ", ", len - strlen(buf) - 1);
            if (e->kwnames && e->kwnames[i]) {
                strncat(buf, e->kwnames[i], len - strlen(buf) - 1);
                strncat(buf, "=", len - strlen(buf) - 1);
            }
            expr_format(e->args[i], buf, len);
        }
        strncat(buf, e->kind == EXPR_CALL ? ")" : "]", len - strlen(buf) - 1);
        return;
    }
}
