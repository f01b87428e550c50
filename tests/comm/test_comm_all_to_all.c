// tests/comm/test_comm_all_to_all.c: comm_all_to_all_v and comm_iall_to_all_v (MoE token
// dispatch) under mpiexec -n N
// (1, 2, 4), on the world group and on a group of one per rank (a copy):
//   counts  each rank's send counts exchanged first with the call itself on one COMM_I32 per
//           rank (counts all 1): every rank gets its receive counts
//   data    uneven blocks with zeros: the last rank receives nothing, rank 1 (of more than 2)
//           sends nothing, other pairs are empty too; element i of the block from global rank
//           a to b says (a, b, i) in F32, I32 and BF16 (raw bits), checked everywhere
//   bytes   the counter of COMM_ALL_TO_ALL is what this rank sends to the other ranks
// argv[1]: mpi (default), or nccl / staged: the CUDA Comms on device buffers (the emulator
// build; exit 77 = skip on a GPU build without a device); or overflow: a count above INT_MAX
// on the MPI Comm, which must end the job (a should_fail test).
#include "comm/comm.h"
#include "tests/testing.h"
#include "tests/comm/comm_test_buf.h"  // defines: on_device, buf_alloc, buf_free, buf_copy

#include <limits.h>  // defines: INT_MAX
#include <stdint.h>
#include <stdio.h>

// Elements global rank a sends to b in a world of n ranks.
static size_t cnt(int a, int b, int n) {
    if ((n > 1 && b == n - 1) || (n > 2 && a == 1)) return 0;
    return (size_t)((a + 2 * b + 1) % 3) * (size_t)(50 + 17 * a + 3 * b);
}

// Element i of the block from global rank a to b, in t, written to p[at].
static void put(void *p, size_t at, CommDtype t, int a, int b, size_t i) {
    int v = a * 100000 + b * 1000 + (int)i;  // i < 1000
    if (t == COMM_F32) ((float *)p)[at] = (float)v;
    else if (t == COMM_I32) ((int32_t *)p)[at] = -v;
    else ((uint16_t *)p)[at] = (uint16_t)(a * 4099 + b * 257 + (int)i);  // any bits, NaNs too
}

// Comm kind name -> a Comm over mpi_comm.
static Comm *make(const char *kind, MPI_Comm mpi_comm, const char *name, const int *members,
                  void *stream) {
    if (!on_device) return comm_mpi_create(mpi_comm, name, members, 60.0);
#ifdef MEGAC_HAVE_CUDA
    if (!strcmp(kind, "nccl")) return comm_nccl_create(mpi_comm, name, members, stream, 60.0);
    return comm_staged_create(mpi_comm, name, members, stream, 60.0);
#else
    (void)kind, (void)stream;
    return NULL;
#endif
}

// The counts exchange: rank me's recv counts are the others' send counts to it.
static void check_counts(Comm *c, size_t *sc, size_t *rc) {
    int n = c->size, me = c->members[c->rank];
    size_t ones[64];
    int32_t hs[64], hr[64];
    for (int r = 0; r < n; r++) ones[r] = 1, hs[r] = (int32_t)cnt(me, c->members[r], n), hr[r] = -1;
    void *ds = buf_alloc((size_t)n * 4), *dr = buf_alloc((size_t)n * 4);
    buf_copy(ds, hs, (size_t)n * 4, 1);
    comm_all_to_all_v(c, ds, ones, dr, ones, COMM_I32);
    buf_copy(hr, dr, (size_t)n * 4, 0);
    for (int r = 0; r < n; r++) {
        sc[r] = (size_t)hs[r];
        rc[r] = cnt(c->members[r], me, n);  // what it should be (a wrong hr fails here)
        EXPECT_EQ_INT(hr[r], (int64_t)rc[r]);
    }
    buf_free(ds), buf_free(dr);
}

