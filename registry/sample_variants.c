/* Layout and size variants of an op's samples, for the conformance check: the same
 * logical inputs as non-contiguous views (transposed, strided, offset, expanded), and
 * the sample with a size made 0, 1 or large. The views are made here, on the host's
 * side, over a buffer that reaches the device through its copy_from_host, so a kernel
 * under test sees the layouts whatever its device. Values come from the sample's
 * seeded generator (samples.c): a layout variant's logical values are the plain
 * sample's. */
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements the "offset" variant skips: odd, so that the view's data is not aligned
 * to a vector width either. */
#define VARIANT_OFFSET 3
/* "large": the largest tensor, input or output, reaches this many elements ... */
#define LARGE_MIN_NUMEL 65536
/* ... each scaled size passes this (tile and vector widths, "M > 4" limits) unless
 * that measure would then pass LARGE_CAP_NUMEL. */
#define LARGE_MIN_DIM 64
#define LARGE_CAP_NUMEL (1 << 20)
/* ... and its estimated work (`flops:`) this much at most. */
#define LARGE_CAP_FLOPS 3e7

/* VK_ODD: the innermost size of the first tensor made odd, past a vector width and not
 * a multiple of one (a remainder loop runs); VK_ODD_STEP2: that, with the tensor as a
 * step-2 slice (the remainder of a strided row). */
typedef enum vkind {
    VK_PLAIN, VK_TRANSPOSED, VK_STEP2, VK_OFFSET, VK_STRIDE0, VK_SIZE0, VK_SIZE1, VK_LARGE, VK_ODD, VK_ODD_STEP2
} vkind;

typedef struct variant {
    vkind kind;
    int k;            /* layout kinds: the tensor, in making order */
    int arg, item;    /* its argument, and its item in a Tensor[] (-1 for a Tensor) */
    int dim;          /* stride-0: the dim expanded */
    int64_t from, to; /* size-0, size-1: every size `from` becomes `to` */
    int64_t factor;   /* large: every size > 1 not kept is multiplied by it */
    const op_sample *s;
    const opr_op *op;
} variant;

/* The sample's tensors in making order (samples_build makes those of the given
 * Tensor and Tensor[] arguments, in argument order): calls fn for each until it
 * returns true; returns the count visited. */
typedef bool (*tensor_fn)(void *ud, int k, int arg, int item, const sample_tensor *st);
static int each_tensor(const opr_op *op, const op_sample *s, tensor_fn fn, void *ud)
{
    int k = 0;
    for (int a = 0; a < op->nargs; a++) {
        const sample_arg *sa = &s->args[a];
        if (!sa->given || (op->args[a].type != ARG_TENSOR && op->args[a].type != ARG_TENSOR_LIST)) continue;
        for (int j = 0; j < sa->ntensors; j++, k++)
            if (fn && fn(ud, k, a, op->args[a].type == ARG_TENSOR_LIST ? j : -1, &sa->tensors[j])) return k + 1;
    }
    return k;
}

static int64_t numel_of(const sample_tensor *st)
{
    int64_t n = 1;
    for (int d = 0; d < st->ndim; d++) n *= st->shape[d];
    return n;
}

/* Sizes a size variant leaves alone: those of a tensor given by `values:` and the
 * values themselves, which may be tied to the other tensors' sizes (offsets end at a
 * row count, indices stay below one). */
typedef struct kept_set {
    int64_t v[OPR_SAMPLE_MAX_TENSORS * (OPR_MAX_DIMS + SAMPLE_MAX_VALUES)];
    int n;
} kept_set;

static bool collect_kept(void *ud, int k, int arg, int item, const sample_tensor *st)
{
    (void)k; (void)arg; (void)item;
    kept_set *ks = ud;
    if (st->nvalues < 0) return false;
    for (int d = 0; d < st->ndim && ks->n < (int)(sizeof ks->v / sizeof ks->v[0]); d++) ks->v[ks->n++] = st->shape[d];
    for (int i = 0; i < st->nvalues && ks->n < (int)(sizeof ks->v / sizeof ks->v[0]); i++)
        ks->v[ks->n++] = (int64_t)st->values[i];
    return false;
}

static bool is_kept(const kept_set *ks, int64_t size)
{
    for (int i = 0; i < ks->n; i++)
        if (ks->v[i] == size) return true;
    return false;
}

static int64_t scaled(const kept_set *ks, int64_t size, int64_t f) { return size > 1 && !is_kept(ks, size) ? size * f : size; }

