// plan/plan_zero.c: ZeRO-2 and ZeRO-3 in the plan (distributed/dist_sync_units.c): a stage's
// units, the memory they take and the bytes they move, on DP rank 0 (the rank the run logs),
// with the same integer arithmetic as distributed/dist_sync_units.c and the Comm counters.
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_unit_piece

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t begin, len, per;  // the unit's flat range; floats per DP rank
    int edge;                // not a layer
    int first_layer, mult;   // layer units: local index of the first layer it stands for, and
                             // how many alike layers (the last one of a short table: the rest)
} PlanUnit;

// Layer index of a "layers.<l>...." tensor, or -1 (an edge tensor).
static int layer_of(const ParamInfo *p) {
    return strncmp(p->name, "layers.", 7) ? -1 : atoi(p->name + 7);
}

// The units of the stage's table (edge tensors one each, then one per layer: its tensors
// are consecutive), per = ceil(len / dp) rounded up to 16. Returns the count; *last_layer:
// the index in u of the last layer unit (-1: none), *first_of: of p, its first tensor and
// that of the layer unit before it.
static int units_of(const ParamInfo *p, int n, int dp, PlanUnit *u, int *last_layer, int first_of[2]) {
    int k = 0, layers = 0;
    *last_layer = -1;
    first_of[0] = first_of[1] = -1;
    for (int i = 0; i < n; i++)
        if (layer_of(&p[i]) < 0) u[k++] = (PlanUnit){p[i].offset, p[i].numel, 0, 1, 0, 1};
    for (int i = 0; i < n; i++) {
        if (layer_of(&p[i]) < 0) continue;
        int j = i;
        while (j + 1 < n && layer_of(&p[j + 1]) == layer_of(&p[i])) j++;
        *last_layer = k;
        first_of[0] = first_of[1];
        first_of[1] = i;
        u[k++] = (PlanUnit){p[i].offset, p[j].offset + p[j].numel - p[i].offset, 0, 0, layers++, 1};
        i = j;
    }
    for (int i = 0; i < k; i++) u[i].per = dist_unit_piece(u[i].len, dp, 0).per;
    return k;
}

