// tests/backend/cuda/cuda_ops_vocab.c: part of the CUDA-vs-CPU op-parity test (see
// test_cuda_ops.c): vocab-parallel embedding, position embedding, and the four vocab-parallel
// cross-entropy ops, on the shard [vocab_start, vocab_start + V_local) = [64, 128) of which
// V_valid = 50 columns are real; tokens/targets fall inside, in the padding, and outside.
#include "tests/backend/cuda/cuda_parity.h"

#include <float.h>

#define VS 64  // vocab_start
#define VL 64  // V_local
#define VV 50  // V_valid

// n ids in [0, 3 * VS), the first ones at the shard's edges and a repeated id.
static int *vocab_ids(Parity *t, int n) {
    int *ids = malloc((size_t)n * sizeof(int));
    const int edge[8] = {VS, VS + VV - 1, VS + VV, VS + VL - 1, VS - 1, VS + VL, 70, 70};
    for (int i = 0; i < n; i++)
        ids[i] = i < 8 ? edge[i] : (int)rng_uniform(&t->rng, 0, 3 * VS);
    return ids;
}

// embedding_forward (out poisoned) and embedding_backward (dtable += from non-zero, the same
// bits twice on the device).
static void check_embedding(Parity *t, int N, int C) {
    size_t nc = (size_t)N * C, vc = (size_t)VL * C;
    int *tok = vocab_ids(t, N);
    float *table = par_rand(t, vc, -1, 1), *dout = par_rand(t, nc, -1, 1);
    float *dt0 = par_rand(t, vc, -1, 1), *rep = test_floats(vc);
    ParOut out = par_out(nc), dt = par_out(vc);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        int *d_tok = par_up_int(t, k, tok, N);
        float *d_table = par_up(t, k, table, vc), *d_dout = par_up(t, k, dout, nc);
        float *d_out = par_alloc(t, k, nc * sizeof(float));
        par_poison(t, k, d_out, nc);
        be->ops->embedding_forward(be, d_out, d_tok, d_table, N, C, VS, VL);
        par_down(t, k, out.h[k], d_out, nc);
        float *d_dt = par_up(t, k, dt0, vc);
        be->ops->embedding_backward(be, d_dt, d_dout, d_tok, N, C, VS, VL);
        par_down(t, k, dt.h[k], d_dt, vc);
        if (k == PAR_DEV) {
            float *d_dt2 = par_up(t, k, dt0, vc);
            be->ops->embedding_backward(be, d_dt2, d_dout, d_tok, N, C, VS, VL);
            par_down(t, k, rep, d_dt2, vc);
            EXPECT_SAME_BITS(rep, dt.h[k], vc, "embedding_backward rerun");
        }
        par_release(t);
    }
    PAR_CLOSE_OUT(out, "embedding_forward");
    PAR_CLOSE_OUT(dt, "embedding_backward dtable +=");
    free(tok), free(table), free(dout), free(dt0), free(rep);
    par_out_free(&out), par_out_free(&dt);
}

// position_forward (out += wpe) and position_backward (dwpe += sum over b), from non-zero.
static void check_position(Parity *t, int B, int T, int C) {
    size_t n = (size_t)B * T * C, tc = (size_t)T * C;
    float *x = par_rand(t, n, -1, 1), *wpe = par_rand(t, tc, -1, 1), *dwpe0 = par_rand(t, tc, -1, 1);
    ParOut out = par_out(n), dwpe = par_out(tc);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, n), *d_wpe = par_up(t, k, wpe, tc);
        float *d_dwpe = par_up(t, k, dwpe0, tc);
        be->ops->position_backward(be, d_dwpe, d_x, B, T, C, 0, NULL);
        par_down(t, k, dwpe.h[k], d_dwpe, tc);
        be->ops->position_forward(be, d_x, d_wpe, B, T, C, 0, NULL);
        par_down(t, k, out.h[k], d_x, n);
        par_release(t);
    }
    PAR_CLOSE_OUT(out, "position_forward out +=");
    PAR_CLOSE_OUT(dwpe, "position_backward dwpe +=");
    free(x), free(wpe), free(dwpe0);
    par_out_free(&out), par_out_free(&dwpe);
}

