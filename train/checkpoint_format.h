// train/checkpoint_format.h: the checkpoint's on-disk layout (see train/CHECKPOINT.md),
// shared by the writer and reader (checkpoint.c), the HDF5 helpers (checkpoint_h5.c) and
// rank 0's validator (checkpoint_check.c). Internal to train/.
//
//     DIR/latest_checkpointed_iteration.txt     "10\n": the newest complete checkpoint
//     DIR/iter_0000010/checkpoint.h5            attributes (CkptMeta) on the root group,
//         /model/<name>                         full, unsharded parameter (rows[, cols])
//         /optim/exp_avg/<name>                 AdamW first moment, same shape
//         /optim/exp_avg_sq/<name>              AdamW second moment, same shape
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <hdf5.h>  // defines: hid_t
#include "model/gpt_config.h"
#include "model/gpt_params.h"

#define CKPT_FORMAT "megac-gpt-checkpoint"
#define CKPT_VERSION 1
#define CKPT_LATEST "latest_checkpointed_iteration.txt"
#define CKPT_FILE "checkpoint.h5"
#define CKPT_TMP_FILE "checkpoint.h5.tmp"  // while being written
#define CKPT_PATH_MAX 4096
#define CKPT_MSG_MAX 1024

// The root group's integer attributes (all stored as 64-bit integers under these names).
typedef struct {
    int64_t format_version;
    int64_t iteration, consumed_samples, adam_step, nan_iterations;
    int64_t seed, global_batch_size;
    int64_t num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length,
            max_position_embeddings, vocab_size;
    int64_t saved_tp, saved_pp, saved_dp, saved_zero1;  // the writer's layout (informational)
} CkptMeta;

// The three groups of datasets, in file order.
typedef enum { CKPT_MODEL, CKPT_EXP_AVG, CKPT_EXP_AVG_SQ, CKPT_NGROUPS } CkptGroup;

// "/model", "/optim/exp_avg", "/optim/exp_avg_sq". Pure.
const char *ckpt_group_path(CkptGroup g);

// The parameter table of the whole, unsharded model (tp = 1, every layer, both ends): the
// names and full shapes of all datasets. Caller frees. Never fails.
ParamInfo *ckpt_full_table(const GPTConfig *c, int *n);

// Writes the format name and every CkptMeta attribute on the root group of f. Collective
// under parallel HDF5 (every rank passes the same values). Aborts on an HDF5 failure.
void ckpt_h5_write_meta(hid_t f, const CkptMeta *m);

// Reads the format name and the attributes. Returns 0, or -1 with one line in err naming
// the missing or malformed attribute. Changes nothing on the HDF5 error stack's printing.
int ckpt_h5_read_meta(hid_t f, CkptMeta *m, char *err, size_t errlen);



// Creates the groups and one float32 dataset per group and table entry, full shape
// ((rows) when cols == 1, else (rows, cols)). Collective. Aborts on an HDF5 failure.
void ckpt_h5_create_datasets(hid_t f, const ParamInfo *full, int n);

// Moves local elements [e0, e1) of parameter p, as held by tp_rank of tp, between the host
// buffer buf (buf[0] is element e0) and dataset ds (full shape): write = 1 stores buf into
// the file, 0 reads the file into buf. Elements outside every slice of p (vocabulary
// padding rows) are skipped. Independent I/O. Returns 0, or -1 on an HDF5 failure.
int ckpt_h5_transfer(hid_t ds, const ParamInfo *p, int tp, int tp_rank, size_t e0, size_t e1,
                     float *buf, int write);

// Checks dataset p->name of group grp (path gpath, for the message): present, float32, the
// full shape of p. Returns 0, or -1 with one line naming the dataset, the expected and the
// found type and shape in err. Reads no data.
int ckpt_h5_check_dataset(hid_t grp, const char *gpath, const ParamInfo *p, char *err, size_t errlen);

// Reads the iteration named by DIR/latest_checkpointed_iteration.txt into *it. Returns 0,
// or -1 with one line naming the file in err (missing, not a regular file, unreadable, not
// a number). Rank 0's file-system step; no HDF5.
int ckpt_read_latest(const char *dir, int64_t *it, char *err, size_t errlen);

// Rank 0 only, before any rank opens the file: reads DIR/latest, then checks that the named
// checkpoint.h5 opens, has this format and version, matches `want`'s model config and
// global batch size, and holds every dataset of the model with its full shape as float32.
// Fills *got and path (CKPT_PATH_MAX bytes: the file). Returns 0, or -1 with one line
// naming the file in err.
int ckpt_check(const char *dir, const CkptMeta *want, CkptMeta *got, char *path,
               char *err, size_t errlen);
