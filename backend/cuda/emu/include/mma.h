// backend/cuda/emu/include/mma.h: the CPU emulator's stand-in for CUDA's warp matrix functions
// (nvcuda::wmma), shape 16x16x16 only: matrix_a / matrix_b fragments of __half or
// __nv_bfloat16 (row_major or col_major), float accumulators. C++ only (the kernels' language).
//
// Model. A fragment is a per-lane object. Real WMMA spreads a tile over the warp's 32 lanes in
// an unspecified element-to-lane mapping; here every lane holds the WHOLE tile (num_elements =
// 256, x[] in row-major order of the tile: a (m, k), b (k, n), accumulator (m, n)), so a loop
// over x[] with one operation on every element (scale, convert, fill) means the same as on a
// GPU, while code that assumes which row or column x[i] belongs to is wrong on both.
//   * fill_fragment, load_matrix_sync and mma_sync: every lane on its own full copy; no cross-
//     lane exchange. mma_sync sums in fp32, k in order (a GPU's order is unspecified).
//   * store_matrix_sync: lane l writes only the elements i with i % 32 == l (as on a GPU, each
//     lane stores a share), so a read of the stored tile by other lanes needs __syncwarp()
//     first, as on a GPU, and ThreadSanitizer sees the race when it is missing.
// The GPU's rules are checked (a violation prints "emu: wmma ..." and aborts): the pointer
// 256-bit (32-byte) aligned, ldm a multiple of 8 elements for 16-bit types and of 4 for float
// (16 bytes), and the layout of an accumulator load/store mem_row_major or mem_col_major.
#pragma once
#include <cuda_bf16.h>  // defines: __nv_bfloat16, __bfloat162float
#include <cuda_fp16.h>  // defines: __half, __half2float

#include "backend/cuda/emu/emu_kernel.h"  // defines: threadIdx, blockDim

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emu wmma: only the 16x16x16 shape");
    static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                   : std::is_same_v<T, __half> ||
                                                         std::is_same_v<T, __nv_bfloat16>,
                  "emu wmma: a/b fragments of __half or __nv_bfloat16, float accumulators");

  public:
    typedef T element_type;
    typedef T storage_element_type;
    enum { num_elements = 256 };
    T x[num_elements];
};

static inline float emu_wmma_f32(float v) { return v; }
static inline float emu_wmma_f32(__half v) { return __half2float(v); }
static inline float emu_wmma_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline void emu_wmma_set(float *p, float v) { *p = v; }
static inline void emu_wmma_set(__half *p, float v) { *p = __float2half_rn(v); }
static inline void emu_wmma_set(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

// Aborts unless p is 32-byte aligned and ldm a multiple of 16 bytes (the GPU's rules).
template <class T>
static inline void emu_wmma_check(const char *what, const T *p, unsigned ldm) {
    if ((uintptr_t)p % 32 != 0) {
        fprintf(stderr, "emu: wmma %s: pointer %p is not 256-bit aligned\n", what, (const void *)p);
        abort();
    }
    if ((ldm * sizeof(T)) % 16 != 0 || ldm < 16) {
        fprintf(stderr, "emu: wmma %s: ldm %u is not a multiple of %zu elements (or < 16)\n",
                what, ldm, 16 / sizeof(T));
        abort();
    }
}

// This thread's lane in its warp (x-major linear thread index mod 32, as emu_kernel.h).
static inline int emu_wmma_lane(void) {
    return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32);
}

template <class Use, class T, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int i = 0; i < 256; i++) emu_wmma_set(&f.x[i], v);
}

// Tile element (r, c) of a fragment of layout L: row_major at p[r * ldm + c], col_major at
// p[c * ldm + r].
template <class T, class L>
static inline void emu_wmma_load(T *x, const T *p, unsigned ldm, bool col, const char *what) {
    emu_wmma_check(what, p, ldm);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) x[r * 16 + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

template <class Use, class T, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    static_assert(!std::is_same_v<Use, accumulator>, "emu wmma: accumulator loads take a layout");
    emu_wmma_load<T, L>(f.x, p, ldm, std::is_same_v<L, col_major>, "load_matrix_sync");
}

static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t layout) {
    emu_wmma_load<float, void>(f.x, p, ldm, layout == mem_col_major, "load_matrix_sync");
}

// Lane l writes the elements i = l, l + 32, ... (see the header comment).
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout) {
    emu_wmma_check("store_matrix_sync", p, ldm);
    for (int i = emu_wmma_lane(); i < 256; i += 32) {
        int r = i / 16, c = i % 16;
        p[layout == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[i];
    }
}

// d = a b + c (d may be c), fp32 sums over k in order.
template <class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    float af[256], bf[256], out[256];
    for (int i = 0; i < 256; i++) af[i] = emu_wmma_f32(a.x[i]), bf[i] = emu_wmma_f32(b.x[i]);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++) s += af[m * 16 + k] * bf[k * 16 + n];
            out[m * 16 + n] = c.x[m * 16 + n] + s;
        }
    for (int i = 0; i < 256; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
