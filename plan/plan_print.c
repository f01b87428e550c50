// plan/plan_print.c: the ranked table and the JSON document (see plan_print.h).
#include "plan_print.h"

static const char *ASSUMPTIONS[] = {
    "compute: Megatron-LM's GEMM FLOPs (model/gpt_config.c) at peak x gemm_efficiency (the "
    "fused attention's products at peak x attn_cudnn_efficiency on cuDNN, attn_megac_efficiency "
    "on megac's kernels, chosen as megac train chooses them), plus "
    "the memory-bound kernels (norms, residual adds, activations, bias gradients, "
    "cross-entropy, embedding; plan/plan_kernels.c: estimated bytes) at hbm_gbps",
    "no overlap: GEMMs, tensor-parallel collectives and pipeline transfers run one after the "
    "other, as in megac's step; the gradient reduction follows the pipeline",
    "pipeline: step = sum of the stages' micro-batch times + (m - 1) x the slowest one + "
    "gradient sync + AdamW, 1F1B and GPipe alike; bubble = idle fraction of all stages, "
    "(PP - 1) / (m + PP - 1) when the stages are equal; interleaved 1F1B (v chunks per rank): "
    "sum / v + (m - 1/v) x the slowest, bubble (PP - 1) / (v m + PP - 1), v times the "
    "pipeline transfers, activation slots per chunk as its schedule keeps them in flight, one "
    "backward workspace shared by the chunks",
    "collectives: ring algorithms (bytes as megac's counters count them) at link bandwidth x "
    "link_efficiency plus one latency per ring step",
    "links: a group whose ranks share a node uses NVLink, otherwise InfiniBand at the per-GPU "
    "NIC rate; rank order TP fastest, then CP, DP, PP; rank r on node r / gpus_per_node",
    "memory: megac's own allocations (fp32 master weights and gradients, Adam m and v sharded "
    "by ZeRO-1, activation slots as the schedule needs them); fits when the busiest stage "
    "stays under memory_gb - reserve_gb",
    "ZeRO-2/3 (ZeRO column 2, 3; --data-parallel-sharding-strategy): gradients (and, ZeRO-3, fp32 "
    "masters) sharded per layer as distributed/dist_sync_units.c does; their per-layer reduce-scatters and "
    "ZeRO-3's 16-bit weight gathers (2 per layer and micro-batch, 3 when recomputed) are timed "
    "with the gradient sync, not overlapped",
    "context parallelism (CP > 1, flash attention only): a rank holds B T / CP rows (activations, "
    "workspace, GEMM FLOPs and kernels / CP) plus the K/V exchange buffer; its K/V traffic "
    "(p2p ring or all_gather, bytes as counted) is timed like the TP collectives, not overlapped; "
    "gradients reduce over DP x CP (the DP column)",
    "expert parallelism (EP > 1, the EP column): a rank holds E/EP experts of each MoE layer, their "
    "gradients reduced (and ZeRO sharded: ZeRO-2/3 a unit per layer) over DP x CP / EP (EDP; "
    "--expert-tensor-parallel-size 1: TP x DP x CP / EP, no TP sums of the experts); its experts' "
    "activations are sized for EP times its routed rows (the worst case, as megac allocates "
    "them); the all-to-alls (4 per MoE layer and micro-batch, 2 more when recomputed, plus the "
    "counts) are timed like the TP collectives; their bytes are exact with a padded capacity, "
    "else the expectation under uniform routing",
    "AdamW: memory-bound at hbm_gbps (28 bytes per element, +6 for the 16-bit weight copy)",
    "recomputation: full re-runs the recomputed layers' forward (and its tensor-parallel "
    "collectives) in the backward: hardware FLOPs 4/3 of the layers' model FLOPs, timed; "
    "selective re-runs the attention forward; MFU counts model FLOPs only",
};
#define N_ASSUMPTIONS (int)(sizeof ASSUMPTIONS / sizeof ASSUMPTIONS[0])

