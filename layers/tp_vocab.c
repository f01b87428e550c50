// layers/tp_vocab.c: vocab-parallel embedding and cross-entropy (see tp_vocab.h).
#include "tp_vocab.h"

TPVocab tp_vocab_split(int V, int Vp, int tp, int tp_rank) {
    TPVocab v;
    v.V = V;
    v.V_tp = Vp / tp;
    v.vocab_start = tp_rank * v.V_tp;
    int valid = V - v.vocab_start;
    v.V_valid = valid < 0 ? 0 : valid > v.V_tp ? v.V_tp : valid;
    return v;
}

// out (B*T, C) += wpe rows of the rows' positions (pos0, pos1 as in the forward, or pos
// (B, T) per row); backward: dwpe (its rows) += dout rows summed over B.
static void positions(Backend *be, void *out, float *dwpe, const void *dout, const void *wpe,
                      int B, int T, int C, int pos0, int pos1, const int *pos) {
    if (pos) {  // --reset-position-ids
        if (dwpe) be->ops->position_backward(be, dwpe, dout, B, T, C, 0, pos);
        else be->ops->position_forward(be, out, wpe, B, T, C, 0, pos);
        return;
    }
    int halves = pos1 >= 0, Th = halves ? T / 2 : T;
    size_t half = (size_t)B * Th * C * backend_dtype_size(be->act);
    for (int h = 0; h < (halves ? 2 : 1); h++) {
        int p = h ? pos1 : pos0;
        if (dwpe) be->ops->position_backward(be, dwpe, (const char *)dout + h * half, B, Th, C, p, NULL);
        else be->ops->position_forward(be, (char *)out + h * half, wpe, B, Th, C, p, NULL);
    }
}

void tp_vocab_embedding_forward(Backend *be, TPGroup *tp, const TPVocab *v, void *out,
                                const int *tokens, const void *wte, const void *wpe,
                                int B, int T, int C, int pos0, int pos1, const int *pos) {
    size_t NC = (size_t)B * T * C;
    if (!tp->sequence_parallel) {
        be->ops->embedding_forward(be, out, tokens, wte, B * T, C, v->vocab_start, v->V_tp);
        comm_all_reduce(tp->comm, out, NC, tp_act_dtype(be), COMM_SUM);  // each token from one rank
        if (wpe) positions(be, out, NULL, NULL, wpe, B, T, C, pos0, pos1, pos);  // none with rope
        return;
    }
    be->ops->embedding_forward(be, tp->full, tokens, wte, B * T, C, v->vocab_start, v->V_tp);
    if (tp->comm->rank == 0 && wpe) positions(be, tp->full, NULL, NULL, wpe, B, T, C, pos0, pos1, pos);
    comm_reduce_scatter(tp->comm, tp->full, out, NC / (size_t)tp->comm->size, tp_act_dtype(be), COMM_SUM);
}

void tp_vocab_embedding_backward(Backend *be, TPGroup *tp, const TPVocab *v, float *dwte, float *dwpe,
                                 const void *dout, const int *tokens, int B, int T, int C,
                                 int pos0, int pos1, const int *pos) {
    const void *dy = dout;  // (B*T, C)
    if (tp->sequence_parallel) {
        size_t shard = (size_t)B * T * C / (size_t)tp->comm->size;
        comm_all_gather(tp->comm, dout, tp->gather, shard, tp_act_dtype(be));
        dy = tp->gather;
    }
    be->ops->embedding_backward(be, dwte, dy, tokens, B * T, C, v->vocab_start, v->V_tp);
    if (dwpe) positions(be, NULL, dwpe, dy, NULL, B, T, C, pos0, pos1, pos);
}

void tp_vocab_xent_forward(Backend *be, TPGroup *tp, const TPVocab *v, TPXentBuffers *xb,
                           void *logits, const int *targets, const float *dscale, int N) {
    if (dscale && tp->comm->size == 1) {  // one shard: the whole classifier in one pass
        be->ops->xent_backward(be, logits, xb->loss, logits, NULL, NULL, NULL, targets, dscale, N,
                               v->V_tp, v->V_valid, v->vocab_start);
        return;
    }
    // One read of the logits: this shard's max and sum of exponentials from it; with more
    // than one shard, the sums are moved onto the all-reduced max before they are added.
    float *sumexp = xb->stats, *tgt = xb->stats + N;
    be->ops->xent_stats(be, xb->rowmax, sumexp, tgt, logits, targets, N, v->V_tp, v->V_valid,
                        v->vocab_start);
    if (tp->comm->size > 1) {
        float *shard_max = xb->loss;  // (N) scratch until xent_loss writes the losses
        be->ops->copy(be, shard_max, xb->rowmax, (size_t)N * sizeof(float), BACKEND_D2D);
        comm_all_reduce(tp->comm, xb->rowmax, (size_t)N, COMM_F32, COMM_MAX);
        be->ops->xent_rescale(be, sumexp, shard_max, xb->rowmax, N);
        comm_all_reduce(tp->comm, xb->stats, 2 * (size_t)N, COMM_F32, COMM_SUM);
    }
    if (dscale)  // the fused classifier: the loss and d(logits) over the logits, one pass
        be->ops->xent_backward(be, logits, xb->loss, logits, xb->rowmax, sumexp, tgt, targets,
                               dscale, N, v->V_tp, v->V_valid, v->vocab_start);
    else
        be->ops->xent_loss(be, xb->loss, sumexp, xb->rowmax, tgt, N);
}

void tp_vocab_xent_backward(Backend *be, const TPVocab *v, const TPXentBuffers *xb,
                            void *dlogits, const void *logits, const int *targets,
                            const float *dscale, int N) {
    be->ops->xent_backward(be, dlogits, NULL, logits, xb->rowmax, xb->stats, NULL, targets,
                           dscale, N, v->V_tp, v->V_valid, v->vocab_start);
}

// The calls made above (keep them in step).
int tp_vocab_embedding_calls(int sp, int backward, int tp, size_t N, size_t C,
                             CommCall calls[TP_VOCAB_MAX_CALLS]) {
    if (!sp) {  // each token's row from one rank, summed forward; the backward moves nothing
        if (backward) return 0;
        calls[0] = (CommCall){COMM_ALL_REDUCE, N * C, 1, 0};
        return 1;
    }
    calls[0] = (CommCall){backward ? COMM_ALL_GATHER : COMM_REDUCE_SCATTER, N * C / (size_t)tp, 1, 0};
    return 1;
}

int tp_vocab_xent_calls(int tp, size_t N, CommCall calls[TP_VOCAB_MAX_CALLS]) {
    if (tp == 1) return 0;  // one shard: no reduction at all
    calls[0] = (CommCall){COMM_ALL_REDUCE, N, 1, 1};      // the row maxima
    calls[1] = (CommCall){COMM_ALL_REDUCE, 2 * N, 1, 1};  // sums of exps and target logits
    return 2;
}
