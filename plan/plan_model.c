// plan/plan_model.c: the counts of one pipeline stage of a layout (see plan_model.h): its
// memory, from the allocator's own counting passes (gpt_measure) and the parameter table,
// and its FLOPs; its traffic is plan_traffic.c's.
#include "plan_model.h"
#include "plan_kernels.h"           // defines: plan_kernel_bytes
#include "model/gpt_moe.h"       // defines: gpt_moe_layer
#include "model/gpt_params.h"    // defines: gpt_params_build
#include "distributed/dist_geometry.h"  // defines: dist_padded_size
#include "pipeline/pp_interleaved.h"  // defines: PP_ILV_MAX_CHUNKS
#include "pipeline/pp_stage.h"   // defines: pp_schedule_slots

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *GROUP_NAMES[PLAN_NGROUPS] = {"tp", "pp", "dp", "embedding", "cp", "ep", "edp"};
static const char *MEM_NAMES[PLAN_NMEM] = {"parameters", "gradients", "optimizer_state",
                                          "activations", "workspace", "comm_buffers"};

const char *plan_group_name(PlanGroup g) { return g < PLAN_NGROUPS ? GROUP_NAMES[g] : "?"; }
const char *plan_mem_name(PlanMem m) { return m < PLAN_NMEM ? MEM_NAMES[m] : "?"; }

const char *plan_cp_label(const PlanLayout *l, char *buf) {
    if (plan_cp(l) == 1) return "";
    snprintf(buf, 32, " x CP %d", plan_cp(l));
    return buf;
}

double plan_all_reduce_bytes(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0; }

void plan_zero_state_bytes(double n_params, double param_bytes, double grad_bytes, double k,
                           int dp, int shard_optimizer, double out[3]) {
    out[0] = n_params * param_bytes;
    out[1] = n_params * grad_bytes;
    out[2] = n_params * k / (shard_optimizer && dp > 1 ? dp : 1);
}

// What megac train refuses with --virtual-pipeline-model-parallel-size v (train_args.c).
static int interleaved_check(const PlanSpec *s, const PlanLayout *l, char *err, size_t n) {
    const GPTConfig *c = &s->model;
    int v = l->vpp, m = s->global_batch / (l->micro_batch * l->dp);
    const char *other = l->gpipe ? "--pipeline-schedule gpipe" : NULL;
    if (other) {
        snprintf(err, n, "the interleaved schedule (v = %d) does not support %s yet", v, other);
        return -1;
    }
    int uneven = c->first_stage_layers || c->last_stage_layers;
    if (l->pp < 2 || (!uneven && c->num_layers % (l->pp * v))) {
        snprintf(err, n, "the interleaved schedule needs PP >= 2 (got %d) dividing --num-layers %d "
                 "into PP x v = %d x %d chunks", l->pp, c->num_layers, l->pp, v);
        return -1;
    }
    if (gpt_chunks_check(c, l->pp, v, err, n)) return -1;
    char why[256];
    if (pp_ilv_check(l->pp, v, m, why, sizeof why)) {
        snprintf(err, n, "v = %d: %s", v, why);
        return -1;
    }
    return 0;
}

CPAttnDims plan_cp_dims(const PlanSpec *s, const PlanLayout *l) {
    const GPTConfig *c = &s->model;
    CPAttnDims d = {plan_cp(l) > 1 ? l->cp_comm : CP_COMM_P2P, plan_cp(l), 0, l->micro_batch,
                    c->seq_length, c->num_heads / l->tp, gpt_kv_heads(c) / l->tp, gpt_head_size(c)};
    return d;
}

