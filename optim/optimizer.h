// optim/optimizer.h: AdamW over the model's flat gradient buffer, data-parallel, with the
// ZeRO-1 distributed optimizer (Megatron's --use-distributed-optimizer) or plain DDP.
//
// ZeRO-1: the flat buffer (padded to a multiple of DP) is cut into DP contiguous slices,
// ignoring parameter boundaries. Gradients are reduce-scattered (averaged) so DP rank r
// holds the gradient of slice r; AdamW updates only that slice, whose moments are the only
// ones this rank stores (1/DP of the optimizer state); the parameters are all-gathered.
// Plain DDP: gradients all-reduced (averaged), every rank updates everything.
//
// ZeRO-2 and ZeRO-3 (--data-parallel-sharding-strategy optim_grads / optim_grads_params):
// sharded per unit (layer) instead of across the flat buffer; see optim/zero.h.
//
// Buckets (--ddp-bucket-size E): the reduction runs as several collectives of about E
// elements each instead of one, each over a contiguous range of the flat buffer (so a bucket
// is final as soon as the backward has passed the layers it covers: --overlap-grad-reduce).
// DDP: bucket k = [k*E', k*E' + E') all-reduced in place (E' = E rounded up to 16).
// ZeRO-1 (Megatron's layout): with b = E/DP rounded up to 16 elements, bucket k is the
// range [DP*k*b, DP*(k+1)*b) (the last one shorter: DP*len_k), itself split over DP: rank r
// owns its piece [DP*k*b + r*len_k, + len_k) and keeps it at [k*b, k*b + len_k) of its shard
// (grad_shard, param_shard, the moments). So a rank's shard is one piece per bucket, packed;
// with one bucket it is the contiguous slice [r*n_padded/DP, (r+1)*n_padded/DP). The
// reduce-scatter input and the all-gather output of a bucket are its range of the flat
// buffers, unpacked. The same layout with and without --overlap-grad-reduce, and every
// bucket reduced by the same collective algorithm in both (overlap: comm_iall_reduce /
// comm_ireduce_scatter; without: the blocking calls, which over MPI are the same
// MPI_Iallreduce / MPI_Ireduce_scatter_block plus a wait), so the results are bitwise equal.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "model/gpt_params.h"

typedef struct {
    size_t begin, len;  // range of the flat buffer (floats)
    int param;          // index into the parameter table
    int weight_decay;
    int count_in_norm;  // 0 for tp-replicated copies on tp_rank > 0 and the tied wte copy
    size_t at;          // where the range sits in the moment (and ZeRO-2/3 shard) buffers
} OptSegment;

// Megatron-Core's --data-parallel-sharding-strategy: what data parallelism shards.
typedef enum {
    OPTIM_NO_SHARD,            // DDP: all-reduce, full optimizer state per rank
    OPTIM_SHARD_OPTIM,         // ZeRO-1: optimizer state
    OPTIM_SHARD_GRADS,         // ZeRO-2: + gradients (reduce-scattered per layer, per micro-batch)
    OPTIM_SHARD_PARAMS,        // ZeRO-3 / FSDP: + parameters (gathered per layer when used)
} OptimSharding;

// "no_shard" ... "optim_grads_params" -> the strategy; -1 for anything else. Pure.
int optim_sharding_parse(const char *name);
// The strategy's flag value ("optim_grads") and its usual name ("ZeRO-2"). Pure.
const char *optim_sharding_name(OptimSharding s);
const char *optim_sharding_label(OptimSharding s);

typedef struct OptimZero OptimZero;
typedef struct OptimOverlap OptimOverlap;
typedef struct OptimGather OptimGather;

// One gradient-reduction bucket (see the layout above).
typedef struct {
    size_t start, len;  // range of the flat buffer (floats): DDP the bucket, ZeRO-1 DP pieces
    size_t per, at;     // this rank's part: ZeRO-1 the piece [start + r*per, + per), kept at
                        // `at` in the shard; DDP per = len, at = start
    CommRequest req;    // the reduction in flight
    int started, done;  // this step
    int pending;        // --overlap-grad-reduce: covered layers whose gradients are not final
    double t0, t1;      // core_now() at the start and when seen complete (this step)
} OptBucket;

typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;  // the learning rate comes per step
} AdamWConfig;

