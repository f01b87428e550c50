// tests/distributed/test_dist_sync.c: the sync engine on its own, under mpiexec -n 2 and -n 4
// (DP = the world; CPU backend, a tiny GPT's buffers; the model's hook events played by hand,
// the gradients written where the engine points the model). For each strategy (DDP, ZeRO-1,
// ZeRO-2, ZeRO-3), bucket size and overlap (off, on): after finish_grad_sync every rank's slice
// equals the average over the ranks of their gradients (ZeRO-2/3: summed over 2 micro-batches)
// for exactly the ranges distributed/dist_geometry.h gives (the values are multiples of 1/8,
// so the averages are exact); after the parameter sync (blocking, and --overlap-param-gather /
// ZeRO-3's gathers at use) every rank holds every rank's updated piece.
#include "distributed/dist_sync.h"
#include "distributed/dist_geometry.h"
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"

#include <mpi.h>
#include <stdlib.h>

static const GPTConfig CFG = {.num_layers = 3, .hidden_size = 16, .num_heads = 2,
                              .ffn_hidden_size = 64, .seq_length = 8,
                              .max_position_embeddings = 8, .vocab_size = 50,
                              .vocab_divisible_by = 16};

// Rank r's gradient at flat index i, and the average over dp ranks (exact).
static float grad_of(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 64) - 32) / 8.0f; }
static float avg_of(int dp, size_t i) {
    double s = 0.0;
    for (int r = 0; r < dp; r++) s += grad_of(r, i);
    return (float)(s / dp);
}

// The hook events of one micro-batch's backward (gpt.c's order).
static void play_backward(GPT *m) {
    if (!m->hook.fn) return;
    m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_BEGIN, GPT_UNIT_EDGE);
    for (int l = m->n_layers - 1; l >= 0; l--) {
        m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_BEGIN, l);
        m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_END, l);
    }
    m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_END, GPT_UNIT_EDGE);
}

static void check(Backend *be, Comm *dp, int sharded, size_t bucket_size, int overlap) {
    GPT *m = gpt_create(&CFG, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                    .n_slots = 1, .seed = 7, .pad_multiple = dist_pad_multiple(dp->size)});
    DistSync *s = dist_sync_create(be, dp, NULL, m, sharded, bucket_size, NULL);
    dist_sync_enable_overlap(s, overlap, overlap && sharded, 2);
    int r = dp->rank, n_micro = 2;
    size_t n = s->n_padded;
    EXPECT(n == m->n_alloc, "padded %zu vs model %zu", n, m->n_alloc);
    EXPECT(s->sharded == sharded && s->shard_len == (sharded ? n / (size_t)dp->size : n), "shard %zu", s->shard_len);
    EXPECT_EQ_INT(s->n_buckets, dist_num_buckets(s->shard_len, s->bucket));
    for (int step = 0; step < 2; step++) {
        dist_sync_begin_step(s, n_micro);
        for (size_t i = 0; i < n; i++) m->grad_mem[i] = grad_of(r, i);
        for (int mb = 0; mb < n_micro; mb++) play_backward(m);
        if (overlap)  // every bucket without edge tensors or padding started in the backward
            for (int k = 0; k < s->n_buckets; k++) EXPECT(s->buckets[k].started || s->edge[k], "bucket %d", k);
        dist_sync_model_grads(s, NULL);
        dist_sync_finish_grad_sync(s);
        EXPECT_EQ_INT(s->n_started, s->n_buckets);
        const float *g = dist_sync_shard_grads(s);
        int bad = 0;
        for (int k = 0; k < s->n_buckets; k++) {
            DistBucket b = dist_bucket(s->shard_len, s->bucket, dp->size, sharded, k);
            EXPECT(b.start == s->buckets[k].start && b.at == s->buckets[k].at, "bucket %d", k);
            EXPECT(s->buckets[k].done, "bucket %d not done", k);
            size_t lo = sharded ? b.start + (size_t)r * b.per : b.start;
            for (size_t j = 0; j < b.per; j++) bad += g[b.at + j] != avg_of(dp->size, lo + j);
        }
        EXPECT(bad == 0, "%d wrong gradients (sharded %d, bucket %zu, overlap %d)", bad, sharded,
               bucket_size, overlap);
    }
    // parameters: the slice set to a function of the global index, synced back to everyone
    for (size_t i = 0; i < n; i++) m->param_mem[i] = -1.0f;
    float *p = dist_sync_shard_params(s);
    for (int k = 0; k < s->n_buckets; k++) {
        const DistSyncBucket *b = &s->buckets[k];
        size_t lo = sharded ? b->start + (size_t)r * b->per : b->start;
        for (size_t j = 0; j < b->per; j++) p[b->at + j] = (float)(lo + j) / 4.0f;
    }
    EXPECT_EQ_INT(dist_sync_start_param_sync(s), overlap && sharded);
    if (overlap && sharded) {  // the first forward waits for the first layer's buckets
        m->hook.fn(m->hook.ctx, GPT_HOOK_FORWARD, GPT_UNIT_EDGE);
        m->hook.fn(m->hook.ctx, GPT_HOOK_FORWARD, 0);
        for (int k = s->first[0]; k >= 0 && k <= s->last[0]; k++) EXPECT(s->buckets[k].gather == 2, "gather %d", k);
    }
    dist_sync_finish_param_sync(s);
    int bad = 0;
    for (size_t i = 0; i < n && s->n_buckets; i++) bad += m->param_mem[i] != (float)i / 4.0f;
    EXPECT(bad == 0, "%d wrong parameters (sharded %d, bucket %zu, overlap %d)", bad, sharded,
           bucket_size, overlap);
    dist_sync_destroy(s);
    gpt_destroy(m);
}

