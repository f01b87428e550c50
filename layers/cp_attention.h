// layers/cp_attention.h: context parallelism's attention (--context-parallel-size CP,
// Megatron's load-balanced split), a layer on explicit inputs: its sizes, the CP group's
// Comm, the backend and a workspace of cp_attention_workspace elements (carved by the
// model's allocator; megac plan counts the same function, and its traffic from
// cp_attention_calls).
//
// Each sequence of T_seq positions is cut into 2*CP chunks of c = T_seq/(2*CP); CP rank i
// holds chunks i and 2*CP-1-i (cp_chunk_pos), so every rank does the same causal attention
// work: its rows are two halves, (B, c) rows of chunk i, then (B, c) rows of chunk
// 2*CP-1-i. Attention of the local queries needs the keys and values of the whole
// sequence, exchanged one of these ways (CPCommType, --cp-comm-type):
//   p2p (the ring, the default): CP steps; at step s the rank holds the K/V rows of rank
//     i-s, packed (N, 2*G*hs): one copy of each of the G kv heads, not the q part nor the
//     expanded grouped-query heads (BackendAttnWindow.kv_heads), and runs flash attention of
//     its two query chunks against that block's two key chunks (skipped when every key is
//     later, causal on the diagonal, full otherwise), continuing each query's online
//     softmax (BackendAttnWindow.accumulate), while the next block travels from rank i-1
//     (comm_isend_recv). One ring step serves the forward and the backward: the backward
//     runs the ring again with the final out and lse; each block's dK/dV partial travels
//     with it, key half by key half as each is complete (overlapped with the next half's
//     attention), and takes one more hop home, where it is added into one head of each
//     group of dqkv's expanded k | v. No (T, T) matrix and no whole-sequence K/V anywhere.
//   all_gather: every rank's qkv rows gathered once per layer (forward and again in the
//     backward) and put in sequence order; each query chunk attends to it in one call; the
//     dK/dV of the whole sequence are reduce-scattered back to their ranks.
//   a2a (DeepSpeed-Ulysses): an all-to-all gives each rank NH/CP of the (expanded) heads of
//     every position: q, k, v of its heads in sequence order, one whole-sequence flash
//     attention of those heads, and an all-to-all of the output back to the rows' ranks (the
//     backward: the same for qkv, out and dout in, dqkv out). Needs NH/TP divisible by CP.
// Dropout masks and positions are global (backend/dropout.h), so CP trains the same model
// as one rank.
#pragma once
#include "backend/backend.h"
#include "comm/comm.h"

typedef enum { CP_COMM_P2P, CP_COMM_ALL_GATHER, CP_COMM_A2A, CP_COMM_NTYPES } CPCommType;

// The sizes of one context-parallel attention. N = B*T_seq/cp local rows.
typedef struct {
    CPCommType type;
    int cp, rank;   // the CP group's size (> 1) and this rank's place in it
    int B, T_seq;   // sequences of the micro-batch, positions of a whole sequence
    int NH, G, hs;  // this rank's (tensor-parallel local) query heads, kv heads, head size
} CPAttnDims;

typedef struct {
    CPAttnDims d;
    Backend *be;
    Comm *comm;  // the CP group (d.cp ranks, this one at d.rank)
    void *work;  // cp_attention_workspace(&d) elements of be->act
} CPAttention;

enum { CP_MAX_CALLS = 4 };

// Global position of the first token of half h (0 or 1) of CP rank r's rows, sequences of
// T_seq positions split over cp ranks. Pure.
int cp_chunk_pos(int T_seq, int cp, int r, int h);

// --cp-comm-type's values, for the help of train and plan (the one list: NAMES in the .c).
#define CP_COMM_TYPES_HELP "p2p (the ring, overlapped) | all_gather | a2a (Ulysses: heads over CP)"

// --cp-comm-type's name of t ("p2p", "all_gather", "a2a"). Pure.
const char *cp_comm_type_name(CPCommType t);
// The CPCommType named s; or -1 with the flag's one-line message (naming every value) in
// err (may be NULL) when s names none. Pure.
int cp_comm_type_parse(const char *s, char *err, size_t errlen);

// 0 if the layer of d can run (type known; the heads it splits divide); else -1 with one
// line in err. Pure.
int cp_attention_check(const CPAttnDims *d, char *err, size_t errlen);

// Elements (of the activation type) of the workspace the layer of d needs. Pure.
size_t cp_attention_workspace(const CPAttnDims *d);

// The calls one forward (backward 0) or one backward (1) of the layer of d makes over the
// CP group, into calls (comm.h's CommCall, in the activation dtype); returns how many
// entries it filled (<= CP_MAX_CALLS). Pure.
int cp_attention_calls(const CPAttnDims *d, int backward, CommCall calls[CP_MAX_CALLS]);

// Documents (--reset-attention-mask): the global position where each query's document
// starts (BackendAttnWindow.qstart), ints in the backend's memory, for this rank's rows
// (rows: N, the two halves of (B, c) in the rows' order; p2p and all_gather read it) and for
// the whole sequences (seq: (B, T_seq); a2a reads it). {NULL, NULL}: plain causal.
typedef struct {
    const int *rows, *seq;
} CPDocStarts;

// atty (N, NH*hs) of this rank's queries in qkv (N, 3*NH*hs; attention layout, kv heads
// expanded) against every key of their sequences (of their documents: docs), and lse
// (B*NH*N/B floats, kept for the backward: two halves of (B, NH, c); a2a: (B, NH/cp, T_seq)
// of this rank's heads); d: attention dropout (NULL: none). Collective over the CP group.
void cp_attention_forward(const CPAttention *L, void *atty, float *lse, const void *qkv,
                          const BackendDropout *d, CPDocStarts docs);

// dqkv (N, 3*NH*hs) [overwritten] from datty (N, NH*hs) and the forward's qkv, atty, lse
// (same d, docs); scratch (B, NH, N/B) floats is workspace. Collective over the CP group.
void cp_attention_backward(const CPAttention *L, void *dqkv, float *scratch, const void *datty,
                           const void *qkv, const void *atty, const float *lse,
                           const BackendDropout *d, CPDocStarts docs);