typedef struct {
    Backend *be;
    Comm *dp;
    int zero1;                  // the optimizer state is sharded (ZeRO-1, 2 or 3)
    OptimSharding sharding;     // what is sharded (NO_SHARD / SHARD_OPTIM also when DP = 1)
    OptimZero *zero;            // ZeRO-2/3 state (optim/zero.h), else NULL
    float *master;              // ZeRO-3: (shard_len) this rank's fp32 master weights; else NULL
    size_t n_padded;            // flat buffer length incl. padding (multiple of DP)
    size_t shard_begin, shard_len;  // the slice this rank updates (everything without ZeRO;
                                    // ZeRO-1: shard_begin 0, the packed bucket pieces)
    float *m, *v;               // (shard_len) AdamW moments
    float *grad_shard;          // (shard_len) reduce-scatter output (ZeRO-1), else NULL
    float *param_shard;         // (shard_len) all-gather input (ZeRO-1), else NULL
    size_t bucket;              // elements per rank per bucket (ZeRO-1) or per bucket (DDP)
    OptBucket *buckets;         // (n_buckets) DDP / ZeRO-1 at DP > 1, else NULL
    int n_buckets;
    OptimOverlap *ov;           // --overlap-grad-reduce state (optim/overlap.c), else NULL
    OptimGather *gather;        // --overlap-param-gather, ZeRO-1 (optim/overlap_gather.c), or NULL
    OptSegment *segs;           // parameters (parts) inside the slice
    int n_segs;
    // The same ranges as multi-tensor tables in backend memory, relative to the slice start:
    BackendSegment *update_table;   // (n_segs) every segment, for adamw_multi
    BackendSegment *norm_table;     // (n_norm) those counted in the gradient norm
    int n_norm;
    size_t max_seg_len;             // longest segment (sizes the multi-tensor launches)
    int reduce_bf16;            // --grad-reduce-in-bf16: the DP reduction moves bf16
    void *lp, *lp_out;          // bf16 staging: (n_padded), (shard_len); or NULL (ZeRO-2/3:
                                // (DP * bucket), (bucket))
    int64_t step;               // AdamW steps taken (bias correction)
    void *copy;                 // (n_padded, be->act) weight copies AdamW writes, or NULL
    int dp_rank_counts_norm;    // plain DDP: only dp rank 0 adds to the norm
} Optimizer;

// Builds the optimizer for the model's table (params, n_params) of n_floats floats.
// tp_rank decides which replicated tensors count in the gradient norm. Never fails.
// bucket_size: elements per gradient-reduction bucket (0: one bucket).
Optimizer *optim_create(Backend *be, Comm *dp, int zero1, const ParamInfo *params, int n_params,
                        size_t n_floats, int tp_rank, size_t bucket_size);
// Megatron's --grad-reduce-in-bf16: the data-parallel reduction of the fp32 gradients moves
// bf16 (half the bytes; each bucket rounded to bf16 before, summed in fp32 per addition and
// rounded, widened back to fp32 after). Call right after optim_create. Never fails.
void optim_set_reduce_bf16(Optimizer *o);
// bf16/fp16 (m->be->act not fp32): AdamW writes the model's weight copies (m->param_copy) in
// the same pass as the fp32 masters, where that covers every copy: without ZeRO, or ZeRO-1 at
// DP = 1 (with ZeRO-1 at DP > 1 a rank updates only its slice, and ZeRO-2/3 gather the masters
// after the update: the caller refreshes the copies). Call right after optim_create.
void optim_set_weight_copies(Optimizer *o, const GPT *m);
void optim_destroy(Optimizer *o);
// The buckets (o->buckets) against the model's local layers: layer l's tensors touch buckets
// first[l] .. last[l] (-1: none); bucket k overlaps layers_in[k] layers and edge[k] says it
// holds anything else (embeddings, final LayerNorm, padding). layers_in / edge may be NULL.
// (--overlap-grad-reduce and --overlap-param-gather.) Never fails.
void optim_bucket_layers(const Optimizer *o, const GPT *m, int *first, int *last, int *layers_in,
                         int *edge);

// Synchronises gradients over DP (reduce-scatter or all-reduce, averaging); grads (n_padded).
// With --overlap-grad-reduce (optim_overlap_enable): starts the buckets not started during
// the backward, then waits for all of them.
void optim_reduce_grads(Optimizer *o, float *grads);

// For optim/overlap.c: starts bucket k's reduction (nonblocking; bf16: casts first), and
// finishes it (waits; bf16: casts back). Never fails (aborts the job on a comm failure).
void optim_bucket_start(Optimizer *o, float *grads, int k);
void optim_bucket_finish(Optimizer *o, float *grads, int k);
// Polls bucket k once (explicit progress); finishes it when complete. Returns 1 when done.
int optim_bucket_poll(Optimizer *o, float *grads, int k);

