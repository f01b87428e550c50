// pipeline/pp_1f1b.c: the pipeline schedules over an abstract PPStage: 1F1B in its three
// phases (warmup, steady, cooldown), GPipe's all-forward-all-backward, and forward-only.
// See pp_stage.h for the definitions and the slot rule.
#include "pp_stage.h"
#include "core/check.h"

int pp_1f1b_warmup(int stages, int stage, int n_micro) {
    int w = stages - stage - 1;
    return w < n_micro ? w : n_micro;
}

int pp_schedule_slots(PPScheduleKind kind, int stages, int stage, int n_micro) {
    int n = kind == PP_SCHEDULE_GPIPE ? n_micro : pp_1f1b_warmup(stages, stage, n_micro) + 1;
    if (n > n_micro) n = n_micro;
    return n > 0 ? n : 1;
}

static void forward_step(const PPStage *st, PPLink *l, int micro, int n_slots) {
    double t0 = pp_trace_begin(l->trace);
    st->forward(st->ctx, micro, micro % n_slots);
    pp_trace_end(l->trace, PP_EV_FORWARD, micro, t0);
}

static void backward_step(const PPStage *st, PPLink *l, int micro, int n_slots) {
    double t0 = pp_trace_begin(l->trace);
    st->backward(st->ctx, micro, micro % n_slots);
    pp_trace_end(l->trace, PP_EV_BACKWARD, micro, t0);
}

// 1F1B. Micro-batches in flight on stage s are always [b, f): at most warmup + 1 of them.
static void run_1f1b(const PPStage *st, PPLink *l, int m, int n_slots) {
    int warmup = pp_1f1b_warmup(l->comm->size, l->comm->rank, m);
    int steady = m - warmup;
    void *c = st->ctx;

    // warmup: forwards only, filling the pipeline
    for (int f = 0; f < warmup; f++) {
        pp_recv_forward(l, st->input(c, f % n_slots), f);
        forward_step(st, l, f, n_slots);
        pp_send_forward(l, st->output(c, f % n_slots), f);
    }

    // steady: forward of micro-batch warmup + i, then backward of micro-batch i
    if (steady > 0) pp_recv_forward(l, st->input(c, warmup % n_slots), warmup);
    for (int i = 0; i < steady; i++) {
        int f = warmup + i, b = i;
        forward_step(st, l, f, n_slots);
        pp_send_forward_recv_backward(l, st->output(c, f % n_slots), st->output_grad, f);
        backward_step(st, l, b, n_slots);
        if (i == steady - 1)
            pp_send_backward(l, st->input_grad(c), b);
        else  // b's slot is free now: f + 1 may land in it
            pp_send_backward_recv_forward(l, st->input_grad(c), st->input(c, (f + 1) % n_slots), b);
    }

    // cooldown: the backwards of the warm-up micro-batches, draining the pipeline
    for (int b = steady; b < m; b++) {
        pp_recv_backward(l, st->output_grad, b);
        backward_step(st, l, b, n_slots);
        pp_send_backward(l, st->input_grad(c), b);
    }
}

// GPipe: every forward, then every backward (in micro-batch order, like 1F1B's).
static void run_gpipe(const PPStage *st, PPLink *l, int m, int n_slots) {
    pp_schedule_forward_only(st, l, m, n_slots);
    for (int b = 0; b < m; b++) {
        pp_recv_backward(l, st->output_grad, b);
        backward_step(st, l, b, n_slots);
        pp_send_backward(l, st->input_grad(st->ctx), b);
    }
}

void pp_schedule_run(PPScheduleKind kind, const PPStage *st, PPLink *l, int n_micro, int n_slots) {
    int need = pp_schedule_slots(kind, l->comm->size, l->comm->rank, n_micro);
    if (n_slots < need)
        core_fatal("pipeline stage %d has %d activation slots; the %s schedule needs %d",
                   l->comm->rank, n_slots, kind == PP_SCHEDULE_GPIPE ? "gpipe" : "1f1b", need);
    pp_trace_step_begin(l->trace);
    if (kind == PP_SCHEDULE_GPIPE) run_gpipe(st, l, n_micro, n_slots);
    else run_1f1b(st, l, n_micro, n_slots);
    pp_trace_step_end(l->trace);
}

void pp_schedule_forward_only(const PPStage *st, PPLink *l, int n_micro, int n_slots) {
    for (int f = 0; f < n_micro; f++) {
        pp_recv_forward(l, st->input(st->ctx, f % n_slots), f);
        forward_step(st, l, f, n_slots);
        pp_send_forward(l, st->output(st->ctx, f % n_slots), f);
    }
}
