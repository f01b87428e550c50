// distributed/dist_sync_units.c: ZeRO-2 and ZeRO-3 (stages 2-3) in the engine: the units,
// their transient gradient buffers, the hook's part (gather a unit's weights, reduce-scatter
// its gradients), the sums on the shard and the parameter sync.
//
// Units. The stage's parameters are cut into units: one per local layer (its tensors,
// contiguous in the flat buffer) and one per remaining tensor (wte, wpe, the final LayerNorm:
// the "edge"), each sharded on its own (dist_geometry.h: dist_unit_piece). The shard stores
// keep `per` floats per unit, one unit after the other. The slicing depends only on a unit's
// length, so the tied wte is sliced alike on the first and the last stage.
//
// ZeRO-2, per micro-batch: layer l's gradient views point into one zeroed transient buffer
// (DP*per floats) for its backward; after it, the buffer is reduce-scattered (averaged) and
// this rank's piece added to the gradient shard. The edge units keep their own transient
// buffer for the whole micro-batch backward and are reduce-scattered at its end. A stage
// that is not both first and last never holds edge and layer gradients at once: there the two
// transient buffers are one. After the step's backward the SP LayerNorm and tied wte sums run
// on the shard (dist_sync_model_grads); after AdamW every unit is all-gathered back.
//
// ZeRO-3, in addition: the flat parameter buffer is freed; this rank keeps its parts as fp32
// masters. Before a layer is read it is all-gathered (be->act: 16-bit weights with --bf16)
// into one of two rotating buffers (layer l into l % 2); --overlap-param-gather prefetches the
// layer the model asks for next (gpt.c's order) into the other buffer. The edge units are
// gathered into their own buffer once per step, at their first use.
#include "dist_sync_parts.h"
#include "dist_geometry.h"  // defines: dist_unit_piece
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdlib.h>
#include <string.h>

// The view of edge tensor `name` in w, or NULL if it is not an edge tensor.
static void **edge_view(GPTWeights *w, const char *name) {
    if (!strcmp(name, "wte")) return &w->wte;
    if (!strcmp(name, "output_layer")) return &w->out;
    if (!strcmp(name, "wpe")) return &w->wpe;
    if (!strcmp(name, "final_ln.weight")) return &w->lnfw;
    if (!strcmp(name, "final_ln.bias")) return &w->lnfb;
    return NULL;
}

// The units of stage m (dist_geometry.h: dist_units_layout, the layout megac plan counts):
// edge tensors first (in table order), then one per local layer (its tensors outside the
// expert region), then with an expert region one per local layer for its expert tensors
// (sharded over ecomm, averaged x EDP / DP; empty in a dense layer).
static void build_units(DistSync *s) {
    const GPT *m = s->m;
    size_t cap = (size_t)m->n_params + (size_t)m->n_layers + 1;
    s->buckets = core_calloc(cap, sizeof(DistSyncBucket));
    DistUnit *u = core_calloc(cap, sizeof *u);
    DistUnitTotals t = dist_units_layout(m->params, m->n_params, m->block_param, m->n_layers,
                                         m->expert_offset, m->n_alloc, s->comm->size, s->comm->rank,
                                         s->ecomm ? s->ecomm->size : 0, s->ecomm ? s->ecomm->rank : 0, u);
    s->wte_unit = -1;
    for (int k = 0; k < t.n_units; k++) {
        DistSyncBucket *b = &s->buckets[k];
        b->start = u[k].start, b->len = u[k].len, b->per = u[k].per, b->own = u[k].own;
        b->at = u[k].at, b->buf = u[k].buf, b->out_at = u[k].out_at;
        b->comm = u[k].expert ? s->ecomm : s->comm;
        b->scale = u[k].expert ? (float)s->ecomm->size / (float)s->comm->size : 1.0f;
        if (u[k].param >= 0 && !strcmp(m->params[u[k].param].name, "wte")) s->wte_unit = k;
    }
    free(u);
    s->n_buckets = t.n_units;
    s->n_edge = t.n_edge;
    s->bucket = t.bucket;
    s->layer_len = t.layer_len;
    s->edge_len = t.edge_len;
    s->shard_len = t.shard_len;
}

// Layer l's expert unit (NULL without an expert region).
static const DistSyncBucket *expert_unit(const DistSync *s, int l) {
    return s->ecomm ? &s->buckets[s->n_edge + s->m->n_layers + l] : NULL;
}

