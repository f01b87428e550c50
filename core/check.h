// core/check.h: error handling that brings the whole job down cleanly.
//
// Every library call is wrapped in a check macro. On failure it prints
//     [rank r] <library> error in <call> at file:line: <message>
// and calls MPI_Abort(MPI_COMM_WORLD), so no rank is ever left waiting in a collective
// for a peer that exited. User mistakes (bad flags, bad files) use core_usage_error(),
// which prints one line and exits with code 2 (all ranks see the same input, so all exit).
#pragma once
#include <stddef.h>
#include <mpi.h>   // defines: MPI_SUCCESS, MPI_Abort

#define CORE_NORETURN __attribute__((noreturn))

#ifdef __cplusplus
extern "C" {
#endif

// Rank in MPI_COMM_WORLD, or -1 before MPI_Init / after MPI_Finalize. Never fails.
int core_world_rank(void);

// Prints "[rank r] <lib> error in <call> at file:line: <msg>" and aborts the job. Never returns.
CORE_NORETURN void core_die(const char *lib, const char *call, const char *file, int line,
                        const char *msg);

// Flushes output, lets the launcher forward it, then MPI_Abort(code) (exit(code) without
// MPI). For an error only this rank sees, after printing it. Never returns.
CORE_NORETURN void core_abort_job(int code);

// printf-style fatal error: prints "[rank r] error at file:line: ..." and aborts the job.
CORE_NORETURN void core_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define core_fatal(...) core_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

// User mistake: prints "megac: <message>" (rank 0 only when MPI is up) and exits with code 2.
// Every rank must reach it with the same input (flags are identical on all ranks). Never returns.
CORE_NORETURN void core_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Collective over MPI_COMM_WORLD: if any rank has status != 0, the message of the highest
// such rank (msg, msglen bytes, on that rank) goes to every rank and all exit 2 through
// core_usage_error. Otherwise returns. For checks only some ranks can make (a file rank 0
// opens, a device a node lacks): never one rank exiting while the others wait.
void core_agree_or_exit(int status, char *msg, int msglen);

// Collective over MPI_COMM_WORLD: returns -1 when every rank has status 0; else the highest
// failing rank, whose message (msg, msglen bytes) is then on every rank. For a failure the
// caller must clean up after (a partial file) before core_exit_all. Never fails.
int core_agree(int status, char *msg, int msglen);

// Every rank calls it (after core_agree), for a run-time failure all ranks know of (code 1)
// once the message is printed: flushes stdio, finalizes MPI (collective: hydra SIGKILLs the
// job when a rank leaves without it, and mpiexec then says "Killed (signal 9)", exit 9)
// and leaves with _exit(code), skipping atexit handlers (after an I/O failure HDF5 holds a
// file it cannot close). The launcher sees every rank exit with code. Never returns.
CORE_NORETURN void core_exit_all(int code);

// Writes the innermost message of the current HDF5 error stack ("truncated file ...") into
// buf (n bytes), or "unknown HDF5 failure". Never fails.
void core_hdf5_last_error(char *buf, size_t n);

// MPI: the message comes from MPI_Error_string.
void core_die_mpi(int err, const char *call, const char *file, int line);
#define MPI_CHECK(call)                                                            \
    do {                                                                           \
        int mc_err_ = (call);                                                      \
        if (mc_err_ != MPI_SUCCESS) core_die_mpi(mc_err_, #call, __FILE__, __LINE__); \
    } while (0)

// HDF5: negative return (herr_t/hid_t) is failure; the message comes from the HDF5 error stack.
void core_die_hdf5(const char *call, const char *file, int line);
#define H5_CHECK(call)                                                             \
    do {                                                                           \
        if ((long long)(call) < 0) core_die_hdf5(#call, __FILE__, __LINE__);       \
    } while (0)

// Allocation that never returns NULL: aborts the job naming the size. Memory is zeroed.
void *core_calloc_at(size_t n, size_t size, const char *file, int line);
#define core_calloc(n, size) core_calloc_at((n), (size), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif
