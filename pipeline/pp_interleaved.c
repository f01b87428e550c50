// pipeline/pp_interleaved.c: the interleaved 1F1B schedule: Megatron's micro-step order per
// rank, a tick-by-tick simulation of all ranks that times the steps and pairs every send
// with its receive, and the runner that replays one rank's plan over a ring of ranks.
// See pp_interleaved.h for the definitions.
#include "pp_interleaved.h"
#include "core/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pp_ilv_micro_step(int p, int v, int k, int forward, int *chunk, int *micro) {
    int in_group = k % (p * v);
    int c = in_group / p;
    *chunk = forward ? c : v - 1 - c;
    *micro = k / (p * v) * p + in_group % p;
}

int pp_ilv_warmup(int p, int v, int m, int rank) {
    int w = (p - rank - 1) * 2 + (v - 1) * p;
    return w < m * v ? w : m * v;
}

int pp_ilv_check(int p, int v, int m, char *err, size_t n) {
    if (p < 2 || v < 1 || v > PP_ILV_MAX_CHUNKS) {
        snprintf(err, n, "the interleaved schedule needs pipeline-model-parallel-size >= 2 (got %d) "
                 "and 1 to %d model chunks per rank (got %d)", p, PP_ILV_MAX_CHUNKS, v);
        return -1;
    }
    if (m <= 0 || m % p) {
        snprintf(err, n, "the interleaved schedule needs the number of micro-batches per step (%d) to "
                 "be a multiple of pipeline-model-parallel-size %d (Megatron's rule)", m, p);
        return -1;
    }
    return 0;
}

// Step group j of rank r: forward micro-step *f and/or backward micro-step *b (-1: none).
static void group(int p, int v, int m, int r, int fonly, int j, int *f, int *b) {
    int total = m * v, w = fonly ? total : pp_ilv_warmup(p, v, m, r);
    *f = *b = -1;
    if (j < w) *f = j;
    else if (j < total) *f = j, *b = j - w;
    else *b = j - w;
}

// Simulation state: for every rank and (chunk, micro), the tick of its forward and backward.
typedef struct {
    int p, v, m, fonly;
    int *tf, *tb;  // (p, v, m) ticks, -1 not yet
} Sim;

static int *at(const Sim *s, int *t, int r, int c, int i) { return &t[((size_t)r * s->v + c) * s->m + i]; }

// 1 if the producer of rank r's input for forward (c, i) sent it before tick `tick`.
static int fwd_ready(const Sim *s, int r, int c, int i, int tick) {
    int t = r > 0 ? *at(s, s->tf, r - 1, c, i) : c > 0 ? *at(s, s->tf, s->p - 1, c - 1, i) : 0;
    return r == 0 && c == 0 ? 1 : t >= 0 && t < tick;
}

// 1 if the output gradient for backward (c, i) on rank r was sent before `tick` (or is the loss's).
static int bwd_ready(const Sim *s, int r, int c, int i, int tick) {
    if (r == s->p - 1 && c == s->v - 1) return *at(s, s->tf, r, c, i) >= 0;
    int t = r < s->p - 1 ? *at(s, s->tb, r + 1, c, i) : *at(s, s->tb, 0, c + 1, i);
    return t >= 0 && t < tick;
}

// Runs every rank's step groups as early as their inputs allow; returns the span in ticks.
static int simulate(Sim *s) {
    int p = s->p, v = s->v, m = s->m;
    int *pos = core_calloc((size_t)p, sizeof(int)), done = 0, tick = 0, idle = 0;
    while (done < p) {
        int progress = 0;
        for (int r = 0; r < p; r++) {
            int n = s->fonly ? m * v : m * v + pp_ilv_warmup(p, v, m, r), f, b, fc = 0, fi = 0, bc = 0, bi = 0;
            if (pos[r] >= n) continue;
            group(p, v, m, r, s->fonly, pos[r], &f, &b);
            if (f >= 0) pp_ilv_micro_step(p, v, f, 1, &fc, &fi);
            if (b >= 0) pp_ilv_micro_step(p, v, b, 0, &bc, &bi);
            if (f >= 0 && !fwd_ready(s, r, fc, fi, tick)) continue;
            if (b >= 0 && !(f >= 0 && fc == bc && fi == bi) && !bwd_ready(s, r, bc, bi, tick)) continue;
            if (f >= 0) *at(s, s->tf, r, fc, fi) = tick;
            if (b >= 0) *at(s, s->tb, r, bc, bi) = tick;
            progress = 1;
            if (++pos[r] == n) done++;
        }
        idle = progress ? 0 : idle + 1;
        if (idle > 2) core_fatal("interleaved schedule p=%d v=%d m=%d: no rank can proceed at tick %d", p, v, m, tick);
        tick++;
    }
    free(pos);
    return tick;
}

