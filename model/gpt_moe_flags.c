// model/gpt_moe_flags.c: the mixture-of-experts flags (Megatron-LM's names and defaults), a
// part of the model's shared flag table (gpt_flags.h).
#include "gpt_flags.h"
#include "core/check.h"  // defines: core_usage_error
#include "layers/moe.h"  // defines: MoEDispatcherType

#include <stdio.h>
#include <string.h>

void gpt_moe_flags_init(GPTConfig *m, GPTFlagText *t) {
    m->moe_topk = 2;  // Megatron's defaults
    m->moe_load_balancing = GPT_MOE_LB_AUX;
    t->moe_score = "softmax";
    t->moe_lb = "aux_loss";
    t->moe_dispatcher = "allgather";
    t->moe_layer_freq = "1";
    t->moe_bias_rate = 1e-3;
    t->moe_drop_policy = "probs";
    t->ep = 1;
    t->etp = 0;  // Megatron's default: TP
}

int gpt_moe_flags_specs(ArgSpec *specs, GPTConfig *m, GPTFlagText *t) {
    const ArgSpec table[GPT_MOE_FLAGS_N] = {
        {"--num-experts", ARG_INT, &m->num_experts, "mixture of experts: E experts in the layers --moe-layer-freq names (0: dense MLPs)"},
        {"--moe-router-topk", ARG_INT, &m->moe_topk, "experts per token K (2)"},
        {"--moe-ffn-hidden-size", ARG_INT, &m->moe_ffn_hidden_size, "each expert's MLP hidden size (0: --ffn-hidden-size)"},
        {"--moe-layer-freq", ARG_STR, &t->moe_layer_freq, "which layers are MoE: an int N (every N-th, from layer 0) or a list of 0/1 per layer such as '([1]*3+[0])*2' (1: all)"},
        {"--moe-router-score-function", ARG_STR, &t->moe_score, "softmax (default) | sigmoid"},
        {"--moe-router-pre-softmax", ARG_BOOL, &m->moe_pre_softmax, "softmax over all experts before the top-k (default: softmax over the K chosen logits); no effect with --moe-router-score-function sigmoid (a notice; Megatron ignores it there)"},
        {"--moe-router-topk-scaling-factor", ARG_FLOAT, &m->moe_topk_scaling, "scale the routing weights by this (0: none)"},
        {"--moe-router-load-balancing-type", ARG_STR, &t->moe_lb, "aux_loss (default, per micro-batch) | seq_aux_loss (per sequence) | none"},
        {"--moe-aux-loss-coeff", ARG_FLOAT, &m->moe_aux_coeff, "weight of the load-balancing loss (0)"},
        {"--moe-z-loss-coeff", ARG_FLOAT, &m->moe_z_coeff, "weight of the router z-loss (0: none)"},
        {"--moe-token-dispatcher-type", ARG_STR, &t->moe_dispatcher, "allgather (default): at EP > 1 every rank of the ep group gathers the group's tokens and routing, keeps the rows of its own experts, and the outputs return by a reduce-scatter | alltoall: each row goes only to the rank of its expert and back (all-to-all with per-rank counts); the same losses (bitwise); EP 1: the tokens stay on their rank either way | flex: Megatron's DeepEP / HybridEP dispatcher, run here as alltoall (a notice)"},
        {"--moe-grouped-gemm", ARG_BOOL, &t->moe_grouped_gemm, "the local experts' products as grouped GEMMs (Megatron's GroupedMLP): fc, then proj, of every local expert in one call each, rows sorted by local expert (CPU: one expert per thread, largest first; CUDA: cuBLAS grouped GEMM); without it one GEMM pair per expert in turn (SequentialMLP). The same math; the bits may differ"},
        {"--moe-shared-expert-intermediate-size", ARG_INT, &m->moe_shared_ffn, "one shared expert per MoE layer: a dense MLP of this hidden size on every token, added to the routed experts' output (0: none)"},
        {"--moe-shared-expert-gate", ARG_BOOL, &t->moe_shared_gate, "a sigmoid gate on the shared expert (not implemented: refused)"},
        {"--moe-router-enable-expert-bias", ARG_BOOL, &t->moe_expert_bias, "aux-loss-free balancing (DeepSeek-V3): a per-layer expert bias added to the scores for the choice only, moved after each step by the bias update rate towards balance (sigmoid score function only)"},
        {"--moe-router-bias-update-rate", ARG_FLOAT, &t->moe_bias_rate, "with --moe-router-enable-expert-bias: bias += rate x sign(mean - tokens) per expert after each step (1e-3)"},
        {"--moe-expert-capacity-factor", ARG_FLOAT, &t->moe_capacity, "each expert takes at most ceil(factor x tokens x K / E) of a micro-batch's (token, choice) rows, the rest dropped (0: dropless, the default); not with --sequence-parallel or CP > 1 yet"},
        {"--moe-token-drop-policy", ARG_STR, &t->moe_drop_policy, "with a capacity factor: probs | position"},
        {"--moe-pad-expert-input-to-capacity", ARG_BOOL, &t->moe_pad, "with a capacity factor: every expert runs exactly its capacity of rows (padding rows weigh 0)"},
        {"--expert-model-parallel-size", ARG_INT, &t->ep, "EP: the data-parallel ranks that split each MoE layer's experts, E/EP each; tokens reach them as --moe-token-dispatcher-type says (1: every rank holds all)"},
        {"--expert-tensor-parallel-size", ARG_INT, &t->etp, "ETP (default: TP, as Megatron): TP = the experts replicated over TP, each TP rank routing its own rows, EP groups across DP x CP; 1 with EP > 1 and TP > 1 (needs --sequence-parallel): EP groups across TP too, as Megatron's; megac never splits an expert over TP"},
    };
    memcpy(specs, table, sizeof table);
    return GPT_MOE_FLAGS_N;
}

