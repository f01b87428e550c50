// tests/model/test_gpt_moe.c: mixture-of-experts layers (model/gpt_moe.h) on one rank.
// --moe-layer-freq's forms (an int, Megatron's list expressions) and their refusals; the
// parameter table of a mixed model (dense and MoE layers, stacked experts, the tensor ids of
// dense tensors unchanged); and the gradient of the whole objective (mean language-model loss
// + load-balancing loss + z-loss, softmax and sigmoid routers, GELU and SwiGLU experts,
// aux_loss and seq_aux_loss) against central finite differences of the same objective, for a
// few elements of every tensor, with and without a shared expert and an expert bias. Finite
// differences that change a token's choice of experts are not differentiable points:
// elements whose two probes route differently are skipped and counted (few, and never most
// of a tensor).
#include "model/gpt.h"
#include "model/gpt_moe.h"
#include "core/check.h"
#include "tests/testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void layer_freq(void) {
    GPTConfig c = {.num_layers = 8, .num_experts = 4, .moe_topk = 2};
    struct { const char *f; const char *want; } ok[] = {
        {"1", "11111111"}, {"2", "10101010"}, {"3", "10010010"}, {"", "11111111"},
        {"[0,1,0,1,1,1,0,0]", "01011100"}, {"([1]*3+[0])*2", "11101110"},
        {"[1]*2 + [0]*6", "11000000"}, {"([0]+[1])*4", "01010101"},
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "%s", ok[k].f);
        char err[200] = "", got[9] = {0};
        EXPECT(gpt_moe_check(&c, err, sizeof err) == 0, "'%s' refused: %s", ok[k].f, err);
        for (int l = 0; l < 8; l++) got[l] = (char)('0' + gpt_moe_layer(&c, l));
        EXPECT(!strcmp(got, ok[k].want), "'%s': layers %s, want %s", ok[k].f, got, ok[k].want);
    }
    struct { const char *f; const char *msg; } bad[] = {
        {"[1,0]", "has 2 entries, num-layers is 8"}, {"[0]*8", "names no layer"},
        {"0", "an interval must be >= 1"}, {"[1,2]*4", "not an int or a list"},
        {"([1]*3", "not an int or a list"}, {"[1]*x", "not an int or a list"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "%s", bad[k].f);
        char err[200] = "";
        EXPECT(gpt_moe_check(&c, err, sizeof err) == -1 && strstr(err, bad[k].msg),
               "'%s': %s (want '%s')", bad[k].f, err, bad[k].msg);
    }
    c.moe_topk = 5;
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "1");
    char err[200] = "";
    EXPECT(gpt_moe_check(&c, err, sizeof err) == -1 && strstr(err, "topk 5"), "top-k > E: %s", err);
}

static const GPTConfig BASE = {.num_layers = 2, .hidden_size = 16, .num_heads = 2,
                               .ffn_hidden_size = 32, .seq_length = 8,
                               .max_position_embeddings = 8, .vocab_size = 50,
                               .vocab_divisible_by = 16, .num_experts = 4, .moe_topk = 2,
                               .moe_ffn_hidden_size = 24, .moe_layer_freq = "[0,1]"};