// Largest number of intervals [lo[k], hi[k]] (half-ticks < span2) covering one point. Pure.
static int max_overlap(const int *lo, const int *hi, int n, int span2) {
    int *diff = core_calloc((size_t)span2 + 1, sizeof(int)), best = 0, cnt = 0;
    for (int k = 0; k < n; k++) {
        diff[lo[k]]++;
        diff[hi[k] + 1]--;
    }
    for (int x = 0; x < span2; x++) {
        cnt += diff[x];
        if (cnt > best) best = cnt;
    }
    free(diff);
    return best;
}

// Slot and queue sizes of rank r. Half-tick 2t: the steps of tick t; 2t + 1: its exchange.
static void size_buffers(const Sim *s, PPIlvPlan *pl, int span) {
    int r = pl->rank, p = s->p, m = s->m;
    int *lo = core_calloc((size_t)m, sizeof(int)), *hi = core_calloc((size_t)m, sizeof(int));
    for (int c = 0; c < s->v; c++) {
        for (int i = 0; i < m; i++) {
            int tf = *at(s, s->tf, r, c, i);
            int tin = r > 0 ? *at(s, s->tf, r - 1, c, i) : c > 0 ? *at(s, s->tf, p - 1, c - 1, i) : -1;
            lo[i] = tin >= 0 ? 2 * tin + 1 : 2 * tf;
            hi[i] = s->fonly ? 2 * tf + 1 : 2 * *at(s, s->tb, r, c, i);
        }
        pl->act_slots[c] = max_overlap(lo, hi, m, 2 * span + 2);
        int n = 0;
        for (int i = 0; i < m && !s->fonly && !(r == p - 1 && c == s->v - 1); i++, n++) {
            lo[i] = 2 * (r < p - 1 ? *at(s, s->tb, r + 1, c, i) : *at(s, s->tb, 0, c + 1, i)) + 1;
            hi[i] = 2 * *at(s, s->tb, r, c, i);
        }
        pl->grad_slots[c] = n ? max_overlap(lo, hi, n, 2 * span + 2) : 1;
        if (pl->grad_slots[c] < 1) pl->grad_slots[c] = 1;
    }
    free(lo);
    free(hi);
}

// The steps of rank q in table t by tick: x[tick] = c*m + i, or -1 (span entries; a rank
// runs at most one forward and one backward per tick). The caller frees x.
static int *by_tick(const Sim *s, const int *t, int q, int span) {
    int *x = core_calloc((size_t)span, sizeof(int));
    for (int k = 0; k < span; k++) x[k] = -1;
    for (int cell = 0; cell < s->v * s->m; cell++) {
        int tick = t[(size_t)q * s->v * s->m + cell];
        if (tick >= 0) x[tick] = cell;
    }
    return x;
}