int plan_layout_check(const PlanSpec *s, const PlanLayout *l, char *err, size_t n) {
    int cp = plan_cp(l);
    char cpl[32];
    if (l->tp <= 0 || l->pp <= 0 || l->dp <= 0 || l->tp * cp * l->pp * l->dp != s->world_size) {
        snprintf(err, n, "TP %d%s x PP %d x DP %d is not the world size %d", l->tp,
                 plan_cp_label(l, cpl), l->pp, l->dp, s->world_size);
        return -1;
    }
    if (cp > 1 && (s->model.seq_length % (2 * cp) || !s->model.use_flash_attn)) {  // train_args.c
        snprintf(err, n, "context parallelism CP %d needs --use-flash-attn and 2 x CP dividing "
                 "--seq-length %d", cp, s->model.seq_length);
        return -1;
    }
    if (l->micro_batch <= 0 || s->global_batch % (l->micro_batch * l->dp)) {
        snprintf(err, n, "global batch %d is not divisible by micro-batch %d x DP %d",
                 s->global_batch, l->micro_batch, l->dp);
        return -1;
    }
    if (gpt_config_check(&s->model, l->tp, l->pp, err, n) != 0) return -1;
    CPAttnDims cpd = plan_cp_dims(s, l);
    if (cp > 1 && cp_attention_check(&cpd, err, n)) return -1;
    if (l->sp && (l->tp == 1 || (l->micro_batch * s->model.seq_length / cp) % l->tp)) {
        snprintf(err, n, "sequence parallelism needs TP > 1 dividing micro-batch x seq-length / CP "
                 "(%d x %d / %d), TP is %d", l->micro_batch, s->model.seq_length, cp, l->tp);
        return -1;
    }
    if (l->zero1 && plan_dp_cp(l) == 1) {
        snprintf(err, n, "ZeRO-%d needs DP > 1", l->zero ? l->zero : 1);
        return -1;
    }
    if (plan_ep(l) > 1 && plan_ep_check(s, l, err, n)) return -1;  // plan_ep.c
    return l->vpp > 1 ? interleaved_check(s, l, err, n) : 0;
}

// --- memory: what model/gpt_acts.c allocates, from its own counting passes ------------------

// Full recomputation (gpt_layer_recomputed): uniform re-runs every layer of the stage (in
// chunks of k), block the first k layers one by one; a chunk keeps only its output per
// micro-batch. Sets the stage's counts (traffic, FLOPs).
static void recompute_counts(const GPTConfig *c, PlanStage *st) {
    int n = st->n_layers, k = c->recompute_num_layers > 0 ? c->recompute_num_layers : 1;
    st->n_recomputed = st->n_chunk_outputs = 0;
    if (c->recompute != GPT_RECOMPUTE_FULL || n <= 0) return;
    st->n_recomputed = c->recompute_block ? (k < n ? k : n) : n;
    st->n_chunk_outputs = c->recompute_block ? st->n_recomputed : (n + k - 1) / k;
}

// The activation bytes of virtual stage `stage` of P on a rank of layout l: gpt_measure, the
// allocator's counting passes (a slot, the workspace, the MoE layers' buffers).
static GPTActBytes stage_act_bytes(const PlanSpec *s, const PlanLayout *l, int P, int stage) {
    PGridDims d = {s->world_size, l->tp, plan_cp(l), l->dp, l->pp, plan_ep(l), l->ep_over_tp ? 1 : l->tp};
    GPTStage st = {.stage = stage, .n_stages = P, .vpp = P / l->pp, .micro_batch = l->micro_batch, .n_slots = 1,
                   .pad_multiple = 1, .sequence_parallel = l->sp,
                   .cp_comm = plan_cp(l) > 1 ? l->cp_comm : CP_COMM_P2P};
    BackendDType act = s->precision == PLAN_BF16 ? BACKEND_BF16 : s->precision == PLAN_FP16 ? BACKEND_F16 : BACKEND_F32;
    return gpt_measure(&s->model, &d, &st, act);
}

// The dense and expert-region floats of `n` layers from layer0 of the stage's table at the
// layout's EP (gpt_params_regions, as gpt_create counts them).
static void region_floats(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n,
                          size_t *dense, size_t *experts) {
    const GPTConfig *c = &s->model;
    int k = 0;
    size_t total;
    ParamInfo *t = gpt_params_build_ep(c, l->tp, plan_ep(l), 0, gpt_padded_vocab(c, l->tp), st->layer0, n,
                                       st->first, st->last, &k, &total);
    gpt_params_regions(t, k, plan_ep(l), dense, experts);
    free(t);
}

// The stage's flat buffers, by gpt_create's own function (gpt_params_geometry) on its
// table's regions, padded for the layout's DP and EDP groups. The layers are alike, so both
// regions are affine in the number of layers: checked on 1, 2 and 3 layers, else (mixed
// dense and MoE layers) the whole table is built. Keeps megac plan's cost per layout
// independent of --num-layers.
static GPTParamsGeometry stage_geometry(const PlanSpec *s, const PlanLayout *l, const PlanStage *st) {
    size_t d[4] = {0}, x[4] = {0}, D, X;
    int n = st->n_layers, alike = st->n_moe == 0 || st->n_moe == n;
    for (int k = 1; k <= 3 && n > 3 && alike; k++) region_floats(s, l, st, k, &d[k], &x[k]);
    if (n > 3 && alike && d[3] - d[2] == d[2] - d[1] && x[3] - x[2] == x[2] - x[1]) {
        D = d[1] + (size_t)(n - 1) * (d[2] - d[1]);
        X = x[1] + (size_t)(n - 1) * (x[2] - x[1]);
    } else {
        region_floats(s, l, st, n, &D, &X);
    }
    return gpt_params_geometry(D, X, dist_pad_multiple(plan_pad_ranks(l)));
}

