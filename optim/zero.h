// optim/zero.h: ZeRO-2 and ZeRO-3 / FSDP (Megatron-Core's --data-parallel-sharding-strategy
// optim_grads and optim_grads_params), on top of the AdamW of optimizer.h.
//
// Units. The stage's parameters are cut into units: one per local layer (its 12 tensors,
// contiguous in the flat buffer) and one per remaining tensor (wte, wpe, the final
// LayerNorm's weight and bias: the "edge"). Each unit of len floats is sharded on its own:
// DP rank r owns [begin + r*per, begin + r*per + own) with per = ceil(len / DP) rounded up to
// 16 and own <= per (the last ranks may own less, or nothing). The shard stores (gradients,
// moments, ZeRO-3 masters) keep `per` floats per unit, one unit after the other. Since the
// slicing depends only on a unit's length, the tied wte is sliced identically on the first
// and the last stage, and every tensor-parallel rank slices its (same-shaped) table alike.
//
// ZeRO-2, per micro-batch: the model's gradient views of layer l point into one transient
// buffer (DP*per floats, zeroed) before its backward; after it, the buffer is
// reduce-scattered (averaged) and this rank's piece added to the gradient shard. The edge
// units keep their own transient buffer for the whole micro-batch backward (wte gets
// gradient at both ends with PP = 1) and are reduce-scattered at its end. A stage that is
// not both first and last never holds edge and layer gradients at once (the last stage's
// edge gradients are complete, and reduced, before its first layer's backward; the first
// stage's come after its last layer's): there the two transient buffers are one. After the last
// micro-batch: the sequence-parallel LayerNorm gradients are summed over TP and the tied wte
// over the embedding group, both on the shard only. AdamW updates the owned parts of the
// flat parameter buffer, then every unit is all-gathered back into it.
//
// ZeRO-3, in addition: the flat parameter buffer is freed; this rank keeps its parts as
// fp32 masters (packed like the gradient shard). Before a layer is read (forward,
// recomputed forward, backward) it is all-gathered into one of two rotating buffers (layer
// l into buffer l % 2: the next layer's gather never overwrites the one in use, so it could
// be prefetched) and the layer's views point there. --overlap-param-gather prefetches: the
// hook predicts the next layer asked for (gpt.c's order: l + 1 in the forward, l - 1 or the
// previous recomputed chunk's first layer in the backward) and starts its gather
// (comm_iall_gather: MPI_Iallgather, or NCCL on a side stream) before the current layer
// computes, into the other buffer; the prediction never names the buffer in use, tmp (the
// 16-bit staging) is not touched while a gather is in flight, and the bytes are the same. The edge units are
// gathered into their own buffer once per optimizer step, at their first use.
//
// Mixed precision (--bf16/--fp16, be->act 16-bit): the gradients stay fp32 main gradients
// (4 bytes per element: the transient buffers, the shard, the reduce-scatters; with
// --grad-reduce-in-bf16 the reduce-scatters move bf16, rounded before and widened after, as
// ZeRO-1's). ZeRO-2 keeps the full fp32 masters and 16-bit copies (the trainer re-casts them
// after the all-gather of the update). ZeRO-3 keeps only the fp32 master shard; a gather
// casts this rank's part to be->act (in `tmp`) and all-gathers 16-bit weights (2 bytes per
// element, the ZeRO paper's 2Psi), which the ops read: the same bits as ZeRO-1's copies.
// Any backend: the shard accumulation uses the backend's fp32 `add_f32`.
//
// --overlap-grad-reduce (ZeRO-2 only; optim/zero_overlap.c): the same reduce-scatters, started
// nonblocking when a unit's backward ends and finished in start order later (at the hook
// events, when their buffer is needed again, at the latest in optim_zero_finish_grads); layers
// take their transient buffer from a ring of two and the edge keeps its own. Bitwise the same.
#pragma once
#include "optimizer.h"

typedef struct ZeroOverlap ZeroOverlap;

// One reduce-scatter of a unit's gradients over DP: started from its full gradient on this
// rank, finished by adding this rank's averaged piece to the gradient shard.
typedef struct {
    int unit;           // index into OptimZero.units
    const float *base;  // the transient buffer it reads (untouched until it is finished)
    float *out;         // (per) this rank's averaged piece, fp32
    void *lp, *lp_out;  // --grad-reduce-in-bf16: (DP*per), (per) bf16 staging; else NULL
    CommRequest req;    // in flight (--overlap-grad-reduce)
    double t0;          // core_now() at the start (trace)
} ZeroReduce;

