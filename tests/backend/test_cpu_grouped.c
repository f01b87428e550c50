// tests/backend/test_cpu_grouped.c: the grouped linear (Backend matmul_grouped_forward /
// _backward, --moe-grouped-gemm) against one matmul_forward / _backward per group.
// Groups of uneven and empty sizes, products big enough to be cut into panels. The grouped
// result equals the per-group calls bitwise on one thread (fp32 and bf16); with at least as
// many non-empty products as threads each runs whole on one thread, so 2 threads give the
// 1-thread bits; with fewer, each is cut as matmul_forward cuts it (the same bits as
// 2-thread matmul_forward). dweight / dbias accumulate; a NULL dinp or dbias is skipped.
// With an act (pre given): the grouped ops equal the products, then act_forward (GELU, and
// SwiGLU's gated halves) and act_backward (GELU) over all rows, bitwise (fp32: the act
// inside the panels; bf16: after the rounded products).
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "core/half.h"  // defines: core_f32_to_bf16
#include "tests/backend/backend_test_util.h"

#include <stdint.h>
#include <string.h>

enum { GMAX = 8 };

// The results of one grouped or per-group run: out (R, OC), dinp (R, C), dweight (G, OC, C),
// dbias (G, OC) (the last two start from `init` values: accumulation).
typedef struct {
    void *out, *dinp, *pre;  // pre (R, OC): the products when an act is asked for
    float *dw, *db;
} Res;

typedef struct {
    int G, C, OC, R, rows[GMAX];
    void *x, *w, *b, *g;  // inp (R, C), weight (G, OC, C), bias (G, OC), dout (R, OC): be->act
    void *p;              // (R, C): the backward's act input (a layer before's pre): be->act
    float *dw0, *db0;      // the gradients' starting values (G OC C), (G OC)
} Case;

static size_t esz(const Backend *be) { return backend_dtype_size(be->act); }

// n values from f (fp32) into be->act's type. Returns a fresh buffer.
static void *as_act(const Backend *be, const float *f, size_t n) {
    void *p = test_floats(n);  // >= n 16-bit values too
    for (size_t i = 0; i < n; i++) {
        if (be->act == BACKEND_F32) ((float *)p)[i] = f[i];
        else ((uint16_t *)p)[i] = core_f32_to_bf16(f[i]);
    }
    return p;
}

static Case make_case(const Backend *be, TestRng *r, const int *rows, int G, int C, int OC) {
    Case k = {.G = G, .C = C, .OC = OC};
    for (int g = 0; g < G; g++) k.rows[g] = rows[g], k.R += rows[g];
    size_t nx = (size_t)k.R * C, nw = (size_t)G * OC * C, nb = (size_t)G * OC, ng = (size_t)k.R * OC;
    float *t = test_floats(nw > nx ? (nw > ng ? nw : ng) : (nx > ng ? nx : ng));
    rng_fill(r, t, nx, -1, 1), k.x = as_act(be, t, nx);
    rng_fill(r, t, nw, -1, 1), k.w = as_act(be, t, nw);
    rng_fill(r, t, nb, -1, 1), k.b = as_act(be, t, nb);
    rng_fill(r, t, ng, -1, 1), k.g = as_act(be, t, ng);
    rng_fill(r, t, nx, -2, 2), k.p = as_act(be, t, nx);
    free(t);
    k.dw0 = test_floats(nw), k.db0 = test_floats(nb);
    rng_fill(r, k.dw0, nw, -1, 1), rng_fill(r, k.db0, nb, -1, 1);
    return k;
}

// One run: grouped (the grouped ops) or per group (matmul_forward / _backward per group).
// act: -1 none; else a forward act (pre then kept; out (R, OC) or (R, OC/2) gated) and, for
// a pointwise one, the backward's dinp *= act'(k->p).
static Res run(Backend *be, const Case *k, int grouped, int with_dinp, int with_db, int act) {
    size_t nw = (size_t)k->G * k->OC * k->C, nb = (size_t)k->G * k->OC;
    Res s = {test_floats((size_t)k->R * k->OC + 1), test_floats((size_t)k->R * k->C + 1),
             act >= 0 ? test_floats((size_t)k->R * k->OC + 1) : NULL, test_floats(nw), test_floats(nb)};
    memcpy(s.dw, k->dw0, nw * sizeof(float)), memcpy(s.db, k->db0, nb * sizeof(float));
    void *dinp = with_dinp ? s.dinp : NULL;
    float *db = with_db ? s.db : NULL;
    BackendAct a = act >= 0 ? (BackendAct)act : BACKEND_ACT_GELU;
    int pointwise = act >= 0 && !backend_act_gated(a);
    const void *bp = pointwise ? k->p : NULL;
    if (grouped) {
        be->ops->matmul_grouped_forward(be, s.out, s.pre, k->x, k->w, k->b, k->rows, k->G, k->C,
                                        k->OC, a);
        be->ops->matmul_grouped_backward(be, dinp, s.dw, db, k->g, k->x, k->w, bp, k->rows, k->G,
                                         k->C, k->OC, a);
        return s;
    }
    size_t e = esz(be), off = 0;
    void *prod = act >= 0 ? s.pre : s.out;
    for (int g = 0; g < k->G; off += (size_t)k->rows[g++]) {
        int n = k->rows[g];
        if (!n) continue;
        const char *x = (const char *)k->x + off * k->C * e, *w = (const char *)k->w + (size_t)g * k->OC * k->C * e;
        const char *dy = (const char *)k->g + off * k->OC * e;
        be->ops->matmul_forward(be, (char *)prod + off * k->OC * e, x, w,
                                (const char *)k->b + (size_t)g * k->OC * e, n, k->C, k->OC);
        be->ops->matmul_backward(be, dinp ? (char *)dinp + off * k->C * e : NULL, s.dw + (size_t)g * k->OC * k->C,
                                 db ? db + (size_t)g * k->OC : NULL, dy, x, w, n, k->C, k->OC);
    }
    if (act >= 0) be->ops->act_forward(be, s.out, s.pre, k->R, backend_act_gated(a) ? k->OC / 2 : k->OC, a);
    if (pointwise && dinp) be->ops->act_backward(be, dinp, k->p, dinp, k->R, k->C, a);
    return s;
}

