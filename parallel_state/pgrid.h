// parallel_state/pgrid.h: the process grid (Megatron-LM's parallel_state) as an ordered list
// of named dimensions, and every group as a mask over that list.
//
// A decomposition splits the N ranks into dimensions of named sizes, the first fastest. The
// dense layers' decomposition is Megatron-Core's order tp-cp-dp-pp:
//
//     rank = tp_rank + TP * (cp_rank + CP * (dp_rank + DP * pp_rank))
//
// With CP = 1 this is rank = tp_rank + TP * (dp_rank + DP * pp_rank).
//
// The expert (mixture-of-experts) layers see a second decomposition of the same ranks,
// Megatron-Core's expert rank generator (its order tp-cp-ep-dp-pp with tp = the expert-
// tensor-parallel size and cp = 1):
//
//     rank = etp_rank + ETP * (ep_rank + EP * (edp_rank + EDP * pp_rank))
//
// ETP (expert-tensor-parallel) is 1 or TP, EP the expert-model-parallel size, EDP = N /
// (ETP * EP * PP) the expert-data-parallel size (the ranks holding the same experts). PP is
// last in both, so every rank has the same pp_rank in both and the pipeline groups are the
// same. Without experts (EP = 1, ETP = TP) the expert-data-parallel groups are dp x cp's.
//
// A group kind is a mask over the dimensions (Megatron-Core's rank generator,
// generate_masked_orthogonal_rank_groups): a group holds the ranks whose coordinates agree
// outside the mask. Groups are numbered by the coordinates outside the mask, members ordered
// by the coordinates inside it, the first dimension fastest in both; so groups come in order
// of their smallest member and a member's position is its rank in the group's communicator.
// The embedding group is the first and last member of each pipeline group.
//
// Worked example, N = 16, TP = 2, PP = 4 (so CP = 1, DP = 2):
//     tensor-parallel groups   [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
//     data-parallel groups     [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//     pipeline-parallel groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//     model-parallel groups    (TP x PP, one per dp_rank) [0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]
//     embedding groups         (first + last stage of each pipeline group) [0,12] [1,13] [2,14] [3,15]
// Rank 6 is (tp 0, dp 1, pp 1). With PP = 1 the embedding group is the first stage alone.
// The expert groups of the same 16 ranks with EP = 2, ETP = 1 (so EDP = 2):
//     expert-model-parallel groups      [0,1] [2,3] [4,5] [6,7] ...
//     expert-data-parallel groups       [0,2] [1,3] [4,6] [5,7] ...
// and with EP = 2, ETP = 2 (so EDP = 1): rank 6 is (etp 0, ep 1, edp 0, pp 1);
//     expert-tensor-parallel groups     [0,1] [2,3] ...   (the tensor-parallel groups)
//     expert-model-parallel groups      [0,2] [1,3] [4,6] [5,7] ...
//     etp x ep groups                   [0,1,2,3] [4,5,6,7] ...
//     expert-data-parallel groups       [0] [1] ... [15]
//
// With context parallelism, N = 16, TP = CP = DP = PP = 2: rank 6 is (tp 0, cp 1, dp 1, pp 0);
//     cp [0,2] [1,3] [4,6] ...   dp [0,4] [1,5] ...   pp [0,8] [1,9] ...
//     dp x cp [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]   tp x cp [0,1,2,3] [4,5,6,7] ...
//     model (TP x PP, not CP) [0,1,8,9] [2,3,10,11] [4,5,12,13] [6,7,14,15]
//
// This header is pure arithmetic (no MPI): `megac layout` and the tests use it without
// starting a job, and pgrid_comm.h builds the communicators from it.
#pragma once
#include <stddef.h>
#include <stdint.h>

enum { PGRID_MAX_DIMS = 6 };

// One decomposition of the ranks: ndims dimensions, dimension 0 fastest; the world size is
// the product of the sizes. name[i] is a static string ("tp", "cp", ...).
typedef struct {
    int ndims;
    int size[PGRID_MAX_DIMS];
    const char *name[PGRID_MAX_DIMS];
} PGridDecomp;

// The dense layers' dimensions, in rank order (indices into PGridDecomp for pgrid_dense).
typedef enum { PGRID_DIM_TP, PGRID_DIM_CP, PGRID_DIM_DP, PGRID_DIM_PP, PGRID_DENSE_NDIMS } PGridDim;

