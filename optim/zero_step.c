// optim/zero_step.c: ZeRO-2/3 during a step: the model hook (gather a unit's weights,
// reduce-scatter its gradients), the step's gradient sums, the norm and the update (see
// zero.h for the scheme).
#include "zero.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

// The unit of local layer l.
static ZeroUnit *layer_unit(OptimZero *z, int l) { return &z->units[z->n_edge + l]; }

void optim_zero_reduce_start(Optimizer *o, ZeroReduce *r, const float *src) {
    const ZeroUnit *u = &o->zero->units[r->unit];
    int bf = o->reduce_bf16;  // --grad-reduce-in-bf16: rounded before, widened after (as ZeRO-1)
    const void *in = bf ? r->lp : (const void *)src;
    void *out = bf ? r->lp_out : (void *)r->out;
    CommDtype t = bf ? COMM_BF16 : COMM_F32;
    r->t0 = core_now();
    r->req = (CommRequest){0};
    if (bf) o->be->ops->cast(o->be, r->lp, BACKEND_BF16, src, BACKEND_F32, (size_t)o->dp->size * u->per);
    if (o->zero->ov) comm_ireduce_scatter(o->dp, in, out, u->per, t, COMM_AVG, &r->req);
    else comm_reduce_scatter(o->dp, in, out, u->per, t, COMM_AVG);
}

void optim_zero_reduce_finish(Optimizer *o, ZeroReduce *r) {
    Backend *be = o->be;
    OptimZero *z = o->zero;
    const ZeroUnit *u = &z->units[r->unit];
    comm_wait(o->dp, &r->req);
    if (o->reduce_bf16) be->ops->cast(be, r->out, BACKEND_F32, r->lp_out, BACKEND_BF16, u->per);
    be->ops->add_f32(be, z->grad_shard + u->at, z->grad_shard + u->at, r->out, u->per);
}

// The average over DP of unit k's full gradient src (DP*per floats in transient buffer base):
// this rank's piece reduce-scattered, then added to its place in the gradient shard; queued
// and started nonblocking with --overlap-grad-reduce (zero_overlap.c), else done here.
static void reduce_unit(Optimizer *o, int k, const float *base, const float *src) {
    OptimZero *z = o->zero;
    if (z->ov) {
        optim_zero_ov_start(o, k, base, src);
        return;
    }
    optim_zero_settle(o);  // a prefetch in flight may still read tmp
    ZeroReduce r = {.unit = k, .base = base, .out = z->tmp, .lp = o->lp, .lp_out = o->lp_out};
    double t0 = core_now();
    optim_zero_reduce_start(o, &r, src);
    optim_zero_reduce_finish(o, &r);
    z->hook_wait_s += core_now() - t0;
}

// ZeRO-3: this rank's part of unit u as the gather sends it: the fp32 master itself, or cast
// to be->act in tmp.
static const void *gather_input(Optimizer *o, const ZeroUnit *u) {
    OptimZero *z = o->zero;
    if (z->wtype == COMM_F32) return o->master + u->at;
    o->be->ops->cast(o->be, z->tmp, o->be->act, o->master + u->at, BACKEND_F32, u->per);
    return z->tmp;
}

// ZeRO-3: unit u's weights from every rank's master part into dst (DP*per, be->act).
static void gather_unit(Optimizer *o, const ZeroUnit *u, void *dst) {
    comm_all_gather(o->dp, gather_input(o, u), dst, u->per, o->zero->wtype);
}

// The first weights layer l's backward asks for: its chunk's first layer (the recomputed
// forward) when l ends a recomputed chunk, else l (gpt_backward's order).
static int backward_first(const GPT *m, int l) {
    int first, last;
    return gpt_layer_recomputed(m, l, &first, &last) && l == last ? first : l;
}

