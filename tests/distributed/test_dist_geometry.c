// tests/distributed/test_dist_geometry.c: the bucket and shard geometry
// (distributed/dist_geometry.h) against golden tables written out by hand from the rules in
// that header, and two properties: every float of the padded buffer is reduced by exactly one
// bucket (DDP) or owned by exactly one rank's piece (ZeRO-1 buckets, ZeRO-2/3 units).
#include "distributed/dist_geometry.h"
#include "tests/testing.h"

#include <stdio.h>
#include <stdlib.h>

static void test_padding(void) {
    EXPECT_EQ_INT(dist_pad_multiple(4), 64);
    EXPECT_EQ_INT(dist_padded_size(1000, 4), 1024);
    EXPECT_EQ_INT(dist_padded_size(1024, 4), 1024);
    EXPECT_EQ_INT(dist_padded_size(0, 4), 0);
    EXPECT_EQ_INT(dist_padded_size(1, 1), 16);
    EXPECT_EQ_INT(dist_padded_size(100, 3), 144);
}

typedef struct {
    size_t start, len, per, at;
} Golden;

// Buckets of a rank reducing `per` floats with --ddp-bucket-size E over dp ranks.
static void expect_buckets(size_t per, size_t E, int dp, int sharded, const Golden *want, int n) {
    size_t b = dist_bucket_floats(per, E, dp, sharded);
    EXPECT_EQ_INT(dist_num_buckets(per, b), n);
    for (int k = 0; k < n && k < dist_num_buckets(per, b); k++) {
        DistBucket g = dist_bucket(per, b, dp, sharded, k);
        EXPECT(g.start == want[k].start && g.len == want[k].len && g.per == want[k].per &&
                   g.at == want[k].at,
               "per %zu E %zu dp %d %s bucket %d: got (%zu, %zu, %zu, %zu), want (%zu, %zu, %zu, %zu)",
               per, E, dp, sharded ? "ZeRO-1" : "DDP", k, g.start, g.len, g.per, g.at,
               want[k].start, want[k].len, want[k].per, want[k].at);
    }
}

static void test_buckets(void) {
    // DDP, 1024 floats, E 300 -> 304-float buckets, the last 112
    const Golden ddp[] = {{0, 304, 304, 0}, {304, 304, 304, 304}, {608, 304, 304, 608},
                          {912, 112, 112, 912}};
    expect_buckets(1024, 300, 4, 0, ddp, 4);
    // DDP, E 0 or E >= the buffer: one bucket
    const Golden ddp1[] = {{0, 1024, 1024, 0}};
    expect_buckets(1024, 0, 4, 0, ddp1, 1);
    expect_buckets(1024, 4096, 4, 0, ddp1, 1);
    // ZeRO-1, 1024 floats over DP 4 (per = 256), E 300 -> ceil(300/4) = 75 -> 80 per rank:
    // buckets of 4 x 80 floats at 0, 320, 640 and the last of 4 x 16 at 960
    const Golden z1[] = {{0, 320, 80, 0}, {320, 320, 80, 80}, {640, 320, 80, 160},
                         {960, 64, 16, 240}};
    expect_buckets(256, 300, 4, 1, z1, 4);
    // ZeRO-1, one bucket: rank r's piece is the contiguous slice [r*256, (r+1)*256)
    const Golden z1one[] = {{0, 1024, 256, 0}};
    expect_buckets(256, 0, 4, 1, z1one, 1);
    expect_buckets(256, 1024, 4, 1, z1one, 1);
    // ZeRO-1 DP 2, 96 floats per rank, E 64 -> 32 per rank: 3 buckets of 2 x 32
    const Golden z2[] = {{0, 64, 32, 0}, {64, 64, 32, 32}, {128, 64, 32, 64}};
    expect_buckets(96, 64, 2, 1, z2, 3);
}

