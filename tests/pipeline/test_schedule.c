// tests/pipeline/test_schedule.c: the pipeline schedules on a recording stage (no model),
// run with one rank per stage over the real point-to-point calls:
//   mpiexec -n PP test_schedule
// For m = 1, 3, 4, 8 (and both schedules) every stage checks
//   * its order of forwards and backwards against the expected list (written out literally
//     for PP = 4, m = 8 and m = 3; from the definition otherwise);
//   * that it never holds more activations than PP - s (1F1B) or m (GPipe), never reuses a
//     slot still in use, and backwards the micro-batch that is in the slot;
//   * that every message it receives is the one the neighbour sent for that micro-batch.
// Messages are 256 KiB, beyond MPI's eager limit, so a send really waits for its receive:
// a schedule that could deadlock would hang here (the Comm timeout then fails the test).
#include "pipeline/pp_stage.h"
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { COUNT = 65536, MAX_SLOTS = 8, LOG_CHARS = 512 };

typedef struct {
    int stage, stages, n_slots, forward_only;
    float *in[MAX_SLOTS], *out[MAX_SLOTS];  // (COUNT) per slot
    float *in_grad, *out_grad;              // (COUNT)
    int held[MAX_SLOTS];                    // micro-batch in each slot, -1 if free
    int n_held, max_held, bad_messages;
    char log[LOG_CHARS];                    // "F0 F1 B0 ..."
} Recorder;

// What stage s sends for micro-batch i: forwards positive, backwards negative.
static float fwd_value(int micro, int stage) { return (float)(100 * micro + stage + 1); }
static float bwd_value(int micro, int stage) { return -(float)(100 * micro + stage + 1); }

static int all_equal(const float *x, float v) {
    for (int i = 0; i < COUNT; i++)
        if (x[i] != v) return 0;
    return 1;
}

static void fill(float *x, float v) {
    for (int i = 0; i < COUNT; i++) x[i] = v;
}

// A little uneven work, so the ranks reach the p2p calls in varying orders.
static void jitter(int micro, int stage) {
    struct timespec ts = {0, 200000L * ((micro * 7 + stage * 3) % 4)};
    nanosleep(&ts, NULL);
}

static void logf_(Recorder *r, char what, int micro) {
    size_t n = strlen(r->log);
    snprintf(r->log + n, sizeof r->log - n, "%s%c%d", n ? " " : "", what, micro);
}

static void rec_forward(void *ctx, int micro, int slot) {
    Recorder *r = ctx;
    EXPECT(slot >= 0 && slot < r->n_slots, "slot %d of %d", slot, r->n_slots);
    EXPECT(r->held[slot] < 0, "stage %d: F%d into slot %d still holding micro-batch %d", r->stage,
           micro, slot, r->held[slot]);
    if (r->stage > 0 && !all_equal(r->in[slot], fwd_value(micro, r->stage - 1))) r->bad_messages++;
    jitter(micro, r->stage);
    fill(r->out[slot], fwd_value(micro, r->stage));
    logf_(r, 'F', micro);
    if (r->forward_only) return;
    r->held[slot] = micro;
    if (++r->n_held > r->max_held) r->max_held = r->n_held;
}

static void rec_backward(void *ctx, int micro, int slot) {
    Recorder *r = ctx;
    EXPECT(r->held[slot] == micro, "stage %d: B%d on slot %d holding %d", r->stage, micro, slot,
           r->held[slot]);
    if (r->stage < r->stages - 1 && !all_equal(r->out_grad, bwd_value(micro, r->stage + 1)))
        r->bad_messages++;
    jitter(micro + 1, r->stage);
    fill(r->in_grad, bwd_value(micro, r->stage));
    logf_(r, 'B', micro);
    r->held[slot] = -1;
    r->n_held--;
}

static void *rec_input(void *ctx, int slot) { return ((Recorder *)ctx)->in[slot]; }
static const void *rec_output(void *ctx, int slot) { return ((Recorder *)ctx)->out[slot]; }
static const void *rec_input_grad(void *ctx) { return ((Recorder *)ctx)->in_grad; }

// 1F1B by its definition: warmup forwards, (forward, backward) pairs, cooldown backwards.
static void expected_1f1b(int P, int s, int m, char *out, size_t len) {
    int w = P - s - 1 < m ? P - s - 1 : m;
    Recorder tmp = {0};
    for (int f = 0; f < w; f++) logf_(&tmp, 'F', f);
    for (int i = 0; i < m - w; i++) { logf_(&tmp, 'F', w + i); logf_(&tmp, 'B', i); }
    for (int b = m - w; b < m; b++) logf_(&tmp, 'B', b);
    snprintf(out, len, "%s", tmp.log);
}

// Golden lists, written out by hand from the paper's figure (PP = 4).
static const char *golden(int P, int s, int m) {
    static const char *pp4_m8[4] = {
        "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
        "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
        "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"};
    static const char *pp4_m3[4] = {
        "F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2", "F0 F1 B0 F2 B1 B2", "F0 B0 F1 B1 F2 B2"};
    if (P == 4 && m == 8) return pp4_m8[s];
    if (P == 4 && m == 3) return pp4_m3[s];
    return NULL;
}

