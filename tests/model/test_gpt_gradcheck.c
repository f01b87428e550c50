// tests/model/test_gpt_gradcheck.c: whole-model gradient check on a tiny GPT (one rank).
// For a few elements of every parameter tensor, the analytic gradient of the mean loss
// equals the central finite difference (L(p + h) - L(p - h)) / 2h of the forward pass.
// Also: initialisation is layout-independent (TP = 2 shards equal slices of TP = 1). Both for
// GPT-2 and a Llama-style model (RMSNorm, SwiGLU, rope on half of each head, 4 query heads in
// 2 kv groups, no biases, untied output layer). And the FLOPs count of both. With dropout
// (hidden and attention 0.2, materialised and fused attention) the same check: the masks
// are a function of (seed, iteration, sample, indices), so the finite differences see the
// same masks as the backward; the loss differs from the one without dropout. With
// --eod-mask-loss (targets equal to id 49 masked): the loss is the mean of the unmasked
// tokens' losses of an unmasked forward, and the gradient check holds for that loss. With
// --kv-channels (a head size other than C / NH: attention on NH hs channels) the same checks.
// With --apply-layernorm-1p (zero-centred norm weights): the same checks, and at
// initialisation (w = 0, so 1 + w = 1) the loss is bitwise the standard model's. In each
// check, the fused classifier (the forward given the loss scale) gives the losses and
// gradients of the unfused forward + backward bitwise.
#include "model/gpt.h"
#include "core/check.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

static double loss_of(GPT *m, Comm *tp, const int *tok, const int *tgt) {
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    return gpt_loss_sum(m, 0) / m->N;
}

static const GPTConfig GPT2 = {.num_layers = 2, .hidden_size = 16, .num_heads = 2,
                               .ffn_hidden_size = 64, .seq_length = 8,
                               .max_position_embeddings = 8, .vocab_size = 50,
                               .vocab_divisible_by = 16};
static const GPTConfig LLAMA = {.num_layers = 2, .hidden_size = 32, .num_heads = 4,
                                .ffn_hidden_size = 48, .seq_length = 8,
                                .max_position_embeddings = 8, .vocab_size = 50,
                                .vocab_divisible_by = 16, .untie_embeddings = 1, .rmsnorm = 1,
                                .activation = BACKEND_ACT_SWIGLU, .rope = 1, .rotary_base = 10000.0,
                                .rotary_percent = 0.5, .num_query_groups = 2,
                                .disable_bias_linear = 1};

// --eod-mask-loss with id 49 on targets 0, 4, 8, 12 (set to it): the masked loss equals the
// mean of the other tokens' losses of an unmasked forward.
static void set_eod_mask(GPT *m, Comm *tp, const int *tok, int *tgt) {
    for (int i = 0; i < 16; i += 4) tgt[i] = 49;
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    const float *loss = m->slots[0].xent.loss;  // (N) per-token losses (CPU: host memory)
    double kept = 0;
    for (int i = 0; i < 16; i++) kept += tgt[i] != 49 ? loss[i] : 0.0;
    gpt_set_loss_mask(m, 49);
    double masked = loss_of(m, tp, tok, tgt), want = kept / 12;
    EXPECT(fabs(masked - want) < 1e-6 * fabs(want), "masked loss %.9g, mean of the 12 others %.9g", masked, want);
}

// The fused classifier (gpt_forward given the loss scale: d(logits) written in its pass)
// gives the losses and gradients of the forward-then-backward path just run, bitwise.
static void fused_is_same_bits(GPT *m, Comm *tp, const int *tok, const int *tgt) {
    size_t n = m->n_alloc;
    float *want = malloc(n * sizeof(float)), loss[16];
    memcpy(want, m->grad_mem, n * sizeof(float));
    memcpy(loss, m->slots[0].xent.loss, sizeof loss);  // (N = 16) CPU: host memory
    gpt_zero_grads(m);
    gpt_forward(m, tp, 0, tok, tgt, 1.0f / m->N);
    EXPECT(m->slots[0].dlogits_scale == 1.0f / m->N, "the forward wrote no d(logits)");
    gpt_backward(m, tp, 0, NULL, 1.0f / m->N);
    EXPECT(!memcmp(loss, m->slots[0].xent.loss, sizeof loss), "fused classifier: losses differ");
    EXPECT(!memcmp(want, m->grad_mem, n * sizeof(float)), "fused classifier: gradients differ");
    free(want);
}

