// backend/cpu/cpu_cast.c: the `cast` op between fp32, bf16 and fp16 (core/half.h does the
// bits, cpu_load/cpu_store in cpu_backend.h). The 16-bit ops (cpu_half.c) convert with it.
// Also copy_row_blocks, the other op that moves elements without arithmetic of its own.
#include "cpu_backend.h"

#include <string.h>  // defines: memmove, memcpy

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

// copy_row_blocks (backend.h): memcpy of each block, or an add through fp32 (rounded once
// to be->act, as add). Rows in parallel.
void cpu_copy_row_blocks(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                         size_t lds, size_t sbs, int rows, int nb, int width, int add) {
    BackendDType t = be->act;
    size_t esz = backend_dtype_size(t);
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)rows * nb * width >= CPU_PAR_MIN)
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < nb; i++) {
            size_t d = (size_t)r * ldd + (size_t)i * dbs, s = (size_t)r * lds + (size_t)i * sbs;
            if (!add) {
                memcpy((char *)dst + d * esz, (const char *)src + s * esz, (size_t)width * esz);
                continue;
            }
            for (int c = 0; c < width; c++)
                cpu_store(dst, t, d + c, cpu_load(dst, t, d + c) + cpu_load(src, t, s + c));
        }
}

void cpu_cast_ops(BackendOps *t, BackendDType act) {
    (void)act;  // the same ops for every activation type
    t->cast = cpu_cast;
    t->copy_row_blocks = cpu_copy_row_blocks;
}
