// tests/comm/test_comm_nonblocking.c: comm_iall_gather + comm_wait (MPI backend), under
// mpiexec -n 4: the same blocks as comm_all_gather, in fp32 and bf16 bits, while collectives
// on other groups run between start and wait (as ZeRO-3's prefetch does with TP's); the same
// traffic counts as the blocking call; comm_wait on a finished or never-started request does
// nothing; a group of one copies.
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"

#include <stdint.h>
#include <stdlib.h>

#define COUNT 777

// Starts an all-gather on c, runs an all-reduce on `other` meanwhile, waits; checks the blocks.
static void gather_while_busy(Comm *c, Comm *other, CommDtype t) {
    int me = c->members[c->rank], n = c->size;
    size_t es = comm_dtype_size(t);
    uint16_t *in16 = malloc(COUNT * 2), *out16 = malloc((size_t)n * COUNT * 2);
    float *in32 = malloc(COUNT * 4), *out32 = malloc((size_t)n * COUNT * 4);
    for (int i = 0; i < COUNT; i++) {
        in16[i] = (uint16_t)(me * 1000 + i);  // any bits: a gather moves them unchanged
        in32[i] = (float)(me * 100000 + i);
    }
    comm_stats_reset(c);
    CommRequest req;
    comm_iall_gather(c, es == 2 ? (void *)in16 : (void *)in32, es == 2 ? (void *)out16 : (void *)out32,
                     COUNT, t, &req);
    double v = me;
    if (other) comm_all_reduce(other, &v, 1, COMM_F64, COMM_SUM);  // another group, meanwhile
    comm_wait(c, &req);
    EXPECT(!req.active, "the request is finished");
    comm_wait(c, &req);  // again: nothing
    for (int j = 0; j < n; j++)
        for (int i = 0; i < COUNT; i += 111) {
            if (es == 2) EXPECT_EQ_INT(out16[(size_t)j * COUNT + i], c->members[j] * 1000 + i);
            else EXPECT_NEAR(out32[(size_t)j * COUNT + i], c->members[j] * 100000.0 + i, 0);
        }
    uint64_t un = (uint64_t)n;
    EXPECT_EQ_INT(c->stats.calls[COMM_ALL_GATHER], 1);
    EXPECT_EQ_INT(c->stats.bytes[COMM_ALL_GATHER], un * COUNT * es * (un - 1) / un);
    free(in16), free(out16), free(in32), free(out32);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 2, .cp = 1, .pp = 1, .ep = 1, .etp = 2},
                                  PGRID_COMM_MPI, NULL, 60.0);  // TP 2 x DP 2 on 4 ranks
    gather_while_busy(g->dp, g->tp, COMM_F32);
    gather_while_busy(g->dp, g->tp, COMM_BF16);
    gather_while_busy(g->world, NULL, COMM_F16);
    int me = g->coord.rank;
    Comm *solo = comm_mpi_create(MPI_COMM_SELF, "solo", &me, 60.0);
    gather_while_busy(solo, g->world, COMM_F32);
    CommRequest never = {0};
    comm_wait(solo, &never);  // never started: nothing
    comm_destroy(solo);
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    if (me == 0) printf("test_comm_nonblocking: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