static void gradcheck(Backend *be, Comm *tp, GPTConfig cfg, float p, int eod_mask) {
    GPT *m = gpt_create(&cfg, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    int tok[16], tgt[16];
    for (int i = 0; i < 16; i++) { tok[i] = (i * 7 + 3) % 50; tgt[i] = (i * 11 + 5) % 50; }
    if (eod_mask) set_eod_mask(m, tp, tok, tgt);
    // Make the LayerNorm weights and biases non-trivial so their gradients are exercised.
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].norm_param || m->params[i].init == INIT_ZERO)
            for (size_t j = 0; j < m->params[i].numel; j++)
                m->param_mem[m->params[i].offset + j] += 0.05f * (float)((int)(j * 37 % 11) - 5);
    if (p > 0) {  // step 3, the micro-batch starting at sample 2 of the global batch
        double plain = loss_of(m, tp, tok, tgt);
        gpt_set_dropout(m, p, p, 9);
        gpt_dropout_step(m, 3, 1);
        gpt_set_micro_sample(m, 0, 2);
        double dropped = loss_of(m, tp, tok, tgt);
        EXPECT(fabs(dropped - plain) > 1e-4, "dropout changes the loss: %.9g vs %.9g", dropped, plain);
    }
    gpt_zero_grads(m);
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    gpt_backward(m, tp, 0, NULL, 1.0f / m->N);
    fused_is_same_bits(m, tp, tok, tgt);
    double worst = 0;
    int checked = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        for (int k = 0; k < 3; k++) {
            size_t j = p->offset + (size_t)(k * 7919u % p->numel);
            if (p->shard == SHARD_VOCAB) j = p->offset + (size_t)(tok[k] * cfg.hidden_size + k);
            // Central differences at h and h / 2, extrapolated (Richardson): their h^2 error
            // terms cancel. One step of h alone missed by 0.12 where the loss curves sharply
            // (an embedding row also used as the LM head, std 0.02 against h 0.01).
            float keep = m->param_mem[j];
            double d[2];
            for (int r = 0; r < 2; r++) {
                const float h = r ? 5e-3f : 1e-2f;
                m->param_mem[j] = keep + h;
                double lp = loss_of(m, tp, tok, tgt);
                m->param_mem[j] = keep - h;
                double lm = loss_of(m, tp, tok, tgt);
                m->param_mem[j] = keep;
                d[r] = (lp - lm) / (2.0 * (double)h);
            }
            double fd = (4.0 * d[1] - d[0]) / 3.0, an = m->grad_mem[j];
            double err = fabs(fd - an) / fmax(2e-3, fabs(fd) + fabs(an));
            if (err > worst) worst = err;
            EXPECT(err < 5e-2, "%s[%zu]: analytic %.6g, finite difference %.6g", p->name,
                   j - p->offset, an, fd);
            checked++;
        }
    }
    printf("gradcheck (%s%s%s%s%s, dropout %g): %d elements of %d tensors, worst relative error %.3g\n",
           cfg.activation == BACKEND_ACT_SWIGLU  ? "llama-style"
           : cfg.activation == BACKEND_ACT_RELU2 ? "squared relu"
                                                 : "gpt-2",
           cfg.kv_channels ? ", --kv-channels" : "", cfg.layernorm_1p ? ", --apply-layernorm-1p" : "", cfg.use_flash_attn ? ", flash" : "", eod_mask ? ", --eod-mask-loss" : "", p, checked,
           m->n_params, worst);
    gpt_destroy(m);
}

// Every shard of a TP = 2 model equals the matching slice of the TP = 1 model.
static void init_is_layout_independent(Backend *be, GPTConfig cfg) {
    GPT *full = gpt_create(&cfg, be, NULL,
                           &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                       .n_slots = 1, .seed = 7, .pad_multiple = 16});
    for (int r = 0; r < 2; r++) {
        ProcessGrid g = {.dims = {.world_size = 2, .tp = 2, .cp = 1, .dp = 1, .pp = 1, .ep = 1, .etp = 2},
                         .coord = {.rank = r, .tp_rank = r}};  // TP rank r (no Comms)
        GPT *sh = gpt_create(&cfg, be, &g,
                             &(GPTStage){.stage = 1, .n_stages = 2, .micro_batch = 1,
                                         .n_slots = 1, .seed = 7, .pad_multiple = 16});  // last stage of PP = 2
        for (int i = 0; i < sh->n_params; i++) {
            const ParamInfo *p = &sh->params[i];
            const ParamInfo *q = &full->params[gpt_param_index(full, p->name)];
            ParamSlice s[3];
            int n = gpt_param_slices(p, 2, r, s);
            for (int k = 0; k < n; k++)
                for (int y = 0; y < s[k].nrows; y++)
                    for (int x = 0; x < s[k].ncols; x++) {
                        float a = sh->param_mem[p->offset + (size_t)(s[k].local_row0 + y) * p->local_cols + x];
                        float b = full->param_mem[q->offset + (size_t)(s[k].row0 + y) * q->local_cols + s[k].col0 + x];
                        EXPECT(a == b, "%s tp rank %d (%d,%d): %g != %g", p->name, r, y, x, a, b);
                    }
        }
        gpt_destroy(sh);
    }
    gpt_destroy(full);
}

