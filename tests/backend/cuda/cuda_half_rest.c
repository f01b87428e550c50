// tests/backend/cuda/cuda_half_rest.c: part of the bf16/fp16 op test (see test_cuda_half.c,
// method and tolerances in cuda_half.h): the entries taking `void *` activations that the
// other parts leave out: residual + LayerNorm, the linear + activation pair for GELU and
// squared ReLU, SwiGLU, RMSNorm (forward and the accumulating backward), rope_gqa, dropout
// (rows and, materialised and flash, attention probabilities) and a flash attention window
// (a key block of a ring: accumulate forward, adding backward).
#include "tests/backend/cuda/cuda_half.h"

#include <stdio.h>

static void close_out(Half *h, const void *d, const float *ref, size_t n, const double *tab,
                      const char *what) {
    float *got = test_floats(n);
    half_down(h, got, d, n);
    HALF_CLOSE(h, got, ref, n, half_tol(h, tab), what);
    free(got);
}

// residual_layernorm_forward: res and ln; matmul_act forward and backward for pointwise acts.
static void check_fused(Half *h, int N, int C, int OC) {
    Backend *cpu = h->cpu, *be = h->be;
    size_t nc = (size_t)N * C, no = (size_t)N * OC;
    float *a = half_rand(h, nc, -2, 2), *b = half_rand(h, nc, -2, 2);
    float *w = half_rand(h, C, 0.5, 1.5), *bias = half_rand(h, C, -0.5, 0.5);
    float *res = test_floats(nc), *ln = test_floats(nc), *mean = test_floats(N), *rstd = test_floats(N);
    cpu->ops->add(cpu, res, a, b, nc);
    half_round(h, res, nc, h->dt);  // CUDA's and the CPU's rounding point: res before the stats
    cpu->ops->norm_forward(cpu, ln, mean, rstd, res, w, bias, N, C, BACKEND_LAYERNORM);
    void *d_res = half_poisoned(h, nc, h->dt), *d_ln = half_poisoned(h, nc, h->dt);
    be->ops->residual_layernorm_forward(be, d_res, d_ln, NULL, NULL, half_up(h, a, nc),
                                        half_up(h, b, nc), half_up(h, w, C), half_up(h, bias, C), N, C);
    close_out(h, d_res, res, nc, TOL_STORE, "residual_layernorm_forward res");
    close_out(h, d_ln, ln, nc, TOL_STORE, "residual_layernorm_forward ln");
    half_release(h);
    float *W = half_rand(h, (size_t)OC * C, -0.3, 0.3), *ob = half_rand(h, OC, -0.3, 0.3);
    float *dout = half_rand(h, no, -1, 1), *pre = test_floats(no), *out = test_floats(no);
    float *dinp = test_floats(nc), *dw = test_floats((size_t)OC * C), *db = test_floats(OC);
    float *gdw = test_floats((size_t)OC * C);
    const BackendAct acts[2] = {BACKEND_ACT_GELU, BACKEND_ACT_RELU2};
    for (int k = 0; k < 2; k++) {  // forward: pre fp32 -> act (GELU) or pre rounded -> act
        char what[120];
        cpu->ops->matmul_forward(cpu, pre, a, W, ob, N, C, OC);
        if (acts[k] != BACKEND_ACT_GELU) half_round(h, pre, no, h->dt);
        cpu->ops->act_forward(cpu, out, pre, N, OC, acts[k]);
        void *d_out = half_poisoned(h, no, h->dt), *d_pre = half_poisoned(h, no, h->dt);
        be->ops->matmul_act_forward(be, d_out, d_pre, half_up(h, a, nc), half_up(h, W, (size_t)OC * C),
                                    half_up(h, ob, OC), N, C, OC, acts[k]);
        snprintf(what, sizeof what, "matmul_act_forward out act %d", (int)acts[k]);
        close_out(h, d_out, out, no, TOL_STORE, what);
        half_release(h);
        // backward through the act of a (C)-wide layer: pre of shape (N, C) is `b`
        memset(dw, 0, (size_t)OC * C * 4), memset(db, 0, OC * 4);
        cpu->ops->matmul_backward(cpu, dinp, dw, db, dout, a, W, N, C, OC);
        if (acts[k] != BACKEND_ACT_GELU) half_round(h, dinp, nc, h->dt);
        cpu->ops->act_backward(cpu, dinp, b, dinp, N, C, acts[k]);
        void *d_dinp = half_poisoned(h, nc, h->dt);
        float *d_dw = (float *)half_alloc(h, (size_t)OC * C, BACKEND_F32);
        be->ops->matmul_act_backward(be, d_dinp, d_dw, NULL, half_up(h, dout, no), half_up(h, a, nc),
                                     half_up(h, W, (size_t)OC * C), half_up(h, b, nc), N, C, OC, acts[k]);
        snprintf(what, sizeof what, "matmul_act_backward dinp act %d", (int)acts[k]);
        close_out(h, d_dinp, dinp, nc, TOL_STORE, what);
        half_down_f32(h, gdw, d_dw, (size_t)OC * C);
        HALF_CLOSE(h, gdw, dw, (size_t)OC * C, TOL_F32, "matmul_act_backward dweight (fp32)");
        half_release(h);
    }
    free(a), free(b), free(w), free(bias), free(res), free(ln), free(mean), free(rstd), free(W);
    free(ob), free(dout), free(pre), free(out), free(dinp), free(dw), free(db), free(gdw);
}

