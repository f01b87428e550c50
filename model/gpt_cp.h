// model/gpt_cp.h: context parallelism (--context-parallel-size CP, Megatron's load-balanced
// split) of a GPT stage. Each sequence of T positions is cut into 2*CP chunks; CP rank i
// holds chunks i and 2*CP-1-i (cp_chunk_pos), the two halves of its rows (GPTRows.halves).
// Everything but attention works token by token and stays local; attention of the local
// queries against the whole sequence's keys is the layer of layers/cp_attention.h, which
// this stage builds from its sizes, its CP group and its workspace (GPT.s.cp_buf).
// Dropout masks and positions are global, so CP trains the same model as one rank.
#pragma once
#include "gpt.h"
#include "layers/cp_attention.h"

// 0 if a model of cfg can be split over cp context-parallel ranks at tensor parallelism tp
// with the exchange `type` (2*cp divides the sequence length; flash attention on; the
// layer's own check, cp_attention_check); else -1 with one line naming the numbers in err.
// Pure.
int gpt_cp_check(const GPTConfig *cfg, int tp, int cp, CPCommType type, char *err, size_t errlen);

// The rows of the training micro-batch in slot a on this rank (two halves; its sample0 and
// documents as in GPTRows). Pure.
GPTRows gpt_cp_rows(const GPT *m, const GPTActs *a);

// local (2, B, T_seq/(2*cp)) = rank cp_rank's two chunks of full (B, T_seq), token ids or
// targets (the micro-batch as the data gives it). Pure.
void gpt_cp_select(int *local, const int *full, int B, int T_seq, int cp, int cp_rank);

// The stage's context-parallel attention layer (cp > 1): its sizes, group and workspace.
CPAttention gpt_cp_attention(const GPT *m);
