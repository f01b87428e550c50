// distributed/dist_geometry.h: where data parallelism's pieces lie, as pure arithmetic (no
// MPI, no buffers), so that the optimizer (optim/) and megac plan (plan/) compute the same
// ranges from one place. All sizes are in floats.
//
// The flat buffer. The model's parameters and gradients are one flat buffer of n floats,
// padded to a multiple of 16 x DP (dist_padded_size) so that DP slices divide it evenly and
// stay 64-byte aligned.
//
// Buckets (DDP and ZeRO-1, --ddp-bucket-size E). A rank reduces `per` floats in all: the
// whole padded buffer (DDP), or its 1/DP share (ZeRO-1). They go in buckets of b floats
// (b = E, or E/DP for ZeRO-1, rounded up to 16; b = per when E is 0 or not smaller), the last
// one shorter:
//   DDP     bucket k is the range [k*b, k*b + len_k) of the flat buffer, all-reduced in place.
//   ZeRO-1  bucket k is the range [DP*k*b, DP*k*b + DP*len_k) of the flat buffer (Megatron's
//           layout), reduce-scattered over DP: rank r owns its piece [DP*k*b + r*len_k,
//           + len_k) and keeps it at [k*b, k*b + len_k) of its shard. So a rank's shard is
//           its pieces of every bucket, packed; with one bucket it is the contiguous slice
//           [r*n/DP, (r+1)*n/DP).
//
// Units (ZeRO-2/3). Each unit (an edge tensor, or one layer's tensors) is a range of len
// floats reduce-scattered on its own: every rank gets `per` = ceil(len/DP) rounded up to 16
// floats of it (the last ranks' pieces may be partly or wholly past the unit's end), and owns
// the part of [r*per, (r+1)*per) inside the unit. A stage's units (dist_units_layout): its
// edge tensors one each (table order), then one per local layer (its tensors outside the
// expert region), then with an expert region (expert parallelism) one per layer for its
// expert tensors, sharded over the expert-data-parallel group (a dense layer's is empty).
// The shard keeps every unit's piece, one after the other; the edge units' full gradients
// sit one after the other in the edge buffer, a layer's dense then expert part in the layer
// buffer. The sync engine builds its units with it and megac plan counts them with it.
#pragma once
#include <stddef.h>
#include "model/gpt_params.h"  // defines: ParamInfo

// One bucket: a range of the flat buffer and this rank's piece of it in its shard.
typedef struct {
    size_t start, len;  // the bucket's range of the flat buffer (ZeRO-1: all DP pieces)
    size_t per;         // floats each rank reduces in it (DDP: len; ZeRO-1: len / DP)
    size_t at;          // where the rank's piece sits in its shard (DDP: = start)
} DistBucket;

// One rank's piece of a ZeRO-2/3 unit of len floats.
typedef struct {
    size_t per;  // floats per rank: ceil(len / DP) rounded up to 16
    size_t lo;   // the piece starts at unit offset r * per
    size_t own;  // floats of it inside the unit (0 .. per)
} DistUnitPiece;

// n rounded up to a multiple of 16 x dp (the flat buffers' size). Pure.
size_t dist_padded_size(size_t n, int dp);
// 16 x dp: what the flat buffers' size must be a multiple of. Pure.
size_t dist_pad_multiple(int dp);
// The rank count the flat buffer's padding must serve when its dense region is sliced over dp
// ranks and its expert region over edp (expert parallelism; 0 or dp: none): lcm(dp, edp), so
// both regions divide evenly (edp need not divide dp: expert-tensor-parallel 1). Pure.
int dist_pad_ranks(int dp, int edp);

// Floats per bucket (per rank for ZeRO-1) for a rank reducing `per` floats with
// --ddp-bucket-size `bucket_size` (0: one bucket) over dp ranks; sharded: ZeRO-1. Pure.
size_t dist_bucket_floats(size_t per, size_t bucket_size, int dp, int sharded);
// Number of buckets of `bucket` floats covering `per` (0 when per is 0). Pure.
int dist_num_buckets(size_t per, size_t bucket);
// Bucket k (0 <= k < dist_num_buckets) of the layout above. Pure.
DistBucket dist_bucket(size_t per, size_t bucket, int dp, int sharded, int k);

// Rank dp_rank's piece of a ZeRO-2/3 unit of len floats over dp ranks. Pure.
DistUnitPiece dist_unit_piece(size_t len, int dp, int dp_rank);

