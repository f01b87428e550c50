// backend/cpu/cpu_backend.h: private declarations shared by the CPU backend's files.
//
// The CPU backend is the reference every other backend is tested against: fp32 arithmetic
// (activations stored in fp32, or bf16 / fp16 with --bf16 / --fp16: cpu_half.c), row-major,
// deterministic (the same inputs give bitwise the same outputs on every run). One pool of
// threads, OpenMP's, does everything: GEMMs are one-thread OpenBLAS calls, one per thread
// (cpu_gemm.h); everything else is plain loops in OpenMP regions. Reductions are parallelised
// over independent outputs (rows, or channels), or summed over fixed chunks of rows and then
// the chunks in order (CPU_ROWCHUNK), never with atomics, so most ops give the same bits for
// any thread count. Each op below implements the BackendOps entry of the same
// name; the contracts are in backend/backend.h.
#pragma once
#include "backend/backend.h"
#include "core/half.h"  // defines: core_f32_to_bf16, core_bf16_to_f32, ...

#include <stddef.h>
#include <stdint.h>

// Elementwise loops shorter than this run on one thread (a parallel region costs more).
#define CPU_PAR_MIN 16384
// Buffers of at least this many bytes are cleared by all threads (cpu_zero).
#define CPU_ZERO_PAR_MIN ((size_t)1 << 20)
// Channel block for the embeddings' gradients (scatters over rows: threads own channels).
#define CPU_COLBLK 32
// Rows per partial sum of the reductions over rows (the biases' and the norms' weight
// gradients): each chunk's rows are summed in order, then the chunks' sums in order
// (cpu_chunks_acc). Fixed, so the bits do not depend on the thread count; the threads take
// whole chunks in order, so each reads the rows it wrote in the row-split ops before.
#define CPU_ROWCHUNK 32
static inline int cpu_rowchunks(int N) { return (N + CPU_ROWCHUNK - 1) / CPU_ROWCHUNK; }
// One past the last row of chunk k of N rows (its first is k * CPU_ROWCHUNK).
static inline int cpu_rowchunk_end(int N, int k) {
    return N - k * CPU_ROWCHUNK < CPU_ROWCHUNK ? N : (k + 1) * CPU_ROWCHUNK;
}

// cpu_backend.c: host memory (the BackendOps entries of the same names)
void *cpu_alloc(Backend *be, size_t bytes);
void cpu_free(Backend *be, void *p);
void cpu_zero(Backend *be, void *p, size_t bytes);
void cpu_copy(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind);
void cpu_sync(Backend *be);
void cpu_destroy(Backend *be);

// cpu_ops.c: the ops table for activations of type `act`, filled by every op family of the
// list there: with BACKEND_F32 the fp32 ops (the `void *` entries of BackendOps are float
// buffers), with BACKEND_BF16 / BACKEND_F16 each family's 16-bit entries where it takes `void *`
// activations. Never fails.
void cpu_ops_fill(BackendOps *t, BackendDType act);
// Each family's part of the table (in the file of its ops), for activations of type act.
void cpu_memory_ops(BackendOps *t, BackendDType act);      // cpu_backend.c
void cpu_matmul_ops(BackendOps *t, BackendDType act);      // cpu_matmul.c
void cpu_norm_ops(BackendOps *t, BackendDType act);        // cpu_norm.c
void cpu_act_ops(BackendOps *t, BackendDType act);         // cpu_act.c
void cpu_cast_ops(BackendOps *t, BackendDType act);        // cpu_cast.c
void cpu_dropout_ops(BackendOps *t, BackendDType act);     // cpu_dropout.c
void cpu_attention_ops(BackendOps *t, BackendDType act);   // cpu_attention.c
void cpu_flash_ops(BackendOps *t, BackendDType act);       // cpu_attention_flash.c
void cpu_embed_xent_ops(BackendOps *t, BackendDType act);  // cpu_embed_xent.c
void cpu_optim_ops(BackendOps *t, BackendDType act);       // cpu_optim.c
void cpu_rope_ops(BackendOps *t, BackendDType act);        // cpu_rope.c
void cpu_moe_ops(BackendOps *t, BackendDType act);         // cpu_moe.c

