// tests/backend/test_cpu_documents.c: documents inside a sample (--reset-position-ids,
// --reset-attention-mask) on the CPU backend. Positions: position_forward/backward and
// rope_gqa_forward/backward with a per-row position array are the per-row reference loops
// (the same bits), and with the arithmetic positions the NULL call's bits. Attention with
// BackendAttnWindow.qstart (each row's document start): the materialised and the flash ops
// give each document of a sample what the op gives that document alone as its own sequence
// (out, lse, dqkv to fp32 round-off, B = 2 samples of 3 documents, T 150, hs 8 and 40); with
// attention dropout (global mask indices) flash equals materialised; two key windows with
// accumulate equal the whole sequence (forward). The bf16 backend's position ops with pos.
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, T = 150, NDOC = 3 };

// Expects got to be want (n floats) within tol of max(1, max|want|); prints the worst error.
static void expect_near(const float *got, const float *want, size_t n, double tol,
                        const char *what) {
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = isinf(want[i]) && got[i] == want[i] ? 0.0 : fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e;
    }
    printf("  %-58s max abs %.2e, rel %.2e\n", what, worst, worst / scale);
    EXPECT(worst <= tol * scale, "%s: error %.3g > %.3g", what, worst, tol * scale);
}

// Document starts of the two samples; 64-row blocks of keys wholly before a query block's
// documents (skipped) in both.
static const int STARTS[B][NDOC] = {{0, 13, 70}, {0, 64, 130}};

// qs (B, T): the document start of each row; pos (B, T): the position in it.
static void doc_rows(int *qs, int *pos) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int s = 0;
            for (int k = 0; k < NDOC; k++) s = STARTS[b][k] <= t ? STARTS[b][k] : s;
            qs[b * T + t] = s, pos[b * T + t] = t - s;
        }
}

static void test_positions(Backend *be, TestRng *r) {
    int C = 6, N = B * T;
    int qs[B * T], pos[B * T], ar[B * T];
    doc_rows(qs, pos);
    for (int i = 0; i < N; i++) ar[i] = i % T;
    float *wpe = test_floats((size_t)T * C), *x = test_floats((size_t)N * C);
    float *y = test_floats((size_t)N * C), *ref = test_floats((size_t)N * C);
    float *dw = test_floats((size_t)T * C), *dref = test_floats((size_t)T * C);
    rng_fill(r, wpe, (size_t)T * C, -1, 1), rng_fill(r, x, (size_t)N * C, -1, 1);
    memcpy(y, x, (size_t)N * C * sizeof(float)), memcpy(ref, x, (size_t)N * C * sizeof(float));
    be->ops->position_forward(be, y, wpe, B, T, C, 0, pos);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) ref[i * C + c] += wpe[pos[i] * C + c];
    EXPECT_SAME_BITS(y, ref, (size_t)N * C, "position_forward with pos");
    rng_fill(r, dw, (size_t)T * C, -1, 1), memcpy(dref, dw, (size_t)T * C * sizeof(float));
    be->ops->position_backward(be, dw, x, B, T, C, 0, pos);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) dref[pos[i] * C + c] += x[i * C + c];
    EXPECT_SAME_BITS(dw, dref, (size_t)T * C, "position_backward with pos");
    // the arithmetic positions as an array: the NULL call's bits
    memcpy(y, x, (size_t)N * C * sizeof(float)), memcpy(ref, x, (size_t)N * C * sizeof(float));
    be->ops->position_forward(be, y, wpe, B, T, C, 0, ar);
    be->ops->position_forward(be, ref, wpe, B, T, C, 0, NULL);
    EXPECT_SAME_BITS(y, ref, (size_t)N * C, "position_forward, pos = t");
    memset(dw, 0, (size_t)T * C * sizeof(float)), memset(dref, 0, (size_t)T * C * sizeof(float));
    be->ops->position_backward(be, dw, x, B, T, C, 0, ar);
    be->ops->position_backward(be, dref, x, B, T, C, 0, NULL);
    EXPECT_SAME_BITS(dw, dref, (size_t)T * C, "position_backward, pos = t");
    free(wpe), free(x), free(y), free(ref), free(dw), free(dref);
}

