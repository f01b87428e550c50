// train/train_args_flags.h: `megac train`'s flags as one table per module (internal to
// train_args*.c). Each group sets its defaults, writes its entries (name, type, the value it
// fills, the help line: its default and Megatron's where they differ) and, once every flag
// is parsed, finishes: range and consistency checks (a one-line usage error, exit 2) and the
// conversions into TrainArgs. train_args_parse runs the groups in a loop; a group's finish
// may read what the groups before it in TRAIN_ARGS_GROUPS finished.
#pragma once
#include "train_args.h"
#include "model/gpt_flags.h"  // defines: GPTFlagText

// The values the groups convert or check before they reach TrainArgs (the flags whose
// TrainArgs field is not the flag's own value).
typedef struct {
    int argc;
    char **argv;
    GPTFlagText model;                                 // the model's (model/gpt_flags.h)
    double hidden_dropout, attention_dropout;          // model group
    double lr, min_lr, dec_lr, dec_min_lr;             // schedule group: the learning rates,
    double warmup_fraction, warmup_init, wd, b1, b2, eps, clip;  // warm-up, AdamW
    int64_t train_samples, warmup_samples, decay_samples, warmup, decay, seed;
    CoreStrList rampup, steps;
    const char *style;
    int vpp_layers, vpp_size;                          // parallel group
    int no_zero1, use_zero1, no_signal_handler;        // system and run groups' switches
    const char *sharding;
    const char *fsdp_grad_comm;                        // --megatron-fsdp-grad-comm-dtype
} TrainFlagText;

typedef struct {
    // Sets the group's defaults in *a and *x and writes its entries into out (room for cap;
    // aborts the job past it). Returns how many it wrote.
    int (*specs)(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x);
    // After parsing: checks and converts (one line, exit 2, on a bad value).
    void (*finish)(TrainArgs *a, TrainFlagText *x);
} TrainFlagGroup;

// The groups, in the order of --help and of their finishes (train_args.c lists them).
extern const TrainFlagGroup TRAIN_ARGS_MODEL;     // train_args_model.c: the model, dropout, sizes
extern const TrainFlagGroup TRAIN_ARGS_SCHEDULE;  // train_args_schedule.c: batch, iterations, LR, AdamW
extern const TrainFlagGroup TRAIN_ARGS_DATA;      // train_args_data.c: data and tokenizer
extern const TrainFlagGroup TRAIN_ARGS_RUN;       // train_args_run.c: checkpoints, logs, stops
extern const TrainFlagGroup TRAIN_ARGS_SYSTEM;    // train_args_system.c: device, DP sharding, precision
extern const TrainFlagGroup TRAIN_ARGS_PARALLEL;  // train_args_parallel.c: TP, CP, PP, SP, interleaving

// Copies the n entries of own into out; aborts the job if n > cap. Returns n.
int train_args_put(ArgSpec *out, int cap, const ArgSpec *own, int n);
// 1 if flag appears in argv as a word (for on-by-default flags whose entry shows the
// default). Pure.
int train_args_given(const TrainFlagText *x, const char *flag);