// cpu_half.c: the 16-bit entries' fp32 scratch (the rules at the top of cpu_half.c). An arena
// hands out 64-byte-aligned slices of the backend's scratch, grown to at least nfloats by
// cpu_arena (its contents are not kept; never fails); cpu_in converts n elements of be->act
// at p (NULL: NULL) into a slice, cpu_out rounds f (n) into dst; cpu_win_in does cpu_in for a
// window's kv (w NULL: NULL; *fw the window the fp32 op gets).
typedef struct {
    Backend *be;
    float *cur;  // the next free float of the scratch
} CpuArena;
#define CPU_SZ(x) ((size_t)(x))
size_t cpu_pad(size_t n);  // floats of a slice of n: 16-float multiples
CpuArena cpu_arena(Backend *be, size_t nfloats);
float *cpu_take(CpuArena *a, size_t n);
float *cpu_in(CpuArena *a, const void *p, size_t n);
void cpu_out(Backend *be, void *dst, const float *f, size_t n);
const BackendAttnWindow *cpu_win_in(CpuArena *a, const BackendAttnWindow *w, BackendAttnWindow *fw,
                                    int B, size_t row);

// cpu_cast.c: the `cast` op (conversions in core/half.h) and copy_row_blocks.
void cpu_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n);
void cpu_copy_row_blocks(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                         size_t lds, size_t sbs, int rows, int nb, int width, int add);
// Element i of the buffer p of type t as fp32, and x stored there rounded to nearest even.
static inline float cpu_load(const void *p, BackendDType t, size_t i) {
    if (t == BACKEND_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == BACKEND_BF16 ? core_bf16_to_f32(h) : core_f16_to_f32(h);
}
static inline void cpu_store(void *p, BackendDType t, size_t i, float x) {
    if (t == BACKEND_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = t == BACKEND_BF16 ? core_f32_to_bf16(x) : core_f32_to_f16(x);
}

// The backend's OpenMP thread count. Never fails.
static inline int cpu_nt(const Backend *be) { return be->u.cpu.nthreads; }

// cpu_matmul.c
void cpu_matmul_forward(Backend *be, void *out, const void *inp, const void *weight,
                        const void *bias, int N, int C, int OC);
void cpu_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                         const void *dout, const void *inp, const void *weight,
                         int N, int C, int OC);
// The grouped products (Backend matmul_grouped_*): one cpu_gemm_grouped per call.
void cpu_matmul_grouped_forward(Backend *be, void *out, void *pre, const void *inp,
                                const void *weight, const void *bias, const int *rows, int G,
                                int C, int OC, BackendAct act);
void cpu_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                 const void *dout, const void *inp, const void *weight,
                                 const void *pre, const int *rows, int G, int C, int OC,
                                 BackendAct act);
// matmul_forward then out = act(pre), and matmul_backward then dinp *= act'(pre): a
// pointwise act taken inside each GEMM panel (cpu_gemm_fused), the same bits as the pairs.
void cpu_matmul_act_forward(Backend *be, void *out, void *pre, const void *inp,
                            const void *weight, const void *bias, int N, int C, int OC,
                            BackendAct act);
void cpu_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                             const void *dout, const void *inp, const void *weight,
                             const void *pre, int N, int C, int OC, BackendAct act);
// acc (C) += column sums of x (N, C), in chunks of CPU_ROWCHUNK rows (cpu_chunks_acc).
void cpu_colsum_acc(Backend *be, float *acc, const float *x, int N, int C);
// acc (C) += the sum of part (nck, C)'s rows, in order (a chunked reduction's partials). Main
// thread, outside regions.
void cpu_chunks_acc(Backend *be, float *acc, const float *part, int nck, int C);
// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C; ta/tb: 1 = transposed. Degenerate
// sizes (M, N or K zero) are handled without calling BLAS. OpenBLAS threads it as it is set
// to: from the main thread, or from inside an OpenMP region between cpu_blas_single_begin
// and cpu_blas_single_end (cpu_gemm.h), one thread per call.
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *Cm, int ldc);

// cpu_norm.c
void cpu_norm_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                      const void *weight, const void *bias, int N, int C, BackendNorm kind);
void cpu_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                       const void *inp, const void *weight, const float *mean, const float *rstd,
                       int N, int C, BackendNorm kind);
void cpu_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                    const void *a, const void *b, const void *weight,
                                    const void *bias, int N, int C);
void cpu_add(Backend *be, float *out, const float *a, const float *b, size_t n);
void cpu_scale(Backend *be, float *x, float alpha, size_t n);

