// model/gpt.h: one pipeline stage of a GPT model (GPT-2, or Llama-style: gpt_config.h),
// tensor-parallel inside.
//
// The stage owns layers [layer0, layer0 + n_layers); the first stage also the token and
// position embeddings (none with rope), the last the final norm and the output layer (tied
// to wte unless untie_embeddings).
// Parameters and gradients live in two flat buffers (views per tensor), allocated once.
// Activations of up to n_slots micro-batches in flight are stashed (the pipeline schedule
// decides how many), each in its own preallocated slot.
//
// Forward/backward of a stage are driven from outside (the training loop or the 1F1B
// schedule): gpt_forward on a slot, then later gpt_backward on the same slot.
#pragma once
#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "parallel_state/pgrid_comm.h"  // defines: ProcessGrid
#include "layers/tp_vocab.h"
#include "layers/cp_attention.h"  // defines: CPCommType
#include "layers/moe.h"           // defines: MoEActs
#include "gpt_config.h"
#include "gpt_params.h"

// Views of one transformer block's tensors: the weight copies the ops read (m->w, type
// be->act) or the fp32 gradients (m->g). QKV_tp = (NH + 2*G) * hs / tp rows (G kv heads:
// G = NH, so 3*C/tp, without grouped-query attention); F2 = F, or 2*F with SwiGLU (gate and
// up). Absent tensors are NULL: the norm biases with RMSNorm, the linear biases with
// disable_bias_linear.
typedef struct {
    void *ln1w, *ln1b;    // (C), (C)
    void *qkvw, *qkvb;    // (QKV_tp, C), (QKV_tp)
    void *projw, *projb;  // (C, C/tp), (C)
    void *ln2w, *ln2b;    // (C), (C)
    void *fcw, *fcb;      // (F2/tp, C), (F2/tp)
    void *fcprojw, *fcprojb;  // (C, F/tp), (C)
    void *routerw;        // (E, C) a mixture-of-experts layer's router (else NULL); there fc
                          // and fcproj are the E experts stacked: fcw (E F2e, C), fcb (E F2e),
                          // fcprojw (E C, Fe), fcprojb (E C) (F2e = 2 Fe with SwiGLU)
    void *sfcw, *sfcb;    // (F2s/tp, C), (F2s/tp) a MoE layer's shared expert (else NULL):
    void *sfcprojw, *sfcprojb;  // (C, Fs/tp), (C); Fs = moe_shared_ffn, F2s = 2 Fs with SwiGLU
} GPTBlockW;

typedef struct {
    void *wte;             // (Vp/tp, C) first stage, or the last stage's tied copy; else NULL
    void *out;             // (Vp/tp, C) last stage, --untie-embeddings-and-output-weights: the
                           // output layer; NULL when tied (the logits use wte)
    void *wpe;             // (maxT, C) first stage; NULL with rope
    void *lnfw, *lnfb;     // (C) last stage; lnfb NULL with RMSNorm
    GPTBlockW *blocks;     // (n_layers)
} GPTWeights;

// Router state and expert activations of one MoE layer for one micro-batch in flight
// (GPTLayerActs.moe; all NULL in a dense layer): layers/moe.h.
typedef MoEActs GPTMoEActs;

// Activations: `void *` buffers hold be->act elements (fp32, bf16 or fp16); `float *` are fp32.
// Rows N = B*T, or N/tp (Ns) for the residual stream and LayerNorms with sequence parallelism.
typedef struct {
    void *ln1;                         // (Ns, C)
    float *ln1_mean, *ln1_rstd;        // (Ns), (Ns)
    void *qkv;                         // (N, 3*C/tp)
    void *att;                         // (B, NH/tp, T, T) probabilities; NULL with flash
    float *lse;                        // (B, NH/tp, T) log-sum-exp, with use_flash_attn; else NULL
    void *atty;                        // (N, C/tp)
    void *res2;                        // (Ns, C) after the attention residual
    void *ln2;                         // (Ns, C)
    float *ln2_mean, *ln2_rstd;        // (Ns), (Ns)
    void *fch, *fch_act;               // fch (N, F/tp), or gated (--swiglu) (N, 2*F/tp) [gate |
                                       // up]; fch_act = act(fch) (N, F/tp)
                                       // and (N, F/tp) silu(gate) * up; in a MoE layer with a
                                       // shared expert its (N, F2s/tp), (N, Fs/tp) (else NULL)
    void *res3;                        // (Ns, C) block output
    GPTMoEActs moe;                    // a mixture-of-experts layer's (gpt_moe.h); else NULLs
} GPTLayerActs;

