// tests/backend/emu/test_emu_nccl.c: the emulator's NCCL over MPI (run under mpiexec -n 4).
// Every collective with rank-derived inputs and exact expected results (in and out of
// place, every reduction op), broadcast from a non-zero root, a grouped send/recv ring in
// both call orders, nested groups mixing a collective with p2p, a split communicator, and
// bf16/fp16 reductions (fp32 in rank order, one rounding) and 16-bit data movement, and the
// refusals (bad peer, fp8 reduction, unmatched ncclGroupEnd, ncclCommInitRank).
#include <mpi.h>  // defines: MPI_Init, MPI_Comm_split
#include <nccl.h>
#include <emu_half.h>  // defines: emu_f32_to_bf16, emu_bf16_to_f32, emu_f32_to_f16, ...
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, rank, nranks;
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)
#define OK(call) EXPECT((call) == ncclSuccess, "%s", #call)

static void test_all_reduce(ncclComm_t c) {
    const int P = nranks, r = rank;
    float x[5], y[5];
    for (int i = 0; i < 5; i++) x[i] = (float)(10 * r + i);
    OK(ncclAllReduce(x, y, 5, ncclFloat32, ncclSum, c, 0));
    for (int i = 0; i < 5; i++)
        EXPECT(y[i] == 10.0f * P * (P - 1) / 2 + P * i, "sum[%d] %g", i, y[i]);
    OK(ncclAllReduce(x, x, 5, ncclFloat, ncclAvg, c, 0));  // in place
    for (int i = 0; i < 5; i++) EXPECT(x[i] == 10.0f * (P - 1) / 2 + i, "avg[%d] %g", i, x[i]);
    int v[3] = {r, -r, 4 * r}, w[3];
    OK(ncclAllReduce(v, w, 1, ncclInt32, ncclMax, c, 0));
    OK(ncclAllReduce(v + 1, w + 1, 1, ncclInt, ncclMin, c, 0));
    OK(ncclAllReduce(v + 2, w + 2, 1, ncclInt32, ncclAvg, c, 0));
    EXPECT(w[0] == P - 1 && w[1] == -(P - 1) && w[2] == 2 * (P - 1), "int %d %d %d", w[0], w[1],
           w[2]);
    double d = r + 1, fact = 1;
    for (int q = 1; q <= P; q++) fact *= q;
    OK(ncclAllReduce(&d, &d, 1, ncclFloat64, ncclProd, c, 0));
    EXPECT(d == fact, "prod %g", d);
}

static void test_gather_scatter_bcast(ncclComm_t c) {
    const int P = nranks, r = rank;
    float s[2] = {(float)r, r + 0.5f}, *g = malloc(sizeof(float) * 2 * P);
    OK(ncclAllGather(s, g, 2, ncclFloat32, c, 0));
    for (int q = 0; q < P; q++) EXPECT(g[2 * q] == q && g[2 * q + 1] == q + 0.5f, "gather[%d]", q);
    memset(g, 0, sizeof(float) * 2 * P);
    g[2 * r] = 7.0f * r, g[2 * r + 1] = 1.0f;
    OK(ncclAllGather(g + 2 * r, g, 2, ncclFloat32, c, 0));  // in place
    for (int q = 0; q < P; q++)
        EXPECT(g[2 * q] == 7.0f * q && g[2 * q + 1] == 1.0f, "in place [%d]", q);
    free(g);

    double *in = malloc(sizeof(double) * 3 * P), out[3];
    for (int q = 0; q < P; q++)
        for (int j = 0; j < 3; j++) in[3 * q + j] = r + 100.0 * q + j;
    OK(ncclReduceScatter(in, out, 3, ncclFloat64, ncclSum, c, 0));
    for (int j = 0; j < 3; j++)
        EXPECT(out[j] == P * (P - 1) / 2.0 + P * (100.0 * r + j), "reduce-scatter[%d] %g", j,
               out[j]);
    OK(ncclReduceScatter(in, in + 3 * r, 3, ncclFloat64, ncclAvg, c, 0));  // in place
    for (int j = 0; j < 3; j++)
        EXPECT(in[3 * r + j] == (P - 1) / 2.0 + 100.0 * r + j, "rs avg[%d] %g", j, in[3 * r + j]);
    free(in);

    int root = P > 2 ? 2 : 0, b[4], src[4] = {r, 9, 8, 7};
    for (int i = 0; i < 4; i++) b[i] = r == root ? src[i] : -1;
    OK(ncclBroadcast(b, b, 4, ncclInt32, root, c, 0));
    EXPECT(b[0] == root && b[1] == 9 && b[3] == 7, "bcast %d %d", b[0], b[3]);
    memset(b, 0, sizeof b);
    OK(ncclBroadcast(r == root ? src : NULL, b, 4, ncclInt32, root, c, 0));  // out of place
    EXPECT(b[0] == root && b[2] == 8, "bcast out of place %d", b[0]);
}