// Points layer l's views of `which` (weights or gradients) into buf, laid out as the layer's
// units: its dense part at 0, its expert part at the expert unit's buf; elements of esize bytes.
static void point_layer(DistSync *s, GPTBlockW *which, int l, void *buf, size_t esize) {
    const DistSyncBucket *d = &s->buckets[s->n_edge + l], *e = expert_unit(s, l);
    gpt_point_layer_views(s->m, which, l, buf, d->start,
                          e ? (char *)buf + e->buf * esize : buf, e ? e->start : d->start, esize);
}

// Floats of layer l's transient gradients (its dense and expert parts).
static size_t layer_extent(const DistSync *s, int l) {
    const DistSyncBucket *d = &s->buckets[s->n_edge + l], *e = expert_unit(s, l);
    return e ? e->buf + (size_t)e->comm->size * e->per : (size_t)d->comm->size * d->per;
}

// The edge tensors' gradient views into edge_grads, for good (until it is reallocated).
static void point_edge_grads(DistSync *s) {
    GPT *m = s->m;
    for (int k = 0; k < s->n_edge; k++)
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].offset == s->buckets[k].start && edge_view(&m->g, m->params[i].name))
                *edge_view(&m->g, m->params[i].name) = s->edge_grads + s->buckets[k].buf;
}

// ZeRO-3: keeps this rank's parts of the initialised flat parameters as masters, frees the
// flat buffer and points the edge views into the edge gather buffer.
static void shard_params(DistSync *s) {
    Backend *be = s->be;
    GPT *m = s->m;
    s->master = be->ops->alloc(be, s->shard_len * sizeof(float));
    for (int k = 0; k < s->n_buckets; k++) {
        const DistSyncBucket *u = &s->buckets[k];
        be->ops->copy(be, s->master + u->at, m->param_mem + u->start + (size_t)u->comm->rank * u->per,
                      u->own * sizeof(float), BACKEND_D2D);
    }
    s->edge_params = be->ops->alloc(be, (s->edge_len ? s->edge_len : 1) * s->esize);
    for (int j = 0; j < 2; j++)
        s->layer_params[j] = be->ops->alloc(be, (s->layer_len ? s->layer_len : 1) * s->esize);
    gpt_release_flat_buffers(m, 0, 1);
    for (int k = 0; k < s->n_edge; k++)
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].offset == s->buckets[k].start && edge_view(&m->w, m->params[i].name))
                *edge_view(&m->w, m->params[i].name) = (char *)s->edge_params + s->buckets[k].buf * s->esize;
    for (int l = 0; l < m->n_layers; l++)  // until their first gather
        point_layer(s, &m->w.blocks[l], l, s->layer_params[l % 2], s->esize);
    s->edge_stale = 1;
}

void dist_sync_units_init(DistSync *s) {
    Backend *be = s->be;
    GPT *m = s->m;
    size_t f = sizeof(float);
    s->n_padded = m->n_alloc;
    s->esize = backend_dtype_size(be->act);
    s->wtype = be->act == BACKEND_BF16 ? COMM_BF16 : be->act == BACKEND_F16 ? COMM_F16 : COMM_F32;
    build_units(s);
    s->grad_shard = be->ops->alloc(be, (s->shard_len + 1) * f);
    s->shared = !(m->first && m->last);  // edge and layer gradients never live at once
    size_t both = s->edge_len > s->layer_len ? s->edge_len : s->layer_len;
    s->edge_grads = be->ops->alloc(be, ((s->shared ? both : s->edge_len) + 1) * f);
    s->layer_grads = s->shared ? s->edge_grads : be->ops->alloc(be, (s->layer_len + 1) * f);
    s->tmp = be->ops->alloc(be, (s->bucket + 1) * f);
    gpt_release_flat_buffers(m, 1, 0);
    point_edge_grads(s);
    if (s->stage == 3) shard_params(s);
    s->pending = s->prefetched = -1;
}

// Gives the edge and the layers separate transient buffers where they share one, so that
// both may be read by reductions in flight (--overlap-grad-reduce). Set-up only.
void dist_sync_split_transient(DistSync *s) {
    Backend *be = s->be;
    if (!s->shared) return;
    be->ops->free(be, s->edge_grads);
    s->edge_grads = be->ops->alloc(be, (s->edge_len + 1) * sizeof(float));
    s->layer_grads = be->ops->alloc(be, (s->layer_len + 1) * sizeof(float));
    s->shared = 0;
    point_edge_grads(s);
}

