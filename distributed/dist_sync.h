// distributed/dist_sync.h: the data-parallel sync engine: one bucket group per model chunk
// (Megatron-Core's bucket group and DistributedDataParallel in one object) that averages the
// gradients over the group it is given and brings the updated parameters back. Which
// collective runs when, for each strategy: distributed/README.md. The layout of the buckets,
// units and of this rank's shard is distributed/dist_geometry.h's.
//
// Set-up chooses everything as data: the strategy (stage 0 DDP: all-reduce; 1 ZeRO-1:
// reduce-scatter + all-gather over flat buckets; 2 ZeRO-2: a reduce-scatter per unit (layer,
// edge tensor) and micro-batch into a gradient shard; 3 ZeRO-3: + the parameters sharded and
// gathered per unit when used), the bucket size, bf16 reduction, --overlap-grad-reduce
// (reductions started nonblocking as soon as their gradients are final) and
// --overlap-param-gather (ZeRO-1: the next forward waits for a bucket's gather right before
// the first unit that reads it; ZeRO-3: the next layer's gather prefetched). One model hook
// (gpt.h) serves all of them. With or without overlap every reduction runs the same
// collective algorithm (overlap: comm_iall_reduce / comm_ireduce_scatter; without: the
// blocking calls, which over MPI are the same MPI_Iallreduce / MPI_Ireduce_scatter_block plus
// a wait), and reductions finish in start order, so the bits agree.
#pragma once
#include <stddef.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "distributed/dist_geometry.h"  // defines: DistStateBytes

// One bucket (stages 0-1) or unit (stages 2-3): a range of the flat buffer and this rank's
// piece of it.
typedef struct {
    size_t start, len;  // range of the flat buffer (floats): DDP the bucket, ZeRO-1 all DP
                        // pieces, ZeRO-2/3 the unit
    size_t per, at;     // this rank's piece [start + r*per, + per), kept at `at` in the shard
                        // (DDP: per = len, at = start)
    size_t own;         // floats of the piece inside the range (ZeRO-2/3 may own less; else per)
    size_t buf;         // ZeRO-2/3 edge units: offset of its DP*per floats in the edge buffers;
                        // a layer's expert unit: of its EDP*per in the layer buffers (after
                        // the dense part's DP*per)
    size_t out_at;      // ZeRO-2/3: offset of its output piece in its buffer's outputs (edge
                        // units buf / DP, a layer's expert unit its dense unit's per; else 0)
    Comm *comm;         // the group it is reduced and gathered over (stages 0-1: the dense
                        // group, or the expert-data-parallel one for the expert region)
    float scale;        // applied to the averaged gradients (the expert region: EDP / DP)
    CommRequest req;    // the gradient reduction in flight
    CommRequest greq;   // the parameter gather in flight (--overlap-param-gather, ZeRO-1)
    int started, done;  // the reduction, this step (stages 0-1)
    int pending;        // --overlap-grad-reduce: covered layers whose gradients are not final
    int gather;         // the gather: 0 idle, 1 in flight, 2 complete (span not taken yet)
    double t0, t1;      // core_now() at the reduction's start and when seen complete
    double g0, g1;      // the same for the gather
} DistSyncBucket;

// A ZeRO-2/3 unit's reduce-scatter: from its full gradient on this rank to this rank's
// averaged piece, added to the gradient shard when finished.
typedef struct {
    int unit;           // index into buckets
    const float *base;  // the transient buffer it reads (untouched until it is finished)
    float *out;         // (per) this rank's averaged piece, fp32
    void *lp, *lp_out;  // --grad-reduce-in-bf16: (DP*per), (per) bf16 staging; else NULL
    CommRequest req;    // in flight (--overlap-grad-reduce)
    double t0;          // core_now() at the start (trace)
} DistSyncReduce;

// A finished reduction of this step, for the trace: its bucket / unit, start and completion.
typedef struct {
    int unit;
    double t0, t1;
} DistSyncSpan;

typedef struct {
    float *out;         // fp32 output pieces of reductions reading one transient buffer
    void *lp, *lp_out;  // --grad-reduce-in-bf16: their staging (DP times that, and that)
} DistSyncOut;

