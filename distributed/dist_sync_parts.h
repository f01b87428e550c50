// distributed/dist_sync_parts.h: what the sync engine's files call in each other (not for
// users of the engine: distributed/dist_sync.h).
#pragma once
#include "dist_sync.h"

// dist_sync_units.c: ZeRO-2/3 set-up and freeing, the hook's part, waiting for a ZeRO-3
// prefetch, the parameter sync, a unit's reduce-scatter (start: nonblocking with the queue;
// finish: its piece added to the shard), the edge and layer transient buffers made separate.
void dist_sync_units_init(DistSync *s);
void dist_sync_units_free(DistSync *s);
void dist_sync_unit_hook(DistSync *s, GPTHookEvent ev, int unit);
void dist_sync_unit_settle(DistSync *s);
void dist_sync_units_param_sync(DistSync *s);
void dist_sync_reduce_start(DistSync *s, DistSyncReduce *r, const float *src);
void dist_sync_reduce_finish(DistSync *s, DistSyncReduce *r);
void dist_sync_split_transient(DistSync *s);

// dist_sync_units.c (--offload-params): ZeRO-3 unit u's fp32 master part (per floats) where the gather reads it:
// the master shard's, or with --offload-params copied up into the staging buffer (a layer's
// expert unit after its dense part's: at out_at). Queued on the backend's stream.
const float *dist_sync_unit_source(DistSync *s, const DistSyncBucket *u);
// Frees the master shard where it lives and the staging buffer.
void dist_sync_offload_free(DistSync *s);

// ZeRO-2/3: floats one staging buffer must hold for any unit's full gradient: DP * bucket (the
// largest per), or layer_len when a layer's expert unit reaches past that (its EDP exceeds DP
// x CP with expert-tensor-parallel 1 at TP > EP). Pure.
size_t dist_sync_unit_staging(const DistSync *s);

// dist_sync_queue.c: ZeRO-2 --overlap-grad-reduce (enable, free, start a unit's reduction,
// poll, wait until none reads a buffer, the next ring buffer, finish all).
void dist_sync_queue_enable(DistSync *s, int n_micro);
void dist_sync_queue_free(DistSync *s);
void dist_sync_queue_start(DistSync *s, int k, const float *base, const float *src);
void dist_sync_queue_poll(DistSync *s);
void dist_sync_queue_release(DistSync *s, const float *base);
float *dist_sync_queue_layer_buffer(DistSync *s);
void dist_sync_queue_drain(DistSync *s);

// The range [lo, hi) of the flat buffer that layer l's tensors occupy in region r (0: before
// m->expert_offset, 1: the expert region); lo >= hi when none (dist_sync_hook.c).
void dist_sync_layer_range(const GPT *m, int l, int r, size_t *lo, size_t *hi);

// dist_sync_hook.c and dist_sync.c: the hook's set-up (installs it for ZeRO-2/3), polling the
// buckets in flight, the LayerNorm sums of one layer (or all: -1).
void dist_sync_hook_init(DistSync *s);
void dist_sync_poll_grads(DistSync *s);
void dist_sync_sum_norm_grads(DistSync *s, int layer);
