// tests/pipeline/test_interleaved.c: the interleaved 1F1B schedule (pipeline/pp_interleaved.h).
//   mpiexec -n P test_interleaved      (P = 2 or 4; run with -n 1 the pure checks only)
// Pure checks, on every rank: Megatron's micro-step mapping and warm-up counts (golden lists
// for p = 2, v = 2 and p = 4, v = 2), the refusals of pp_ilv_check, and for p = 2..5,
// v = 1..4, m = p, 2p, 3p the plans of all ranks together: each rank runs Megatron's order,
// every send has its receive at the same tick on the neighbour with the same (chunk,
// micro-batch), and every input arrives at a tick before the step that reads it.
// MPI run (P ranks, v = 2 and 3, m = P and 2P): recording chunks (no model) over the real
// ring; every chunk checks its order, that a slot it writes is free, and the content of every
// activation and gradient it receives. Messages are 256 KiB, beyond MPI's eager limit, so a
// send waits for its receive: a plan that could deadlock hangs here (the Comm timeout fails it).
#include "pipeline/pp_interleaved.h"
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

enum { COUNT = 65536, MAXS = 16, LOG = 1024 };

// "F0.0 F1.0 ..." : Megatron's order on rank r, from the definition.
static void expected_order(int p, int v, int m, int r, int fonly, char *out, size_t len) {
    int total = m * v, w = fonly ? total : pp_ilv_warmup(p, v, m, r), c, i;
    size_t n = 0;
    out[0] = 0;
    for (int j = 0; j < total + (fonly ? 0 : w); j++) {
        int f = j < total ? j : -1, b = fonly ? -1 : j - w;
        if (f >= 0) {
            pp_ilv_micro_step(p, v, f, 1, &c, &i);
            n += (size_t)snprintf(out + n, len - n, "%sF%d.%d", n ? " " : "", i, c);
        }
        if (b >= 0) {
            pp_ilv_micro_step(p, v, b, 0, &c, &i);
            n += (size_t)snprintf(out + n, len - n, "%sB%d.%d", n ? " " : "", i, c);
        }
    }
}

static void plan_order(const PPIlvPlan *pl, char *out, size_t len) {
    size_t n = 0;
    out[0] = 0;
    for (int k = 0; k < pl->n_ticks; k++) {
        const PPTick *t = &pl->ticks[k];
        if (t->f_chunk >= 0) n += (size_t)snprintf(out + n, len - n, "%sF%d.%d", n ? " " : "", t->f_micro, t->f_chunk);
        if (t->b_chunk >= 0) n += (size_t)snprintf(out + n, len - n, "%sB%d.%d", n ? " " : "", t->b_micro, t->b_chunk);
    }
}

static const PPTick *tick_at(const PPIlvPlan *pl, int tick) {
    for (int k = 0; k < pl->n_ticks; k++)
        if (pl->ticks[k].tick == tick) return &pl->ticks[k];
    return NULL;
}

// Tick of the exchange in which rank pl receives (chunk, micro) (fwd = 1: activation), or -1.
static int recv_tick(const PPIlvPlan *pl, int fwd, int chunk, int micro) {
    for (int k = 0; k < pl->n_ticks; k++) {
        const PPTick *t = &pl->ticks[k];
        if (fwd ? t->rf_chunk == chunk && t->rf_micro == micro : t->rb_chunk == chunk && t->rb_micro == micro)
            return t->tick;
    }
    return -1;
}

static void check_plans(int p, int v, int m, int fonly) {
    PPIlvPlan pl[8];
    for (int r = 0; r < p; r++) pp_ilv_plan(&pl[r], p, v, m, r, fonly);
    static char got[8192], want[8192];
    for (int r = 0; r < p; r++) {
        plan_order(&pl[r], got, sizeof got);
        expected_order(p, v, m, r, fonly, want, sizeof want);
        EXPECT(!strcmp(got, want), "p=%d v=%d m=%d rank %d order\n  %s\nexpected\n  %s", p, v, m, r, got, want);
        int next = (r + 1) % p, prev = (r + p - 1) % p;
        for (int k = 0; k < pl[r].n_ticks; k++) {
            const PPTick *t = &pl[r].ticks[k];
            const PPTick *tn = tick_at(&pl[next], t->tick), *tp = tick_at(&pl[prev], t->tick);
            if (t->send_fwd)  // the next rank takes it at the same tick, as (chunk [+1 on the wrap])
                EXPECT(tn && tn->rf_chunk == t->f_chunk + (r == p - 1) && tn->rf_micro == t->f_micro,
                       "p=%d v=%d m=%d: rank %d tick %d sends F%d.%d unmatched", p, v, m, r, t->tick,
                       t->f_micro, t->f_chunk);
            if (t->send_bwd)
                EXPECT(tp && tp->rb_chunk == t->b_chunk - (r == 0) && tp->rb_micro == t->b_micro,
                       "p=%d v=%d m=%d: rank %d tick %d sends B%d.%d unmatched", p, v, m, r, t->tick,
                       t->b_micro, t->b_chunk);
            if (t->f_chunk >= 0 && !(r == 0 && t->f_chunk == 0)) {
                int rt = recv_tick(&pl[r], 1, t->f_chunk, t->f_micro);
                EXPECT(rt >= 0 && rt < t->tick, "p=%d v=%d m=%d rank %d: F%d.%d at tick %d, input at %d",
                       p, v, m, r, t->f_micro, t->f_chunk, t->tick, rt);
            }
            if (t->b_chunk >= 0 && !(r == p - 1 && t->b_chunk == v - 1)) {
                int rt = recv_tick(&pl[r], 0, t->b_chunk, t->b_micro);
                EXPECT(rt >= 0 && rt < t->tick, "p=%d v=%d m=%d rank %d: B%d.%d at tick %d, gradient at %d",
                       p, v, m, r, t->b_micro, t->b_chunk, t->tick, rt);
            }
        }
    }
    for (int r = 0; r < p; r++) pp_ilv_plan_free(&pl[r]);
}

