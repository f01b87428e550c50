// hf/hf_kv.h: incremental decoding with a key/value cache, for `megac generate`.
//
// Without a cache every new token re-runs the whole forward over the context: O(n) matmul
// rows per token and O(n^2) attention. With it, a prompt runs the training forward once
// (hf_lm.h), and each new token then runs one row through the model's own blocks
// (gpt_forward_positions, model/gpt.h) at its position: the attention op takes the token's
// query at position n over the keys and values of positions 0..n, which are the rows of each
// layer's qkv activation that the earlier calls left in the model's slot (the slot is the
// cache; nothing is copied). O(1) matmul rows and O(n) attention per token. Logits equal the
// full forward's at the same position to fp32 round-off (tests/hf/kv_cache: relative 1e-5),
// so greedy text is the same.
//
// Positions only go up to the context length T: once the context is full, the caller goes
// back to the full forward over the last T tokens (the positions of every token shift then,
// so no cached key stays valid), which overwrites the cache.
#pragma once
#include "hf_lm.h"

typedef struct {
    HfLm *lm;      // not owned; its model's slot 0 holds the cache
    int n;         // positions cached: the next token goes to position n
    float *logits; // (Vp) the last step's logits
} HfKv;

// A cache for lm's model (one sequence on one rank). Never returns NULL.
HfKv *hf_kv_create(HfLm *lm);

// Runs the training forward on tokens[0..n) (1 <= n <= T), which leaves every layer's keys
// and values in the model's slot, and returns the logits (n rows, stride Vp) as
// hf_lm_forward does.
const float *hf_kv_prefill(HfKv *kv, const int *tokens, int n);

// Appends `token` at position kv->n (< T) and returns its logits (Vp): the prediction of the
// next token. The pointer is valid until the next call. Only hf_kv calls may run the model
// between hf_kv_prefill and this (any other forward overwrites the cache).
const float *hf_kv_step(HfKv *kv, int token);

void hf_kv_free(HfKv *kv);
