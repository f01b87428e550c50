// plan/plan_enum.c: enumeration and ranking of layouts (see plan_enum.h).
#include "plan_enum.h"
#include "core/check.h"  // defines: core_fatal

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    PlanResult *r;
    int n, cap;
} Growing;

static void push(Growing *g, const PlanResult *r) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        PlanResult *p = realloc(g->r, (size_t)g->cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "megac plan: out of memory\n");
            exit(1);
        }
        g->r = p;
    }
    g->r[g->n++] = *r;
}

// Layouts that fit first, then by predicted step time; ties by memory, then the smaller TP, PP.
static int by_rank(const void *a, const void *b) {
    const PlanResult *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->t_step != y->t_step) return x->t_step < y->t_step ? -1 : 1;
    if (x->mem_peak != y->mem_peak) return x->mem_peak < y->mem_peak ? -1 : 1;
    if (x->layout.tp != y->layout.tp) return x->layout.tp - y->layout.tp;
    if (x->layout.pp != y->layout.pp) return x->layout.pp - y->layout.pp;
    return plan_cp(&x->layout) - plan_cp(&y->layout);
}

// Switch values to try: {0, 1} when free and allowed, else the one forced (or 0).
static int choices(int forced, int allowed, int out[2]) {
    if (!allowed) {
        out[0] = 0;
        return forced == 1 ? 0 : 1;  // forcing it on where it cannot be: no layout
    }
    if (forced >= 0) {
        out[0] = forced;
        return 1;
    }
    out[0] = 0;
    out[1] = 1;
    return 2;
}

// Layout l predicted without offload and, with f->offload, at each offload fraction asked.
static void predict_offloads(const PlanSpec *s, const PlanFilter *f, const PlanHardware *hw, int keep,
                             PlanLayout l, Growing *g) {
    const double all[] = PLAN_OFFLOAD_FRACTIONS;
    int n = !f->offload ? 1 : f->offload_fraction < 0 ? (int)(sizeof all / sizeof all[0]) : 1;
    for (int i = 0; i < n; i++) {
        l.offload = !f->offload ? 0.0 : f->offload_fraction < 0 ? all[i] : f->offload_fraction;
        PlanResult r;
        if (keep) plan_predict_summary(s, &l, hw, &r);  // stages of the first `keep` later
        else plan_predict(s, &l, hw, &r);
        push(g, &r);
    }
}

// Every (schedule, SP, ZeRO-1) variant of one (TP, PP, DP, micro-batch).
static void variants(const PlanSpec *s, const PlanFilter *f, const PlanHardware *hw, int keep,
                     PlanLayout base, Growing *g, PlanSet *out) {
    int gp[2], sp[2], z[2];
    base.vpp = f->vpp_layers ? (s->model.num_layers % (base.pp * f->vpp_layers) ? -1
                                : s->model.num_layers / (base.pp * f->vpp_layers)) : f->vpp;
    if (base.vpp < 0) {
        out->n_rejected++;
        snprintf(out->reason, sizeof out->reason, "TP %d x PP %d x DP %d: --num-layers %d is not "
                 "divisible by PP x --num-layers-per-virtual-pipeline-stage %d", base.tp, base.pp,
                 base.dp, s->model.num_layers, f->vpp_layers);
        return;
    }
    // interleaved: 1F1B unless GPipe is asked for (which the check then refuses)
    int ngp = choices(base.vpp > 1 && f->gpipe < 0 ? 0 : f->gpipe, base.pp > 1, gp);
    int nsp = choices(f->sp, base.tp > 1, sp);
    int nz = choices(f->zero1, plan_dp_cp(&base) > 1, z);  // ZeRO shards over DP x CP
    if (!ngp || !nsp || !nz) {
        out->n_rejected++;
        char cpl[32];
        snprintf(out->reason, sizeof out->reason, "TP %d%s x PP %d x DP %d: %s", base.tp,
                 plan_cp_label(&base, cpl), base.pp, base.dp, !ngp ? "--pipeline-schedule gpipe needs PP > 1" : !nsp ?
                 "--sequence-parallel needs TP > 1" : f->zero ? "ZeRO-2/3 (--data-parallel-sharding-strategy) "
                 "needs DP > 1 or CP > 1" : "--use-distributed-optimizer needs DP > 1 or CP > 1");
        return;
    }
    for (int a = 0; a < ngp; a++)
        for (int b = 0; b < nsp; b++)
            for (int c = 0; c < nz; c++) {
                PlanLayout l = base;
                l.gpipe = gp[a];
                l.sp = sp[b];
                l.zero1 = z[c];
                l.zero = z[c] ? f->zero : 0;
                char err[400];
                if (plan_layout_check(s, &l, err, sizeof err) != 0) {
                    out->n_rejected++;
                    char cpl[32];
                    snprintf(out->reason, sizeof out->reason, "TP %d%s x PP %d x DP %d, micro-batch %d: %s",
                             l.tp, plan_cp_label(&l, cpl), l.pp, l.dp, l.micro_batch, err);
                    continue;
                }
                predict_offloads(s, f, hw, keep, l, g);
            }
}

