// tests/backend/test_cpu_moe.c: the CPU backend's mixture-of-experts ops. The router's
// choice and combine weights against a double-precision reference (softmax with and without
// pre-softmax, sigmoid with K = 1 and K > 1, scaling, an expert bias that changes the choice
// but not the weights' formula), ties to the lowest expert index; the router's backward and
// its aux + z losses' gradient against finite differences of double references; the token
// rows ops (gather, combine, dot) against reference loops with an expert that gets no token
// (M = 0) and dropped slots (-1); combine with w NULL is the adjoint of gather; every op
// gives the same bits on 1, 2 and 3 threads.
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

#include <math.h>

// ---- double references ----------------------------------------------------------------

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

// p (K) of one token from its logits l (E) and a given choice idx (K), in double.
static void ref_probs(double *p, const double *l, const int *idx, const BackendMoERouter *r) {
    int E = r->E, K = r->K;
    if (r->score == BACKEND_MOE_SOFTMAX && r->pre_softmax) {
        double m = l[0], z = 0;
        for (int e = 1; e < E; e++) m = fmax(m, l[e]);
        for (int e = 0; e < E; e++) z += exp(l[e] - m);
        for (int k = 0; k < K; k++) p[k] = exp(l[idx[k]] - m) / z;
    } else if (r->score == BACKEND_MOE_SOFTMAX) {
        double m = l[idx[0]], z = 0;
        for (int k = 1; k < K; k++) m = fmax(m, l[idx[k]]);
        for (int k = 0; k < K; k++) z += exp(l[idx[k]] - m);
        for (int k = 0; k < K; k++) p[k] = exp(l[idx[k]] - m) / z;
    } else {
        double g = 0;
        for (int k = 0; k < K; k++) g += sig(l[idx[k]]);
        for (int k = 0; k < K; k++) p[k] = K > 1 ? sig(l[idx[k]]) / (g + 1e-20) : sig(l[idx[k]]);
    }
    double sc = r->scaling != 0.0f ? r->scaling : 1.0;
    for (int k = 0; k < K; k++) p[k] *= sc;
}

// idx (K): the top K of the selection scores of l (E), ties to the lowest index.
static void ref_choose(int *idx, const double *l, const BackendMoERouter *r) {
    int E = r->E;
    double sel[BACKEND_MOE_MAX_EXPERTS], m = l[0], z = 0;
    int taken[BACKEND_MOE_MAX_EXPERTS] = {0};
    for (int e = 1; e < E; e++) m = fmax(m, l[e]);
    for (int e = 0; e < E; e++) z += exp(l[e] - m);
    for (int e = 0; e < E; e++) {
        double v = r->score == BACKEND_MOE_SIGMOID ? sig(l[e])
                   : r->pre_softmax                ? exp(l[e] - m) / z
                                                   : l[e];
        sel[e] = v + (r->bias ? r->bias[e] : 0.0);
    }
    for (int k = 0; k < r->K; k++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (b < 0 || sel[e] > sel[b])) b = e;
        taken[b] = 1, idx[k] = b;
    }
}

// ---- router forward ---------------------------------------------------------------------

enum { N = 24, E = 8 };

static BackendMoERouter router(BackendMoEScore s, int K, int pre, float scaling, const float *b) {
    BackendMoERouter r = {.E = E, .K = K, .score = s, .pre_softmax = pre, .scaling = scaling,
                          .bias = b};
    return r;
}

// Router forward on N random tokens against the references; returns the number of rows
// whose choice differs from `other` (idx of another run, or NULL).
static int check_forward(Backend *be, TestRng *rng, const BackendMoERouter *r, const char *what,
                         int *idx_out, const int *other) {
    int K = r->K;
    float *l = test_floats(N * E), *p = test_floats(N * K);
    int idx[N * 8], want[8], changed = 0;
    double *pw = test_doubles(N * K);
    TestRng keep = *rng;
    rng_fill(rng, l, N * E, -2, 2);
    *rng = keep;  // the same logits for every configuration
    be->ops->moe_router_forward(be, idx, p, l, N, r);
    for (int t = 0; t < N; t++) {
        double *ld = to_double(l + t * E, E);
        ref_choose(want, ld, r);
        int same = 1;
        for (int k = 0; k < K; k++) same &= idx[t * K + k] == want[k];
        EXPECT(same, "%s: row %d: chosen experts differ from the reference", what, t);
        ref_probs(pw + t * K, ld, idx + t * K, r);
        if (other)
            for (int k = 0; k < K; k++) changed += idx[t * K + k] != other[t * K + k];
        free(ld);
    }
    EXPECT_CLOSE(p, pw, (size_t)N * K, 1e-6, what);
    if (idx_out) memcpy(idx_out, idx, sizeof(int) * N * K);
    free(l), free(p), free(pw);
    return changed;
}

static void test_router_forward(Backend *be, TestRng *rng) {
    BackendMoERouter r = router(BACKEND_MOE_SOFTMAX, 2, 0, 0, NULL);
    check_forward(be, rng, &r, "softmax top-2", NULL, NULL);
    r.pre_softmax = 1;
    check_forward(be, rng, &r, "softmax top-2, pre-softmax", NULL, NULL);
    r = router(BACKEND_MOE_SIGMOID, 1, 0, 0, NULL);
    check_forward(be, rng, &r, "sigmoid top-1", NULL, NULL);
    r.K = 3, r.scaling = 2.5f;
    check_forward(be, rng, &r, "sigmoid top-3, scaling 2.5", NULL, NULL);
    r = router(BACKEND_MOE_SOFTMAX, 3, 0, 1.0f, NULL);
    check_forward(be, rng, &r, "softmax top-3, scaling 1", NULL, NULL);
    // The bias changes the choice; the weights keep the unbiased formula (the reference).
    float bias[E] = {0, 0, 0, 0.4f, 0, -0.3f, 0, 0.2f};
    int plain[N * 3];
    for (int s = 0; s < 2; s++) {
        BackendMoERouter u = router(s ? BACKEND_MOE_SIGMOID : BACKEND_MOE_SOFTMAX, 2, s, 0, NULL);
        check_forward(be, rng, &u, "bias: without", plain, NULL);
        u.bias = bias;
        int changed = check_forward(be, rng, &u, s ? "sigmoid with a bias" : "softmax with a bias",
                                    NULL, plain);
        EXPECT(changed > 0, "the expert bias changed no choice (score %d)", s);
    }
    // Ties: equal logits go to the lowest index, in every score function.
    float l[2 * E] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,
                      1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 3.0f, 2.0f, 0.0f};
    int want[2 * 3] = {0, 1, 2, 1, 3, 5}, idx[2 * 3];
    float p[2 * 3];
    for (int s = 0; s < 3; s++) {
        BackendMoERouter u = router(s == 2 ? BACKEND_MOE_SIGMOID : BACKEND_MOE_SOFTMAX, 3, s == 1,
                                    0, NULL);
        be->ops->moe_router_forward(be, idx, p, l, 2, &u);
        for (int i = 0; i < 6; i++)
            EXPECT(idx[i] == want[i], "ties (case %d): slot %d is expert %d, want %d", s, i,
                   idx[i], want[i]);
    }
}

// ---- router backward and losses: finite differences ------------------------------------

typedef struct {
    const BackendMoERouter *r;
    double *l;         // (N, E)
    const int *idx;    // (N, K)
    const float *g;    // (N, K) upstream gradient
    const float *coef; // (2, E)
    const int *grp;    // (N)
    double zc;
} FdCtx;

static double probs_loss(void *v) {
    FdCtx *c = v;
    double p[8], s = 0;
    for (int t = 0; t < N; t++) {
        ref_probs(p, c->l + t * E, c->idx + t * c->r->K, c->r);
        for (int k = 0; k < c->r->K; k++) s += c->g[t * c->r->K + k] * p[k];
    }
    return s;
}

// loss[0] + loss[1] of moe_router_loss in double; with parts, parts[0..1] get them.
static double router_losses(FdCtx *c, double *parts) {
    double a = 0, z = 0;
    for (int t = 0; t < N; t++) {
        const double *l = c->l + t * E;
        const float *cf = c->coef + (c->grp ? c->grp[t] : 0) * E;
        double m = l[0], Z = 0, G = 0, row = 0;
        for (int e = 1; e < E; e++) m = fmax(m, l[e]);
        for (int e = 0; e < E; e++) Z += exp(l[e] - m), G += sig(l[e]);
        for (int e = 0; e < E; e++)
            row += cf[e] * (c->r->score == BACKEND_MOE_SOFTMAX ? exp(l[e] - m) / Z
                                                               : sig(l[e]) / (G + 1e-20));
        a += row, z += (m + log(Z)) * (m + log(Z));
    }
    if (parts) parts[0] = a, parts[1] = c->zc * z;
    return a + c->zc * z;
}
static double loss_fn(void *v) { return router_losses(v, NULL); }

