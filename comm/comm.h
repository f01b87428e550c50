// comm/comm.h: Comm, one communicator per process group (TP, PP, DP, ...).
//
// A small interface struct (function pointers + per-backend state in a union) so every
// layer is written once: the MPI backend moves host memory, the NCCL backend device memory.
// Ranks passed to send/recv are group-local (0 .. size-1); a negative peer means "nobody"
// (like MPI_PROC_NULL), so pipeline ends need no special case.
//
// Every public call counts the bytes this rank moves with the algorithm's traffic:
//   all-reduce      2(n-1)/n x buffer      (ring: reduce-scatter + all-gather)
//   all-gather      (n-1)/n  x output buffer
//   reduce-scatter  (n-1)/n  x input buffer
//   broadcast       buffer (n > 1)
//   send / recv     buffer
//   all-to-all      the blocks sent to the other ranks (sum of send_counts but its own)
// A group of one moves nothing and every collective is a copy or a no-op.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <mpi.h>  // defines: MPI_Comm

// COMM_BF16 / COMM_F16: 16-bit floats (activations under --bf16 / --fp16); sums and
// maxima are computed in fp32 and rounded to the type after each addition.
typedef enum { COMM_F32, COMM_F64, COMM_I32, COMM_BF16, COMM_F16 } CommDtype;
typedef enum { COMM_SUM, COMM_MAX, COMM_AVG } CommOp;
typedef enum {
    COMM_ALL_REDUCE, COMM_ALL_GATHER, COMM_REDUCE_SCATTER, COMM_BROADCAST, COMM_SEND, COMM_RECV,
    COMM_ALL_TO_ALL, COMM_NKINDS
} CommKind;

// One kind of call a layer makes over a group, listed by the layer beside the calls
// themselves (cp_attention_calls, tp_linear_calls, ...) so that `megac plan` counts what the
// layer moves without mirroring it: `times` calls of `kind`, each over `count` elements
// (all_reduce: the whole buffer; all_gather, reduce_scatter: per rank, as count_per_rank;
// send, recv: the message; all_to_all: what goes to the other ranks, in all), 4 bytes each
// when f32 (fp32, or int32), else of the activation type.
typedef struct {
    CommKind kind;
    size_t count;
    int times;
    int f32;
} CommCall;

typedef struct {
    uint64_t bytes[COMM_NKINDS];  // algorithm traffic sent by this rank, per kind
    uint64_t calls[COMM_NKINDS];  // number of calls, per kind
} CommStats;

typedef struct Comm Comm;

// A nonblocking operation in flight (comm_iall_gather, comm_iall_reduce, comm_ireduce_scatter,
// comm_isend_recv), finished by comm_wait or a comm_test that returns 1. Several may be in
// flight per Comm; all ranks of the group must start the collectives in the same order. NCCL
// runs them in start order on one side stream per Comm (a wait or test covers every earlier
// one too).
typedef struct {
    int active;          // started and not yet finished
    CommKind kind;       // which operation (for messages)
    void *out;           // the result buffer (MPI: divided by the group size for COMM_AVG)
    size_t count;        // elements of out
    CommDtype t;
    CommOp op;
    MPI_Request mpi[2];  // MPI backend (and the staged one's inner MPI): n_mpi of them
    int n_mpi;
    void *done;          // NCCL backend: the event recorded on the side stream right after it
    void *host[2];       // staged backend, point-to-point: (send, recv) pinned host copies
    size_t recv_bytes;   // staged: bytes of host[1] to copy into `out` when finished
    void *scratch;       // MPI all-to-all: its count arrays, freed when finished
} CommRequest;

enum { COMM_NCCL_EVENTS = 8 };  // NCCL: side-stream events, reused round-robin by requests