// The layer whose weights the model asks for next after event ev of `unit` (gpt.c's order of
// hook calls), when known and its buffer is not the one in use; else -1.
static int next_gather(const OptimZero *z, GPTHookEvent ev, int unit) {
    const GPT *m = z->m;
    int first, last, next = -1;
    if (unit == GPT_UNIT_EDGE) {  // no layer buffer in use
        if (m->n_layers && ev == GPT_HOOK_FORWARD) next = 0;
        if (m->n_layers && ev == GPT_HOOK_BACKWARD_BEGIN) next = backward_first(m, m->n_layers - 1);
        return next;
    }
    if (ev == GPT_HOOK_FORWARD && !z->in_backward) {
        next = unit + 1 < m->n_layers ? unit + 1 : -1;
    } else if (ev == GPT_HOOK_FORWARD) {  // recomputed forward: the chunk's next layer; after its
        gpt_layer_recomputed(m, unit, &first, &last);  // last, that layer's backward (in use)
        next = unit < last ? unit + 1 : -1;
    } else if (ev == GPT_HOOK_BACKWARD_BEGIN && unit > 0) {
        next = backward_first(m, unit - 1);
    }
    return next >= 0 && next % 2 != unit % 2 ? next : -1;
}

void optim_zero_settle(Optimizer *o) {
    OptimZero *z = o->zero;
    if (z->pending < 0) return;
    comm_wait(o->dp, &z->req);
    z->prefetched = z->pending;  // its buffer holds it until that buffer is gathered into again
    z->pending = -1;
}

// --overlap-param-gather: starts layer l's gather into its buffer (l % 2), nonblocking.
static void prefetch(Optimizer *o, int l) {
    OptimZero *z = o->zero;
    if (!z->prefetch || l < 0) return;
    optim_zero_settle(o);
    const ZeroUnit *u = layer_unit(z, l);
    comm_iall_gather(o->dp, gather_input(o, u), z->layer_params[l % 2], u->per, z->wtype, &z->req);
    z->pending = l;
}

// The edge's gradients of this micro-batch, if not reduced yet.
static void reduce_edge(Optimizer *o) {
    OptimZero *z = o->zero;
    if (!z->edge_pending) return;
    for (int k = 0; k < z->n_edge; k++) reduce_unit(o, k, z->edge_grads, z->edge_grads + z->units[k].buf);
    z->edge_pending = 0;
}

// The edge units: weights gathered once per step (ZeRO-3), gradients per micro-batch.
static void edge_event(Optimizer *o, GPTHookEvent ev) {
    OptimZero *z = o->zero;
    Backend *be = o->be;
    if (z->params && z->edge_stale && ev != GPT_HOOK_BACKWARD_END) {
        for (int k = 0; k < z->n_edge; k++)
            gather_unit(o, &z->units[k], (char *)z->edge_params + z->units[k].buf * z->esize);
        z->edge_stale = 0;
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN && z->edge_len) {
        if (z->ov) optim_zero_ov_release(o, z->edge_grads);  // the last micro-batch's reductions
        be->ops->zero(be, z->edge_grads, z->edge_len * sizeof(float));
        z->edge_pending = 1;
    }
    if (ev == GPT_HOOK_BACKWARD_END) reduce_edge(o);
}

void optim_zero_hook(void *ctx, GPTHookEvent ev, int unit) {
    Optimizer *o = ctx;
    OptimZero *z = o->zero;
    GPT *m = z->m;
    if (z->ov) optim_zero_ov_poll(o);  // --overlap-grad-reduce: progress, finish what completed
    if (unit == GPT_UNIT_EDGE) {
        optim_zero_settle(o);
        z->in_backward = ev != GPT_HOOK_FORWARD;
        edge_event(o, ev);
        if (z->params) prefetch(o, next_gather(z, ev, unit));  // the first layer's, early
        return;
    }
    const ZeroUnit *u = layer_unit(z, unit);
    if (z->params && ev != GPT_HOOK_BACKWARD_END) {  // forward or backward: gather the weights
        void *buf = z->layer_params[unit % 2];        // (layer l in buffer l % 2)
        optim_zero_settle(o);
        if (z->prefetched != unit) gather_unit(o, u, buf);
        else z->n_prefetched++;
        if (z->prefetched == unit || z->prefetched % 2 == unit % 2) z->prefetched = -1;  // used, or overwritten
        gpt_point_layer_views(m, &m->w.blocks[unit], unit, buf, u->begin, z->esize);
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN) {  // gradients into the zeroed transient buffer
        if (m->last && !m->first) reduce_edge(o);  // last stage: the edge's are complete
        if (z->ov) z->layer_grads = optim_zero_ov_layer_buffer(o);  // the ring's next, released
        o->be->ops->zero(o->be, z->layer_grads, (size_t)o->dp->size * u->per * sizeof(float));
        gpt_point_layer_views(m, &m->g.blocks[unit], unit, z->layer_grads, u->begin, sizeof(float));
    } else if (ev == GPT_HOOK_BACKWARD_END) {
        reduce_unit(o, z->n_edge + unit, z->layer_grads, z->layer_grads);
        if (z->shared && m->first && unit == 0 && z->edge_len)  // first stage: the embedding's
            o->be->ops->zero(o->be, z->edge_grads, z->edge_len * sizeof(float));  // come next
    }
    if (z->params && ev != GPT_HOOK_BACKWARD_END)  // the next layer's while this one computes
        prefetch(o, next_gather(z, ev, unit));
}