/* What "large" and "size-N" need to know of the sample's tensors. */
typedef struct size_scan {
    const kept_set *ks;
    int64_t factor;       /* for metas and max_numel */
    double max_numel;     /* of the largest tensor, sizes scaled by factor */
    int64_t min_scalable; /* smallest size that scales (0: none) */
    int64_t largest_free; /* largest size >= 1 not kept (size-N's choice), 0: none */
    opr_meta metas[OPR_SAMPLE_MAX_TENSORS]; /* every tensor, scaled */
} size_scan;

static bool scan_sizes(void *ud, int k, int arg, int item, const sample_tensor *st)
{
    (void)arg; (void)item;
    size_scan *sc = ud;
    if (k >= OPR_SAMPLE_MAX_TENSORS) return true; /* samples_build refuses such a sample */
    opr_meta *m = &sc->metas[k];
    m->dtype = st->dtype >= 0 ? (opr_dtype)st->dtype : OPR_F64;
    m->ndim = st->ndim;
    double n = 1;
    for (int d = 0; d < st->ndim; d++) {
        int64_t s = st->shape[d];
        bool drawn = st->nvalues < 0;
        m->shape[d] = drawn ? scaled(sc->ks, s, sc->factor) : s;
        n *= (double)m->shape[d];
        if (drawn && s > 1 && !is_kept(sc->ks, s) && (!sc->min_scalable || s < sc->min_scalable)) sc->min_scalable = s;
        if (drawn && s >= 1 && !is_kept(sc->ks, s) && s > sc->largest_free) sc->largest_free = s;
    }
    m->numel = n < 0x1p62 ? (int64_t)n : INT64_MAX;
    if (n > sc->max_numel) sc->max_numel = n;
    return false;
}

/* The element counts of the op's outputs for the scanned shapes, by its `shape:`
 * expressions (a broadcasting op's result may be much larger than each input); the
 * largest into *most. Outputs whose shape cannot be told so are left out. With flops
 * (may be NULL), also the op's `flops:` estimate for those shapes (0 when it has none or
 * it cannot be told). */
static void outputs_numel(const opr_op *op, const op_sample *s, const size_scan *sc, double *most, double *flops)
{
    opr_meta outs[OPR_MAX_OUTS];
    mval slots[OPR_MAX_ARGS + OPR_MAX_OUTS + 1];
    int k = 0;
    for (int a = 0; a < op_nslots(op); a++) slots[a].k = MV_NONE;
    for (int a = 0; a < op->nargs; a++) {
        const op_arg *oa = &op->args[a];
        const sample_arg *sa = &s->args[a];
        if (oa->type == ARG_TENSOR || oa->type == ARG_TENSOR_LIST) {
            if (!sa->given || (oa->type == ARG_TENSOR && sa->ntensors == 0)) continue; /* absent, None */
            if (k + sa->ntensors > OPR_SAMPLE_MAX_TENSORS) return;
            if (oa->type == ARG_TENSOR) slots[a] = (mval){.k = MV_TENSOR, .u.t = &sc->metas[k]};
            else slots[a] = (mval){.k = MV_METAS, .n = sa->ntensors, .u.ms = &sc->metas[k]};
            k += sa->ntensors;
        } else if (sa->given) {
            slots[a] = sa->value;
        } else if (oa->has_default) {
            mval_of_kernel_arg(&oa->def, &slots[a]);
        }
    }
    for (int i = 0; i < op->nout && !op->list_out; i++) {
        mval shape;
        if (!op->shapes[i] || expr_eval(op->shapes[i], slots, &shape) || shape.k != MV_LIST) continue;
        double n = 1;
        for (int d = 0; d < shape.n; d++) n *= (double)(shape.u.l[d] > 0 ? shape.u.l[d] : 0);
        if (n > *most) *most = n;
        outs[i] = (opr_meta){.dtype = OPR_F32, .ndim = shape.n, .numel = n < 0x1p62 ? (int64_t)n : INT64_MAX};
        memcpy(outs[i].shape, shape.u.l, (size_t)shape.n * sizeof *shape.u.l);
        slots[op->nargs + i] = (mval){.k = MV_TENSOR, .u.t = &outs[i]};
    }
    mval cost;
    if (flops) *flops = op->flops && !expr_eval(op->flops, slots, &cost) ? cost.k == MV_INT ? (double)cost.u.i
                        : cost.k == MV_FLOAT ? cost.u.d : 0 : 0;
    opr_error_clear(); /* a shape that could not be told is no error of the variant's */
}

