// parallel_state/pgrid.c: pure rank arithmetic of the process grid (see pgrid.h): one
// masked-group generator over an ordered list of dimensions, and the dense group kinds as
// a table of masks over the dense or the expert decomposition.
#include "pgrid.h"
#include <stdio.h>

// ---- the named sizes ---------------------------------------------------------------------

// The dense decomposition's checks (world = tp * cp * dp * pp); fills world_size and dp.
static int init_dense(PGridDims *d, int world_size, char *err, size_t errlen) {
    int tp = d->tp, cp = d->cp, pp = d->pp;
    char cps[48] = "";  // CP is named when it is not 1
    int bad = world_size <= 0 || tp <= 0 || cp <= 0 || pp <= 0;
    if (cp != 1) snprintf(cps, sizeof cps, "context-parallel-size %d%s", cp, bad ? ", " : " x ");
    if (bad) {
        snprintf(err, errlen, "sizes must be positive: world size %d, tensor-model-parallel-size "
                 "%d, %spipeline-model-parallel-size %d", world_size, tp, cps, pp);
        return -1;
    }
    long long model = (long long)tp * cp * pp;
    if (world_size % model != 0) {
        snprintf(err, errlen, "world size %d is not divisible by tensor-model-parallel-size %d x "
                 "%spipeline-model-parallel-size %d = %lld", world_size, tp, cps, pp, model);
        return -1;
    }
    d->world_size = world_size;
    d->dp = (int)(world_size / model);
    return 0;
}

// The expert decomposition's checks (world = etp * ep * edp * pp).
static int check_expert(const PGridDims *d, char *err, size_t errlen) {
    int ep = d->ep, etp = d->etp;
    if (ep <= 0 || etp <= 0) {
        snprintf(err, errlen, "sizes must be positive: expert-model-parallel-size %d, "
                 "expert-tensor-parallel-size %d", ep, etp);
        return -1;
    }
    if (etp != 1 && etp != d->tp) {
        snprintf(err, errlen, "expert-tensor-parallel-size %d must be 1 or "
                 "tensor-model-parallel-size %d", etp, d->tp);
        return -1;
    }
    long long expert_model = (long long)etp * ep * d->pp;
    if (d->world_size % expert_model != 0) {
        snprintf(err, errlen, "world size %d is not divisible by expert-tensor-parallel-size %d x "
                 "expert-model-parallel-size %d x pipeline-model-parallel-size %d = %lld",
                 d->world_size, etp, ep, d->pp, expert_model);
        return -1;
    }
    return 0;
}

int pgrid_dims_init(PGridDims *d, int world_size, char *err, size_t errlen) {
    if (init_dense(d, world_size, err, errlen) != 0) return -1;
    return check_expert(d, err, errlen);
}

int pgrid_dims_cp(const PGridDims *d) {
    return d->cp > 0 ? d->cp : d->world_size / (d->tp * d->pp * d->dp);
}

int pgrid_dims_ep(const PGridDims *d) { return d->ep > 0 ? d->ep : 1; }

int pgrid_dims_etp(const PGridDims *d) { return d->etp > 0 ? d->etp : d->tp; }

int pgrid_dims_edp(const PGridDims *d) {
    return d->world_size / (pgrid_dims_etp(d) * pgrid_dims_ep(d) * d->pp);
}

int pgrid_dims_has_experts(const PGridDims *d) {
    return pgrid_dims_ep(d) > 1 || pgrid_dims_etp(d) != d->tp;
}

PGridDecomp pgrid_dense(const PGridDims *d) {
    PGridDecomp g = {.ndims = PGRID_DENSE_NDIMS};
    g.size[PGRID_DIM_TP] = d->tp;
    g.size[PGRID_DIM_CP] = pgrid_dims_cp(d);
    g.size[PGRID_DIM_DP] = d->dp;
    g.size[PGRID_DIM_PP] = d->pp;
    g.name[PGRID_DIM_TP] = "tp";
    g.name[PGRID_DIM_CP] = "cp";
    g.name[PGRID_DIM_DP] = "dp";
    g.name[PGRID_DIM_PP] = "pp";
    return g;
}

