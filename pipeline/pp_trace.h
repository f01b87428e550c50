// pipeline/pp_trace.h: a timeline of the training steps on this rank, and the pipeline
// bubble measured from it.
//
// Spans (forward, backward, the waits of each point-to-point call, gradient sync,
// optimizer) go into an event buffer allocated once; when it is full further events are
// dropped with one warning. `--trace FILE` writes them as Chrome trace-event JSON (open in
// Perfetto or chrome://tracing): FILE.rank<R>.json per rank, then rank 0 merges them into
// FILE, one process row per rank. With capacity 0 nothing is stored, but the bubble
// counters still run: busy = forward + backward time, and the schedule's wall time.
#pragma once
#include <stddef.h>
#include "comm/comm.h"

typedef enum {
    PP_EV_FORWARD, PP_EV_BACKWARD,
    PP_EV_RECV_FORWARD, PP_EV_SEND_FORWARD, PP_EV_RECV_BACKWARD, PP_EV_SEND_BACKWARD,
    PP_EV_SEND_FORWARD_RECV_BACKWARD, PP_EV_SEND_BACKWARD_RECV_FORWARD,
    PP_EV_GRAD_SYNC, PP_EV_OPTIMIZER, PP_EV_STEP,
    PP_EV_SEND_FORWARD_RECV_FORWARD, PP_EV_SEND_BACKWARD_RECV_BACKWARD,  // interleaved (ring)
    PP_EV_GRAD_BUCKET,  // one DP gradient bucket's reduction, start to completion (own row)
    PP_EV_PARAM_GATHER, // one ZeRO-1 bucket's parameter all-gather (--overlap-param-gather)
    PP_EV_NKINDS
} PPEventKind;

typedef struct {
    double t0, t1;  // seconds since the trace's epoch
    int micro;      // micro-batch, or -1
    int kind;       // PPEventKind
    int chunk;      // model chunk of a forward/backward (interleaved schedule), else -1
} PPEvent;

typedef struct {
    double epoch;               // core_now() at creation (after a barrier: common to all ranks)
    PPEvent *events;            // (cap)
    size_t n, cap, dropped;
    void (*sync)(void *ctx);    // called before each span's end time is read (device queues)
    void *sync_ctx;
    int chunk;                  // model chunk of the span being timed (interleaved), else -1
    // bubble counters: forward + backward time and schedule wall time, summed over steps
    // (the first step, which warms caches up, is left out of the report when there are more)
    int steps;
    double busy_s, sched_s;
    double first_busy_s, first_sched_s;
    int in_step;
    double step_t0, step_busy;  // the current step
} PPTrace;

// Creates a recorder holding up to `cap` events (0: counters only). Call on every rank of
// `world` at the same point: it synchronises them so all ranks share one epoch.
PPTrace *pp_trace_create(Comm *world, size_t cap);
void pp_trace_destroy(PPTrace *tr);

// Start time of a span (seconds since the epoch); 0 when tr is NULL. Never fails.
double pp_trace_begin(const PPTrace *tr);
// Ends the span started at t0 (syncs first if tr->sync is set) and records it. NULL is fine.
void pp_trace_end(PPTrace *tr, PPEventKind kind, int micro, double t0);

// Records a span timed elsewhere: t0, t1 are core_now() values (e.g. a gradient bucket's
// reduction, micro = its index). No sync. NULL is fine.
void pp_trace_span(PPTrace *tr, PPEventKind kind, int micro, double t0, double t1);

// Brackets one pipeline schedule run (a step's forward and backward) for the bubble counters.
void pp_trace_step_begin(PPTrace *tr);
void pp_trace_step_end(PPTrace *tr);

// Zeroes the bubble counters (the events stay). Never fails.
void pp_trace_reset_counters(PPTrace *tr);

// "forward", "send_forward_recv_backward", ... Pure.
const char *pp_trace_kind_name(PPEventKind kind);

// Writes path.rank<R>.json on every rank of `world`, then rank 0 merges them into `path`
// (the ranks must share a file system; otherwise merge later with the per-rank files).
// `label` names this rank's row (e.g. "stage 1 (tp 0, dp 0)"). Collective.
void pp_trace_write(PPTrace *tr, Comm *world, const char *path, const char *label);

// Gathers the bubble counters of every rank; rank 0 prints one line per pipeline stage:
// the measured bubble (1 - busy / schedule time) beside (PP - 1) / (m + PP - 1), or with v
// model chunks per rank (interleaved) beside (PP - 1) / (v*m + PP - 1), which is Megatron's
// bubble-to-compute ratio (PP - 1) / (v*m) (also printed) as a fraction of the step. Collective.
void pp_trace_report_bubble(PPTrace *tr, Comm *world, int pp_rank, int pp, int n_micro, int v);
