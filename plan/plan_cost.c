// plan/plan_cost.c: time, bubble and MFU of a layout on a hardware profile.
//
// The model follows what megac's step does (train/trainer.c): the pipeline schedule runs m
// micro-batches; inside a stage, GEMMs, tensor-parallel collectives and the pipeline's
// point-to-point transfers run one after the other (no overlap); so do the memory-bound
// kernels (plan_kernels.h), timed at the profile's HBM bandwidth, and the experts' all-to-alls. A micro-batch passes every
// stage once while the pipeline fills and drains, and the slowest stage sets the pace in
// between: t_pipeline = sum_s t_s + (m - 1) max_s t_s, (m + PP - 1) t_mb for equal stages
// (1F1B and GPipe alike); interleaved with v chunks per stage, each t_s / v long, the fill
// and drain pass chunks: sum_s t_s / v + (m - 1/v) max_s t_s, (m + (PP - 1)/v) t_mb for equal
// stages, a bubble of (PP - 1)/(v m) of the work. Stage s idles 1 - m t_s / t_pipeline of
// it (its bubble). Then the tied-embedding all-reduce, the data-parallel reductions (the
// expert region's over the expert-data-parallel group too), the
// AdamW step (memory-bound) and the ZeRO-1 all-gather. A collective over a group costs bytes / (link bandwidth x link
// efficiency) + one latency per ring step; the link is NVLink when every member of the
// group sits on one node (rank r on node r / gpus_per_node), InfiniBand otherwise. With
// --optimizer-cpu-offload the copies over PCIe follow the AdamW step (plan_offload_seconds).
#include "plan_model.h"
#include "core/check.h"             // defines: core_calloc

#include <stdlib.h>

// Whether a group whose smallest member b is one of {t + step j : t < width, j < count}
// and whose largest is b + span holds ranks of two nodes of G (rank r on node r / G) in a
// world of W. It is whole in one node iff b mod G + span < G; the residues of step j repeat
// within G values of j. Or, from the other side, a node boundary q G (q G < W) lies in
// (b, b + span] for some b. Whichever is shorter: O(min(count, G, W / G)), not O(W).
static int starts_cross(long long width, long long step, long long count, long long span, long long G,
                        long long W) {
    if (span <= 0) return 0;
    if (span >= G || width >= G) return 1;
    long long n = count < G ? count : G, boundaries = (W - 1) / G;
    if (n <= boundaries) {
        for (long long j = 0; j < n; j++)  // a start with b mod G >= G - span crosses
            if (step * j % G + width - 1 >= G - span) return 1;
        return 0;
    }
    for (long long q = 1; q <= boundaries; q++) {  // is some start b in [q G - span, q G - 1]?
        long long lo = q * G - span, hi = q * G - 1;
        if (step == 0) {
            if (lo <= width - 1) return 1;
            continue;
        }
        long long jmin = lo - width + 1 <= 0 ? 0 : (lo - width + step) / step, jmax = hi / step;
        if (jmin <= jmax && jmin < count) return 1;
    }
    return 0;
}

int plan_group_crosses(const PGridDims *d, PGridKind kind, int gpus_per_node) {
    long long tp = d->tp, dp = d->dp, pp = d->pp, G = gpus_per_node, W = d->world_size;
    long long cp = W / (tp * dp * pp);  // rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))
    // the expert decomposition: rank = etp_rank + etp (ep_rank + ep (edp_rank + edp pp_rank)),
    // ETP = TP or 1
    long long ep = pgrid_dims_ep(d), etp = pgrid_dims_etp(d), edp = W / (etp * ep * pp);
    if (W <= G) return 0;
    switch (kind) {
    case PGRID_TP: return starts_cross(1, tp, cp * dp * pp, tp - 1, G, W);
    case PGRID_CP: return starts_cross(tp, tp * cp, dp * pp, tp * (cp - 1), G, W);
    case PGRID_DP: return starts_cross(tp * cp, tp * cp * dp, pp, tp * cp * (dp - 1), G, W);
    case PGRID_DP_CP: return starts_cross(tp, tp * cp * dp, pp, tp * (cp * dp - 1), G, W);
    case PGRID_PP:  // the embedding group is the first and last member of a pipeline group
    case PGRID_EMBEDDING: return starts_cross(tp * cp * dp, 0, 1, tp * cp * dp * (pp - 1), G, W);
    case PGRID_EP: return starts_cross(etp, etp * ep, edp * pp, etp * (ep - 1), G, W);
    case PGRID_EDP: return starts_cross(etp * ep, etp * ep * edp, pp, etp * ep * (edp - 1), G, W);
    default: core_fatal("plan_group_crosses: group kind %d is not planned", (int)kind);
    }
    return 0;
}

