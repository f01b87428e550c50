// backend/cuda/emu/emu_runtime.c: the CPU emulator's CUDA runtime (devices, memory, errors;
// streams and events are in emu_stream.c). Kernel launches are in emu_kernel.cpp.
//
// Model
//   * Device memory is host memory: cudaMalloc is posix_memalign(256) of exactly the bytes
//     asked (AddressSanitizer then flags the first byte past the end), filled with
//     EMU_GARBAGE_BYTE (real device memory is not zeroed). Sizes live in a side table (no
//     header before the block, which would hide underflows), so cudaFree rejects pointers it
//     did not hand out and cudaMemGetInfo knows what is in use.
//   * Device memory limit: env MEGAC_EMU_DEVICE_MEMORY (bytes; K/M/G suffixes), default the
//     physical memory; beyond it cudaMalloc returns cudaErrorMemoryAllocation. Read on each
//     call, so a test can change it.
//   * Devices: 8 (a GPU node: one per rank for multi-rank runs), or env MEGAC_EMU_DEVICES=N
//     (0 -> cudaErrorNoDevice, the "no GPU" path).
//   * Everything is synchronous: streams and events are plain objects, queries always
//     succeed, events record CLOCK_MONOTONIC. With env MEGAC_EMU_TRACE the stream operations
//     are traced in issue order (emu_trace.c).
// Global state, modelling the runtime: the allocation table (under a mutex) and the
// per-host-thread last error and current device (as in CUDA).
#include "emu_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local cudaError_t emu_last_error = cudaSuccess;
static _Thread_local int emu_current_device = 0;

void emu_set_last_error(cudaError_t e) {
    if (e != cudaSuccess) emu_last_error = e;
}

cudaError_t emu_fail(cudaError_t e) {
    emu_set_last_error(e);
    return e;
}

// --- devices ------------------------------------------------------------------------------
static int device_count(void) {
    const char *s = getenv("MEGAC_EMU_DEVICES");
    if (!s || !*s) return 8;
    long n = strtol(s, NULL, 10);
    return n < 0 ? 0 : n > 64 ? 64 : (int)n;
}

unsigned emu_grid_cap(void) {
    const char *s = getenv("MEGAC_EMU_GRID_CAP");
    long n = s && *s ? strtol(s, NULL, 10) : 0;
    return n > 0 && n < 65536 ? (unsigned)n : 0;
}

// Device memory limit in bytes (env MEGAC_EMU_DEVICE_MEMORY, default physical memory).
static size_t memory_limit(void) {
    const char *s = getenv("MEGAC_EMU_DEVICE_MEMORY");
    if (s && *s) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
        if (shift) end++;
        if (errno == 0 && *end == '\0') return (size_t)v << shift;
        fprintf(stderr, "emu: ignoring MEGAC_EMU_DEVICE_MEMORY=%s (bytes, K/M/G suffix)\n", s);
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)16 << 30;
}

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return emu_fail(cudaErrorInvalidValue);
    *count = device_count();
    return *count ? cudaSuccess : emu_fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    int n = device_count();
    if (n == 0) return emu_fail(cudaErrorNoDevice);
    if (device < 0 || device >= n) return emu_fail(cudaErrorInvalidDevice);
    emu_current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    if (!device) return emu_fail(cudaErrorInvalidValue);
    if (device_count() == 0) return emu_fail(cudaErrorNoDevice);
    *device = emu_current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (!prop) return emu_fail(cudaErrorInvalidValue);
    int n = device_count();
    if (n == 0) return emu_fail(cudaErrorNoDevice);
    if (device < 0 || device >= n) return emu_fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "megac CPU emulator");
    prop->totalGlobalMem = memory_limit();
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerBlockOptin = 227 << 10;
    prop->sharedMemPerMultiprocessor = 228 << 10;
    prop->reservedSharedMemPerBlock = 1 << 10;
    prop->regsPerBlock = prop->regsPerMultiprocessor = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->totalConstMem = 64 << 10;
    prop->major = 9, prop->minor = 0;  // sm_90 (H100)
    prop->multiProcessorCount = 132;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->l2CacheSize = 50 << 20;
    prop->memoryBusWidth = 5120;
    prop->pciBusID = device;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return emu_fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) { return cudaDriverGetVersion(v); }

cudaError_t cudaDeviceSynchronize(void) {
    emu_trace(-1, "sync", "device");
    return cudaSuccess;
}

// --- allocation table: open addressing on the pointer, under a mutex ----------------------
enum { SLOT_EMPTY = 0, SLOT_GONE = 1 };  // keys that no allocation has
enum { KIND_DEVICE = 1, KIND_HOST = 2 };
typedef struct {
    uintptr_t key;
    size_t bytes;
    int kind;
} AllocSlot;

static pthread_mutex_t emu_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static AllocSlot *emu_slots;       // (emu_cap) the table; never freed (lives with the process)
static size_t emu_cap, emu_used;   // slots, slots not empty (live + gone)
static size_t emu_device_bytes;    // bytes of live device allocations

