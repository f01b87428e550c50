// bench/bench_comm.c: time of one all-reduce over all ranks through Comm (MPI backend), to
// see what oversubscription costs. Not a test. Compare, e.g. on a 2-core machine:
//     MEGAC_NO_YIELD=1 build/scripts/megac-mpiexec -n 8 build/bench/bench_comm
//                      build/scripts/megac-mpiexec -n 8 build/bench/bench_comm
// usage: bench_comm [--mib 1] [--reps 20]
#include "comm/comm.h"
#include "core/args.h"
#include "core/check.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    double mib = 1;
    int reps = 20, rank, size;
    ArgSpec specs[] = {{"--mib", ARG_FLOAT, &mib, "buffer size in MiB"},
                       {"--reps", ARG_INT, &reps, "timed all-reduces"}};
    core_args_parse("usage: bench_comm [--mib M] [--reps N]", specs, 2, argc - 1, argv + 1);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int *all = core_calloc((size_t)size, sizeof(int));
    for (int i = 0; i < size; i++) all[i] = i;
    Comm *w = comm_mpi_create(MPI_COMM_WORLD, "world", all, 0);
    size_t n = (size_t)(mib * (1 << 20) / sizeof(float));
    float *buf = core_calloc(n, sizeof(float));
    comm_all_reduce(w, buf, n, COMM_F32, COMM_SUM);  // warm-up
    comm_barrier(w);
    double t0 = core_now();
    for (int i = 0; i < reps; i++) comm_all_reduce(w, buf, n, COMM_F32, COMM_SUM);
    double ms = (core_now() - t0) * 1e3 / reps;
    if (rank == 0)
        printf("%d ranks: %.2f MiB all-reduce %.2f ms (%.2f GB/s algorithm bandwidth per rank)\n",
               size, mib, ms, 2.0 * (size - 1) / size * n * sizeof(float) / (ms * 1e-3) / 1e9);
    free(buf);
    free(all);
    comm_destroy(w);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
