// backend/backend.h: Backend, the arithmetic every layer calls (CPU or CUDA).
//
// A small interface struct: function pointers (BackendOps) + the backend's own state in a
// union. Layers hold shapes, the tensor-parallel split and the communication; they never
// loop over tensors themselves. The CPU backend (C + OpenMP + BLAS, fp32, deterministic) is
// the reference; the CUDA backend (kernels + cuBLASLt) is tested against it op by op.
// One entry per operation that production code calls: a variant is a parameter of its entry
// (attention's optional dropout descriptor, the activation kind), not an entry of its own, and arithmetic that only
// tests need lives in the tests (tests/backend/backend_ref_ops.h). Adding an op, step by step:
// backend/README.md.
//
// Conventions
//   * Precision: activations and the compute copies of the weights are stored in the
//     backend's activation type `be->act` (BackendDType): fp32, bf16 or fp16 (--bf16 /
//     --fp16) on both backends (the CPU converts at each op's loads and stores: cpu_half.c). They are `void *` below. Everything typed
//     `float *` is fp32 whatever be->act is: parameter gradients (main gradients, accumulated
//     in fp32 over micro-batches), LayerNorm statistics, log-sum-exp, cross-entropy
//     statistics and losses, attention backward scratch, master weights and optimizer state.
//     Arithmetic inside every op is fp32; only loads and stores round.
//   * Row-major. N = rows (B*T), C = channels, OC = output channels, NH = heads,
//     hs = head size, V_local = this rank's vocabulary columns.
//   * Activation gradients (`dinp`) are OVERWRITTEN, except norm_backward, which
//     ACCUMULATES into dinp (it closes a residual branch). Parameter gradients (`dweight`,
//     `dbias`, `dtable`, `dwpe`) always ACCUMULATE (+=), for gradient accumulation over
//     micro-batches. A NULL gradient pointer skips that gradient.
//   * Pointers are device pointers of this backend (host memory for CPU). Integer tokens
//     are int32. Ops are asynchronous on CUDA; anything returning a host value syncs.
#pragma once
#include <stddef.h>
#include "dropout.h"  // defines: BackendDropout, the mask hash

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BACKEND_CPU, BACKEND_CUDA } BackendKind;
// Element types of activation buffers and weight copies (values are stable: logged, tested).
typedef enum { BACKEND_F32 = 0, BACKEND_BF16 = 1, BACKEND_F16 = 2 } BackendDType;
typedef enum { BACKEND_H2D, BACKEND_D2H, BACKEND_D2D } BackendCopyKind;
// The MLP's activation (values are stable: logged, tested). Pointwise: GELU (tanh
// approximation), squared ReLU (relu(x)^2, Primer; Megatron's --squared-relu). Gated (the input has two halves per row, [gate | up]): SwiGLU, silu(gate) *
// up. The ops take the kind (act_forward, matmul_act_forward, ...); a new activation is a
// value here and a case in each backend's activation file (cpu_act.c, act.cuh).
typedef enum {
    BACKEND_ACT_GELU = 0,
    BACKEND_ACT_SWIGLU = 1,
    BACKEND_ACT_RELU2 = 2,
    BACKEND_ACT_COUNT
} BackendAct;
// Normalization of the blocks (values are stable): LayerNorm (GPT-2), RMSNorm (Llama).
// Normalization kinds; BACKEND_NORM_1P (--apply-layernorm-1p) is a bit on either: the
// gamma is zero-centred, the kernels scale by (1 + weight), 1 added in fp32.
typedef enum {
    BACKEND_LAYERNORM = 0,
    BACKEND_RMSNORM = 1,
    BACKEND_NORM_1P = 2,
    BACKEND_LAYERNORM_1P = 2,
    BACKEND_RMSNORM_1P = 3
} BackendNorm;
// 1 if act is gated (SwiGLU: input rows [gate | up], twice the output's width). Pure.
static inline int backend_act_gated(BackendAct act) { return act == BACKEND_ACT_SWIGLU; }
// The width of act's output from OC columns of its input (pre): OC / 2 if gated, else OC. Pure.
static inline int backend_act_width(BackendAct act, int OC) {
    return backend_act_gated(act) ? OC / 2 : OC;
}

