// bench/bench_profile.h: a per-op profile of training steps (bench_train --profile). A
// decorator of the CPU backend's ops table: bench_profile_start swaps each entry of
// be->table for a wrapper that times the call and adds its FLOPs or its bytes to a row, then
// calls the backend's own entry with the same arguments; the backends are untouched and the
// results are the same bits. One profiled backend at a time (the rows are this file's).
#pragma once
#include "backend/backend.h"

// Wraps be's ops (a CPU backend: its ops are synchronous, so wall time per call is the op's
// time). The GEMMs are named by role from their widths: C (hidden), F (the MLP's hidden
// size: 4 C, or an expert's), Vp (padded vocabulary; the LM head is the bias-less GEMM of
// Vp outputs); other shapes count as "other GEMMs". The rows start at zero.
void bench_profile_start(Backend *be, int C, int F, int Vp);
// Zeroes the rows (e.g. after the warm-up step). Never fails.
void bench_profile_reset(void);
// on 1: the ops (still wrapped) add nothing to the rows until called with 0 (e.g. during an
// untimed step). Never fails.
void bench_profile_pause(int on);
// Puts be's own ops back (and ends a pause). Never fails.
void bench_profile_stop(Backend *be);
// Prints the rows accumulated over `steps` steps of `step_ms` (mean wall ms per step) each:
// per op kind the calls and ms per step, the share of the step, and GFLOP/s against
// `gemm_ceiling` (GEMMs, attention; 0: no fraction) or GB/s of the minimum traffic
// (each operand read or written once) against `mem_gbs` (the stream-copy bandwidth).
void bench_profile_print(const char *config, int steps, double step_ms, double gemm_ceiling,
                         double mem_gbs);
// Memory bandwidth, GB/s: the best of `reps` stream copies b[i] = a[i] of 64 Mi floats
// (256 MiB each array), cut over `threads` OpenMP threads, counting 8 bytes per element
// (read + write, STREAM's convention). Never fails (aborts when out of memory).
double bench_stream_copy_gbs(int threads, int reps);
