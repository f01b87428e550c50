// train/train_args_schedule.c: the schedule group of `megac train`'s flags
// (train_args_flags.h): batch sizes and their ramp-up, iterations or samples, the learning
// rate's schedule (and the decoupled one of the embeddings), AdamW, the seed.
#include "train_args_flags.h"
#include "core/check.h"

#include <string.h>

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    a->micro_batch = 4;
    a->global_batch = 8;
    a->train_iters = 100;
    x->lr = 3e-4, x->wd = 0.01, x->b1 = 0.9, x->b2 = 0.999, x->eps = 1e-8, x->clip = 1.0;  // Megatron's
    x->dec_min_lr = -1;  // --min-lr
    x->warmup_fraction = -1, x->warmup_samples = -1, x->decay_samples = -1, x->decay = -1;
    x->seed = 1234;
    x->style = "cosine";
    const ArgSpec own[] = {
        {"--micro-batch-size", ARG_INT, &a->micro_batch, "sequences per micro-batch (Megatron: required; megac: 4, for small runs)"},
        {"--global-batch-size", ARG_INT, &a->global_batch, "sequences per iteration (all DP ranks) (Megatron: --micro-batch-size x DP; megac: 8, for small runs)"},
        {"--train-iters", ARG_I64, &a->train_iters, "iterations (Megatron: required, or --train-samples; megac: 100, for small runs)"},
        {"--lr", ARG_FLOAT, &x->lr, "peak learning rate (Megatron: required; megac: 3e-4, GPT-3 small's)"},
        {"--min-lr", ARG_FLOAT, &x->min_lr, "final learning rate"},
        {"--decoupled-lr", ARG_FLOAT, &x->dec_lr, "peak learning rate of the embedding and output layer (Megatron's), same warm-up and decay (0: --lr)"},
        {"--decoupled-min-lr", ARG_FLOAT, &x->dec_min_lr, "with --decoupled-lr: their final learning rate (default: --min-lr)"},
        {"--lr-decay-style", ARG_STR, &x->style, "constant | linear | cosine (Megatron: linear; megac: cosine, as GPT-3 and llm.c)"},
        {"--lr-warmup-iters", ARG_I64, &x->warmup, "linear warm-up iterations"},
        {"--lr-warmup-fraction", ARG_FLOAT, &x->warmup_fraction, "warm-up as a fraction of --lr-decay-iters"},
        {"--lr-warmup-init", ARG_FLOAT, &x->warmup_init, "the warm-up's first learning rate, for every parameter (Megatron's; 0)"},
        {"--train-samples", ARG_I64, &x->train_samples, "sequences to train on (instead of --train-iters; the learning-rate schedule then counts samples)"},
        {"--lr-warmup-samples", ARG_I64, &x->warmup_samples, "with --train-samples: warm-up in sequences"},
        {"--lr-decay-samples", ARG_I64, &x->decay_samples, "with --train-samples: decay in sequences"},
        {"--step-batch-size-schedule", ARG_LIST, &x->steps, "TOKENS:BATCH ...: the global batch is BATCH from TOKENS consumed tokens on (K/M/B/T suffixes; the first at 0; the last is --global-batch-size)"},
        {"--rampup-batch-size", ARG_LIST, &x->rampup, "START INCR SAMPLES: the global batch grows from START by INCR to --global-batch-size over SAMPLES samples (needs --train-samples)"},
        {"--lr-decay-iters", ARG_I64, &x->decay, "decay iterations (default: train-iters)"},
        {"--weight-decay", ARG_FLOAT, &x->wd, "AdamW weight decay (weights and embeddings)"},
        {"--adam-beta1", ARG_FLOAT, &x->b1, "AdamW beta1"},
        {"--adam-beta2", ARG_FLOAT, &x->b2, "AdamW beta2"},
        {"--adam-eps", ARG_FLOAT, &x->eps, "AdamW epsilon"},
        {"--clip-grad", ARG_FLOAT, &x->clip, "clip the global gradient norm to this (0: off)"},
        {"--seed", ARG_I64, &x->seed, "seed of initialisation and data order"},
    };
    return train_args_put(out, cap, own, (int)(sizeof own / sizeof own[0]));
}

