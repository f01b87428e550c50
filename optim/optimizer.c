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

size_t optim_pad_multiple(int dp) { return (size_t)dp * 16; }

size_t optim_padded_size(size_t n_floats, int dp) {
    size_t q = optim_pad_multiple(dp);
    return (n_floats + q - 1) / q * q;
}

// Parameter parts that fall inside [begin, begin + len).
static void build_segments(Optimizer *o, const ParamInfo *params, int n_params, int tp_rank) {
    o->segs = core_calloc((size_t)n_params, sizeof(OptSegment));
    size_t lo = o->shard_begin, hi = o->shard_begin + o->shard_len;
    for (int i = 0; i < n_params; i++) {
        size_t b = params[i].offset, e = b + params[i].numel;
        if (e <= lo || b >= hi) continue;
        OptSegment *s = &o->segs[o->n_segs++];
        s->begin = b > lo ? b : lo;
        s->len = (e < hi ? e : hi) - s->begin;
        s->param = i;
        s->weight_decay = params[i].weight_decay;
        s->count_in_norm = gpt_param_is_owner(&params[i], tp_rank);
        s->at = s->begin - o->shard_begin;
    }
}

// Uploads the segment tables for the multi-tensor ops (ranges relative to the slice start).
static void build_tables(Optimizer *o) {
    BackendSegment *upd = core_calloc((size_t)o->n_segs + 1, sizeof *upd);
    BackendSegment *nrm = core_calloc((size_t)o->n_segs + 1, sizeof *nrm);
    for (int i = 0; i < o->n_segs; i++) {
        const OptSegment *s = &o->segs[i];
        BackendSegment b = {s->begin - o->shard_begin, s->len, s->weight_decay, 0};
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

Optimizer *optim_create(Backend *be, Comm *dp, int zero1, const ParamInfo *params, int n_params,
                        size_t n_floats, int tp_rank, size_t bucket_size) {
    Optimizer *o = core_calloc(1, sizeof *o);
    o->be = be;
    o->dp = dp;
    o->zero1 = zero1 && dp->size > 1;
    o->sharding = o->zero1 ? OPTIM_SHARD_OPTIM : OPTIM_NO_SHARD;
    o->n_padded = optim_padded_size(n_floats, dp->size);
    if (o->zero1) {
        o->shard_len = o->n_padded / (size_t)dp->size;
        o->shard_begin = o->shard_len * (size_t)dp->rank;
        o->grad_shard = be->ops->alloc(be, o->shard_len * sizeof(float));
        o->param_shard = be->ops->alloc(be, o->shard_len * sizeof(float));
    } else {
        o->shard_begin = 0;
        o->shard_len = o->n_padded;
    }
    o->dp_rank_counts_norm = o->zero1 || dp->rank == 0;
    size_t per = o->zero1 ? o->shard_len : o->n_padded;  // what one rank reduces in all
    size_t want = bucket_size == 0 ? per
                : o->zero1 ? (bucket_size + (size_t)dp->size - 1) / (size_t)dp->size : bucket_size;
    o->bucket = want < per ? (want + 15) / 16 * 16 : per;
    if (o->zero1 && o->bucket < o->shard_len)
        o->pack = be->ops->alloc(be, (size_t)dp->size * o->bucket * sizeof(float));
    o->m = be->ops->alloc(be, o->shard_len * sizeof(float));
    o->v = be->ops->alloc(be, o->shard_len * sizeof(float));
    build_segments(o, params, n_params, tp_rank);
    build_tables(o);
    return o;
}

void optim_destroy(Optimizer *o) {
    if (!o) return;
    o->be->ops->free(o->be, o->m);
    o->be->ops->free(o->be, o->v);
    o->be->ops->free(o->be, o->grad_shard);
    o->be->ops->free(o->be, o->param_shard);
    o->be->ops->free(o->be, o->pack);
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
    if (o->dp->size == 1) return;  // nothing is reduced
    o->reduce_bf16 = 1;
    size_t n = o->zero1 ? (o->pack || o->zero ? (size_t)o->dp->size * o->bucket : o->n_padded) : o->bucket;
    o->lp = be->ops->alloc(be, n * 2);  // ZeRO-2/3: the largest unit (bucket = its per)
    if (o->zero1) o->lp_out = be->ops->alloc(be, (o->zero ? o->bucket : o->shard_len) * 2);
}

// The average over DP of in (n_ranks * per, fp32), this rank's piece [rank * per, + per)
// into out (per): reduce-scatter in fp32, or in bf16 through the staging buffers.
static void reduce_scatter_avg(Optimizer *o, const float *in, float *out, size_t per) {
    Backend *be = o->be;
    if (!o->reduce_bf16) {
        comm_reduce_scatter(o->dp, in, out, per, COMM_F32, COMM_AVG);
        return;
    }
    be->ops->cast(be, o->lp, BACKEND_BF16, in, BACKEND_F32, per * (size_t)o->dp->size);
    comm_reduce_scatter(o->dp, o->lp, o->lp_out, per, COMM_BF16, COMM_AVG);
    be->ops->cast(be, out, BACKEND_F32, o->lp_out, BACKEND_BF16, per);
}

// ZeRO-1 bucket k: piece [k*b, k*b + len) of every rank's slice, packed in rank order,
// reduce-scattered into the same piece of this rank's gradient slice.
static void reduce_scatter_bucket(Optimizer *o, float *grads, size_t at, size_t len) {
    Backend *be = o->be;
    int n = o->dp->size;
    for (int r = 0; r < n; r++)
        be->ops->copy(be, o->pack + (size_t)r * len, grads + (size_t)r * o->shard_len + at,
                      len * sizeof(float), BACKEND_D2D);
    reduce_scatter_avg(o, o->pack, o->grad_shard + at, len);
}

// Plain DDP: grads (len) averaged over DP in place, in fp32 or bf16.
static void all_reduce_avg(Optimizer *o, float *grads, size_t len) {
    Backend *be = o->be;
    if (!o->reduce_bf16) {
        comm_all_reduce(o->dp, grads, len, COMM_F32, COMM_AVG);
        return;
    }
    be->ops->cast(be, o->lp, BACKEND_BF16, grads, BACKEND_F32, len);
    comm_all_reduce(o->dp, o->lp, len, COMM_BF16, COMM_AVG);
    be->ops->cast(be, grads, BACKEND_F32, o->lp, BACKEND_BF16, len);
}

void optim_reduce_grads(Optimizer *o, float *grads) {
    if (o->zero) return;  // ZeRO-2/3: reduced layer by layer during the backward
    if (o->zero1 && !o->pack) {
        reduce_scatter_avg(o, grads, o->grad_shard, o->shard_len);
    } else if (o->zero1) {
        for (size_t at = 0; at < o->shard_len; at += o->bucket) {
            size_t len = o->shard_len - at < o->bucket ? o->shard_len - at : o->bucket;
            reduce_scatter_bucket(o, grads, at, len);
        }
    } else if (o->dp->size > 1) {
        for (size_t at = 0; at < o->n_padded; at += o->bucket) {
            size_t len = o->n_padded - at < o->bucket ? o->n_padded - at : o->bucket;
            all_reduce_avg(o, grads + at, len);
        }
    }
}

// The gradients of the slice: the reduce-scatter output (ZeRO-1) or the flat buffer.
static const float *slice_grads(const Optimizer *o, const float *grads) {
    return o->zero1 ? o->grad_shard : grads + o->shard_begin;
}

double optim_local_grad_sq(Optimizer *o, const float *grads) {
    if (o->zero) return optim_zero_local_grad_sq(o);
    if (o->n_norm == 0) return 0.0;
    return o->be->ops->sum_squares_multi(o->be, slice_grads(o, grads), o->norm_table, o->n_norm,
                                         o->max_seg_len);
}

void optim_set_weight_copies(Optimizer *o, const GPT *m) {
    if (m->be->act == BACKEND_F32 || o->zero || (o->zero1 && o->dp->size > 1)) return;
    o->copy = m->param_copy;  // every element the forward reads is in the update (slice = all)
}

int optim_update(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale,
                 float *params, const float *grads) {
    Backend *be = o->be;
    if (o->zero) {
        optim_zero_update(o, cfg, lr, grad_scale);
        return 0;
    }
    o->step++;
    void *copy = o->copy ? (char *)o->copy + o->shard_begin * backend_dtype_size(be->act) : NULL;
    if (o->n_segs > 0)
        be->ops->adamw_multi(be, params + o->shard_begin, copy, slice_grads(o, grads), o->m, o->v,
                             o->update_table, o->n_segs, o->max_seg_len, (float)lr,
                             (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps,
                             (float)cfg->weight_decay, (float)grad_scale, (int)o->step);
    if (o->zero1) {
        be->ops->copy(be, o->param_shard, params + o->shard_begin, o->shard_len * sizeof(float),
                      BACKEND_D2D);
        comm_all_gather(o->dp, o->param_shard, params, o->shard_len, COMM_F32);
    }
    return o->copy != NULL;
}

size_t optim_state_bytes(const Optimizer *o) { return 2 * o->shard_len * sizeof(float); }

size_t optim_param_memory_bytes(const Optimizer *o, const GPT *m) {
    size_t copies = m->be->act != BACKEND_F32 ? m->n_alloc * backend_dtype_size(m->be->act) : 0;
    return o->zero ? optim_zero_param_bytes(o) : m->n_floats * sizeof(float) + copies;
}

size_t optim_grad_memory_bytes(const Optimizer *o, const GPT *m) {
    return o->zero ? optim_zero_grad_bytes(o) : m->n_alloc * sizeof(float);
}
