// tests/backend/cuda/test_cuda_documents.c: documents inside a sample (--reset-position-ids,
// --reset-attention-mask) on the CUDA backend against the CPU reference: position_forward
// and position_backward with a per-row position array, rope_gqa forward and backward with
// one, and attention with document starts (BackendAttnWindow.qstart), materialised and
// fused, forward and backward, without and with attention dropout, and a fused forward over
// a window of keys that starts inside a document (k0 > 0). T = 70 crosses the 32-row tiles,
// with documents starting inside and on tile edges. Within 1e-5 of the CPU. Needs a device
// (exit 77 = skip without one); under the emulator it always runs.
#include "tests/backend/cuda/cuda_parity.h"

#include <stdio.h>

enum { B = 2, T = 70, NDOC = 3 };
static const int STARTS[B][NDOC] = {{0, 13, 41}, {0, 32, T}};

// qs (B, T): each row's document start; pos (B, T): its position in the document.
static void doc_rows(int *qs, int *pos) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int s = 0;
            for (int k = 0; k < NDOC; k++) s = STARTS[b][k] <= t ? STARTS[b][k] : s;
            qs[b * T + t] = s, pos[b * T + t] = t - s;
        }
}

static void check_positions(Parity *t) {
    int C = 24, NH = 4, G = 2, hs = 8, rot = 6, N = B * T;
    size_t nc = (size_t)N * C, in = (size_t)N * (NH + 2 * G) * hs, out = (size_t)N * 3 * NH * hs;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *wpe = par_rand(t, (size_t)T * C, -1, 1), *x = par_rand(t, nc, -1, 1);
    float *dw0 = par_rand(t, (size_t)T * C, -1, 1), *ri = par_rand(t, in, -1, 1);
    float *rg = par_rand(t, out, -1, 1);
    ParOut y = par_out(nc), dw = par_out((size_t)T * C), ry = par_out(out), rdx = par_out(in);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        int *d_pos = par_up_int(t, k, pos, (size_t)N);
        float *d_w = par_up(t, k, wpe, (size_t)T * C), *d_x = par_up(t, k, x, nc);
        float *d_dw = par_up(t, k, dw0, (size_t)T * C), *d_y = par_up(t, k, x, nc);
        float *d_ri = par_up(t, k, ri, in), *d_rg = par_up(t, k, rg, out);
        float *d_ro = par_alloc(t, k, out * 4), *d_rdx = par_alloc(t, k, in * 4);
        be->ops->position_forward(be, d_y, d_w, B, T, C, 0, d_pos);
        be->ops->position_backward(be, d_dw, d_x, B, T, C, 0, d_pos);
        be->ops->rope_gqa_forward(be, d_ro, d_ri, B, T, NH, G, hs, rot, 10000.0f, 0, d_pos);
        be->ops->rope_gqa_backward(be, d_rdx, d_rg, B, T, NH, G, hs, rot, 10000.0f, 0, d_pos);
        par_down(t, k, y.h[k], d_y, nc), par_down(t, k, dw.h[k], d_dw, (size_t)T * C);
        par_down(t, k, ry.h[k], d_ro, out), par_down(t, k, rdx.h[k], d_rdx, in);
        par_release(t);
    }
    PAR_CLOSE_OUT(y, "position_forward with pos");
    PAR_CLOSE_OUT(dw, "position_backward with pos");
    PAR_CLOSE_OUT(ry, "rope_gqa_forward with pos");
    PAR_CLOSE_OUT(rdx, "rope_gqa_backward with pos");
    free(wpe), free(x), free(dw0), free(ri), free(rg);
    par_out_free(&y), par_out_free(&dw), par_out_free(&ry), par_out_free(&rdx);
}

