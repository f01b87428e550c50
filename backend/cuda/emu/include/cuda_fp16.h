// backend/cuda/emu/include/cuda_fp16.h: the CPU emulator's stand-in for CUDA's fp16 header:
// the storage type __half and the conversions megac uses (names and semantics as in CUDA 13;
// bits by emu_half.h: round to nearest even, overflow to inf, subnormals, NaN kept). Host
// code = device code here. C++ only (the kernels' language).
#pragma once
#include <cuda_runtime.h>  // defines: __host__, __device__
#include "emu_half.h"      // defines: emu_f32_to_f16, emu_f16_to_f32

// 16 bits of storage; no arithmetic operators (kernels convert to float and back).
struct __half {
    unsigned short __x;
};

static inline __host__ __device__ __half __float2half_rn(float x) {
    __half h;
    h.__x = emu_f32_to_f16(x);
    return h;
}
static inline __host__ __device__ __half __float2half(float x) { return __float2half_rn(x); }
static inline __host__ __device__ float __half2float(__half h) { return emu_f16_to_f32(h.__x); }
static inline __host__ __device__ unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __host__ __device__ __half __ushort_as_half(unsigned short u) {
    __half h;
    h.__x = u;
    return h;
}
