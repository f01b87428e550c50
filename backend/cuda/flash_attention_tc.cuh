// backend/cuda/flash_attention_tc.cuh: the tensor-core kernels of fused causal attention
// (--use-flash-attn with bf16/fp16 activations, head size 64 or 128): the same algorithm as
// flash_attention.cuh (online softmax forward; FlashAttention-2 backward split into a dk/dv
// kernel per key tile and a dq kernel per query tile, no atomics, (T, T) never stored), with
// every tile product on WMMA 16x16x16 fragments (E inputs, fp32 accumulators).
//
// Every kernel runs FTC_THREADS = 128 threads (4 warps); each warp owns 16 rows of the
// block's tile (query rows in the forward and dq kernels, key rows in the dk/dv kernel), so a
// block covers 64 rows. grid.x = B*NH heads, grid.y = tiles, heaviest causal tile first.
// Tiles live in shared memory as E (rows padded by FTC_PAD16 elements), zero past T and past
// hs. The mapping of a fragment's elements to lanes is unspecified, but it is discovered once:
// the block's index tile (16 r + c at (r, c)) loaded as an accumulator fragment says where each
// element of this lane's accumulators sits (ftc_index), so element-wise work (the rescale of
// O, the backward's mask, exp and ds) runs on the fragments in registers. Row reductions (the
// forward's max and sum) and the final stores go through a per-warp fp32 scratch: fragment
// stored (store_matrix_sync), __syncwarp, lanes work on the rows, __syncwarp. WMMA's rules:
// every fragment pointer 32-byte aligned (regions at 128-byte offsets, 16-row and 16-column
// steps), ldm a multiple of 8 for E and of 4 for float. The probabilities p and
// ds = p (dout.v - D) are rounded to E before their products (as FlashAttention does); all
// sums are fp32. Exponentials are exp2f of the scores times the softmax scale times log2(e)
// (one multiply); the stored lse stays the natural log (the backward scales it by log2(e)).
// Fixed order everywhere: the same bits every run.
#pragma once
#include "backend/cuda/flash_attention_tc_tiles.cuh"  // defines: FTC_*, ftc::, ftc_load_rows, ...

// --- forward ----------------------------------------------------------------------------------
// Shared memory (bytes): [scratch: the q tile while it is loaded into fragments, then per
// warp the scores (16, BK + PADF) fp32 and p (16, BK + PAD16) E] [k tile] [v tile] [alpha, l]
// [index tile].
template <typename E, int HS, int BK>
struct FtcFwd {
    static constexpr int LDH = HS + FTC_PAD16, LDS = BK + FTC_PADF, LDP = BK + FTC_PAD16;
    static constexpr size_t SW = ftc::up128(16 * LDS * 4), PW = ftc::up128(16 * LDP * sizeof(E));
    static constexpr size_t SCR =
        ftc::maxz(ftc::up128(FTC_ROWS * LDH * sizeof(E)), FTC_WARPS * (SW + PW));
    static constexpr size_t KV = ftc::up128(BK * LDH * sizeof(E));
    static constexpr size_t IDX = SCR + 2 * KV + 2 * FTC_ROWS * 4;
    static constexpr size_t BYTES = IDX + ftc::IDX_BYTES;
    static_assert(BYTES <= FTC_SMEM_MAX, "forward tiles exceed 48 KB of shared memory");
};

