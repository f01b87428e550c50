// tests/backend/cuda/test_cuda_ops.c: the CUDA backend against the CPU reference, op by op,
// on the same random inputs (CUDA with fp32 activations in strict fp32 GEMM mode; within 1e-5
// of max(1, max|ref|)). bf16/fp16 activations: test_cuda_half.c.
// This file: memory ops, linear, layernorm, pointwise, attention, and main; the vocabulary
// ops are in cuda_ops_vocab.c, AdamW and the reductions in cuda_ops_optim.c, fused (flash)
// attention in cuda_ops_flash.c.
//
// Awkward sizes (N = 37, C = 100, OC = 67; B = 2, T = 65, NH = 3, hs = 24) catch tail and
// tiling bugs. Outputs that an op overwrites are poisoned with NaN first; accumulated
// gradients start non-zero; NULL gradients, aliases and run-to-run determinism are checked.
// Exit 77 (meson: skipped) without a usable device. `--quick` runs a smaller subset.
#include "tests/backend/backend_ref_ops.h"  // defines: ref_gelu_backward
#include "tests/backend/cuda/cuda_parity.h"

#include <stdint.h>
#include <stdio.h>

// alloc is zeroed (also memory just freed with garbage in it), 64-byte aligned; copy, zero.
static void check_memory(Parity *t) {
    size_t sizes[3] = {3, 4099 * sizeof(float), 262147};
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        for (int s = 0; s < (t->quick ? 2 : 3); s++) {
            size_t n = sizes[s];
            unsigned char *h = malloc(n), *d = be->ops->alloc(be, n);
            memset(h, 0xab, n);
            be->ops->copy(be, d, h, n, BACKEND_H2D);
            be->ops->free(be, d);
            d = be->ops->alloc(be, n);
            EXPECT((uintptr_t)d % 64 == 0, "%s: alloc(%zu) not 64-byte aligned", be->name, n);
            par_down_bytes(t, k, h, d, n);
            size_t nonzero = 0;
            for (size_t i = 0; i < n; i++) nonzero += h[i] != 0;
            EXPECT(nonzero == 0, "%s: alloc(%zu) has %zu non-zero bytes", be->name, n, nonzero);
            be->ops->free(be, d);
            free(h);
        }
        enum { M = 1000 };
        float src[M], back[M];
        for (int i = 0; i < M; i++) src[i] = (float)i + 0.5f;
        float *a = par_up(t, k, src, M), *b = par_alloc(t, k, M * sizeof(float));
        be->ops->copy(be, b, a, M * sizeof(float), BACKEND_D2D);
        be->ops->zero(be, b + 10, 37 * sizeof(float));
        be->ops->sync(be);
        par_down(t, k, back, b, M);
        int bad = 0;
        for (int i = 0; i < M; i++) bad += back[i] != (i >= 10 && i < 47 ? 0.0f : src[i]);
        EXPECT(bad == 0, "%s: D2D copy + zero of 37 floats: %d wrong elements", be->name, bad);
        be->ops->free(be, NULL);
        par_release(t);
    }
}

