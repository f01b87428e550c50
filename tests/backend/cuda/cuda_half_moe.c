// tests/backend/cuda/cuda_half_moe.c: part of the bf16/fp16 op test (see test_cuda_half.c,
// method and tolerances in cuda_half.h): the mixture-of-experts token rows, the entries of
// that family taking `void *` activations: rows_gather (scaled and not), rows_combine (with
// weights and w NULL, dropped slots) and rows_dot, against the CPU's fp32 ops on the same
// rounded inputs. The router ops take fp32 only (test_cuda_moe.c).
#include "tests/backend/cuda/cuda_half.h"

static void close_out(Half *h, const void *d, const float *ref, size_t n, const char *what) {
    float *got = test_floats(n);
    half_down(h, got, d, n);
    HALF_CLOSE(h, got, ref, n, half_tol(h, TOL_STORE), what);
    free(got);
}

static void check_rows(Half *h, int N, int K, int M, int C) {
    Backend *be = h->be, *cpu = h->cpu;
    size_t nm = (size_t)M * C, nn = (size_t)N * C, nk = (size_t)N * K;
    float *in = half_rand(h, nm, -1, 1), *dy = half_rand(h, nn, -1, 1), *sc = test_floats(M);
    float *w = test_floats(nk), *g = test_floats(nm), *cw = test_floats(nn), *c1 = test_floats(nn);
    float *dw = test_floats(nk), *got = test_floats(nk);
    int *idx = malloc(sizeof(int) * M), *slot = malloc(sizeof(int) * nk);
    rng_fill(&h->rng, sc, M, -2, 2), rng_fill(&h->rng, w, nk, 0, 1);
    for (int i = 0; i < M; i++) idx[i] = (i * 7 + 1) % M;
    for (size_t i = 0; i < nk; i++) slot[i] = i % 5 == 2 ? -1 : (int)((i * 11) % M);
    cpu->ops->rows_gather(cpu, g, in, idx, sc, M, C);
    cpu->ops->rows_combine(cpu, cw, in, slot, w, N, K, C);
    cpu->ops->rows_combine(cpu, c1, in, slot, NULL, N, K, C);
    cpu->ops->rows_dot(cpu, dw, dy, in, slot, N, K, C);
    void *d_in = half_up(h, in, nm), *d_dy = half_up(h, dy, nn);
    int *d_idx = half_up_int(h, idx, M), *d_slot = half_up_int(h, slot, nk);
    float *d_sc = half_up_f32(h, sc, M), *d_w = half_up_f32(h, w, nk);
    void *d_g = half_poisoned(h, nm, h->dt), *d_c = half_poisoned(h, nn, h->dt);
    float *d_dw = half_poisoned(h, nk, BACKEND_F32);
    be->ops->rows_gather(be, d_g, d_in, d_idx, d_sc, M, C);
    close_out(h, d_g, g, nm, "rows_gather, scaled");
    be->ops->rows_combine(be, d_c, d_in, d_slot, d_w, N, K, C);
    close_out(h, d_c, cw, nn, "rows_combine");
    be->ops->rows_combine(be, d_c, d_in, d_slot, NULL, N, K, C);
    close_out(h, d_c, c1, nn, "rows_combine, w NULL");
    be->ops->rows_gather(be, d_g, d_in, d_idx, NULL, M, C);  // a copy: the same elements
    cpu->ops->rows_gather(cpu, g, in, idx, NULL, M, C);
    close_out(h, d_g, g, nm, "rows_gather");
    be->ops->rows_dot(be, d_dw, d_dy, d_in, d_slot, N, K, C);
    half_down_f32(h, got, d_dw, nk);
    HALF_CLOSE(h, got, dw, nk, TOL_F32, "rows_dot");
    half_release(h);
    free(in), free(dy), free(sc), free(w), free(g), free(cw), free(c1), free(dw), free(got);
    free(idx), free(slot);
}

int cuda_half_moe(Half *h) {
    int before = test_failures_;
    check_rows(h, 17, 3, 29, 40);
    return test_failures_ - before;
}
