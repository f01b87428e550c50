// hf/hf_ckpt.h: a megac checkpoint's model tensors in host memory, read and written serially
// (one process, no MPI): the export, import and generate commands' view of
// ckpt/CHECKPOINT.md. Reading uses ckpt/'s attribute reader and parameter table; writing
// makes a fresh checkpoint (given iteration, zero AdamW moments) with ckpt/'s dataset
// layout and publishes it with ckpt/'s atomic rename, so `megac train --load` at any layout
// reads it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "ckpt/ckpt_format.h"  // defines: CkptMeta, CKPT_PATH_MAX

typedef struct {
    CkptMeta meta;             // the root group's attributes
    GPTConfig cfg;             // the model config they describe (vocab_divisible_by = 1)
    ParamInfo *table;          // (n) the whole model's parameters: names, full shapes
    int n;
    float **data;              // (n) tensor i: (rows, cols) row-major fp32, full
    char path[CKPT_PATH_MAX];  // the checkpoint.h5 read (empty for one built in memory)
} HfCkpt;

// Reads every /model tensor of DIR/iter_N/checkpoint.h5, N = iteration, or the iteration
// DIR/latest_checkpointed_iteration.txt names when iteration < 0. Checks the format name and
// version, that /model holds exactly the tensors of the config (GPT-2 or Llama-style, tied or
// untied, ckpt/ckpt_format.h's attributes; a checkpoint of another
// architecture is refused) and their types and shapes. Returns NULL with one line naming the
// file in err.
HfCkpt *hf_ckpt_read(const char *dir, int64_t iteration, char *err, size_t errlen);

// A checkpoint of cfg in memory: tensors allocated and zero, meta's format version and model
// fields from cfg, everything else (iteration, seed, global batch, ...) 0 for the caller to
// set. Never fails.
HfCkpt *hf_ckpt_new(const GPTConfig *cfg);

// Index of the tensor named `name`, or -1. Pure.
int hf_ckpt_find(const HfCkpt *c, const char *name);

// Writes c as DIR/iter_N/checkpoint.h5 (N = c->meta.iteration) with zero AdamW moments and
// points DIR/latest at it. Refuses a DIR that already holds a checkpoint. Returns 0, or -1
// with one line in err.
int hf_ckpt_write(const char *dir, const HfCkpt *c, char *err, size_t errlen);

// Frees c (NULL is fine).
void hf_ckpt_free(HfCkpt *c);
