// plan/plan_zero.c: ZeRO-2 and ZeRO-3 in the plan (distributed/dist_sync_units.c): a stage's
// units, laid out by the sync engine's own function (dist_units_layout), the memory they take
// and the bytes they move, on DP rank 0 (the rank the run logs), counted as the Comm counters
// count the engine's calls.
// With an expert region (EP > 1) each layer has a second unit, its expert tensors over EDP.
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_unit_piece

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t begin, len, per;  // the unit's flat range; floats per rank of its group
    int edge;                // not a layer
    int expert;              // a layer's expert tensors, sharded over EDP (EP > 1)
    int first_layer, mult;   // layer units: local index of the first layer it stands for, and
                             // how many alike layers (the last one of a short table: the rest)
} PlanUnit;

// Layer index of a "layers.<l>...." tensor, or -1 (an edge tensor).
static int layer_of(const ParamInfo *p) {
    return strncmp(p->name, "layers.", 7) ? -1 : atoi(p->name + 7);
}

// Whether p goes to its layer's expert unit (split: the stage has an expert region).
static int in_expert_unit(const ParamInfo *p, int split) { return split && p->expert; }

// The units of the stage's table p (n tensors) on DP rank 0, as the sync engine lays them
// out (distributed/dist_geometry.h: dist_units_layout): edge tensors one each, then one per
// layer, then with `split` one per layer for its expert tensors (over edp). Returns the
// count; *n_edge, *n_layers: the edge units and the layers in the table; first_of: of p,
// the first tensors of the last two layers (-1 when fewer).
static int units_of(const ParamInfo *p, int n, int dp, int edp, int split, PlanUnit *u, int *n_edge,
                    int *n_layers, int first_of[2]) {
    int layers = 0, layer0 = 0, last = -1;  // (a table's layers are consecutive, in order)
    for (int i = 0; i < n; i++) {
        if (layer_of(&p[i]) < 0 || layer_of(&p[i]) == last) continue;
        if (layers++ == 0) layer0 = layer_of(&p[i]);
        last = layer_of(&p[i]);
    }
    int *block = calloc((size_t)layers + 1, sizeof *block);
    gpt_params_block_index(p, n, layer0, layers, block);
    size_t expert_offset = (size_t)-1, end = 0;
    for (int i = 0; i < n; i++) {
        if (in_expert_unit(&p[i], split) && p[i].offset < expert_offset) expert_offset = p[i].offset;
        if (p[i].offset + p[i].numel > end) end = p[i].offset + p[i].numel;
    }
    DistUnit *d = calloc((size_t)n + (size_t)layers + 1, sizeof *d);
    DistUnitTotals t = dist_units_layout(p, n, block, layers, split ? expert_offset : end + 1, end + 1,
                                         dp, 0, split ? edp : 0, 0, d);
    for (int k = 0; k < t.n_units; k++) {
        int edge = k < t.n_edge, l = edge ? 0 : (k - t.n_edge) % layers;
        u[k] = (PlanUnit){d[k].start, d[k].len, d[k].per, edge, d[k].expert, l, 1};
    }
    first_of[0] = layers >= 2 ? block[layers - 2] : -1;
    first_of[1] = layers >= 1 ? block[layers - 1] : -1;
    *n_edge = t.n_edge;
    *n_layers = layers;
    free(block);
    free(d);
    return t.n_units;
}

