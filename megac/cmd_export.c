// megac/cmd_export.c: `megac export`: a checkpoint as a Hugging Face model folder
// (config.json for GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM, model.safetensors,
// tokenizer.json
// where expressible).
#include "commands.h"
#include "core/args.h"
#include "core/check.h"            // defines: core_usage_error
#include "hf/hf_gpt2.h"
#include "hf/hf_llama.h"
#include "hf/hf_tokenizer.h"
#include "model/gpt_moe.h"     // defines: gpt_moe_ffn
#include "core/outpath.h"        // defines: core_out_check_dir
#include "ckpt/ckpt_fs.h"        // defines: ckpt_fs_mkdirs

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: megac export --load CKPT --output DIR [--iteration N] [--tokenizer byte|tok.json|data.h5]\n"
    "  Writes DIR/config.json (GPT2LMHeadModel, or LlamaForCausalLM for a Llama-style model,\n"
    "  MixtralForCausalLM for a Llama-style mixture of experts),\n"
    "  DIR/model.safetensors (fp32) and, given a\n"
    "  tokenizer (or CKPT/megac-tokenizer.json), DIR/tokenizer.json + tokenizer_config.json.";

// Checks that checkpoint c can be written as a Hugging Face model and makes its norms
// Hugging Face's (--apply-layernorm-1p: theirs take 1 + w); returns 1 for a Llama-style
// (or Mixtral) model, 0 for GPT-2. Exits 2 with the reason when it cannot be exported.
static int exportable(HfCkpt *c) {
    char err[4600];
    if (c->cfg.layernorm_1p) {  // --apply-layernorm-1p: Hugging Face's norms take 1 + w itself
        for (int i = 0; i < c->n; i++) {
            const ParamInfo *p = &c->table[i];
            size_t len = strlen(p->name);
            if (!p->norm_param || len < 6 || strcmp(p->name + len - 6, "weight")) continue;
            for (size_t j = 0; j < (size_t)p->rows * p->cols; j++) c->data[i][j] += 1.0f;
        }
        c->cfg.layernorm_1p = 0;
    }
    int llama = gpt_is_llama_style(&c->cfg) || c->cfg.num_experts > 0;  // Mixtral, or refused
    if (llama && hf_llama_check_exportable(&c->cfg, err, sizeof err) != 0)
        core_usage_error("%s: %s", c->path, err);
    if (!llama && c->cfg.kv_channels)
        core_usage_error("%s: attribute kv_channels %d: a head size other than hidden %d / heads "
                         "%d cannot be represented as GPT2LMHeadModel", c->path, c->cfg.kv_channels,
                         c->cfg.hidden_size, c->cfg.num_heads);
    if (!llama && c->cfg.untie_embeddings)
        core_usage_error("%s: attribute untie_embeddings_and_output_weights: an untied output layer "
                         "cannot be represented as GPT2LMHeadModel (it ties them)", c->path);
    return llama;
}

int cmd_export(int argc, char **argv) {
    const char *load = NULL, *output = NULL, *tok_spec = NULL;
    int64_t iteration = -1;
    ArgSpec specs[] = {
        {"--load", ARG_STR, &load, "checkpoint directory (written by megac train --save)"},
        {"--output", ARG_STR, &output, "Hugging Face model folder to write (created)"},
        {"--iteration", ARG_I64, &iteration, "checkpoint iteration (-1: the latest)"},
        {"--tokenizer", ARG_STR, &tok_spec, "byte, a tokenizer JSON or the training data .h5"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (!load || !output) core_usage_error("export needs --load CKPT and --output DIR (see --help)");
    char err[4600];
    // an earlier export may be replaced; another model's folder, or a file, may not
    const char *own[] = {"config.json", "model.safetensors", "tokenizer.json", NULL};
    if (core_out_check_dir("--output", output, own, "model.safetensors", "\"megac_iteration\"", err, sizeof err) != 0)
        core_usage_error("%s", err);
    HfCkpt *c = hf_ckpt_read(load, iteration, err, sizeof err);
    if (!c) core_usage_error("%s", err);
    int moe = c->cfg.num_experts > 0, llama = exportable(c);  // Mixtral, Llama or GPT-2
    Tokenizer *tok = hf_tok_resolve(tok_spec, load, err, sizeof err);  // optional here
    if (!tok && tok_spec) core_usage_error("%s", err);
    if (tok && tok->vocab_size != c->cfg.vocab_size)
        core_usage_error("the tokenizer has %d ids, the checkpoint's model %d: not the model's "
                         "tokenizer", tok->vocab_size, c->cfg.vocab_size);
    if (ckpt_fs_mkdirs(output, err, sizeof err) != 0) core_usage_error("%s", err);
    if (llama ? hf_llama_write_config(output, c, err, sizeof err) != 0 ||
                    hf_llama_write_weights(output, c, err, sizeof err) != 0
              : hf_gpt2_write_config(output, c, err, sizeof err) != 0 ||
                    hf_gpt2_write_weights(output, c, err, sizeof err) != 0)
        core_usage_error("%s", err);
    const char *tok_note = "no tokenizer given (--tokenizer): tokenizer.json not written";
    if (tok && hf_tok_write(output, tok, c->cfg.max_position_embeddings, err, sizeof err) != 0) {
        fprintf(stderr, "megac export: %s\n", err);
        tok_note = "tokenizer not exported (see above)";
    } else if (tok) {
        tok_note = tok->kind == TOK_BYTE ? "tokenizer.json: byte-level, 257 ids"
                                         : "tokenizer.json: byte-level BPE";
    }
    char experts[64] = "";
    if (moe) snprintf(experts, sizeof experts, " E=%d K=%d", c->cfg.num_experts, c->cfg.moe_topk);
    printf("exported %s (iteration %lld): %s L=%d C=%d NH=%d F=%d%s V=%d positions=%d "
           "-> %s; %s\n", c->path, (long long)c->meta.iteration,
           moe ? "MixtralForCausalLM" : llama ? "LlamaForCausalLM" : "GPT2LMHeadModel",
           c->cfg.num_layers, c->cfg.hidden_size, c->cfg.num_heads,
           moe ? gpt_moe_ffn(&c->cfg) : c->cfg.ffn_hidden_size, experts, c->cfg.vocab_size,
           c->cfg.max_position_embeddings, output, tok_note);
    tok_free(tok);
    hf_ckpt_free(c);
    return 0;
}
