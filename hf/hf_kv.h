// hf/hf_kv.h: incremental decoding with a key/value cache, for `megac generate`.
//
// Without a cache every new token re-runs the whole forward over the context: O(n) matmul
// rows per token and O(n^2) attention. With it, a prompt runs the training forward once
// (hf_lm.h; each layer's keys and values are copied out of its qkv activations), and each
// new token then runs one row through the stage with the backend's ops (matmul, LayerNorm or
// RMSNorm, GELU or SwiGLU, rope_gqa at the token's position, add), attending to the cached
// keys and values (cached per query head, as attention reads them): O(1) matmul rows and O(n) attention
// per token. Logits equal the full forward's at the same position to fp32 round-off
// (tests/hf/kv_cache: relative 1e-5), so greedy text is the same.
//
// Positions only go up to the context length T: once the context is full, the caller goes
// back to the full forward over the last T tokens (the positions of every token shift then,
// so no cached key stays valid).
#pragma once
#include "hf_lm.h"

typedef struct {
    HfLm *lm;                 // not owned
    int n;                    // positions cached: the next token goes to position n
    int L, C, NH, F;
    float *k, *v;             // (L, T, C) each: keys and values of every layer and position
    float *x, *ln, *qkv, *y, *h, *hg, *tmp;  // one row: (C), (C), (3C), (C), (2F), (F), (C)
    float *qin;               // (3C) one row of the QKV linear before rope_gqa (Llama-style)
    float *mean, *rstd;       // (1) LayerNorm statistics (not used after)
    float *scores;            // (T) one head's attention weights
    float *logits;            // (Vp) the last step's logits
} HfKv;

// A cache for lm's model (tp = pp = 1, CPU backend). Never returns NULL.
HfKv *hf_kv_create(HfLm *lm);

// Runs the training forward on tokens[0..n) (1 <= n <= T), caches every layer's keys and
// values and returns the logits (n rows, stride Vp) as hf_lm_forward does.
const float *hf_kv_prefill(HfKv *kv, const int *tokens, int n);

// Appends `token` at position kv->n (< T) and returns its logits (Vp): the prediction of the
// next token. The pointer is valid until the next call. kv->n < T is the caller's duty.
const float *hf_kv_step(HfKv *kv, int token);

void hf_kv_free(HfKv *kv);
