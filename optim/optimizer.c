// optim/optimizer.c: AdamW on the slice the sync engine gives this rank (see optimizer.h).
#include "optimizer.h"
#include "optim_internal.h"
#include "core/check.h"

#include <stdlib.h>
#include <string.h>

static const char *SHARDING[][2] = {{"no_shard", "DDP"}, {"optim", "ZeRO-1"},
                                     {"optim_grads", "ZeRO-2"}, {"optim_grads_params", "ZeRO-3"}};

int optim_sharding_parse(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, SHARDING[i][0])) return i;
    return -1;
}

const char *optim_sharding_name(OptimSharding s) { return SHARDING[s][0]; }
const char *optim_sharding_label(OptimSharding s) { return SHARDING[s][1]; }


// Parameter parts inside [lo, lo + len) of the flat buffer, kept at `at` in the slice. A part
// counts in the gradient norm on its owner (gpt_param_is_owner) and, without sharding, on
// rank 0 of the group that reduces it (DDP: every rank holds the same).
static void add_segments(Optimizer *o, const ParamInfo *params, int n_params, int tp_rank,
                         size_t lo, size_t len, size_t at) {
    const DistSync *sync = o->sync;
    size_t hi = lo + len;
    for (int i = 0; i < n_params; i++) {
        size_t b = params[i].offset, e = b + params[i].numel;
        if (e <= lo || b >= hi) continue;
        OptSegment *s = &o->segs[o->n_segs++];
        s->begin = b > lo ? b : lo;
        s->len = (e < hi ? e : hi) - s->begin;
        s->param = i;
        s->weight_decay = params[i].weight_decay;
        s->decoupled = params[i].embedding_or_output;
        s->count_in_norm = gpt_param_is_owner(&params[i], tp_rank) &&
                           (sync->sharded || dist_sync_param_comm(sync, &params[i])->rank == 0);
        s->at = at + (s->begin - lo);
    }
}

// The segments of the slice: every parameter (DDP), or the parts inside this rank's piece
// of each bucket (ZeRO-1) or unit (ZeRO-2/3), in bucket order.
static void build_segments(Optimizer *o, const GPT *m, int tp_rank) {
    const DistSync *s = o->sync;
    o->segs = core_calloc((size_t)m->n_params * 2 + (size_t)s->n_buckets + 1, sizeof(OptSegment));
    if (!s->sharded) {
        add_segments(o, m->params, m->n_params, tp_rank, 0, o->n_padded, 0);
        return;
    }
    if (s->stage >= 2) o->unit_seg = core_calloc((size_t)s->n_buckets + 1, sizeof(int));
    for (int k = 0; k < s->n_buckets; k++) {
        const DistSyncBucket *b = &s->buckets[k];
        if (o->unit_seg) o->unit_seg[k] = o->n_segs;
        if (b->own) add_segments(o, m->params, m->n_params, tp_rank, b->start + (size_t)b->comm->rank * b->per, b->own, b->at);
    }
    if (o->unit_seg) o->unit_seg[s->n_buckets] = o->n_segs;
}

// Uploads the segment tables for the multi-tensor ops: ranges relative to the slice start
// (ZeRO-2/3 update table: to the start of each unit's piece).
static void build_tables(Optimizer *o) {
    Backend *be = o->be;
    const DistSync *s = o->sync;
    BackendSegment *upd = core_calloc((size_t)o->n_segs + 2, sizeof *upd);
    BackendSegment *nrm = core_calloc((size_t)o->n_segs + 2, sizeof *nrm);
    int units = o->unit_seg ? s->n_buckets : 1;
    o->unit_ndec = core_calloc((size_t)units, sizeof(int));
    for (int k = 0; k < units; k++) {
        int i0 = o->unit_seg ? o->unit_seg[k] : 0, i1 = o->unit_seg ? o->unit_seg[k + 1] : o->n_segs;
        for (int i = i0; i < i1; i++) o->unit_ndec[k] += o->segs[i].decoupled;
        int plain = i0, dec = i1 - o->unit_ndec[k];  // where the next of each kind goes
        for (int i = i0; i < i1; i++) {
            const OptSegment *g = &o->segs[i];
            upd[g->decoupled ? dec++ : plain++] =
                (BackendSegment){g->at - (o->unit_seg ? s->buckets[k].at : 0), g->len, g->weight_decay, 0};
            if (g->count_in_norm) nrm[o->n_norm++] = (BackendSegment){g->at, g->len, o->unit_seg ? 0 : g->weight_decay, 0};
            if (g->len > o->max_seg_len) o->max_seg_len = g->len;
        }
    }
    o->dev_seg = core_calloc((size_t)units + 1, sizeof(int));  // (the update table's, as the units')
    for (int k = 0; k <= units; k++) o->dev_seg[k] = o->unit_seg ? o->unit_seg[k] : k ? o->n_segs : 0;
    size_t bytes = ((size_t)o->n_segs + 2) * sizeof(BackendSegment);  // (+1: room for the
                                                                       // offload's split)
    o->update_table = be->ops->alloc(be, bytes);
    o->norm_table = be->ops->alloc(be, bytes);
    be->ops->copy(be, o->update_table, upd, bytes, BACKEND_H2D);
    be->ops->copy(be, o->norm_table, nrm, bytes, BACKEND_H2D);
    free(upd);
    free(nrm);
}

