// backend/cpu/cpu_attention.c: causal multi-head self-attention, scale 1/sqrt(hs).
//
// Per (batch b, head h) the head's q, k, v are strided views into qkv (B, T, 3*C), C = NH*hs,
// row stride 3*C: q at column h*hs, k at C + h*hs, v at 2*C + h*hs. One OpenMP region runs
// over the B*NH heads; each thread does a whole head: its products as one-thread OpenBLAS
// calls (cpu_gemm.h) and its softmax rows in between, while the head's (T, T) matrix is
// still in its core's cache. Causal blocks only: queries go in blocks of CPU_ATT_QB rows,
// and a block's products stop at its last key (keys past it have probability 0), which
// skips about 3/8 of the FLOPs at T = 256. The skipped terms are exact zeros at the end (or,
// for the key-side products, the start) of each dot product, so every element gets the same
// bits as the full product.
// With dropout (d not NULL): att keeps the probabilities without dropout; the
// products with v go through (CPU_ATT_QB, CPU_ATT_QB) tiles of dropped probabilities on the
// stack, the mask regenerated from its hash (dropout.h) in the backward, once per tile for
// both of its uses there, drawn by the vectorised span kernels (cpu_dropout.c) and only on
// and below the causal diagonal (above it the probabilities are zeros, dropped or not).
#include "core/check.h"  // defines: core_fatal
#include "cpu_backend.h"
#include "cpu_gemm.h"
#include "cpu_math.h"

#include <float.h>  // defines: FLT_MAX
#include <math.h>   // defines: sqrtf

#define CPU_ATT_QB 64  // query (or key) rows per causal block

// In place over p (T): softmax of p[lo..t], zeros elsewhere (lo 0: causal; lo > 0: the
// query's document starts at key lo; none visible when lo > t: a row of zeros).
CPU_SIMD_CLONES static void cpu_causal_softmax_row(float *p, int lo, int t, int T) {
    float m = -FLT_MAX;
    for (int j = 0; j < lo && j < T; j++) p[j] = 0.0f;
#pragma omp simd reduction(max : m)
    for (int j = lo; j <= t; j++) m = p[j] > m ? p[j] : m;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = lo; j <= t; j++) {
        p[j] = cpu_expf(p[j] - m);
        s += p[j];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = lo; j <= t; j++) p[j] *= inv;
    for (int j = t + 1 > lo ? t + 1 : lo; j < T; j++) p[j] = 0.0f;
}

// In place over dp (T): softmax backward of row t, ds = p * (dp - sum_j p_j dp_j) for j <= t,
// zeros above the diagonal.
CPU_SIMD_CLONES static void cpu_causal_softmax_backward_row(float *dp, const float *p, int t, int T) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; j++) dot += p[j] * dp[j];
#pragma omp simd
    for (int j = 0; j <= t; j++) dp[j] = p[j] * (dp[j] - dot);
    for (int j = t + 1; j < T; j++) dp[j] = 0.0f;
}

// tile (n, w) (row stride CPU_ATT_QB) = a (n, w) (row stride lda) times the dropout factors,
// a's element (0, 0) having mask index idx0 (rows Tg apart). Row i's elements past column
// diag + i are zeros of a (above the causal diagonal): written as zeros, no mask drawn (0
// times a factor is +0 either way: the same bits). f (n, w), row stride CPU_ATT_QB, or NULL:
// gets the factors drawn (zeros past the diagonal).
static void cpu_att_drop_tile(float *tile, float *f, const float *a, int lda, int Tg,
                              const BackendDropout *d, uint64_t idx0, int n, int w, int diag) {
    for (int i = 0; i < n; i++) {
        int wi = diag + i + 1 < 0 ? 0 : diag + i + 1 < w ? diag + i + 1 : w;  // drawn columns
        float *ti = tile + i * CPU_ATT_QB;
        if (f) {
            float *fi = f + i * CPU_ATT_QB;
            cpu_dropout_factors(fi, wi, d, idx0 + (uint64_t)i * Tg);
            for (int j = 0; j < wi; j++) ti[j] = a[(size_t)i * lda + j] * fi[j];
            for (int j = wi; j < w; j++) fi[j] = 0.0f;
        } else {
            cpu_dropout_span(ti, a + (size_t)i * lda, wi, d, idx0 + (uint64_t)i * Tg);
        }
        for (int j = wi; j < w; j++) ti[j] = 0.0f;
    }
}