// matmul_forward (bias, no bias) and matmul_backward with each gradient NULL in turn.
static void check_matmul(Parity *t, int N, int C, int OC) {
    float *inp = par_rand(t, (size_t)N * C, -1, 1), *w = par_rand(t, (size_t)OC * C, -1, 1);
    float *bias = par_rand(t, OC, -1, 1), *dout = par_rand(t, (size_t)N * OC, -1, 1);
    float *dw0 = par_rand(t, (size_t)OC * C, -1, 1), *db0 = par_rand(t, OC, -1, 1);
    ParOut out = par_out((size_t)N * OC), outnb = par_out((size_t)N * OC);
    ParOut dinp = par_out((size_t)N * C), dw = par_out((size_t)OC * C), db = par_out(OC);
    const char *names[4] = {"all grads", "dinp NULL", "dweight NULL", "dbias NULL"};
    char what[160];
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_inp = par_up(t, k, inp, (size_t)N * C), *d_w = par_up(t, k, w, (size_t)OC * C);
        float *d_b = par_up(t, k, bias, OC);
        float *d_out = par_alloc(t, k, (size_t)N * OC * sizeof(float));
        par_poison(t, k, d_out, (size_t)N * OC);
        be->ops->matmul_forward(be, d_out, d_inp, d_w, d_b, N, C, OC);
        par_down(t, k, out.h[k], d_out, out.n);
        par_poison(t, k, d_out, (size_t)N * OC);
        be->ops->matmul_forward(be, d_out, d_inp, d_w, NULL, N, C, OC);
        par_down(t, k, outnb.h[k], d_out, outnb.n);
        par_release(t);
    }
    snprintf(what, sizeof what, "matmul_forward %dx%dx%d, bias", N, C, OC);
    PAR_CLOSE_OUT(out, what);
    snprintf(what, sizeof what, "matmul_forward %dx%dx%d, no bias", N, C, OC);
    PAR_CLOSE_OUT(outnb, what);
    for (int v = 0; v < 4; v++) {
        for (int k = 0; k < 2; k++) {
            Backend *be = t->be[k];
            float *d_inp = par_up(t, k, inp, (size_t)N * C), *d_w = par_up(t, k, w, (size_t)OC * C);
            float *d_dout = par_up(t, k, dout, (size_t)N * OC);
            float *d_dinp = v == 1 ? NULL : par_alloc(t, k, (size_t)N * C * sizeof(float));
            float *d_dw = v == 2 ? NULL : par_up(t, k, dw0, (size_t)OC * C);
            float *d_db = v == 3 ? NULL : par_up(t, k, db0, OC);
            if (d_dinp) par_poison(t, k, d_dinp, (size_t)N * C);
            be->ops->matmul_backward(be, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
            if (d_dinp) par_down(t, k, dinp.h[k], d_dinp, dinp.n);
            if (d_dw) par_down(t, k, dw.h[k], d_dw, dw.n);
            if (d_db) par_down(t, k, db.h[k], d_db, db.n);
            par_release(t);
        }
        snprintf(what, sizeof what, "matmul_backward N=%d dinp (%s)", N, names[v]);
        if (v != 1) PAR_CLOSE_OUT(dinp, what);
        snprintf(what, sizeof what, "matmul_backward N=%d dweight += (%s)", N, names[v]);
        if (v != 2) PAR_CLOSE_OUT(dw, what);
        snprintf(what, sizeof what, "matmul_backward N=%d dbias += (%s)", N, names[v]);
        if (v != 3) PAR_CLOSE_OUT(db, what);
    }
    free(inp), free(w), free(bias), free(dout), free(dw0), free(db0);
    par_out_free(&out), par_out_free(&outnb), par_out_free(&dinp), par_out_free(&dw);
    par_out_free(&db);
}

