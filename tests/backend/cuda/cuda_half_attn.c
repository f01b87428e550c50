// tests/backend/cuda/cuda_half_attn.c: part of the bf16/fp16 op test (see test_cuda_half.c,
// method and tolerances in cuda_half.h): materialised attention (forward: out and the
// probabilities; backward from the reference's probabilities rounded to the type), fused
// (flash) attention at hs 64, 24 and 128 with T = 40, not a multiple of the tiles (forward:
// out, lse; backward from the reference's out and lse), the vocab-parallel embedding and the
// position embedding (forward and fp32 backward), and the cross-entropy pieces.
#include "tests/backend/cuda/cuda_half.h"

#include <stdio.h>

static void check_attention(Half *h, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = half_rand(h, nqkv, -2, 2), *dout = half_rand(h, nout, -1, 1);
    float *rout = test_floats(nout), *ratt = test_floats(natt), *rdq = test_floats(nqkv);
    float *gout = test_floats(nout), *gatt = test_floats(natt), *gdq = test_floats(nqkv);
    float *scr = test_floats(natt);
    Backend *cpu = h->cpu, *be = h->be;
    cpu->ops->attention_forward(cpu, rout, ratt, qkv, B, T, NH, hs, NULL, NULL);
    void *d_out = half_poisoned(h, nout, h->dt), *d_att = half_poisoned(h, natt, h->dt);
    be->ops->attention_forward(be, d_out, d_att, half_up(h, qkv, nqkv), B, T, NH, hs, NULL, NULL);
    half_down(h, gout, d_out, nout), half_down(h, gatt, d_att, natt);
    half_release(h);
    HALF_CLOSE(h, gout, rout, nout, half_tol(h, TOL_ATT_FWD), "attention_forward out");
    HALF_CLOSE(h, gatt, ratt, natt, half_tol(h, TOL_ATT_FWD), "attention_forward att");
    half_round(h, ratt, natt, h->dt);  // both backwards start from the same probabilities
    cpu->ops->attention_backward(cpu, rdq, scr, dout, qkv, ratt, B, T, NH, hs, NULL);
    void *d_dqkv = half_poisoned(h, nqkv, h->dt);
    float *d_scr = half_poisoned(h, natt, BACKEND_F32);
    be->ops->attention_backward(be, d_dqkv, d_scr, half_up(h, dout, nout), half_up(h, qkv, nqkv),
                                half_up(h, ratt, natt), B, T, NH, hs, NULL);
    half_down(h, gdq, d_dqkv, nqkv);
    half_release(h);
    HALF_CLOSE(h, gdq, rdq, nqkv, half_tol(h, TOL_ATT_BWD), "attention_backward dqkv");
    free(qkv), free(dout), free(rout), free(ratt), free(rdq), free(gout), free(gatt), free(gdq);
    free(scr);
}

