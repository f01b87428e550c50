// train/train_args_system.c: the system group of `megac train`'s flags
// (train_args_flags.h): the device and its threads, the distributed backend and timeout, the
// DP sharding (DDP, ZeRO-1/2/3) with its buckets and overlaps, and the precision (bf16, fp16
// with loss scaling, bf16 gradient reduction).
#include "train_args_flags.h"
#include "core/check.h"
#include "core/host.h"  // defines: core_check_threads

#include <string.h>

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    a->device = "cpu";
    a->dist_backend = "nccl";
    a->timeout_minutes = 10;
    a->initial_loss_scale = 4294967296.0;  // 2^32, Megatron's
    a->min_loss_scale = 1.0;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
    x->use_zero1 = 1;  // --help shows the default
    a->optimizer_offload_fraction = 1.0;  // Megatron's
    const ArgSpec own[] = {
        {"--device", ARG_STR, &a->device, "cpu | cuda"},
        {"--no-tf32", ARG_BOOL, &a->no_tf32, "CUDA: strict fp32 GEMMs (default: TF32 tensor cores)"},
        {"--distributed-backend", ARG_STR, &a->dist_backend, "CUDA: nccl | staged (device->host->MPI; several ranks may share a GPU: for testing)"},
        {"--num-threads", ARG_INT, &a->num_threads, "CPU threads per rank (0: cores / ranks on the node); --device cuda: those of --optimizer-cpu-offload's AdamW"},
        {"--use-distributed-optimizer", ARG_BOOL, &x->use_zero1, "ZeRO-1 optimizer sharding over DP (Megatron: off; megac: on, as it saves memory and gives the same results as DDP)"},
        {"--no-distributed-optimizer", ARG_BOOL, &x->no_zero1, "plain DDP: all-reduce, full optimizer per rank"},
        {"--data-parallel-sharding-strategy", ARG_STR, &x->sharding, "no_shard (DDP; Megatron's default) | optim (ZeRO-1, megac's default: see --use-distributed-optimizer) | optim_grads (ZeRO-2: + gradients) | optim_grads_params (ZeRO-3 / FSDP: + parameters)"},
        {"--distributed-timeout-minutes", ARG_FLOAT, &a->timeout_minutes, "end the job if a collective or p2p transfer of the training step waits longer"},
        {"--overlap-grad-reduce", ARG_BOOL, &a->overlap_grad_reduce, "DDP / ZeRO-1: reduce each --ddp-bucket-size bucket during the last micro-batch's backward, once its gradients are final (needs several buckets); ZeRO-2: each layer's reduce-scatter runs in the background, in every micro-batch (same results; ZeRO-3 refused)"},
        {"--overlap-param-gather", ARG_BOOL, &a->overlap_param_gather, "ZeRO-1: all-gather each updated --ddp-bucket-size bucket in the background, waited for by the next forward's first layer reading it; ZeRO-3: gather the next layer's weights while the current one computes (same results; DDP and ZeRO-2 refused)"},
        {"--ddp-bucket-size", ARG_I64, &a->ddp_bucket_size, "gradient elements per DP reduction bucket (0: one; Megatron with --overlap-grad-reduce: max(4e7, 1e6 x DP), megac: set it for overlap)"},
        {"--bf16", ARG_BOOL, &a->bf16, "bf16 activations and weight copies, fp32 master weights, grads and optimizer"},
        {"--fp16", ARG_BOOL, &a->fp16, "fp16 activations and weight copies with loss scaling, fp32 master weights"},
        {"--loss-scale", ARG_FLOAT, &a->loss_scale, "--fp16: static loss scale (default: dynamic)"},
        {"--initial-loss-scale", ARG_FLOAT, &a->initial_loss_scale, "--fp16: first dynamic loss scale (2^32)"},
        {"--min-loss-scale", ARG_FLOAT, &a->min_loss_scale, "--fp16: the dynamic scale never falls below this"},
        {"--loss-scale-window", ARG_INT, &a->loss_scale_window, "--fp16: clean steps before the scale doubles"},
        {"--hysteresis", ARG_INT, &a->hysteresis, "--fp16: overflows tolerated before the scale halves"},
        {"--grad-reduce-in-bf16", ARG_BOOL, &a->grad_reduce_in_bf16, "reduce gradients over DP in bf16 (default fp32; any device)"},
        {"--megatron-fsdp-grad-comm-dtype", ARG_STR, &x->fsdp_grad_comm, "Megatron-FSDP's name for the reduction's type: bf16 = --grad-reduce-in-bf16; fp32 or auto (megac's gradients are fp32) = the default"},
        {"--optimizer-cpu-offload", ARG_BOOL, &a->optimizer_cpu_offload, "CUDA: AdamW of --optimizer-offload-fraction of each rank's optimizer slice runs on the host (--num-threads), its moments in pinned host memory, not on the GPU (same results; docs/offload.md)"},
        {"--optimizer-offload-fraction", ARG_FLOAT, &a->optimizer_offload_fraction, "--optimizer-cpu-offload: the fraction of each rank's slice updated on the host, 0..1"},
        {"--overlap-cpu-optimizer-d2h-h2d", ARG_BOOL, &a->overlap_cpu_optimizer_d2h_h2d, "--optimizer-cpu-offload: the copies on a separate stream, ordered by events: each DDP / ZeRO-1 bucket's gradients go down as soon as it is reduced, the masters up before the gather (same results; docs/offload.md)"},
        {"--offload-params", ARG_BOOL, &a->offload_params, "CUDA, ZeRO-3 (optim_grads_params) with --optimizer-cpu-offload at fraction 1: each rank's fp32 parameter shard in pinned host memory, copied up a layer at a time before its gather (DeepSpeed's offload_param; same results; docs/offload.md)"},
    };
    return train_args_put(out, cap, own, (int)(sizeof own / sizeof own[0]));
}

