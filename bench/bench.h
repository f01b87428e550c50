// bench/bench.h: shared declarations of the benchmark program (bench_gemm.c, bench_ops.c).
#pragma once
#include "backend/backend.h"

// Times every backend op at the `medium` GPT config (L=6, C=384, NH=6, T=256, B=4,
// vocabulary V padded to a multiple of 128; bench_train's `medium` has V = 256) in the order one training step calls them, for
// `steps` timed steps after one warm-up, and prints where the time goes. `ceiling` is the
// measured sgemm GFLOP/s to compare the step's GEMM throughput with.
// flash != 0 times the fused attention ops (--use-flash-attn) instead of the materialised ones.
// drop > 0: with dropout p = drop on the attention probabilities and at the hidden places.
void bench_ops_medium(Backend *be, int steps, double ceiling, int V, int flash, double drop);
