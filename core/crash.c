// core/crash.c: the fatal-signal report (see crash.h). A signal handler can reach only
// static storage and async-signal-safe calls: the prefix is formatted once, at install.
#include "crash.h"

#include <signal.h>  // defines: sigaction, raise
#include <stdio.h>
#include <string.h>
#include <unistd.h>  // defines: write

static char crash_prefix[64];

static void crash_report(int sig) {
    char line[sizeof crash_prefix + 4];  // one write(), so the line reaches the log whole
    size_t n = strlen(crash_prefix);
    memcpy(line, crash_prefix, n);
    if (sig >= 10) line[n++] = (char)('0' + sig / 10 % 10);
    line[n++] = (char)('0' + sig % 10);
    line[n++] = '\n';
    ssize_t w = write(2, line, n);
    (void)w;
    raise(sig);  // SA_RESETHAND restored the default action: die with the signal
}

void core_crash_install(int rank) {
    snprintf(crash_prefix, sizeof crash_prefix, "[rank %d] megac: fatal signal ", rank);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_report;
    sa.sa_flags = SA_RESETHAND;
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (int i = 0; i < 5; i++) sigaction(sigs[i], &sa, NULL);
}
