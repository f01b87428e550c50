// bench/bench.h: shared declarations of the benchmark program (bench_gemm.c, bench_ops.c).
#pragma once
#include "backend/backend.h"

// Times every backend op at the `medium` GPT config (L=6, C=384, NH=6, T=256, B=4,
// vocabulary 50257 padded to 50304) in the order one training step calls them, for
// `steps` timed steps after one warm-up, and prints where the time goes. `ceiling` is the
// measured sgemm GFLOP/s to compare the step's GEMM throughput with.
void bench_ops_medium(Backend *be, int steps, double ceiling);
