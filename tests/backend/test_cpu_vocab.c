// tests/backend/test_cpu_vocab.c: CPU backend vocab-parallel embedding, position embedding
// and softmax cross-entropy. The cross-entropy is checked unsharded (against a double
// reference and finite differences) and sharded the way a TP layer runs it
// (layers/tp_vocab.c): every shard computes its statistics from its own max, the test
// combines them by hand as the all-reduces would (max, rescale onto it, then sum), and the
// loss and gradients must match the unsharded ones, padding included.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "tests/backend/backend_test_util.h"

#include <float.h>
#include <math.h>

static void test_embedding(Backend *be, TestRng *r) {
    enum { N = 9, C = 5, VL = 6, START = 4 };
    int tokens[N] = {4, 9, 3, 10, 5, 4, -1, 12, 9};  // in shard: 4, 9, 5, 4, 9
    float table[VL * C], out[N * C], dout[N * C], dtable[VL * C];
    rng_fill(r, table, VL * C, -1, 1), rng_fill(r, dout, N * C, -1, 1);
    for (int i = 0; i < N * C; i++) out[i] = NAN;
    be->ops->embedding_forward(be, out, tokens, table, N, C, START, VL);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int row = tokens[i] - START, in = row >= 0 && row < VL;
        for (int c = 0; c < C; c++) bad += out[i * C + c] != (in ? table[row * C + c] : 0.0f);
    }
    EXPECT(bad == 0, "embedding forward: %d wrong values", bad);

    for (int i = 0; i < VL * C; i++) dtable[i] = 0.5f;
    be->ops->embedding_backward(be, dtable, dout, tokens, N, C, START, VL);
    double want[VL * C];
    for (int i = 0; i < VL * C; i++) want[i] = 0.5;
    for (int i = 0; i < N; i++) {
        int row = tokens[i] - START;
        if (row >= 0 && row < VL)
            for (int c = 0; c < C; c++) want[row * C + c] += dout[i * C + c];
    }
    EXPECT_CLOSE(dtable, want, VL * C, 1e-7, "embedding backward (accumulated, repeated tokens)");

    // Two shards of 6 rows: the sum of their outputs is the full lookup (what the TP
    // all-reduce computes). Tokens 0..11 are all covered.
    int tok2[N] = {0, 11, 5, 6, 7, 2, 11, 0, 8};
    float full[2 * VL * C], o0[N * C], o1[N * C];
    rng_fill(r, full, 2 * VL * C, -1, 1);
    be->ops->embedding_forward(be, o0, tok2, full, N, C, 0, VL);
    be->ops->embedding_forward(be, o1, tok2, full + VL * C, N, C, VL, VL);
    bad = 0;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) bad += o0[i * C + c] + o1[i * C + c] != full[tok2[i] * C + c];
    EXPECT(bad == 0, "two embedding shards do not add up to the full lookup (%d)", bad);
}

static void test_position(Backend *be, TestRng *r) {
    enum { B = 3, T = 4, C = 7 };
    float wpe[T * C], out[B * T * C], out0[B * T * C], dout[B * T * C], dwpe[T * C];
    rng_fill(r, wpe, T * C, -1, 1), rng_fill(r, out, B * T * C, -1, 1);
    rng_fill(r, dout, B * T * C, -1, 1);
    memcpy(out0, out, sizeof out);
    be->ops->position_forward(be, out, wpe, B, T, C, 0, NULL);
    int bad = 0;
    for (int i = 0; i < B * T * C; i++) bad += out[i] != out0[i] + wpe[i % (T * C)];
    EXPECT(bad == 0, "position forward: %d wrong values", bad);
    for (int i = 0; i < T * C; i++) dwpe[i] = -1.0f;
    be->ops->position_backward(be, dwpe, dout, B, T, C, 0, NULL);
    double want[T * C];
    for (int i = 0; i < T * C; i++) want[i] = -1.0 + dout[i] + dout[T * C + i] + dout[2 * T * C + i];
    EXPECT_CLOSE(dwpe, want, T * C, 1e-7, "position backward (accumulated)");
}

