/* Example inputs of an op (`samples:` in its YAML entry), used by the conformance
 * check and the generated gradcheck suite. A tensor is given by a shape, or by
 * {shape, range, dtype}; scalars by their value. Values are drawn in double from a
 * seeded generator, so every dtype and backend sees the same numbers. */
#include "yaml_loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int parse_ints(const loader *l, const yaml_node_t *n, sample_tensor *t, bool allow_negative)
{
    if (n->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: a shape must be a list%s", "");
    t->ndim = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        const char *v = yaml_scalar(yaml_document_get_node(l->doc, *it));
        char *end;
        long long d = v ? strtoll(v, &end, 10) : -1;
        if (!v || *end || (d < 0 && !allow_negative) || t->ndim == OPR_MAX_DIMS)
            return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: bad shape entry '%s'", v ? v : "?");
        t->shape[t->ndim++] = d;
    }
    return OPR_OK;
}

/* A tensor's shape: its element count is checked here, so that making the tensor
 * (make_tensor) can size its buffer without overflow. */
static int parse_shape(const loader *l, const yaml_node_t *n, sample_tensor *t)
{
    int rc = parse_ints(l, n, t, false);
    if (!rc && opr_shape_check(t->shape, t->ndim, NULL, "samples"))
        rc = yaml_fail_at(l, n, OPR_ERR_PARSE, "%s", opr_last_error());
    return rc;
}

/* One bound of a range: a number whose values, drawn between the bounds, convert to
 * every dtype (i64 included) without overflow. */
static int parse_bound(const loader *l, const yaml_node_t *n, double *out)
{
    const char *s = yaml_scalar(n);
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || !(fabs(v) <= 0x1p53))
        return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: a range bound must be a number within +-2^53, not '%s'",
                            s ? s : "?");
    *out = v;
    return OPR_OK;
}

/* One item of `values`: any number, or nan, inf, -inf (edge values for floating
 * tensors; an integer tensor refuses what is not an integer within +-2^53 when it is
 * made). */
static int parse_value(const loader *l, const yaml_node_t *n, double *out)
{
    const char *s = yaml_scalar(n);
    if (s && (!strcmp(s, "nan") || !strcmp(s, "inf") || !strcmp(s, "-inf"))) {
        *out = s[0] == 'n' ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
        return OPR_OK;
    }
    char *end = NULL;
    const double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || !isfinite(v))
        return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: a value must be a number, nan, inf or -inf, not '%s'",
                            s ? s : "?");
    *out = v;
    return OPR_OK;
}

static int parse_tensor(const loader *l, const yaml_node_t *n, sample_tensor *t)
{
    *t = (sample_tensor){.dtype = -1, .lo = -1, .hi = 1, .nvalues = -1};
    if (n->type == YAML_SEQUENCE_NODE) return parse_shape(l, n, t);
    if (n->type != YAML_MAPPING_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: a tensor is a shape or {shape: ...}%s", "");
    bool have_shape = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *k = yaml_scalar(yaml_document_get_node(l->doc, p->key));
        yaml_node_t *v = yaml_document_get_node(l->doc, p->value);
        int rc = yaml_check_key(l, n, p);
        if (rc) return rc;
        if (!strcmp(k, "shape")) {
            if ((rc = parse_shape(l, v, t))) return rc;
            have_shape = true;
        } else if (!strcmp(k, "dtype")) {
            opr_dtype dt;
            if (!yaml_scalar(v) || opr_dtype_parse(yaml_scalar(v), &dt))
                return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: unknown dtype '%s'", yaml_scalar(v) ? yaml_scalar(v) : "?");
            t->dtype = (int)dt;
        } else if (!strcmp(k, "range")) {
            if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start != 2)
                return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: range must be [lo, hi]%s", "");
            if ((rc = parse_bound(l, yaml_document_get_node(l->doc, v->data.sequence.items.start[0]), &t->lo)) ||
                (rc = parse_bound(l, yaml_document_get_node(l->doc, v->data.sequence.items.start[1]), &t->hi)))
                return rc;
        } else if (!strcmp(k, "values")) {
            if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start > SAMPLE_MAX_VALUES)
                return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: values must be a list of at most %s numbers", "16");
            t->nvalues = 0;
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                if ((rc = parse_value(l, yaml_document_get_node(l->doc, *it), &t->values[t->nvalues++]))) return rc;
        } else {
            return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: unknown tensor key '%s'", k);
        }
    }
    if (!have_shape) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: tensor without a shape%s", "");
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    if (t->nvalues >= 0 && numel != t->nvalues)
        return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: values: %s, not as many as the shape holds",
                            t->nvalues < numel ? "too few" : "too many");
    return OPR_OK;
}