// rope_gqa with pos: each row as a one-row call at pos0 = its position (the same bits).
static void test_rope(Backend *be, TestRng *r) {
    int NH = 4, G = 2, hs = 8, rot = 6, N = B * T;
    size_t in = (size_t)(NH + 2 * G) * hs, out = (size_t)3 * NH * hs;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *x = test_floats(N * in), *y = test_floats(N * out), *ry = test_floats(N * out);
    float *g = test_floats(N * out), *dx = test_floats(N * in), *rdx = test_floats(N * in);
    rng_fill(r, x, N * in, -1, 1), rng_fill(r, g, N * out, -1, 1);
    be->ops->rope_gqa_forward(be, y, x, B, T, NH, G, hs, rot, 10000.0f, 0, pos);
    be->ops->rope_gqa_backward(be, dx, g, B, T, NH, G, hs, rot, 10000.0f, 0, pos);
    for (int i = 0; i < N; i++) {
        be->ops->rope_gqa_forward(be, ry + i * out, x + i * in, 1, 1, NH, G, hs, rot, 10000.0f,
                                  pos[i], NULL);
        be->ops->rope_gqa_backward(be, rdx + i * in, g + i * out, 1, 1, NH, G, hs, rot,
                                   10000.0f, pos[i], NULL);
    }
    EXPECT_SAME_BITS(y, ry, N * out, "rope_gqa_forward with pos");
    EXPECT_SAME_BITS(dx, rdx, N * in, "rope_gqa_backward with pos");
    free(x), free(y), free(ry), free(g), free(dx), free(rdx);
}

// out (B, T, C), lse or att, dqkv of qkv with documents qs (flash or materialised).
static void attn_docs(Backend *be, int flash, float *out, float *aux, float *dqkv, float *scr,
                      const float *qkv, const float *dy, int Bn, int Tn, int NH, int hs,
                      const int *qs, const BackendDropout *d) {
    BackendAttnWindow w = {0, 0, Tn, NULL, 0, NULL, 0, qs};
    const BackendAttnWindow *wp = qs ? &w : NULL;
    if (flash) {
        be->ops->flash_attention_forward(be, out, aux, qkv, Bn, Tn, NH, hs, d, wp);
        memset(dqkv, 0, (size_t)Bn * Tn * 3 * NH * hs * sizeof(float));  // a window adds
        be->ops->flash_attention_backward(be, dqkv, scr, dy, qkv, out, aux, Bn, Tn, NH, hs, d, wp);
    } else {
        be->ops->attention_forward(be, out, aux, qkv, Bn, Tn, NH, hs, d, wp);
        be->ops->attention_backward(be, dqkv, scr, dy, qkv, aux, Bn, Tn, NH, hs, d);
    }
}

