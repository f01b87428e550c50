// scripts/mpi_yield.c: LD_PRELOAD shim that stops MPICH (ch4:ucx) from busy-polling.
//
// Debian's MPICH 4.0 spins in UCX's progress engine while a rank waits, and no MPICH setting
// turns that off. With more ranks than cores (8 or 128 ranks on a 2-core CI box) the
// spinning ranks starve the ones doing work: a 1 MiB all-reduce over 8 ranks takes ~100 ms
// instead of ~3 ms. This shim wraps ucp_worker_progress() and yields the core whenever a
// progress call found nothing to do. Loaded by scripts/megac-mpiexec and the MPI tests.
#define _GNU_SOURCE
#include <dlfcn.h>   // defines: dlsym, RTLD_NEXT
#include <sched.h>   // defines: sched_yield
#include <stddef.h>

typedef unsigned (*progress_fn)(void *worker);

unsigned ucp_worker_progress(void *worker) {
    static progress_fn real = NULL;  // resolved once; same value in every thread
    if (!real) real = (progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
    if (!real) return 0;
    unsigned n = real(worker);
    if (n == 0) sched_yield();
    return n;
}
