// optim/zero_overlap.c: --overlap-grad-reduce for ZeRO-2 (Megatron's flag with
// --data-parallel-sharding-strategy optim_grads): each unit's gradient reduce-scatter runs in
// the background while the backward computes the units before it.
//
// Why. ZeRO-2 keeps no full gradient buffer: a unit's gradient (a layer, or the edge:
// embeddings, final LayerNorm, tied wte) lives in a transient buffer only while its backward
// runs, and is reduce-scattered into this rank's shard as soon as it is complete, in every
// micro-batch (the shard sums the averaged pieces). Without the flag that reduce-scatter blocks
// the hook, so the next layer's backward waits for the network. As in Megatron's data-parallel
// overlap, a finished part of the gradient is reduced while the backward goes on, and the step
// waits only for what is still in flight when the optimizer needs the shard.
//
// How. When a unit's backward ends, its reduce-scatter is started nonblocking
// (comm_ireduce_scatter: MPI_Ireduce_scatter_block, advanced by the comm_test that every hook
// event makes; NCCL: on the Comm's side stream, which first waits for the compute queued so
// far; --distributed-backend staged: blocking, at the same points) and queued. Its input must
// stay untouched until it completes, so the layers take their transient buffer from a ring of
// two (layer l's backward writes one while layer l+1's reduction reads the other; taking a
// buffer first waits for the reduction still reading it), the edge keeps a buffer of its own
// (waited for before the next micro-batch zeroes it), and each buffer has outputs of its own
// (and bf16 staging). Entries finish strictly in start order, so a unit's piece of micro-batch
// i is added to the shard before that of micro-batch i + 1, as the blocking path adds them; the
// collective (algorithm, input, output, type) is the one the blocking path runs: the shard, the
// norm and the update are bitwise the same. Unlike Megatron, where only the last micro-batch's
// reduction overlaps (the earlier ones accumulate locally, with no communication), every
// micro-batch's does here, since ZeRO-2 reduces every micro-batch. optim_zero_finish_grads
// drains the queue before the sequence-parallel and tied-embedding sums, the norm and the
// update. Cost: a second layer buffer, a separate edge buffer on a pipeline stage (PP > 1),
// and the outputs: max_per floats per ring buffer, edge_len / DP for the edge.
#include "zero.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdint.h>
#include <stdlib.h>

enum { RING = 2 };  // layer gradient buffers in turn

// Where a reduction's piece lands (and its bf16 staging), per transient buffer: one reduction
// at a time reads a ring buffer, and one per edge unit reads the edge buffer (each buffer is
// released before it is written again), so each gets an output of its own.
typedef struct {
    float *out;         // (max_per) ring / (edge_len / DP) edge, fp32
    void *lp, *lp_out;  // --grad-reduce-in-bf16: DP times that and that, bf16; else NULL
} ZeroOut;

struct ZeroOverlap {
    ZeroReduce *q;      // (cap) the reductions in flight: a FIFO of len entries from q[head]
    int cap, head, len;
    float *ring[RING];  // (layer_len) each: the layers' transient gradient buffers
    ZeroOut ring_out[RING], edge_out;
    int next;           // the ring buffer the next layer's backward gets
    ZeroSpan *spans;    // (max_spans) the reductions finished since the last take (trace)
    int n_spans, max_spans;
    size_t bytes;       // what this state allocated on the backend (memory report)
};

// The i-th oldest entry in flight.
static ZeroReduce *entry(ZeroOverlap *ov, int i) { return &ov->q[(ov->head + i) % ov->cap]; }

// Finishes the oldest entry; `exposed`: a hook waits for it (counted in hook_wait_s).
static void finish_oldest(Optimizer *o, int exposed) {
    OptimZero *z = o->zero;
    ZeroOverlap *ov = z->ov;
    ZeroReduce *r = entry(ov, 0);
    double t = core_now();
    comm_wait(o->dp, &r->req);  // (no-op when a test has seen it complete)
    double t1 = core_now();
    if (exposed) z->hook_wait_s += t1 - t;
    optim_zero_reduce_finish(o, r);
    if (ov->n_spans < ov->max_spans) ov->spans[ov->n_spans++] = (ZeroSpan){r->unit, r->t0, t1};
    ov->head = (ov->head + 1) % ov->cap;
    ov->len--;
}

