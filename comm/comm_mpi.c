// comm/comm_mpi.c: the MPI backend of Comm (host memory).
//
// Every operation is started non-blocking and completed by wait_all(), which polls with
// MPI_Testall and yields the core between polls: with many ranks on few cores this keeps
// waiting ranks from spinning, and it lets a wait longer than the Comm's timeout end the
// whole job with a message naming the operation and the group (instead of a silent hang).
#include "comm.h"
#include "core/check.h"
#include "core/half.h"
#include "core/timer.h"

#include <limits.h>  // defines: INT_MAX
#include <sched.h>   // defines: sched_yield
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static MPI_Datatype mpi_type(CommDtype t) {
    switch (t) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_I32: return MPI_INT;
    case COMM_BF16: return MPI_UINT16_T;  // reduced by the user ops below
    case COMM_F16: return MPI_UINT16_T;
    }
    return MPI_DATATYPE_NULL;
}

// gcc 12 misreads MPICH's MPI_STATUSES_IGNORE constant as a zero-size buffer.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
static void wait_all(Comm *c, MPI_Request *reqs, int n, const char *op) {
    if (c->timeout_s <= 0) {
        MPI_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        return;
    }
    double t0 = core_now();
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return;
        if (core_now() - t0 > c->timeout_s) {
            char who[256] = "";
            for (int i = 0, o = 0; i < c->size && o < (int)sizeof who - 12; i++)
                o += snprintf(who + o, sizeof who - o, "%s%d", i ? "," : "", c->members[i]);
            core_fatal("%s on group %s (global ranks %s; this rank is #%d) did not complete "
                       "within %.0f s (--distributed-timeout-minutes): a peer is stuck or dead",
                       op, c->name, who, c->rank, c->timeout_s);
        }
        sched_yield();
    }
}

// MPI has no 16-bit float types: user operations on MPI_UINT16_T that add (or take the
// maximum) in fp32 and round back, one element at a time.
#define HALF_OP(NAME, TO32, FROM32, EXPR)                                              \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) {             \
        (void)dt;                                                                      \
        const uint16_t *x = in;                                                        \
        uint16_t *y = inout;                                                           \
        for (int i = 0; i < *len; i++) {                                               \
            float a = TO32(x[i]), b = TO32(y[i]);                                      \
            y[i] = FROM32(EXPR);                                                       \
        }                                                                              \
    }
HALF_OP(bf16_sum, core_bf16_to_f32, core_f32_to_bf16, a + b)
HALF_OP(bf16_max, core_bf16_to_f32, core_f32_to_bf16, a > b ? a : b)
HALF_OP(f16_sum, core_f16_to_f32, core_f32_to_f16, a + b)
HALF_OP(f16_max, core_f16_to_f32, core_f32_to_f16, a > b ? a : b)

// In-place divide by the group size, for CommOp AVG (MPI has no average).
static void divide(void *buf, size_t count, CommDtype t, int n) {
    for (size_t i = 0; i < count; i++) {
        if (t == COMM_F32) ((float *)buf)[i] /= (float)n;
        else if (t == COMM_F64) ((double *)buf)[i] /= (double)n;
        else if (t == COMM_BF16) {
            uint16_t *h = buf;
            h[i] = core_f32_to_bf16(core_bf16_to_f32(h[i]) / (float)n);
        } else if (t == COMM_F16) {
            uint16_t *h = buf;
            h[i] = core_f32_to_f16(core_f16_to_f32(h[i]) / (float)n);
        } else ((int *)buf)[i] /= n;
    }
}

// MPI counts are int: a larger transfer must be split by the caller (e.g. --ddp-bucket-size).
static int icount(const Comm *c, size_t n, const char *op) {
    if (n > (size_t)INT_MAX)
        core_fatal("%s on group %s: %zu elements exceed MPI's int count; use smaller buckets "
                   "(--ddp-bucket-size)", op, c->name, n);
    return (int)n;
}

static MPI_Op mpi_op(const Comm *c, CommOp op, CommDtype t) {
    if (t == COMM_BF16 || t == COMM_F16) return c->u.mpi.half_op[t == COMM_F16][op == COMM_MAX];
    return op == COMM_MAX ? MPI_MAX : MPI_SUM;
}

