// tests/backend/cuda/cuda_ops_flash.c: part of the CUDA-vs-CPU op-parity test (see
// test_cuda_ops.c): fused causal attention, flash_attention_forward (out, lse) and
// flash_attention_backward (dqkv, fed the reference's out and lse), at B = 2, NH = 3 and
// awkward T (65, 100: not a multiple of any tile) and head sizes (24: zero-padded up to 32;
// 64; 128: the 16 x 16 backward tiles). Outputs and the scratch are NaN-poisoned first; the
// device runs everything twice and must give the same bits. Windows (BackendAttnWindow):
// queries at positions [20, 37) of a 50-position sequence against keys [10, 30) of another
// buffer, fused and materialised, with and without dropout (masks at global positions).
// A ring over key blocks (tests/backend/attention_ring.h: the forward with accumulate, the
// windowed backward into each block's dkv) on the device against the CPU's whole-sequence op;
// a windowed backward (adding into dq and dkv) with rows of lse -inf against the CPU's.
// Packed K/V rows (BackendAttnWindow.kv_heads, grouped-query attention): the ring with G = NH
// = 4 and G = 2 (chunks 17, 33; hs 24, 64) against the CPU's whole-sequence op on the
// expanded heads; copy_row_blocks (copy, add) against the CPU's: the same bits.
#include "tests/backend/attention_ring.h"
#include "tests/backend/cuda/cuda_parity.h"

#include <stdio.h>

// Forward and backward of one shape on both backends (the device twice).
static void check_flash(Parity *t, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t nrow = (size_t)B * NH * T;
    float *qkv = par_rand(t, nqkv, -2, 2), *dout = par_rand(t, nout, -1, 1);
    float *rep = test_floats(nqkv);
    ParOut out = par_out(nout), lse = par_out(nrow), dqkv = par_out(nqkv);
    char what[160];
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_qkv = par_up(t, k, qkv, nqkv);
        float *d_out = par_alloc(t, k, nout * sizeof(float)), *d_lse = par_alloc(t, k, nrow * sizeof(float));
        for (int run = 0; run < (k == PAR_DEV ? 2 : 1); run++) {
            par_poison(t, k, d_out, nout), par_poison(t, k, d_lse, nrow);
            be->ops->flash_attention_forward(be, d_out, d_lse, d_qkv, B, T, NH, hs, NULL, NULL);
            par_down(t, k, run ? rep : out.h[k], d_out, nout);
            par_down(t, k, run ? rep + nout : lse.h[k], d_lse, nrow);
        }
        if (k == PAR_DEV) {
            EXPECT_SAME_BITS(rep, out.h[k], nout, "flash_attention_forward out rerun");
            EXPECT_SAME_BITS(rep + nout, lse.h[k], nrow, "flash_attention_forward lse rerun");
        }
        par_release(t);
    }
    snprintf(what, sizeof what, "flash_attention_forward out B%d T%d NH%d hs%d", B, T, NH, hs);
    PAR_CLOSE_OUT(out, what);
    snprintf(what, sizeof what, "flash_attention_forward lse B%d T%d NH%d hs%d", B, T, NH, hs);
    PAR_CLOSE_OUT(lse, what);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_qkv = par_up(t, k, qkv, nqkv), *d_dout = par_up(t, k, dout, nout);
        float *d_out = par_up(t, k, out.h[PAR_REF], nout), *d_lse = par_up(t, k, lse.h[PAR_REF], nrow);
        float *d_dqkv = par_alloc(t, k, nqkv * sizeof(float)), *d_scr = par_alloc(t, k, nrow * sizeof(float));
        for (int run = 0; run < (k == PAR_DEV ? 2 : 1); run++) {
            par_poison(t, k, d_dqkv, nqkv), par_poison(t, k, d_scr, nrow);
            be->ops->flash_attention_backward(be, d_dqkv, d_scr, d_dout, d_qkv, d_out, d_lse,
                                              B, T, NH, hs, NULL, NULL);
            par_down(t, k, run ? rep : dqkv.h[k], d_dqkv, nqkv);
        }
        if (k == PAR_DEV) EXPECT_SAME_BITS(rep, dqkv.h[k], nqkv, "flash_attention_backward rerun");
        par_release(t);
    }
    snprintf(what, sizeof what, "flash_attention_backward dqkv B%d T%d NH%d hs%d", B, T, NH, hs);
    PAR_CLOSE_OUT(dqkv, what);
    free(qkv), free(dout), free(rep);
    par_out_free(&out), par_out_free(&lse), par_out_free(&dqkv);
}