// Layer 0 dense, layer 1 MoE: the dense tensors keep their names and ids; the MoE layer has
// the router (E, C) and stacked experts, no dense MLP.
static void table(Backend *be) {
    GPTConfig dense = BASE;
    dense.num_experts = 0;
    GPT *d = gpt_create(&dense, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                    .n_slots = 1, .seed = 5, .pad_multiple = 16});
    GPT *m = gpt_create(&BASE, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                    .n_slots = 1, .seed = 5, .pad_multiple = 16});
    int r = gpt_param_index(m, "layers.1.mlp.router.weight");
    int fc = gpt_param_index(m, "layers.1.mlp.experts.fc.weight");
    int pr = gpt_param_index(m, "layers.1.mlp.experts.proj.weight");
    EXPECT(r >= 0 && m->params[r].rows == 4 && m->params[r].cols == 16, "router (4, 16)");
    EXPECT(fc >= 0 && m->params[fc].rows == 4 * 24 && m->params[fc].cols == 16, "experts fc (96, 16)");
    EXPECT(pr >= 0 && m->params[pr].rows == 4 * 16 && m->params[pr].cols == 24, "experts proj (64, 24)");
    EXPECT(gpt_param_index(m, "layers.1.mlp.fc.weight") < 0 && gpt_param_index(m, "layers.0.mlp.fc.weight") >= 0,
           "the dense MLP only in layer 0");
    EXPECT(m->w.blocks[1].routerw && !m->w.blocks[0].routerw, "router view in the MoE layer only");
    EXPECT(m->block_param[2] - m->block_param[1] == 13 && m->block_param[1] - m->block_param[0] == 12,
           "tensors per layer: 12 dense, 13 MoE (got %d, %d)", m->block_param[1] - m->block_param[0],
           m->block_param[2] - m->block_param[1]);
    for (int i = 0; i < d->n_params; i++) {  // the tensors both have: same id, same values
        int j = gpt_param_index(m, d->params[i].name);
        if (j < 0) continue;
        EXPECT(d->params[i].tensor_id == m->params[j].tensor_id, "%s: id", d->params[i].name);
        EXPECT(!memcmp(d->param_mem + d->params[i].offset, m->param_mem + m->params[j].offset,
                       d->params[i].numel * sizeof(float)), "%s: values", d->params[i].name);
    }
    gpt_destroy(d);
    gpt_destroy(m);
    GPTConfig sc = BASE;  // a shared expert: 4 more tensors (ids 17..20) in the MoE layer only
    sc.moe_shared_ffn = 20;
    sc.activation = BACKEND_ACT_SWIGLU;
    m = gpt_create(&sc, be, NULL,
                   &(GPTStage){.n_stages = 1, .micro_batch = 1,
                               .n_slots = 1, .seed = 5, .pad_multiple = 16});
    const char *names[4] = {"fc.weight", "fc.bias", "proj.weight", "proj.bias"};
    int rows[4] = {40, 40, 16, 16}, cols[4] = {16, 1, 20, 1};
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "layers.1.mlp.shared.%s", names[k]);
        int i = gpt_param_index(m, name);
        EXPECT(i >= 0 && m->params[i].rows == rows[k] && m->params[i].cols == cols[k] &&
               m->params[i].tensor_id == 64u + 64u + 17u + (unsigned)k, "%s (%d, %d), id %u", name,
               rows[k], cols[k], 64u + 64u + 17u + (unsigned)k);
        snprintf(name, sizeof name, "layers.0.mlp.shared.%s", names[k]);
        EXPECT(gpt_param_index(m, name) < 0, "no shared expert in the dense layer 0");
    }
    int sf = gpt_param_index(m, "layers.1.mlp.shared.fc.weight");
    EXPECT(m->params[sf].shard == SHARD_GLU && m->params[sf].sections[0] == 20, "SwiGLU sections of Fs");
    const GPTBlockW *w = &m->w.blocks[1];
    EXPECT(w->sfcw && w->sfcb && w->sfcprojw && w->sfcprojb && w->fcw && w->routerw &&
           !m->w.blocks[0].sfcw, "shared-expert views in the MoE layer only");
    EXPECT((char *)w->sfcw == (char *)m->param_copy + m->params[sf].offset * sizeof(float),
           "the shared fc view is its tensor");
    gpt_destroy(m);
}

