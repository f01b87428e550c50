// core/watchdog.c: deadlines on blocking phases outside Comm (see watchdog.h).
#include "watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>  // defines: raise
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>  // defines: _exit, alarm

#define DEPTH 4

// Process-wide on purpose: one watchdog thread per process reads these (under `lock`), and
// it is armed before MPI_Init, when no Trainer exists yet, and from checkpoint I/O.
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *phase[DEPTH];
static double since[DEPTH];
static int depth;
static double timeout_s;
static atomic_int rank_now = -1;
static int started;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static __attribute__((noreturn)) void fire(const char *what, double waited) {
    int r = atomic_load(&rank_now);
    fprintf(stderr, "megac: [rank %d] %s did not finish within %.0f s (--distributed-timeout-minutes): "
            "a rank is stuck or dead; ending the job\n", r, what, waited);
    fflush(stderr);
    // Give the launcher's proxy time to read the line from the pipe: MPI_Abort has it kill
    // the job at once, and a line still in the pipe was then lost (seen 1 run in 5).
    struct timespec drain = {0, 300 * 1000 * 1000};
    nanosleep(&drain, NULL);
    alarm(3);  // should MPI_Abort itself hang (a thread other than MPI's), SIGALRM ends the process
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void *watch(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&lock);
        const char *what = depth ? phase[depth - 1] : NULL;
        double waited = depth ? mono() - since[depth - 1] : 0;
        pthread_mutex_unlock(&lock);
        double grace = atomic_load(&rank_now) == 0 ? 0 : 2;  // rank 0 speaks first
        if (what && waited > timeout_s + grace) fire(what, timeout_s);
    }
    return NULL;
}

void core_watchdog_start(double t, int rank) {
    atomic_store(&rank_now, rank);
    if (started || t <= 0) return;
    // The floor: 30 s, or the test hook MEGAC_TEST_WATCHDOG_FLOOR (seconds, > 0) that lets
    // tests/train/watchdog.sh wait 10 s instead of 30 per case.
    const char *f = getenv("MEGAC_TEST_WATCHDOG_FLOOR");
    double floor_s = f && atof(f) > 0 ? atof(f) : 30;
    timeout_s = t < floor_s ? floor_s : t;
    pthread_attr_t attr;
    pthread_t th;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &attr, watch, NULL) == 0;
    pthread_attr_destroy(&attr);
}

void core_watchdog_set_rank(int rank) { atomic_store(&rank_now, rank); }

void core_watchdog_arm(const char *what) {
    pthread_mutex_lock(&lock);
    if (depth < DEPTH) {
        phase[depth] = what;
        since[depth++] = mono();
    }
    pthread_mutex_unlock(&lock);
}

void core_watchdog_progress(void) {
    pthread_mutex_lock(&lock);
    if (depth) since[depth - 1] = mono();
    pthread_mutex_unlock(&lock);
}

void core_watchdog_disarm(void) {
    pthread_mutex_lock(&lock);
    if (depth) depth--;
    if (depth) since[depth - 1] = mono();
    pthread_mutex_unlock(&lock);
}

double core_watchdog_timeout_from_argv(int argc, char **argv, double fallback) {
    const char *flag = "--distributed-timeout-minutes";
    size_t n = strlen(flag);
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], flag, n) != 0) continue;
        const char *v = argv[i][n] == '=' ? argv[i] + n + 1 : argv[i][n] == '\0' && i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        double m = v ? strtod(v, &end) : 0;
        if (v && end != v) return m * 60.0;
    }
    return fallback;
}

void core_watchdog_test_stop(const char *where, int rank) {
    const char *v = getenv("MEGAC_TEST_STOP_AT");
    size_t n = strlen(where);
    if (v && !strncmp(v, where, n) && v[n] == ':' && atoi(v + n + 1) == rank) raise(SIGSTOP);
}
