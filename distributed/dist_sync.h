// distributed/dist_sync.h: the data-parallel sync engine: one bucket group per model chunk
// (Megatron-Core's bucket group and DistributedDataParallel in one object) that averages the
// gradients over the group it is given and brings the updated parameters back. Which
// collective runs when: distributed/README.md. The layout of the buckets and of this rank's
// shard is distributed/dist_geometry.h's.
//
// Set-up chooses everything as data: sharded (ZeRO-1: reduce-scatter + all-gather) or not
// (DDP: all-reduce), the bucket size, bf16 reduction, --overlap-grad-reduce (each bucket's
// reduction starts nonblocking as soon as the last micro-batch's backward has made its
// gradients final) and --overlap-param-gather (the next forward waits for a bucket's gather
// right before the first unit that reads it). One model hook (gpt.h) serves both overlaps.
// With or without overlap every bucket is reduced by the same collective algorithm
// (overlap: comm_iall_reduce / comm_ireduce_scatter; without: the blocking calls, which over
// MPI are the same MPI_Iallreduce / MPI_Ireduce_scatter_block plus a wait), so the bits agree.
#pragma once
#include <stddef.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"

// One bucket: a range of the flat buffer and this rank's piece of it.
typedef struct {
    size_t start, len;  // range of the flat buffer (floats): DDP the bucket, ZeRO-1 all DP pieces
    size_t per, at;     // this rank's piece [start + r*per, + per), kept at `at` in the shard
                        // (DDP: per = len, at = start)
    CommRequest req;    // the gradient reduction in flight
    CommRequest greq;   // the parameter gather in flight (--overlap-param-gather)
    int started, done;  // the reduction, this step
    int pending;        // --overlap-grad-reduce: covered layers whose gradients are not final
    int gather;         // the gather: 0 idle, 1 in flight, 2 complete (span not taken yet)
    double t0, t1;      // core_now() at the reduction's start and when seen complete
    double g0, g1;      // the same for the gather
} DistSyncBucket;

typedef struct {
    Backend *be;
    Comm *comm;                 // the group reduced over (data parallel; later dp x cp)
    Comm *tp_sp;                // sequence parallelism: the TP group (LayerNorm sums), else NULL
    GPT *m;                     // the model chunk whose flat buffers are synced
    int sharded;                // ZeRO-1 (only when comm->size > 1)
    size_t n_padded;            // flat buffer length incl. padding (multiple of 16 x size)
    size_t shard_len;           // floats this rank updates (DDP: n_padded)
    float *grad_shard;          // (shard_len) ZeRO-1: the reduce-scatter output, else NULL
    float *param_shard;         // (shard_len) ZeRO-1: the all-gather input, else NULL
    size_t bucket;              // floats per bucket (ZeRO-1: per rank)
    DistSyncBucket *buckets;    // (n_buckets) at size > 1, else NULL
    int n_buckets;
    int reduce_bf16;            // --grad-reduce-in-bf16: reductions move bf16
    void *lp, *lp_out;          // (n_padded), (shard_len) bf16 staging, else NULL
    int overlap_grad, overlap_param;
    int *first, *last;          // (n_layers) the buckets layer l's tensors touch (-1: none)
    int *pending0;              // (n_buckets) covered units (layers, +1 for edge / padding)
    int *edge;                  // (n_buckets) the bucket holds tensors outside the layers
    int *sp_done;               // (n_layers) LayerNorm gradients summed over TP this step
    int *order, n_started;      // (n_buckets) buckets in reduction start order
    int n_micro, seen, armed;   // backward passes per step, seen, in the last one
    int n_flight;               // gathers in flight
    double exposed_s;           // time the forward waited for gathers since the last take
} DistSync;

// The engine for model m over group `comm`: sharded (ZeRO-1) or not, --ddp-bucket-size
// bucket_size (0: one bucket); tp_sp: the TP group when m uses sequence parallelism, else
// NULL. Allocates the shard and bucket tables. Never fails.
DistSync *dist_sync_create(Backend *be, Comm *comm, GPT *m, int sharded, size_t bucket_size,
                           Comm *tp_sp);
// Waits for what is in flight and frees everything. NULL is fine.
void dist_sync_destroy(DistSync *s);
// --grad-reduce-in-bf16: the reductions move bf16 (rounded before, widened after). Set-up only.
void dist_sync_set_reduce_bf16(DistSync *s);
// --overlap-grad-reduce / --overlap-param-gather (ZeRO-1 only): installs the model hook.
// No-op at size 1. Set-up only. Never fails.
void dist_sync_enable_overlap(DistSync *s, int grad, int param);

// Start of a step with n_micro backward passes of this chunk. Never fails.
void dist_sync_begin_step(DistSync *s, int n_micro);
// Bucket k's reduction (averaged over the group): ZeRO-1 reduce-scattered into its piece of
// grad_shard, DDP all-reduced in place; nonblocking with --overlap-grad-reduce, else done on
// return. Collective over the group.
void dist_sync_start_grad_sync(DistSync *s, int k);
// Every bucket reduced: the ones not started yet started, then all waited for in start
// order. No-op at size 1. Collective over the group.
void dist_sync_finish_grad_sync(DistSync *s);
// The sequence-parallel LayerNorm gradients summed over tp_sp (those the hook has not summed
// yet this step), then the tied wte gradient over `embedding` (NULL or size 1: none). Call
// before dist_sync_finish_grad_sync. Collective over those groups.
void dist_sync_model_grads(DistSync *s, Comm *embedding);
// The gradients of this rank's slice after the reduction (grad_shard, or the flat buffer).
float *dist_sync_shard_grads(DistSync *s);
// The parameters of this rank's slice, to update: ZeRO-1 this rank's pieces of the flat
// parameters copied into param_shard (after any gather in flight); else the flat buffer.
float *dist_sync_shard_params(DistSync *s);
// ZeRO-1: the updated shard back into every rank's flat parameters: all-gathered now, or
// started nonblocking with --overlap-param-gather (then each bucket's weight copies are
// refreshed when it completes). Returns 1 in the second case. Collective over the group.
int dist_sync_start_param_sync(DistSync *s);
// Waits for the gathers in flight (anything that reads the parameters outside a forward).
// NULL is fine. Collective completion over the group.
void dist_sync_finish_param_sync(DistSync *s);
// --overlap-param-gather: the time the forward waited for gathers since the last call, and
// bucket k's completed gather span (1, once per gather; else 0). Never fail.
double dist_sync_take_exposed(DistSync *s);
int dist_sync_take_param_span(DistSync *s, int k, double *t0, double *t1);
