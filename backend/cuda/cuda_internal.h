// backend/cuda/cuda_internal.h: private declarations shared by the CUDA backend's files.
//
// The CUDA backend implements every BackendOps entry (contracts in backend/backend.h) on one
// stream: kernels (the .cuh files, launched through CUDA_LAUNCH in cuda_common.cuh) and
// cuBLASLt GEMMs. Everything is asynchronous on that stream; only ops that return a host
// value (sum, sum_squares_multi) and device-to-host copies wait for it.
// Deterministic: no float atomics; every reduction has a fixed order for a given shape;
// cuBLASLt algorithms are chosen once per GEMM shape and reused, with a fixed workspace.
//
// The same sources build for the GPU (nvcc) and for the CPU emulator (g++, MEGAC_CUDA_EMU:
// backend/cuda/emu/ fakes the CUDA runtime, cuBLASLt, cuBLAS's grouped GEMM and NCCL and runs
// kernels on threads).
#pragma once
#include "backend/backend.h"
#include "core/check_cuda.h"  // defines: CUDA_CHECK, CUBLAS_CHECK, cudaStream_t, cublasLt*

#include <cublas_api.h>  // defines: cublasHandle_t (cuBLAS's grouped GEMM)

#include <stddef.h>
#include <stdint.h>

// What shapes one GEMM call: the cache key (memset to 0 before filling: compared bytewise).
// Alignments are the largest powers of two (<= 256) dividing the pointers: cuBLASLt's
// heuristic picks algorithms from them (A, B, C; bias and aux pointers too, see cublasLt.h).
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, batch;
    int epilogue;    // cublasLtEpilogue_t
    int aux_ld;      // GELU epilogues: leading dimension of the aux matrix (elements), else 0
    int ab, cd;      // element types (BackendDType) of A and B, of C, D, bias and aux
    int align_a, align_b, align_c, align_bias, align_aux;
    int pad_;
    long long sa, sb, sc;
} CudaGemmKey;

// One cached GEMM (the descriptor/heuristic cache): the matmul descriptor and the three
// layouts are built, and cuBLASLt's heuristic asked, once per key; a repeated GEMM only sets
// its bias/aux pointers on the cached descriptor. Owned by CudaState, freed at destroy.
typedef struct {
    int used;
    int found;                          // the heuristic gave an algorithm (always, but for
                                        // GELU epilogues it may not support: then 0)
    CudaGemmKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;  // cuBLASLt's A (our B), B (our A), C = D
    cublasLtMatmulAlgo_t algo;
} CudaGemmAlgo;

typedef struct CudnnAttn CudnnAttn;  // cuda_cudnn_attn.c: cuDNN's library, handle and plans

#define CUDA_GEMM_CACHE 256              // distinct GEMM keys: ~20 shapes x pointer alignments
#define CUDA_WORKSPACE_BYTES (32u << 20)  // cuBLASLt workspace (Hopper wants 32 MiB)
#define CUDA_PARTIALS (1 << 20)          // doubles of reduction scratch (partial sums; 8 MiB)
#define CUDA_STAGING_BYTES (1u << 20)    // pinned host staging for small host->device copies
#define CUDA_GROUPED_CHUNK 128           // problems per cuBLAS grouped GEMM call

typedef struct {
    int device;
    BackendMath math;                    // GEMMs on fp32 operands: TF32 or strict fp32
    int gelu_epilogue;                   // 1: GELU linears use cuBLASLt's GELU epilogues;
                                         // 0 (MEGAC_CUDA_NO_GELU_EPILOGUE=1 at creation):
                                         // bias-epilogue GEMM + megac's GELU kernels
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;                     // (CUDA_WORKSPACE_BYTES) cuBLASLt workspace, also
                                         // cuBLAS's (one stream: the calls never overlap)
    cublasHandle_t blas;                 // cuBLAS for the grouped GEMM, made on first use
    int blas_state;                      // 0 not tried, 1 made, -1 unavailable (the loop)
    void **grouped_ptrs;                 // (3, CUDA_GROUPED_CHUNK) device: A, B, C pointers
    CudaGemmAlgo cache[CUDA_GEMM_CACHE];
    double *partials;                    // (CUDA_PARTIALS) device: per-block partial sums
    double *result;                      // (1) device: a reduction's final value
    double *result_host;                 // (1) pinned host: where that value is read
    void *staging;                       // (CUDA_STAGING_BYTES) pinned host staging
    cudaEvent_t staging_free;            // recorded after the copy out of `staging`
    cudaStream_t copies;                 // copy_async's stream (NULL until its first call)
    cudaEvent_t copies_after, copies_done;  // compute -> copies, copies -> compute orderings
    CudnnAttn *cudnn;                    // cuDNN's fused attention, made on first use (NULL:
                                         // not yet; GPU builds with cuDNN only)
    unsigned attn_noted;                 // the fused-attention notes printed once (bits)
} CudaState;

