// core/limits.c: process limits checked at start-up (see limits.h).
#include "limits.h"
#include "host.h"  // defines: core_launcher_first

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>  // defines: getrlimit, setrlimit, RLIMIT_NOFILE, RLIMIT_FSIZE

// ulimit -f: MPI's shared-memory transport (UCX's posix/sysv, unless UCX_TLS leaves them out)
// writes segments of several MB at start-up and fails with only "File too large".
static void check_file_size(const char *command) {
    struct rlimit r;
    if (getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return;
    if (r.rlim_cur >= (rlim_t)CORE_MIN_FILE_MB << 20) return;
    const char *tls = getenv("UCX_TLS");
    if (tls && !strstr(tls, "shm") && !strstr(tls, "posix") && !strstr(tls, "sysv") &&
        !strstr(tls, "all") && !strstr(tls, "mm"))
        return;  // no shared memory: the writes megac makes report EFBIG themselves
    if (core_launcher_first())
        fprintf(stderr, "megac %s: ulimit -f is %llu blocks (%.1f MB): MPI's shared memory needs "
                "files of at least %d MB (and checkpoints need their size); raise it, e.g. "
                "ulimit -f unlimited\n", command, (unsigned long long)(r.rlim_cur / 1024),
                (double)r.rlim_cur / 1e6, CORE_MIN_FILE_MB);
    exit(2);
}

void core_check_limits(const char *command) {
    check_file_size(command);
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
    if (core_launcher_first())
        fprintf(stderr, "megac %s: ulimit -n is %llu (hard limit %llu): megac needs at least %d open "
                "files (MPI's sockets and shared memory, HDF5, the data files); raise it, e.g. "
                "ulimit -n %d\n", command, (unsigned long long)r.rlim_cur,
                (unsigned long long)r.rlim_max, CORE_MIN_OPEN_FILES, CORE_WANT_OPEN_FILES);
    exit(2);
}
