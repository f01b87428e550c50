// core/half.c: fp32 <-> bf16 / fp16 conversions bit by bit (see half.h).
#include "half.h"

#include <string.h>  // defines: memcpy

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// bf16 is the top half of an fp32: round the low 16 bits to nearest, ties to even.
uint16_t core_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float core_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

// fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max 65504; subnormals below 2^-14.
uint16_t core_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {  // below 2^-14: subnormal (or zero) in fp16, units of 2^-24
        if (a < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 is a tie -> 0)
        uint32_t mant = (a & 0x007fffffu) | 0x00800000u;  // 24-bit significand
        int shift = 126 - (int)(a >> 23);  // value = mant * 2^(e-150); want units of 2^-24
        // units = mant >> (shift - 0) where e - 150 + 24 = -(shift): shift in [14, 24]
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    // normal: rebias the exponent (127 -> 15) and round 13 mantissa bits away, ties to even
    uint32_t r = a - 0x38000000u;  // exponent - 112
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float core_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13));  // inf / NaN
    if (e == 0) {  // zero or subnormal: m * 2^-24
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

