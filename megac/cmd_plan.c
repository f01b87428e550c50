// megac/cmd_plan.c: `megac plan`: every valid layout of a world size, with its predicted
// memory per rank, bytes per group, bubble, step time and MFU on a hardware profile,
// ranked (plan/). Model and batch flags are `megac train`'s; nothing runs.
#include "commands.h"
#include "core/args.h"
#include "core/check.h"
#include "core/host.h"  // defines: core_check_threads
#include "core/outpath.h"  // defines: core_out_check_file, core_out_open, core_out_publish
#include "model/gpt_flags.h"
#include "optim/optimizer.h"
#include "pipeline/pp_interleaved.h"  // defines: PP_ILV_MAX_CHUNKS
#include "plan/plan_calibrate.h"
#include "plan/plan_print.h"

#include <errno.h>

#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "usage: megac plan --world-size N [--gpus-per-node G] [--hardware h100|h200|FILE] [--json]\n"
    "                  [--top K] <model and batch flags as for megac train> [layout restrictions]\n"
    "  Predicts every TP x CP x PP x DP layout (micro-batch sizes, 1F1B/GPipe, sequence parallelism,\n"
    "  ZeRO-1; CP and EP only when asked: --context-parallel-size, --expert-model-parallel-size) and ranks them, fastest first; layouts that do not fit in memory come last.\n"
    "  Layout flags (--tensor-model-parallel-size, --micro-batch-size, --sequence-parallel, ...)\n"
    "  fix that dimension; left out, every value is tried.";

typedef struct {
    int world, gpus_per_node, json, top, threads;
    const char *hardware, *schedule, *device, *calibrate, *sharding, *cp_comm_type;
    int sp_on, sp_off, zero_on, zero_off, bf16, fp16, no_tf32;
    int cpu_offload;          // --optimizer-cpu-offload
    double offload_fraction;  // --optimizer-offload-fraction (< 0: not given)
} PlanFlags;

// Resolves --hardware (built-in name or file) and --gpus-per-node. Exits 2 on bad input.
static void load_hardware(const PlanFlags *pf, PlanHardware *hw) {
    char err[512];
    if (plan_hw_builtin(pf->hardware, hw) != 0) {
        PlanHardware base;
        plan_hw_builtin("h100", &base);  // keys a file leaves out keep the H100's values
        if (plan_hw_load(pf->hardware, &base, hw, err, sizeof err) != 0) core_usage_error("%s", err);
    }
    if (pf->gpus_per_node < 0) core_usage_error("--gpus-per-node must be > 0, got %d", pf->gpus_per_node);
    if (pf->gpus_per_node > 0) hw->gpus_per_node = pf->gpus_per_node;
}

// One switch from an on flag and an off flag: -1 (free), 1, 0. Exits 2 if both are given.
static int switch_of(int on, int off, const char *on_name, const char *off_name) {
    if (on && off) core_usage_error("%s and %s contradict each other", on_name, off_name);
    return on ? 1 : off ? 0 : -1;
}

