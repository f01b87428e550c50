// pipeline/schedule.h: how one training step runs its micro-batches through the stages.
//
// A step is m micro-batches, forward and backward. PPStep wraps this rank's model stage
// (gpt_forward / gpt_backward) as a PPStage and hands it to a schedule in pp_1f1b.c:
// 1F1B (default) or GPipe (--pipeline-schedule gpipe); or, with v model chunks per rank, to
// the interleaved 1F1B of pp_interleaved.h (pp_step_set_chunks, pp_chunks.c). With one
// stage 1F1B and GPipe reduce to the plain loop (1F1B: forward 0, backward 0, forward 1,
// ...; the p2p calls are no-ops). The schedules know nothing about layers; this file knows
// nothing about the order.
#pragma once
#include "model/gpt.h"
#include "parallel_state/pgrid_comm.h"
#include "pp_interleaved.h"
#include "pp_stage.h"
#include "pp_trace.h"

// Fills host buffers tokens (B, T) and targets (B, T) with micro-batch `micro` of the step.
typedef void (*PPBatchFn)(void *ctx, int micro, int *tokens, int *targets);

typedef struct {
    GPT *model;
    ProcessGrid *grid;
    PPScheduleKind kind;
    PPBatchFn get_batch;
    void *batch_ctx;
    int n_micro;        // micro-batches per step on this data-parallel rank
    float loss_scale;   // gradient of the loss per token: 1 / (tokens per DP rank per step)
    int forward_only;   // 1 during pp_forward_only: the forwards keep their logits (else the
                        // last stage's forward writes d(logits) for loss_scale, gpt_forward)
    int *tokens, *targets;  // (B, T) host staging buffers
    void *dout;         // (N_sp, C) gradient of the stage output received from the next stage
    double loss;        // summed per-token loss of the current run (last stage)
    double *loss_acc;   // (1) the same sum on the model's backend, read once per run
    PPTrace *trace;     // timeline and bubble counters; NULL: none
    PPStage stage;      // the model stage as the schedules see it (ctx = this PPStep)
    PPLink link;        // the pipeline group's point-to-point calls
    // interleaved schedule (pp_step_set_chunks, pp_chunks.c); n_chunks 1: not interleaved
    int n_chunks;       // v model chunks on this rank
    GPT **chunks;       // (v) borrowed; chunk c is virtual stage c*PP + pp_rank; chunks[0] == model
    struct PPChunk *chunk_ctx;  // (v) adapters
    PPStage *chunk_stages;      // (v)
    void ***grad_bufs;          // (v) per chunk (grad_n[c]) received output gradients
    int grad_n[PP_ILV_MAX_CHUNKS];  // (v) the queues' buffers, sized for the largest n_micro
    PPIlvPlan plan, eval_plan;  // this rank's training and forward-only plans (of pl.m
                                // micro-batches: made again when a run asks for another)
    PPLink ring;                // the pipeline group as a ring (prev/next wrap around)
} PPStep;

// Sets up *st in place (it must not move afterwards): staging buffers, the received-gradient
// buffer (on the model's backend), the stage adapter and the link over grid->pp. The trace
// (may be NULL) is borrowed; with a device backend its spans sync the device. Allocates
// everything the steps need, once. Never fails.
void pp_step_init(PPStep *st, GPT *model, ProcessGrid *grid, PPScheduleKind kind,
                  PPBatchFn get_batch, void *batch_ctx, int n_micro, float loss_scale,
                  PPTrace *trace);
// Frees what pp_step_init allocated. Never fails.
void pp_step_free(PPStep *st);

// Forward and backward of all micro-batches; parameter gradients accumulate in the model.
// Returns the sum of per-token losses on the last stage (0 on other stages).
double pp_forward_backward(PPStep *st);

// Forward only (evaluation). Returns the summed loss on the last stage (0 elsewhere).
double pp_forward_only(PPStep *st);

// Forward of micro-batch `micro` through stage (or chunk) m into its activation slot: reads
// the batch where m needs it (first, last, or every stage with --reset-*), draws m's dropout
// masks from the micro-batch's first sample in the step's global batch (pgrid_micro_first),
// and on the last stage adds the loss to st->loss_acc. The one forward of every schedule.
void pp_forward_micro(PPStep *st, GPT *m, int micro, int slot);

// Interleaved schedule: this rank runs the v model chunks chunks[0..v-1] (built with
// gpt_create(..., PP*v, c*PP + pp_rank, ...) and pp_ilv_slots' slots) with Megatron's
// interleaved 1F1B; call after pp_step_init (model == chunks[0]). Allocates the adapters,
// the gradient queues and the plans, once, for st->n_micro, the largest count a run may
// ask for (the global batch's: a ramp-up only grows to it). A run of another count (each a
// multiple of PP: pp_ilv_check) plans again; the queues and the chunks' slots it needs are
// never more than the largest count's (the plans' buffers grow with the count).
void pp_step_set_chunks(PPStep *st, GPT **chunks, int v);

// For pp_schedule.c: the interleaved run (summed loss on the last rank) and its teardown.
double pp_chunks_run(PPStep *st, int forward_only);
void pp_chunks_free(PPStep *st);

// "1f1b" -> PP_SCHEDULE_1F1B, "gpipe" -> PP_SCHEDULE_GPIPE; -1 for anything else. Pure.
int pp_schedule_parse(const char *name);