// The backend's state and stream. Pure.
static inline CudaState *cuda_state(Backend *be) { return (CudaState *)be->u.cuda.state; }
static inline cudaStream_t cuda_stream(Backend *be) { return cuda_state(be)->stream; }

// Blocks of `threads` covering n items, at most `cap` (grid-stride loops cover the rest).
// Under the emulator, MEGAC_EMU_GRID_CAP lowers the cap: every block costs a round of thread
// switches there, and the grid-stride kernels give the same results with fewer blocks
// (reductions then add their partial sums in another, equally fixed, order).
static inline unsigned cuda_blocks(size_t n, unsigned threads, unsigned cap) {
#ifdef MEGAC_CUDA_EMU
    unsigned emu_cap = emu_grid_cap();  // backend/cuda/emu/include/cuda_runtime.h
    if (emu_cap > 0 && emu_cap < cap) cap = emu_cap;
#endif
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b == 0 ? 1 : b > cap ? cap : b);
}

// cuda_backend.cu: waits for the stream (polling, so a signal or a dead peer is noticed).
void cuda_wait(Backend *be);

// cuda_gemm.cu -------------------------------------------------------------------------------
// Row-major, batched C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C on the
// backend's stream through cuBLASLt, ta/tb: 1 = transposed; lda/ldb/ldc are row strides;
// sa/sb/sc the strides between the `batch` matrices (elements). A and B are stored as `ab`,
// C (and bias) as `cd`: (F32, F32), (BF16, BF16), (BF16, F32), (F16, F16) or (F16, F32);
// accumulation is fp32 (TF32 tensor cores for F32 operands when the backend's math says so).
// bias (N, type cd) is added to every row through the epilogue when not NULL (beta must then
// be 0). Aborts the job on anything else.
void cuda_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
               const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
               float beta, void *C, int ldc, long long sc, int batch, const void *bias,
               BackendDType ab, BackendDType cd);
// cuda_gemm with an epilogue of cublasLt: CUBLASLT_EPILOGUE_DEFAULT or _BIAS (as cuda_gemm),
// _GELU_AUX_BIAS (C = gelu(AB + bias), aux (M, N, row stride aux_ld, type cd) = AB + bias;
// bias may then be NULL: _GELU_AUX) or _DGELU (C = AB * gelu'(aux)). beta must be 0 with any
// epilogue but DEFAULT. Returns 1, or 0 (nothing done) when cuBLASLt has no algorithm for a
// GELU epilogue here (the caller then runs the unfused ops). Aborts on anything else.
int cuda_gemm_ex(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                 const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                 float beta, void *C, int ldc, long long sc, int batch, int epilogue,
                 const void *bias, const void *aux, int aux_ld, BackendDType ab, BackendDType cd);
// Frees the descriptors of the GEMM cache (at destroy). Never fails.
void cuda_gemm_cache_free(CudaState *st);
// 1 if a GELU epilogue may be used with these pointers: bias (or NULL) and aux 16-byte
// aligned and aux_ld a multiple of 8 elements (cublasLt.h: EPILOGUE_AUX_LD; the pointer rule
// is megac's conservative reading, to be confirmed on a GPU). Pure.
int cuda_gelu_epilogue_ok(const void *bias, const void *aux, int aux_ld);
void cuda_matmul_forward(Backend *be, void *out, const void *inp, const void *weight,
                         const void *bias, int N, int C, int OC);
void cuda_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                          const void *dout, const void *inp, const void *weight,
                          int N, int C, int OC);
// cuda_gemm_grouped.cu: the grouped linear (backend.h's matmul_grouped_forward / _backward)
// through cuBLAS's grouped GEMM, or one cuda_matmul_* per group where cuBLAS lacks it.
void cuda_matmul_grouped_forward(Backend *be, void *out, void *pre, const void *inp,
                                 const void *weight, const void *bias, const int *rows, int G,
                                 int C, int OC, BackendAct act);