// ------------------------------------------------------------------ cross-entropy ----
enum { XN = 6, XVP = 16 };  // rows, padded vocabulary

typedef struct {
    int V;                 // real vocabulary: columns [0, V) of the (XN, XVP) logits
    double *logits;        // (XN, XVP)
    const int *targets;    // (XN)
    const float *dscale;   // (XN)
} XentCtx;

static double xent_ref_row(const double *l, int V, int target) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) m = fmax(m, l[j]);
    for (int j = 0; j < V; j++) s += exp(l[j] - m);
    return log(s) + m - (target >= 0 && target < V ? l[target] : 0.0);
}

static double xent_loss(void *p) {
    XentCtx *c = p;
    double L = 0;
    for (int i = 0; i < XN; i++)
        L += c->dscale[i] * xent_ref_row(c->logits + i * XVP, c->V, c->targets[i]);
    return L;
}

// Runs the xent ops on `tp` shards of the (XN, XVP) logits, combining as the TP
// all-reduces would. loss (XN); dlogits (XN, XVP) reassembled from the shards. fused: the
// loss from xent_backward's pass on every shard (the fused classifier: each rank writes its
// copy, the same bits) instead of xent_loss; 2 (tp 1): the one-pass classifier (xent_backward
// with rowmax NULL: the statistics in the same pass, no xent_stats).
static void xent_sharded(Backend *be, int tp, int V, const float *logits, const int *targets,
                         const float *dscale, float *loss, float *dlogits, int fused) {
    enum { TPMAX = 4 };
    int Vtp = XVP / tp;
    if (fused == 2) {
        memcpy(dlogits, logits, sizeof(float) * XN * XVP);
        be->ops->xent_backward(be, dlogits, loss, dlogits, NULL, NULL, NULL, targets, dscale, XN,
                               XVP, V, 0);
        return;
    }
    float rowmax[XN], m[TPMAX][XN], sumexp[XN], tgt[XN], se[TPMAX][XN], tg[XN], shard[XN * XVP];
    for (int i = 0; i < XN; i++) rowmax[i] = -FLT_MAX, sumexp[i] = 0, tgt[i] = 0;
    for (int k = 0; k < tp; k++) {  // xent_stats from the shard's max, then all-reduce MAX
        int start = k * Vtp, valid = V - start < 0 ? 0 : V - start > Vtp ? Vtp : V - start;
        for (int i = 0; i < XN; i++) memcpy(shard + i * Vtp, logits + i * XVP + start, Vtp * 4);
        be->ops->xent_stats(be, m[k], se[k], tg, shard, targets, XN, Vtp, valid, start);
        for (int i = 0; i < XN; i++) rowmax[i] = fmaxf(rowmax[i], m[k][i]), tgt[i] += tg[i];
        if (valid == 0) EXPECT(m[k][0] == -FLT_MAX, "an all-padding shard's max is -FLT_MAX");
    }
    for (int k = 0; k < tp; k++) {  // xent_rescale onto the max when sharded, all-reduce SUM
        if (tp > 1) be->ops->xent_rescale(be, se[k], m[k], rowmax, XN);
        for (int i = 0; i < XN; i++) sumexp[i] += se[k][i];
    }
    if (!fused) be->ops->xent_loss(be, loss, sumexp, rowmax, tgt, XN);
    for (int k = 0; k < tp; k++) {  // backward (or fused): no communication
        int start = k * Vtp, valid = V - start < 0 ? 0 : V - start > Vtp ? Vtp : V - start;
        float lk[XN];
        for (int i = 0; i < XN; i++) memcpy(shard + i * Vtp, logits + i * XVP + start, Vtp * 4);
        be->ops->xent_backward(be, shard, fused ? lk : NULL, shard, rowmax, sumexp, tgt, targets,
                               dscale, XN, Vtp, valid, start);  // in place: dlogits aliases logits
        if (fused && k == 0) memcpy(loss, lk, sizeof lk);
        if (fused && k > 0) EXPECT_SAME_BITS(lk, loss, XN, "fused loss, shard k vs shard 0");
        for (int i = 0; i < XN; i++) memcpy(dlogits + i * XVP + start, shard + i * Vtp, Vtp * 4);
    }
}

