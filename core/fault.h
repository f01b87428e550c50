// core/fault.h: test-only fault injection in a training run, set from the environment once
// at start-up; off (and costing one comparison per step) when the variables are unset.
//
//     MEGAC_TEST_DIE_AT_ITER=R:I[:abort|:stop]   global rank R kills itself with SIGKILL (or
//         SIGABRT, or stops with SIGSTOP: a hung rank) at the start of iteration I, while
//         the other ranks are inside the step: the job must then end instead of hanging
//         (tests/pipeline/test_stage_dies.sh)
//     MEGAC_TEST_NAN_AT_ITER=I[,I...]            the gradient norm of those iterations (at
//         most 8) turns into NaN, as an overflow would: such steps must be skipped and
//         counted, and too many in a row stop the run (tests/train/nan_steps.sh)
//     MEGAC_TEST_SLOW_ITER_MS=M                  every iteration first sleeps M ms (1..10000): a
//         run slow enough that a signal sent at iteration 3 arrives before the last one, on
//         any machine (tests/scripts/test_slurm.sh)
#pragma once
#include <stdint.h>

enum { CORE_FAULT_MAX_NAN = 8 };

typedef struct {
    int64_t die_at_iter;                // 0: off
    int die_signal;                     // SIGKILL, SIGABRT or SIGSTOP
    int64_t nan_at[CORE_FAULT_MAX_NAN];
    int n_nan_at;
    int slow_ms;                        // 0: off
} CoreFaults;

// The faults the environment asks of global rank `rank`. A malformed value is off. Never fails.
CoreFaults core_fault_from_env(int rank);

// At the start of iteration it: raises the die signal when it is due. Never fails (it may
// not return: that is the point).
void core_fault_die_at(const CoreFaults *f, int64_t it);

// At the start of an iteration: sleeps slow_ms when set. Never fails.
void core_fault_slow(const CoreFaults *f);

// 1 if iteration it's gradient norm is to be NaN, else 0. Pure.
int core_fault_nan_at(const CoreFaults *f, int64_t it);