// GEMM FLOPs of one micro-batch (forward + backward) on one rank: Megatron's count split
// into layers and the output layer, divided over TP (model FLOPs, for MFU); the hardware
// also re-runs the forward of recomputed layers (1/3 of a layer's forward + backward: 4/3
// with every layer recomputed) or, selective, the attention forward (q k^T and the
// probabilities times v: 4 B T^2 C per layer, as Megatron counts them) (an MoE layer: K
// experts' MLPs and the router per token, replicated over TP at expert-tensor-parallel 1
// but counted as Megatron does, divided over TP).
static void stage_flops(const PlanSpec *s, const PlanLayout *l, int Vp, PlanStage *st) {
    const GPTConfig *c = &s->model;
    GPTConfig one = *c;
    one.num_layers = 1;
    one.num_experts = 0;  // a dense layer
    double layer = gpt_flops_per_iteration(&one, 0, l->micro_batch), moe_layer = layer;
    double logits = gpt_flops_per_iteration(&one, Vp, l->micro_batch) - layer;
    if (st->n_moe) {  // an MoE layer
        one.num_experts = c->num_experts;
        snprintf(one.moe_layer_freq, sizeof one.moe_layer_freq, "1");
        moe_layer = gpt_flops_per_iteration(&one, 0, l->micro_batch);
    }
    int moe_rc = plan_moe_layers(c, st->layer0, st->n_recomputed);  // recomputed: the first R
    // (CP: each rank does 1/CP of the micro-batch, the causal work balanced by the chunks)
    st->model_flops_mb = ((st->n_layers - st->n_moe) * layer + st->n_moe * moe_layer +
                          (st->last ? logits : 0.0)) / (l->tp * plan_cp(l));
    double extra = ((st->n_recomputed - moe_rc) * layer + moe_rc * moe_layer) / 3.0;
    if (c->recompute == GPT_RECOMPUTE_SELECTIVE && !c->use_flash_attn)
        extra = st->n_layers * 4.0 * l->micro_batch * (double)c->seq_length * c->seq_length * c->hidden_size;
    st->flops_mb = st->model_flops_mb + extra / (l->tp * plan_cp(l));
    if (c->use_flash_attn) {  // the fused attention's products in them (each recomputed layer's again)
        double att = 12.0 * l->micro_batch * (double)c->seq_length * c->seq_length * c->num_heads * gpt_head_size(c);
        st->attn_flops_mb = (st->n_layers + st->n_recomputed / 3.0) * att / (l->tp * plan_cp(l));
    }
}