typedef struct {
    int *tokens, *targets;             // (B, T)
    void *x0;                          // (Ns, C) stage input: embeddings, or received
    GPTLayerActs *layers;              // (n_layers)
    void *lnf;                         // (Ns, C)             last stage
    float *lnf_mean, *lnf_rstd;        // (Ns), (Ns)          last stage
    void *logits;                      // (N, Vp/tp)          last stage
    TPXentBuffers xent;                //                     last stage
    float dlogits_scale;               // > 0: logits hold d(logits) for this loss_scale (the
                                       // fused classifier, gpt_forward); 0: the logits
    int64_t sample0;                   // global index (in the step's global batch) of the
                                       // micro-batch's first sample: the dropout masks' s
    int *doc_pos, *doc_start;          // (B, T) backend memory, with gpt_set_documents: each
                                       // row's position in its document, the document's start
    int *doc_start_seq;                // (B, T_seq) the starts of the whole sequences (CP > 1
                                       // with --reset-attention-mask; else NULL)
    void *mem;
} GPTActs;

// The rows a forward runs: B sequences of T positions, positions [pos0, pos0 + T) of each,
// the first sequence being sample sample0 of the step's global batch (the dropout masks'
// s). A micro-batch in training: {m->B, m->T, 0, sample0}; a decoding step with a key/value
// cache (gpt_forward_positions): {1, n, p, 0}. Context parallelism (halves = 1): the rows
// are two halves, (B, T/2) rows of positions [pos0, pos0 + T/2) of each sequence, then
// (B, T/2) rows of positions [pos1, pos1 + T/2) (this CP rank's two chunks: gpt_cp.h).
// Documents (gpt_set_documents): pos, qstart (B, T) in the backend's memory, each row's
// position in its document and its document's start (a global position) (NULL: none;
// positions as above, plain causal attention); with CP also qstart_seq (B, T_seq), the
// starts of the whole sequences (cp_attention.h's CPDocStarts).
typedef struct {
    int B, T, pos0;
    int64_t sample0;
    int halves, pos1;
    const int *pos, *qstart, *qstart_seq;
} GPTRows;

// The data-parallel sync hook (distributed/dist_sync.h): the model calls it right before a
// unit's weights are read (forward, recomputed forward, backward) and around a unit's
// backward, so that the sync engine can gather sharded weights into a buffer and point the
// views at it (ZeRO-3), wait for a parameter gather (--overlap-param-gather) and reduce a
// unit's gradients as soon as they are complete. A unit is a local layer l >= 0, or
// GPT_UNIT_EDGE: the embeddings, final LayerNorm and tied wte. fn NULL (no sharding, no
// overlap): no calls, the flat buffers are used as they are.
enum { GPT_UNIT_EDGE = -1 };
typedef enum { GPT_HOOK_FORWARD, GPT_HOOK_BACKWARD_BEGIN, GPT_HOOK_BACKWARD_END } GPTHookEvent;
typedef struct {
    void (*fn)(void *ctx, GPTHookEvent ev, int unit);
    void *ctx;
} GPTShardHook;

// Dropout (--hidden-dropout, --attention-dropout; backend/dropout.h): Megatron's four points
// (embedding output, attention probabilities, attention projection and MLP output before
// their residual adds). Masks are a pure function of (seed, iteration, point, global layer,
// global element index), so every layout trains the same model. Off (on = 0) outside a
// training step: evaluation, generation, export.
typedef struct {
    float hidden, attention;           // drop probabilities in [0, 1)
    uint64_t seed;
    int64_t iteration;                 // the step the masks belong to
    int on;                            // 1 inside a training step
} GPTDropout;

