// model/gpt_config.c: config checks and Megatron's FLOPs count.
#include "gpt_config.h"
#include "gpt_moe.h"  // defines: gpt_moe_check
#include <stdio.h>

int gpt_padded_vocab(const GPTConfig *c, int tp) {
    int m = c->vocab_divisible_by * tp;
    return (c->vocab_size + m - 1) / m * m;
}

// The sizes alone: positive, and small enough that no count wraps. 0 or -1 (err).
static int check_sizes(const GPTConfig *c, int tp, char *err, size_t n) {
    if (c->num_layers <= 0 || c->hidden_size <= 0 || c->num_heads <= 0 || c->seq_length <= 0 ||
        c->ffn_hidden_size <= 0 || c->vocab_size <= 0 || c->vocab_divisible_by <= 0) {
        snprintf(err, n, "sizes must be positive: num-layers %d, hidden-size %d, num-attention-heads %d, "
                 "ffn-hidden-size %d, seq-length %d, vocab size %d, make-vocab-size-divisible-by %d",
                 c->num_layers, c->hidden_size, c->num_heads, c->ffn_hidden_size, c->seq_length,
                 c->vocab_size, c->vocab_divisible_by);
        return -1;
    }
    if ((long long)c->vocab_size + (long long)c->vocab_divisible_by * tp > 2147483647LL) {  // padded: an int
        snprintf(err, n, "vocab size %d, padded to a multiple of make-vocab-size-divisible-by %d x "
                 "tensor-model-parallel-size %d, exceeds 2147483647", c->vocab_size,
                 c->vocab_divisible_by, tp);
        return -1;
    }
    if (c->num_layers > GPT_MAX_LAYERS) {
        snprintf(err, n, "num-layers %d is too large (at most %d)", c->num_layers, GPT_MAX_LAYERS);
        return -1;
    }
    double C = c->hidden_size, F = c->ffn_hidden_size, V = c->vocab_size;  // no int product wraps
    double A = (double)c->num_heads * gpt_head_size(c), KV = 2.0 * gpt_kv_heads(c) * gpt_head_size(c);
    double per_layer = 2.0 * C * A + C * KV + (backend_act_gated(c->activation) ? 3.0 : 2.0) * C * F +
                       10.0 * C + A + KV + F;
    double params = c->num_layers * per_layer + (c->untie_embeddings ? 2.0 : 1.0) * V * C +
                    (double)c->max_position_embeddings * C;
    if (params > GPT_MAX_PARAMS) {
        snprintf(err, n, "model too large: %.4g parameters (at most 2^50 = %.4g; num-layers %d, "
                 "hidden-size %d, ffn-hidden-size %d)", params, GPT_MAX_PARAMS, c->num_layers,
                 c->hidden_size, c->ffn_hidden_size);
        return -1;
    }
    return 0;
}

// The attention heads: head size, positions, query groups, rotary channels. 0 or -1 (err).
static int check_heads(const GPTConfig *c, char *err, size_t n) {
    if (c->kv_channels < 0 || (!c->kv_channels && c->hidden_size % c->num_heads)) {
        snprintf(err, n, "hidden-size %d is not divisible by num-attention-heads %d (give "
                 "--kv-channels for another head size; it is %d)", c->hidden_size, c->num_heads,
                 c->kv_channels);
        return -1;
    }
    if (c->seq_length > c->max_position_embeddings) {
        snprintf(err, n, "seq-length %d exceeds max-position-embeddings %d", c->seq_length,
                 c->max_position_embeddings);
        return -1;
    }
    int G = gpt_kv_heads(c), hs = gpt_head_size(c), rot = gpt_rotary_dim(c);
    if (G <= 0 || c->num_heads % G) {
        snprintf(err, n, "num-query-groups %d must be positive and divide num-attention-heads %d",
                 G, c->num_heads);
        return -1;
    }
    if (c->rope && (rot < 2 || rot % 2 || rot > hs || hs > 4096 || c->rotary_base <= 0)) {
        snprintf(err, n, "rope: rotary-percent %g of the head size %d gives %d channels, which must "
                 "be even, >= 2 and <= the head size (<= 4096); rotary-base %g must be > 0",
                 c->rotary_percent, hs, rot, c->rotary_base);
        return -1;
    }
    return 0;
}

