// tests/backend/emu/emu_bench.cpp: what the emulator costs on this machine (a meson
// benchmark, not a test): launch overhead, per-block cost, per-__syncthreads and per-shuffle
// cost at the block sizes the CUDA backend uses.
#include "backend/cuda/emu/emu_kernel.h"  // defines: emu_launch, __syncthreads, __shfl_xor_sync

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

__global__ void empty_kernel(int n) { (void)n; }

__global__ void sync_kernel(int n) {
    for (int i = 0; i < n; i++) __syncthreads();
}

__global__ void shuffle_kernel(int n, float *out) {
    float v = (float)threadIdx.x;
    for (int i = 0; i < n; i++) v += __shfl_xor_sync(0xffffffffu, v, 1 + i % 16);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// Microseconds per launch of kernel(n) on grid x block.
template <class K, class... A>
static double per_launch(K kernel, unsigned grid, unsigned block, int reps, A... args) {
    emu_launch("bench", kernel, dim3(grid), dim3(block), 0, nullptr, args...);  // warm the pool
    double t0 = now();
    for (int r = 0; r < reps; r++)
        emu_launch("bench", kernel, dim3(grid), dim3(block), 0, nullptr, args...);
    return (now() - t0) / reps * 1e6;
}

int main(void) {
    float *out;
    cudaMalloc((void **)&out, 1024 * sizeof(float));
    const char *engine = getenv("MEGAC_EMU_ENGINE");
    printf("engine: %s (MEGAC_EMU_ENGINE=threads for the other)\n",
           engine && strcmp(engine, "threads") == 0 ? "threads" : "fibers");
    const unsigned sizes[] = {32, 128, 256, 1024};
    for (unsigned b : sizes) {
        double launch = per_launch(empty_kernel, 1, b, 200, 0);
        double blocks = per_launch(empty_kernel, 64, b, 10, 0);
        double sync = (per_launch(sync_kernel, 1, b, 5, 100) - launch) / 100;
        double shfl = (per_launch(shuffle_kernel, 1, b, 5, 100, out) - launch) / 100;
        printf("block %4u threads: launch (1 block) %8.1f us | per extra block %8.1f us | "
               "__syncthreads %7.1f us | __shfl_xor_sync %7.1f us\n",
               b, launch, (blocks - launch) / 63, sync, shfl);
    }
    cudaFree(out);
    return 0;
}
