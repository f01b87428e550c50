// backend/cuda/cuda_common.cuh: what every kernel file includes: the launch macro, shared
// memory, and warp/block reductions. Written once for both builds:
//   * GPU (nvcc): plain CUDA; CUDA_LAUNCH is kernel<<<grid, block, smem, stream>>>(...).
//   * emulator (g++, MEGAC_CUDA_EMU): backend/cuda/emu/emu_kernel.h defines threadIdx,
//     __syncthreads, __shfl_*_sync, __shared__ (one copy per block: blocks run in turn) and
//     runs each block's threads as fibers (or real threads); CUDA_LAUNCH checks the limits.
// Rules for kernels (so that both builds agree): blockDim.x a multiple of 32 wherever warp
// shuffles are used, and every thread of a warp reaches each shuffle; no atomics on floats;
// no inline PTX, raw mma or cp.async (a plain path is needed for the emulator), tensor cores
// only through <mma.h>'s nvcuda::wmma 16x16x16 (emulated: emu/include/mma.h); ints use
// ternaries, not min/max (the host compiler has no device overloads); shared memory beyond
// 48 KB needs cudaFuncSetAttribute (none here so far); bf16/fp16 values only through
// load_f32 / store_from_f32 or vec16_f32 / vec16_set (the emulator's __nv_bfloat16 and
// __half have no operators or conversions from float: emu/include/cuda_bf16.h, cuda_fp16.h);
// 16-byte accesses only through vec16_load / vec16_store (they fall back to scalars).
#pragma once
#include "backend/cuda/cuda_internal.h"

#include <cuda_bf16.h>  // defines: __nv_bfloat16, __float2bfloat16_rn, __bfloat162float
#include <cuda_fp16.h>  // defines: __half, __float2half_rn, __half2float
#include <string.h>     // defines: memcpy (the 16-byte word into Vec16 and back)

#ifdef MEGAC_CUDA_EMU
#include "backend/cuda/emu/emu_kernel.h"  // defines: threadIdx, __syncthreads, emu_launch
#define CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                                 \
    do {                                                                                    \
        emu_launch(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (stream),      \
                   __VA_ARGS__);                                                            \
        CUDA_CHECK(cudaGetLastError());                                                     \
    } while (0)
// Dynamic shared memory of the launch (the `smem` bytes), as an array of T.
#define DYNAMIC_SHARED(T, name) T *name = (T *)emu_dynamic_shared()
#else
#define CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                                 \
    do {                                                                                    \
        kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);                        \
        CUDA_CHECK(cudaGetLastError());                                                     \
    } while (0)
#define DYNAMIC_SHARED(T, name)                                                             \
    extern __shared__ __align__(16) unsigned char megac_dynamic_smem_[];                    \
    T *name = reinterpret_cast<T *>(megac_dynamic_smem_)
#endif

