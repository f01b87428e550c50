// comm/comm_nccl.c: the NCCL backend of Comm (device memory, one CUDA stream).
//
// The unique id is made on group rank 0 and shared over the group's MPI communicator (in
// the CPU emulator, MEGAC_CUDA_EMU, the fake NCCL is built directly over that communicator).
// Operations are enqueued on the Comm's stream, the same stream as the backend's kernels, and
// return at once: stream order alone makes them see the right data. The barrier waits for
// the stream with a polling loop that honours the timeout, so a stuck peer ends the job with
// a message instead of a hang. A group of one has no NCCL communicator: its collectives are
// copies or no-ops. The nonblocking collectives run on a side stream (see side_begin).
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
    case COMM_BF16: return ncclBfloat16;
    case COMM_F16: return ncclFloat16;
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

// out = in (n elements; a device copy unless in place): a group of one's collectives, and
// all-to-all's own block.
static void solo_copy(Comm *c, void *out, const void *in, size_t n, CommDtype t) {
    if (out != in)
        CUDA_CHECK(cudaMemcpyAsync(out, in, n * comm_dtype_size(t), cudaMemcpyDeviceToDevice, ST(c)));
}

static void nccl_all_reduce(Comm *c, void *buf, size_t n, CommDtype t, CommOp op) {
    if (!NC(c)) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), nccl_op(op), NC(c), ST(c)));
}

static void nccl_all_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t) {
    if (!NC(c)) {
        solo_copy(c, out, in, per, t);
        return;
    }
    NCCL_CHECK(ncclAllGather(in, out, per, nccl_type(t), NC(c), ST(c)));
}

// Nonblocking collectives run on a side stream (made at the first call, with its events) that
// first waits for everything queued on the Comm's stream so far; nccl_wait makes the Comm's
// stream wait for the request's own event. Several may be in flight: the side stream runs them
// in start order.
static cudaStream_t side_begin(Comm *c) {
    if (!c->u.nccl.side) {
        cudaStream_t side;
        cudaEvent_t ev;
        CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        c->u.nccl.side = side;
        CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        c->u.nccl.ready = ev;
        for (int i = 0; i < COMM_NCCL_EVENTS; i++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
            c->u.nccl.done[i] = ev;
        }
    }
    cudaStream_t side = (cudaStream_t)c->u.nccl.side;
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)c->u.nccl.ready, ST(c)));
    CUDA_CHECK(cudaStreamWaitEvent(side, (cudaEvent_t)c->u.nccl.ready, 0));
    return side;
}

// Marks the end of the work just queued on the side stream with the pool's next event
// (req->done), so that a wait or test covers this request and the earlier ones, not the later
// ones (ZeRO-2's overlap waits for the oldest reduction while newer ones run). The pool is
// reused round-robin: past COMM_NCCL_EVENTS requests in flight, an old request's event marks
// a later one's end, further down the same stream: safe, only waiting longer.
static void side_end(Comm *c, CommRequest *req) {
    cudaEvent_t ev = (cudaEvent_t)c->u.nccl.done[c->u.nccl.n_done++ % COMM_NCCL_EVENTS];
    CUDA_CHECK(cudaEventRecord(ev, (cudaStream_t)c->u.nccl.side));
    req->done = ev;
    req->active = 1;
}

static void nccl_iall_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommRequest *req) {
    if (!NC(c)) {
        solo_copy(c, out, in, per, t);
        return;
    }
    NCCL_CHECK(ncclAllGather(in, out, per, nccl_type(t), NC(c), side_begin(c)));
    side_end(c, req);
}

static void nccl_iall_reduce(Comm *c, void *buf, size_t n, CommDtype t, CommOp op, CommRequest *req) {
    if (!NC(c)) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), nccl_op(op), NC(c), side_begin(c)));
    side_end(c, req);
}

static void nccl_ireduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t,
                                 CommOp op, CommRequest *req) {
    if (!NC(c)) {
        solo_copy(c, out, in, per, t);
        return;
    }
    NCCL_CHECK(ncclReduceScatter(in, out, per, nccl_type(t), nccl_op(op), NC(c), side_begin(c)));
    side_end(c, req);
}

// Grouped send + recv on stream s: NCCL schedules both together, so no call order deadlocks.
static void group_send_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf,
                            size_t rn, int src, CommDtype t, cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    if (dst >= 0) NCCL_CHECK(ncclSend(sbuf, sn, nccl_type(t), dst, NC(c), s));
    if (src >= 0) NCCL_CHECK(ncclRecv(rbuf, rn, nccl_type(t), src, NC(c), s));
    NCCL_CHECK(ncclGroupEnd());
}

// The same on the side stream, finished by nccl_wait / nccl_test.
static void nccl_isend_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf,
                            size_t rn, int src, CommDtype t, CommRequest *req) {
    group_send_recv(c, sbuf, sn, dst, rbuf, rn, src, t, side_begin(c));
    side_end(c, req);
}

// Finished when the side stream has passed this request's event.
static int nccl_test(Comm *c, CommRequest *req) {
    (void)c;
    cudaError_t e = cudaEventQuery((cudaEvent_t)req->done);
    if (e == cudaErrorNotReady) return 0;
    CUDA_CHECK(e);
    return 1;
}