void dist_sync_units_free(DistSync *s) {
    Backend *be = s->be;
    dist_sync_queue_free(s);  // (points layer_grads at the buffer it came with)
    be->ops->free(be, s->edge_grads);
    if (!s->shared) be->ops->free(be, s->layer_grads);
    be->ops->free(be, s->tmp);
    dist_sync_offload_free(s);  // (the master shard, where it lives)
    be->ops->free(be, s->edge_params);
    be->ops->free(be, s->layer_params[0]);
    be->ops->free(be, s->layer_params[1]);
}

void dist_sync_reduce_start(DistSync *s, DistSyncReduce *r, const float *src) {
    const DistSyncBucket *u = &s->buckets[r->unit];
    int bf = s->reduce_bf16;  // rounded before, widened after (as ZeRO-1)
    const void *in = bf ? r->lp : (const void *)src;
    void *out = bf ? r->lp_out : (void *)r->out;
    CommDtype t = bf ? COMM_BF16 : COMM_F32;
    r->t0 = core_now();
    r->req = (CommRequest){0};
    if (bf) s->be->ops->cast(s->be, r->lp, BACKEND_BF16, src, BACKEND_F32, (size_t)u->comm->size * u->per);
    if (s->q) comm_ireduce_scatter(u->comm, in, out, u->per, t, COMM_AVG, &r->req);
    else comm_reduce_scatter(u->comm, in, out, u->per, t, COMM_AVG);
}

void dist_sync_reduce_finish(DistSync *s, DistSyncReduce *r) {
    Backend *be = s->be;
    const DistSyncBucket *u = &s->buckets[r->unit];
    comm_wait(u->comm, &r->req);
    if (s->reduce_bf16) be->ops->cast(be, r->out, BACKEND_F32, r->lp_out, BACKEND_BF16, u->per);
    if (u->scale != 1.0f) be->ops->scale_f32(be, r->out, u->scale, u->per);
    be->ops->add_f32(be, s->grad_shard + u->at, s->grad_shard + u->at, r->out, u->per);
}

// The average over the group of unit k's full gradient src (DP*per floats in transient buffer
// base): queued and started nonblocking with --overlap-grad-reduce, else done here.
static void reduce_unit(DistSync *s, int k, const float *base, const float *src) {
    if (s->q) {
        dist_sync_queue_start(s, k, base, src);
        return;
    }
    dist_sync_unit_settle(s);  // a prefetch in flight may still read tmp
    DistSyncReduce r = {.unit = k, .base = base, .out = s->tmp, .lp = s->lp, .lp_out = s->lp_out};
    double t0 = core_now();
    dist_sync_reduce_start(s, &r, src);
    dist_sync_reduce_finish(s, &r);
    s->hook_wait_s += core_now() - t0;
}

// ZeRO-3: unit u's weights from every rank's master part into dst (DP*per, be->act); the
// part sent is the fp32 master itself (--offload-params: its copy on the device), or cast to
// be->act in tmp; nonblocking into *req.
static void gather_unit(DistSync *s, const DistSyncBucket *u, void *dst, CommRequest *req) {
    const float *src = dist_sync_unit_source(s, u);
    const void *in = src;
    if (s->wtype != COMM_F32) {  // (a layer's expert part staged after its dense part's)
        int expert = u >= s->buckets + s->n_edge + s->m->n_layers;
        void *stage = (char *)s->tmp + (expert ? u->out_at : 0) * s->esize;
        s->be->ops->cast(s->be, stage, s->be->act, src, BACKEND_F32, u->per);
        in = stage;
    }
    if (req) comm_iall_gather(u->comm, in, dst, u->per, s->wtype, req);
    else comm_all_gather(u->comm, in, dst, u->per, s->wtype);
}

// The first weights layer l's backward asks for: its chunk's first layer (the recomputed
// forward) when l ends a recomputed chunk, else l (gpt_backward's order).
static int backward_first(const GPT *m, int l) {
    int first, last;
    return gpt_layer_recomputed(m, l, &first, &last) && l == last ? first : l;
}

// The layer whose weights the model asks for next after event ev of `unit` (gpt.c's order of
// hook calls), when known and its buffer is not the one in use; else -1.
static int next_gather(const DistSync *s, GPTHookEvent ev, int unit) {
    const GPT *m = s->m;
    int first, last, next = -1;
    if (unit == GPT_UNIT_EDGE) {  // no layer buffer in use
        if (m->n_layers && ev == GPT_HOOK_FORWARD) next = 0;
        if (m->n_layers && ev == GPT_HOOK_BACKWARD_BEGIN) next = backward_first(m, m->n_layers - 1);
        return next;
    }
    if (ev == GPT_HOOK_FORWARD && !s->in_backward) {
        next = unit + 1 < m->n_layers ? unit + 1 : -1;
    } else if (ev == GPT_HOOK_FORWARD) {  // recomputed forward: the chunk's next layer; after its
        gpt_layer_recomputed(m, unit, &first, &last);  // last, that layer's backward (in use)
        next = unit < last ? unit + 1 : -1;
    } else if (ev == GPT_HOOK_BACKWARD_BEGIN && unit > 0) {
        next = backward_first(m, unit - 1);
    }
    return next >= 0 && next % 2 != unit % 2 ? next : -1;
}

