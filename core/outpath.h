// core/outpath.h: the one guard of every file or folder a command writes (train's --log-json,
// --trace and --tensorboard-dir, generate's --dump-logits, plan's --calibrate, preprocess's and
// tokenizer's --output, export's and ablate's --output folders). The same refusal rules
// everywhere, checked before any work, with one line naming the flag:
//   * an input of the run (the same file, by device and inode, under whatever name);
//   * a checkpoint (a file named checkpoint.h5*, a --save directory's `latest` or lock, or
//     any file in one of its iter_NNNNNNN folders; other files beside `latest` are allowed);
//   * a data or model file (HDF5, Megatron .idx or safetensors, by their first bytes) unless
//     the command writes that kind of file itself (may_replace_data);
//   * a directory, FIFO or socket where a file goes; a file, or a non-empty folder holding
//     files of another program, where a folder goes;
//   * a place this process cannot create or write the file in.
// A file is then written under a temporary name and renamed over the path at the end
// (core_out_open, core_out_publish): a failed or killed command leaves the old file whole.
#pragma once
#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *what;  // the flag that names it ("--load", "--data-path", ...)
    const char *path;
} CoreOutInput;

// Checks the file output `path` of `flag` against the rules above (inputs: n_in of them, may
// be NULL). Character devices (/dev/null, /dev/full) are accepted. Creates nothing. Returns
// 0, or -1 with "<flag> <path>: <why>" in err.
int core_out_check_file(const char *flag, const char *path, const CoreOutInput *in, int n_in,
                        int may_replace_data, char *err, size_t n);

// Checks the folder output `dir` of `flag`: missing (it will be created), empty, or an
// earlier output of this command: holding only files named in `own` (NULL-terminated), among
// them `mark_file`, whose first 64 KiB contain `mark` (e.g. "megac_iteration" in an
// exported model.safetensors; mark_file NULL: no mark). An `own` name ending in '*' stands
// for every name starting with the rest ("events.out.tfevents.*"). Not a file. Returns 0, or
// -1 with one line in err.
int core_out_check_dir(const char *flag, const char *dir, const char *const *own,
                       const char *mark_file, const char *mark, char *err, size_t n);

// Opens "<path>.tmp.<pid>" for writing (binary) into *f, its name in tmp (tmplen bytes). A
// character device (/dev/null) is opened as itself (tmp ""). Returns 0, or -1 with one line.
int core_out_open(const char *flag, const char *path, FILE **f, char *tmp, size_t tmplen, char *err, size_t n);

// Finishes what core_out_open started: checks every write (ferror), flushes, fsyncs, closes
// and renames tmp over path. On any failure (ENOSPC, EFBIG, EIO) removes tmp, leaves path as
// it was and returns -1 with "<flag> <path>: <strerror>" in err; else 0.
int core_out_publish(const char *flag, const char *path, FILE *f, const char *tmp, char *err, size_t n);