typedef struct {
    GPTConfig cfg;
    Backend *be;
    int tp, tp_rank, layer0, n_layers, first, last;
    int B, T, N;                       // micro-batch, local positions per sequence, B*T
    int cp, cp_rank, T_seq;            // context parallelism: this rank holds T = T_seq/cp
                                       // positions of each sequence, two chunks (gpt_cp.h);
                                       // cp 1: T = T_seq, the whole sequence
    Comm *cp_comm;                     // the context-parallel group (NULL: cp 1)
    Comm *cp_host;                     // the same ranks over MPI, host memory (NULL: cp 1)
    int ep, ep_rank;                   // expert parallelism: this rank holds experts
    Comm *ep_comm;                     // [ep_rank E/ep, +E/ep) of each MoE layer (ep 1: NULL)
    CPCommType cp_comm_type;           // --cp-comm-type (layers/cp_attention.h; cp > 1)
    int sp;                            // sequence parallelism on
    int N_sp;                          // rows of the residual stream here: N/tp with SP, else N
    int A_tp, NH_tp, F_tp;             // tensor-parallel local sizes: attention channels
                                       // NH/tp * hs (C/tp unless --kv-channels), heads, ffn
    int G_tp, hs, rot;                 // local kv heads, head size, rotated channels (0: no rope)
    int QKV_tp;                        // rows of the local QKV weight: (NH/tp + 2 G/tp) * hs
    int remap_qkv;                     // rope or grouped-query: the QKV output goes through
                                       // rope_gqa_forward into attention's layout
    int *block_param;                  // (n_layers + 1) table index of local layer l's first
                                       // tensor; [n_layers]: one past the last block tensor
    int Vp;                            // padded vocabulary
    TPVocab vocab;
    int fused_classifier;              // 1: a training forward (gpt_forward's loss_scale > 0)
                                       // writes d(logits); 0 (MEGAC_NO_FUSED_CLASSIFIER=1):
                                       // the backward does, from the kept logits
    ParamInfo *params;                 // (n_params) table; offsets into the flat buffers
    int n_params;
    size_t n_floats;                   // floats used by the table
    size_t n_alloc;                    // floats allocated (padded), >= n_floats: the optimizer
                                       // reduces and gathers all n_alloc (zero tail)
    size_t expert_offset;              // ep > 1: start of the expert tensors' region [expert_
                                       // offset, n_alloc), reduced over expert data
                                       // parallelism; n_alloc when the stage has none
    float *param_mem, *grad_mem;       // (n_alloc) each: fp32 master weights, fp32 main grads
    void *param_copy;                  // (n_alloc) be->act copies of the weights, which the ops
                                       // read; == param_mem when be->act is fp32
    GPTWeights w, g;                   // views into param_copy and grad_mem
    GPTLayerActs *rc;                  // (n_rc) --recompute-granularity full: the activations
    int n_rc;                          // of one chunk of recomputed layers, shared by all
                                       // slots (in s.mem); NULL / 0 without
    GPTActs *slots;                    // (n_slots)
    int n_slots;
    size_t slot_bytes;                 // activation memory of one micro-batch in flight
    size_t scratch_bytes;              // backward workspace (s), shared by the slots; 0 when
                                       // this chunk uses another's (gpt_share_workspace)
    struct {                           // backward workspace, shared by all slots (be->act
                                       // except where float)
        void *dres, *dln;              // (Ns, C)
        void *dqkv;                    // (N, 3*C/tp)
        float *datt;                   // (B, NH/tp, T, T) materialised attention's scratch,
                                       // (B, NH/tp, T) with use_flash_attn
        void *datty;                   // (N, C/tp)
        void *dfch;                    // (N, F/tp) gradient of the MLP's pre-activation
                                       // ((N, 2*F/tp) with a gated act)
        void *dact;                    // (N, F/tp) gated act: gradient of act(fch)
                                       // (dfch, dact: Fs/tp wide when a shared expert's is wider)
        void *shared_out;              // (Ns, C) a shared expert's output or d(ln2) (else NULL)
        void *qkv_in;                  // (N, QKV_tp) with remap_qkv: the QKV linear's output
                                       // (forward) or its gradient (backward); else NULL
        float *dscale;                 // (N) loss gradient per token
        void *att;                     // (B, NH/tp, T, T) selective recomputation: the
                                       // probabilities, shared by all slots (else NULL)
        void *sp_gather, *sp_full;     // (N, C) each, sequence-parallel workspace (else NULL)
        void *cp_buf;                  // context parallelism's workspace (else NULL), as
                                       // cp_attention_workspace sizes it (layers/cp_attention.h)
        float dscale_value;
        float *dscale_host;            // (N) host staging for dscale, allocated once
        void *mem;
    } s;
    GPTShardHook hook;                 // the sync engine's (see above), or fn NULL
    GPTDropout drop;                   // all 0 (no dropout) unless gpt_set_dropout
    struct GPTMoE *moe;                // the MoE layers' host state and workspace
                                       // (gpt_moe.h); NULL without experts
    struct {                           // --eod-mask-loss (gpt_set_loss_mask); on 0: off
        int on, id;                    // targets equal to id weigh 0
        float *w;                      // (n_slots, N) host: each slot's per-token weights,
                                       // N / (its unmasked tokens) or 0
        float *loss_host;              // (N) host staging of the per-token losses
        double global_weight;          // --calculate-per-token-loss: every unmasked token's
                                       // weight (gpt_set_loss_mask_global); 0: per micro-batch
    } mask;
    struct {                           // --reset-position-ids / --reset-attention-mask
        int positions, attention, id;  // (gpt_set_documents; both 0: off); id: end of document
        int *host;                     // (4 B T_seq + 2 N) host staging (gpt_documents.c)
    } docs;
} GPT;

