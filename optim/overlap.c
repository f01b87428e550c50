// optim/overlap.c: --overlap-grad-reduce for DDP and ZeRO-1 (Megatron's flag): each bucket's
// data-parallel reduction starts as soon as the last micro-batch's backward has made all of
// its gradients final, and runs while the backward goes on through the earlier layers.
//
// The model hook (gpt.h) reports each layer's backward. During the step's n_micro-th backward
// pass (the last micro-batch of this model chunk), when layer l's backward ends: its
// sequence-parallel LayerNorm gradients are summed over TP (the same per-tensor all-reduces
// as gpt_sync_sequence_parallel_grads), then every bucket whose covered layers are all final
// is started. At each hook event the buckets in flight are polled (comm_test), since MPI
// advances nonblocking collectives only inside MPI calls. The edge unit (embeddings, final
// LayerNorm, tied wte: summed over the embedding group after the schedule) is final only at
// the end: its buckets start in optim_reduce_grads, which then waits for everything.
// Buckets start in the same order on every DP rank (the same layers finish in the same order).
#include "optimizer.h"
#include "core/check.h"

#include <stdlib.h>

struct OptimOverlap {
    GPT *m;
    Comm *tp_sp;            // sequence parallelism: the TP group, else NULL
    float *grads;           // (n_padded) the model's flat gradient buffer
    int n_micro, seen;      // backward passes per step, and seen so far this step
    int armed;              // in the last micro-batch's backward
    int *first, *last;      // (n_layers) the buckets layer l's tensors touch
    int *pending0;          // (n_buckets) covered units (layers, +1 for the edge / padding)
    int *sp_done;           // (n_layers) LayerNorm gradients summed over TP this step
    int *order;             // (n_buckets) buckets in start order
    int n_started;
};

// Covered units per bucket: the layers it overlaps, plus one (released at the end) when it
// holds anything else: edge tensors or padding.
static void count_pending(OptimOverlap *ov, const Optimizer *o) {
    int *edge = core_calloc((size_t)o->n_buckets, sizeof(int));
    optim_bucket_layers(o, ov->m, ov->first, ov->last, ov->pending0, edge);
    for (int k = 0; k < o->n_buckets; k++) ov->pending0[k] += edge[k];
    free(edge);
}

static void start(Optimizer *o, int k) {
    OptimOverlap *ov = o->ov;
    optim_bucket_start(o, ov->grads, k);
    ov->order[ov->n_started++] = k;
}

// Polls the buckets in flight (explicit progress). Never fails.
static void poll(Optimizer *o) {
    OptimOverlap *ov = o->ov;
    for (int i = 0; i < ov->n_started; i++) optim_bucket_poll(o, ov->grads, ov->order[i]);
}

// Layer l's LayerNorm gradients summed over TP (sequence parallelism), once per step.
static void sync_sp_layer(OptimOverlap *ov, int l) {
    const GPT *m = ov->m;
    if (!ov->tp_sp || ov->sp_done[l]) return;
    const ParamInfo *p = &m->params[m->block_param0 + m->block_nparams * l];
    for (int j = 0; j < m->block_nparams; j++)
        if (p[j].norm_param)
            comm_all_reduce(ov->tp_sp, m->grad_mem + p[j].offset, p[j].numel, COMM_F32, COMM_SUM);
    ov->sp_done[l] = 1;
}

// The model hook (gpt.h): counts backward passes, releases layers of the last one.
static void overlap_hook(void *ctx, GPTHookEvent ev, int unit) {
    Optimizer *o = ctx;
    OptimOverlap *ov = o->ov;
    if (ev == GPT_HOOK_BACKWARD_BEGIN && unit == GPT_UNIT_EDGE) ov->armed = ++ov->seen == ov->n_micro;
    if (ev == GPT_HOOK_BACKWARD_END && unit >= 0 && ov->armed) {
        sync_sp_layer(ov, unit);
        for (int k = ov->first[unit]; k >= 0 && k <= ov->last[unit]; k++)
            if (--o->buckets[k].pending == 0) start(o, k);
    }
    if (ov->n_started) poll(o);
}

void optim_overlap_enable(Optimizer *o, GPT *m, Comm *tp_sp) {
    if (o->zero) core_fatal("--overlap-grad-reduce: ZeRO-2 overlaps in its own hook (optim_zero_overlap_enable)");
    if (o->dp->size == 1 || o->n_buckets == 0) return;
    OptimOverlap *ov = core_calloc(1, sizeof *ov);
    ov->m = m;
    ov->tp_sp = m->sp ? tp_sp : NULL;
    ov->grads = m->grad_mem;
    size_t L = m->n_layers > 0 ? (size_t)m->n_layers : 1, K = (size_t)o->n_buckets;
    ov->first = core_calloc(L, sizeof(int));
    ov->last = core_calloc(L, sizeof(int));
    ov->sp_done = core_calloc(L, sizeof(int));
    ov->pending0 = core_calloc(K, sizeof(int));
    ov->order = core_calloc(K, sizeof(int));
    o->ov = ov;
    count_pending(ov, o);
    optim_overlap_begin_step(o, 1);
    m->hook = (GPTShardHook){overlap_hook, o};
}

void optim_overlap_begin_step(Optimizer *o, int n_micro) {
    OptimOverlap *ov = o->ov;
    if (!ov) return;
    ov->n_micro = n_micro;
    ov->seen = ov->armed = ov->n_started = 0;
    for (int l = 0; l < ov->m->n_layers; l++) ov->sp_done[l] = 0;
    for (int k = 0; k < o->n_buckets; k++) {
        OptBucket *b = &o->buckets[k];
        b->pending = ov->pending0[k];
        b->started = b->done = 0;
        b->t0 = b->t1 = 0.0;
    }
}

void optim_overlap_sync_sp_rest(Optimizer *o) {
    OptimOverlap *ov = o->ov;
    const GPT *m = ov->m;
    if (!ov->tp_sp) return;
    int b0 = m->block_param0, b1 = b0 + m->block_nparams * m->n_layers;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        if (i >= b0 && i < b1) continue;  // layers: below, each once
        if (p->norm_param) comm_all_reduce(ov->tp_sp, m->grad_mem + p->offset, p->numel, COMM_F32, COMM_SUM);
    }
    for (int l = 0; l < m->n_layers; l++) sync_sp_layer(ov, l);
}

void optim_overlap_finish(Optimizer *o, float *grads) {
    OptimOverlap *ov = o->ov;
    for (int k = 0; k < o->n_buckets; k++)
        if (!o->buckets[k].started) start(o, k);
    for (int i = 0; i < ov->n_started; i++) optim_bucket_finish(o, grads, ov->order[i]);
}

void optim_overlap_destroy(Optimizer *o) {
    OptimOverlap *ov = o->ov;
    if (!ov) return;
    free(ov->first);
    free(ov->last);
    free(ov->sp_done);
    free(ov->pending0);
    free(ov->order);
    free(ov);
    o->ov = NULL;
}