static size_t slot_of(uintptr_t key, size_t cap) {
    return (size_t)((key >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

// Inserts (key, bytes, kind), growing the table when half full. Lock held. 0 when out of memory.
static int table_put(uintptr_t key, size_t bytes, int kind) {
    if (2 * (emu_used + 1) > emu_cap) {
        size_t cap = emu_cap ? emu_cap * 2 : 1024;
        AllocSlot *t = calloc(cap, sizeof *t);
        if (!t) return 0;
        for (size_t i = 0; i < emu_cap; i++) {
            if (emu_slots[i].key <= SLOT_GONE) continue;
            size_t j = slot_of(emu_slots[i].key, cap);
            while (t[j].key != SLOT_EMPTY) j = (j + 1) & (cap - 1);
            t[j] = emu_slots[i];
        }
        free(emu_slots);
        emu_slots = t;
        emu_cap = cap;
        emu_used = 0;
        for (size_t i = 0; i < cap; i++) emu_used += t[i].key != SLOT_EMPTY;
    }
    size_t j = slot_of(key, emu_cap);
    while (emu_slots[j].key > SLOT_GONE) j = (j + 1) & (emu_cap - 1);
    if (emu_slots[j].key == SLOT_EMPTY) emu_used++;
    emu_slots[j] = (AllocSlot){key, bytes, kind};
    return 1;
}

// The slot holding key, or NULL. Lock held.
static AllocSlot *table_find(uintptr_t key) {
    if (!emu_cap) return NULL;
    for (size_t j = slot_of(key, emu_cap);; j = (j + 1) & (emu_cap - 1)) {
        if (emu_slots[j].key == key) return &emu_slots[j];
        if (emu_slots[j].key == SLOT_EMPTY) return NULL;
    }
}

// Allocates `bytes` (256-aligned) of the given kind; device memory counts against the limit
// and is filled with garbage.
static cudaError_t emu_alloc(void **out, size_t bytes, int kind) {
    if (!out) return emu_fail(cudaErrorInvalidValue);
    *out = NULL;
    if (device_count() == 0) return emu_fail(cudaErrorNoDevice);
    size_t limit = kind == KIND_DEVICE ? memory_limit() : SIZE_MAX;
    pthread_mutex_lock(&emu_alloc_lock);
    cudaError_t e = cudaSuccess;
    void *p = NULL;
    if (kind == KIND_DEVICE && (bytes > limit || emu_device_bytes > limit - bytes)) {
        e = cudaErrorMemoryAllocation;
    } else if (posix_memalign(&p, 256, bytes) != 0 || (!p && !(p = malloc(1)))) {
        e = cudaErrorMemoryAllocation;
    } else if (!table_put((uintptr_t)p, bytes, kind)) {
        free(p);
        e = cudaErrorMemoryAllocation;
    } else if (kind == KIND_DEVICE) {
        emu_device_bytes += bytes;
    }
    pthread_mutex_unlock(&emu_alloc_lock);
    if (e != cudaSuccess) return emu_fail(e);
    if (kind == KIND_DEVICE) memset(p, EMU_GARBAGE_BYTE, bytes);
    *out = p;
    return cudaSuccess;
}

// Frees p if the table has it with this kind; NULL is fine.
static cudaError_t emu_release(void *p, int kind) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&emu_alloc_lock);
    AllocSlot *s = table_find((uintptr_t)p);
    int ok = s && s->kind == kind;
    if (ok) {
        if (kind == KIND_DEVICE) emu_device_bytes -= s->bytes;
        s->key = SLOT_GONE;
    }
    pthread_mutex_unlock(&emu_alloc_lock);
    if (!ok) {
        fprintf(stderr, "emu: %s(%p): not a pointer from %s\n",
                kind == KIND_DEVICE ? "cudaFree" : "cudaFreeHost", p,
                kind == KIND_DEVICE ? "cudaMalloc" : "cudaMallocHost/cudaHostAlloc");
        return emu_fail(cudaErrorInvalidValue);
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return emu_alloc(devPtr, size, KIND_DEVICE); }
cudaError_t cudaFree(void *devPtr) { return emu_release(devPtr, KIND_DEVICE); }
cudaError_t cudaMallocHost(void **ptr, size_t size) { return emu_alloc(ptr, size, KIND_HOST); }
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
    if (flags != cudaHostAllocDefault) return emu_fail(cudaErrorInvalidValue);
    return emu_alloc(p, size, KIND_HOST);
}
cudaError_t cudaFreeHost(void *ptr) { return emu_release(ptr, KIND_HOST); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    if (!free_bytes || !total) return emu_fail(cudaErrorInvalidValue);
    size_t limit = memory_limit();
    pthread_mutex_lock(&emu_alloc_lock);
    size_t used = emu_device_bytes;
    pthread_mutex_unlock(&emu_alloc_lock);
    *total = limit;
    *free_bytes = used < limit ? limit - used : 0;
    return cudaSuccess;
}

// --- copies and sets: synchronous ---------------------------------------------------------
static cudaError_t memcpy_now(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    if ((unsigned)kind > cudaMemcpyDefault) return emu_fail(cudaErrorInvalidValue);
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return emu_fail(cudaErrorInvalidValue);
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    emu_trace(-1, "memcpy-sync", "%zu", count);
    return memcpy_now(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    static const char *const KIND[] = {"H2H", "H2D", "D2H", "D2D", "default"};
    if ((unsigned)kind <= cudaMemcpyDefault)
        emu_trace(emu_stream_id(stream), "memcpy", "%s %zu", KIND[kind], count);
    return memcpy_now(dst, src, count, kind);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    if (count == 0) return cudaSuccess;
    if (!devPtr) return emu_fail(cudaErrorInvalidValue);
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "memset", "%zu", count);
    return cudaMemset(devPtr, value, count);
}

// --- errors -------------------------------------------------------------------------------
cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu_last_error;
    emu_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return emu_last_error; }

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}