// Each document alone (its rows as a sequence of its own) against the sample with qstart.
static void test_attention_alone(Backend *be, TestRng *r, int flash, int hs) {
    int NH = 2, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T * T;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *qkv = test_floats(nq), *dy = test_floats(no), *out = test_floats(no);
    float *aux = test_floats(nl), *dq = test_floats(nq), *scr = test_floats(nl);
    float *sq = test_floats(nq), *sdy = test_floats(no), *sout = test_floats(no);
    float *saux = test_floats(nl), *sdq = test_floats(nq), *sscr = test_floats(nl);
    float *rout = test_floats(no), *rdq = test_floats(nq), *rlse = test_floats((size_t)B * NH * T);
    rng_fill(r, qkv, nq, -2, 2), rng_fill(r, dy, no, -1, 1);
    attn_docs(be, flash, out, aux, dq, scr, qkv, dy, B, T, NH, hs, qs, NULL);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < NDOC && STARTS[b][k] < T; k++) {
            int s = STARTS[b][k], e = k + 1 < NDOC ? STARTS[b][k + 1] : T, L = e - s;
            memcpy(sq, qkv + ((size_t)b * T + s) * 3 * C, (size_t)L * 3 * C * sizeof(float));
            memcpy(sdy, dy + ((size_t)b * T + s) * C, (size_t)L * C * sizeof(float));
            attn_docs(be, flash, sout, saux, sdq, sscr, sq, sdy, 1, L, NH, hs, NULL, NULL);
            memcpy(rout + ((size_t)b * T + s) * C, sout, (size_t)L * C * sizeof(float));
            memcpy(rdq + ((size_t)b * T + s) * 3 * C, sdq, (size_t)L * 3 * C * sizeof(float));
            for (int h = 0; flash && h < NH; h++)
                memcpy(rlse + ((size_t)b * NH + h) * T + s, saux + (size_t)h * L,
                       (size_t)L * sizeof(float));
        }
    char what[96];
    snprintf(what, sizeof what, "%s hs %d: out = each document alone", flash ? "flash" : "att", hs);
    expect_near(out, rout, no, 1e-5, what);
    snprintf(what, sizeof what, "%s hs %d: dqkv = each document alone", flash ? "flash" : "att", hs);
    expect_near(dq, rdq, nq, 1e-5, what);
    if (flash) {
        snprintf(what, sizeof what, "flash hs %d: lse = each document alone", hs);
        expect_near(aux, rlse, (size_t)B * NH * T, 1e-5, what);
    }
    free(qkv), free(dy), free(out), free(aux), free(dq), free(scr), free(sq), free(sdy);
    free(sout), free(saux), free(sdq), free(sscr), free(rout), free(rdq), free(rlse);
}

// With dropout (p 0.1) flash equals materialised; two key windows (accumulate) the whole.
static void test_dropout_windows(Backend *be, TestRng *r) {
    int NH = 2, hs = 16, C = NH * hs, k1 = 20;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T * T;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *qkv = test_floats(nq), *dy = test_floats(no), *o1 = test_floats(no);
    float *o2 = test_floats(no), *a1 = test_floats(nl), *a2 = test_floats(nl);
    float *d1 = test_floats(nq), *d2 = test_floats(nq), *scr = test_floats(nl);
    rng_fill(r, qkv, nq, -2, 2), rng_fill(r, dy, no, -1, 1);
    BackendDropout d = {.key = dropout_key(5, 2, DROPOUT_SITE_ATTN_PROBS, 0),
                        .threshold = dropout_threshold(0.1), .scale = 1.0f / 0.9f,
                        .sample0 = 1, .h0 = 0, .NH = NH, .T = T};
    attn_docs(be, 1, o1, a1, d1, scr, qkv, dy, B, T, NH, hs, qs, &d);
    attn_docs(be, 0, o2, a2, d2, scr, qkv, dy, B, T, NH, hs, qs, &d);
    expect_near(o1, o2, no, 1e-5, "dropout: flash out = materialised");
    expect_near(d1, d2, nq, 1e-5, "dropout: flash dqkv = materialised");
    // keys [0, k1) then [k1, T) as windows of kv rows, the online softmax continued
    size_t nk = (size_t)B * T * 3 * C;
    float *kva = test_floats(nk), *kvb = test_floats(nk), *lse = test_floats((size_t)B * NH * T);
    for (int b = 0; b < B; b++) {
        memcpy(kva + (size_t)b * k1 * 3 * C, qkv + (size_t)b * T * 3 * C,
               (size_t)k1 * 3 * C * sizeof(float));
        memcpy(kvb + (size_t)b * (T - k1) * 3 * C, qkv + ((size_t)b * T + k1) * 3 * C,
               (size_t)(T - k1) * 3 * C * sizeof(float));
    }
    BackendAttnWindow wa = {0, 0, k1, kva, 0, NULL, 0, qs}, wb = {0, k1, T - k1, kvb, 1, NULL, 0, qs};
    be->ops->flash_attention_forward(be, o2, lse, qkv, B, T, NH, hs, &d, &wa);
    be->ops->flash_attention_forward(be, o2, lse, qkv, B, T, NH, hs, &d, &wb);
    expect_near(o2, o1, no, 1e-5, "two key windows with documents: out");
    expect_near(lse, a1, (size_t)B * NH * T, 1e-5, "two key windows with documents: lse");
    free(qkv), free(dy), free(o1), free(o2), free(a1), free(a2), free(d1), free(d2), free(scr);
    free(kva), free(kvb), free(lse);
}

