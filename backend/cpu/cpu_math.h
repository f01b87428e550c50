// backend/cpu/cpu_math.h: exp and GELU written so that `#pragma omp simd` loops vectorise.
//
// libm's expf/tanhf are scalar calls unless -ffast-math is on, which would make the
// reference backend's rounding depend on compiler whims. cpu_exp_core is a plain-C exp with
// a relative error of about 1 ulp: round x*log2(e) to n with the 1.5*2^23 trick, reduce
// r = x - n*ln2 (ln2 split in two), a degree-7 Taylor polynomial on |r| <= ln2/2
// (truncation error < 1e-8), and 2^n built from its exponent bits. The steps are fmaf
// calls: one correctly rounded operation each, so every clone gives the same bits (the
// AVX2 and AVX-512 clones as FMA instructions, the plain x86-64 code as libm calls: keep
// hot loops of exp in CPU_SIMD_CLONES functions). cpu_expf handles any input: the core may
// compute garbage outside its range, and integer masks then select 0 (x < -86), +inf
// (x > 88.72) or x itself (NaN). The garbage is never a subnormal (2^n's bits have a zero
// mantissa), so it costs no slow path. The sigmoids of GELU and SwiGLU take no masks: they
// clamp the argument to +-80 on its bits (cpu_sigmoid_den), which costs a third of the masks.
//
// CPU_SIMD_CLONES marks the hot per-row / per-span kernels: GCC compiles them for plain
// x86-64 (SSE2), x86-64-v3 (AVX2+FMA) and x86-64-v4 (AVX-512) and picks one at load time
// from the CPU's features, so the build stays portable (no -march=native) yet uses the
// machine's vector width. The build is ISO C (-std=c11), so FMA contraction stays off and
// elementwise results are the same bits in every clone; only the order inside `omp simd`
// reductions follows the vector width. Such functions must not open OpenMP regions.
// -DCPU_NO_SIMD_CLONES builds the plain x86-64 code only (to measure what the clones buy);
// ThreadSanitizer builds get it too (the clones' ifunc resolvers run before its runtime).
#pragma once
#include <math.h>    // defines: fmaf
#include <stdint.h>  // defines: uint32_t, int32_t

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(CPU_NO_SIMD_CLONES) && !defined(__SANITIZE_THREAD__)
#define CPU_SIMD_CLONES \
    __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define CPU_SIMD_CLONES
#endif

static inline uint32_t cpu_float_bits(float f) {
    union { float f; uint32_t u; } c = {.f = f};
    return c.u;
}

static inline int32_t cpu_float_ibits(float f) {
    union { float f; int32_t i; } c = {.f = f};
    return c.i;
}

static inline float cpu_bits_float(uint32_t u) {
    union { uint32_t u; float f; } c = {.u = u};
    return c.f;
}

// e^x for x in [-87, 88.5] (2^n's exponent field in range; below -87.3 it reads 0).
static inline float cpu_exp_core(float x) {
    const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float k = fmaf(x, 1.44269504f, magic);
    uint32_t n = cpu_float_bits(k) - cpu_float_bits(magic);  // round(x / ln2), two's complement
    float nf = k - magic;
    float r = fmaf(nf, -1.428606765330187e-6f, fmaf(nf, -0.693145751953125f, x));
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return p * cpu_bits_float((n + 126u) << 23) * 2.0f;  // p * 2^(n-1) * 2
}

// e^x for any float: 0 below -86 (e^-86 = 4e-38), +inf above 88.72, NaN stays NaN.
static inline float cpu_expf(float x) {
    float y = cpu_exp_core(x);
    // Masks from the bits: negative floats below -86 have larger unsigned bits than -86;
    // positive floats above 88.72 have larger signed bits than 88.72. NaNs land in one of
    // the two and are then overridden.
    uint32_t below = -(uint32_t)(cpu_float_bits(x) > cpu_float_bits(-86.0f));
    uint32_t above = -(uint32_t)(cpu_float_ibits(x) > cpu_float_ibits(88.72f));
    uint32_t nan = -(uint32_t)((cpu_float_bits(x) & 0x7fffffffu) > 0x7f800000u);
    uint32_t bits = (cpu_float_bits(y) & ~(below | above | nan)) |
                    (0x7f800000u & above & ~nan) | (cpu_float_bits(x) & nan);
    return cpu_bits_float(bits);
}

// 1 + e^t with t clamped to [-80, 80] on its bits (|t|'s bits, integer min, sign put back):
// a sigmoid's denominator. Below -80 it is 1 as 1 + e^t would be in fp32; above 80 it stays
// finite (5.5e34), so the sigmoid there reads 1.8e-35 for 0. A NaN t becomes +-80: callers
// carry NaN through another factor (GELU's and SiLU's x).
static inline float cpu_sigmoid_den(float t) {
    uint32_t b = cpu_float_bits(t), a = b & 0x7fffffffu, lim = 0x42a00000u;  // 80.0f
    a = a < lim ? a : lim;
    return 1.0f + cpu_exp_core(cpu_bits_float(a | (b & 0x80000000u)));
}

// GELU, tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
#define CPU_GELU_K 0.7978845608028654f
#define CPU_GELU_A 0.044715f

static inline float cpu_gelu(float x) {
    float u = CPU_GELU_K * (x + CPU_GELU_A * x * x * x);
    return x / cpu_sigmoid_den(-2.0f * u);
}

// d gelu / dx = s + x s (1 - s) 2 u'(x), s = sigmoid(2u).
static inline float cpu_gelu_grad(float x) {
    float u = CPU_GELU_K * (x + CPU_GELU_A * x * x * x);
    float s = 1.0f / cpu_sigmoid_den(-2.0f * u);
    float du = CPU_GELU_K * (1.0f + 3.0f * CPU_GELU_A * x * x);
    return s + x * s * (1.0f - s) * 2.0f * du;
}