Optimizer *optim_create(Backend *be, Comm *group, Comm *egroup, OptimSharding sh, GPT *m, int tp_rank,
                        size_t bucket_size, Comm *tp_sp) {
    Optimizer *o = core_calloc(1, sizeof *o);
    o->be = be;
    o->sync = dist_sync_create(be, group, egroup, m, (int)sh, bucket_size, tp_sp);
    o->sharding = sh >= OPTIM_SHARD_GRADS ? sh : o->sync->sharded ? OPTIM_SHARD_OPTIM : OPTIM_NO_SHARD;
    o->master = o->sync->master;
    o->n_padded = o->sync->n_padded;
    o->shard_len = o->sync->shard_len;
    size_t extra = sh >= OPTIM_SHARD_GRADS;  // (ZeRO-2/3: one float more, as ever)
    o->m = be->ops->alloc(be, (o->shard_len + extra) * sizeof(float));
    o->v = be->ops->alloc(be, (o->shard_len + extra) * sizeof(float));
    build_segments(o, m, tp_rank);
    build_tables(o);
    return o;
}

void optim_destroy(Optimizer *o) {
    if (!o) return;
    dist_sync_destroy(o->sync);  // (waits for the gathers in flight first)
    o->be->ops->free(o->be, o->m);
    o->be->ops->free(o->be, o->v);
    o->be->ops->free(o->be, o->update_table);
    o->be->ops->free(o->be, o->norm_table);
    optim_offload_destroy(o);
    free(o->segs);
    free(o->unit_seg);
    free(o->unit_ndec);
    free(o->dev_seg);
    free(o);
}

void optim_set_reduce_bf16(Optimizer *o) { dist_sync_set_reduce_bf16(o->sync); }

double optim_local_grad_sq(Optimizer *o) {
    if (o->n_norm == 0) return 0.0;
    return o->be->ops->sum_squares_multi(o->be, dist_sync_shard_grads(o->sync), o->norm_table, o->n_norm,
                                         o->max_seg_len);
}

void optim_set_weight_copies(Optimizer *o, const GPT *m) {
    if (m->be->act == BACKEND_F32 || o->sync->sharded) return;
    o->copy = m->param_copy;  // every element the forward reads is in the update (slice = all)
}

void optim_adamw_groups(Backend *be, float *params, void *copy, const float *grads, float *m, float *v,
                        const BackendSegment *table, int n, int nd, size_t max_len,
                        const OptimStepArgs *a) {
    if (a->lr_dec == a->lr) nd = 0;  // one launch for all
    const double lrs[2] = {a->lr, a->lr_dec};
    const int first[2] = {0, n - nd}, count[2] = {n - nd, nd};
    const AdamWConfig *c = a->cfg;
    for (int g = 0; g < 2; g++)
        if (count[g] > 0)
            be->ops->adamw_multi(be, params, copy, grads, m, v, table + first[g], count[g], max_len,
                                 (float)lrs[g], (float)c->beta1, (float)c->beta2, (float)c->eps,
                                 (float)c->weight_decay, (float)a->grad_scale, a->step);
}

// AdamW on the slice (with --optimizer-cpu-offload: the device part here, the host part by
// optim_offload_step, concurrently), then the parameters synced back. Returns 1 when the weight copies
// were written too (by AdamW, or by the gathers), else 0.
static int update(Optimizer *o, const AdamWConfig *cfg, double lr, double lr_dec, double grad_scale) {
    Backend *be = o->be;
    DistSync *s = o->sync;
    o->step++;
    const OptimStepArgs a = {cfg, lr, lr_dec, grad_scale, (int)o->step};
    float *params = dist_sync_shard_params(s), *grads = dist_sync_shard_grads(s);
    size_t h = o->host_len, es = backend_dtype_size(be->act);  // the device part starts at h
    if (o->host) optim_offload_grads_down(o, grads);  // (then the host's AdamW runs while the
                                                      // device's below does)
    for (int k = 0; k < (o->unit_seg ? s->n_buckets : 1); k++) {  // ZeRO-2/3: per unit
        int i0 = o->dev_seg[k], n = o->dev_seg[k + 1] - i0;
        if (n == 0) continue;
        size_t at = o->unit_seg ? s->buckets[k].at : 0, d0 = at > h ? at : h;  // its device part
        float *p = (o->unit_seg ? dist_sync_unit_params(s, k) : params) + (d0 - at);
        optim_adamw_groups(be, p, o->copy ? (char *)o->copy + d0 * es : NULL, grads + d0, o->m + (d0 - h),
                           o->v + (d0 - h), o->update_table + i0, n, o->unit_ndec[k], o->max_seg_len, &a);
    }
    if (o->host) optim_offload_step(o, params, &a);
    return dist_sync_start_param_sync(s) || o->copy != NULL;
}

void optim_update_model(Optimizer *o, const AdamWConfig *cfg, double lr, double lr_decoupled,
                        double grad_scale, GPT *m) {
    if (!update(o, cfg, lr, lr_decoupled, grad_scale)) gpt_refresh_weight_copies(m);
}

size_t optim_state_bytes(const Optimizer *o) {
    return dist_sync_state_bytes(o->sync).optim - dist_offload_bytes(o->host_len, 0).device_saved;
}

size_t optim_param_memory_bytes(const Optimizer *o) { return dist_sync_param_bytes(o->sync); }
size_t optim_grad_memory_bytes(const Optimizer *o) { return dist_sync_grad_bytes(o->sync); }
