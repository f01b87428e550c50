// train/train_args_parallel.c: the parallel group of `megac train`'s flags
// (train_args_flags.h): TP, CP and its exchange, PP with its schedule and interleaving, SP.
// Its checks need the world size only where train_args_layout.c makes them.
#include "train_args_flags.h"
#include "core/check.h"
#include "model/gpt_cp.h"             // defines: gpt_cp_check
#include "pipeline/pp_interleaved.h"  // defines: PP_ILV_MAX_CHUNKS

#include <string.h>

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    a->tp = a->pp = a->cp = 1;
    a->cp_comm_type = "p2p";
    a->pipeline_schedule = "1f1b";
    const ArgSpec own[] = {
        {"--tensor-model-parallel-size", ARG_INT, &a->tp, "TP"},
        {"--context-parallel-size", ARG_INT, &a->cp, "CP: ranks sharing each sequence (2 x CP chunks, ring attention; CP > 1 runs the fused attention of --use-flash-attn)"},
        {"--cp-comm-type", ARG_STR, &a->cp_comm_type, "CP's K/V exchange: " CP_COMM_TYPES_HELP},
        {"--pipeline-model-parallel-size", ARG_INT, &a->pp, "PP"},
        {"--num-layers-per-virtual-pipeline-stage", ARG_INT, &x->vpp_layers, "layers per model chunk: interleaved 1F1B with v = num-layers / (PP x this) chunks per pipeline rank (bubble (PP-1)/(v x m); m a multiple of PP)"},
        {"--virtual-pipeline-model-parallel-size", ARG_INT, &x->vpp_size, "v, model chunks per pipeline rank (interleaved 1F1B; instead of the flag above)"},
        {"--pipeline-schedule", ARG_STR, &a->pipeline_schedule, "1f1b | gpipe (all-forward-all-backward)"},
        {"--sequence-parallel", ARG_BOOL, &a->sequence_parallel, "split LayerNorm regions along the sequence over TP"},
    };
    return train_args_put(out, cap, own, (int)(sizeof own / sizeof own[0]));
}

// --num-layers-per-virtual-pipeline-stage N / --virtual-pipeline-model-parallel-size V into
// a->vpp (V = num-layers / (PP x N)), and the combinations the interleaved schedule refuses
// (a->sharding and a->rampup finished). One line, exit 2. (m a multiple of PP is checked
// with the world size.)
static void parse_virtual_pipeline(TrainArgs *a, int per_stage, int size) {
    const GPTConfig *m = &a->model;
    a->vpp = 1;
    if (!per_stage && !size) return;
    if (per_stage < 0 || size < 0)
        core_usage_error("--num-layers-per-virtual-pipeline-stage %d / --virtual-pipeline-model-parallel-size "
                         "%d must be > 0", per_stage, size);
    int pp = a->pp > 0 ? a->pp : 1;
    if (per_stage && (m->first_stage_layers || m->last_stage_layers))
        core_usage_error("--num-layers-per-virtual-pipeline-stage with --decoder-first/last-pipeline-num-layers: "
                         "the ranks hold different layer counts; give --virtual-pipeline-model-parallel-size "
                         "(model chunks per rank) instead, as Megatron asks");
    if (per_stage && (m->num_layers % (pp * per_stage)))
        core_usage_error("--num-layers %d is not divisible by pipeline-model-parallel-size %d x "
                         "--num-layers-per-virtual-pipeline-stage %d", m->num_layers, pp, per_stage);
    int v = per_stage ? m->num_layers / (pp * per_stage) : size;
    if (per_stage && size && v != size)
        core_usage_error("--num-layers-per-virtual-pipeline-stage %d gives %d model chunks per pipeline "
                         "rank, but --virtual-pipeline-model-parallel-size is %d", per_stage, v, size);
    if (v > PP_ILV_MAX_CHUNKS)
        core_usage_error("--virtual-pipeline-model-parallel-size %d: at most %d model chunks per pipeline rank",
                         v, PP_ILV_MAX_CHUNKS);
    a->vpp = v;
    if (v == 1) return;
    if (pp < 2)
        core_usage_error("the interleaved schedule (--virtual-pipeline-model-parallel-size %d) needs "
                         "--pipeline-model-parallel-size >= 2, got %d", v, a->pp);
    if (!m->first_stage_layers && !m->last_stage_layers && m->num_layers % (pp * v))
        core_usage_error("--num-layers %d is not divisible by pipeline-model-parallel-size %d x "
                         "--virtual-pipeline-model-parallel-size %d", m->num_layers, pp, v);
    const char *other = strcmp(a->pipeline_schedule, "1f1b") ? "--pipeline-schedule gpipe" : NULL;
    if (other)
        core_usage_error("the interleaved schedule (--virtual-pipeline-model-parallel-size %d) does not "
                         "support %s yet", v, other);
}

// CP's exchange and what CP > 1 needs. One line, exit 2.
static void check_context_parallel(TrainArgs *a) {
    GPTConfig *m = &a->model;
    char cp_err[256];
    int cp_comm = cp_comm_type_parse(a->cp_comm_type, cp_err, sizeof cp_err);
    if (cp_comm < 0) core_usage_error("%s", cp_err);
    if (a->cp > 1) m->use_flash_attn = 1;  // the ring's windows are the fused kernels' (Megatron: TE's)
    if (gpt_cp_check(m, a->tp, a->cp, (CPCommType)cp_comm, cp_err, sizeof cp_err)) core_usage_error("%s", cp_err);
}

static void finish(TrainArgs *a, TrainFlagText *x) {
    GPTConfig *m = &a->model;
    if (strcmp(a->pipeline_schedule, "1f1b") && strcmp(a->pipeline_schedule, "gpipe"))
        core_usage_error("--pipeline-schedule must be 1f1b or gpipe, got '%s'", a->pipeline_schedule);
    check_context_parallel(a);
    parse_virtual_pipeline(a, x->vpp_layers, x->vpp_size);
    // (the fused attention CP implies, on the system group's device)
    if (m->use_flash_attn && !strcmp(a->device, "cuda") && m->num_heads > 0 && gpt_head_size(m) > 128)
        core_usage_error("--use-flash-attn on --device cuda needs a head size <= 128, got %d "
                         "(--kv-channels, or --hidden-size %d / --num-attention-heads %d)",
                         gpt_head_size(m), m->hidden_size, m->num_heads);
}

const TrainFlagGroup TRAIN_ARGS_PARALLEL = {specs, finish};