void pp_ilv_plan(PPIlvPlan *pl, int p, int v, int m, int rank, int forward_only) {
    char err[256];
    if (pp_ilv_check(p, v, m, err, sizeof err)) core_fatal("%s", err);
    memset(pl, 0, sizeof *pl);
    *pl = (PPIlvPlan){.p = p, .v = v, .m = m, .rank = rank, .forward_only = forward_only};
    size_t cells = (size_t)p * v * m;
    Sim s = {p, v, m, forward_only, core_calloc(cells, sizeof(int)), core_calloc(cells, sizeof(int))};
    for (size_t k = 0; k < cells; k++) s.tf[k] = s.tb[k] = -1;
    int span = simulate(&s);
    pl->span = span;
    size_buffers(&s, pl, span);
    pl->ticks = core_calloc((size_t)span, sizeof(PPTick));
    int prev = (rank + p - 1) % p, next = (rank + 1) % p;
    int *ff = by_tick(&s, s.tf, rank, span), *bb = by_tick(&s, s.tb, rank, span);
    int *pf = by_tick(&s, s.tf, prev, span), *nb = by_tick(&s, s.tb, next, span);
    for (int t = 0; t < span; t++) {
        PPTick k = {t, -1, -1, -1, -1, 0, 0, -1, -1, -1, -1};
        if (ff[t] >= 0) {
            k.f_chunk = ff[t] / m, k.f_micro = ff[t] % m;
            k.send_fwd = !(rank == p - 1 && k.f_chunk == v - 1);
        }
        if (!forward_only && bb[t] >= 0) {
            k.b_chunk = bb[t] / m, k.b_micro = bb[t] % m;
            k.send_bwd = !(rank == 0 && k.b_chunk == 0);
        }
        // what the previous rank sends forward at t, and the next rank backward
        if (pf[t] >= 0 && !(prev == p - 1 && pf[t] / m == v - 1))
            k.rf_chunk = pf[t] / m + (rank == 0), k.rf_micro = pf[t] % m;
        if (!forward_only && nb[t] >= 0 && !(next == 0 && nb[t] / m == 0))
            k.rb_chunk = nb[t] / m - (rank == p - 1), k.rb_micro = nb[t] % m;
        if (k.f_chunk >= 0 || k.b_chunk >= 0 || k.rf_chunk >= 0 || k.rb_chunk >= 0)
            pl->ticks[pl->n_ticks++] = k;
    }
    free(ff);
    free(bb);
    free(pf);
    free(nb);
    free(s.tf);
    free(s.tb);
}

void pp_ilv_slots(int pp, int v, int n_micro, int rank, int *slots) {
    PPIlvPlan train, eval;
    pp_ilv_plan(&train, pp, v, n_micro, rank, 0);
    pp_ilv_plan(&eval, pp, v, n_micro, rank, 1);
    for (int c = 0; c < v; c++) {
        int n = train.act_slots[c] > eval.act_slots[c] ? train.act_slots[c] : eval.act_slots[c];
        slots[c] = n > 0 ? n : 1;
    }
    pp_ilv_plan_free(&train);
    pp_ilv_plan_free(&eval);
}

void pp_ilv_slots_all(int p, int v, int m, int *act, int *grad) {
    char err[256];
    if (pp_ilv_check(p, v, m, err, sizeof err)) core_fatal("%s", err);
    size_t cells = (size_t)p * v * m;
    Sim sim[2];  // training, evaluation: each simulated once for every rank
    int span[2];
    for (int fo = 0; fo < 2; fo++) {
        sim[fo] = (Sim){p, v, m, fo, core_calloc(cells, sizeof(int)), core_calloc(cells, sizeof(int))};
        for (size_t k = 0; k < cells; k++) sim[fo].tf[k] = sim[fo].tb[k] = -1;
        span[fo] = simulate(&sim[fo]);
    }
    for (int r = 0; r < p; r++) {
        PPIlvPlan train = {.p = p, .v = v, .m = m, .rank = r}, eval = {.p = p, .v = v, .m = m, .rank = r, .forward_only = 1};
        size_buffers(&sim[0], &train, span[0]);
        size_buffers(&sim[1], &eval, span[1]);
        for (int c = 0; c < v; c++) {
            int n = train.act_slots[c] > eval.act_slots[c] ? train.act_slots[c] : eval.act_slots[c];
            act[r * v + c] = n > 0 ? n : 1;
            grad[r * v + c] = train.grad_slots[c];
        }
    }
    for (int fo = 0; fo < 2; fo++) {
        free(sim[fo].tf);
        free(sim[fo].tb);
    }
}

