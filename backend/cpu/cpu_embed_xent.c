// backend/cpu/cpu_embed_xent.c: vocab-parallel embedding lookup, position embedding, and
// the pieces of vocab-parallel softmax cross-entropy (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy): this rank holds vocabulary rows/columns
// [vocab_start, vocab_start + V_local), of which the first V_valid are real, the rest padding.
//
// A target counts as "in this shard" when target - vocab_start lies in [0, V_valid): a
// padding column is never a target, so forward (tgt) and backward (one-hot) agree.
#include "cpu_backend.h"
#include "cpu_math.h"

#include <float.h>   // defines: FLT_MAX
#include <math.h>    // defines: logf
#include <string.h>  // defines: memcpy, memset

// out (N, C) = table (V_local, C)[tok - vocab_start], zero rows for tokens of other shards.
void cpu_embedding_forward(Backend *be, void *out_, const int *tokens, const void *table_,
                           int N, int C, int vocab_start, int V_local) {
    float *out = out_;
    const float *table = table_;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        int r = tokens[i] - vocab_start;
        float *y = out + (size_t)i * C;
        if (r >= 0 && r < V_local) memcpy(y, table + (size_t)r * C, (size_t)C * sizeof(float));
        else memset(y, 0, (size_t)C * sizeof(float));
    }
}

// dtable (V_local, C) += dout (N, C) rows of the tokens in the shard. Threads own blocks of
// channels and walk the tokens in order: no two threads touch the same float, and the sum
// order of a repeated token does not depend on the thread count.
void cpu_embedding_backward(Backend *be, float *dtable, const void *dout_, const int *tokens,
                            int N, int C, int vocab_start, int V_local) {
    const float *dout = dout_;
    int nblk = (C + CPU_COLBLK - 1) / CPU_COLBLK, nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CPU_COLBLK, w = C - c0 < CPU_COLBLK ? C - c0 : CPU_COLBLK;
        for (int i = 0; i < N; i++) {
            int r = tokens[i] - vocab_start;
            if (r < 0 || r >= V_local) continue;
            float *dt = dtable + (size_t)r * C + c0;
            const float *dy = dout + (size_t)i * C + c0;
#pragma omp simd
            for (int j = 0; j < w; j++) dt[j] += dy[j];
        }
    }
}

// out (B, T, C) += rows [pos0, pos0 + T) of wpe, or rows pos[r] of wpe (pos not NULL).
void cpu_position_forward(Backend *be, void *out_, const void *wpe_, int B, int T, int C,
                          int pos0, const int *pos) {
    float *out = out_;
    const float *wpe = wpe_;
    int nt = cpu_nt(be), rows = B * T;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)rows * C > CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        float *y = out + (size_t)r * C;
        const float *p = wpe + (size_t)(pos ? pos[r] : pos0 + r % T) * C;
#pragma omp simd
        for (int j = 0; j < C; j++) y[j] += p[j];
    }
}

// rows [pos0, pos0 + T) of dwpe += sum over b of dout (B, T, C); rows of dwpe are independent.
// With pos: row pos[r] += dout row r, the rows in order within each column block (threads own
// columns), so the sums do not depend on the thread count.
void cpu_position_backward(Backend *be, float *dwpe, const void *dout_, int B, int T, int C,
                           int pos0, const int *pos) {
    const float *dout = dout_;
    int nt = cpu_nt(be);
    if (pos) {
        int blocks = (C + CPU_COLBLK - 1) / CPU_COLBLK;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
        for (int cb = 0; cb < blocks; cb++) {
            int c0 = cb * CPU_COLBLK, c1 = c0 + CPU_COLBLK < C ? c0 + CPU_COLBLK : C;
            for (int r = 0; r < B * T; r++) {
                float *dp = dwpe + (size_t)pos[r] * C;
                const float *dy = dout + (size_t)r * C;
                for (int j = c0; j < c1; j++) dp[j] += dy[j];
            }
        }
        return;
    }
    dwpe += (size_t)pos0 * C;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *dy = dout + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int j = 0; j < C; j++) dp[j] += dy[j];
        }
    }
}

// Max of l (n); -FLT_MAX when n = 0.
CPU_SIMD_CLONES static float cpu_max_row(const float *l, int n) {
    float m = -FLT_MAX;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < n; j++) m = l[j] > m ? l[j] : m;
    return m;
}

// Sum of exp(l[j] - m) over l (n): float partial sums per block, blocks added in double.
CPU_SIMD_CLONES static float cpu_sumexp_row(const float *l, float m, int n) {
    enum { BLK = 1024 };
    double total = 0.0;
    for (int j0 = 0; j0 < n; j0 += BLK) {
        int j1 = j0 + BLK < n ? j0 + BLK : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) s += cpu_expf(l[j] - m);
        total += s;
    }
    return (float)total;
}

