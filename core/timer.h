// core/timer.h: wall-clock time for logs, benchmarks and traces.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
// Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). Never fails.
double core_now(void);
#ifdef __cplusplus
}
#endif
