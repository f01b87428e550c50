// train/trainer.h: one training run: the grid, backend, model stage, optimizer and data of
// this rank, and the step that ties them together.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "backend/backend.h"
#include "core/fault.h"  // defines: CoreFaults
#include "model/gpt.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "parallel_state/pgrid_comm.h"
#include "pipeline/schedule.h"
#include "train_args.h"
#include "batches.h"

typedef struct {
    double loss;        // mean lm loss over the global batch
    double grad_norm;   // global gradient norm before clipping
    double lr;
    int skipped;        // 1 if the step was skipped (NaN/Inf)
    int overflow;       // --fp16: 1 if skipped for an overflow the loss scale absorbs (then
                        // not a NaN iteration)
    double loss_scale;  // the loss scale after this step (1 without --fp16)
    int global_batch;   // samples in this step (--rampup-batch-size: grows)
    double grad_sync_exposed_ms;  // time the step spent on gradient reductions after the
                        // schedule (SP LayerNorm and tied-embedding sums, DP buckets still
                        // running or not yet started; CUDA: the device synced at both ends):
                        // what --overlap-grad-reduce leaves exposed
    double param_gather_exposed_ms;  // --overlap-param-gather (ZeRO-1): time this step's
                        // forward waited for the previous update's parameter gathers
    // Mixture of experts (train/train_moe.c; moe_layers 0 without experts): the step's mean
    // over the global batch's micro-batches and the MoE layers of the load-balancing loss
    // and of the z-loss, each without its coefficient (Megatron's load_balancing_loss,
    // z_loss; NAN when the coefficient is 0), and the tokens routed to each expert of each
    // MoE layer over the global batch (moe_tokens: (moe_layers, E), the trainer's buffer),
    // and the (token, choice)s the capacity dropped (--moe-expert-capacity-factor).
    int moe_layers;
    double moe_lb_loss, moe_z_loss, moe_dropped;
    const double *moe_tokens;
} StepResult;

typedef struct {
    TrainArgs args;
    ProcessGrid *grid;
    Backend *be;
    GPT *model;
    Optimizer *opt;
    int n_chunks;               // interleaved schedule: v model chunks on this rank; else 1
    GPT **chunks;               // (n_chunks) chunk c = virtual stage c*PP + pp_rank; [0] == model
    Optimizer **opts;           // (n_chunks) one optimizer per chunk; [0] == opt
    int wte_chunk;              // the chunk holding wte (or its tied copy), -1 if none
    BatchSource *data;
    BatchCursor cursor;
    PPStep step;
    PPTrace *trace;             // step timeline (--trace) and pipeline bubble counters
    CoreFaults faults;          // test hooks MEGAC_TEST_DIE_AT_ITER, _NAN_AT_ITER (core/fault.h)
    int dp, n_micro;
    int64_t iteration;          // iterations completed
    int64_t consumed_samples;   // training samples consumed (the next batch starts there)
    int64_t skipped_samples;    // samples of the steps skipped for an fp16 overflow
    int nan_in_row, nan_total;
    int skipped_total;          // steps skipped for an fp16 overflow
    LossScaler scaler;          // --fp16 loss scale (static 1 otherwise)
    double dscale_base;         // loss gradient per token without scaling: 1 / tokens per step
    int wte_param;              // index of wte in the model's table, or -1
    FILE *log_json;
    long log_json_prior;        // bytes the --log-json file held before this run (appended to)
    int log_errno;              // rank 0: why a --log-json write failed (stops the run), or 0
    char hosts[1024];           // rank 0: the run's hosts, comma-separated (train_log_process_ids;
                                // the run record names them)
    struct TbWriter *tb;        // rank 0: --tensorboard-dir's event file (train/tb_events.h), or NULL
    int tb_errno;               // rank 0: why an event write failed (stops the run, as log_errno), or 0
    TrainLogInterval interval;  // rank 0: the log line's sums since the last line (train_logline.h)
    int64_t log_first_iteration;  // this run's first iteration: Megatron logs it too
    double t_launch;            // core_now() at set-up: the clock of --exit-duration-in-mins
    int64_t last_saved;         // iteration of this run's last checkpoint, -1 before one
    double *moe_sums;           // (num_layers * (E + 3)) the MoE statistics' reduction buffer
                                // (train_moe.c), NULL without experts
    float *moe_bias;            // (num_layers, E) host: the expert bias of every MoE layer,
                                // the same on every rank (train_moe_bias); NULL until then
} Trainer;

// Sets up everything from the parsed flags (MPI initialised). Bad layouts, flags or data:
// one line and exit 2 on every rank, before any work. Never returns NULL.
Trainer *trainer_create(const TrainArgs *args);
void trainer_destroy(Trainer *t);
// Mixture of experts (train_moe.c): zero the chunks' per-step statistics (before a step);
// after it, their sums over the whole job into r (StepResult's moe_* fields). Collective
// over the world (no-op without experts).
void train_moe_begin_step(Trainer *t);
void train_moe_step_stats(Trainer *t, StepResult *r);
// --moe-router-enable-expert-bias: the whole model's expert bias (num_layers, E), zero at
// first (allocated on the first call), the same on every rank; NULL without it. After the
// step's statistics it moves (gpt_moe_bias_step) and the chunks get it. Never fails.
float *train_moe_bias(Trainer *t);
// Copies train_moe_bias into the chunks' routers (after a checkpoint load). Never fails.
void train_moe_push_bias(Trainer *t);
// --overlap-param-gather: waits for the parameter gathers in flight, so that the parameters
// can be read outside a forward (checkpoint save, evaluation). Collective over DP.
void trainer_settle_params(Trainer *t);

// Runs iteration t->iteration + 1 (forward, backward, gradient sync, clip, AdamW).
StepResult trainer_step(Trainer *t);

// Mean loss over eval_iters batches of split (SPLIT_VALID or SPLIT_TEST); NAN when there is
// no such split (mock data has no test split), or when a stop signal came (checked before
// each batch, agreed by all ranks; rank 0 prints a line). Collective.
double trainer_evaluate(Trainer *t, SplitKind split);

// The whole run: steps, logs, evaluation and checkpoints. Returns the exit code.
int trainer_run(Trainer *t);
