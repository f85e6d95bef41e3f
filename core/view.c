/* Views: new tensor headers over the same storage with other shapes and strides. */
#include "core.h"

#include <string.h>

static bool wrap_dim(int64_t d, int ndim, int *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n) return false;
    *out = (int)(d < 0 ? d + n : d);
    return true;
}

#define BAD_DIM(who, d, t) \
    (opr_fail(OPR_ERR_INVALID, "%s: dim %lld out of range for a %d-d tensor", who, (long long)(d), (t)->m.ndim), (opr_tensor *)NULL)
#define NULL_ARG(who) (opr_fail(OPR_ERR_INVALID, "%s: NULL tensor", who), (opr_tensor *)NULL)
/* The views take plain tensors only: a jagged or batched one is refused by name. */
#define CHECK_DENSE(who, t) do { \
        if (!(t)) return NULL_ARG(who); \
        if (opr_layout_refuse((t), who)) return NULL; \
    } while (0)

opr_tensor *opr_tensor_transpose(opr_tensor *t, int d0, int d1)
{
    CHECK_DENSE("transpose", t);
    int a, b;
    if (!wrap_dim(d0, t->m.ndim, &a)) return BAD_DIM("transpose", d0, t);
    if (!wrap_dim(d1, t->m.ndim, &b)) return BAD_DIM("transpose", d1, t);
    if (t->m.ndim == 0) return opr_tensor_make_view(t, 0, NULL, NULL, t->m.offset);
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    memcpy(shape, t->m.shape, sizeof shape);
    memcpy(strides, t->m.strides, sizeof strides);
    shape[a] = t->m.shape[b]; shape[b] = t->m.shape[a];
    strides[a] = t->m.strides[b]; strides[b] = t->m.strides[a];
    return opr_tensor_make_view(t, t->m.ndim, shape, strides, t->m.offset);
}

opr_tensor *opr_tensor_permute(opr_tensor *t, const int *dims, int ndims)
{
    CHECK_DENSE("permute", t);
    if (ndims != t->m.ndim || (ndims && !dims)) {
        opr_fail(OPR_ERR_INVALID, "permute: %d dims given for a %d-d tensor", ndims, t->m.ndim);
        return NULL;
    }
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    bool seen[OPR_MAX_DIMS] = {false};
    for (int i = 0; i < ndims; i++) {
        int d;
        if (!wrap_dim(dims[i], ndims, &d)) return BAD_DIM("permute", dims[i], t);
        if (seen[d]) { opr_fail(OPR_ERR_INVALID, "permute: dim %d repeated", d); return NULL; }
        seen[d] = true;
        shape[i] = t->m.shape[d];
        strides[i] = t->m.strides[d];
    }
    return opr_tensor_make_view(t, ndims, shape, strides, t->m.offset);
}

opr_tensor *opr_tensor_expand(opr_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_DENSE("expand", t);
    if (ndim < t->m.ndim || ndim > OPR_MAX_DIMS || (ndim && !shape)) {
        opr_fail(OPR_ERR_INVALID, "expand: cannot expand a %d-d tensor to %d dims", t->m.ndim, ndim);
        return NULL;
    }
    int64_t out[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    int off = ndim - t->m.ndim;
    for (int d = 0; d < ndim; d++) {
        int64_t want = shape[d];
        if (d < off) {
            if (want < 0) { opr_fail(OPR_ERR_INVALID, "expand: -1 not allowed for a new leading dim"); return NULL; }
            out[d] = want; strides[d] = 0; continue;
        }
        int64_t have = t->m.shape[d - off];
        if (want == -1 || want == have) { out[d] = have; strides[d] = t->m.strides[d - off]; }
        else if (have == 1 && want >= 0) { out[d] = want; strides[d] = 0; }
        else {
            opr_fail(OPR_ERR_INVALID, "expand: size %lld of dim %d cannot expand to %lld",
                     (long long)have, d - off, (long long)want);
            return NULL;
        }
    }
    return opr_tensor_make_view(t, ndim, out, strides, t->m.offset);
}

opr_tensor *opr_tensor_narrow(opr_tensor *t, int dim, int64_t start, int64_t length)
{
    CHECK_DENSE("narrow", t);
    int d;
    if (t->m.ndim == 0 || !wrap_dim(dim, t->m.ndim, &d)) return BAD_DIM("narrow", dim, t);
    int64_t size = t->m.shape[d];
    if (start < 0) start += size;
    if (start < 0 || length < 0 || start > size || length > size - start) {
        opr_fail(OPR_ERR_INVALID, "narrow: start %lld length %lld out of range for dim %d of size %lld",
                 (long long)start, (long long)length, d, (long long)size);
        return NULL;
    }
    int64_t shape[OPR_MAX_DIMS];
    memcpy(shape, t->m.shape, sizeof shape);
    shape[d] = length;
    return opr_tensor_make_view(t, t->m.ndim, shape, t->m.strides, t->m.offset + start * t->m.strides[d]);
}

opr_tensor *opr_tensor_diagonal(opr_tensor *t, int64_t offset, int d0, int d1)
{
    CHECK_DENSE("diagonal", t);
    int a, b;
    if (t->m.ndim < 2) { opr_fail(OPR_ERR_INVALID, "diagonal: needs at least 2 dims, got %d", t->m.ndim); return NULL; }
    if (!wrap_dim(d0, t->m.ndim, &a)) return BAD_DIM("diagonal", d0, t);
    if (!wrap_dim(d1, t->m.ndim, &b)) return BAD_DIM("diagonal", d1, t);
    if (a == b) { opr_fail(OPR_ERR_INVALID, "diagonal: dim1 and dim2 are both %d", a); return NULL; }
    int64_t len = opr_diagonal_length(t->m.shape[a], t->m.shape[b], offset), start = t->m.offset;
    if (len > 0) start += offset >= 0 ? offset * t->m.strides[b] : -offset * t->m.strides[a];
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->m.ndim; d++) {
        if (d == a || d == b) continue;
        shape[n] = t->m.shape[d];
        strides[n++] = t->m.strides[d];
    }
    shape[n] = len;
    strides[n++] = t->m.strides[a] + t->m.strides[b];
    return opr_tensor_make_view(t, n, shape, strides, start);
}