void pp_ilv_plan_free(PPIlvPlan *pl) {
    free(pl->ticks);
    pl->ticks = NULL;
    pl->n_ticks = 0;
}

// One combined send/receive over the ring (either half may be absent), traced as `kind`.
static void exchange(PPLink *l, PPEventKind kind, int micro, const void *sbuf, int dst, void *rbuf, int src) {
    if (dst < 0 && src < 0) return;
    double t0 = pp_trace_begin(l->trace);
    comm_send_recv(l->comm, sbuf, l->count, dst, rbuf, l->count, src, l->dtype);
    pp_trace_end(l->trace, kind, micro, t0);
}

static void set_chunk(PPLink *l, int c) {
    if (l->trace) l->trace->chunk = c;
}

void pp_ilv_run(const PPIlvPlan *pl, PPStage *stages, void *const *const *grad_bufs,
                const int *n_slots, PPLink *l) {
    for (int c = 0; c < pl->v; c++)
        if (n_slots[c] < pl->act_slots[c])
            core_fatal("pipeline rank %d chunk %d has %d activation slots; the interleaved schedule "
                       "needs %d", pl->rank, c, n_slots[c], pl->act_slots[c]);
    if (!pl->forward_only) pp_trace_step_begin(l->trace);  // the bubble counts training steps
    for (int n = 0; n < pl->n_ticks; n++) {
        const PPTick *k = &pl->ticks[n];
        if (k->f_chunk >= 0) {
            PPStage *st = &stages[k->f_chunk];
            set_chunk(l, k->f_chunk);
            double t0 = pp_trace_begin(l->trace);
            st->forward(st->ctx, k->f_micro, k->f_micro % n_slots[k->f_chunk]);
            pp_trace_end(l->trace, PP_EV_FORWARD, k->f_micro, t0);
        }
        if (k->b_chunk >= 0) {
            PPStage *st = &stages[k->b_chunk];
            int gs = pl->grad_slots[k->b_chunk];
            st->output_grad = grad_bufs[k->b_chunk] ? grad_bufs[k->b_chunk][k->b_micro % gs] : NULL;
            set_chunk(l, k->b_chunk);
            double t0 = pp_trace_begin(l->trace);
            st->backward(st->ctx, k->b_micro, k->b_micro % n_slots[k->b_chunk]);
            pp_trace_end(l->trace, PP_EV_BACKWARD, k->b_micro, t0);
        }
        set_chunk(l, -1);
        // phase A: activations travel to the next rank
        const PPStage *fs = k->send_fwd ? &stages[k->f_chunk] : NULL;
        const void *y = fs ? fs->output(fs->ctx, k->f_micro % n_slots[k->f_chunk]) : NULL;
        void *x = NULL;
        if (k->rf_chunk >= 0) {
            const PPStage *rs = &stages[k->rf_chunk];
            x = rs->input(rs->ctx, k->rf_micro % n_slots[k->rf_chunk]);
        }
        exchange(l, y && x ? PP_EV_SEND_FORWARD_RECV_FORWARD : y ? PP_EV_SEND_FORWARD : PP_EV_RECV_FORWARD,
                 y ? k->f_micro : k->rf_micro, y, y ? l->next : -1, x, x ? l->prev : -1);
        // phase B: gradients travel to the previous rank
        const PPStage *bs = k->send_bwd ? &stages[k->b_chunk] : NULL;
        const void *dx = bs ? bs->input_grad(bs->ctx) : NULL;
        void *dy = k->rb_chunk >= 0 ? grad_bufs[k->rb_chunk][k->rb_micro % pl->grad_slots[k->rb_chunk]] : NULL;
        exchange(l, dx && dy ? PP_EV_SEND_BACKWARD_RECV_BACKWARD : dx ? PP_EV_SEND_BACKWARD : PP_EV_RECV_BACKWARD,
                 dx ? k->b_micro : k->rb_micro, dx, dx ? l->prev : -1, dy, dy ? l->next : -1);
    }
    if (!pl->forward_only) pp_trace_step_end(l->trace);
}
