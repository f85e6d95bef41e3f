/* Dtype conversion: to(self, dtype), self copied into the output's dtype (f32, f64,
 * i64, bool, f16, bf16, i32) one element per thread. Floats convert to i64 and i32 by
 * truncation toward zero, saturating outside the type's range and giving 0 for NaN, as
 * the hardware's conversion does (the CPU plugin refuses those values instead); i64 to
 * i32 keeps the low 32 bits, as the CPU plugin and PyTorch do; anything converts to
 * bool as "!= 0"; f16 and bf16 convert through float both ways (from f64 and i64 too,
 * as c10's Half and BFloat16 do). Validation follows plugins/cpu/cpu_convert.c.
 * gk_convert_strided (gpu_common.cuh) is the same copy for the other kernel families. */
#include "gpu_common.cuh"

#include <stdint.h>

namespace {

template <class D>
struct to_elem {
    template <class S>
    GK_DEV static D from(S v) { return (D)v; }
    GK_DEV static D from(gpu_f16 v) { return (D)gpu_f16_to_float(v); }
    GK_DEV static D from(gpu_bf16 v) { return (D)gpu_bf16_to_float(v); }
};
template <>
struct to_elem<int64_t> {
    GK_DEV static int64_t from(float v) { return from((double)v); }
    GK_DEV static int64_t from(double v)
    {
        if (v != v) return 0;
        if (v >= 9223372036854775807.0) return INT64_MAX;
        if (v <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)v;
    }
    GK_DEV static int64_t from(int64_t v) { return v; }
    GK_DEV static int64_t from(int32_t v) { return v; }
    GK_DEV static int64_t from(uint8_t v) { return v; }
    GK_DEV static int64_t from(gpu_f16 v) { return from((double)gpu_f16_to_float(v)); }
    GK_DEV static int64_t from(gpu_bf16 v) { return from((double)gpu_bf16_to_float(v)); }
};
template <>
struct to_elem<int32_t> {
    GK_DEV static int32_t from(float v) { return from((double)v); }
    GK_DEV static int32_t from(double v)
    {
        if (v != v) return 0;
        if (v >= 2147483647.0) return INT32_MAX;
        if (v <= -2147483648.0) return INT32_MIN;
        return (int32_t)v;
    }
    GK_DEV static int32_t from(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
    GK_DEV static int32_t from(int32_t v) { return v; }
    GK_DEV static int32_t from(uint8_t v) { return v; }
    GK_DEV static int32_t from(gpu_f16 v) { return from((double)gpu_f16_to_float(v)); }
    GK_DEV static int32_t from(gpu_bf16 v) { return from((double)gpu_bf16_to_float(v)); }
};
template <>
struct to_elem<uint8_t> {
    template <class S>
    GK_DEV static uint8_t from(S v) { return v != 0; }
    GK_DEV static uint8_t from(gpu_f16 v) { return gpu_f16_to_float(v) != 0; }
    GK_DEV static uint8_t from(gpu_bf16 v) { return gpu_bf16_to_float(v) != 0; }
};
/* Halves: from anything through float. */
template <>
struct to_elem<gpu_f16> {
    template <class S>
    GK_DEV static gpu_f16 from(S v) { return gpu_float_to_f16((float)v); }
    GK_DEV static gpu_f16 from(gpu_f16 v) { return v; }
    GK_DEV static gpu_f16 from(gpu_bf16 v) { return gpu_float_to_f16(gpu_bf16_to_float(v)); }
};
template <>
struct to_elem<gpu_bf16> {
    template <class S>
    GK_DEV static gpu_bf16 from(S v) { return gpu_float_to_bf16((float)v); }
    GK_DEV static gpu_bf16 from(gpu_bf16 v) { return v; }
    GK_DEV static gpu_bf16 from(gpu_f16 v) { return gpu_float_to_bf16(gpu_f16_to_float(v)); }
};

template <class D, class S>
__global__ void k_convert(int64_t n, gk_geom g, D *dst, const S *src)
{
    GK_LOOP(i, n)
    {
        int64_t off[2];
        gk_offsets<2>(g, i, off);
        dst[off[0]] = to_elem<D>::from(src[off[1]]);
    }
}

template <class D, class S>
int launch(const gk_ctx *k, int64_t n, const gk_geom &g, void *dst, const void *src)
{
    gk_launch(k_convert<D, S>, gk_blocks(n), GK_THREADS, 0, k->stream, n, g, (D *)dst, (const S *)src);
    return gk_launched(k, "dtype conversion kernel");
}

template <class D>
int launch_from(const gk_ctx *k, opr_dtype from, int64_t n, const gk_geom &g, void *dst, const void *src)
{
    switch (from) {
    case OPR_F32: return launch<D, float>(k, n, g, dst, src);
    case OPR_F64: return launch<D, double>(k, n, g, dst, src);
    case OPR_I64: return launch<D, int64_t>(k, n, g, dst, src);
    case OPR_I32: return launch<D, int32_t>(k, n, g, dst, src);
    case OPR_BOOL: return launch<D, uint8_t>(k, n, g, dst, src);
    case OPR_F16: return launch<D, gpu_f16>(k, n, g, dst, src);
    case OPR_BF16: return launch<D, gpu_bf16>(k, n, g, dst, src);
    default: return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "to: dtype %s is not supported", gk_dtype_name(from));
    }
}

/* dst (dtype `to`) = src (dtype `from`) converted, n = numel of the geometry. */
int convert(const gk_ctx *k, opr_dtype to, opr_dtype from, int64_t n, const gk_geom &g, void *dst, const void *src)
{
    switch (to) {
    case OPR_F32: return launch_from<float>(k, from, n, g, dst, src);
    case OPR_F64: return launch_from<double>(k, from, n, g, dst, src);
    case OPR_I64: return launch_from<int64_t>(k, from, n, g, dst, src);
    case OPR_I32: return launch_from<int32_t>(k, from, n, g, dst, src);
    case OPR_BOOL: return launch_from<uint8_t>(k, from, n, g, dst, src);
    case OPR_F16: return launch_from<gpu_f16>(k, from, n, g, dst, src);
    case OPR_BF16: return launch_from<gpu_bf16>(k, from, n, g, dst, src);
    default: return GK_FAIL(k->call, OPR_ERR_UNSUPPORTED, "to: dtype %s is not supported", gk_dtype_name(to));
    }
}

int k_to(const opr_kernel_call *c)
{
    gk_ctx k;
    int rc = gk_begin(c, "to", &k);
    if (rc) return rc;
    const opr_tensor_view *x = gk_arg_t(c, 0);
    opr_tensor_view *out = c->outputs[0];
    if (!x) return GK_FAIL(c, OPR_ERR_INVALID, "to: self is not a tensor");
    if (out->numel == 0) return OPR_OK;
    if (x->ndim > GK_MAXD) return GK_FAIL(c, OPR_ERR_INVALID, "to: more than %d dims", GK_MAXD);
    return gk_convert_strided(&k, out->dtype, out->ndim, out->shape, out->data, out->strides, x->dtype, x->data,
                              x->strides);
}

} // namespace

int gk_convert_strided(const gk_ctx *k, opr_dtype to, int32_t ndim, const int64_t *shape, void *dst,
                       const int64_t *dst_st, opr_dtype from, const void *src, const int64_t *src_st)
{
    const int64_t n = gk_numel(ndim, shape);
    if (n == 0) return OPR_OK;
    gk_geom g;
    const int64_t *st[2] = {dst_st, src_st};
    gk_geom_make(&g, ndim, shape, 2, st);
    return convert(k, to, from, n, g, dst, src);
}

int gk_register_convert(opr_plugin *self) { return gk_register(self, "to", GK_ALL | GK_I32, k_to); }
