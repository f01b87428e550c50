// comm/comm.c: backend-independent part of Comm: traffic counters and dispatch.
#include "comm.h"
#include "core/check.h"

#include <stdlib.h>
#include <string.h>

size_t comm_dtype_size(CommDtype t) {
    switch (t) {
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    case COMM_I32: return 4;
    case COMM_BF16: return 2;
    case COMM_F16: return 2;
    }
    return 0;
}

const char *comm_kind_name(CommKind k) {
    static const char *names[COMM_NKINDS] = {"all_reduce", "all_gather", "reduce_scatter",
                                             "broadcast", "send", "recv", "all_to_all"};
    return k < COMM_NKINDS ? names[k] : "?";
}

void comm_stats_reset(Comm *c) { memset(&c->stats, 0, sizeof c->stats); }

// Adds `num/den x bytes` (integer arithmetic, exact for the formulas in comm.h).
static void count(Comm *c, CommKind k, uint64_t bytes, uint64_t num, uint64_t den) {
    c->stats.calls[k] += 1;
    c->stats.bytes[k] += den ? bytes * num / den : 0;
}

void comm_all_reduce(Comm *c, void *buf, size_t count_, CommDtype t, CommOp op) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_ALL_REDUCE, count_ * comm_dtype_size(t), 2 * (n - 1), n);
    if (count_ > 0) c->vt->all_reduce(c, buf, count_, t, op);
}

void comm_all_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_ALL_GATHER, n * per * comm_dtype_size(t), n - 1, n);
    if (per > 0) c->vt->all_gather(c, in, out, per, t);
}

// Fills the request's description; active stays 0 until a backend starts it.
static void describe(CommRequest *req, CommKind k, void *out, size_t n, CommDtype t, CommOp op) {
    req->active = 0;
    req->kind = k;
    req->out = out;
    req->count = n;
    req->t = t;
    req->op = op;
    req->scratch = NULL;
}

void comm_iall_gather(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommRequest *req) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_ALL_GATHER, n * per * comm_dtype_size(t), n - 1, n);
    describe(req, COMM_ALL_GATHER, out, n * per, t, COMM_SUM);
    if (per == 0) return;
    if (c->vt->iall_gather) c->vt->iall_gather(c, in, out, per, t, req);
    else c->vt->all_gather(c, in, out, per, t);
}

void comm_iall_reduce(Comm *c, void *buf, size_t count_, CommDtype t, CommOp op, CommRequest *req) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_ALL_REDUCE, count_ * comm_dtype_size(t), 2 * (n - 1), n);
    describe(req, COMM_ALL_REDUCE, buf, count_, t, op);
    if (count_ == 0) return;
    if (c->vt->iall_reduce) c->vt->iall_reduce(c, buf, count_, t, op, req);
    else c->vt->all_reduce(c, buf, count_, t, op);
}

void comm_ireduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommOp op,
                          CommRequest *req) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_REDUCE_SCATTER, n * per * comm_dtype_size(t), n - 1, n);
    describe(req, COMM_REDUCE_SCATTER, out, per, t, op);
    if (per == 0) return;
    if (c->vt->ireduce_scatter) c->vt->ireduce_scatter(c, in, out, per, t, op, req);
    else c->vt->reduce_scatter(c, in, out, per, t, op);
}

int comm_test(Comm *c, CommRequest *req) {
    if (!req->active) return 1;
    if (!c->vt->test || !c->vt->test(c, req)) return 0;
    req->active = 0;
    return 1;
}

void comm_wait(Comm *c, CommRequest *req) {
    if (req->active && c->vt->wait) c->vt->wait(c, req);
    req->active = 0;
}

void comm_reduce_scatter(Comm *c, const void *in, void *out, size_t per, CommDtype t, CommOp op) {
    uint64_t n = (uint64_t)c->size;
    count(c, COMM_REDUCE_SCATTER, n * per * comm_dtype_size(t), n - 1, n);
    if (per > 0) c->vt->reduce_scatter(c, in, out, per, t, op);
}

void comm_broadcast(Comm *c, void *buf, size_t count_, CommDtype t, int root) {
    if (root < 0 || root >= c->size)
        core_fatal("broadcast on group %s: root %d outside [0, %d)", c->name, root, c->size);
    count(c, COMM_BROADCAST, count_ * comm_dtype_size(t), c->size > 1, 1);
    if (count_ > 0 && c->size > 1) c->vt->broadcast(c, buf, count_, t, root);
}

