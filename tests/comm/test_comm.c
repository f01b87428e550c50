// tests/comm/test_comm.c: every Comm operation on every group of a layout, under mpiexec.
// usage: mpiexec -n N test_comm TP PP
// Inputs are built from global ranks, so each result is known exactly; the traffic counters
// are checked against comm.h's formulas.
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

#define COUNT 1000  // elements per buffer: not a multiple of anything in particular

static void test_group(Comm *c) {
    if (!c) return;
    int me = c->members[c->rank], n = c->size;
    long long sum = 0, max = 0;
    for (int i = 0; i < n; i++) {
        sum += c->members[i];
        if (c->members[i] > max) max = c->members[i];
    }
    float *buf = malloc(COUNT * sizeof(float));
    float *big = malloc((size_t)n * COUNT * sizeof(float));
    comm_stats_reset(c);

    // all-reduce sum / max / avg: element i = global rank + i
    for (CommOp op = COMM_SUM; op <= COMM_AVG; op++) {
        for (int i = 0; i < COUNT; i++) buf[i] = (float)(me + i);
        comm_all_reduce(c, buf, COUNT, COMM_F32, op);
        for (int i = 0; i < COUNT; i += 97) {
            double want = op == COMM_SUM ? (double)sum + (double)n * i
                        : op == COMM_MAX ? (double)max + i : (double)sum / n + i;
            EXPECT_NEAR(buf[i], want, 1e-6);
        }
    }
    // all-reduce on doubles and ints
    double dv = me;
    comm_all_reduce(c, &dv, 1, COMM_F64, COMM_SUM);
    EXPECT_NEAR(dv, (double)sum, 0);
    int iv = me;
    comm_all_reduce(c, &iv, 1, COMM_I32, COMM_MAX);
    EXPECT_EQ_INT(iv, max);

    // all-gather: block j holds member j's rank
    for (int i = 0; i < COUNT; i++) buf[i] = (float)(me * 10000 + i);
    comm_all_gather(c, buf, big, COUNT, COMM_F32);
    for (int j = 0; j < n; j++)
        EXPECT_NEAR(big[(size_t)j * COUNT + 7], c->members[j] * 10000 + 7, 0);

    // reduce-scatter: block j of rank me is me + j; rank r gets sum(members) + n*r
    for (int j = 0; j < n; j++)
        for (int i = 0; i < COUNT; i++) big[(size_t)j * COUNT + i] = (float)(me + j);
    comm_reduce_scatter(c, big, buf, COUNT, COMM_F32, COMM_SUM);
    EXPECT_NEAR(buf[COUNT - 1], (double)sum + (double)n * c->rank, 0);

    // broadcast from the last group rank
    for (int i = 0; i < COUNT; i++) buf[i] = (float)me;
    comm_broadcast(c, buf, COUNT, COMM_F32, n - 1);
    EXPECT_NEAR(buf[3], c->members[n - 1], 0);

    // ring of send_recv: receive from the left, send to the right
    if (n > 1) {
        float out = (float)me, in = -1;
        comm_send_recv(c, &out, 1, (c->rank + 1) % n, &in, 1, (c->rank + n - 1) % n, COMM_F32);
        EXPECT_NEAR(in, c->members[(c->rank + n - 1) % n], 0);
        // reverse ring, and the opposite call order on odd ranks: still no deadlock
        comm_send_recv(c, buf, COUNT, (c->rank + n - 1) % n, big, COUNT, (c->rank + 1) % n, COMM_F32);
    }

    // Traffic counters against the formulas (bytes of one float buffer = 4*COUNT).
    uint64_t b = 4 * COUNT, un = (uint64_t)n;
    EXPECT_EQ_INT(c->stats.calls[COMM_ALL_REDUCE], 5);
    EXPECT_EQ_INT(c->stats.bytes[COMM_ALL_REDUCE],
                  3 * (b * 2 * (un - 1) / un) + 8 * 2 * (un - 1) / un + 4 * 2 * (un - 1) / un);
    EXPECT_EQ_INT(c->stats.bytes[COMM_ALL_GATHER], un * b * (un - 1) / un);
    EXPECT_EQ_INT(c->stats.bytes[COMM_REDUCE_SCATTER], un * b * (un - 1) / un);
    EXPECT_EQ_INT(c->stats.bytes[COMM_BROADCAST], n > 1 ? b : 0);
    EXPECT_EQ_INT(c->stats.bytes[COMM_SEND], n > 1 ? 4 + b : 0);
    EXPECT_EQ_INT(c->stats.bytes[COMM_RECV], n > 1 ? 4 + b : 0);
    free(buf);
    free(big);
}

// Activations along each pipeline: stage s sends to s+1 with plain send/recv, then the
// gradients come back; the payload names the sender.
static void test_pipeline_p2p(const ProcessGrid *g) {
    float x[64], y[64];
    int s = g->coord.pp_rank;
    if (!g->is_first_stage) {
        comm_recv(g->pp, x, 64, COMM_F32, g->pp_prev);
        EXPECT_NEAR(x[63], g->pp->members[g->pp_prev] + 0.5, 0);
    }
    for (int i = 0; i < 64; i++) y[i] = (float)g->coord.rank + 0.5f;
    comm_send(g->pp, y, 64, COMM_F32, g->pp_next);
    if (!g->is_last_stage) {
        comm_recv(g->pp, x, 64, COMM_F32, g->pp_next);
        EXPECT_NEAR(x[0], -(double)g->pp->members[g->pp_next], 0);
    }
    for (int i = 0; i < 64; i++) y[i] = -(float)g->coord.rank;
    comm_send(g->pp, y, 64, COMM_F32, g->pp_prev);
    (void)s;
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    if (argc != 3) core_usage_error("usage: test_comm TP PP");
    int tp = atoi(argv[1]), pp = atoi(argv[2]);
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = tp, .cp = 1, .pp = pp, .ep = 1, .etp = tp},
                                  PGRID_COMM_MPI, NULL, 120.0);
    Comm *groups[] = {g->world, g->tp, g->dp, g->pp, g->model, g->embedding};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) test_group(groups[i]);
    test_pipeline_p2p(g);
    EXPECT((g->embedding != NULL) == (g->is_first_stage || g->is_last_stage), "embedding group");
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    int rank = g->coord.rank;
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    if (rank == 0) printf("test_comm tp=%s pp=%s: %s\n", argv[1], argv[2], fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