// o (n, hs) (+)= dropped(ab (n, t1), row stride T) @ v (t1, hs), through key tiles; ab's
// row i is zero past key diag + i.
static void cpu_att_dropped_pv(float *o, const float *ab, const float *v, int n, int t1, int T,
                               int Tg, int hs, int ld, int ldo, const BackendDropout *d,
                               uint64_t idx0, int diag) {
    float tile[CPU_ATT_QB * CPU_ATT_QB];
    for (int u0 = 0; u0 < t1; u0 += CPU_ATT_QB) {
        int w = t1 - u0 < CPU_ATT_QB ? t1 - u0 : CPU_ATT_QB;
        cpu_att_drop_tile(tile, NULL, ab + u0, T, Tg, d, idx0 + (uint64_t)u0, n, w, diag - u0);
        cpu_sgemm(0, 0, n, hs, w, 1.0f, tile, CPU_ATT_QB, v + (size_t)u0 * ld, ld,
                  u0 ? 1.0f : 0.0f, o, ldo);
    }
}

// One head, forward: a (T, Tk) = causal softmax(scale q k^T), query row t seeing key rows
// u <= t + off (zeros past them) and, with qs (T: document starts, global), u >= qs[t] - k0;
// o (T, hs) = a @ v (a dropped when d; base: mask index of the head's element (0, 0), rows
// Tg apart). q, k, v: rows of stride ld; o: stride ldo.
static void cpu_attention_head_forward(float *o, float *a, const float *q, const float *k,
                                       const float *v, int T, int Tk, int off, int hs, int ld,
                                       int ldo, float scale, const BackendDropout *d,
                                       uint64_t base, int Tg, const int *qs, int k0) {
    for (int t0 = 0; t0 < T; t0 += CPU_ATT_QB) {
        int t1 = t0 + CPU_ATT_QB < T ? t0 + CPU_ATT_QB : T, n = t1 - t0;
        int kc = t1 + off < 0 ? 0 : t1 + off < Tk ? t1 + off : Tk;  // keys 0..kc-1
        float *ab = a + (size_t)t0 * Tk, *ob = o + (size_t)t0 * ldo;
        if (kc == 0) {  // a block of queries that sees no key
            for (size_t i = 0; i < (size_t)n * Tk; i++) ab[i] = 0.0f;
            for (int i = 0; i < n; i++)
                for (int c = 0; c < hs; c++) ob[(size_t)i * ldo + c] = 0.0f;
            continue;
        }
        cpu_sgemm(0, 1, n, kc, hs, scale, q + (size_t)t0 * ld, ld, k, ld, 0.0f, ab, Tk);
        for (int t = t0; t < t1; t++) {  // row t sees keys 0..last (none when last < 0)
            int last = t + off < Tk ? t + off : Tk - 1, lo = qs ? qs[t] - k0 : 0;
            cpu_causal_softmax_row(a + (size_t)t * Tk, lo < 0 ? 0 : lo, last < -1 ? -1 : last, Tk);
        }
        if (d)
            cpu_att_dropped_pv(ob, ab, v, n, kc, Tk, Tg, hs, ld, ldo, d,
                               base + (uint64_t)t0 * Tg, t0 + off);
        else
            cpu_sgemm(0, 0, n, hs, kc, 1.0f, ab, Tk, v, ld, 0.0f, ob, ldo);
    }
}

// Mask index of element (0, 0) of local head (b, h) (dropout.h) on a sequence of Tg
// positions whose queries start at q0, keys at k0. Pure.
static uint64_t cpu_att_base(const BackendDropout *d, int b, int h, int Tg, int q0, int k0) {
    return !d ? 0 : (((uint64_t)(d->sample0 + b) * d->NH + d->h0 + h) * Tg + q0) * Tg + k0;
}

