// core/limits.c: process limits checked at start-up (see limits.h).
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>  // defines: getrlimit, setrlimit, RLIMIT_NOFILE

void core_check_limits(const char *command) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return;
    if (r.rlim_cur >= CORE_WANT_OPEN_FILES) return;
    rlim_t want = r.rlim_max == RLIM_INFINITY || r.rlim_max > CORE_WANT_OPEN_FILES ? CORE_WANT_OPEN_FILES
                                                                                     : r.rlim_max;
    if (want > r.rlim_cur) {
        struct rlimit raised = {want, r.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) r.rlim_cur = want;
    }
    if (r.rlim_cur >= CORE_MIN_OPEN_FILES) return;
    const char *rank = getenv("PMI_RANK");
    if (!rank) rank = getenv("SLURM_PROCID");
    if (!rank || !strcmp(rank, "0"))
        fprintf(stderr, "megac %s: ulimit -n is %llu (hard limit %llu): megac needs at least %d open "
                "files (MPI's sockets and shared memory, HDF5, the data files); raise it, e.g. "
                "ulimit -n %d\n", command, (unsigned long long)r.rlim_cur,
                (unsigned long long)r.rlim_max, CORE_MIN_OPEN_FILES, CORE_WANT_OPEN_FILES);
    exit(2);
}
