// tests/layers/test_tp_layers.c: each tensor-parallel layer equals its unsharded self.
// usage: mpiexec -n TP test_tp_layers
// Every rank builds the same full random tensors, runs the unsharded layer on a group of
// one (MPI_COMM_SELF), then its shard on the TP group, and compares outputs and gradients;
// the calls each sharded function makes against its layer's list (tp_linear_calls,
// tp_vocab_*_calls), which `megac plan` counts.
#include "layers/tp_linear.h"
#include "layers/tp_vocab.h"
#include "core/check.h"
#include "core/philox.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

static float *rnd(size_t n, uint64_t stream) {
    float *x = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)core_philox_normal(7, stream, i);
    return x;
}

static void expect_close(const float *a, const float *b, size_t n, const char *what) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        if (d > worst) worst = d;
    }
    EXPECT(worst < 1e-5, "%s: max rel diff %.3e", what, worst);
}

// The calls c made since `before`, per kind, against the layer's list (calls, k of them).
static void expect_calls(const Comm *c, const CommStats *before, const CommCall *calls, int k,
                         const char *what) {
    uint64_t want[COMM_NKINDS] = {0};
    for (int i = 0; i < k; i++) want[calls[i].kind] += (uint64_t)calls[i].times;
    for (int kind = 0; kind < COMM_NKINDS; kind++)
        EXPECT(c->stats.calls[kind] - before->calls[kind] == want[kind], "%s: %llu %s calls, listed %llu",
               what, (unsigned long long)(c->stats.calls[kind] - before->calls[kind]),
               comm_kind_name((CommKind)kind), (unsigned long long)want[kind]);
}

// Column-parallel then row-parallel (an MLP without the GELU): outputs and all gradients,
// without and with sequence parallelism (then x, y, dx, dy are this rank's rows).
static void test_linear_pair(Backend *be, TPGroup *one, Comm *tpc, int sp) {
    int N = 24, C = 16, F = 32, r = tpc->rank, Ft = F / tpc->size, Ns = sp ? N / tpc->size : N;
    size_t row0 = sp ? (size_t)r * Ns * C : 0;  // first element of this rank's rows
    float *x = rnd((size_t)N * C, 1), *w1 = rnd((size_t)F * C, 2), *b1 = rnd(F, 3);
    float *w2 = rnd((size_t)C * F, 4), *b2 = rnd(C, 5), *dy = rnd((size_t)N * C, 6);
    // unsharded
    float *h = calloc((size_t)N * F, 4), *y = calloc((size_t)N * C, 4), *dh = calloc((size_t)N * F, 4);
    float *dx = calloc((size_t)N * C, 4), *dw1 = calloc((size_t)F * C, 4), *db1 = calloc(F, 4);
    float *dw2 = calloc((size_t)C * F, 4), *db2 = calloc(C, 4);
    tp_column_linear_forward(be, one, h, x, w1, b1, N, C, F);
    tp_row_linear_forward(be, one, y, h, w2, b2, N, F, C);
    tp_row_linear_backward(be, one, dh, dw2, db2, dy, h, w2, N, F, C);
    tp_column_linear_backward(be, one, dx, dw1, db1, dh, x, w1, N, C, F);
    // sharded: rows [r*Ft, (r+1)*Ft) of w1/b1, columns of w2
    float *ws1 = calloc((size_t)N * C, 4), *ws2 = calloc((size_t)N * C, 4);
    TPGroup tp = {tpc, sp, ws1, ws2};
    float *w1s = w1 + (size_t)r * Ft * C, *b1s = b1 + r * Ft;
    float *w2s = calloc((size_t)C * Ft, 4);
    for (int i = 0; i < C; i++) memcpy(w2s + (size_t)i * Ft, w2 + (size_t)i * F + r * Ft, Ft * 4);
    float *hs = calloc((size_t)N * Ft, 4), *ys = calloc((size_t)N * C, 4), *dhs = calloc((size_t)N * Ft, 4);
    float *dxs = calloc((size_t)N * C, 4), *dw1s = calloc((size_t)Ft * C, 4), *db1s = calloc(Ft, 4);
    float *dw2s = calloc((size_t)C * Ft, 4), *db2s = calloc(C, 4);
    CommCall calls[TP_MAX_CALLS];  // each call against tp_linear_calls' list
    CommStats s = tpc->stats;
    tp_column_linear_forward(be, &tp, hs, x + row0, w1s, b1s, N, C, Ft);
    expect_calls(tpc, &s, calls, tp_linear_calls(TP_COLUMN, sp, 0, tpc->size, N, C, calls), "column forward");
    s = tpc->stats;
    tp_row_linear_forward(be, &tp, ys, hs, w2s, b2, N, Ft, C);
    expect_calls(tpc, &s, calls, tp_linear_calls(TP_ROW, sp, 0, tpc->size, N, C, calls), "row forward");
    s = tpc->stats;
    tp_row_linear_backward(be, &tp, dhs, dw2s, db2s, dy + row0, hs, w2s, N, Ft, C);
    expect_calls(tpc, &s, calls, tp_linear_calls(TP_ROW, sp, 1, tpc->size, N, C, calls), "row backward");
    s = tpc->stats;
    tp_column_linear_backward(be, &tp, dxs, dw1s, db1s, dhs, x + row0, w1s, N, C, Ft);
    expect_calls(tpc, &s, calls, tp_linear_calls(TP_COLUMN, sp, 1, tpc->size, N, C, calls), "column backward");
    expect_close(ys, y + row0, (size_t)Ns * C, "row-parallel output (g)");
    expect_close(dxs, dx + row0, (size_t)Ns * C, "column-parallel input gradient (f)");
    expect_close(dw1s, dw1 + (size_t)r * Ft * C, (size_t)Ft * C, "column weight gradient");
    expect_close(db1s, db1 + r * Ft, Ft, "column bias gradient");
    expect_close(db2s, db2, C, "row bias gradient (replicated)");
    for (int i = 0; i < C; i++)
        expect_close(dw2s + (size_t)i * Ft, dw2 + (size_t)i * F + r * Ft, Ft, "row weight gradient");
    free(x); free(w1); free(b1); free(w2); free(b2); free(dy); free(h); free(y); free(dh);
    free(dx); free(dw1); free(db1); free(dw2); free(db2); free(w2s); free(hs); free(ys);
    free(dhs); free(dxs); free(dw1s); free(db1s); free(dw2s); free(db2s); free(ws1); free(ws2);
}