// Ring steps of one call of kind k over n ranks.
static double ring_steps(CommKind k, int n) {
    if (k == COMM_ALL_REDUCE) return 2.0 * (n - 1);
    if (k == COMM_ALL_GATHER || k == COMM_REDUCE_SCATTER) return n - 1;
    return 1.0;
}

// Seconds the traffic t of a group of n ranks takes over its link. Sends and receives run
// at once (each direction has its own bandwidth): only the sends are timed.
static double traffic_time(const PlanTraffic *t, int n, int crosses, const PlanHardware *hw) {
    if (n <= 1) return 0.0;
    double bw = (crosses ? hw->inter_gbps : hw->intra_gbps) * 1e9 * hw->link_efficiency;
    double lat = (crosses ? hw->inter_latency_us : hw->intra_latency_us) * 1e-6, s = 0.0;
    for (int k = 0; k < COMM_NKINDS; k++) {
        if (k == COMM_RECV) continue;
        s += (double)t->bytes[k] / bw + lat * ring_steps((CommKind)k, n) * (double)t->calls[k];
    }
    return s;
}

// Bytes AdamW reads and writes per element of the slice: p, g, m, v in; p, m, v out (fp32),
// plus the 16-bit weight copy rewritten under bf16 / fp16.
static double adamw_bytes(PlanPrecision p) { return 28.0 + (p == PLAN_BF16 || p == PLAN_FP16 ? 6.0 : 0.0); }

// The times of one stage (counted by plan_stage_counts): one micro-batch, and after the pipeline.
static void stage_times(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, const PlanResult *r,
                        int m, PlanStage *p) {
    int sizes[PLAN_NGROUPS] = {l->tp, l->pp, plan_dp_cp(l), l->pp > 1 ? 2 : 1, plan_cp(l), plan_ep(l), plan_edp(l)};
    double rate = plan_hw_peak_flops(hw, s->precision) * hw->gemm_efficiency;
    PlanTraffic pp_mb = p->traffic[PLAN_G_PP];  // one micro-batch's transfers
    for (int k = 0; k < COMM_NKINDS; k++) {
        pp_mb.bytes[k] /= (uint64_t)m;
        pp_mb.calls[k] /= (uint64_t)m;
    }
    double attn_rate = plan_hw_peak_flops(hw, s->precision) *
                       (plan_attn_cudnn(s, l) ? hw->attn_cudnn_efficiency : hw->attn_megac_efficiency);
    p->t_mb = (p->flops_mb - p->attn_flops_mb) / rate + p->attn_flops_mb / attn_rate +
              p->kernel_bytes_mb / (hw->hbm_gbps * 1e9) +
              traffic_time(&p->traffic[PLAN_G_TP], l->tp, r->crosses[PLAN_G_TP], hw) / m +
              traffic_time(&p->traffic[PLAN_G_CP], sizes[PLAN_G_CP], r->crosses[PLAN_G_CP], hw) / m +
              traffic_time(&p->traffic[PLAN_G_EP], sizes[PLAN_G_EP], r->crosses[PLAN_G_EP], hw) / m +
              traffic_time(&pp_mb, l->pp, r->crosses[PLAN_G_PP], hw);
    p->t_after = traffic_time(&p->traffic[PLAN_G_EMB], sizes[PLAN_G_EMB], r->crosses[PLAN_G_EMB], hw) +
                 traffic_time(&p->traffic[PLAN_G_DP], sizes[PLAN_G_DP], r->crosses[PLAN_G_DP], hw) +
                 traffic_time(&p->traffic[PLAN_G_EDP], sizes[PLAN_G_EDP], r->crosses[PLAN_G_EDP], hw) +
                 (double)p->shard_len * adamw_bytes(s->precision) / (hw->hbm_gbps * 1e9) +
                 plan_offload_seconds(hw, p);  // --optimizer-cpu-offload's copies (0 without)
}

// Whether the offload's pinned bytes of a node's ranks (each at most the busiest stage's) fit
// in its host memory. Always without offload (host_peak 0).
static int host_fits(const PlanSpec *s, const PlanHardware *hw, const PlanResult *r) {
    int ranks = s->world_size < hw->gpus_per_node ? s->world_size : hw->gpus_per_node;
    return r->host_peak * ranks <= hw->host_memory_gb * 1e9;
}

