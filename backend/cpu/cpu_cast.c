// backend/cpu/cpu_cast.c: the `cast` op between fp32, bf16 and fp16 (core/half.h does the
// bits). The CPU backend computes in fp32 only; tests use this for reference values.
#include "cpu_backend.h"
#include "core/half.h"

#include <string.h>  // defines: memmove

static float load(const void *p, BackendDType t, size_t i) {
    if (t == BACKEND_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == BACKEND_BF16 ? core_bf16_to_f32(h) : core_f16_to_f32(h);
}

static void store(void *p, BackendDType t, size_t i, float x) {
    if (t == BACKEND_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = t == BACKEND_BF16 ? core_f32_to_bf16(x) : core_f32_to_f16(x);
}

// Every 16-bit value is exact in fp32, so going through fp32 rounds once.
void cpu_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n) {
    (void)be;
    if (dt == st) {
        if (dst != src) memmove(dst, src, n * backend_dtype_size(dt));
        return;
    }
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) store(dst, dt, i, load(src, st, i));
}