static void check_pure(void) {
    // Megatron's mapping: groups of p micro-batches per chunk; backwards from the last chunk
    int c, i;
    const int p2v2[8][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}};
    for (int k = 0; k < 8; k++) {
        pp_ilv_micro_step(2, 2, k, 1, &c, &i);
        EXPECT(c == p2v2[k][0] && i == p2v2[k][1], "p=2 v=2 forward step %d: chunk %d micro %d", k, c, i);
        pp_ilv_micro_step(2, 2, k, 0, &c, &i);
        EXPECT(c == 1 - p2v2[k][0] && i == p2v2[k][1], "p=2 v=2 backward step %d: chunk %d micro %d", k, c, i);
    }
    EXPECT_EQ_INT(pp_ilv_warmup(4, 2, 8, 0), 10);  // (4-0-1)*2 + (2-1)*4
    EXPECT_EQ_INT(pp_ilv_warmup(4, 2, 8, 3), 4);
    EXPECT_EQ_INT(pp_ilv_warmup(4, 2, 4, 0), 8);   // capped at m*v
    // golden: p = 4, v = 2, m = 8, rank 0 and rank 3 (Megatron's order)
    char want[LOG];
    expected_order(4, 2, 8, 0, 0, want, sizeof want);
    EXPECT(!strncmp(want, "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 "
                    "F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0", 120), "rank 0: %s", want);
    expected_order(4, 2, 8, 3, 0, want, sizeof want);
    EXPECT(!strcmp(want, "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 "
                   "F6.0 B2.0 F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0"),
           "rank 3: %s", want);
    // activations chunk 0 of rank 0 holds at its peak: every forward of chunk 0 before its
    // first backward (Megatron's too): m = 8 at p = 4, v = 2; 2 groups of 8 at p = 8, v = 4
    int slots[4];
    pp_ilv_slots(4, 2, 8, 0, slots);
    EXPECT_EQ_INT(slots[0], 8);
    pp_ilv_slots(8, 4, 64, 0, slots);
    EXPECT_EQ_INT(slots[0], 16);
    char err[256];
    EXPECT(pp_ilv_check(2, 2, 3, err, sizeof err) != 0 && strstr(err, "multiple of"), "m = 3 at p = 2");
    EXPECT(pp_ilv_check(1, 2, 4, err, sizeof err) != 0, "p = 1");
    EXPECT(pp_ilv_check(4, 2, 8, err, sizeof err) == 0, "p = 4, v = 2, m = 8");
    for (int pp = 2; pp <= 5; pp++)
        for (int v = 1; v <= 4; v++)
            for (int k = 1; k <= 3; k++) {
                check_plans(pp, v, k * pp, 0);
                check_plans(pp, v, k * pp, 1);
            }
    // a batch ramp-up runs smaller m on the buffers of the largest (pp_chunks.c plans again):
    // no rank's activation slots or gradient queues of any chunk shrink as m grows
    for (int pp = 2; pp <= 8; pp++)
        for (int v = 2; v <= 4; v++) {
            int act[2][32], grad[2][32];
            for (int k = 1; k <= 12; k++) {
                int *a = act[k % 2], *g = grad[k % 2], *pa = act[(k + 1) % 2], *pg = grad[(k + 1) % 2];
                pp_ilv_slots_all(pp, v, k * pp, a, g);
                for (int x = 0; x < pp * v && k > 1; x++)
                    EXPECT(a[x] >= pa[x] && g[x] >= pg[x], "p %d v %d m %d rank %d chunk %d: slots %d "
                           "(m - p: %d), gradient queue %d (%d)", pp, v, k * pp, x / v, x % v, a[x], pa[x],
                           g[x], pg[x]);
            }
        }
}

// --- recording chunks over the real ring -------------------------------------------------
typedef struct {
    int vstage, vstages, n_slots, fonly;  // virtual stage c*p + r of p*v
    float *in[MAXS], *out[MAXS], *in_grad;
    PPStage *self;
    int held[MAXS], bad;
} Chunk;

static float fv(int micro, int s) { return (float)(1000 * micro + s + 1); }
static float bv(int micro, int s) { return -(float)(1000 * micro + s + 1); }
static int all_eq(const float *x, float v) {
    for (int i = 0; i < COUNT; i++)
        if (x[i] != v) return 0;
    return 1;
}
static void fill(float *x, float v) {
    for (int i = 0; i < COUNT; i++) x[i] = v;
}