// plan_predict, keeping every stage in r->stages or (keep 0) none. The middle stages after
// the first one are like it (plan_stage_like): counted once, summed as a run, O(1) unless kept.
static void predict(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, PlanResult *r, int keep) {
    *r = (PlanResult){.layout = *l};
    r->n_micro = s->global_batch / (l->micro_batch * l->dp);
    int m = r->n_micro, gpn = hw->gpus_per_node;
    PGridDims d = {.world_size = s->world_size, .tp = l->tp, .pp = l->pp, .dp = l->dp,  // CP: the factor left
                   .ep = plan_ep(l), .etp = l->ep_over_tp ? 1 : 0};
    r->crosses[PLAN_G_TP] = plan_group_crosses(&d, PGRID_TP, gpn);
    r->crosses[PLAN_G_PP] = plan_group_crosses(&d, PGRID_PP, gpn);
    r->crosses[PLAN_G_DP] = plan_group_crosses(&d, PGRID_DP_CP, gpn);  // (PGRID_DP when CP is 1)
    r->crosses[PLAN_G_EMB] = l->pp > 1 && plan_group_crosses(&d, PGRID_EMBEDDING, gpn);
    r->crosses[PLAN_G_CP] = plan_cp(l) > 1 && plan_group_crosses(&d, PGRID_CP, gpn);
    r->crosses[PLAN_G_EP] = plan_ep(l) > 1 && plan_group_crosses(&d, PGRID_EP, gpn);
    r->crosses[PLAN_G_EDP] = plan_ep(l) > 1 && plan_edp(l) > 1 && plan_group_crosses(&d, PGRID_EDP, gpn);
    if (keep) r->stages = core_calloc((size_t)l->pp, sizeof(PlanStage));
    double t_mb = 0.0, t_sum = 0.0, t_after = 0.0, busy = 0.0;
    r->hardware_flops = 0.0;  // every rank of a stage runs its micro-batches
    PlanStage p = {0};
    for (int st = 0, run; st < l->pp; st += run) {
        run = 1;
        if (plan_stage_like(s, l, st, m, &p))  // stages st .. PP-2 alike: the first has the most
            run = l->pp - 1 - st;              // activation slots (1F1B), as many (GPipe): O(1)
        else {
            plan_stage_counts(s, l, st, m, &p);
            stage_times(s, l, hw, r, m, &p);
        }
        double total = 0.0;
        for (int k = 0; k < PLAN_NMEM; k++) total += p.mem[k];
        if (total > r->mem_peak) r->mem_peak = total;
        if (p.t_mb > t_mb) t_mb = p.t_mb;
        t_sum += run * p.t_mb;
        busy += run * (m * p.t_mb);
        r->hardware_flops += run * (p.flops_mb * m * l->tp * l->dp * plan_cp(l));
        if (p.t_after > t_after) t_after = p.t_after;
        if (p.host_mem > r->host_peak) r->host_peak = p.host_mem;
        if (plan_offload_seconds(hw, &p) > r->t_pcie) r->t_pcie = plan_offload_seconds(hw, &p);
        for (int k = 0; keep && k < run; k++) {
            if (k > 0) plan_stage_like(s, l, st + k, m, &p);
            r->stages[st + k] = p;
        }
    }
    r->fits = r->mem_peak <= (hw->memory_gb - hw->reserve_gb) * 1e9 && host_fits(s, hw, r);
    // interleaved: v chunks of t_s / v each; the fill and drain pass one chunk per stage
    double v = l->vpp > 1 ? l->vpp : 1, t_pipe = t_sum / v + (m - 1.0 / v) * t_mb;
    for (int st = 0; keep && st < l->pp; st++) r->stages[st].bubble = 1.0 - m * r->stages[st].t_mb / t_pipe;
    r->bubble = 1.0 - busy / (l->pp * t_pipe);
    r->model_flops = gpt_flops_per_iteration(&s->model, gpt_padded_vocab(&s->model, l->tp), s->global_batch);
    r->t_step = t_pipe + t_after;
    r->tokens_per_s = (double)s->global_batch * s->model.seq_length / r->t_step;
    r->mfu = r->model_flops / (r->t_step * s->world_size * plan_hw_peak_flops(hw, s->precision));
}

void plan_predict(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, PlanResult *r) {
    predict(s, l, hw, r, 1);
}

void plan_predict_summary(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, PlanResult *r) {
    predict(s, l, hw, r, 0);
}

void plan_result_free(PlanResult *r) {
    free(r->stages);
    r->stages = NULL;
}