static int parse_scalar(const loader *l, const op_arg *a, const yaml_node_t *n, mval *out)
{
    const char *s = yaml_scalar(n);
    if (a->type == ARG_INT_LIST && !(a->optional && s && !strcmp(s, "None"))) {
        sample_tensor t;
        int rc = parse_ints(l, n, &t, true);
        if (rc) return rc;
        out->k = MV_LIST;
        out->n = t.ndim;
        memcpy(out->u.l, t.shape, sizeof t.shape);
        return OPR_OK;
    }
    if (a->type == ARG_FLOAT_LIST && !(a->optional && s && !strcmp(s, "None"))) { /* scale_factors: [1.7, 2] */
        if (n->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: '%s' must be a list", a->name);
        out->k = MV_FLIST;
        out->n = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            const yaml_node_t *item = yaml_document_get_node(l->doc, *it);
            if (out->n == OPR_MAX_DIMS) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: '%s' has too many items", a->name);
            int rc = parse_value(l, item, &out->u.fl[out->n]);
            if (rc) return rc;
            out->n++;
        }
        return OPR_OK;
    }
    if (!s) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: '%s' needs a plain value", a->name);
    if (!strcmp(s, "None")) { out->k = MV_NONE; return OPR_OK; }
    char *end;
    switch (a->type) {
    case ARG_INT: out->k = MV_INT; out->u.i = strtoll(s, &end, 10); break;
    case ARG_FLOAT: out->k = MV_FLOAT; out->u.d = strtod(s, &end); break;
    case ARG_SCALAR: /* an int literal stays an int, as a caller's number would */
        out->k = MV_INT;
        out->u.i = strtoll(s, &end, 10);
        if (*end) { out->k = MV_FLOAT; out->u.d = strtod(s, &end); }
        break;
    case ARG_BOOL:
        out->k = MV_BOOL;
        out->u.b = !strcmp(s, "True") || !strcmp(s, "true");
        end = (char *)s + (out->u.b || !strcmp(s, "False") || !strcmp(s, "false") ? strlen(s) : 0);
        break;
    case ARG_STR: /* owned by the sample (sample_free) */
        if (!(out->u.s = strdup(s))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
        out->k = MV_STR;
        end = (char *)s + strlen(s);
        break;
    default: out->k = MV_NONE; end = (char *)s + strlen(s); break;
    }
    return *end ? yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: bad value '%s'", s) : OPR_OK;
}

static void sample_free(op_sample *s)
{
    for (int i = 0; i < OPR_MAX_ARGS; i++) {
        free(s->args[i].tensors);
        if (s->args[i].value.k == MV_STR) free((char *)s->args[i].value.u.s);
    }
}

void samples_free(opr_op *op)
{
    for (int i = 0; i < op->nsamples; i++) sample_free(&op->samples[i]);
    free(op->samples);
    op->samples = NULL;
    op->nsamples = 0;
}

static int parse_one(const loader *l, const opr_op *op, const yaml_node_t *n, op_sample *s)
{
    if (n->type != YAML_MAPPING_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples: each sample is a mapping%s", "");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(l->doc, p->key), *v = yaml_document_get_node(l->doc, p->value);
        const char *k = yaml_scalar(kn);
        int rc = yaml_check_key(l, n, p); /* a second value for an argument would leak the first */
        if (rc) return rc;
        int a = -1;
        for (int i = 0; k && i < op->nargs; i++) if (!strcmp(op->args[i].name, k)) a = i;
        if (a < 0) return yaml_fail_at(l, kn, OPR_ERR_PARSE, "samples: no argument named '%s'", k ? k : "?");
        sample_arg *sa = &s->args[a];
        sa->given = true;
        const char *none = yaml_scalar(v);
        if (op->args[a].type == ARG_TENSOR && none && !strcmp(none, "None")) { /* ntensors 0: a None argument */
            if (!op->args[a].optional) return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: '%s' is not optional", k);
            sa->value.k = MV_NONE;
        } else if (op->args[a].type == ARG_TENSOR) {
            sa->ntensors = 1;
            if (!(sa->tensors = malloc(sizeof *sa->tensors))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
            rc = parse_tensor(l, v, sa->tensors);
        } else if (op->args[a].type == ARG_TENSOR_LIST) {
            if (v->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: '%s' is a list of tensors", k);
            int cnt = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
            /* opr_op_sample_args makes at most that many: longer lists could never run */
            if (cnt > OPR_SAMPLE_MAX_TENSORS)
                return yaml_fail_at(l, v, OPR_ERR_PARSE, "samples: '%s' has more tensors than a sample may make", k);
            if (!(sa->tensors = calloc((size_t)(cnt ? cnt : 1), sizeof *sa->tensors))) return opr_fail(OPR_ERR_NOMEM, "out of memory");
            for (int i = 0; i < cnt && !rc; i++) {
                yaml_node_t *item = yaml_document_get_node(l->doc, v->data.sequence.items.start[i]);
                const char *word = yaml_scalar(item);
                if (op->args[a].none_items && word && !strcmp(word, "None")) /* a None item: ndim -1 */
                    sa->tensors[i] = (sample_tensor){.ndim = -1, .dtype = -1, .nvalues = -1};
                else
                    rc = parse_tensor(l, item, &sa->tensors[i]);
            }
            sa->ntensors = cnt;
        } else {
            rc = parse_scalar(l, &op->args[a], v, &sa->value);
        }
        if (rc) return rc;
    }
    return OPR_OK;
}

int samples_parse(const loader *l, opr_op *op, const yaml_node_t *n)
{
    if (n->type != YAML_SEQUENCE_NODE) return yaml_fail_at(l, n, OPR_ERR_PARSE, "samples must be a list%s", "");
    int cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    op->samples = calloc((size_t)(cnt ? cnt : 1), sizeof *op->samples);
    if (!op->samples) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < cnt; i++) {
        op->nsamples = i + 1;
        int rc = parse_one(l, op, yaml_document_get_node(l->doc, n->data.sequence.items.start[i]), &op->samples[i]);
        if (rc) return rc;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ making inputs */

static double next_uniform(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (double)(*state >> 11) / 9007199254740992.0;
}

static opr_tensor *make_tensor(opr_ctx *ctx, const sample_tensor *given, opr_dtype dt, opr_device dev, uint64_t *rng,
                               const sample_tweak *tw, int k)
{
    sample_tensor tweaked;
    const sample_tensor *st = given;
    if (tw && tw->reshape) {
        tweaked = *given;
        tw->reshape(tw, k, &tweaked);
        st = &tweaked;
    }
    int64_t n;
    if (opr_shape_check(st->shape, st->ndim, &n, "samples")) return NULL; /* checked when parsed, too */
    if (st->nvalues >= 0 && n != st->nvalues) { /* a tweak must keep a `values:` tensor's shape */
        opr_fail(OPR_ERR_INVALID, "samples: %lld elements for %d values", (long long)n, st->nvalues);
        return NULL;
    }
    size_t es = opr_dtype_size(dt);
    unsigned char *buf = malloc((size_t)(n ? n : 1) * es);
    if (!buf) { opr_fail(OPR_ERR_NOMEM, "out of memory"); return NULL; }
    for (int64_t i = 0; i < n; i++) {
        double v = st->nvalues >= 0 ? st->values[i] : st->lo + (st->hi - st->lo) * next_uniform(rng);
        if (dt == OPR_I64 && !(fabs(v) <= 0x1p53)) {
            free(buf);
            opr_fail(OPR_ERR_INVALID, "samples: %g in an i64 tensor (integers within +-2^53)", v);
            return NULL;
        }
        if (dt == OPR_I32 && !(floor(v) >= -0x1p31 && floor(v) < 0x1p31)) {
            free(buf);
            opr_fail(OPR_ERR_INVALID, "samples: %g in an i32 tensor (integers within [-2^31, 2^31))", v);
            return NULL;
        }
        switch (dt) {
        case OPR_F32: ((float *)buf)[i] = (float)v; break;
        case OPR_F64: ((double *)buf)[i] = v; break;
        case OPR_I64: ((int64_t *)buf)[i] = (int64_t)floor(v); break; /* integers in [lo, hi), or as given */
        case OPR_BOOL: buf[i] = st->nvalues >= 0 ? v != 0 : v >= (st->lo + st->hi) / 2; break;
        case OPR_F16: ((uint16_t *)buf)[i] = opr_f16_from_float((float)v); break;
        case OPR_BF16: ((uint16_t *)buf)[i] = opr_bf16_from_float((float)v); break;
        case OPR_I32: ((int32_t *)buf)[i] = (int32_t)floor(v); break;
        default: free(buf); opr_fail(OPR_ERR_UNSUPPORTED, "samples: dtype %s not supported", opr_dtype_name(dt)); return NULL;
        }
    }
    opr_tensor *t = tw && tw->make ? tw->make(tw, k, ctx, dt, st, buf, dev)
                                   : opr_tensor_from_data(ctx, dt, st->ndim, st->shape, buf, dev);
    free(buf);
    return t;
}

int opr_op_sample_count(const opr_op *op) { return op ? op->nsamples : 0; }

opr_status opr_op_sample_args(const opr_op *op, int i, opr_dtype dtype, opr_device dev, uint64_t seed, opr_value *args,
                       int *nargs, opr_tensor **owned, int *nowned)
{
    if (!op || !args || !nargs || !owned || !nowned || i < 0 || i >= op->nsamples)
        return opr_fail(OPR_ERR_INVALID, "opr_op_sample_args: bad arguments or sample index %d", i);
    return samples_build(op, i, NULL, dtype, dev, seed, args, nargs, owned, nowned);
}

int samples_build(const opr_op *op, int i, const sample_tweak *tw, opr_dtype dtype, opr_device dev, uint64_t seed,
                  opr_value *args, int *nargs, opr_tensor **owned, int *nowned)
{
    const op_sample *s = &op->samples[i];
    opr_ctx *ctx = op->ctx;
    uint64_t rng = seed * 2654435761u + 88172645463325252ull;
    *nowned = 0;
    *nargs = 0;
    int last = -1;
    for (int a = 0; a < op->nargs; a++)
        if (s->args[a].given || (op->args[a].type == ARG_STR && (a == op->dtype_arg || a == op->device_arg))) last = a;
    for (int a = 0; a <= last; a++) {
        const op_arg *oa = &op->args[a];
        const sample_arg *sa = &s->args[a];
        if (oa->type == ARG_STR && a == op->dtype_arg) { args[a] = opr_v_string(opr_dtype_name(dtype)); continue; }
        if (oa->type == ARG_STR && a == op->device_arg) { args[a] = opr_v_string(ctx->devices[dev.type].name); continue; }
        if (!sa->given) {
            if (!oa->has_default) return opr_fail(OPR_ERR_INVALID, "%s: sample %d lacks '%s'", op->name, i, oa->name);
            mval m;
            mval_of_kernel_arg(&oa->def, &m);
            args[a] = m.k == MV_INT ? opr_v_int(m.u.i) : m.k == MV_FLOAT ? opr_v_double(m.u.d) : m.k == MV_BOOL
                      ? opr_v_bool(m.u.b) : oa->def.kind == OPR_ARG_INT_LIST ? opr_v_ints(oa->def.u.il.items, oa->def.u.il.n)
                      : oa->def.kind == OPR_ARG_STRING ? opr_v_string(oa->def.u.s) : op_arg_default(oa);
            continue;
        }
        if (oa->type == ARG_TENSOR && sa->ntensors == 0) { args[a] = opr_v_none(); continue; }
        if (oa->type == ARG_TENSOR || oa->type == ARG_TENSOR_LIST) {
            opr_tensor **dst = owned + *nowned;
            if (*nowned + sa->ntensors > OPR_SAMPLE_MAX_TENSORS)
                return opr_fail(OPR_ERR_UNSUPPORTED, "%s: sample %d has too many tensors", op->name, i);
            for (int k = 0; k < sa->ntensors; k++) {
                const sample_tensor *st = &sa->tensors[k];
                if (st->ndim < 0) { /* None in a Tensor?[] */
                    owned[(*nowned)++] = NULL;
                    continue;
                }
                /* a Tensor?[] holds indices: i64 unless the sample says bool */
                opr_dtype dt = st->dtype >= 0 ? (opr_dtype)st->dtype : oa->fixed_dtype >= 0 ? (opr_dtype)oa->fixed_dtype
                               : oa->none_items ? OPR_I64 : dtype;
                opr_tensor *t = make_tensor(ctx, st, dt, dev, &rng, tw, *nowned);
                if (!t) return opr_error_status();
                owned[(*nowned)++] = t;
            }
            if (oa->type == ARG_TENSOR) args[a] = opr_v_tensor(dst[0]);
            else args[a] = opr_v_tensors(dst, sa->ntensors); /* a run of `owned` */
            continue;
        }
        const mval *m = &sa->value;
        switch (m->k) {
        case MV_INT: args[a] = opr_v_int(m->u.i); break;
        case MV_FLOAT: args[a] = opr_v_double(m->u.d); break;
        case MV_BOOL: args[a] = opr_v_bool(m->u.b); break;
        case MV_LIST: args[a] = opr_v_ints(m->u.l, m->n); break;
        case MV_STR: args[a] = opr_v_string(m->u.s); break;
        case MV_FLIST: args[a] = opr_v_doubles(m->u.fl, m->n); break;
        default: args[a] = opr_v_none(); break;
        }
    }
    *nargs = last + 1;
    return OPR_OK;
}
