// tests/comm/test_comm_half.c: 16-bit floats over the MPI Comm (COMM_BF16, COMM_F16).
// Run under mpiexec -n 4. Each rank contributes values exact in both formats; the sum, max
// and average are checked against the rounded fp32 result, and gather / send_recv move the
// bits unchanged. The traffic counters count 2 bytes per element.
#include "comm/comm.h"
#include "core/check.h"
#include "core/half.h"
#include "tests/testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { N = 1000 };

static uint16_t to16(CommDtype t, float x) { return t == COMM_BF16 ? core_f32_to_bf16(x) : core_f32_to_f16(x); }
static float from16(CommDtype t, uint16_t h) { return t == COMM_BF16 ? core_bf16_to_f32(h) : core_f16_to_f32(h); }

// Rank r's element i: small multiples of 1/8, exact in bf16 and fp16, sums too.
static float value(int r, int i) { return (float)((i * 7 + r * 3) % 64 - 32) * 0.125f; }

static void check_type(Comm *c, CommDtype t, const char *name) {
    int n = c->size, r = c->rank;
    uint16_t *buf = malloc(N * 2), *g = malloc((size_t)n * N * 2);
    for (int i = 0; i < N; i++) buf[i] = to16(t, value(r, i));
    comm_stats_reset(c);
    comm_all_reduce(c, buf, N, t, COMM_SUM);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float want = 0;
        for (int k = 0; k < n; k++) want += value(k, i);
        bad += from16(t, buf[i]) != want;
    }
    EXPECT(bad == 0, "%s all-reduce sum: %d wrong elements", name, bad);
    EXPECT_EQ_INT(c->stats.bytes[COMM_ALL_REDUCE], (uint64_t)N * 2 * 2 * (n - 1) / n);

    for (int i = 0; i < N; i++) buf[i] = to16(t, value(r, i));
    comm_all_reduce(c, buf, N, t, COMM_MAX);
    bad = 0;
    for (int i = 0; i < N; i++) {
        float want = -INFINITY;
        for (int k = 0; k < n; k++) want = fmaxf(want, value(k, i));
        bad += from16(t, buf[i]) != want;
    }
    EXPECT(bad == 0, "%s all-reduce max: %d wrong elements", name, bad);

    for (int i = 0; i < N; i++) buf[i] = to16(t, value(r, i));
    comm_all_reduce(c, buf, N, t, COMM_AVG);
    bad = 0;
    for (int i = 0; i < N; i++) {
        float want = 0;
        for (int k = 0; k < n; k++) want += value(k, i);
        bad += buf[i] != to16(t, want / (float)n);
    }
    EXPECT(bad == 0, "%s all-reduce average: %d wrong elements", name, bad);

    for (int i = 0; i < N; i++) buf[i] = (uint16_t)(r * 4099 + i);  // any bits, NaNs included
    comm_all_gather(c, buf, g, N, t);
    bad = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < N; i++) bad += g[(size_t)k * N + i] != (uint16_t)(k * 4099 + i);
    EXPECT(bad == 0, "%s all-gather changed %d elements' bits", name, bad);

    uint16_t *recv = calloc(N, 2);
    comm_send_recv(c, buf, N, (r + 1) % n, recv, N, (r + n - 1) % n, t);
    bad = 0;
    for (int i = 0; i < N; i++) bad += recv[i] != (uint16_t)(((r + n - 1) % n) * 4099 + i);
    EXPECT(bad == 0, "%s send_recv changed %d elements' bits", name, bad);
    free(recv);
    free(buf);
    free(g);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *members = malloc((size_t)size * sizeof(int));
    for (int i = 0; i < size; i++) members[i] = i;
    Comm *c = comm_mpi_create(MPI_COMM_WORLD, "world", members, 60.0);
    check_type(c, COMM_BF16, "bf16");
    check_type(c, COMM_F16, "fp16");
    int failed = test_result(rank == 0 ? "comm_half" : "comm_half (rank)") != 0, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    comm_destroy(c);
    free(members);
    MPI_Finalize();
    return any;
}
