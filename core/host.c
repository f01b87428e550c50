// core/host.c: a rank's place on its host, its CPU threads and its GPU (see host.h).
#include "host.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>  // defines: gethostname, sysconf

const char *core_launcher_rank(void) {
    const char *names[] = {"PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return v;
    }
    return NULL;
}

int core_launcher_first(void) {
    const char *r = core_launcher_rank();
    return !r || !strcmp(r, "0");
}

CoreHostRank core_host_rank(void) {
    enum { NAME = 64 };
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    char mine[NAME] = {0};
    gethostname(mine, NAME - 1);
    char *all = core_calloc((size_t)size, NAME);
    MPI_CHECK(MPI_Allgather(mine, NAME, MPI_CHAR, all, NAME, MPI_CHAR, MPI_COMM_WORLD));
    CoreHostRank h = {0, 0};
    for (int r = 0; r < size; r++)
        if (!strncmp(all + (size_t)r * NAME, mine, NAME)) {
            if (r < rank) h.local_rank++;
            h.local_size++;
        }
    free(all);
    return h;
}

void core_check_threads(const char *flag, int n) {
    if (n < 0) core_usage_error("%s %d must be >= 0 (0: the cores of the node)", flag, n);
    if (n > CORE_MAX_THREADS)
        core_usage_error("%s %d: at most %d CPU threads per rank (0: the cores of the node)",
                         flag, n, CORE_MAX_THREADS);
}

int core_host_threads(int requested, int local_size) {
    if (requested > 0) return requested;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores / local_size);
    return n > 0 ? n : 1;
}

int core_host_device(CoreHostRank h, int n_dev, int shared) {
    char msg[320] = "";
    int bad = n_dev == 0 || (!shared && n_dev < h.local_size);  // per host, agreed by all
    if (n_dev == 0)
        snprintf(msg, sizeof msg, "--device cuda: no usable CUDA device on this node (no GPU, "
                 "no driver, or CUDA_VISIBLE_DEVICES hides them)");
    else if (bad)
        snprintf(msg, sizeof msg, "--device cuda: %d rank(s) on this node but %d usable CUDA "
                 "device(s); NCCL needs one GPU per rank (--distributed-backend staged lets "
                 "ranks share a GPU, for testing)", h.local_size, n_dev);
    core_agree_or_exit(bad, msg, (int)sizeof msg);
    return h.local_rank % n_dev;  // one GPU per rank on each host (shared: round-robin)
}