// One model chunk: virtual stage `stage` of P (the pipeline stage itself when P == PP) with
// n_slots activation slots: every field of *st but the times.
static void chunk_counts(const PlanSpec *s, const PlanLayout *l, int P, int stage, int n_slots,
                         int n_micro, PlanStage *st) {
    const GPTConfig *c = &s->model;
    *st = (PlanStage){.first = stage == 0, .last = stage == P - 1};
    gpt_stage_layers(c, l->pp, P / l->pp, stage, &st->layer0, &st->n_layers);
    st->n_moe = plan_moe_layers(c, st->layer0, st->n_layers);
    int Vp = gpt_padded_vocab(c, l->tp), n_params = 0, built = st->n_layers > 2 ? 2 : st->n_layers;
    size_t built_floats = 0;  // ZeRO-2/3: the edge and two layers stand for the stage (plan_zero.c)
    ParamInfo *table = l->zero >= 2 ? plan_stage_table(s, l, st, built, &n_params, &built_floats) : NULL;
    GPTParamsGeometry geo = stage_geometry(s, l, st);
    st->n_floats = geo.n_floats;
    st->n_alloc = geo.n_alloc;
    st->expert_offset = geo.expert_offset;
    int edp = plan_ep(l) > 1 && geo.expert_offset < geo.n_alloc ? plan_edp(l) : 0;
    st->shard_len = dist_shard_len(geo.n_alloc, geo.expert_offset, plan_dp_cp(l), edp, l->zero1);
    recompute_counts(c, st);
    st->n_slots = n_slots;
    double e = plan_act_bytes(s->precision);
    size_t N = plan_rows(s, l), io = (l->sp ? N / (size_t)l->tp : N) * c->hidden_size;

    // memory, the categories megac train prints at start-up, by the sync engine's own count
    // (ZeRO-2/3: plan_zero_counts)
    DistStateSizes z = {l->zero1 ? 1 : 0, st->n_floats, st->n_alloc, st->shard_len, 0, 0, 0, 0, (size_t)e};
    DistStateBytes b = dist_state_bytes(&z);
    st->mem[PLAN_MEM_PARAMS] = (double)b.params;  // fp32 + the 16-bit copy
    st->mem[PLAN_MEM_GRADS] = (double)b.grads;
    st->mem[PLAN_MEM_OPTIM] = (double)b.optim;  // Adam m and v
    st->mem_optim_unsharded = 8.0 * st->n_alloc;
    GPTActBytes act = stage_act_bytes(s, l, P, stage);
    st->slot_bytes = act.slot;
    st->mem[PLAN_MEM_ACTIVATIONS] = (double)st->slot_bytes * st->n_slots;
    st->scratch = (double)act.scratch;
    st->moe_workspace = (double)act.moe_workspace;
    st->mem[PLAN_MEM_WORKSPACE] = st->scratch + st->moe_workspace;

    plan_stage_traffic(s, l, P, stage, n_micro, st);  // of one step on one rank of this stage
    // ZeRO-2/3: DP traffic, the shard's sums and memory from the table (layers unalike: all)
    if (l->zero >= 2 && plan_zero_counts(s, l, table, n_params, n_micro, st)) {
        free(table);
        table = plan_stage_table(s, l, st, st->n_layers, &n_params, &built_floats);
        plan_zero_counts(s, l, table, n_params, n_micro, st);
    }
    free(table);

    // communication buffers: the received gradient (pipeline), ZeRO-1 shards (buckets reduce
    // in place: optim/optimizer.h)
    st->mem[PLAN_MEM_COMM] = e * io + (l->zero < 2 ? (double)b.shards : 0.0);

    plan_offload_counts(s, l, st);  // --optimizer-cpu-offload: the slice's host part

    stage_flops(s, l, Vp, st);
    st->kernel_bytes_mb = plan_kernel_bytes(s, l, st->n_layers, st->n_recomputed, st->first, st->last);
}

// Interleaved 1F1B (pipeline/pp_interleaved.h): rank `stage` holds chunks c = 0..v-1, virtual
// stages c*PP + stage of PP*v, each a GPT with its own flat buffers, optimizer and slots
// (pp_ilv_slots: what the schedule keeps in flight, training or evaluation), so memory,
// traffic and FLOPs add up over the chunks; the backward workspace is shared (one chunk
// computes at a time: gpt_share_workspace), and received gradients wait in each chunk's
// queue (grad_slots of the training plan) besides the step's own buffer.
static void interleaved_counts(const PlanSpec *s, const PlanLayout *l, int stage, int n_micro, PlanStage *st) {
    int v = l->vpp, P = l->pp * v, slots[PP_ILV_MAX_CHUNKS], grad_slots[PP_ILV_MAX_CHUNKS];
    PlanMemo own, *memo = s->memo ? s->memo : &own;
    if (!s->memo) plan_memo_init(&own);
    plan_ilv_slots(s->memo, l->pp, v, n_micro, stage, slots, grad_slots);
    // virtual stages 1 .. P - 2 differ only in layer0 and slots: their counts are computed once
    // (with MoE layers in some layers only, the virtual stages may differ: each is counted)
    // (uneven first/last ranks: their chunks differ from the others' too)
    int alike = plan_moe_layers(&s->model, 0, s->model.num_layers) % s->model.num_layers == 0 &&
                !s->model.first_stage_layers && !s->model.last_stage_layers;
    if (!memo->have_chunks || memo->n_micro != n_micro || memcmp(&memo->layout, l, sizeof *l)) {
        for (int k = 0; k < 3; k++) chunk_counts(s, l, P, k == 0 ? 0 : k == 1 ? 1 : P - 1, 1, n_micro, &memo->chunks[k]);
        memo->layout = *l;
        memo->n_micro = n_micro;
        memo->have_chunks = 1;
    }
    size_t N = plan_rows(s, l);
    double io = (double)plan_act_bytes(s->precision) * (l->sp ? N / (size_t)l->tp : N) * s->model.hidden_size;
    *st = (PlanStage){.first = stage == 0, .last = stage == l->pp - 1};
    st->mem[PLAN_MEM_COMM] = io;  // the step's received gradient (pp_step_init)
    for (int c = 0; c < v; c++) {
        int vs = c * l->pp + stage, n;
        PlanStage k = memo->chunks[vs == 0 ? 0 : vs == P - 1 ? 2 : 1];
        if (!alike) chunk_counts(s, l, P, vs, 1, n_micro, &k);
        gpt_stage_layers(&s->model, l->pp, v, vs, &k.layer0, &n);
        k.n_slots = slots[c];
        k.mem[PLAN_MEM_ACTIVATIONS] = (double)k.slot_bytes * k.n_slots;
        if (c == 0) st->layer0 = k.layer0;
        st->n_layers += k.n_layers;
        st->n_slots += k.n_slots;
        st->n_recomputed += k.n_recomputed;
        st->n_chunk_outputs += k.n_chunk_outputs;
        st->n_floats += k.n_floats;
        st->n_alloc += k.n_alloc;
        st->shard_len += k.shard_len;
        for (int i = 0; i < PLAN_NMEM; i++)
            if (i == PLAN_MEM_COMM) st->mem[i] += k.mem[i] - io + io * grad_slots[c];
            else if (i != PLAN_MEM_WORKSPACE) st->mem[i] += k.mem[i];
        if (k.scratch > st->scratch) st->scratch = k.scratch;  // shared (gpt_share_workspace)
        st->mem_optim_unsharded += k.mem_optim_unsharded;
        st->host_mem += k.host_mem;  // (each chunk's optimizer its own host part)
        st->pcie_down += k.pcie_down;
        st->pcie_up += k.pcie_up;
        st->moe_workspace += k.moe_workspace;
        st->n_moe += k.n_moe;
        for (int g = 0; g < PLAN_NGROUPS; g++)
            for (int i = 0; i < COMM_NKINDS; i++) {
                st->traffic[g].bytes[i] += k.traffic[g].bytes[i];
                st->traffic[g].calls[i] += k.traffic[g].calls[i];
            }
        st->flops_mb += k.flops_mb;
        st->model_flops_mb += k.model_flops_mb;
        st->attn_flops_mb += k.attn_flops_mb;
        st->kernel_bytes_mb += k.kernel_bytes_mb;
    }
    st->mem[PLAN_MEM_WORKSPACE] = st->scratch + st->moe_workspace;  // each chunk's MoE buffers its own
}

