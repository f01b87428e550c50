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
    Comm *cp_host;         // the context-parallel group over MPI (host memory: a sequence's
                           // count of unmasked targets, --eod-mask-loss)
} ProcessGrid;

// The one constructor: builds the grid of the layout *sizes names (its tp, cp, pp, ep, etp;
// pgrid_dims_init derives the rest from the world size) over MPI_COMM_WORLD (MPI must be
// initialised), one Comm per group kind of pgrid.h. A layout that does not divide the world
// size: every rank prints the same one-line error and exits with code 2.
// `kind` picks MPI (host memory), NCCL or STAGED (device memory, ordered on `cuda_stream`)
// for the group communicators. `timeout_s` bounds every wait (0 = forever).
ProcessGrid *pgrid_create(const PGridDims *sizes, PGridCommKind kind, void *cuda_stream,
                          double timeout_s);

// Every group kind of the grid, once each: fn(c, arg) for each distinct Comm of this rank
// (an expert kind that is a dense kind's Comm comes once; kinds this rank is in none of are
// skipped), the world Comm included. Never fails.
void pgrid_for_each_comm(const ProcessGrid *g, void (*fn)(Comm *c, void *arg), void *arg);

// The communicator of this rank's group of `kind` (its rank in it = its position in the group,
// pgrid_group_index); NULL if the rank is in none (embedding on a middle stage). Pure.
Comm *pgrid_comm(const ProcessGrid *g, PGridKind kind);

// Frees the communicators and the grid. NULL is fine.
void pgrid_destroy(ProcessGrid *g);
