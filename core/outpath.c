// core/outpath.c: the output guard (see outpath.h).
#include "outpath.h"

#include <dirent.h>  // defines: opendir, readdir
#include <errno.h>
#include <fcntl.h>   // defines: open, O_CREAT, O_EXCL
#include <libgen.h>  // defines: dirname
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PATH_BYTES = 4096 };

// 1 if the file starts like a data or model file megac reads: HDF5 (a checkpoint, a token
// dataset), a Megatron .idx, or safetensors (8-byte header length, then '{').
static int looks_like_data(const char *path) {
    unsigned char b[9] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    if (got >= 8 && !memcmp(b, "\x89HDF\r\n\x1a\n", 8)) return 1;
    if (got >= 8 && !memcmp(b, "MMIDIDX\0", 8)) return 1;
    return got == 9 && b[8] == '{' && b[6] == 0 && b[7] == 0;  // a sane header length
}

// 1 if path is part of a checkpoint: named checkpoint.h5*, a --save directory's `latest`
// or lock, or anything inside one of its iter_NNNNNNN folders. Other files directly in a
// --save directory (the Slurm script's train_log.jsonl beside the checkpoints) are not.
static int in_checkpoint(const char *path) {
    char buf[PATH_BYTES], probe[PATH_BYTES + 48];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!strncmp(base, "checkpoint.h5", 13)) return 1;
    snprintf(buf, sizeof buf, "%s", path);
    char *dir = dirname(buf);  // the file's folder
    snprintf(probe, sizeof probe, "%s/latest_checkpointed_iteration.txt", dir);
    if (access(probe, F_OK) == 0)  // in the --save directory itself
        return !strcmp(base, "latest_checkpointed_iteration.txt") || !strcmp(base, ".megac-save.lock");
    const char *dslash = strrchr(dir, '/');
    if (strncmp(dslash ? dslash + 1 : dir, "iter_", 5)) return 0;
    snprintf(probe, sizeof probe, "%s/../latest_checkpointed_iteration.txt", dir);
    return access(probe, F_OK) == 0;  // in an iter_ folder of a --save directory
}

int core_out_check_file(const char *flag, const char *path, const CoreOutInput *in, int n_in,
                        int may_replace_data, char *err, size_t n) {
    struct stat st, si;
    if (stat(path, &st) != 0) {  // not there yet: can it be created? (leave nothing behind)
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0) {
            snprintf(err, n, "cannot write %s %s: %s", flag, path, strerror(errno));
            return -1;
        }
        close(fd);
        unlink(path);
        return 0;
    }
    if (S_ISCHR(st.st_mode)) return 0;  // /dev/null, /dev/full
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, n, "cannot write %s %s: %s", flag, path,
                 S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file (a FIFO or socket)");
        return -1;
    }
    for (int i = 0; i < n_in; i++)
        if (in[i].path && stat(in[i].path, &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino) {
            snprintf(err, n, "%s %s is the same file as %s's %s: refusing to overwrite an input",
                     flag, path, in[i].what, in[i].path);
            return -1;
        }
    if (in_checkpoint(path)) {
        snprintf(err, n, "%s %s is part of a checkpoint: refusing to overwrite it", flag, path);
        return -1;
    }
    if (!may_replace_data && looks_like_data(path)) {
        snprintf(err, n, "%s %s is a data or model file (HDF5, .idx or safetensors): refusing to "
                 "overwrite it", flag, path);
        return -1;
    }
    if (access(path, W_OK) != 0) {
        snprintf(err, n, "cannot write %s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    return 0;
}

// 1 if dir/file's first 64 KiB hold the string mark.
static int has_mark(const char *dir, const char *file, const char *mark) {
    char path[PATH_BYTES + 256];
    static char buf[65536 + 1];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < got; i++)  // memmem: the header holds NUL bytes
        if (buf[i] == mark[0] && got - i >= strlen(mark) && !memcmp(buf + i, mark, strlen(mark))) return 1;
    return 0;
}

int core_out_check_dir(const char *flag, const char *dir, const char *const *own,
                       const char *mark_file, const char *mark, char *err, size_t n) {
    struct stat st;
    if (stat(dir, &st) != 0) return 0;  // created later
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s %s is a file, not a folder: give the folder to write into", flag, dir);
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, n, "cannot write %s %s: %s", flag, dir, strerror(errno));
        return -1;
    }
    const char *foreign = NULL;
    char name[256] = "";
    int any = 0;
    for (struct dirent *e; !foreign && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int mine = 0;
        any = 1;
        for (int i = 0; own && own[i] && !mine; i++) {  // "prefix*": any name starting so
            size_t k = strlen(own[i]);
            mine = k && own[i][k - 1] == '*' ? !strncmp(e->d_name, own[i], k - 1) : !strcmp(e->d_name, own[i]);
        }
        if (mine) continue;
        snprintf(name, sizeof name, "%.200s", e->d_name);
        foreign = name;
    }
    closedir(d);
    if (foreign) {
        snprintf(err, n, "%s %s is not empty (it holds %s, which megac does not write there): "
                 "refusing to mix with or replace its files; give a new or empty folder", flag, dir, name);
        return -1;
    }
    if (any && mark_file && !has_mark(dir, mark_file, mark)) {
        snprintf(err, n, "%s %s holds another program's files (its %s was not written by megac): "
                 "refusing to replace them; give a new or empty folder", flag, dir, mark_file);
        return -1;
    }
    return 0;
}

int core_out_open(const char *flag, const char *path, FILE **f, char *tmp, size_t tmplen, char *err, size_t n) {
    struct stat st;
    tmp[0] = 0;
    if (stat(path, &st) == 0 && S_ISCHR(st.st_mode)) {
        *f = fopen(path, "wb");
    } else {
        snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
        *f = fopen(tmp, "wb");
    }
    if (!*f) {
        snprintf(err, n, "cannot write %s %s: %s", flag, tmp[0] ? tmp : path, strerror(errno));
        return -1;
    }
    return 0;
}

int core_out_publish(const char *flag, const char *path, FILE *f, const char *tmp, char *err, size_t n) {
    int e = ferror(f) ? (errno ? errno : EIO) : 0;
    if (!e && fflush(f) != 0) e = errno;
    if (!e && tmp[0] && fsync(fileno(f)) != 0 && errno != EINVAL) e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    if (!e && tmp[0] && rename(tmp, path) != 0) e = errno;
    if (!e) return 0;
    if (tmp[0]) unlink(tmp);
    snprintf(err, n, "%s %s: %s (nothing written; the file is as it was)", flag, path, strerror(e));
    return -1;
}
