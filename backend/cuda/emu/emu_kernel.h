// backend/cuda/emu/emu_kernel.h: CUDA kernels on CPU threads (the emulator's device side).
// C++20 only: the CUDA backend's .cu/.cuh files are compiled by g++ against this header
// (through cuda_common.cuh, MEGAC_CUDA_EMU), so the same kernels run in CI without a GPU.
//
// Model
//   * A launch runs its blocks one after another (x fastest, then y, z). Each thread of a
//     block has its own threadIdx (thread_local; fibers swap it in at each turn) and its
//     own stack. Two
//     engines run them (emu_kernel.cpp): by default each thread is a fiber on the launching
//     host thread, run in turns (a thread runs until it waits at a barrier, then the next
//     one runs); with MEGAC_EMU_ENGINE=threads, and always under ThreadSanitizer, each is a
//     REAL thread of a persistent pool, so ThreadSanitizer sees races between them.
//     AddressSanitizer sees their out-of-bounds accesses on either. A block ends when all
//     its threads have returned. Launches are synchronous (the stream is only traced: emu_trace.c).
//   * __syncthreads is a barrier of the block's threads; a warp is 32 consecutive threads in
//     x-major linear order (the last one partial when the block size is not a multiple of
//     32). __shfl_*_sync, __syncwarp and the votes are a barrier of the warp's threads with
//     per-lane exchange slots: every lane of the warp must take part. As on hardware, a
//     thread that returns no longer counts at barriers; a shuffle that reads a lane that has
//     returned (or does not exist) gets NaN/-1 bits and prints a warning once per launch.
//   * __shared__ is `static`: one copy per kernel function, shared by the block's threads;
//     blocks run in turn, so that is one copy per block. Dynamic shared memory
//     (DYNAMIC_SHARED) is a per-launch allocation of exactly `smem` bytes (ASan sees
//     overruns), filled with NaN bytes, as CUDA does not zero it; static __shared__ keeps
//     whatever the previous block left.
//   * Launch limits are checked as on sm_90 (threads per block 1..1024, block.z <= 64,
//     grid.x < 2^31, grid.y/z <= 65535, dynamic shared memory <= 227 KB, no zero
//     dimension): a violation prints "emu: launch of <kernel>: ..." to stderr, sets the last
//     error to cudaErrorInvalidConfiguration and runs nothing.
// Limits: no independent thread progress beyond barriers (a kernel that spins waiting on
// another thread or block without a barrier deadlocks: blocks never run concurrently, so
// races between blocks are invisible to ThreadSanitizer; threads of one block waiting at
// barriers that can never all open, e.g. half a warp at __syncthreads and the rest at a
// shuffle, abort with "emu: kernel K: block (x,y,z): ... a deadlock" on fibers); no
// atomics on floats (not defined: the backend's rule), no cooperative groups, no inline PTX;
// warp masks other than "all live lanes" are not modelled; timing is meaningless. Expect
// ~1000x slower than a GPU: on fibers every barrier (block end, __syncthreads, each shuffle)
// costs ~50 ns per thread of the block (~15 us for 256 threads); on real threads a futex
// hand-over per thread, ~1 us each on 2 cores (~300 us for 256 threads; emu_bench measures
// both). Keep emulated shapes small.
#pragma once
#ifndef __cplusplus
#error "emu_kernel.h is C++: kernels are compiled by the host C++ compiler"
#endif
#include <cuda_runtime.h>  // defines: dim3, uint3, cudaStream_t, __global__, __device__

#include <math.h>  // defines: expf, logf, sqrtf, tanhf, fmaxf, ... unqualified
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __shared__ static
#define __constant__ static

// --- built-in variables: this kernel thread's indices (thread_local, set by the pool) ------
extern thread_local constinit uint3 threadIdx;
extern thread_local constinit uint3 blockIdx;
extern thread_local constinit dim3 blockDim;
extern thread_local constinit dim3 gridDim;
inline constexpr int warpSize = 32;

// --- synchronisation (emu_kernel.cpp). Called outside a kernel they abort. ---------------
// Waits until every live thread of the block has called it.
void __syncthreads(void);
// Waits until every live lane of the warp has called it (mask not modelled).
void __syncwarp(unsigned mask = 0xffffffffu);
void __threadfence(void);
void __threadfence_block(void);

