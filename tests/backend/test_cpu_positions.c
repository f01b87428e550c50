// tests/backend/test_cpu_positions.c: the CPU ops told where a slice of the sequence starts
// (position_forward/backward pos0, rope_gqa pos0, the dropout descriptor's pos0/Tl/T,
// attention windows): a sequence computed in three slices (T = 37 as 13 + 17 + 7, two
// sequences) equals the whole-sequence op on those positions. Bitwise where the arithmetic
// is per position (position table, rope, the dropout masks); attention (materialised and
// fused, with and without dropout) to fp32 round-off (1e-6 of the largest value), since the
// products run over other tile shapes. Also: the fused op's partial results over two key
// windows merged by their lse equal the whole op (what a ring over key blocks needs), a
// query that sees no key gets out 0 and lse -inf, and a decoding step's window (keys of the
// cached rows only) equals the full op's last row.
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

#include <math.h>

enum { B = 2, T = 37, NS = 3 };
static const int slice0[NS + 1] = {0, 13, 30, 37};

#define EXPECT_SAME(a, b, n, what) \
    EXPECT(memcmp((a), (b), (n) * sizeof(float)) == 0, "%s: not bitwise equal", (what))

// dst (B, n, W) = rows [t0, t0 + n) of each sequence of src (B, T, W); back: the reverse.
static void rows_get(float *dst, const float *src, int t0, int n, int W) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * W, src + ((size_t)b * T + t0) * W, (size_t)n * W * sizeof(float));
}
static void rows_put(float *dst, const float *src, int t0, int n, int W) {
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * T + t0) * W, src + (size_t)b * n * W, (size_t)n * W * sizeof(float));
}

static void test_position(Backend *be, TestRng *r) {
    int C = 16;
    size_t n = (size_t)B * T * C;
    float *wpe = test_floats((size_t)T * C), *x = test_floats(n), *full = test_floats(n);
    float *part = test_floats(n), *buf = test_floats(n), *dw = test_floats((size_t)T * C);
    float *dws = test_floats((size_t)T * C);
    rng_fill(r, wpe, (size_t)T * C, -1, 1), rng_fill(r, x, n, -1, 1);
    memcpy(full, x, n * sizeof(float));
    be->ops->position_forward(be, full, wpe, B, T, C, 0, NULL);
    be->ops->position_backward(be, dw, x, B, T, C, 0, NULL);
    for (int s = 0; s < NS; s++) {
        int t0 = slice0[s], nt = slice0[s + 1] - t0;
        rows_get(buf, x, t0, nt, C);
        be->ops->position_forward(be, buf, wpe, B, nt, C, t0, NULL);
        rows_put(part, buf, t0, nt, C);
        rows_get(buf, x, t0, nt, C);
        be->ops->position_backward(be, dws, buf, B, nt, C, t0, NULL);
    }
    EXPECT_SAME(part, full, n, "position_forward in slices");
    EXPECT_SAME(dws, dw, (size_t)T * C, "position_backward in slices");
    free(wpe), free(x), free(full), free(part), free(buf), free(dw), free(dws);
}

static void test_rope(Backend *be, TestRng *r) {
    int NH = 4, G = 2, hs = 8, rot = 6, in = (NH + 2 * G) * hs, out = 3 * NH * hs;
    size_t ni = (size_t)B * T * in, no = (size_t)B * T * out;
    float *x = test_floats(ni), *g = test_floats(no), *y = test_floats(no), *dx = test_floats(ni);
    float *ys = test_floats(no), *dxs = test_floats(ni), *bi = test_floats(ni), *bo = test_floats(no);
    rng_fill(r, x, ni, -1, 1), rng_fill(r, g, no, -1, 1);
    be->ops->rope_gqa_forward(be, y, x, B, T, NH, G, hs, rot, 10000.0f, 0, NULL);
    be->ops->rope_gqa_backward(be, dx, g, B, T, NH, G, hs, rot, 10000.0f, 0, NULL);
    for (int s = 0; s < NS; s++) {
        int t0 = slice0[s], nt = slice0[s + 1] - t0;
        rows_get(bi, x, t0, nt, in);
        be->ops->rope_gqa_forward(be, bo, bi, B, nt, NH, G, hs, rot, 10000.0f, t0, NULL);
        rows_put(ys, bo, t0, nt, out);
        rows_get(bo, g, t0, nt, out);
        be->ops->rope_gqa_backward(be, bi, bo, B, nt, NH, G, hs, rot, 10000.0f, t0, NULL);
        rows_put(dxs, bi, t0, nt, in);
    }
    EXPECT_SAME(ys, y, no, "rope_gqa_forward in slices");
    EXPECT_SAME(dxs, dx, ni, "rope_gqa_backward in slices");
    free(x), free(g), free(y), free(dx), free(ys), free(dxs), free(bi), free(bo);
}