// The divisors of n (> 0) in increasing order into out (room for PLAN_MAX_DIVISORS; no
// int up to 2^31 has more than 1600). Returns the count. O(sqrt(n)).
enum { PLAN_MAX_DIVISORS = 2048 };
static int divisors(int n, int *out) {
    int lo = 0, hi = 0, high[PLAN_MAX_DIVISORS];
    for (int d = 1; (long long)d * d <= n; d++) {
        if (n % d) continue;
        out[lo++] = d;
        if (d != n / d) high[hi++] = n / d;
    }
    while (hi > 0) out[lo++] = high[--hi];
    return lo;
}

// Every PP (and micro-batch) of one (TP, CP); pps and mbs: room for the divisors.
static void layouts_of(const PlanSpec *s, const PlanFilter *f, const PlanHardware *hw, int keep,
                       int tp, int cp, int *pps, int *mbs, Growing *g, PlanSet *out) {
    int W = s->world_size, npp = divisors(W / (tp * cp), pps);
    for (int j = 0; j < npp; j++) {
        int pp = pps[j];
        if (f->pp && pp != f->pp) continue;
        int dp = W / (tp * cp * pp);
        PlanLayout dims = {tp, pp, dp, 1, 0, 0, 0, 0, 0, cp, 0, 1, 0, 0};
        char err[400], cpl[32];
        GPTConfig c = s->model;
        if (gpt_config_check(&c, tp, pp, err, sizeof err) != 0) {
            out->n_rejected++;
            snprintf(out->reason, sizeof out->reason, "TP %d x PP %d: %s", tp, pp, err);
            continue;
        }
        if (s->global_batch % dp) {
            out->n_rejected++;
            snprintf(out->reason, sizeof out->reason, "global batch %d is not divisible by DP %d "
                     "(TP %d%s x PP %d)", s->global_batch, dp, tp, plan_cp_label(&dims, cpl), pp);
            continue;
        }
        int per_dp = s->global_batch / dp, any = 0, nmb = divisors(per_dp, mbs);
        for (int k = 0; k < nmb; k++) {
            int mb = mbs[k];
            if (f->micro_batch && mb != f->micro_batch) continue;
            any = 1;
            PlanLayout l = {tp, pp, dp, mb, 0, 0, 0, 0, 0, cp, cp > 1 ? f->cp_comm : CP_COMM_P2P, f->ep,
                            f->etp1 && f->ep > 1 && tp > 1, 0};
            variants(s, f, hw, keep, l, g, out);
        }
        if (!any) {
            out->n_rejected++;
            snprintf(out->reason, sizeof out->reason, "micro-batch %d does not divide the "
                     "global batch %d / DP %d", f->micro_batch, s->global_batch, dp);
        }
    }
}

// Whether a free CP size is worth trying: CP needs flash attention and 2 x CP dividing the
// sequence, and each of a rank's two chunks keeps at least PLAN_CP_MIN_CHUNK positions
// (shorter blocks leave the ring's transfers nothing to hide behind, and the layouts of
// every tiny CP would multiply the enumeration). A CP the user fixes is tried whatever its
// chunk (plan_layout_check names what refuses it).
enum { PLAN_CP_MIN_CHUNK = 128 };
static int cp_possible(const GPTConfig *c, int cp) {
    return cp == 1 || (c->use_flash_attn && c->seq_length % (2 * cp) == 0 &&
                       c->seq_length / (2 * cp) >= PLAN_CP_MIN_CHUNK);
}

void plan_enumerate(const PlanSpec *spec, const PlanFilter *f, const PlanHardware *hw, int keep, PlanSet *out) {
    PlanMemo memo;  // what the layouts share (interleaved slots and chunks): this call's
    PlanSpec with_memo = *spec, *s = &with_memo;
    plan_memo_init(&memo);
    if (!spec->memo) with_memo.memo = &memo;
    *out = (PlanSet){0};
    snprintf(out->reason, sizeof out->reason, "no TP x PP divides the world size %d", s->world_size);
    Growing g = {0};
    int W = s->world_size;
    // divisors only: polynomial in the digits of W and the batch, fast for any int
    int *tps = malloc(4 * PLAN_MAX_DIVISORS * sizeof *tps), *cps = tps + PLAN_MAX_DIVISORS,
        *pps = cps + PLAN_MAX_DIVISORS, *mbs = pps + PLAN_MAX_DIVISORS;
    if (!tps) core_fatal("out of memory");
    int ntp = divisors(W, tps);
    for (int i = 0; i < ntp; i++) {
        int tp = tps[i];
        if (f->tp && tp != f->tp) continue;
        int ncp = divisors(W / tp, cps);
        for (int h = 0; h < ncp; h++)
            if (f->cp ? cps[h] == f->cp : cp_possible(&s->model, cps[h]))
                layouts_of(s, f, hw, keep, tp, cps[h], pps, mbs, &g, out);
    }
    free(tps);
    qsort(g.r, (size_t)g.n, sizeof *g.r, by_rank);
    for (int i = 0; keep && i < keep && i < g.n; i++) plan_predict(s, &g.r[i].layout, hw, &g.r[i]);
    out->results = g.r;
    out->n = g.n;
    plan_memo_free(&memo);
}

void plan_set_free(PlanSet *set) {
    for (int i = 0; i < set->n; i++) plan_result_free(&set->results[i]);
    free(set->results);
    *set = (PlanSet){0};
}
