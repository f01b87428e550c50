// train/checkpoint.h: checkpoints in HDF5, layout-independent.
//
// DIR/iter_NNNNNNN/checkpoint.h5 holds every parameter and its two AdamW moments as full,
// unsharded datasets under their logical names, plus the iteration, consumed samples, seed
// and model config. Every rank writes its own slice with parallel HDF5, so any layout can
// read exactly its slice back. Written to a temporary name and renamed; DIR/latest names
// the newest complete checkpoint.
#pragma once
#include "trainer.h"

// Saves the trainer's state after t->iteration iterations into t->args.save. Collective.
void ckpt_save(Trainer *t);

// Loads t->args.load (the iteration named by DIR/latest) into the trainer, which must have
// been created with the same model config (any layout). Collective. A missing or damaged
// checkpoint: a clear message naming the file, exit 2 on every rank.
void ckpt_load(Trainer *t);
