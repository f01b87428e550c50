// parallel_state/pgrid.h: the process grid (Megatron-LM's parallel_state).
//
// World size N = TP x DP x PP. Ranks are laid out in Megatron's default order, tensor-
// parallel fastest, then data-parallel, then pipeline-parallel:
//
//     rank = tp_rank + TP * (dp_rank + DP * pp_rank)
//
// Worked example, N = 16, TP = 2, PP = 4 (so DP = 2):
//     tensor-parallel groups   [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
//     data-parallel groups     [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//     pipeline-parallel groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//     model-parallel groups    (TP x PP, one per dp_rank) [0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]
//     embedding groups         (first + last stage of each pipeline group) [0,12] [1,13] [2,14] [3,15]
// Rank 6 is (tp 0, dp 1, pp 1). With PP = 1 the embedding group is the first stage alone.
//
// This header is pure arithmetic (no MPI): `megac layout` and the tests use it without
// starting a job, and pgrid_comm.h builds the communicators from it.
#pragma once
#include <stddef.h>

typedef struct {
    int world_size, tp, pp, dp;
} PGridDims;

typedef struct {
    int rank, tp_rank, dp_rank, pp_rank;
} PGridCoord;

typedef enum {
    PGRID_TP, PGRID_DP, PGRID_PP, PGRID_MODEL, PGRID_EMBEDDING, PGRID_NKINDS
} PGridKind;

// Validates world = tp * pp * dp and fills *d. Returns 0 on success; on failure returns -1,
// writes one line naming every factor into err (errlen bytes) and leaves *d unspecified.
int pgrid_dims_init(PGridDims *d, int world_size, int tp, int pp, char *err, size_t errlen);

// Coordinates of global rank `rank` (0 <= rank < world_size). Pure.
PGridCoord pgrid_coord(const PGridDims *d, int rank);

// Global rank of coordinates (tp_rank, dp_rank, pp_rank). Pure.
int pgrid_rank(const PGridDims *d, int tp_rank, int dp_rank, int pp_rank);

// Number of groups of a kind (e.g. TP groups = world / tp). Pure.
int pgrid_num_groups(const PGridDims *d, PGridKind kind);

// Size of every group of a kind (embedding: 2, or 1 when PP = 1). Pure.
int pgrid_group_size(const PGridDims *d, PGridKind kind);

// Members (global ranks, in group order) of group `index` of a kind, written to
// members[0 .. pgrid_group_size). Groups are numbered in order of their smallest rank. Pure.
void pgrid_group_members(const PGridDims *d, PGridKind kind, int index, int *members);

// Index of the group of `kind` that holds `rank`, or -1 if none (embedding group on a
// middle stage). Pure.
int pgrid_group_index(const PGridDims *d, PGridKind kind, int rank);

// "tp", "dp", "pp", "model", "embedding". Pure.
const char *pgrid_kind_name(PGridKind kind);