// SwiGLU forward/backward, RMSNorm forward and backward (dinp accumulates), rope_gqa.
static void check_llama(Half *h, int N, int F) {
    Backend *cpu = h->cpu, *be = h->be;
    size_t nf = (size_t)N * F;
    float *x = half_rand(h, 2 * nf, -3, 3), *g = half_rand(h, nf, -1, 1);
    float *o = test_floats(2 * nf), *dx = test_floats(2 * nf);
    cpu->ops->act_forward(cpu, o, x, N, F, BACKEND_ACT_SWIGLU);
    cpu->ops->act_backward(cpu, dx, x, g, N, F, BACKEND_ACT_SWIGLU);
    void *d_x = half_up(h, x, 2 * nf), *d_o = half_poisoned(h, nf, h->dt);
    void *d_dx = half_poisoned(h, 2 * nf, h->dt);
    be->ops->act_forward(be, d_o, d_x, N, F, BACKEND_ACT_SWIGLU);
    be->ops->act_backward(be, d_dx, d_x, half_up(h, g, nf), N, F, BACKEND_ACT_SWIGLU);
    close_out(h, d_o, o, nf, TOL_STORE, "swiglu forward");
    close_out(h, d_dx, dx, 2 * nf, TOL_STORE, "swiglu backward");
    half_release(h);
    float *w = half_rand(h, F, 0.5, 1.5), *acc = half_rand(h, nf, -1, 1), *rstd = test_floats(N);
    cpu->ops->norm_forward(cpu, o, NULL, rstd, x, w, NULL, N, F, BACKEND_RMSNORM);
    void *d_n = half_poisoned(h, nf, h->dt);
    float *d_rstd = (float *)half_alloc(h, N, BACKEND_F32);
    be->ops->norm_forward(be, d_n, NULL, d_rstd, half_up(h, x, nf), half_up(h, w, F), NULL, N, F,
                          BACKEND_RMSNORM);
    close_out(h, d_n, o, nf, TOL_STORE, "rmsnorm forward");
    memcpy(dx, acc, nf * 4);
    cpu->ops->norm_backward(cpu, dx, NULL, NULL, g, x, w, NULL, rstd, N, F, BACKEND_RMSNORM);
    void *d_acc = half_up(h, acc, nf);
    be->ops->norm_backward(be, d_acc, NULL, NULL, half_up(h, g, nf), half_up(h, x, nf),
                           half_up(h, w, F), NULL, d_rstd, N, F, BACKEND_RMSNORM);
    close_out(h, d_acc, dx, nf, TOL_STORE, "rmsnorm backward dinp +=");
    half_release(h);
    enum { B = 2, T = 5, NH = 4, G = 2, HS = 8 };  // grouped-query rope at pos0 3
    size_t ni = (size_t)B * T * (NH + 2 * G) * HS, no = (size_t)B * T * 3 * NH * HS;
    float *ri = half_rand(h, ni, -2, 2), *rg = half_rand(h, no, -1, 1);
    float *ro = test_floats(no), *rdi = test_floats(ni);
    cpu->ops->rope_gqa_forward(cpu, ro, ri, B, T, NH, G, HS, 6, 10000.0f, 3, NULL);
    cpu->ops->rope_gqa_backward(cpu, rdi, rg, B, T, NH, G, HS, 6, 10000.0f, 3, NULL);
    void *d_ro = half_poisoned(h, no, h->dt), *d_rdi = half_poisoned(h, ni, h->dt);
    be->ops->rope_gqa_forward(be, d_ro, half_up(h, ri, ni), B, T, NH, G, HS, 6, 10000.0f, 3, NULL);
    be->ops->rope_gqa_backward(be, d_rdi, half_up(h, rg, no), B, T, NH, G, HS, 6, 10000.0f, 3, NULL);
    close_out(h, d_ro, ro, no, TOL_STORE, "rope_gqa_forward");
    close_out(h, d_rdi, rdi, ni, TOL_STORE, "rope_gqa_backward");
    half_release(h);
    free(x), free(g), free(o), free(dx), free(w), free(acc), free(rstd), free(ri), free(rg);
    free(ro), free(rdi);
}

