// backend/dropout.h: dropout masks as a pure function (C and CUDA; the same bits on both).
//
// An element is kept iff dropout_bits(key, index) >= threshold, where
//   key   = dropout_key(seed, iteration, site, layer): one per dropout point and step;
//   index = the element's position in the FULL tensor of the step's global batch
//           (hidden (S, T, C): (s*T + t)*C + c; attention probabilities (S, NH, T, T):
//           ((s*NH + h)*T + i)*T + j, s the sample's index in the global batch, h the global
//           query head, t/i/j global positions, c the full channel: an op on a slice of the
//           sequence (context parallelism, a decoding step) is told where its slice starts);
//   threshold = p * 2^32 (rounded down), so P(keep) = 1 - p to within 2^-32.
// Kept elements are scaled by 1/(1-p). So the mask depends on no layout: data, tensor,
// sequence and pipeline parallelism, the micro-batch size and recomputation all see the same
// masks. Nothing is stored: backward passes regenerate the mask from the same call (more
// compute, no (N, C) or (B, NH, T, T) mask in memory), and a resume needs no RNG state.
// The hash is splitmix64's finalizer of key xor (index / 2); its two 32-bit halves are the bits
// of the pair's two elements. The key is itself a finalizer's output, so two keys' masks are
// the same function at pair indices a random 64-bit xor apart: unrelated in practice.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define DROPOUT_FN static __host__ __device__ __forceinline__
#else
#define DROPOUT_FN static inline
#endif

// Dropout points (the "site" of the key).
enum { DROPOUT_SITE_EMBED = 1, DROPOUT_SITE_ATTN_PROBS = 2, DROPOUT_SITE_ATTN_OUT = 3,
       DROPOUT_SITE_MLP_OUT = 4 };

// What a dropout op needs (passed by pointer; host memory). A NULL pointer or threshold 0
// means no dropout.
typedef struct {
    uint64_t key;        // dropout_key(...)
    uint32_t threshold;  // drop iff dropout_bits < threshold (p * 2^32)
    float scale;         // 1 / (1 - p): kept elements are multiplied by it
    int64_t row0;        // (rows, C) ops: with Tl 0, global row (s*T + t) of local row 0
                         // (rows contiguous); with Tl > 0, the local row index of row 0
    int64_t sample0;     // global sample s of local batch row 0
    int h0, NH;          // attention: global head of local head 0; heads of the full model
    int T;               // global sequence length (0: the op's T, the whole sequence)
    int pos0, Tl;        // (rows, C) ops on a slice: local rows are Tl positions per sample,
                         // global positions pos0.. (Tl 0: no slice, rows row0 + r)
    int pos1;            // with half_rows > 0 (context parallelism's two chunks): the local
    int64_t half_rows;   // rows are two halves of half_rows rows each, (samples, Tl/2) at
                         // global positions pos0.. then (samples, Tl/2) at pos1..
} BackendDropout;

// splitmix64's output function: a bijection on 64 bits with full avalanche. Pure.
DROPOUT_FN uint64_t dropout_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The key of one dropout point of one step. layer: global layer index (-1: embeddings). Pure.
DROPOUT_FN uint64_t dropout_key(uint64_t seed, int64_t iteration, int site, int layer) {
    uint64_t k = dropout_mix64(seed ^ 0x6D656761635F6470ull);  // "megac_dp"
    k = dropout_mix64(k ^ (uint64_t)iteration);
    return dropout_mix64(k ^ ((uint64_t)(uint32_t)site << 32 | (uint32_t)(layer + 1)));
}

// 32 uniform bits of element `index` under `key`. One finalizer of key xor (index / 2) serves
// two neighbouring elements: the even index takes its high half, the odd one its low half.
// Pure.
DROPOUT_FN uint32_t dropout_bits(uint64_t key, uint64_t index) {
    uint64_t z = dropout_mix64(key ^ (index >> 1));
    return (uint32_t)(index & 1 ? z : z >> 32);
}

// The factor of element `index`: 0 (dropped) or d->scale (kept). Pure.
DROPOUT_FN float dropout_factor(const BackendDropout *d, uint64_t index) {
    return dropout_bits(d->key, index) >= d->threshold ? d->scale : 0.0f;
}

// Global row (s*T + t) of local row r of a (rows, C) op: row0 + r, or on a slice (Tl > 0)
// position pos0 + q % Tl of sample sample0 + q / Tl, q = row0 + r; in two halves
// (half_rows > 0) q counts within its half, of Tl/2 positions per sample from pos0 or pos1.
// Pure.
DROPOUT_FN int64_t dropout_row(const BackendDropout *d, int64_t r) {
    if (d->Tl <= 0) return d->row0 + r;
    int64_t q = d->row0 + r, Tl = d->Tl, pos = d->pos0;
    if (d->half_rows > 0) {
        Tl /= 2;
        if (q >= d->half_rows) q -= d->half_rows, pos = d->pos1;
    }
    return (d->sample0 + q / Tl) * d->T + pos + q % Tl;
}

// Threshold of drop probability p in [0, 1). Pure.
DROPOUT_FN uint32_t dropout_threshold(double p) {
    double t = p * 4294967296.0;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}