static void check_backward(Backend *be, TestRng *rng, const BackendMoERouter *r, const char *what) {
    int K = r->K, idx[N * 8];
    float *l = test_floats(N * E), *p = test_floats(N * K), *g = test_floats(N * K);
    float *dl = test_floats(N * E);
    double *want = test_doubles(N * E);
    rng_fill(rng, l, N * E, -2, 2), rng_fill(rng, g, N * K, -1, 1), rng_fill(rng, dl, N * E, 5, 6);
    be->ops->moe_router_forward(be, idx, p, l, N, r);
    be->ops->moe_router_backward(be, dl, g, l, idx, N, r);  // overwrites the 5s
    FdCtx c = {.r = r, .l = to_double(l, N * E), .idx = idx, .g = g};
    fd_grad(c.l, N * E, probs_loss, &c, want);
    EXPECT_CLOSE(dl, want, (size_t)N * E, 1e-5, what);
    free(l), free(p), free(g), free(dl), free(want), free(c.l);
}

static void check_loss(Backend *be, TestRng *rng, BackendMoEScore s, int groups, const char *what) {
    BackendMoERouter r = router(s, 2, 0, 0, NULL);
    float *l = test_floats(N * E), *coef = test_floats(2 * E), *dl = test_floats(N * E);
    float *dl0 = test_floats(N * E), loss[2], gs = 0.7f;
    double *want = test_doubles(N * E), parts[2];
    int grp[N];
    for (int t = 0; t < N; t++) grp[t] = (t * 7) % 3 == 0;
    rng_fill(rng, l, N * E, -3, 3), rng_fill(rng, coef, 2 * E, 0, 2);
    rng_fill(rng, dl0, N * E, -1, 1);
    memcpy(dl, dl0, sizeof(float) * N * E);
    FdCtx c = {.r = &r, .l = to_double(l, N * E), .coef = coef, .grp = groups ? grp : NULL,
               .zc = 0.05};
    be->ops->moe_router_loss(be, dl, loss, l, coef, c.grp, 0.05f, gs, N, &r);
    router_losses(&c, parts);
    EXPECT_NEAR(loss[0], parts[0], 1e-6);
    EXPECT_NEAR(loss[1], parts[1], 1e-6);
    fd_grad(c.l, N * E, loss_fn, &c, want);
    for (int i = 0; i < N * E; i++) want[i] = dl0[i] + gs * want[i];  // accumulates
    EXPECT_CLOSE(dl, want, (size_t)N * E, 1e-5, what);
    float l2[2];  // dlogits NULL: the same losses, no gradient
    be->ops->moe_router_loss(be, NULL, l2, l, coef, c.grp, 0.05f, gs, N, &r);
    EXPECT(l2[0] == loss[0] && l2[1] == loss[1], "%s: losses differ without dlogits", what);
    free(l), free(coef), free(dl), free(dl0), free(want), free(c.l);
}

static void test_router_grads(Backend *be, TestRng *rng) {
    BackendMoERouter r = router(BACKEND_MOE_SOFTMAX, 2, 0, 0, NULL);
    check_backward(be, rng, &r, "backward: softmax top-2");
    r.pre_softmax = 1, r.scaling = 1.5f;
    check_backward(be, rng, &r, "backward: softmax top-2, pre-softmax, scaling");
    r = router(BACKEND_MOE_SIGMOID, 1, 0, 0, NULL);
    check_backward(be, rng, &r, "backward: sigmoid top-1");
    r.K = 3, r.scaling = 2.0f;
    check_backward(be, rng, &r, "backward: sigmoid top-3, scaling");
    check_loss(be, rng, BACKEND_MOE_SOFTMAX, 0, "loss gradient: softmax");
    check_loss(be, rng, BACKEND_MOE_SIGMOID, 1, "loss gradient: sigmoid, two row groups");
}

