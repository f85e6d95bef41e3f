/*
 * opreg plugin utilities: the helpers nearly every kernel needs and that a plugin cannot
 * take from libopreg, which it never links (rule 2 of docs/plugin-abi.md).
 *
 *   - element size and name of each opr_dtype (opr_dtype_size / opr_dtype_name are
 *     library functions);
 *   - f16 and bf16 from and to float, rounding to nearest even;
 *   - loading and storing one element of any dtype as a double;
 *   - an n-d index walk that keeps the element offsets of several strided views in step;
 *   - the strides of an input seen in the output's (broadcast) shape;
 *   - contiguity tests.
 *
 * Header-only: every function is static inline and nothing here refers to a symbol of
 * libopreg, so a plugin that includes it still links nothing of opreg. It compiles as
 * C11 and as C++17 (g++, and nvcc or hipcc for host code), warning-free with -Wall
 * -Wextra. Everything is named opu_ ("opreg plugin utilities"). The CPU plugin uses
 * these same functions, so they behave exactly as opreg's own kernels do.
 */
#ifndef OPREG_PLUGIN_UTIL_H
#define OPREG_PLUGIN_UTIL_H

#include "plugin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The two tables below must name every dtype; a new one fails the build here rather
 * than reading as size 0 in every plugin. */
#ifdef __cplusplus
static_assert(OPR_DTYPE_COUNT == 7, "plugin_util.h: give the new opr_dtype a size and a name");
#else
_Static_assert(OPR_DTYPE_COUNT == 7, "plugin_util.h: give the new opr_dtype a size and a name");
#endif

/* ------------------------------------------------------------------ dtypes */

/* Bytes of one element of dtype t, as opr_dtype_size gives them (0 for a value outside
 * the enum): what a kernel steps its byte pointers by, and what an allocator of a
 * dtype-generic copy multiplies numel by. */
static inline size_t opu_dtype_size(opr_dtype t)
{
    switch (t) {
    case OPR_F32: return 4;
    case OPR_F64: return 8;
    case OPR_I64: return 8;
    case OPR_BOOL: return 1;
    case OPR_F16: return 2;
    case OPR_BF16: return 2;
    case OPR_I32: return 4;
    default: return 0;
    }
}

/* The short name of dtype t as opr_dtype_name gives it and the YAML spells it ("f32",
 * "f64", "i64", "bool", "f16", "bf16", "i32"; "?" outside the enum), for error messages that
 * read like the host's. */
static inline const char *opu_dtype_name(opr_dtype t)
{
    switch (t) {
    case OPR_F32: return "f32";
    case OPR_F64: return "f64";
    case OPR_I64: return "i64";
    case OPR_BOOL: return "bool";
    case OPR_F16: return "f16";
    case OPR_BF16: return "bf16";
    case OPR_I32: return "i32";
    default: return "?";
    }
}

/* ------------------------------------------------------------------ f16, bf16 */

/* f16 and bf16 elements are their bit patterns in a uint16_t (what view.data holds).
 * The conversions are plain integer code, so that every compiler builds them for every
 * target (clang 14 has no _Float16 on x86-64); memcpy is the type pun C and C++ both
 * define. */

/* The float whose bits are u. */
static inline float opu_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The bits of float f. */
static inline uint32_t opu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE binary16 h as a float: exact (every f16 is a float), infinities stay infinite,
 * a NaN stays a NaN with its payload. */
static inline float opu_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return opu_f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp) return opu_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    /* zero and subnormals: man * 2^-24, exact in float */
    const float mag = (float)man * opu_f32_from_bits(0x33800000u);
    return sign ? -mag : mag;
}

/* Float f rounded to the nearest binary16, ties to even (subnormals included), as a
 * GPU's conversion does: values from 65520 up become infinity, a NaN a quiet NaN
 * keeping the top bits of its payload, the sign always kept (-0 stays -0). */
static inline uint16_t opu_f32_to_f16(float f)
{
    const uint32_t u = opu_f32_bits(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x1ffu)); /* quiet NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) { /* below 2^-14: a subnormal or zero, in units of 2^-24 */
        if (abs < 0x33000000u) return (uint16_t)sign; /* below half the smallest: 0 */
        const uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint32_t v = m >> shift;
        const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (v & 1u))) v++;
        return (uint16_t)(sign | v);
    }
    /* normal: drop 13 mantissa bits with nearest even; a carry into the exponent is right */
    const uint32_t v = abs - 0x38000000u;
    return (uint16_t)(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
}

/* bfloat16 b as a float: exact, since a bf16 is the top half of a float's bits. */
static inline float opu_bf16_to_f32(uint16_t b) { return opu_f32_from_bits((uint32_t)b << 16); }

