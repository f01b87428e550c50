// model/gpt.h: one pipeline stage of a GPT-2 model, tensor-parallel inside.
//
// The stage owns layers [layer0, layer0 + n_layers); the first stage also the token and
// position embeddings, the last the final LayerNorm and the output layer (tied to wte).
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
#include "layers/tp_vocab.h"
#include "gpt_config.h"
#include "gpt_params.h"

// Views of one transformer block's tensors (parameters or their gradients).
typedef struct {
    float *ln1w, *ln1b;    // (C), (C)
    float *qkvw, *qkvb;    // (3*C/tp, C), (3*C/tp)
    float *projw, *projb;  // (C, C/tp), (C)
    float *ln2w, *ln2b;    // (C), (C)
    float *fcw, *fcb;      // (F/tp, C), (F/tp)
    float *fcprojw, *fcprojb;  // (C, F/tp), (C)
} GPTBlockW;

typedef struct {
    float *wte;            // (Vp/tp, C) first stage, or the last stage's tied copy; else NULL
    float *wpe;            // (maxT, C) first stage
    float *lnfw, *lnfb;    // (C) last stage
    GPTBlockW *blocks;     // (n_layers)
} GPTWeights;

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  // (N, C), (N), (N)
    float *qkv;                        // (N, 3*C/tp)
    float *att;                        // (B, NH/tp, T, T) probabilities; NULL with flash
    float *lse;                        // (B, NH/tp, T) log-sum-exp, with use_flash_attn; else NULL
    float *atty;                       // (N, C/tp)
    float *res2;                       // (N, C) after the attention residual
    float *ln2, *ln2_mean, *ln2_rstd;  // (N, C), (N), (N)
    float *fch, *fch_gelu;             // (N, F/tp)
    float *res3;                       // (N, C) block output
} GPTLayerActs;

typedef struct {
    int *tokens, *targets;             // (B, T)
    float *x0;                         // (N, C) stage input: embeddings, or received
    GPTLayerActs *layers;              // (n_layers)
    float *lnf, *lnf_mean, *lnf_rstd;  // (N, C), (N), (N)  last stage
    float *logits;                     // (N, Vp/tp)          last stage
    TPXentBuffers xent;                //                     last stage
    void *mem;
} GPTActs;

typedef struct {
    GPTConfig cfg;
    Backend *be;
    int tp, tp_rank, layer0, n_layers, first, last;
    int B, T, N;                       // micro-batch, sequence, B*T
    int sp;                            // sequence parallelism on
    int N_sp;                          // rows of the residual stream here: N/tp with SP, else N
    int C_tp, NH_tp, F_tp;             // tensor-parallel local sizes
    int Vp;                            // padded vocabulary
    TPVocab vocab;
    ParamInfo *params;                 // (n_params) table; offsets into the flat buffers
    int n_params;
    size_t n_floats;                   // floats used by the table
    size_t n_alloc;                    // floats allocated (padded), >= n_floats: the optimizer
                                       // reduces and gathers all n_alloc (zero tail)
    float *param_mem, *grad_mem;       // (n_alloc) each
    GPTWeights w, g;                   // views into param_mem and grad_mem
    GPTActs *slots;                    // (n_slots)
    int n_slots;
    size_t slot_bytes;                 // activation memory of one micro-batch in flight
    size_t scratch_bytes;              // backward workspace (s), shared by the slots
    struct {                           // backward workspace, shared by all slots
        float *dres, *dln;             // (N, C)
        float *dqkv;                   // (N, 3*C/tp)
        float *datt;                   // (B, NH/tp, T, T) materialised attention's scratch,
                                       // (B, NH/tp, T) with use_flash_attn
        float *datty;                  // (N, C/tp)
        float *dfch, *dfch_gelu;       // (N, F/tp)
        float *dscale;                 // (N) loss gradient per token
        float *sp_gather, *sp_full;    // (N, C) each, sequence-parallel workspace (else NULL)
        float dscale_value;
        float *dscale_host;            // (N) host staging for dscale, allocated once
        void *mem;
    } s;
} GPT;

// Builds the stage (call gpt_config_check first; a sequence-parallel micro-batch that tp
// does not divide is a usage error), allocates everything on
// `be`, initialises parameters from `seed` (layout-independent). The flat buffers hold
// n_alloc floats, n_floats rounded up to a multiple of pad_multiple (the optimizer's
// data-parallel slicing); the tail is zero. With sequence_parallel (B*T divisible by tp)
// the residual stream, LayerNorms and the stage's input/output hold N/tp rows. Never
// returns NULL.
GPT *gpt_create(const GPTConfig *cfg, Backend *be, int tp, int tp_rank, int pp, int pp_rank,
                int micro_batch, int n_slots, uint64_t seed, size_t pad_multiple,
                int sequence_parallel);
void gpt_destroy(GPT *m);

// Forward of one micro-batch into `slot`. tokens (B, T) are read on the first stage,
// targets (B, T) on the last (host pointers; others may be NULL). Other stages must have
// filled gpt_stage_input(m, slot) first. On the last stage computes per-token losses.
void gpt_forward(GPT *m, Comm *tp, int slot, const int *tokens, const int *targets);

// Backward of the micro-batch in `slot`. dout (N_sp, C): gradient of the stage output (from the
// next stage); NULL on the last stage, where the loss gradient is loss_scale per token.
// Parameter gradients accumulate; afterwards gpt_stage_input_grad() holds d(stage input).
void gpt_backward(GPT *m, Comm *tp, int slot, const float *dout, float loss_scale);

float *gpt_stage_input(GPT *m, int slot);         // (N_sp, C) receive buffer of a slot
const float *gpt_stage_output(GPT *m, int slot);  // (N_sp, C) what the next stage receives
const float *gpt_stage_input_grad(GPT *m);        // (N_sp, C) what the previous stage receives
size_t gpt_stage_io_numel(const GPT *m);          // N_sp * C: floats of those three buffers

// Sum of the per-token losses of `slot` (last stage only; syncs). Pure otherwise.
double gpt_loss_sum(GPT *m, int slot);
// acc[0] += sum of the per-token losses of `slot`; acc is one double in the backend's memory
// (last stage only). No sync: the step reads the total once.
void gpt_loss_accumulate(GPT *m, int slot, double *acc);

// Sequence parallelism: sums over tp the LayerNorm gradients, which each rank computed
// from its own rows only. Call once per step after the last backward. No-op without SP.
void gpt_sync_sequence_parallel_grads(GPT *m, Comm *tp);

// Sets all parameter gradients to zero. Never fails.
void gpt_zero_grads(GPT *m);

// Index of a parameter by logical name in m->params, or -1.
int gpt_param_index(const GPT *m, const char *name);
