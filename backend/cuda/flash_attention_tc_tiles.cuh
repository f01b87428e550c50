// backend/cuda/flash_attention_tc_tiles.cuh: the tile helpers of the tensor-core attention
// kernels (flash_attention_tc.cuh, whose header states the scheme): the block shape, tile
// loads into shared memory (16 bytes a thread where aligned), WMMA products over a tile, the
// index tile that says where a lane's accumulator elements sit, the in-register row rescale
// and the row stores through a warp's scratch.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: load_f32, store_from_f32, Vec16, WARP

#include <mma.h>  // defines: nvcuda::wmma (the emulator's stand-in under MEGAC_CUDA_EMU)

#define FTC_WARPS 4
#define FTC_THREADS (FTC_WARPS * WARP)
#define FTC_ROWS (16 * FTC_WARPS)  // rows of a block's own tile
#define FTC_PAD16 8                // E row padding, elements (ldm stays a multiple of 8)
#define FTC_PADF 4                 // fp32 row padding, elements (ldm a multiple of 4)
#define FTC_SMEM_MAX 49152         // static shared memory per block
#define FTC_LOG2E 1.44269504088896341f  // exp(x) = exp2(x log2(e)): scores and lse in base 2
#define FTC_LN2 0.693147180559945309f

// Unrolled loops keep the fragment arrays in registers (nvcc); the emulator ignores the hint.
#ifdef MEGAC_CUDA_EMU
#define FTC_UNROLL
#else
#define FTC_UNROLL _Pragma("unroll")
#endif
#ifdef MEGAC_CUDA_EMU
#define FTC_NO_UNROLL
#else
#define FTC_NO_UNROLL _Pragma("unroll 1")
#endif

namespace ftc {
namespace wmma = nvcuda::wmma;
template <typename E> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <typename E> using FragBR = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
template <typename E> using FragBC = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

static constexpr size_t up128(size_t b) { return (b + 127) / 128 * 128; }
static constexpr size_t maxz(size_t a, size_t b) { return a > b ? a : b; }
static constexpr size_t IDX_BYTES = 16 * 16 * 4;  // the index tile
}  // namespace ftc

// sidx (16, 16) fp32 = 16 r + c at (r, c): the index tile. All threads of the block (a
// __syncthreads before its first use).
static __device__ __forceinline__ void ftc_fill_index(float *sidx) {
    for (int i = threadIdx.x; i < 256; i += FTC_THREADS) sidx[i] = (float)i;
}

// idx = the index tile as an accumulator fragment: element i of every accumulator fragment of
// this lane sits at row (int)idx.x[i] >> 4, column (int)idx.x[i] & 15 of its tile (the same
// unspecified mapping for every fragment of the type). Every lane of the warp.
static __device__ __forceinline__ void ftc_index(ftc::FragC &idx, const float *sidx) {
    nvcuda::wmma::load_matrix_sync(idx, sidx, 16, nvcuda::wmma::mem_row_major);
}

// Whether this lane writes element i of its accumulator fragments to memory: on a GPU the
// lanes' elements partition the tile (num_elements * WARP == 256): all of them; where every
// lane holds the whole tile (the emulator: 256 elements) only i % WARP == lane, as its
// store_matrix_sync does. Pure.
static __device__ __forceinline__ bool ftc_owns(int i, int lane) {
    return ftc::FragC::num_elements * WARP == 256 || i % WARP == lane;
}

// dst (R, HS + FTC_PAD16) = rows [row0, row0 + R) of src (row t at src + t*ld, hs columns);
// rows >= T and columns >= hs are 0. When hs == HS, ld % 8 == 0 and src is 16-byte aligned
// (every row then is), each thread moves 8 elements at a time (Vec16: 16-byte accesses); else
// one element. The same bits either way. All threads of the block.
template <int R, int HS, typename E>
static __device__ __forceinline__ void ftc_load_rows(E *dst, const E *src, size_t ld, int row0,
                                                     int T, int hs) {
    constexpr int LD = HS + FTC_PAD16, V = Vec16<E>::N, CH = HS / V;  // CH chunks a row
    if (hs == HS && ld % V == 0 && vec16_aligned(src)) {
        for (int i = threadIdx.x; i < R * CH; i += FTC_THREADS) {
            int r = i / CH, c = (i % CH) * V, t = row0 + r;
            Vec16<E> x = vec16_load(src + (size_t)(t < T ? t : 0) * ld + c, t < T ? V : 0);
            vec16_store(dst + r * LD + c, x, V);  // n = 0 above: zeros
        }
        return;
    }
    for (int i = threadIdx.x; i < R * HS; i += FTC_THREADS) {
        int r = i / HS, c = i % HS, t = row0 + r;
        if (t < T && c < hs) dst[r * LD + c] = src[(size_t)t * ld + c];
        else store_from_f32(dst + r * LD + c, 0.0f);
    }
}

