// ckpt/ckpt_lock.c: the --save directory's lock file and the no-rollback rule (see
// ckpt_lock.h).
#include "ckpt_lock.h"
#include "ckpt_format.h"
#include "ckpt_fs.h"
#include "core/check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>  // defines: kill (liveness probe)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>  // defines: stat, utimensat
#include <time.h>
#include <unistd.h>

enum { MSG = CKPT_MSG_MAX, HOST = 256 };

// The lock this process holds (rank 0), removed at exit; a handler can reach only statics.
static char held_lock[CKPT_PATH_MAX];
static double stale_after_s;  // a lock from another host this long without a heartbeat is stale
static time_t last_beat;

// The heartbeat period: a minute, or a quarter of the staleness limit if that is shorter.
static double beat_period(void) {
    return stale_after_s > 0 && stale_after_s / 4 < 60 ? stale_after_s / 4 : 60;
}

void ckpt_lock_heartbeat(void) {
    time_t now = time(NULL);
    if (!held_lock[0] || difftime(now, last_beat) < beat_period()) return;
    utimensat(AT_FDCWD, held_lock, NULL, 0);  // mtime = now; a failure only ages the lock
    last_beat = now;
}

void ckpt_lock_release(void) {
    if (held_lock[0]) unlink(held_lock);
    held_lock[0] = '\0';
}

// Creates path with our identity. Returns 0, or errno (EEXIST: held).
static int try_create(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return errno;
    char host[HOST] = "", text[512];
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID");
    int len = snprintf(text, sizeof text, "%d %s %s %lld\n", (int)getpid(), host,
                       job && *job ? job : "-", (long long)time(NULL));
    int rc = write(fd, text, (size_t)len) == len ? 0 : errno ? errno : EIO;
    close(fd);
    if (rc) unlink(path);
    return rc;
}

// Is the holder described by the lock's text gone (or ourselves, requeued)? Fills `who`.
static int is_stale(const char *path, char *who, size_t n) {
    char text[512] = "", host[HOST] = "", their_host[HOST] = "", job[64] = "";
    long long pid = 0, since = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(text, sizeof text, f)) text[0] = '\0';
        fclose(f);
    }
    if (sscanf(text, "%lld %255s %63s %lld", &pid, their_host, job, &since) != 4) {
        snprintf(who, n, "an unreadable lock");
        return 0;
    }
    gethostname(host, sizeof host - 1);
    const char *my_job = getenv("SLURM_JOB_ID");
    time_t t = (time_t)since;
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    snprintf(who, n, "process %lld on host %s (Slurm job %s, since %s)", pid, their_host, job, when);
    if (my_job && *my_job && !strcmp(my_job, job)) return 1;  // this job, requeued
    if (!strcmp(host, their_host)) return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    // Another host: its process cannot be probed. A live holder touches the lock at least
    // every beat_period(), and a run stuck longer than its --distributed-timeout-minutes
    // ends itself; a lock left untouched for stale_after_s is stale.
    struct stat st;
    double age = stat(path, &st) == 0 ? difftime(time(NULL), st.st_mtime) : 0;
    snprintf(who, n, "process %lld on host %s (Slurm job %s, since %s, last heartbeat %.0f s ago)",
             pid, their_host, job, when, age);
    return stale_after_s > 0 && age > stale_after_s;
}

static int acquire(const char *dir, char *msg, size_t n) {
    char path[CKPT_PATH_MAX], who[400];
    if (ckpt_fs_path(path, dir, -1, CKPT_LOCK_FILE) != 0) {
        snprintf(msg, n, "--save: directory name too long: %.200s...", dir);
        return -1;
    }
    int rc = try_create(path);
    if (rc == EEXIST && is_stale(path, who, sizeof who)) {
        printf(" taking over the stale lock %s of %s\n", path, who);
        unlink(path);
        rc = try_create(path);
    }
    if (rc == EEXIST) {
        char after[96] = "";
        if (stale_after_s > 0)
            snprintf(after, sizeof after, "; a lock from another host is taken over after %.0f "
                     "minutes without a heartbeat", stale_after_s / 60);
        snprintf(msg, n, "--save %s is in use by another run: %s holds %.300s (if that run is gone, "
                 "delete the file%s)", dir, who, path, after);
        return -1;
    }
    if (rc) {
        snprintf(msg, n, "--save: cannot create %.900s: %s", path, strerror(rc));
        return -1;
    }
    snprintf(held_lock, sizeof held_lock, "%s", path);
    last_beat = time(NULL);
    atexit(ckpt_lock_release);
    return 0;
}

void ckpt_lock_acquire(int rank, const char *dir, double timeout_minutes) {
    char msg[MSG] = "";
    stale_after_s = 2 * 60.0 * timeout_minutes;  // 0 (no timeout): never by age
    int status = rank == 0 ? acquire(dir, msg, sizeof msg) : 0;
    core_agree_or_exit(status, msg, (int)sizeof msg);
}

void ckpt_check_rollback(int rank, const char *dir, int64_t start, int overwrite_newer) {
    char msg[MSG] = "", path[CKPT_PATH_MAX];
    int status = 0;
    int64_t latest = 0;
    if (rank == 0 && ckpt_fs_path(path, dir, -1, CKPT_LATEST) == 0 &&
        access(path, F_OK) == 0 && ckpt_read_latest(dir, &latest, msg, sizeof msg) == 0 &&
        latest > start) {
        if (overwrite_newer) {
            printf(" warning: --save %s holds checkpoints up to iteration %lld; this run starts at "
                   "%lld and will move `latest` back (--overwrite-newer-checkpoints)\n", dir,
                   (long long)latest, (long long)start);
        } else {
            snprintf(msg, sizeof msg, "--save %s already holds checkpoints up to iteration %lld "
                     "(%s) but this run starts at iteration %lld: its saves would move `latest` "
                     "back. Resume with --load %s, save elsewhere, or pass "
                     "--overwrite-newer-checkpoints to start over", dir, (long long)latest,
                     CKPT_LATEST, (long long)start, dir);
            status = -1;
        }
    }
    core_agree_or_exit(status, msg, (int)sizeof msg);
}
