// tests/model/test_gpt_documents.c: --reset-position-ids with --reset-attention-mask
// (gpt_set_documents) on a whole model, one rank. A sample of 16 tokens holding two
// documents (7 tokens ending with the EOD id 49, then 9) gives each document's tokens the
// per-token losses of that document run alone at position 0 (as the first tokens of a
// sample of its own, causal attention hiding what follows), and the parameter gradients
// equal the sum of the two documents' alone (--eod-mask-loss masks the filler after a
// document: targets 49, weight 0; loss scales make every other token weigh 1). GPT-2
// (learned positions) and Llama-style (rope, grouped-query), materialised and flash
// attention; fp32 round-off (1e-5).
#include "model/gpt.h"
#include "core/check.h"
#include "tests/testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 16, LA = 7, EOD = 49, FILL = 3 };

static const GPTConfig GPT2 = {.num_layers = 2, .hidden_size = 16, .num_heads = 2,
                               .ffn_hidden_size = 64, .seq_length = T,
                               .max_position_embeddings = T, .vocab_size = 50,
                               .vocab_divisible_by = 16};
static const GPTConfig LLAMA = {.num_layers = 2, .hidden_size = 32, .num_heads = 4,
                                .ffn_hidden_size = 48, .seq_length = T,
                                .max_position_embeddings = T, .vocab_size = 50,
                                .vocab_divisible_by = 16, .untie_embeddings = 1, .rmsnorm = 1,
                                .activation = BACKEND_ACT_SWIGLU, .rope = 1,
                                .rotary_base = 10000.0, .rotary_percent = 0.5,
                                .num_query_groups = 2, .disable_bias_linear = 1};

// One run of m on tok, tgt: the unweighted per-token losses into loss (T; 0 where masked)
// and the gradients of the kept tokens' loss sum (each weighing 1) into grad (n_floats).
static void run(GPT *m, Comm *tp, const int *tok, const int *tgt, float *loss, float *grad) {
    int kept = 0;
    for (int i = 0; i < T; i++) kept += tgt[i] != EOD;
    gpt_zero_grads(m);
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    const float *l = m->slots[0].xent.loss, *w = m->mask.w;  // (T) weighted; (T) weights
    for (int i = 0; i < T; i++) loss[i] = w[i] != 0.0f ? l[i] / w[i] : 0.0f;
    gpt_backward(m, tp, 0, NULL, (float)kept / (float)T);  // weight N/kept times kept/N
    memcpy(grad, m->grad_mem, m->n_floats * sizeof(float));
}

static void expect_near(const float *got, const float *want, size_t n, double tol,
                        const char *what) {
    double scale = 1e-3, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e;
    }
    printf("  %-52s max abs %.2e, rel %.2e\n", what, worst, worst / scale);
    EXPECT(worst <= tol * scale, "%s: error %.3g > %.3g", what, worst, tol * scale);
}

static void check(Backend *be, Comm *tp, GPTConfig cfg, const char *name) {
    GPT *md = gpt_create(&cfg, be, NULL,
                         &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                     .n_slots = 1, .seed = 42, .pad_multiple = 16});
    GPT *ma = gpt_create(&cfg, be, NULL,
                         &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                     .n_slots = 1, .seed = 42, .pad_multiple = 16});
    gpt_set_documents(md, EOD, 1, 1);
    gpt_set_loss_mask(md, EOD), gpt_set_loss_mask(ma, EOD);
    int tok[T], tgt[T], ta[T], ga[T], tb[T], gb[T];
    for (int i = 0; i < T; i++) tok[i] = i == LA - 1 ? EOD : (i * 7 + 5) % 48;
    for (int i = 0; i < T; i++) tgt[i] = i + 1 < T ? tok[i + 1] : 17;
    for (int i = 0; i < T; i++) {  // each document first, then filler whose targets weigh 0
        ta[i] = i < LA ? tok[i] : FILL, ga[i] = i < LA ? tgt[i] : EOD;
        tb[i] = i < T - LA ? tok[LA + i] : FILL, gb[i] = i < T - LA ? tgt[LA + i] : EOD;
    }
    size_t n = md->n_floats;
    float ld[T], la[T], lb[T], want[T];
    float *gd = calloc(n, sizeof(float)), *g1 = calloc(n, sizeof(float));
    float *g2 = calloc(n, sizeof(float));
    run(md, tp, tok, tgt, ld, gd);
    run(ma, tp, ta, ga, la, g1);
    run(ma, tp, tb, gb, lb, g2);
    for (int i = 0; i < T; i++) want[i] = i < LA ? la[i] : lb[i - LA];
    for (size_t i = 0; i < n; i++) g1[i] += g2[i];
    char what[96];
    snprintf(what, sizeof what, "%s: per-token losses = each document alone", name);
    expect_near(ld, want, T, 1e-5, what);
    snprintf(what, sizeof what, "%s: gradients = sum of the documents alone", name);
    expect_near(gd, g1, n, 1e-5, what);
    int moved = 0;  // the flags matter: without them the second document sees the first
    gpt_forward(ma, tp, 0, tok, tgt, 0.0f);
    for (int i = LA; i < T; i++)
        moved += fabsf(ma->slots[0].xent.loss[i] / ma->mask.w[i] - ld[i]) > 1e-4f * fabsf(ld[i]);
    EXPECT(moved > 0, "%s: the same losses without the flags", name);
    free(gd), free(g1), free(g2);
    gpt_destroy(md), gpt_destroy(ma);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int self = 0;
    Comm *one = comm_mpi_create(MPI_COMM_SELF, "tp", &self, 60);
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    GPTConfig flash = GPT2, llama_flash = LLAMA;
    flash.use_flash_attn = llama_flash.use_flash_attn = 1;
    check(be, one, GPT2, "gpt-2");
    check(be, one, flash, "gpt-2 flash");
    check(be, one, LLAMA, "llama");
    check(be, one, llama_flash, "llama flash");
    backend_destroy(be);
    comm_destroy(one);
    MPI_CHECK(MPI_Finalize());
    return test_result("test_gpt_documents");
}