// One ZeRO-2/3 unit of a stage as one rank holds it (dist_units_layout).
typedef struct {
    size_t start, len;  // the unit's range of the flat buffer
    size_t per, own;    // the rank's piece: floats per rank, floats of it inside the unit
    size_t at;          // where the piece sits in the rank's shard
    size_t buf;         // where the unit's full gradients (group size x per) sit: an edge
                        // unit in the edge buffer, a layer's expert unit in the layer buffer
                        // (after its dense part); 0 for a layer's dense unit
    size_t out_at;      // where its output piece sits in its buffer's outputs (edge units
                        // buf / group size, a layer's expert unit its dense unit's per)
    int param;          // an edge unit's tensor (index into the table); -1 for a layer's
    int expert;         // 1: a layer's expert unit (over the expert-data-parallel group)
} DistUnit;

// A stage's units together: counts and the buffers they need (floats).
typedef struct {
    int n_units, n_edge;  // n_edge edge units, then n_layers dense (and n_layers expert) units
    size_t shard_len;     // the rank's shard: every unit's per
    size_t edge_len;      // the edge units' full gradients
    size_t layer_len;     // the largest layer's full gradients (dense + expert parts)
    size_t bucket;        // the largest piece (a layer's dense and expert pieces together)
} DistUnitTotals;

// The units of a stage's parameter table t (n tensors; local layer l's are t[block[l] ..
// block[l + 1]), block from gpt_params_block_index) as rank dp_rank of dp sees them, with
// an expert region [expert_offset, n_alloc) sharded over edp ranks (rank edp_rank; edp 0:
// none, one unit per layer). u holds n + n_layers + 1 entries at least. Returns the totals.
// Pure.
DistUnitTotals dist_units_layout(const ParamInfo *t, int n, const int *block, int n_layers,
                                 size_t expert_offset, size_t n_alloc, int dp, int dp_rank,
                                 int edp, int edp_rank, DistUnit *u);

// The floats of a DDP / ZeRO-1 rank's optimizer slice of a flat buffer of n_alloc floats
// whose dense region [0, expert_offset) is sliced over dp ranks and expert region
// [expert_offset, n_alloc) over edp (edp 0: no expert region; sharded 0: DDP, the whole
// buffer). Pure.
size_t dist_shard_len(size_t n_alloc, size_t expert_offset, int dp, int edp, int sharded);

// What one rank's data-parallel state of a stage is made of (floats), the sizes its
// memory follows from: the sync engine's (dist_sync.h) and megac plan's.
typedef struct {
    int stage;                           // 0 DDP, 1 ZeRO-1, 2 ZeRO-2, 3 ZeRO-3
    size_t n_floats, n_alloc;            // the flat buffers (gpt_create)
    size_t shard_len;                    // the optimizer's slice (DDP: n_alloc)
    size_t edge_len, layer_len, bucket;  // ZeRO-2/3: DistUnitTotals' (else unused)
    int shared;                          // ZeRO-2/3: one transient gradient buffer for the
                                         // edge and the layers (a stage not both first and last)
    size_t act;                          // bytes of a weight copy's element (be->act)
} DistStateSizes;

// Bytes of that state, as the sync engine and the optimizer allocate them.
typedef struct {
    size_t params;  // fp32 master weights (ZeRO-3: the shard) and the be->act copies (ZeRO-3:
                    // the edge buffer and two layer buffers)
    size_t grads;   // fp32 main gradients (ZeRO-2/3: the shard, transient buffers, the piece)
    size_t optim;   // AdamW's m and v over the slice
    size_t shards;  // ZeRO-1: the gradient and parameter shards the buckets reduce into
} DistStateBytes;

// The bytes of the state z describes (not counting the ZeRO-2 overlap's buffers). Pure.
DistStateBytes dist_state_bytes(const DistStateSizes *z);

// --optimizer-cpu-offload (optim/optim_offload.c, docs/offload.md): the first host_len floats
// of a rank's optimizer slice of shard_len are updated on the host: fraction x shard_len
// rounded up to 16 floats (the slices' granularity), at most shard_len. The run splits its
// slice there (optim_set_offload) and megac plan counts it. Pure.
size_t dist_offload_host_len(size_t shard_len, double fraction);

// What the host part of host_len floats costs, as optim_offload.c allocates and copies it.
typedef struct {
    size_t host;          // pinned host bytes: the moments (8), the fp32 masters (4), the
                          // gradient staging (4) per float, + copy_elem per float (the 16-bit
                          // weight copies the host AdamW writes: DDP in bf16/fp16)
    size_t device_saved;  // AdamW moment bytes not on the device (8 per float)
    size_t down, up;      // bytes per step over PCIe: the gradients down (D2H, 4 per float);
                          // the masters up (H2D, 4 per float) + the copies (copy_elem)
} DistOffloadBytes;

// The host part's bytes (copy_elem: bytes of a weight copy's element the host writes, 0 when
// it writes none). Pure.
DistOffloadBytes dist_offload_bytes(size_t host_len, size_t copy_elem);
