/* The safetensors container of a captured program: header length, JSON header, tensor
 * entries and their bytes. Everything is checked before a byte of data is read, since
 * the file is untrusted (docs/program-format.md, "What a reader must refuse"). */
#include "program_internal.h"

#include "../core/core.h"

#include <stdlib.h>
#include <string.h>

/* Above this, a header is refused rather than parsed: no real program needs it, and
 * a hostile length must not make us allocate or scan gigabytes. */
#define MAX_HEADER_BYTES (100u << 20)

static const struct { const char *name; opr_dtype dt; } st_dtypes[] = {
    {"F32", OPR_F32}, {"F64", OPR_F64}, {"I64", OPR_I64}, {"BOOL", OPR_BOOL}, {"I32", OPR_I32},
};

int prog_stored_find(const opr_program *p, const char *name)
{
    for (int i = 0; i < p->nstored; i++)
        if (!strcmp(p->stored[i].name, name)) return i;
    return -1;
}

/* Checks one header entry and fills *s (its name is set by the caller). */
static opr_status read_entry(const char *name, json_t *e, uint64_t data_len, prog_stored *s)
{
    if (!json_is_object(e)) return opr_fail(OPR_ERR_PARSE, "tensor '%s': its header entry is not an object", name);
    json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
           *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': needs dtype (a string), shape and data_offsets (arrays)", name);
    size_t k = 0;
    while (k < sizeof st_dtypes / sizeof st_dtypes[0] && strcmp(st_dtypes[k].name, json_string_value(dt))) k++;
    if (k == sizeof st_dtypes / sizeof st_dtypes[0])
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': dtype '%s' is not one of F32, F64, I64, BOOL", name,
                        json_string_value(dt));
    s->dtype = st_dtypes[k].dt;
    if (json_array_size(shape) > OPR_MAX_DIMS)
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': %zu dims (at most %d)", name, json_array_size(shape), OPR_MAX_DIMS);
    s->ndim = (int)json_array_size(shape);
    /* numel * element size, refusing overflow past 2^62 bytes */
    uint64_t bytes = opr_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return opr_fail(OPR_ERR_PARSE, "tensor '%s': size %d is not an integer >= 0", name, d);
        s->shape[d] = json_integer_value(v);
        if (s->shape[d] && bytes > (UINT64_C(1) << 62) / (uint64_t)s->shape[d])
            return opr_fail(OPR_ERR_PARSE, "tensor '%s': its size in bytes overflows", name);
        bytes *= (uint64_t)s->shape[d];
    }
    json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
    if (json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': data_offsets must be two integers 0 <= begin <= end", name);
    s->begin = (uint64_t)json_integer_value(b);
    s->end = (uint64_t)json_integer_value(en);
    if (s->end > data_len)
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': data_offsets [%llu, %llu] past the end of the data (%llu bytes)", name,
                        (unsigned long long)s->begin, (unsigned long long)s->end, (unsigned long long)data_len);
    if (s->end - s->begin != bytes)
        return opr_fail(OPR_ERR_PARSE, "tensor '%s': %llu bytes in the file, its shape and dtype need %llu", name,
                        (unsigned long long)(s->end - s->begin), (unsigned long long)bytes);
    return OPR_OK;
}

static int by_begin(const void *a, const void *b)
{
    const prog_stored *x = *(prog_stored *const *)a, *y = *(prog_stored *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Two tensors sharing bytes would let one write show through another (and is never
 * what a writer means): refused. */
static opr_status check_overlap(opr_program *p)
{
    if (p->nstored < 2) return OPR_OK;
    prog_stored **order = malloc((size_t)p->nstored * sizeof *order);
    if (!order) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    for (int i = 0; i < p->nstored; i++) order[i] = &p->stored[i];
    qsort(order, (size_t)p->nstored, sizeof *order, by_begin);
    opr_status st = OPR_OK;
    for (int i = 1; i < p->nstored && !st; i++)
        if (order[i]->begin < order[i - 1]->end)
            st = opr_fail(OPR_ERR_PARSE, "tensors '%s' and '%s' overlap in the file", order[i - 1]->name, order[i]->name);
    free(order);
    return st;
}

/* Makes the CPU tensor of s from its bytes (copied: the data may be misaligned). */
static opr_status make_tensor(opr_program *p, prog_stored *s, const uint8_t *data)
{
    size_t bytes = (size_t)(s->end - s->begin);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) return opr_fail(OPR_ERR_NOMEM, "tensor '%s': out of memory", s->name);
    memcpy(buf, data + s->begin, bytes);
    if (s->dtype == OPR_BOOL)
        for (size_t i = 0; i < bytes; i++)
            if (((uint8_t *)buf)[i] > 1) {
                const unsigned byte = ((uint8_t *)buf)[i];
                free(buf);
                return opr_fail(OPR_ERR_PARSE, "tensor '%s': bool byte %zu is %u (0 or 1 expected)", s->name, i, byte);
            }
    s->t = opr_tensor_from_data(p->ctx, s->dtype, s->ndim, s->shape, buf, OPR_CPU);
    free(buf);
    return s->t ? OPR_OK : opr_fail_wrap(opr_error_status(), "tensor '%s'", s->name);
}

opr_status prog_read_container(opr_program *p, const uint8_t *data, size_t n, char **json)
{
    *json = NULL;
    if (n < 8) return opr_fail(OPR_ERR_PARSE, "program: %zu bytes, shorter than the 8-byte header length", n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    if (hlen > n - 8)
        return opr_fail(OPR_ERR_PARSE, "program: header length %llu past the end of the file (%zu bytes)",
                        (unsigned long long)hlen, n);
    if (hlen > MAX_HEADER_BYTES)
        return opr_fail(OPR_ERR_PARSE, "program: header length %llu above the limit of %u", (unsigned long long)hlen,
                        MAX_HEADER_BYTES);
    json_error_t err;
    json_t *h = json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!h) return opr_fail(OPR_ERR_PARSE, "program header: line %d column %d: %s", err.line, err.column, err.text);
    opr_status st = OPR_OK;
    const uint64_t data_len = n - 8 - hlen;
    const uint8_t *body = data + 8 + hlen;
    if (!json_is_object(h)) {
        st = opr_fail(OPR_ERR_PARSE, "program header: not a JSON object");
        goto done;
    }
    p->stored = calloc(json_object_size(h) + 1, sizeof *p->stored);
    if (!p->stored) {
        st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(h, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                st = opr_fail(OPR_ERR_PARSE, "program header: __metadata__ is not an object");
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) if (!json_is_string(mv)) {
                st = opr_fail(OPR_ERR_PARSE, "program header: __metadata__ value '%s' is not a string", mk);
                goto done;
            }
            json_t *prog = json_object_get(val, "opreg.program");
            if (prog && !(*json = strdup(json_string_value(prog)))) {
                st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
                goto done;
            }
            continue;
        }
        prog_stored *s = &p->stored[p->nstored];
        if (!(s->name = strdup(key))) {
            st = opr_fail(OPR_ERR_NOMEM, "program: out of memory");
            goto done;
        }
        p->nstored++;
        if ((st = read_entry(key, val, data_len, s))) goto done;
    }
    if (!*json) {
        st = opr_fail(OPR_ERR_PARSE, "program header: no __metadata__ \"opreg.program\" (a plain safetensors file?)");
        goto done;
    }
    if ((st = check_overlap(p))) goto done;
    for (int i = 0; i < p->nstored && !st; i++) st = make_tensor(p, &p->stored[i], body);
done:
    json_decref(h);
    if (st) {
        free(*json);
        *json = NULL;
    }
    return st;
}
