// backend/cuda/flash_attention.cuh: the kernels of fused causal attention (--use-flash-attn):
// tiles of q, k, v, dout in shared memory, the (T, T) matrix never in global memory.
//
// Every kernel runs FLASH_THREADS = 128 threads (4 warps) on one tile of one head (b, h):
// grid.x = B*NH heads, grid.y = tiles, heaviest causal tile first (blockIdx.y reversed).
// Tiles are rows x HS floats, rows padded to HS+1 (conflict-free column reads); rows past T
// and columns past hs are zero-filled, so the dot products run over the compile-time HS.
// Two thread maps:
//   entry map   (an R x CN tile of dot products): column j = tid % CN, rows tid / CN + i * (128 / CN)
//   channel map (R rows x HS accumulators):       channel c = lane + 32 k, rows warp + 4 i
// Forward (FlashAttention-style online softmax): per key tile, scores -> p (row max and sum
// kept in shared memory by one thread per row), the output rescaled and p @ v added;
// out = acc / l, lse = m + log l. Backward (FlashAttention-2 split, no atomics): D = rowsum
// (dout * out); dk/dv: one block per key tile loops over the query tiles at or after it;
// dq: one block per query tile loops over the key tiles at or before it. Both recompute
// p = exp(s - lse) and ds = p (dout . v - D) per tile pair. Every output element is owned
// by one thread and summed in tile order, then row order: the same bits every run.
// qkv, out, dout and dqkv are of the activation type E (float, __nv_bfloat16, __half),
// converted to fp32 as tiles are loaded and rounded once as results are stored; lse, D and
// all tiles in shared memory are fp32.
// Windows (BackendAttnWindow, FlashWindow): the query rows hold global positions q0.., the
// keys and values are the Tk rows of kv at k0..; query t sees key u iff u <= t + (q0 - k0)
// and (documents: qstart, (B, T) global document starts) u >= qstart[b, t] - k0.
// A row that sees no key keeps m = -inf and l = 0 and stores out 0, lse -inf. The forward
// with accumulate starts a row from what out and lse hold (m = lse, l = 1, acc = out; lse
// -inf: as a fresh row). The windowed backward adds dq into dqkv and dk, dv into dkv (rows
// whose lse is -inf give p = 0); without a window both kernels overwrite.
// Packed kv rows (BackendAttnWindow.kv_heads = G): rows of w.ldk = 2*G*hs elements, query
// head h reading kv head h / R (R = NH/G); the dk/dv kernel then runs one block per (b, kv
// head) key tile and loops over the R query heads of the group in order, so each dk, dv
// element is still owned by one thread and summed in a fixed order (no atomics).
// Dropout (BackendDropout dd, threshold 0: none; backend/dropout.h): the forward multiplies
// the tile's exponentials by the mask after they entered the row sum l (so lse is that of
// the probabilities without dropout); the backward regenerates the mask per tile pair:
// p z for dv, ds = p (z dp - D), with D = dout . out of the dropped output.
#pragma once
#include "backend/cuda/cuda_common.cuh"

#define FLASH_THREADS 128
#define FLASH_WARPS (FLASH_THREADS / WARP)
#define FLASH_ROW_WARPS 8  // rows (warps) per block of the row-dot kernel

// Unrolled loops keep the per-thread accumulator arrays in registers (nvcc); the emulator's
// host compiler ignores the hint.
#ifdef MEGAC_CUDA_EMU
#define FLASH_UNROLL
#define FLASH_UNROLL_8
#define FLASH_NO_UNROLL
#else
#define FLASH_UNROLL _Pragma("unroll")
#define FLASH_UNROLL_8 _Pragma("unroll 8")
#define FLASH_NO_UNROLL _Pragma("unroll 1")
#endif

// Shared memory of the forward: q tile, k tile (then v tile), scores (then p), row stats.
template <int HS, int BQ, int BK>
struct FlashFwdSmem {
    float q[BQ][HS + 1];
    float kv[BK][HS + 1];
    float p[BQ][BK + 1];
    float m[BQ], l[BQ], alpha[BQ];  // running max, running sum, this tile's rescale factor
};