// 1 if argv names --train-iters (its default must not count as given). Pure.
static int train_iters_given(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "--train-iters", 13) && (argv[i][13] == 0 || argv[i][13] == '=')) return 1;
    return 0;
}

// --rampup-batch-size START INCR SAMPLES (Megatron's; sample-based runs only). One line, exit 2.
static void parse_rampup(TrainArgs *a, const CoreStrList *l, int64_t train_samples) {
    a->rampup = (TrainRampup){.global_batch = a->global_batch};
    if (l->n == 0) return;
    int64_t v[3] = {0, 0, 0};
    int ok = l->n == 3;
    for (int i = 0; ok && i < 3; i++) v[i] = core_parse_i64(l->items[i], &ok);
    if (!ok)
        core_usage_error("--rampup-batch-size takes three whole numbers: START INCR SAMPLES "
                         "(e.g. --rampup-batch-size 16 8 300000)");
    if (!train_samples)
        core_usage_error("--rampup-batch-size needs --train-samples (as in Megatron: no batch-size "
                         "ramp-up for iteration-based training)");
    a->rampup = (TrainRampup){.start = v[0], .incr = v[1], .samples = v[2], .global_batch = a->global_batch};
    char err[512];
    if (train_rampup_check(&a->rampup, err, (int)sizeof err)) core_usage_error("%s", err);
}

// Megatron's --step-batch-size-schedule (rampup.h) into a->rampup; the last batch is the
// global batch. One line, exit 2.
static void parse_steps(TrainArgs *a, const TrainFlagText *x) {
    if (!x->steps.n) return;
    char err[512];
    if (a->rampup.start) core_usage_error("--step-batch-size-schedule and --rampup-batch-size exclude each other");
    int gbs = a->global_batch;
    if (train_step_schedule_parse(&a->rampup, (const char *const *)x->steps.items, x->steps.n,
                                  a->model.seq_length, err, (int)sizeof err))
        core_usage_error("%s", err);
    a->global_batch = a->rampup.global_batch;
    if (train_args_given(x, "--global-batch-size") && gbs != a->global_batch)  // Megatron refuses both
        core_usage_error("--global-batch-size %d differs from the last batch of "
                         "--step-batch-size-schedule, %d: give one, or make them agree", gbs, a->global_batch);
}

// The run's length (iterations, or Megatron's samples) and the warm-up and decay lengths in
// the schedule's unit, into a and x->warmup, x->decay. One line, exit 2.
static void parse_length(TrainArgs *a, TrainFlagText *x) {
    if (x->train_samples < 0 || (x->train_samples && train_iters_given(x->argc, x->argv)))
        core_usage_error("give --train-iters or --train-samples (> 0), not both");
    parse_rampup(a, &x->rampup, x->train_samples);
    parse_steps(a, x);
    if (x->train_samples) {  // Megatron's sample-based run: the schedule counts samples
        if (x->warmup > 0 || x->decay >= 0)
            core_usage_error("with --train-samples give --lr-warmup-samples / --lr-decay-samples "
                             "(not --lr-warmup-iters / --lr-decay-iters)");
        a->train_samples = x->train_samples;
        a->lr_in_samples = 1;
        a->train_iters = train_rampup_iters(&a->rampup, 0, x->train_samples, NULL);
        x->warmup = x->warmup_samples >= 0 ? x->warmup_samples : 0;
        x->decay = x->decay_samples >= 0 ? x->decay_samples : x->train_samples;
    } else if (x->warmup_samples > 0 || x->decay_samples >= 0) {  // Megatron takes a warm-up of 0
        core_usage_error("--lr-warmup-samples / --lr-decay-samples need --train-samples");
    }
    if (x->warmup_fraction >= 0) {
        if (x->warmup > 0 || x->warmup_fraction > 1)
            core_usage_error("--lr-warmup-fraction %g must be in [0, 1] and excludes --lr-warmup-iters",
                             x->warmup_fraction);
        x->warmup = (int64_t)(x->warmup_fraction * (double)(x->decay < 0 ? a->train_iters : x->decay));
    }
}

