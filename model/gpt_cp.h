// model/gpt_cp.h: context parallelism (--context-parallel-size CP, Megatron's load-balanced
// split). Each sequence of T positions is cut into 2*CP chunks of c = T/(2*CP); CP rank i
// holds chunks i and 2*CP-1-i, so every rank does the same causal attention work. They are
// the two halves of its rows (GPTRows.halves): (B, c) rows of chunk i, then (B, c) rows of
// chunk 2*CP-1-i. Everything but attention works token by token and stays local; attention
// of the local queries needs the keys and values of the whole sequence:
//   p2p (the ring, the default): CP steps; at step s the rank holds the K/V rows of rank
//     i-s, packed (N, 2*G_tp*hs): one copy of each of the G_tp kv heads, not the q part nor
//     the expanded grouped-query heads (BackendAttnWindow.kv_heads), and runs flash
//     attention of its two query chunks against that block's two key chunks (skipped when
//     every key is later, causal on the diagonal, full otherwise),
//     continuing each query's online softmax (BackendAttnWindow.accumulate), while the next
//     block travels from rank i-1 (comm_isend_recv). The backward runs the ring again with
//     the final out and lse; each block's dK/dV partial travels with it and takes one more
//     hop home, where it is added into one head of each group of dqkv's expanded k | v.
//     No (T, T) matrix and no whole-sequence K/V anywhere.
//   all_gather: every rank's qkv rows gathered once per layer (forward and again in the
//     backward) and put in sequence order; each query chunk attends to it in one call; the
//     dK/dV of the whole sequence are reduce-scattered back to their ranks.
// Dropout masks and positions are global, so CP trains the same model as one rank.
#pragma once
#include "gpt.h"

// 0 if a model of cfg can be split over cp context-parallel ranks (2*cp divides the sequence
// length; flash attention on); else -1 with one line naming the numbers in err. Pure.
int gpt_cp_check(const GPTConfig *cfg, int cp, char *err, size_t errlen);

// Global position of the first token of half h (0 or 1) of CP rank r's rows, sequences of
// T_seq positions split over cp ranks. Pure.
int gpt_cp_chunk_pos(int T_seq, int cp, int r, int h);

// The rows of a training micro-batch on this rank (two halves; sample0 as in GPTRows). Pure.
GPTRows gpt_cp_rows(const GPT *m, int64_t sample0);

// local (2, B, T_seq/(2*cp)) = rank cp_rank's two chunks of full (B, T_seq), token ids or
// targets (the micro-batch as the data gives it). Pure.
void gpt_cp_select(int *local, const int *full, int B, int T_seq, int cp, int cp_rank);

// a->atty (N, C/tp) and a->lse (two halves of (B, NH/tp, c)) of this rank's queries in a->qkv
// (N, 3*C/tp) against every key of their sequences; d: attention dropout (NULL: none).
// Collective over the CP group.
void gpt_cp_attention_forward(GPT *m, const GPTLayerActs *a, const BackendDropout *d);

// m->s.dqkv (N, 3*C/tp) [overwritten] from m->s.datty and the forward's a->qkv, a->atty,
// a->lse (same d). Collective over the CP group.
void gpt_cp_attention_backward(GPT *m, const GPTLayerActs *a, const BackendDropout *d);
