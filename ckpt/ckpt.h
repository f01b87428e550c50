// ckpt/ckpt.h: checkpoints in HDF5, layout-independent (the format: ckpt/CHECKPOINT.md).
//
// DIR/iter_NNNNNNN/checkpoint.h5 holds every parameter of the whole model and its two AdamW
// moments as full, unsharded datasets under their logical names, plus the iteration,
// consumed samples, Adam step, seed and model config. Every rank writes its own slices with
// parallel HDF5, and any (TP, PP, DP, ZeRO-1/2/3 or not) layout reads exactly its slices
// back. Written under a temporary name and renamed; DIR/latest_checkpointed_iteration.txt
// names the newest complete checkpoint.
//
// What a checkpoint takes is two small structs, not the trainer: CkptModel, this rank's
// tensors (its model chunks, their optimizers' moments and shards, the grid that says which
// slices it writes, the backend that copies device buffers), and CkptRun, the counters the
// root attributes keep beside them. Which slices a rank owns depends on the optimizer's
// segments (ZeRO), the chunks (interleaved schedule) and the grid together, so all three
// travel in one view; the run's counters are plain values the caller copies in and out,
// so ckpt/ needs nothing of train/ (which calls it). The lock and no-rollback rule of a
// --save directory: ckpt_lock.h; the on-disk layout and its HDF5 helpers: ckpt_format.h.
#pragma once
#include <stdint.h>
#include "backend/backend.h"
#include "model/gpt.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "parallel_state/pgrid_comm.h"

// This rank's share of the checkpoint's tensors. Every pointer is borrowed.
typedef struct {
    const ProcessGrid *grid;    // coordinates: tp rank, dp rank (who writes what), world rank
    Backend *be;                // copies device buffers to and from host memory
    const GPTConfig *config;    // the whole model (its full, unsharded datasets)
    int n_chunks;               // interleaved schedule: model chunks on this rank; else 1
    GPT *const *chunks;         // (n_chunks) the model chunks
    Optimizer *const *opts;     // (n_chunks) chunk c's optimizer (moments, shard segments)
    float *moe_bias;            // (num_layers, E) host, the same on every rank: the expert
                                // bias (--moe-router-enable-expert-bias; saved, and loaded
                                // even with the model only); NULL without it
} CkptModel;

// The run's state kept in the root attributes beside the tensors: saved from, and (after a
// load) restored into, this struct.
typedef struct {
    int64_t iteration;          // iterations completed
    int64_t consumed_samples;   // training samples consumed (the next batch starts there)
    int nan_total;              // NaN/Inf iterations so far
    int skipped_total;          // steps skipped for an fp16 overflow so far
    int64_t skipped_samples;    // ... and their samples (the lr schedule skips them)
    LossScaler scaler;          // saved and restored when dynamic (--fp16 without --loss-scale)
    uint64_t seed;              // --seed: saved; a load that differs warns
    int global_batch;           // --global-batch-size: saved (informational)
    double decoupled_lr, decoupled_min_lr;  // --decoupled-lr (0: none) and its minimum: saved
                                            // when set; a load with others is refused
    int per_token_loss;         // --calculate-per-token-loss: saved when set; checked likewise
} CkptRun;

// What a load reads: everything, the model only (--no-load-optim: fresh AdamW moments), or
// the model only and a fresh start (--finetune: iteration 0, the first sample).
typedef enum { CKPT_LOAD_ALL, CKPT_LOAD_NO_OPTIM, CKPT_LOAD_FINETUNE } CkptLoadMode;

// Checks, before any work, that checkpoints can be written into the --save directory dir:
// world rank 0 (rank: this process's) creates it (mkdir -p) and checks it is writable.
// Collective over MPI_COMM_WORLD; on failure one line naming the directory and exit 2 on
// every rank.
void ckpt_prepare_save(int rank, const char *dir);

// Saves m and r after r->iteration iterations into dir and points `latest` at it. The
// parameters must be settled (no gathers in flight). Collective. An unwritable directory:
// one line, exit 2 on every rank; an I/O failure while writing: one line naming the rank,
// exit 1 on every rank (the previous checkpoint stays intact).
void ckpt_save(const CkptModel *m, const CkptRun *r, const char *dir);

// Loads the iteration named by dir/latest into m and r (its seed and global batch are this
// run's, kept), which must describe the same model config (any layout). Collective. A
// missing or damaged checkpoint: a clear message naming the file, exit 2 on every rank.
void ckpt_load(const CkptModel *m, CkptRun *r, const char *dir, CkptLoadMode mode);
