// train/checkpoint_lock.h: one job per --save directory, and `latest` never moving back.
//
// DIR/.megac-save.lock is created with O_EXCL by rank 0 at start-up and holds
// "pid host slurm-job start-time"; it is removed when the process exits normally. A second
// job gets one line naming the holder. A lock is stale, and taken over, when its process
// is gone (same host), it was left by this same Slurm job (a requeued job on another
// node), or it is from another host and its heartbeat (the file's mtime, which the holder
// refreshes at least every minute) is older than 2 x --distributed-timeout-minutes.
// Internal to train/.
#pragma once
#include "trainer.h"

// Collective: rank 0 takes the lock of t->args.save (which exists). On a live holder one
// line naming it, exit 2 on every rank.
void ckpt_lock_acquire(Trainer *t);

// Collective, after --load: refuses (one line, exit 2) a run whose saves would move `latest`
// of --save back: DIR already names an iteration above the one this run starts from,
// unless --overwrite-newer-checkpoints.
void ckpt_check_rollback(Trainer *t);

// Removes the lock this process holds, if any (also done at a normal exit). Never fails.
void ckpt_lock_release(void);

// Rank 0, every iteration and save: refreshes the held lock's mtime (the heartbeat another
// host's run reads), at most once per period. Never fails.
void ckpt_lock_heartbeat(void);