// Shared memory of the backward kernels: one query tile, one key tile, their p and ds.
template <int HS, int BQ, int BK>
struct FlashBwdSmem {
    float q[BQ][HS + 1], dy[BQ][HS + 1];
    float k[BK][HS + 1], v[BK][HS + 1];
    float p[BQ][BK + 1], ds[BQ][BK + 1];
    float lse[BQ], d[BQ];
};

// dst (R, HS+1) = rows [row0, row0 + R) of src (row t at src + t*ld, hs columns); rows >= T
// and columns >= hs are 0. All threads of the block.
template <int R, int HS, typename E>
static __device__ __forceinline__ void flash_load_rows(float (*dst)[HS + 1], const E *src,
                                                       size_t ld, int row0, int T, int hs) {
    for (int i = threadIdx.x; i < R * HS; i += FLASH_THREADS) {
        int r = i / HS, c = i % HS, t = row0 + r;
        dst[r][c] = t < T && c < hs ? load_f32(src + (size_t)t * ld + c) : 0.0f;
    }
}

// acc[i] = A[r_i] . Bm[j] over HS columns for this thread's entries of an (R, CN) tile
// (entry map). Columns in order: fixed sums.
template <int R, int CN, int HS>
static __device__ __forceinline__ void flash_tile_dot(float *acc, const float (*A)[HS + 1],
                                                      const float (*Bm)[HS + 1]) {
    constexpr int RS = FLASH_THREADS / CN, NE = R * CN / FLASH_THREADS;
    int j = threadIdx.x % CN, r0 = threadIdx.x / CN;
FLASH_UNROLL
    for (int i = 0; i < NE; i++) acc[i] = 0.0f;
FLASH_UNROLL_8
    for (int c = 0; c < HS; c++) {
        float b = Bm[j][c];
FLASH_UNROLL
        for (int i = 0; i < NE; i++) acc[i] += A[r0 + RS * i][c] * b;
    }
}

// One thread per row r of the forward: folds this tile's scores sm.p[r] into the running
// max and sum; sm.p[r] becomes exp(s - m_new), sm.alpha[r] = exp(m_old - m_new). Without a
// window the first key tile holds key 0, so m is finite from then on (masked scores are -inf:
// p = 0); a windowed row may see no key yet (m still -inf: p = 0, alpha 1).
template <int HS, int BQ, int BK>
static __device__ __forceinline__ void flash_online_softmax_row(FlashFwdSmem<HS, BQ, BK> &sm, int r) {
    float m_old = sm.m[r], m = m_old;
    for (int j = 0; j < BK; j++) m = fmaxf(m, sm.p[r][j]);
    float sum = 0.0f;
    if (m == -INFINITY) {  // no key seen yet
        for (int j = 0; j < BK; j++) sm.p[r][j] = 0.0f;
        sm.alpha[r] = 1.0f;
        return;
    }
    for (int j = 0; j < BK; j++) {
        float e = expf(sm.p[r][j] - m);
        sm.p[r][j] = e;
        sum += e;
    }
    float alpha = expf(m_old - m);  // 0 on the first tile (m_old = -inf)
    sm.alpha[r] = alpha;
    sm.m[r] = m;
    sm.l[r] = sm.l[r] * alpha + sum;
}

// Mask index of element (0, 0) of head bh = b*NH + h of this call (dropout.h). Pure.
static __device__ __forceinline__ uint64_t flash_drop_base(const BackendDropout &dd, int bh,
                                                           int NH, int T) {
    return ((uint64_t)(dd.sample0 + bh / NH) * dd.NH + dd.h0 + bh % NH) * (uint64_t)T * T;
}

// The kernels' window (BackendAttnWindow with the whole-sequence length for the masks):
// keys and values are the Tk rows of kv, query row t sees key row u iff u <= t + off, and
// the mask index of element (0, 0) of a head is at (position q0, position k0) of Tg. acc:
// the forward continues out and lse; the backward adds into dqkv's q part and dkv's k | v.
struct FlashWindow {
    const void *kv;  // elements of the kernel's E
    void *dkv;       // backward: rows as kv's whose k | v parts get dk, dv
    int Tk, off, q0, k0, Tg, acc;
    int ldk, ko, vo, R;  // kv rows of ldk elements; head h's keys at ko + (h / R) * hs, values vo further
    const int *qstart;  // (B, T) document start (global position) of each query row, or NULL
};