// R, the rows of the grouped linear's G groups (matmul_grouped_*): the sum of rows[g]. Pure.
static inline size_t backend_rows_total(const int *rows, int G) {
    size_t R = 0;
    for (int g = 0; g < G; g++) R += (size_t)rows[g];
    return R;
}

// matmul_grouped_backward's rule for its act input: with pre, dinp is given and act is a
// pointwise one. Aborts the job (naming the op) when it is broken; else returns.
void backend_check_grouped_pre(const void *pre, const void *dinp, BackendAct act);

typedef struct Backend Backend;

// Which kernels run the fused attention entries (flash_attention_forward/backward), from
// --attention-backend (values stable). MEGAC: megac's own kernels (a new backend's default;
// the CPU's only ones). AUTO: cuDNN's fused SDPA for the calls it can run with megac's
// semantics (backend_attn_cudnn_case) on a CUDA backend built with cuDNN, megac's kernels
// for the rest. CUDNN: the same, asked for by name: each fallback is printed once.
typedef enum { BACKEND_ATTN_MEGAC = 0, BACKEND_ATTN_AUTO = 1, BACKEND_ATTN_CUDNN = 2 } BackendAttnKernels;

// The router of a mixture-of-experts layer (the moe_router_* ops; values are stable).
typedef enum { BACKEND_MOE_SOFTMAX = 0, BACKEND_MOE_SIGMOID = 1 } BackendMoEScore;
// The largest E the router ops take (both backends abort the job naming E above it).
#define BACKEND_MOE_MAX_EXPERTS 256
typedef struct {
    int E, K;               // experts, experts chosen per token (1 <= K <= E)
    BackendMoEScore score;  // --moe-router-score-function
    int pre_softmax;        // softmax only: softmax over all E, then top-k of the scores
                            // (else top-k of the logits, then softmax over the K chosen)
    float scaling;          // --moe-router-topk-scaling-factor; 0 or 1: none
    const float *bias;      // (E) backend memory: the expert bias (aux-loss-free
                            // balancing), added to the scores for the CHOICE only; NULL none
} BackendMoERouter;

// A window of the global sequence for the attention forwards (NULL: the whole sequence, the
// queries, keys and values of qkv's own T rows, positions [0, T)). The op's T query rows of
// qkv hold global positions [q0, q0 + T); keys and values are the Tk rows of kv, global
// positions [k0, k0 + Tk). Query position i sees key position j iff j <= i (causal on global
// positions); a query that sees no key gets out 0 (flash: lse -inf). A decoding step with a
// key/value cache: q0 = k0 + Tk - T over the cached rows; a sequence split across ranks
// (context parallelism): each pair of chunks. {0, 0, T, NULL} is the whole sequence.
// Documents (--reset-attention-mask): qstart (B, T) ints in the backend's memory, one per
// query row, the global position where that query's document starts (qstart <= its own
// position); the query sees key j iff qstart <= j <= its position. NULL: 0 (plain causal).
// A ring over key blocks: flash forward with accumulate over every visible block, then one
// flash backward per visible block with the final out and lse (dq and each block's dkv add).
typedef struct {
    int q0, k0, Tk;
    const void *kv;  // (B, Tk, 3*NH*hs) rows as qkv's, of which [k | v] are read; NULL: qkv
    int accumulate;  // flash forward only: 1 = out, lse hold earlier windows' result for these
                     // queries (lse -inf, out 0: no key yet); continue their online softmax
                     // and leave the merged result. 0: overwrite
    void *dkv;       // flash backward only: (B, Tk, 3*NH*hs) rows as kv's, whose [k | v] parts
                     // get += dk, dv (q part untouched); NULL: dqkv's rows (kv NULL too)
    int kv_heads;    // flash only. 0: kv, dkv rows as above. G > 0 (G divides NH): packed rows
                     // (B, Tk, 2*G*hs) [k: G heads | v: G heads] of kv and dkv (both given), query
                     // head h reading kv head h / (NH/G) (grouped-query attention); the backward
                     // adds into kv head g the dk, dv summed over its NH/G query heads
    const int *qstart;  // (B, T) document start of each query row (above); NULL: none
} BackendAttnWindow;

// A range of the flat parameter/gradient buffers for the multi-tensor ops (adamw_multi,
// sum_squares_multi): elements [begin, begin + len). Tables of these live in the backend's
// memory (allocated with alloc, filled with copy), built once when the optimizer is made.
typedef struct {
    size_t begin, len;
    int weight_decay;  // adamw_multi: 1 applies the weight decay, 0 none
    int pad_;
} BackendSegment;

