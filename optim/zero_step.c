// optim/zero_step.c: ZeRO-2/3 during a step: the model hook (gather a unit's weights,
// reduce-scatter its gradients), the step's gradient sums, the norm and the update (see
// zero.h for the scheme).
#include "zero.h"
#include "core/check.h"

// The unit of local layer l.
static ZeroUnit *layer_unit(OptimZero *z, int l) { return &z->units[z->n_edge + l]; }

// The average over DP of src (DP*per floats, this unit's full gradient on this rank): this
// rank's piece reduce-scattered, then added to its place in the gradient shard.
static void reduce_unit(Optimizer *o, const ZeroUnit *u, const float *src) {
    Backend *be = o->be;
    OptimZero *z = o->zero;
    comm_reduce_scatter(o->dp, src, z->tmp, u->per, COMM_F32, COMM_AVG);
    be->ops->add(be, z->grad_shard + u->at, z->grad_shard + u->at, z->tmp, u->per);
}

// ZeRO-3: unit u's weights from every rank's master part into dst (DP*per floats).
static void gather_unit(Optimizer *o, const ZeroUnit *u, float *dst) {
    comm_all_gather(o->dp, o->master + u->at, dst, u->per, COMM_F32);
}

// The edge's gradients of this micro-batch, if not reduced yet.
static void reduce_edge(Optimizer *o) {
    OptimZero *z = o->zero;
    if (!z->edge_pending) return;
    for (int k = 0; k < z->n_edge; k++) reduce_unit(o, &z->units[k], z->edge_grads + z->units[k].buf);
    z->edge_pending = 0;
}

// The edge units: weights gathered once per step (ZeRO-3), gradients per micro-batch.
static void edge_event(Optimizer *o, GPTHookEvent ev) {
    OptimZero *z = o->zero;
    Backend *be = o->be;
    if (z->params && z->edge_stale && ev != GPT_HOOK_BACKWARD_END) {
        for (int k = 0; k < z->n_edge; k++) gather_unit(o, &z->units[k], z->edge_params + z->units[k].buf);
        z->edge_stale = 0;
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN && z->edge_len) {
        be->ops->zero(be, z->edge_grads, z->edge_len * sizeof(float));
        z->edge_pending = 1;
    }
    if (ev == GPT_HOOK_BACKWARD_END) reduce_edge(o);
}

void optim_zero_hook(void *ctx, GPTHookEvent ev, int unit) {
    Optimizer *o = ctx;
    OptimZero *z = o->zero;
    GPT *m = z->m;
    if (unit == GPT_UNIT_EDGE) {
        edge_event(o, ev);
        return;
    }
    const ZeroUnit *u = layer_unit(z, unit);
    if (z->params && ev != GPT_HOOK_BACKWARD_END) {  // forward or backward: gather the weights
        float *buf = z->layer_params[unit % 2];       // (layer l in buffer l % 2)
        gather_unit(o, u, buf);
        gpt_point_layer_views(m, &m->w.blocks[unit], unit, buf, u->begin, sizeof(float));
    }
    if (ev == GPT_HOOK_BACKWARD_BEGIN) {  // gradients into the zeroed transient buffer
        if (z->shared && m->last) reduce_edge(o);  // last stage: the edge's are complete
        o->be->ops->zero(o->be, z->layer_grads, (size_t)o->dp->size * u->per * sizeof(float));
        gpt_point_layer_views(m, &m->g.blocks[unit], unit, z->layer_grads, u->begin, sizeof(float));
    } else if (ev == GPT_HOOK_BACKWARD_END) {
        reduce_unit(o, u, z->layer_grads);
        if (z->shared && m->first && unit == 0 && z->edge_len)  // first stage: the embedding's
            o->be->ops->zero(o->be, z->edge_grads, z->edge_len * sizeof(float));  // come next
    }
}

void optim_zero_begin_step(Optimizer *o) {
    o->be->ops->zero(o->be, o->zero->grad_shard, o->shard_len * sizeof(float));
}

void optim_zero_finish_grads(Optimizer *o, Comm *tp_sp, Comm *embedding) {
    OptimZero *z = o->zero;
    const GPT *m = z->m;
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
    o->step++;
    for (int k = 0; k < z->n_units; k++) {
        const ZeroUnit *u = &z->units[k];
        float *p = z->params ? o->master + u->at : m->param_mem + u->begin + rank * u->per;
        if (u->n_seg)
            be->ops->adamw_multi(be, p, z->grad_shard + u->at, o->m + u->at, o->v + u->at,
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