void cuda_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const void *weight,
                                  const void *pre, const int *rows, int G, int C, int OC,
                                  BackendAct act);
// Frees the cuBLAS handle and the pointer arrays of the grouped GEMM (at destroy). Never fails.
void cuda_grouped_free(CudaState *st);

// cuda_attention.cu (d: dropout on the probabilities, NULL for none) ------------------------
void cuda_attention_forward(Backend *be, void *out, void *att, const void *qkv,
                            int B, int T, int NH, int hs, const BackendDropout *d,
                            const BackendAttnWindow *w);
void cuda_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *att, int B, int T, int NH, int hs,
                             const BackendDropout *d);

// cuda_dropout.cu: dropout masks from backend/dropout.h's hash -----------------------------
void cuda_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C);
// dst (B, NH, T, Tk) = src * the attention-probability mask of d (may alias) for the window w
// (NULL: the whole sequence, Tk = T).
void cuda_attention_probs_dropout(Backend *be, void *dst, const void *src, const BackendDropout *d,
                                  int B, int NH, int T, const BackendAttnWindow *w);

// cuda_flash_attention.cu: fused causal attention, hs <= 128 (flash_attention.cuh) --------
void cuda_flash_attention_forward(Backend *be, void *out, float *lse, const void *qkv,
                                  int B, int T, int NH, int hs, const BackendDropout *d,
                                  const BackendAttnWindow *w);
void cuda_flash_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                   const void *qkv, const void *out, const float *lse,
                                   int B, int T, int NH, int hs, const BackendDropout *d,
                                   const BackendAttnWindow *w);
// cuda_flash_attention_tc.cu: its tensor-core path (bf16/fp16, hs 64 or 128; WMMA), taken by
// the two above when cuda_flash_tc_usable (MEGAC_FLASH_ATTN_PLAIN=1 forces the plain path).
int cuda_flash_tc_usable(const Backend *be, int hs);
void cuda_flash_tc_forward(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                           int NH, int hs);
void cuda_flash_tc_backward(Backend *be, void *dqkv, const float *D, const void *dout,
                            const void *qkv, const float *lse, int B, int T, int NH, int hs);

// cuda_cudnn_attn.c: the same two ops through cuDNN's fused SDPA (MEGAC_HAVE_CUDNN builds),
// for the whole sequence (no window, no dropout; bf16/fp16). Each returns 1 when cuDNN ran
// it, or 0 (nothing done) with the reason in *why (the library missing, no plan, alignment).
#ifdef __cplusplus
extern "C" {
#endif
int cuda_cudnn_attn_forward(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, const char **why);
int cuda_cudnn_attn_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *out, const float *lse, int B, int T,
                             int NH, int hs, const char **why);
// Frees the plans, workspace and handle (at destroy). NULL is fine.
void cuda_cudnn_attn_free(CudnnAttn *c);
#ifdef __cplusplus
}
#endif

// cuda_norm.cu: LayerNorm, RMSNorm, add, and the column sums used for bias gradients -------
// acc (C, fp32) += column sums of x (N, C, type be->act), each column summed in a fixed order.
void cuda_colsum_acc(Backend *be, float *acc, const void *x, int N, int C);
void cuda_norm_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                       const void *weight, const void *bias, int N, int C, BackendNorm kind);
void cuda_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                        const void *inp, const void *weight, const float *mean, const float *rstd,
                        int N, int C, BackendNorm kind);
// res (N, C) = a + b and ln = layernorm(res) by the block-per-row kernel (bitwise cuda_add then
// cuda_norm_forward); 0 when C is too long for that kernel (nothing done), else 1.
int cuda_residual_layernorm_row(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                const void *a, const void *b, const void *weight,
                                const void *bias, int N, int C);
void cuda_add(Backend *be, void *out, const void *a, const void *b, size_t n);
void cuda_add_f32(Backend *be, float *out, const float *a, const float *b, size_t n);
void cuda_scale_f32(Backend *be, float *x, float alpha, size_t n);

// cuda_act.cu: the activations (act.cuh) ---------------------------------------------------
void cuda_act_forward(Backend *be, void *out, const void *inp, int N, int F, BackendAct act);
// dinp may alias dout for a pointwise act: matmul_act_backward's unfused path.
void cuda_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                       BackendAct act);

