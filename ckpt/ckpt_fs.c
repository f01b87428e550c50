// ckpt/ckpt_fs.c: directories, fsync and atomic renames for checkpoint saves
// (rank 0 only; see ckpt_fs.h).
#define _GNU_SOURCE  // fallocate, FALLOC_FL_KEEP_SIZE: reserving a save's space (Linux)
#include "ckpt_fs.h"
#include "ckpt_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>  // defines: getenv
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>  // defines: getrlimit, RLIMIT_FSIZE
#include <sys/statvfs.h>  // defines: statvfs
#include <unistd.h>

int ckpt_fs_path(char *out, const char *dir, int64_t iteration, const char *name) {
    int len = iteration < 0 ? snprintf(out, CKPT_PATH_MAX, "%s", dir)
                            : snprintf(out, CKPT_PATH_MAX, "%s/iter_%07lld", dir, (long long)iteration);
    if (len >= 0 && len < CKPT_PATH_MAX && name)
        len += snprintf(out + len, CKPT_PATH_MAX - (size_t)len, "/%s", name);
    return len >= 0 && len < CKPT_PATH_MAX ? 0 : -1;
}

int ckpt_fs_mkdirs(const char *path, char *err, size_t n) {
    char buf[CKPT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    size_t len = strlen(buf);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        struct stat st;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            snprintf(err, n, "--save: cannot create directory %s: %s", buf, strerror(errno));
            return -1;
        }
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, n, "--save: %s exists and is not a directory", buf);
            return -1;
        }
        buf[i] = c;
    }
    return 0;
}

// fsync of a file or a directory by name. Returns 0 or -1 (errno set).
static int fsync_path(const char *path, int directory) {
    int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

// Writes "N\n" to path.tmp, fsyncs it and renames it to path.
static int write_latest(const char *path, int64_t iteration) {
    char tmp[CKPT_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
    FILE *fp = fopen(tmp, "w");
    if (!fp) return -1;
    int ok = fprintf(fp, "%lld\n", (long long)iteration) > 0 && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int saved = errno;
    if (fclose(fp) != 0) ok = 0;
    errno = saved;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

// Gives back what ckpt_fs_check_room reserved past the written file's end (the estimate is
// a little above the file): ftruncate to its own size releases preallocated blocks on ext4
// and tmpfs, punching the range past the end on XFS. Best effort: the file is whole anyway.
static void release_reserve(const char *file) {
    int fd = open(file, O_WRONLY);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) == 0) {
        if (ftruncate(fd, st.st_size) != 0) { /* kept: the blocks are only spare */ }
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size, (off_t)1 << 40) != 0) { /* idem */ }
    }
    close(fd);
}

int ckpt_fs_publish(const char *dir, int64_t iteration, char *err, size_t n) {
    char iter_dir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX], latest[CKPT_PATH_MAX];
    if (ckpt_fs_path(iter_dir, dir, iteration, NULL) || ckpt_fs_path(tmp, dir, iteration, CKPT_TMP_FILE) ||
        ckpt_fs_path(final, dir, iteration, CKPT_FILE) || ckpt_fs_path(latest, dir, -1, CKPT_LATEST)) {
        snprintf(err, n, "--save: directory name too long: %.200s...", dir);
        return -1;
    }
    const char *step = tmp;
    release_reserve(tmp);
    int rc = fsync_path(tmp, 0);
    if (rc == 0 && (rc = rename(tmp, final)) != 0) step = final;
    if (rc == 0 && (rc = fsync_path(iter_dir, 1)) != 0) step = iter_dir;
    if (rc == 0 && (rc = write_latest(latest, iteration)) != 0) step = latest;
    if (rc == 0 && (rc = fsync_path(dir, 1)) != 0) step = dir;
    if (rc != 0) snprintf(err, n, "--save: %s: %s", step, strerror(errno));
    return rc;
}

int ckpt_fs_check_regular(const char *path, char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, n, "%s: not a regular file (a %s): refusing to open it", path,
                 S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                 : S_ISSOCK(st.st_mode) ? "socket" : "device");
        return -1;
    }
    return 0;
}

// Creates `file` empty and reserves `bytes` of disk for it beyond its end (fallocate with
// FALLOC_FL_KEEP_SIZE: the size stays 0, and parallel HDF5's H5Fcreate truncates only a
// file that is not empty, so the blocks stay the file's while HDF5 writes into them).
// Returns 0 (reserved, or a file system that cannot reserve), or an errno value.
static int reserve(const char *file, double bytes) {
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return errno;
    int e = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0 ? 0 : errno;
    if (e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) e = 0;  // NFS, some FUSE: statvfs only
    close(fd);
    if (e) unlink(file);
    return e;
}

int ckpt_fs_check_room(const char *dir, const char *file, double bytes, char *err, size_t errlen) {
    struct rlimit fs;  // ulimit -f: a longer write fails with EFBIG (SIGXFSZ is ignored)
    if (getrlimit(RLIMIT_FSIZE, &fs) == 0 && fs.rlim_cur != RLIM_INFINITY && (double)fs.rlim_cur < bytes) {
        snprintf(err, errlen, "%s: %s (the checkpoint needs about %.1f MB, ulimit -f allows %.1f MB)",
                 file, strerror(EFBIG), bytes / 1e6, (double)fs.rlim_cur / 1e6);
        return -1;
    }
    struct statvfs v;
    // test hook: as if the disk filled between this check and the write (faults.sh)
    const char *skip = getenv("MEGAC_TEST_SKIP_ROOM_CHECK");
    if (!(skip && *skip == '1') && statvfs(dir, &v) == 0) {  // unknown: the reservation tells
        double avail = (double)v.f_bavail * (double)v.f_frsize;
        if (avail < bytes) {
            snprintf(err, errlen, "%s: %s (the checkpoint needs about %.1f MB, %.1f MB free)", file,
                     strerror(ENOSPC), bytes / 1e6, avail / 1e6);
            return -1;
        }
    }
    int e = reserve(file, bytes);
    if (e == 0) return 0;
    snprintf(err, errlen, "%s: %s (reserving the checkpoint's %.1f MB before the collective write)",
             file, strerror(e), bytes / 1e6);
    return -1;
}

int ckpt_fs_nothing_saved(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT;  // not a directory, unreadable: ckpt_load says why
    int nothing = 1;
    for (struct dirent *e; nothing && (e = readdir(d));)
        nothing = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                  !strcmp(e->d_name, CKPT_LOCK_FILE);
    closedir(d);
    return nothing;
}
