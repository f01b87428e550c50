// hf/hf_lm.h: a checkpoint's GPT as a language model on one CPU rank: next-token logits of
// a token sequence through model/gpt.h's training forward (tp = pp = 1, one micro-batch of
// one sequence of seq_length tokens). A shorter sequence is padded at the end: the attention
// is causal, so positions < n never see the padding. No KV cache: each call runs the whole
// forward.
#pragma once
#include "hf_ckpt.h"
#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"

typedef struct {
    GPT *m;
    Backend *be;
    Comm *tp;             // a group of one (MPI_COMM_SELF)
    int T, V, Vp;         // context length, real and padded vocabulary
    int *tokens, *targets;  // (T) host staging; targets stay 0 (the loss is not used)
    float *logits;        // (T, Vp) host copy of the last forward's logits
} HfLm;

// Builds the model from c's tensors (padding rows of the vocabulary zero) on a CPU backend
// with nthreads threads. MPI must be initialised. Never returns NULL.
HfLm *hf_lm_create(const HfCkpt *c, int nthreads);

// Runs the forward on tokens[0..n) (1 <= n <= T, ids < V) and returns the logits: row i
// (V valid entries, stride Vp) predicts token i + 1. The pointer is valid until the next call.
const float *hf_lm_forward(HfLm *lm, const int *tokens, int n);

void hf_lm_free(HfLm *lm);
