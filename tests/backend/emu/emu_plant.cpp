// tests/backend/emu/emu_plant.cpp: planted kernel bugs that the sanitizer builds of the
// emulator must catch (run by emu_plant_check.sh). Modes:
//   ok    the correct kernel: shared memory written, __syncthreads, then read
//   race  the same kernel without __syncthreads: ThreadSanitizer must report a data race
//         at the lines marked PLANT-RACE (the block's threads are real threads)
//   oob   a kernel writing one element past a cudaMalloc'd buffer: AddressSanitizer must
//         report a heap-buffer-overflow at the line marked PLANT-OOB (exact-size allocation)
// Kernels are tiny (one block of 4 threads): TSan runs real threads slowly.
#include "backend/cuda/emu/emu_kernel.h"  // defines: emu_launch, threadIdx, __syncthreads

#include <stdio.h>
#include <string.h>

#define THREADS 4

__global__ void neighbour_kernel(float *out, int sync) {
    __shared__ float s[THREADS];
    s[threadIdx.x] = (float)threadIdx.x;  // PLANT-RACE
    if (sync) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % THREADS];  // PLANT-RACE
}

__global__ void past_end_kernel(float *buf) {
    buf[threadIdx.x + 1] = 1.0f;  // PLANT-OOB: the last thread writes buf[THREADS]
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    float *buf = nullptr;
    if (cudaMalloc(&buf, THREADS * sizeof(float)) != cudaSuccess) return 2;
    if (strcmp(mode, "ok") == 0 || strcmp(mode, "race") == 0) {
        emu_launch("neighbour_kernel", neighbour_kernel, dim3(1), dim3(THREADS), 0, nullptr, buf,
                   strcmp(mode, "ok") == 0);
        float host[THREADS];
        cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost);
        for (int i = 0; i < THREADS; i++) {
            if (strcmp(mode, "ok") == 0 && host[i] != (float)((i + 1) % THREADS)) {
                fprintf(stderr, "emu_plant: ok kernel gave out[%d] = %g\n", i, host[i]);
                return 1;
            }
        }
    } else if (strcmp(mode, "oob") == 0) {
        emu_launch("past_end_kernel", past_end_kernel, dim3(1), dim3(THREADS), 0, nullptr, buf);
    } else {
        fprintf(stderr, "usage: emu_plant ok|race|oob\n");
        return 2;
    }
    cudaFree(buf);
    printf("emu_plant %s: finished\n", mode);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