// The schedules and AdamW from x, with their ranges. One line, exit 2.
static void set_optimizer(TrainArgs *a, const TrainFlagText *x) {
    double lr = x->lr, min_lr = x->min_lr, dec_lr = x->dec_lr, dec_min_lr = x->dec_min_lr;
    a->lr = (LRSchedule){lr, min_lr, x->warmup, x->decay < 0 ? a->train_iters : x->decay, a->lr.style,
                         x->warmup_init};
    if (dec_min_lr >= 0 && dec_lr <= 0)
        core_usage_error("--decoupled-min-lr %g needs --decoupled-lr", dec_min_lr);
    if (dec_lr < 0 || (dec_lr > 0 && (dec_min_lr >= 0 ? dec_min_lr : min_lr) > dec_lr))
        core_usage_error("need 0 <= --decoupled-min-lr (or --min-lr) %g <= --decoupled-lr %g",
                         dec_min_lr >= 0 ? dec_min_lr : min_lr, dec_lr);
    a->lr_decoupled = a->lr;
    a->lr_decoupled.lr = dec_lr;
    a->lr_decoupled.min_lr = dec_min_lr >= 0 ? dec_min_lr : min_lr;
    a->adamw = (AdamWConfig){x->b1, x->b2, x->eps, x->wd, x->clip};
    a->seed = (uint64_t)x->seed;
    if (lr <= 0 || min_lr < 0 || min_lr > lr) core_usage_error("need 0 <= --min-lr %g <= --lr %g, --lr > 0", min_lr, lr);
    if (x->warmup_init < 0 || x->warmup_init > lr || (dec_lr > 0 && x->warmup_init > dec_lr))
        core_usage_error("need 0 <= --lr-warmup-init %g <= --lr %g%s", x->warmup_init, lr,
                         dec_lr > 0 ? " and --decoupled-lr" : "");  // (Megatron asserts init <= max)
    if (x->b1 < 0 || x->b1 >= 1 || x->b2 < 0 || x->b2 >= 1 || x->eps <= 0 || x->wd < 0 || x->clip < 0)
        core_usage_error("AdamW settings out of range: beta1 %g, beta2 %g (in [0,1)), eps %g (> 0), "
                         "weight-decay %g, clip-grad %g (>= 0)", x->b1, x->b2, x->eps, x->wd, x->clip);
}

static void finish(TrainArgs *a, TrainFlagText *x) {
    if (optim_lr_style_parse(x->style, &a->lr.style) != 0)
        core_usage_error("--lr-decay-style must be constant, linear or cosine, got '%s'", x->style);
    parse_length(a, x);
    set_optimizer(a, x);
    // the run group's intervals too: one message for the counts that must be positive
    if (a->train_iters <= 0 || a->micro_batch <= 0 || a->global_batch <= 0 || a->log_interval <= 0 ||
        a->eval_interval <= 0 || a->eval_iters < 0 || a->save_interval < 0 || x->warmup < 0)
        core_usage_error("--train-iters %lld, --micro-batch-size %d, --global-batch-size %d, "
                         "--log-interval %lld, --eval-interval %lld must be > 0", (long long)a->train_iters,
                         a->micro_batch, a->global_batch, (long long)a->log_interval,
                         (long long)a->eval_interval);
    if (a->global_batch % a->micro_batch)
        core_usage_error("--global-batch-size %d is not a multiple of --micro-batch-size %d",
                         a->global_batch, a->micro_batch);
}

const TrainFlagGroup TRAIN_ARGS_SCHEDULE = {specs, finish};