// Ring: send r*1000+i to next, receive from prev; recv_first flips the call order.
static void ring(ncclComm_t c, int recv_first, int nested) {
    const int P = nranks, next = (rank + 1) % P, prev = (rank + P - 1) % P;
    long long s[64], got[64];
    for (int i = 0; i < 64; i++) s[i] = rank * 1000 + i, got[i] = -1;
    OK(ncclGroupStart());
    if (nested) OK(ncclGroupStart());
    if (recv_first) OK(ncclRecv(got, 64, ncclInt64, prev, c, 0));
    OK(ncclSend(s, 64, ncclInt64, next, c, 0));
    if (nested) OK(ncclGroupEnd());  // still inside the outer group: nothing runs yet
    if (!recv_first) OK(ncclRecv(got, 64, ncclInt64, prev, c, 0));
    float one = 1.0f;
    if (nested) OK(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, c, 0));
    OK(ncclGroupEnd());
    for (int i = 0; i < 64; i++) EXPECT(got[i] == prev * 1000 + i, "ring[%d] %lld", i, got[i]);
    if (nested) EXPECT(one == (float)P, "allreduce in a group: %g", one);
}

static void test_p2p(ncclComm_t c) {
    ring(c, 0, 0);
    ring(c, 1, 0);
    ring(c, 1, 1);
    // ungrouped pairs (0,1), (2,3): even ranks send first, odd ranks receive first
    int peer = rank ^ 1, x = rank, y = -1;
    if (peer < nranks) {
        if (rank % 2 == 0) {
            OK(ncclSend(&x, 1, ncclInt32, peer, c, 0));
            OK(ncclRecv(&y, 1, ncclInt32, peer, c, 0));
        } else {
            OK(ncclRecv(&y, 1, ncclInt32, peer, c, 0));
            OK(ncclSend(&x, 1, ncclInt32, peer, c, 0));
        }
        EXPECT(y == peer, "pair exchange %d", y);
    }
}