static void check_flash(Half *h, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t nrow = (size_t)B * NH * T;
    float *qkv = half_rand(h, nqkv, -2, 2), *dout = half_rand(h, nout, -1, 1);
    float *rout = test_floats(nout), *rlse = test_floats(nrow), *rdq = test_floats(nqkv);
    float *gout = test_floats(nout), *glse = test_floats(nrow), *gdq = test_floats(nqkv);
    float *scr = test_floats(nrow);
    char what[120];
    Backend *cpu = h->cpu, *be = h->be;
    cpu->ops->flash_attention_forward(cpu, rout, rlse, qkv, B, T, NH, hs, NULL, NULL);
    void *d_out = half_poisoned(h, nout, h->dt);
    float *d_lse = half_poisoned(h, nrow, BACKEND_F32);
    be->ops->flash_attention_forward(be, d_out, d_lse, half_up(h, qkv, nqkv), B, T, NH, hs, NULL, NULL);
    half_down(h, gout, d_out, nout), half_down_f32(h, glse, d_lse, nrow);
    half_release(h);
    snprintf(what, sizeof what, "flash_attention_forward out T%d hs%d", T, hs);
    HALF_CLOSE(h, gout, rout, nout, half_tol(h, TOL_STORE), what);
    snprintf(what, sizeof what, "flash_attention_forward lse (fp32) T%d hs%d", T, hs);
    HALF_CLOSE(h, glse, rlse, nrow, TOL_F32, what);
    half_round(h, rout, nout, h->dt);  // both backwards read the same out
    cpu->ops->flash_attention_backward(cpu, rdq, scr, dout, qkv, rout, rlse, B, T, NH, hs, NULL,
                                       NULL);
    void *d_dqkv = half_poisoned(h, nqkv, h->dt);
    float *d_scr = half_poisoned(h, nrow, BACKEND_F32);
    be->ops->flash_attention_backward(be, d_dqkv, d_scr, half_up(h, dout, nout),
                                      half_up(h, qkv, nqkv), half_up(h, rout, nout),
                                      half_up_f32(h, rlse, nrow), B, T, NH, hs, NULL, NULL);
    half_down(h, gdq, d_dqkv, nqkv);
    half_release(h);
    snprintf(what, sizeof what, "flash_attention_backward dqkv T%d hs%d", T, hs);
    HALF_CLOSE(h, gdq, rdq, nqkv, half_tol(h, TOL_STORE), what);
    free(qkv), free(dout), free(rout), free(rlse), free(rdq), free(gout), free(glse), free(gdq);
    free(scr);
}

// embedding (tokens inside and outside the shard) and position, forward and backward.
static void check_embeddings(Half *h, int B, int T, int C, int V_local, int vocab_start) {
    int N = B * T;
    size_t nc = (size_t)N * C, vc = (size_t)V_local * C, tc = (size_t)T * C;
    int *tok = malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) tok[i] = (int)rng_uniform(&h->rng, 0, vocab_start + V_local + 20);
    tok[0] = tok[N - 1] = vocab_start + 3;  // a repeated token
    float *table = half_rand(h, vc, -1, 1), *wpe = half_rand(h, tc, -1, 1);
    float *dout = half_rand(h, nc, -1, 1), *dt0 = half_rand(h, vc, -1, 1), *dw0 = half_rand(h, tc, -1, 1);
    float *ref = test_floats(nc + vc), *got = test_floats(nc + vc);
    Backend *cpu = h->cpu, *be = h->be;
    cpu->ops->embedding_forward(cpu, ref, tok, table, N, C, vocab_start, V_local);
    void *d_out = half_poisoned(h, nc, h->dt);
    be->ops->embedding_forward(be, d_out, half_up_int(h, tok, N), half_up(h, table, vc), N, C,
                               vocab_start, V_local);
    half_down(h, got, d_out, nc);
    HALF_CLOSE(h, got, ref, nc, 0.0, "embedding_forward (exact)");
    half_round(h, ref, nc, h->dt);  // position_forward adds onto the rounded embeddings
    cpu->ops->position_forward(cpu, ref, wpe, B, T, C, 0, NULL);
    be->ops->position_forward(be, d_out, half_up(h, wpe, tc), B, T, C, 0, NULL);
    half_down(h, got, d_out, nc);
    half_release(h);
    HALF_CLOSE(h, got, ref, nc, half_tol(h, TOL_STORE), "position_forward +=");
    memcpy(ref, dt0, vc * sizeof(float));
    cpu->ops->embedding_backward(cpu, ref, dout, tok, N, C, vocab_start, V_local);
    memcpy(ref + vc, dw0, tc * sizeof(float));
    cpu->ops->position_backward(cpu, ref + vc, dout, B, T, C, 0, NULL);
    float *d_dt = half_up_f32(h, dt0, vc), *d_dw = half_up_f32(h, dw0, tc);
    void *d_dout = half_up(h, dout, nc);
    be->ops->embedding_backward(be, d_dt, d_dout, half_up_int(h, tok, N), N, C, vocab_start, V_local);
    be->ops->position_backward(be, d_dw, d_dout, B, T, C, 0, NULL);
    half_down_f32(h, got, d_dt, vc), half_down_f32(h, got + vc, d_dw, tc);
    half_release(h);
    HALF_CLOSE(h, got, ref, vc, TOL_F32, "embedding_backward dtable += (fp32)");
    HALF_CLOSE(h, got + vc, ref + vc, tc, TOL_F32, "position_backward dwpe += (fp32)");
    free(tok), free(table), free(wpe), free(dout), free(dt0), free(dw0), free(ref), free(got);
}

