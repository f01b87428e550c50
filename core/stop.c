// core/stop.c: records stop signals for the training loop to act on (see stop.h).
#include "stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>    // defines: clock_gettime
#include <unistd.h>  // defines: write

// The only thing a handler may touch: lock-free flags in static storage.
static volatile sig_atomic_t stop_sig = 0;
static volatile sig_atomic_t stop_saving = 0;
static volatile sig_atomic_t stop_first_ms = 0;  // when the first signal came (ms, mod 10^9)

static const int STOP_SIGS[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP};
enum { N_STOP_SIGS = (int)(sizeof STOP_SIGS / sizeof STOP_SIGS[0]) };

static void on_stop_signal(int sig) {
    struct timespec now;  // clock_gettime is async-signal-safe
    clock_gettime(CLOCK_MONOTONIC, &now);
    int ms = (int)(now.tv_sec % 1000000 * 1000 + now.tv_nsec / 1000000);
    if (!stop_sig) stop_first_ms = ms;
    // A second Ctrl-C while the stop's checkpoint is written (not the same signal delivered
    // twice at once, by the launcher and the rank guard) is answered, and changes nothing.
    if (stop_sig && stop_saving && (ms - stop_first_ms >= 200 || ms < stop_first_ms)) {
        static const char msg[] = "megac: saving the checkpoint, please wait\n";
        ssize_t w = write(2, msg, sizeof msg - 1);  // async-signal-safe; a closed stderr is fine
        (void)w;
    }
    stop_sig = sig;
}

void core_stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_STOP_SIGS; i++) sigaction(STOP_SIGS[i], &sa, NULL);
    core_stop_ignore_output_signals();
}

void core_stop_ignore_output_signals(void) {
    signal(SIGPIPE, SIG_IGN);  // a closed stdout (| head) fails the write with EPIPE instead
    signal(SIGXFSZ, SIG_IGN);  // ulimit -f: the write fails with EFBIG, like a full disk
}

void core_stop_uninstall(void) {
    for (int i = 0; i < N_STOP_SIGS; i++) signal(STOP_SIGS[i], SIG_DFL);
}

int core_stop_signal(void) { return (int)stop_sig; }

void core_stop_saving(int on) { stop_saving = on; }

const char *core_stop_signal_name(int sig) {
    static char other[24];
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGHUP: return "SIGHUP";
    default: snprintf(other, sizeof other, "signal %d", sig); return other;
    }
}