// One all-to-all of type t, blocking or (nb) comm_iall_to_all_v + comm_wait (the counts
// arrays overwritten while it is in flight: the call must not keep them).
static void check_type(Comm *c, CommDtype t, const size_t *sc, const size_t *rc, int nb) {
    int n = c->size, me = c->members[c->rank];
    size_t es = comm_dtype_size(t), ns = 0, nr = 0, others = 0;
    for (int r = 0; r < n; r++) {
        ns += sc[r], nr += rc[r];
        if (r != c->rank) others += sc[r];
    }
    char *hin = malloc(ns * es + 1), *hout = malloc(nr * es + 1);
    for (int r = 0, o = 0; r < n; o += (int)sc[r], r++)
        for (size_t i = 0; i < sc[r]; i++) put(hin, (size_t)o + i, t, me, c->members[r], i);
    void *din = buf_alloc(ns * es + 1), *dout = buf_alloc(nr * es + 1);
    buf_copy(din, hin, ns * es, 1);
    comm_stats_reset(c);
    if (nb) {
        size_t s2[64], r2[64];
        memcpy(s2, sc, (size_t)n * sizeof *s2), memcpy(r2, rc, (size_t)n * sizeof *r2);
        CommRequest req;
        comm_iall_to_all_v(c, din, s2, dout, r2, t, &req);
        memset(s2, 0xff, sizeof s2), memset(r2, 0xff, sizeof r2);
        comm_wait(c, &req);
        EXPECT(!req.active, "group %s: the request is still active after comm_wait", c->name);
    } else {
        comm_all_to_all_v(c, din, sc, dout, rc, t);
    }
    EXPECT_EQ_INT(c->stats.calls[COMM_ALL_TO_ALL], 1);
    EXPECT_EQ_INT(c->stats.bytes[COMM_ALL_TO_ALL], others * es);
    for (int k = 0; k < COMM_NKINDS; k++)
        if (k != COMM_ALL_TO_ALL) EXPECT_EQ_INT(c->stats.calls[k], 0);
    buf_copy(hout, dout, nr * es, 0);
    _Alignas(8) char want[8];
    int bad = 0;
    for (int r = 0, o = 0; r < n; o += (int)rc[r], r++)
        for (size_t i = 0; i < rc[r]; i++) {
            put(want, 0, t, c->members[r], me, i);
            bad += memcmp(want, hout + ((size_t)o + i) * es, es) != 0;
        }
    EXPECT(bad == 0, "group %s, dtype %d: %d of %zu received elements wrong", c->name, (int)t, bad, nr);
    buf_free(din), buf_free(dout);
    free(hin), free(hout);
}

static void check(Comm *c) {
    size_t sc[64], rc[64];
    check_counts(c, sc, rc);
    CommDtype types[] = {COMM_BF16, COMM_F32, COMM_I32};  // growing sizes: staged buffers grow
    for (int k = 0; k < 3; k++) check_type(c, types[k], sc, rc, 0);
    for (int k = 0; k < 3; k++) check_type(c, types[k], sc, rc, 1);  // comm_iall_to_all_v
}

int main(int argc, char **argv) {
    const char *kind;
    void *stream;
    int overflow = argc > 1 && !strcmp(argv[1], "overflow");
    if (overflow) argv[1] = "mpi";
    buf_test_start(&argc, &argv, &kind, &stream);
    int me = 0, n = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    if (n > 64) core_usage_error("test_comm_all_to_all: at most 64 ranks, not %d", n);
    int *members = malloc((size_t)n * sizeof *members);
    for (int i = 0; i < n; i++) members[i] = i;
    Comm *world = make(kind, MPI_COMM_WORLD, "world", members, stream);
    Comm *solo = make(kind, MPI_COMM_SELF, "solo", &me, stream);
    if (overflow) {  // fatal before any memory is touched
        size_t big = (size_t)INT_MAX + 1;
        comm_all_to_all_v(solo, NULL, &big, NULL, &big, COMM_F32);
        return 0;
    }
    check(world);
    check(solo);
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    comm_destroy(solo);
    comm_destroy(world);
    free(members);
    MPI_CHECK(MPI_Finalize());
    if (me == 0) printf("test_comm_all_to_all (%s, %d ranks): %s\n", kind, n, fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