// What gpt_create needs beyond the model's config and the grid: which (virtual) pipeline
// stage this is, how it runs (micro-batch, activation slots in flight), how its parameters
// start (seed) and are padded, and the parallel options the grid's sizes do not say.
typedef struct {
    int stage, n_stages;    // pipeline stage `stage` of n_stages (interleaved: virtual stage
                            // c * pp + pp_rank of pp * v); its layers: gpt_stage_layers
    int micro_batch;        // B sequences per micro-batch
    int n_slots;            // micro-batches in flight (the schedule's stash)
    uint64_t seed;          // layout-independent initialisation
    size_t pad_multiple;    // the flat buffers hold a multiple of it (DP slicing)
    int sequence_parallel;  // --sequence-parallel (with tp > 1)
    CPCommType cp_comm;     // context parallelism's K/V exchange (cp > 1; 0: the ring)
    int vpp;                // model chunks per pipeline rank (interleaved; 0 or 1: one), so
                            // that the ranks are n_stages / vpp
} GPTStage;

// Builds the stage (call gpt_config_check first; a sequence-parallel micro-batch that tp
// does not divide is a usage error), allocates everything on `be`, initialises parameters
// from st->seed (layout-independent). `grid` gives the sizes and this rank's coordinates
// (grid->dims, grid->coord: tp, cp, ep, etp) and the CP and EP groups the stage calls
// (grid->cp, grid->ep, read when cp or ep > 1); NULL: one rank. The flat buffers hold n_alloc
// floats, n_floats rounded up to a multiple of st->pad_multiple (the optimizer's data-
// parallel slicing); the tail is zero. With sequence_parallel (B*T divisible by tp) the
// residual stream, LayerNorms and the stage's input/output hold N/tp rows. With context
// parallelism (cp > 1; gpt_cp.h: 2*cp must divide the sequence length and flash attention is
// needed, usage errors otherwise) the stage holds seq_length/cp positions of each sequence,
// rank cp_rank's two chunks. With expert parallelism (ep > 1) the stage holds E/ep experts of
// each MoE layer, placed after every other tensor from a multiple of pad_multiple
// (expert_offset); with etp 1 at tp > 1 they are not replicated over TP (each TP rank holds
// its rows' share of the tokens: sequence parallelism). Never returns NULL.
GPT *gpt_create(const GPTConfig *cfg, Backend *be, const ProcessGrid *grid, const GPTStage *st);