// --calibrate FILE: measures (every rank of the job), rank 0 writes the profile. The file is
// opened first, so an unwritable path fails before anything is measured.
static int calibrate(const PlanFlags *pf, const PlanHardware *base, int argc, char **argv) {
    core_check_threads("--num-threads", pf->threads);
#ifndef MEGAC_HAVE_CUDA
    if (strcmp(pf->device, "cpu"))
        core_usage_error("--calibrate --device %s: megac was built without CUDA (add --device cpu)", pf->device);
#endif
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    FILE *f = NULL;
    char msg[4600] = "", tmp[4200];
    CoreOutInput in[1] = {{"--hardware", pf->hardware}};
    int bad = rank == 0 && (core_out_check_file("--calibrate", pf->calibrate, in, 1, 0, msg, sizeof msg) ||
                            core_out_open("--calibrate", pf->calibrate, &f, tmp, sizeof tmp, msg, sizeof msg));
    core_agree_or_exit(bad, msg, (int)sizeof msg);
    PlanHardware hw;
    plan_calibrate(base, pf->threads, !strcmp(pf->device, "cuda"), &hw, stdout);
    if (f) {
        plan_hw_write(f, &hw);
        if (core_out_publish("--calibrate", pf->calibrate, f, tmp, msg, sizeof msg) != 0) {
            fprintf(stderr, "megac: %s\n", msg);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        printf("wrote %s (megac plan --hardware %s)\n", pf->calibrate, pf->calibrate);
    }
    MPI_CHECK(MPI_Finalize());
    return 0;
}

// The limits of megac plan's inputs: a world of 2^20 ranks (a million GPUs) and a global
// batch of 2^24 sequences; with them every layout is enumerated in well under 2 s.
enum { PLAN_MAX_WORLD = 1 << 20, PLAN_MAX_BATCH = 1 << 24 };

static void check_spec(const PlanSpec *s, const PlanFilter *f, const PlanFlags *pf) {
    if (s->world_size <= 0 || s->world_size > PLAN_MAX_WORLD)
        core_usage_error("--world-size must be in [1, %d], got %d", PLAN_MAX_WORLD, s->world_size);
    if (s->global_batch > PLAN_MAX_BATCH)
        core_usage_error("--global-batch-size must be at most %d, got %d", PLAN_MAX_BATCH, s->global_batch);
    if (s->global_batch <= 0 || f->micro_batch < 0 || s->ddp_bucket_size < 0 || pf->top < 0)
        core_usage_error("--global-batch-size %d must be > 0; --micro-batch-size %d, --ddp-bucket-size "
                         "%lld and --top %d must be >= 0", s->global_batch, f->micro_batch,
                         (long long)s->ddp_bucket_size, pf->top);
    int tp = f->tp ? f->tp : 1, cp = f->cp ? f->cp : 1;
    if (f->tp < 0 || f->pp < 0 || f->cp < 0 || s->world_size % (tp * cp) ||
        (f->pp && s->world_size % (tp * cp * f->pp)))
        core_usage_error("--world-size %d is not divisible by --tensor-model-parallel-size %d x "
                         "--context-parallel-size %d x --pipeline-model-parallel-size %d",
                         s->world_size, tp, cp, f->pp ? f->pp : 1);
    if (cp > 1 && s->model.seq_length % (2 * cp))  // as train refuses
        core_usage_error("--context-parallel-size %d needs 2 x %d dividing --seq-length %d", cp, cp,
                         s->model.seq_length);
    char err[512];
    GPTConfig c = s->model;  // the model alone; an uneven first/last stage against a given PP
    if (!f->pp) c.first_stage_layers = c.last_stage_layers = 0;  // (else each layout's PP)
    if (gpt_config_check(&c, 1, f->pp ? f->pp : 1, err, sizeof err) != 0) core_usage_error("%s", err);
}

// --virtual-pipeline-model-parallel-size / --num-layers-per-virtual-pipeline-stage as megac
// train reads them (the layout checks refuse what v cannot do per layout). Exits 2.
static void check_virtual_pipeline(PlanFilter *f) {
    if (f->vpp < 0 || f->vpp_layers < 0 || f->vpp > PP_ILV_MAX_CHUNKS)
        core_usage_error("--virtual-pipeline-model-parallel-size %d must be 0 to %d and "
                         "--num-layers-per-virtual-pipeline-stage %d >= 0", f->vpp, PP_ILV_MAX_CHUNKS,
                         f->vpp_layers);
    if (f->vpp && f->vpp_layers)
        core_usage_error("give --virtual-pipeline-model-parallel-size or --num-layers-per-virtual-"
                         "pipeline-stage, not both (the second sets v per PP)");
}

static PlanPrecision precision_of(const PlanFlags *pf) {
    if (pf->bf16 && pf->fp16) core_usage_error("--bf16 and --fp16 contradict each other: choose one");
    if (strcmp(pf->device, "cpu") && strcmp(pf->device, "cuda"))
        core_usage_error("--device must be cpu or cuda, got '%s'", pf->device);
    if (pf->bf16) return PLAN_BF16;
    if (pf->fp16) return PLAN_FP16;
    return pf->no_tf32 || !strcmp(pf->device, "cpu") ? PLAN_FP32 : PLAN_TF32;
}

// The sharding filter of --data-parallel-sharding-strategy (train's names: a level fixes the
// DP > 1 layouts to it), checked against --use/--no-distributed-optimizer.
static void filter_sharding(PlanFilter *f, const PlanFlags *pf) {
    if (!pf->sharding) return;
    int z = optim_sharding_parse(pf->sharding);
    if (z < 0)
        core_usage_error("--data-parallel-sharding-strategy must be no_shard, optim, optim_grads or "
                         "optim_grads_params, got '%s'", pf->sharding);
    if (f->zero1 >= 0 && f->zero1 != (z > 0))
        core_usage_error("--%s-distributed-optimizer contradicts --data-parallel-sharding-strategy %s",
                         f->zero1 ? "use" : "no", pf->sharding);
    f->zero1 = z > 0;
    f->zero = z >= 2 ? z : 0;  // OptimSharding: 2 optim_grads, 3 optim_grads_params
}

// --optimizer-cpu-offload [--optimizer-offload-fraction F] as megac train checks them.
static void filter_offload(PlanSpec *s, PlanFilter *f, const PlanFlags *pf) {
    double F = pf->offload_fraction;
    if (F >= 0 && !pf->cpu_offload)
        core_usage_error("--optimizer-offload-fraction needs --optimizer-cpu-offload");
    if (F > 1 || (F < 0 && F != -1.0))  // (-1: not given)
        core_usage_error("--optimizer-offload-fraction must be in [0, 1], got %g", F);
    if (pf->cpu_offload && strcmp(pf->device, "cuda"))
        core_usage_error("--optimizer-cpu-offload needs --device cuda: the CPU backend's optimizer state is "
                         "already in host memory");
    s->offload = f->offload = pf->cpu_offload;
    f->offload_fraction = F;
}

// The filters and the spec's settings from the parsed flags (megac train's checks where the
// flags are train's): EP, the schedule, CP's exchange, SP, ZeRO, dropout, the precision.
// Aborts the job with a usage error on a bad or contradicting value.
static void finish_flags(PlanSpec *s, PlanFilter *f, const PlanFlags *pf, const GPTFlagText *mt) {
    f->ep = mt->ep;  // every layout splits the experts over EP (plan_ep.c); refused where EP
                     // does not divide DP x CP
    if (mt->ep > 1 && s->model.num_experts == 0)  // as train
        core_usage_error("--expert-model-parallel-size %d needs --num-experts", mt->ep);
    // ETP 1: the TP > 1 layouts' EP groups span TP (plan_ep.c); else ETP is TP (the default)
    if (mt->ep > 1 && mt->etp > 1 && mt->etp != f->tp)
        core_usage_error("--expert-tensor-parallel-size %d must be 1 or TP (fix --tensor-model-parallel-size "
                         "%d to plan it)", mt->etp, mt->etp);
    f->etp1 = mt->ep > 1 && mt->etp == 1;
    if (*pf->schedule && strcmp(pf->schedule, "1f1b") && strcmp(pf->schedule, "gpipe"))
        core_usage_error("--pipeline-schedule must be 1f1b or gpipe, got '%s'", pf->schedule);
    f->gpipe = *pf->schedule ? !strcmp(pf->schedule, "gpipe") : -1;
    char cp_err[256];
    int cp_comm = cp_comm_type_parse(pf->cp_comm_type, cp_err, sizeof cp_err);
    if (cp_comm < 0) core_usage_error("%s", cp_err);
    f->cp_comm = (CPCommType)cp_comm;
    if (f->cp > 1) s->model.use_flash_attn = 1;  // as train: CP runs the fused attention kernels
    check_virtual_pipeline(f);
    f->sp = switch_of(pf->sp_on, pf->sp_off, "--sequence-parallel", "--no-sequence-parallel");
    f->zero1 = switch_of(pf->zero_on, pf->zero_off, "--use-distributed-optimizer", "--no-distributed-optimizer");
    filter_sharding(f, pf);
    if (!(s->attention_dropout >= 0 && s->attention_dropout < 1))
        core_usage_error("--attention-dropout %g: a dropout probability must be in [0, 1)", s->attention_dropout);
    s->precision = precision_of(pf);
    filter_offload(s, f, pf);
}

int cmd_plan(int argc, char **argv) {
    PlanSpec s = {.global_batch = 8, .attention_dropout = 0.1};  // train's dropout
    GPTConfig *m = &s.model;
    GPTFlagText mt;
    gpt_flags_init(m, &mt);  // megac train's defaults, and GPT-2's vocabulary
    m->vocab_size = 50257;
    PlanFilter f = {0, 0, 0, -1, -1, -1, 0, 0, 0, 1, 0, 1, 0, 0, 0};  // CP 1 unless asked (as vpp)
    PlanFlags pf = {.top = 20, .hardware = "h100", .schedule = "", .device = "cuda", .cp_comm_type = "p2p",
                    .offload_fraction = -1.0};
    const ArgSpec own[] = {
        {"--world-size", ARG_INT, &s.world_size, "ranks (GPUs) to lay out"},
        {"--gpus-per-node", ARG_INT, &pf.gpus_per_node, "GPUs per node (0: the hardware profile's)"},
        {"--hardware", ARG_STR, &pf.hardware, "h100 | h200 | a profile file (key = value)"},
        {"--json", ARG_BOOL, &pf.json, "print one JSON document (every layout) instead of the table"},
        {"--top", ARG_INT, &pf.top, "rows of the table (0: all)"},
        {"--vocab-size", ARG_INT, &m->vocab_size, "the tokenizer's vocabulary V (train reads it from the data)"},
        {"--global-batch-size", ARG_INT, &s.global_batch, "sequences per iteration (all DP ranks)"},
        {"--micro-batch-size", ARG_INT, &f.micro_batch, "fix the micro-batch size (0: every divisor)"},
        {"--tensor-model-parallel-size", ARG_INT, &f.tp, "fix TP (0: every divisor)"},
        {"--pipeline-model-parallel-size", ARG_INT, &f.pp, "fix PP (0: every divisor)"},
        {"--context-parallel-size", ARG_INT, &f.cp, "context parallelism: CP (default 1), or 0: every CP the model allows (flash attention, 2 x CP dividing the sequence)"},
        {"--cp-comm-type", ARG_STR, &pf.cp_comm_type, "CP's K/V exchange: " CP_COMM_TYPES_HELP},
        {"--pipeline-schedule", ARG_STR, &pf.schedule, "fix the schedule: 1f1b | gpipe (default: both)"},
        {"--virtual-pipeline-model-parallel-size", ARG_INT, &f.vpp, "interleaved 1F1B with v model chunks per pipeline rank (every layout)"},
        {"--num-layers-per-virtual-pipeline-stage", ARG_INT, &f.vpp_layers, "interleaved 1F1B: v = num-layers / (PP x this)"},
        {"--sequence-parallel", ARG_BOOL, &pf.sp_on, "only layouts with sequence parallelism"},
        {"--no-sequence-parallel", ARG_BOOL, &pf.sp_off, "only layouts without it"},
        {"--use-distributed-optimizer", ARG_BOOL, &pf.zero_on, "only ZeRO-1 layouts"},
        {"--no-distributed-optimizer", ARG_BOOL, &pf.zero_off, "only plain DDP layouts"},
        {"--data-parallel-sharding-strategy", ARG_STR, &pf.sharding, "only these layouts: no_shard | optim | optim_grads (ZeRO-2) | optim_grads_params (ZeRO-3)"},
        {"--attention-dropout", ARG_FLOAT, &s.attention_dropout, "as megac train's (default 0.1): with it the fused attention runs megac's kernels, without it cuDNN's (--bf16/--fp16, head size 64 or 128)"},
        {"--ddp-bucket-size", ARG_I64, &s.ddp_bucket_size, "gradient elements per DP reduction bucket (0: one)"},
        {"--device", ARG_STR, &pf.device, "cuda (default) | cpu (fp32 GEMMs)"},
        {"--no-tf32", ARG_BOOL, &pf.no_tf32, "fp32 GEMMs instead of TF32 tensor cores"},
        {"--bf16", ARG_BOOL, &pf.bf16, "bf16 activations and weight copies (megac train --bf16)"},
        {"--fp16", ARG_BOOL, &pf.fp16, "fp16 activations and weight copies (megac train --fp16)"},
        {"--optimizer-cpu-offload", ARG_BOOL, &pf.cpu_offload, "also rank each layout with the optimizer offloaded (fractions 0, 0.5, 1; host memory, PCIe bytes and time: docs/zero.md)"},
        {"--optimizer-offload-fraction", ARG_FLOAT, &pf.offload_fraction, "--optimizer-cpu-offload: only this fraction, 0..1 (default: 0, 0.5 and 1)"},
        {"--calibrate", ARG_STR, &pf.calibrate, "measure this machine (under mpiexec: these ranks), write a profile FILE, stop"},
        {"--num-threads", ARG_INT, &pf.threads, "--calibrate: CPU threads per rank (0: cores / ranks on the node)"},
    };
    enum { N_OWN = sizeof own / sizeof own[0] };
    ArgSpec specs[N_OWN + GPT_FLAGS_N];
    memcpy(specs, own, sizeof own);
    int n_specs = N_OWN + gpt_flags_specs(specs + N_OWN, m, &mt);  // train's model flags
    core_args_parse(USAGE, specs, n_specs, argc, argv);
    gpt_flags_finish(m, &mt);
    finish_flags(&s, &f, &pf, &mt);
    PlanHardware hw;
    load_hardware(&pf, &hw);
    if (pf.calibrate) return calibrate(&pf, &hw, argc, argv);
    check_spec(&s, &f, &pf);

    PlanSet set;
    plan_enumerate(&s, &f, &hw, pf.json ? 0 : pf.top, &set);  // the table: its rows' stages
    if (set.n == 0) core_usage_error("no valid layout for world size %d: %s", s.world_size, set.reason);
    if (pf.json) plan_print_json(stdout, &s, &hw, &set);
    else plan_print_table(stdout, &s, &hw, &set, pf.top);
    plan_set_free(&set);
    return 0;
}