// ---- token rows ---------------------------------------------------------------------------

enum { NT = 9, KT = 2, MT = 13, C = 6 };

static void test_rows(Backend *be, TestRng *rng) {
    float *in = test_floats(MT * C), *out = test_floats(MT * C), *w = test_floats(NT * KT);
    float *dy = test_floats(NT * C), *dw = test_floats(NT * KT), sc[MT];
    double *want = test_doubles(MT * C), *wdw = test_doubles(NT * KT);
    int idx[MT], slot[NT * KT];
    rng_fill(rng, in, MT * C, -1, 1), rng_fill(rng, w, NT * KT, 0, 1), rng_fill(rng, sc, MT, -2, 2);
    rng_fill(rng, dy, NT * C, -1, 1);
    for (int i = 0; i < MT; i++) idx[i] = (i * 5 + 3) % MT;
    for (int i = 0; i < NT * KT; i++) slot[i] = (i * 7 + 2) % (MT + 2) - 2 < 0 ? -1 : (i * 7) % MT;
    slot[2 * KT] = slot[2 * KT + 1] = -1;  // token 2 dropped by both experts
    for (int s = 0; s < 2; s++) {
        rng_fill(rng, out, MT * C, 7, 8);
        be->ops->rows_gather(be, out, in, idx, s ? sc : NULL, MT, C);
        for (int i = 0; i < MT; i++)
            for (int c = 0; c < C; c++) want[i * C + c] = (s ? sc[i] : 1.0) * in[idx[i] * C + c];
        EXPECT_CLOSE(out, want, (size_t)MT * C, 1e-7, s ? "rows_gather, scaled" : "rows_gather");
    }
    be->ops->rows_gather(be, out, in, idx, sc, 0, C);  // an expert with no token: nothing
    for (int s = 0; s < 2; s++) {
        rng_fill(rng, out, NT * C, 7, 8);
        be->ops->rows_combine(be, out, in, slot, s ? w : NULL, NT, KT, C);
        for (int t = 0; t < NT; t++)
            for (int c = 0; c < C; c++) {
                double a = 0;
                for (int k = 0; k < KT; k++)
                    if (slot[t * KT + k] >= 0)
                        a += (s ? w[t * KT + k] : 1.0) * in[slot[t * KT + k] * C + c];
                want[t * C + c] = a;
            }
        EXPECT_CLOSE(out, want, (size_t)NT * C, 1e-6, s ? "rows_combine" : "rows_combine, w NULL");
        EXPECT(out[2 * C] == 0.0f && out[2 * C + C - 1] == 0.0f, "a dropped token's row is not 0");
    }
    rng_fill(rng, dw, NT * KT, 7, 8);
    be->ops->rows_dot(be, dw, dy, in, slot, NT, KT, C);
    for (int i = 0; i < NT * KT; i++) {
        wdw[i] = 0;
        for (int c = 0; c < C && slot[i] >= 0; c++) wdw[i] += (double)dy[(i / KT) * C + c] * in[slot[i] * C + c];
    }
    EXPECT_CLOSE(dw, wdw, (size_t)NT * KT, 1e-6, "rows_dot");
    EXPECT(dw[2 * KT] == 0.0f && dw[2 * KT + 1] == 0.0f, "rows_dot of a dropped slot is not 0");
    free(in), free(out), free(w), free(dy), free(dw), free(want), free(wdw);
}

// Dispatch and its transpose: tokens (NT, C) gathered into expert order (M rows: token
// idx[i]), and combine (w NULL) with slot = the inverse map (-1: dropped) brings a
// gradient back: <gather(x), y> = <x, combine(y)>.
static void test_adjoint(Backend *be, TestRng *rng) {
    float *x = test_floats(NT * C), *y = test_floats(MT * C), *gx = test_floats(MT * C);
    float *cy = test_floats(NT * C);
    int idx[MT], slot[NT * KT], M = 0;
    rng_fill(rng, x, NT * C, -1, 1), rng_fill(rng, y, MT * C, -1, 1);
    for (int e = 0; e < 3; e++)  // 3 experts, the middle one gets no token
        for (int t = 0; t < NT; t++)
            for (int k = 0; k < KT; k++) {
                int ch = (t + k * 2) % 3;  // token t's k-th expert
                if (e == 0) slot[t * KT + k] = -1;
                if (ch != e || e == 1 || (t == 4 && k == 1)) continue;  // (4, 1) dropped
                slot[t * KT + k] = M, idx[M++] = t;
            }
    be->ops->rows_gather(be, gx, x, idx, NULL, M, C);
    be->ops->rows_combine(be, cy, y, slot, NULL, NT, KT, C);
    double a = 0, b = 0;
    for (int i = 0; i < M * C; i++) a += (double)gx[i] * y[i];
    for (int i = 0; i < NT * C; i++) b += (double)x[i] * cy[i];
    EXPECT(M > 0 && M < NT * KT, "the adjoint test's dispatch has %d rows", M);
    EXPECT_NEAR(a, b, 1e-6);
    free(x), free(y), free(gx), free(cy);
}