// The first key row (of kv's Tk) that query row t (< T) of sequence b may see. Pure.
static __device__ __forceinline__ int flash_first_key(const FlashWindow &w, int b, int t, int T) {
    return w.qstart ? w.qstart[(size_t)b * T + t] - w.k0 : 0;
}

// The first key tile (a multiple of bk) that any query of the tile of bq rows at q0 may see
// (documents: the earlier tiles are all hidden and add nothing); 0 without. Pure.
static __device__ int flash_first_tile(const FlashWindow &w, int b, int q0, int bq, int bk,
                                       int T) {
    if (!w.qstart) return 0;
    int lo = 0x7fffffff;
    for (int r = 0; r < bq && q0 + r < T; r++) {
        int k = flash_first_key(w, b, q0 + r, T);
        lo = k < lo ? k : lo;
    }
    return lo <= 0 ? 0 : lo / bk * bk;
}

// One key tile's update of a warp's rows of acc (RPT rows, CPT columns per lane): rescaled by
// the online softmax's alpha, plus p (BQ, BK) times v (BK, HS) of the tile in shared memory.
template <int HS, int BQ, int BK, int RPT, int CPT>
static __device__ __forceinline__ void flash_acc_pv(float (&acc)[RPT][CPT], FlashFwdSmem<HS, BQ, BK> &sm,
                                                    int warp, int lane) {
FLASH_UNROLL
    for (int i = 0; i < RPT; i++) {
        float a = sm.alpha[warp + FLASH_WARPS * i];
FLASH_UNROLL
        for (int c = 0; c < CPT; c++) acc[i][c] *= a;
    }
    for (int jj = 0; jj < BK; jj++) {
        float vv[CPT];
FLASH_UNROLL
        for (int c = 0; c < CPT; c++) vv[c] = sm.kv[jj][lane + WARP * c];
FLASH_UNROLL
        for (int i = 0; i < RPT; i++) {
            float p = sm.p[warp + FLASH_WARPS * i][jj];
FLASH_UNROLL
            for (int c = 0; c < CPT; c++) acc[i][c] += p * vv[c];
        }
    }
}

// The query tile's results: out row t (at o + t C) = acc / l (0 for a row that sees no key)
// and lse[t] = m + log l (-inf then), for the tile's rows t = q0.. below T.
template <typename E, int HS, int BQ, int BK, int RPT, int CPT>
static __device__ __forceinline__ void flash_store_tile(E *o, float *lse, float (&acc)[RPT][CPT],
                                                        FlashFwdSmem<HS, BQ, BK> &sm, int q0, int T,
                                                        int C, int hs, int tid) {
    int lane = tid % WARP, warp = tid / WARP;
FLASH_UNROLL
    for (int i = 0; i < RPT; i++) {
        int r = warp + FLASH_WARPS * i, t = q0 + r;
        if (t >= T) continue;
        float inv = sm.l[r] > 0.0f ? 1.0f / sm.l[r] : 0.0f;  // 0: a row that sees no key
        E *row = o + (size_t)t * C;
FLASH_UNROLL
        for (int c = 0; c < CPT; c++)
            if (lane + WARP * c < hs) store_from_f32(row + lane + WARP * c, acc[i][c] * inv);
    }
    if (tid < BQ && q0 + tid < T) lse[q0 + tid] = sm.l[tid] > 0.0f ? sm.m[tid] + logf(sm.l[tid]) : -INFINITY;
}

