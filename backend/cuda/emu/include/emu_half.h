// backend/cuda/emu/include/emu_half.h: bit-exact conversions between fp32 and the 16-bit float
// formats (bf16: 8 exponent bits, 7 mantissa bits; fp16 IEEE binary16: 5, 10), for the
// emulator's cuda_bf16.h / cuda_fp16.h, cuBLASLt and NCCL. C11 and C++20, header only.
//
// float -> 16 bits rounds to nearest, ties to even, as the GPU's cvt.rn: values past the
// largest finite 16-bit number round to +-inf (fp16: |x| >= 65520), tiny values to fp16
// subnormals or +-0; bf16 keeps fp32's exponent range (fp32 subnormals map to bf16
// subnormals). NaN stays NaN: the canonical quiet NaN 0x7fff (bf16) / 0x7fff (fp16), as the
// GPU's conversion returns. 16 bits -> float is exact (subnormals included).
#pragma once
#include <stdint.h>
#include <string.h>

static inline uint32_t emu_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float emu_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// bf16 bits of x, round to nearest even.
static inline uint16_t emu_f32_to_bf16(float x) {
    uint32_t u = emu_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // carries into the exponent round up to inf correctly
    return (uint16_t)(u >> 16);
}
static inline float emu_bf16_to_f32(uint16_t h) { return emu_bits_f32((uint32_t)h << 16); }

// fp16 bits of x, round to nearest even (overflow to inf, subnormals, underflow to 0).
static inline uint16_t emu_f32_to_f16(float x) {
    uint32_t u = emu_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fff;                    // NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // >= 65520 (or inf): inf
    if (a < 0x38800000u) {  // below 2^-14: fp16 subnormal (or 0), unit 2^-24
        if (a < 0x33000000u) return sign;                  // <= 2^-25: rounds to 0
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;        // 24-bit significand
        int shift = 126 - (int)(a >> 23);                  // 14..24: value = mant * 2^(e-150)
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    // normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round to nearest even
    uint32_t r = a - 0x38000000u;  // exponent - 112, in place
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}
static inline float emu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return emu_bits_f32(sign | 0x7f800000u | (m << 13));  // inf, NaN
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in fp32
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return emu_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
