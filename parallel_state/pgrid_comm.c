// parallel_state/pgrid_comm.c: communicators for each group of the process grid.
#include "pgrid_comm.h"
#include "core/check.h"

#include <stddef.h>
#include <stdlib.h>

// Where each group kind's communicator lives in ProcessGrid: a new kind is one more entry.
static const size_t FIELD[PGRID_NKINDS] = {
    [PGRID_TP] = offsetof(ProcessGrid, tp),       [PGRID_DP] = offsetof(ProcessGrid, dp),
    [PGRID_PP] = offsetof(ProcessGrid, pp),       [PGRID_MODEL] = offsetof(ProcessGrid, model),
    [PGRID_EMBEDDING] = offsetof(ProcessGrid, embedding),
    [PGRID_CP] = offsetof(ProcessGrid, cp),       [PGRID_DP_CP] = offsetof(ProcessGrid, dp_cp),
    [PGRID_TP_CP] = offsetof(ProcessGrid, tp_cp),
    [PGRID_EP] = offsetof(ProcessGrid, ep),       [PGRID_ETP] = offsetof(ProcessGrid, etp),
    [PGRID_ETP_EP] = offsetof(ProcessGrid, etp_ep), [PGRID_EDP] = offsetof(ProcessGrid, edp),
    [PGRID_ETP_EP_PP] = offsetof(ProcessGrid, etp_ep_pp),
};

static Comm **field(const ProcessGrid *g, PGridKind kind) {
    return (Comm **)((char *)g + FIELD[kind]);
}

Comm *pgrid_comm(const ProcessGrid *g, PGridKind kind) {
    return (int)kind >= 0 && kind < PGRID_NKINDS ? *field(g, kind) : NULL;
}

// One Comm for the group of `kind` holding this rank; NULL if the rank is in none.
static Comm *make_group(const PGridDims *d, PGridKind kind, int rank, PGridCommKind ck,
                        void *stream, double timeout_s) {
    // Key = position in the group, so the new communicator's ranks follow group order.
    int key, index = pgrid_group_index(d, kind, rank, &key), size = pgrid_group_size(d, kind);
    MPI_Comm split;
    int *members = core_calloc((size_t)size, sizeof(int));
    if (index >= 0) pgrid_group_members(d, kind, index, members);
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, index >= 0 ? index : MPI_UNDEFINED, key >= 0 ? key : 0,
                             &split));
    Comm *c = NULL;
    if (split != MPI_COMM_NULL) {
#ifdef MEGAC_HAVE_CUDA
        if (ck == PGRID_COMM_NCCL)
            c = comm_nccl_create(split, pgrid_kind_name(kind), members, stream, timeout_s);
        else if (ck == PGRID_COMM_STAGED)
            c = comm_staged_create(split, pgrid_kind_name(kind), members, stream, timeout_s);
        else
#endif
            c = comm_mpi_create(split, pgrid_kind_name(kind), members, timeout_s);
        MPI_CHECK(MPI_Comm_free(&split));
    }
    (void)ck;
    (void)stream;
    free(members);
    return c;
}

ProcessGrid *pgrid_create(const PGridDims *sizes, PGridCommKind kind, void *cuda_stream,
                          double timeout_s) {
    int world = 0, rank = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
#ifndef MEGAC_HAVE_CUDA
    if (kind != PGRID_COMM_MPI) core_usage_error("device communicators requested but megac was built without CUDA");
#endif
    ProcessGrid *g = core_calloc(1, sizeof *g);
    char err[256];
    g->dims = *sizes;
    if (pgrid_dims_init(&g->dims, world, err, sizeof err) != 0) core_usage_error("%s", err);
    int pp = g->dims.pp;
    g->coord = pgrid_coord(&g->dims, rank);
    int s = g->coord.pp_rank;
    g->pp_prev = s > 0 ? s - 1 : -1;
    g->pp_next = s < pp - 1 ? s + 1 : -1;
    g->is_first_stage = (s == 0);
    g->is_last_stage = (s == pp - 1);

    int *all = core_calloc((size_t)world, sizeof(int));
    for (int i = 0; i < world; i++) all[i] = i;
    g->world = comm_mpi_create(MPI_COMM_WORLD, "world", all, timeout_s);
    free(all);
    int experts = pgrid_dims_has_experts(&g->dims);
    for (PGridKind k = 0; k < PGRID_NKINDS; k++)
        if (experts || !pgrid_kind_is_expert(k) || k == PGRID_EP)
            *field(g, k) = make_group(&g->dims, k, rank, kind, cuda_stream, timeout_s);
    if (!experts) {  // the expert groups are dense ones: the same Comm (no extra NCCL comms)
        g->etp = g->tp;
        g->etp_ep = g->tp;
        g->edp = g->dp_cp;
        g->etp_ep_pp = g->model;
    }
    g->tp_host = make_group(&g->dims, PGRID_TP, rank, PGRID_COMM_MPI, NULL, timeout_s);
    g->cp_host = make_group(&g->dims, PGRID_CP, rank, PGRID_COMM_MPI, NULL, timeout_s);
    return g;
}

// 1 if the Comm of `kind` is a dense kind's too (an expert kind without experts).
static int is_alias(const ProcessGrid *g, PGridKind kind) {
    int alias = 0;
    for (PGridKind j = 0; j < PGRID_NKINDS && !alias; j++)
        alias = pgrid_kind_is_expert(kind) && !pgrid_kind_is_expert(j) && *field(g, j) == *field(g, kind);
    return alias;
}

void pgrid_for_each_comm(const ProcessGrid *g, void (*fn)(Comm *c, void *arg), void *arg) {
    fn(g->world, arg);
    for (PGridKind k = 0; k < PGRID_NKINDS; k++)
        if (*field(g, k) && !is_alias(g, k)) fn(*field(g, k), arg);
}

void pgrid_destroy(ProcessGrid *g) {
    if (!g) return;
    comm_destroy(g->world);
    for (PGridKind k = 0; k < PGRID_NKINDS; k++) {
        if (!is_alias(g, k)) comm_destroy(*field(g, k));  // (an alias: a dense kind's Comm)
    }
    comm_destroy(g->tp_host);
    comm_destroy(g->cp_host);
    free(g);
}