typedef struct {
    // --- memory ----------------------------------------------------------------------
    void *(*alloc)(Backend *be, size_t bytes);  // zeroed, 64-byte aligned; aborts on failure
    void (*free)(Backend *be, void *p);         // NULL is fine
    void (*zero)(Backend *be, void *p, size_t bytes);
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind);
    void (*sync)(Backend *be);                  // waits for all queued work (not copy_async's)
    void (*destroy)(Backend *be);               // frees the backend's own state (not `be`)
    // Host memory the copies above move to and from at full speed (CUDA: pinned,
    // cudaMallocHost; CPU: as alloc), zeroed, 64-byte aligned; aborts on failure.
    void *(*alloc_host)(Backend *be, size_t bytes);
    void (*free_host)(Backend *be, void *p);    // NULL is fine
    // Bytes of memory in use on this backend's device (CUDA: cudaMemGetInfo's total - free,
    // every process's; CPU: 0, it has no device). Never fails.
    size_t (*device_memory_used)(Backend *be);
    // Asynchronous copy on the backend's copy stream (CUDA: a second stream, made at the first
    // call), ordered after all the work queued so far on the compute stream (an event), not
    // waited for: the host side (alloc_host memory) must stay untouched until copy_join(be, 1).
    // kind BACKEND_D2H or BACKEND_H2D. CPU: copy (synchronous; it refuses the offload anyway).
    void (*copy_async)(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind);
    // Orders after every copy_async queued so far: host 1, the host waits for them; host 0,
    // the compute stream's later work waits for them (an event; the host does not wait).
    // No-op before the first copy_async. CPU: a no-op.
    void (*copy_join)(Backend *be, int host);

    // --- linear ----------------------------------------------------------------------
    // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be NULL.
    void (*matmul_forward)(Backend *be, void *out, const void *inp, const void *weight,
                           const void *bias, int N, int C, int OC);
    // dinp (N, C) = dout (N, OC) @ weight (OC, C)          [overwritten; skipped if NULL]
    // dweight (OC, C) += dout^T @ inp;  dbias (OC) += column sums of dout  [if not NULL]
    void (*matmul_backward)(Backend *be, void *dinp, float *dweight, float *dbias,
                            const void *dout, const void *inp, const void *weight,
                            int N, int C, int OC);

    // --- grouped linear (MoE experts, --moe-grouped-gemm) ------------------------------
    // G products in one call: group g is rows[g] (host array, >= 0) contiguous rows after the
    // groups before it, R = sum rows[g] in all. Group g's rows = inp_g @ weight_g^T + bias_g,
    // weight (G, OC, C), bias (G, OC) or NULL, into out (R, OC) when pre is NULL; else into
    // pre (R, OC), then out = act(pre) as act_forward (out (R, OC), or (R, OC/2) for a gated
    // act): the products, then act_forward, the same bits (CPU fp32: the act inside each
    // product's panels, while they are in cache). Each group's product is matmul_forward's
    // math; the bits may differ from G matmul_forward calls (CPU: each product runs whole on
    // one thread when there are at least as many as threads).
    void (*matmul_grouped_forward)(Backend *be, void *out, void *pre, const void *inp,
                                   const void *weight, const void *bias, const int *rows, int G,
                                   int C, int OC, BackendAct act);
    // Per group, as matmul_backward: dinp (R, C) [overwritten; skipped if NULL], dweight
    // (G, OC, C) += ..., dbias (G, OC) += ... [if not NULL]; dout (R, OC), inp (R, C). With
    // pre (R, C) not NULL (dinp then required; a pointwise act, not a gated one), dinp then
    // *= act'(pre) as act_backward: the gradient through matmul_grouped_forward's act.
    void (*matmul_grouped_backward)(Backend *be, void *dinp, float *dweight, float *dbias,
                                    const void *dout, const void *inp, const void *weight,
                                    const void *pre, const int *rows, int G, int C, int OC,
                                    BackendAct act);

    // --- normalization (eps 1e-5), kind BackendNorm ----------------------------------
    // With BACKEND_NORM_1P in kind, `weight` below reads (1 + weight) (dweight unchanged).
    // LayerNorm: out (N, C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
    // RMSNorm (--normalization RMSNorm; mean and bias unused, may be NULL): out (N, C) = inp *
    // rstd * weight, rstd (N) = 1 / sqrt(mean_j inp^2 + eps) saved when not NULL.
    void (*norm_forward)(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                         const void *weight, const void *bias, int N, int C, BackendNorm kind);
    // dinp (N, C) += ..., dweight (C) += ..., dbias (C) += ... (LayerNorm; RMSNorm has no
    // bias and no mean: dbias and mean unused).
    void (*norm_backward)(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp, const void *weight, const float *mean,
                          const float *rstd, int N, int C, BackendNorm kind);

    // --- fused (each is the unfused sequence named, in the same math; CUDA: fewer passes) ---
    // res (N, C) = a + b (as add; res may alias a or b), then ln (N, C) = layernorm of res as
    // norm_forward's LayerNorm (mean (N), rstd (N) saved when not NULL). One pass on CUDA: res is
    // rounded to be->act before the statistics, as the unfused pair does.
    void (*residual_layernorm_forward)(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                       const void *a, const void *b, const void *weight,
                                       const void *bias, int N, int C);
    // pre (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC) (bias may be NULL), then
    // out = act(pre) as act_forward: out (N, OC), or (N, OC/2) for a gated act (SwiGLU: pre's
    // rows are [gate | up]). matmul_forward + act_forward, the same bits on the CPU. CUDA, act
    // GELU: one GEMM (GELU epilogue, pre stored as its aux output) when the pointers are
    // aligned (see cuda_fused.cu); gelu is then taken of the fp32 value before pre is rounded
    // to be->act.
    void (*matmul_act_forward)(Backend *be, void *out, void *pre, const void *inp,
                               const void *weight, const void *bias, int N, int C, int OC,
                               BackendAct act);
    // matmul_backward, then dinp (N, C) = act'(pre (N, C)) * dinp: the gradient through a
    // matmul_act_forward's pointwise act (not a gated one: act_backward). dinp is required
    // (not NULL). CUDA, act GELU: one GEMM (DGELU epilogue) for dinp when aligned; the product
    // is taken before dinp is rounded to be->act.
    void (*matmul_act_backward)(Backend *be, void *dinp, float *dweight, float *dbias,
                                const void *dout, const void *inp, const void *weight,
                                const void *pre, int N, int C, int OC, BackendAct act);

    // --- activations (BackendAct) ------------------------------------------------------
    // out (N, F) = act(inp): inp (N, F), or (N, 2F) rows [gate (F) | up (F)] for a gated act.
    void (*act_forward)(Backend *be, void *out, const void *inp, int N, int F, BackendAct act);
    // dinp (N, F), or (N, 2F) for a gated act [overwritten], from dout (N, F) and the
    // forward's inp. dinp may alias dout for a pointwise act.
    void (*act_backward)(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                         BackendAct act);

    // --- pointwise -----------------------------------------------------------------
    // out (n) = a + b   (out may alias a or b)
    void (*add)(Backend *be, void *out, const void *a, const void *b, size_t n);
    // out (n) = a + b, all fp32 whatever be->act (out may alias a or b)
    void (*add_f32)(Backend *be, float *out, const float *a, const float *b, size_t n);
    // x (n) *= alpha, fp32 whatever be->act (the expert gradients' data-parallel scale)
    void (*scale_f32)(Backend *be, float *x, float alpha, size_t n);
    // dst (n, type dt) = src (n, type st) converted, round to nearest even; dst and src do
    // not overlap unless dt == st and dst == src (a no-op). Any pair of BackendDType.
    void (*cast)(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n);
    // Blocks of rows, strides in elements of be->act: for each row r < rows and block i < nb,
    // the width elements at src + r*lds + i*sbs are copied (add 0) or added (add 1) to those
    // at dst + r*ldd + i*dbs. Destination blocks overlap neither each other nor src. E.g.
    // context parallelism's packing of a qkv row's kv heads (layers/cp_attention.c), and back.
    void (*copy_row_blocks)(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                            size_t lds, size_t sbs, int rows, int nb, int width, int add);

    // --- dropout (dropout.h: each mask is a pure function of d and global indices) --------
    // out (N, C) = inp * dropout_factor(d, dropout_row(d, r) * C + c) for row r, channel c; out
    // may alias inp. The backward is the same call on the gradient (the mask is regenerated,
    // never stored). d NULL or d->threshold 0: a copy (the same bits).
    void (*dropout)(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C);

    // --- causal self-attention, scale 1/sqrt(hs) -----------------------------------
    // qkv (B, T, 3*NH*hs) laid out [q: NH heads | k: NH heads | v: NH heads] per token;
    // out (B, T, NH*hs); att (B, NH, T, T) softmax probabilities, saved for backward
    // (entries above the diagonal are 0). Dropout d on the probabilities (after the softmax,
    // before @ v): element (b, h, i, j) is kept by
    // dropout_factor(d, (((d->sample0 + b) * d->NH + d->h0 + h) * T + i) * T + j); att keeps
    // the probabilities WITHOUT dropout. d NULL or d->threshold 0: no dropout (the same bits
    // and, on CUDA, the same kernels as without a descriptor).
    // w: a window of the global sequence (BackendAttnWindow; NULL: the whole sequence): then
    // att is (B, NH, T, w->Tk) and i, j in the mask index are the global positions q0 + i,
    // k0 + j of a sequence of d->T positions. w->accumulate must be 0 (aborts otherwise).
    void (*attention_forward)(Backend *be, void *out, void *att, const void *qkv,
                              int B, int T, int NH, int hs, const BackendDropout *d,
                              const BackendAttnWindow *w);
    // dqkv (B, T, 3*NH*hs) [overwritten]; scratch (B, NH, T, T) is workspace; d as in the
    // forward (the mask regenerated, never stored). A forward's document starts (qstart) need
    // nothing here: att holds 0 where a key was hidden.
    void (*attention_backward)(Backend *be, void *dqkv, float *scratch, const void *dout,
                               const void *qkv, const void *att, int B, int T, int NH, int hs,
                               const BackendDropout *d);

    // --- fused causal self-attention (--use-flash-attn): the (T, T) matrix is never stored --
    // Same qkv layout, causal mask, scale and dropout d as attention_forward; out (B, T,
    // NH*hs) is the same function. lse (B, NH, T) = log(sum_{u<=t} exp(s_tu)) of each row's
    // scaled scores s_tu = q_t . k_u / sqrt(hs) (natural log, without dropout), saved for
    // backward instead of att; the mask is applied inside the online softmax. Memory is
    // linear in T. The CUDA backend takes hs <= 128 (aborts the job naming hs otherwise);
    // without dropout it takes its tensor-core kernels where they apply (bf16/fp16).
    // w: a window as in attention_forward (lse then of the visible keys of the window only);
    // with w->accumulate the call merges into out and lse what earlier windows left there
    // (the whole-sequence result, to fp32 round-off, once every key block is visited).
    void (*flash_attention_forward)(Backend *be, void *out, float *lse, const void *qkv,
                                    int B, int T, int NH, int hs, const BackendDropout *d,
                                    const BackendAttnWindow *w);
    // dqkv (B, T, 3*NH*hs) [overwritten] from dout (B, T, NH*hs) and the forward's qkv, out
    // and lse (same d): the probabilities are recomputed from lse. scratch (B, NH, T) is
    // workspace (rowsum(dout * out) per row); no other memory is used. dqkv aliases none of
    // the inputs. w NULL: the whole sequence. With a window w (as in the forward): out and
    // lse are the final (merged over all windows) ones of these T queries; dq is ADDED into
    // the q part of dqkv's rows (its k | v parts untouched unless w->dkv aliases them), dk
    // and dv ADDED into w->dkv's k | v parts; rows whose lse is -inf contribute nothing.
    void (*flash_attention_backward)(Backend *be, void *dqkv, float *scratch, const void *dout,
                                     const void *qkv, const void *out, const float *lse,
                                     int B, int T, int NH, int hs, const BackendDropout *d,
                                     const BackendAttnWindow *w);

    // --- embeddings (vocab-parallel: this rank holds rows [vocab_start, vocab_start+V_local)) ---
    // out (N, C) = table[tok - vocab_start] for tokens in the block, 0 for the others.
    void (*embedding_forward)(Backend *be, void *out, const int *tokens, const void *table,
                              int N, int C, int vocab_start, int V_local);
    // dtable (V_local, C) += dout rows of the tokens in the block.
    void (*embedding_backward)(Backend *be, float *dtable, const void *dout, const int *tokens,
                               int N, int C, int vocab_start, int V_local);
    // out (B, T, C) += rows [pos0, pos0 + T) of wpe (maxT, C): the rows hold positions
    // pos0.. of their sequences (0: the whole sequence; a slice or a decoding step: its start).
    // pos (B, T) ints in the backend's memory, or NULL: row r's position is pos[r] instead
    // (pos0 unused; --reset-position-ids: positions restart at each document).
    void (*position_forward)(Backend *be, void *out, const void *wpe, int B, int T, int C,
                             int pos0, const int *pos);
    // rows [pos0, pos0 + T) of dwpe (maxT, C) += sum over b of dout (B, T, C); with pos: row
    // pos[r] of dwpe += dout's row r, rows added in order (the same bits every run)
    void (*position_backward)(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                              int pos0, const int *pos);

    // --- vocab-parallel softmax cross-entropy over a logit shard (N, V_local) -----------
    // Columns [0, V_valid) are real vocabulary, [V_valid, V_local) padding, masked out. The
    // layer (layers/tp_vocab.c) calls, with TP all-reduces in between:
    //   xent_stats    -> rowmax (N) = max over this shard's valid columns (-FLT_MAX when
    //                    none); sumexp (N) = sum exp(l - rowmax) from that shard max; tgt (N)
    //                    = l[target - vocab_start] if the target is in this shard, else 0.
    //                    One read of the logits (CPU: a max loop, then a sum loop, on the row
    //                    in cache; CUDA: one pass with a running max, equal to fp32 round-off)
    //   with more than one shard: keep the shard max (N), all-reduce MAX of rowmax, then
    //   xent_rescale  -> sumexp (N) *= exp(shard_max - rowmax): onto the all-reduced max;
    //                    all-reduce SUM of sumexp and tgt
    //   xent_loss     -> loss (N) = log(sumexp) + rowmax - tgt
    //   xent_backward -> dlogits (N, V_local) = dscale[i] * (softmax - onehot), 0 at padding;
    //                    dlogits may alias logits. loss non-NULL: the fused classifier, in
    //                    place of xent_loss: also loss (N) as xent_loss (same bits) from tgt,
    //                    in the same pass (a training forward, the loss scale known before it).
    //                    rowmax NULL (one shard: the statistics need no all-reduce; sumexp,
    //                    tgt unused): the whole classifier, xent_stats's rowmax, sumexp and
    //                    tgt computed per row in this pass (same bits, not stored), then loss
    //                    (if non-NULL) and dlogits: the logits read once (CUDA: one kernel, a
    //                    block per row re-reading its row from L2; CPU: the row in cache)
    void (*xent_stats)(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                       const int *targets, int N, int V_local, int V_valid, int vocab_start);
    void (*xent_rescale)(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                         int N);
    void (*xent_loss)(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                      const float *tgt, int N);
    void (*xent_backward)(Backend *be, void *dlogits, float *loss, const void *logits,
                          const float *rowmax, const float *sumexp, const float *tgt,
                          const int *targets, const float *dscale, int N, int V_local,
                          int V_valid, int vocab_start);

    // --- optimizer and reductions (multi-tensor: one launch each on CUDA) ---------------
    // AdamW (decoupled weight decay, bias-corrected, `step` counts from 1) on elements
    // [s.begin, s.begin + s.len) of param, grad, m and v for every segment s of segs (nseg,
    // backend memory), with weight decay wd where s.weight_decay and 0 elsewhere:
    //   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
    //   param -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd * param)
    // An element's arithmetic does not depend on the segments (one segment {0, n, 1}: AdamW
    // on n elements). max_len >= every s.len (sizes the launch). copy: NULL, or elements of
    // type be->act indexed as param that get each updated parameter rounded to be->act in
    // the same pass (the weight copies the forward reads: the same bits as the cast op;
    // elements outside the segments untouched). Asynchronous.
    void (*adamw_multi)(Backend *be, float *param, void *copy, const float *grad, float *m, float *v,
                        const BackendSegment *segs, int nseg, size_t max_len, float lr,
                        float beta1, float beta2, float eps, float wd, float grad_scale, int step);
    // Sum over every segment s of segs (nseg, backend memory) of x[i]^2, i in [s.begin,
    // s.begin + s.len), in double, returned on the host: one device-to-host read. The sum
    // order is fixed (same bits every run). NaN/Inf propagate.
    double (*sum_squares_multi)(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                                size_t max_len);
    // Sum of x[i] in double. acc NULL: returned on the host (syncs). acc not NULL (one double
    // in backend memory): acc[0] += the sum, asynchronous (no host read: per-micro-batch losses
    // summed on the device, read once per step), returns 0.
    double (*sum)(Backend *be, double *acc, const float *x, size_t n);

    // --- rotary positions (--position-embedding-type rope, grouped-query) ---------------
    // Rotary positions + grouped-query heads into attention_forward's layout. inp (B, T,
    // (NH + 2G)*hs) per token [q: NH heads | k: G heads | v: G heads]; out (B, T, 3*NH*hs)
    // [q | k | v: NH heads each]: query head h reads kv head h / (NH/G). q and k are rotated
    // at position t = pos0 + (the row's index in its sequence): the first rot (even) channels
    // of each head, pairs (i, i + rot/2) turned by the angle t * base^(-2i/rot) (the
    // rotate-half convention of Megatron and Hugging Face); channels >= rot pass. rot 0: no
    // rotation. pos0 is 0 in training; a decoding step (B = T = 1) passes its position.
    // pos (B, T) ints in the backend's memory, or NULL: t = pos[r] for row r instead (pos0
    // unused; --reset-position-ids).
    void (*rope_gqa_forward)(Backend *be, void *out, const void *inp, int B, int T, int NH,
                             int G, int hs, int rot, float base, int pos0, const int *pos);
    // dinp (B, T, (NH + 2G)*hs) [overwritten] = the transpose of rope_gqa_forward applied to
    // dout (B, T, 3*NH*hs): rotated back, a kv head's gradient summed over its query heads.
    void (*rope_gqa_backward)(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                              int G, int hs, int rot, float base, int pos0, const int *pos);

    // --- mixture of experts (BackendMoERouter; E <= BACKEND_MOE_MAX_EXPERTS) -------------
    // The selection score of expert e: softmax: logits (pre_softmax: softmax(logits) over
    // all E); sigmoid: sigmoid(logits); plus bias[e] when r->bias is not NULL.
    // idx (N, K) the chosen experts of each token, in decreasing order of the selection score,
    // ties to the lowest expert index; probs (N, K) fp32 their combine weights (Megatron's
    // normalisation for the score function, times scaling: softmax: softmax over the K chosen
    // logits (pre_softmax: the chosen entries of softmax over all E); sigmoid: the chosen
    // sigmoids over their sum + 1e-20 (K = 1: the sigmoid)). logits (N, E) fp32.
    void (*moe_router_forward)(Backend *be, int *idx, float *probs, const float *logits, int N,
                               const BackendMoERouter *r);
    // dlogits (N, E) OVERWRITTEN with the gradient through probs: dprobs (N, K) fp32, the
    // same logits and idx (the choice is a constant).
    void (*moe_router_backward)(Backend *be, float *dlogits, const float *dprobs,
                                const float *logits, const int *idx, int N,
                                const BackendMoERouter *r);
    // The router's losses over this rank's N rows. s (N, E) are the scores for the aux loss
    // (softmax: softmax(logits) over all E; sigmoid: sigmoid(logits) normalised to sum 1 per
    // row, as Megatron's compute_routing_scores_for_aux_loss); row t belongs to group
    // row_group[t] (NULL: all group 0). loss[0] = sum_t sum_e s[t,e] * coef[row_group[t]*E + e]
    // (the aux loss's share of these rows: the caller folds the token counts, E, K, the
    // coefficient and the totals into coef (G, E) fp32), loss[1] = z_coef * sum_t
    // logsumexp(logits[t])^2 (the caller divides by the total tokens); both fp32, written.
    // With dlogits non-NULL, dlogits (N, E) += grad_scale * d(loss[0] + loss[1])/dlogits.
    // Rows are summed in a fixed order (the same bits every run).
    void (*moe_router_loss)(Backend *be, float *dlogits, float *loss, const float *logits,
                            const float *coef, const int *row_group, float z_coef,
                            float grad_scale, int N, const BackendMoERouter *r);

    // Token rows in expert order and back (be->act rows of C channels). out (M, C) row i =
    // scale[i] * in[idx[i]] (scale NULL: 1; fp32 scale). Permute; the combine's backward.
    void (*rows_gather)(Backend *be, void *out, const void *in, const int *idx,
                        const float *scale, int M, int C);
    // out (N, C) OVERWRITTEN: row t = sum over k = 0..K-1, in that order, of w[t*K+k] *
    // in[slot[t*K+k]]; slot -1 (a dropped token) adds nothing; w NULL: 1. Combine; the
    // permute's backward (w NULL). Rows with every slot -1 are 0.
    void (*rows_combine)(Backend *be, void *out, const void *in, const int *slot,
                         const float *w, int N, int K, int C);
    // dw (N*K) fp32 OVERWRITTEN: dw[t*K+k] = dot(dy[t], in[slot[t*K+k]]) in fp32 (0 where
    // slot is -1). The combine weights' gradient.
    void (*rows_dot)(Backend *be, float *dw, const void *dy, const void *in, const int *slot,
                     int N, int K, int C);
} BackendOps;