// Every op on 1, 2 and 3 threads, shapes above the parallel threshold: the same bits.
static void test_threads(TestRng *rng) {
    enum { NR = 2100, ER = 16, KR = 4, NB = 700, CB = 16 };
    BackendMoERouter r = router(BACKEND_MOE_SIGMOID, KR, 0, 1.5f, NULL);
    r.E = ER;
    float *l = test_floats(NR * ER), *g = test_floats(NR * KR), *coef = test_floats(ER);
    float *in = test_floats(NB * KR * CB), *res[3][6];
    int *idx[3], slot[NB * KR];
    rng_fill(rng, l, NR * ER, -2, 2), rng_fill(rng, g, NR * KR, -1, 1);
    rng_fill(rng, coef, ER, 0, 1), rng_fill(rng, in, NB * KR * CB, -1, 1);
    for (int i = 0; i < NB * KR; i++) slot[i] = i % 11 == 3 ? -1 : (i * 37) % (NB * KR);
    for (int n = 0; n < 3; n++) {
        Backend *be = backend_cpu_create(n + 1, BACKEND_F32);
        idx[n] = calloc(NR * KR, sizeof(int));
        res[n][0] = test_floats(NR * KR), res[n][1] = test_floats(NR * ER);
        res[n][2] = test_floats(NR * ER), res[n][3] = test_floats(2);
        res[n][4] = test_floats(NB * CB), res[n][5] = test_floats(NB * KR);
        be->ops->moe_router_forward(be, idx[n], res[n][0], l, NR, &r);
        be->ops->moe_router_backward(be, res[n][1], g, l, idx[n], NR, &r);
        be->ops->moe_router_loss(be, res[n][2], res[n][3], l, coef, NULL, 0.01f, 1.0f, NR, &r);
        be->ops->rows_combine(be, res[n][4], in, slot, g, NB, KR, CB);
        be->ops->rows_dot(be, res[n][5], res[n][4], in, slot, NB, KR, CB);
        backend_destroy(be);
    }
    size_t len[6] = {NR * KR, NR * ER, NR * ER, 2, NB * CB, NB * KR};
    for (int n = 1; n < 3; n++) {
        EXPECT(memcmp(idx[n], idx[0], sizeof(int) * NR * KR) == 0, "router choice on %d threads", n + 1);
        for (int j = 0; j < 6; j++) EXPECT_SAME_BITS(res[n][j], res[0][j], len[j], "an op's result");
    }
    for (int n = 0; n < 3; n++) {
        free(idx[n]);
        for (int j = 0; j < 6; j++) free(res[n][j]);
    }
    free(l), free(g), free(coef), free(in);
}

// `--experts E`: one router forward at E experts (top-2) and exit 0; above
// BACKEND_MOE_MAX_EXPERTS the op must bring the job down (test cpu_moe_too_many_experts).
static int route_once(int E) {
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    BackendMoERouter r = {.E = E, .K = 2, .score = BACKEND_MOE_SOFTMAX};
    float *l = test_floats(E), p[2];
    int idx[2];
    be->ops->moe_router_forward(be, idx, p, l, 1, &r);
    free(l), backend_destroy(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--experts") == 0) return route_once(atoi(argv[2]));
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng rng = {.s = 28};
    test_router_forward(be, &rng);
    test_router_grads(be, &rng);
    test_rows(be, &rng);
    test_adjoint(be, &rng);
    test_threads(&rng);
    backend_destroy(be);
    return test_result("test_cpu_moe");
}