// A finished reduce-scatter of this step, for the trace: its unit, start and completion.
typedef struct {
    int unit;
    double t0, t1;
} ZeroSpan;

typedef struct {
    size_t begin, len;  // the unit's range of the flat buffers (floats)
    size_t per;         // floats per DP rank: ceil(len / DP) rounded up to 16
    size_t own;         // floats this rank owns: [begin + rank*per, + own)
    size_t at;          // offset of this rank's `per` floats in the shard stores
    size_t buf;         // edge units: offset of the unit's DP*per floats in the edge buffers
    int seg0, n_seg;    // its segments in o->segs (and the update table)
} ZeroUnit;

struct OptimZero {
    GPT *m;
    int params;                 // ZeRO-3: parameters sharded too
    ZeroUnit *units;            // (n_units) the n_edge edge units first, then layer l
    int n_units, n_edge;
    int wte_unit;               // index of wte's unit, or -1
    size_t edge_len, layer_len; // floats: all edge units (DP*per each), the largest layer's DP*per
    size_t max_per;
    float *grad_shard;          // (o->shard_len) averaged gradients of the owned parts
    float *edge_grads;          // (edge_len) transient: the edge's full gradients, one micro-batch
    float *layer_grads;         // (layer_len) transient: the layer in backward (== edge_grads
                                // when shared)
    int shared;                 // PP > 1: one transient buffer of max(edge_len, layer_len)
    int edge_pending;           // the edge's gradients of this micro-batch are not reduced yet
    float *tmp;                 // (max_per) reduce-scatter output / all-gather input (fp32,
                                // or the be->act part cast from the master)
    void *edge_params;          // ZeRO-3 (edge_len, be->act): gathered edge weights, held for a step
    void *layer_params[2];      // ZeRO-3 (layer_len, be->act) each: rotating gather buffers
    int edge_stale;             // ZeRO-3: the edge buffer must be gathered before its next use
    size_t esize;               // bytes per gathered weight (be->act): 4, or 2 (--bf16/--fp16)
    CommDtype wtype;            // their Comm type
    int prefetch;               // ZeRO-3 --overlap-param-gather: gather the next layer early
    int pending;                // the layer whose gather is in flight (req), or -1
    int prefetched;             // the layer whose finished prefetch its buffer holds, or -1
    int n_prefetched;           // this step's gathers served by a prefetch (log, tests)
    CommRequest req;
    int in_backward;            // between the edge's BACKWARD_BEGIN and the next FORWARD
    ZeroOverlap *ov;            // ZeRO-2 --overlap-grad-reduce (zero_overlap.c), else NULL
    double hook_wait_s;         // this step: host time the hook waited for reduce-scatters
};

// Builds the ZeRO-2 (SHARD_GRADS) or ZeRO-3 (SHARD_PARAMS) optimizer of model m over the DP
// group: units, segments, shard stores and transient buffers; frees the model's flat
// gradient buffer (ZeRO-3: also the parameter buffer, after copying this rank's parts into
// the masters) and installs the model hook. tp_rank decides what counts in the norm. Never
// fails.
Optimizer *optim_zero_create(Backend *be, Comm *dp, OptimSharding s, GPT *m, int tp_rank);
// Frees the ZeRO-2/3 state (optim_destroy calls it). NULL is fine.
void optim_zero_destroy(Backend *be, OptimZero *z);

// ZeRO-3 (no-op otherwise): on, each layer's gather is started (comm_iall_gather) right
// after the previous unit's weights are ready, so that it runs while that unit computes;
// the same bytes and results as without. Never fails.
void optim_zero_set_prefetch(Optimizer *o, int on);
// Waits for a prefetch in flight, if any (before tmp or the masters are touched). Collective
// completion over DP.
void optim_zero_settle(Optimizer *o);

// The model hook (GPTShardHook in gpt.h; ctx: the Optimizer), installed by optim_zero_create:
// ZeRO-3 gathers a unit's weights before each use; ZeRO-2/3 give a layer's backward a zeroed
// transient gradient buffer and reduce-scatter it into the shard afterwards. Collective over DP.
void optim_zero_hook(void *ctx, GPTHookEvent ev, int unit);

