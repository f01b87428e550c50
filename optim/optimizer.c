// optim/optimizer.c: ZeRO-1 / DDP AdamW (see optimizer.h).
#include "optimizer.h"
#include "zero.h"
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


// Parameter parts inside [lo, lo + len) of the flat buffer, kept at `at` in the slice.
static void add_segments(Optimizer *o, const ParamInfo *params, int n_params, int tp_rank,
                         size_t lo, size_t len, size_t at) {
    size_t hi = lo + len;
    for (int i = 0; i < n_params; i++) {
        size_t b = params[i].offset, e = b + params[i].numel;
        if (e <= lo || b >= hi) continue;
        OptSegment *s = &o->segs[o->n_segs++];
        s->begin = b > lo ? b : lo;
        s->len = (e < hi ? e : hi) - s->begin;
        s->param = i;
        s->weight_decay = params[i].weight_decay;
        s->count_in_norm = gpt_param_is_owner(&params[i], tp_rank);
        s->at = at + (s->begin - lo);
    }
}

// The segments of the slice: every parameter (DDP), or ZeRO-1 the parts inside each bucket's
// piece of this rank, in bucket order.
static void build_segments(Optimizer *o, const GPT *m, int tp_rank) {
    const DistSync *s = o->sync;
    o->segs = core_calloc((size_t)m->n_params + (size_t)s->n_buckets + 1, sizeof(OptSegment));
    if (!s->sharded) {
        add_segments(o, m->params, m->n_params, tp_rank, 0, o->n_padded, 0);
        return;
    }
    for (int k = 0; k < s->n_buckets; k++) {
        const DistSyncBucket *b = &s->buckets[k];
        add_segments(o, m->params, m->n_params, tp_rank, b->start + (size_t)s->comm->rank * b->per, b->per, b->at);
    }
}

// Uploads the segment tables for the multi-tensor ops (ranges relative to the slice start).
static void build_tables(Optimizer *o) {
    BackendSegment *upd = core_calloc((size_t)o->n_segs + 1, sizeof *upd);
    BackendSegment *nrm = core_calloc((size_t)o->n_segs + 1, sizeof *nrm);
    for (int i = 0; i < o->n_segs; i++) {
        const OptSegment *s = &o->segs[i];
        BackendSegment b = {s->at, s->len, s->weight_decay, 0};
        upd[i] = b;
        if (s->count_in_norm && o->dp_rank_counts_norm) nrm[o->n_norm++] = b;
        if (s->len > o->max_seg_len) o->max_seg_len = s->len;
    }
    optim_upload_tables(o, upd, nrm);
}

void optim_upload_tables(Optimizer *o, BackendSegment *upd, BackendSegment *nrm) {
    Backend *be = o->be;
    size_t bytes = ((size_t)o->n_segs + 1) * sizeof(BackendSegment);
    o->update_table = be->ops->alloc(be, bytes);
    o->norm_table = be->ops->alloc(be, bytes);
    be->ops->copy(be, o->update_table, upd, bytes, BACKEND_H2D);
    be->ops->copy(be, o->norm_table, nrm, bytes, BACKEND_H2D);
    free(upd);
    free(nrm);
}

Optimizer *optim_create(Backend *be, Comm *dp, int zero1, GPT *m, int tp_rank, size_t bucket_size,
                        Comm *tp_sp) {
    Optimizer *o = core_calloc(1, sizeof *o);
    o->be = be;
    o->dp = dp;
    o->sync = dist_sync_create(be, dp, m, zero1, bucket_size, tp_sp);
    o->zero1 = o->sync->sharded;
    o->sharding = o->zero1 ? OPTIM_SHARD_OPTIM : OPTIM_NO_SHARD;
    o->n_padded = o->sync->n_padded;
    o->shard_len = o->sync->shard_len;
    o->dp_rank_counts_norm = o->zero1 || dp->rank == 0;
    o->m = be->ops->alloc(be, o->shard_len * sizeof(float));
    o->v = be->ops->alloc(be, o->shard_len * sizeof(float));
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
    o->be->ops->free(o->be, o->lp);
    o->be->ops->free(o->be, o->lp_out);
    o->be->ops->free(o->be, o->master);
    optim_zero_destroy(o->be, o->zero);
    free(o->segs);
    free(o);
}

void optim_set_reduce_bf16(Optimizer *o) {
    Backend *be = o->be;
    if (o->sync) {
        dist_sync_set_reduce_bf16(o->sync);
        return;
    }
    if (o->dp->size == 1) return;  // nothing is reduced
    o->reduce_bf16 = 1;  // ZeRO-2/3: the largest unit (bucket = its per)
    o->lp = be->ops->alloc(be, (size_t)o->dp->size * o->bucket * 2);
    o->lp_out = be->ops->alloc(be, o->bucket * 2);
}

double optim_local_grad_sq(Optimizer *o) {
    if (o->zero) return optim_zero_local_grad_sq(o);
    if (o->n_norm == 0) return 0.0;
    return o->be->ops->sum_squares_multi(o->be, dist_sync_shard_grads(o->sync), o->norm_table, o->n_norm,
                                         o->max_seg_len);
}

void optim_set_weight_copies(Optimizer *o, const GPT *m) {
    if (m->be->act == BACKEND_F32 || o->zero || (o->zero1 && o->dp->size > 1)) return;
    o->copy = m->param_copy;  // every element the forward reads is in the update (slice = all)
}

// AdamW on the slice, then the parameters synced back. Returns 1 when the weight copies
// were written too (by AdamW, or by the gathers), else 0.
static int update(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale) {
    Backend *be = o->be;
    if (o->zero) {
        optim_zero_update(o, cfg, lr, grad_scale);
        return 0;
    }
    o->step++;
    float *params = dist_sync_shard_params(o->sync);
    if (o->n_segs > 0)
        be->ops->adamw_multi(be, params, o->copy, dist_sync_shard_grads(o->sync), o->m, o->v,
                             o->update_table, o->n_segs, o->max_seg_len, (float)lr,
                             (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps,
                             (float)cfg->weight_decay, (float)grad_scale, (int)o->step);
    return dist_sync_start_param_sync(o->sync) || o->copy != NULL;
}

void optim_update_model(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale, GPT *m) {
    if (!update(o, cfg, lr, grad_scale)) gpt_refresh_weight_copies(m);
}

size_t optim_state_bytes(const Optimizer *o) { return 2 * o->shard_len * sizeof(float); }

size_t optim_param_memory_bytes(const Optimizer *o, const GPT *m) {
    size_t copies = m->be->act != BACKEND_F32 ? m->n_alloc * backend_dtype_size(m->be->act) : 0;
    return o->zero ? optim_zero_param_bytes(o) : m->n_floats * sizeof(float) + copies;
}

size_t optim_grad_memory_bytes(const Optimizer *o, const GPT *m) {
    return o->zero ? optim_zero_grad_bytes(o) : m->n_alloc * sizeof(float);
}