// The expert layers' dimensions, in rank order (indices into PGridDecomp for pgrid_expert).
typedef enum {
    PGRID_EDIM_ETP, PGRID_EDIM_EP, PGRID_EDIM_EDP, PGRID_EDIM_PP, PGRID_EXPERT_NDIMS
} PGridExpertDim;

// A mask over a decomposition's dimensions: bit i set = dimension i varies inside a group.
#define PGRID_MASK(dim) (1u << (dim))

// The named sizes of both decompositions: every dimension of the grid has its field. A
// caller names the sizes of its layout (tp, cp, pp, ep, etp) and pgrid_dims_init checks them
// against the world size and fills the derived ones (world_size, dp). The readers below
// (pgrid_dims_cp, _ep, _etp, _edp) also take a {world_size, tp, pp, dp} initialiser (plan/'s
// and the tests'), where cp, ep and etp left 0 mean the factor left, 1 and tp.
typedef struct {
    int world_size;
    int tp, cp, dp, pp;  // dense layers: world = tp * cp * dp * pp (dp derived)
    int ep, etp;         // expert layers: world = etp * ep * edp * pp (edp derived)
} PGridDims;

typedef struct {
    int rank, tp_rank, dp_rank, pp_rank;
    int cp_rank;
    int etp_rank, ep_rank, edp_rank;  // in the expert decomposition (pp_rank is shared)
} PGridCoord;

// The group kinds. The first five are the dense decomposition's original communicators, the
// next three combine context parallelism with another dimension; the last five mask the
// expert decomposition (Megatron-Core's expert groups). Each kind knows its decomposition
// (pgrid_kind_decomp), so the functions below serve every kind.
typedef enum {
    PGRID_TP,         // tp
    PGRID_DP,         // dp
    PGRID_PP,         // pp
    PGRID_MODEL,      // tp x pp (Megatron-Core's model-parallel group; CP not included)
    PGRID_EMBEDDING,  // first + last member of each pp group
    PGRID_CP,         // cp
    PGRID_DP_CP,      // dp x cp: the ranks that hold the same weights (gradient reduction)
    PGRID_TP_CP,      // tp x cp
    PGRID_EP,         // ep: expert-model-parallel (the ranks that split the experts)
    PGRID_ETP,        // etp: expert-tensor-parallel
    PGRID_ETP_EP,     // etp x ep: expert-tensor-and-model-parallel
    PGRID_EDP,        // edp: expert-data-parallel (the ranks holding the same experts)
    PGRID_ETP_EP_PP,  // etp x ep x pp: expert-tensor-model-pipeline-parallel
    PGRID_NKINDS
} PGridKind;

// ---- the named sizes ---------------------------------------------------------------------

// The one constructor of the named sizes: checks *d's tp, cp, pp, ep, etp (as the caller
// named them) against world_size and fills world_size and dp; the dense checks first
// (world = tp * cp * dp * pp), then the expert decomposition's (Megatron-Core's, and issue
// 28's ETP rule): ep >= 1; etp is 1 or tp; etp * ep * pp divides the world size (EDP = world /
// (etp * ep * pp)). Returns 0 on success; on failure -1 with one line in err (errlen bytes)
// naming every factor and their product (CP only when it is not 1), e.g. "world size 12 is
// not divisible by tensor-model-parallel-size 2 x pipeline-model-parallel-size 4 = 8", and
// *d unspecified. Without experts: ep = 1, etp = tp.
int pgrid_dims_init(PGridDims *d, int world_size, char *err, size_t errlen);

// Context-parallel size: cp, or world_size / (tp * pp * dp) when cp is 0. Pure.
int pgrid_dims_cp(const PGridDims *d);

// Expert-parallel size: ep, or 1 when ep is 0. Pure.
int pgrid_dims_ep(const PGridDims *d);

// Expert-tensor-parallel size: etp, or tp when etp is 0. Pure.
int pgrid_dims_etp(const PGridDims *d);

// Expert-data-parallel size: world_size / (etp * ep * pp). Pure.
int pgrid_dims_edp(const PGridDims *d);

// 1 when *d has experts split or sharded differently from the dense layers (EP > 1 or
// ETP != TP), else 0. Pure.
int pgrid_dims_has_experts(const PGridDims *d);