// out (B, T, C) from qkv (B, T, 3*C) (keys and values of w->kv with a window w); att (B, NH,
// T, Tk) keeps the probabilities; the products with v dropped when d (threshold > 0).
void cpu_attention_forward(Backend *be, void *out_, void *att_, const void *qkv_,
                           int B, int T, int NH, int hs, const BackendDropout *d,
                           const BackendAttnWindow *w) {
    float *out = out_, *att = att_;
    const float *qkv = qkv_;
    if (d && d->threshold == 0) d = NULL;
    BackendAttnWindow all = {0, 0, T, NULL, 0, NULL, 0, NULL}, win = w ? *w : all;
    if (win.accumulate || win.kv_heads)
        core_fatal("attention_forward: a window with accumulate %d, kv_heads %d (flash only)",
                   win.accumulate, win.kv_heads);
    const float *kv = win.kv ? win.kv : qkv;
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be), heads = B * NH, Tk = win.Tk;
    int Tg = d && d->T ? d->T : T;
    float scale = 1.0f / sqrtf((float)hs);
    int prev = cpu_blas_single_begin();
#pragma omp parallel for num_threads(nt) schedule(static) if (heads > 1)
    for (int bh = 0; bh < heads; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + h * hs;
        const float *k = kv + (size_t)b * Tk * C3 + C + h * hs;  // keys; values C further
        cpu_attention_head_forward(out + (size_t)b * T * C + h * hs, att + (size_t)bh * T * Tk,
                                   q, k, k + C, T, Tk, win.q0 - win.k0, hs, C3, C, scale, d,
                                   cpu_att_base(d, b, h, Tg, win.q0, win.k0), Tg,
                                   win.qstart ? win.qstart + (size_t)b * T : NULL, win.k0);
    }
    cpu_blas_single_end(prev);
}

// One head, backward; dq, dk, dv (T, hs) rows of stride ld (overwritten), dy rows of
// stride ldy; ds (T, T) is scratch: d(att), then d(scores) in place. With dropout each
// (query block, key tile) draws its mask once, into f, for both of its uses: d(att) times
// the mask, and dv += dropped(att)^T @ dy. dv's tiles are summed in the order of increasing
// query block, each starting at its diagonal block, as a loop over key blocks would.
static void cpu_attention_head_backward(float *dq, float *dk, float *dv, float *ds,
                                        const float *dy, const float *q, const float *k,
                                        const float *v, const float *a, int T, int hs, int ld,
                                        int ldy, float scale, const BackendDropout *d,
                                        uint64_t base) {
    float tile[CPU_ATT_QB * CPU_ATT_QB], f[CPU_ATT_QB * CPU_ATT_QB];
    // 1. per query block: datt (n, t1) = dy @ v^T, then the softmax backward of its rows;
    //    dq (n, hs) = scale * dscores @ k
    for (int t0 = 0; t0 < T; t0 += CPU_ATT_QB) {
        int t1 = t0 + CPU_ATT_QB < T ? t0 + CPU_ATT_QB : T, n = t1 - t0;
        float *db = ds + (size_t)t0 * T;
        const float *dyb = dy + (size_t)t0 * ldy;
        cpu_sgemm(0, 1, n, t1, hs, 1.0f, dyb, ldy, v, ld, 0.0f, db, T);
        for (int u0 = 0; d && u0 < t1; u0 += CPU_ATT_QB) {  // key tiles u0..u0+w-1
            int w = t1 - u0 < CPU_ATT_QB ? t1 - u0 : CPU_ATT_QB;
            cpu_att_drop_tile(tile, f, a + (size_t)t0 * T + u0, T, T, d,
                              base + (uint64_t)t0 * T + u0, n, w, t0 - u0);
            for (int i = 0; i < n; i++) {  // d(probabilities) = d(dropped) * mask, j <= t
                float *di = db + (size_t)i * T + u0;
                const float *fi = f + i * CPU_ATT_QB;
                int wi = t0 + i - u0 + 1 < w ? t0 + i - u0 + 1 : w;
                for (int j = 0; j < wi; j++) di[j] *= fi[j];
            }
            cpu_sgemm(1, 0, w, hs, n, 1.0f, tile, CPU_ATT_QB, dyb, ldy, t0 > u0 ? 1.0f : 0.0f,
                      dv + (size_t)u0 * ld, ld);
        }
        for (int t = t0; t < t1; t++)
            cpu_causal_softmax_backward_row(ds + (size_t)t * T, a + (size_t)t * T, t, T);
        cpu_sgemm(0, 0, n, hs, t1, scale, db, T, k, ld, 0.0f, dq + (size_t)t0 * ld, ld);
    }
    // 2. per key block u0..u1 (queries u0..T-1 see it): dv = att^T @ dy (without dropout),
    //    dk = scale ds^T @ q
    for (int u0 = 0; u0 < T; u0 += CPU_ATT_QB) {
        int u1 = u0 + CPU_ATT_QB < T ? u0 + CPU_ATT_QB : T, n = u1 - u0, m = T - u0;
        size_t blk = (size_t)u0 * T + u0;  // element (u0, u0)
        if (!d)
            cpu_sgemm(1, 0, n, hs, m, 1.0f, a + blk, T, dy + (size_t)u0 * ldy, ldy, 0.0f,
                      dv + (size_t)u0 * ld, ld);
        cpu_sgemm(1, 0, n, hs, m, scale, ds + blk, T, q + (size_t)u0 * ld, ld, 0.0f,
                  dk + (size_t)u0 * ld, ld);
    }
}

