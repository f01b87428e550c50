// distributed/dist_geometry.c: bucket and shard geometry (see dist_geometry.h).
#include "dist_geometry.h"

#include <math.h>  // defines: ceil

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

size_t dist_pad_multiple(int dp) { return (size_t)dp * 16; }

int dist_pad_ranks(int dp, int edp) {
    int a = dp, b = edp > 0 ? edp : dp;
    while (b) {
        int r = a % b;
        a = b, b = r;
    }
    return dp / a * (edp > 0 ? edp : dp);
}

size_t dist_padded_size(size_t n, int dp) {
    size_t q = dist_pad_multiple(dp);
    return (n + q - 1) / q * q;
}

size_t dist_bucket_floats(size_t per, size_t bucket_size, int dp, int sharded) {
    size_t want = bucket_size == 0 ? per
                : sharded ? (bucket_size + (size_t)dp - 1) / (size_t)dp : bucket_size;
    return want < per ? round16(want) : per;
}

int dist_num_buckets(size_t per, size_t bucket) {
    return bucket == 0 ? 0 : (int)((per + bucket - 1) / bucket);
}

DistBucket dist_bucket(size_t per, size_t bucket, int dp, int sharded, int k) {
    size_t n = sharded ? (size_t)dp : 1;
    size_t at = (size_t)k * bucket, len = per - at < bucket ? per - at : bucket;
    DistBucket b = {.start = n * at, .len = n * len, .per = len, .at = at};
    return b;
}

DistUnitPiece dist_unit_piece(size_t len, int dp, int dp_rank) {
    DistUnitPiece p;
    p.per = round16((len + (size_t)dp - 1) / (size_t)dp);
    p.lo = (size_t)dp_rank * p.per;
    p.own = len > p.lo ? (len - p.lo < p.per ? len - p.lo : p.per) : 0;
    return p;
}

// The range [*lo, *hi) of the tensors t[b0 .. b1) in region r (0: before expert_offset, 1:
// from it); *lo >= *hi when none.
static void region_range(const ParamInfo *t, int b0, int b1, size_t expert_offset, int r,
                         size_t *lo, size_t *hi) {
    *lo = (size_t)-1;
    *hi = 0;
    for (int j = b0; j < b1; j++) {
        if ((t[j].offset >= expert_offset) != r) continue;
        if (t[j].offset < *lo) *lo = t[j].offset;
        if (t[j].offset + t[j].numel > *hi) *hi = t[j].offset + t[j].numel;
    }
}

static DistUnit unit_of(size_t start, size_t len, int size, int rank, int param, int expert) {
    DistUnitPiece p = dist_unit_piece(len, size, rank);
    return (DistUnit){.start = start, .len = len, .per = p.per, .own = p.own, .param = param,
                      .expert = expert};
}

// Places the units in the shard and the transient buffers and sums them up.
static void place_units(DistUnit *u, int n_edge, int n_layers, int dp, int edp, DistUnitTotals *t) {
    size_t at = 0, buf = 0;
    for (int k = 0; k < t->n_units; k++) {
        u[k].at = at;
        at += u[k].per;
        if (u[k].per > t->bucket) t->bucket = u[k].per;
        size_t full = (size_t)(u[k].expert ? edp : dp) * u[k].per;
        if (k < n_edge) {
            u[k].buf = buf;
            u[k].out_at = buf / (size_t)dp;
            buf += full;
        } else if (u[k].expert) {  // after its layer's dense part in the buffers
            const DistUnit *d = &u[k - n_layers];
            u[k].buf = (size_t)dp * d->per;
            u[k].out_at = d->per;
            if (u[k].buf + full > t->layer_len) t->layer_len = u[k].buf + full;
            if (d->per + u[k].per > t->bucket) t->bucket = d->per + u[k].per;
        } else if (full > t->layer_len) {
            t->layer_len = full;
        }
    }
    t->edge_len = buf;
    t->shard_len = at;
}

DistUnitTotals dist_units_layout(const ParamInfo *t, int n, const int *block, int n_layers,
                                 size_t expert_offset, size_t n_alloc, int dp, int dp_rank,
                                 int edp, int edp_rank, DistUnit *u) {
    DistUnitTotals tot = {0};
    int k = 0;
    for (int i = 0; i < n; i++)  // the edge: outside [wte, wpe] layers [lnf, wte]
        if (i < block[0] || i >= block[n_layers]) u[k++] = unit_of(t[i].offset, t[i].numel, dp, dp_rank, i, 0);
    tot.n_edge = k;
    for (int r = 0; r < (edp > 0 ? 2 : 1); r++)
        for (int l = 0; l < n_layers; l++) {
            size_t lo, hi;
            region_range(t, block[l], block[l + 1], edp > 0 ? expert_offset : n_alloc, r, &lo, &hi);
            if (lo >= hi) lo = hi = r ? n_alloc : 0;  // (a dense layer's empty expert unit)
            u[k++] = r ? unit_of(lo, hi - lo, edp, edp_rank, -1, 1) : unit_of(lo, hi - lo, dp, dp_rank, -1, 0);
        }
    tot.n_units = k;
    place_units(u, tot.n_edge, n_layers, dp, edp, &tot);
    return tot;
}

size_t dist_shard_len(size_t n_alloc, size_t expert_offset, int dp, int edp, int sharded) {
    size_t e0 = edp > 0 ? expert_offset : n_alloc;
    if (!sharded) return n_alloc;
    return e0 / (size_t)dp + (edp > 0 ? (n_alloc - e0) / (size_t)edp : n_alloc - e0);
}

DistStateBytes dist_state_bytes(const DistStateSizes *z) {
    size_t f = sizeof(float), copy = z->act != f ? z->n_alloc * z->act : 0;
    DistStateBytes b = {z->n_floats * f + copy, z->n_alloc * f, 2 * z->shard_len * f, 0};
    if (z->stage == 1) b.shards = 2 * z->shard_len * f;
    if (z->stage < 2) return b;
    size_t transient = !z->shared ? z->edge_len + z->layer_len
                     : z->edge_len > z->layer_len ? z->edge_len : z->layer_len;
    b.grads = (z->shard_len + transient + z->bucket) * f;
    if (z->stage == 3) b.params = z->shard_len * f + (z->edge_len + 2 * z->layer_len) * z->act;
    return b;
}

#define OFFLOAD_ALIGN 16  // floats: the split point's granularity (as the slices' padding)

size_t dist_offload_host_len(size_t shard_len, double fraction) {
    size_t h = (size_t)ceil(fraction * (double)shard_len / OFFLOAD_ALIGN) * OFFLOAD_ALIGN;
    return h < shard_len ? h : shard_len;
}

DistOffloadBytes dist_offload_bytes(size_t host_len, size_t copy_elem) {
    size_t f = sizeof(float);
    return (DistOffloadBytes){host_len * (4 * f + copy_elem), 2 * host_len * f, host_len * f,
                              host_len * (f + copy_elem)};
}
