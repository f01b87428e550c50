// parallel_state/pgrid.c: pure rank arithmetic of the process grid (see pgrid.h): one
// masked-group generator over an ordered list of dimensions, and the dense group kinds as
// a table of masks.
#include "pgrid.h"
#include <stdio.h>

// ---- the named sizes ---------------------------------------------------------------------

int pgrid_dims_init_cp(PGridDims *d, int world_size, int tp, int cp, int pp, char *err,
                       size_t errlen) {
    char cps[48] = "";  // CP is named when it is not 1 (megac train cannot set it yet)
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
    d->tp = tp;
    d->pp = pp;
    d->dp = (int)(world_size / model);
    return 0;
}

int pgrid_dims_init(PGridDims *d, int world_size, int tp, int pp, char *err, size_t errlen) {
    return pgrid_dims_init_cp(d, world_size, tp, 1, pp, err, errlen);
}

int pgrid_dims_cp(const PGridDims *d) { return d->world_size / (d->tp * d->pp * d->dp); }

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

// ---- the dense group kinds ---------------------------------------------------------------

#define M(dim) PGRID_MASK(PGRID_DIM_##dim)

// Each kind: its name, its mask over tp-cp-dp-pp, and whether it keeps only the first and
// last member of each masked group (Megatron-Core's default embedding ranks).
static const struct {
    const char *name;
    unsigned mask;
    int ends_only;
} KINDS[PGRID_NKINDS] = {
    [PGRID_TP] = {"tp", M(TP), 0},
    [PGRID_DP] = {"dp", M(DP), 0},
    [PGRID_PP] = {"pp", M(PP), 0},
    [PGRID_MODEL] = {"model", M(TP) | M(PP), 0},
    [PGRID_EMBEDDING] = {"embedding", M(PP), 1},
    [PGRID_CP] = {"cp", M(CP), 0},
    [PGRID_DP_CP] = {"dp_cp", M(DP) | M(CP), 0},
    [PGRID_TP_CP] = {"tp_cp", M(TP) | M(CP), 0},
};

#undef M

static int valid_kind(PGridKind kind) { return (int)kind >= 0 && (int)kind < PGRID_NKINDS; }

PGridCoord pgrid_coord(const PGridDims *d, int rank) {
    PGridDecomp g = pgrid_dense(d);
    int c[PGRID_MAX_DIMS];
    pgrid_decomp_coord(&g, rank, c);
    return (PGridCoord){.rank = rank, .tp_rank = c[PGRID_DIM_TP], .dp_rank = c[PGRID_DIM_DP],
                        .pp_rank = c[PGRID_DIM_PP], .cp_rank = c[PGRID_DIM_CP]};
}

unsigned pgrid_kind_mask(PGridKind kind) { return valid_kind(kind) ? KINDS[kind].mask : 0; }

int pgrid_group_size(const PGridDims *d, PGridKind kind) {
    if (!valid_kind(kind)) return 0;
    PGridDecomp g = pgrid_dense(d);
    int s = pgrid_mask_size(&g, KINDS[kind].mask);
    return KINDS[kind].ends_only && s > 2 ? 2 : s;
}

int pgrid_num_groups(const PGridDims *d, PGridKind kind) {
    if (!valid_kind(kind)) return 0;
    PGridDecomp g = pgrid_dense(d);
    return d->world_size / pgrid_mask_size(&g, KINDS[kind].mask);
}

void pgrid_group_members(const PGridDims *d, PGridKind kind, int index, int *members) {
    if (!valid_kind(kind)) return;
    PGridDecomp g = pgrid_dense(d);
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
    PGridDecomp g = pgrid_dense(d);
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
