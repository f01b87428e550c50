// distributed/dist_sync_hook.c: the engine's one model hook (gpt.h) and what it drives.
// Stages 0-1: --overlap-grad-reduce starts each bucket's reduction when the last
// micro-batch's backward has made its gradients final; --overlap-param-gather makes a unit's
// forward wait for the gathers of the buckets it reads; every event polls what is in flight.
// Stages 2-3: dist_sync_units.c's part (gathers, per-unit reduce-scatters). Also the
// sequence-parallel LayerNorm and tied-embedding gradient sums, for every stage.
#include "dist_sync_parts.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdlib.h>

void dist_sync_layer_range(const GPT *m, int l, int r, size_t *lo, size_t *hi) {
    const ParamInfo *p = &m->params[m->block_param[l]];
    *lo = (size_t)-1;
    *hi = 0;
    for (int j = 0; j < m->block_param[l + 1] - m->block_param[l]; j++) {
        if ((p[j].offset >= m->expert_offset) != r) continue;
        if (p[j].offset < *lo) *lo = p[j].offset;
        if (p[j].offset + p[j].numel > *hi) *hi = p[j].offset + p[j].numel;
    }
}

// Which buckets each layer touches (first, last), and per bucket the layers it covers plus
// one when it holds anything else (edge tensors or padding: released at the end).
static void hook(void *ctx, GPTHookEvent ev, int unit);

void dist_sync_hook_init(DistSync *s) {
    GPT *m = s->m;
    size_t L = m->n_layers > 0 ? (size_t)m->n_layers : 1, K = (size_t)s->n_buckets + 1;
    s->first = core_calloc(2 * L, sizeof(int));
    s->last = core_calloc(2 * L, sizeof(int));
    s->sp_done = core_calloc(L, sizeof(int));
    s->pending0 = core_calloc(K, sizeof(int));
    s->edge = core_calloc(K, sizeof(int));
    s->order = core_calloc(K, sizeof(int));
    for (size_t l = 0; l < 2 * L; l++) s->first[l] = s->last[l] = -1;
    for (int k = 0; k < s->n_buckets; k++) {
        const DistSyncBucket *b = &s->buckets[k];
        size_t covered = 0;
        int r = b->start >= m->expert_offset;  // the bucket's region
        for (int l = 0; l < m->n_layers; l++) {
            size_t lo, hi, i = (size_t)r * L + (size_t)l;
            dist_sync_layer_range(m, l, r, &lo, &hi);
            size_t a = lo > b->start ? lo : b->start, e = hi < b->start + b->len ? hi : b->start + b->len;
            if (a >= e) continue;
            s->pending0[k]++;
            covered += e - a;
            if (s->first[i] < 0) s->first[i] = k;
            s->last[i] = k;
        }
        s->edge[k] = covered < b->len;
        s->pending0[k] += s->edge[k];
    }
    if (s->stage >= 2) m->hook = (GPTShardHook){hook, s};  // gathers and reduce-scatters per unit
}

// The gradient of parameter i as this rank holds it when the sums run: the flat buffer's
// (stages 0-1, before the DP reduction), or ZeRO-2/3 its part inside unit k's owned piece
// (after it: *len floats, 0 when none).
static float *held_grad(DistSync *s, int i, int k, size_t *len) {
    const ParamInfo *p = &s->m->params[i];
    if (s->stage < 2) {
        *len = p->numel;
        return s->m->grad_mem + p->offset;
    }
    const DistSyncBucket *u = &s->buckets[k];
    size_t lo = u->start + (size_t)u->comm->rank * u->per, hi = lo + u->own;
    size_t b = p->offset > lo ? p->offset : lo, e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    *len = e > b ? e - b : 0;
    return s->grad_shard + u->at + (b - lo);
}

// Sums over tp_sp the LayerNorm gradients of layer `layer` (once per step), or with -1 those
// of every tensor not summed yet this step. Collective over tp_sp; no-op without it.
void dist_sync_sum_norm_grads(DistSync *s, int layer) {
    const GPT *m = s->m;
    if (!s->tp_sp) return;
    int n_units = s->stage >= 2 ? s->n_buckets : 1, nl = m->n_layers;
    for (int k = 0; k < n_units; k++)  // (ZeRO-2/3: the same pieces on every TP rank)
        for (int i = 0, j = 0; i < m->n_params; i++) {
            while (j < nl && i >= m->block_param[j + 1]) j++;  // the layer holding i, if any
            int l = i >= m->block_param[0] && i < m->block_param[nl] ? j : -1;
            if (!m->params[i].sp_sum || (layer >= 0 && l != layer) || (l >= 0 && s->sp_done[l])) continue;
            size_t len;
            float *g = held_grad(s, i, k, &len);
            if (len) comm_all_reduce(s->tp_sp, g, len, COMM_F32, COMM_SUM);
        }
    if (layer >= 0) s->sp_done[layer] = 1;
}