// out (B, T, C), lse (B, NH, T) of query tile (reversed) blockIdx.y of head blockIdx.x.
template <typename E, int HS, int BQ, int BK>
static __global__ void __launch_bounds__(FLASH_THREADS)
flash_forward_kernel(E *out, float *lse, const E *qkv, int T, int NH, int hs, float scale,
                     BackendDropout dd, FlashWindow w) {
    __shared__ FlashFwdSmem<HS, BQ, BK> sm;
    constexpr int RPT = BQ / FLASH_WARPS, CPT = HS / WARP;
    constexpr int NE = BQ * BK / FLASH_THREADS, RS = FLASH_THREADS / BK;
    int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * hs;
    int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
    size_t ld = 3 * (size_t)C, ldk = (size_t)w.ldk;
    const E *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const E *k = (const E *)w.kv + (size_t)b * w.Tk * ldk + w.ko + (size_t)(h / w.R) * hs;
    const E *v = k + w.vo;
    flash_load_rows<BQ, HS>(sm.q, q, ld, q0, T, hs);
    if (tid < BQ) {  // a continued row (lse finite): m = lse, l = 1
        float l0 = w.acc && q0 + tid < T ? lse[(size_t)bh * T + q0 + tid] : -INFINITY;
        sm.m[tid] = l0, sm.l[tid] = l0 > -INFINITY ? 1.0f : 0.0f;
    }
    float acc[RPT][CPT];
FLASH_UNROLL
    for (int i = 0; i < RPT; i++) {
        int t = q0 + warp + FLASH_WARPS * i;
        bool seen = w.acc && t < T && lse[(size_t)bh * T + t] > -INFINITY;  // acc = out
        const E *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
FLASH_UNROLL
        for (int c = 0; c < CPT; c++)
            acc[i][c] = seen && lane + WARP * c < hs ? load_f32(o + lane + WARP * c) : 0.0f;
    }
    __shared__ int kt;  // the first key tile any of the tile's queries sees (documents)
    if (tid == 0) kt = flash_first_tile(w, b, q0, BQ, BK, T);
    __syncthreads();  // every lse read before a row's end stores it; kt written
    int last = (q0 + BQ < T ? q0 + BQ : T) - 1 + w.off;  // the tile's last query: keys 0..last
    for (int k0 = kt; k0 <= last && k0 < w.Tk; k0 += BK) {
        flash_load_rows<BK, HS>(sm.kv, k, ldk, k0, w.Tk, hs);
        __syncthreads();
        float s[NE];
        flash_tile_dot<BQ, BK, HS>(s, sm.q, sm.kv);
        int j = tid % BK;
FLASH_UNROLL
        for (int i = 0; i < NE; i++) {
            int r = tid / BK + RS * i, t = q0 + r;
            bool see = k0 + j <= t + w.off && k0 + j < w.Tk &&
                       (t >= T || k0 + j >= flash_first_key(w, b, t, T));
            sm.p[r][j] = see ? s[i] * scale : -INFINITY;
        }
        __syncthreads();  // scores written, k no longer read
        flash_load_rows<BK, HS>(sm.kv, v, ldk, k0, w.Tk, hs);
        if (tid < BQ) flash_online_softmax_row(sm, tid);
        if (dd.threshold && tid < BQ) {  // after the row sum: lse stays that without dropout
            uint64_t idx = flash_drop_base(dd, bh, NH, w.Tg) + (uint64_t)(w.q0 + q0 + tid) * w.Tg +
                           (uint64_t)(w.k0 + k0);
            for (int jj = 0; jj < BK; jj++) sm.p[tid][jj] *= dropout_factor(&dd, idx + jj);
        }
        __syncthreads();
        flash_acc_pv<HS, BQ, BK, RPT, CPT>(acc, sm, warp, lane);
        __syncthreads();  // p and v read before the next tile overwrites them
    }
    E *o = out + (size_t)b * T * C + (size_t)h * hs;  // this (b, h)'s rows t at o + t C
    flash_store_tile<E, HS, BQ, BK, RPT, CPT>(o, lse + (size_t)bh * T, acc, sm, q0, T, C, hs, tid);
}

// D (rows) = dout_t . out_t for row r = (b*NH + h)*T + t: one warp per row, fixed order.
template <typename E>
static __global__ void flash_rowdot_kernel(float *D, const E *dout, const E *out,
                                           long long rows, int T, int NH, int hs) {
    long long r = (long long)blockIdx.x * FLASH_ROW_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;  // whole warps leave together
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
    size_t off = ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
    float s = 0.0f;
    for (int c = lane; c < hs; c += WARP) s += load_f32(dout + off + c) * load_f32(out + off + c);
    s = warp_sum(s);
    if (lane == 0) D[r] = s;
}

