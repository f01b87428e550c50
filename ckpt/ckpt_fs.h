// ckpt/ckpt_fs.h: rank 0's file-system steps of a checkpoint save: making the
// directories and publishing a finished file atomically (fsync, rename, then `latest`).
// Also used by hf/hf_ckpt.c and megac's export (the same directory layout).
#pragma once
#include <stddef.h>
#include <stdint.h>

// Formats DIR/iter_NNNNNNN/NAME into out (CKPT_PATH_MAX bytes); iteration < 0 leaves out
// the iter_ part, name NULL the /NAME part. Returns 0, or -1 if the path is too long.
int ckpt_fs_path(char *out, const char *dir, int64_t iteration, const char *name);

// mkdir -p path. Returns 0, or -1 with one line naming the directory in err.
int ckpt_fs_mkdirs(const char *path, char *err, size_t errlen);

// Publishes the closed file DIR/iter_N/checkpoint.h5.tmp: fsyncs it, renames it to
// checkpoint.h5, fsyncs the directory, then writes DIR/latest_checkpointed_iteration.txt
// through a temporary file + fsync + rename, and fsyncs DIR. Until the last rename the
// previous `latest` (and its checkpoint) stays valid. Returns 0, or -1 with one line in err.
int ckpt_fs_publish(const char *dir, int64_t iteration, char *err, size_t errlen);

// Refuses, before anyone opens it, a path that is not a regular file (a FIFO would block the
// open forever, a device never ends) or that this process may not read. Returns 0, or -1
// with "PATH: not a regular file ..." or "PATH: Permission denied" in err.
int ckpt_fs_check_regular(const char *path, char *err, size_t errlen);

// Rank 0 before a save: whether the file system holding dir has room for a file of about
// `bytes` (statvfs), then creates `file` empty and reserves the bytes for it (fallocate,
// keeping its size 0, which HDF5's create does not truncate). A collective write that meets
// a full disk hangs inside parallel HDF5, so a save that cannot fit, even when the disk
// fills after the statvfs, fails here first; so does one longer than `ulimit -f` allows.
// ckpt_fs_publish gives back what the file did not use. Returns 0 (room and reserved, or a
// file system that cannot tell), or -1 with "<file>: No space left on device (...)" or
// "<file>: File too large (... ulimit -f ...)" in err; then `file` is not there.
// (Test hook: MEGAC_TEST_SKIP_ROOM_CHECK=1 skips the statvfs, as if the disk filled after it.)
int ckpt_fs_check_room(const char *dir, const char *file, double bytes, char *err, size_t errlen);

// Whether --load's dir holds nothing at all: it does not exist, or it holds nothing but the
// --save lock (a first run of Megatron's `--save X --load X` idiom). 1: nothing there; 0:
// anything else, even what is left of a damaged checkpoint (ckpt_load judges it). Rank 0.
int ckpt_fs_nothing_saved(const char *dir);
