// core/rank_guard.c: a guard process per rank that names the rank when it is killed.
#include "rank_guard.h"
#include "host.h"  // defines: core_launcher_rank

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>  // defines: prctl, PR_SET_PDEATHSIG
#include <sys/wait.h>   // defines: waitpid
#include <time.h>       // defines: nanosleep
#include <unistd.h>     // defines: fork, execv

#define GUARD_MARK "MEGAC_GUARDED"
#define GUARD_ABORT_DELAY_S 2  // see the SIGABRT case below

static volatile sig_atomic_t guard_child = 0;  // the rank's pid, for the forwarding handler

// The guard forwards termination and stop requests (scancel, Ctrl-C, Slurm's --signal) to
// the rank, which stops gracefully on them (core/stop.h); the guard waits for it.
static void forward(int sig) {
    if (guard_child > 0) kill((pid_t)guard_child, sig);
}

void core_rank_guard(int argc, char **argv) {
    (void)argc;
    const char *rank = core_launcher_rank();
    if (!rank || getenv(GUARD_MARK) || getenv("MEGAC_NO_GUARD")) return;
    if (setenv(GUARD_MARK, "1", 1) != 0) return;
    pid_t guard = getpid();
    pid_t child = fork();
    if (child < 0) return;  // no guard: run unguarded
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != guard) _exit(1);  // the guard is already gone
        execv("/proc/self/exe", argv);     // a fresh process image (libraries start clean)
        _exit(127);
    }
    guard_child = child;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);  // default action would kill the guard, then the rank
    sigaction(SIGUSR2, &sa, NULL);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        // MPI libraries abort (SIGABRT) a rank whose peer vanished: when a rank is killed, the
        // others may die of that before its guard, starved on a loaded node, has said so. Let
        // the killed rank's guard speak first: if the job ends meanwhile, this stays silent.
        if (sig == SIGABRT) {
            struct timespec ts = {GUARD_ABORT_DELAY_S, 0};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
        }
        fprintf(stderr, "[rank %s] megac: rank process %d killed by signal %d (%s); ending the job\n",
                rank, (int)child, sig, strsignal(sig));
        fflush(stderr);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