static void test_xent(Backend *be, TestRng *r, int V) {
    float logits[XN * XVP], dscale[XN], loss[XN], dl[XN * XVP], loss_tp[XN], dl_tp[XN * XVP];
    int targets[XN];
    rng_fill(r, logits, XN * XVP, -4, 4), rng_fill(r, dscale, XN, 0.1, 1);
    for (int i = 0; i < XN; i++) {
        targets[i] = (int)rng_uniform(r, 0, V);
        for (int j = V; j < XVP; j++) logits[i * XVP + j] = 1e30f;  // padding must be ignored
    }
    targets[XN - 1] = -1;  // a target in no shard: tgt = 0, no one-hot
    XentCtx c = {V, to_double(logits, XN * XVP), targets, dscale};

    // Unsharded: against the double reference and finite differences.
    xent_sharded(be, 1, V, logits, targets, dscale, loss, dl, 0);
    float loss_f[XN], dl_f[XN * XVP];  // the fused classifier: loss and dlogits in one pass
    xent_sharded(be, 1, V, logits, targets, dscale, loss_f, dl_f, 1);
    double want[XN * XVP];
    for (int i = 0; i < XN; i++) want[i] = xent_ref_row(c.logits + i * XVP, V, targets[i]);
    EXPECT_CLOSE(loss, want, XN, 1e-6, "xent loss, unsharded");
    EXPECT_CLOSE(loss_f, want, XN, 1e-6, "fused xent loss, unsharded");
    for (int i = 0; i < XN * XVP; i++) c.logits[i] = i % XVP < V ? c.logits[i] : 0.0;
    fd_grad(c.logits, XN * XVP, xent_loss, &c, want);
    EXPECT_CLOSE(dl, want, XN * XVP, 2e-6, "xent dlogits vs finite differences (0 at padding)");
    EXPECT_CLOSE(dl_f, want, XN * XVP, 2e-6, "fused xent dlogits vs finite differences");
    EXPECT_SAME_BITS(loss_f, loss, XN, "fused loss vs xent_loss");
    EXPECT_SAME_BITS(dl_f, dl, XN * XVP, "fused dlogits vs xent_backward");
    xent_sharded(be, 1, V, logits, targets, dscale, loss_f, dl_f, 2);
    EXPECT_SAME_BITS(loss_f, loss, XN, "one-pass loss vs xent_stats + xent_loss");
    EXPECT_SAME_BITS(dl_f, dl, XN * XVP, "one-pass dlogits vs xent_stats + xent_backward");
    float rowmax[XN], stats[2 * XN], dl2[XN * XVP];  // out of place == in place, bitwise
    be->ops->xent_stats(be, rowmax, stats, stats + XN, logits, targets, XN, XVP, V, 0);
    be->ops->xent_backward(be, dl2, NULL, logits, rowmax, stats, NULL, targets, dscale, XN, XVP,
                           V, 0);
    EXPECT_SAME_BITS(dl2, dl, XN * XVP, "xent_backward out of place vs in place");

    // TP = 2 and 4: the same loss and gradients from shards.
    for (int tp = 2; tp <= 4; tp *= 2) {
        xent_sharded(be, tp, V, logits, targets, dscale, loss_tp, dl_tp, 0);
        double l0[XN], d0[XN * XVP];
        for (int i = 0; i < XN; i++) l0[i] = loss[i];
        for (int i = 0; i < XN * XVP; i++) d0[i] = dl[i];
        EXPECT_CLOSE(loss_tp, l0, XN, 1e-6, tp == 2 ? "xent loss, TP=2" : "xent loss, TP=4");
        EXPECT_CLOSE(dl_tp, d0, XN * XVP, 1e-6, tp == 2 ? "xent dlogits, TP=2" : "xent dlogits, TP=4");
        xent_sharded(be, tp, V, logits, targets, dscale, loss_f, dl_f, 1);
        EXPECT_SAME_BITS(loss_f, loss_tp, XN, "fused loss vs xent_loss, sharded");
        EXPECT_SAME_BITS(dl_f, dl_tp, XN * XVP, "fused dlogits vs xent_backward, sharded");
    }
    free(c.logits);
}

