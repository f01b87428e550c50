// comm/comm_staged.c: the staged backend of Comm: device buffers go through pinned host
// memory and MPI (device -> host, the MPI backend's operation, host -> device), in the order
// of the CUDA stream the backend computes on.
//
// For testing only: it is slow (two copies and a stream wait per operation), but unlike NCCL
// it lets several ranks share one GPU (`--distributed-backend staged`), which is how the
// multi-rank runs of the tests and of a single-GPU machine work. Statistics are counted by
// comm.c as for the other backends; the inner MPI Comm's own counters are not used.
#include "comm.h"
#include "core/check_cuda.h"

#include <stdio.h>
#include <string.h>

#define ST(c) ((cudaStream_t)(c)->u.staged.stream)
#define INNER(c) ((c)->u.staged.inner)

// Pinned host buffer k (0 or 1) of at least `bytes`, grown on first need (the largest
// message of a step is seen in the first step; nothing is allocated after that).
static void *host_buf(Comm *c, int k, size_t bytes) {
    if (c->u.staged.cap[k] < bytes) {
        if (c->u.staged.host[k]) CUDA_CHECK(cudaFreeHost(c->u.staged.host[k]));
        CUDA_CHECK(cudaMallocHost(&c->u.staged.host[k], bytes));
        c->u.staged.cap[k] = bytes;
    }
    return c->u.staged.host[k];
}

// h (bytes) = device src, after all queued work on the stream; returns when it is there.
static void copy_down(Comm *c, void *h, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, ST(c)));
    CUDA_CHECK(cudaStreamSynchronize(ST(c)));
}

// Host buffer k (bytes) = device src, as copy_down.
static void *down(Comm *c, int k, const void *src, size_t bytes) {
    void *h = host_buf(c, k, bytes);
    copy_down(c, h, src, bytes);
    return h;
}

// device dst = host (bytes); returns when the copy is done (the host buffer is reused).
static void up(Comm *c, void *dst, const void *h, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, h, bytes, cudaMemcpyHostToDevice, ST(c)));
    CUDA_CHECK(cudaStreamSynchronize(ST(c)));
}

static void staged_all_reduce(Comm *c, void *buf, size_t n, CommDtype t, CommOp op) {
    size_t bytes = n * comm_dtype_size(t);
    void *h = down(c, 0, buf, bytes);
    INNER(c)->vt->all_reduce(INNER(c), h, n, t, op);
    up(c, buf, h, bytes);
}

static void staged_all_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t) {
    size_t bytes = per * comm_dtype_size(t);
    void *hi = down(c, 0, in, bytes), *ho = host_buf(c, 1, bytes * (size_t)c->size);
    INNER(c)->vt->all_gather(INNER(c), hi, ho, per, t);
    up(c, out, ho, bytes * (size_t)c->size);
}

static void staged_reduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t,
                                  CommOp op) {
    size_t bytes = per * comm_dtype_size(t);
    void *hi = down(c, 0, in, bytes * (size_t)c->size), *ho = host_buf(c, 1, bytes);
    INNER(c)->vt->reduce_scatter(INNER(c), hi, ho, per, t, op);
    up(c, out, ho, bytes);
}

static void staged_broadcast(Comm *c, void *buf, size_t n, CommDtype t, int root) {
    size_t bytes = n * comm_dtype_size(t);
    void *h = down(c, 0, buf, bytes);
    INNER(c)->vt->broadcast(INNER(c), h, n, t, root);
    up(c, buf, h, bytes);
}

static void staged_send(Comm *c, const void *buf, size_t n, CommDtype t, int peer) {
    void *h = down(c, 0, buf, n * comm_dtype_size(t));
    INNER(c)->vt->send(INNER(c), h, n, t, peer);
}

static void staged_recv(Comm *c, void *buf, size_t n, CommDtype t, int peer) {
    size_t bytes = n * comm_dtype_size(t);
    void *h = host_buf(c, 1, bytes);
    INNER(c)->vt->recv(INNER(c), h, n, t, peer);
    up(c, buf, h, bytes);
}

static void staged_send_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf,
                             size_t rn, int src, CommDtype t) {
    size_t sb = sn * comm_dtype_size(t), rb = rn * comm_dtype_size(t);
    void *hs = dst >= 0 ? down(c, 0, sbuf, sb) : NULL;
    void *hr = src >= 0 ? host_buf(c, 1, rb) : NULL;
    INNER(c)->vt->send_recv(INNER(c), hs, sn, dst, hr, rn, src, t);
    if (src >= 0) up(c, rbuf, hr, rb);
}

