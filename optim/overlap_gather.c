// optim/overlap_gather.c: --overlap-param-gather for ZeRO-1 (Megatron's flag with the
// distributed optimizer): after AdamW has updated this rank's piece of each bucket, the
// bucket's all-gather of the updated parameters is started (nonblocking) instead of run at
// once, and the next forward waits for a bucket only right before the first unit that reads
// it (the model hook, gpt.h: FORWARD of layer l, or of the edge unit for buckets holding
// embeddings / final LayerNorm / padding). Every hook event polls the gathers in flight
// (MPI advances nonblocking collectives only inside MPI calls). When a gather completes,
// the bucket's bf16/fp16 weight copies are refreshed from the gathered fp32 parameters.
// An all-gather is a copy: the parameters are bitwise those of the blocking path.
//
// The hook is chained: the one installed before (--overlap-grad-reduce) is called after.
// Anything that reads the parameters outside a forward (checkpoint save, the end of
// training) calls optim_gather_settle first.
#include "optimizer.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdlib.h>

struct OptimGather {
    GPT *m;
    GPTShardHook prev;      // the hook installed before (--overlap-grad-reduce), or fn NULL
    float *params;          // (n_padded) the model's flat fp32 parameters
    void *copy;             // (n_padded, be->act) the weight copies, or NULL (fp32)
    int *first, *last;      // (n_layers) the buckets layer l's tensors touch (-1: none)
    int *edge;              // (n_buckets) the bucket holds tensors outside the layers
    CommRequest *req;       // (n_buckets) the gathers in flight
    int *state;             // (n_buckets) 0 idle, 1 in flight, 2 complete (span not taken)
    double *t0, *t1;        // (n_buckets) core_now() at the start and when seen complete
    int n_flight;
    double exposed_s;       // time spent waiting in the hook since the last take
};

// Bucket k's gather is complete: its weight copies refreshed from the fp32 parameters.
static void complete(Optimizer *o, int k) {
    OptimGather *g = o->gather;
    const OptBucket *b = &o->buckets[k];
    Backend *be = o->be;
    g->state[k] = 2;
    g->t1[k] = core_now();
    g->n_flight--;
    if (g->copy)
        be->ops->cast(be, (char *)g->copy + b->start * backend_dtype_size(be->act), be->act,
                      g->params + b->start, BACKEND_F32, b->len);
}

// Waits for bucket k (no-op unless in flight); the time counts as exposed.
static void wait_bucket(Optimizer *o, int k) {
    OptimGather *g = o->gather;
    if (g->state[k] != 1) return;
    double t0 = core_now();
    comm_wait(o->dp, &g->req[k]);
    complete(o, k);
    g->exposed_s += core_now() - t0;
}

// Polls every gather in flight once (explicit progress). Never fails.
static void poll(Optimizer *o) {
    OptimGather *g = o->gather;
    for (int k = 0; k < o->n_buckets && g->n_flight > 0; k++)
        if (g->state[k] == 1 && comm_test(o->dp, &g->req[k])) complete(o, k);
}

// The model hook: a unit's forward waits for its buckets; every event polls the rest.
static void gather_hook(void *ctx, GPTHookEvent ev, int unit) {
    Optimizer *o = ctx;
    OptimGather *g = o->gather;
    if (g->n_flight > 0) {
        if (ev == GPT_HOOK_FORWARD && unit >= 0)
            for (int k = g->first[unit]; k >= 0 && k <= g->last[unit]; k++) wait_bucket(o, k);
        if (ev == GPT_HOOK_FORWARD && unit == GPT_UNIT_EDGE)
            for (int k = 0; k < o->n_buckets; k++)
                if (g->edge[k]) wait_bucket(o, k);
        poll(o);
    }
    if (g->prev.fn) g->prev.fn(g->prev.ctx, ev, unit);
}

void optim_gather_enable(Optimizer *o, GPT *m) {
    if (o->dp->size == 1 || o->n_buckets == 0) return;  // nothing is gathered
    if (o->zero || !o->zero1) core_fatal("--overlap-param-gather: ZeRO-1 only here (ZeRO-3 prefetches)");
    OptimGather *g = core_calloc(1, sizeof *g);
    size_t L = m->n_layers > 0 ? (size_t)m->n_layers : 1, K = (size_t)o->n_buckets;
    g->m = m;
    g->prev = m->hook;
    g->params = m->param_mem;
    g->copy = m->be->act != BACKEND_F32 ? m->param_copy : NULL;
    g->first = core_calloc(L, sizeof(int));
    g->last = core_calloc(L, sizeof(int));
    g->edge = core_calloc(K, sizeof(int));
    g->req = core_calloc(K, sizeof(CommRequest));
    g->state = core_calloc(K, sizeof(int));
    g->t0 = core_calloc(K, sizeof(double));
    g->t1 = core_calloc(K, sizeof(double));
    o->gather = g;
    optim_bucket_layers(o, g->m, g->first, g->last, NULL, g->edge);
    m->hook = (GPTShardHook){gather_hook, o};
}

void optim_gather_start(Optimizer *o) {
    OptimGather *g = o->gather;
    for (int k = 0; k < o->n_buckets; k++) {
        OptBucket *b = &o->buckets[k];
        g->state[k] = 1;
        g->t0[k] = core_now();
        g->n_flight++;
        comm_iall_gather(o->dp, o->param_shard + b->at, g->params + b->start, b->per, COMM_F32, &g->req[k]);
    }
}

void optim_gather_settle(Optimizer *o) {
    OptimGather *g = o ? o->gather : NULL;
    if (!g) return;
    double e = g->exposed_s;
    for (int k = 0; k < o->n_buckets; k++) wait_bucket(o, k);
    g->exposed_s = e;  // not a forward's wait
}

double optim_gather_take_exposed(Optimizer *o) {
    OptimGather *g = o->gather;
    if (!g) return 0.0;
    double e = g->exposed_s;
    g->exposed_s = 0.0;
    return e;
}

int optim_gather_take_span(Optimizer *o, int k, double *t0, double *t1) {
    OptimGather *g = o->gather;
    if (!g || g->state[k] != 2) return 0;
    g->state[k] = 0;
    *t0 = g->t0[k];
    *t1 = g->t1[k];
    return 1;
}

void optim_gather_destroy(Optimizer *o) {
    OptimGather *g = o->gather;
    if (!g) return;
    optim_gather_settle(o);
    free(g->first);
    free(g->last);
    free(g->edge);
    free(g->req);
    free(g->state);
    free(g->t0);
    free(g->t1);
    free(g);
    o->gather = NULL;
}