// Unit r->unit's reduce-scatter of src (its DP*per floats; --grad-reduce-in-bf16: rounded
// into r->lp first): nonblocking (comm_ireduce_scatter) with --overlap-grad-reduce, else
// blocking (comm_reduce_scatter: over MPI the same MPI_Ireduce_scatter_block plus a wait, over
// NCCL the same collective on the compute stream), so both give the same bits. Collective over DP.
void optim_zero_reduce_start(Optimizer *o, ZeroReduce *r, const float *src);
// Finishes it: waits (no-op when already complete), widens a bf16 piece, adds the piece to
// the unit's place in the gradient shard. Collective completion over DP.
void optim_zero_reduce_finish(Optimizer *o, ZeroReduce *r);

// Gives the edge and the layers separate transient gradient buffers where they share one
// (a stage that is not both first and last), so that both may be read by reductions in
// flight; re-points the edge's gradient views. Start-up only. Never fails.
void optim_zero_split_transient(Optimizer *o);

// --overlap-grad-reduce for ZeRO-2 (zero_overlap.c): splits the transient buffers, adds a
// second layer buffer (the ring), outputs per buffer and a queue of reductions; the hook
// then starts each unit's reduce-scatter nonblocking (see zero_overlap.c). n_micro: the most
// micro-batches a step has (sizes the list of trace spans). No-op for ZeRO-3 and at DP = 1.
// Never fails.
void optim_zero_overlap_enable(Optimizer *o, int n_micro);
// Frees the overlap state (nothing may be in flight); NULL-safe. For optim_zero_destroy.
void optim_zero_overlap_destroy(Backend *be, OptimZero *z);
// Extra bytes the overlap holds (second layer buffer, outputs and bf16 staging); 0
// without it. Pure.
size_t optim_zero_overlap_bytes(const OptimZero *z);
// For zero_step.c (hook): queues unit k's reduce-scatter of src, which lies in transient
// buffer base, and starts it (waiting for the oldest first when the queue is full).
void optim_zero_ov_start(Optimizer *o, int k, const float *base, const float *src);
// Finishes, in start order, the queued reductions that have completed (explicit progress).
void optim_zero_ov_poll(Optimizer *o);
// Waits (in start order) until no queued reduction reads buffer base; the time counts as
// exposed (hook_wait_s).
void optim_zero_ov_release(Optimizer *o, const float *base);
// The ring buffer the next layer's backward writes, released (layer_len floats).
float *optim_zero_ov_layer_buffer(Optimizer *o);
// Finishes every queued reduction (before the shard is read). No-op without the overlap.
void optim_zero_ov_drain(Optimizer *o);
// This step's finished reductions since the last call (then forgotten): their count, and in
// *spans (valid until the next reduction finishes). 0 without the overlap. Never fails.
int optim_zero_take_spans(Optimizer *o, const ZeroSpan **spans);
// Seconds the hook spent waiting for gradient reduce-scatters since the last call (blocking
// ones without the overlap; a buffer still being read, or a full queue, with it), then 0.
// 0 for DDP / ZeRO-1. Never fails.
double optim_zero_take_hook_wait(Optimizer *o);

// Start of a step: zeroes the gradient shard. Never fails.
void optim_zero_begin_step(Optimizer *o);
// After the step's last backward: sums the sequence-parallel LayerNorm gradients over
// tp_sp (NULL: no SP) and the tied wte gradient over `embedding` (NULL or size 1: none),
// both on the shard only. Collective over those groups.
void optim_zero_finish_grads(Optimizer *o, Comm *tp_sp, Comm *embedding);
// This rank's share of the squared gradient norm (one multi-tensor reduction).
double optim_zero_local_grad_sq(Optimizer *o);
// AdamW on the owned parts; ZeRO-2: all-gathers every unit back into the flat parameters;
// ZeRO-3: marks the edge weights for gathering at their next use. Collective over DP.
void optim_zero_update(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale);

// Bytes: gradients (shard + transient buffers), parameters (ZeRO-2: fp32 masters + be->act
// copies; ZeRO-3: master shard + gather buffers), and the padded edge share of the shard
// (for the traffic formulas). Pure.
size_t optim_zero_grad_bytes(const Optimizer *o);
size_t optim_zero_param_bytes(const Optimizer *o);
size_t optim_zero_edge_shard_bytes(const Optimizer *o);