// ZeRO-2/3 (stage): one backward of the units, each unit's gradients written into the
// transient buffer the engine has pointed the model at (right after its BACKWARD_BEGIN).
static void units_backward(DistSync *s, int r) {
    GPT *m = s->m;
    m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_BEGIN, GPT_UNIT_EDGE);
    for (int k = 0; k < s->n_edge; k++)
        for (size_t j = 0; j < s->buckets[k].len; j++)
            s->edge_grads[s->buckets[k].buf + j] = grad_of(r, s->buckets[k].start + j);
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const DistSyncBucket *u = &s->buckets[s->n_edge + l];
        m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_BEGIN, l);
        for (size_t j = 0; j < u->len; j++) s->layer_grads[j] = grad_of(r, u->start + j);
        m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_END, l);
    }
    m->hook.fn(m->hook.ctx, GPT_HOOK_BACKWARD_END, GPT_UNIT_EDGE);
}

static void check_units(Backend *be, Comm *dp, int stage, int overlap) {
    GPT *m = gpt_create(&CFG, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                    .n_slots = 1, .seed = 7, .pad_multiple = dist_pad_multiple(dp->size)});
    DistSync *s = dist_sync_create(be, dp, NULL, m, stage, 0, NULL);
    dist_sync_enable_overlap(s, overlap && stage == 2, overlap && stage == 3, 2);
    int r = dp->rank, n_micro = 2;
    EXPECT_EQ_INT(s->n_buckets, s->n_edge + m->n_layers);
    EXPECT(m->grad_mem == NULL && (stage == 2) == (m->param_mem != NULL), "flat buffers (stage %d)", stage);
    for (int step = 0; step < 2; step++) {
        dist_sync_begin_step(s, n_micro);
        for (int mb = 0; mb < n_micro; mb++) units_backward(s, r);
        dist_sync_model_grads(s, NULL);
        dist_sync_finish_grad_sync(s);
        int bad = 0;
        for (int k = 0; k < s->n_buckets; k++) {
            const DistSyncBucket *u = &s->buckets[k];
            DistUnitPiece p = dist_unit_piece(u->len, dp->size, r);
            EXPECT(u->per == p.per && u->own == p.own, "unit %d", k);
            for (size_t j = 0; j < u->own; j++)
                bad += s->grad_shard[u->at + j] != 2.0f * avg_of(dp->size, u->start + p.lo + j);
        }
        EXPECT(bad == 0, "%d wrong gradients (stage %d, overlap %d)", bad, stage, overlap);
    }
    EXPECT(dist_sync_shard_params(s) == NULL, "stage %d: per unit", stage);
    for (int k = 0; k < s->n_buckets; k++) {  // the owned parameters, as the update would set them
        const DistSyncBucket *u = &s->buckets[k];
        float *p = dist_sync_unit_params(s, k);
        for (size_t j = 0; j < u->own; j++) p[j] = (float)(u->start + (size_t)r * u->per + j) / 4.0f;
    }
    EXPECT_EQ_INT(dist_sync_start_param_sync(s), 0);
    int bad = 0;
    if (stage == 2)
        for (int k = 0; k < s->n_buckets; k++)
            for (size_t j = 0; j < s->buckets[k].len; j++)
                bad += m->param_mem[s->buckets[k].start + j] != (float)(s->buckets[k].start + j) / 4.0f;
    else  // ZeRO-3: each unit gathered when the forward asks for it
        for (int l = -1; l < m->n_layers; l++) {
            m->hook.fn(m->hook.ctx, GPT_HOOK_FORWARD, l);
            for (int k = l < 0 ? 0 : s->n_edge + l; k < (l < 0 ? s->n_edge : s->n_edge + l + 1); k++) {
                const DistSyncBucket *u = &s->buckets[k];
                const float *got = l < 0 ? (const float *)s->edge_params + u->buf : (const float *)s->layer_params[l % 2];
                for (size_t j = 0; j < u->len; j++) bad += got[j] != (float)(u->start + j) / 4.0f;
            }
        }
    EXPECT(bad == 0, "%d wrong parameters (stage %d, overlap %d)", bad, stage, overlap);
    dist_sync_destroy(s);
    gpt_destroy(m);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 1, .cp = 1, .pp = 1, .ep = 1, .etp = 1},
                                  PGRID_COMM_MPI, NULL, 60.0);  // DP = the world
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    for (int sharded = 0; sharded < 2; sharded++)
        for (int overlap = 0; overlap < 2; overlap++) {
            check(be, g->dp, sharded, 0, overlap);
            check(be, g->dp, sharded, 3000, overlap);
            check_units(be, g->dp, 2 + sharded, overlap);
        }
    int fails = test_failures_, me = g->coord.rank, size = g->dp->size;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    backend_destroy(be);
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    if (me == 0) printf("test_dist_sync (DP %d): %s\n", size, fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