/* Float f rounded to the nearest bfloat16, ties to even; infinities stay infinite
 * (values that round past the largest bf16 become infinity), a NaN a quiet NaN. */
static inline uint16_t opu_f32_to_bf16(float f)
{
    const uint32_t u = opu_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  /* nearest even */
}

/* ------------------------------------------------------------------ elements as double */

/* Element `off` (in elements) of data, of dtype dt, as a double: one loop serves every
 * dtype where speed does not matter (a reference kernel, a check). i64 values beyond
 * 2^53 lose bits; a value outside the enum reads 0. */
static inline double opu_load_f64(const void *data, opr_dtype dt, int64_t off)
{
    switch (dt) {
    case OPR_F32: return ((const float *)data)[off];
    case OPR_F64: return ((const double *)data)[off];
    case OPR_I64: return (double)((const int64_t *)data)[off];
    case OPR_BOOL: return ((const unsigned char *)data)[off] != 0;
    case OPR_F16: return opu_f16_to_f32(((const uint16_t *)data)[off]);
    case OPR_BF16: return opu_bf16_to_f32(((const uint16_t *)data)[off]);
    case OPR_I32: return ((const int32_t *)data)[off];
    default: return 0;
    }
}

/* Stores v into element `off` of data, of dtype dt: f32, f16 and bf16 round to nearest,
 * i64 and i32 truncate toward zero (v must fit in the type, as C's conversion requires), bool stores
 * v != 0. */
static inline void opu_store_f64(void *data, opr_dtype dt, int64_t off, double v)
{
    switch (dt) {
    case OPR_F32: ((float *)data)[off] = (float)v; break;
    case OPR_F64: ((double *)data)[off] = v; break;
    case OPR_I64: ((int64_t *)data)[off] = (int64_t)v; break;
    case OPR_BOOL: ((unsigned char *)data)[off] = v != 0; break;
    case OPR_F16: ((uint16_t *)data)[off] = opu_f32_to_f16((float)v); break;
    case OPR_BF16: ((uint16_t *)data)[off] = opu_f32_to_bf16((float)v); break;
    case OPR_I32: ((int32_t *)data)[off] = (int32_t)v; break;
    default: break;
    }
}

/* ------------------------------------------------------------------ shapes and strides */

/* Row-major (contiguous) strides of shape, in elements, into strides (ndim entries):
 * the layout the host gives every output it allocates. */
static inline void opu_contiguous_strides(int32_t ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

/* Whether a tensor of this shape and these strides lies in row-major order without
 * gaps, by the host's rule (opr_tensor_is_contiguous, as in PyTorch): the stride of a
 * size-1 dim does not matter, and a tensor without elements is contiguous. A kernel
 * may then treat the data as a flat array of numel elements. */
static inline bool opu_strides_contiguous(int32_t ndim, const int64_t *shape, const int64_t *strides)
{
    for (int32_t d = 0; d < ndim; d++)
        if (shape[d] == 0) return true;
    int64_t expect = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != expect) return false;
        expect *= shape[d];
    }
    return true;
}

/* opu_strides_contiguous of view v. */
static inline bool opu_is_contiguous(const opr_tensor_view *v)
{
    return opu_strides_contiguous(v->ndim, v->shape, v->strides);
}

/* Whether v's elements fill exactly numel consecutive slots, in some order of its dims
 * ("dense but permuted": a transpose or a permute of a contiguous tensor; contiguous
 * ones are dense too). No element is stored twice (no stride-0 dim of size > 1) and
 * none is skipped, so an elementwise op over operands that are all dense with the same
 * strides can run as one flat loop. Sorts the dims of size > 1 by stride: at most
 * OPR_MAX_DIMS of them. */
static inline bool opu_is_dense(const opr_tensor_view *v)
{
    int64_t st[OPR_MAX_DIMS], sz[OPR_MAX_DIMS];
    int32_t n = 0;
    if (v->ndim > OPR_MAX_DIMS) return false;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 0) return true; /* no elements */
        if (v->shape[d] == 1) continue;
        if (v->strides[d] <= 0) return false;
        int32_t k = n++; /* insertion sort, ascending stride */
        for (; k > 0 && st[k - 1] > v->strides[d]; k--) {
            st[k] = st[k - 1];
            sz[k] = sz[k - 1];
        }
        st[k] = v->strides[d];
        sz[k] = v->shape[d];
    }
    int64_t expect = 1;
    for (int32_t k = 0; k < n; k++) {
        if (st[k] != expect) return false;
        expect *= sz[k];
    }
    return true;
}

