// tests/backend/cuda/test_cuda_moe.c: the mixture-of-experts ops on the CUDA backend against
// the CPU reference in fp32: the router's choice (the same experts, ties to the lowest
// index), combine weights and gradient (softmax with and without pre-softmax, sigmoid with
// K = 1 and K > 1, scaling, an expert bias), the aux + z losses and their accumulated
// gradient (two row groups), at E = 8 and at E = 256 (the largest taken: 8 experts per
// lane); the token rows ops (gather scaled and not, combine with weights and w NULL,
// dropped slots, dot). Within 1e-5 of the CPU. Needs a device (exit 77 = skip without
// one); under the emulator it always runs.
#include "tests/backend/cuda/cuda_parity.h"

#include <stdio.h>

static void check_router(Parity *t, int N, const BackendMoERouter *r0, const char *what) {
    BackendMoERouter r = *r0;
    int E = r.E, K = r.K;
    size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *l = par_rand(t, ne, -3, 3), *dp = par_rand(t, nk, -1, 1), *bias = par_rand(t, E, -0.5, 0.5);
    float *coef = par_rand(t, 2 * (size_t)E, 0, 1), *dl0 = par_rand(t, ne, -1, 1);
    int *grp = malloc(sizeof(int) * N), *idx[2];
    for (int i = 0; i < N; i++) grp[i] = i % 3 == 1;
    ParOut p = par_out(nk), dl = par_out(ne), ls = par_out(ne), loss = par_out(2);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        idx[k] = malloc(sizeof(int) * nk);
        float *d_l = par_up(t, k, l, ne), *d_dp = par_up(t, k, dp, nk), *d_p = par_alloc(t, k, nk * 4);
        float *d_dl = par_alloc(t, k, ne * 4), *d_ls = par_up(t, k, dl0, ne);
        float *d_c = par_up(t, k, coef, 2 * (size_t)E), *d_loss = par_alloc(t, k, 8);
        int *d_idx = par_alloc(t, k, nk * sizeof(int)), *d_grp = par_up_int(t, k, grp, N);
        r.bias = r0->bias ? par_up(t, k, bias, E) : NULL;
        par_poison(t, k, d_dl, ne);
        be->ops->moe_router_forward(be, d_idx, d_p, d_l, N, &r);
        be->ops->moe_router_backward(be, d_dl, d_dp, d_l, d_idx, N, &r);
        be->ops->moe_router_loss(be, d_ls, d_loss, d_l, d_c, d_grp, 0.03f, 0.5f, N, &r);
        par_down_bytes(t, k, idx[k], d_idx, nk * sizeof(int));
        par_down(t, k, p.h[k], d_p, nk), par_down(t, k, dl.h[k], d_dl, ne);
        par_down(t, k, ls.h[k], d_ls, ne), par_down(t, k, loss.h[k], d_loss, 2);
        par_release(t);
    }
    char name[160];
    EXPECT(memcmp(idx[0], idx[1], sizeof(int) * nk) == 0, "%s: the chosen experts differ", what);
    snprintf(name, sizeof name, "%s: probs", what), PAR_CLOSE_OUT(p, name);
    snprintf(name, sizeof name, "%s: router backward", what), PAR_CLOSE_OUT(dl, name);
    snprintf(name, sizeof name, "%s: loss gradient +=", what), PAR_CLOSE_OUT(ls, name);
    snprintf(name, sizeof name, "%s: losses", what), PAR_CLOSE_OUT(loss, name);
    free(l), free(dp), free(bias), free(coef), free(dl0), free(grp), free(idx[0]), free(idx[1]);
    par_out_free(&p), par_out_free(&dl), par_out_free(&ls), par_out_free(&loss);
}

// Equal logits: the lowest indices, on both backends.
static void check_ties(Parity *t) {
    enum { E = 40, K = 5 };
    float l[2 * E];
    for (int e = 0; e < E; e++) l[e] = 0.25f, l[E + e] = e % 3 == 0 ? 1.0f : 0.0f;
    BackendMoERouter r = {.E = E, .K = K, .score = BACKEND_MOE_SOFTMAX};
    int idx[2 * K], want[2 * K] = {0, 1, 2, 3, 4, 0, 3, 6, 9, 12};
    float *d_l = par_up(t, PAR_DEV, l, 2 * E), *d_p = par_alloc(t, PAR_DEV, 2 * K * 4);
    int *d_idx = par_alloc(t, PAR_DEV, sizeof idx);
    t->be[PAR_DEV]->ops->moe_router_forward(t->be[PAR_DEV], d_idx, d_p, d_l, 2, &r);
    par_down_bytes(t, PAR_DEV, idx, d_idx, sizeof idx);
    for (int i = 0; i < 2 * K; i++)
        EXPECT(idx[i] == want[i], "ties: slot %d is expert %d, want %d", i, idx[i], want[i]);
    par_release(t);
}

