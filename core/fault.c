// core/fault.c: test-only fault injection (see fault.h).
#include "fault.h"

#include <signal.h>  // defines: raise, SIGKILL, SIGABRT, SIGSTOP
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>  // defines: nanosleep

CoreFaults core_fault_from_env(int rank) {
    CoreFaults f = {0};
    const char *v = getenv("MEGAC_TEST_DIE_AT_ITER");
    long long r = -1, it = 0;
    char how[8] = "";
    if (v && sscanf(v, "%lld:%lld:%7s", &r, &it, how) >= 2 && r == rank) {
        f.die_at_iter = it;
        f.die_signal = !strcmp(how, "abort") ? SIGABRT : !strcmp(how, "stop") ? SIGSTOP : SIGKILL;
    }
    v = getenv("MEGAC_TEST_NAN_AT_ITER");
    for (const char *p = v; p && *p && f.n_nan_at < CORE_FAULT_MAX_NAN;) {
        char *end = NULL;
        long long i = strtoll(p, &end, 10);
        if (end == p) break;
        f.nan_at[f.n_nan_at++] = i;
        p = *end == ',' ? end + 1 : end;
    }
    v = getenv("MEGAC_TEST_SLOW_ITER_MS");
    int ms = v ? atoi(v) : 0;
    f.slow_ms = ms >= 1 && ms <= 10000 ? ms : 0;
    return f;
}

void core_fault_die_at(const CoreFaults *f, int64_t it) {
    if (it == f->die_at_iter) raise(f->die_signal);
}

void core_fault_slow(const CoreFaults *f) {
    if (f->slow_ms <= 0) return;
    struct timespec d = {f->slow_ms / 1000, (long)(f->slow_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

int core_fault_nan_at(const CoreFaults *f, int64_t it) {
    for (int i = 0; i < f->n_nan_at; i++)
        if (f->nan_at[i] == it) return 1;
    return 0;
}