static size_scan scan(const opr_op *op, const op_sample *s, const kept_set *ks, int64_t factor)
{
    size_scan sc = {.ks = ks, .factor = factor};
    each_tensor(op, s, scan_sizes, &sc);
    return sc;
}

/* How big the variant's work is: its largest tensor, input or output. */
static double work_numel(const opr_op *op, const op_sample *s, const kept_set *ks, int64_t factor)
{
    size_scan sc = scan(op, s, ks, factor);
    double most = sc.max_numel;
    outputs_numel(op, s, &sc, &most, NULL);
    return most;
}

/* The op's estimated flops (its `flops:`) for the sizes scaled by factor. */
static double work_flops(const opr_op *op, const op_sample *s, const kept_set *ks, int64_t factor)
{
    size_scan sc = scan(op, s, ks, factor);
    double most = 0, flops = 0;
    outputs_numel(op, s, &sc, &most, &flops);
    return flops;
}

/* The factor of "large", 0 when no tensor can grow to LARGE_MIN_NUMEL. */
static int64_t large_factor(const opr_op *op, const op_sample *s, const kept_set *ks)
{
    size_scan base = scan(op, s, ks, 1);
    /* the element count grows with the factor: the least that reaches the goal, by
     * bisection, when some tensor can reach it (one with a size 0 never grows) */
    int64_t lo = 1, hi = LARGE_MIN_NUMEL;
    if (!base.min_scalable || work_numel(op, s, ks, hi) < LARGE_MIN_NUMEL) return 0;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (work_numel(op, s, ks, mid) < LARGE_MIN_NUMEL) lo = mid;
        else hi = mid;
    }
    int64_t f = hi, f_min = hi, f_dim = LARGE_MIN_DIM / base.min_scalable + 1;
    if (f_dim > f) f = f_dim;
    while (f > f_min && work_numel(op, s, ks, f) > LARGE_CAP_NUMEL) f--;
    /* an op whose work grows faster than its tensors (a convolution: kernel and channels
     * scale too) is kept within LARGE_CAP_FLOPS, even below LARGE_MIN_NUMEL */
    while (f > 1 && work_flops(op, s, ks, f) > LARGE_CAP_FLOPS) f--;
    return f > 1 ? f : 0;
}

/* ------------------------------------------------------------------ the list */

typedef struct lister {
    const opr_op *op;
    const op_sample *s;
    int want;     /* the variant to fill in, -1: only count */
    int n;        /* variants so far (the plain sample is 0) */
    variant *out;
} lister;

static void add(lister *l, variant v)
{
    if (l->n++ == l->want) {
        v.op = l->op;
        v.s = l->s;
        *l->out = v;
    }
}

static bool list_layouts(void *ud, int k, int arg, int item, const sample_tensor *st)
{
    lister *l = ud;
    int64_t n = numel_of(st);
    variant v = {.k = k, .arg = arg, .item = item};
    if (n > 0 && st->ndim >= 2 && st->shape[st->ndim - 1] > 1 && st->shape[st->ndim - 2] > 1) { /* (an empty one has no layout) */
        v.kind = VK_TRANSPOSED;
        add(l, v);
    }
    if (n > 1) { v.kind = VK_STEP2; add(l, v); }
    if (n >= 1) { v.kind = VK_OFFSET; add(l, v); }
    /* an expanded view repeats values: not for given values, nor for the tensor an
     * in-place op writes (its elements would overlap) */
    bool mutated = (l->op->inplace && arg == 0) || l->op->args[arg].written;
    for (int d = st->ndim - 1; d >= 0 && st->nvalues < 0 && !mutated; d--)
        if (st->shape[d] > 1) {
            v.kind = VK_STRIDE0;
            v.dim = d;
            add(l, v);
            break;
        }
    return false;
}

/* The innermost size > 1 of the first tensor with drawn values whose sizes are not kept:
 * the row length an odd-size variant changes. */
typedef struct inner_find {
    const kept_set *ks;
    int64_t size;
    variant at;      /* the tensor: k, arg, item */
} inner_find;

static bool find_inner(void *ud, int k, int arg, int item, const sample_tensor *st)
{
    inner_find *f = ud;
    if (st->nvalues >= 0 || st->ndim < 1) return false;
    int64_t s = st->shape[st->ndim - 1];
    if (s <= 1 || is_kept(f->ks, s)) return false;
    f->size = s;
    f->at = (variant){.k = k, .arg = arg, .item = item};
    return true;
}

