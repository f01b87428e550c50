// parallel_state/pgrid.c: pure rank arithmetic of the process grid (see pgrid.h).
#include "pgrid.h"
#include <stdio.h>

int pgrid_dims_init(PGridDims *d, int world_size, int tp, int pp, char *err, size_t errlen) {
    if (world_size <= 0 || tp <= 0 || pp <= 0) {
        snprintf(err, errlen, "sizes must be positive: world-size %d, tensor-model-parallel-size %d, "
                 "pipeline-model-parallel-size %d", world_size, tp, pp);
        return -1;
    }
    if (world_size % ((long long)tp * pp) != 0) {
        snprintf(err, errlen, "world-size %d is not divisible by tensor-model-parallel-size %d x "
                 "pipeline-model-parallel-size %d = %lld", world_size, tp, pp, (long long)tp * pp);
        return -1;
    }
    d->world_size = world_size;
    d->tp = tp;
    d->pp = pp;
    d->dp = world_size / (tp * pp);
    return 0;
}

PGridCoord pgrid_coord(const PGridDims *d, int rank) {
    PGridCoord c = {.rank = rank};
    c.tp_rank = rank % d->tp;
    c.dp_rank = (rank / d->tp) % d->dp;
    c.pp_rank = rank / (d->tp * d->dp);
    return c;
}

int pgrid_rank(const PGridDims *d, int tp_rank, int dp_rank, int pp_rank) {
    return tp_rank + d->tp * (dp_rank + d->dp * pp_rank);
}

int pgrid_group_size(const PGridDims *d, PGridKind kind) {
    switch (kind) {
    case PGRID_TP: return d->tp;
    case PGRID_DP: return d->dp;
    case PGRID_PP: return d->pp;
    case PGRID_MODEL: return d->tp * d->pp;
    case PGRID_EMBEDDING: return d->pp > 1 ? 2 : 1;
    default: return 0;
    }
}

int pgrid_num_groups(const PGridDims *d, PGridKind kind) {
    if (kind == PGRID_EMBEDDING) return pgrid_num_groups(d, PGRID_PP);
    int s = pgrid_group_size(d, kind);
    return s ? d->world_size / s : 0;
}

// Each group is fixed by the coordinates that do not vary inside it. Group indices run
// over those fixed coordinates in the order that makes the smallest member increase.
void pgrid_group_members(const PGridDims *d, PGridKind kind, int index, int *members) {
    switch (kind) {
    case PGRID_TP: {  // fixed (dp, pp): index = dp + DP * pp
        for (int t = 0; t < d->tp; t++) members[t] = index * d->tp + t;
        break;
    }
    case PGRID_DP: {  // fixed (tp, pp): index = tp + TP * pp
        int tp = index % d->tp, pp = index / d->tp;
        for (int r = 0; r < d->dp; r++) members[r] = pgrid_rank(d, tp, r, pp);
        break;
    }
    case PGRID_PP: {  // fixed (tp, dp): index = tp + TP * dp
        int tp = index % d->tp, dp = index / d->tp;
        for (int p = 0; p < d->pp; p++) members[p] = pgrid_rank(d, tp, dp, p);
        break;
    }
    case PGRID_MODEL: {  // fixed dp: index = dp; members ordered by (pp, tp)
        for (int p = 0; p < d->pp; p++)
            for (int t = 0; t < d->tp; t++) members[p * d->tp + t] = pgrid_rank(d, t, index, p);
        break;
    }
    case PGRID_EMBEDDING: {  // first and last stage of pipeline group `index`
        int tp = index % d->tp, dp = index / d->tp;
        members[0] = pgrid_rank(d, tp, dp, 0);
        if (d->pp > 1) members[1] = pgrid_rank(d, tp, dp, d->pp - 1);
        break;
    }
    default: break;
    }
}

int pgrid_group_index(const PGridDims *d, PGridKind kind, int rank) {
    PGridCoord c = pgrid_coord(d, rank);
    switch (kind) {
    case PGRID_TP: return c.dp_rank + d->dp * c.pp_rank;
    case PGRID_DP: return c.tp_rank + d->tp * c.pp_rank;
    case PGRID_PP: return c.tp_rank + d->tp * c.dp_rank;
    case PGRID_MODEL: return c.dp_rank;
    case PGRID_EMBEDDING:
        return (c.pp_rank == 0 || c.pp_rank == d->pp - 1) ? c.tp_rank + d->tp * c.dp_rank : -1;
    default: return -1;
    }
}

const char *pgrid_kind_name(PGridKind kind) {
    static const char *names[PGRID_NKINDS] = {"tp", "dp", "pp", "model", "embedding"};
    return kind < PGRID_NKINDS ? names[kind] : "?";
}