// dqkv (B, T, 3*C) overwritten; scratch (B, NH, T, T) holds d(att), then d(scores).
void cpu_attention_backward(Backend *be, void *dqkv_, float *scratch, const void *dout_,
                            const void *qkv_, const void *att_, int B, int T, int NH, int hs,
                            const BackendDropout *d) {
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *att = att_;
    if (d && d->threshold == 0) d = NULL;
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be), heads = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    int prev = cpu_blas_single_begin();
#pragma omp parallel for num_threads(nt) schedule(static) if (heads > 1)
    for (int bh = 0; bh < heads; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * C3 + h * hs, tt = (size_t)bh * T * T;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        cpu_attention_head_backward(dq, dq + C, dq + 2 * C, scratch + tt,
                                    dout + (size_t)b * T * C + h * hs, q, q + C, q + 2 * C,
                                    att + tt, T, hs, C3, C, scale, d,
                                    cpu_att_base(d, b, h, T, 0, 0));
    }
    cpu_blas_single_end(prev);
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_attention_forward(Backend *be, void *o, void *att, const void *qkv, int B, int T,
                                int NH, int hs, const BackendDropout *d,
                                const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(B) * T * 3 * C) + cpu_pad(CPU_SZ(B) * Tk * 3 * C) + cpu_pad(CPU_SZ(B) * T * C) +
                            cpu_pad(CPU_SZ(B) * NH * T * Tk));
    BackendAttnWindow fwin;
    const float *fq = cpu_in(&a, qkv, CPU_SZ(B) * T * 3 * C);
    const BackendAttnWindow *fw = cpu_win_in(&a, w, &fwin, B, 3 * CPU_SZ(C));
    float *fo = cpu_take(&a, CPU_SZ(B) * T * C), *fa = cpu_take(&a, CPU_SZ(B) * NH * T * Tk);
    cpu_attention_forward(be, fo, fa, fq, B, T, NH, hs, d, fw);
    cpu_out(be, o, fo, CPU_SZ(B) * T * C);
    cpu_out(be, att, fa, CPU_SZ(B) * NH * T * Tk);
}

static void h_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                 const void *qkv, const void *att, int B, int T, int NH, int hs,
                                 const BackendDropout *d) {
    int C = NH * hs;
    CpuArena a = cpu_arena(be, 2 * cpu_pad(CPU_SZ(B) * T * 3 * C) + cpu_pad(CPU_SZ(B) * T * C) + cpu_pad(CPU_SZ(B) * NH * T * T));
    const float *fd = cpu_in(&a, dout, CPU_SZ(B) * T * C), *fq = cpu_in(&a, qkv, CPU_SZ(B) * T * 3 * C);
    const float *fa = cpu_in(&a, att, CPU_SZ(B) * NH * T * T);
    float *fdq = cpu_take(&a, CPU_SZ(B) * T * 3 * C);
    cpu_attention_backward(be, fdq, scratch, fd, fq, fa, B, T, NH, hs, d);
    cpu_out(be, dqkv, fdq, CPU_SZ(B) * T * 3 * C);
}

void cpu_attention_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->attention_forward = f32 ? cpu_attention_forward : h_attention_forward;
    t->attention_backward = f32 ? cpu_attention_backward : h_attention_backward;
}