// The config against tp and pp: tensor-parallel widths, recomputation, the pipeline split.
// 0 or -1 (err).
static int check_layout(const GPTConfig *c, int tp, int pp, char *err, size_t n) {
    int G = gpt_kv_heads(c);
    if (c->num_heads % tp || c->hidden_size % tp || c->ffn_hidden_size % tp) {
        snprintf(err, n, "tensor-model-parallel-size %d must divide num-attention-heads %d, "
                 "hidden-size %d and ffn-hidden-size %d", tp, c->num_heads, c->hidden_size,
                 c->ffn_hidden_size);
        return -1;
    }
    if (c->num_experts > 0 && c->moe_shared_ffn % tp) {
        snprintf(err, n, "tensor-model-parallel-size %d must divide "
                 "moe-shared-expert-intermediate-size %d", tp, c->moe_shared_ffn);
        return -1;
    }
    if (G % tp) {
        snprintf(err, n, "tensor-model-parallel-size %d must divide num-query-groups %d (each rank "
                 "holds whole key/value groups)", tp, G);
        return -1;
    }
    if (c->recompute == GPT_RECOMPUTE_FULL && c->recompute_num_layers < 1) {
        snprintf(err, n, "recompute-num-layers %d must be >= 1 with recompute-granularity full",
                 c->recompute_num_layers);
        return -1;
    }
    int first = c->first_stage_layers, last = c->last_stage_layers;
    if (first < 0 || last < 0 || ((first || last) && pp == 1)) {
        snprintf(err, n, "decoder-first/last-pipeline-num-layers (%d, %d) must be >= 0 and need "
                 "pipeline-model-parallel-size > 1 (it is %d)", first, last, pp);
        return -1;
    }
    int fixed = (first > 0) + (last > 0), rest = c->num_layers - first - last, others = pp - fixed;
    if (rest < 0 || (others == 0 && rest != 0) || (others > 0 && rest % others)) {
        if (fixed)
            snprintf(err, n, "num-layers %d minus decoder-first-pipeline-num-layers %d and "
                     "decoder-last-pipeline-num-layers %d leaves %d layers, which the other %d "
                     "stage(s) of pipeline-model-parallel-size %d cannot share evenly",
                     c->num_layers, first, last, rest, others, pp);
        else
            snprintf(err, n, "num-layers %d is not divisible by pipeline-model-parallel-size %d",
                     c->num_layers, pp);
        return -1;
    }
    return 0;
}

int gpt_config_check(const GPTConfig *c, int tp, int pp, char *err, size_t n) {
    if (check_sizes(c, tp, err, n) || check_heads(c, err, n) || check_layout(c, tp, pp, err, n))
        return -1;
    return gpt_moe_check(c, err, n);  // the mixture-of-experts fields (E > 0)
}

// The layers pipeline rank r of pp holds in all (its v chunks together).
static int rank_layers(const GPTConfig *c, int pp, int r) {
    int first = c->first_stage_layers, last = c->last_stage_layers;
    int fixed = (first > 0) + (last > 0), others = pp - fixed;
    int even = others > 0 ? (c->num_layers - first - last) / others : 0;
    return (r == 0 && first > 0) ? first : (r == pp - 1 && last > 0) ? last : even;
}

int gpt_chunks_check(const GPTConfig *c, int pp, int v, char *err, size_t n) {
    for (int r = 0; r < pp && v > 1; r++)
        if (rank_layers(c, pp, r) % v) {
            snprintf(err, n, "--virtual-pipeline-model-parallel-size %d does not divide the %d layers "
                     "of pipeline rank %d (--num-layers %d, --decoder-first/last-pipeline-num-layers "
                     "%d, %d over pipeline-model-parallel-size %d; each chunk holds 1/%d of its rank's)",
                     v, rank_layers(c, pp, r), r, c->num_layers, c->first_stage_layers,
                     c->last_stage_layers, pp, v);
            return -1;
        }
    return 0;
}

