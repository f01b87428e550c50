// core/check.c: the check macros' slow path: format one line naming the rank, abort the job.
#include "check.h"

#include <stdarg.h>  // defines: va_list
#include <stdio.h>
#include <stdlib.h>
#include <time.h>    // defines: nanosleep
#include <unistd.h>  // defines: _exit
#include <hdf5.h>    // defines: H5Ewalk2

int core_world_rank(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return -1;
    int r = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

void core_abort_job(int code) {
    fflush(stdout);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
        // The launcher forwards each rank's output asynchronously and drops what it has not
        // forwarded when it tears the job down: give it a moment to pass our message on.
        struct timespec pause = {0, 300 * 1000 * 1000};
        nanosleep(&pause, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}

static CORE_NORETURN void abort_job(void) { core_abort_job(1); }

void core_die(const char *lib, const char *call, const char *file, int line, const char *msg) {
    fprintf(stderr, "[rank %d] %s error in %s at %s:%d: %s\n", core_world_rank(), lib, call,
            file, line, msg);
    abort_job();
}

void core_fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] error at %s:%d: %s\n", core_world_rank(), file, line, msg);
    abort_job();
}

void core_usage_error(const char *fmt, ...) {
    int r = core_world_rank();
    if (r <= 0) {
        va_list ap;
        va_start(ap, fmt);
        fputs("megac: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
    exit(2);
}

void core_die_mpi(int err, const char *call, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", err);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
    core_die("MPI", call, file, line, msg);
}

typedef struct {
    char *buf;
    size_t n;
} ErrBuf;

// Walks the HDF5 error stack and keeps the innermost description.
static herr_t keep_last(unsigned n, const H5E_error2_t *e, void *data) {
    ErrBuf *b = data;
    if (n == 0 && e->desc) snprintf(b->buf, b->n, "%s", e->desc);
    return 0;
}

void core_hdf5_last_error(char *buf, size_t n) {
    if (n == 0) return;
    snprintf(buf, n, "unknown HDF5 failure");
    ErrBuf b = {buf, n};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_last, &b);
}

void core_die_hdf5(const char *call, const char *file, int line) {
    char msg[512];
    core_hdf5_last_error(msg, sizeof msg);
    core_die("HDF5", call, file, line, msg);
}

int core_agree(int status, char *msg, int msglen) {
    int rank = 0, in[2], out[2];
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    in[0] = status != 0;
    in[1] = rank;
    MPI_CHECK(MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
    if (!out[0]) return -1;
    MPI_CHECK(MPI_Bcast(msg, msglen, MPI_CHAR, out[1], MPI_COMM_WORLD));
    msg[msglen - 1] = '\0';
    return out[1];
}

void core_agree_or_exit(int status, char *msg, int msglen) {
    if (core_agree(status, msg, msglen) >= 0) core_usage_error("%s", msg);
}

void core_exit_all(int code) {
    fflush(NULL);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
    _exit(code);
}

void *core_calloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) core_fatal_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