// The objective: mean lm loss + the MoE layers' load-balancing and z losses (read from the
// step statistics after a backward with loss scale 1/N, so aux_scale = 1).
static double objective(GPT *m, Comm *tp, const int *tok, const int *tgt, unsigned *route_sig) {
    gpt_moe_stats_reset(m);
    gpt_zero_grads(m);
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    double lm = gpt_loss_sum(m, 0) / m->N;
    gpt_backward(m, tp, 0, NULL, 1.0f / m->N);
    struct GPTMoE *s = m->moe;
    double extra = 0;
    for (int l = 0; l < m->n_layers; l++) extra += s->lb_loss[l] + s->z_loss[l];
    unsigned h = 2166136261u;  // the routing (chosen experts) of every MoE layer
    for (int l = 0; l < m->n_layers; l++) {
        const GPTMoEActs *x = &m->slots[0].layers[l].moe;
        for (int i = 0; x->idx && i < m->N * m->cfg.moe_topk; i++)  // experts and kept slots
            h = (((h ^ (unsigned)x->idx[i]) * 16777619u) ^ (unsigned)(x->slot[i] >= 0)) * 16777619u;
    }
    *route_sig = h;
    return lm + extra;
}

// bias: (num_layers, E) expert bias to route with (cfg.moe_expert_bias), or NULL.
static void gradcheck(Backend *be, Comm *tp, GPTConfig cfg, const char *what, const float *bias) {
    GPT *m = gpt_create(&cfg, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    if (bias) gpt_moe_set_bias(m, bias);
    int tok[16], tgt[16];
    for (int i = 0; i < 16; i++) { tok[i] = (i * 7 + 3) % 50; tgt[i] = (i * 11 + 5) % 50; }
    for (int i = 0; i < m->n_params; i++)  // non-trivial biases and norms
        if (m->params[i].norm_param || m->params[i].init == INIT_ZERO)
            for (size_t j = 0; j < m->params[i].numel; j++)
                m->param_mem[m->params[i].offset + j] += 0.05f * (float)((int)(j * 37 % 11) - 5);
    int r = gpt_param_index(m, "layers.1.mlp.router.weight");  // a router that matters
    for (size_t j = 0; j < m->params[r].numel; j++) m->param_mem[m->params[r].offset + j] *= 20.0f;
    unsigned sig0, sp, sm;
    objective(m, tp, tok, tgt, &sig0);
    float *an = malloc(m->n_floats * sizeof(float));
    memcpy(an, m->grad_mem, m->n_floats * sizeof(float));
    double worst = 0;
    int checked = 0, skipped = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        for (int k = 0; k < 4; k++) {
            size_t j = p->offset + (size_t)((k * 7919u + 13u * k) % p->numel);
            if (p->shard == SHARD_VOCAB) j = p->offset + (size_t)(tok[k] * cfg.hidden_size + k);
            float keep = m->param_mem[j];
            const float h = 1e-2f;
            m->param_mem[j] = keep + h;
            double lp = objective(m, tp, tok, tgt, &sp);
            m->param_mem[j] = keep - h;
            double lm = objective(m, tp, tok, tgt, &sm);
            m->param_mem[j] = keep;
            if (sp != sig0 || sm != sig0) {  // a choice flipped: not differentiable here
                skipped++;
                continue;
            }
            double fd = (lp - lm) / (2.0 * h), g = an[j];
            double err = fabs(fd - g) / fmax(2e-3, fabs(fd) + fabs(g));
            if (err > worst) worst = err;
            EXPECT(err < 5e-2, "%s %s[%zu]: analytic %.6g, finite difference %.6g", what, p->name,
                   j - p->offset, g, fd);
            checked++;
        }
    }
    EXPECT(checked > 3 * skipped, "%s: %d checked, %d skipped", what, checked, skipped);
    printf("moe gradcheck (%s): %d elements of %d tensors (%d skipped: routing flips), worst relative error %.3g\n",
           what, checked, m->n_params, skipped, worst);
    free(an);
    gpt_destroy(m);
}

