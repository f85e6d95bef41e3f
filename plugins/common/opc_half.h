/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): IEEE binary16
 * and bfloat16 from and to float, bit patterns in uint16_t, rounding to nearest even
 * (NaN stays a quiet NaN), as opr_f16_from_float / opr_bf16_from_float do in
 * libopreg, which a plugin does not link. In plain integer code, so that every
 * compiler builds it for every target (clang 14 has no _Float16 on x86-64). */
#ifndef OPREG_OPC_HALF_H
#define OPREG_OPC_HALF_H

#include <stdint.h>
#include <string.h>

static inline float opc_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t opc_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float opc_f16_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return opc_bits_float(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp) return opc_bits_float(sign | ((exp + 112u) << 23) | (man << 13));
    /* zero and subnormals: man * 2^-24, exact in float */
    const float mag = (float)man * opc_bits_float(0x33800000u);
    return sign ? -mag : mag;
}

static inline uint16_t opc_f16_from_float(float f)
{
    const uint32_t u = opc_float_bits(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
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

static inline float opc_bf16_to_float(uint16_t b) { return opc_bits_float((uint32_t)b << 16); }

static inline uint16_t opc_bf16_from_float(float f)
{
    const uint32_t u = opc_float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  /* nearest even */
}

#endif
