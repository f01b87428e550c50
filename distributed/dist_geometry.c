// distributed/dist_geometry.c: bucket and shard geometry (see dist_geometry.h).
#include "dist_geometry.h"

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