// Materialised and fused attention with document starts (d: dropout or NULL).
static void check_attention(Parity *t, int NH, int hs, const BackendDropout *d) {
    int C = NH * hs, k1 = 20;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    int qs[B * T], pos[B * T];
    doc_rows(qs, pos);
    float *qkv = par_rand(t, nq, -2, 2), *dy = par_rand(t, no, -1, 1);
    ParOut out = par_out(no), dq = par_out(nq), fout = par_out(no), flse = par_out(nl);
    ParOut fdq = par_out(nq), wout = par_out(no);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        int *d_qs = par_up_int(t, k, qs, (size_t)B * T);
        float *d_q = par_up(t, k, qkv, nq), *d_dy = par_up(t, k, dy, no);
        float *d_o = par_alloc(t, k, no * 4), *d_a = par_alloc(t, k, na * 4);
        float *d_s = par_alloc(t, k, na * 4), *d_g = par_alloc(t, k, nq * 4);
        float *d_lse = par_alloc(t, k, nl * 4), *d_fg = par_alloc(t, k, nq * 4);
        BackendAttnWindow w = {0, 0, T, NULL, 0, NULL, 0, d_qs};
        be->ops->attention_forward(be, d_o, d_a, d_q, B, T, NH, hs, d, &w);
        be->ops->attention_backward(be, d_g, d_s, d_dy, d_q, d_a, B, T, NH, hs, d);
        par_down(t, k, out.h[k], d_o, no), par_down(t, k, dq.h[k], d_g, nq);
        be->ops->flash_attention_forward(be, d_o, d_lse, d_q, B, T, NH, hs, d, &w);
        be->ops->flash_attention_backward(be, d_fg, d_s, d_dy, d_q, d_o, d_lse, B, T, NH, hs, d,
                                          &w);  // onto zeros: a window adds
        par_down(t, k, fout.h[k], d_o, no), par_down(t, k, flse.h[k], d_lse, nl);
        par_down(t, k, fdq.h[k], d_fg, nq);
        // keys [k1, T) only, rows of the sequence from k1 (queries of documents before see none)
        BackendAttnWindow wk = {0, k1, T - k1, NULL, 0, NULL, 0, d_qs};
        float *d_kv = par_alloc(t, k, nq * 4);
        for (int b = 0; b < B; b++)
            be->ops->copy(be, d_kv + (size_t)b * (T - k1) * 3 * C,
                          d_q + ((size_t)b * T + k1) * 3 * C, (size_t)(T - k1) * 3 * C * 4,
                          BACKEND_D2D);
        wk.kv = d_kv;
        be->ops->flash_attention_forward(be, d_o, d_lse, d_q, B, T, NH, hs, d, &wk);
        par_down(t, k, wout.h[k], d_o, no);
        par_release(t);
    }
    char what[96];
    const char *dr = d ? " dropout" : "";
    snprintf(what, sizeof what, "documents%s hs %d: attention out", dr, hs);
    PAR_CLOSE_OUT(out, what);
    snprintf(what, sizeof what, "documents%s hs %d: attention dqkv", dr, hs);
    PAR_CLOSE_OUT(dq, what);
    snprintf(what, sizeof what, "documents%s hs %d: flash out", dr, hs);
    PAR_CLOSE_OUT(fout, what);
    snprintf(what, sizeof what, "documents%s hs %d: flash lse", dr, hs);
    PAR_CLOSE_OUT(flse, what);
    snprintf(what, sizeof what, "documents%s hs %d: flash dqkv", dr, hs);
    PAR_CLOSE_OUT(fdq, what);
    snprintf(what, sizeof what, "documents%s hs %d: flash out, keys from %d", dr, hs, k1);
    PAR_CLOSE_OUT(wout, what);
    free(qkv), free(dy);
    ParOut *o[] = {&out, &dq, &fout, &flse, &fdq, &wout};
    for (int i = 0; i < 6; i++) par_out_free(o[i]);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_documents: no usable CUDA device, skipped\n");
        return 77;
    }
    Parity t = {.rng = {20261203}, .quick = quick};
    t.be[PAR_REF] = backend_cpu_create(1, BACKEND_F32);
    t.be[PAR_DEV] = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    printf("cuda_documents: %s against %s\n", t.be[PAR_DEV]->name, t.be[PAR_REF]->name);
    check_positions(&t);
    check_attention(&t, 2, 16, NULL);
    BackendDropout d = {.key = dropout_key(3, 11, DROPOUT_SITE_ATTN_PROBS, 1),
                        .threshold = dropout_threshold(0.2), .scale = 1.0f / 0.8f,
                        .sample0 = 5, .h0 = 2, .NH = 6, .T = T};
    check_attention(&t, 2, 16, &d);
    if (!quick) check_attention(&t, 2, 64, NULL);
    backend_destroy(t.be[PAR_DEV]);
    backend_destroy(t.be[PAR_REF]);
    return test_result("cuda_documents");
}