// Dropout on rows and on the attention probabilities (materialised and flash).
static void check_dropout(Half *h, int B, int T, int NH, int hs) {
    Backend *cpu = h->cpu, *be = h->be;
    BackendDropout d = {.key = dropout_key(5, 2, DROPOUT_SITE_ATTN_PROBS, 0),
                        .threshold = dropout_threshold(0.25), .scale = 1.0f / 0.75f, .NH = NH};
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t natt = (size_t)B * NH * T * T, nrow = (size_t)B * NH * T;
    float *qkv = half_rand(h, nqkv, -2, 2), *ro = test_floats(nqkv), *att = test_floats(natt);
    float *lse = test_floats(nrow);
    cpu->ops->dropout(cpu, ro, qkv, &d, B * T, 3 * NH * hs);
    void *d_o = half_poisoned(h, nqkv, h->dt);
    be->ops->dropout(be, d_o, half_up(h, qkv, nqkv), &d, B * T, 3 * NH * hs);
    close_out(h, d_o, ro, nqkv, TOL_STORE, "dropout rows");
    half_release(h);
    cpu->ops->attention_forward(cpu, ro, att, qkv, B, T, NH, hs, &d, NULL);
    void *d_att = half_poisoned(h, natt, h->dt);
    d_o = half_poisoned(h, nout, h->dt);
    be->ops->attention_forward(be, d_o, d_att, half_up(h, qkv, nqkv), B, T, NH, hs, &d, NULL);
    close_out(h, d_o, ro, nout, TOL_ATT_FWD, "attention_forward out, dropout");
    half_release(h);
    cpu->ops->flash_attention_forward(cpu, ro, lse, qkv, B, T, NH, hs, &d, NULL);
    d_o = half_poisoned(h, nout, h->dt);
    float *d_lse = (float *)half_alloc(h, nrow, BACKEND_F32);
    be->ops->flash_attention_forward(be, d_o, d_lse, half_up(h, qkv, nqkv), B, T, NH, hs, &d, NULL);
    close_out(h, d_o, ro, nout, TOL_STORE, "flash_attention_forward out, dropout");
    half_release(h);
    free(qkv), free(ro), free(att), free(lse);
}