// The query tile at q0: q, dout rows and their lse, D (0 past T). All threads.
template <typename E, int HS, int BQ, int BK>
static __device__ __forceinline__ void flash_load_query_tile(FlashBwdSmem<HS, BQ, BK> &sm,
        const E *q, size_t ld, const E *dy, size_t ldy, const float *lse,
        const float *D, int q0, int T, int hs) {
    flash_load_rows<BQ, HS>(sm.q, q, ld, q0, T, hs);
    flash_load_rows<BQ, HS>(sm.dy, dy, ldy, q0, T, hs);
    int t = q0 + (int)threadIdx.x;
    if (threadIdx.x < BQ) sm.lse[threadIdx.x] = t < T ? lse[t] : 0.0f;
    if (threadIdx.x < BQ) sm.d[threadIdx.x] = t < T ? D[t] : 0.0f;
}

// The dropout pass of flash_tile_probs (this thread's entries, which it wrote): sm.p holds
// p, sm.ds holds dp; afterwards p z and p (z dp - D). A loop of its own, not unrolled, so the
// hash does not add to the unrolled loop's registers.
template <int HS, int BQ, int BK>
static __device__ void flash_tile_dropout(FlashBwdSmem<HS, BQ, BK> &sm, int q0, int k0,
                                          const BackendDropout &dd, int NH, int bh,
                                          const FlashWindow &w) {
    constexpr int NE = BQ * BK / FLASH_THREADS, RS = FLASH_THREADS / BK;
    int j = threadIdx.x % BK;
    uint64_t base = flash_drop_base(dd, bh, NH, w.Tg) + (uint64_t)(w.k0 + k0 + j);
FLASH_NO_UNROLL
    for (int i = 0; i < NE; i++) {
        int r = (int)threadIdx.x / BK + RS * i, t = w.q0 + q0 + r;  // global query position
        float p = sm.p[r][j];
        float z = p != 0.0f ? dropout_factor(&dd, base + (uint64_t)t * w.Tg) : 0.0f;
        sm.p[r][j] = p * z;
        sm.ds[r][j] = p * (z * sm.ds[r][j] - sm.d[r]);
    }
}

// sm.p, sm.ds (BQ, BK) of the query tile at q0 against the key tile at k0 (entry map):
// p = exp(scale q.k - lse) and ds = p (dout.v - D) where query t < T, key u < w.Tk, u <= t +
// w.off and lse > -inf, else 0. With dropout (dd.threshold > 0; head bh = b*NH + h) p z and
// p (z dp - D).
template <int HS, int BQ, int BK>
static __device__ __forceinline__ void flash_tile_probs(FlashBwdSmem<HS, BQ, BK> &sm, int q0,
                                                        int k0, int T, float scale,
                                                        const BackendDropout &dd, int NH, int bh,
                                                        const FlashWindow &w) {
    constexpr int NE = BQ * BK / FLASH_THREADS, RS = FLASH_THREADS / BK;
    float s[NE], dp[NE];
    flash_tile_dot<BQ, BK, HS>(s, sm.q, sm.k);
    flash_tile_dot<BQ, BK, HS>(dp, sm.dy, sm.v);
    int j = threadIdx.x % BK;
    bool drop = dd.threshold != 0;
FLASH_UNROLL
    for (int i = 0; i < NE; i++) {
        int r = (int)threadIdx.x / BK + RS * i, t = q0 + r;
        bool see = t < T && k0 + j < w.Tk && k0 + j <= t + w.off && sm.lse[r] > -INFINITY &&
                   k0 + j >= flash_first_key(w, bh / NH, t, T);
        float p = see ? expf(s[i] * scale - sm.lse[r]) : 0.0f;
        sm.p[r][j] = p;
        sm.ds[r][j] = drop ? dp[i] : p * (dp[i] - sm.d[r]);
    }
    if (drop) flash_tile_dropout(sm, q0, k0, dd, NH, bh, w);
}

