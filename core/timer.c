// core/timer.c: CLOCK_MONOTONIC seconds.
#include "timer.h"
#include <time.h>

double core_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