static void mpi_all_reduce(Comm *c, void *buf, size_t count, CommDtype t, CommOp op) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(c, count, "all_reduce"), mpi_type(t), mpi_op(c, op, t), c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "all_reduce");
    if (op == COMM_AVG) divide(buf, count, t, c->size);
}

static void mpi_all_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Iallgather(in, icount(c, per, "all_gather"), mpi_type(t), out, (int)per, mpi_type(t), c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "all_gather");
}

static void mpi_iall_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommRequest *req) {
    MPI_CHECK(MPI_Iallgather(in, icount(c, per, "all_gather"), mpi_type(t), out, (int)per, mpi_type(t),
                             c->u.mpi.comm, &req->mpi[0]));
    req->n_mpi = 1;
    req->active = 1;
}

static void mpi_iall_reduce(Comm *c, void *buf, size_t count, CommDtype t, CommOp op, CommRequest *req) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(c, count, "all_reduce"), mpi_type(t),
                             mpi_op(c, op, t), c->u.mpi.comm, &req->mpi[0]));
    req->n_mpi = 1;
    req->active = 1;
}

static void mpi_ireduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommOp op,
                                CommRequest *req) {
    MPI_CHECK(MPI_Ireduce_scatter_block(in, out, icount(c, per, "reduce_scatter"), mpi_type(t),
                                        mpi_op(c, op, t), c->u.mpi.comm, &req->mpi[0]));
    req->n_mpi = 1;
    req->active = 1;
}

// A finished request: AVG divides its result, as the blocking calls do.
static void mpi_finish(Comm *c, CommRequest *req) {
    if (req->op == COMM_AVG && req->kind != COMM_ALL_GATHER) divide(req->out, req->count, req->t, c->size);
    free(req->scratch);
    req->scratch = NULL;
}

static void mpi_wait(Comm *c, CommRequest *req) {
    wait_all(c, req->mpi, req->n_mpi, comm_kind_name(req->kind));
    mpi_finish(c, req);
}

static int mpi_test(Comm *c, CommRequest *req) {
    int done = 0;
    MPI_CHECK(MPI_Testall(req->n_mpi, req->mpi, &done, MPI_STATUSES_IGNORE));
    if (done) mpi_finish(c, req);
    return done;
}

static void mpi_reduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t,
                               CommOp op) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Ireduce_scatter_block(in, out, icount(c, per, "reduce_scatter"), mpi_type(t), mpi_op(c, op, t), c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "reduce_scatter");
    if (op == COMM_AVG) divide(out, per, t, c->size);
}

static void mpi_broadcast(Comm *c, void *buf, size_t count, CommDtype t, int root) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Ibcast(buf, icount(c, count, "broadcast"), mpi_type(t), root, c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "broadcast");
}

static void mpi_send(Comm *c, const void *buf, size_t count, CommDtype t, int peer) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Isend(buf, icount(c, count, "send"), mpi_type(t), peer, 0, c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "send");
}

static void mpi_recv(Comm *c, void *buf, size_t count, CommDtype t, int peer) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Irecv(buf, icount(c, count, "recv"), mpi_type(t), peer, 0, c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "recv");
}

// Posts the receive, then the send (a half whose peer is < 0 is skipped) into r; returns how
// many requests it posted. Both are posted before anything waits, so no order of calls
// across ranks can deadlock.
static int post_send_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                          size_t rcount, int src, CommDtype t, const char *op, MPI_Request r[2]) {
    int n = 0;
    if (src >= 0) MPI_CHECK(MPI_Irecv(rbuf, icount(c, rcount, op), mpi_type(t), src, 0, c->u.mpi.comm, &r[n++]));
    if (dst >= 0) MPI_CHECK(MPI_Isend(sbuf, icount(c, scount, op), mpi_type(t), dst, 0, c->u.mpi.comm, &r[n++]));
    return n;
}

static void mpi_send_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                          size_t rcount, int src, CommDtype t) {
    MPI_Request r[2];
    int n = post_send_recv(c, sbuf, scount, dst, rbuf, rcount, src, t, "send_recv", r);
    wait_all(c, r, n, "send_recv");
}

// Both halves posted, finished together by mpi_wait / mpi_test.
static void mpi_isend_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                           size_t rcount, int src, CommDtype t, CommRequest *req) {
    req->n_mpi = post_send_recv(c, sbuf, scount, dst, rbuf, rcount, src, t, "isend_recv", req->mpi);
    req->active = 1;
}