/* Strides that read view v as if expanded to the output's shape (out_ndim dims,
 * out_shape), into strides (out_ndim entries): right-aligned as PyTorch broadcasts, 0
 * on the leading dims v lacks and on its size-1 dims, v's own stride elsewhere. An
 * elementwise kernel gets its inputs in their own shapes and broadcasts them itself;
 * with these strides every operand is walked over the output's index space.
 * Returns false when v does not broadcast to out_shape. */
static inline bool opu_broadcast_strides(const opr_tensor_view *v, int32_t out_ndim, const int64_t *out_shape,
                                         int64_t *strides)
{
    const int32_t off = out_ndim - v->ndim;
    if (off < 0) return false;
    for (int32_t d = 0; d < out_ndim; d++) {
        if (d < off) {
            strides[d] = 0;
            continue;
        }
        const int64_t s = v->shape[d - off];
        if (s == out_shape[d]) strides[d] = s == 1 ? 0 : v->strides[d - off];
        else if (s == 1) strides[d] = 0;
        else return false;
    }
    return true;
}

/* ------------------------------------------------------------------ the index walk */

/* Operands one opu_iter keeps in step (an output and up to three inputs). */
#define OPU_ITER_MAX_OPS 4

/* A walk over the row-major index space of `shape` that keeps, for each of nops
 * operands, the element offset of the current index under that operand's strides: a
 * strided, broadcast loop without a multiply per dim per element. Fill it with
 * opu_iter_init (an output and its inputs), or set ndim, nops, shape and strides
 * yourself and call opu_iter_seek. */
typedef struct opu_iter {
    int32_t ndim;                                    /* dims of the index space */
    int32_t nops;                                    /* operands, at most OPU_ITER_MAX_OPS */
    const int64_t *shape;                            /* ndim sizes (not copied) */
    int64_t idx[OPR_MAX_DIMS];                       /* the current index */
    int64_t strides[OPU_ITER_MAX_OPS][OPR_MAX_DIMS]; /* per operand, in elements; 0: broadcast */
    int64_t off[OPU_ITER_MAX_OPS];                   /* per operand: offset of idx, in elements */
} opu_iter;

/* Positions the walk at row-major linear index `start` of its shape, with every
 * operand's offset: parallel chunks of one loop can each start where they begin. */
static inline void opu_iter_seek(opu_iter *it, int64_t start)
{
    for (int32_t k = 0; k < it->nops; k++) it->off[k] = 0;
    for (int32_t d = it->ndim - 1; d >= 0; d--) {
        const int64_t n = it->shape[d];
        it->idx[d] = n ? start % n : 0;
        start = n ? start / n : 0;
        for (int32_t k = 0; k < it->nops; k++) it->off[k] += it->idx[d] * it->strides[k][d];
    }
}

/* Steps to the next index in row-major order (the last dim fastest), updating every
 * offset by additions only. Past the last index it wraps around to index 0. */
static inline void opu_iter_next(opu_iter *it)
{
    for (int32_t d = it->ndim - 1; d >= 0; d--) {
        if (++it->idx[d] < it->shape[d]) {
            for (int32_t k = 0; k < it->nops; k++) it->off[k] += it->strides[k][d];
            return;
        }
        for (int32_t k = 0; k < it->nops; k++) it->off[k] -= (it->shape[d] - 1) * it->strides[k][d];
        it->idx[d] = 0;
    }
}

/* Sets up a walk over out's shape with operand 0 = out (its own strides) and operands
 * 1..nin = in[0..nin) broadcast to out's shape (opu_broadcast_strides), positioned at
 * index 0. The loop of an elementwise kernel is then
 *     for (int64_t i = 0; i < out->numel; i++, opu_iter_next(&it))
 *         o[it.off[0]] = f(a[it.off[1]], b[it.off[2]]);
 * Returns false when nin + 1 exceeds OPU_ITER_MAX_OPS, out has more than OPR_MAX_DIMS
 * dims or an input does not broadcast to out's shape. */
static inline bool opu_iter_init(opu_iter *it, const opr_tensor_view *out, int32_t nin,
                                 const opr_tensor_view *const *in)
{
    memset(it, 0, sizeof *it);
    if (nin < 0 || nin + 1 > OPU_ITER_MAX_OPS || out->ndim < 0 || out->ndim > OPR_MAX_DIMS) return false;
    it->ndim = out->ndim;
    it->nops = nin + 1;
    it->shape = out->shape;
    for (int32_t d = 0; d < out->ndim; d++) it->strides[0][d] = out->strides[d];
    for (int32_t k = 0; k < nin; k++)
        if (!opu_broadcast_strides(in[k], out->ndim, out->shape, it->strides[k + 1])) return false;
    opu_iter_seek(it, 0);
    return true;
}

#endif /* OPREG_PLUGIN_UTIL_H */
