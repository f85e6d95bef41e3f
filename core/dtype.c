/* Dtype sizes and names. */
#include "core.h"

#include <string.h>

static const struct { const char *name; size_t size; } dtype_info[OPR_DTYPE_COUNT] = {
    [OPR_F32] = {"f32", 4}, [OPR_F64] = {"f64", 8}, [OPR_I64] = {"i64", 8},
    [OPR_BOOL] = {"bool", 1}, [OPR_F16] = {"f16", 2}, [OPR_BF16] = {"bf16", 2},
    [OPR_I32] = {"i32", 4},
};

static bool dtype_valid(opr_dtype dt) { return (unsigned)dt < OPR_DTYPE_COUNT; }

size_t opr_dtype_size(opr_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].size : 0; }

const char *opr_dtype_name(opr_dtype dt) { return dtype_valid(dt) ? dtype_info[dt].name : "?"; }

opr_status opr_dtype_parse(const char *name, opr_dtype *out)
{
    static const struct { const char *alias; opr_dtype dt; } aliases[] = {
        {"float32", OPR_F32}, {"float", OPR_F32}, {"float64", OPR_F64}, {"double", OPR_F64},
        {"int64", OPR_I64}, {"long", OPR_I64}, {"float16", OPR_F16}, {"half", OPR_F16},
        {"bfloat16", OPR_BF16}, {"int32", OPR_I32}, {"int", OPR_I32},
    };
    if (!name || !out) return opr_fail(OPR_ERR_INVALID, "opr_dtype_parse: NULL argument");
    for (int i = 0; i < OPR_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_info[i].name)) { *out = (opr_dtype)i; return OPR_OK; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].dt; return OPR_OK; }
    return opr_fail(OPR_ERR_INVALID, "unknown dtype '%s' (expected f32, f64, i64, bool, f16, bf16 or i32)", name);
}

uint16_t opr_bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float opr_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t opr_f16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0)); /* inf, NaN */
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (e <= 0) { /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) half++; /* may carry into the exponent: fine */
    return (uint16_t)half;
}

float opr_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp) u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    else if (!man) u = sign;
    else { /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int opr_number_store(opr_dtype dt, double v, void *dst)
{
    /* the targets with a bounded range and no infinity or NaN (bool takes any number:
     * v != 0, as PyTorch's conversion to bool cannot overflow) */
    if (dt == OPR_I64 && !(v >= -0x1p63 && v < 0x1p63))
        return opr_fail(OPR_ERR_INVALID, "value cannot be converted to type int64_t without overflow: %g", v);
    if (dt == OPR_I32 && !(v >= -0x1p31 && v < 0x1p31))
        return opr_fail(OPR_ERR_INVALID, "value cannot be converted to type int32_t without overflow: %g", v);
    opr_dtype_store(dt, v, dst);
    return OPR_OK;
}

void opr_dtype_store(opr_dtype dt, double v, void *dst)
{
    switch (dt) {
    case OPR_F32: { float f = (float)v; memcpy(dst, &f, sizeof f); break; }
    case OPR_F64: memcpy(dst, &v, sizeof v); break;
    case OPR_I64: { int64_t i = (int64_t)v; memcpy(dst, &i, sizeof i); break; }
    case OPR_BOOL: *(unsigned char *)dst = v != 0; break;
    case OPR_F16: { uint16_t h = opr_f16_from_float((float)v); memcpy(dst, &h, sizeof h); break; }
    case OPR_BF16: { uint16_t h = opr_bf16_from_float((float)v); memcpy(dst, &h, sizeof h); break; }
    case OPR_I32: { int32_t i = (int32_t)v; memcpy(dst, &i, sizeof i); break; }
    default: break;
    }
}