static void nccl_wait(Comm *c, CommRequest *req) {
    CUDA_CHECK(cudaStreamWaitEvent(ST(c), (cudaEvent_t)req->done, 0));
}

static void nccl_reduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t,
                                CommOp op) {
    if (!NC(c)) {
        solo_copy(c, out, in, per, t);
        return;
    }
    NCCL_CHECK(ncclReduceScatter(in, out, per, nccl_type(t), nccl_op(op), NC(c), ST(c)));
}

static void nccl_broadcast(Comm *c, void *buf, size_t n, CommDtype t, int root) {
    if (!NC(c)) return;
    NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_type(t), root, NC(c), ST(c)));
}

static void nccl_send(Comm *c, const void *buf, size_t n, CommDtype t, int peer) {
    NCCL_CHECK(ncclSend(buf, n, nccl_type(t), peer, NC(c), ST(c)));
}

static void nccl_recv(Comm *c, void *buf, size_t n, CommDtype t, int peer) {
    NCCL_CHECK(ncclRecv(buf, n, nccl_type(t), peer, NC(c), ST(c)));
}

static void nccl_send_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf, size_t rn,
                           int src, CommDtype t) {
    group_send_recv(c, sbuf, sn, dst, rbuf, rn, src, t, ST(c));
}

// The own block by a device copy on the stream, then one group of a send and a receive per
// peer with a nonzero count (the peer skips the same pairs: the counts agree pairwise).
// The other ranks' blocks of an all-to-all (one group of a send and a receive per peer with a
// nonzero count) on stream s.
static void group_all_to_all(Comm *c, const void *in, const size_t *sc, void *out,
                             const size_t *rc, CommDtype t, cudaStream_t s) {
    size_t es = comm_dtype_size(t), so = 0, ro = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        if (r != c->rank && sc[r])
            NCCL_CHECK(ncclSend((const char *)in + so * es, sc[r], nccl_type(t), r, NC(c), s));
        if (r != c->rank && rc[r])
            NCCL_CHECK(ncclRecv((char *)out + ro * es, rc[r], nccl_type(t), r, NC(c), s));
        so += sc[r];
        ro += rc[r];
    }
    NCCL_CHECK(ncclGroupEnd());
}

// The own block, a copy on the Comm's stream.
static void own_block(Comm *c, const void *in, const size_t *sc, void *out, const size_t *rc,
                      CommDtype t) {
    size_t es = comm_dtype_size(t), so = 0, ro = 0;
    for (int r = 0; r < c->rank; r++) so += sc[r], ro += rc[r];
    solo_copy(c, (char *)out + ro * es, (const char *)in + so * es, sc[c->rank], t);
}

static void nccl_all_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                              const size_t *rc, CommDtype t) {
    own_block(c, in, sc, out, rc, t);
    if (NC(c)) group_all_to_all(c, in, sc, out, rc, t, ST(c));
}

// The same, the other ranks' blocks on the side stream (finished by nccl_wait / nccl_test).
static void nccl_iall_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                               const size_t *rc, CommDtype t, CommRequest *req) {
    own_block(c, in, sc, out, rc, t);
    if (!NC(c)) return;
    group_all_to_all(c, in, sc, out, rc, t, side_begin(c));
    side_end(c, req);
}

static void nccl_barrier(Comm *c) {
    if (NC(c)) wait_stream(c, "barrier");
    else CUDA_CHECK(cudaStreamSynchronize(ST(c)));
    MPI_CHECK(MPI_Barrier(c->u.nccl.boot));
}

static void nccl_destroy(Comm *c) {
    if (c->u.nccl.side) {
        cudaStreamSynchronize((cudaStream_t)c->u.nccl.side);
        cudaEventDestroy((cudaEvent_t)c->u.nccl.ready);
        for (int i = 0; i < COMM_NCCL_EVENTS; i++) cudaEventDestroy((cudaEvent_t)c->u.nccl.done[i]);
        cudaStreamDestroy((cudaStream_t)c->u.nccl.side);
    }
    if (NC(c)) ncclCommDestroy(NC(c));
    MPI_Comm_free(&c->u.nccl.boot);
}

static const CommVtable NCCL_VTABLE = {
    .all_reduce = nccl_all_reduce, .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter, .broadcast = nccl_broadcast, .send = nccl_send,
    .recv = nccl_recv, .send_recv = nccl_send_recv, .barrier = nccl_barrier,
    .destroy = nccl_destroy, .iall_gather = nccl_iall_gather, .wait = nccl_wait,
    .iall_reduce = nccl_iall_reduce, .ireduce_scatter = nccl_ireduce_scatter, .test = nccl_test,
    .isend_recv = nccl_isend_recv, .all_to_all_v = nccl_all_to_all_v,
    .iall_to_all_v = nccl_iall_to_all_v,
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
    c->u.nccl.stream = cuda_stream;
    if (c->size == 1) return c;  // never touches NCCL
    ncclComm_t nc;
#ifdef MEGAC_CUDA_EMU
    NCCL_CHECK(emu_nccl_comm_init_mpi(&nc, c->u.nccl.boot));  // the fake NCCL runs over MPI
#else
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->u.nccl.boot));
    NCCL_CHECK(ncclCommInitRank(&nc, c->size, id, c->rank));
#endif
    c->u.nccl.nccl_comm = nc;
    return c;
}
