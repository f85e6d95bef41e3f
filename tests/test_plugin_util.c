/* <opreg/plugin_util.h>, the header-only helpers for plugin authors (which the CPU
 * plugin uses itself): dtype sizes and names and the f16 / bf16 conversions agree with
 * libopreg's opr_dtype_size, opr_dtype_name and opr_*_from_float / opr_*_to_float
 * (only NaN payloads may differ: the header keeps the top bits of one, as a GPU does),
 * ties round to even, the index walk keeps every operand's offset in step with the
 * index, broadcast strides and the contiguity tests follow the host's rules. */
#include "test_util.h"

#include <opreg/plugin_util.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

static opr_tensor_view view(void *data, opr_dtype dt, int32_t ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t numel = 1;
    for (int32_t d = 0; d < ndim; d++) numel *= shape[d];
    opr_tensor_view v = {.struct_size = sizeof v, .data = data, .dtype = dt, .ndim = ndim, .shape = shape,
                         .strides = strides, .device = OPR_CPU, .numel = numel};
    return v;
}

START_TEST(dtypes_match_the_library)
{
    for (int t = -1; t <= OPR_DTYPE_COUNT; t++) {
        ck_assert_uint_eq(opu_dtype_size((opr_dtype)t), opr_dtype_size((opr_dtype)t));
        ck_assert_str_eq(opu_dtype_name((opr_dtype)t), opr_dtype_name((opr_dtype)t));
    }
    ck_assert_uint_eq(opu_dtype_size(OPR_BF16), 2);
    ck_assert_str_eq(opu_dtype_name(OPR_BOOL), "bool");
}
END_TEST

/* Every f16 and bf16 widens exactly as the library's does (NaN payloads included). */
START_TEST(halves_widen_as_the_library_does)
{
    uint32_t bad = 0;
    for (uint32_t h = 0; h <= 0xffffu; h++)
        bad += opu_f32_bits(opu_f16_to_f32((uint16_t)h)) != opu_f32_bits(opr_f16_to_float((uint16_t)h)) ||
               opu_f32_bits(opu_bf16_to_f32((uint16_t)h)) != opu_f32_bits(opr_bf16_to_float((uint16_t)h));
    ck_assert_uint_eq(bad, 0);
}
END_TEST

/* Floats across the whole bit range (a stride through all 2^32 patterns, both signs,
 * subnormals, the overflow boundary) round as the library rounds them. */
START_TEST(floats_round_as_the_library_does)
{
    /* plain comparisons in the loop (a ck_assert each would cost more than the rest),
     * the first difference named */
    uint64_t bad = 0, first = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 97) {
        const float f = opu_f32_from_bits((uint32_t)u);
        bool ok = opu_f32_to_bf16(f) == opr_bf16_from_float(f);
        if (isnan(f)) {
            const uint16_t h = opu_f32_to_f16(f);
            ok = ok && (h & 0x7e00u) == 0x7e00u && (h & 0x8000u) == ((u >> 16) & 0x8000u); /* quiet, signed */
        } else {
            ok = ok && opu_f32_to_f16(f) == opr_f16_from_float(f);
        }
        if (!ok && !bad++) first = u;
    }
    ck_assert_msg(bad == 0, "%llu float(s) round differently, the first 0x%08llx", (unsigned long long)bad,
                  (unsigned long long)first);
    ck_assert_uint_eq(opu_f32_to_f16(65504.0f), 0x7bffu);
    ck_assert_uint_eq(opu_f32_to_f16(65519.996f), 0x7bffu);
    ck_assert_uint_eq(opu_f32_to_f16(65520.0f), 0x7c00u); /* rounds past the largest: inf */
    ck_assert_uint_eq(opu_f32_to_f16(-INFINITY), 0xfc00u);
    ck_assert_uint_eq(opu_f32_to_f16(-0.0f), 0x8000u);
    ck_assert_uint_eq(opu_f32_to_f16(0x1p-25f), 0);      /* half the smallest subnormal: to even, 0 */
    ck_assert_uint_eq(opu_f32_to_f16(0x1.8p-24f), 2);    /* 1.5 units: to even, 2 */
    ck_assert_uint_eq(opu_f32_to_bf16(INFINITY), 0x7f80u);
    ck_assert(isnan(opu_bf16_to_f32(opu_f32_to_bf16(NAN))));
}
END_TEST

