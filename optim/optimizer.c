// optim/optimizer.c: ZeRO-1 / DDP AdamW (see optimizer.h).
#include "optimizer.h"
#include "zero.h"
#include "core/check.h"
#include "core/timer.h"  // defines: core_now
#include "distributed/dist_geometry.h"  // defines: dist_bucket, dist_bucket_floats

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
static void build_segments(Optimizer *o, const ParamInfo *params, int n_params, int tp_rank) {
    o->segs = core_calloc((size_t)n_params + (size_t)o->n_buckets + 1, sizeof(OptSegment));
    if (!o->zero1) {
        add_segments(o, params, n_params, tp_rank, 0, o->n_padded, 0);
        return;
    }
    for (int k = 0; k < o->n_buckets; k++) {
        const OptBucket *b = &o->buckets[k];
        add_segments(o, params, n_params, tp_rank, b->start + (size_t)o->dp->rank * b->per, b->per, b->at);
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

// The bucket table (distributed/dist_geometry.h): `o->bucket` floats of the slice (ZeRO-1:
// per rank) per bucket.
static void build_buckets(Optimizer *o) {
    size_t per = o->zero1 ? o->shard_len : o->n_padded;
    o->n_buckets = dist_num_buckets(per, o->bucket);
    o->buckets = core_calloc((size_t)o->n_buckets, sizeof *o->buckets);
    for (int k = 0; k < o->n_buckets; k++) {
        DistBucket g = dist_bucket(per, o->bucket, o->dp->size, o->zero1, k);
        OptBucket *b = &o->buckets[k];
        b->start = g.start;
        b->len = g.len;
        b->per = g.per;
        b->at = g.at;
    }
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
    o->n_padded = dist_padded_size(n_floats, dp->size);
    if (o->zero1) {
        o->shard_len = o->n_padded / (size_t)dp->size;
        o->shard_begin = 0;  // the shard is this rank's piece of each bucket (build_buckets)
        o->grad_shard = be->ops->alloc(be, o->shard_len * sizeof(float));
        o->param_shard = be->ops->alloc(be, o->shard_len * sizeof(float));
    } else {
        o->shard_begin = 0;
        o->shard_len = o->n_padded;
    }
    o->dp_rank_counts_norm = o->zero1 || dp->rank == 0;
    size_t per = o->zero1 ? o->shard_len : o->n_padded;  // what one rank reduces in all
    o->bucket = dist_bucket_floats(per, bucket_size, dp->size, o->zero1);
    if (dp->size > 1) build_buckets(o);
    o->m = be->ops->alloc(be, o->shard_len * sizeof(float));
    o->v = be->ops->alloc(be, o->shard_len * sizeof(float));
    build_segments(o, params, n_params, tp_rank);
    build_tables(o);
    return o;
}

void optim_destroy(Optimizer *o) {
    if (!o) return;
    optim_gather_destroy(o);  // (waits for the gathers in flight first)
    o->be->ops->free(o->be, o->m);
    o->be->ops->free(o->be, o->v);
    o->be->ops->free(o->be, o->grad_shard);
    o->be->ops->free(o->be, o->param_shard);
    optim_overlap_destroy(o);
    free(o->buckets);
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
    if (o->zero) {  // ZeRO-2/3: the largest unit (bucket = its per)
        o->lp = be->ops->alloc(be, (size_t)o->dp->size * o->bucket * 2);
        o->lp_out = be->ops->alloc(be, o->bucket * 2);
        return;
    }
    o->lp = be->ops->alloc(be, o->n_padded * 2);  // each bucket stages at its own place
    if (o->zero1) o->lp_out = be->ops->alloc(be, o->shard_len * 2);
}

// bf16 staging of bucket b: its range of lp, its piece of lp_out.
static uint16_t *lp_in(const Optimizer *o, const OptBucket *b) { return (uint16_t *)o->lp + b->start; }
static uint16_t *lp_out(const Optimizer *o, const OptBucket *b) { return (uint16_t *)o->lp_out + b->at; }

// The bucket's reduction is complete: bf16 results widened back to fp32.
static void bucket_done(Optimizer *o, float *grads, OptBucket *b) {
    Backend *be = o->be;
    b->done = 1;
    b->t1 = core_now();
    if (!o->reduce_bf16) return;
    if (o->zero1) be->ops->cast(be, o->grad_shard + b->at, BACKEND_F32, lp_out(o, b), BACKEND_BF16, b->per);
    else be->ops->cast(be, grads + b->start, BACKEND_F32, lp_in(o, b), BACKEND_BF16, b->len);
}

// Bucket k averaged over DP: ZeRO-1 reduce-scattered into its piece of grad_shard, DDP
// all-reduced in place; in fp32, or in bf16 through the staging buffers. Nonblocking with
// --overlap-grad-reduce, else blocking (and done on return). Both run the same algorithm
// (MPI: the blocking calls are MPI_Iallreduce / MPI_Ireduce_scatter_block + wait; NCCL: the
// same collective on another stream), so the results are bitwise the same.
void optim_bucket_start(Optimizer *o, float *grads, int k) {
    Backend *be = o->be;
    OptBucket *b = &o->buckets[k];
    int bf = o->reduce_bf16;
    void *in = bf ? (void *)lp_in(o, b) : (void *)(grads + b->start);
    void *out = o->zero1 ? (bf ? (void *)lp_out(o, b) : (void *)(o->grad_shard + b->at)) : in;
    CommDtype t = bf ? COMM_BF16 : COMM_F32;
    b->started = 1;
    b->done = 0;
    b->t0 = core_now();
    if (bf) be->ops->cast(be, lp_in(o, b), BACKEND_BF16, grads + b->start, BACKEND_F32, b->len);
    if (o->ov && o->zero1) comm_ireduce_scatter(o->dp, in, out, b->per, t, COMM_AVG, &b->req);
    else if (o->ov) comm_iall_reduce(o->dp, in, b->len, t, COMM_AVG, &b->req);
    else if (o->zero1) comm_reduce_scatter(o->dp, in, out, b->per, t, COMM_AVG);
    else comm_all_reduce(o->dp, in, b->len, t, COMM_AVG);
    if (!o->ov) bucket_done(o, grads, b);
}

void optim_bucket_finish(Optimizer *o, float *grads, int k) {
    OptBucket *b = &o->buckets[k];
    if (b->done) return;
    comm_wait(o->dp, &b->req);
    bucket_done(o, grads, b);
}

int optim_bucket_poll(Optimizer *o, float *grads, int k) {
    OptBucket *b = &o->buckets[k];
    if (!b->done && comm_test(o->dp, &b->req)) bucket_done(o, grads, b);
    return b->done;
}

void optim_reduce_grads(Optimizer *o, float *grads) {
    if (o->zero || o->dp->size == 1) return;  // ZeRO-2/3: reduced layer by layer in the backward
    if (o->ov) {
        optim_overlap_finish(o, grads);
        return;
    }
    for (int k = 0; k < o->n_buckets; k++) optim_bucket_start(o, grads, k);  // blocking
}

// The gradients of the slice: the reduce-scatter output (ZeRO-1) or the flat buffer.
static const float *slice_grads(const Optimizer *o, const float *grads) {
    return o->zero1 ? o->grad_shard : grads;
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
    optim_gather_settle(o);  // --overlap-param-gather: the forward has waited for all already
    size_t r = (size_t)o->dp->rank;
    for (int k = 0; o->zero1 && k < o->n_buckets; k++) {  // ZeRO-1: this rank's pieces, packed
        const OptBucket *b = &o->buckets[k];
        be->ops->copy(be, o->param_shard + b->at, params + b->start + r * b->per,
                      b->per * sizeof(float), BACKEND_D2D);
    }
    if (o->n_segs > 0)
        be->ops->adamw_multi(be, o->zero1 ? o->param_shard : params, o->copy, slice_grads(o, grads),
                             o->m, o->v, o->update_table, o->n_segs, o->max_seg_len, (float)lr,
                             (float)cfg->beta1, (float)cfg->beta2, (float)cfg->eps,
                             (float)cfg->weight_decay, (float)grad_scale, (int)o->step);
    if (o->gather) {  // --overlap-param-gather: each bucket waited for by the next forward,
        optim_gather_start(o);  // which then refreshes its weight copies
        return 1;
    }
    for (int k = 0; o->zero1 && k < o->n_buckets; k++) {  // each bucket's range, gathered
        const OptBucket *b = &o->buckets[k];
        comm_all_gather(o->dp, o->param_shard + b->at, params + b->start, b->per, COMM_F32);
    }
    return o->copy != NULL;
}

void optim_update_model(Optimizer *o, const AdamWConfig *cfg, double lr, double grad_scale, GPT *m) {
    if (!optim_update(o, cfg, lr, grad_scale, m->param_mem, m->grad_mem)) gpt_refresh_weight_copies(m);
}

size_t optim_state_bytes(const Optimizer *o) { return 2 * o->shard_len * sizeof(float); }

size_t optim_param_memory_bytes(const Optimizer *o, const GPT *m) {
    size_t copies = m->be->act != BACKEND_F32 ? m->n_alloc * backend_dtype_size(m->be->act) : 0;
    return o->zero ? optim_zero_param_bytes(o) : m->n_floats * sizeof(float) + copies;
}

size_t optim_grad_memory_bytes(const Optimizer *o, const GPT *m) {
    return o->zero ? optim_zero_grad_bytes(o) : m->n_alloc * sizeof(float);
}

// The range [lo, hi) of the flat buffer that layer l's tensors occupy.
static void layer_range(const GPT *m, int l, size_t *lo, size_t *hi) {
    const ParamInfo *p = &m->params[m->block_param0 + m->block_nparams * l];
    *lo = (size_t)-1;
    *hi = 0;
    for (int j = 0; j < m->block_nparams; j++) {
        if (p[j].offset < *lo) *lo = p[j].offset;
        if (p[j].offset + p[j].numel > *hi) *hi = p[j].offset + p[j].numel;
    }
}

void optim_bucket_layers(const Optimizer *o, const GPT *m, int *first, int *last, int *layers_in,
                         int *edge) {
    for (int l = 0; l < m->n_layers; l++) first[l] = last[l] = -1;
    for (int k = 0; k < o->n_buckets; k++) {
        const OptBucket *b = &o->buckets[k];
        size_t covered = 0;
        int n = 0;
        for (int l = 0; l < m->n_layers; l++) {
            size_t lo, hi;
            layer_range(m, l, &lo, &hi);
            size_t a = lo > b->start ? lo : b->start, e = hi < b->start + b->len ? hi : b->start + b->len;
            if (a >= e) continue;
            n++;
            covered += e - a;
            if (first[l] < 0) first[l] = k;
            last[l] = k;
        }
        if (layers_in) layers_in[k] = n;
        if (edge) edge[k] = covered < b->len;
    }
}