// The windowed forwards of both attention ops on both backends (dropout p, 0: none).
static void check_window(Parity *t, int flash, double p) {
    const int B = 2, NH = 2, hs = 24, C = NH * hs, Tq = 17, Tk = 20;
    BackendAttnWindow w = {20, 10, Tk, NULL, 0, NULL, 0, NULL};
    BackendDropout d = {.key = dropout_key(5, 2, DROPOUT_SITE_ATTN_PROBS, 1),
                        .threshold = dropout_threshold(p), .scale = 1.0f / (1.0f - (float)p),
                        .sample0 = 4, .NH = NH, .T = 50};
    size_t nq = (size_t)B * Tq * 3 * C, nk = (size_t)B * Tk * 3 * C, nout = (size_t)B * Tq * C;
    size_t nl = (size_t)B * NH * Tq, na = (size_t)B * NH * Tq * Tk;
    float *qkv = par_rand(t, nq, -2, 2), *kv = par_rand(t, nk, -2, 2);
    ParOut out = par_out(nout), lse = par_out(nl);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_q = par_up(t, k, qkv, nq), *d_o = par_alloc(t, k, nout * sizeof(float));
        float *d_l = par_alloc(t, k, (flash ? nl : na) * sizeof(float));
        w.kv = par_up(t, k, kv, nk);
        par_poison(t, k, d_o, nout);
        if (flash) be->ops->flash_attention_forward(be, d_o, d_l, d_q, B, Tq, NH, hs, p > 0 ? &d : NULL, &w);
        else be->ops->attention_forward(be, d_o, d_l, d_q, B, Tq, NH, hs, p > 0 ? &d : NULL, &w);
        par_down(t, k, out.h[k], d_o, nout);
        if (flash) par_down(t, k, lse.h[k], d_l, nl);
        par_release(t);
    }
    char what[96];
    snprintf(what, sizeof what, "%s forward, window, dropout %g", flash ? "flash_attention" : "attention", p);
    PAR_CLOSE_OUT(out, what);
    if (flash) PAR_CLOSE_OUT(lse, "flash_attention_forward lse, window");
    free(qkv), free(kv);
    par_out_free(&out), par_out_free(&lse);
}

