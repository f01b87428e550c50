// core/args_compat.c: the table of Megatron flags accepted with no effect or refused (see
// args_compat.h). Kinds and values follow Megatron-LM's megatron/training/arguments.py and
// its config dataclasses (booleans are store_true/store_false; Literal fields are choices).
#include "args_compat.h"

#include <string.h>

#define NOEFF CORE_COMPAT_NO_EFFECT
#define REFUSE CORE_COMPAT_REFUSED
#define FP8 "fp8 training is not implemented in megac (--bf16 and --fp16 are)"
#define KERNEL "a kernel choice (Megatron's fused kernel or its unfused path); the same result"
#define NOTLOGGED "an extra quantity in Megatron's log; megac does not compute it"
#define WANDB "Weights & Biases logging; megac logs to --tensorboard-dir and --log-json"
#define FSDP "Megatron-FSDP's buffers and start-up; megac's ZeRO-3 is --data-parallel-sharding-strategy optim_grads_params"
#define MLA "multi-latent attention (MLA: DeepSeek-V2/V3's low-rank compressed keys and values) is not implemented in megac"
#define ROPE_SCALING "rotary scaling (MLA's YaRN, Llama 3.1's rope scaling) is not implemented in megac"
#define MTP "multi-token prediction (MTP: DeepSeek-V3's extra next-token layers) is not implemented in megac"
#define GROUPED "group-limited routing (DeepSeek-V3: the top-k among the best groups of experts) is not implemented in megac"

