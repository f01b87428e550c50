// tests/backend/emu/test_emu_runtime.c: the emulator's fake CUDA runtime, used from C (the
// header must serve C11 too): device count and MEGAC_EMU_DEVICES=0, properties, the device
// memory limit (MEGAC_EMU_DEVICE_MEMORY) and cudaMemGetInfo, garbage-filled allocations,
// frees of foreign pointers, copies, streams, events, the last error and its strings.
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"  // defines: EXPECT, test_failures_

static void test_devices(void) {
    int n = -1, dev = -1;
    EXPECT(cudaGetDeviceCount(&n) == cudaSuccess && n == 8, "device count %d (default 8)", n);
    struct cudaDeviceProp p;
    EXPECT(cudaGetDeviceProperties(&p, 0) == cudaSuccess, "properties");
    EXPECT(strcmp(p.name, "megac CPU emulator") == 0, "name %s", p.name);
    EXPECT(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132, "sm %d.%d, %d SMs",
           p.major, p.minor, p.multiProcessorCount);
    EXPECT(p.sharedMemPerBlockOptin == 227 << 10 && p.maxThreadsPerBlock == 1024 &&
           p.warpSize == 32, "limits");
    EXPECT(cudaSetDevice(8) == cudaErrorInvalidDevice, "device 8 accepted");
    EXPECT(cudaGetLastError() == cudaErrorInvalidDevice, "last error not recorded");
    EXPECT(cudaSetDevice(0) == cudaSuccess, "device 0");
    EXPECT(cudaGetDevice(&dev) == cudaSuccess && dev == 0, "current device %d", dev);

    setenv("MEGAC_EMU_DEVICES", "0", 1);
    EXPECT(cudaGetDeviceCount(&n) == cudaErrorNoDevice && n == 0, "no-device path: %d", n);
    void *p0 = NULL;
    EXPECT(cudaMalloc(&p0, 16) == cudaErrorNoDevice && !p0, "malloc without a device");
    unsetenv("MEGAC_EMU_DEVICES");
    cudaGetLastError();
    setenv("MEGAC_EMU_DEVICES", "3", 1);
    EXPECT(cudaGetDeviceCount(&n) == cudaSuccess && n == 3 && cudaSetDevice(2) == cudaSuccess, "3");
    cudaSetDevice(0);
    unsetenv("MEGAC_EMU_DEVICES");
    int v = 0;
    EXPECT(cudaRuntimeGetVersion(&v) == cudaSuccess && v >= 13000, "runtime version %d", v);
}

static void test_memory(void) {
    setenv("MEGAC_EMU_DEVICE_MEMORY", "1M", 1);
    size_t free_b = 0, total = 0;
    EXPECT(cudaMemGetInfo(&free_b, &total) == cudaSuccess && total == 1 << 20 &&
           free_b == 1 << 20, "empty: free %zu total %zu", free_b, total);
    float *a = NULL, *b = NULL;
    EXPECT(cudaMalloc((void **)&a, 512 << 10) == cudaSuccess && a, "512 KB");
    EXPECT(((size_t)a & 255) == 0, "alignment");
    EXPECT(isnan(a[0]) && isnan(a[(128 << 10) - 1]), "fresh memory is not NaN-filled");
    cudaMemGetInfo(&free_b, &total);
    EXPECT(free_b == 512 << 10, "after 512 KB: free %zu", free_b);
    EXPECT(cudaMalloc((void **)&b, 600 << 10) == cudaErrorMemoryAllocation && !b, "over the limit");
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation, "OOM not recorded");
    EXPECT(cudaGetLastError() == cudaSuccess, "OOM sticky");
    EXPECT(cudaFree(a) == cudaSuccess, "free");
    EXPECT(cudaMalloc((void **)&b, 600 << 10) == cudaSuccess, "600 KB after the free");
    cudaFree(b);
    unsetenv("MEGAC_EMU_DEVICE_MEMORY");

    int x = 0;
    EXPECT(cudaFree(&x) == cudaErrorInvalidValue, "cudaFree of a stack pointer");
    EXPECT(cudaFree(NULL) == cudaSuccess, "cudaFree(NULL)");
    void *z1 = NULL, *z2 = NULL, *h = NULL;
    EXPECT(cudaMalloc(&z1, 0) == cudaSuccess && cudaMalloc(&z2, 0) == cudaSuccess && z1 && z1 != z2,
           "zero-byte allocations");
    cudaFree(z1), cudaFree(z2);
    EXPECT(cudaMallocHost(&h, 64) == cudaSuccess && cudaFree(h) == cudaErrorInvalidValue,
           "cudaFree of pinned memory");
    EXPECT(cudaFreeHost(h) == cudaSuccess, "cudaFreeHost");
    cudaGetLastError();

    // many allocations: the side table grows and shrinks
    enum { N = 3000 };
    static void *ptrs[N];
    for (int i = 0; i < N; i++)
        EXPECT(cudaMalloc(&ptrs[i], (size_t)i) == cudaSuccess, "alloc %d", i);
    for (int i = 0; i < N; i += 2) EXPECT(cudaFree(ptrs[i]) == cudaSuccess, "free %d", i);
    for (int i = 1; i < N; i += 2) EXPECT(cudaFree(ptrs[i]) == cudaSuccess, "free %d", i);
    cudaMemGetInfo(&free_b, &total);
    EXPECT(free_b == total, "all freed: free %zu total %zu", free_b, total);
}