// xent_stats (rowmax, sumexp, tgt), xent_loss, xent_backward (also dlogits == logits, and
// the fused classifier: its loss and in-place dlogits the same bits as the two calls');
// later pieces are fed the reference's earlier results. The one-pass classifier (rowmax
// NULL): the same bits as the device's own xent_stats, xent_loss and xent_backward.
static void check_xent(Half *h, int N, int V_local, int V_valid, int vocab_start) {
    size_t nv = (size_t)N * V_local;
    float *logits = half_rand(h, nv, -4, 4), *dscale = test_floats(N);
    int *tgt = malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) {
        tgt[i] = vocab_start - 5 + (int)rng_uniform(&h->rng, 0, V_local + 10);
        dscale[i] = (float)rng_uniform(&h->rng, 0.5, 1.5);
    }
    float *ref = test_floats(4 * (size_t)N + nv), *got = test_floats(4 * (size_t)N + nv);
    float *rmax = ref, *rsum = ref + N, *rtgt = ref + 2 * N, *rloss = ref + 3 * N, *rdl = ref + 4 * N;
    Backend *cpu = h->cpu, *be = h->be;
    cpu->ops->xent_stats(cpu, rmax, rsum, rtgt, logits, tgt, N, V_local, V_valid, vocab_start);
    cpu->ops->xent_loss(cpu, rloss, rsum, rmax, rtgt, N);
    cpu->ops->xent_backward(cpu, rdl, NULL, logits, rmax, rsum, NULL, tgt, dscale, N, V_local,
                            V_valid, vocab_start);
    void *d_l = half_up(h, logits, nv);
    int *d_tgt = half_up_int(h, tgt, N);
    float *d_max = half_poisoned(h, N, BACKEND_F32), *d_sum = half_poisoned(h, N, BACKEND_F32);
    float *d_t = half_poisoned(h, N, BACKEND_F32), *d_loss = half_poisoned(h, N, BACKEND_F32);
    float *r_max = half_up_f32(h, rmax, N), *r_sum = half_up_f32(h, rsum, N);
    be->ops->xent_stats(be, d_max, d_sum, d_t, d_l, d_tgt, N, V_local, V_valid, vocab_start);
    be->ops->xent_loss(be, d_loss, r_sum, r_max, half_up_f32(h, rtgt, N), N);
    void *d_dl = half_poisoned(h, nv, h->dt);
    be->ops->xent_backward(be, d_dl, NULL, d_l, r_max, r_sum, NULL, d_tgt,
                           half_up_f32(h, dscale, N), N, V_local, V_valid, vocab_start);
    half_down_f32(h, got, d_max, N), half_down_f32(h, got + N, d_sum, N);
    half_down_f32(h, got + 2 * N, d_t, N), half_down_f32(h, got + 3 * N, d_loss, N);
    half_down(h, got + 4 * N, d_dl, nv);
    HALF_CLOSE(h, got, rmax, N, 0.0, "xent_stats rowmax (exact)");
    HALF_CLOSE(h, got + N, rsum, N, TOL_F32, "xent_stats sumexp (fp32)");
    HALF_CLOSE(h, got + 2 * N, rtgt, N, 0.0, "xent_stats tgt (exact)");
    HALF_CLOSE(h, got + 3 * N, rloss, N, TOL_F32, "xent_loss (fp32)");
    HALF_CLOSE(h, got + 4 * N, rdl, nv, half_tol(h, TOL_STORE), "xent_backward dlogits");
    float *r_tgt = half_up_f32(h, rtgt, N), *d_ds = half_up_f32(h, dscale, N);
    void *d_lf = half_up(h, logits, nv);
    be->ops->xent_backward(be, d_l, NULL, d_l, r_max, r_sum, NULL, d_tgt, d_ds, N, V_local,
                           V_valid, vocab_start);  // in place
    half_down(h, got + 4 * N, d_l, nv);
    float *d_lossf = half_poisoned(h, N, BACKEND_F32), *fl = test_floats(N), *fdl = test_floats(nv);
    be->ops->xent_backward(be, d_lf, d_lossf, d_lf, r_max, r_sum, r_tgt, d_tgt, d_ds, N, V_local,
                           V_valid, vocab_start);  // the fused classifier
    be->ops->xent_loss(be, d_loss, r_sum, r_max, r_tgt, N);
    half_down_f32(h, got + 3 * N, d_loss, N), half_down_f32(h, fl, d_lossf, N);
    half_down(h, fdl, d_lf, nv);
    half_release(h);
    HALF_CLOSE(h, got + 4 * N, rdl, nv, half_tol(h, TOL_STORE), "xent_backward dlogits == logits");
    EXPECT(!memcmp(fl, got + 3 * N, N * sizeof(float)),
           "fused loss vs xent_loss: not the same bits");
    EXPECT(!memcmp(fdl, got + 4 * N, nv * sizeof(float)), "fused dlogits: not the same bits");
    void *d_l3 = half_up(h, logits, nv), *d_l1 = half_up(h, logits, nv);  // one pass vs three
    float *d_st = half_poisoned(h, 3 * (size_t)N, BACKEND_F32), *d_loss3 = half_poisoned(h, N, BACKEND_F32);
    d_lossf = half_poisoned(h, N, BACKEND_F32), d_ds = half_up_f32(h, dscale, N);
    d_tgt = half_up_int(h, tgt, N);
    be->ops->xent_stats(be, d_st, d_st + N, d_st + 2 * N, d_l3, d_tgt, N, V_local, V_valid,
                        vocab_start);
    be->ops->xent_loss(be, d_loss3, d_st + N, d_st, d_st + 2 * N, N);
    be->ops->xent_backward(be, d_l3, NULL, d_l3, d_st, d_st + N, NULL, d_tgt, d_ds, N, V_local,
                           V_valid, vocab_start);
    be->ops->xent_backward(be, d_l1, d_lossf, d_l1, NULL, NULL, NULL, d_tgt, d_ds, N, V_local,
                           V_valid, vocab_start);
    half_down_f32(h, got + 3 * N, d_loss3, N), half_down_f32(h, fl, d_lossf, N);
    half_down(h, got + 4 * N, d_l3, nv), half_down(h, fdl, d_l1, nv);
    half_release(h);
    EXPECT(!memcmp(fl, got + 3 * N, N * sizeof(float)),
           "one-pass loss vs xent_stats + xent_loss: not the same bits");
    EXPECT(!memcmp(fdl, got + 4 * N, nv * sizeof(float)),
           "one-pass dlogits vs xent_stats + xent_backward: not the same bits");
    HALF_CLOSE(h, fl, rloss, N, TOL_F32, "one-pass classifier loss vs the CPU");
    HALF_CLOSE(h, fdl, rdl, nv, half_tol(h, TOL_STORE), "one-pass classifier dlogits vs the CPU");
    free(fl), free(fdl);
    free(logits), free(dscale), free(tgt), free(ref), free(got);
}

int cuda_half_attn(Half *h) {
    int before = test_failures_;
    check_attention(h, 2, h->quick ? 17 : 33, 2, 16);
    check_flash(h, 1, 40, 2, 64);
    if (!h->quick) check_flash(h, 2, 40, 3, 24), check_flash(h, 1, 40, 1, 128);
    check_embeddings(h, 2, 9, h->quick ? 40 : 70, 50, 10);
    if (!h->quick) check_embeddings(h, 2, 9, 64, 50, 10);  // 16-byte aligned rows
    check_xent(h, 7, 70, 64, 100);
    return test_failures_ - before;
}