static void check_peer(const Comm *c, int peer, const char *what) {
    if (peer >= c->size || peer == c->rank)
        core_fatal("%s on group %s: peer %d invalid (group size %d, own rank %d)", what, c->name,
                   peer, c->size, c->rank);
}

void comm_send(Comm *c, const void *buf, size_t count_, CommDtype t, int peer) {
    if (peer < 0) return;
    check_peer(c, peer, "send");
    count(c, COMM_SEND, count_ * comm_dtype_size(t), 1, 1);
    c->vt->send(c, buf, count_, t, peer);
}

void comm_recv(Comm *c, void *buf, size_t count_, CommDtype t, int peer) {
    if (peer < 0) return;
    check_peer(c, peer, "recv");
    count(c, COMM_RECV, count_ * comm_dtype_size(t), 1, 1);
    c->vt->recv(c, buf, count_, t, peer);
}

void comm_send_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                    size_t rcount, int src, CommDtype t) {
    if (dst < 0 && src < 0) return;
    if (dst >= 0) { check_peer(c, dst, "send_recv"); count(c, COMM_SEND, scount * comm_dtype_size(t), 1, 1); }
    if (src >= 0) { check_peer(c, src, "send_recv"); count(c, COMM_RECV, rcount * comm_dtype_size(t), 1, 1); }
    c->vt->send_recv(c, sbuf, scount, dst, rbuf, rcount, src, t);
}

void comm_isend_recv(Comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                     size_t rcount, int src, CommDtype t, CommRequest *req) {
    describe(req, dst >= 0 ? COMM_SEND : COMM_RECV, rbuf, src >= 0 ? rcount : 0, t, COMM_SUM);
    req->n_mpi = 0;
    if (dst < 0 && src < 0) return;
    if (dst >= 0) { check_peer(c, dst, "isend_recv"); count(c, COMM_SEND, scount * comm_dtype_size(t), 1, 1); }
    if (src >= 0) { check_peer(c, src, "isend_recv"); count(c, COMM_RECV, rcount * comm_dtype_size(t), 1, 1); }
    c->vt->isend_recv(c, sbuf, scount, dst, rbuf, rcount, src, t, req);
}

void comm_isend(Comm *c, const void *buf, size_t count_, CommDtype t, int peer, CommRequest *req) {
    comm_isend_recv(c, buf, count_, peer, NULL, 0, -1, t, req);
}

void comm_irecv(Comm *c, void *buf, size_t count_, CommDtype t, int peer, CommRequest *req) {
    comm_isend_recv(c, NULL, 0, -1, buf, count_, peer, t, req);
}

// comm_all_to_all_v's checks and counting. Aborts the job on inconsistent counts.
static void all_to_all_begin(Comm *c, const size_t *send_counts, const size_t *recv_counts,
                             CommDtype t) {
    if (!send_counts || !recv_counts)
        core_fatal("all_to_all_v on group %s: NULL counts (one per group rank, %d)", c->name, c->size);
    if (send_counts[c->rank] != recv_counts[c->rank])
        core_fatal("all_to_all_v on group %s: rank %d sends itself %zu elements but receives %zu",
                   c->name, c->rank, send_counts[c->rank], recv_counts[c->rank]);
    uint64_t others = 0;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank) others += send_counts[r];
    count(c, COMM_ALL_TO_ALL, others * comm_dtype_size(t), 1, 1);
}

void comm_all_to_all_v(Comm *c, const void *in, const size_t *send_counts, void *out,
                       const size_t *recv_counts, CommDtype t) {
    all_to_all_begin(c, send_counts, recv_counts, t);
    c->vt->all_to_all_v(c, in, send_counts, out, recv_counts, t);  // every rank: a collective
}

void comm_iall_to_all_v(Comm *c, const void *in, const size_t *send_counts, void *out,
                        const size_t *recv_counts, CommDtype t, CommRequest *req) {
    all_to_all_begin(c, send_counts, recv_counts, t);
    describe(req, COMM_ALL_TO_ALL, out, 0, t, COMM_SUM);
    if (c->vt->iall_to_all_v) c->vt->iall_to_all_v(c, in, send_counts, out, recv_counts, t, req);
    else c->vt->all_to_all_v(c, in, send_counts, out, recv_counts, t);
}

void comm_barrier(Comm *c) { c->vt->barrier(c); }

void comm_destroy(Comm *c) {
    if (!c) return;
    c->vt->destroy(c);
    free(c->members);
    free(c);
}
