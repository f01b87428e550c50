// tests/backend/cuda/test_cuda_dropout.c: the CUDA backend's dropout ops against the CPU
// reference (backend/dropout.h's hash on both): the (rows, C) op bitwise in fp32 (out of place
// and in place, its row0), and attention with dropout on the probabilities, materialised and
// fused, forward (out, and att without dropout) and backward within 1e-5 of the CPU's
// materialised op (a different mask would be off by O(1)), T not a multiple of the tiles; with
// bf16 activations and head size 64 the fused op with dropout leaves the tensor-core path
// (which has no dropout) and agrees with the materialised bf16 op. Needs a device (exit 77 =
// skip without one); under the emulator it always runs.
#include "tests/backend/cuda/cuda_parity.h"

#include <stdio.h>

static BackendDropout drop(double p, uint64_t key) {
    BackendDropout d = {.key = key, .threshold = dropout_threshold(p),
                        .scale = 1.0f / (1.0f - (float)p)};
    return d;
}

static void check_rows(Parity *t, int N, int C) {
    size_t n = (size_t)N * C;
    float *x = par_rand(t, n, -2, 2);
    ParOut out = par_out(n), inpl = par_out(n);
    BackendDropout d = drop(0.1, dropout_key(5, 7, DROPOUT_SITE_ATTN_OUT, 3));
    d.row0 = 1234;
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, n), *d_y = par_alloc(t, k, n * sizeof(float));
        par_poison(t, k, d_y, n);
        be->ops->dropout(be, d_y, d_x, &d, N, C);
        be->ops->dropout(be, d_x, d_x, &d, N, C);
        par_down(t, k, out.h[k], d_y, n);
        par_down(t, k, inpl.h[k], d_x, n);
        par_release(t);
    }
    EXPECT_SAME_BITS(out.h[PAR_DEV], out.h[PAR_REF], n, "dropout (rows) vs CPU");
    EXPECT_SAME_BITS(inpl.h[PAR_DEV], out.h[PAR_REF], n, "dropout in place vs CPU");
    free(x);
    par_out_free(&out), par_out_free(&inpl);
}

// Materialised and fused attention with dropout on both backends against the CPU's
// materialised op.
static void check_attention(Parity *t, int B, int T, int NH, int hs) {
    int C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = par_rand(t, nq, -2, 2), *dy = par_rand(t, no, -1, 1);
    BackendDropout d = drop(0.2, dropout_key(3, 11, DROPOUT_SITE_ATTN_PROBS, 1));
    d.sample0 = 5, d.h0 = 2, d.NH = NH + 4;
    ParOut out = par_out(no), att = par_out(na), dq = par_out(no * 3);
    ParOut fout = par_out(no), fdq = par_out(no * 3);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_q = par_up(t, k, qkv, nq), *d_dy = par_up(t, k, dy, no);
        float *d_o = par_alloc(t, k, no * 4), *d_a = par_alloc(t, k, na * 4);
        float *d_s = par_alloc(t, k, na * 4), *d_g = par_alloc(t, k, no * 12);
        float *d_lse = par_alloc(t, k, (size_t)B * NH * T * 4);
        par_poison(t, k, d_o, no), par_poison(t, k, d_g, no * 3);
        be->ops->attention_forward(be, d_o, d_a, d_q, B, T, NH, hs, &d, NULL);
        be->ops->attention_backward(be, d_g, d_s, d_dy, d_q, d_a, B, T, NH, hs, &d);
        par_down(t, k, out.h[k], d_o, no), par_down(t, k, att.h[k], d_a, na);
        par_down(t, k, dq.h[k], d_g, no * 3);
        par_poison(t, k, d_o, no), par_poison(t, k, d_g, no * 3);
        be->ops->flash_attention_forward(be, d_o, d_lse, d_q, B, T, NH, hs, &d, NULL);
        be->ops->flash_attention_backward(be, d_g, d_s, d_dy, d_q, d_o, d_lse, B, T, NH, hs, &d, NULL);
        par_down(t, k, fout.h[k], d_o, no), par_down(t, k, fdq.h[k], d_g, no * 3);
        par_release(t);
    }
    char what[96];
    snprintf(what, sizeof what, "attention dropout out (B%d T%d NH%d hs%d)", B, T, NH, hs);
    PAR_CLOSE_OUT(out, what);
    PAR_CLOSE_OUT(att, "attention dropout att (no dropout)");
    PAR_CLOSE_OUT(dq, "attention dropout dqkv");
    PAR_CLOSE(fout.h[PAR_DEV], out.h[PAR_REF], no, "flash dropout out vs CPU materialised");
    PAR_CLOSE(fdq.h[PAR_DEV], dq.h[PAR_REF], no * 3, "flash dropout dqkv vs CPU materialised");
    PAR_CLOSE(fout.h[PAR_REF], out.h[PAR_REF], no, "CPU flash dropout out vs materialised");
    free(qkv), free(dy);
    par_out_free(&out), par_out_free(&att), par_out_free(&dq), par_out_free(&fout), par_out_free(&fdq);
}

