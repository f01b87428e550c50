// tests/plan/plan_test_spec.h: the tiny model the plan tests predict for (2 layers, C 64,
// T 32, GPT-2's byte vocabulary), shared by test_plan.c and test_plan_moe.c.
#pragma once
#include "plan/plan_enum.h"  // defines: PlanSpec, GPTConfig

// A world of `world` ranks training `global_batch` samples a step of the tiny model in fp32.
static inline PlanSpec tiny_spec(int world, int global_batch) {
    PlanSpec s = {.world_size = world, .global_batch = global_batch, .precision = PLAN_FP32};
    s.model = (GPTConfig){.num_layers = 2, .hidden_size = 64, .num_heads = 4, .ffn_hidden_size = 256,
                          .seq_length = 32, .max_position_embeddings = 32, .vocab_size = 257,
                          .vocab_divisible_by = 128};
    return s;
}