static const char *recompute_name(const GPTConfig *c) {
    return c->recompute == GPT_RECOMPUTE_FULL ? "full" : c->recompute == GPT_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

static double stage_total(const PlanStage *st) {
    double t = 0.0;
    for (int k = 0; k < PLAN_NMEM; k++) t += st->mem[k];
    return t;
}

// The stage with the largest memory total.
static const PlanStage *busiest(const PlanResult *r) {
    const PlanStage *b = &r->stages[0];
    for (int s = 1; s < r->layout.pp; s++)
        if (stage_total(&r->stages[s]) > stage_total(b)) b = &r->stages[s];
    return b;
}

// Bytes of group g per step on the stage that moves the most.
static double group_bytes(const PlanResult *r, PlanGroup g) {
    double most = 0.0;
    for (int s = 0; s < r->layout.pp; s++) {
        double t = 0.0;
        for (int k = 0; k < COMM_NKINDS; k++)
            if (g != PLAN_G_PP || k != COMM_RECV) t += (double)r->stages[s].traffic[g].bytes[k];
        if (t > most) most = t;
    }
    return most;
}

// " | flash attention (...)": the kernels megac train runs for the set's layouts
// (plan_attn_cudnn: only CP tells them apart), or "" without --use-flash-attn.
static const char *attn_label(const PlanSpec *s, const PlanSet *set) {
    if (!s->model.use_flash_attn) return "";
    int cudnn = 0, megac = 0;
    for (int i = 0; i < set->n; i++) {
        if (plan_attn_cudnn(s, &set->results[i].layout)) cudnn++;
        else megac++;
    }
    return !cudnn ? " | flash attention (megac's kernels)"
         : megac ? " | flash attention (cuDNN; megac's kernels at CP > 1)" : " | flash attention (cuDNN)";
}

static void print_header(FILE *f, const PlanSpec *s, const PlanHardware *hw, const PlanSet *set,
                         const char *mu, const char *bu) {
    const GPTConfig *c = &s->model;
    char rc[96];
    fprintf(f, "megac plan: world %d (%d GPUs per node) | L=%d C=%d NH=%d F=%d T=%d V=%d | global batch %d"
            " | %s%s%s\n", s->world_size, hw->gpus_per_node, c->num_layers, c->hidden_size, c->num_heads,
            c->ffn_hidden_size, c->seq_length, c->vocab_size, s->global_batch,
            plan_precision_name(s->precision), attn_label(s, set),
            gpt_recompute_label(c, " | recompute selective", rc, sizeof rc));
    fprintf(f, "hardware: %s | %.3g GB per GPU (%.3g reserved) | peak %.4g TFLOP/s (%s) x %.2f | "
            "links per GPU: %.4g GB/s in a node, %.4g GB/s across nodes, x %.2f\n", hw->name, hw->memory_gb,
            hw->reserve_gb, plan_hw_peak_flops(hw, s->precision) / 1e12,
            plan_precision_name(s->precision), hw->gemm_efficiency, hw->intra_gbps, hw->inter_gbps,
            hw->link_efficiency);
    if (s->offload)  // --optimizer-cpu-offload
        fprintf(f, "offload: PCIe %.4g GB/s per GPU per direction, host memory %.4g GB per node\n", hw->pcie_gbps,
                hw->host_memory_gb);
    fprintf(f, "%d layouts (%d refused by the checks); fastest first, layouts that do not fit last\n\n",
            set->n, set->n_rejected);
    fprintf(f, "%49s memory per rank, %s %32s bytes per rank per step, %s\n", "", mu, "", bu);
    fprintf(f, "%4s %3s %3s %3s %4s %3s %4s %5s %5s %3s %4s | %7s %7s %7s %7s %7s %7s %4s | %6s %9s %9s %6s | "
            "%8s %8s %8s %8s %8s %8s %8s %8s%s", "#", "TP", "CP", "PP", "DP", "EP", "mbs", "m", "sched", "SP", "ZeRO",
            "params", "grads", "optim", "acts", "other", "total", "fit", "bubble", "step ms", "tokens/s",
            "MFU", "TP", "CP", "PP", "DP", "emb", "EP", "EDP", "links", s->offload ? "" : "\n");
    if (s->offload) fprintf(f, " | %4s %7s %7s\n", "off", "host GB", "PCIe ms");
}

// GB (10^9 bytes) when the largest value reaches 1 GB, else MB.
static double unit_of(double largest, const char **name) {
    *name = largest >= 1e9 ? "GB" : "MB";
    return largest >= 1e9 ? 1e9 : 1e6;
}

// --optimizer-cpu-offload's cells of a row: the fraction ("-": none), the pinned host memory
// per rank on the stage that holds the most (GB), the copies' time per step (ms).
static void offload_cells(FILE *f, const PlanResult *r) {
    char frac[16] = "-";
    if (r->layout.offload > 0) snprintf(frac, sizeof frac, "%g", r->layout.offload);
    fprintf(f, " | %4s %7.2f %7.2f", frac, r->host_peak / 1e9, r->t_pcie * 1e3);
}

void plan_print_table(FILE *f, const PlanSpec *s, const PlanHardware *hw, const PlanSet *set, int top) {
    int n = top > 0 && top < set->n ? top : set->n;
    double mem_max = 0.0, bytes_max = 0.0;
    for (int i = 0; i < n; i++) {
        const PlanResult *r = &set->results[i];
        if (r->mem_peak > mem_max) mem_max = r->mem_peak;
        for (int g = 0; g < PLAN_NGROUPS; g++)
            if (group_bytes(r, (PlanGroup)g) > bytes_max) bytes_max = group_bytes(r, (PlanGroup)g);
    }
    const char *mu, *bu;
    double ms = unit_of(mem_max, &mu), bs = unit_of(bytes_max, &bu);
    print_header(f, s, hw, set, mu, bu);
    for (int i = 0; i < n; i++) {
        const PlanResult *r = &set->results[i];
        const PlanLayout *l = &r->layout;
        const PlanStage *b = busiest(r);
        char links[8] = "-------";  // in the order of the byte columns: TP, CP, PP, DP, embedding, EP, EDP
        int sizes[PLAN_NGROUPS] = {l->tp, l->pp, plan_dp_cp(l), l->pp > 1 ? 2 : 1, plan_cp(l), plan_ep(l),
                                   plan_ep(l) > 1 ? plan_edp(l) : 1};
        const int col[PLAN_NGROUPS] = {0, 2, 3, 4, 1, 5, 6};
        for (int g = 0; g < PLAN_NGROUPS; g++)
            if (sizes[g] > 1) links[col[g]] = r->crosses[g] ? 'i' : 'n';
        char sched[16];
        snprintf(sched, sizeof sched, "ilv%d", l->vpp);  // interleaved 1F1B, v chunks
        fprintf(f, "%4d %3d %3d %3d %4d %3d %4d %5d %5s %3s %4s | %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %4s | "
                "%6.3f %9.3f %9.0f %5.1f%% | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8s", i + 1, l->tp, plan_cp(l),
                l->pp, l->dp, plan_ep(l), l->micro_batch, r->n_micro, l->pp == 1 ? "-" : l->vpp > 1 ? sched : l->gpipe ? "gpipe" : "1f1b",
                l->tp == 1 ? "-" : l->sp ? "on" : "off", plan_dp_cp(l) == 1 ? "-" : l->zero == 3 ? "3" : l->zero == 2 ? "2" : l->zero1 ? "on" : "off",
                b->mem[PLAN_MEM_PARAMS] / ms, b->mem[PLAN_MEM_GRADS] / ms, b->mem[PLAN_MEM_OPTIM] / ms,
                b->mem[PLAN_MEM_ACTIVATIONS] / ms,
                (b->mem[PLAN_MEM_WORKSPACE] + b->mem[PLAN_MEM_COMM]) / ms, r->mem_peak / ms,
                r->fits ? "yes" : "NO", r->bubble, r->t_step * 1e3, r->tokens_per_s, 100.0 * r->mfu,
                group_bytes(r, PLAN_G_TP) / bs, group_bytes(r, PLAN_G_CP) / bs, group_bytes(r, PLAN_G_PP) / bs,
                group_bytes(r, PLAN_G_DP) / bs, group_bytes(r, PLAN_G_EMB) / bs, group_bytes(r, PLAN_G_EP) / bs,
                group_bytes(r, PLAN_G_EDP) / bs, links);
        if (s->offload) offload_cells(f, r);
        fputc('\n', f);
    }
    int unfit = 0;
    for (int i = 0; i < set->n; i++) unfit += !set->results[i].fits;
    if (n < set->n) fprintf(f, "... %d more layouts not shown (--top N, --top 0: all)\n", set->n - n);
    fprintf(f, "%d of %d layouts do not fit in memory.\n\n", unfit, set->n);
    fprintf(f, "columns: memory per rank (GB = 10^9 bytes, MB = 10^6) on the busiest stage (other = backward "
            "workspace + communication buffers); bytes per rank per step of each group on the stage "
            "that moves the most (pipeline: sent); sched ilvN: interleaved 1F1B, N model chunks per "
            "rank; CP: context parallelism (its bytes: the K/V exchange; DP: the gradient group, DP x CP); "
            "EP: expert parallelism (its bytes: the tokens' all-to-all, exact with a padded capacity, else "
            "expected under uniform routing; EDP: the expert region's gradient group, DP x CP / EP); "
            "links TP/CP/PP/DP/embedding/EP/EDP: n = NVLink, "
            "i = InfiniBand, - = no group\n");
    if (s->offload)
        fprintf(f, "offload (--optimizer-cpu-offload): off = --optimizer-offload-fraction (- none; optim = the "
                "device's part); host GB = pinned host memory per rank (moments, masters, gradient staging, "
                "DDP's 16-bit copies); PCIe ms = the gradients down and the masters up at pcie_gbps, added to "
                "the step (not overlapped, as the run); fits also needs the node's ranks' pinned memory under "
                "host_memory_gb\n");
    fprintf(f, "assumptions:\n");
    for (int i = 0; i < N_ASSUMPTIONS; i++) fprintf(f, "  - %s\n", ASSUMPTIONS[i]);
}

static void json_traffic(FILE *f, const PlanTraffic *t) {
    fprintf(f, "{");
    unsigned long long total = 0;
    for (int k = 0; k < COMM_NKINDS; k++) {
        fprintf(f, "\"%s\":{\"bytes\":%llu,\"calls\":%llu},", comm_kind_name((CommKind)k),
                (unsigned long long)t->bytes[k], (unsigned long long)t->calls[k]);
        total += t->bytes[k];
    }
    fprintf(f, "\"bytes\":%llu}", total);
}

static void json_stage(FILE *f, const PlanStage *st, int index, int offload) {
    fprintf(f, "{\"stage\":%d,\"layer0\":%d,\"layers\":%d,\"activation_slots\":%d,\"parameters\":%zu,"
            "\"flat_buffer\":%zu,\"optimizer_slice\":%zu,\"memory\":{", index, st->layer0,
            st->n_layers, st->n_slots, st->n_floats, st->n_alloc, st->shard_len);
    for (int k = 0; k < PLAN_NMEM; k++) fprintf(f, "\"%s\":%.0f,", plan_mem_name((PlanMem)k), st->mem[k]);
    fprintf(f, "\"optimizer_state_unsharded\":%.0f,\"total\":%.0f},", st->mem_optim_unsharded, stage_total(st));
    if (offload)  // --optimizer-cpu-offload: pinned host bytes (the run's optimizer_host_bytes)
        fprintf(f, "\"optimizer_host\":%.0f,\"pcie\":{\"d2h_bytes\":%.0f,\"h2d_bytes\":%.0f},",
                st->host_mem, st->pcie_down, st->pcie_up);
    fprintf(f, "\"traffic\":{");
    for (int g = 0; g < PLAN_NGROUPS; g++) {
        fprintf(f, "%s\"%s\":", g ? "," : "", plan_group_name((PlanGroup)g));
        json_traffic(f, &st->traffic[g]);
    }
    fprintf(f, "},\"flops_per_microbatch\":%.6g,\"model_flops_per_microbatch\":%.6g,"
            "\"kernel_bytes_per_microbatch\":%.6g,\"recomputed_layers\":%d,\"microbatch_s\":%.6g,\"after_pipeline_s\":%.6g,\"bubble\":%.6g}",
            st->flops_mb, st->model_flops_mb, st->kernel_bytes_mb, st->n_recomputed, st->t_mb, st->t_after, st->bubble);
}

static void json_result(FILE *f, const PlanResult *r, int position, int offload) {
    const PlanLayout *l = &r->layout;
    fprintf(f, "{\"position\":%d,\"tp\":%d,\"cp\":%d,\"cp_comm_type\":\"%s\",\"pp\":%d,\"dp\":%d,\"ep\":%d,\"etp\":%d,"
            "\"micro_batch\":%d,\"n_micro\":%d,"
            "\"schedule\":\"%s\",\"virtual_pipeline_size\":%d,\"sequence_parallel\":%d,\"zero1\":%d,"
            "\"zero\":%d,\"fits\":%s,"
            "\"memory_peak\":%.0f,\"bubble\":%.6g,\"model_flops\":%.6g,\"hardware_flops\":%.6g,"
            "\"step_s\":%.6g,\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"crosses_nodes\":{", position, l->tp,
            plan_cp(l), cp_comm_type_name(l->cp_comm), l->pp, l->dp, plan_ep(l), l->ep_over_tp ? 1 : l->tp, l->micro_batch, r->n_micro,
            l->gpipe ? "gpipe" : "1f1b", l->vpp > 1 ? l->vpp : 1, l->sp, l->zero1,
            l->zero ? l->zero : l->zero1,
            r->fits ? "true" : "false", r->mem_peak, r->bubble, r->model_flops, r->hardware_flops, r->t_step,
            r->tokens_per_s, r->mfu);
    for (int g = 0; g < PLAN_NGROUPS; g++)
        fprintf(f, "%s\"%s\":%s", g ? "," : "", plan_group_name((PlanGroup)g), r->crosses[g] ? "true" : "false");
    fprintf(f, "},");
    if (offload)  // --optimizer-cpu-offload: the fraction (0: none), the busiest stage's pinned
                  // bytes and the copies' seconds (of step_s)
        fprintf(f, "\"optimizer_offload_fraction\":%g,\"host_memory_peak\":%.0f,\"pcie_s\":%.6g,",
                l->offload, r->host_peak, r->t_pcie);
    fprintf(f, "\"stages\":[");
    for (int s = 0; s < l->pp; s++) {
        if (s) fprintf(f, ",");
        json_stage(f, &r->stages[s], s, offload);
    }
    fprintf(f, "]}");
}

// A string with '"' and '\' escaped.
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void plan_print_json(FILE *f, const PlanSpec *s, const PlanHardware *hw, const PlanSet *set) {
    const GPTConfig *c = &s->model;
    fprintf(f, "{\"world_size\":%d,\"global_batch\":%d,\"precision\":\"%s\",\"model\":{\"num_layers\":%d,"
            "\"hidden_size\":%d,\"num_heads\":%d,\"head_size\":%d,\"ffn_hidden_size\":%d,\"seq_length\":%d,"
            "\"vocab_size\":%d,\"use_flash_attn\":%d,\"recompute_granularity\":\"%s\","
            "\"recompute_method\":\"%s\",\"recompute_num_layers\":%d},\"hardware\":{\"name\":",
            s->world_size, s->global_batch, plan_precision_name(s->precision), c->num_layers,
            c->hidden_size, c->num_heads, gpt_head_size(c), c->ffn_hidden_size, c->seq_length,
            c->vocab_size, c->use_flash_attn, recompute_name(c), c->recompute_block ? "block" : "uniform",
            c->recompute == GPT_RECOMPUTE_FULL ? c->recompute_num_layers : 0);
    json_string(f, hw->name);
    fprintf(f, ",\"gpus_per_node\":%d,\"memory_gb\":%g,\"reserve_gb\":%g,\"hbm_gbps\":%g,"
            "\"peak_tflops\":%g,\"gemm_efficiency\":%g,\"attn_cudnn_efficiency\":%g,"
            "\"attn_megac_efficiency\":%g,\"intra_node_gbps\":%g,\"inter_node_gbps\":%g,"
            "\"link_efficiency\":%g", hw->gpus_per_node, hw->memory_gb,
            hw->reserve_gb, hw->hbm_gbps, plan_hw_peak_flops(hw, s->precision) / 1e12,
            hw->gemm_efficiency, hw->attn_cudnn_efficiency, hw->attn_megac_efficiency, hw->intra_gbps, hw->inter_gbps, hw->link_efficiency);
    if (s->offload) fprintf(f, ",\"pcie_gbps\":%g,\"host_memory_gb\":%g", hw->pcie_gbps, hw->host_memory_gb);
    fprintf(f, "},\"assumptions\":[");
    for (int i = 0; i < N_ASSUMPTIONS; i++) {
        if (i) fprintf(f, ",");
        json_string(f, ASSUMPTIONS[i]);
    }
    fprintf(f, "],\"rejected\":%d,\"layouts\":[", set->n_rejected);
    for (int i = 0; i < set->n; i++) {
        fprintf(f, i ? ",\n" : "\n");
        json_result(f, &set->results[i], i + 1, s->offload);
    }
    fprintf(f, "]}\n");
}
