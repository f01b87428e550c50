// core/limits.h: the process limits a run needs, checked before MPI starts: with too few
// open files (`ulimit -n 16`) or too small a file size limit (`ulimit -f 1000`) MPI fails
// inside its start-up with only its own internals in the message, and no megac line at all.
#pragma once

enum { CORE_MIN_OPEN_FILES = 256, CORE_WANT_OPEN_FILES = 4096, CORE_MIN_FILE_MB = 16 };

// Raises the soft limit of open files to CORE_WANT_OPEN_FILES when it is lower and the
// hard limit allows (as a shell's `ulimit -n` would); if even the hard limit is below
// CORE_MIN_OPEN_FILES, or the file size limit (`ulimit -f`) is below CORE_MIN_FILE_MB MiB
// while MPI may use shared memory (UCX_TLS unset or naming shm, posix, sysv, mm or all),
// prints one line saying what is needed (the launcher's rank 0 only, or the lone process)
// and exits 2. Call before MPI_Init. Never returns on failure.
void core_check_limits(const char *command);