// ZeRO-3: layer l's weights (its units) gathered into buf; nonblocking into s->req (and
// s->ereq for the expert part) with `async`.
static void gather_layer(DistSync *s, int l, void *buf, int async) {
    const DistSyncBucket *e = expert_unit(s, l);
    gather_unit(s, &s->buckets[s->n_edge + l], buf, async ? &s->req : NULL);
    if (e && e->len) gather_unit(s, e, (char *)buf + e->buf * s->esize, async ? &s->ereq : NULL);
}

void dist_sync_unit_settle(DistSync *s) {
    if (s->pending < 0) return;
    comm_wait(s->buckets[s->n_edge + s->pending].comm, &s->req);
    if (s->ecomm) comm_wait(s->ecomm, &s->ereq);
    s->prefetched = s->pending;  // its buffer holds it until that buffer is gathered into again
    s->pending = -1;
}

// --overlap-param-gather: starts layer l's gather into its buffer (l % 2), nonblocking.
static void prefetch(DistSync *s, int l) {
    if (!s->prefetch || l < 0) return;
    dist_sync_unit_settle(s);
    gather_layer(s, l, s->layer_params[l % 2], 1);
    s->pending = l;
}

// The edge's gradients of this micro-batch, if not reduced yet.
static void reduce_edge(DistSync *s) {
    if (!s->edge_pending) return;
    for (int k = 0; k < s->n_edge; k++) reduce_unit(s, k, s->edge_grads, s->edge_grads + s->buckets[k].buf);
    s->edge_pending = 0;
}

// The edge units: weights gathered once per step (ZeRO-3), gradients per micro-batch.
static void edge_event(DistSync *s, GPTHookEvent ev) {
    Backend *be = s->be;
    if (s->stage == 3 && s->edge_stale && ev != GPT_HOOK_BACKWARD_END) {
        for (int k = 0; k < s->n_edge; k++)
            gather_unit(s, &s->buckets[k], (char *)s->edge_params + s->buckets[k].buf * s->esize, NULL);
        s->edge_stale = 0;
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN && s->edge_len) {
        if (s->q) dist_sync_queue_release(s, s->edge_grads);  // the last micro-batch's reductions
        be->ops->zero(be, s->edge_grads, s->edge_len * sizeof(float));
        s->edge_pending = 1;
    }
    if (ev == GPT_HOOK_BACKWARD_END) reduce_edge(s);
}

void dist_sync_unit_hook(DistSync *s, GPTHookEvent ev, int unit) {
    GPT *m = s->m;
    int z3 = s->stage == 3;
    if (s->q) dist_sync_queue_poll(s);  // --overlap-grad-reduce: progress, finish what completed
    if (unit == GPT_UNIT_EDGE) {
        dist_sync_unit_settle(s);
        s->in_backward = ev != GPT_HOOK_FORWARD;
        edge_event(s, ev);
        if (z3) prefetch(s, next_gather(s, ev, unit));  // the first layer's, early
        return;
    }
    if (z3 && ev != GPT_HOOK_BACKWARD_END) {  // forward or backward: gather the weights
        void *buf = s->layer_params[unit % 2];  // (layer l in buffer l % 2)
        dist_sync_unit_settle(s);
        if (s->prefetched != unit) gather_layer(s, unit, buf, 0);
        else s->n_prefetched++;
        if (s->prefetched == unit || s->prefetched % 2 == unit % 2) s->prefetched = -1;  // used, or overwritten
        point_layer(s, &m->w.blocks[unit], unit, buf, s->esize);
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN) {  // gradients into the zeroed transient buffer
        if (m->last && !m->first) reduce_edge(s);  // last stage: the edge's are complete
        if (s->q) s->layer_grads = dist_sync_queue_layer_buffer(s);  // the ring's next, released
        s->be->ops->zero(s->be, s->layer_grads, layer_extent(s, unit) * sizeof(float));
        point_layer(s, &m->g.blocks[unit], unit, s->layer_grads, sizeof(float));
    } else if (ev == GPT_HOOK_BACKWARD_END) {
        const DistSyncBucket *e = expert_unit(s, unit);
        reduce_unit(s, s->n_edge + unit, s->layer_grads, s->layer_grads);
        if (e && e->len) reduce_unit(s, (int)(e - s->buckets), s->layer_grads, s->layer_grads + e->buf);
        if (s->shared && m->first && unit == 0 && s->edge_len)  // first stage: the embedding's
            s->be->ops->zero(s->be, s->edge_grads, s->edge_len * sizeof(float));  // come next
    }
    if (z3 && ev != GPT_HOOK_BACKWARD_END)  // the next layer's while this one computes
        prefetch(s, next_gather(s, ev, unit));
}

void dist_sync_units_param_sync(DistSync *s) {
    Backend *be = s->be;
    GPT *m = s->m;
    for (int k = 0; k < s->n_buckets && s->stage == 2; k++) {
        // every rank's updated part back into the flat parameters, through the (now free)
        // transient gradient buffers
        const DistSyncBucket *u = &s->buckets[k];
        float *out = k < s->n_edge ? s->edge_grads + u->buf : s->layer_grads;
        if (!u->len) continue;
        be->ops->copy(be, s->tmp, dist_sync_unit_params(s, k), u->own * sizeof(float), BACKEND_D2D);
        comm_all_gather(u->comm, s->tmp, out, u->per, COMM_F32);
        be->ops->copy(be, m->param_mem + u->start, out, u->len * sizeof(float), BACKEND_D2D);
    }
    s->edge_stale = 1;
}

// --offload-params (DeepSpeed's offload_param). The master shard lives in pinned host memory;
// the device keeps only a staging buffer for the parts of one layer (its dense and expert
// units): a gather copies its unit's part up (H2D on the backend's copy stream, copy_async,
// after the work queued so far; the collective that reads it waits for it on the compute
// stream, the host never does), so --overlap-param-gather's prefetch copies the next layer's
// part up with it. The host AdamW joins the copies (copy_join(be, 1)) before it updates the
// shard. The staging buffer is reused only after dist_sync_unit_settle, as tmp is. An edge unit's
// part goes up into its own place in the edge's transient gradient buffer instead: the edge
// is gathered once per step, at the step's first hook event, before any backward writes
// gradients there (and ZeRO-3 has no reductions in flight across steps). The host AdamW
// (optim_offload.c, fraction 1) updates the shard in place.

// Floats of the staging buffer: the most a layer's units need at their places (its expert
// unit after its dense part, as the bf16 staging in tmp). Pure.
static size_t offload_staging(const DistSync *s) {
    size_t most = 0;
    for (int k = s->n_edge; k < s->n_buckets; k++) {
        const DistSyncBucket *u = &s->buckets[k];
        size_t need = (k >= s->n_edge + s->m->n_layers ? u->out_at : 0) + u->per;
        if (need > most) most = need;
    }
    return most;
}

void dist_sync_offload_params(DistSync *s) {
    Backend *be = s->be;
    if (s->stage != 3 || !s->master) core_fatal("--offload-params needs ZeRO-3 (stage %d)", s->stage);
    if (s->host_params) return;
    size_t bytes = s->shard_len * sizeof(float);
    float *host = be->ops->alloc_host(be, bytes ? bytes : sizeof(float));
    be->ops->copy(be, host, s->master, bytes, BACKEND_D2H);  // (waits for the device)
    be->ops->free(be, s->master);
    s->master = host;
    s->pstage_len = offload_staging(s);
    s->pstage = be->ops->alloc(be, (s->pstage_len + 1) * sizeof(float));
    s->host_params = 1;
}

const float *dist_sync_unit_source(DistSync *s, const DistSyncBucket *u) {
    if (!s->host_params) return s->master + u->at;
    int edge = u < s->buckets + s->n_edge, expert = u >= s->buckets + s->n_edge + s->m->n_layers;
    float *dst = edge ? s->edge_grads + u->buf : s->pstage + (expert ? u->out_at : 0);
    // up on the copy stream, after the work queued so far (the staging's last readers); the
    // gather waits for it on the compute stream, the host does not
    s->be->ops->copy_async(s->be, dst, s->master + u->at, u->per * sizeof(float), BACKEND_H2D);
    s->be->ops->copy_join(s->be, 0);
    return dst;
}

void dist_sync_offload_free(DistSync *s) {
    Backend *be = s->be;
    if (s->host_params) be->ops->free_host(be, s->master);
    else be->ops->free(be, s->master);
    be->ops->free(be, s->pstage);
    s->master = s->pstage = NULL;
}