opr_tensor *opr_tensor_unsqueeze(opr_tensor *t, int dim)
{
    CHECK_DENSE("unsqueeze", t);
    int d;
    if (t->m.ndim >= OPR_MAX_DIMS) { opr_fail(OPR_ERR_INVALID, "unsqueeze: tensor already has %d dims", OPR_MAX_DIMS); return NULL; }
    if (!wrap_dim(dim, t->m.ndim + 1, &d)) return BAD_DIM("unsqueeze", dim, t);
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->m.ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = j < t->m.ndim ? t->m.strides[j] * t->m.shape[j] : 1;
            continue;
        }
        shape[i] = t->m.shape[j];
        strides[i] = t->m.strides[j++];
    }
    return opr_tensor_make_view(t, t->m.ndim + 1, shape, strides, t->m.offset);
}

opr_tensor *opr_tensor_squeeze(opr_tensor *t, int dim)
{
    CHECK_DENSE("squeeze", t);
    int only = -1;
    if (dim != OPR_ALL_DIMS && !wrap_dim(dim, t->m.ndim, &only)) return BAD_DIM("squeeze", dim, t);
    int64_t shape[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->m.ndim; d++) {
        bool drop = t->m.shape[d] == 1 && (only < 0 || only == d);
        if (drop) continue;
        shape[n] = t->m.shape[d];
        strides[n++] = t->m.strides[d];
    }
    return opr_tensor_make_view(t, n, shape, strides, t->m.offset);
}

/* Resolves a -1 entry and checks the element count. */
static int infer_shape(const opr_tensor *t, const int64_t *shape, int ndim, int64_t *out, const char *who)
{
    if (ndim < 0 || ndim > OPR_MAX_DIMS || (ndim && !shape))
        return opr_fail(OPR_ERR_INVALID, "%s: bad target rank %d", who, ndim);
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        out[d] = shape[d];
        if (shape[d] == -1) {
            if (infer >= 0) return opr_fail(OPR_ERR_INVALID, "%s: only one dimension can be -1", who);
            infer = d;
        } else if (shape[d] < 0) {
            return opr_fail(OPR_ERR_INVALID, "%s: negative size %lld", who, (long long)shape[d]);
        } else if (__builtin_mul_overflow(known, shape[d], &known)) {
            return opr_fail(OPR_ERR_INVALID, "%s: shape too large, too many elements", who);
        }
    }
    if (infer >= 0) {
        if (known == 0 || t->m.numel % known)
            return opr_fail(OPR_ERR_INVALID, "%s: cannot infer -1 for %lld elements", who, (long long)t->m.numel);
        out[infer] = t->m.numel / known;
        known *= out[infer];
    }
    if (known != t->m.numel)
        return opr_fail(OPR_ERR_INVALID, "%s: shape has %lld elements, tensor has %lld", who,
                        (long long)known, (long long)t->m.numel);
    /* an empty tensor takes any shape with a zero in it, but its strides still must
     * not wrap: the sizes other than zero are bounded as for any tensor */
    return opr_shape_check(out, ndim, NULL, who);
}

/* Strides for viewing t with `shape` without copying, if its layout allows (the
 * algorithm of PyTorch's computeStride: split and merge runs of contiguous dims). */
static bool view_strides(const opr_tensor *t, const int64_t *shape, int ndim, int64_t *strides)
{
    if (t->m.numel == 0 || t->m.ndim == 0) { opr_contiguous_strides(shape, ndim, strides); return true; }
    int view_d = ndim - 1;
    int64_t tensor_numel = 1, view_numel = 1;
    int64_t chunk_base = t->m.strides[t->m.ndim - 1];
    for (int d = t->m.ndim - 1; d >= 0; d--) {
        tensor_numel *= t->m.shape[d];
        if (d == 0 || (t->m.shape[d - 1] != 1 && t->m.strides[d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) { chunk_base = t->m.strides[d - 1]; tensor_numel = 1; view_numel = 1; }
        }
    }
    return view_d == -1;
}

opr_tensor *opr_tensor_view_shape(opr_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_DENSE("view", t);
    int64_t out[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    if (infer_shape(t, shape, ndim, out, "view")) return NULL;
    if (!view_strides(t, out, ndim, strides)) {
        opr_fail(OPR_ERR_INVALID, "view: the tensor's strides do not allow this shape without a copy (use reshape)");
        return NULL;
    }
    return opr_tensor_make_view(t, ndim, out, strides, t->m.offset);
}

opr_tensor *opr_tensor_reshape(opr_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_DENSE("reshape", t);
    int64_t out[OPR_MAX_DIMS], strides[OPR_MAX_DIMS];
    if (infer_shape(t, shape, ndim, out, "reshape")) return NULL;
    if (view_strides(t, out, ndim, strides)) return opr_tensor_make_view(t, ndim, out, strides, t->m.offset);
    opr_tensor *c = opr_tensor_contiguous(t);
    if (!c) return NULL;
    opr_tensor *v = opr_tensor_make_view(c, ndim, out, (opr_contiguous_strides(out, ndim, strides), strides), c->m.offset);
    opr_tensor_release(c);
    return v;
}