static BackendDropout make_drop(double p, int site) {
    BackendDropout d = {.key = dropout_key(11, 4, site, 2), .threshold = dropout_threshold(p),
                        .scale = 1.0f / (1.0f - (float)p), .sample0 = 3, .NH = 2, .T = T};
    return d;
}

// The (rows, C) op on a micro-batch of samples 3, 4: rows row0 = 3T.. whole, or per slice.
static void test_dropout_rows(Backend *be, TestRng *r) {
    int C = 24;
    size_t n = (size_t)B * T * C;
    float *x = test_floats(n), *y = test_floats(n), *ys = test_floats(n), *buf = test_floats(n);
    rng_fill(r, x, n, 0.5, 2);
    BackendDropout d = make_drop(0.4, DROPOUT_SITE_MLP_OUT);
    d.row0 = 3 * T;
    be->ops->dropout(be, y, x, &d, B * T, C);
    for (int s = 0; s < NS; s++) {
        int t0 = slice0[s], nt = slice0[s + 1] - t0;
        BackendDropout ds = make_drop(0.4, DROPOUT_SITE_MLP_OUT);
        ds.pos0 = t0, ds.Tl = nt;
        rows_get(buf, x, t0, nt, C);
        be->ops->dropout(be, buf, buf, &ds, B * nt, C);
        rows_put(ys, buf, t0, nt, C);
    }
    EXPECT_SAME(ys, y, n, "dropout rows in slices");
    free(x), free(y), free(ys), free(buf);
}

// Attention (flash or materialised, dropout p) of query slices against the keys of the whole
// qkv (window k0 0, Tk T): the whole op's rows to round-off; the fused lse too.
static void test_attention_slices(Backend *be, TestRng *r, int flash, double p) {
    int NH = 2, hs = 8, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = test_floats(nq), *out = test_floats(no), *lse = test_floats(nl);
    float *att = test_floats((size_t)B * NH * T * T), *outs = test_floats(no);
    float *lses = test_floats(nl), *q = test_floats(nq), *o = test_floats(no);
    rng_fill(r, qkv, nq, -2, 2);
    BackendDropout d = make_drop(p, DROPOUT_SITE_ATTN_PROBS), *dp = p > 0 ? &d : NULL;
    char what[96];
    if (flash) be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, dp, NULL);
    else be->ops->attention_forward(be, out, att, qkv, B, T, NH, hs, dp, NULL);
    for (int s = 0; s < NS; s++) {
        int t0 = slice0[s], nt = slice0[s + 1] - t0;
        BackendAttnWindow w = {t0, 0, T, qkv, 0, NULL, 0, NULL};
        rows_get(q, qkv, t0, nt, 3 * C);
        if (flash) {
            float *l = test_floats((size_t)B * NH * nt);
            be->ops->flash_attention_forward(be, o, l, q, B, nt, NH, hs, dp, &w);
            for (int bh = 0; bh < B * NH; bh++)
                memcpy(lses + (size_t)bh * T + t0, l + (size_t)bh * nt, (size_t)nt * sizeof(float));
            free(l);
        } else {
            be->ops->attention_forward(be, o, att, q, B, nt, NH, hs, dp, &w);
        }
        rows_put(outs, o, t0, nt, C);
    }
    double *want = to_double(out, no);
    snprintf(what, sizeof what, "%s attention in query slices, dropout %g", flash ? "fused" : "materialised", p);
    EXPECT_CLOSE(outs, want, no, 1e-6, what);
    free(want);
    if (flash) {
        want = to_double(lse, nl);
        EXPECT_CLOSE(lses, want, nl, 1e-6, "fused attention lse in query slices");
        free(want);
    }
    free(qkv), free(out), free(lse), free(att), free(outs), free(lses), free(q), free(o);
}