// cpu_sumexp_row's sum, the same bits, also storing each exp(l[j] - m) in e[j] (e may alias
// l: element j is read before it is written) for the softmax that follows.
CPU_SIMD_CLONES static float cpu_sumexp_store_row(float *e, const float *l, float m, int n) {
    enum { BLK = 1024 };
    double total = 0.0;
    for (int j0 = 0; j0 < n; j0 += BLK) {
        int j1 = j0 + BLK < n ? j0 + BLK : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) {
            float x = cpu_expf(l[j] - m);
            e[j] = x, s += x;
        }
        total += s;
    }
    return (float)total;
}

// rowmax (N) = max over the valid columns [0, V_valid) (-FLT_MAX when V_valid = 0), sumexp
// (N) = sum of exp(l - rowmax) over them, tgt (N) = l[target - vocab_start] for targets in
// this shard, else 0: one sweep over the rows, per row the max loop then the sum loop while
// the row is in cache.
// One row's statistics over its V_valid columns: *m its max, *s the sum of exp(l - m), *lt
// the target's logit (column t, 0 when not in [0, V_valid)). cpu_xent_stats and the one-pass
// classifier (cpu_xent_backward) both call it: the same bits.
static void cpu_xent_row_stats(const float *l, int t, int V_valid, float *m, float *s, float *lt) {
    *m = cpu_max_row(l, V_valid);
    *s = cpu_sumexp_row(l, *m, V_valid);
    *lt = t >= 0 && t < V_valid ? l[t] : 0.0f;
}

void cpu_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits_,
                    const int *targets, int N, int V_local, int V_valid, int vocab_start) {
    const float *logits = logits_;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * V_valid > CPU_PAR_MIN)
    for (int i = 0; i < N; i++)
        cpu_xent_row_stats(logits + (size_t)i * V_local, targets[i] - vocab_start, V_valid,
                           &rowmax[i], &sumexp[i], &tgt[i]);
}

// sumexp (N) *= exp(shard_max - rowmax): a shard's sum onto the max over all shards.
void cpu_xent_rescale(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                      int N) {
    for (int i = 0; i < N; i++) sumexp[i] *= cpu_expf(shard_max[i] - rowmax[i]);
}

// loss (N) = log(sumexp) + rowmax - tgt (all three already reduced over the TP group).
void cpu_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                   const float *tgt, int N) {
    for (int i = 0; i < N; i++) loss[i] = logf(sumexp[i]) + rowmax[i] - tgt[i];
}

// dl (n) = d * (e * inv) from e = exp(l - m) already computed (cpu_sumexp_store_row); dl
// may alias e.
CPU_SIMD_CLONES static void cpu_softmax_scale_row(float *dl, const float *e, float inv, float d, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) dl[j] = d * (e[j] * inv);
}

// dl (n) = d * exp(l - m) * inv; dl may alias l.
CPU_SIMD_CLONES static void cpu_softmax_grad_row(float *dl, const float *l, float m, float inv,
                                                 float d, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) dl[j] = d * (cpu_expf(l[j] - m) * inv);
}

// One row of dlogits: dl (V_local) = d * (softmax - onehot) over the valid columns from the
// row l, its max m and sum of exponentials s; 0 at padding; t: the target's column (in the
// shard when in [0, V_valid)). Element j is read before it is written: dl may alias l.
// have_exp: dl already holds exp(l - m) over the valid columns (l's values are then read only
// through lt, the target's logit; else lt is unused).
static void cpu_xent_grad_row(float *dl, const float *l, float m, float s, float d, int t,
                              int V_local, int V_valid, int have_exp, float lt) {
    float inv = 1.0f / s;
    int in_shard = t >= 0 && t < V_valid;
    if (have_exp) {
        cpu_softmax_scale_row(dl, dl, inv, d, V_valid);
    } else {
        lt = in_shard ? l[t] : 0.0f;  // kept: the row loop may overwrite it
        cpu_softmax_grad_row(dl, l, m, inv, d, V_valid);
    }
    for (int j = V_valid; j < V_local; j++) dl[j] = 0.0f;
    if (in_shard) dl[t] = d * (cpu_expf(lt - m) * inv - 1.0f);
}

