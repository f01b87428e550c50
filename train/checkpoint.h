// train/checkpoint.h: checkpoints in HDF5, layout-independent (train/CHECKPOINT.md).
//
// DIR/iter_NNNNNNN/checkpoint.h5 holds every parameter of the whole model and its two AdamW
// moments as full, unsharded datasets under their logical names, plus the iteration,
// consumed samples, Adam step, seed and model config. Every rank writes its own slices with
// parallel HDF5, and any (TP, PP, DP, ZeRO-1 or not) layout reads exactly its slices back.
// Written under a temporary name and renamed; DIR/latest_checkpointed_iteration.txt names
// the newest complete checkpoint.
#pragma once
#include "trainer.h"

// Checks, before any work, that checkpoints can be written: rank 0 creates t->args.save
// (mkdir -p) and checks it is writable. Collective; on failure one line naming the
// directory and exit 2 on every rank.
void ckpt_prepare_save(Trainer *t);

// Saves the trainer's state after t->iteration iterations into t->args.save and points
// `latest` at it. Collective. An unwritable directory: one line, exit 2 on every rank; an
// I/O failure while writing aborts the job (the previous checkpoint stays intact).
void ckpt_save(Trainer *t);

// Loads t->args.load (the iteration named by DIR/latest) into the trainer, which must have
// been created with the same model config (any layout). Collective. A missing or damaged
// checkpoint: a clear message naming the file, exit 2 on every rank.
void ckpt_load(Trainer *t);
