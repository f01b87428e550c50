// pipeline/pp_interleaved.h: the interleaved 1F1B schedule (virtual pipeline stages;
// Narayanan et al. 2021, Megatron-LM's --num-layers-per-virtual-pipeline-stage).
//
// With p pipeline ranks and v model chunks per rank, the model is cut into p*v virtual
// stages of equal layer count; chunk c on rank r is virtual stage c*p + r. Worked example,
// p = 2, v = 2, 8 layers: rank 0 holds layers 0-1 (chunk 0, with the embeddings) and 4-5
// (chunk 1); rank 1 holds 2-3 (chunk 0) and 6-7 (chunk 1, with the head). Activations run
// 0c0 -> 1c0 -> 0c1 -> 1c1: they wrap around from the last rank to the first, so the
// point-to-point neighbours form a ring.
//
// Each rank runs m*v forward and m*v backward micro-steps. Forward micro-step k works on
// chunk (k mod p*v) / p and micro-batch (k / (p*v))*p + k mod p (groups of p micro-batches
// per chunk); backward micro-step k on the same micro-batch, chunk v - 1 - that. Order on
// rank r: W = min((p - r - 1)*2 + (v - 1)*p, m*v) warm-up forwards, then m*v - W steady
// pairs (forward W + i, backward i), then W cool-down backwards. m must be a multiple of p.
//
// Timing and communication: the plan simulates all p ranks on a common clock of ticks.
// A rank runs its next step group (one forward, one steady pair, or one backward) at the
// first tick at which every input it needs was sent at an earlier tick, then exchanges:
// phase A (send the forward output to the next rank, receive an activation from the
// previous one), phase B (send the input gradient to the previous rank, receive an output
// gradient from the next). A message is sent and received at the same tick and phase on
// both ranks, each tick's phases in the same order everywhere: with combined send/receive
// calls (comm_send_recv) no rank can wait for a message its partner sends later, so the
// schedule cannot deadlock, and messages between two ranks (both directions at p = 2)
// arrive in the order they are expected. Received activations wait in the chunk's slot of
// that micro-batch, received gradients in the chunk's gradient queue; the plan sizes both.
#pragma once
#include "pp_stage.h"

// One tick of one rank: the step group, then the exchange. -1: nothing.
typedef struct {
    int tick;
    int f_chunk, f_micro;      // forward run this tick
    int b_chunk, b_micro;      // backward run this tick (after the forward)
    int send_fwd, send_bwd;    // 1: the forward's output goes on / the backward's input grad goes back
    int rf_chunk, rf_micro;    // activation received from the previous rank (phase A)
    int rb_chunk, rb_micro;    // output gradient received from the next rank (phase B)
} PPTick;

enum { PP_ILV_MAX_CHUNKS = 64 };  // model chunks per rank at most

typedef struct {
    int p, v, m, rank, forward_only;
    PPTick *ticks;    // (n_ticks) this rank's ticks with something to do, in clock order
    int n_ticks;
    int span;         // ticks of the whole step on the common clock
    int act_slots[PP_ILV_MAX_CHUNKS];   // (v) activation slots each chunk needs (received or in flight)
    int grad_slots[PP_ILV_MAX_CHUNKS];  // (v) output gradients each chunk queues (>= 1)
} PPIlvPlan;

// Chunk and micro-batch of micro-step k (forward = 1) or backward micro-step k. Pure.
void pp_ilv_micro_step(int p, int v, int k, int forward, int *chunk, int *micro);

// Warm-up forwards of rank r: min((p - r - 1)*2 + (v - 1)*p, m*v). Pure.
int pp_ilv_warmup(int p, int v, int m, int rank);

// Checks (p, v, m): p >= 2, 1 <= v <= 64, m a positive multiple of p. Returns 0, or -1 with
// one line in err. Pure.
int pp_ilv_check(int p, int v, int m, char *err, size_t n);

// Builds rank `rank`'s plan (forward_only: m*v forwards, no backwards, a slot is free after
// its forward). Call pp_ilv_check first; a failure of the simulation is a bug (fatal).
void pp_ilv_plan(PPIlvPlan *pl, int p, int v, int m, int rank, int forward_only);
void pp_ilv_plan_free(PPIlvPlan *pl);

// Activation slots each chunk of pipeline rank `rank` needs, training and evaluation (the
// larger), into slots (v); at least 1. Pure.
void pp_ilv_slots(int p, int v, int m, int rank, int *slots);

// Every rank's pp_ilv_slots and training grad_slots (pp_ilv_plan) from one simulation of
// each schedule: act and grad (p, v), rank r's chunk c at r * v + c. O(p v m + span p). Pure.
void pp_ilv_slots_all(int p, int v, int m, int *act, int *grad);

// Runs the plan over the ring link (prev/next: ring neighbours; link->comm->rank == rank):
// stages[c] is chunk c with n_slots[c] >= act_slots[c] activation slots (slot of micro-batch
// i: i mod n_slots[c]); grad_bufs[c][j], j < grad_slots[c], receive output gradients (the
// backward of micro-batch i reads grad_bufs[c][i mod grad_slots[c]] through
// stages[c].output_grad, which this sets). The trace records the chunk of each step.
void pp_ilv_run(const PPIlvPlan *pl, PPStage *stages, void *const *const *grad_bufs,
                const int *n_slots, PPLink *ring);