static const CoreCompatFlag TABLE[] = {
    // accepted, no effect on the result
    {"--use-mcore-models", 0, NULL, NOEFF, "megac has one model implementation (Megatron: deprecated, ignored)"},
    {"--manual-gc", 0, NULL, NOEFF, "times Python's garbage collector; megac has none"},
    {"--manual-gc-interval", 'i', NULL, NOEFF, "times Python's garbage collector; megac has none"},
    {"--num-workers", 'i', NULL, NOEFF, "PyTorch data-loader processes; megac reads batches in the rank itself"},
    {"--no-mmap-bin-files", 0, NULL, NOEFF, "how Megatron opens .bin files; megac always maps them read-only"},
    {"--mmap-bin-files", 0, NULL, NOEFF, "how Megatron opens .bin files; megac always maps them read-only"},
    {"--empty-unused-memory-level", 'i', "0|1|2", NOEFF, "PyTorch's CUDA caching allocator; megac allocates once at start-up"},
    {"--data-cache-path", 's', NULL, NOEFF, "Megatron's cached index files; megac builds its sample order in memory"},
    {"--no-masked-softmax-fusion", 0, NULL, NOEFF, "a kernel choice (Megatron's fused scale-mask-softmax); megac's attention kernels apply the causal mask in their own softmax"},
    {"--cross-entropy-loss-fusion", 0, NULL, NOEFF, "megac's cross-entropy is always one fused pass"},
    {"--cross-entropy-fusion-impl", 's', "native|te", NOEFF, "megac's cross-entropy is always one fused pass"},
    {"--no-create-attention-mask-in-dataloader", 0, NULL, NOEFF, "megac's causal mask is implicit in its attention kernels"},
    {"--tensorboard-queue-size", 'i', NULL, NOEFF, "PyTorch's SummaryWriter queue; megac writes each logged iteration's events at once"},
    {"--profile", 0, NULL, NOEFF, "starts PyTorch's or Nsight's profiler; megac's step profile is --trace FILE"},
    {"--profile-step-start", 'i', NULL, NOEFF, "starts PyTorch's or Nsight's profiler; megac's step profile is --trace FILE"},
    {"--profile-step-end", 'i', NULL, NOEFF, "starts PyTorch's or Nsight's profiler; megac's step profile is --trace FILE"},
    {"--tiktoken-pattern", 's', "v1|v2", NOEFF, "read by Megatron's TikTokenizer only; megac's tokenizers (GPT2BPETokenizer, HuggingFaceTokenizer, the SentencePiece types, NullTokenizer) do not use it"},
    {"--ckpt-format", 's', "torch|torch_dist|zarr|torch_dcp|fsdp_dtensor", NOEFF, "megac always writes its own HDF5 checkpoints (docs/checkpoint-format.md); the weights are the same"},
    {"--no-rope-fusion", 0, NULL, NOEFF, KERNEL},
    {"--no-bias-swiglu-fusion", 0, NULL, NOEFF, KERNEL},
    {"--no-bias-gelu-fusion", 0, NULL, NOEFF, KERNEL},
    {"--no-bias-dropout-fusion", 0, NULL, NOEFF, KERNEL},
    {"--no-gradient-accumulation-fusion", 0, NULL, NOEFF, KERNEL},
    {"--moe-permute-fusion", 0, NULL, NOEFF, KERNEL},
    {"--moe-router-fusion", 0, NULL, NOEFF, KERNEL},
    {"--attention-softmax-in-fp32", 0, NULL, NOEFF, "megac's attention softmax is always computed in fp32"},
    {"--transformer-impl", 's', "local|transformer_engine|inference_optimized", NOEFF, "Megatron's layer implementations (Transformer Engine or its own); megac has one"},
    {"--te-rng-tracker", 0, NULL, NOEFF, "Transformer Engine's random-number tracker; megac's dropout draws from its own counter-based generator"},
    {"--enable-experimental", 0, NULL, NOEFF, "unlocks Megatron-Core's experimental code paths; megac has no such switch"},
    {"--recompute-modules", 'l', "core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts", NOEFF, "which modules Megatron's selective recomputation re-runs (memory only); megac's --recompute-granularity selective re-runs the attention core (core_attn)"},
    {"--moe-layer-recompute", 0, NULL, NOEFF, "Megatron re-runs the MoE layers in the backward (memory only); megac stores their activations"},
    {"--moe-shared-expert-overlap", 0, NULL, NOEFF, "overlaps the shared expert with the token dispatch (speed only); megac always overlaps it with the allgather dispatcher's gathers"},
    {"--moe-flex-dispatcher-backend", 's', "deepep|hybridep|ncclep", NOEFF, "the library behind Megatron's flex dispatcher (DeepEP, HybridEP); megac dispatches with its own collectives (--moe-token-dispatcher-type allgather or alltoall)"},
    {"--no-check-for-nan-in-loss-and-grad", 0, NULL, NOEFF, "turns off Megatron's stop at a NaN loss or gradient; megac skips a NaN/Inf step and stops after --max-nan-iters in a row"},
    {"--auto-detect-ckpt-format", 0, NULL, NOEFF, "megac reads its own HDF5 checkpoints only"},
    {"--dist-ckpt-strictness", 's', "assume_ok_unexpected|log_unexpected|log_all|raise_unexpected|raise_all|return_unexpected|return_all|ignore_all", NOEFF, "how Megatron's distributed checkpoint loader treats missing or unexpected keys; megac's loader checks every tensor's name and shape"},
    {"--no-ckpt-fully-parallel-save", 0, NULL, NOEFF, "how Megatron spreads a save over the ranks; the checkpoint is the same"},
    {"--log-num-zeros-in-grad", 0, NULL, NOEFF, NOTLOGGED},
    {"--log-params-norm", 0, NULL, NOEFF, NOTLOGGED},
    {"--logging-level", 'i', NULL, NOEFF, "Python's logging level"},
    {"--profile-ranks", 'l', NULL, NOEFF, "starts PyTorch's or Nsight's profiler; megac's step profile is --trace FILE"},
    {"--wandb-project", 's', NULL, NOEFF, WANDB},
    {"--wandb-exp-name", 's', NULL, NOEFF, WANDB},
    {"--wandb-save-dir", 's', NULL, NOEFF, WANDB},
    {"--tokenizer-hf-include-special-tokens", 0, NULL, NOEFF, "how Megatron's HuggingFaceTokenizer encodes text; megac train reads token ids"},
    {"--use-megatron-fsdp", 0, NULL, NOEFF, FSDP},
    {"--init-model-with-meta-device", 0, NULL, NOEFF, FSDP},
    {"--fsdp-double-buffer", 0, NULL, NOEFF, FSDP},
    {"--use-nccl-ub", 0, NULL, NOEFF, "NCCL's user buffers (speed only)"},
    // refused: they would change the result and megac does not implement them
    {"--fp8-format", 's', NULL, REFUSE, FP8},
    {"--fp8-recipe", 's', NULL, REFUSE, FP8},
    {"--fp8-margin", 'i', NULL, REFUSE, FP8},
    {"--fp8-interval", 'i', NULL, REFUSE, FP8},
    {"--fp8-amax-history-len", 'i', NULL, REFUSE, FP8},
    {"--fp8-amax-compute-algo", 's', NULL, REFUSE, FP8},
    {"--fp8-param-gather", 0, NULL, REFUSE, FP8},
    {"--multi-latent-attention", 0, NULL, REFUSE, MLA},
    {"--q-lora-rank", 'i', NULL, REFUSE, MLA},
    {"--kv-lora-rank", 'i', NULL, REFUSE, MLA},
    {"--qk-head-dim", 'i', NULL, REFUSE, MLA},
    {"--qk-pos-emb-head-dim", 'i', NULL, REFUSE, MLA},
    {"--v-head-dim", 'i', NULL, REFUSE, MLA},
    {"--rotary-scaling-factor", 'f', "1|1.0", REFUSE, ROPE_SCALING},
    {"--mscale", 'f', NULL, REFUSE, ROPE_SCALING},
    {"--mscale-all-dim", 'f', NULL, REFUSE, ROPE_SCALING},
    {"--use-rope-scaling", 0, NULL, REFUSE, ROPE_SCALING},
    {"--rope-scaling-factor", 'f', NULL, REFUSE, ROPE_SCALING},
    {"--rotary-seq-len-interpolation-factor", 'i', "1", REFUSE, "rotary position interpolation is not implemented in megac (1: none)"},
    {"--mtp-num-layers", 'i', "0", REFUSE, MTP},
    {"--mtp-loss-scaling-factor", 'f', NULL, REFUSE, MTP},
    {"--moe-router-num-groups", 'i', NULL, REFUSE, GROUPED},
    {"--moe-router-group-topk", 'i', NULL, REFUSE, GROUPED},
    {"--moe-router-force-load-balancing", 0, NULL, REFUSE, "Megatron's benchmarking mode routes tokens by random scores; megac routes by the router's"},
    {"--moe-router-dtype", 's', "fp32", REFUSE, "megac's router computes in fp32 (fp32: accepted); fp64 is not implemented"},
    {"--qk-layernorm", 0, NULL, REFUSE, "a norm on each head's queries and keys (Qwen3, DeepSeek) is not implemented in megac"},
    {"--add-qkv-bias", 0, NULL, REFUSE, "biases on the QKV projection alone (Qwen2, Qwen2.5) are not implemented in megac: its linear layers all have biases, or none with --disable-bias-linear"},
    {"--norm-epsilon", 'f', "1e-5|1e-05|1.0e-5|0.00001", REFUSE, "megac's LayerNorm and RMSNorm add eps 1e-5 (Megatron's default; accepted); another epsilon is not implemented"},
    {"--optimizer", 's', "adam", REFUSE, "megac's optimizer is Megatron's adam (AdamW: decoupled weight decay; accepted); the others are not implemented"},
    {"--megatron-fsdp-main-grads-dtype", 's', "fp32", REFUSE, "megac's main gradients are fp32 (accepted); bf16 or fp16 ones are not implemented"},
};
enum { N_TABLE = sizeof TABLE / sizeof TABLE[0] };
_Static_assert((int)N_TABLE <= (int)CORE_COMPAT_MAX, "raise CORE_COMPAT_MAX");

int core_compat_specs(ArgSpec *specs, CoreCompat *c) {
    c->n = N_TABLE;
    for (int i = 0; i < N_TABLE; i++) {
        c->slot[i] = (CoreCompatSlot){&TABLE[i], NULL};
        specs[i] = (ArgSpec){TABLE[i].name, ARG_COMPAT, &c->slot[i], TABLE[i].reason};
    }
    return c->n;
}

int core_compat_given(const CoreCompat *c, const char **names, int max) {
    int n = 0;
    for (int i = 0; i < c->n; i++)
        if (c->slot[i].value && c->slot[i].flag->kind == CORE_COMPAT_NO_EFFECT) {
            if (n < max) names[n] = c->slot[i].flag->name;
            n++;
        }
    return n;
}

void core_compat_notice(const CoreCompat *c, const char *prefix, FILE *f) {
    for (int i = 0; i < c->n; i++)
        if (c->slot[i].value && c->slot[i].flag->kind == CORE_COMPAT_NO_EFFECT)
            fprintf(f, "%s%s: accepted, no effect in megac: %s\n", prefix, c->slot[i].flag->name,
                    c->slot[i].flag->reason);
}
