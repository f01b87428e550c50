// optim/lr_schedule.h: Megatron-LM's learning-rate schedule.
// Linear warm-up from init_lr (Megatron's --lr-warmup-init, default 0) to lr over
// warmup_iters, then decay from lr to min_lr until decay_iters (constant, linear or cosine),
// then min_lr.
#pragma once
#include <stdint.h>

typedef enum { LR_CONSTANT, LR_LINEAR, LR_COSINE } LRDecayStyle;

typedef struct {
    double lr, min_lr;
    int64_t warmup_iters, decay_iters;
    LRDecayStyle style;
    double init_lr;  // the warm-up's start (<= lr)
} LRSchedule;

// Learning rate after `steps` optimizer steps (Megatron's scheduler position: the first
// iteration uses steps = 0, so warm-up starts at init_lr and decay at lr). Pure.
double optim_lr_at(const LRSchedule *s, int64_t steps);

// Parses "constant" | "linear" | "cosine"; returns 0, or -1 for anything else. Pure.
int optim_lr_style_parse(const char *s, LRDecayStyle *out);