// The bf16 backend (16-bit entries around the fp32 ops): position_forward/backward and rope_gqa
// with pos equal one-row calls at pos0 = each row's position (the same bits).
static void test_half(TestRng *r) {
    Backend *be = backend_cpu_create(2, BACKEND_BF16);
    int C = 6, NH = 4, G = 2, hs = 8, rot = 6, N = B * T;
    size_t in = (size_t)(NH + 2 * G) * hs, out = (size_t)3 * NH * hs, nx = (size_t)N * in;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *f = test_floats(nx), *dw = test_floats((size_t)T * C), *dref = test_floats((size_t)T * C);
    uint16_t *x = calloc(nx, 2), *wpe = calloc((size_t)T * C, 2), *y = calloc((size_t)N * out, 2);
    uint16_t *ry = calloc((size_t)N * out, 2), *dx = calloc(nx, 2), *rdx = calloc(nx, 2);
    rng_fill(r, f, nx, -1, 1);
    be->ops->cast(be, x, BACKEND_BF16, f, BACKEND_F32, nx);
    be->ops->cast(be, wpe, BACKEND_BF16, f + 7, BACKEND_F32, (size_t)T * C);
    memcpy(y, x, (size_t)N * C * 2), memcpy(ry, x, (size_t)N * C * 2);
    be->ops->position_forward(be, y, wpe, B, T, C, 0, pos);
    for (int i = 0; i < N; i++) be->ops->position_forward(be, ry + i * C, wpe, 1, 1, C, pos[i], NULL);
    EXPECT(memcmp(y, ry, (size_t)N * C * 2) == 0, "bf16 position_forward with pos");
    be->ops->position_backward(be, dw, x, B, T, C, 0, pos);
    for (int i = 0; i < N; i++) be->ops->position_backward(be, dref, x + i * C, 1, 1, C, pos[i], NULL);
    EXPECT_SAME_BITS(dw, dref, (size_t)T * C, "bf16 position_backward with pos");
    be->ops->rope_gqa_forward(be, y, x, B, T, NH, G, hs, rot, 10000.0f, 0, pos);
    be->ops->rope_gqa_backward(be, dx, y, B, T, NH, G, hs, rot, 10000.0f, 0, pos);
    for (int i = 0; i < N; i++) {
        be->ops->rope_gqa_forward(be, ry + i * out, x + i * in, 1, 1, NH, G, hs, rot, 10000.0f,
                                  pos[i], NULL);
        be->ops->rope_gqa_backward(be, rdx + i * in, y + i * out, 1, 1, NH, G, hs, rot,
                                   10000.0f, pos[i], NULL);
    }
    EXPECT(memcmp(y, ry, (size_t)N * out * 2) == 0, "bf16 rope_gqa_forward with pos");
    EXPECT(memcmp(dx, rdx, nx * 2) == 0, "bf16 rope_gqa_backward with pos");
    free(f), free(dw), free(dref), free(x), free(wpe), free(y), free(ry), free(dx), free(rdx);
    backend_destroy(be);
}

int main(void) {
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {11};
    test_positions(be, &r);
    test_rope(be, &r);
    for (int flash = 0; flash <= 1; flash++) {
        test_attention_alone(be, &r, flash, 8);
        test_attention_alone(be, &r, flash, 40);
    }
    test_dropout_windows(be, &r);
    test_half(&r);
    backend_destroy(be);
    return test_result("cpu_documents");
}