// cuda_rope.cu: rope_gqa (rope.cuh) -----------------------------------------------------------
void cuda_rope_gqa_forward(Backend *be, void *out, const void *inp, int B, int T, int NH, int G,
                           int hs, int rot, float base, int pos0, const int *pos);
void cuda_rope_gqa_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                            int G, int hs, int rot, float base, int pos0, const int *pos);

// cuda_moe.cu: the mixture-of-experts router and token rows (moe.cuh) ----------------------
void cuda_moe_router_forward(Backend *be, int *idx, float *probs, const float *logits, int N,
                             const BackendMoERouter *r);
void cuda_moe_router_backward(Backend *be, float *dlogits, const float *dprobs,
                              const float *logits, const int *idx, int N,
                              const BackendMoERouter *r);
void cuda_moe_router_loss(Backend *be, float *dlogits, float *loss, const float *logits,
                          const float *coef, const int *row_group, float z_coef,
                          float grad_scale, int N, const BackendMoERouter *r);
void cuda_rows_gather(Backend *be, void *out, const void *in, const int *idx, const float *scale,
                      int M, int C);
void cuda_rows_combine(Backend *be, void *out, const void *in, const int *slot, const float *w,
                       int N, int K, int C);
void cuda_rows_dot(Backend *be, float *dw, const void *dy, const void *in, const int *slot,
                   int N, int K, int C);

// cuda_fused.cu: the fused ops (fused.cuh) -------------------------------------------------
void cuda_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                     const void *a, const void *b, const void *weight,
                                     const void *bias, int N, int C);
void cuda_matmul_act_forward(Backend *be, void *out, void *pre, const void *inp,
                             const void *weight, const void *bias, int N, int C, int OC,
                             BackendAct act);
void cuda_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const void *weight,
                              const void *pre, int N, int C, int OC, BackendAct act);

// cuda_cast.cu: conversions between the element types -----------------------------------------
void cuda_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n);
void cuda_copy_row_blocks(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                          size_t lds, size_t sbs, int rows, int nb, int width, int add);

// cuda_embed_xent.cu -----------------------------------------------------------------------
void cuda_embedding_forward(Backend *be, void *out, const int *tokens, const void *table,
                            int N, int C, int vocab_start, int V_local);
void cuda_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                             int N, int C, int vocab_start, int V_local);
void cuda_position_forward(Backend *be, void *out, const void *wpe, int B, int T, int C, int pos0,
                           const int *pos);
void cuda_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                            int pos0, const int *pos);
void cuda_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                     const int *targets, int N, int V_local, int V_valid, int vocab_start);
void cuda_xent_rescale(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                       int N);
void cuda_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                    const float *tgt, int N);
void cuda_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                        const float *rowmax, const float *sumexp, const float *tgt,
                        const int *targets, const float *dscale, int N, int V_local, int V_valid,
                        int vocab_start);

// cuda_optim.cu: multi-tensor AdamW and the double-precision reductions ------------------
void cuda_adamw_multi(Backend *be, float *param, void *copy, const float *grad, float *m, float *v,
                      const BackendSegment *segs, int nseg, size_t max_len, float lr,
                      float beta1, float beta2, float eps, float wd, float grad_scale, int step);
double cuda_sum(Backend *be, double *acc, const float *x, size_t n);
double cuda_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                              size_t max_len);

// Each op family's part of the ops table (in the file of its ops; cuda_backend.cu lists the
// families in cuda_ops_fill): a new entry of a family is registered there.
void cuda_gemm_ops(BackendOps *t);            // cuda_gemm.cu
void cuda_norm_ops(BackendOps *t);            // cuda_norm.cu
void cuda_fused_ops(BackendOps *t);           // cuda_fused.cu
void cuda_act_ops(BackendOps *t);             // cuda_act.cu
void cuda_cast_ops(BackendOps *t);            // cuda_cast.cu
void cuda_dropout_ops(BackendOps *t);         // cuda_dropout.cu
void cuda_attention_ops(BackendOps *t);       // cuda_attention.cu
void cuda_flash_attention_ops(BackendOps *t); // cuda_flash_attention.cu
void cuda_embed_xent_ops(BackendOps *t);      // cuda_embed_xent.cu
void cuda_optim_ops(BackendOps *t);           // cuda_optim.cu
void cuda_rope_ops(BackendOps *t);            // cuda_rope.cu
void cuda_moe_ops(BackendOps *t);             // cuda_moe.cu