// bf16 and fp16: all-reduce (sum rounded once, avg, max), reduce-scatter in place, all-gather,
// a send/recv pair.
static void test_half(ncclComm_t c) {
    const int P = nranks, r = rank;
    // sum of 1 (rank 0) and 2^-9 (others) in fp32, one rounding: 1 + (P-1) 2^-9 to bf16's 2^-7
    // grid; rounding after each add would stay at 1 (each 2^-9 is below half an ulp).
    uint16_t x = emu_f32_to_bf16(r == 0 ? 1.0f : 0.001953125f), y = 0;
    OK(ncclAllReduce(&x, &y, 1, ncclBfloat16, ncclSum, c, 0));
    float want = emu_bf16_to_f32(emu_f32_to_bf16(1.0f + (P - 1) * 0.001953125f));
    EXPECT(emu_bf16_to_f32(y) == want && (P < 2 || want > 1.0f), "bf16 sum %g, want %g",
           emu_bf16_to_f32(y), want);
    uint16_t h[3] = {emu_f32_to_f16((float)r), emu_f32_to_f16(-0.5f * r), emu_f32_to_f16(3.0f)};
    OK(ncclAllReduce(h, h, 1, ncclFloat16, ncclAvg, c, 0));  // in place
    OK(ncclAllReduce(h + 1, h + 1, 1, ncclHalf, ncclMin, c, 0));
    OK(ncclAllReduce(h + 2, h + 2, 1, ncclFloat16, ncclMax, c, 0));
    EXPECT(emu_f16_to_f32(h[0]) == emu_f16_to_f32(emu_f32_to_f16((P - 1) / 2.0f)) &&
           emu_f16_to_f32(h[1]) == -0.5f * (P - 1) && emu_f16_to_f32(h[2]) == 3.0f,
           "fp16 avg %g min %g max %g", emu_f16_to_f32(h[0]), emu_f16_to_f32(h[1]),
           emu_f16_to_f32(h[2]));
    uint16_t *in = malloc(sizeof(uint16_t) * 2 * P);
    for (int q = 0; q < P; q++)
        for (int j = 0; j < 2; j++) in[2 * q + j] = emu_f32_to_f16((float)(r + 10 * q + j));
    OK(ncclReduceScatter(in, in + 2 * r, 2, ncclFloat16, ncclSum, c, 0));  // in place
    for (int j = 0; j < 2; j++)
        EXPECT(emu_f16_to_f32(in[2 * r + j]) == P * (P - 1) / 2.0f + P * (10.0f * r + j),
               "fp16 reduce-scatter[%d] %g", j, emu_f16_to_f32(in[2 * r + j]));
    uint16_t mine = emu_f32_to_bf16(r + 0.5f);
    OK(ncclAllGather(&mine, in, 1, ncclBfloat16, c, 0));
    for (int q = 0; q < P; q++) EXPECT(emu_bf16_to_f32(in[q]) == q + 0.5f, "bf16 gather[%d]", q);
    int peer = r ^ 1;
    uint16_t got = 0;
    if (peer < P) {
        OK(ncclGroupStart());
        OK(ncclSend(&mine, 1, ncclBfloat16, peer, c, 0));
        OK(ncclRecv(&got, 1, ncclBfloat16, peer, c, 0));
        OK(ncclGroupEnd());
        EXPECT(emu_bf16_to_f32(got) == peer + 0.5f, "bf16 exchange %g", emu_bf16_to_f32(got));
    }
    free(in);
}

static void test_split(void) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    ncclComm_t c;
    OK(emu_nccl_comm_init_mpi(&c, half));
    int n = 0, me = -1, sum = 0;
    OK(ncclCommCount(c, &n));
    OK(ncclCommUserRank(c, &me));
    EXPECT(n == (nranks + 1 - rank % 2) / 2 && me == rank / 2, "split: size %d rank %d", n, me);
    int want = 0;
    for (int q = rank % 2; q < nranks; q += 2) want += q;
    OK(ncclAllReduce(&rank, &sum, 1, ncclInt32, ncclSum, c, 0));
    EXPECT(sum == want, "split sum %d, want %d", sum, want);
    OK(ncclCommDestroy(c));
    MPI_Comm_free(&half);
}

static void test_refusals(ncclComm_t c) {
    float x = 0;
    EXPECT(ncclSend(&x, 1, ncclFloat32, nranks, c, 0) == ncclInvalidArgument, "peer out of range");
    EXPECT(ncclAllReduce(&x, &x, 1, ncclFloat8e4m3, ncclSum, c, 0) == ncclInvalidArgument, "fp8");
    EXPECT(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, NULL, 0) == ncclInvalidArgument, "NULL");
    EXPECT(ncclGroupEnd() == ncclInvalidUsage, "unmatched group end");
    ncclUniqueId id;
    ncclComm_t other;
    OK(ncclGetUniqueId(&id));
    EXPECT(ncclCommInitRank(&other, nranks, id, rank) == ncclInvalidUsage, "InitRank");
    ncclResult_t async = ncclInternalError;
    EXPECT(ncclCommGetAsyncError(c, &async) == ncclSuccess && async == ncclSuccess, "async");
    int v = 0;
    EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "version %d", v);
    EXPECT(strlen(ncclGetErrorString(ncclInvalidArgument)) > 0, "error string");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    ncclComm_t c;
    OK(emu_nccl_comm_init_mpi(&c, MPI_COMM_WORLD));
    test_all_reduce(c);
    test_gather_scatter_bcast(c);
    test_p2p(c);
    test_half(c);
    test_split();
    if (rank == 0) fprintf(stderr, "(the emu: lines below are the refusals under test)\n");
    MPI_Barrier(MPI_COMM_WORLD);
    test_refusals(c);
    OK(ncclCommDestroy(c));
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? "%d failure(s)\n" : "emu NCCL tests passed on %d ranks\n",
                          total ? total : nranks);
    MPI_Finalize();
    return total ? 1 : 0;
}
