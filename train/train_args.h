// train/train_args.h: the flags of `megac train` (Megatron-LM's names) and their checks.
#pragma once
#include <stdint.h>
#include "core/args.h"
#include "core/args_compat.h"
#include "model/gpt_config.h"
#include "parallel_state/pgrid.h"  // defines: PGridDims
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "rampup.h"
#include "train_logline.h"  // defines: TrainLogFlags

// --mock-vocab-size's default: the byte tokenizer's ids, 256 bytes and the end of document
// (data/tokenizer.h: TOK_N_BYTES + 1), as preprocessed text has them.
#define TRAIN_MOCK_VOCAB_DEFAULT 257

typedef struct TrainArgs {
    GPTConfig model;
    int tp, pp;
    int cp;                         // --context-parallel-size (model/gpt_cp.h)
    int ep;                         // --expert-model-parallel-size (model/gpt_moe.h)
    int etp;                        // --expert-tensor-parallel-size (0: tp)
    const char *cp_comm_type;       // --cp-comm-type: a name of cp_comm_type_parse
    int micro_batch, global_batch;
    int64_t train_iters;            // with --train-samples: the iterations they take
    int64_t train_samples;          // --train-samples (0: iteration-based run)
    int lr_in_samples;              // the schedule (a->lr) counts samples, not iterations
    TrainRampup rampup;             // --rampup-batch-size (start 0: the batch stays fixed)
    LRSchedule lr;
    LRSchedule lr_decoupled;        // --decoupled-lr (lr 0: not given): the embedding and output
                                    // layer's schedule, lr's shape with its own peak and minimum
    AdamWConfig adamw;
    uint64_t seed;
    CoreStrList data_path;          // --data-path: one file or a blend (data/blend.h), cut by --split
    CoreStrList train_data_path, valid_data_path, test_data_path;  // or whole files per split
    const char *split;
    int64_t data_vocab;             // --vocab-size N: Megatron .bin/.idx data holds ids < N and
                                    // the end of document N (0: not given)
    const char *tok_type, *vocab_file, *merge_file, *tok_model;  // Megatron's tokenizer flags
    int64_t tok_vocab, tok_eod;     // that tokenizer's ids and end-of-document id (0, 0: none):
                                    // the data must agree (Megatron .bin/.idx data takes them)
    int eod_mask_loss;              // --eod-mask-loss: targets equal to the EOD id weigh 0
    int per_token_loss;             // --calculate-per-token-loss: the loss is the mean over the
                                    // global batch's (unmasked) tokens, not of micro-batch means
    int reset_position_ids;         // --reset-position-ids, --reset-attention-mask: documents
    int reset_attention_mask;       // inside a sample (gpt_set_documents)
    int mock_data, mock_vocab, mock_samples;
    const char *save, *load;
    int no_load_optim;              // --no-load-optim: --load reads the model only (fresh AdamW)
    int no_load_rng;                // --no-load-rng: accepted (megac keeps no RNG state)
    double hidden_dropout;          // --hidden-dropout, --attention-dropout: drop probabilities
    double attention_dropout;       // in [0, 1) (model/gpt.h's GPTDropout)
    int finetune;                   // --finetune: model only, and start at iteration 0
    int64_t save_interval, eval_interval, eval_iters, log_interval;
    const char *log_json;
    TrainLogFlags logf;             // --log-throughput, --tensorboard-dir, ... (train_logline.h)
    const char *device;
    int no_tf32;                    // CUDA: strict fp32 GEMMs instead of TF32 tensor cores
    int bf16, fp16;                 // CUDA mixed precision: activations and weight copies in
                                    // bf16 / fp16; fp32 master weights, main grads, optimizer
    double loss_scale;              // --fp16: static loss scale (0: dynamic)
    double initial_loss_scale, min_loss_scale;  // --fp16 dynamic scaling (Megatron's)
    int loss_scale_window, hysteresis;
    int grad_reduce_in_bf16;        // DP gradient reduction in bf16 (default fp32)
    int optimizer_cpu_offload;      // CUDA: AdamW of a fraction of each rank's slice on the host
    double optimizer_offload_fraction;  // that fraction, [0, 1] (optim_set_offload)
    int overlap_cpu_optimizer_d2h_h2d;  // the copies on the copy stream (optim_set_offload_overlap)
    int offload_params;             // CUDA ZeRO-3: the parameter shard in pinned host memory
    const char *dist_backend;       // CUDA: "nccl" (default) or "staged" (device->host->MPI)
    int num_threads;
    int zero1;                      // the optimizer state is sharded (ZeRO-1, 2 or 3)
    int sharding;                   // OptimSharding: --data-parallel-sharding-strategy
    int overlap_param_gather;       // ZeRO-1: gather each bucket in the background
                                    // (distributed/dist_sync_hook.c); ZeRO-3: prefetch the next layer
    int overlap_grad_reduce;        // DDP / ZeRO-1: start each DP bucket's reduction in the
                                    // last micro-batch's backward (distributed/dist_sync_hook.c); ZeRO-2:
                                    // each unit's reduce-scatter nonblocking (dist_sync_queue.c)
    double timeout_minutes;
    int max_nan_iters;
    int exit_signal_handler;        // 1 (default): SIGTERM/SIGINT/SIGUSR1/SIGUSR2 stop gracefully
    double exit_duration_mins;      // stop (save, exit 0) after this many minutes (0: off)
    int64_t exit_interval;          // stop (save, exit 0) at iterations divisible by this (0: off)
    int overwrite_newer;            // --save may move `latest` back (start over; see ckpt/CHECKPOINT.md)
    const char *trace;
    const char *pipeline_schedule;  // "1f1b" (default) or "gpipe" (all-forward-all-backward)
    int vpp;                        // model chunks per pipeline rank (interleaved 1F1B); 1: off
    int sequence_parallel;
    int64_t ddp_bucket_size;        // floats per reduce-scatter bucket (0: one bucket)
    int argc;                       // the flags as given (after "train"), for the run record
    char **argv;                    // of --log-json (train_log.h); argv outlives the run
    CoreCompat compat;              // Megatron's flags accepted with no effect (or refused)
} TrainArgs;

// Parses argv (after "train") into *a with Megatron's defaults. Bad or inconsistent flags
// (that can be checked without the data or the world size): one line, exit 2.
void train_args_parse(TrainArgs *a, int argc, char **argv);

// Checks the flags against the world size (layout divides, batch divides). Every rank
// calls it with the same values; on failure all exit 2 with the same one-line message.
void train_args_check_layout(const TrainArgs *a, int world_size);
// The expert-tensor-parallel size the grid uses: --expert-tensor-parallel-size (default TP)
// with expert parallelism, TP without (the experts are then laid out as the dense layers). Pure.
int train_args_etp(const TrainArgs *a);
// The layout's named sizes (tp, cp, pp, ep, train_args_etp) for pgrid_dims_init and
// pgrid_create; the derived ones are 0. Pure.
PGridDims train_args_dims(const TrainArgs *a);