// --apply-layernorm-1p at initialisation: its norm weights are 0 and the norms use 1 + 0 = 1,
// the standard model's are 1 and every other tensor is the same, so the losses are bitwise equal.
static void layernorm_1p_init(Backend *be, Comm *tp, GPTConfig cfg) {
    GPTConfig one_p = cfg;
    one_p.layernorm_1p = 1;
    GPT *a = gpt_create(&cfg, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    GPT *b = gpt_create(&one_p, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    int tok[16], tgt[16], zeros = 0;
    for (int i = 0; i < 16; i++) { tok[i] = (i * 5 + 1) % 50; tgt[i] = (i * 3 + 2) % 50; }
    for (int i = 0; i < b->n_params; i++)
        if (b->params[i].norm_param && strstr(b->params[i].name, "weight"))
            for (size_t j = 0; j < b->params[i].numel; j++) zeros += b->param_mem[b->params[i].offset + j] == 0.0f;
    double la = loss_of(a, tp, tok, tgt), lb = loss_of(b, tp, tok, tgt);
    EXPECT(la == lb, "--apply-layernorm-1p at init: loss %.9g, standard %.9g", lb, la);
    EXPECT(zeros == (2 * cfg.num_layers + 1) * cfg.hidden_size, "1p norm weights at 0: %d", zeros);
    gpt_destroy(a);
    gpt_destroy(b);
}

// gpt_flops_per_iteration against a GEMM-by-GEMM count (3 passes x 2 FLOPs per multiply-add):
// per token and layer QKV C (NH + 2G) hs, projection C NH hs, fc C F (2 C F with SwiGLU), proj
// F C, attention 2 T NH hs; the output layer C Vp.
static void flops_count(GPTConfig c) {
    double C = c.hidden_size, T = c.seq_length, L = c.num_layers, F = c.ffn_hidden_size, Vp = 64;
    double hs = c.kv_channels ? c.kv_channels : C / c.num_heads, G = gpt_kv_heads(&c), B = 3;
    double A = c.num_heads * hs;
    double per = C * (c.num_heads + 2 * G) * hs + C * A + (backend_act_gated(c.activation) ? 2 : 1) * C * F + F * C + 2 * T * A;
    double want = 6.0 * B * T * (L * per + C * Vp);
    double got = gpt_flops_per_iteration(&c, 64, 3);
    EXPECT(fabs(got - want) <= 1e-12 * want, "FLOPs %s: %.17g, GEMM count %.17g",
           c.activation == BACKEND_ACT_SWIGLU ? "llama-style" : "gpt-2", got, want);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int self = 0;
    Comm *one = comm_mpi_create(MPI_COMM_SELF, "tp", &self, 60);
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    gradcheck(be, one, GPT2, 0, 0);
    gradcheck(be, one, LLAMA, 0, 0);
    gradcheck(be, one, GPT2, 0, 1);
    gradcheck(be, one, LLAMA, 0.2f, 1);
    GPTConfig flash = GPT2, llama_flash = LLAMA;
    flash.use_flash_attn = llama_flash.use_flash_attn = 1;
    gradcheck(be, one, GPT2, 0.2f, 0);
    gradcheck(be, one, flash, 0.2f, 0);
    gradcheck(be, one, llama_flash, 0.2f, 0);
    GPTConfig relu2 = GPT2;  // --squared-relu
    relu2.activation = BACKEND_ACT_RELU2;
    gradcheck(be, one, relu2, 0, 0);
    gradcheck(be, one, relu2, 0.2f, 0);
    GPTConfig kv = GPT2, llama_kv = LLAMA;  // --kv-channels: NH hs = 24 != C = 16; 48 != 32
    kv.kv_channels = 12;
    llama_kv.kv_channels = 12;
    gradcheck(be, one, kv, 0, 0);
    gradcheck(be, one, llama_kv, 0.2f, 1);
    llama_kv.use_flash_attn = 1;
    gradcheck(be, one, llama_kv, 0.2f, 0);
    GPTConfig one_p = GPT2, llama_1p = LLAMA;  // --apply-layernorm-1p
    one_p.layernorm_1p = llama_1p.layernorm_1p = 1;
    gradcheck(be, one, one_p, 0, 0);
    gradcheck(be, one, llama_1p, 0.2f, 1);
    layernorm_1p_init(be, one, GPT2);
    layernorm_1p_init(be, one, LLAMA);
    init_is_layout_independent(be, GPT2);
    init_is_layout_independent(be, LLAMA);
    init_is_layout_independent(be, kv);
    init_is_layout_independent(be, llama_kv);
    flops_count(GPT2);
    flops_count(LLAMA);
    flops_count(kv);
    flops_count(llama_kv);
    backend_destroy(be);
    comm_destroy(one);
    MPI_CHECK(MPI_Finalize());
    return test_result("test_gpt_gradcheck");
}