typedef struct {
    Backend *be;
    Comm *comm;                 // the group reduced over (data parallel x context parallel)
    Comm *ecomm;                // the expert region's (expert data parallel), or NULL
    Comm *tp_sp;                // sequence parallelism: the TP group (LayerNorm sums), else NULL
    GPT *m;                     // the model chunk whose gradients and parameters are synced
    int stage;                  // 0 DDP, 1 ZeRO-1, 2 ZeRO-2, 3 ZeRO-3 (ZeRO-1 only at size > 1)
    int sharded;                // stage >= 1
    size_t n_padded;            // flat buffer length incl. padding (multiple of 16 x size)
    size_t shard_len;           // floats this rank updates (DDP: n_padded)
    float *grad_shard;          // (shard_len) stages 1-3: this rank's averaged gradients
    float *param_shard;         // (shard_len) ZeRO-1: the all-gather input, else NULL
    float *master;              // (shard_len) ZeRO-3: this rank's fp32 master weights (device
                                // memory; --offload-params: pinned host memory), else NULL
    int host_params;            // --offload-params: master is in host memory
    float *pstage;              // (pstage_len + 1) --offload-params: a unit's (a layer's dense
    size_t pstage_len;          // and expert) master parts copied up for its gather, else NULL
    size_t bucket;              // floats per bucket (ZeRO-1: per rank); ZeRO-2/3: the largest per
    DistSyncBucket *buckets;    // (n_buckets) the buckets (at size > 1) or the units
    int n_buckets;
    int reduce_bf16;            // --grad-reduce-in-bf16: reductions move bf16
    void *lp, *lp_out;          // bf16 staging: (n_padded), (shard_len); ZeRO-2/3 (DP*bucket), (bucket)
    int overlap_grad, overlap_param;
    int *first, *last;          // (2, n_layers) the buckets layer l's tensors touch (-1: none),
                                // in the dense region, then in the expert region
    int *pending0;              // (n_buckets) covered units (layers, +1 for edge / padding)
    int *edge;                  // (n_buckets) the bucket holds tensors outside the layers
    int *sp_done;               // (n_layers) LayerNorm gradients summed over TP this step
    int *order, n_started;      // (n_buckets) buckets in reduction start order
    int n_micro, seen, armed;   // backward passes per step, seen, in the last one
    int n_flight;               // gathers in flight (ZeRO-1)
    double exposed_s;           // time the forward waited for gathers since the last take
    // ZeRO-2/3 (dist_sync_units.c): the units are the n_edge edge tensors, then one per layer,
    // then with an expert region one per layer for its expert tensors (over ecomm)
    int n_edge, wte_unit;       // wte's unit, or -1
    size_t edge_len, layer_len; // floats: all edge units (DP*per each), the largest layer's DP*per
                                // (with an expert region: + its expert unit's EDP*per)
    float *edge_grads;          // (edge_len) transient: the edge's full gradients, one micro-batch
    float *layer_grads;         // (layer_len) transient: the layer in backward (== edge_grads
                                // when shared)
    int shared;                 // PP > 1: one transient buffer of max(edge_len, layer_len)
    int edge_pending;           // the edge's gradients of this micro-batch are not reduced yet
    float *tmp;                 // (bucket) reduce-scatter output / all-gather input
    void *edge_params;          // ZeRO-3 (edge_len, be->act): gathered edge weights, for a step
    void *layer_params[2];      // ZeRO-3 (layer_len, be->act) each: rotating gather buffers
    int edge_stale;             // ZeRO-3: the edge buffer must be gathered before its next use
    size_t esize;               // bytes per gathered weight (be->act)
    CommDtype wtype;            // their Comm type
    int prefetch;               // ZeRO-3 --overlap-param-gather: gather the next layer early
    int pending, prefetched;    // the layer whose gather is in flight (req) / held; or -1
    int n_prefetched;           // this step's gathers served by a prefetch (log, tests)
    CommRequest req, ereq;      // the prefetch in flight: the layer's dense and expert units
    int in_backward;            // between the edge's BACKWARD_BEGIN and the next FORWARD
    double hook_wait_s;         // this step: host time the hook waited for reduce-scatters
    // ZeRO-2 --overlap-grad-reduce: reductions in flight, a FIFO of len entries from q[head]
    DistSyncReduce *q;
    int cap, head, len;
    float *ring[2];             // (layer_len) each: the layers' transient gradient buffers
    DistSyncOut ring_out[2], edge_out;
    int next;                   // the ring buffer the next layer's backward gets
    DistSyncSpan *spans;        // (max_spans) the reductions finished since the last take
    int n_spans, max_spans;
    size_t ov_bytes;            // what the overlap allocated (memory report)
    // Stages 0-1: called with bucket k once its reduction is complete and its gradients final
    // on the compute stream (queued work), before the next bucket's; NULL: none (the
    // optimizer's --overlap-cpu-optimizer-d2h-h2d copies them down from here)
    void (*grad_ready)(void *ctx, int k);
    void *grad_ready_ctx;
} DistSync;

// The engine for model m over group `comm`: stage 0-3 (above), --ddp-bucket-size bucket_size
// (0: one bucket; stages 0-1); tp_sp: the TP group (used when m has sequence parallelism).
// With expert parallelism (m->expert_offset < m->n_alloc) the expert region is a second set
// of buckets over `ecomm` (the expert-data-parallel group, whose ranks hold the same experts),
// its averages scaled by ecomm's size / comm's size (the experts saw the tokens of ep times
// more ranks: Megatron's expert gradient scaling); ZeRO-2/3 give each layer's expert tensors
// a unit of their own over ecomm (dist_sync_units.c). ZeRO-2/3 free the model's
// flat gradient buffer (ZeRO-3: also the parameter buffer, after keeping this rank's parts as
// masters) and install the hook. Never fails.
DistSync *dist_sync_create(Backend *be, Comm *comm, Comm *ecomm, GPT *m, int stage,
                           size_t bucket_size, Comm *tp_sp);