void optim_zero_ov_start(Optimizer *o, int k, const float *base, const float *src) {
    ZeroOverlap *ov = o->zero->ov;
    if (ov->len == ov->cap) finish_oldest(o, 1);
    ZeroReduce *r = entry(ov, ov->len++);
    OptimZero *z = o->zero;
    size_t at = 0;  // the piece's place in the buffer's output: an edge unit's (DP*per) / DP
    const ZeroOut *dst = &ov->edge_out;
    for (int j = 0; j < RING; j++)
        if (base == ov->ring[j]) dst = &ov->ring_out[j];
    if (dst == &ov->edge_out) at = z->units[k].buf / (size_t)o->dp->size;
    r->unit = k;
    r->base = base;
    r->out = dst->out + at;
    r->lp = dst->lp ? (uint16_t *)dst->lp + at * (size_t)o->dp->size : NULL;
    r->lp_out = dst->lp_out ? (uint16_t *)dst->lp_out + at : NULL;
    optim_zero_reduce_start(o, r, src);
}

void optim_zero_ov_poll(Optimizer *o) {
    ZeroOverlap *ov = o->zero->ov;
    while (ov->len && comm_test(o->dp, &entry(ov, 0)->req)) finish_oldest(o, 0);
}

void optim_zero_ov_release(Optimizer *o, const float *base) {
    ZeroOverlap *ov = o->zero->ov;
    int last = -1;
    for (int i = 0; i < ov->len; i++)
        if (entry(ov, i)->base == base) last = i;
    for (int i = 0; i <= last; i++) finish_oldest(o, 1);
}

float *optim_zero_ov_layer_buffer(Optimizer *o) {
    ZeroOverlap *ov = o->zero->ov;
    float *b = ov->ring[ov->next];
    ov->next = (ov->next + 1) % RING;
    optim_zero_ov_release(o, b);
    return b;
}

void optim_zero_ov_drain(Optimizer *o) {
    ZeroOverlap *ov = o->zero ? o->zero->ov : NULL;
    while (ov && ov->len) finish_oldest(o, 0);
}

int optim_zero_take_spans(Optimizer *o, const ZeroSpan **spans) {
    ZeroOverlap *ov = o->zero ? o->zero->ov : NULL;
    if (!ov) return 0;
    int n = ov->n_spans;
    *spans = ov->spans;
    ov->n_spans = 0;
    return n;
}

// Backend memory for `bytes` bytes (one float more, as zero_build.c's), counted in ov->bytes.
static void *alloc(Backend *be, ZeroOverlap *ov, size_t bytes) {
    ov->bytes += bytes;
    return be->ops->alloc(be, bytes + sizeof(float));
}

void optim_zero_overlap_enable(Optimizer *o, int n_micro) {
    Backend *be = o->be;
    OptimZero *z = o->zero;
    if (!z || z->params || o->dp->size == 1 || z->ov) return;
    optim_zero_split_transient(o);  // the edge's and the layers' buffers apart
    ZeroOverlap *ov = core_calloc(1, sizeof *ov);
    size_t f = sizeof(float), per = z->max_per, dp = (size_t)o->dp->size;
    ov->ring[0] = z->layer_grads;  // (zero_build.c's, freed there)
    for (int j = 1; j < RING; j++) ov->ring[j] = alloc(be, ov, z->layer_len * f);
    ov->cap = z->n_edge + RING;  // every edge unit and the ring's layers may be in flight at once
    ov->q = core_calloc((size_t)ov->cap, sizeof *ov->q);
    ov->ring_out[0] = (ZeroOut){z->tmp, o->lp, o->lp_out};  // the blocking path's, unused now
    for (int j = 1; j <= RING; j++) {  // the other ring outputs, then the edge's
        ZeroOut *d = j < RING ? &ov->ring_out[j] : &ov->edge_out;
        size_t n = j < RING ? per : z->edge_len / dp;  // floats of output
        d->out = alloc(be, ov, n * f);
        if (o->reduce_bf16) {
            d->lp = alloc(be, ov, dp * n * 2);
            d->lp_out = alloc(be, ov, n * 2);
        }
    }
    ov->max_spans = (n_micro > 0 ? n_micro : 1) * z->n_units;
    ov->spans = core_calloc((size_t)ov->max_spans, sizeof *ov->spans);
    z->ov = ov;
}

void optim_zero_overlap_destroy(Backend *be, OptimZero *z) {
    ZeroOverlap *ov = z->ov;
    if (!ov) return;
    z->layer_grads = ov->ring[0];
    for (int j = 1; j < RING; j++) be->ops->free(be, ov->ring[j]);
    for (int j = 1; j <= RING; j++) {
        ZeroOut *d = j < RING ? &ov->ring_out[j] : &ov->edge_out;
        be->ops->free(be, d->out);
        be->ops->free(be, d->lp);
        be->ops->free(be, d->lp_out);
    }
    free(ov->q);
    free(ov->spans);
    free(ov);
    z->ov = NULL;
}

size_t optim_zero_overlap_bytes(const OptimZero *z) { return z->ov ? z->ov->bytes : 0; }
