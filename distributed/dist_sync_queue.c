// distributed/dist_sync_queue.c: --overlap-grad-reduce for ZeRO-2: each unit's gradient
// reduce-scatter runs in the background while the backward computes the units before it.
//
// ZeRO-2 keeps no full gradient buffer: a unit's gradient lives in a transient buffer only
// while its backward runs, and is reduce-scattered into the shard as soon as it is complete,
// in every micro-batch. With the flag that reduce-scatter is started nonblocking
// (comm_ireduce_scatter: MPI_Ireduce_scatter_block, advanced by the comm_test that every hook
// event makes; NCCL: on the Comm's side stream; staged: blocking, at the same points) and
// queued. Its input must stay untouched until it completes, so the layers take their
// transient buffer from a ring of two (taking one first waits for the reduction still reading
// it), the edge keeps a buffer of its own (waited for before the next micro-batch zeroes it),
// and each buffer has outputs of its own (and bf16 staging). Entries finish strictly in start
// order, so a unit's piece of micro-batch i is added to the shard before that of micro-batch
// i + 1, as the blocking path adds them, with the same collective: bitwise the same. Unlike
// Megatron, where only the last micro-batch's reduction overlaps, every micro-batch's does
// here, since ZeRO-2 reduces every micro-batch. Cost: a second layer buffer, a separate edge
// buffer on a pipeline stage (PP > 1), and the outputs.
#include "dist_sync_parts.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdint.h>
#include <stdlib.h>

enum { RING = 2 };  // layer gradient buffers in turn


// The i-th oldest entry in flight.
static DistSyncReduce *entry(DistSync *s, int i) { return &s->q[(s->head + i) % s->cap]; }

// Finishes the oldest entry; `exposed`: a hook waits for it (counted in hook_wait_s).
static void finish_oldest(DistSync *s, int exposed) {
    DistSyncReduce *r = entry(s, 0);
    double t = core_now();
    comm_wait(s->buckets[r->unit].comm, &r->req);  // (no-op when a test has seen it complete)
    double t1 = core_now();
    if (exposed) s->hook_wait_s += t1 - t;
    dist_sync_reduce_finish(s, r);
    if (s->n_spans < s->max_spans) s->spans[s->n_spans++] = (DistSyncSpan){r->unit, r->t0, t1};
    s->head = (s->head + 1) % s->cap;
    s->len--;
}

// Queues unit k's reduce-scatter of src, which lies in transient buffer base, and starts it
// (waiting for the oldest first when the queue is full).
void dist_sync_queue_start(DistSync *s, int k, const float *base, const float *src) {
    if (s->len == s->cap) finish_oldest(s, 1);
    DistSyncReduce *r = entry(s, s->len++);
    const DistSyncBucket *u = &s->buckets[k];  // its piece's places in the buffer's outputs
    const DistSyncOut *dst = &s->edge_out;
    for (int j = 0; j < RING; j++)
        if (base == s->ring[j]) dst = &s->ring_out[j];
    r->unit = k;
    r->base = base;
    r->out = dst->out + u->out_at;
    r->lp = dst->lp ? (uint16_t *)dst->lp + u->buf : NULL;
    r->lp_out = dst->lp_out ? (uint16_t *)dst->lp_out + u->out_at : NULL;
    dist_sync_reduce_start(s, r, src);
}

// Finishes, in start order, the queued reductions that have completed (explicit progress).
void dist_sync_queue_poll(DistSync *s) {
    while (s->len && comm_test(s->buckets[entry(s, 0)->unit].comm, &entry(s, 0)->req)) finish_oldest(s, 0);
}

// Waits (in start order) until no queued reduction reads buffer base (exposed time).
void dist_sync_queue_release(DistSync *s, const float *base) {
    int last = -1;
    for (int i = 0; i < s->len; i++)
        if (entry(s, i)->base == base) last = i;
    for (int i = 0; i <= last; i++) finish_oldest(s, 1);
}

// The ring buffer the next layer's backward writes, released (layer_len floats).
float *dist_sync_queue_layer_buffer(DistSync *s) {
    float *b = s->ring[s->next];
    s->next = (s->next + 1) % RING;
    dist_sync_queue_release(s, b);
    return b;
}

// Finishes every queued reduction (before the shard is read). No-op without the overlap.
void dist_sync_queue_drain(DistSync *s) {
    while (s->q && s->len) finish_oldest(s, 0);
}

// Backend memory for `bytes` bytes (one float more, as the units' buffers), counted.
static void *alloc(DistSync *s, size_t bytes) {
    s->ov_bytes += bytes;
    return s->be->ops->alloc(s->be, bytes + sizeof(float));
}

// Splits the transient buffers, adds the ring's second layer buffer, outputs per buffer and
// the queue. ZeRO-2 at size > 1 only. Set-up only.
void dist_sync_queue_enable(DistSync *s, int n_micro) {
    size_t f = sizeof(float), per = s->bucket, dp = (size_t)s->comm->size;
    dist_sync_split_transient(s);  // the edge's and the layers' buffers apart
    s->ring[0] = s->layer_grads;  // (the units', freed there)
    for (int j = 1; j < RING; j++) s->ring[j] = alloc(s, s->layer_len * f);
    s->cap = s->n_edge + RING * (s->ecomm ? 2 : 1);  // every edge unit and the ring's layers' units
                                                     // may be in flight at once
    s->q = core_calloc((size_t)s->cap, sizeof *s->q);
    s->ring_out[0] = (DistSyncOut){s->tmp, s->lp, s->lp_out};  // the blocking path's, unused now
    for (int j = 1; j <= RING; j++) {  // the other ring outputs, then the edge's
        DistSyncOut *d = j < RING ? &s->ring_out[j] : &s->edge_out;
        size_t n = j < RING ? per : s->edge_len / dp;  // floats of output
        d->out = alloc(s, n * f);
        if (s->reduce_bf16) {  // (a ring buffer's: any of its layer's units, dist_sync_unit_staging)
            d->lp = alloc(s, (j < RING ? dist_sync_unit_staging(s) : dp * n) * 2);
            d->lp_out = alloc(s, n * 2);
        }
    }
    s->max_spans = (n_micro > 0 ? n_micro : 1) * s->n_buckets;
    s->spans = core_calloc((size_t)s->max_spans, sizeof *s->spans);
}

// Frees the overlap state (nothing may be in flight); no-op without it.
void dist_sync_queue_free(DistSync *s) {
    if (!s->q) return;
    Backend *be = s->be;
    s->layer_grads = s->ring[0];
    for (int j = 1; j < RING; j++) be->ops->free(be, s->ring[j]);
    for (int j = 1; j <= RING; j++) {
        DistSyncOut *d = j < RING ? &s->ring_out[j] : &s->edge_out;
        be->ops->free(be, d->out);
        be->ops->free(be, d->lp);
        be->ops->free(be, d->lp_out);
    }
    free(s->q);
    free(s->spans);
    s->q = NULL;
}
