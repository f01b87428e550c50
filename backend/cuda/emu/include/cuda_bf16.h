// backend/cuda/emu/include/cuda_bf16.h: the CPU emulator's stand-in for CUDA's bf16 header:
// the storage type __nv_bfloat16 and the conversions megac uses (names and semantics as in
// CUDA 13; bits by emu_half.h: round to nearest even, NaN kept). Host code = device code
// here. C++ only (the kernels' language).
#pragma once
#include <cuda_runtime.h>  // defines: __host__, __device__
#include "emu_half.h"      // defines: emu_f32_to_bf16, emu_bf16_to_f32

// 16 bits of storage; no arithmetic operators (kernels convert to float and back).
struct __nv_bfloat16 {
    unsigned short __x;
};

static inline __host__ __device__ __nv_bfloat16 __float2bfloat16_rn(float x) {
    __nv_bfloat16 h;
    h.__x = emu_f32_to_bf16(x);
    return h;
}
static inline __host__ __device__ __nv_bfloat16 __float2bfloat16(float x) {
    return __float2bfloat16_rn(x);
}
static inline __host__ __device__ float __bfloat162float(__nv_bfloat16 h) {
    return emu_bf16_to_f32(h.__x);
}
static inline __host__ __device__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
    return h.__x;
}
static inline __host__ __device__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 h;
    h.__x = u;
    return h;
}
