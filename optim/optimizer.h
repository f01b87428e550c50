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
// elements each instead of one. A ZeRO-1 bucket k takes the k-th piece of every rank's slice
// (packed together), so each rank's slice stays one contiguous range.
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
    size_t shard_begin, shard_len;  // the slice this rank updates (everything without ZeRO)
    float *m, *v;               // (shard_len) AdamW moments
    float *grad_shard;          // (shard_len) reduce-scatter output (ZeRO-1), else NULL
    float *param_shard;         // (shard_len) all-gather input (ZeRO-1), else NULL
    size_t bucket;              // elements per rank per bucket (ZeRO-1) or per bucket (DDP)
    float *pack;                // (DP * bucket) packed reduce-scatter input (ZeRO-1 buckets)
    OptSegment *segs;           // parameters (parts) inside the slice
    int n_segs;
    // The same ranges as multi-tensor tables in backend memory, relative to the slice start:
    BackendSegment *update_table;   // (n_segs) every segment, for adamw_multi
    BackendSegment *norm_table;     // (n_norm) those counted in the gradient norm
    int n_norm;
    size_t max_seg_len;             // longest segment (sizes the multi-tensor launches)
    int reduce_bf16;            // --grad-reduce-in-bf16: the DP reduction moves bf16
    void *lp, *lp_out;          // bf16 staging: (DP * bucket or n_padded), (shard_len); or NULL
    int64_t step;               // AdamW steps taken (bias correction)
    void *copy;                 // (n_padded, be->act) weight copies AdamW writes, or NULL
    int dp_rank_counts_norm;    // plain DDP: only dp rank 0 adds to the norm
} Optimizer;

// The model's flat buffers must be a multiple of this many floats, so that DP slices
// divide them evenly and stay 64-byte aligned. Pure.
size_t optim_pad_multiple(int dp);
// n_floats rounded up to optim_pad_multiple(dp). Pure.
size_t optim_padded_size(size_t n_floats, int dp);

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

// Synchronises gradients over DP (reduce-scatter or all-reduce, averaging); grads (n_padded).
void optim_reduce_grads(Optimizer *o, float *grads);

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
