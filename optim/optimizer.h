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
#include "distributed/dist_sync.h"
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
    DistSync *sync;             // DDP / ZeRO-1: the sync engine (distributed/dist_sync.h), else NULL
    float *master;              // ZeRO-3: (shard_len) this rank's fp32 master weights; else NULL
    size_t n_padded;            // flat buffer length incl. padding (multiple of DP)
    size_t shard_len;           // floats of the slice this rank updates (DDP: everything;
                                // ZeRO-1: the packed bucket pieces)
    float *m, *v;               // (shard_len) AdamW moments
    size_t bucket;              // ZeRO-2/3: the largest unit's per-rank floats
    OptSegment *segs;           // parameters (parts) inside the slice
    int n_segs;
    // The same ranges as multi-tensor tables in backend memory, relative to the slice start:
    BackendSegment *update_table;   // (n_segs) every segment, for adamw_multi
    BackendSegment *norm_table;     // (n_norm) those counted in the gradient norm
    int n_norm;
    size_t max_seg_len;             // longest segment (sizes the multi-tensor launches)
    int reduce_bf16;            // ZeRO-2/3 --grad-reduce-in-bf16: the DP reduction moves bf16
    void *lp, *lp_out;          // ZeRO-2/3 bf16 staging: (DP * bucket), (bucket); or NULL
    int64_t step;               // AdamW steps taken (bias correction)
    void *copy;                 // (n_padded, be->act) weight copies AdamW writes, or NULL
    int dp_rank_counts_norm;    // plain DDP: only dp rank 0 adds to the norm
} Optimizer;

// Builds the DDP / ZeRO-1 (zero1) optimizer of model m over the data-parallel group dp, with
// its sync engine (--ddp-bucket-size bucket_size, 0: one bucket; tp_sp: the TP group, summing
// the sequence-parallel LayerNorm gradients). tp_rank decides which replicated tensors count
// in the gradient norm. Never fails.
Optimizer *optim_create(Backend *be, Comm *dp, int zero1, GPT *m, int tp_rank, size_t bucket_size,
                        Comm *tp_sp);
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

// This rank's share of the squared gradient norm (sum over the slice of the counted
// segments), to be summed over all ranks. Call after the gradient sync. One multi-tensor
// reduction: a single device-to-host read.
double optim_local_grad_sq(Optimizer *o);

// AdamW on the slice with learning rate lr and gradient scale (clipping), one multi-tensor
// launch per unit, then the parameters synced back (ZeRO-1: the engine's all-gather, or its
// start with --overlap-param-gather; ZeRO-2/3: zero.h), then the weight copies the next
// forward reads refreshed unless AdamW or the gathers write them. Never fails.
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
