// ckpt/ckpt_lock.h: one job per --save directory, and `latest` never moving back.
//
// DIR/.megac-save.lock is created with O_EXCL by rank 0 at start-up and holds
// "pid host slurm-job start-time"; it is removed when the process exits normally. A second
// job gets one line naming the holder. A lock is stale, and taken over, when its process
// is gone (same host), it was left by this same Slurm job (a requeued job on another
// node), or it is from another host and its heartbeat (the file's mtime, which the holder
// refreshes at least every minute) is older than 2 x --distributed-timeout-minutes.
#pragma once
#include <stdint.h>

// Collective over MPI_COMM_WORLD: rank 0 (rank: this process's world rank) takes the lock of
// the --save directory dir (which exists); another host's lock is stale after
// 2 x timeout_minutes without a heartbeat (0: never). On a live holder one line naming it,
// exit 2 on every rank.
void ckpt_lock_acquire(int rank, const char *dir, double timeout_minutes);

// Collective over MPI_COMM_WORLD, after --load: refuses (one line, exit 2) a run whose saves
// would move `latest` of the --save directory dir back: dir already names an iteration
// above `start`, the one this run starts from, unless overwrite_newer
// (--overwrite-newer-checkpoints: then rank 0 warns).
void ckpt_check_rollback(int rank, const char *dir, int64_t start, int overwrite_newer);

// Removes the lock this process holds, if any (also done at a normal exit). Never fails.
void ckpt_lock_release(void);

// Rank 0, every iteration and save: refreshes the held lock's mtime (the heartbeat another
// host's run reads), at most once per period. Never fails.
void ckpt_lock_heartbeat(void);
