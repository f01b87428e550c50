// core/host.h: where a rank runs on its host: its index among the ranks of that host, the
// CPU threads it takes and the GPU it drives (one per rank, or shared round-robin).
//
// Example: 6 ranks on hosts a, a, b, a, b, b: local ranks 0 1 0 2 1 2, local sizes 3; with
// 2 GPUs per host and sharing, rank 3 (local 2) drives GPU 0; without sharing that layout is
// refused (3 ranks, 2 GPUs).
#pragma once

// The rank the launcher gave this process (PMI_RANK from MPICH's Hydra, PMIX_RANK, or
// SLURM_PROCID from srun), readable before MPI_Init; NULL when not under a launcher. Pure
// (reads the environment).
const char *core_launcher_rank(void);

// 1 when this process is the launcher's rank 0 or runs alone: the one that prints a
// start-up warning every rank would otherwise repeat. Pure (reads the environment).
int core_launcher_first(void);

typedef struct {
    int local_rank;  // this rank's index among the ranks on its host (by world rank)
    int local_size;  // ranks on its host
} CoreHostRank;

// This rank's place on its host. Hosts are compared by name (MPI's shared-memory split
// cannot be used: MPIR_CVAR_NOLOCAL=1, which megac-mpiexec sets, makes every rank look
// alone). Collective over MPI_COMM_WORLD. Never fails (an MPI failure aborts the job).
CoreHostRank core_host_rank(void);

// The most CPU threads a rank takes: OpenMP and OpenBLAS set up state per thread, and far
// more threads than that crash inside libgomp.
#define CORE_MAX_THREADS 1024

// Checks a thread-count flag's value (0: the default, 1..CORE_MAX_THREADS): a usage error
// (one line naming `flag`, exit 2) otherwise. Returns on a good value.
void core_check_threads(const char *flag, int n);

// CPU threads per rank: `requested` (--num-threads) when > 0, else the host's online cores
// shared by its local_size ranks, at least 1. Never fails.
int core_host_threads(int requested, int local_size);

// The CUDA device of this rank when its host shows n_dev usable devices: local_rank % n_dev.
// Refused, one line and exit 2 on every rank (collective over MPI_COMM_WORLD, as a host may
// lack what another has): no device, or fewer devices than ranks on the host unless
// `shared` (--distributed-backend staged lets ranks share a GPU, for testing).
int core_host_device(CoreHostRank h, int n_dev, int shared);
