// pipeline/pp_stage.h: the schedules (1F1B, GPipe, forward-only), written once against an
// abstract pipeline stage.
//
// A PPStage is what a schedule drives: forward and backward of one micro-batch in one
// activation slot, and the buffers the point-to-point calls read and fill. The real stage
// (pp_schedule.c) wraps gpt_forward / gpt_backward; the tests use a recording stage with
// no model. Slot of micro-batch i: i mod n_slots; both schedules keep the micro-batches in
// flight a contiguous range, so that never reuses a slot still holding activations when
// n_slots = pp_schedule_slots(...).
//
// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron's default), stage s of PP, m micro-
// batches: warmup = min(PP - s - 1, m) forwards, then (m - warmup) steady pairs of one
// forward and one backward, then warmup cooldown backwards. At most min(PP - s, m)
// activations are held. GPipe (Huang et al. 2019): m forwards, then m backwards (m held).
// Backwards run in micro-batch order in both, so both accumulate identical gradients.
#pragma once
#include "pp_p2p.h"

typedef enum { PP_SCHEDULE_1F1B, PP_SCHEDULE_GPIPE } PPScheduleKind;

typedef struct {
    void *ctx;
    // Forward of micro-batch `micro` into activation slot `slot`; on non-first stages
    // input(slot) holds the received activation.
    void (*forward)(void *ctx, int micro, int slot);
    // Backward of `micro` (held in `slot`) with the gradient of its output in output_grad
    // (not read on the last stage); afterwards input_grad() holds d(input) and the slot is
    // free.
    void (*backward)(void *ctx, int micro, int slot);
    void *(*input)(void *ctx, int slot);          // (count) receive buffer of a slot
    const void *(*output)(void *ctx, int slot);   // (count) activation for the next stage
    const void *(*input_grad)(void *ctx);         // (count) gradient for the previous stage
    void *output_grad;                            // (count) gradient from the next stage
} PPStage;

// Activation slots stage `stage` of `stages` needs for m micro-batches: min(PP - s, m) for
// 1F1B, m for GPipe (at least 1). Pure.
int pp_schedule_slots(PPScheduleKind kind, int stages, int stage, int n_micro);

// Number of warm-up forwards of 1F1B on `stage`: min(PP - s - 1, m). Pure.
int pp_1f1b_warmup(int stages, int stage, int n_micro);

// One step of the schedule `kind`: forward and backward of micro-batches 0..m-1 on this
// stage (stage index = link->comm->rank), exchanging activations and gradients with the
// neighbours. Every stage of the pipeline group must call it with the same m and kind.
void pp_schedule_run(PPScheduleKind kind, const PPStage *st, PPLink *link, int n_micro,
                     int n_slots);

// Forward only (evaluation, and GPipe's forward phase): micro-batches 0..m-1 through the
// stages, micro-batch i in slot i mod n_slots.
void pp_schedule_forward_only(const PPStage *st, PPLink *link, int n_micro, int n_slots);