// --offload-params (DeepSpeed's offload_param), ZeRO-3 only: the master shard moves to o->be's
// pinned host memory (alloc_host; freed on the device) and a device staging buffer of one
// layer's parts is allocated: each gather first copies the unit's part up (H2D) into it, so
// the gather and its prefetch are unchanged otherwise. Call once after dist_sync_create,
// before the first step. Exits (core_fatal) below ZeRO-3.
void dist_sync_offload_params(DistSync *s);
// The group that reduces parameter p of the engine's model (ecomm in the expert region, else
// comm). Pure.
Comm *dist_sync_param_comm(const DistSync *s, const ParamInfo *p);
// Waits for ZeRO-1's parameter gathers in flight and frees everything (the model's buffers
// stay the model's). NULL is fine.
void dist_sync_destroy(DistSync *s);
// --grad-reduce-in-bf16: the reductions move bf16 (rounded before, widened after). Set-up only.
void dist_sync_set_reduce_bf16(DistSync *s);
// --overlap-grad-reduce (stages 0-2) / --overlap-param-gather (ZeRO-1, ZeRO-3): installs the
// hook's parts; n_micro: the most micro-batches a step has (trace spans). Nothing to overlap
// at size 1 (ZeRO-3's prefetch is still set). After dist_sync_set_reduce_bf16. Set-up only.
// Never fails.
void dist_sync_enable_overlap(DistSync *s, int grad, int param, int n_micro);

// Start of a step with n_micro backward passes of this chunk (ZeRO-2/3: zeroes the shard).
void dist_sync_begin_step(DistSync *s, int n_micro);
// Bucket k's reduction (stages 0-1, averaged over the group): ZeRO-1 reduce-scattered into
// its piece of grad_shard, DDP all-reduced in place; nonblocking with --overlap-grad-reduce,
// else done on return. Collective over the group.
void dist_sync_start_grad_sync(DistSync *s, int k);
// Every reduction finished: stages 0-1 the buckets not started yet started, then all waited
// for in start order; ZeRO-2/3 the ones in flight. Collective over the group.
void dist_sync_finish_grad_sync(DistSync *s);
// The sequence-parallel LayerNorm gradients summed over tp_sp (those the hook has not summed
// yet this step), then the tied wte gradient over `embedding` (NULL or size 1: none); on the
// flat buffer before the DP reduction, or ZeRO-2/3 on the shard after it. Collective over
// those groups.
void dist_sync_model_grads(DistSync *s, Comm *embedding);
// The gradients of this rank's slice after the reduction (grad_shard, or the flat buffer).
float *dist_sync_shard_grads(DistSync *s);
// Where the parameters of this rank's slice are, to update, once nothing is in flight: ZeRO-1
// this rank's pieces of the flat parameters copied into param_shard; DDP the flat buffer;
// ZeRO-2/3 NULL (per unit: dist_sync_unit_params).
float *dist_sync_shard_params(DistSync *s);
// ZeRO-2/3: unit k's owned parameters (own floats): the flat buffer's or the ZeRO-3 master's.
float *dist_sync_unit_params(DistSync *s, int k);
// The updated slice back to every rank: ZeRO-1 all-gathered now, or started nonblocking with
// --overlap-param-gather (then each bucket's weight copies are refreshed when it completes:
// returns 1); ZeRO-2 every unit all-gathered into the flat parameters; ZeRO-3 the edge marked
// for gathering at its next use. Collective over the group.
int dist_sync_start_param_sync(DistSync *s);
// Waits for the gathers in flight (anything that reads the parameters outside a forward).
// NULL is fine. Collective completion over the group.
void dist_sync_finish_param_sync(DistSync *s);
// --overlap-param-gather: the time the forward waited for gathers since the last call, and
// bucket k's completed gather span (1, once per gather; else 0). Never fail.
double dist_sync_take_exposed(DistSync *s);
int dist_sync_take_param_span(DistSync *s, int k, double *t0, double *t1);
// ZeRO-2/3: seconds the hook waited for reduce-scatters since the last call (then 0), and the
// reductions finished since the last call (--overlap-grad-reduce; in *spans). 0 otherwise.
double dist_sync_take_hook_wait(DistSync *s);
int dist_sync_take_spans(DistSync *s, const DistSyncSpan **spans);

// The bytes of this rank's state (dist_geometry.h: dist_state_bytes, what megac plan counts),
// without the ZeRO-2 overlap's buffers. Pure.
DistStateBytes dist_sync_state_bytes(const DistSync *s);
// Bytes this rank holds for the gradients (flat buffer; ZeRO-2/3 shard + transient buffers +
// the overlap's) and the parameters (fp32 + be->act copies; ZeRO-3 master shard + gather
// buffers), and ZeRO-2/3 the padded edge share of the shard (the traffic formulas). Pure.
size_t dist_sync_grad_bytes(const DistSync *s);
size_t dist_sync_param_bytes(const DistSync *s);
size_t dist_sync_edge_shard_bytes(const DistSync *s);
