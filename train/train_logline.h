// train/train_logline.h: Megatron-LM's text log (the per-interval line of training_log and
// the validation block of evaluate_and_print_results, megatron/training/training.py) with
// Megatron's meaning, the log-interval sums behind it, and the logging flags
// (--log-throughput, --tensorboard-dir and its companions). Pure but for the flag parsing.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "core/args.h"

// The logging flags (Megatron's names and defaults).
typedef struct {
    int log_throughput;                // --log-throughput: "throughput per GPU (TFLOP/s/GPU)"
    const char *tensorboard_dir;       // --tensorboard-dir (NULL: no event files)
    int64_t tensorboard_log_interval;  // --tensorboard-log-interval: iterations between events
    int timers_to_tb;                  // --log-timers-to-tensorboard: iteration-time, throughput
    int memory_to_tb;                  // --log-memory-to-tensorboard: mem-*-bytes
    int validation_ppl_to_tb;          // --log-validation-ppl-to-tensorboard
    int world_size_to_tb;              // --log-world-size-to-tensorboard
    int no_loss_scale_to_tb;           // --no-log-loss-scale-to-tensorboard
} TrainLogFlags;

enum { TRAIN_LOG_FLAGS_N = 8 };

// Sets Megatron's defaults in *f and writes the TRAIN_LOG_FLAGS_N flag entries (their --help
// lines) into specs. Returns TRAIN_LOG_FLAGS_N.
int train_log_flags_specs(ArgSpec *specs, TrainLogFlags *f);

// After parsing: a --tensorboard-log-interval < 1 is one line and exit 2. (The companion
// flags without --tensorboard-dir have no effect, as in Megatron.)
void train_log_flags_check(const TrainLogFlags *f);

// What happened since the last log line (Megatron's total_loss_dict): reset by each line
// except the run's first iteration's, which Megatron prints without resetting.
typedef struct {
    int advanced;       // iterations whose update was applied
    int skipped;        // iterations whose update was skipped (fp16 overflow, NaN/Inf)
    int nan;            // of those, the ones with a NaN/Inf loss or gradient norm
    double loss_sum;    // lm loss summed over the applied iterations
    double ms_sum;      // step time of all of them (ms)
    double flops_sum;   // model FLOPs of all of them (Megatron's formula, the whole model)
    double tokens_sum;  // tokens trained on (samples x sequence length)
} TrainLogInterval;

// One iteration into the sums.
void train_log_interval_add(TrainLogInterval *s, double loss, int skipped, int nan, double ms,
                            double flops, double tokens);

// One Megatron log line's values.
typedef struct {
    struct timespec when;  // the line's wall-clock time (printed in local time, as datetime.now())
    int64_t iteration, train_iters, consumed_samples;
    double ms_per_iter;    // the interval's mean over all its iterations, skipped ones too
    int log_throughput;    // print "throughput per GPU (TFLOP/s/GPU)"
    double tflops_per_gpu; // the interval's model FLOPs / its time / world size / 1e12
    double lr;
    int global_batch;
    double lm_loss;        // the interval's mean over its applied iterations (0 if none)
    double loss_scale, grad_norm;
    int skipped, nan;      // the interval's counts
    const char *extra;     // megac's fields after Megatron's (" name: value |" each), or NULL
} TrainLogLine;

// The line as Megatron's training_log formats it:
//   " [YYYY-MM-DD HH:MM:SS.ffffff] iteration {:8d}/{:8d} | consumed samples: {:12d} |
//   elapsed time per iteration (ms): {:.1f} |[ throughput per GPU (TFLOP/s/GPU): {:.1f} |]
//   learning rate: {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} |
//   grad norm: {:.3f} | number of skipped iterations: {:3d} | number of nan iterations: {:3d} |"
// (one line), then extra; NaN prints as Python prints it. Returns snprintf's count.
int train_logline_format(char *buf, size_t n, const TrainLogLine *v);

// Megatron's validation block for `loss` at `where` ("iteration 4", "iteration 10 on test
// set"): a rule of '-', " validation loss at WHERE | lm loss value: {:.6E} | lm loss PPL:
// {:.6E} | ", the rule again (3 lines, each ending in '\n'); the rule is one longer than the
// middle line; PPL = exp(min(20, loss)). Returns snprintf's count of the whole.
int train_logline_validation(char *buf, size_t n, const char *where, double loss);
