// optim/zero_build.c: ZeRO-2/3 set-up: the units of a stage, their shards, the optimizer's
// segments and tables, the buffers (see zero.h for the scheme).
#include "zero.h"
#include "core/check.h"
#include "distributed/dist_geometry.h"  // defines: dist_unit_piece

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

// Sets begin/len/per/own of unit u for the flat range [begin, begin + len)
// (distributed/dist_geometry.h: dist_unit_piece).
static void unit_shape(ZeroUnit *u, size_t begin, size_t len, int dp, int dp_rank) {
    DistUnitPiece p = dist_unit_piece(len, dp, dp_rank);
    u->begin = begin;
    u->len = len;
    u->per = p.per;
    u->own = p.own;
}

// The units of stage m: edge tensors first (in table order), then one per local layer.
static void build_units(OptimZero *z, int dp, int dp_rank) {
    const GPT *m = z->m;
    z->units = core_calloc((size_t)m->n_params + 1, sizeof(ZeroUnit));
    z->wte_unit = -1;
    int layer0 = m->block_param0, nb = m->block_nparams;  // [wte, wpe] layers [lnf, wte]
    for (int i = 0; i < m->n_params; i++) {
        if (i >= layer0 && i < layer0 + nb * m->n_layers) continue;
        if (!strcmp(m->params[i].name, "wte")) z->wte_unit = z->n_units;
        unit_shape(&z->units[z->n_units++], m->params[i].offset, m->params[i].numel, dp, dp_rank);
    }
    z->n_edge = z->n_units;
    for (int l = 0; l < m->n_layers; l++) {
        const ParamInfo *t = &m->params[layer0 + nb * l];
        size_t end = t[nb - 1].offset + t[nb - 1].numel;
        unit_shape(&z->units[z->n_units++], t[0].offset, end - t[0].offset, dp, dp_rank);
    }
    size_t at = 0, buf = 0;
    for (int k = 0; k < z->n_units; k++) {
        ZeroUnit *u = &z->units[k];
        u->at = at;
        at += u->per;
        if (u->per > z->max_per) z->max_per = u->per;
        size_t full = (size_t)dp * u->per;
        if (k < z->n_edge) {
            u->buf = buf;
            buf += full;
        } else if (full > z->layer_len) {
            z->layer_len = full;
        }
    }
    z->edge_len = buf;
}

// The optimizer's segments: the parameter parts inside each unit's owned range, at their
// place in the shard stores; the update table is relative to each unit's owned start, the
// norm table to the shard start.
static void build_segments(Optimizer *o, OptimZero *z, int dp_rank, int tp_rank) {
    const GPT *m = z->m;
    o->segs = core_calloc((size_t)m->n_params * 2 + 1, sizeof(OptSegment));
    for (int k = 0; k < z->n_units; k++) {
        ZeroUnit *u = &z->units[k];
        size_t lo = u->begin + (size_t)dp_rank * u->per, hi = lo + u->own;
        u->seg0 = o->n_segs;
        for (int i = 0; i < m->n_params && u->own; i++) {
            size_t b = m->params[i].offset, e = b + m->params[i].numel;
            if (e <= lo || b >= hi) continue;
            OptSegment *s = &o->segs[o->n_segs++];
            s->begin = b > lo ? b : lo;
            s->len = (e < hi ? e : hi) - s->begin;
            s->param = i;
            s->weight_decay = m->params[i].weight_decay;
            s->count_in_norm = gpt_param_is_owner(&m->params[i], tp_rank);
            s->at = u->at + (s->begin - lo);
            if (s->len > o->max_seg_len) o->max_seg_len = s->len;
        }
        u->n_seg = o->n_segs - u->seg0;
    }
    BackendSegment *upd = core_calloc((size_t)o->n_segs + 1, sizeof *upd);
    BackendSegment *nrm = core_calloc((size_t)o->n_segs + 1, sizeof *nrm);
    for (int k = 0; k < z->n_units; k++) {
        const ZeroUnit *u = &z->units[k];
        for (int j = u->seg0; j < u->seg0 + u->n_seg; j++) {
            const OptSegment *s = &o->segs[j];
            upd[j] = (BackendSegment){s->at - u->at, s->len, s->weight_decay, 0};
            if (s->count_in_norm) nrm[o->n_norm++] = (BackendSegment){s->at, s->len, 0, 0};
        }
    }
    optim_upload_tables(o, upd, nrm);
}

// The edge tensors' gradient views into edge_grads, for good (until it is reallocated).
static void point_edge_grads(OptimZero *z) {
    GPT *m = z->m;
    for (int k = 0; k < z->n_edge; k++) {
        const ZeroUnit *u = &z->units[k];
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].offset == u->begin && edge_view(&m->g, m->params[i].name))
                *edge_view(&m->g, m->params[i].name) = z->edge_grads + u->buf;
    }
}