struct Backend {
    const BackendOps *ops;  // &table, or the backend's own constant table
    BackendOps table;       // filled by a backend that builds its table at creation (CPU)
    BackendKind kind;
    BackendDType act;  // activations and weight copies (void * in BackendOps)
    BackendAttnKernels attn;  // fused attention's kernels: set after creation (0: megac's)
    char name[64];  // e.g. "cpu (2 threads, OpenBLAS SkylakeX)" or "cuda:0 (NVIDIA H100)"
    union {
        struct {
            int nthreads;
            int gemm_split;   // cpu_gemm's panels cut: CPU_GEMM_SPLIT_* (cpu_gemm.h), 0: its rule
            int gemm_panels;  // panels per thread, taken dynamically (0: its rule)
            void *half_scratch;  // fp32 scratch of the 16-bit ops (cpu_half.c), grown once
            size_t half_bytes;   // its size
        } cpu;
        struct { int device; void *stream; void *state; } cuda;  // stream: cudaStream_t;
                                                                    // state: CudaState (cuda_internal.h)
    } u;
};

// CPU backend with `nthreads` OpenMP/BLAS threads (<= 0: all cores) and activations/weight
// copies stored as `act` (BACKEND_F32, or BACKEND_BF16 / BACKEND_F16 for mixed precision:
// fp32 arithmetic, rounded to `act` where the CUDA backend rounds). Never returns NULL.
Backend *backend_cpu_create(int nthreads, BackendDType act);
#ifdef MEGAC_HAVE_CUDA
// Math of the CUDA backend's GEMMs: TF32 tensor cores (fast, ~1e-3 relative) or strict fp32.
typedef enum { BACKEND_MATH_TF32, BACKEND_MATH_FP32 } BackendMath;
// CUDA backend on `device` with GEMMs in `math` and activations/weight copies stored as
// `act` (BACKEND_F32, or BACKEND_BF16 / BACKEND_F16 for mixed precision: GEMMs on bf16/fp16
// tensor cores with fp32 accumulation, `math` then applies to nothing). Aborts the job naming
// the CUDA error when no device is usable. The name says the device, the math and `act`.
// Never returns NULL.
Backend *backend_cuda_create(int device, BackendMath math, BackendDType act);
// 1 if a CUDA device can be used (driver present and a device visible), else 0. Never fails.
int backend_cuda_available(void);
#endif
// Frees the backend's state. NULL is fine.
void backend_destroy(Backend *be);

// 1 if cuDNN's fused SDPA computes this fused-attention call as megac defines it: activations
// bf16 or fp16, head size 64 or 128, no dropout (d NULL or threshold 0: cuDNN's dropout masks
// are not megac's hash), and the whole sequence (w NULL: no window, key/value cache,
// documents or ring block). Else 0 and *why (static text) names the first reason. Pure.
int backend_attn_cudnn_case(BackendDType act, int hs, const BackendDropout *d,
                            const BackendAttnWindow *w, const char **why);

// Bytes of one element of `t` (4 or 2). Pure.
size_t backend_dtype_size(BackendDType t);
// "fp32", "bf16" or "fp16". Pure.
const char *backend_dtype_name(BackendDType t);

#ifdef __cplusplus
}
#endif