void optim_zero_begin_step(Optimizer *o) {
    o->zero->n_prefetched = 0;
    o->zero->hook_wait_s = 0.0;
    o->be->ops->zero(o->be, o->zero->grad_shard, o->shard_len * sizeof(float));
}

void optim_zero_finish_grads(Optimizer *o, Comm *tp_sp, Comm *embedding) {
    OptimZero *z = o->zero;
    const GPT *m = z->m;
    optim_zero_settle(o);
    optim_zero_ov_drain(o);  // --overlap-grad-reduce: every reduce-scatter in the shard first
    for (int i = 0; tp_sp && i < o->n_segs; i++)  // the same segments on every tp rank
        if (m->params[o->segs[i].param].norm_param)
            comm_all_reduce(tp_sp, z->grad_shard + o->segs[i].at, o->segs[i].len, COMM_F32, COMM_SUM);
    if (embedding && embedding->size > 1 && z->wte_unit >= 0 && !m->cfg.untie_embeddings) {  // the same
        const ZeroUnit *u = &z->units[z->wte_unit];             // slicing of wte on both
        if (u->own) comm_all_reduce(embedding, z->grad_shard + u->at, u->own, COMM_F32, COMM_SUM);
    }
}

double optim_zero_local_grad_sq(Optimizer *o) {
    if (o->n_norm == 0) return 0.0;
    return o->be->ops->sum_squares_multi(o->be, o->zero->grad_shard, o->norm_table, o->n_norm,
                                         o->max_seg_len);
}

void optim_zero_update(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale) {
    Backend *be = o->be;
    OptimZero *z = o->zero;
    GPT *m = z->m;
    size_t rank = (size_t)o->dp->rank;
    optim_zero_settle(o);  // (none expected: the masters change below)
    optim_zero_ov_drain(o);  // (none expected: finish_grads has drained them)
    z->prefetched = -1;
    o->step++;
    for (int k = 0; k < z->n_units; k++) {
        const ZeroUnit *u = &z->units[k];
        float *p = z->params ? o->master + u->at : m->param_mem + u->begin + rank * u->per;
        if (u->n_seg)
            be->ops->adamw_multi(be, p, NULL, z->grad_shard + u->at, o->m + u->at, o->v + u->at,
                                 o->update_table + u->seg0, u->n_seg, o->max_seg_len, (float)lr,
                                 (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps,
                                 (float)cfg->weight_decay, (float)grad_scale, (int)o->step);
        if (z->params) continue;
        // ZeRO-2: every rank's updated part back into the flat parameters, through the
        // (now free) transient gradient buffers
        float *out = k < z->n_edge ? z->edge_grads + u->buf : z->layer_grads;
        be->ops->copy(be, z->tmp, p, u->own * sizeof(float), BACKEND_D2D);
        comm_all_gather(o->dp, z->tmp, out, u->per, COMM_F32);
        be->ops->copy(be, m->param_mem + u->begin, out, u->len * sizeof(float), BACKEND_D2D);
    }
    z->edge_stale = 1;
}

double optim_zero_take_hook_wait(Optimizer *o) {
    if (!o->zero) return 0.0;
    double s = o->zero->hook_wait_s;
    o->zero->hook_wait_s = 0.0;
    return s;
}