// norm_forward(with and without mean/rstd, BACKEND_LAYERNORM), norm_backward(dinp accumulates,
// each gradient NULL in turn, the same bits twice on the device, BACKEND_LAYERNORM).
static void check_layernorm(Parity *t, int N, int C) {
    size_t nc = (size_t)N * C;
    float *inp = par_rand(t, nc, -2, 3), *w = par_rand(t, C, 0.5, 1.5), *b = par_rand(t, C, -1, 1);
    float *dout = par_rand(t, nc, -1, 1), *dinp0 = par_rand(t, nc, -1, 1);
    float *dw0 = par_rand(t, C, -1, 1), *db0 = par_rand(t, C, -1, 1);
    ParOut out = par_out(nc), mean = par_out(N), rstd = par_out(N), out2 = par_out(nc);
    ParOut dinp = par_out(nc), dw = par_out(C), db = par_out(C);
    float *rep = test_floats(nc + 2 * (size_t)C);  // device rerun: dinp | dweight | dbias
    const char *names[4] = {"all grads", "dinp NULL", "dweight NULL", "dbias NULL"};
    char what[160];
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_inp = par_up(t, k, inp, nc), *d_w = par_up(t, k, w, C), *d_b = par_up(t, k, b, C);
        float *d_out = par_alloc(t, k, nc * sizeof(float));
        float *d_mean = par_alloc(t, k, N * sizeof(float)), *d_rstd = par_alloc(t, k, N * sizeof(float));
        par_poison(t, k, d_out, nc), par_poison(t, k, d_mean, N), par_poison(t, k, d_rstd, N);
        be->ops->norm_forward(be, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, BACKEND_LAYERNORM);
        par_down(t, k, out.h[k], d_out, nc);
        par_down(t, k, mean.h[k], d_mean, N), par_down(t, k, rstd.h[k], d_rstd, N);
        par_poison(t, k, d_out, nc);
        be->ops->norm_forward(be, d_out, NULL, NULL, d_inp, d_w, d_b, N, C, BACKEND_LAYERNORM);
        par_down(t, k, out2.h[k], d_out, nc);
        par_release(t);
    }
    snprintf(what, sizeof what, "layernorm_forward %dx%d out", N, C);
    PAR_CLOSE_OUT(out, what);
    PAR_CLOSE_OUT(mean, "layernorm_forward mean");
    PAR_CLOSE_OUT(rstd, "layernorm_forward rstd");
    PAR_CLOSE_OUT(out2, "layernorm_forward out (mean, rstd NULL)");
    for (int v = 0; v < 4; v++) {
        for (int k = 0; k < 2; k++) {
            Backend *be = t->be[k];
            float *d_inp = par_up(t, k, inp, nc), *d_w = par_up(t, k, w, C);
            float *d_dout = par_up(t, k, dout, nc);
            float *d_mean = par_up(t, k, mean.h[PAR_REF], N), *d_rstd = par_up(t, k, rstd.h[PAR_REF], N);
            int runs = k == PAR_DEV && v == 0 ? 2 : 1;
            for (int run = 0; run < runs; run++) {
                float *d_dinp = v == 1 ? NULL : par_up(t, k, dinp0, nc);
                float *d_dw = v == 2 ? NULL : par_up(t, k, dw0, C);
                float *d_db = v == 3 ? NULL : par_up(t, k, db0, C);
                be->ops->norm_backward(be, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean,
                                            d_rstd, N, C, BACKEND_LAYERNORM);
                if (run == 1) {  // the same bits as the first run
                    par_down(t, k, rep, d_dinp, nc), par_down(t, k, rep + nc, d_dw, C);
                    par_down(t, k, rep + nc + C, d_db, C);
                    EXPECT_SAME_BITS(rep, dinp.h[k], nc, "layernorm_backward dinp rerun");
                    EXPECT_SAME_BITS(rep + nc, dw.h[k], C, "layernorm_backward dweight rerun");
                    EXPECT_SAME_BITS(rep + nc + C, db.h[k], C, "layernorm_backward dbias rerun");
                    break;
                }
                if (d_dinp) par_down(t, k, dinp.h[k], d_dinp, nc);
                if (d_dw) par_down(t, k, dw.h[k], d_dw, C);
                if (d_db) par_down(t, k, db.h[k], d_db, C);
            }
            par_release(t);
        }
        snprintf(what, sizeof what, "layernorm_backward %dx%d dinp += (%s)", N, C, names[v]);
        if (v != 1) PAR_CLOSE_OUT(dinp, what);
        snprintf(what, sizeof what, "layernorm_backward %dx%d dweight += (%s)", N, C, names[v]);
        if (v != 2) PAR_CLOSE_OUT(dw, what);
        snprintf(what, sizeof what, "layernorm_backward %dx%d dbias += (%s)", N, C, names[v]);
        if (v != 3) PAR_CLOSE_OUT(db, what);
    }
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(rep);
    par_out_free(&out), par_out_free(&mean), par_out_free(&rstd), par_out_free(&out2);
    par_out_free(&dinp), par_out_free(&dw), par_out_free(&db);
}

// gelu forward/backward (also dinp == dout), add (also out == a, out == b).
static void check_pointwise(Parity *t, size_t n) {
    float *x = par_rand(t, n, -6, 6), *y = par_rand(t, n, -2, 2);
    ParOut gf = par_out(n), gb = par_out(n), gba = par_out(n);
    ParOut ad = par_out(n), ada = par_out(n), adb = par_out(n), rf = par_out(n), rb = par_out(n);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        const BackendOps *o = be->ops;
        float *d_x = par_up(t, k, x, n), *d_y = par_up(t, k, y, n);
        float *d_o = par_alloc(t, k, n * sizeof(float));
        par_poison(t, k, d_o, n);
        o->act_forward(be, d_o, d_x, 1, (int)(n), BACKEND_ACT_GELU);
        par_down(t, k, gf.h[k], d_o, n);
        par_poison(t, k, d_o, n);
        ref_gelu_backward(be, d_o, d_x, d_y, n);
        par_down(t, k, gb.h[k], d_o, n);
        float *d_al = par_up(t, k, y, n);  // dinp == dout
        ref_gelu_backward(be, d_al, d_x, d_al, n);
        par_down(t, k, gba.h[k], d_al, n);
        par_poison(t, k, d_o, n);
        o->act_forward(be, d_o, d_x, 1, (int)n, BACKEND_ACT_RELU2);  // --squared-relu
        par_down(t, k, rf.h[k], d_o, n);
        float *d_ra = par_up(t, k, y, n);  // dinp == dout
        o->act_backward(be, d_ra, d_x, d_ra, 1, (int)n, BACKEND_ACT_RELU2);
        par_down(t, k, rb.h[k], d_ra, n);
        par_poison(t, k, d_o, n);
        o->add(be, d_o, d_x, d_y, n);
        par_down(t, k, ad.h[k], d_o, n);
        float *d_a = par_up(t, k, x, n), *d_b = par_up(t, k, y, n);
        o->add(be, d_a, d_a, d_y, n);  // out == a
        par_down(t, k, ada.h[k], d_a, n);
        o->add(be, d_b, d_x, d_b, n);  // out == b
        par_down(t, k, adb.h[k], d_b, n);
        par_release(t);
    }
    PAR_CLOSE_OUT(gf, "gelu_forward");
    PAR_CLOSE_OUT(gb, "gelu_backward");
    PAR_CLOSE_OUT(gba, "gelu_backward, dinp == dout");
    PAR_CLOSE_OUT(rf, "squared relu act_forward");
    PAR_CLOSE_OUT(rb, "squared relu act_backward, dinp == dout");
    PAR_CLOSE_OUT(ad, "add");
    PAR_CLOSE_OUT(ada, "add, out == a");
    PAR_CLOSE_OUT(adb, "add, out == b");
    free(x), free(y);
    par_out_free(&gf), par_out_free(&gb), par_out_free(&gba), par_out_free(&ad);
    par_out_free(&ada), par_out_free(&adb), par_out_free(&rf), par_out_free(&rb);
}