PGridDecomp pgrid_expert(const PGridDims *d) {
    PGridDecomp g = {.ndims = PGRID_EXPERT_NDIMS};
    g.size[PGRID_EDIM_ETP] = pgrid_dims_etp(d);
    g.size[PGRID_EDIM_EP] = pgrid_dims_ep(d);
    g.size[PGRID_EDIM_EDP] = pgrid_dims_edp(d);
    g.size[PGRID_EDIM_PP] = d->pp;
    g.name[PGRID_EDIM_ETP] = "etp";
    g.name[PGRID_EDIM_EP] = "ep";
    g.name[PGRID_EDIM_EDP] = "edp";
    g.name[PGRID_EDIM_PP] = "pp";
    return g;
}

// ---- any decomposition and mask ------------------------------------------------------------

int pgrid_decomp_world(const PGridDecomp *g) {
    int n = 1;
    for (int i = 0; i < g->ndims; i++) n *= g->size[i];
    return n;
}

void pgrid_decomp_coord(const PGridDecomp *g, int rank, int *coord) {
    for (int i = 0; i < g->ndims; i++) {
        coord[i] = rank % g->size[i];
        rank /= g->size[i];
    }
}

int pgrid_decomp_rank(const PGridDecomp *g, const int *coord) {
    int rank = 0;
    for (int i = g->ndims - 1; i >= 0; i--) rank = rank * g->size[i] + coord[i];
    return rank;
}

int pgrid_mask_size(const PGridDecomp *g, unsigned mask) {
    int n = 1;
    for (int i = 0; i < g->ndims; i++)
        if (mask & PGRID_MASK(i)) n *= g->size[i];
    return n;
}

// Global rank of the member whose coordinates are `outer` outside the mask and `inner`
// inside it, each a mixed-radix number over its dimensions (first dimension fastest).
static int compose(const PGridDecomp *g, unsigned mask, int outer, int inner) {
    int rank = 0, stride = 1;
    for (int i = 0; i < g->ndims; i++) {
        int *digit = (mask & PGRID_MASK(i)) ? &inner : &outer;
        rank += (*digit % g->size[i]) * stride;
        *digit /= g->size[i];
        stride *= g->size[i];
    }
    return rank;
}

void pgrid_mask_members(const PGridDecomp *g, unsigned mask, int index, int *members) {
    int size = pgrid_mask_size(g, mask);
    for (int j = 0; j < size; j++) members[j] = compose(g, mask, index, j);
}

int pgrid_mask_index(const PGridDecomp *g, unsigned mask, int rank, int *position) {
    int coord[PGRID_MAX_DIMS], index = 0, pos = 0, outer_stride = 1, inner_stride = 1;
    pgrid_decomp_coord(g, rank, coord);
    for (int i = 0; i < g->ndims; i++) {
        if (mask & PGRID_MASK(i)) {
            pos += coord[i] * inner_stride;
            inner_stride *= g->size[i];
        } else {
            index += coord[i] * outer_stride;
            outer_stride *= g->size[i];
        }
    }
    if (position) *position = pos;
    return index;
}

// ---- the group kinds -----------------------------------------------------------------------

#define M(dim) PGRID_MASK(PGRID_DIM_##dim)
#define E(dim) PGRID_MASK(PGRID_EDIM_##dim)

// Each kind: its name, whether it masks the expert decomposition (else the dense one), its
// mask, and whether it keeps only the first and last member of each masked group (Megatron-
// Core's default embedding ranks).
static const struct {
    const char *name;
    int expert;
    unsigned mask;
    int ends_only;
} KINDS[PGRID_NKINDS] = {
    [PGRID_TP] = {"tp", 0, M(TP), 0},
    [PGRID_DP] = {"dp", 0, M(DP), 0},
    [PGRID_PP] = {"pp", 0, M(PP), 0},
    [PGRID_MODEL] = {"model", 0, M(TP) | M(PP), 0},
    [PGRID_EMBEDDING] = {"embedding", 0, M(PP), 1},
    [PGRID_CP] = {"cp", 0, M(CP), 0},
    [PGRID_DP_CP] = {"dp_cp", 0, M(DP) | M(CP), 0},
    [PGRID_TP_CP] = {"tp_cp", 0, M(TP) | M(CP), 0},
    [PGRID_EP] = {"ep", 1, E(EP), 0},
    [PGRID_ETP] = {"etp", 1, E(ETP), 0},
    [PGRID_ETP_EP] = {"etp_ep", 1, E(ETP) | E(EP), 0},
    [PGRID_EDP] = {"edp", 1, E(EDP), 0},
    [PGRID_ETP_EP_PP] = {"etp_ep_pp", 1, E(ETP) | E(EP) | E(PP), 0},
};