/* Fills *v with variant `want` of sample i (-1: none); returns the count. */
static int list_variants(const opr_op *op, int i, int want, variant *v)
{
    const op_sample *s = &op->samples[i];
    lister l = {.op = op, .s = s, .want = want, .out = v};
    add(&l, (variant){.kind = VK_PLAIN});
    each_tensor(op, s, list_layouts, &l);
    kept_set ks = {.n = 0};
    each_tensor(op, s, collect_kept, &ks);
    size_scan sc = scan(op, s, &ks, 1);
    if (sc.largest_free >= 1) add(&l, (variant){.kind = VK_SIZE0, .from = sc.largest_free, .to = 0});
    if (sc.largest_free > 1) add(&l, (variant){.kind = VK_SIZE1, .from = sc.largest_free, .to = 1});
    int64_t f = large_factor(op, s, &ks);
    if (f) add(&l, (variant){.kind = VK_LARGE, .factor = f});
    /* Rows of 2 * max(size, 4) + 5 elements: odd, past an 8-wide vector and not a
     * multiple of 4, so a loop's remainder runs; every size equal to it changes alike
     * (shapes that must agree keep agreeing). */
    inner_find in = {.ks = &ks};
    each_tensor(op, s, find_inner, &in);
    if (in.size) {
        int64_t to = 2 * (in.size > 4 ? in.size : 4) + 5;
        variant odd = in.at;
        odd.from = in.size;
        odd.to = to;
        odd.kind = VK_ODD;
        add(&l, odd);
        odd.kind = VK_ODD_STEP2;
        add(&l, odd);
    }
    return l.n;
}

/* ------------------------------------------------------------------ the tweaks */

static void reshape_sizes(const sample_tweak *tw, int k, sample_tensor *st)
{
    (void)k;
    const variant *v = tw->data;
    if (st->nvalues >= 0) return; /* indices and offsets keep their shape and values */
    kept_set ks = {.n = 0};
    if (v->kind == VK_LARGE) each_tensor(v->op, v->s, collect_kept, &ks);
    for (int d = 0; d < st->ndim; d++) {
        if (v->kind == VK_LARGE) st->shape[d] = scaled(&ks, st->shape[d], v->factor);
        else if (st->shape[d] == v->from) st->shape[d] = v->to;
    }
    /* an index tensor drawn below the size it indexes keeps doing so */
    if (v->kind == VK_SIZE1 && (st->dtype == OPR_I64 || st->dtype == OPR_I32) && st->hi == (double)v->from) st->hi = (double)v->to;
}

/* The view of tensor k this variant asks for: over a buffer of *buf_numel elements,
 * with these strides and offset. */
static void view_geometry(const variant *v, const sample_tensor *st, int64_t *strides, int64_t *offset,
                          int64_t *buf_numel)
{
    const int nd = st->ndim;
    int64_t base[OPR_MAX_DIMS];
    memcpy(base, st->shape, sizeof base);
    if (v->kind == VK_TRANSPOSED) { base[nd - 1] = st->shape[nd - 2]; base[nd - 2] = st->shape[nd - 1]; }
    if (v->kind == VK_STEP2 || v->kind == VK_ODD_STEP2) for (int d = 0; d < nd; d++) base[d] *= 2;
    if (v->kind == VK_STRIDE0) base[v->dim] = 1;
    opr_contiguous_strides(base, nd, strides);
    *buf_numel = opr_meta_numel(base, nd);
    *offset = 0;
    switch (v->kind) {
    case VK_TRANSPOSED: {
        int64_t t = strides[nd - 1];
        strides[nd - 1] = strides[nd - 2];
        strides[nd - 2] = t;
        break;
    }
    case VK_STEP2: case VK_ODD_STEP2: for (int d = 0; d < nd; d++) strides[d] *= 2; break;
    case VK_OFFSET: *offset = VARIANT_OFFSET; *buf_numel += VARIANT_OFFSET; break;
    case VK_STRIDE0: strides[v->dim] = 0; break;
    default: break;
    }
}