// attention_forward (out, att incl. the zeros above the diagonal) and attention_backward
// (from the reference's att; dqkv and scratch poisoned).
static void check_attention(Parity *t, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = par_rand(t, nqkv, -2, 2), *dout = par_rand(t, nout, -1, 1);
    ParOut out = par_out(nout), att = par_out(natt), dqkv = par_out(nqkv);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_qkv = par_up(t, k, qkv, nqkv);
        float *d_out = par_alloc(t, k, nout * sizeof(float)), *d_att = par_alloc(t, k, natt * sizeof(float));
        par_poison(t, k, d_out, nout), par_poison(t, k, d_att, natt);
        be->ops->attention_forward(be, d_out, d_att, d_qkv, B, T, NH, hs, NULL, NULL);
        par_down(t, k, out.h[k], d_out, nout), par_down(t, k, att.h[k], d_att, natt);
        par_release(t);
    }
    PAR_CLOSE_OUT(out, "attention_forward out");
    PAR_CLOSE_OUT(att, "attention_forward att");
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_qkv = par_up(t, k, qkv, nqkv), *d_dout = par_up(t, k, dout, nout);
        float *d_att = par_up(t, k, att.h[PAR_REF], natt);
        float *d_dqkv = par_alloc(t, k, nqkv * sizeof(float));
        float *d_scr = par_alloc(t, k, natt * sizeof(float));
        par_poison(t, k, d_dqkv, nqkv), par_poison(t, k, d_scr, natt);
        be->ops->attention_backward(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, B, T, NH, hs, NULL);
        par_down(t, k, dqkv.h[k], d_dqkv, nqkv);
        par_release(t);
    }
    PAR_CLOSE_OUT(dqkv, "attention_backward dqkv");
    free(qkv), free(dout);
    par_out_free(&out), par_out_free(&att), par_out_free(&dqkv);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_ops: no usable CUDA device, skipped\n");
        return 77;
    }
    Parity t = {.rng = {20240611}, .quick = quick};
    t.be[PAR_REF] = backend_cpu_create(1, BACKEND_F32);
    t.be[PAR_DEV] = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    printf("cuda_ops: %s against %s%s\n", t.be[PAR_DEV]->name, t.be[PAR_REF]->name,
           quick ? " (quick)" : "");
    EXPECT(t.be[PAR_DEV]->act == BACKEND_F32 && strstr(t.be[PAR_DEV]->name, "strict fp32"),
           "fp32 backend named %s", t.be[PAR_DEV]->name);
    check_memory(&t);
    check_matmul(&t, 37, 100, 67);
    check_layernorm(&t, 37, 100);
    check_pointwise(&t, quick ? 1000 : 3700);
    check_attention(&t, 2, quick ? 17 : 65, 3, 24);
    if (!quick) check_matmul(&t, 130, 100, 67);  // enough rows for two-pass column sums
    if (!quick) check_matmul(&t, 130, 36, 96);  // dbias rows 16-byte aligned: 16-byte loads
    check_layernorm(&t, quick ? 70 : 130, quick ? 40 : 768);  // two-pass dweight/dbias
    if (!quick) check_layernorm(&t, 5, 2500);  // 4 chunks of 16 bytes a thread (norm_row.cuh)
    if (!quick) check_layernorm(&t, 3, 8200);  // too long a row for it: the per-warp kernels
    test_failures_ += cuda_ops_vocab(&t);
    test_failures_ += cuda_ops_optim(&t);
    test_failures_ += cuda_ops_flash(&t);
    backend_destroy(t.be[PAR_DEV]);
    backend_destroy(t.be[PAR_REF]);
    return test_result("cuda_ops");
}