static void test_copies_streams_events(void) {
    float host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (float)i;
    float *d;
    cudaStream_t s;
    cudaEvent_t e0, e1, et;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaMalloc((void **)&d, sizeof host) == cudaSuccess, "malloc");
    EXPECT(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess, "events");
    EXPECT(cudaEventCreateWithFlags(&et, cudaEventDisableTiming) == cudaSuccess, "untimed event");
    EXPECT(cudaEventRecord(e0, s) == cudaSuccess, "record");
    EXPECT(cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, s) == cudaSuccess, "h2d");
    EXPECT(cudaMemsetAsync(d, 0, 16 * sizeof(float), s) == cudaSuccess, "memset");
    EXPECT(cudaMemcpy(d + 32, d + 16, 64, cudaMemcpyDeviceToDevice) == cudaSuccess, "d2d");
    EXPECT(cudaMemcpy(back, d, sizeof back, cudaMemcpyDefault) == cudaSuccess, "d2h");
    for (int i = 0; i < 64; i++) {
        float want = i < 16 ? 0.0f : i >= 32 && i < 48 ? (float)(i - 16) : (float)i;
        EXPECT(back[i] == want, "copy result [%d] %g", i, back[i]);
    }
    EXPECT(cudaMemcpy(back, d, 4, (enum cudaMemcpyKind)9) == cudaErrorInvalidValue, "bad kind");
    cudaGetLastError();
    EXPECT(cudaEventRecord(e1, s) == cudaSuccess, "record e1");
    EXPECT(cudaEventRecord(et, s) == cudaSuccess, "record et");
    EXPECT(cudaStreamWaitEvent(s, e1, 0) == cudaSuccess, "wait event");
    EXPECT(cudaStreamQuery(s) == cudaSuccess && cudaEventQuery(e1) == cudaSuccess, "query");
    EXPECT(cudaStreamSynchronize(s) == cudaSuccess, "stream sync");
    EXPECT(cudaEventSynchronize(e1) == cudaSuccess, "event sync");
    float ms = -1;
    EXPECT(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms >= 0 && ms < 10000, "ms %g", ms);
    EXPECT(cudaEventElapsedTime(&ms, e0, et) == cudaErrorInvalidValue, "timing an untimed event");
    cudaGetLastError();
    EXPECT(cudaEventDestroy(e0) == cudaSuccess && cudaEventDestroy(e1) == cudaSuccess &&
           cudaEventDestroy(et) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess, "destroy");
    EXPECT(cudaDeviceSynchronize() == cudaSuccess, "device sync");
    cudaFree(d);
}

static void test_error_strings(void) {
    EXPECT(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0, "success string");
    EXPECT(strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration),
                  "invalid configuration argument") == 0, "config string");
    EXPECT(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0,
           "name");
    EXPECT(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0, "?");
    EXPECT(cudaGetLastError() == cudaSuccess && cudaPeekAtLastError() == cudaSuccess, "clean");
}

int main(void) {
    test_devices();
    test_memory();
    test_copies_streams_events();
    test_error_strings();
    if (test_failures_) {
        fprintf(stderr, "%d failure(s)\n", test_failures_);
        return 1;
    }
    printf("emu runtime tests passed\n");
    return 0;
}