// ZeRO-1: the ranks' pieces of all buckets tile [0, dp * per) once; each rank's pieces tile
// its shard [0, per) once, in bucket order.
static void test_zero1_tiling(size_t per, size_t E, int dp) {
    size_t n = (size_t)dp * per, b = dist_bucket_floats(per, E, dp, 1);
    int *hits = calloc(n, sizeof *hits);
    for (int r = 0; r < dp; r++) {
        size_t shard_at = 0;
        for (int k = 0; k < dist_num_buckets(per, b); k++) {
            DistBucket g = dist_bucket(per, b, dp, 1, k);
            EXPECT(g.at == shard_at, "bucket %d of rank %d at %zu, want %zu", k, r, g.at, shard_at);
            shard_at += g.per;
            for (size_t i = 0; i < g.per; i++) hits[g.start + (size_t)r * g.per + i]++;
        }
        EXPECT(shard_at == per, "rank %d's pieces fill %zu of %zu", r, shard_at, per);
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += hits[i] != 1;
    EXPECT(bad == 0, "per %zu E %zu dp %d: %d floats not owned exactly once", per, E, dp, bad);
    free(hits);
}

static void test_units(void) {
    // len 1000 over DP 4: per ceil(250) -> 256; rank 3 owns the last 232
    const size_t own1000[4] = {256, 256, 256, 232};
    for (int r = 0; r < 4; r++) {
        DistUnitPiece p = dist_unit_piece(1000, 4, r);
        EXPECT(p.per == 256 && p.lo == (size_t)r * 256 && p.own == own1000[r],
               "unit 1000 dp 4 rank %d: (%zu, %zu, %zu)", r, p.per, p.lo, p.own);
    }
    // len 10 over DP 4: per 16; rank 0 owns all 10, the others nothing
    const size_t own10[4] = {10, 0, 0, 0};
    for (int r = 0; r < 4; r++) {
        DistUnitPiece p = dist_unit_piece(10, 4, r);
        EXPECT(p.per == 16 && p.own == own10[r], "unit 10 dp 4 rank %d: (%zu, %zu)", r, p.per, p.own);
    }
    // len 64 over DP 2: 32 each, exact
    EXPECT_EQ_INT(dist_unit_piece(64, 2, 1).own, 32);
    EXPECT_EQ_INT(dist_unit_piece(64, 1, 0).per, 64);
    // property: the owned parts tile the unit once, for awkward sizes
    const size_t lens[] = {1, 15, 17, 100, 1023, 4097};
    for (int dp = 1; dp <= 8; dp++)
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
            size_t sum = 0, next = 0;
            for (int r = 0; r < dp; r++) {
                DistUnitPiece p = dist_unit_piece(lens[i], dp, r);
                if (p.own) EXPECT(p.lo == next, "len %zu dp %d rank %d starts at %zu", lens[i], dp, r, p.lo);
                next = p.lo + p.own;
                sum += p.own;
                EXPECT(p.per % 16 == 0, "per %zu not a multiple of 16", p.per);
            }
            EXPECT(sum == lens[i], "len %zu dp %d: owned %zu", lens[i], dp, sum);
        }
}