// One lane pair per row r = lane / 2 of the warp's 16 query rows (t = t0 + r): folds the
// scores sw[r] of the key tile at k0 (masked: key > t) into the running max m (base 2: of
// sl2 s, sl2 = the softmax scale times log2(e)) and sum l; pw[r] = exp2(sl2 s - m_new) as E;
// alpha[r] = exp2(m_old - m_new). Key 0 is in the first tile, so m is finite from then on.
// Every lane of the warp.
template <typename E, int BK>
static __device__ __forceinline__ void ftc_softmax_rows(const float *sw, int lds, E *pw, int ldp,
                                                        float *alpha, float &m, float &l, int t0,
                                                        int k0, float sl2) {
    int lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2, t = t0 + r;
    float mx = -INFINITY;
    for (int j = half; j < BK; j += 2)
        if (k0 + j <= t) mx = fmaxf(mx, sw[r * lds + j] * sl2);
    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
    float m_new = fmaxf(m, mx), sum = 0.0f;
    for (int j = half; j < BK; j += 2) {
        float e = k0 + j <= t ? exp2f(sw[r * lds + j] * sl2 - m_new) : 0.0f;
        store_from_f32(pw + r * ldp + j, e);
        sum += e;
    }
    sum += __shfl_xor_sync(FULL_MASK, sum, 1);
    float a = exp2f(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * a + sum;
    m = m_new;
    if (half == 0) alpha[r] = a;
}

// out (B, T, C), lse (B, NH, T; natural log) of query tile (reversed) blockIdx.y of head
// blockIdx.x; sl2 = the softmax scale times log2(e).
template <typename E, int HS, int BK>
static __global__ void __launch_bounds__(FTC_THREADS)
ftc_forward_kernel(E *out, float *lse, const E *qkv, int T, int NH, int hs, float sl2) {
    typedef FtcFwd<E, HS, BK> L;
    __shared__ __align__(128) unsigned char raw[L::BYTES];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * hs;
    int q0 = (gridDim.y - 1 - blockIdx.y) * FTC_ROWS, t0 = q0 + 16 * warp;
    size_t ld = 3 * (size_t)C;
    const E *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    E *sq = (E *)raw, *sk = (E *)(raw + L::SCR), *sv = (E *)(raw + L::SCR + L::KV);
    float *sw = (float *)(raw + warp * L::SW);                         // (16, LDS)
    E *pw = (E *)(raw + FTC_WARPS * L::SW + warp * L::PW);              // (16, LDP)
    float *alpha = (float *)(raw + L::SCR + 2 * L::KV) + 16 * warp;     // (16)
    float *lrow = (float *)(raw + L::SCR + 2 * L::KV) + FTC_ROWS + 16 * warp;  // (16)
    float *sidx = (float *)(raw + L::IDX);                                       // (16, 16)
    ftc_fill_index(sidx);
    ftc_load_rows<FTC_ROWS, HS>(sq, q, ld, q0, T, hs);
    __syncthreads();
    ftc::FragA<E> qf[HS / 16];
    ftc_load_a<HS>(qf, sq + 16 * warp * L::LDH, L::LDH);
    __syncthreads();  // the q tile is in fragments: its space becomes the scratch
    ftc::FragC o[HS / 16];
FTC_UNROLL
    for (int c = 0; c < HS / 16; c++) nvcuda::wmma::fill_fragment(o[c], 0.0f);
    float m = -INFINITY, l = 0.0f;  // of row lane / 2 (both lanes of the pair)
    int last = (q0 + FTC_ROWS < T ? q0 + FTC_ROWS : T) - 1;  // keys 0..last matter
    for (int k0 = 0; k0 <= last; k0 += BK) {
        ftc_load_rows<BK, HS>(sk, k, ld, k0, T, hs);
        ftc_load_rows<BK, HS>(sv, v, ld, k0, T, hs);
        __syncthreads();
        if (t0 + 15 >= k0 && t0 < T) {  // else every key of the tile is masked for this warp
FTC_UNROLL
            for (int n = 0; n < BK / 16; n++) {
                ftc::FragC s;
                ftc_dot_rows<HS>(s, qf, sk + 16 * n * L::LDH, L::LDH);
                nvcuda::wmma::store_matrix_sync(sw + 16 * n, s, L::LDS, nvcuda::wmma::mem_row_major);
            }
            __syncwarp();
            ftc_softmax_rows<E, BK>(sw, L::LDS, pw, L::LDP, alpha, m, l, t0, k0, sl2);
            __syncwarp();
            ftc_scale_rows<HS>(o, sidx, alpha);
            __syncwarp();  // a scheduling fence: the p @ v loads after the rescale (registers)
            ftc_mma_rows<HS, BK>(o, pw, L::LDP, sv, L::LDH);
        }
        __syncthreads();  // k, v read before the next tile overwrites them
    }
    if (lane % 2 == 0) lrow[lane / 2] = 1.0f / l;
    __syncwarp();
    ftc_store_rows<HS>(out + (size_t)b * T * C + (size_t)h * hs, (size_t)C, t0, T, hs, o, sw,
                       L::LDS, lrow, 1.0f);
    if (lane % 2 == 0 && t0 + lane / 2 < T)
        lse[(size_t)bh * T + t0 + lane / 2] = (m + log2f(l)) * FTC_LN2;  // natural log
}

// --- backward -----------------------------------------------------------------------------
// Per warp in both kernels: p, ds (16, N + PAD16) E, N the other side's tile (BK in the dq
// kernel, BQ in the dk/dv kernel); after the loop the start of it is the fp32 scratch
// (16, 16 + PADF) of the final stores.
template <typename E, int N>
struct FtcBwdWarp {
    static constexpr int LDP = N + FTC_PAD16, LDF = 16 + FTC_PADF;
    static constexpr size_t P = ftc::up128(16 * LDP * sizeof(E));
    static constexpr size_t BYTES = 2 * P;  // p, ds
    static_assert(16 * LDF * 4 <= BYTES, "the store scratch fits in p, ds");
};

// Shared memory of the backward kernels: [tiles: two (NT, LDH) E] [per-warp scratch]
// [index tile] [lse, D of the query rows]; the block's own 64 rows of two tensors are staged
// across [tiles][scratch] first, then live in fragments.
template <typename E, int HS, int NT>
struct FtcBwd {
    typedef FtcBwdWarp<E, NT> W;
    static constexpr int LDH = HS + FTC_PAD16;
    static constexpr size_t TILE = ftc::up128(NT * LDH * sizeof(E));
    static constexpr size_t STAGE = ftc::up128(FTC_ROWS * LDH * sizeof(E));
    static constexpr size_t SCR = FTC_WARPS * W::BYTES;
    static constexpr size_t IDX = ftc::maxz(2 * TILE + SCR, 2 * STAGE);
    static constexpr size_t STAT = IDX + ftc::IDX_BYTES;
    static constexpr size_t BYTES = STAT + 2 * FTC_ROWS * 4;
    static_assert(BYTES <= FTC_SMEM_MAX, "backward tiles exceed 48 KB of shared memory");
};

// The warp's p, ds (16, N) as E from fragments a1 (16, HS) against the N rows at p1 and a2
// against the N rows at p2, element-wise in registers: per 16 columns, s = a1 p1^T and
// dp = a2 p2^T (fp32 fragments); the element at (row r, column j) (from the index tile sidx;
// query t = tq(r, j), key u = tk(r, j)) gives p = exp2(sl2 s - lse2) where t < T and u <= t,
// else 0, and ds = p (dp - D), both stored as E. lse2 (lse times log2(e)), D indexed by
// query; sl2 = the softmax scale times log2(e). Every lane.
template <typename E, int HS, int N, bool KEY_ROWS>
static __device__ __forceinline__ void ftc_probs(unsigned char *wscr, const float *sidx,
                                                 const ftc::FragA<E> *a1, const E *p1,
                                                 const ftc::FragA<E> *a2, const E *p2, int ldh,
                                                 const float *lse2, const float *D, int row0,
                                                 int col0, int T, float sl2) {
    typedef FtcBwdWarp<E, N> W;
    E *p = (E *)wscr, *ds = (E *)(wscr + W::P);
    int lane = threadIdx.x % WARP;
    ftc::FragC idx;
    ftc_index(idx, sidx);
FTC_NO_UNROLL  // one 16-column block's s, dp live at a time (registers)
    for (int n = 0; n < N / 16; n++) {
        ftc::FragC s, dp;
        ftc_dot_rows<HS>(s, a1, p1 + 16 * n * ldh, ldh);
        ftc_dot_rows<HS>(dp, a2, p2 + 16 * n * ldh, ldh);
FTC_UNROLL
        for (int i = 0; i < ftc::FragC::num_elements; i++) {
            if (!ftc_owns(i, lane)) continue;
            int e = (int)idx.x[i], r = e >> 4, j = 16 * n + (e & 15);
            int qi = KEY_ROWS ? j : r;  // the query's index in the lse/D tile
            int t = KEY_ROWS ? col0 + j : row0 + r, u = KEY_ROWS ? row0 + r : col0 + j;
            float pv = t < T && u <= t ? exp2f(s.x[i] * sl2 - lse2[qi]) : 0.0f;
            store_from_f32(p + r * W::LDP + j, pv);
            store_from_f32(ds + r * W::LDP + j, pv * (dp.x[i] - D[qi]));
        }
    }
    __syncwarp();
}

// dq of query tile (reversed) blockIdx.y of head blockIdx.x into dqkv (B, T, 3C): each warp
// owns 16 query rows (q, dout in fragments) and loops over the key tiles (BK) at or before
// them: dq += ds @ k.
template <typename E, int HS, int BK>
static __global__ void __launch_bounds__(FTC_THREADS)
ftc_backward_dq_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *D,
                       int T, int NH, int hs, float scale) {
    typedef FtcBwd<E, HS, BK> L;
    typedef FtcBwdWarp<E, BK> W;
    __shared__ __align__(128) unsigned char raw[L::BYTES];
    int warp = threadIdx.x / WARP;
    float sl2 = scale * FTC_LOG2E;  // scores in base 2
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * hs;
    int q0 = (gridDim.y - 1 - blockIdx.y) * FTC_ROWS, t0 = q0 + 16 * warp;
    size_t ld = 3 * (size_t)C, row0 = (size_t)b * T;
    const E *q = qkv + row0 * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    const E *dy = dout + row0 * C + (size_t)h * hs;
    E *sk = (E *)raw, *sv = (E *)(raw + L::TILE);
    unsigned char *wscr = raw + 2 * L::TILE + warp * W::BYTES;
    float *sidx = (float *)(raw + L::IDX), *slse = (float *)(raw + L::STAT), *sd = slse + FTC_ROWS;
    ftc_fill_index(sidx);
    ftc_load_rows<FTC_ROWS, HS>((E *)raw, q, ld, q0, T, hs);
    ftc_load_rows<FTC_ROWS, HS>((E *)(raw + L::STAGE), dy, (size_t)C, q0, T, hs);
    ftc_load_stat(slse, lse + (size_t)bh * T, FTC_LOG2E, q0, T, FTC_ROWS);  // lse2
    ftc_load_stat(sd, D + (size_t)bh * T, 1.0f, q0, T, FTC_ROWS);
    __syncthreads();
    ftc::FragA<E> qf[HS / 16], yf[HS / 16];
    ftc_load_a<HS>(qf, (E *)raw + 16 * warp * L::LDH, L::LDH);
    ftc_load_a<HS>(yf, (E *)(raw + L::STAGE) + 16 * warp * L::LDH, L::LDH);
    __syncthreads();  // staged rows are in fragments
    ftc::FragC dq[HS / 16];
FTC_UNROLL
    for (int c = 0; c < HS / 16; c++) nvcuda::wmma::fill_fragment(dq[c], 0.0f);
    int last = (q0 + FTC_ROWS < T ? q0 + FTC_ROWS : T) - 1;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        ftc_load_rows<BK, HS>(sk, k, ld, k0, T, hs);
        ftc_load_rows<BK, HS>(sv, v, ld, k0, T, hs);
        __syncthreads();
        if (t0 + 15 >= k0 && t0 < T) {
            ftc_probs<E, HS, BK, false>(wscr, sidx, qf, sk, yf, sv, L::LDH, slse + 16 * warp,
                                        sd + 16 * warp, t0, k0, T, sl2);
            ftc_mma_rows<HS, BK>(dq, (E *)(wscr + W::P), W::LDP, sk, L::LDH);
        }
        __syncthreads();
    }
    ftc_store_rows<HS>(dqkv + row0 * ld + (size_t)h * hs, ld, t0, T, hs, dq, (float *)wscr,
                       W::LDF, (const float *)nullptr, scale);
}