// The whole input down (host buffer 0, its total size), the inner MPI_Alltoallv, the whole
// output up (host buffer 1). A group of one: a device copy on the stream.
static void staged_all_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                                const size_t *rc, CommDtype t) {
    size_t es = comm_dtype_size(t), sb = 0, rb = 0;
    for (int r = 0; r < c->size; r++) sb += sc[r] * es, rb += rc[r] * es;
    if (c->size == 1) {
        if (sb) CUDA_CHECK(cudaMemcpyAsync(out, in, sb, cudaMemcpyDeviceToDevice, ST(c)));
        return;
    }
    void *hi = sb ? down(c, 0, in, sb) : NULL, *ho = rb ? host_buf(c, 1, rb) : NULL;
    INNER(c)->vt->all_to_all_v(INNER(c), hi, sc, ho, rc, t);
    if (rb) up(c, out, ho, rb);
}

// The send half is copied to its own pinned buffer now (the stream is synchronised first), the
// inner MPI Comm posts both halves into req, and staged_finish copies the received bytes to
// the device. Per-request buffers: several requests may be in flight.
static void staged_isend_recv(Comm *c, const void *sbuf, size_t sn, int dst, void *rbuf,
                              size_t rn, int src, CommDtype t, CommRequest *req) {
    size_t sb = sn * comm_dtype_size(t), rb = rn * comm_dtype_size(t);
    req->host[0] = req->host[1] = NULL;
    if (dst >= 0) {
        CUDA_CHECK(cudaMallocHost(&req->host[0], sb ? sb : 1));
        copy_down(c, req->host[0], sbuf, sb);
    }
    if (src >= 0) CUDA_CHECK(cudaMallocHost(&req->host[1], rb ? rb : 1));
    req->recv_bytes = rb;
    INNER(c)->vt->isend_recv(INNER(c), req->host[0], sn, dst, req->host[1], rn, src, t, req);
}

// After the inner MPI requests completed: received bytes to the device, buffers freed.
static void staged_finish(Comm *c, CommRequest *req) {
    if (req->host[1]) up(c, req->out, req->host[1], req->recv_bytes);
    for (int k = 0; k < 2; k++)
        if (req->host[k]) CUDA_CHECK(cudaFreeHost(req->host[k]));
    req->host[0] = req->host[1] = NULL;
}

// Only point-to-point requests are ever active here (the collectives run blocking).
static void staged_wait(Comm *c, CommRequest *req) {
    INNER(c)->vt->wait(INNER(c), req);
    staged_finish(c, req);
}

static int staged_test(Comm *c, CommRequest *req) {
    if (!INNER(c)->vt->test(INNER(c), req)) return 0;
    staged_finish(c, req);
    return 1;
}

static void staged_barrier(Comm *c) {
    CUDA_CHECK(cudaStreamSynchronize(ST(c)));
    INNER(c)->vt->barrier(INNER(c));
}

static void staged_destroy(Comm *c) {
    for (int k = 0; k < 2; k++)
        if (c->u.staged.host[k]) cudaFreeHost(c->u.staged.host[k]);
    comm_destroy(INNER(c));
}

static const CommVtable STAGED_VTABLE = {
    .all_reduce = staged_all_reduce, .all_gather = staged_all_gather,
    .reduce_scatter = staged_reduce_scatter, .broadcast = staged_broadcast,
    .send = staged_send, .recv = staged_recv, .send_recv = staged_send_recv,
    .barrier = staged_barrier, .destroy = staged_destroy, .wait = staged_wait,
    .test = staged_test, .isend_recv = staged_isend_recv, .all_to_all_v = staged_all_to_all_v,
};

Comm *comm_staged_create(MPI_Comm mpi_comm, const char *name, const int *members,
                         void *cuda_stream, double timeout_s) {
    Comm *inner = comm_mpi_create(mpi_comm, name, members, timeout_s);
    Comm *c = core_calloc(1, sizeof *c);
    c->vt = &STAGED_VTABLE;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->rank = inner->rank;
    c->size = inner->size;
    c->members = core_calloc((size_t)c->size, sizeof(int));
    memcpy(c->members, members, (size_t)c->size * sizeof(int));
    c->timeout_s = timeout_s;
    c->u.staged.inner = inner;
    c->u.staged.stream = cuda_stream;
    return c;
}
