// distributed/dist_sync.c: the data-parallel sync engine: set-up, the buckets' gradient and
// parameter sync, what the optimizer and the log read (see dist_sync.h; the model hook:
// dist_sync_hook.c; ZeRO-2/3's units: dist_sync_units.c, dist_sync_queue.c).
#include "dist_sync_parts.h"
#include "dist_geometry.h"  // defines: dist_bucket, dist_bucket_floats, dist_num_buckets
#include "core/check.h"
#include "core/timer.h"  // defines: core_now

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The buckets of region [start, start + len) of the flat buffer over group c (averages
// times scale), this rank's pieces from `at` in the shard: appended to s->buckets.
static void add_region(DistSync *s, Comm *c, size_t start, size_t len, size_t at,
                       size_t bucket_size, float scale) {
    size_t per = s->sharded ? len / (size_t)c->size : len;
    size_t bucket = dist_bucket_floats(per, bucket_size, c->size, s->sharded);
    int n = dist_num_buckets(per, bucket);
    if (bucket > s->bucket) s->bucket = bucket;
    s->buckets = realloc(s->buckets, ((size_t)s->n_buckets + (size_t)n + 1) * sizeof *s->buckets);
    if (!s->buckets) core_fatal("out of host memory for %d buckets", s->n_buckets + n);
    for (int k = 0; k < n; k++) {
        DistBucket g = dist_bucket(per, bucket, c->size, s->sharded, k);
        s->buckets[s->n_buckets++] = (DistSyncBucket){.start = start + g.start, .len = g.len,
                                                      .per = g.per, .at = at + g.at, .own = g.per,
                                                      .comm = c, .scale = scale};
    }
    memset(&s->buckets[s->n_buckets], 0, sizeof *s->buckets);
}

Comm *dist_sync_param_comm(const DistSync *s, const ParamInfo *p) {
    return s->ecomm && p->offset >= s->m->expert_offset ? s->ecomm : s->comm;
}

DistSync *dist_sync_create(Backend *be, Comm *comm, Comm *ecomm, GPT *m, int stage,
                           size_t bucket_size, Comm *tp_sp) {
    DistSync *s = core_calloc(1, sizeof *s);
    s->be = be;
    s->comm = comm;
    s->ecomm = m->expert_offset < m->n_alloc ? ecomm : NULL;
    s->tp_sp = m->sp ? tp_sp : NULL;
    s->m = m;
    s->stage = stage == 1 && comm->size == 1 ? 0 : stage;
    s->sharded = s->stage > 0;
    if (s->stage >= 2) {
        dist_sync_units_init(s);
    } else {  // the dense region [0, e0) over comm, the expert region [e0, n_padded) over ecomm
        s->n_padded = m->n_alloc;  // (a multiple of 16 x each region's group: gpt_create's pad)
        if (m->n_alloc % dist_pad_multiple(comm->size) || (s->ecomm && (m->n_alloc - m->expert_offset) %
                                                           dist_pad_multiple(s->ecomm->size)))
            core_fatal("flat buffer of %zu floats (experts from %zu) not padded for groups of %d and %d",
                       m->n_alloc, m->expert_offset, comm->size, s->ecomm ? s->ecomm->size : 0);
        size_t e0 = s->ecomm ? m->expert_offset : s->n_padded;
        size_t d_shard = s->sharded ? e0 / (size_t)comm->size : e0;
        s->shard_len = dist_shard_len(s->n_padded, e0, comm->size, s->ecomm ? s->ecomm->size : 0,
                                      s->sharded);
        if (s->sharded) {
            s->grad_shard = be->ops->alloc(be, s->shard_len * sizeof(float));
            s->param_shard = be->ops->alloc(be, s->shard_len * sizeof(float));
        }
        s->buckets = core_calloc(1, sizeof *s->buckets);
        s->bucket = dist_bucket_floats(d_shard, bucket_size, comm->size, s->sharded);
        if (comm->size > 1) add_region(s, comm, 0, e0, 0, bucket_size, 1.0f);
        if (s->ecomm)
            add_region(s, s->ecomm, e0, s->n_padded - e0, d_shard, bucket_size,
                       (float)s->ecomm->size / (float)comm->size);
    }
    dist_sync_hook_init(s);
    return s;
}

void dist_sync_destroy(DistSync *s) {
    if (!s) return;
    dist_sync_finish_param_sync(s);
    Backend *be = s->be;
    if (s->stage >= 2) dist_sync_units_free(s);
    be->ops->free(be, s->grad_shard);
    be->ops->free(be, s->param_shard);
    be->ops->free(be, s->lp);
    be->ops->free(be, s->lp_out);
    free(s->buckets);
    free(s->first);
    free(s->last);
    free(s->pending0);
    free(s->edge);
    free(s->sp_done);
    free(s->order);
    free(s);
}

size_t dist_sync_unit_staging(const DistSync *s) {
    size_t dp = (size_t)s->comm->size * s->bucket;
    return s->layer_len > dp ? s->layer_len : dp;
}

void dist_sync_set_reduce_bf16(DistSync *s) {
    Backend *be = s->be;
    if (s->comm->size == 1 && !s->ecomm) return;  // nothing is reduced
    s->reduce_bf16 = 1;
    if (s->stage >= 2) {  // the largest unit (bucket = its per)
        s->lp = be->ops->alloc(be, dist_sync_unit_staging(s) * 2);
        s->lp_out = be->ops->alloc(be, s->bucket * 2);
        return;
    }
    s->lp = be->ops->alloc(be, s->n_padded * 2);  // each bucket stages at its own place
    if (s->sharded) s->lp_out = be->ops->alloc(be, s->shard_len * 2);
}

// bf16 staging of bucket b: its range of lp, its piece of lp_out.
static uint16_t *lp_in(const DistSync *s, const DistSyncBucket *b) { return (uint16_t *)s->lp + b->start; }
static uint16_t *lp_out(const DistSync *s, const DistSyncBucket *b) { return (uint16_t *)s->lp_out + b->at; }

// The bucket's reduction is complete: bf16 results widened back to fp32.
static void grad_done(DistSync *s, DistSyncBucket *b) {
    Backend *be = s->be;
    b->done = 1;
    b->t1 = core_now();
    float *g = s->sharded ? s->grad_shard + b->at : s->m->grad_mem + b->start;
    size_t n = s->sharded ? b->per : b->len;
    if (s->reduce_bf16 && s->sharded) be->ops->cast(be, g, BACKEND_F32, lp_out(s, b), BACKEND_BF16, n);
    else if (s->reduce_bf16) be->ops->cast(be, g, BACKEND_F32, lp_in(s, b), BACKEND_BF16, n);
    if (b->scale != 1.0f) be->ops->scale_f32(be, g, b->scale, n);
    if (s->grad_ready) s->grad_ready(s->grad_ready_ctx, (int)(b - s->buckets));
}

void dist_sync_start_grad_sync(DistSync *s, int k) {
    Backend *be = s->be;
    DistSyncBucket *b = &s->buckets[k];
    float *grads = s->m->grad_mem;
    int bf = s->reduce_bf16, ov = s->overlap_grad;
    void *in = bf ? (void *)lp_in(s, b) : (void *)(grads + b->start);
    void *out = s->sharded ? (bf ? (void *)lp_out(s, b) : (void *)(s->grad_shard + b->at)) : in;
    CommDtype t = bf ? COMM_BF16 : COMM_F32;
    b->started = 1;
    b->done = 0;
    b->t0 = core_now();
    s->order[s->n_started++] = k;
    if (bf) be->ops->cast(be, lp_in(s, b), BACKEND_BF16, grads + b->start, BACKEND_F32, b->len);
    if (ov && s->sharded) comm_ireduce_scatter(b->comm, in, out, b->per, t, COMM_AVG, &b->req);
    else if (ov) comm_iall_reduce(b->comm, in, b->len, t, COMM_AVG, &b->req);
    else if (s->sharded) comm_reduce_scatter(b->comm, in, out, b->per, t, COMM_AVG);
    else comm_all_reduce(b->comm, in, b->len, t, COMM_AVG);
    if (!ov) grad_done(s, b);
}

// Polls the reductions in flight (explicit progress: MPI advances nonblocking collectives
// only inside MPI calls). Never fails.
void dist_sync_poll_grads(DistSync *s) {
    for (int i = 0; i < s->n_started; i++) {
        DistSyncBucket *b = &s->buckets[s->order[i]];
        if (!b->done && comm_test(b->comm, &b->req)) grad_done(s, b);
    }
}

void dist_sync_finish_grad_sync(DistSync *s) {
    if (s->stage >= 2) {  // reduced unit by unit in the backward
        dist_sync_unit_settle(s);
        dist_sync_queue_drain(s);
        return;
    }
    for (int k = 0; k < s->n_buckets; k++)
        if (!s->buckets[k].started) dist_sync_start_grad_sync(s, k);
    for (int i = 0; i < s->n_started; i++) {
        DistSyncBucket *b = &s->buckets[s->order[i]];
        if (b->done) continue;
        comm_wait(b->comm, &b->req);
        grad_done(s, b);
    }
}

float *dist_sync_shard_grads(DistSync *s) { return s->sharded ? s->grad_shard : s->m->grad_mem; }

float *dist_sync_shard_params(DistSync *s) {
    Backend *be = s->be;
    dist_sync_finish_param_sync(s);  // --overlap-param-gather: the forward has waited for all already
    if (s->stage >= 2) {  // (nothing expected in flight: the masters change next)
        dist_sync_finish_grad_sync(s);
        s->prefetched = -1;
        return NULL;
    }
    if (!s->sharded) return s->m->param_mem;
    for (int k = 0; k < s->n_buckets; k++) {  // this rank's pieces, packed
        const DistSyncBucket *b = &s->buckets[k];
        size_t r = (size_t)b->comm->rank;
        be->ops->copy(be, s->param_shard + b->at, s->m->param_mem + b->start + r * b->per,
                      b->per * sizeof(float), BACKEND_D2D);
    }
    return s->param_shard;
}

float *dist_sync_unit_params(DistSync *s, int k) {
    const DistSyncBucket *u = &s->buckets[k];
    return s->master ? s->master + u->at : s->m->param_mem + u->start + (size_t)u->comm->rank * u->per;
}

int dist_sync_start_param_sync(DistSync *s) {
    if (s->stage >= 2) {
        dist_sync_units_param_sync(s);
        return 0;
    }
    if (!s->sharded) return 0;
    for (int k = 0; k < s->n_buckets; k++) {  // each bucket's range, gathered
        DistSyncBucket *b = &s->buckets[k];
        float *dst = s->m->param_mem + b->start;
        if (!s->overlap_param) {
            comm_all_gather(b->comm, s->param_shard + b->at, dst, b->per, COMM_F32);
            continue;
        }
        b->gather = 1;
        b->g0 = core_now();
        s->n_flight++;
        comm_iall_gather(b->comm, s->param_shard + b->at, dst, b->per, COMM_F32, &b->greq);
    }
    return s->overlap_param;
}

double dist_sync_take_exposed(DistSync *s) {
    double e = s->exposed_s;
    s->exposed_s = 0.0;
    return e;
}

int dist_sync_take_param_span(DistSync *s, int k, double *t0, double *t1) {
    DistSyncBucket *b = &s->buckets[k];
    if (b->gather != 2) return 0;
    b->gather = 0;
    *t0 = b->g0;
    *t1 = b->g1;
    return 1;
}

double dist_sync_take_hook_wait(DistSync *s) {
    double w = s->hook_wait_s;
    s->hook_wait_s = 0.0;
    return w;
}

int dist_sync_take_spans(DistSync *s, const DistSyncSpan **spans) {
    int n = s->n_spans;
    *spans = s->spans;
    s->n_spans = 0;
    return n;
}

// The sizes dist_state_bytes turns into the memory the engine and the optimizer hold.
static DistStateSizes state_sizes(const DistSync *s) {
    DistStateSizes z = {s->stage, s->m->n_floats, s->m->n_alloc, s->shard_len, s->edge_len,
                        s->layer_len, s->bucket, s->shared, backend_dtype_size(s->be->act)};
    return z;
}

DistStateBytes dist_sync_state_bytes(const DistSync *s) {
    DistStateSizes z = state_sizes(s);
    return dist_state_bytes(&z);
}

size_t dist_sync_grad_bytes(const DistSync *s) {
    return dist_sync_state_bytes(s).grads + (s->stage >= 2 ? s->ov_bytes : 0);
}

// (--offload-params: the master shard is in host memory, the staging buffer on the device)
size_t dist_sync_param_bytes(const DistSync *s) {
    size_t b = dist_sync_state_bytes(s).params;
    return s->host_params ? b - s->shard_len * sizeof(float) + (s->pstage_len + 1) * sizeof(float) : b;
}

size_t dist_sync_edge_shard_bytes(const DistSync *s) {
    size_t n = 0;
    for (int k = 0; k < s->n_edge; k++) n += s->buckets[k].per;
    return n * sizeof(float);
}
