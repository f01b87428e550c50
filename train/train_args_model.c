// train/train_args_model.c: the model group of `megac train`'s flags (train_args_flags.h):
// the model's table (model/gpt_flags.c, shared with plan), dropout, and the tensor sizes one
// rank can hold.
#include "train_args_flags.h"
#include "core/check.h"

#include <stdint.h>  // defines: INT32_MAX

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    gpt_flags_init(&a->model, &x->model);
    x->hidden_dropout = x->attention_dropout = 0.1;  // Megatron's
    if (cap < GPT_FLAGS_N) core_fatal("train flags: no room for the model's %d", (int)GPT_FLAGS_N);
    int n = gpt_flags_specs(out, &a->model, &x->model);
    const ArgSpec own[] = {
        {"--hidden-dropout", ARG_FLOAT, &x->hidden_dropout, "dropout probability of the embeddings and of the attention and MLP outputs before their residual adds (0: off; masks from seed, iteration and global indices: every layout trains the same model)"},
        {"--attention-dropout", ARG_FLOAT, &x->attention_dropout, "dropout probability of the attention probabilities (0: off; CUDA --bf16/--fp16 --use-flash-attn: only 0 runs the tensor-core kernels)"},
    };
    return n + train_args_put(out + n, cap - n, own, (int)(sizeof own / sizeof own[0]));
}

// Size products are checked before any allocation: each tensor of one rank must have fewer
// than 2^31 elements (GPT-3 175B's largest, C x F, has 6e8). One line naming the flags, exit 2.
static void check_tensor_sizes(const GPTConfig *m, int micro_batch) {
    if (m->hidden_size <= 0 || m->ffn_hidden_size <= 0 || m->seq_length <= 0 || m->num_heads <= 0 ||
        micro_batch <= 0)
        return;  // reported by the range checks
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size, T = m->seq_length, B = micro_batch;
    const int64_t NH = m->num_heads, QKV = (NH + 2LL * gpt_kv_heads(m)) * gpt_head_size(m);
    const int64_t big = F > QKV ? F : QKV;
    const struct { const char *what; double n; } t[] = {
        {"--hidden-size x --ffn-hidden-size (MLP weight)", (double)C * F},
        {"(heads + 2 x groups) x head size x --hidden-size (attention QKV weight)", (double)QKV * C},
        {"--micro-batch-size x --seq-length x max(--ffn-hidden-size, QKV rows) (activations)",
         (double)B * T * big},
        {"--micro-batch-size x --num-attention-heads x --seq-length^2 (attention probabilities)",
         m->use_flash_attn ? 0.0 : (double)B * NH * T * T},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].n > (double)INT32_MAX)
            core_usage_error("model too large: %s = %.4g elements in one tensor (at most 2^31 - 1; "
                             "hidden %d, ffn %d, seq %d, heads %d, micro-batch %d)", t[i].what, t[i].n,
                             m->hidden_size, m->ffn_hidden_size, m->seq_length, m->num_heads, micro_batch);
}

static void finish(TrainArgs *a, TrainFlagText *x) {
    GPTConfig *m = &a->model;
    gpt_flags_finish(m, &x->model);  // F, max positions, recomputation (bad values: exit 2)
    a->ep = x->model.ep;
    a->etp = x->model.etp;
    check_tensor_sizes(m, a->micro_batch);
    double hd = x->hidden_dropout, ad = x->attention_dropout;
    if (!(hd >= 0 && hd < 1) || !(ad >= 0 && ad < 1))
        core_usage_error("--hidden-dropout %g / --attention-dropout %g: a dropout probability must be "
                         "in [0, 1)", hd, ad);
    a->hidden_dropout = hd;
    a->attention_dropout = ad;
    if (m->init_method_std < 0) core_usage_error("--init-method-std must be >= 0");
}

const TrainFlagGroup TRAIN_ARGS_MODEL = {specs, finish};