/* The float halfway between two neighbouring halves rounds to the even one. */
START_TEST(ties_round_to_even)
{
    uint32_t bad = 0;
    for (uint32_t h = 0; h < 0x7bffu; h++) {
        const float mid = (float)(((double)opu_f16_to_f32((uint16_t)h) + opu_f16_to_f32((uint16_t)(h + 1))) / 2);
        const uint32_t even = (h & 1u) ? h + 1 : h;
        bad += opu_f32_to_f16(mid) != even || opu_f32_to_f16(-mid) != (even | 0x8000u);
    }
    for (uint32_t b = 0; b < 0x7f7fu; b++) {
        const float mid = (float)(((double)opu_bf16_to_f32((uint16_t)b) + opu_bf16_to_f32((uint16_t)(b + 1))) / 2);
        bad += opu_f32_to_bf16(mid) != ((b & 1u) ? b + 1 : b);
    }
    ck_assert_uint_eq(bad, 0);
}
END_TEST

START_TEST(elements_load_and_store_as_double)
{
    unsigned char buf[8 * 3];
    for (int t = 0; t < OPR_DTYPE_COUNT; t++) {
        const opr_dtype dt = (opr_dtype)t;
        memset(buf, 0, sizeof buf);
        opu_store_f64(buf, dt, 1, dt == OPR_BOOL ? 1 : -3);
        ck_assert(opu_load_f64(buf, dt, 0) == 0);
        ck_assert(opu_load_f64(buf, dt, 1) == (dt == OPR_BOOL ? 1 : -3));
        ck_assert(opu_load_f64(buf, dt, 2) == 0);
    }
    float f[1];
    opu_store_f64(f, OPR_F32, 0, 0.1);
    ck_assert(f[0] == 0.1f);
    int64_t i[1];
    opu_store_f64(i, OPR_I64, 0, -2.75); /* truncates toward zero */
    ck_assert_int_eq(i[0], -2);
}
END_TEST

START_TEST(broadcast_strides_are_right_aligned)
{
    const int64_t out_shape[3] = {2, 3, 4};
    int64_t st[3];
    /* [3, 1] with strides [5, 7]: the leading dim missing, the last broadcast */
    const int64_t s1[2] = {3, 1}, t1[2] = {5, 7};
    opr_tensor_view a = view(NULL, OPR_F32, 2, s1, t1);
    ck_assert(opu_broadcast_strides(&a, 3, out_shape, st));
    ck_assert(st[0] == 0 && st[1] == 5 && st[2] == 0);
    /* a 0-d tensor broadcasts to anything */
    opr_tensor_view s = view(NULL, OPR_F32, 0, NULL, NULL);
    ck_assert(opu_broadcast_strides(&s, 3, out_shape, st));
    ck_assert(st[0] == 0 && st[1] == 0 && st[2] == 0);
    /* the same shape keeps its strides */
    const int64_t t3[3] = {1, 2, 6};
    opr_tensor_view same = view(NULL, OPR_F32, 3, out_shape, t3);
    ck_assert(opu_broadcast_strides(&same, 3, out_shape, st));
    ck_assert(st[0] == 1 && st[1] == 2 && st[2] == 6);
    /* [3] does not broadcast to [.., 4]; nor does a tensor with more dims */
    const int64_t s2[1] = {3}, t2[1] = {1};
    opr_tensor_view b = view(NULL, OPR_F32, 1, s2, t2);
    ck_assert(!opu_broadcast_strides(&b, 3, out_shape, st));
    ck_assert(!opu_broadcast_strides(&same, 2, out_shape + 1, st));
}
END_TEST

/* Offset of index idx (out's shape) in v broadcast to it, computed directly. */
static int64_t direct_offset(const opr_tensor_view *v, int32_t ndim, const int64_t *idx)
{
    int64_t off = 0;
    for (int32_t d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1) off += idx[ndim - v->ndim + d] * v->strides[d];
    return off;
}

