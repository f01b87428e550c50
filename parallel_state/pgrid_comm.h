// parallel_state/pgrid_comm.h: ProcessGrid, the one struct every module gets passed.
//
// It holds this rank's coordinates, its pipeline neighbours and one Comm per group, built
// from the pure arithmetic in pgrid.h with MPI_Comm_split. No global state: callers pass
// the grid explicitly.
#pragma once
#include "pgrid.h"
#include "comm/comm.h"

// MPI: host memory. NCCL: device memory, stream-ordered. STAGED: device memory through host
// memory and MPI (several ranks may share a GPU; for testing).
typedef enum { PGRID_COMM_MPI, PGRID_COMM_NCCL, PGRID_COMM_STAGED } PGridCommKind;

typedef struct {
    PGridDims dims;
    PGridCoord coord;
    int pp_prev, pp_next;  // group-local ranks of the previous/next stage in `pp`; -1 at the ends
    int is_first_stage, is_last_stage;
    Comm *world;           // all ranks (always MPI: control traffic, host memory)
    Comm *tp, *dp, *pp, *model;
    Comm *embedding;       // first + last stage; NULL on middle stages
    Comm *cp, *dp_cp, *tp_cp;  // the groups spanning context parallelism; with CP = 1, cp is
                               // one rank and dp_cp, tp_cp hold dp's and tp's ranks in order
    Comm *ep, *etp, *etp_ep, *edp, *etp_ep_pp;  // the expert groups (pgrid.h's second
                           // decomposition); without experts (pgrid_dims_has_experts 0) ep
                           // is one rank and the others ARE the dense Comms (etp, etp_ep: tp;
                           // edp: dp_cp; etp_ep_pp: model), so no extra NCCL communicators
    Comm *tp_host;         // the tensor-parallel group over MPI (host memory, e.g. input
                           // batches), whatever the kind of the others
} ProcessGrid;

// Builds the grid over MPI_COMM_WORLD (MPI must be initialised), one Comm per group kind of
// pgrid.h. The layout must divide the world size: otherwise every rank prints the same
// one-line error and exits with code 2.
// `kind` picks MPI (host memory), NCCL or STAGED (device memory, ordered on `cuda_stream`)
// for the group communicators. `timeout_s` bounds every wait (0 = forever).
ProcessGrid *pgrid_create(int tp, int pp, PGridCommKind kind, void *cuda_stream, double timeout_s);

// pgrid_create with a context-parallel size: world = tp * cp * dp * pp (pgrid.h's order).
ProcessGrid *pgrid_create_cp(int tp, int cp, int pp, PGridCommKind kind, void *cuda_stream,
                             double timeout_s);

// pgrid_create_cp with the expert decomposition's sizes: expert-parallel `ep`, expert-tensor-
// parallel `etp` (1 or tp), world = etp * ep * edp * pp (pgrid_dims_init_moe's checks; a bad
// layout is the same one-line error, exit 2). ep = 1, etp = tp is pgrid_create_cp.
ProcessGrid *pgrid_create_moe(int tp, int cp, int pp, int ep, int etp, PGridCommKind kind,
                              void *cuda_stream, double timeout_s);

// The communicator of this rank's group of `kind` (its rank in it = its position in the group,
// pgrid_group_index); NULL if the rank is in none (embedding on a middle stage). Pure.
Comm *pgrid_comm(const ProcessGrid *g, PGridKind kind);

// Frees the communicators and the grid. NULL is fine.
void pgrid_destroy(ProcessGrid *g);