// n (<= 64) floats of src from row0, times mul, into dst, 0 at or past T. All threads.
static __device__ __forceinline__ void ftc_load_stat(float *dst, const float *src, float mul,
                                                     int row0, int T, int n) {
    int t = row0 + (int)threadIdx.x;
    if ((int)threadIdx.x < n) dst[threadIdx.x] = t < T ? mul * src[t] : 0.0f;
}

// frag[k] = rows [0, 16) x columns [16k, 16k + 16) of the (16, HS) tile at p (ldm ld).
template <int HS, typename E>
static __device__ __forceinline__ void ftc_load_a(ftc::FragA<E> *frag, const E *p, int ld) {
FTC_UNROLL
    for (int k = 0; k < HS / 16; k++) nvcuda::wmma::load_matrix_sync(frag[k], p + 16 * k, ld);
}

// s (16, 16) = A (16, HS: frag) @ B^T, B the 16 rows at p (ldm ld): row-dot products.
template <int HS, typename E>
static __device__ __forceinline__ void ftc_dot_rows(ftc::FragC &s, const ftc::FragA<E> *a,
                                                    const E *p, int ld) {
    nvcuda::wmma::fill_fragment(s, 0.0f);
FTC_UNROLL
    for (int k = 0; k < HS / 16; k++) {
        ftc::FragBC<E> b;
        nvcuda::wmma::load_matrix_sync(b, p + 16 * k, ld);
        nvcuda::wmma::mma_sync(s, a[k], b, s);
    }
}

// acc[c] += A (16, KN at pa, ldm lda) @ B (KN, HS at pb, ldm ldb), c over the HS/16 columns.
template <int HS, int KN, typename E>
static __device__ __forceinline__ void ftc_mma_rows(ftc::FragC *acc, const E *pa, int lda,
                                                    const E *pb, int ldb) {
FTC_UNROLL
    for (int k = 0; k < KN / 16; k++) {
        ftc::FragA<E> a;
        nvcuda::wmma::load_matrix_sync(a, pa + 16 * k, lda);
FTC_UNROLL
        for (int c = 0; c < HS / 16; c++) {
            ftc::FragBR<E> b;
            nvcuda::wmma::load_matrix_sync(b, pb + (size_t)16 * k * ldb + 16 * c, ldb);
            nvcuda::wmma::mma_sync(acc[c], a, b, acc[c]);
        }
    }
}

// acc[c] (16 rows) *= rowscale[r], in registers (the row of each element from the index
// tile sidx). Every lane of the warp.
template <int HS>
static __device__ __forceinline__ void ftc_scale_rows(ftc::FragC *acc, const float *sidx,
                                                      const float *rowscale) {
    ftc::FragC idx;
    ftc_index(idx, sidx);
FTC_UNROLL
    for (int i = 0; i < ftc::FragC::num_elements; i++) {
        float a = rowscale[(int)idx.x[i] >> 4];
FTC_UNROLL
        for (int c = 0; c < HS / 16; c++) acc[c].x[i] *= a;
    }
}

// Rows t0 + r (r < 16, t0 + r < T) of dst (row t at dst + t*ld, hs columns) = mul *
// rowscale[r] * acc[c] through the warp's scratch: lane l writes 8 columns of row l / 2 (one
// 16-byte store where the row is aligned, Vec16). Every lane of the warp.
template <int HS, typename E>
static __device__ __forceinline__ void ftc_store_rows(E *dst, size_t ld, int t0, int T, int hs,
                                                      const ftc::FragC *acc, float *scr,
                                                      int sld, const float *rowscale,
                                                      float mul) {
    static_assert(Vec16<E>::N == 8, "a 16-column fragment row is two 8-element chunks");
    int lane = threadIdx.x % WARP, r = lane / 2, j = 8 * (lane % 2), t = t0 + r;
    float s = mul * (rowscale ? rowscale[r] : 1.0f);
FTC_UNROLL
    for (int c = 0; c < HS / 16; c++) {
        nvcuda::wmma::store_matrix_sync(scr, acc[c], sld, nvcuda::wmma::mem_row_major);
        __syncwarp();
        int col = 16 * c + j, n = t < T && col < hs ? (hs - col < 8 ? hs - col : 8) : 0;
        if (n > 0) {
            Vec16<E> y;
FTC_UNROLL
            for (int e = 0; e < 8; e++) vec16_set(y, e, s * scr[r * sld + j + e]);
            vec16_store(dst + (size_t)t * ld + col, y, n);
        }
        __syncwarp();
    }
}