// dlogits (N, V_local) = dscale * (softmax - onehot) over valid columns, 0 at padding.
// Element j is read before it is written, so dlogits may alias logits. loss non-NULL: also
// loss (N) from tgt by cpu_xent_loss itself (it reads no logits: the same bits). rowmax NULL
// (one vocabulary shard; sumexp and tgt unused): each row's statistics first, as
// cpu_xent_stats computes them, the loss from them as cpu_xent_loss, then its dlogits while
// the row is in cache: the same bits as the three calls, one sweep over the logits; the sum's
// exponentials are kept in dlogits' row and scaled, not computed twice.
void cpu_xent_backward(Backend *be, void *dlogits_, float *loss, const void *logits_,
                       const float *rowmax, const float *sumexp, const float *tgt,
                       const int *targets, const float *dscale, int N, int V_local, int V_valid,
                       int vocab_start) {
    if (loss && rowmax) cpu_xent_loss(be, loss, sumexp, rowmax, tgt, N);
    float *dlogits = dlogits_;
    const float *logits = logits_;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * V_local > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V_local;
        int t = targets[i] - vocab_start;
        float m, s, lt = 0.0f, *dl = dlogits + (size_t)i * V_local;
        if (rowmax) {
            m = rowmax[i], s = sumexp[i];
        } else {  // cpu_xent_row_stats's figures (the same bits), then cpu_xent_loss's expression
            m = cpu_max_row(l, V_valid);
            lt = t >= 0 && t < V_valid ? l[t] : 0.0f;
            s = cpu_sumexp_store_row(dl, l, m, V_valid);
            if (loss) loss[i] = logf(s) + m - lt;
        }
        cpu_xent_grad_row(dl, l, m, s, dscale[i], t, V_local, V_valid, !rowmax, lt);
    }
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

// Rows of the table copied as they are (no arithmetic: the same 16-bit elements).
static void h_embedding_forward(Backend *be, void *o, const int *tokens, const void *table,
                                int N, int C, int vocab_start, int V_local) {
    size_t row = CPU_SZ(C) * 2;
    for (int i = 0; i < N; i++) {
        int t = tokens[i] - vocab_start;
        char *dst = (char *)o + (size_t)i * row;
        if (t >= 0 && t < V_local) cpu_copy(be, dst, (const char *)table + (size_t)t * row, row, BACKEND_D2D);
        else cpu_zero(be, dst, row);
    }
}

static void h_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                                 int N, int C, int vocab_start, int V_local) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * C));
    cpu_embedding_backward(be, dtable, cpu_in(&a, dout, CPU_SZ(N) * C), tokens, N, C, vocab_start, V_local);
}

// out += rows [pos0, pos0 + T) of wpe: only those rows are converted; with pos (host ints on
// this backend) rows [0, 1 + max pos), read as rows pos[r].
static void h_position_forward(Backend *be, void *o, const void *wpe, int B, int T, int C,
                               int pos0, const int *pos) {
    int n = T;
    if (pos) {
        n = 1, pos0 = 0;
        for (size_t r = 0; r < CPU_SZ(B) * T; r++) n = pos[r] + 1 > n ? pos[r] + 1 : n;
    }
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(B) * T * C) + cpu_pad(CPU_SZ(n) * C));
    float *fo = cpu_in(&a, o, CPU_SZ(B) * T * C);
    const float *fw = cpu_in(&a, (const char *)wpe + CPU_SZ(pos0) * C * 2, CPU_SZ(n) * C);
    cpu_position_forward(be, fo, fw, B, T, C, 0, pos);
    cpu_out(be, o, fo, CPU_SZ(B) * T * C);
}

static void h_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                                int pos0, const int *pos) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(B) * T * C));
    cpu_position_backward(be, dwpe, cpu_in(&a, dout, CPU_SZ(B) * T * C), B, T, C, pos0, pos);
}

static void h_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt,
                         const void *logits, const int *targets, int N, int V_local, int V_valid,
                         int vocab_start) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * V_local));
    cpu_xent_stats(be, rowmax, sumexp, tgt, cpu_in(&a, logits, CPU_SZ(N) * V_local), targets, N, V_local,
                   V_valid, vocab_start);
}

static void h_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                            const float *rowmax, const float *sumexp, const float *tgt,
                            const int *targets, const float *dscale, int N, int V_local,
                            int V_valid, int vocab_start) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * V_local));
    float *f = cpu_in(&a, logits, CPU_SZ(N) * V_local);
    cpu_xent_backward(be, f, loss, f, rowmax, sumexp, tgt, targets, dscale, N, V_local, V_valid,
                      vocab_start);
    cpu_out(be, dlogits, f, CPU_SZ(N) * V_local);
}

void cpu_embed_xent_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->embedding_forward = f32 ? cpu_embedding_forward : h_embedding_forward;
    t->embedding_backward = f32 ? cpu_embedding_backward : h_embedding_backward;
    t->position_forward = f32 ? cpu_position_forward : h_position_forward;
    t->position_backward = f32 ? cpu_position_backward : h_position_backward;
    t->xent_stats = f32 ? cpu_xent_stats : h_xent_stats;
    t->xent_rescale = cpu_xent_rescale;
    t->xent_loss = cpu_xent_loss;
    t->xent_backward = f32 ? cpu_xent_backward : h_xent_backward;
}