enum EmuShflMode { EMU_SHFL_IDX, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR };
// The warp exchange behind __shfl_*_sync: this lane offers `bits`, gets the bits of the
// source lane (PTX shfl rules for mode, b, width). A barrier of the warp's lanes.
uint64_t emu_shfl(uint64_t bits, EmuShflMode mode, int b, int width);
// Bit i of the result: lane i is live and passed pred != 0; *live (if not NULL) gets the
// live lanes. A barrier of the warp's lanes.
unsigned emu_ballot(int pred, unsigned *live = nullptr);

template <class T>
static inline T emu_shfl_typed(T v, EmuShflMode mode, int b, int width) {
    static_assert(std::is_arithmetic_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                  "__shfl_*_sync: int, unsigned, long long, float or double");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = emu_shfl(bits, mode, b, width);
    std::memcpy(&v, &bits, sizeof v);
    return v;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    (void)mask;
    return emu_shfl_typed(var, EMU_SHFL_IDX, srcLane, width);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    (void)mask;
    return emu_shfl_typed(var, EMU_SHFL_UP, (int)delta, width);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    (void)mask;
    return emu_shfl_typed(var, EMU_SHFL_DOWN, (int)delta, width);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    (void)mask;
    return emu_shfl_typed(var, EMU_SHFL_XOR, laneMask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_ballot(pred) & mask; }
static inline int __any_sync(unsigned mask, int pred) { return (emu_ballot(pred) & mask) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
    unsigned live, yes = emu_ballot(pred, &live);
    return (yes & mask) == (live & mask);
}

// --- device math the host library lacks ---------------------------------------------------
// glibc already declares __expf & co. as internal functions, so these are macros.
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __powf(x, y) powf(x, y)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
template <class T>
static inline T __ldg(const T *p) { return *p; }
static inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
static inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) {
    long long i;
    std::memcpy(&i, &x, 8);
    return i;
}
static inline double __longlong_as_double(long long i) {
    double x;
    std::memcpy(&x, &i, 8);
    return x;
}

// --- integer atomics (seq_cst; visible to ThreadSanitizer). None on floats, on purpose. ----
template <class T>
concept EmuAtomicInt = std::is_same_v<T, int> || std::is_same_v<T, unsigned> ||
                       std::is_same_v<T, unsigned long long>;
template <EmuAtomicInt T> static inline T atomicAdd(T *p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <EmuAtomicInt T> static inline T atomicSub(T *p, T v) {
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
template <EmuAtomicInt T> static inline T atomicExch(T *p, T v) {
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
template <EmuAtomicInt T> static inline T atomicCAS(T *p, T expected, T desired) {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
template <EmuAtomicInt T> static inline T atomicMax(T *p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST,
                                                    __ATOMIC_SEQ_CST)) {}
    return old;
}
template <EmuAtomicInt T> static inline T atomicMin(T *p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST,
                                                    __ATOMIC_SEQ_CST)) {}
    return old;
}

// --- launches -------------------------------------------------------------------------------
// Runs one kernel thread: calls the kernel with the launch's arguments.
typedef void (*EmuThunk)(const void *call);

// Checks the launch configuration, then runs every block of the grid on the pool, each
// thread calling thunk(call). Synchronous. On a bad configuration: one stderr line, last
// error cudaErrorInvalidConfiguration, nothing runs.
void emu_launch_erased(const char *name, EmuThunk thunk, const void *call, dim3 grid, dim3 block,
                       size_t smem);

// The launch of kernel `name` on `stream`, in the MEGAC_EMU_TRACE trace (emu_trace.c) when
// tracing; else nothing. Never fails.
extern "C" void emu_trace_launch(cudaStream_t stream, const char *name);

// The running launch's dynamic shared memory (`smem` bytes, NaN-filled). Inside a kernel only.
void *emu_dynamic_shared(void);

template <class... P>
struct EmuCall {
    void (*kernel)(P...);
    std::tuple<P...> args;  // converted once, copied into each thread's call
};

template <class... P>
static void emu_call_thunk(const void *call) {
    const EmuCall<P...> *c = static_cast<const EmuCall<P...> *>(call);
    std::apply(c->kernel, c->args);
}

// kernel<<<grid, block, smem, stream>>>(args...), as CUDA_LAUNCH in cuda_common.cuh calls it:
// converts args to the kernel's parameter types once, then runs the grid (see above).
template <class... P, class... A>
void emu_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    emu_trace_launch(stream, name);
    const EmuCall<P...> call{kernel, std::tuple<P...>(std::forward<A>(args)...)};
    emu_launch_erased(name, &emu_call_thunk<P...>, &call, grid, block, smem);
}