// MPI_Alltoallv takes int counts and displacements (prefix sums): each must fit.
static int a2a_int(const Comm *c, size_t n, const char *what, int peer) {
    if (n > (size_t)INT_MAX)
        core_fatal("all_to_all_v on group %s: %s for rank %d is %zu elements, above MPI's int "
                   "limit %d; send fewer tokens per call", c->name, what, peer, n, INT_MAX);
    return (int)n;
}

// MPI_Ialltoallv of the counts sc / rc into *r; returns its (4, n) int arrays (send counts,
// displacements, receive counts, displacements), to free once *r is finished.
static int *start_all_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                               const size_t *rc, CommDtype t, MPI_Request *r) {
    int n = c->size;
    int *v = core_calloc(4 * (size_t)n, sizeof *v);  // (4, n): send counts, displs, recv ...
    size_t so = 0, ro = 0;
    for (int r = 0; r < n; r++) {
        v[r] = a2a_int(c, sc[r], "send count", r);
        v[n + r] = a2a_int(c, so, "send offset", r);
        v[2 * n + r] = a2a_int(c, rc[r], "receive count", r);
        v[3 * n + r] = a2a_int(c, ro, "receive offset", r);
        so += sc[r];
        ro += rc[r];
    }
    MPI_CHECK(MPI_Ialltoallv(in, v, v + n, mpi_type(t), out, v + 2 * n, v + 3 * n, mpi_type(t),
                             c->u.mpi.comm, r));
    return v;
}

static void mpi_all_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                             const size_t *rc, CommDtype t) {
    MPI_Request req[1];
    int *v = start_all_to_all_v(c, in, sc, out, rc, t, &req[0]);
    wait_all(c, req, 1, "all_to_all_v");
    free(v);
}

// The same, finished by mpi_wait / mpi_test (which free the count arrays: req->scratch).
static void mpi_iall_to_all_v(Comm *c, const void *in, const size_t *sc, void *out,
                              const size_t *rc, CommDtype t, CommRequest *req) {
    req->scratch = start_all_to_all_v(c, in, sc, out, rc, t, &req->mpi[0]);
    req->n_mpi = 1;
    req->active = 1;
}

static void mpi_barrier(Comm *c) {
    MPI_Request r[1];
    MPI_CHECK(MPI_Ibarrier(c->u.mpi.comm, &r[0]));
    wait_all(c, r, 1, "barrier");
}

static void mpi_destroy(Comm *c) {
    for (int i = 0; i < 4; i++) MPI_Op_free(&c->u.mpi.half_op[i / 2][i % 2]);
    MPI_Comm_free(&c->u.mpi.comm);
}

static const CommVtable MPI_VTABLE = {
    .all_reduce = mpi_all_reduce, .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter, .broadcast = mpi_broadcast, .send = mpi_send,
    .recv = mpi_recv, .send_recv = mpi_send_recv, .barrier = mpi_barrier, .destroy = mpi_destroy,
    .iall_gather = mpi_iall_gather, .wait = mpi_wait, .iall_reduce = mpi_iall_reduce,
    .ireduce_scatter = mpi_ireduce_scatter, .test = mpi_test, .isend_recv = mpi_isend_recv,
    .all_to_all_v = mpi_all_to_all_v, .iall_to_all_v = mpi_iall_to_all_v,
};

Comm *comm_mpi_create(MPI_Comm mpi_comm, const char *name, const int *members, double timeout_s) {
    Comm *c = core_calloc(1, sizeof *c);
    c->vt = &MPI_VTABLE;
    snprintf(c->name, sizeof c->name, "%s", name);
    MPI_CHECK(MPI_Comm_dup(mpi_comm, &c->u.mpi.comm));
    MPI_CHECK(MPI_Comm_rank(c->u.mpi.comm, &c->rank));
    MPI_CHECK(MPI_Comm_size(c->u.mpi.comm, &c->size));
    c->members = core_calloc((size_t)c->size, sizeof(int));
    memcpy(c->members, members, (size_t)c->size * sizeof(int));
    c->timeout_s = timeout_s;
    MPI_User_function *fns[4] = {bf16_sum, bf16_max, f16_sum, f16_max};
    for (int i = 0; i < 4; i++) MPI_CHECK(MPI_Op_create(fns[i], 1, &c->u.mpi.half_op[i / 2][i % 2]));
    return c;
}