// --data-parallel-sharding-strategy (Megatron-Core's names) against --no/--use-distributed-
// optimizer and against what ZeRO-2/3 do not support yet. One line naming both, exit 2.
static void parse_sharding(TrainArgs *a, const TrainFlagText *x) {
    const char *name = x->sharding;
    a->zero1 = !x->no_zero1;
    a->sharding = x->no_zero1 ? OPTIM_NO_SHARD : OPTIM_SHARD_OPTIM;
    if (!name) return;
    int s = optim_sharding_parse(name);
    if (s < 0)
        core_usage_error("--data-parallel-sharding-strategy must be no_shard, optim, optim_grads or "
                         "optim_grads_params, got '%s'", name);
    if (x->no_zero1 && s != OPTIM_NO_SHARD)
        core_usage_error("--no-distributed-optimizer (no_shard) contradicts "
                         "--data-parallel-sharding-strategy %s", name);
    if (train_args_given(x, "--use-distributed-optimizer") && s == OPTIM_NO_SHARD)
        core_usage_error("--use-distributed-optimizer contradicts --data-parallel-sharding-strategy no_shard");
    a->sharding = s;
    a->zero1 = s != OPTIM_NO_SHARD;
    if (s < OPTIM_SHARD_GRADS) return;
    if (a->ddp_bucket_size != 0)
        core_usage_error("--data-parallel-sharding-strategy %s (%s) does not support --ddp-bucket-size "
                         "(its buckets are the layers)", name, optim_sharding_label((OptimSharding)s));
}

// The DP sync's settings: sharding, buckets, the overlaps each level supports. One line, exit 2.
static void check_data_parallel(TrainArgs *a, const TrainFlagText *x) {
    if (train_args_given(x, "--use-distributed-optimizer") && x->no_zero1)
        core_usage_error("--use-distributed-optimizer and --no-distributed-optimizer contradict each other");
    if (a->ddp_bucket_size < 0) core_usage_error("--ddp-bucket-size must be >= 0");
    parse_sharding(a, x);
    if (a->overlap_param_gather && a->sharding != OPTIM_SHARD_PARAMS && a->sharding != OPTIM_SHARD_OPTIM)
        core_usage_error("--overlap-param-gather needs the distributed optimizer (ZeRO-1, the default, or "
                         "--data-parallel-sharding-strategy optim_grads_params); got %s",
                         optim_sharding_label((OptimSharding)a->sharding));
    if (a->overlap_grad_reduce && a->sharding == OPTIM_SHARD_PARAMS)
        core_usage_error("--overlap-grad-reduce works with DDP, ZeRO-1 and ZeRO-2 (--data-parallel-sharding-strategy "
                         "no_shard / optim / optim_grads); ZeRO-3 (optim_grads_params) does not support it yet");
}