void dist_sync_model_grads(DistSync *s, Comm *embedding) {
    GPT *m = s->m;
    if (s->stage >= 2) dist_sync_finish_grad_sync(s);  // the shard complete first
    dist_sync_sum_norm_grads(s, -1);
    int wte = gpt_param_index(m, "wte");
    if (!embedding || embedding->size == 1 || wte < 0 || m->cfg.untie_embeddings) return;
    size_t len;  // its two copies, first and last stage (ZeRO-2/3: sliced alike on both)
    float *g = held_grad(s, wte, s->wte_unit, &len);
    if (len) comm_all_reduce(embedding, g, len, COMM_F32, COMM_SUM);
}

// Bucket b's gather is complete: its weight copies refreshed from the fp32 parameters.
static void gather_done(DistSync *s, DistSyncBucket *b) {
    Backend *be = s->be;
    GPT *m = s->m;
    b->gather = 2;
    b->g1 = core_now();
    s->n_flight--;
    if (be->act != BACKEND_F32)
        be->ops->cast(be, (char *)m->param_copy + b->start * backend_dtype_size(be->act), be->act,
                      m->param_mem + b->start, BACKEND_F32, b->len);
}

// Waits for bucket k's gather (no-op unless in flight); the time counts as exposed.
static void wait_gather(DistSync *s, int k) {
    DistSyncBucket *b = &s->buckets[k];
    if (b->gather != 1) return;
    double t0 = core_now();
    comm_wait(b->comm, &b->greq);
    gather_done(s, b);
    s->exposed_s += core_now() - t0;
}

void dist_sync_finish_param_sync(DistSync *s) {
    if (!s || !s->n_flight) return;
    double e = s->exposed_s;
    for (int k = 0; k < s->n_buckets; k++) wait_gather(s, k);
    s->exposed_s = e;  // not a forward's wait
}

// Whether bucket k is among entry i's of first/last.
static int in_range(const DistSync *s, int i, int k) {
    return s->first[i] >= 0 && k >= s->first[i] && k <= s->last[i];
}

// The model hook: a unit's forward waits for its buckets' gathers; the last micro-batch's
// backward of layer l sums its LayerNorm gradients and starts every bucket whose covered
// layers are all final; every event polls what is in flight.
static void hook(void *ctx, GPTHookEvent ev, int unit) {
    DistSync *s = ctx;
    if (s->stage >= 2) {
        dist_sync_unit_hook(s, ev, unit);
        return;
    }
    int L = s->m->n_layers > 0 ? s->m->n_layers : 1;  // layer l's buckets: [first, last] at l, L + l
    if (s->n_flight > 0) {
        for (int k = 0; ev == GPT_HOOK_FORWARD && k < s->n_buckets; k++)
            if (unit >= 0 ? in_range(s, unit, k) || in_range(s, L + unit, k) : s->edge[k])
                wait_gather(s, k);
        for (int k = 0; k < s->n_buckets && s->n_flight > 0; k++)
            if (s->buckets[k].gather == 1 && comm_test(s->buckets[k].comm, &s->buckets[k].greq))
                gather_done(s, &s->buckets[k]);
    }
    if (!s->overlap_grad) return;
    if (ev == GPT_HOOK_BACKWARD_BEGIN && unit == GPT_UNIT_EDGE) s->armed = ++s->seen == s->n_micro;
    if (ev == GPT_HOOK_BACKWARD_END && unit >= 0 && s->armed) {
        dist_sync_sum_norm_grads(s, unit);
        for (int r = 0; r < 2; r++)
            for (int k = s->first[r * L + unit]; k >= 0 && k <= s->last[r * L + unit]; k++)
                if (--s->buckets[k].pending == 0) dist_sync_start_grad_sync(s, k);
    }
    if (s->n_started) dist_sync_poll_grads(s);
}

void dist_sync_enable_overlap(DistSync *s, int grad, int param, int n_micro) {
    if (s->stage >= 2) {
        if (grad && s->stage == 2 && s->comm->size > 1) dist_sync_queue_enable(s, n_micro);
        s->prefetch = param && s->stage == 3;
        return;
    }
    if ((s->comm->size == 1 && !s->ecomm) || s->n_buckets == 0) return;
    if (param && !s->sharded) core_fatal("--overlap-param-gather: ZeRO-1 only here (ZeRO-3 prefetches)");
    s->overlap_grad = grad;
    s->overlap_param = param;
    if (grad || param) s->m->hook = (GPTShardHook){hook, s};
}

void dist_sync_begin_step(DistSync *s, int n_micro) {
    if (s->stage >= 2) {
        s->n_prefetched = 0;
        s->hook_wait_s = 0.0;
        s->be->ops->zero(s->be, s->grad_shard, s->shard_len * sizeof(float));
    }
    s->n_micro = n_micro;
    s->seen = s->armed = s->n_started = 0;
    for (int l = 0; l < s->m->n_layers; l++) s->sp_done[l] = 0;
    for (int k = 0; k < s->n_buckets; k++) {
        DistSyncBucket *b = &s->buckets[k];
        b->pending = s->pending0[k];
        b->started = b->done = 0;
        b->t0 = b->t1 = 0.0;
    }
}
