// tests/comm/test_comm_p2p.c: nonblocking point-to-point (comm_isend_recv, comm_isend,
// comm_irecv; what ring attention needs) under mpiexec -n 4, on the world group:
//   ring   every rank sends its block to the next and receives the previous one's, the
//          request polled with comm_test between MPI all-reduces; then the blocks
//          are passed on round the ring (size - 1 steps, two buffers, as ring attention
//          passes K/V): at each step every rank holds the block it should, bit for bit,
//          fp32 and bf16
//   pairs  comm_isend on even ranks, comm_irecv on odd ones (0 -> 1, 2 -> 3), two requests
//          in flight per rank, waited in reverse order
//   none   peer < 0: an inactive request, comm_test 1, nothing counted
// Traffic counters equal those of the blocking comm_send_recv. argv[1]: mpi (default), or
// nccl / staged (device buffers; the emulator build; exit 77 without a device).
#include "comm/comm.h"
#include "core/half.h"
#include "tests/testing.h"
#include "tests/comm/comm_test_buf.h"  // defines: on_device, buf_alloc, buf_free, buf_copy

#include <math.h>
#include <stdint.h>
#include <stdio.h>

enum { N = 777 };  // elements per block (odd: no power-of-two shortcut)

// Block of global rank r in type t (es bytes per element), on the host (caller frees).
static void *block_host(int r, CommDtype t) {
    size_t es = comm_dtype_size(t);
    char *h = malloc(N * es);
    for (size_t i = 0; i < N; i++) {
        float v = (float)sin(0.1 * (double)i + 1.7 * r) * (float)(r + 1);
        if (es == 2) ((uint16_t *)h)[i] = core_f32_to_bf16(v);
        else ((float *)h)[i] = v;
    }
    return h;
}

// EXPECT that buffer dev (on host or device) holds global rank r's block.
static void expect_block(const void *dev, int r, CommDtype t, const char *what, int step) {
    size_t bytes = N * comm_dtype_size(t);
    void *want = block_host(r, t), *got = malloc(bytes);
    buf_copy(got, dev, bytes, 0);
    EXPECT(!memcmp(want, got, bytes), "%s step %d: not rank %d's block", what, step, r);
    free(want), free(got);
}

static void test_ring(Comm *c, CommDtype t) {
    size_t bytes = N * comm_dtype_size(t);
    int me = c->rank, n = c->size, next = (me + 1) % n, prev = (me + n - 1) % n;
    void *buf[2] = {buf_alloc(bytes), buf_alloc(bytes)};
    void *h = block_host(me, t);
    buf_copy(buf[0], h, bytes, 1);
    free(h);
    comm_stats_reset(c);
    CommRequest req;
    for (int step = 1; step < n; step++) {  // step s: buf[s % 2] gets rank (me - s)'s block
        comm_isend_recv(c, buf[(step - 1) % 2], N, next, buf[step % 2], N, prev, t, &req);
        if (step == 1) {  // other traffic while the request is in flight
            for (int k = 0; k < 3; k++) {
                double v = 1.0;
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
                comm_test(c, &req);
            }
        }
        comm_wait(c, &req);
        EXPECT(!req.active, "ring step %d finished", step);
        expect_block(buf[step % 2], (me + n - step) % n, t, "ring", step);
    }
    EXPECT_EQ_INT(comm_test(c, &req), 1);
    CommStats nb = c->stats;
    comm_stats_reset(c);
    for (int step = 1; step < n; step++)
        comm_send_recv(c, buf[(step - 1) % 2], N, next, buf[step % 2], N, prev, t);
    EXPECT_EQ_INT(nb.calls[COMM_SEND], c->stats.calls[COMM_SEND]);
    EXPECT_EQ_INT(nb.bytes[COMM_SEND], c->stats.bytes[COMM_SEND]);
    EXPECT_EQ_INT(nb.calls[COMM_RECV], c->stats.calls[COMM_RECV]);
    EXPECT_EQ_INT(nb.bytes[COMM_RECV], (uint64_t)(n - 1) * bytes);
    buf_free(buf[0]), buf_free(buf[1]);
}

static void test_pairs(Comm *c) {
    size_t bytes = N * sizeof(float);
    int me = c->rank, even = me % 2 == 0, peer = even ? me + 1 : me - 1;
    void *b[2] = {buf_alloc(bytes), buf_alloc(bytes)};
    CommRequest req[2];
    for (int k = 0; k < 2; k++) {
        void *h = block_host(me + 10 * k, COMM_F32);
        buf_copy(b[k], h, bytes, 1);
        free(h);
        if (even) comm_isend(c, b[k], N, COMM_F32, peer, &req[k]);
        else comm_irecv(c, b[k], N, COMM_F32, peer, &req[k]);
    }
    for (int k = 1; k >= 0; k--) comm_wait(c, &req[k]);
    for (int k = 0; k < 2; k++) expect_block(b[k], (even ? me : peer) + 10 * k, COMM_F32, "pairs", k);
    buf_free(b[0]), buf_free(b[1]);
}

static void test_none(Comm *c) {
    CommRequest req;
    comm_stats_reset(c);
    comm_isend_recv(c, NULL, 0, -1, NULL, 0, -1, COMM_F32, &req);
    EXPECT(!req.active, "no peer: inactive");
    EXPECT_EQ_INT(comm_test(c, &req), 1);
    comm_irecv(c, NULL, 5, COMM_F32, -1, &req);
    comm_wait(c, &req);
    EXPECT_EQ_INT(c->stats.calls[COMM_SEND] + c->stats.calls[COMM_RECV], 0);
}

int main(int argc, char **argv) {
    const char *kind;
    void *stream;
    int dev = buf_test_start(&argc, &argv, &kind, &stream);
    int me = 0, n = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    int *members = malloc((size_t)n * sizeof *members);
    for (int i = 0; i < n; i++) members[i] = i;
    Comm *c = !dev ? comm_mpi_create(MPI_COMM_WORLD, "world", members, 60.0)
#ifdef MEGAC_HAVE_CUDA
              : !strcmp(kind, "nccl") ? comm_nccl_create(MPI_COMM_WORLD, "world", members, stream, 60.0)
              : comm_staged_create(MPI_COMM_WORLD, "world", members, stream, 60.0);
#else
              : NULL;
#endif
    test_ring(c, COMM_F32);
    test_ring(c, COMM_BF16);
    if (n % 2 == 0) test_pairs(c);
    test_none(c);
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    comm_destroy(c);
    free(members);
    MPI_CHECK(MPI_Finalize());
    if (me == 0) printf("test_comm_p2p (%s): %s\n", kind, fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