static void check_rows(Parity *t, int N, int K, int M, int C) {
    size_t nm = (size_t)M * C, nn = (size_t)N * C, nk = (size_t)N * K;
    float *in = par_rand(t, nm, -1, 1), *dy = par_rand(t, nn, -1, 1), *sc = par_rand(t, M, -2, 2);
    float *w = par_rand(t, nk, 0, 1);
    int *idx = malloc(sizeof(int) * (M ? M : 1)), *slot = malloc(sizeof(int) * nk);
    for (int i = 0; i < M; i++) idx[i] = (i * 5 + 2) % M;
    for (size_t i = 0; i < nk; i++) slot[i] = i % 4 == 1 || !M ? -1 : (int)((i * 13) % M);
    ParOut g = par_out(nm), g1 = par_out(nm), c = par_out(nn), c1 = par_out(nn), dw = par_out(nk);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_in = par_up(t, k, in, nm), *d_dy = par_up(t, k, dy, nn), *d_sc = par_up(t, k, sc, M);
        float *d_w = par_up(t, k, w, nk), *d_g = par_alloc(t, k, nm * 4 + 4);
        float *d_c = par_alloc(t, k, nn * 4), *d_dw = par_alloc(t, k, nk * 4);
        int *d_idx = par_up_int(t, k, idx, M ? M : 1), *d_slot = par_up_int(t, k, slot, nk);
        be->ops->rows_gather(be, d_g, d_in, d_idx, d_sc, M, C);
        par_down(t, k, g.h[k], d_g, nm);
        be->ops->rows_gather(be, d_g, d_in, d_idx, NULL, M, C);
        par_down(t, k, g1.h[k], d_g, nm);
        par_poison(t, k, d_c, nn), par_poison(t, k, d_dw, nk);
        be->ops->rows_combine(be, d_c, d_in, d_slot, d_w, N, K, C);
        par_down(t, k, c.h[k], d_c, nn);
        be->ops->rows_combine(be, d_c, d_in, d_slot, NULL, N, K, C);
        par_down(t, k, c1.h[k], d_c, nn);
        be->ops->rows_dot(be, d_dw, d_dy, d_in, d_slot, N, K, C);
        par_down(t, k, dw.h[k], d_dw, nk);
        par_release(t);
    }
    PAR_CLOSE_OUT(g, "rows_gather, scaled"), PAR_CLOSE_OUT(g1, "rows_gather");
    PAR_CLOSE_OUT(c, "rows_combine"), PAR_CLOSE_OUT(c1, "rows_combine, w NULL");
    PAR_CLOSE_OUT(dw, "rows_dot");
    free(in), free(dy), free(sc), free(w), free(idx), free(slot);
    par_out_free(&g), par_out_free(&g1), par_out_free(&c), par_out_free(&c1), par_out_free(&dw);
}

// `--experts E`: one router forward at E experts (top-2) and exit 0; above
// BACKEND_MOE_MAX_EXPERTS the op must bring the job down (test cuda_moe_too_many_experts).
static int route_once(int E) {
    Backend *be = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    BackendMoERouter r = {.E = E < 2 ? 2 : E, .K = 2, .score = BACKEND_MOE_SOFTMAX};
    float *l = be->ops->alloc(be, (size_t)r.E * 4), *p = be->ops->alloc(be, 8);
    int *idx = be->ops->alloc(be, 8);
    be->ops->moe_router_forward(be, idx, p, l, 1, &r);
    be->ops->sync(be);
    be->ops->free(be, l), be->ops->free(be, p), be->ops->free(be, idx);
    backend_destroy(be);
    return 0;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_moe: no usable CUDA device, skipped\n");
        return 77;
    }
    if (argc == 3 && strcmp(argv[1], "--experts") == 0) return route_once(atoi(argv[2]));
    Parity t = {.rng = {20261228}, .quick = quick};
    t.be[PAR_REF] = backend_cpu_create(1, BACKEND_F32);
    t.be[PAR_DEV] = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    printf("cuda_moe: %s against %s\n", t.be[PAR_DEV]->name, t.be[PAR_REF]->name);
    float b = 0;  // any non-NULL: check_router uploads a random bias
    BackendMoERouter r[] = {
        {.E = 8, .K = 2, .score = BACKEND_MOE_SOFTMAX},
        {.E = 8, .K = 2, .score = BACKEND_MOE_SOFTMAX, .pre_softmax = 1, .scaling = 1.5f},
        {.E = 8, .K = 1, .score = BACKEND_MOE_SIGMOID},
        {.E = 8, .K = 3, .score = BACKEND_MOE_SIGMOID, .scaling = 2.5f, .bias = &b},
        {.E = 8, .K = 2, .score = BACKEND_MOE_SOFTMAX, .bias = &b},
        {.E = 256, .K = 8, .score = BACKEND_MOE_SIGMOID, .bias = &b},
        {.E = 256, .K = 6, .score = BACKEND_MOE_SOFTMAX, .pre_softmax = 1},
        {.E = 70, .K = 4, .score = BACKEND_MOE_SOFTMAX},
    };
    const char *names[] = {"softmax top-2", "softmax top-2 pre-softmax scaled", "sigmoid top-1",
                           "sigmoid top-3 scaled, bias", "softmax top-2, bias",
                           "E 256 sigmoid top-8, bias", "E 256 softmax top-6 pre-softmax",
                           "E 70 softmax top-4"};
    for (int i = 0; i < 8; i++)
        if (!quick || i < 4) check_router(&t, i < 5 ? 37 : 13, &r[i], names[i]);
    check_ties(&t);
    check_rows(&t, 23, 3, 41, 24);
    check_rows(&t, 5, 2, 0, 16);  // an expert with no token: M = 0, every slot dropped
    if (!quick) check_rows(&t, 9, 1, 9, 300);
    backend_destroy(t.be[PAR_DEV]);
    backend_destroy(t.be[PAR_REF]);
    return test_result("cuda_moe");
}