// bf16, hs 64: the fused op with dropout (plain kernels, not the tensor-core path) against
// the materialised bf16 op with the same dropout, to bf16 round-off.
static void check_bf16_fused(Parity *t, int B, int T, int NH) {
    int hs = 64, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    Backend *be = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_BF16);
    float *qkv = par_rand(t, nq, -1, 1), *o[2] = {test_floats(no), test_floats(no)};
    BackendDropout d = drop(0.3, dropout_key(1, 2, DROPOUT_SITE_ATTN_PROBS, 0));
    d.NH = NH;
    void *q16 = be->ops->alloc(be, nq * 2), *qf = be->ops->alloc(be, nq * 4);
    void *o16 = be->ops->alloc(be, no * 2), *of = be->ops->alloc(be, no * 4);
    void *a16 = be->ops->alloc(be, na * 2);
    float *lse = be->ops->alloc(be, (size_t)B * NH * T * 4);
    be->ops->copy(be, qf, qkv, nq * 4, BACKEND_H2D);
    be->ops->cast(be, q16, BACKEND_BF16, qf, BACKEND_F32, nq);
    for (int v = 0; v < 2; v++) {
        if (v == 0) be->ops->attention_forward(be, o16, a16, q16, B, T, NH, hs, &d, NULL);
        else be->ops->flash_attention_forward(be, o16, lse, q16, B, T, NH, hs, &d, NULL);
        be->ops->cast(be, of, BACKEND_F32, o16, BACKEND_BF16, no);
        be->ops->copy(be, o[v], of, no * 4, BACKEND_D2H);
        be->ops->sync(be);
    }
    double *want = to_double(o[0], no);
    EXPECT_CLOSE(o[1], want, no, 3e-2, "bf16 hs 64: fused dropout vs materialised dropout");
    void *bufs[] = {q16, qf, o16, of, a16, lse};
    for (int i = 0; i < 6; i++) be->ops->free(be, bufs[i]);
    backend_destroy(be);
    free(qkv), free(o[0]), free(o[1]), free(want);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_dropout: no usable CUDA device, skipped\n");
        return 77;
    }
    Parity t = {.rng = {20261202}, .quick = quick};
    t.be[PAR_REF] = backend_cpu_create(1, BACKEND_F32);
    t.be[PAR_DEV] = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    printf("cuda_dropout: %s against %s\n", t.be[PAR_DEV]->name, t.be[PAR_REF]->name);
    check_rows(&t, 37, 100);
    check_attention(&t, 2, 37, 2, 16);
    if (!quick) check_attention(&t, 1, 70, 2, 64);  // T across the 32-row tiles
    check_bf16_fused(&t, 1, quick ? 33 : 70, 2);
    backend_destroy(t.be[PAR_DEV]);
    backend_destroy(t.be[PAR_REF]);
    return test_result("cuda_dropout");
}