// Pointers of head bh = b*NH + h: q rows in qkv (stride ld = 3C), k, v rows in w.kv (stride
// ldk) and dout rows (stride C); lse and D (T) of the head.
template <typename E>
struct FlashHead {
    const E *q, *k, *v, *dy;
    const float *lse, *D;
    size_t ld, ldk, ldy, row0, krow0;  // index of (b, query 0) in the (B, T) rows, (b, key 0) in (B, Tk)
    int C, h;
};

template <typename E>
static __device__ __forceinline__ FlashHead<E> flash_head(const E *qkv, const E *dout,
                                                          const float *lse, const float *D,
                                                          int T, int NH, int hs, int bh,
                                                          const FlashWindow &w) {
    int b = bh / NH, h = bh % NH, C = NH * hs;
    FlashHead<E> f;
    f.ld = 3 * (size_t)C, f.ldk = (size_t)w.ldk, f.ldy = (size_t)C, f.row0 = (size_t)b * T;
    f.C = C, f.h = h, f.krow0 = (size_t)b * w.Tk;
    f.q = qkv + f.row0 * f.ld + (size_t)h * hs;
    f.k = (const E *)w.kv + f.krow0 * f.ldk + w.ko + (size_t)(h / w.R) * hs, f.v = f.k + w.vo;
    f.dy = dout + f.row0 * C + (size_t)h * hs;
    f.lse = lse + (size_t)bh * T, f.D = D + (size_t)bh * T;
    return f;
}

// dk, dv of key tile (reversed) blockIdx.y of kv head blockIdx.x = b*(NH/R) + g into w.dkv
// (rows as w.kv's): loops over the group's R query heads h = g*R.., for each over the query
// tiles that see the key tile; each thread owns BK/4 rows x HS/32 channels.
template <typename E, int HS, int BQ, int BK>
static __global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_dkv_kernel(const E *dout, const E *qkv, const float *lse, const float *D,
                          int T, int NH, int hs, float scale, BackendDropout dd, FlashWindow w) {
    __shared__ FlashBwdSmem<HS, BQ, BK> sm;
    constexpr int RPT = BK / FLASH_WARPS, CPT = HS / WARP;
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    int k0 = (gridDim.y - 1 - blockIdx.y) * BK, KH = NH / w.R;
    int bh0 = (int)blockIdx.x / KH * NH + (int)blockIdx.x % KH * w.R;  // the group's first head
    FlashHead<E> f = flash_head(qkv, dout, lse, D, T, NH, hs, bh0, w);
    flash_load_rows<BK, HS>(sm.k, f.k, f.ldk, k0, w.Tk, hs);
    flash_load_rows<BK, HS>(sm.v, f.v, f.ldk, k0, w.Tk, hs);
    float dk[RPT][CPT], dv[RPT][CPT];
FLASH_UNROLL
    for (int i = 0; i < RPT; i++)
FLASH_UNROLL
        for (int c = 0; c < CPT; c++) dk[i][c] = dv[i][c] = 0.0f;
    int first = k0 - w.off > 0 ? k0 - w.off : 0;  // the first query that sees key k0
    for (int bh = bh0; bh < bh0 + w.R; bh++) {
        f = flash_head(qkv, dout, lse, D, T, NH, hs, bh, w);
        for (int q0 = first / BQ * BQ; q0 < T; q0 += BQ) {
            flash_load_query_tile(sm, f.q, f.ld, f.dy, f.ldy, f.lse, f.D, q0, T, hs);
            __syncthreads();
            flash_tile_probs(sm, q0, k0, T, scale, dd, NH, bh, w);
            __syncthreads();
            for (int r = 0; r < BQ; r++) {  // dv[j] += p[r][j] dout[r]; dk[j] += ds[r][j] q[r]
                float y[CPT], x[CPT];
FLASH_UNROLL
                for (int c = 0; c < CPT; c++) y[c] = sm.dy[r][lane + WARP * c], x[c] = sm.q[r][lane + WARP * c];
FLASH_UNROLL
                for (int i = 0; i < RPT; i++) {
                    float p = sm.p[r][warp + FLASH_WARPS * i], ds = sm.ds[r][warp + FLASH_WARPS * i];
FLASH_UNROLL
                    for (int c = 0; c < CPT; c++) dv[i][c] += p * y[c], dk[i][c] += ds * x[c];
                }
            }
            __syncthreads();  // the tiles are read before the next query tile overwrites them
        }
    }
FLASH_UNROLL
    for (int i = 0; i < RPT; i++) {
        int u = k0 + warp + FLASH_WARPS * i;
        if (u >= w.Tk) continue;
        E *d = (E *)w.dkv + (f.krow0 + u) * f.ldk + w.ko + (size_t)(f.h / w.R) * hs;  // dk row u
FLASH_UNROLL
        for (int c = 0; c < CPT; c++)
            if (lane + WARP * c < hs) {
                E *pk = d + lane + WARP * c, *pv = pk + w.vo;
                float gk = scale * dk[i][c], gv = dv[i][c];
                if (w.acc) gk += load_f32(pk), gv += load_f32(pv);
                store_from_f32(pk, gk);
                store_from_f32(pv, gv);
            }
    }
}

