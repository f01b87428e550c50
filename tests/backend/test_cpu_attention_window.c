// tests/backend/test_cpu_attention_window.c: the windowed flash ops that a ring over key
// blocks (context parallelism) is made of: the forward continuing an online softmax
// (BackendAttnWindow.accumulate) and the windowed backward adding dq and each block's dk, dv
// (BackendAttnWindow.dkv). The ring of attention_ring.h (P = 2 and 3 ranks, chunks of c = 17
// and 33 rows, head sizes 24 and 64, B = 2, NH = 2) against the whole-sequence flash op:
// out, lse and dqkv to fp32 round-off (1e-5 of the largest value; the worst error printed),
// without and with attention dropout (p = 0.1, masks of global positions). Also: the
// whole-sequence backward through a window {0, 0, T} onto a zeroed dqkv is the NULL window's;
// the forward accumulating from out 0, lse -inf (fresh) is the overwriting one; the q parts
// of the dkv buffers stay 0; a windowed backward leaves rows of lse -inf as they were.
// Packed K/V rows (BackendAttnWindow.kv_heads, grouped-query attention): the ring with G = NH
// = 4 and G = 2 kv heads against the whole-sequence op on the expanded heads (a kv head's
// gradient: the sum over its group). copy_row_blocks (the model's packing) against a loop,
// copying and adding, fp32 and bf16.
#include "backend/backend.h"
#include "tests/backend/attention_ring.h"
#include "tests/backend/backend_test_util.h"

#include <math.h>
#include <stdio.h>