// The state's bytes (dist_state_bytes: the sync engine's and megac plan's) and a DDP or
// ZeRO-1 rank's slice (dist_shard_len), worked by hand; the flat buffers' geometry
// (gpt_params_geometry: gpt_create's and megac plan's).
static void test_state(void) {
    EXPECT_EQ_INT(dist_shard_len(1024, 1024, 4, 0, 0), 1024);  // DDP: the whole buffer
    EXPECT_EQ_INT(dist_shard_len(1024, 1024, 4, 0, 1), 256);   // ZeRO-1, no expert region
    EXPECT_EQ_INT(dist_shard_len(1024, 512, 4, 2, 1), 128 + 256);  // dense / 4 + experts / 2
    DistStateSizes ddp = {0, 1000, 1024, 1024, 0, 0, 0, 0, 2};  // bf16 copies
    DistStateBytes b = dist_state_bytes(&ddp);
    EXPECT(b.params == 4000 + 2048 && b.grads == 4096 && b.optim == 8192 && b.shards == 0,
           "DDP: %zu %zu %zu %zu", b.params, b.grads, b.optim, b.shards);
    DistStateSizes z1 = {1, 1000, 1024, 256, 0, 0, 0, 0, 4};  // fp32: no copy
    b = dist_state_bytes(&z1);
    EXPECT(b.params == 4000 && b.grads == 4096 && b.optim == 2048 && b.shards == 2048,
           "ZeRO-1: %zu %zu %zu %zu", b.params, b.grads, b.optim, b.shards);
    // ZeRO-3: shard 300, edge 400, layers 160, the largest piece 48; one stage (not shared)
    DistStateSizes z3 = {3, 1000, 1024, 300, 400, 160, 48, 0, 2};
    b = dist_state_bytes(&z3);
    EXPECT(b.params == 1200 + (400 + 320) * 2 && b.grads == (300 + 560 + 48) * 4 && b.optim == 2400,
           "ZeRO-3: %zu %zu %zu", b.params, b.grads, b.optim);
    z3.stage = 2, z3.shared = 1;  // ZeRO-2 on a middle stage: max(edge, layer) transient
    b = dist_state_bytes(&z3);
    EXPECT(b.params == 4000 + 2048 && b.grads == (300 + 400 + 48) * 4, "ZeRO-2: %zu %zu", b.params, b.grads);
    GPTParamsGeometry g = gpt_params_geometry(1000, 0, 64);
    EXPECT(g.n_floats == 1000 && g.n_alloc == 1024 && g.expert_offset == 1024, "dense: %zu %zu %zu",
           g.n_floats, g.n_alloc, g.expert_offset);
    g = gpt_params_geometry(1000, 100, 64);  // experts from 1024
    EXPECT(g.n_floats == 1124 && g.n_alloc == 1152 && g.expert_offset == 1024, "experts: %zu %zu %zu",
           g.n_floats, g.n_alloc, g.expert_offset);
}

// --optimizer-cpu-offload's split and bytes (dist_offload_host_len, dist_offload_bytes: the
// run's and megac plan's), worked by hand.
static void test_offload(void) {
    EXPECT_EQ_INT(dist_offload_host_len(1024, 1.0), 1024);
    EXPECT_EQ_INT(dist_offload_host_len(1024, 0.0), 0);
    EXPECT_EQ_INT(dist_offload_host_len(1000, 0.5), 512);   // 500 rounded up to 16
    EXPECT_EQ_INT(dist_offload_host_len(1000, 0.999), 1000);  // 999 -> 1008, cut to the slice
    DistOffloadBytes b = dist_offload_bytes(512, 0);
    EXPECT(b.host == 512 * 16 && b.device_saved == 512 * 8 && b.down == 512 * 4 && b.up == 512 * 4,
           "fp32 / sharded: %zu %zu %zu %zu", b.host, b.device_saved, b.down, b.up);
    b = dist_offload_bytes(512, 2);  // DDP bf16: the host writes the copies, they go up too
    EXPECT(b.host == 512 * 18 && b.device_saved == 512 * 8 && b.down == 512 * 4 && b.up == 512 * 6,
           "DDP bf16: %zu %zu %zu %zu", b.host, b.device_saved, b.down, b.up);
}

int main(void) {
    test_padding();
    test_state();
    test_offload();
    test_buckets();
    test_zero1_tiling(256, 300, 4);
    test_zero1_tiling(256, 0, 4);
    test_zero1_tiling(1008, 100, 3);
    test_zero1_tiling(48, 16, 8);
    test_units();
    if (test_failures_) {
        fprintf(stderr, "%d failure(s)\n", test_failures_);
        return 1;
    }
    printf("dist geometry tests passed\n");
    return 0;
}
