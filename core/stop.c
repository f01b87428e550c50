// core/stop.c: records stop signals for the training loop to act on (see stop.h).
#include "stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

// The only thing a handler may touch: a lock-free flag in static storage.
static volatile sig_atomic_t stop_sig = 0;

static void on_stop_signal(int sig) { stop_sig = sig; }

void core_stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, NULL);
}

void core_stop_uninstall(void) {
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (int i = 0; i < 4; i++) signal(sigs[i], SIG_DFL);
}

int core_stop_signal(void) { return (int)stop_sig; }

const char *core_stop_signal_name(int sig) {
    static char other[24];
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: snprintf(other, sizeof other, "signal %d", sig); return other;
    }
}