// cpu_act.c: the activations (pointwise and gated)
void cpu_act_forward(Backend *be, void *out, const void *inp, int N, int F, BackendAct act);
void cpu_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                      BackendAct act);
// One thread's share of a pointwise act's forward, out (n) = act(inp), and backward, dinp (n)
// = act'(inp) * dout (dinp may alias dout): no region; for fused loops (cpu_gemm_fused's
// epilogues). A gated act aborts.
void cpu_act_span(BackendAct act, float *out, const float *inp, size_t n);
void cpu_act_grad_span(BackendAct act, float *dinp, const float *inp, const float *dout, size_t n);

// cpu_rope.c (void * activations, as the BackendOps entries they implement)
void cpu_rope_gqa_forward(Backend *be, void *out, const void *inp, int B, int T, int NH, int G,
                          int hs, int rot, float base, int pos0, const int *pos);
void cpu_rope_gqa_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                           int G, int hs, int rot, float base, int pos0, const int *pos);

// cpu_attention.c (d: dropout on the probabilities, NULL for none)
void cpu_attention_forward(Backend *be, void *out, void *att, const void *qkv,
                           int B, int T, int NH, int hs, const BackendDropout *d,
                           const BackendAttnWindow *w);
void cpu_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                            const void *qkv, const void *att, int B, int T, int NH, int hs,
                            const BackendDropout *d);

// cpu_dropout.c
void cpu_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C);
// f (n) = dropout_factor(d, idx0 + j), j < n, vectorised (the same bits).
void cpu_dropout_factors(float *f, int n, const BackendDropout *d, uint64_t idx0);
// y (n) = x (n) * dropout_factor(d, idx0 + j), vectorised (the same bits); y may alias x.
void cpu_dropout_span(float *y, const float *x, int n, const BackendDropout *d, uint64_t idx0);

// cpu_attention_flash.c (d as in cpu_attention.c)
void cpu_flash_attention_forward(Backend *be, void *out, float *lse, const void *qkv,
                                 int B, int T, int NH, int hs, const BackendDropout *d,
                                 const BackendAttnWindow *w);
void cpu_flash_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                  const void *qkv, const void *out, const float *lse,
                                  int B, int T, int NH, int hs, const BackendDropout *d,
                                  const BackendAttnWindow *w);

// cpu_embed_xent.c
void cpu_embedding_forward(Backend *be, void *out, const int *tokens, const void *table,
                           int N, int C, int vocab_start, int V_local);
void cpu_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                            int N, int C, int vocab_start, int V_local);
void cpu_position_forward(Backend *be, void *out, const void *wpe, int B, int T, int C, int pos0,
                          const int *pos);
void cpu_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                           int pos0, const int *pos);
void cpu_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                    const int *targets, int N, int V_local, int V_valid, int vocab_start);
void cpu_xent_rescale(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                      int N);
void cpu_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                   const float *tgt, int N);
void cpu_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                       const float *rowmax, const float *sumexp, const float *tgt,
                       const int *targets, const float *dscale, int N, int V_local, int V_valid,
                       int vocab_start);

// cpu_optim.c
double cpu_sum(Backend *be, double *acc, const float *x, size_t n);
void cpu_adamw_multi(Backend *be, float *param, void *copy, const float *grad, float *m, float *v,
                     const BackendSegment *segs, int nseg, size_t max_len, float lr,
                     float beta1, float beta2, float eps, float wd, float grad_scale, int step);
double cpu_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                             size_t max_len);

// cpu_moe.c: the mixture-of-experts router and token rows (the rows ops load and store
// be->act themselves: the same functions in the fp32 and the 16-bit tables)
void cpu_moe_router_forward(Backend *be, int *idx, float *probs, const float *logits, int N,
                            const BackendMoERouter *r);
void cpu_moe_router_backward(Backend *be, float *dlogits, const float *dprobs,
                             const float *logits, const int *idx, int N,
                             const BackendMoERouter *r);
void cpu_moe_router_loss(Backend *be, float *dlogits, float *loss, const float *logits,
                         const float *coef, const int *row_group, float z_coef, float grad_scale,
                         int N, const BackendMoERouter *r);
void cpu_rows_gather(Backend *be, void *out, const void *in, const int *idx, const float *scale,
                     int M, int C);
void cpu_rows_combine(Backend *be, void *out, const void *in, const int *slot, const float *w,
                      int N, int K, int C);
void cpu_rows_dot(Backend *be, float *dw, const void *dy, const void *in, const int *slot, int N,
                  int K, int C);