static void run_case(ProcessGrid *g, Recorder *r, PPScheduleKind kind, int m, int forward_only) {
    int P = g->dims.pp, s = g->coord.pp_rank;
    r->n_slots = forward_only ? 1 : pp_schedule_slots(kind, P, s, m);
    r->forward_only = forward_only;
    r->n_held = r->max_held = r->bad_messages = 0;
    r->log[0] = 0;
    for (int i = 0; i < MAX_SLOTS; i++) r->held[i] = -1;
    PPStage st = {r, rec_forward, rec_backward, rec_input, rec_output, rec_input_grad, r->out_grad};
    PPTrace *tr = pp_trace_create(g->world, 256);
    PPLink link = {g->pp, g->pp_prev, g->pp_next, COUNT, COMM_F32, tr};
    if (forward_only) pp_schedule_forward_only(&st, &link, m, r->n_slots);
    else pp_schedule_run(kind, &st, &link, m, r->n_slots);

    char want[LOG_CHARS] = "";
    const char *name = forward_only ? "forward-only" : kind == PP_SCHEDULE_GPIPE ? "gpipe" : "1f1b";
    if (forward_only || kind == PP_SCHEDULE_GPIPE) {
        Recorder tmp = {0};
        for (int f = 0; f < m; f++) logf_(&tmp, 'F', f);
        for (int b = 0; !forward_only && b < m; b++) logf_(&tmp, 'B', b);
        snprintf(want, sizeof want, "%s", tmp.log);
    } else {
        expected_1f1b(P, s, m, want, sizeof want);
        if (golden(P, s, m)) EXPECT(!strcmp(want, golden(P, s, m)), "definition vs golden list");
    }
    EXPECT(!strcmp(r->log, want), "%s PP=%d m=%d stage %d ran\n  %s\nexpected\n  %s", name, P, m,
           s, r->log, want);
    int limit = kind == PP_SCHEDULE_GPIPE ? m : (P - s < m ? P - s : m);
    if (!forward_only)
        EXPECT(r->max_held == limit, "%s PP=%d m=%d stage %d held up to %d activations, bound %d",
               name, P, m, s, r->max_held, limit);
    EXPECT(r->n_held == 0, "stage %d: %d activations left after the step", s, r->n_held);
    EXPECT(r->bad_messages == 0, "%s PP=%d m=%d stage %d: %d messages had the wrong content", name,
           P, m, s, r->bad_messages);
    int fwd = 0;
    for (size_t i = 0; i < tr->n; i++) fwd += tr->events[i].kind == PP_EV_FORWARD;
    EXPECT(fwd == m, "trace recorded %d forwards of %d", fwd, m);
    pp_trace_destroy(tr);
}

// A full trace buffer drops further events (with one warning) and never grows.
static void check_trace_overflow(ProcessGrid *g, Recorder *r) {
    r->n_slots = pp_schedule_slots(PP_SCHEDULE_1F1B, g->dims.pp, g->coord.pp_rank, 4);
    r->forward_only = 0;
    r->log[0] = 0;
    for (int i = 0; i < MAX_SLOTS; i++) r->held[i] = -1;
    r->n_held = 0;
    PPStage st = {r, rec_forward, rec_backward, rec_input, rec_output, rec_input_grad, r->out_grad};
    PPTrace *tr = pp_trace_create(g->world, 3);
    PPLink link = {g->pp, g->pp_prev, g->pp_next, COUNT, COMM_F32, tr};
    pp_schedule_run(PP_SCHEDULE_1F1B, &st, &link, 4, r->n_slots);
    EXPECT(tr->n == 3 && tr->dropped > 0, "trace of capacity 3: %zu kept, %zu dropped", tr->n,
           tr->dropped);
    EXPECT(tr->steps == 1 && tr->busy_s > 0, "bubble counters still run when the buffer is full");
    pp_trace_destroy(tr);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int world = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 1, .cp = 1, .pp = world, .ep = 1, .etp = 1},
                                  PGRID_COMM_MPI, NULL, 30.0);
    Recorder r = {.stage = g->coord.pp_rank, .stages = world};
    for (int i = 0; i < MAX_SLOTS; i++) {
        r.in[i] = core_calloc(COUNT, sizeof(float));
        r.out[i] = core_calloc(COUNT, sizeof(float));
    }
    r.in_grad = core_calloc(COUNT, sizeof(float));
    r.out_grad = core_calloc(COUNT, sizeof(float));
    const int ms[] = {1, 3, 4, 8};
    for (int k = 0; k < 4; k++) {
        run_case(g, &r, PP_SCHEDULE_1F1B, ms[k], 0);
        run_case(g, &r, PP_SCHEDULE_GPIPE, ms[k], 0);
        run_case(g, &r, PP_SCHEDULE_1F1B, ms[k], 1);
    }
    check_trace_overflow(g, &r);
    for (int i = 0; i < MAX_SLOTS; i++) { free(r.in[i]); free(r.out[i]); }
    free(r.in_grad);
    free(r.out_grad);
    int fails = test_failures_, any = 0;
    MPI_CHECK(MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    char name[64];
    snprintf(name, sizeof name, "test_schedule (PP=%d, stage %d)", world, r.stage);
    return test_result(name) || any ? 1 : 0;
}
