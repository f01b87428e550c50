// core/half.h: one-element conversions between fp32 and the 16-bit floating-point formats,
// used on the host (the CPU backend's cast op, MPI reductions of 16-bit buffers). Round to
// nearest, ties to even; NaN stays NaN (quiet), overflow goes to infinity, fp16 subnormals
// are exact. Pure.
#pragma once
#include <stdint.h>

// bf16: 1 sign, 8 exponent, 7 mantissa bits (the top half of an fp32).
uint16_t core_f32_to_bf16(float x);
float core_bf16_to_f32(uint16_t h);
// fp16 (IEEE binary16): 1 sign, 5 exponent, 10 mantissa bits; max 65504.
uint16_t core_f32_to_f16(float x);
float core_f16_to_f32(uint16_t h);