// Bigger rows (several exp blocks), twice on 2 threads and once on 1: bitwise equal; the
// one-pass classifier (rowmax NULL, in place) bitwise the three calls, on 2 threads and 1.
static void test_xent_deterministic(Backend *be2, Backend *be1, TestRng *r) {
    enum { N = 64, VL = 3000, VV = 2950 };
    float *logits = test_floats(N * VL), *dl[3], stats[3][3 * N], loss[3][N];
    int targets[N];
    float dscale[N];
    rng_fill(r, logits, N * VL, -10, 10), rng_fill(r, dscale, N, 0, 1);
    for (int i = 0; i < N; i++) targets[i] = (int)rng_uniform(r, 0, VV) + 1000;
    Backend *bes[3] = {be2, be2, be1};
    for (int k = 0; k < 3; k++) {
        float *s = stats[k];
        dl[k] = test_floats(N * VL);
        bes[k]->ops->xent_stats(bes[k], s, s + N, s + 2 * N, logits, targets, N, VL, VV, 1000);
        bes[k]->ops->xent_backward(bes[k], dl[k], NULL, logits, s, s + N, NULL, targets, dscale,
                                   N, VL, VV, 1000);
    }
    EXPECT_SAME_BITS(stats[0], stats[1], 3 * N, "xent max/sumexp/tgt");
    EXPECT_SAME_BITS(stats[0], stats[2], 3 * N, "xent max/sumexp/tgt, 1 vs 2 threads");
    EXPECT_SAME_BITS(dl[0], dl[1], (size_t)N * VL, "xent dlogits");
    EXPECT_SAME_BITS(dl[0], dl[2], (size_t)N * VL, "xent dlogits, 1 vs 2 threads");
    targets[N - 1] = 999;  // outside the shard: tgt 0, no one-hot (both paths)
    float *s = stats[0];
    be2->ops->xent_stats(be2, s, s + N, s + 2 * N, logits, targets, N, VL, VV, 1000);
    be2->ops->xent_loss(be2, loss[0], s + N, s, s + 2 * N, N);
    be2->ops->xent_backward(be2, dl[0], NULL, logits, s, s + N, NULL, targets, dscale, N, VL, VV,
                            1000);
    for (int k = 1; k < 3; k++) {  // one pass, in place over a copy of the logits
        memcpy(dl[k], logits, sizeof(float) * N * VL);
        bes[k]->ops->xent_backward(bes[k], dl[k], loss[k], dl[k], NULL, NULL, NULL, targets,
                                   dscale, N, VL, VV, 1000);
    }
    EXPECT_SAME_BITS(loss[1], loss[0], N, "one-pass loss vs the three calls (2 threads)");
    EXPECT_SAME_BITS(loss[2], loss[0], N, "one-pass loss vs the three calls (1 thread)");
    EXPECT_SAME_BITS(dl[1], dl[0], (size_t)N * VL, "one-pass dlogits vs the three calls (2 threads)");
    EXPECT_SAME_BITS(dl[2], dl[0], (size_t)N * VL, "one-pass dlogits vs the three calls (1 thread)");
    for (int k = 0; k < 3; k++) free(dl[k]);
    free(logits);
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be1 = backend_cpu_create(1, BACKEND_F32), *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {2024};
    test_embedding(be, &r);
    test_position(be, &r);
    test_xent(be, &r, 13);  // TP=2: shards of 8 valid / 5 valid + 3 padding
    test_xent(be, &r, 9);   // TP=4: the last shard is all padding
    test_xent_deterministic(be, be1, &r);
    backend_destroy(be), backend_destroy(be1);
    return test_result("test_cpu_vocab");
}
