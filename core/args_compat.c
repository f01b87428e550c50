// core/args_compat.c: the table of Megatron flags accepted with no effect or refused (see
// args_compat.h). Kinds and values follow Megatron-LM's megatron/training/arguments.py and
// its config dataclasses (booleans are store_true/store_false; Literal fields are choices).
#include "args_compat.h"

#include <string.h>

#define NOEFF CORE_COMPAT_NO_EFFECT
#define REFUSE CORE_COMPAT_REFUSED
#define FP8 "fp8 training is not implemented in megac (--bf16 and --fp16 are)"

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
    // refused: they would change the result and megac does not implement them
    {"--fp8-format", 's', NULL, REFUSE, FP8},
    {"--fp8-recipe", 's', NULL, REFUSE, FP8},
    {"--fp8-margin", 'i', NULL, REFUSE, FP8},
    {"--fp8-interval", 'i', NULL, REFUSE, FP8},
    {"--fp8-amax-history-len", 'i', NULL, REFUSE, FP8},
    {"--fp8-amax-compute-algo", 's', NULL, REFUSE, FP8},
    {"--fp8-param-gather", 0, NULL, REFUSE, FP8},
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
