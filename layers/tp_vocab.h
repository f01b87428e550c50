// layers/tp_vocab.h: vocab-parallel embedding and cross-entropy (Megatron-LM).
//
// The padded vocabulary Vp (a multiple of vocab_divisible_by * tp, gpt_padded_vocab) is split
// into tp blocks of V_tp rows; rank i owns token ids [i*V_tp, (i+1)*V_tp). Rows at or beyond
// the real vocabulary size V are padding: never looked up, and masked out of the softmax, so
// the loss is the same for every tp.
#pragma once
#include "backend/backend.h"
#include "comm/comm.h"
#include "tp_linear.h"

typedef struct {
    int V;            // real vocabulary size
    int V_tp;         // rows per rank (padded vocabulary / tp)
    int vocab_start;  // first token id of this rank's block
    int V_valid;      // real rows in this rank's block: clamp(V - vocab_start, 0, V_tp)
} TPVocab;

// The vocabulary split for tp rank `tp_rank` of `tp`, padded vocabulary `Vp`. Pure.
TPVocab tp_vocab_split(int V, int Vp, int tp, int tp_rank);

// out = wte[token] + wpe[pos0 + t]: each rank looks up the tokens in its block (zero rows for
// the others) and the sum over tp is taken: all-reduce to (B*T, C), or with sequence
// parallelism reduce-scatter to this rank's (B*T/tp, C) rows. The T positions of each
// sequence are its positions [pos0, pos0 + T) (0: the whole sequence); with pos1 >= 0 the
// rows are two halves (context parallelism): (B, T/2) rows at positions [pos0, pos0 + T/2)
// then (B, T/2) at [pos1, pos1 + T/2). pos (B, T) in the backend's memory, or NULL: row r
// is at position pos[r] instead (--reset-position-ids). The replicated position embedding
// enters once; wpe NULL (rotary positions): none.
void tp_vocab_embedding_forward(Backend *be, TPGroup *tp, const TPVocab *v, void *out,
                                const int *tokens, const void *wte, const void *wpe,
                                int B, int T, int C, int pos0, int pos1, const int *pos);

// dwte (V_tp, C) += rows of dout for this rank's tokens; the rows' positions of dwpe (pos0,
// pos1, pos as in the forward) += sum over B (NULL: none).
// dout (B*T, C) is the same on every tp rank; with sequence parallelism it is this rank's
// (B*T/tp, C) rows, all-gathered first.
void tp_vocab_embedding_backward(Backend *be, TPGroup *tp, const TPVocab *v, float *dwte, float *dwpe,
                                 const void *dout, const int *tokens, int B, int T, int C,
                                 int pos0, int pos1, const int *pos);

// Cross-entropy buffers for N rows. rowmax and stats live in one allocation so the sum of
// exponentials and the target logit are all-reduced together.
typedef struct {
    float *rowmax;  // (N)
    float *stats;   // (2, N): [sumexp | target logit]
    float *loss;    // (N) per-token loss
} TPXentBuffers;

// loss (N) = logsumexp(logits row) - logits[target], computed over the sharded logits
// (N, V_tp) without gathering them: max and sums are all-reduced over tp. dscale (N) non-NULL
// (a training forward whose loss gradient is known: the fused classifier): the logits are
// overwritten with tp_vocab_xent_backward's dlogits for that dscale (the same bits), written
// in the pass that writes the loss; with one shard (tp 1) that pass also computes the row
// statistics (one read of the logits; xb's rowmax and stats are then not written); NULL: the
// logits are only read.
void tp_vocab_xent_forward(Backend *be, TPGroup *tp, const TPVocab *v, TPXentBuffers *xb,
                           void *logits, const int *targets, const float *dscale, int N);

// dlogits (N, V_tp) = dscale[i] * (softmax - onehot), zero at padding; may alias logits.
void tp_vocab_xent_backward(Backend *be, const TPVocab *v, const TPXentBuffers *xb,
                            void *dlogits, const void *logits, const int *targets,
                            const float *dscale, int N);

// The calls (comm.h's CommCall) over a tensor-parallel group of tp ranks of one forward
// (backward 0) or backward (1) of tp_vocab_embedding_* on N rows of C (activation dtype),
// or of tp_vocab_xent_forward on N rows (floats; its backward moves nothing); each returns
// how many (<= TP_VOCAB_MAX_CALLS). The lists of those functions, kept beside them in
// tp_vocab.c (`megac plan` counts them). Pure.
enum { TP_VOCAB_MAX_CALLS = 2 };
int tp_vocab_embedding_calls(int sp, int backward, int tp, size_t N, size_t C,
                             CommCall calls[TP_VOCAB_MAX_CALLS]);
int tp_vocab_xent_calls(int tp, size_t N, CommCall calls[TP_VOCAB_MAX_CALLS]);