// A line on rank 0's standard output: "megac train: notice: MSG".
static void notice(const char *msg) {
    if (core_world_rank() <= 0) printf("megac train: notice: %s\n", msg);
}

void gpt_moe_flags_finish(GPTConfig *m, const GPTFlagText *t) {
    const char *sc = t->moe_score, *lb = t->moe_lb, *d = t->moe_dispatcher;
    if (strcmp(sc, "softmax") && strcmp(sc, "sigmoid"))
        core_usage_error("--moe-router-score-function must be softmax or sigmoid, got '%s'", sc);
    m->moe_sigmoid = !strcmp(sc, "sigmoid");
    if (m->moe_sigmoid && m->moe_pre_softmax) {  // Megatron's sigmoid router never reads it
        notice("--moe-router-pre-softmax has no effect with --moe-router-score-function sigmoid "
               "(as in Megatron)");
        m->moe_pre_softmax = 0;
    }
    if (!strcmp(lb, "aux_loss")) m->moe_load_balancing = GPT_MOE_LB_AUX;
    else if (!strcmp(lb, "seq_aux_loss")) m->moe_load_balancing = GPT_MOE_LB_SEQ_AUX;
    else if (!strcmp(lb, "none")) m->moe_load_balancing = GPT_MOE_LB_NONE;
    else core_usage_error("--moe-router-load-balancing-type must be aux_loss, seq_aux_loss or none, got '%s'", lb);
    if (strcmp(d, "allgather") && strcmp(d, "alltoall") && strcmp(d, "flex"))
        core_usage_error("--moe-token-dispatcher-type must be allgather, alltoall or flex, got '%s'", d);
    if (!strcmp(d, "flex"))
        notice("--moe-token-dispatcher-type flex: megac has no DeepEP / HybridEP and dispatches "
               "with alltoall (the same routing, experts and results)");
    m->moe_dispatcher = strcmp(d, "allgather") ? MOE_DISPATCH_ALLTOALL : MOE_DISPATCH_ALLGATHER;
    m->moe_grouped_gemm = t->moe_grouped_gemm;
    if (strlen(t->moe_layer_freq) >= sizeof m->moe_layer_freq)
        core_usage_error("--moe-layer-freq is longer than %zu characters", sizeof m->moe_layer_freq - 1);
    snprintf(m->moe_layer_freq, sizeof m->moe_layer_freq, "%s", t->moe_layer_freq);
    if (m->moe_shared_ffn < 0)
        core_usage_error("--moe-shared-expert-intermediate-size must be >= 0, got %d", m->moe_shared_ffn);
    if (m->num_experts == 0 && m->moe_shared_ffn)
        core_usage_error("--moe-shared-expert-intermediate-size %d needs --num-experts", m->moe_shared_ffn);
    if (t->moe_shared_gate)
        core_usage_error("--moe-shared-expert-gate: a gated shared expert is not implemented (megac "
                         "adds the shared expert's output ungated, Megatron's default)");
    if (m->num_experts == 0) return;
    if (t->moe_expert_bias && !m->moe_sigmoid)  // (Megatron refuses it too)
        core_usage_error("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid");
    if (t->moe_expert_bias && !(t->moe_bias_rate > 0))
        core_usage_error("--moe-router-bias-update-rate must be > 0, got %g", t->moe_bias_rate);
    m->moe_expert_bias = t->moe_expert_bias;
    m->moe_bias_rate = t->moe_expert_bias ? t->moe_bias_rate : 0.0;
    if (t->moe_capacity < 0) core_usage_error("--moe-expert-capacity-factor must be > 0, got %g", t->moe_capacity);
    const char *dp = t->moe_drop_policy;
    if (strcmp(dp, "probs") && strcmp(dp, "position"))
        core_usage_error("--moe-token-drop-policy must be probs or position, got '%s'", dp);
    if (t->moe_pad && t->moe_capacity <= 0)
        core_usage_error("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    m->moe_capacity = t->moe_capacity;
    m->moe_drop_position = !strcmp(dp, "position");
    m->moe_pad_capacity = t->moe_pad;
    if (t->ep < 1) core_usage_error("--expert-model-parallel-size must be >= 1, got %d", t->ep);
    if (t->ep > 1 && m->num_experts % t->ep)
        core_usage_error("--num-experts %d is not divisible by --expert-model-parallel-size %d",
                         m->num_experts, t->ep);
    if (t->etp < 0) core_usage_error("--expert-tensor-parallel-size must be >= 1, got %d", t->etp);
}
