// backend/cpu/cpu_cast.c: the `cast` op between fp32, bf16 and fp16 (core/half.h does the
// bits, cpu_load/cpu_store in cpu_backend.h). The 16-bit ops (cpu_half.c) convert with it.
#include "cpu_backend.h"

#include <string.h>  // defines: memmove

// Every 16-bit value is exact in fp32, so going through fp32 rounds once.
void cpu_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n) {
    (void)be;
    if (dt == st) {
        if (dst != src) memmove(dst, src, n * backend_dtype_size(dt));
        return;
    }
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) cpu_store(dst, dt, i, cpu_load(src, st, i));
}