// --overlap-grad-reduce (DDP and ZeRO-1; optim/overlap.c): installs the model hook that,
// during the last micro-batch's backward (the n_micro-th of the step, set by
// optim_overlap_begin_step), sums a layer's sequence-parallel LayerNorm gradients over
// tp_sp (NULL: no SP) when its backward ends, starts every bucket whose layers are all
// final, and polls the buckets in flight at each hook event. Buckets touching the edge unit
// (embeddings, final LayerNorm, tied wte) start in optim_reduce_grads. No-op at DP = 1.
void optim_overlap_enable(Optimizer *o, GPT *m, Comm *tp_sp);
// Resets the per-step state; n_micro backward passes make a step. Never fails.
void optim_overlap_begin_step(Optimizer *o, int n_micro);
// Sums over tp_sp the LayerNorm gradients the hook has not summed (the edge unit's, or all
// without overlap). Use instead of gpt_sync_sequence_parallel_grads when overlapping.
void optim_overlap_sync_sp_rest(Optimizer *o);
// For optimizer.c: starts the buckets still waiting, then finishes all (optim_reduce_grads
// with overlap); frees the overlap state (NULL-safe).
void optim_overlap_finish(Optimizer *o, float *grads);
void optim_overlap_destroy(Optimizer *o);

// --overlap-param-gather for ZeRO-1 (optim/overlap_gather.c): optim_update starts each
// bucket's parameter all-gather (nonblocking) instead of running it; the model hook (chained
// after any installed before, e.g. optim_overlap_enable's) waits for a bucket right before
// the first forward of a unit that reads it, polls the others at every event, and refreshes
// a bucket's bf16/fp16 weight copies when its gather completes. No-op at DP = 1. Call after
// optim_overlap_enable and optim_set_weight_copies' model exists. Never fails.
void optim_gather_enable(Optimizer *o, GPT *m);
// For optimizer.c: starts every bucket's all-gather from param_shard. Never fails.
void optim_gather_start(Optimizer *o);
// Waits for every gather in flight (before reading the parameters outside a forward:
// checkpoint save, the end of training). NULL-safe, no-op without the overlap.
void optim_gather_settle(Optimizer *o);
// Seconds the forward hooks waited for gathers since the last call (then reset to 0).
double optim_gather_take_exposed(Optimizer *o);
// Bucket k's last completed gather, once (for the trace): 1 and its core_now() start and
// completion times, or 0 (none completed since it was last taken).
int optim_gather_take_span(Optimizer *o, int k, double *t0, double *t1);
// Settles, then frees the state (NULL-safe).
void optim_gather_destroy(Optimizer *o);

// This rank's share of the squared gradient norm (sum over the slice of the counted
// segments), to be summed over all ranks. Call after optim_reduce_grads. One multi-tensor
// reduction: a single device-to-host read.
double optim_local_grad_sq(Optimizer *o, const float *grads);

// AdamW on the slice with learning rate lr and gradient scale (clipping), one multi-tensor
// launch, then all-gathers the parameters (ZeRO-1). params, grads (n_padded). Returns 1 when
// the weight copies were written too (optim_set_weight_copies), else 0: the caller then
// refreshes them (gpt_refresh_weight_copies).
int optim_update(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale,
                 float *params, const float *grads);
// optim_update on the model's flat buffers (m->param_mem, m->grad_mem), then the weight
// copies the next forward reads refreshed unless AdamW wrote them. Never fails.
void optim_update_model(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale, GPT *m);

// Copies the multi-tensor tables upd (update) and nrm (gradient norm), n_segs + 1 entries
// each on the host, into new backend buffers (o->update_table, o->norm_table) and frees the
// host copies. For optimizer.c and zero_build.c. Never fails.
void optim_upload_tables(Optimizer *o, BackendSegment *upd, BackendSegment *nrm);

// Bytes of optimizer state on this rank (both moments) and without ZeRO (for the log).
size_t optim_state_bytes(const Optimizer *o);
// Bytes this rank holds for the parameters (fp32 masters, their be->act copies, ZeRO-3 gather
// buffers) and the gradients (flat buffer, or ZeRO-2/3 shard + transient buffers). Pure.
size_t optim_param_memory_bytes(const Optimizer *o, const GPT *m);
size_t optim_grad_memory_bytes(const Optimizer *o, const GPT *m);