typedef struct {
    void (*all_reduce)(Comm *c, void *buf, size_t count, CommDtype t, CommOp op);
    void (*all_gather)(Comm *c, const void *in, void *out, size_t count_per_rank, CommDtype t);
    void (*reduce_scatter)(Comm *c, const void *in, void *out, size_t count_per_rank,
                           CommDtype t, CommOp op);
    void (*broadcast)(Comm *c, void *buf, size_t count, CommDtype t, int root);
    void (*send)(Comm *c, const void *buf, size_t count, CommDtype t, int peer);
    void (*recv)(Comm *c, void *buf, size_t count, CommDtype t, int peer);
    void (*send_recv)(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                      size_t rcount, int src, CommDtype t);
    void (*barrier)(Comm *c);
    void (*destroy)(Comm *c);
    // optional (NULL: comm_iall_gather runs the blocking all_gather, comm_wait does nothing)
    void (*iall_gather)(Comm *c, const void *in, void *out, size_t count_per_rank, CommDtype t,
                        CommRequest *req);
    void (*wait)(Comm *c, CommRequest *req);
    // optional (NULL: comm_iall_reduce / comm_ireduce_scatter run the blocking op at the start)
    void (*iall_reduce)(Comm *c, void *buf, size_t count, CommDtype t, CommOp op, CommRequest *req);
    void (*ireduce_scatter)(Comm *c, const void *in, void *out, size_t count_per_rank,
                            CommDtype t, CommOp op, CommRequest *req);
    int (*test)(Comm *c, CommRequest *req);  // 1 when finished (then req is done); NULL: 0
    // nonblocking point-to-point (every backend has it); dst / src < 0 skip a half
    void (*isend_recv)(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                       size_t rcount, int src, CommDtype t, CommRequest *req);
    // per-peer counts (every backend has it; comm_all_to_all_v's contract)
    void (*all_to_all_v)(Comm *c, const void *in, const size_t *send_counts, void *out,
                         const size_t *recv_counts, CommDtype t);
    // optional (NULL: comm_iall_to_all_v runs the blocking all_to_all_v at the start)
    void (*iall_to_all_v)(Comm *c, const void *in, const size_t *send_counts, void *out,
                          const size_t *recv_counts, CommDtype t, CommRequest *req);
} CommVtable;

struct Comm {
    const CommVtable *vt;
    char name[32];      // "world", or the group kind's pgrid_kind_name ("tp", "dp_cp", ...)
    int rank, size;     // this rank's index in the group, the group's size
    int *members;       // (size) global ranks of the group, in group order
    double timeout_s;   // a wait longer than this ends the job naming the op (0 = forever)
    CommStats stats;
    union {
        struct { MPI_Comm comm; MPI_Op half_op[2][2]; } mpi;  // [bf16, f16][sum, max]
        struct { void *nccl_comm; void *stream; MPI_Comm boot;  // nccl_comm NULL: size 1
                 void *side, *ready, *done[COMM_NCCL_EVENTS];  // nonblocking: stream and
                 unsigned n_done; } nccl;                       // events, made lazily
        struct { Comm *inner; void *stream; void *host[2]; size_t cap[2]; } staged;
    } u;
};

// --- backends --------------------------------------------------------------------------
// Wraps an MPI communicator (duplicated; the caller keeps its own). Host memory.
// `members` (size) are the group's global ranks. Aborts the job on MPI failure.
Comm *comm_mpi_create(MPI_Comm mpi_comm, const char *name, const int *members, double timeout_s);

#ifdef MEGAC_HAVE_CUDA
// NCCL communicator over the same ranks as `mpi_comm` (used only to share the unique id),
// operating on device memory on `cuda_stream` (a cudaStream_t). Collectives and p2p are
// stream-ordered: they are queued behind the compute on that stream and return at once; the
// host waits only where it reads a value. A group of one never touches NCCL. Aborts on failure.
Comm *comm_nccl_create(MPI_Comm mpi_comm, const char *name, const int *members,
                       void *cuda_stream, double timeout_s);
// Staged communicator for device memory: device -> pinned host -> MPI -> device, ordered on
// `cuda_stream`. Slow; it exists so that several ranks can share one GPU (NCCL refuses two
// ranks on one device): tests and single-GPU machines. Aborts on failure.
Comm *comm_staged_create(MPI_Comm mpi_comm, const char *name, const int *members,
                         void *cuda_stream, double timeout_s);
#endif

// --- operations (count bytes, then dispatch) -----------------------------------------------
// buf (count) reduced over the group in place; AVG = SUM / size.
void comm_all_reduce(Comm *c, void *buf, size_t count, CommDtype t, CommOp op);
// in (count_per_rank) from every rank -> out (size * count_per_rank), in rank order.
void comm_all_gather(Comm *c, const void *in, void *out, size_t count_per_rank, CommDtype t);
// The same, nonblocking: starts it and returns; out (and in) must not be touched until
// comm_wait(c, req). MPI: MPI_Iallgather (progressed by any MPI call of this process); NCCL:
// on a side stream that first waits for the work queued so far, comm_wait makes the Comm's
// stream wait for it (the host does not block). Counted like comm_all_gather, at the start.
void comm_iall_gather(Comm *c, const void *in, void *out, size_t count_per_rank, CommDtype t,
                      CommRequest *req);
