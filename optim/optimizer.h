// optim/optimizer.h: AdamW over the slice of the model's parameters this rank updates, as the
// data-parallel sync engine (distributed/dist_sync.h) lays it out for the strategy chosen
// (Megatron-Core's --data-parallel-sharding-strategy): DDP every parameter; ZeRO-1 (the
// distributed optimizer) this rank's piece of every bucket of the flat buffer; ZeRO-2/3 its
// piece of every unit (layer, edge tensor). The moments are kept for the slice only; the
// engine reduces the gradients into it and brings the updated parameters back.
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
    int decoupled;      // an embedding or output layer part: --decoupled-lr's learning rate
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

typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;  // the learning rate comes per step
} AdamWConfig;

typedef struct {
    Backend *be;
    DistSync *sync;             // the data-parallel sync engine (distributed/dist_sync.h)
    OptimSharding sharding;     // what is sharded (NO_SHARD / SHARD_OPTIM also when DP = 1)
    float *master;              // ZeRO-3: (shard_len) this rank's fp32 master weights (the
                                // engine's); else NULL
    int master_host;            // --offload-params: master is in pinned host memory (the
                                // host AdamW's masters themselves)
    size_t n_padded;            // flat buffer length incl. padding (multiple of DP)
    size_t shard_len;           // floats of the slice this rank updates (DDP: everything;
                                // ZeRO-1 / 2 / 3: the packed bucket / unit pieces)
    float *m, *v;               // (shard_len - host_len) AdamW moments of the slice's device
                                // part (slice floats host_len..shard_len); NULL when empty
    size_t host_len;            // --optimizer-cpu-offload: the slice's first host_len floats
                                // are updated on the host, their moments in pinned host memory
                                // (optim_set_offload); 0: none
    struct OptimHost *host;     // that host part's state (optim/optim_offload.c), or NULL
    OptSegment *segs;           // parameters (parts) inside the slice
    int n_segs;
    int *unit_seg;              // ZeRO-2/3: (n_units + 1) unit k's segments are
                                // [unit_seg[k], unit_seg[k + 1]); else NULL
    // The same ranges as multi-tensor tables in backend memory, relative to the slice start
    // (ZeRO-2/3 update table: to each unit's owned start):
    BackendSegment *update_table;   // (n_segs + 2 room) every segment, for adamw_multi; in each
                                    // unit (or the whole slice) the decoupled segments last.
                                    // With offload: the device part's, relative to where each
                                    // unit's device part starts (slice float max(at, host_len))
    int *dev_seg;                   // (n_units + 1, or 2) unit k's entries of update_table are
                                    // [dev_seg[k], dev_seg[k + 1]) (unit_seg's without offload)
    int *unit_ndec;                 // (n_units, or 1) how many (--decoupled-lr's)
    BackendSegment *norm_table;     // (n_norm) those counted in the gradient norm
    int n_norm;
    size_t max_seg_len;             // longest segment (sizes the multi-tensor launches)
    int64_t step;               // AdamW steps taken (bias correction)
    void *copy;                 // (n_padded, be->act) weight copies AdamW writes, or NULL
} Optimizer;

// Builds the optimizer of model m for strategy s over `group` (the data-parallel one) and
// `egroup` (the expert-data-parallel one: used for m's expert region, if any), with its sync
// engine (--ddp-bucket-size bucket_size, 0: one bucket; tp_sp: the TP group, summing the
// sequence-parallel LayerNorm gradients; ZeRO-2/3: see dist_sync_create for the buffers it
// frees). tp_rank decides which replicated tensors count in the gradient norm. Never fails.
Optimizer *optim_create(Backend *be, Comm *group, Comm *egroup, OptimSharding s, GPT *m, int tp_rank,
                        size_t bucket_size, Comm *tp_sp);
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

// AdamW on the slice with learning rate lr (lr_decoupled for the embedding and output layer,
// Megatron's --decoupled-lr; pass lr for none) and gradient scale (clipping), one multi-tensor
// launch per learning rate (ZeRO-2/3: per unit), then the parameters synced back
// (dist_sync_start_param_sync), then the weight copies the next forward reads refreshed
// unless AdamW or the gathers wrote them. Never fails.
void optim_update_model(Optimizer *o, const AdamWConfig *cfg, double lr, double lr_decoupled,
                        double grad_scale, GPT *m);

// Megatron-Core's --optimizer-cpu-offload --optimizer-offload-fraction fraction (in [0, 1]):
// the first fraction of this rank's slice (rounded up to 16 floats) is updated on the host by
// the CPU backend's AdamW on `threads` threads (the same arithmetic as the device's:
// backend.h's formula, element by element) on fp32 masters it keeps in host memory: each step
// its fp32 gradients are copied down, and the updated masters (and bf16/fp16 weight copies)
// back up before the parameter gather. Its moments live only in o->be's pinned host memory
// (alloc_host), not on the device. Every strategy (ZeRO-2/3: unit by unit, a unit may be split).
// Call after optim_set_weight_copies, before any step or checkpoint load. Never fails.
void optim_set_offload(Optimizer *o, double fraction, int threads);
// --offload-params (ZeRO-3): the engine's master shard moves to pinned host memory
// (dist_sync_offload_params) and o->master follows it; optim_set_offload with fraction 1 must
// come next: its host AdamW then updates that shard in place (no masters of its own, none
// copied up). Call after optim_set_weight_copies. Exits below ZeRO-3.
void optim_offload_params(Optimizer *o);
// Megatron-Core's --overlap-cpu-optimizer-d2h-h2d: the offload's copies run on the backend's
// copy stream (copy_async), ordered by events, the gradients of each DDP / ZeRO-1 bucket sent
// down as soon as the sync engine has reduced it (its grad_ready hook), the masters up before
// the parameter gather; the same results (docs/offload.md). Call after optim_set_offload;
// nothing without offload. Never fails.
void optim_set_offload_overlap(Optimizer *o);
// After the parameters were written outside the optimizer (a checkpoint load): the offloaded
// part's host masters are read again from the device. Synchronous; nothing without offload.
void optim_reload_masters(const Optimizer *o);
// The slice's moments (shard_len floats each) into host buffers hm, hv, from wherever they
// live (device and offloaded parts), and back. Synchronous. Never fail.
void optim_moments_read(const Optimizer *o, float *hm, float *hv);
void optim_moments_write(const Optimizer *o, const float *hm, const float *hv);

// Bytes of optimizer state on this rank's device (both moments; with offload the device
// part's), in pinned host memory (the offloaded part's moments and the staging of its
// gradients, masters and weight copies), and without ZeRO (for the log).
size_t optim_state_bytes(const Optimizer *o);
size_t optim_host_state_bytes(const Optimizer *o);
// Bytes this rank holds for the parameters and the gradients (dist_sync_param_bytes,
// dist_sync_grad_bytes). Pure.
size_t optim_param_memory_bytes(const Optimizer *o);
size_t optim_grad_memory_bytes(const Optimizer *o);