// --moe-expert-capacity-factor: every expert keeps at most ceil(n K / E x factor) entries;
// by probs the kept ones outweigh the dropped ones (ties: the earlier kept), by position the
// earliest are kept; a dropped (token, choice) has slot -1 and counts in x->dropped; with
// padding every expert runs exactly its capacity and the loss equals the unpadded one.
static double capacity_run(Backend *be, Comm *tp, int position, int pad, int *dropped_out) {
    GPTConfig c = BASE;
    c.moe_capacity = 0.5;
    c.moe_drop_position = position;
    c.moe_pad_capacity = pad;
    GPT *m = gpt_create(&c, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    int tok[16], tgt[16];
    for (int i = 0; i < 16; i++) { tok[i] = (i * 7 + 3) % 50; tgt[i] = (i * 11 + 5) % 50; }
    int r = gpt_param_index(m, "layers.1.mlp.router.weight");
    for (size_t j = 0; j < m->params[r].numel; j++) m->param_mem[m->params[r].offset + j] *= 20.0f;
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    const GPTMoEActs *x = &m->slots[0].layers[1].moe;
    int n = m->N, K = c.moe_topk, E = c.num_experts, cap = gpt_moe_capacity(&c, n), kept = 0;
    EXPECT(cap == 4, "capacity ceil(16 x 2 / 4 x 0.5) = 4, got %d", cap);
    for (int e = 0; e < E; e++) {
        EXPECT(pad ? x->counts[e] == cap : x->counts[e] <= cap, "expert %d: %d rows", e, x->counts[e]);
        float min_kept = 2.0f, max_dropped = -1.0f;
        int last_kept = -1, first_dropped = n * K;
        for (int i = 0; i < n * K; i++) {
            if (x->idx[i] != e) continue;
            if (x->slot[i] >= 0) {
                kept++;
                min_kept = fminf(min_kept, x->probs[i]);
                last_kept = i;
            } else {
                max_dropped = fmaxf(max_dropped, x->probs[i]);
                if (i < first_dropped) first_dropped = i;
            }
        }
        if (position) EXPECT(max_dropped < 0 || last_kept < first_dropped, "expert %d: position order", e);
        else EXPECT(min_kept >= max_dropped, "expert %d: kept %g < dropped %g", e, min_kept, max_dropped);
    }
    EXPECT(kept + x->dropped == n * K && x->dropped > 0, "kept %d + dropped %d = %d", kept, x->dropped, n * K);
    *dropped_out = x->dropped;
    double loss = gpt_loss_sum(m, 0) / m->N;
    gpt_destroy(m);
    return loss;
}

static void capacity(Backend *be, Comm *tp) {
    int d0, d1, d2;
    double probs = capacity_run(be, tp, 0, 0, &d0), padded = capacity_run(be, tp, 0, 1, &d1);
    double position = capacity_run(be, tp, 1, 0, &d2);
    EXPECT(fabs(probs - padded) <= 1e-6 * fabs(probs) && d0 == d1, "padded loss %.9g vs %.9g", padded, probs);
    EXPECT(probs != position, "the drop policies keep other entries");
    printf("capacity 0.5: %d of 32 entries dropped (probs), %d (position); padded loss equal\n", d0, d2);
}

// --moe-router-enable-expert-bias: the update rule (sign of mean - tokens, 0 at the mean);
// a bias moves the choice (a large one on expert 3 draws every token to it) while the
// weights keep their formula, the chosen sigmoids over their sum without the bias.
static void expert_bias(Backend *be, Comm *tp) {
    float b[4] = {0.5f, 0.0f, 0.0f, 0.0f};
    double tokens[4] = {5, 1, 3, 3};
    gpt_moe_bias_step(b, tokens, 4, 1e-3);
    EXPECT(b[0] == 0.5f - 1e-3f && b[1] == 1e-3f && b[2] == 0.0f && b[3] == 0.0f,
           "bias step: %g %g %g %g", b[0], b[1], b[2], b[3]);
    GPTConfig c = BASE;
    c.moe_sigmoid = 1;
    c.moe_expert_bias = 1;
    c.moe_bias_rate = 1e-3;
    GPT *m = gpt_create(&c, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = 16});
    int tok[16], tgt[16], n = m->N, K = c.moe_topk;
    for (int i = 0; i < 16; i++) { tok[i] = (i * 7 + 3) % 50; tgt[i] = (i * 11 + 5) % 50; }
    float bias[2 * 4] = {0};
    bias[4 + 3] = 10.0f;  // layer 1, expert 3
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    const GPTMoEActs *x = &m->slots[0].layers[1].moe;
    int before = 0;
    for (int t = 0; t < n; t++) before += x->idx[t * K] == 3 || x->idx[t * K + 1] == 3;
    gpt_moe_set_bias(m, bias);
    gpt_forward(m, tp, 0, tok, tgt, 0.0f);
    int on3 = 0;
    double worst = 0;
    for (int t = 0; t < n; t++) {
        on3 += x->idx[t * K] == 3;  // first choice: the biased expert
        double s0 = 1 / (1 + exp(-x->logits[t * 4 + x->idx[t * K]]));
        double s1 = 1 / (1 + exp(-x->logits[t * 4 + x->idx[t * K + 1]]));
        worst = fmax(worst, fabs(x->probs[t * K] - s0 / (s0 + s1)));
        worst = fmax(worst, fabs(x->probs[t * K + 1] - s1 / (s0 + s1)));
    }
    EXPECT(on3 == n && before < n, "expert 3 first for %d of %d tokens (without the bias: %d)", on3, n, before);
    EXPECT(worst < 1e-6, "weights without the bias: worst difference %g", worst);
    printf("expert bias: expert 3 chosen by %d of %d tokens without it, %d with it; weights' formula "
           "unchanged (worst %.2g)\n", before, n, on3, worst);
    gpt_destroy(m);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int self = 0;
    Comm *one = comm_mpi_create(MPI_COMM_SELF, "tp", &self, 60);
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    layer_freq();
    table(be);
    capacity(be, one);
    GPTConfig c = BASE;
    gradcheck(be, one, c, "softmax, no balancing loss", NULL);
    c.moe_aux_coeff = 0.3;
    c.moe_z_coeff = 0.05;
    gradcheck(be, one, c, "softmax, aux_loss + z-loss", NULL);
    c.moe_load_balancing = GPT_MOE_LB_SEQ_AUX;
    c.moe_pre_softmax = 1;
    gradcheck(be, one, c, "pre-softmax, seq_aux_loss + z-loss", NULL);
    c = BASE;
    c.moe_sigmoid = 1;
    c.moe_topk_scaling = 2.0;
    c.moe_aux_coeff = 0.3;
    c.activation = BACKEND_ACT_SWIGLU;
    c.disable_bias_linear = 1;
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "1");
    gradcheck(be, one, c, "sigmoid, scaling 2, SwiGLU experts, every layer", NULL);
    c = BASE;
    c.moe_capacity = 0.75;
    c.moe_aux_coeff = 0.3;
    gradcheck(be, one, c, "capacity 0.75 (drops), aux_loss", NULL);
    c = BASE;  // a shared expert (GELU), and SwiGLU in every layer without biases
    c.moe_shared_ffn = 20;
    c.moe_aux_coeff = 0.3;
    gradcheck(be, one, c, "shared expert, aux_loss", NULL);
    c.activation = BACKEND_ACT_SWIGLU;
    c.disable_bias_linear = 1;
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "1");
    gradcheck(be, one, c, "shared expert, SwiGLU, every layer", NULL);
    expert_bias(be, one);
    c = BASE;  // routing with an expert bias: the gradient follows the biased choice
    c.moe_sigmoid = 1;
    c.moe_expert_bias = 1;
    c.moe_aux_coeff = 0.3;
    float bias[2 * 4] = {0.0f, 0.0f, 0.0f, 0.0f, 0.02f, -0.01f, 0.0f, 0.03f};
    gradcheck(be, one, c, "sigmoid with an expert bias, aux_loss", bias);
    backend_destroy(be);
    comm_destroy(one);
    MPI_CHECK(MPI_Finalize());
    return test_result("test_gpt_moe");
}