// Whether the layers whose first tensors are p[a] and p[b] (a < b) hold the same tensors
// (name after "layers.<l>", size, flags) at the same offsets from their unit's first: then
// their units cost the same.
static int layers_alike(const ParamInfo *p, int n, int a, int b, int split) {
    int la = layer_of(&p[a]), lb = layer_of(&p[b]), i = 0;
    size_t base[2][2] = {{(size_t)-1, (size_t)-1}, {(size_t)-1, (size_t)-1}};  // [layer a, b][unit]
    for (int s = 0; s < 2; s++)
        for (int t = s ? b : a; t < n && layer_of(&p[t]) == (s ? lb : la); t++) {
            size_t *m = &base[s][in_expert_unit(&p[t], split)];
            if (p[t].offset < *m) *m = p[t].offset;
        }
    for (; a + i < n && layer_of(&p[a + i]) == la; i++) {
        const ParamInfo *x = &p[a + i], *y = &p[b + i];
        const char *xs = strchr(x->name + 7, '.'), *ys = b + i < n ? strchr(y->name + 7, '.') : NULL;
        int rx = in_expert_unit(x, split), ry = b + i < n && in_expert_unit(y, split);
        if (b + i >= n || layer_of(y) != lb || x->numel != y->numel || x->sp_sum != y->sp_sum || rx != ry ||
            x->offset - base[0][rx] != y->offset - base[1][ry] || !xs || !ys || strcmp(xs, ys))
            return 0;
    }
    return b + i >= n || layer_of(&p[b + i]) != lb;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

// Bytes of a gathered ZeRO-3 weight: 2 in bf16/fp16, else 4.
static int plan_zero_elem(const PlanSpec *s) {
    return s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2 : 4;
}

static int by_offset(const void *x, const void *y) {
    size_t a = ((const ParamInfo *)x)->offset, b = ((const ParamInfo *)y)->offset;
    return a < b ? -1 : a > b;
}

// The ZeRO memory of the n units u (split: each layer's expert unit comes `built` after
// its dense one): the shard, the transient gather and
// gradient buffers, as dist_sync_units.c sizes them.
static void zero_memory(const PlanSpec *s, const PlanLayout *l, const PlanUnit *u, int n,
                        int built, int split, PlanStage *st) {
    int dp = plan_dp_cp(l), edp = plan_edp(l), e = plan_zero_elem(s);
    size_t S = 0, edge_len = 0, layer_len = 0, max_per = 0;
    for (int k = 0; k < n; k++) {
        S += (size_t)u[k].mult * u[k].per;
        max_per = u[k].per > max_per ? u[k].per : max_per;
        if (u[k].edge) {
            edge_len += (size_t)dp * u[k].per;
        } else if (!u[k].expert) {  // a layer's transient buffer: its dense part, then its expert part
            const PlanUnit *x = split ? &u[k + built] : NULL;
            size_t full = (size_t)dp * u[k].per + (x ? (size_t)edp * x->per : 0);
            layer_len = full > layer_len ? full : layer_len;
            if (x && u[k].per + x->per > max_per) max_per = u[k].per + x->per;  // (tmp holds both)
        }
    }
    st->shard_len = S;
    // the bytes, by the sync engine's own count (dist_sync_units.c's buffers)
    DistStateSizes z = {l->zero, st->n_floats, st->n_alloc, S, edge_len, layer_len, max_per,
                        !(st->first && st->last), (size_t)e};
    DistStateBytes b = dist_state_bytes(&z);
    st->mem[PLAN_MEM_PARAMS] = (double)b.params;
    st->mem[PLAN_MEM_GRADS] = (double)b.grads;
    st->mem[PLAN_MEM_OPTIM] = (double)b.optim;
}

// The DP and EDP traffic of the n units u over n_micro micro-batches.
static void zero_traffic(const PlanSpec *s, const PlanLayout *l, const PlanUnit *u, int n,
                         int n_micro, PlanStage *st) {
    int dp = plan_dp_cp(l), edp = plan_edp(l), e = plan_zero_elem(s);
    // DP (an expert unit: EDP): every unit reduce-scattered after each micro-batch's backward
    // (fp32); ZeRO-2 all-gathers every unit after the update (fp32 masters), ZeRO-3 the edge
    // once per step and each layer before each forward, recomputed forward and backward (e
    // bytes); a unit standing for `mult` layers counts as many calls (the first R layers are
    // re-run: recompute_counts); an empty expert unit (a dense layer's) moves nothing
    uint64_t m = (uint64_t)n_micro, R = (uint64_t)st->n_recomputed;
    for (int k = 0; k < n; k++) {
        uint64_t g = (uint64_t)(u[k].expert ? edp : dp);
        if (g == 1 || !u[k].len) continue;
        PlanTraffic *t = &st->traffic[u[k].expert ? PLAN_G_EDP : PLAN_G_DP];
        uint64_t mult = (uint64_t)u[k].mult, first = (uint64_t)u[k].first_layer;
        uint64_t rerun = u[k].edge || R <= first ? 0 : R - first < mult ? R - first : mult;
        uint64_t gather_bytes = g * u[k].per * (l->zero == 3 ? (uint64_t)e : 4);
        plan_count(t, COMM_REDUCE_SCATTER, g * u[k].per * 4, g - 1, g, m * mult);
        if (l->zero == 2 || u[k].edge) {
            plan_count(t, COMM_ALL_GATHER, gather_bytes, g - 1, g, mult);
            continue;
        }
        if (rerun) plan_count(t, COMM_ALL_GATHER, gather_bytes, g - 1, g, 3 * m * rerun);
        if (mult > rerun) plan_count(t, COMM_ALL_GATHER, gather_bytes, g - 1, g, 2 * m * (mult - rerun));
    }
}

// Sequence parallelism's LayerNorm sums and the tied-wte sum cover rank 0's shard only: the
// segments of norm tensors inside each unit's owned range [begin, begin + own).
static void owned_sums(const PlanSpec *s, const PlanLayout *l, const ParamInfo *p, int n_params,
                       const PlanUnit *u, int n, PlanStage *st) {
    const GPTConfig *c = &s->model;
    size_t wte_own = 0;
    // (the tensors sorted by offset, the experts placed last: a unit's are found by
    // bisection, not a walk over the table per unit)
    ParamInfo *q = malloc(((size_t)n_params + 1) * sizeof *q);
    memcpy(q, p, (size_t)n_params * sizeof *q);
    qsort(q, (size_t)n_params, sizeof *q, by_offset);
    for (int k = 0; k < n; k++) {
        size_t lo = u[k].begin, hi = lo + min_sz(u[k].len, u[k].per);
        int first = 0, past = n_params;  // the first tensor that ends after lo
        while (first < past) {
            int mid = first + (past - first) / 2;
            if (q[mid].offset + q[mid].numel <= lo) first = mid + 1;
            else past = mid;
        }
        for (int i = first; i < n_params && q[i].offset < hi; i++) {
            size_t b = q[i].offset, end = b + q[i].numel;
            if (end <= lo) continue;
            size_t len = min_sz(end, hi) - (b > lo ? b : lo);
            if (l->sp && q[i].sp_sum)
                plan_count(&st->traffic[PLAN_G_TP], COMM_ALL_REDUCE, len * 4, 2 * (uint64_t)(l->tp - 1),
                           (uint64_t)l->tp, (uint64_t)u[k].mult);
            if (!strcmp(q[i].name, "wte")) wte_own = len;
        }
    }
    free(q);
    if (l->pp > 1 && (st->first || st->last) && !c->untie_embeddings && wte_own)
        plan_count(&st->traffic[PLAN_G_EMB], COMM_ALL_REDUCE, wte_own * 4, 2, 2, 1);
}

int plan_zero_counts(const PlanSpec *s, const PlanLayout *l, const ParamInfo *p, int n_params,
                     int n_micro, PlanStage *st) {
    int dp = plan_dp_cp(l), edp = plan_edp(l);
    int split = plan_ep(l) > 1 && st->n_moe > 0;  // an expert region (dist_sync.c)
    PlanUnit *u = calloc(2 * (size_t)n_params + 1, sizeof *u);
    int n_edge, built, first_of[2], n = units_of(p, n_params, dp, edp, split, u, &n_edge, &built, first_of);
    if (built < st->n_layers) {  // the rest are like the table's last: its units stand for them
        if (built < 2 || !layers_alike(p, n_params, first_of[0], first_of[1], split)) {
            free(u);
            return -1;
        }
        u[n_edge + built - 1].mult = st->n_layers - built + 1;
        if (split) u[n_edge + 2 * built - 1].mult = st->n_layers - built + 1;
    }
    zero_memory(s, l, u, n, built, split, st);
    zero_traffic(s, l, u, n, n_micro, st);
    owned_sums(s, l, p, n_params, u, n, st);
    free(u);
    return 0;
}