// ZeRO-3: keeps this rank's parts of the initialised flat parameters as masters, frees the
// flat buffer and points the edge views into the edge gather buffer.
static void shard_params(Optimizer *o, OptimZero *z, int dp_rank) {
    Backend *be = o->be;
    GPT *m = z->m;
    o->master = be->ops->alloc(be, o->shard_len * sizeof(float));
    for (int k = 0; k < z->n_units; k++) {
        const ZeroUnit *u = &z->units[k];
        be->ops->copy(be, o->master + u->at, m->param_mem + u->begin + (size_t)dp_rank * u->per,
                      u->own * sizeof(float), BACKEND_D2D);
    }
    z->edge_params = be->ops->alloc(be, (z->edge_len ? z->edge_len : 1) * z->esize);
    for (int j = 0; j < 2; j++)
        z->layer_params[j] = be->ops->alloc(be, (z->layer_len ? z->layer_len : 1) * z->esize);
    gpt_release_flat_buffers(m, 0, 1);
    for (int k = 0; k < z->n_edge; k++) {
        const ZeroUnit *u = &z->units[k];
        for (int i = 0; i < m->n_params; i++)
            if (m->params[i].offset == u->begin && edge_view(&m->w, m->params[i].name))
                *edge_view(&m->w, m->params[i].name) = (char *)z->edge_params + u->buf * z->esize;
    }
    for (int l = 0; l < m->n_layers; l++)  // until their first gather
        gpt_point_layer_views(m, &m->w.blocks[l], l, z->layer_params[l % 2],
                              z->units[z->n_edge + l].begin, z->esize);
    z->edge_stale = 1;
}

Optimizer *optim_zero_create(Backend *be, Comm *dp, OptimSharding s, GPT *m, int tp_rank) {
    Optimizer *o = core_calloc(1, sizeof *o);
    OptimZero *z = core_calloc(1, sizeof *z);
    o->be = be;
    o->dp = dp;
    o->zero1 = 1;
    o->sharding = s;
    o->zero = z;
    o->n_padded = m->n_alloc;
    o->dp_rank_counts_norm = 1;
    z->m = m;
    z->params = s == OPTIM_SHARD_PARAMS;
    z->esize = backend_dtype_size(be->act);
    z->wtype = be->act == BACKEND_BF16 ? COMM_BF16 : be->act == BACKEND_F16 ? COMM_F16 : COMM_F32;
    build_units(z, dp->size, dp->rank);
    for (int k = 0; k < z->n_units; k++) o->shard_len += z->units[k].per;
    o->bucket = z->max_per;
    build_segments(o, z, dp->rank, tp_rank);
    size_t f = sizeof(float);
    o->m = be->ops->alloc(be, (o->shard_len + 1) * f);
    o->v = be->ops->alloc(be, (o->shard_len + 1) * f);
    z->grad_shard = be->ops->alloc(be, (o->shard_len + 1) * f);
    z->shared = !(m->first && m->last);  // edge and layer gradients never live at once
    size_t both = z->edge_len > z->layer_len ? z->edge_len : z->layer_len;
    z->edge_grads = be->ops->alloc(be, ((z->shared ? both : z->edge_len) + 1) * f);
    z->layer_grads = z->shared ? z->edge_grads : be->ops->alloc(be, (z->layer_len + 1) * f);
    z->tmp = be->ops->alloc(be, (z->max_per + 1) * f);
    gpt_release_flat_buffers(m, 1, 0);
    point_edge_grads(z);
    if (z->params) shard_params(o, z, dp->rank);
    z->pending = z->prefetched = -1;
    m->hook = (GPTShardHook){optim_zero_hook, o};
    return o;
}

void optim_zero_split_transient(Optimizer *o) {
    Backend *be = o->be;
    OptimZero *z = o->zero;
    if (!z->shared) return;
    be->ops->free(be, z->edge_grads);
    z->edge_grads = be->ops->alloc(be, (z->edge_len + 1) * sizeof(float));
    z->layer_grads = be->ops->alloc(be, (z->layer_len + 1) * sizeof(float));
    z->shared = 0;
    point_edge_grads(z);
}

void optim_zero_set_prefetch(Optimizer *o, int on) {
    if (o->zero) o->zero->prefetch = on && o->zero->params;
}

void optim_zero_destroy(Backend *be, OptimZero *z) {
    if (!z) return;
    optim_zero_overlap_destroy(be, z);  // (points layer_grads at the buffer it came with)
    be->ops->free(be, z->grad_shard);
    be->ops->free(be, z->edge_grads);
    if (!z->shared) be->ops->free(be, z->layer_grads);
    be->ops->free(be, z->tmp);
    be->ops->free(be, z->edge_params);
    be->ops->free(be, z->layer_params[0]);
    be->ops->free(be, z->layer_params[1]);
    free(z->units);
    free(z);
}

size_t optim_zero_grad_bytes(const Optimizer *o) {
    const OptimZero *z = o->zero;
    size_t transient = !z->shared ? z->edge_len + z->layer_len
                     : z->edge_len > z->layer_len ? z->edge_len : z->layer_len;
    return (o->shard_len + transient + z->max_per) * sizeof(float) + optim_zero_overlap_bytes(z);
}

size_t optim_zero_param_bytes(const Optimizer *o) {
    const OptimZero *z = o->zero;
    const GPT *m = z->m;
    if (!z->params)  // the full fp32 masters and (bf16/fp16) the copies the ops read
        return m->n_floats * sizeof(float) + (z->esize != sizeof(float) ? m->n_alloc * z->esize : 0);
    return o->shard_len * sizeof(float) + (z->edge_len + 2 * z->layer_len) * z->esize;
}

size_t optim_zero_edge_shard_bytes(const Optimizer *o) {
    const OptimZero *z = o->zero;
    size_t n = 0;
    for (int k = 0; k < z->n_edge; k++) n += z->units[k].per;
    return n * sizeof(float);
}