static void rec_forward(void *ctx, int micro, int slot) {
    Chunk *k = ctx;
    EXPECT(k->held[slot] < 0, "F%d (virtual stage %d) into slot %d holding %d", micro, k->vstage, slot, k->held[slot]);
    if (k->vstage > 0 && !all_eq(k->in[slot], fv(micro, k->vstage - 1))) k->bad++;
    fill(k->out[slot], fv(micro, k->vstage));
    if (!k->fonly) k->held[slot] = micro;
}

static void rec_backward(void *ctx, int micro, int slot) {
    Chunk *k = ctx;
    EXPECT(k->held[slot] == micro, "B%d (virtual stage %d) on slot %d holding %d", micro, k->vstage, slot, k->held[slot]);
    if (k->vstage < k->vstages - 1 && !all_eq(k->self->output_grad, bv(micro, k->vstage + 1))) k->bad++;
    fill(k->in_grad, bv(micro, k->vstage));
    k->held[slot] = -1;
}

static void *rec_input(void *ctx, int slot) { return ((Chunk *)ctx)->in[slot]; }
static const void *rec_output(void *ctx, int slot) { return ((Chunk *)ctx)->out[slot]; }
static const void *rec_input_grad(void *ctx) { return ((Chunk *)ctx)->in_grad; }

static void run_mpi(ProcessGrid *g, int v, int m, int fonly) {
    int p = g->dims.pp, r = g->coord.pp_rank;
    PPIlvPlan pl;
    pp_ilv_plan(&pl, p, v, m, r, fonly);
    Chunk ch[4];
    PPStage st[4];
    void **gb[4];
    int slots[4];
    for (int c = 0; c < v; c++) {
        slots[c] = pl.act_slots[c] > 0 ? pl.act_slots[c] : 1;
        EXPECT(slots[c] <= MAXS, "chunk %d needs %d slots", c, slots[c]);
        ch[c] = (Chunk){.vstage = c * p + r, .vstages = p * v, .n_slots = slots[c], .fonly = fonly,
                        .in_grad = core_calloc(COUNT, sizeof(float)), .self = &st[c]};
        for (int s = 0; s < MAXS; s++) {
            ch[c].in[s] = core_calloc(COUNT, sizeof(float));
            ch[c].out[s] = core_calloc(COUNT, sizeof(float));
            ch[c].held[s] = -1;
        }
        st[c] = (PPStage){&ch[c], rec_forward, rec_backward, rec_input, rec_output, rec_input_grad, NULL};
        gb[c] = core_calloc((size_t)pl.grad_slots[c], sizeof(void *));
        for (int j = 0; j < pl.grad_slots[c]; j++) gb[c][j] = core_calloc(COUNT, sizeof(float));
    }
    PPTrace *tr = pp_trace_create(g->world, 4096);
    PPLink ring = {g->pp, (r + p - 1) % p, (r + 1) % p, COUNT, COMM_F32, tr};
    pp_ilv_run(&pl, st, (void *const *const *)gb, slots, &ring);
    int fwd = 0, bwd = 0;
    for (size_t e = 0; e < tr->n; e++) {
        fwd += tr->events[e].kind == PP_EV_FORWARD;
        bwd += tr->events[e].kind == PP_EV_BACKWARD;
        if (tr->events[e].kind == PP_EV_FORWARD) EXPECT(tr->events[e].chunk >= 0, "forward without its chunk");
    }
    EXPECT(fwd == m * v && bwd == (fonly ? 0 : m * v), "p=%d v=%d m=%d: %d forwards, %d backwards", p, v, m, fwd, bwd);
    for (int c = 0; c < v; c++) {
        EXPECT(ch[c].bad == 0, "p=%d v=%d m=%d rank %d chunk %d: %d messages with the wrong content", p, v, m, r, c, ch[c].bad);
        for (int s = 0; s < MAXS; s++) {
            EXPECT(fonly || ch[c].held[s] < 0, "chunk %d slot %d still held", c, s);
            free(ch[c].in[s]);
            free(ch[c].out[s]);
        }
        free(ch[c].in_grad);
        for (int j = 0; j < pl.grad_slots[c]; j++) free(gb[c][j]);
        free(gb[c]);
    }
    pp_trace_destroy(tr);
    pp_ilv_plan_free(&pl);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int world = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    check_pure();
    if (world >= 2) {
        ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 1, .cp = 1, .pp = world, .ep = 1, .etp = 1},
                                      PGRID_COMM_MPI, NULL, 30.0);
        for (int v = 2; v <= 3; v++)
            for (int k = 1; k <= 2; k++) {
                run_mpi(g, v, k * world, 0);
                run_mpi(g, v, k * world, 1);
            }
        pgrid_destroy(g);
    }
    int fails = test_failures_, any = 0;
    MPI_CHECK(MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    char name[64];
    snprintf(name, sizeof name, "test_interleaved (P=%d)", world);
    return test_result(name) || any ? 1 : 0;
}