// The activation memory gpt_create allocates, by kind (what the start-up memory table shows).
typedef struct {
    size_t slot;           // one micro-batch's activation slot (GPT.slot_bytes)
    size_t scratch;        // the backward workspace (GPT.scratch_bytes; shared by interleaved chunks)
    size_t moe_workspace;  // the MoE layers' own buffers (gpt_moe_workspace_bytes; each chunk's)
} GPTActBytes;
// What gpt_create(cfg, be, grid, st) allocates for activations on a rank of a grid of `dims`
// with be->act == act, without allocating or needing a grid: the allocator's own counting
// passes (megac plan's memory). Rank-independent. A layout the sizes do not divide: a usage
// error (exit 2), as gpt_create.
GPTActBytes gpt_measure(const GPTConfig *cfg, const PGridDims *dims, const GPTStage *st, BackendDType act);
void gpt_destroy(GPT *m);

// Forward of one micro-batch into `slot`. tokens (B, T) are read on the first stage (on
// every stage with gpt_set_documents), targets (B, T) on the last (host pointers; others may
// be NULL). Other stages must have
// filled gpt_stage_input(m, slot) first. On the last stage computes per-token losses.
// loss_scale > 0: a training forward, gpt_backward follows with this loss_scale: the last
// stage's cross-entropy pass writes d(logits) over the logits with the loss (the fused
// classifier; at TP 1 the row statistics in the same pass: one read of the logits; the
// backward reads no logits; MEGAC_NO_FUSED_CLASSIFIER=1 at gpt_create: not fused, the bits
// are the same). 0: the logits stay (evaluation, tests).
void gpt_forward(GPT *m, Comm *tp, int slot, const int *tokens, const int *targets,
                 float loss_scale);

// Backward of the micro-batch in `slot`. dout (N_sp, C, be->act): gradient of the stage output (from the
// next stage); NULL on the last stage, where the loss gradient is loss_scale per token (the
// forward's, when it was given one: another is fatal).
// Parameter gradients accumulate; afterwards gpt_stage_input_grad() holds d(stage input).
void gpt_backward(GPT *m, Comm *tp, int slot, const void *dout, float loss_scale);

void *gpt_stage_input(GPT *m, int slot);         // (N_sp, C) receive buffer of a slot
const void *gpt_stage_output(GPT *m, int slot);  // (N_sp, C) what the next stage receives
const void *gpt_stage_input_grad(GPT *m);        // (N_sp, C) what the previous stage receives
size_t gpt_stage_io_numel(const GPT *m);         // N_sp * C: elements (be->act) of those three

// Rewrites the weight copies (param_copy, type be->act) from the fp32 master weights
// (param_mem): call after anything writes param_mem (start-up does it; after each optimizer
// step; after loading a checkpoint). No-op when be->act is fp32. Asynchronous on CUDA.
void gpt_refresh_weight_copies(GPT *m);

// Decoding with a key/value cache (hf/hf_kv.h): the forward of positions [p0, p0 + n) of the
// one sequence in `slot` (p0 + n <= T), tokens (n) read on the first stage. Each layer's
// attention reads the keys and values of positions < p0 from rows < p0 of that layer's qkv
// in the slot, left there by earlier calls (gpt_forward, then this one with p0 = the
// positions so far): the slot's qkv is the cache, rows p0.. are written here. The stage's
// output (and on the last stage the logits) are rows [0, n) of the slot's buffers; no loss.
// Needs B = 1, tp = 1 and no dropout (fatal otherwise).
void gpt_forward_positions(GPT *m, Comm *tp, int slot, const int *tokens, int p0, int n);

// Sum of the per-token losses of `slot` (last stage only; syncs). Pure otherwise.
double gpt_loss_sum(GPT *m, int slot);
// acc[0] += sum of the per-token losses of `slot`; acc is one double in the backend's memory
// (last stage only). No sync: the step reads the total once.
void gpt_loss_accumulate(GPT *m, int slot, double *acc);