static opr_tensor *make_view(const sample_tweak *tw, int k, opr_ctx *ctx, opr_dtype dt, const sample_tensor *st,
                             const void *values, opr_device dev)
{
    const variant *v = tw->data;
    if (k != v->k) return opr_tensor_from_data(ctx, dt, st->ndim, st->shape, values, dev);
    int64_t strides[OPR_MAX_DIMS], offset, bn;
    view_geometry(v, st, strides, &offset, &bn);
    const size_t es = opr_dtype_size(dt);
    unsigned char *buf = malloc((size_t)bn * es);
    if (!buf) { opr_fail(OPR_ERR_NOMEM, "samples: out of memory"); return NULL; }
    /* the gaps hold NaN (0 for integers and bools): a kernel that reads them shows */
    if (opr_dtype_is_floating(dt))
        for (int64_t j = 0; j < bn; j++) opr_dtype_store(dt, NAN, buf + (size_t)j * es);
    else
        memset(buf, 0, (size_t)bn * es);
    int64_t idx[OPR_MAX_DIMS] = {0}, n = numel_of(st);
    for (int64_t j = 0; j < n; j++) {
        int64_t at = offset;
        for (int d = 0; d < st->ndim; d++) at += idx[d] * strides[d];
        /* stride 0: the first slice's values, repeated */
        if (v->kind != VK_STRIDE0 || !idx[v->dim]) memcpy(buf + (size_t)at * es, (const char *)values + (size_t)j * es, es);
        for (int d = st->ndim - 1; d >= 0 && ++idx[d] == st->shape[d]; d--) idx[d] = 0;
    }
    opr_tensor *flat = opr_tensor_from_data(ctx, dt, 1, &bn, buf, dev);
    free(buf);
    opr_tensor *t = flat ? opr_tensor_make_view(flat, st->ndim, st->shape, strides, offset) : NULL;
    opr_tensor_release(flat);
    return t;
}

static void format_label(const variant *v, char *label, size_t len)
{
    static const char *names[] = {"", "transposed", "step-2 slice", "offset", "stride-0", "size-0", "size-1", "large"};
    if (!label || !len) return;
    if (v->kind == VK_ODD || v->kind == VK_ODD_STEP2) { /* "odd size 13", "odd size 13, step-2 slice self" */
        int n = snprintf(label, len, "odd size %lld", (long long)v->to);
        if (v->kind == VK_ODD || n < 0 || (size_t)n >= len) return;
        if (v->item >= 0) snprintf(label + n, len - (size_t)n, ", step-2 slice %s[%d]", v->op->args[v->arg].name, v->item);
        else snprintf(label + n, len - (size_t)n, ", step-2 slice %s", v->op->args[v->arg].name);
        return;
    }
    if (v->kind == VK_PLAIN || v->kind >= VK_SIZE0) { snprintf(label, len, "%s", names[v->kind]); return; }
    const char *name = v->op->args[v->arg].name;
    if (v->item >= 0) snprintf(label, len, "%s %s[%d]", names[v->kind], name, v->item);
    else snprintf(label, len, "%s %s", names[v->kind], name);
}

int opr_op_sample_variant_count(const opr_op *op, int i)
{
    return op && i >= 0 && i < op->nsamples ? list_variants(op, i, -1, NULL) : 0;
}

opr_status opr_op_sample_variant_args(const opr_op *op, int i, int variant_index, opr_dtype dtype, opr_device dev,
                                      uint64_t seed, opr_value *args, int *nargs, opr_tensor **owned, int *nowned,
                                      char *label, size_t label_len)
{
    if (label && label_len) label[0] = 0;
    if (!op || !args || !nargs || !owned || !nowned || i < 0 || i >= op->nsamples)
        return opr_fail(OPR_ERR_INVALID, "opr_op_sample_variant_args: bad arguments or sample index %d", i);
    *nowned = 0;
    variant v;
    int count = list_variants(op, i, variant_index, &v);
    if (variant_index < 0 || variant_index >= count)
        return opr_fail(OPR_ERR_INVALID, "opr_op_sample_variant_args: %s sample %d has %d variants, not %d", op->name,
                        i, count, variant_index + 1);
    format_label(&v, label, label_len);
    sample_tweak tw = {.data = &v};
    if (v.kind >= VK_SIZE0) tw.reshape = reshape_sizes;
    if ((v.kind != VK_PLAIN && v.kind < VK_SIZE0) || v.kind == VK_ODD_STEP2) tw.make = make_view;
    int rc = samples_build(op, i, v.kind == VK_PLAIN ? NULL : &tw, dtype, dev, seed, args, nargs, owned, nowned);
    if (rc) { /* nothing for the caller to release */
        for (int k = 0; k < *nowned; k++) opr_tensor_release(owned[k]);
        *nowned = 0;
        *nargs = 0;
    }
    return rc;
}
