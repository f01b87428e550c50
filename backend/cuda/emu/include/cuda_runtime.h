// backend/cuda/emu/include/cuda_runtime.h: the CPU emulator's stand-in for the CUDA runtime
// header (only what megac uses; names, types, values and signatures as in CUDA 13, so code
// compiles against both). Implemented by emu_runtime.c (memory, streams, events, errors) and
// emu_kernel.cpp (launches). Device memory is host memory; everything is synchronous.
// C11 and C++20. Kernel-side names (threadIdx, __syncthreads, __shared__) are in emu_kernel.h.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Function qualifiers: no-ops on the host compiler (the real header maps them to attributes).
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#define CUDART_VERSION 13000

// Default arguments exist only in C++ (the real header's __dv).
#ifdef __cplusplus
#define EMU_DV(v) = v
#else
#define EMU_DV(v)
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Error codes (values as CUDA's).
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

typedef struct CUstream_st *cudaStream_t;  // opaque; NULL is the default stream
typedef struct CUevent_st *cudaEvent_t;    // opaque

#define cudaHostAllocDefault 0x00
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

struct uint3 {
    unsigned int x, y, z;
};
typedef struct uint3 uint3;

struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3(void) const { return uint3{x, y, z}; }
#endif
};
typedef struct dim3 dim3;

struct CUuuid_st {
    char bytes[16];
};
typedef struct CUuuid_st cudaUUID_t;

// A subset of CUDA 13's cudaDeviceProp (same field names and types; layout differs).
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int memoryBusWidth;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    size_t sharedMemPerBlockOptin;
    int maxBlocksPerMultiProcessor;
    size_t reservedSharedMemPerBlock;
    int reserved[56];
};

// Contracts: CUDA's, except that everything completes before the call returns; a failing
// call also records its error as the last error (emu_runtime.c has the model).
// --- device and versions ----------------------------------------------------------------
// 8 devices, or env MEGAC_EMU_DEVICES (0: cudaErrorNoDevice).
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);                  // cudaErrorInvalidDevice if absent
cudaError_t cudaGetDevice(int *device);
// "megac CPU emulator", sm 9.0, 132 SMs, 1024 threads, 227 KB opt-in shared memory.
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDriverGetVersion(int *driverVersion);   // CUDART_VERSION
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion); // CUDART_VERSION
cudaError_t cudaDeviceSynchronize(void);                // nothing is ever pending

// --- memory -------------------------------------------------------------------------------
// Exactly `size` host bytes, 256-aligned, NaN-filled; cudaErrorMemoryAllocation beyond env
// MEGAC_EMU_DEVICE_MEMORY (default: physical memory). 0 bytes: a unique non-NULL pointer.
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);  // NULL is fine; cudaErrorInvalidValue if not from cudaMalloc
cudaError_t cudaMallocHost(void **ptr, size_t size);                         // pinned = plain
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);    // flags: Default
cudaError_t cudaFreeHost(void *ptr);  // cudaErrorInvalidValue if not from cudaMallocHost/HostAlloc
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);  // (limit - cudaMalloc'd, limit)
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream EMU_DV(0));  // synchronous
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream EMU_DV(0));  // synchronous

// --- streams and events: plain objects; queries succeed at once ---------------------------
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);        // cudaSuccess: never NotReady
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags EMU_DV(0));
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream EMU_DV(0));  // host clock now
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
// Milliseconds between the two records (CLOCK_MONOTONIC; emulated time means nothing).
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// --- errors (per host thread, as CUDA) -----------------------------------------------------
cudaError_t cudaGetLastError(void);     // returns the last error and resets it to cudaSuccess
cudaError_t cudaPeekAtLastError(void);  // returns it, leaves it
const char *cudaGetErrorString(cudaError_t error);  // CUDA's wording ("invalid argument")
const char *cudaGetErrorName(cudaError_t error);    // the enum's name

#ifdef __cplusplus
// Emulator only: the most blocks the CUDA backend's grid-stride launches use (env
// MEGAC_EMU_GRID_CAP, a positive number; 0 or unset: no cap). Every block costs a round of
// thread switches on the CPU, so long emulated runs (training tests) set it.
unsigned emu_grid_cap(void);

}  // extern "C"

// The C++ conveniences of the real header: typed pointers to pointers.
template <class T>
static inline cudaError_t cudaMalloc(T **devPtr, size_t size) {
    return ::cudaMalloc((void **)(void *)devPtr, size);
}
template <class T>
static inline cudaError_t cudaMallocHost(T **ptr, size_t size, unsigned int flags = 0) {
    return ::cudaHostAlloc((void **)(void *)ptr, size, flags);
}
template <class T>
static inline cudaError_t cudaHostAlloc(T **ptr, size_t size, unsigned int flags) {
    return ::cudaHostAlloc((void **)(void *)ptr, size, flags);
}
#endif