// One key block of a ring (the second half of the keys seen by the second half of the
// queries): forward with accumulate onto a first block's out and lse, backward adding dq into
// dqkv's q and dk, dv into a separate dkv.
static void check_window(Half *h, int B, int T, int NH, int hs) {
    Backend *cpu = h->cpu, *be = h->be;
    int C3 = 3 * NH * hs, Tq = T / 2;
    size_t nq = (size_t)B * Tq * C3, no = (size_t)B * Tq * NH * hs, nr = (size_t)B * NH * Tq;
    float *q = half_rand(h, nq, -2, 2), *kv = half_rand(h, nq, -2, 2), *dout = half_rand(h, no, -1, 1);
    float *out = test_floats(no), *lse = test_floats(nr), *dq = half_rand(h, nq, -1, 1);
    float *dkv = half_rand(h, nq, -1, 1), *scr = test_floats(nr);
    float *out0 = test_floats(no), *lse0 = test_floats(nr), *dq0 = test_floats(nq), *dkv0 = test_floats(nq);
    BackendAttnWindow first = {Tq, 0, Tq, kv, 0, NULL, 0, NULL}, diag = {Tq, Tq, Tq, NULL, 1, NULL, 0, NULL};
    cpu->ops->flash_attention_forward(cpu, out, lse, q, B, Tq, NH, hs, NULL, &first);
    half_round(h, out, no, h->dt);  // both continue from the same first block
    memcpy(out0, out, no * 4), memcpy(lse0, lse, nr * 4), memcpy(dq0, dq, nq * 4), memcpy(dkv0, dkv, nq * 4);
    cpu->ops->flash_attention_forward(cpu, out, lse, q, B, Tq, NH, hs, NULL, &diag);
    void *d_out = half_up(h, out0, no);
    float *d_lse = half_up_f32(h, lse0, nr);
    be->ops->flash_attention_forward(be, d_out, d_lse, half_up(h, q, nq), B, Tq, NH, hs, NULL, &diag);
    close_out(h, d_out, out, no, TOL_STORE, "flash_attention_forward window, accumulate");
    half_release(h);
    half_round(h, out, no, h->dt);
    BackendAttnWindow bw = {Tq, 0, Tq, kv, 0, dkv, 0, NULL};
    cpu->ops->flash_attention_backward(cpu, dq, scr, dout, q, out, lse, B, Tq, NH, hs, NULL, &bw);
    void *d_dq = half_up(h, dq0, nq), *d_dkv = half_up(h, dkv0, nq);
    BackendAttnWindow dbw = {Tq, 0, Tq, half_up(h, kv, nq), 0, d_dkv, 0, NULL};
    be->ops->flash_attention_backward(be, d_dq, (float *)half_alloc(h, nr, BACKEND_F32),
                                      half_up(h, dout, no), half_up(h, q, nq), half_up(h, out, no),
                                      half_up_f32(h, lse, nr), B, Tq, NH, hs, NULL, &dbw);
    close_out(h, d_dq, dq, nq, TOL_STORE, "flash_attention_backward window dq +=");
    close_out(h, d_dkv, dkv, nq, TOL_STORE, "flash_attention_backward window dkv +=");
    half_release(h);
    free(q), free(kv), free(dout), free(out), free(lse), free(dq), free(dkv), free(scr);
    free(out0), free(lse0), free(dq0), free(dkv0);
}

int cuda_half_rest(Half *h) {
    int before = test_failures_;
    check_fused(h, 37, 40, 48);
    check_llama(h, 19, 24);
    check_llama(h, 7, 20);  // F % 8 != 0: short last chunks, the up half misaligned (scalars)
    check_dropout(h, 2, 20, 2, 16);
    check_window(h, 2, 24, 2, 16);
    return test_failures_ - before;
}