// The ring of attention_ring.h on the device (P ranks, chunks of c rows, dropout p) against
// the CPU's whole-sequence flash forward and backward: out, lse, dqkv (fresh: every forward
// accumulates, from out 0 and lse -inf).
static void check_ring(Parity *t, int P, int c, int hs, double p, int fresh, int NH, int G) {
    const int B = 2, T = 2 * P * c, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    BackendDropout d = {.key = dropout_key(9, 1, DROPOUT_SITE_ATTN_PROBS, 0),
                        .threshold = dropout_threshold(p), .scale = 1.0f / (1.0f - (float)p),
                        .sample0 = 1, .h0 = 2, .NH = 4, .T = T};
    const BackendDropout *dp = p > 0 ? &d : NULL;
    float *qkv = par_rand(t, nq, -2, 2), *dout = par_rand(t, no, -1, 1), *scr = test_floats(nl);
    if (G) ring_group_copies(qkv, (size_t)B * T, NH, hs, G);
    ParOut out = par_out(no), lse = par_out(nl), dqkv = par_out(nq);
    Backend *cpu = t->be[PAR_REF];
    cpu->ops->flash_attention_forward(cpu, out.h[PAR_REF], lse.h[PAR_REF], qkv, B, T, NH, hs, dp,
                                      NULL);
    cpu->ops->flash_attention_backward(cpu, dqkv.h[PAR_REF], scr, dout, qkv, out.h[PAR_REF],
                                       lse.h[PAR_REF], B, T, NH, hs, dp, NULL);
    if (G) ring_group_sum(dqkv.h[PAR_REF], (size_t)B * T, NH, hs, G);
    AttnRing g = {B, NH, hs, P, c, dp, fresh, G};
    int stray = attn_ring_run(t->be[PAR_DEV], &g, qkv, dout, out.h[PAR_DEV], lse.h[PAR_DEV],
                              dqkv.h[PAR_DEV]);
    EXPECT(stray == 0, "%d entries of dkv's q parts (packed: dq's k | v) written on the device",
           stray);
    char what[128], kvs[32] = "";
    if (G) snprintf(kvs, sizeof kvs, " NH%d G%d", NH, G);
    snprintf(what, sizeof what, "flash ring P%d c%d hs%d dropout %g%s%s: out", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    PAR_CLOSE_OUT(out, what);
    snprintf(what, sizeof what, "flash ring P%d c%d hs%d dropout %g%s%s: lse", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    PAR_CLOSE_OUT(lse, what);
    snprintf(what, sizeof what, "flash ring P%d c%d hs%d dropout %g%s%s: dqkv", P, c, hs, p,
             fresh ? " fresh" : "", kvs);
    PAR_CLOSE_OUT(dqkv, what);
    free(qkv), free(dout), free(scr);
    par_out_free(&out), par_out_free(&lse), par_out_free(&dqkv);
}

// A windowed backward (queries at 30.., every key visible, dropout) adding onto random dq and
// dkv, with every fourth row's lse -inf and out 0 (rows that saw no key): both backends.
static void check_unseen(Parity *t) {
    const int B = 2, NH = 2, hs = 24, C = NH * hs, T = 20, Tk = 12;
    size_t nq = (size_t)B * T * 3 * C, nk = (size_t)B * Tk * 3 * C, no = (size_t)B * T * C;
    size_t nl = (size_t)B * NH * T;
    BackendDropout d = {.key = dropout_key(3, 8, DROPOUT_SITE_ATTN_PROBS, 2),
                        .threshold = dropout_threshold(0.2), .scale = 1.0f / 0.8f,
                        .sample0 = 0, .NH = NH, .T = 64};
    float *qkv = par_rand(t, nq, -1, 1), *kv = par_rand(t, nk, -1, 1);
    float *dy = par_rand(t, no, -1, 1), *dq0 = par_rand(t, nq, -1, 1), *dk0 = par_rand(t, nk, -1, 1);
    float *out = test_floats(no), *lse = test_floats(nl);
    BackendAttnWindow w = {30, 0, Tk, kv, 0, NULL, 0, NULL};
    Backend *cpu = t->be[PAR_REF];
    cpu->ops->flash_attention_forward(cpu, out, lse, qkv, B, T, NH, hs, &d, &w);
    for (size_t r = 3; r < nl; r += 4) {
        lse[r] = -INFINITY;
        size_t bh = r / T, tt = r % T;
        for (int e = 0; e < hs; e++) out[(bh / NH * T + tt) * C + bh % NH * hs + e] = 0.0f;
    }
    ParOut dq = par_out(nq), dkv = par_out(nk);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_q = par_up(t, k, dq0, nq), *d_k = par_up(t, k, dk0, nk);
        float *d_s = par_alloc(t, k, nl * sizeof(float));
        BackendAttnWindow wk = {30, 0, Tk, par_up(t, k, kv, nk), 0, d_k, 0, NULL};
        be->ops->flash_attention_backward(be, d_q, d_s, par_up(t, k, dy, no), par_up(t, k, qkv, nq),
                                          par_up(t, k, out, no), par_up(t, k, lse, nl), B, T, NH,
                                          hs, &d, &wk);
        par_down(t, k, dq.h[k], d_q, nq), par_down(t, k, dkv.h[k], d_k, nk);
        par_release(t);
    }
    PAR_CLOSE_OUT(dq, "flash_attention_backward window, rows of lse -inf: dqkv (added)");
    PAR_CLOSE_OUT(dkv, "flash_attention_backward window, rows of lse -inf: dkv (added)");
    free(qkv), free(kv), free(dy), free(dq0), free(dk0), free(out), free(lse);
    par_out_free(&dq), par_out_free(&dkv);
}

// copy_row_blocks on both backends (the ring's packing shape: 2G blocks of hs, R*hs apart,
// out of rows of 3C; then added back), the same bits.
static void check_row_blocks(Parity *t) {
    const int rows = 19, NH = 4, G = 2, hs = 24, C = NH * hs, R = NH / G, KW = 2 * G * hs;
    size_t nq = (size_t)rows * 3 * C, nk = (size_t)rows * KW;
    float *qkv = par_rand(t, nq, -2, 2);
    ParOut kv = par_out(nk), back = par_out(nq);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_q = par_up(t, k, qkv, nq), *d_k = par_alloc(t, k, nk * sizeof(float));
        be->ops->copy_row_blocks(be, d_k, KW, hs, d_q + C, 3 * C, (size_t)R * hs, rows, 2 * G, hs, 0);
        be->ops->copy_row_blocks(be, d_q + C, 3 * C, (size_t)R * hs, d_k, KW, hs, rows, 2 * G, hs, 1);
        par_down(t, k, kv.h[k], d_k, nk), par_down(t, k, back.h[k], d_q, nq);
        par_release(t);
    }
    EXPECT_SAME_BITS(kv.h[PAR_DEV], kv.h[PAR_REF], nk, "copy_row_blocks copy");
    EXPECT_SAME_BITS(back.h[PAR_DEV], back.h[PAR_REF], nq, "copy_row_blocks add");
    free(qkv);
    par_out_free(&kv), par_out_free(&back);
}

int cuda_ops_flash(Parity *t) {
    for (int flash = 0; flash < 2; flash++) check_window(t, flash, 0.0), check_window(t, flash, 0.3);
    check_ring(t, 2, 17, 24, 0.1, 0, 2, 0);
    check_ring(t, 2, 17, 24, 0.1, 0, 4, 2);
    check_unseen(t);
    check_row_blocks(t);
    if (!t->quick) check_ring(t, 2, 17, 24, 0.0, 1, 2, 0), check_ring(t, 3, 33, 64, 0.0, 0, 2, 0),
                   check_ring(t, 2, 20, 128, 0.1, 1, 2, 0), check_ring(t, 2, 33, 64, 0.0, 0, 4, 4),
                   check_ring(t, 3, 17, 64, 0.0, 1, 4, 2), check_ring(t, 2, 33, 24, 0.1, 0, 4, 1);
    if (t->quick) {  // sanitizer builds: one short sequence, the two tilings
        check_flash(t, 2, 17, 3, 24);
        check_flash(t, 1, 33, 2, 128);
        return test_failures_;
    }
    const int Ts[2] = {65, 100}, hss[3] = {24, 64, 128};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) check_flash(t, 2, Ts[i], 3, hss[j]);
    return test_failures_;
}