// dk, dv of key tile (reversed) blockIdx.y of head blockIdx.x into dqkv (B, T, 3C): each warp
// owns 16 key rows (k, v in fragments) and loops over the query tiles (BQ) at or after them:
// dv += p^T @ dout, dk += ds^T @ q (p^T, ds^T computed directly as key rows x queries).
template <typename E, int HS, int BQ>
static __global__ void __launch_bounds__(FTC_THREADS)
ftc_backward_dkv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse,
                        const float *D, int T, int NH, int hs, float scale) {
    typedef FtcBwd<E, HS, BQ> L;
    typedef FtcBwdWarp<E, BQ> W;
    __shared__ __align__(128) unsigned char raw[L::BYTES];
    int warp = threadIdx.x / WARP;
    float sl2 = scale * FTC_LOG2E;  // scores in base 2
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * hs;
    int k0 = (gridDim.y - 1 - blockIdx.y) * FTC_ROWS, u0 = k0 + 16 * warp;
    size_t ld = 3 * (size_t)C, row0 = (size_t)b * T;
    const E *q = qkv + row0 * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    const E *dy = dout + row0 * C + (size_t)h * hs;
    E *sq = (E *)raw, *sy = (E *)(raw + L::TILE);
    unsigned char *wscr = raw + 2 * L::TILE + warp * W::BYTES;
    float *sidx = (float *)(raw + L::IDX), *slse = (float *)(raw + L::STAT), *sd = slse + FTC_ROWS;
    ftc_fill_index(sidx);
    ftc_load_rows<FTC_ROWS, HS>((E *)raw, k, ld, k0, T, hs);
    ftc_load_rows<FTC_ROWS, HS>((E *)(raw + L::STAGE), v, ld, k0, T, hs);
    __syncthreads();
    ftc::FragA<E> kf[HS / 16], vf[HS / 16];
    ftc_load_a<HS>(kf, (E *)raw + 16 * warp * L::LDH, L::LDH);
    ftc_load_a<HS>(vf, (E *)(raw + L::STAGE) + 16 * warp * L::LDH, L::LDH);
    __syncthreads();
    ftc::FragC dk[HS / 16], dv[HS / 16];
FTC_UNROLL
    for (int c = 0; c < HS / 16; c++) {
        nvcuda::wmma::fill_fragment(dk[c], 0.0f);
        nvcuda::wmma::fill_fragment(dv[c], 0.0f);
    }
    for (int qt = k0 / BQ * BQ; qt < T; qt += BQ) {
        ftc_load_rows<BQ, HS>(sq, q, ld, qt, T, hs);
        ftc_load_rows<BQ, HS>(sy, dy, (size_t)C, qt, T, hs);
        ftc_load_stat(slse, lse + (size_t)bh * T, FTC_LOG2E, qt, T, BQ);  // lse2
        ftc_load_stat(sd, D + (size_t)bh * T, 1.0f, qt, T, BQ);
        __syncthreads();
        if (qt + BQ - 1 >= u0 && u0 < T) {  // else every query of the tile is before the keys
            ftc_probs<E, HS, BQ, true>(wscr, sidx, kf, sq, vf, sy, L::LDH, slse, sd, u0, qt, T,
                                       sl2);
            ftc_mma_rows<HS, BQ>(dv, (E *)wscr, W::LDP, sy, L::LDH);
            ftc_mma_rows<HS, BQ>(dk, (E *)(wscr + W::P), W::LDP, sq, L::LDH);
        }
        __syncthreads();
    }
    E *dk_rows = dqkv + row0 * ld + (size_t)h * hs + C;
    const float *none = nullptr;  // no per-row scale
    ftc_store_rows<HS>(dk_rows, ld, u0, T, hs, dk, (float *)wscr, W::LDF, none, scale);
    ftc_store_rows<HS>(dk_rows + C, ld, u0, T, hs, dv, (float *)wscr, W::LDF, none, 1.0f);
}