// a's results against b's, bitwise; `what` names the comparison.
static void same(const Case *k, const Backend *be, Res a, Res b, const char *what) {
    size_t h = esz(be) == 2 ? 2 : 1;  // 16-bit values: compare as floats over half the count
    size_t no = ((size_t)k->R * k->OC + h - 1) / h, ni = ((size_t)k->R * k->C + h - 1) / h;
    EXPECT_SAME_BITS(a.out, b.out, no, what);
    EXPECT_SAME_BITS(a.dinp, b.dinp, ni, what);
    EXPECT_SAME_BITS(a.dw, b.dw, (size_t)k->G * k->OC * k->C, what);
    EXPECT_SAME_BITS(a.db, b.db, (size_t)k->G * k->OC, what);
}

static void free_res(Res s) { free(s.out), free(s.dinp), free(s.pre), free(s.dw), free(s.db); }
static void free_case(Case k) {
    free(k.x), free(k.w), free(k.b), free(k.g), free(k.p), free(k.dw0), free(k.db0);
}

// The grouped ops with an act (pre) against the products, then the act ops, GELU (forward
// and backward) and SwiGLU (forward): fp32 at 1 thread, at 2 threads (against 1 thread's
// per-group bits), and bf16.
static void test_act(Backend *be1, Backend *be2, Backend *bh, const Case *k, const Case *kh) {
    static const int acts[2] = {BACKEND_ACT_GELU, BACKEND_ACT_SWIGLU};
    for (int i = 0; i < 2; i++) {
        int a = acts[i];
        Backend *bes[3] = {be1, be2, bh};
        for (int j = 0; j < 3; j++) {
            const Case *c = j == 2 ? kh : k;
            // 2 threads: 4 non-empty groups run whole, so the 1-thread per-group bits
            Res g = run(bes[j], c, 1, 1, 1, a), s = run(j == 1 ? be1 : bes[j], c, 0, 1, 1, a);
            const char *what = j == 0 ? "act, 1 thread" : j == 1 ? "act, 2 threads" : "act, bf16";
            same(c, bes[j], g, s, what);
            size_t h = esz(bes[j]) == 2 ? 2 : 1;
            EXPECT_SAME_BITS(g.pre, s.pre, ((size_t)c->R * c->OC + h - 1) / h, what);
            free_res(g), free_res(s);
        }
    }
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be1 = backend_cpu_create(1, BACKEND_F32), *bh = backend_cpu_create(1, BACKEND_BF16);
    Backend *be2 = backend_cpu_create(2, BACKEND_F32);  // the last created sets OpenBLAS's threads
    TestRng r = {7};
    const int rows[5] = {300, 0, 130, 64, 1}, one[1] = {300};
    Case k = make_case(be1, &r, rows, 5, 96, 128);
    for (int v = 0; v < 3; v++) {  // all, no dinp, no dbias
        int di = v != 1, db = v != 2;
        Res g1 = run(be1, &k, 1, di, db, -1), s1 = run(be1, &k, 0, di, db, -1);
        Res g2 = run(be2, &k, 1, di, db, -1);
        same(&k, be1, g1, s1, "grouped vs per group, 1 thread");
        same(&k, be1, g2, g1, "grouped, 2 threads vs 1");
        free_res(g1), free_res(s1), free_res(g2);
    }
    // One group on 2 threads: the forward has fewer products than threads, cut as
    // matmul_forward cuts it; the backward's two products (dinp, dweight) run whole, one each.
    Case k1 = make_case(be1, &r, one, 1, 96, 128);
    Res a = run(be2, &k1, 1, 1, 1, -1), b = run(be2, &k1, 0, 1, 1, -1), c = run(be1, &k1, 0, 1, 1, -1);
    EXPECT_SAME_BITS(a.out, b.out, (size_t)k1.R * k1.OC, "one group, 2 threads: out vs matmul_forward");
    EXPECT_SAME_BITS(a.dinp, c.dinp, (size_t)k1.R * k1.C, "one group, 2 threads: dinp vs 1 thread");
    EXPECT_SAME_BITS(a.dw, c.dw, (size_t)k1.OC * k1.C, "one group, 2 threads: dweight vs 1 thread");
    free_res(a), free_res(b), free_res(c);
    Case kh = make_case(bh, &r, rows, 5, 96, 128);  // bf16 activations
    Res h1 = run(bh, &kh, 1, 1, 1, -1), h2 = run(bh, &kh, 0, 1, 1, -1);
    same(&kh, bh, h1, h2, "bf16 grouped vs per group");
    free_res(h1), free_res(h2);
    test_act(be1, be2, bh, &k, &kh);
    free_case(k), free_case(k1), free_case(kh);
    backend_destroy(be1), backend_destroy(bh), backend_destroy(be2);
    return test_result("test_cpu_grouped");
}
