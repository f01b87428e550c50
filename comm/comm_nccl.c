// comm/comm_nccl.c: the NCCL backend of Comm (device memory, one CUDA stream).
//
// The unique id is made on group rank 0 and shared over the group's MPI communicator.
// Operations are enqueued on the Comm's stream and then synchronised with a polling loop
// that honours the timeout, so a stuck peer ends the job with a message instead of a hang.
#include "comm.h"
#include "core/check_cuda.h"
#include "core/timer.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

static ncclDataType_t nccl_type(CommDtype t) {
    switch (t) {
    case COMM_F32: return ncclFloat32;
    case COMM_F64: return ncclFloat64;
    case COMM_I32: return ncclInt32;
    }
    return ncclFloat32;
}

static ncclRedOp_t nccl_op(CommOp op) {
    return op == COMM_MAX ? ncclMax : op == COMM_AVG ? ncclAvg : ncclSum;
}

#define NC(c) ((ncclComm_t)(c)->u.nccl.nccl_comm)
#define ST(c) ((cudaStream_t)(c)->u.nccl.stream)

// Waits for the stream; past the timeout, aborts the NCCL communicator and the job.
static void wait_stream(Comm *c, const char *op) {
    double t0 = core_now();
    for (;;) {
        cudaError_t e = cudaStreamQuery(ST(c));
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) core_die_cuda(e, op, __FILE__, __LINE__);
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(NC(c), &async));
        if (async != ncclSuccess) core_die_nccl(async, op, __FILE__, __LINE__);
        if (c->timeout_s > 0 && core_now() - t0 > c->timeout_s) {
            ncclCommAbort(NC(c));
            core_fatal("NCCL %s on group %s (size %d, this rank #%d) did not complete within %.0f s",
                       op, c->name, c->size, c->rank, c->timeout_s);
        }
        sched_yield();
    }
}

static void nccl_all_reduce(Comm *c, void *buf, size_t n, CommDtype t, CommOp op) {
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), nccl_op(op), NC(c), ST(c)));
    wait_stream(c, "all_reduce");
}

static void nccl_all_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t) {
    NCCL_CHECK(ncclAllGather(in, out, per, nccl_type(t), NC(c), ST(c)));
    wait_stream(c, "all_gather");
}

static void nccl_reduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t,
                                CommOp op) {
    NCCL_CHECK(ncclReduceScatter(in, out, per, nccl_type(t), nccl_op(op), NC(c), ST(c)));
    wait_stream(c, "reduce_scatter");
}

static void nccl_broadcast(Comm *c, void *buf, size_t n, CommDtype t, int root) {
    NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_type(t), root, NC(c), ST(c)));
    wait_stream(c, "broadcast");
}

static void nccl_send(Comm *c, const void *buf, size_t n, CommDtype t, int peer) {
    NCCL_CHECK(ncclSend(buf, n, nccl_type(t), peer, NC(c), ST(c)));
    wait_stream(c, "send");
}

static void nccl_recv(Comm *c, void *buf, size_t n, CommDtype t, int peer) {
    NCCL_CHECK(ncclRecv(buf, n, nccl_type(t), peer, NC(c), ST(c)));
    wait_stream(c, "recv");
}

// Grouped send + recv: NCCL schedules both together, so no call order can deadlock.
static void nccl_send_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf, size_t rn,
                           int src, CommDtype t) {
    NCCL_CHECK(ncclGroupStart());
    if (dst >= 0) NCCL_CHECK(ncclSend(sbuf, sn, nccl_type(t), dst, NC(c), ST(c)));
    if (src >= 0) NCCL_CHECK(ncclRecv(rbuf, rn, nccl_type(t), src, NC(c), ST(c)));
    NCCL_CHECK(ncclGroupEnd());
    wait_stream(c, "send_recv");
}

static void nccl_barrier(Comm *c) {
    CUDA_CHECK(cudaStreamSynchronize(ST(c)));
    MPI_CHECK(MPI_Barrier(c->u.nccl.boot));
}

static void nccl_destroy(Comm *c) {
    ncclCommDestroy(NC(c));
    MPI_Comm_free(&c->u.nccl.boot);
}

static const CommVtable NCCL_VTABLE = {
    .all_reduce = nccl_all_reduce, .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter, .broadcast = nccl_broadcast, .send = nccl_send,
    .recv = nccl_recv, .send_recv = nccl_send_recv, .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

Comm *comm_nccl_create(MPI_Comm mpi_comm, const char *name, const int *members,
                       void *cuda_stream, double timeout_s) {
    Comm *c = core_calloc(1, sizeof *c);
    c->vt = &NCCL_VTABLE;
    snprintf(c->name, sizeof c->name, "%s", name);
    MPI_CHECK(MPI_Comm_dup(mpi_comm, &c->u.nccl.boot));
    MPI_CHECK(MPI_Comm_rank(c->u.nccl.boot, &c->rank));
    MPI_CHECK(MPI_Comm_size(c->u.nccl.boot, &c->size));
    c->members = core_calloc((size_t)c->size, sizeof(int));
    memcpy(c->members, members, (size_t)c->size * sizeof(int));
    c->timeout_s = timeout_s;
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->u.nccl.boot));
    ncclComm_t nc;
    NCCL_CHECK(ncclCommInitRank(&nc, c->size, id, c->rank));
    c->u.nccl.nccl_comm = nc;
    c->u.nccl.stream = cuda_stream;
    return c;
}
