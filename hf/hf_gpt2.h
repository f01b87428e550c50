// hf/hf_gpt2.h: megac's GPT-2 <-> Hugging Face transformers' GPT2LMHeadModel.
//
// The same network (pre-LayerNorm blocks, eps 1e-5, tanh GELU = "gelu_new", learned
// positions, output layer tied to the token embedding, attention scaled by 1/sqrt(hs)); only
// names and layouts differ:
//
//   megac (checkpoint)            shape      Hugging Face (model.safetensors)       shape
//   wte                           (V, C)     transformer.wte.weight                 (V, C)
//   wpe                           (P, C)     transformer.wpe.weight                 (P, C)
//   layers.L.ln1.weight|bias      (C)        transformer.h.L.ln_1.weight|bias       (C)
//   layers.L.attn.qkv.weight      (3C, C)    transformer.h.L.attn.c_attn.weight     (C, 3C)  T
//   layers.L.attn.qkv.bias        (3C)       transformer.h.L.attn.c_attn.bias       (3C)
//   layers.L.attn.proj.weight     (C, C)     transformer.h.L.attn.c_proj.weight     (C, C)   T
//   layers.L.attn.proj.bias       (C)        transformer.h.L.attn.c_proj.bias       (C)
//   layers.L.ln2.weight|bias      (C)        transformer.h.L.ln_2.weight|bias       (C)
//   layers.L.mlp.fc.weight        (F, C)     transformer.h.L.mlp.c_fc.weight        (C, F)   T
//   layers.L.mlp.fc.bias          (F)        transformer.h.L.mlp.c_fc.bias          (F)
//   layers.L.mlp.proj.weight      (C, F)     transformer.h.L.mlp.c_proj.weight      (F, C)   T
//   layers.L.mlp.proj.bias        (C)        transformer.h.L.mlp.c_proj.bias        (C)
//   final_ln.weight|bias          (C)        transformer.ln_f.weight|bias           (C)
//   (tied to wte)                            lm_head.weight (not stored when tied)  (V, C)
//
// T: transformers' GPT-2 uses Conv1D layers, whose weight is (in, out): the transpose of a
// Linear's (out, in). Both split the fused QKV output 3C as [q | k | v], each heads-major.
// megac's vocabulary padding rows (--make-vocab-size-divisible-by) are never in a checkpoint.
#pragma once
#include <stddef.h>
#include "hf_ckpt.h"
#include "hf_safetensors.h"

// The Hugging Face name of megac tensor `name` into hf (n bytes); *transpose = 1 for the
// Conv1D weights. Returns 0, or -1 for a name GPT-2 does not have.
int hf_gpt2_name(const char *name, char *hf, size_t n, int *transpose);

// Writes DIR/model.safetensors from c (tensors in megac's table order, Conv1D weights
// transposed; metadata format = pt plus megac's iteration and seq_length). Returns 0, or -1
// with one line in err.
int hf_gpt2_write_weights(const char *dir, const HfCkpt *c, char *err, size_t errlen);

// Writes DIR/config.json for GPT2LMHeadModel from c's config (eos/bos = the end-of-document
// id 256 when the vocabulary has it). Returns 0, or -1 with one line in err.
int hf_gpt2_write_config(const char *dir, const HfCkpt *c, char *err, size_t errlen);

// Reads DIR/config.json into cfg (seq_length left 0). Refuses, with one line naming the
// file and the setting, a config megac cannot represent: another architecture, another
// activation, LayerNorm eps other than 1e-5, untied output layer, scaled-by-layer attention,
// cross-attention. Returns 0, or -1 with one line in err.
int hf_gpt2_read_config(const char *dir, GPTConfig *cfg, char *err, size_t errlen);

// Helpers shared with hf_llama.c:
struct json_object;  // json-c's object (json-c/json.h)
// Writes the JSON object o (json-c) to path, pretty, through a temporary file; frees o.
// Returns 0, or -1 with "path: cannot write" in err.
int hf_write_json(const char *path, struct json_object *o, char *err, size_t errlen);
// Field `key` of o: 1 found (in *v), 0 absent or JSON null. Pure.
int hf_json_field(struct json_object *o, const char *key, struct json_object **v);
// The JSON type a config.json field must have when present (not null): 'n' a number, 'i' an
// integer, 'b' a boolean, 's' a string.
typedef struct {
    const char *key;
    char kind;
} HfJsonKind;
// Checks the fields of o named in k[0..n) against their kinds: a mistyped one ("rope_theta":
// true) is refused rather than coerced. Returns 0, or -1 with one line naming path and key.
int hf_json_kinds(struct json_object *o, const HfJsonKind *k, int n, const char *path, char *err,
                  size_t errlen);
// Integer field (> 0, <= HF_JSON_INT_MAX: no product of sizes wraps before gpt_config_check)
// of o into *out; absent: dflt when > 0. Returns 0, or -1 with one line naming path and key in err.
#define HF_JSON_INT_MAX (1 << 24)
int hf_json_int(struct json_object *o, const char *key, int dflt, int *out, const char *path,
                char *err, size_t errlen);
// Reads tensor `name` of f into out after checking its shape is (d0) (ndim 1) or (d0, d1).
// Returns 0, or -1 with one line in err (missing, shape against config.json, dtype).
int hf_st_read_checked(HfStFile *f, const char *name, int ndim, int64_t d0, int64_t d1, float *out,
                       char *err, size_t errlen);
// Checks that tensor `name` of f (an output layer) equals c's token embedding "wte" bit for
// bit. Returns 0, or -1 with "<file>: <name> <differs>" (or the read's error) in err.
int hf_st_check_tied(HfStFile *f, const HfCkpt *c, const char *name, const char *differs,
                     char *err, size_t errlen);

// Reads DIR/model.safetensors into c (built for the config): every GPT-2 tensor with the
// config's shape, F32, F16 or BF16; lm_head.weight, when present, must equal the token
// embedding (tied); the attention-mask buffers of old exports are ignored; any other tensor
// is refused. Returns 0, or -1 with one line in err.
int hf_gpt2_read_weights(const char *dir, HfCkpt *c, char *err, size_t errlen);
