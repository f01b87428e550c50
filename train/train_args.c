// train/train_args.c: flag table and consistency checks for `megac train`.
#include "train_args.h"
#include "core/args.h"
#include "core/check.h"

#include <string.h>

static const char *USAGE =
    "usage: [mpiexec -n N] megac train [flags]\n"
    "  Pretrain a GPT-2 model. TP x PP x DP = N ranks; DP = N / (TP x PP).\n"
    "  Data: --data-path FILE.h5 (from `megac preprocess`) or --mock-data.";

void train_args_parse(TrainArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    GPTConfig *m = &a->model;
    *m = (GPTConfig){.num_layers = 4, .hidden_size = 128, .num_heads = 4, .ffn_hidden_size = 0,
                     .seq_length = 128, .max_position_embeddings = 0, .vocab_size = 0,
                     .vocab_divisible_by = 128};
    a->tp = a->pp = 1;
    a->micro_batch = 4;
    a->global_batch = 8;
    a->train_iters = 100;
    a->seed = 1234;
    a->split = "969,30,1";
    a->mock_vocab = 257;
    a->log_interval = 10;
    a->eval_interval = 1000;
    a->eval_iters = 10;
    a->device = "cpu";
    a->dist_backend = "nccl";
    a->timeout_minutes = 10;
    a->max_nan_iters = 5;
    a->pipeline_schedule = "1f1b";
    double lr = 3e-4, min_lr = 0, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, clip = 1.0;
    int64_t warmup = 0, decay = -1, seed = 1234;
    const char *style = "cosine";
    int no_zero1 = 0, use_zero1 = 0;
    ArgSpec specs[] = {
        {"--num-layers", ARG_INT, &m->num_layers, "transformer layers L"},
        {"--hidden-size", ARG_INT, &m->hidden_size, "hidden size C"},
        {"--num-attention-heads", ARG_INT, &m->num_heads, "attention heads NH"},
        {"--ffn-hidden-size", ARG_INT, &m->ffn_hidden_size, "MLP hidden size (0: 4 x hidden)"},
        {"--seq-length", ARG_INT, &m->seq_length, "sequence length T"},
        {"--max-position-embeddings", ARG_INT, &m->max_position_embeddings, "position table rows (0: seq-length)"},
        {"--make-vocab-size-divisible-by", ARG_INT, &m->vocab_divisible_by, "pad the vocabulary to a multiple of this x TP"},
        {"--decoder-first-pipeline-num-layers", ARG_INT, &m->first_stage_layers, "layers on the first stage (0: even split)"},
        {"--decoder-last-pipeline-num-layers", ARG_INT, &m->last_stage_layers, "layers on the last stage (0: even split)"},
        {"--tensor-model-parallel-size", ARG_INT, &a->tp, "TP"},
        {"--pipeline-model-parallel-size", ARG_INT, &a->pp, "PP"},
        {"--micro-batch-size", ARG_INT, &a->micro_batch, "sequences per micro-batch"},
        {"--global-batch-size", ARG_INT, &a->global_batch, "sequences per iteration (all DP ranks)"},
        {"--train-iters", ARG_I64, &a->train_iters, "iterations"},
        {"--lr", ARG_FLOAT, &lr, "peak learning rate"},
        {"--min-lr", ARG_FLOAT, &min_lr, "final learning rate"},
        {"--lr-decay-style", ARG_STR, &style, "constant | linear | cosine"},
        {"--lr-warmup-iters", ARG_I64, &warmup, "linear warm-up iterations"},
        {"--lr-decay-iters", ARG_I64, &decay, "decay iterations (default: train-iters)"},
        {"--weight-decay", ARG_FLOAT, &wd, "AdamW weight decay (weights and embeddings)"},
        {"--adam-beta1", ARG_FLOAT, &b1, "AdamW beta1"},
        {"--adam-beta2", ARG_FLOAT, &b2, "AdamW beta2"},
        {"--adam-eps", ARG_FLOAT, &eps, "AdamW epsilon"},
        {"--clip-grad", ARG_FLOAT, &clip, "clip the global gradient norm to this (0: off)"},
        {"--seed", ARG_I64, &seed, "seed of initialisation and data order"},
        {"--data-path", ARG_STR, &a->data_path, "HDF5 token file from `megac preprocess`"},
        {"--split", ARG_STR, &a->split, "train,valid,test weights of the documents"},
        {"--mock-data", ARG_BOOL, &a->mock_data, "synthetic tokens instead of --data-path"},
        {"--mock-vocab-size", ARG_INT, &a->mock_vocab, "vocabulary of --mock-data"},
        {"--mock-samples", ARG_INT, &a->mock_samples, "distinct --mock-data samples (0: unlimited)"},
        {"--save", ARG_STR, &a->save, "checkpoint directory to write"},
        {"--load", ARG_STR, &a->load, "checkpoint directory to resume from"},
        {"--save-interval", ARG_I64, &a->save_interval, "iterations between checkpoints (0: at the end only)"},
        {"--eval-interval", ARG_I64, &a->eval_interval, "iterations between validation runs"},
        {"--eval-iters", ARG_I64, &a->eval_iters, "validation batches per run"},
        {"--log-interval", ARG_I64, &a->log_interval, "iterations between log lines"},
        {"--log-json", ARG_STR, &a->log_json, "write one JSON object per iteration to FILE"},
        {"--device", ARG_STR, &a->device, "cpu | cuda"},
        {"--no-tf32", ARG_BOOL, &a->no_tf32, "CUDA: strict fp32 GEMMs (default: TF32 tensor cores)"},
        {"--distributed-backend", ARG_STR, &a->dist_backend, "CUDA: nccl | staged (device->host->MPI; several ranks may share a GPU: for testing)"},
        {"--num-threads", ARG_INT, &a->num_threads, "CPU threads per rank (0: cores / ranks on the node)"},
        {"--use-distributed-optimizer", ARG_BOOL, &use_zero1, "ZeRO-1 optimizer sharding over DP (default)"},
        {"--no-distributed-optimizer", ARG_BOOL, &no_zero1, "plain DDP: all-reduce, full optimizer per rank"},
        {"--distributed-timeout-minutes", ARG_FLOAT, &a->timeout_minutes, "end the job if a collective or p2p transfer of the training step waits longer"},
        {"--max-nan-iters", ARG_INT, &a->max_nan_iters, "stop after this many NaN/Inf steps in a row"},
        {"--trace", ARG_STR, &a->trace, "write a Chrome trace (Perfetto) of the steps to FILE"},
        {"--pipeline-schedule", ARG_STR, &a->pipeline_schedule, "1f1b | gpipe (all-forward-all-backward)"},
        {"--sequence-parallel", ARG_BOOL, &a->sequence_parallel, "split LayerNorm regions along the sequence over TP"},
        {"--use-flash-attn", ARG_BOOL, &m->use_flash_attn, "fused causal attention: no (T, T) probabilities stored, memory linear in T (CUDA: head size <= 128)"},
        {"--ddp-bucket-size", ARG_I64, &a->ddp_bucket_size, "gradient elements per DP reduction bucket (0: one)"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (m->ffn_hidden_size == 0) m->ffn_hidden_size = 4 * m->hidden_size;
    if (m->max_position_embeddings == 0) m->max_position_embeddings = m->seq_length;
    if (optim_lr_style_parse(style, &a->lr.style) != 0)
        core_usage_error("--lr-decay-style must be constant, linear or cosine, got '%s'", style);
    a->lr = (LRSchedule){lr, min_lr, warmup, decay < 0 ? a->train_iters : decay, a->lr.style};
    a->adamw = (AdamWConfig){b1, b2, eps, wd, clip};
    a->seed = (uint64_t)seed;
    a->zero1 = !no_zero1;
    if (lr <= 0 || min_lr < 0 || min_lr > lr) core_usage_error("need 0 <= --min-lr %g <= --lr %g, --lr > 0", min_lr, lr);
    if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1 || eps <= 0 || wd < 0 || clip < 0)
        core_usage_error("AdamW settings out of range: beta1 %g, beta2 %g (in [0,1)), eps %g (> 0), "
                         "weight-decay %g, clip-grad %g (>= 0)", b1, b2, eps, wd, clip);
    if (a->train_iters <= 0 || a->micro_batch <= 0 || a->global_batch <= 0 || a->log_interval <= 0 ||
        a->eval_interval <= 0 || a->eval_iters < 0 || a->save_interval < 0 || warmup < 0)
        core_usage_error("--train-iters %lld, --micro-batch-size %d, --global-batch-size %d, "
                         "--log-interval %lld, --eval-interval %lld must be > 0", (long long)a->train_iters,
                         a->micro_batch, a->global_batch, (long long)a->log_interval,
                         (long long)a->eval_interval);
    if (a->global_batch % a->micro_batch)
        core_usage_error("--global-batch-size %d is not a multiple of --micro-batch-size %d",
                         a->global_batch, a->micro_batch);
    if (!a->mock_data && !a->data_path) core_usage_error("give --data-path FILE.h5 or --mock-data");
    if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
        core_usage_error("--device must be cpu or cuda, got '%s'", a->device);
    if (a->timeout_minutes < 0) core_usage_error("--distributed-timeout-minutes must be >= 0");
    if (a->max_nan_iters < 0 || a->mock_samples < 0 || a->num_threads < 0 || a->mock_vocab < 2)
        core_usage_error("--max-nan-iters %d, --mock-samples %d, --num-threads %d must be >= 0 and "
                         "--mock-vocab-size %d >= 2", a->max_nan_iters, a->mock_samples,
                         a->num_threads, a->mock_vocab);
    if (use_zero1 && no_zero1)
        core_usage_error("--use-distributed-optimizer and --no-distributed-optimizer contradict each other");
    if (strcmp(a->dist_backend, "nccl") && strcmp(a->dist_backend, "staged"))
        core_usage_error("--distributed-backend must be nccl or staged, got '%s'", a->dist_backend);
    if (strcmp(a->pipeline_schedule, "1f1b") && strcmp(a->pipeline_schedule, "gpipe"))
        core_usage_error("--pipeline-schedule must be 1f1b or gpipe, got '%s'", a->pipeline_schedule);
    if (a->ddp_bucket_size < 0) core_usage_error("--ddp-bucket-size must be >= 0");
    if (m->use_flash_attn && !strcmp(a->device, "cuda") && m->num_heads > 0 &&
        m->hidden_size / m->num_heads > 128)
        core_usage_error("--use-flash-attn on --device cuda needs a head size <= 128, got %d "
                         "(--hidden-size %d / --num-attention-heads %d)",
                         m->hidden_size / m->num_heads, m->hidden_size, m->num_heads);
}

void train_args_check_layout(const TrainArgs *a, int world) {
    if (a->tp <= 0 || a->pp <= 0 || world % (a->tp * a->pp))
        core_usage_error("world size %d is not divisible by tensor-model-parallel-size %d x "
                         "pipeline-model-parallel-size %d", world, a->tp, a->pp);
    int dp = world / (a->tp * a->pp);
    if (a->global_batch % (a->micro_batch * dp))
        core_usage_error("--global-batch-size %d is not divisible by --micro-batch-size %d x "
                         "data-parallel size %d (world %d / TP %d / PP %d)", a->global_batch,
                         a->micro_batch, dp, world, a->tp, a->pp);
    GPTConfig m = a->model;
    if (m.vocab_size == 0) m.vocab_size = 1;  // not known yet; checked once the data is open
    char err[512];
    if (gpt_config_check(&m, a->tp, a->pp, err, sizeof err) != 0) core_usage_error("%s", err);
}