// --- storage types of activations (be->act) -------------------------------------------------
// Kernels that touch activations are templated on their storage type T (float,
// __nv_bfloat16 or __half): every load converts to float, the arithmetic is fp32, every store
// rounds to nearest even. With T = float both are plain loads and stores (the fp32 path).
static __device__ __forceinline__ float load_f32(const float *p) { return *p; }
static __device__ __forceinline__ float load_f32(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float load_f32(const __half *p) { return __half2float(*p); }
static __device__ __forceinline__ void store_from_f32(float *p, float v) { *p = v; }
static __device__ __forceinline__ void store_from_f32(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void store_from_f32(__half *p, float v) { *p = __float2half_rn(v); }

// A fully unrolled loop (nvcc: per-thread arrays indexed by the loop stay in registers); the
// emulator's host compiler gets nothing (it would warn about an unknown pragma).
#ifdef MEGAC_CUDA_EMU
#define CUDA_UNROLL
#else
#define CUDA_UNROLL _Pragma("unroll")
#endif

// --- 16-byte access (128-bit loads and stores) -------------------------------------------------
// Vec16<T> is 16 bytes of T: 8 bf16/fp16 or 4 fp32 (Vec16<T>::N). vec16_load / vec16_store move
// the first n (0 <= n <= N) elements at p: one 16-byte access when n == N and p is 16-byte
// aligned, else n scalar accesses (the tail of a row or array, or a misaligned pointer: a
// row-major (rows, C) buffer has 16-byte aligned rows only when C * sizeof(T) % 16 == 0);
// elements past n load as zero and are not stored. The 16-byte word is the CUDA vector type
// uint4 on the GPU (ld/st.global.v4); under the emulator a 16-byte memcpy (GCC 12 merged the
// scalar branch's loads with the aligned-struct load into one movaps at a misaligned address).
// vec16_f32 / vec16_set read and write element i in fp32 (load_f32 / store_from_f32).
#ifdef MEGAC_CUDA_EMU
struct __align__(16) vec16_word { unsigned int x, y, z, w; };
#else
typedef uint4 vec16_word;
#endif
template <typename T>
struct __align__(16) Vec16 {
    static constexpr int N = 16 / (int)sizeof(T);
    T v[16 / sizeof(T)];
};

template <typename T>
static __device__ __forceinline__ bool vec16_aligned(const T *p) {
    return ((unsigned long long)(size_t)p & 15ull) == 0;
}

template <typename T>
static __device__ __forceinline__ Vec16<T> vec16_load(const T *p, int n) {
    Vec16<T> r;
    if (n == Vec16<T>::N && vec16_aligned(p)) {
#ifdef MEGAC_CUDA_EMU  // a byte copy: the host compiler may merge the two branches' loads
        memcpy(&r, p, sizeof r);  // into one, and must not make it an aligned (movaps) one
#else
        vec16_word w = *reinterpret_cast<const vec16_word *>(p);
        memcpy(&r, &w, sizeof w);
#endif
    } else {
CUDA_UNROLL
        for (int i = 0; i < Vec16<T>::N; i++) {
            if (i < n) r.v[i] = p[i];
            else store_from_f32(&r.v[i], 0.0f);
        }
    }
    return r;
}

template <typename T>
static __device__ __forceinline__ void vec16_store(T *p, const Vec16<T> &r, int n) {
    if (n == Vec16<T>::N && vec16_aligned(p)) {
#ifdef MEGAC_CUDA_EMU
        memcpy(p, &r, sizeof r);
#else
        vec16_word w;
        memcpy(&w, &r, sizeof w);
        *reinterpret_cast<vec16_word *>(p) = w;
#endif
    } else {
CUDA_UNROLL
        for (int i = 0; i < Vec16<T>::N; i++)
            if (i < n) p[i] = r.v[i];
    }
}

template <typename T>
static __device__ __forceinline__ float vec16_f32(const Vec16<T> &r, int i) {
    return load_f32(&r.v[i]);
}
template <typename T>
static __device__ __forceinline__ void vec16_set(Vec16<T> &r, int i, float v) {
    store_from_f32(&r.v[i], v);
}

// Elements of chunk k of a length-n array in chunks of N: N, fewer for the last, 0 past it.
// Pure.
static __device__ __forceinline__ int vec16_count(size_t n, size_t k, int N) {
    size_t at = k * (size_t)N;
    return at >= n ? 0 : n - at < (size_t)N ? (int)(n - at) : N;
}

// The grid-stride loop over the chunks of a length-n array, shared by the pointwise kernels:
//   for (size_t k = grid_first(), nk = vec16_chunks(n, V); k < nk; k += grid_stride()) {
//       int cnt = vec16_count(n, k, V);  // elements k * V ... k * V + cnt - 1
// grid_first: this thread's first index (block-major); grid_stride: the threads of the grid;
// both size_t, so indices past 2^31 do not wrap. vec16_chunks: ceil(n / N). Pure.
static __device__ __forceinline__ size_t grid_first(void) {
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ size_t grid_stride(void) {
    return (size_t)gridDim.x * blockDim.x;
}
static __device__ __forceinline__ size_t vec16_chunks(size_t n, int N) { return (n + N - 1) / N; }

// Calls fn<T>(...) with T the storage type of `act` (a BackendDType): how every launcher
// picks the kernel instantiation for the backend's activations.
#define ACT_DISPATCH(act, fn, ...)                                                          \
    do {                                                                                    \
        switch (act) {                                                                      \
        case BACKEND_BF16: fn<__nv_bfloat16>(__VA_ARGS__); break;                           \
        case BACKEND_F16: fn<__half>(__VA_ARGS__); break;                                   \
        default: fn<float>(__VA_ARGS__); break;                                             \
        }                                                                                   \
    } while (0)

// Address of element i of an array whose elements are esz bytes (launchers hold activation
// buffers as void *, their element size backend_dtype_size(be->act)). Pure.
static inline void *elem_at(void *p, size_t i, size_t esz) { return (char *)p + i * esz; }
static inline const void *elem_at(const void *p, size_t i, size_t esz) {
    return (const char *)p + i * esz;
}

#define WARP 32
#define FULL_MASK 0xffffffffu

// Sum / max of v over the 32 lanes of the warp; every lane gets the result (xor butterfly:
// the same order on every lane, so all lanes hold the same bits).
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(FULL_MASK, v, o);
        v = w > v ? w : v;
    }
    return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `buf` is __shared__ scratch of 32 elements. Contains two __syncthreads: every
// thread of the block must call it.
template <typename F>
static __device__ __forceinline__ F block_sum(F v, F *buf) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    F t = lane < nwarps ? buf[lane] : (F)0;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(FULL_MASK, t, o);
    __syncthreads();  // buf may be reused by the caller
    return t;
}

// Max of v over the block, as block_sum.
static __device__ __forceinline__ float block_max(float v, float *buf) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    v = warp_max(v);
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    float t = lane < nwarps ? buf[lane] : -3.402823466e38f;
    t = warp_max(t);
    __syncthreads();
    return t;
}
