// train/train_args_run.c: the run group of `megac train`'s flags (train_args_flags.h):
// checkpoints (save, load, fine-tune), evaluation and logging intervals, the log's own flags
// (train_logline.c), the trace, and when a run stops (signals, duration, interval, NaNs).
#include "train_args_flags.h"
#include "core/check.h"

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    a->log_interval = 10;
    a->eval_interval = 1000;
    a->eval_iters = 10;
    a->max_nan_iters = 5;
    a->exit_signal_handler = 1;  // shown as the default by --help
    const ArgSpec own[] = {
        {"--save", ARG_STR, &a->save, "checkpoint directory to write"},
        {"--load", ARG_STR, &a->load, "checkpoint directory to resume from"},
        {"--no-load-optim", ARG_BOOL, &a->no_load_optim, "--load reads the model only: fresh AdamW moments and step"},
        {"--no-load-rng", ARG_BOOL, &a->no_load_rng, "accepted for Megatron scripts: megac has no RNG state to load (dropout masks are a pure function of --seed, the iteration and global indices, and the data order follows --seed: a resume is exact)"},
        {"--finetune", ARG_BOOL, &a->finetune, "--load reads the model only and the run starts at iteration 0 (fresh optimizer, data from the first sample)"},
        {"--save-interval", ARG_I64, &a->save_interval, "iterations between checkpoints (0: at the end only)"},
        {"--eval-interval", ARG_I64, &a->eval_interval, "iterations between validation runs"},
        {"--eval-iters", ARG_I64, &a->eval_iters, "batches per validation run, and of the test evaluation at the end (Megatron: 100; megac: 10, for small runs)"},
        {"--log-interval", ARG_I64, &a->log_interval, "iterations between log lines (Megatron: 100; megac: 10, for small runs)"},
        {"--log-json", ARG_STR, &a->log_json, "write one JSON object per iteration to FILE"},
        {"--max-nan-iters", ARG_INT, &a->max_nan_iters, "stop after this many NaN/Inf steps in a row"},
        {"--exit-signal-handler", ARG_BOOL, &a->exit_signal_handler, "SIGTERM/SIGINT/SIGUSR1/SIGUSR2 stop at the next iteration with a checkpoint, exit 0 (Megatron: off; megac: on, so a time limit never costs work)"},
        {"--no-exit-signal-handler", ARG_BOOL, &x->no_signal_handler, "let those signals end the run at once (no checkpoint)"},
        {"--exit-duration-in-mins", ARG_FLOAT, &a->exit_duration_mins, "stop (save, exit 0) once the run has lasted this long (0: off)"},
        {"--exit-interval", ARG_I64, &a->exit_interval, "stop (save, exit 0) at an iteration divisible by this (0: off)"},
        {"--overwrite-newer-checkpoints", ARG_BOOL, &a->overwrite_newer, "allow saving into a --save directory whose latest checkpoint is newer than this run (start over)"},
        {"--trace", ARG_STR, &a->trace, "write a Chrome trace (Perfetto) of the steps to FILE"},
    };
    int n = train_args_put(out, cap, own, (int)(sizeof own / sizeof own[0]));
    if (cap - n < TRAIN_LOG_FLAGS_N) core_fatal("train flags: no room for the log's %d", (int)TRAIN_LOG_FLAGS_N);
    return n + train_log_flags_specs(out + n, &a->logf);  // train/train_logline.c
}

// (The intervals' ranges are checked with the iterations, by the schedule group.)
static void finish(TrainArgs *a, TrainFlagText *x) {
    train_log_flags_check(&a->logf);
    if (train_args_given(x, "--exit-signal-handler") && x->no_signal_handler)
        core_usage_error("--exit-signal-handler and --no-exit-signal-handler contradict each other");
    a->exit_signal_handler = !x->no_signal_handler;
    if (a->exit_duration_mins < 0 || a->exit_interval < 0)
        core_usage_error("--exit-duration-in-mins %g and --exit-interval %lld must be >= 0",
                         a->exit_duration_mins, (long long)a->exit_interval);
    if (a->max_nan_iters < 0) core_usage_error("--max-nan-iters %d must be >= 0", a->max_nan_iters);
}

const TrainFlagGroup TRAIN_ARGS_RUN = {specs, finish};
