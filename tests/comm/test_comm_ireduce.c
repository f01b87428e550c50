// tests/comm/test_comm_ireduce.c: comm_iall_reduce, comm_ireduce_scatter and comm_test (the
// buckets of --overlap-grad-reduce) against the blocking calls, under mpiexec -n 4 (TP 2 x DP 2;
// the DP group of 2 and the world of 4). Six requests in flight at once on one Comm (all-reduce
// SUM and AVG, reduce-scatter AVG; fp32 and bf16), polled with comm_test while collectives run
// on another group, waited for in reverse order: the results are bitwise those of the blocking
// calls, and the traffic counters are the same. comm_test of a finished request returns 1.
// argv[1]: mpi (default), or nccl / staged: the CUDA Comms on device buffers (the emulator
// build; exit 77 = skip on a GPU build without a device).
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "core/half.h"
#include "tests/testing.h"
#include "tests/comm/comm_test_buf.h"  // defines: on_device, buf_alloc, buf_free, buf_copy

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K = 6 };
// Request k: an all-reduce (k even; SUM for k % 4 == 0, else AVG) of n_in elements or a
// reduce-scatter (k odd, AVG) of n_in = size * per; fp32 for k < 4, bf16 after.
typedef struct {
    int rs;
    CommOp op;
    CommDtype t;
    size_t n_in, n_out;
    void *in, *out;  // device / host buffers (all-reduce: in place in `in`)
} Case;

static void setup(Comm *c, Case *cs, int k) {
    int me = c->members[c->rank];
    cs->rs = k % 2;
    cs->op = cs->rs || k % 4 ? COMM_AVG : COMM_SUM;
    cs->t = k < 4 ? COMM_F32 : COMM_BF16;
    size_t per = 300 + 11 * (size_t)k;
    cs->n_in = cs->rs ? per * (size_t)c->size : 1000 + 37 * (size_t)k;
    cs->n_out = cs->rs ? per : cs->n_in;
    size_t es = comm_dtype_size(cs->t);
    char *host = malloc(cs->n_in * es);
    for (size_t i = 0; i < cs->n_in; i++) {  // values whose sums round: the order shows
        float v = (float)sin(0.37 * (double)i + 1.3 * me + 0.11 * k) * (1.0f + (float)(i % 7) / 3.0f);
        if (es == 2) ((uint16_t *)host)[i] = core_f32_to_bf16(v);
        else ((float *)host)[i] = v;
    }
    cs->in = buf_alloc(cs->n_in * es);
    cs->out = cs->rs ? buf_alloc(cs->n_out * es) : cs->in;
    buf_copy(cs->in, host, cs->n_in * es, 1);
    free(host);
}

// The result of case cs on the host (caller frees).
static void *result(const Case *cs) {
    size_t bytes = cs->n_out * comm_dtype_size(cs->t);
    void *h = malloc(bytes);
    buf_copy(h, cs->out, bytes, 0);
    return h;
}

static void release(Case *cs) {
    if (cs->out != cs->in) buf_free(cs->out);
    buf_free(cs->in);
}

static void check(Comm *c, Comm *other) {
    Case ref[K], got[K];
    CommRequest req[K];
    CommStats blocking, nonblocking;
    comm_stats_reset(c);
    for (int k = 0; k < K; k++) {  // reference: the blocking calls, one after the other
        setup(c, &ref[k], k);
        if (ref[k].rs) comm_reduce_scatter(c, ref[k].in, ref[k].out, ref[k].n_out, ref[k].t, ref[k].op);
        else comm_all_reduce(c, ref[k].in, ref[k].n_in, ref[k].t, ref[k].op);
    }
    blocking = c->stats;
    comm_stats_reset(c);
    for (int k = 0; k < K; k++) setup(c, &got[k], k);
    for (int k = 0; k < K; k++) {  // all in flight
        if (got[k].rs) comm_ireduce_scatter(c, got[k].in, got[k].out, got[k].n_out, got[k].t, got[k].op, &req[k]);
        else comm_iall_reduce(c, got[k].in, got[k].n_in, got[k].t, got[k].op, &req[k]);
    }
    nonblocking = c->stats;
    for (int round = 0; round < 3; round++) {  // explicit progress while another group works
        double v = 1.0;
        if (other) comm_all_reduce(other, &v, 1, COMM_F64, COMM_SUM);
        for (int k = 0; k < K; k++) comm_test(c, &req[k]);
    }
    for (int k = K - 1; k >= 0; k--) comm_wait(c, &req[k]);
    for (int k = 0; k < K; k++) {
        EXPECT(!req[k].active, "request %d finished", k);
        EXPECT_EQ_INT(comm_test(c, &req[k]), 1);
        void *a = result(&ref[k]), *b = result(&got[k]);
        EXPECT(!memcmp(a, b, ref[k].n_out * comm_dtype_size(ref[k].t)),
               "group %s, request %d (%s): nonblocking differs from blocking", c->name, k,
               ref[k].rs ? "reduce_scatter" : "all_reduce");
        free(a), free(b);
        release(&ref[k]), release(&got[k]);
    }
    for (int kind = 0; kind < COMM_NKINDS; kind++) {
        EXPECT_EQ_INT(nonblocking.calls[kind], blocking.calls[kind]);
        EXPECT_EQ_INT(nonblocking.bytes[kind], blocking.bytes[kind]);
    }
    EXPECT_EQ_INT(blocking.calls[COMM_ALL_REDUCE], K / 2);
    EXPECT_EQ_INT(blocking.calls[COMM_REDUCE_SCATTER], K / 2);
}

int main(int argc, char **argv) {
    const char *kind;
    void *stream;
    int dev = buf_test_start(&argc, &argv, &kind, &stream);
    PGridCommKind ck = !dev ? PGRID_COMM_MPI : !strcmp(kind, "nccl") ? PGRID_COMM_NCCL : PGRID_COMM_STAGED;
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 2, .cp = 1, .pp = 1, .ep = 1, .etp = 2},
                                  ck, stream, 60.0);  // TP 2 x DP 2 on 4 ranks
    check(g->dp, g->tp);
    check(g->world, NULL);
    int me = g->coord.rank;
    if (!on_device) {  // a group of one: copies
        Comm *solo = comm_mpi_create(MPI_COMM_SELF, "solo", &me, 60.0);
        check(solo, g->world);
        comm_destroy(solo);
    }
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    if (me == 0) printf("test_comm_ireduce (%s): %s\n", kind, fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