#undef M
#undef E

static int valid_kind(PGridKind kind) { return (int)kind >= 0 && (int)kind < PGRID_NKINDS; }

PGridCoord pgrid_coord(const PGridDims *d, int rank) {
    PGridDecomp g = pgrid_dense(d), e = pgrid_expert(d);
    int c[PGRID_MAX_DIMS], x[PGRID_MAX_DIMS];
    pgrid_decomp_coord(&g, rank, c);
    pgrid_decomp_coord(&e, rank, x);
    return (PGridCoord){.rank = rank, .tp_rank = c[PGRID_DIM_TP], .dp_rank = c[PGRID_DIM_DP],
                        .pp_rank = c[PGRID_DIM_PP], .cp_rank = c[PGRID_DIM_CP],
                        .etp_rank = x[PGRID_EDIM_ETP], .ep_rank = x[PGRID_EDIM_EP],
                        .edp_rank = x[PGRID_EDIM_EDP]};
}

int pgrid_kind_is_expert(PGridKind kind) { return valid_kind(kind) && KINDS[kind].expert; }

PGridDecomp pgrid_kind_decomp(const PGridDims *d, PGridKind kind) {
    return pgrid_kind_is_expert(kind) ? pgrid_expert(d) : pgrid_dense(d);
}

unsigned pgrid_kind_mask(PGridKind kind) { return valid_kind(kind) ? KINDS[kind].mask : 0; }

int pgrid_group_size(const PGridDims *d, PGridKind kind) {
    if (!valid_kind(kind)) return 0;
    PGridDecomp g = pgrid_kind_decomp(d, kind);
    int s = pgrid_mask_size(&g, KINDS[kind].mask);
    return KINDS[kind].ends_only && s > 2 ? 2 : s;
}

int pgrid_num_groups(const PGridDims *d, PGridKind kind) {
    if (!valid_kind(kind)) return 0;
    PGridDecomp g = pgrid_kind_decomp(d, kind);
    return d->world_size / pgrid_mask_size(&g, KINDS[kind].mask);
}

void pgrid_group_members(const PGridDims *d, PGridKind kind, int index, int *members) {
    if (!valid_kind(kind)) return;
    PGridDecomp g = pgrid_kind_decomp(d, kind);
    unsigned mask = KINDS[kind].mask;
    if (!KINDS[kind].ends_only) {
        pgrid_mask_members(&g, mask, index, members);
        return;
    }
    int s = pgrid_mask_size(&g, mask);
    members[0] = compose(&g, mask, index, 0);
    if (s > 1) members[1] = compose(&g, mask, index, s - 1);
}

int pgrid_group_index(const PGridDims *d, PGridKind kind, int rank, int *position) {
    if (position) *position = -1;
    if (!valid_kind(kind)) return -1;
    PGridDecomp g = pgrid_kind_decomp(d, kind);
    int pos, index = pgrid_mask_index(&g, KINDS[kind].mask, rank, &pos);
    if (KINDS[kind].ends_only) {
        int last = pgrid_mask_size(&g, KINDS[kind].mask) - 1;
        if (pos != 0 && pos != last) return -1;
        pos = pos ? 1 : 0;
    }
    if (position) *position = pos;
    return index;
}

const char *pgrid_kind_name(PGridKind kind) { return valid_kind(kind) ? KINDS[kind].name : "?"; }

// ---- the samples a rank holds ------------------------------------------------------------

int64_t pgrid_micro_first(int64_t batch_start, int global_batch, int dp_rank, int dp,
                          int micro_batch, int micro) {
    if (dp < 1 || micro_batch < 1 || global_batch < 1 || global_batch % ((int64_t)dp * micro_batch))
        return -1;
    int share = global_batch / dp;
    if (batch_start < 0 || dp_rank < 0 || dp_rank >= dp || micro < 0 || micro >= share / micro_batch)
        return -1;
    return batch_start + (int64_t)dp_rank * share + (int64_t)micro * micro_batch;
}