// Finishes req (no-op when not active): MPI waits (honouring the timeout); NCCL orders the
// Comm's stream after it. Aborts the job on failure.
void comm_wait(Comm *c, CommRequest *req);
// comm_all_reduce, nonblocking: buf must not be touched until the request is finished. The
// same algorithm (MPI_Iallreduce; NCCL's all-reduce) as the blocking call, so the same bits.
// Counted like comm_all_reduce, at the start. Backends without it (staged) run it blocking.
void comm_iall_reduce(Comm *c, void *buf, size_t count, CommDtype t, CommOp op, CommRequest *req);
// comm_reduce_scatter, nonblocking: in and out untouchable until the request is finished.
// Same algorithm and counting as the blocking call.
void comm_ireduce_scatter(Comm *c, const void *in, void *out, size_t count_per_rank, CommDtype t,
                          CommOp op, CommRequest *req);
// Explicit progress: MPI collectives advance only inside MPI calls, so poll in-flight requests
// while computing. Returns 1 when req is finished (inactive, or completed now: then it is
// finished as by comm_wait), 0 while it runs. Aborts the job on failure.
int comm_test(Comm *c, CommRequest *req);
// in (size * count_per_rank) reduced; rank r gets block r in out (count_per_rank).
void comm_reduce_scatter(Comm *c, const void *in, void *out, size_t count_per_rank,
                         CommDtype t, CommOp op);
// buf (count) from group rank `root` to all.
void comm_broadcast(Comm *c, void *buf, size_t count, CommDtype t, int root);
// Blocking point-to-point with group-local peers; peer < 0 is a no-op.
void comm_send(Comm *c, const void *buf, size_t count, CommDtype t, int peer);
void comm_recv(Comm *c, void *buf, size_t count, CommDtype t, int peer);
// Send sbuf to dst and receive rbuf from src at once; never deadlocks whatever the order
// in which the ranks call it. dst or src < 0 skips that half.
void comm_send_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                    size_t rcount, int src, CommDtype t);
// comm_send_recv, nonblocking (ring attention passes K/V to the next rank while it computes):
// starts both halves at once and returns; sbuf and rbuf must not be touched until comm_wait
// (or a comm_test that returns 1). MPI: MPI_Irecv + MPI_Isend; NCCL: one ncclGroup of the
// send and the recv on the side stream (comm_iall_gather's rules); staged: device -> host
// copy, MPI, and host -> device at the finish. Counted like comm_send_recv, at the start. A
// cycle of ranks (each sends to the next, receives from the previous) must pair each rank's
// halves in one call: separate sends on NCCL could wait for each other's receives forever.
void comm_isend_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                     size_t rcount, int src, CommDtype t, CommRequest *req);
// One half of comm_isend_recv: send buf (count) to peer / receive it from peer; peer < 0 is
// a no-op (an inactive request).
void comm_isend(Comm *c, const void *buf, size_t count, CommDtype t, int peer, CommRequest *req);
void comm_irecv(Comm *c, void *buf, size_t count, CommDtype t, int peer, CommRequest *req);
// All-to-all with per-peer counts (MoE token dispatch): in holds one block per group rank in
// rank order, send_counts[r] elements for rank r; out gets one block from each rank in rank
// order, recv_counts[r] elements from rank r (both contiguous: the displacements are the
// prefix sums of the counts; in and out must not overlap). Every rank of the group calls it,
// zero counts included. The counts must agree pairwise (rank a's send_counts[b] == rank b's
// recv_counts[a]): exchange them first, e.g. with this call on one COMM_I32 per rank (counts
// all 1). MPI: MPI_Alltoallv (each count and prefix sum must fit in an int); NCCL: one group of
// a send and a receive per peer with a nonzero count, stream-ordered; staged: through pinned
// host memory. The own block is a local copy (also in a group of one), not counted as traffic.
void comm_all_to_all_v(Comm *c, const void *in, const size_t *send_counts, void *out,
                       const size_t *recv_counts, CommDtype t);
// The same, nonblocking (the MoE alltoall dispatcher's exchange while the shared expert
// computes): in, out and the counts' meaning as above; in and out must not be touched until
// comm_wait (or a comm_test that returns 1); the count arrays may be reused at once. MPI:
// MPI_Ialltoallv; NCCL: the same group on the side stream (comm_iall_gather's rules), the own
// block copied on the Comm's stream; staged: blocking at the start. Counted like
// comm_all_to_all_v, at the start; the same bits.
void comm_iall_to_all_v(Comm *c, const void *in, const size_t *send_counts, void *out,
                        const size_t *recv_counts, CommDtype t, CommRequest *req);
void comm_barrier(Comm *c);
// Frees the communicator. NULL is fine.
void comm_destroy(Comm *c);

// Size in bytes of one element of t. Pure.
size_t comm_dtype_size(CommDtype t);
// "all_reduce", "all_gather", ... Pure.
const char *comm_kind_name(CommKind k);
// Zeroes the counters. Never fails.
void comm_stats_reset(Comm *c);
