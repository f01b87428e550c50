// megac/cmd_import.c: `megac import`: a Hugging Face GPT2LMHeadModel, LlamaForCausalLM or
// MixtralForCausalLM folder as a megac
// checkpoint at iteration 0 with fresh (zero) AdamW state, which `megac train --load`
// continues at any layout.
#include "commands.h"
#include "core/args.h"
#include "core/check.h"  // defines: core_usage_error
#include "hf/hf_gpt2.h"
#include "hf/hf_llama.h"
#include "hf/hf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>  // defines: access

static const char *USAGE =
    "usage: megac import --hf DIR --output CKPT [--seq-length T] [--global-batch-size G] [--seed S]\n"
    "                    [--tokenizer byte|tok.json|data.h5]\n"
    "  Reads DIR/config.json and DIR/model.safetensors (F32, F16 or BF16). A checkpoint records\n"
    "  the run's --seq-length and --global-batch-size, which `megac train --load` must repeat\n"
    "  (with --max-position-embeddings = the model's n_positions when T is smaller). The\n"
    "  tokenizer (--tokenizer, or DIR/tokenizer.json in megac's id layout) is kept in CKPT.";

// The folder's own tokenizer.json when it is in megac's id layout with vocab_size ids (else
// NULL, *note saying so); exits 2 when its size is not the model's.
static Tokenizer *folder_tokenizer(const char *hf, int vocab_size, const char **note) {
    char path[4200], err[2048];
    snprintf(path, sizeof path, "%s/tokenizer.json", hf);
    int exists = access(path, F_OK) == 0;
    Tokenizer *tok = exists ? hf_tok_read(hf, err, sizeof err) : NULL;
    if (tok && tok->vocab_size != vocab_size)
        core_usage_error("%s: %d ids, the model's vocab_size is %d", path, tok->vocab_size, vocab_size);
    if (!tok && exists) fprintf(stderr, "megac import: %s\n", err);
    if (!tok) *note = "no tokenizer imported: generate and export will need --tokenizer";
    return tok;
}

int cmd_import(int argc, char **argv) {
    const char *hf = NULL, *output = NULL, *tok_spec = NULL;
    int seq = 0, global_batch = 8;
    int64_t seed = 1234;
    ArgSpec specs[] = {
        {"--hf", ARG_STR, &hf, "Hugging Face model folder (config.json, model.safetensors)"},
        {"--output", ARG_STR, &output, "checkpoint directory to create"},
        {"--seq-length", ARG_INT, &seq, "the training run's sequence length (0: n_positions)"},
        {"--global-batch-size", ARG_INT, &global_batch, "the training run's global batch size"},
        {"--seed", ARG_I64, &seed, "the training run's seed (data order)"},
        {"--tokenizer", ARG_STR, &tok_spec, "stored as CKPT/" HF_TOK_CKPT_FILE " for generate/export"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (!hf || !output) core_usage_error("import needs --hf DIR and --output CKPT (see --help)");
    if (seq < 0 || global_batch < 1) core_usage_error("--seq-length must be >= 0 and --global-batch-size >= 1");
    char err[2048];
    GPTConfig cfg;
    int llama = hf_llama_is_config(hf);  // llama or mixtral, else GPT-2's reader (or its refusal)
    if ((llama ? hf_llama_read_config(hf, &cfg, err, sizeof err)
               : hf_gpt2_read_config(hf, &cfg, err, sizeof err)) != 0)
        core_usage_error("%s", err);
    cfg.seq_length = seq ? seq : cfg.max_position_embeddings;
    char cerr[512];
    if (gpt_config_check(&cfg, 1, 1, cerr, sizeof cerr) != 0)
        core_usage_error("%s/config.json: %s", hf, cerr);
    Tokenizer *tok = NULL;
    if (tok_spec) {
        tok = hf_tok_resolve(tok_spec, NULL, err, sizeof err);
        if (!tok) core_usage_error("%s", err);
        if (tok->vocab_size != cfg.vocab_size)
            core_usage_error("--tokenizer has %d ids, the model's vocab_size is %d", tok->vocab_size,
                             cfg.vocab_size);
    }
    HfCkpt *c = hf_ckpt_new(&cfg);
    if ((llama ? hf_llama_read_weights(hf, c, err, sizeof err)
               : hf_gpt2_read_weights(hf, c, err, sizeof err)) != 0)
        core_usage_error("%s", err);
    const char *tok_note = tok ? "tokenizer stored" : "tokenizer.json imported";
    if (!tok) tok = folder_tokenizer(hf, cfg.vocab_size, &tok_note);
    c->meta.seed = seed;
    c->meta.global_batch_size = global_batch;
    c->meta.saved_tp = c->meta.saved_pp = c->meta.saved_dp = 1;  // iteration 0, no Adam steps
    if (hf_ckpt_write(output, c, err, sizeof err) != 0) core_usage_error("%s", err);
    if (tok) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", output, HF_TOK_CKPT_FILE);
        if (tok_save(tok, path, err, sizeof err) != 0) core_usage_error("%s", err);
    }
    char experts[64] = "";
    if (cfg.num_experts > 0) snprintf(experts, sizeof experts, " E=%d K=%d", cfg.num_experts, cfg.moe_topk);
    printf("imported %s: %s L=%d C=%d NH=%d F=%d%s V=%d positions=%d -> %s (iteration 0, "
           "seq-length %d, global-batch-size %d); %s\n", hf,
           cfg.num_experts > 0 ? "Mixtral" : llama ? "Llama" : "GPT-2", cfg.num_layers,
           cfg.hidden_size, cfg.num_heads, cfg.ffn_hidden_size, experts, cfg.vocab_size,
           cfg.max_position_embeddings, output, cfg.seq_length, global_batch, tok_note);
    tok_free(tok);
    hf_ckpt_free(c);
    return 0;
}