START_TEST(iter_keeps_offsets_in_step)
{
    const int64_t shape[3] = {2, 3, 4}, out_st[3] = {12, 4, 1};
    const int64_t a_st[3] = {1, 2, 6};            /* permuted */
    const int64_t b_shape[2] = {3, 1}, b_st[2] = {10, 3};
    const int64_t c_shape[1] = {4}, c_st[1] = {0}; /* expanded */
    opr_tensor_view out = view(NULL, OPR_F64, 3, shape, out_st), a = view(NULL, OPR_F64, 3, shape, a_st),
                    b = view(NULL, OPR_F64, 2, b_shape, b_st), c = view(NULL, OPR_F64, 1, c_shape, c_st);
    const opr_tensor_view *in[3] = {&a, &b, &c};
    opu_iter it, at;
    ck_assert(opu_iter_init(&it, &out, 3, in));
    ck_assert_int_eq(it.nops, 4);
    int64_t idx[3] = {0, 0, 0};
    for (int64_t i = 0; i < out.numel; i++, opu_iter_next(&it)) {
        ck_assert(!memcmp(it.idx, idx, sizeof idx));
        ck_assert_int_eq(it.off[0], direct_offset(&out, 3, idx));
        for (int k = 0; k < 3; k++) ck_assert_int_eq(it.off[k + 1], direct_offset(in[k], 3, idx));
        at = it;
        opu_iter_seek(&at, i); /* seeking lands where stepping got */
        ck_assert(!memcmp(at.off, it.off, sizeof it.off) && !memcmp(at.idx, it.idx, sizeof it.idx));
        for (int d = 2; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
    for (int k = 0; k < 4; k++) ck_assert_int_eq(it.off[k], 0); /* past the end: back at 0 */

    /* a 0-d output: one element, every offset 0 */
    opr_tensor_view scalar = view(NULL, OPR_F64, 0, NULL, NULL);
    const opr_tensor_view *one[1] = {&scalar};
    ck_assert(opu_iter_init(&it, &scalar, 1, one));
    ck_assert(it.off[0] == 0 && it.off[1] == 0);
    opu_iter_next(&it);
    ck_assert(it.off[0] == 0 && it.off[1] == 0);

    /* refused: an input that does not broadcast, more operands than OPU_ITER_MAX_OPS */
    const int64_t bad_shape[1] = {5}, bad_st[1] = {1};
    opr_tensor_view bad = view(NULL, OPR_F64, 1, bad_shape, bad_st);
    const opr_tensor_view *bad_in[1] = {&bad}, *many[4] = {&a, &a, &a, &a};
    ck_assert(!opu_iter_init(&it, &out, 1, bad_in));
    ck_assert(!opu_iter_init(&it, &out, 4, many));
}
END_TEST

START_TEST(contiguity_follows_the_host)
{
    int64_t st[3];
    const int64_t shape[3] = {2, 3, 4};
    opu_contiguous_strides(3, shape, st);
    ck_assert(st[0] == 12 && st[1] == 4 && st[2] == 1);
    opr_tensor_view v = view(NULL, OPR_F32, 3, shape, st);
    ck_assert(opu_is_contiguous(&v) && opu_is_dense(&v));

    const int64_t s23[2] = {2, 3}, t[2] = {1, 2}; /* a transposed [3, 2] */
    v = view(NULL, OPR_F32, 2, s23, t);
    ck_assert(!opu_is_contiguous(&v) && opu_is_dense(&v));
    const int64_t perm[3] = {1, 8, 2}; /* a permuted [2, 4, 3] -> [2, 3, 4] */
    v = view(NULL, OPR_F32, 3, shape, perm);
    ck_assert(!opu_is_contiguous(&v) && opu_is_dense(&v));
    const int64_t step2[2] = {6, 2}; /* every second element */
    v = view(NULL, OPR_F32, 2, s23, step2);
    ck_assert(!opu_is_contiguous(&v) && !opu_is_dense(&v));
    const int64_t expanded[2] = {0, 1};
    v = view(NULL, OPR_F32, 2, s23, expanded);
    ck_assert(!opu_is_contiguous(&v) && !opu_is_dense(&v));
    const int64_t s13[2] = {1, 3}, odd[2] = {99, 1}; /* a size-1 dim's stride does not matter */
    v = view(NULL, OPR_F32, 2, s13, odd);
    ck_assert(opu_is_contiguous(&v) && opu_is_dense(&v));
    const int64_t s03[2] = {0, 3}, any[2] = {1, 5}; /* no elements: nothing out of order */
    v = view(NULL, OPR_F32, 2, s03, any);
    ck_assert(opu_is_contiguous(&v) && opu_is_dense(&v));
    v = view(NULL, OPR_F32, 0, NULL, NULL);
    ck_assert(opu_is_contiguous(&v) && opu_is_dense(&v));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plugin_util");
    TCase *tc = tcase_create("plugin_util");
    tcase_add_test(tc, dtypes_match_the_library);
    tcase_add_test(tc, halves_widen_as_the_library_does);
    tcase_add_test(tc, floats_round_as_the_library_does);
    tcase_add_test(tc, ties_round_to_even);
    tcase_add_test(tc, elements_load_and_store_as_double);
    tcase_add_test(tc, broadcast_strides_are_right_aligned);
    tcase_add_test(tc, iter_keeps_offsets_in_step);
    tcase_add_test(tc, contiguity_follows_the_host);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