int plan_stage_like(const PlanSpec *s, const PlanLayout *l, int stage, int n_micro, PlanStage *st) {
    int layer0, n;
    if (l->vpp > 1 || st->n_layers <= 0 || stage <= 0 || stage >= l->pp) return 0;
    gpt_stage_layers(&s->model, l->pp, 1, stage, &layer0, &n);
    if (n != st->n_layers || st->first || (stage == l->pp - 1) != st->last) return 0;
    for (int k = 0; s->model.num_experts > 0 && k < n; k++)  // the same MoE layers too
        if (gpt_moe_layer(&s->model, layer0 + k) != gpt_moe_layer(&s->model, st->layer0 + k)) return 0;
    st->layer0 = layer0;
    st->n_slots = pp_schedule_slots(l->gpipe ? PP_SCHEDULE_GPIPE : PP_SCHEDULE_1F1B, l->pp, stage, n_micro);
    st->mem[PLAN_MEM_ACTIVATIONS] = (double)st->slot_bytes * st->n_slots;
    return 1;
}

void plan_stage_counts(const PlanSpec *s, const PlanLayout *l, int stage, int n_micro, PlanStage *st) {
    if (l->vpp > 1) {
        interleaved_counts(s, l, stage, n_micro, st);
        return;
    }
    int slots = pp_schedule_slots(l->gpipe ? PP_SCHEDULE_GPIPE : PP_SCHEDULE_1F1B, l->pp, stage, n_micro);
    chunk_counts(s, l, l->pp, stage, slots, n_micro, st);
}

int plan_attn_cudnn(const PlanSpec *s, const PlanLayout *l) {
    const GPTConfig *c = &s->model;
    BackendDType act = s->precision == PLAN_BF16 ? BACKEND_BF16 : s->precision == PLAN_FP16 ? BACKEND_F16 : BACKEND_F32;
    BackendDropout d = {.threshold = s->attention_dropout > 0};  // only 0 or not matters here
    BackendAttnWindow ring = {0};                                 // CP's blocks are windows
    return c->use_flash_attn && c->attn_kernels != BACKEND_ATTN_MEGAC &&
           backend_attn_cudnn_case(act, gpt_head_size(c), &d, plan_cp(l) > 1 ? &ring : NULL, NULL);
}
