// plan/plan_calibrate.h: `megac plan --calibrate FILE`: measure this machine (or, under
// mpiexec, these ranks) and write a hardware profile that `megac plan --hardware FILE` reads.
//
// What it measures, with megac's own Backend and Comm (as bench/bench_gemm.c and
// bench/bench_comm.c do): the GEMM rate at three transformer shapes (the best is the peak,
// the mean over the best the efficiency), all ranks at once as in training: on the CPU
// backend one rate for every precision, on the CUDA backend (--device cuda, one GPU per
// rank) strict fp32, TF32 and bf16 each; the all-reduce bus bandwidth 2(g-1)/g x bytes /
// time and the latency per ring step of groups of g = 2, 4, 8, ... consecutive ranks (as TP
// groups are laid out; MPI on host memory, or NCCL on device memory), split into groups
// inside one node and groups across nodes (hosts by name; each link gets the median over
// its group sizes); memory per rank (physical memory / ranks on the node, or the GPU's) and
// the copy bandwidth (host or device memory).
#pragma once
#include <stdio.h>
#include "plan_hw.h"

// Measures and fills *hw (figures it cannot measure, e.g. links across nodes on one node,
// stay base's and are named in the log). `threads`: CPU threads per rank (0: cores / ranks
// on the node); `cuda`: measure the CUDA backend and NCCL instead (fewer GPUs than ranks on
// a node, or a build without CUDA: one line, exit 2 on every rank). Collective over
// MPI_COMM_WORLD (MPI initialised). Rank 0 prints each measurement to `log`. MPI, CUDA and
// NCCL errors abort the job.
void plan_calibrate(const PlanHardware *base, int threads, int cuda, PlanHardware *hw, FILE *log);