// --optimizer-cpu-offload and its companions: a fraction in [0, 1], a device whose optimizer
// state is not in host memory already; --offload-params: ZeRO-3 and the whole slice offloaded.
// One line, exit 2.
static void check_offload(const TrainArgs *a) {
    double f = a->optimizer_offload_fraction;
    if (!(f >= 0.0 && f <= 1.0)) core_usage_error("--optimizer-offload-fraction must be in [0, 1], got %g", f);
    if (a->overlap_cpu_optimizer_d2h_h2d && !a->optimizer_cpu_offload)
        core_usage_error("--overlap-cpu-optimizer-d2h-h2d needs --optimizer-cpu-offload");
    if (a->optimizer_cpu_offload && strcmp(a->device, "cuda"))
        core_usage_error("--optimizer-cpu-offload needs --device cuda: the CPU backend's optimizer "
                         "state is already in host memory");
    if (!a->offload_params) return;
    if (strcmp(a->device, "cuda"))
        core_usage_error("--offload-params needs --device cuda: the CPU backend's parameters are already "
                         "in host memory");
    if (a->sharding != OPTIM_SHARD_PARAMS)
        core_usage_error("--offload-params needs ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params): "
                         "only ZeRO-3 shards the parameters");
    if (!a->optimizer_cpu_offload || f != 1.0)
        core_usage_error("--offload-params needs --optimizer-cpu-offload with --optimizer-offload-fraction 1: "
                         "the host AdamW updates the parameter shard where it lives");
}

static void finish(TrainArgs *a, TrainFlagText *x) {
    if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
        core_usage_error("--device must be cpu or cuda, got '%s'", a->device);
    if (a->timeout_minutes < 0) core_usage_error("--distributed-timeout-minutes must be >= 0");
    core_check_threads("--num-threads", a->num_threads);
    if (strcmp(a->dist_backend, "nccl") && strcmp(a->dist_backend, "staged"))
        core_usage_error("--distributed-backend must be nccl or staged, got '%s'", a->dist_backend);
    check_data_parallel(a, x);
    const char *comm = x->fsdp_grad_comm;
    if (comm && strcmp(comm, "bf16") && strcmp(comm, "fp32") && strcmp(comm, "auto"))
        core_usage_error("--megatron-fsdp-grad-comm-dtype must be fp32, bf16 or auto%s, got '%s'",
                         strcmp(comm, "fp16") ? "" : " (an fp16 gradient reduction is not implemented in megac)", comm);
    if (comm && !strcmp(comm, "bf16")) a->grad_reduce_in_bf16 = 1;
    else if (comm && a->grad_reduce_in_bf16)
        core_usage_error("--megatron-fsdp-grad-comm-dtype %s contradicts --grad-reduce-in-bf16", comm);
    check_offload(a);
    if (a->bf16 && a->fp16) core_usage_error("--bf16 and --fp16 contradict each other: choose one");
    if (a->loss_scale < 0 || a->initial_loss_scale <= 0 || a->min_loss_scale <= 0 ||
        a->min_loss_scale > a->initial_loss_scale || a->loss_scale_window <= 0 || a->hysteresis <= 0)
        core_usage_error("loss scaling: need --loss-scale %g >= 0, 0 < --min-loss-scale %g <= "
                         "--initial-loss-scale %g, --loss-scale-window %d and --hysteresis %d > 0",
                         a->loss_scale, a->min_loss_scale, a->initial_loss_scale,
                         a->loss_scale_window, a->hysteresis);
}

const TrainFlagGroup TRAIN_ARGS_SYSTEM = {specs, finish};