void gpt_stage_layers(const GPTConfig *c, int pp, int v, int stage, int *layer0, int *n) {
    // virtual stages in order (chunk-major: c*pp + r), each 1/v of its rank's layers: the
    // whole rounds of chunks before `stage` (L/v layers each), then ranks 0 .. r-1 of its
    // round: rank 0, then r-1 middle ranks (r - 1 > 0 only if pp > 2, and then rank 1 is a
    // middle one). Closed form: plan enumerates up to 2^20 stages.
    int r = stage % pp, mid = pp > 1 ? rank_layers(c, pp, 1) : 0;
    *layer0 = (stage / pp) * (c->num_layers / v) + (r ? rank_layers(c, pp, 0) / v + (r - 1) * (mid / v) : 0);
    *n = rank_layers(c, pp, r) / v;
}

// Megatron-LM's count (Narayanan et al. 2021, appendix on FLOPs): every GEMM runs three
// times (forward, data gradient, weight gradient) at 2 FLOPs per multiply-add. Forward, per
// layer and token: QKV 6C^2 + projection 2C^2 + MLP 4CF + QK^T and AV 4TC; the output layer
// 2 C Vp per token once. So FLOPs = 12 B T L C^2 (2 + T/C + F/C + Vp/(2 L C)),
// which for F = 4C is Megatron's 72 B T L C^2 (1 + T/(6C) + Vp/(12 L C)).
// Grouped-query attention: the QKV GEMM has (NH + 2G) hs = C (1 + 2G/NH) rows, so its
// 6C^2 becomes 2C^2 (1 + 2G/NH); SwiGLU: fc has 2F rows, so the MLP's 4CF becomes 6CF.
// --kv-channels: the attention terms (QKV, projection, QK^T, AV) scale by NH hs / C
// (Megatron's query_projection_to_hidden_size_ratio).
// Mixture of experts (Megatron's MoE term): a MoE layer's MLP is K experts' MLPs of F_e per
// token (4 C F_e K, 6 C F_e K gated, forward) plus the router's (C, E) GEMM, 2 C E forward,
// which Megatron's standard count leaves out (its MLA count had it): 12 B T C^2 E / (2C) more.
double gpt_flops_per_iteration(const GPTConfig *c, int padded_vocab, long long samples) {
    double C = c->hidden_size, T = c->seq_length, L = c->num_layers;
    double qkv = (1.0 + 2.0 * gpt_kv_heads(c) / c->num_heads) / 3.0;  // 1 without GQA
    double ratio = (double)c->num_heads * gpt_head_size(c) / C;
    double attention = (1.5 * qkv + 0.5 + T / C) * ratio;
    double gated = backend_act_gated(c->activation) ? 1.5 : 1.0, moe = 0;  // moe: MoE layers
    for (int l = 0; c->num_experts > 0 && l < c->num_layers; l++) moe += gpt_moe_layer(c, l);
    double dense = (L - moe) * c->ffn_hidden_size / C * gated;
    double experts = moe * ((double)c->moe_topk * gpt_moe_ffn(c) / C * gated + c->num_experts / (2.0 * C));
    double logits = padded_vocab / (2.0 * L * C);
    return 12.0 * (double)samples * T * L * C * C * (attention + logits) +
           12.0 * (double)samples * T * C * C * (dense + experts);
}

int gpt_kv_heads(const GPTConfig *c) {
    return c->num_query_groups > 0 ? c->num_query_groups : c->num_heads;
}

int gpt_rotary_dim(const GPTConfig *c) {
    if (!c->rope || c->num_heads <= 0) return 0;
    return (int)(gpt_head_size(c) * c->rotary_percent);
}

const char *gpt_recompute_label(const GPTConfig *c, const char *selective, char *buf, size_t n) {
    if (c->recompute == GPT_RECOMPUTE_SELECTIVE) return selective;
    if (c->recompute != GPT_RECOMPUTE_FULL) return "";
    snprintf(buf, n, " | recompute full (%s, %d layer%s%s)", c->recompute_block ? "block" : "uniform",
             c->recompute_num_layers, c->recompute_num_layers == 1 ? "" : "s",
             c->recompute_block ? " per stage" : " per chunk");
    return buf;
}

int gpt_is_llama_style(const GPTConfig *c) {
    return c->rmsnorm || c->activation != BACKEND_ACT_GELU || c->rope || c->disable_bias_linear ||
           gpt_kv_heads(c) != c->num_heads;
}