// Expects got to be want (n) within tol of max(1, max|want|); prints the worst error.
static void expect_ring(const float *got, const float *want, size_t n, double tol,
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

static void test_ring(Backend *be, TestRng *r, int P, int c, int hs, double p, int fresh, int NH,
                      int G) {
    int B = 2, T = 2 * P * c, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = test_floats(nq), *dout = test_floats(no), *out = test_floats(no);
    float *lse = test_floats(nl), *dqkv = test_floats(nq), *scr = test_floats(nl);
    float *rout = test_floats(no), *rlse = test_floats(nl), *rdq = test_floats(nq);
    rng_fill(r, qkv, nq, -2, 2), rng_fill(r, dout, no, -1, 1);
    if (G) ring_group_copies(qkv, (size_t)B * T, NH, hs, G);
    BackendDropout d = {.key = dropout_key(7, 3, DROPOUT_SITE_ATTN_PROBS, 1),
                        .threshold = dropout_threshold(p), .scale = 1.0f / (1.0f - (float)p),
                        .sample0 = 5, .h0 = 2, .NH = 4, .T = T};
    const BackendDropout *dp = p > 0 ? &d : NULL;
    be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, dp, NULL);
    be->ops->flash_attention_backward(be, dqkv, scr, dout, qkv, out, lse, B, T, NH, hs, dp, NULL);
    AttnRing g = {B, NH, hs, P, c, dp, fresh, G};
    int stray = attn_ring_run(be, &g, qkv, dout, rout, rlse, rdq);
    EXPECT(stray == 0, "%d entries of dkv's q parts (packed: dq's k | v) written", stray);
    char what[128], kvs[32] = "";
    if (G) snprintf(kvs, sizeof kvs, " NH%d G%d", NH, G);
    snprintf(what, sizeof what, "ring P%d c%d hs%d p%g%s%s: out", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    expect_ring(rout, out, no, 1e-5, what);
    snprintf(what, sizeof what, "ring P%d c%d hs%d p%g%s%s: lse", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    expect_ring(rlse, lse, nl, 1e-5, what);
    snprintf(what, sizeof what, "ring P%d c%d hs%d p%g%s%s: dqkv", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    float *want = test_floats(nq);
    memcpy(want, dqkv, nq * sizeof(float));
    if (G) ring_group_sum(want, (size_t)B * T, NH, hs, G);
    expect_ring(rdq, want, nq, 1e-5, what);
    free(want);
    // The whole sequence as one window {0, 0, T} (adding onto zeros): the same bits.
    BackendAttnWindow all = {0, 0, T, NULL, 0, NULL, 0, NULL};
    memset(rdq, 0, nq * sizeof(float));
    be->ops->flash_attention_backward(be, rdq, scr, dout, qkv, out, lse, B, T, NH, hs, dp, &all);
    EXPECT(memcmp(rdq, dqkv, nq * sizeof(float)) == 0, "window {0, 0, T} backward = NULL's");
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(scr), free(rout), free(rlse);
    free(rdq);
}

// A windowed backward whose queries have lse -inf in some rows (as if they saw no key):
// those rows of dq stay as they were, and dk, dv stay finite.
static void test_unseen_rows(Backend *be, TestRng *r) {
    int B = 1, NH = 2, hs = 8, C = NH * hs, T = 20, Tk = 12;
    size_t nq = (size_t)B * T * 3 * C, nk = (size_t)B * Tk * 3 * C, no = (size_t)B * T * C;
    size_t nl = (size_t)B * NH * T;
    float *qkv = test_floats(nq), *kv = test_floats(nk), *dkv = test_floats(nk);
    float *dq = test_floats(nq), *was = test_floats(nq), *out = test_floats(no);
    float *lse = test_floats(nl), *scr = test_floats(nl), *dy = test_floats(no);
    rng_fill(r, qkv, nq, -1, 1), rng_fill(r, kv, nk, -1, 1), rng_fill(r, dy, no, -1, 1);
    rng_fill(r, dq, nq, -1, 1), rng_fill(r, dkv, nk, -1, 1);
    BackendAttnWindow w = {30, 0, Tk, kv, 0, dkv, 0, NULL};  // every query sees every key
    be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, NULL, &w);
    for (int h = 0; h < NH; h++)
        for (int t = 3; t < T; t += 4) {  // row t of head h: no key seen
            lse[h * T + t] = -INFINITY;
            for (int e = 0; e < hs; e++) out[(size_t)t * C + h * hs + e] = 0.0f;
        }
    memcpy(was, dq, nq * sizeof(float));
    be->ops->flash_attention_backward(be, dq, scr, dy, qkv, out, lse, B, T, NH, hs, NULL, &w);
    int kept = 1, finite = 1, moved = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < C; j++) {
            size_t e = (size_t)t * 3 * C + j;
            if (t % 4 == 3) kept &= dq[e] == was[e];
            else moved += dq[e] != was[e];
        }
    for (size_t e = 0; e < nk; e++) finite &= isfinite(dkv[e]) != 0;
    EXPECT(kept, "dq rows of lse -inf changed");
    EXPECT(moved > 0, "no dq of the other rows added");
    EXPECT(finite, "dk, dv not finite with rows of lse -inf");
    free(qkv), free(kv), free(dkv), free(dq), free(was), free(out), free(lse), free(scr);
    free(dy);
}

// copy_row_blocks against a host loop: 7 rows of 40 elements, 4 blocks of 5 elements 9
// apart from element 2, into rows of 24 elements, 6 apart from element 1; copied, then added
// (each sum rounded once to be->act): the same bits. Host memory (the CPU backend).
static void test_row_blocks(Backend *be, TestRng *r) {
    enum { ROWS = 7, LS = 40, LD = 24, NB = 4, W = 5, SB = 9, DB = 6 };
    float src[ROWS * LS], dst[ROWS * LD], want[ROWS * LD], got[ROWS * LD];
    rng_fill(r, src, ROWS * LS, -2, 2), rng_fill(r, dst, ROWS * LD, -2, 2);
    BackendDType t = be->act;
    size_t esz = backend_dtype_size(t);
    void *ds = be->ops->alloc(be, sizeof src), *dd = be->ops->alloc(be, sizeof dst);
    be->ops->cast(be, ds, t, src, BACKEND_F32, ROWS * LS);
    be->ops->cast(be, dd, t, dst, BACKEND_F32, ROWS * LD);
    be->ops->cast(be, src, BACKEND_F32, ds, t, ROWS * LS);  // the values as stored
    be->ops->cast(be, want, BACKEND_F32, dd, t, ROWS * LD);
    for (int add = 0; add < 2; add++) {
        for (int i = 0; i < ROWS; i++)
            for (int b = 0; b < NB; b++)
                for (int c = 0; c < W; c++) {
                    float *w = &want[i * LD + 1 + b * DB + c], x = src[i * LS + 2 + b * SB + c];
                    *w = add ? *w + x : x;
                }
        be->ops->cast(be, dst, t, want, BACKEND_F32, ROWS * LD);  // rounded as the op stores
        be->ops->cast(be, want, BACKEND_F32, dst, t, ROWS * LD);
        be->ops->copy_row_blocks(be, (char *)dd + esz, LD, DB, (char *)ds + 2 * esz, LS, SB,
                                 ROWS, NB, W, add);
        be->ops->cast(be, got, BACKEND_F32, dd, t, ROWS * LD);
        EXPECT(memcmp(got, want, sizeof got) == 0, "copy_row_blocks %s, %s",
               add ? "add" : "copy", backend_dtype_name(t));
    }
    printf("  copy_row_blocks %s: copy and add as the loop\n", backend_dtype_name(t));
    be->ops->free(be, ds), be->ops->free(be, dd);
}

int main(void) {
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {7};
    static const int cs[2] = {17, 33}, hss[2] = {24, 64};
    for (int P = 2; P <= 3; P++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                test_ring(be, &r, P, cs[i], hss[j], 0.0, 0, 2, 0);
                test_ring(be, &r, P, cs[i], hss[j], 0.1, 0, 2, 0);
            }
    test_ring(be, &r, 2, 17, 24, 0.1, 1, 2, 0);
    test_ring(be, &r, 3, 33, 64, 0.0, 1, 2, 0);
    test_unseen_rows(be, &r);
    for (int i = 0; i < 2; i++)  // packed K/V rows: G = NH, G = NH/2
        for (int j = 0; j < 2; j++) {
            test_ring(be, &r, 2, cs[i], hss[j], 0.0, 0, 4, 4);
            test_ring(be, &r, 2, cs[i], hss[j], 0.0, 0, 4, 2);
        }
    test_ring(be, &r, 3, 17, 24, 0.1, 0, 4, 2);
    test_ring(be, &r, 3, 33, 64, 0.1, 1, 4, 1);
    test_row_blocks(be, &r);
    Backend *bf = backend_cpu_create(2, BACKEND_BF16);
    test_row_blocks(bf, &r);
    backend_destroy(bf);
    backend_destroy(be);
    return test_result("cpu_attention_window");
}