// Whether the layers whose first tensors are p[a] and p[b] (a < b) hold the same tensors
// (name after "layers.<l>", size, norm flag) at the same offsets from their first: then
// their units cost the same.
static int layers_alike(const ParamInfo *p, int n, int a, int b) {
    int la = layer_of(&p[a]), lb = layer_of(&p[b]), i = 0;
    for (; a + i < n && layer_of(&p[a + i]) == la; i++) {
        const ParamInfo *x = &p[a + i], *y = &p[b + i];
        const char *xs = strchr(x->name + 7, '.'), *ys = b + i < n ? strchr(y->name + 7, '.') : NULL;
        if (b + i >= n || layer_of(y) != lb || x->numel != y->numel || x->sp_sum != y->sp_sum ||
            x->offset - p[a].offset != y->offset - p[b].offset || !xs || !ys || strcmp(xs, ys))
            return 0;
    }
    return b + i >= n || layer_of(&p[b + i]) != lb;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

int plan_zero_counts(const PlanSpec *s, const PlanLayout *l, const ParamInfo *p, int n_params,
                     int n_micro, PlanStage *st) {
    int dp = plan_dp_cp(l), e = s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2 : 4;
    PlanUnit *u = calloc((size_t)n_params + 1, sizeof *u);
    int last = -1, first_of[2], n = units_of(p, n_params, dp, u, &last, first_of);
    int built = last < 0 ? 0 : u[last].first_layer + 1;  // layers in the table
    if (built < st->n_layers) {  // the rest are like the table's last: its unit stands for them
        if (built < 2 || !layers_alike(p, n_params, first_of[0], first_of[1])) {
            free(u);
            return -1;
        }
        u[last].mult = st->n_layers - built + 1;
    }
    size_t S = 0, edge_len = 0, layer_len = 0, max_per = 0, wte_own = 0;
    for (int k = 0; k < n; k++) {
        S += (size_t)u[k].mult * u[k].per;
        max_per = u[k].per > max_per ? u[k].per : max_per;
        size_t full = (size_t)dp * u[k].per;
        if (u[k].edge) edge_len += full;
        else layer_len = full > layer_len ? full : layer_len;
    }
    st->shard_len = S;
    size_t transient = !(st->first && st->last) ? (edge_len > layer_len ? edge_len : layer_len)
                                                : edge_len + layer_len;
    if (l->zero == 3) st->mem[PLAN_MEM_PARAMS] = 4.0 * S + (double)e * (edge_len + 2 * layer_len);
    st->mem[PLAN_MEM_GRADS] = 4.0 * (S + transient + max_per);
    st->mem[PLAN_MEM_OPTIM] = 8.0 * S;

    // DP: every unit reduce-scattered after each micro-batch's backward (fp32); ZeRO-2
    // all-gathers every unit after the update (fp32 masters), ZeRO-3 the edge once per step
    // and each layer before each forward, recomputed forward and backward (e bytes); a unit
    // standing for `mult` layers counts as many calls (the first R layers are re-run:
    // recompute_counts)
    uint64_t m = (uint64_t)n_micro, R = (uint64_t)st->n_recomputed;
    PlanTraffic *t = &st->traffic[PLAN_G_DP];
    for (int k = 0; k < n && dp > 1; k++) {
        uint64_t mult = (uint64_t)u[k].mult, first = (uint64_t)u[k].first_layer;
        uint64_t rerun = u[k].edge || R <= first ? 0 : R - first < mult ? R - first : mult;
        uint64_t gather_bytes = (uint64_t)dp * u[k].per * (l->zero == 3 ? (uint64_t)e : 4);
        plan_count(t, COMM_REDUCE_SCATTER, (uint64_t)dp * u[k].per * 4, (uint64_t)dp - 1, (uint64_t)dp, m * mult);
        if (l->zero == 2 || u[k].edge) {
            plan_count(t, COMM_ALL_GATHER, gather_bytes, (uint64_t)dp - 1, (uint64_t)dp, mult);
            continue;
        }
        if (rerun) plan_count(t, COMM_ALL_GATHER, gather_bytes, (uint64_t)dp - 1, (uint64_t)dp, 3 * m * rerun);
        if (mult > rerun)
            plan_count(t, COMM_ALL_GATHER, gather_bytes, (uint64_t)dp - 1, (uint64_t)dp, 2 * m * (mult - rerun));
    }
    // sequence parallelism's LayerNorm sums and the tied-wte sum cover rank 0's shard only:
    // the segments of norm tensors inside each unit's owned range [begin, begin + own)
    const GPTConfig *c = &s->model;
    // (the tensors are in increasing offset order: a unit's are found by bisection, not a
    // walk over the table per unit)
    for (int k = 0; k < n; k++) {
        size_t lo = u[k].begin, hi = lo + min_sz(u[k].len, u[k].per);
        int first = 0, past = n_params;  // the first tensor that ends after lo
        while (first < past) {
            int mid = first + (past - first) / 2;
            if (p[mid].offset + p[mid].numel <= lo) first = mid + 1;
            else past = mid;
        }
        for (int i = first; i < n_params && p[i].offset < hi; i++) {
            size_t b = p[i].offset, end = b + p[i].numel;
            if (end <= lo) continue;
            size_t len = min_sz(end, hi) - (b > lo ? b : lo);
            if (l->sp && p[i].sp_sum)
                plan_count(&st->traffic[PLAN_G_TP], COMM_ALL_REDUCE, len * 4, 2 * (uint64_t)(l->tp - 1),
                           (uint64_t)l->tp, (uint64_t)u[k].mult);
            if (!strcmp(p[i].name, "wte")) wte_own = len;
        }
    }
    if (l->pp > 1 && (st->first || st->last) && !c->untie_embeddings && wte_own)
        plan_count(&st->traffic[PLAN_G_EMB], COMM_ALL_REDUCE, wte_own * 4, 2, 2, 1);
    free(u);
    return 0;
}