// dq of query tile (reversed) blockIdx.y of head blockIdx.x into dqkv (B, T, 3C): loops over
// the key tiles the query tile sees; each thread owns BQ/4 rows x HS/32 channels.
template <typename E, int HS, int BQ, int BK>
static __global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_dq_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse,
                         const float *D, int T, int NH, int hs, float scale, BackendDropout dd,
                         FlashWindow w) {
    __shared__ FlashBwdSmem<HS, BQ, BK> sm;
    constexpr int RPT = BQ / FLASH_WARPS, CPT = HS / WARP;
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
    FlashHead<E> f = flash_head(qkv, dout, lse, D, T, NH, hs, (int)blockIdx.x, w);
    flash_load_query_tile(sm, f.q, f.ld, f.dy, f.ldy, f.lse, f.D, q0, T, hs);
    float dq[RPT][CPT];
FLASH_UNROLL
    for (int i = 0; i < RPT; i++)
FLASH_UNROLL
        for (int c = 0; c < CPT; c++) dq[i][c] = 0.0f;
    __shared__ int kt;  // the first key tile any of the tile's queries sees (documents)
    if (threadIdx.x == 0) kt = flash_first_tile(w, (int)blockIdx.x / NH, q0, BQ, BK, T);
    __syncthreads();
    int last = (q0 + BQ < T ? q0 + BQ : T) - 1 + w.off;  // the tile's last query: keys 0..last
    for (int k0 = kt; k0 <= last && k0 < w.Tk; k0 += BK) {
        flash_load_rows<BK, HS>(sm.k, f.k, f.ldk, k0, w.Tk, hs);
        flash_load_rows<BK, HS>(sm.v, f.v, f.ldk, k0, w.Tk, hs);
        __syncthreads();
        flash_tile_probs(sm, q0, k0, T, scale, dd, NH, (int)blockIdx.x, w);
        __syncthreads();
        for (int j = 0; j < BK; j++) {  // dq[r] += ds[r][j] k[j]
            float kk[CPT];
FLASH_UNROLL
            for (int c = 0; c < CPT; c++) kk[c] = sm.k[j][lane + WARP * c];
FLASH_UNROLL
            for (int i = 0; i < RPT; i++) {
                float ds = sm.ds[warp + FLASH_WARPS * i][j];
FLASH_UNROLL
                for (int c = 0; c < CPT; c++) dq[i][c] += ds * kk[c];
            }
        }
        __syncthreads();
    }
FLASH_UNROLL
    for (int i = 0; i < RPT; i++) {
        int t = q0 + warp + FLASH_WARPS * i;
        if (t >= T) continue;
        E *d = dqkv + (f.row0 + t) * f.ld + (size_t)f.h * hs;
FLASH_UNROLL
        for (int c = 0; c < CPT; c++)
            if (lane + WARP * c < hs) {
                float g = scale * dq[i][c];
                if (w.acc) g += load_f32(d + lane + WARP * c);
                store_from_f32(d + lane + WARP * c, g);
            }
    }
}
