// tests/backend/test_cpu_cast.c: the cast op and core/half.h's conversions, bit by bit.
//   * every 16-bit pattern survives 16 -> 32 -> 16 (NaNs stay NaN);
//   * fp32 -> fp16 equals the compiler's own _Float16 conversion (an independent
//     implementation) on edge values and a million random floats;
//   * fp32 -> bf16 equals the nearest bf16 found by comparing neighbours in double, ties to
//     even, on the same floats;
//   * the cast op (all pairs of types) agrees with the one-element functions.
#include "backend/backend.h"
#include "core/half.h"
#include "tests/testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// Nearest bf16 to x by brute force: the two candidates around x's truncation, compared in
// double; ties to the even mantissa. Finite x whose rounding stays finite only.
static uint16_t bf16_reference(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);  // same sign, next magnitude
    double dl = fabs((double)x - (double)core_bf16_to_f32(lo));
    double dh = fabs((double)x - (double)core_bf16_to_f32(hi));
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {  // xorshift32
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

int main(void) {
    // 16 -> 32 -> 16 is the identity for every pattern
    int bad_bf = 0, bad_h = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float b = core_bf16_to_f32((uint16_t)h), f = core_f16_to_f32((uint16_t)h);
        if (isnan(b) ? !isnan(core_bf16_to_f32(core_f32_to_bf16(b))) : core_f32_to_bf16(b) != h) bad_bf++;
        if (isnan(f) ? !isnan(core_f16_to_f32(core_f32_to_f16(f))) : core_f32_to_f16(f) != h) bad_h++;
        _Float16 ref;
        uint16_t hb = (uint16_t)h;
        memcpy(&ref, &hb, 2);
        if (!isnan(f) && (float)ref != f) bad_h++;
    }
    EXPECT(bad_bf == 0, "%d bf16 patterns changed in a round trip", bad_bf);
    EXPECT(bad_h == 0, "%d fp16 patterns changed in a round trip or decoded differently", bad_h);

    // edge values
    const float edges[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                           65504.0f, 65519.99f, 65520.0f, 1e30f, 0x1p-14f, 0x1p-24f, 0x1p-25f,
                           0x1.8p-25f, 0x1p-26f, 3e-8f, -5.96e-8f, INFINITY, -INFINITY, 0x1.fffffep127f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        float x = edges[i];
        _Float16 r = (_Float16)x;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        EXPECT(core_f32_to_f16(x) == rb, "fp16(%a) = 0x%04x, compiler says 0x%04x", (double)x,
               core_f32_to_f16(x), rb);
    }
    EXPECT(core_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16(1 + 2^-8) ties to even 1.0");
    EXPECT(core_f32_to_bf16(1.0f + 0x3p-8f) == 0x3f82, "bf16(1 + 3*2^-8) ties to even");
    EXPECT(core_f32_to_bf16(0x1.fffffep127f) == 0x7f80, "bf16(FLT_MAX) overflows to inf");
    EXPECT(isnan(core_bf16_to_f32(core_f32_to_bf16(NAN))), "bf16(NaN) is NaN");
    EXPECT(isnan(core_f16_to_f32(core_f32_to_f16(NAN))), "fp16(NaN) is NaN");

    // random floats over the whole finite range (fp16), and bf16 against the reference
    int bad_r16 = 0, bad_rbf = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = rnd();
        float x = from_bits(u);
        if (!isfinite(x)) continue;
        _Float16 r = (_Float16)x;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        if (core_f32_to_f16(x) != rb) bad_r16++;
        if (fabsf(x) < 0x1.fep127f && core_f32_to_bf16(x) != bf16_reference(x)) bad_rbf++;
        // small magnitudes too (where fp16 subnormals live)
        float y = from_bits((u & 0x807fffffu) | ((0x60u + (u >> 26)) << 23));
        r = (_Float16)y;
        memcpy(&rb, &r, 2);
        if (core_f32_to_f16(y) != rb) bad_r16++;
    }
    EXPECT(bad_r16 == 0, "%d random floats convert to fp16 differently from the compiler", bad_r16);
    EXPECT(bad_rbf == 0, "%d random floats convert to bf16 differently from the reference", bad_rbf);

    // the cast op, all pairs
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    enum { N = 4099 };
    float src[N], back[N];
    uint16_t h16[N], b16[N], hb[N];
    for (int i = 0; i < N; i++) src[i] = (float)sin(i * 0.37) * powf(2.0f, (float)(i % 40) - 20.0f);
    be->ops->cast(be, h16, BACKEND_F16, src, BACKEND_F32, N);
    be->ops->cast(be, b16, BACKEND_BF16, src, BACKEND_F32, N);
    be->ops->cast(be, hb, BACKEND_BF16, h16, BACKEND_F16, N);
    be->ops->cast(be, back, BACKEND_F32, b16, BACKEND_BF16, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += h16[i] != core_f32_to_f16(src[i]);
        bad += b16[i] != core_f32_to_bf16(src[i]);
        bad += hb[i] != core_f32_to_bf16(core_f16_to_f32(h16[i]));
        bad += back[i] != core_bf16_to_f32(b16[i]);
    }
    EXPECT(bad == 0, "%d cast-op elements differ from the one-element conversions", bad);
    be->ops->cast(be, src, BACKEND_F32, src, BACKEND_F32, N);  // same type, same buffer: no-op
    EXPECT(src[5] == (float)sin(5 * 0.37) * powf(2.0f, -15.0f), "cast in place changed data");
    backend_destroy(be);
    return test_result("cpu_cast");
}