// Vocab-parallel embedding and cross-entropy against the unsharded ones, with padding.
static void test_vocab(Backend *be, TPGroup *one, TPGroup *tp) {
    int B = 2, T = 8, N = B * T, C = 8, V = 301, r = tp->comm->rank, n = tp->comm->size;
    int Vp1 = 384, Vp = (V + 128 * n - 1) / (128 * n) * (128 * n);
    TPVocab full = tp_vocab_split(V, Vp1, 1, 0), sh = tp_vocab_split(V, Vp, n, r);
    float *wte = rnd((size_t)Vp * C, 10), *wpe = rnd((size_t)T * C, 11), *dout = rnd((size_t)N * C, 12);
    float *logits = rnd((size_t)N * Vp, 13);  // (N, Vp): columns >= V are padding
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 100.0f;  // must be masked
    int tok[16], tgt[16];
    for (int i = 0; i < N; i++) { tok[i] = (i * 37) % V; tgt[i] = (i * 53 + 300) % V; }
    // embedding
    float *e1 = calloc((size_t)N * C, 4), *es = calloc((size_t)N * C, 4);
    tp_vocab_embedding_forward(be, one, &full, e1, tok, wte, wpe, B, T, C, 0, -1, NULL);
    CommCall calls[TP_VOCAB_MAX_CALLS];  // each call against tp_vocab's lists
    int sp = tp->sequence_parallel;
    CommStats s = tp->comm->stats;
    tp_vocab_embedding_forward(be, tp, &sh, es, tok, wte + (size_t)sh.vocab_start * C, wpe, B, T, C, 0, -1, NULL);
    expect_calls(tp->comm, &s, calls, tp_vocab_embedding_calls(sp, 0, n, N, C, calls), "embedding forward");
    size_t Ns = tp->sequence_parallel ? (size_t)N / n : (size_t)N, row0 = tp->sequence_parallel ? r * Ns * C : 0;
    expect_close(es, e1 + row0, Ns * C, "vocab-parallel embedding");
    float *dwte1 = calloc((size_t)Vp * C, 4), *dwtes = calloc((size_t)sh.V_tp * C, 4);
    float *dwpe1 = calloc((size_t)T * C, 4), *dwpes = calloc((size_t)T * C, 4);
    tp_vocab_embedding_backward(be, one, &full, dwte1, dwpe1, dout, tok, B, T, C, 0, -1, NULL);
    s = tp->comm->stats;
    tp_vocab_embedding_backward(be, tp, &sh, dwtes, dwpes, dout + row0, tok, B, T, C, 0, -1, NULL);
    expect_calls(tp->comm, &s, calls, tp_vocab_embedding_calls(sp, 1, n, N, C, calls), "embedding backward");
    expect_close(dwtes, dwte1 + (size_t)sh.vocab_start * C, (size_t)sh.V_tp * C, "embedding gradient");
    expect_close(dwpes, dwpe1, (size_t)T * C, "position gradient");
    // cross-entropy: full logits (N, Vp1 = first 384 columns) vs this rank's columns
    float *l1 = calloc((size_t)N * Vp1, 4), *ls = calloc((size_t)N * sh.V_tp, 4);
    for (int i = 0; i < N; i++) {
        memcpy(l1 + (size_t)i * Vp1, logits + (size_t)i * Vp, Vp1 * 4);
        memcpy(ls + (size_t)i * sh.V_tp, logits + (size_t)i * Vp + sh.vocab_start, sh.V_tp * 4);
    }
    float buf1[4 * 16], bufs[4 * 16], buff[4 * 16], dscale[16];
    for (int i = 0; i < N; i++) dscale[i] = (1.0f + (float)(i % 3)) / N;
    TPXentBuffers x1 = {buf1, buf1 + N, buf1 + 3 * N}, xs = {bufs, bufs + N, bufs + 3 * N};
    TPXentBuffers xf = {buff, buff + N, buff + 3 * N};
    float *lf = malloc((size_t)N * sh.V_tp * 4);  // the fused classifier's copy of ls
    memcpy(lf, ls, (size_t)N * sh.V_tp * 4);
    float buf1f[4 * 16], *l1f = malloc((size_t)N * Vp1 * 4);  // one shard: one pass
    TPXentBuffers x1f = {buf1f, buf1f + N, buf1f + 3 * N};
    memcpy(l1f, l1, (size_t)N * Vp1 * 4);
    tp_vocab_xent_forward(be, one, &full, &x1f, l1f, tgt, dscale, N);
    tp_vocab_xent_forward(be, one, &full, &x1, l1, tgt, NULL, N);
    s = tp->comm->stats;
    tp_vocab_xent_forward(be, tp, &sh, &xs, ls, tgt, NULL, N);
    expect_calls(tp->comm, &s, calls, tp_vocab_xent_calls(n, N, calls), "cross-entropy forward");
    tp_vocab_xent_forward(be, tp, &sh, &xf, lf, tgt, dscale, N);  // loss and dlogits in place
    expect_close(xs.loss, x1.loss, N, "vocab-parallel cross-entropy loss");
    tp_vocab_xent_backward(be, &full, &x1, l1, l1, tgt, dscale, N);
    tp_vocab_xent_backward(be, &sh, &xs, ls, ls, tgt, dscale, N);
    EXPECT(!memcmp(xf.loss, xs.loss, (size_t)N * 4), "fused classifier loss: not the same bits");
    EXPECT(!memcmp(lf, ls, (size_t)N * sh.V_tp * 4), "fused classifier dlogits: not the same bits");
    EXPECT(!memcmp(x1f.loss, x1.loss, (size_t)N * 4), "one-pass classifier loss: not the same bits");
    EXPECT(!memcmp(l1f, l1, (size_t)N * Vp1 * 4), "one-pass classifier dlogits: not the same bits");
    free(lf), free(l1f);
    int n_cmp = Vp1 - sh.vocab_start < sh.V_tp ? Vp1 - sh.vocab_start : sh.V_tp;
    for (int i = 0; i < N; i++) {
        if (n_cmp > 0)
            expect_close(ls + (size_t)i * sh.V_tp, l1 + (size_t)i * Vp1 + sh.vocab_start,
                         (size_t)n_cmp, "cross-entropy logit gradient");
        for (int j = sh.V_valid; j < sh.V_tp; j++)
            EXPECT(ls[(size_t)i * sh.V_tp + j] == 0.0f, "padding gradient %g", ls[(size_t)i * sh.V_tp + j]);
    }
    free(wte); free(wpe); free(dout); free(logits); free(e1); free(es); free(dwte1); free(dwtes);
    free(dwpe1); free(dwpes); free(l1); free(ls);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int self = rank, *all = calloc((size_t)size, sizeof(int));
    for (int i = 0; i < size; i++) all[i] = i;
    Comm *onec = comm_mpi_create(MPI_COMM_SELF, "self", &self, 60);
    Comm *tpc = comm_mpi_create(MPI_COMM_WORLD, "tp", all, 60);
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    float *ws1 = calloc(4096, 4), *ws2 = calloc(4096, 4);
    TPGroup one = {onec, 0, NULL, NULL}, tp = {tpc, 0, ws1, ws2}, tp_sp = {tpc, 1, ws1, ws2};
    test_linear_pair(be, &one, tpc, 0);
    test_linear_pair(be, &one, tpc, 1);
    test_vocab(be, &one, &tp);
    test_vocab(be, &one, &tp_sp);
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    backend_destroy(be);
    comm_destroy(onec);
    comm_destroy(tpc);
    free(all); free(ws1); free(ws2);
    MPI_CHECK(MPI_Finalize());
    if (rank == 0) printf("test_tp_layers tp=%d (with and without sequence parallelism): %s\n", size,
                          fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