// The fused op over keys [0, k1) and [k1, T) (two windows, all queries), merged by lse; and a
// decoding step: the last query over the cached keys only (Tk = T, kv a copy).
static void test_attention_merge(Backend *be, TestRng *r) {
    int NH = 2, hs = 8, C = NH * hs, k1 = 20;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = test_floats(nq), *out = test_floats(no), *lse = test_floats(nl);
    float *oa = test_floats(no), *la = test_floats(nl), *ob = test_floats(no), *lb = test_floats(nl);
    float *kva = test_floats(nq), *kvb = test_floats(nq), *m = test_floats(no), *ml = test_floats(nl);
    rng_fill(r, qkv, nq, -2, 2);
    be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, NULL, NULL);
    rows_get(kva, qkv, 0, k1, 3 * C), rows_get(kvb, qkv, k1, T - k1, 3 * C);
    BackendAttnWindow wa = {0, 0, k1, kva, 0, NULL, 0, NULL}, wb = {0, k1, T - k1, kvb, 0, NULL, 0, NULL};
    be->ops->flash_attention_forward(be, oa, la, qkv, B, T, NH, hs, NULL, &wa);
    be->ops->flash_attention_forward(be, ob, lb, qkv, B, T, NH, hs, NULL, &wb);
    int unseen = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t i = ((size_t)b * NH + h) * T + t, row = ((size_t)b * T + t) * C + h * hs;
                float x = la[i], y = lb[i], mx = x > y ? x : y;
                if (t < k1) {  // keys k1.. are in these queries' future
                    unseen += y == -INFINITY && ob[row] == 0.0f;
                    mx = x;
                }
                ml[i] = mx + logf(expf(x - mx) + (t < k1 ? 0.0f : expf(y - mx)));
                float fa = expf(x - ml[i]), fb = t < k1 ? 0.0f : expf(y - ml[i]);
                for (int c = 0; c < hs; c++) m[row + c] = fa * oa[row + c] + fb * ob[row + c];
            }
    EXPECT(unseen == B * NH * k1, "%d of %d rows that see no key have lse -inf, out 0", unseen,
           B * NH * k1);
    double *want = to_double(out, no);
    EXPECT_CLOSE(m, want, no, 1e-6, "fused attention over two key windows merged by lse");
    free(want);
    want = to_double(lse, nl);
    EXPECT_CLOSE(ml, want, nl, 1e-6, "merged lse");
    free(want);
    // A decoding step: the query at T-1 over keys 0..T-1 of a cache (one sequence).
    float *q = test_floats(3 * C), *o1 = test_floats(C), *l1 = test_floats(NH);
    float *att = test_floats((size_t)NH * T), *o2 = test_floats(C);
    memcpy(q, qkv + (size_t)(T - 1) * 3 * C, 3 * C * sizeof(float));
    BackendAttnWindow step = {T - 1, 0, T, qkv, 0, NULL, 0, NULL};
    be->ops->flash_attention_forward(be, o1, l1, q, 1, 1, NH, hs, NULL, &step);
    be->ops->attention_forward(be, o2, att, q, 1, 1, NH, hs, NULL, &step);
    want = to_double(out + (size_t)(T - 1) * C, C);
    EXPECT_CLOSE(o1, want, C, 1e-6, "fused decoding step = the whole op's last row");
    EXPECT_CLOSE(o2, want, C, 1e-6, "materialised decoding step = the whole op's last row");
    free(want), free(q), free(o1), free(l1), free(att), free(o2);
    free(qkv), free(out), free(lse), free(oa), free(la), free(ob), free(lb), free(kva), free(kvb);
    free(m), free(ml);
}

int main(void) {
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {42};
    test_position(be, &r);
    test_rope(be, &r);
    test_dropout_rows(be, &r);
    for (int flash = 0; flash < 2; flash++) {
        test_attention_slices(be, &r, flash, 0.0);
        test_attention_slices(be, &r, flash, 0.3);
    }
    test_attention_merge(be, &r);
    backend_destroy(be);
    return test_result("cpu_positions");
}