// The dense decomposition of *d: tp, cp, dp, pp. Pure.
PGridDecomp pgrid_dense(const PGridDims *d);

// The expert decomposition of *d: etp, ep, edp, pp (names "etp", "ep", "edp", "pp"). Pure.
PGridDecomp pgrid_expert(const PGridDims *d);

// ---- any decomposition and mask: Megatron-Core's rank generator ----------------------------

// Product of all sizes. Pure.
int pgrid_decomp_world(const PGridDecomp *g);

// Coordinates of `rank` (0 <= rank < world), written to coord[0 .. ndims). Pure.
void pgrid_decomp_coord(const PGridDecomp *g, int rank, int *coord);

// Global rank of coord[0 .. ndims). Pure.
int pgrid_decomp_rank(const PGridDecomp *g, const int *coord);

// Size of every group of `mask` (product of the masked sizes; 1 for mask 0). Pure.
int pgrid_mask_size(const PGridDecomp *g, unsigned mask);

// Members of group `index` (0 <= index < world / size) of `mask`, in group order, written to
// members[0 .. pgrid_mask_size). Pure.
void pgrid_mask_members(const PGridDecomp *g, unsigned mask, int index, int *members);

// Index of the group of `mask` that holds `rank`; with `position` non-NULL, also its position
// in that group. Pure.
int pgrid_mask_index(const PGridDecomp *g, unsigned mask, int rank, int *position);

// ---- the group kinds (through pgrid_dense or pgrid_expert) ---------------------------------

// Coordinates of global rank `rank` (0 <= rank < world_size) in both decompositions. Pure.
PGridCoord pgrid_coord(const PGridDims *d, int rank);

// 1 for the kinds that mask the expert decomposition (PGRID_EP .. PGRID_ETP_EP_PP), else 0.
// Pure.
int pgrid_kind_is_expert(PGridKind kind);

// The decomposition a kind masks: pgrid_expert for the expert kinds, else pgrid_dense. Pure.
PGridDecomp pgrid_kind_decomp(const PGridDims *d, PGridKind kind);

// The mask of a kind over its decomposition's dimensions (embedding: the pp mask it selects
// from). Pure.
unsigned pgrid_kind_mask(PGridKind kind);

// Number of groups of a kind (e.g. TP groups = world / tp). Pure.
int pgrid_num_groups(const PGridDims *d, PGridKind kind);

// Size of every group of a kind (embedding: 2, or 1 when PP = 1). Pure.
int pgrid_group_size(const PGridDims *d, PGridKind kind);

// Members (global ranks, in group order) of group `index` of a kind, written to
// members[0 .. pgrid_group_size). Groups are numbered in order of their smallest rank. Pure.
void pgrid_group_members(const PGridDims *d, PGridKind kind, int index, int *members);

// Index of the group of `kind` that holds `rank`, or -1 if none (embedding group on a
// middle stage); with `position` non-NULL, also its position in that group (its rank in the
// group's communicator), -1 if none. Pure.
int pgrid_group_index(const PGridDims *d, PGridKind kind, int rank, int *position);

// "tp", "dp", "pp", "model", "embedding", "cp", "dp_cp", "tp_cp", "ep", "etp", "etp_ep",
// "edp", "etp_ep_pp"; "?" out of range. Pure.
const char *pgrid_kind_name(PGridKind kind);

// ---- the samples a rank holds --------------------------------------------------------------

// First order position of micro-batch `micro` of data-parallel rank dp_rank: the one rule for
// which global samples a rank holds (Megatron's pretraining sampler). The global batch of
// G = global_batch samples at order positions [batch_start, batch_start + G) is cut into dp
// contiguous shares of G / dp, one per dp_rank in order, and each share into micro-batches of
// mb = micro_batch samples; micro-batch `micro` holds positions [first, first + mb) with
//     first = batch_start + dp_rank * (G / dp) + micro * mb.
// Tensor- and pipeline-parallel peers hold the same samples, and the samples of a step do not
// depend on the layout. E.g. G = 8, dp = 2, mb = 2, batch_start = 16: rank 0 holds
// 16 17 | 18 19, rank 1 holds 20 21 | 22 23. Returns -1 if G is not a multiple of dp * mb,
// or batch_start, dp_rank or micro is out of range. Pure.
int64_t pgrid_micro_first(int64_t batch_start, int global_batch, int dp_rank, int dp,
                          int micro_batch, int micro);