// xent_stats (rowmax, sumexp from it, tgt), xent_loss and xent_backward (also dlogits ==
// logits, and the fused classifier: with the loss, in place, the same bits as xent_loss and
// the plain xent_backward on each backend), each fed the reference's previous results;
// padding columns hold large logits that must stay masked. The one-pass classifier
// (xent_backward with rowmax NULL: xent_classifier_kernel on the device): on each backend the
// same bits as its own xent_stats, xent_loss and xent_backward, and close across backends.
static void check_xent(Parity *t, int N) {
    size_t nv = (size_t)N * VL;
    float *logits = par_rand(t, nv, -4, 4), *dscale = par_rand(t, N, 0.1, 1.0);
    for (int i = 0; i < N; i++)
        for (int j = VV; j < VL; j++) logits[(size_t)i * VL + j] = 30.0f;
    int *tgt_ids = vocab_ids(t, N);
    ParOut mx = par_out(N), se = par_out(N), tg = par_out(N), loss = par_out(N);
    ParOut dl = par_out(nv), dla = par_out(nv), lf = par_out(N), dlf = par_out(nv);
    for (int k = 0; k < 2; k++) {  // max, sumexp + tgt in one pass
        Backend *be = t->be[k];
        float *d_l = par_up(t, k, logits, nv), *d_mx = par_alloc(t, k, N * sizeof(float));
        float *d_se = par_alloc(t, k, N * sizeof(float)), *d_tg = par_alloc(t, k, N * sizeof(float));
        int *d_t = par_up_int(t, k, tgt_ids, N);
        par_poison(t, k, d_mx, N), par_poison(t, k, d_se, N), par_poison(t, k, d_tg, N);
        be->ops->xent_stats(be, d_mx, d_se, d_tg, d_l, d_t, N, VL, VV, VS);
        par_down(t, k, mx.h[k], d_mx, N);
        par_down(t, k, se.h[k], d_se, N), par_down(t, k, tg.h[k], d_tg, N);
        par_release(t);
    }
    PAR_CLOSE_OUT(mx, "xent_stats rowmax");
    PAR_CLOSE_OUT(se, "xent_stats sumexp");
    PAR_CLOSE_OUT(tg, "xent_stats tgt");
    for (int k = 0; k < 2; k++) {  // loss and dlogits from the reference's max, sumexp, tgt
        Backend *be = t->be[k];
        float *d_mx = par_up(t, k, mx.h[PAR_REF], N), *d_se = par_up(t, k, se.h[PAR_REF], N);
        float *d_tg = par_up(t, k, tg.h[PAR_REF], N), *d_ds = par_up(t, k, dscale, N);
        float *d_loss = par_alloc(t, k, N * sizeof(float)), *d_dl = par_alloc(t, k, nv * sizeof(float));
        float *d_l = par_up(t, k, logits, nv);
        int *d_t = par_up_int(t, k, tgt_ids, N);
        par_poison(t, k, d_loss, N), par_poison(t, k, d_dl, nv);
        be->ops->xent_loss(be, d_loss, d_se, d_mx, d_tg, N);
        par_down(t, k, loss.h[k], d_loss, N);
        be->ops->xent_backward(be, d_dl, NULL, d_l, d_mx, d_se, NULL, d_t, d_ds, N, VL, VV, VS);
        par_down(t, k, dl.h[k], d_dl, nv);
        be->ops->xent_backward(be, d_l, NULL, d_l, d_mx, d_se, NULL, d_t, d_ds, N, VL, VV,
                               VS);  // in place
        par_down(t, k, dla.h[k], d_l, nv);
        float *d_lf = par_up(t, k, logits, nv), *d_lossf = par_alloc(t, k, N * sizeof(float));
        par_poison(t, k, d_lossf, N);
        be->ops->xent_backward(be, d_lf, d_lossf, d_lf, d_mx, d_se, d_tg, d_t, d_ds, N, VL, VV,
                               VS);  // the fused classifier: loss and dlogits in place
        par_down(t, k, lf.h[k], d_lossf, N), par_down(t, k, dlf.h[k], d_lf, nv);
        par_release(t);
        EXPECT(!memcmp(lf.h[k], loss.h[k], N * sizeof(float)),
               "fused loss vs xent_loss: not the same bits (backend %d)", k);
        EXPECT(!memcmp(dlf.h[k], dla.h[k], nv * sizeof(float)),
               "fused dlogits vs xent_backward: not the same bits (backend %d)", k);
    }
    PAR_CLOSE_OUT(loss, "xent_loss");
    PAR_CLOSE_OUT(dl, "xent_backward");
    PAR_CLOSE_OUT(dla, "xent_backward, dlogits == logits");
    PAR_CLOSE_OUT(lf, "xent_backward's fused loss");
    PAR_CLOSE_OUT(dlf, "xent_backward's fused dlogits");
    for (int k = 0; k < 2; k++) {  // one pass vs this backend's own three calls
        Backend *be = t->be[k];
        float *d_l = par_up(t, k, logits, nv), *d_l1 = par_up(t, k, logits, nv);
        float *d_ds = par_up(t, k, dscale, N), *d_st = par_alloc(t, k, 3 * N * sizeof(float));
        float *d_loss = par_alloc(t, k, N * sizeof(float)), *d_lossf = par_alloc(t, k, N * sizeof(float));
        int *d_t = par_up_int(t, k, tgt_ids, N);
        par_poison(t, k, d_lossf, N);
        be->ops->xent_stats(be, d_st, d_st + N, d_st + 2 * N, d_l, d_t, N, VL, VV, VS);
        be->ops->xent_loss(be, d_loss, d_st + N, d_st, d_st + 2 * N, N);
        be->ops->xent_backward(be, d_l, NULL, d_l, d_st, d_st + N, NULL, d_t, d_ds, N, VL, VV, VS);
        be->ops->xent_backward(be, d_l1, d_lossf, d_l1, NULL, NULL, NULL, d_t, d_ds, N, VL, VV,
                               VS);  // one pass, in place
        par_down(t, k, loss.h[k], d_loss, N), par_down(t, k, dla.h[k], d_l, nv);
        par_down(t, k, lf.h[k], d_lossf, N), par_down(t, k, dlf.h[k], d_l1, nv);
        par_release(t);
        EXPECT(!memcmp(lf.h[k], loss.h[k], N * sizeof(float)),
               "one-pass loss vs xent_stats + xent_loss: not the same bits (backend %d)", k);
        EXPECT(!memcmp(dlf.h[k], dla.h[k], nv * sizeof(float)),
               "one-pass dlogits vs xent_stats + xent_backward: not the same bits (backend %d)", k);
    }
    PAR_CLOSE_OUT(lf, "one-pass classifier loss");
    PAR_CLOSE_OUT(dlf, "one-pass classifier dlogits");
    // A shard with no real columns: rowmax -FLT_MAX, dlogits all 0.
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_l = par_up(t, k, logits, nv), *d_mx = par_alloc(t, k, N * sizeof(float));
        float *d_se = par_up(t, k, dscale, N), *d_ds = par_up(t, k, dscale, N);
        float *d_s0 = par_alloc(t, k, N * sizeof(float)), *d_tg = par_alloc(t, k, N * sizeof(float));
        int *d_t = par_up_int(t, k, tgt_ids, N);
        par_poison(t, k, d_mx, N);
        be->ops->xent_stats(be, d_mx, d_s0, d_tg, d_l, d_t, N, VL, 0, VS);
        par_down(t, k, mx.h[k], d_mx, N);
        be->ops->xent_backward(be, d_l, NULL, d_l, d_mx, d_se, NULL, d_t, d_ds, N, VL, 0, VS);
        par_down(t, k, dl.h[k], d_l, nv);
        par_release(t);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) bad += mx.h[PAR_DEV][i] != -FLT_MAX;
    EXPECT(bad == 0, "xent_stats with V_valid = 0: %d rows not -FLT_MAX", bad);
    PAR_CLOSE_OUT(dl, "xent_backward with V_valid = 0");
    free(logits), free(dscale), free(tgt_ids);
    par_out_free(&mx), par_out_free(&se), par_out_free(&tg), par_out_free(&loss);
    par_out_free(&dl), par_out_free(&dla), par_out_free(&lf), par_out_free(&dlf);
}

int cuda_ops_vocab(Parity *t) {
    int T = t->quick ? 17 : 65;
    check_embedding(t, 2 * T, 100);
    check_embedding(t, 2 * T, 101);  // rows not 16-byte aligned: scalar accesses, short chunks
    check_position(t, 2, T, 100);
    check_xent(t, 37);
    return test_failures_;
}