// Points the views of local layer l in *b at mem, a buffer of esize-byte elements holding
// the flat buffers' range that starts at float offset `origin`, and those of its tensors in
// the expert region (expert_offset on) at emem, holding the range from `eorigin` (ZeRO-2/3
// gather and gradient buffers; make_views uses it with the flat buffers, origins 0). Never
// fails.
void gpt_point_layer_views(const GPT *m, GPTBlockW *b, int l, void *mem, size_t origin,
                           void *emem, size_t eorigin, size_t esize);

// Frees the flat gradient buffer (grads) and/or the flat parameter buffers (params: the fp32
// masters and their be->act copies) once a ZeRO-2/3 optimizer holds their shards; the views
// then point wherever the optimizer sets them. The pointers become NULL (then
// gpt_refresh_weight_copies is a no-op). Never fails.
void gpt_release_flat_buffers(GPT *m, int grads, int params);

// Sets all parameter gradients to zero (no-op once the gradient buffer is released). Never fails.
void gpt_zero_grads(GPT *m);

// Activation recomputation (cfg.recompute): 1 if layer l (local index) is re-run in the
// backward; its chunk's first and last local layers in *first, *last (l itself when not
// recomputed). A chunk keeps only its input and output per micro-batch. Pure.
int gpt_layer_recomputed(const GPT *m, int l, int *first, int *last);
// The stage's recomputed layers (the first *recomputed local layers) and the chunks they
// form, each keeping its output per micro-batch (0, 0 without full recomputation). Pure.
void gpt_recompute_counts(const GPT *m, int *recomputed, int *chunks);

// Interleaved 1F1B: the model chunks of one rank run one at a time, so chunks[1..n) use
// chunks[0]'s backward workspace (and recomputation buffers) instead of their own, which
// are freed; their scratch_bytes become 0 and gpt_destroy(chunks[0]) frees the shared one
// (destroy the chunks together). The chunks must have the same workspace size (same config
// and layer count; fatal otherwise). Call once after creating them.
void gpt_share_workspace(GPT **chunks, int n);

// Dropout probabilities (hidden, attention in [0, 1)) and the masks' seed; off until
// gpt_dropout_step turns it on. Never fails.
void gpt_set_dropout(GPT *m, float hidden, float attention, uint64_t seed);
// The forwards and backwards that follow belong to training step `iteration` (on = 1), or
// to no step (on = 0: no dropout, e.g. evaluation). Never fails.
void gpt_dropout_step(GPT *m, int64_t iteration, int on);
// The micro-batch about to be run forward in `slot` starts at sample `sample0` of the
// step's global batch (the backward of that slot uses the same). Never fails.
void gpt_set_micro_sample(GPT *m, int slot, int64_t sample0);

// --eod-mask-loss: from now on a target equal to eod_id weighs 0 in the loss and its
// gradient; each micro-batch's loss is the mean over its other tokens (the per-token losses
// gpt_loss_sum and gpt_loss_accumulate add up are weighted N / unmasked count, or 0).
// model/gpt_loss_mask.c. Never fails.
void gpt_set_loss_mask(GPT *m, int64_t eod_id);
// --calculate-per-token-loss with --eod-mask-loss: from now on every unmasked token weighs w
// (the caller's G T / unmasked tokens of the whole global batch, so the step's loss is the
// sum of their losses over their count) instead of N / its micro-batch's; w 0 goes back to
// that. Call after gpt_set_loss_mask, before the step's forwards. Never fails.
void gpt_set_loss_mask_global(GPT *m, double w);

// --reset-position-ids (positions 1) and --reset-attention-mask (attention 1), Megatron's
// meaning: a document ends after each token equal to eod_id inside a sample (the EOD belongs
// to the document it ends); positions restart at 0 at each document's first token, and a
// token attends only to the earlier tokens of its own document. Computed per micro-batch
// from its tokens (host), so every stage's gpt_forward needs the tokens. Needs cp 1 (fatal
// otherwise; the trainer refuses the flags with --context-parallel-size > 1 first).
// model/gpt_documents.c. Never fails otherwise.
void gpt_set_documents(GPT *m, int64_t eod_id, int positions, int attention);

// Index of a parameter by logical name in m->params, or -1.
int gpt_param_index(const GPT *m, const char *name);
