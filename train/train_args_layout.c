// train/train_args_layout.c: the checks of `megac train`'s layout against the world size
// (train_args.h: train_args_check_layout), expert parallelism's included.
#include "train_args.h"
#include "core/check.h"
#include "parallel_state/pgrid.h"     // defines: pgrid_dims_init, train_args_dims
#include "model/gpt_config.h"         // defines: gpt_config_check
#include "pipeline/pp_interleaved.h"  // defines: pp_ilv_check

#include <stdint.h>

// Expert parallelism's layout (the expert decomposition, pgrid.h): ETP = TP (the default),
// EP divides DP x CP; ETP 1, EP divides TP x DP x CP, and with TP > 1 each TP rank must hold
// its own rows (sequence parallelism, as Megatron requires for MoE with TP).
static void train_args_check_ep(const TrainArgs *a, const PGridDims *d) {
    char err[512];
    PGridDims e = train_args_dims(a);
    int etp = e.etp;
    if (a->model.num_experts == 0)
        core_usage_error("--expert-model-parallel-size %d needs --num-experts", a->ep);
    if (pgrid_dims_init(&e, d->world_size, err, sizeof err)) core_usage_error("%s", err);
    if (etp == 1 && a->tp > 1 && !a->sequence_parallel)
        core_usage_error("--expert-tensor-parallel-size 1 with --tensor-model-parallel-size %d and "
                         "--expert-model-parallel-size %d needs --sequence-parallel (each TP rank "
                         "must hold its own tokens)", a->tp, a->ep);
}

int train_args_etp(const TrainArgs *a) {
    return a->ep > 1 && a->etp > 0 ? a->etp : a->tp;  // (EP 1: the experts are the dense layout's)
}

PGridDims train_args_dims(const TrainArgs *a) {
    return (PGridDims){.tp = a->tp, .cp = a->cp, .pp = a->pp, .ep = a->ep, .etp = train_args_etp(a)};
}

// The interleaved schedule's rule (pp_ilv_check: micro-batches per step a multiple of PP)
// for one batch a step may take, given by flag `from`. One line naming it, exit 2.
static void check_interleaved_batch(const TrainArgs *a, int dp, int64_t batch, const char *from) {
    char ilv[256];
    if (pp_ilv_check(a->pp, a->vpp, (int)(batch / (a->micro_batch * dp)), ilv, sizeof ilv))
        core_usage_error("--virtual-pipeline-model-parallel-size %d: %s (%s: batch %lld / "
                         "(--micro-batch-size %d x DP %d))", a->vpp, ilv, from, (long long)batch,
                         a->micro_batch, dp);
}

// ... for every batch: --global-batch-size's, each of a --step-batch-size-schedule, each of a
// --rampup-batch-size (START, START + INCR, ... up to the global batch).
static void check_interleaved_batches(const TrainArgs *a, int dp) {
    const TrainRampup *r = &a->rampup;
    check_interleaved_batch(a, dp, a->global_batch, "--global-batch-size");
    for (int i = 0; i < r->n_steps; i++)
        check_interleaved_batch(a, dp, r->step_batch[i], "--step-batch-size-schedule");
    for (int64_t b = r->start; r->start && b <= a->global_batch; b += r->incr)
        check_interleaved_batch(a, dp, b, "--rampup-batch-size");
}

void train_args_check_layout(const TrainArgs *a, int world) {
    PGridDims d = {.tp = a->tp, .cp = a->cp, .pp = a->pp, .ep = 1, .etp = a->tp};  // dense first
    char err[512];
    if (pgrid_dims_init(&d, world, err, sizeof err) != 0) core_usage_error("%s", err);
    int dp = d.dp;
    if (a->ep > 1) train_args_check_ep(a, &d);
    if (a->global_batch % (a->micro_batch * dp))
        core_usage_error("--global-batch-size %d is not divisible by --micro-batch-size %d x "
                         "data-parallel size %d (world %d / TP %d / CP %d / PP %d)", a->global_batch,
                         a->micro_batch, dp, world, a->tp, a->cp, a->pp);
    int64_t unit = (int64_t)a->micro_batch * dp;  // every ramp-up batch splits into micro-batches
    for (int i = 0; i < a->rampup.n_steps; i++)
        if (a->rampup.step_batch[i] % unit)
            core_usage_error("--step-batch-size-schedule: batch %d is not divisible by --micro-batch-size %d "
                             "x data-parallel size %d", a->rampup.step_batch[i], a->micro_batch, dp);
    if (a->rampup.start && (a->rampup.start % unit || a->rampup.incr % unit))
        core_usage_error("--rampup-batch-size %lld %lld: START and INCR must be multiples of "
                         "--micro-batch-size %d x data-parallel size %d", (long long)a->rampup.start,
                         (long long)a->rampup.incr, a->micro_batch, dp);
    if (a->vpp > 1) check_interleaved_batches(a, dp);
    GPTConfig m = a->model;
    if (m.vocab_size == 0) m.vocab_size = 1;  // not known yet; checked once the data is open
    if (gpt_config_check(&m, a->tp, a->pp, err, sizeof err) != 0) core_usage_error("%s", err);
    if (a->vpp > 1 && gpt_chunks_check(&m, a->pp, a->vpp, err, sizeof err)) core_usage_error("%s", err);
}
