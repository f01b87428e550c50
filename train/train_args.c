// train/train_args.c: flag table and consistency checks for `megac train`.
#include "train_args.h"
#include "core/args.h"
#include "core/check.h"

#include <stdint.h>  // defines: INT32_MAX
#include <stdio.h>   // defines: sscanf
#include <string.h>

static const char *USAGE =
    "usage: [mpiexec -n N] megac train [flags]\n"
    "  Pretrain a GPT-2 model. TP x PP x DP = N ranks; DP = N / (TP x PP).\n"
    "  Data: --data-path FILE.h5 (from `megac preprocess`) or --mock-data.";

// Size products are checked before any allocation: each tensor of one rank must have fewer
// than 2^31 elements (GPT-3 175B's largest, C x F, has 6e8). One line naming the flags, exit 2.
static void check_tensor_sizes(const GPTConfig *m, int micro_batch) {
    if (m->hidden_size <= 0 || m->ffn_hidden_size <= 0 || m->seq_length <= 0 || m->num_heads <= 0 ||
        micro_batch <= 0)
        return;  // reported by the range checks
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size, T = m->seq_length, B = micro_batch;
    const int64_t NH = m->num_heads, big = F > 3 * C ? F : 3 * C;
    const struct { const char *what; double n; } t[] = {
        {"--hidden-size x --ffn-hidden-size (MLP weight)", (double)C * F},
        {"3 x --hidden-size^2 (attention QKV weight)", 3.0 * C * C},
        {"--micro-batch-size x --seq-length x max(--ffn-hidden-size, 3 x hidden) (activations)",
         (double)B * T * big},
        {"--micro-batch-size x --num-attention-heads x --seq-length^2 (attention probabilities)",
         m->use_flash_attn ? 0.0 : (double)B * NH * T * T},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].n > (double)INT32_MAX)
            core_usage_error("model too large: %s = %.4g elements in one tensor (at most 2^31 - 1; "
                             "hidden %d, ffn %d, seq %d, heads %d, micro-batch %d)", t[i].what, t[i].n,
                             m->hidden_size, m->ffn_hidden_size, m->seq_length, m->num_heads, micro_batch);
}

// 1 if argv names --train-iters (its default must not count as given). Pure.
static int train_iters_given(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "--train-iters", 13) && (argv[i][13] == 0 || argv[i][13] == '=')) return 1;
    return 0;
}

// 1 if flag appears in argv (for on-by-default flags whose table entry shows the default).
static int given(int argc, char **argv, const char *flag) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

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
    a->exit_signal_handler = 1;  // shown as the default by --help
    a->initial_loss_scale = 4294967296.0;  // 2^32, Megatron's
    a->min_loss_scale = 1.0;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
    double lr = 3e-4, min_lr = 0, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, clip = 1.0;  // Megatron's
    double warmup_fraction = -1, hidden_dropout = 0, attention_dropout = 0;
    int64_t train_samples = 0, warmup_samples = -1, decay_samples = -1;
    int untie = 0, overlap_grad = 0, overlap_param = 0, vpp_layers = 0, vpp_size = 0;
    CoreStrList rampup = {0};
    int64_t warmup = 0, decay = -1, seed = 1234;
    const char *style = "cosine";
    int no_zero1 = 0, use_zero1 = 1, no_signal_handler = 0, recompute_activations = 0;  // use_zero1 1: --help shows the default
    const char *rc_gran = NULL, *rc_method = "uniform";
    m->recompute_num_layers = 1;
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
        {"--lr-warmup-fraction", ARG_FLOAT, &warmup_fraction, "warm-up as a fraction of --lr-decay-iters"},
        {"--train-samples", ARG_I64, &train_samples, "sequences to train on (instead of --train-iters)"},
        {"--lr-warmup-samples", ARG_I64, &warmup_samples, "with --train-samples: warm-up in sequences"},
        {"--lr-decay-samples", ARG_I64, &decay_samples, "with --train-samples: decay in sequences"},
        {"--init-method-std", ARG_FLOAT, &m->init_method_std, "std of the normal initialisation (0.02); output layers / sqrt(2 L)"},
        {"--hidden-dropout", ARG_FLOAT, &hidden_dropout, "must be 0: megac has no dropout"},
        {"--attention-dropout", ARG_FLOAT, &attention_dropout, "must be 0: megac has no dropout"},
        {"--untie-embeddings-and-output-weights", ARG_BOOL, &untie, "(not supported yet)"},
        {"--rampup-batch-size", ARG_LIST, &rampup, "(not supported yet)"},
        {"--num-layers-per-virtual-pipeline-stage", ARG_INT, &vpp_layers, "(not supported yet)"},
        {"--virtual-pipeline-model-parallel-size", ARG_INT, &vpp_size, "(not supported yet)"},
        {"--overlap-grad-reduce", ARG_BOOL, &overlap_grad, "(not supported yet)"},
        {"--overlap-param-gather", ARG_BOOL, &overlap_param, "(not supported yet)"},
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
        {"--exit-signal-handler", ARG_BOOL, &a->exit_signal_handler, "SIGTERM/SIGINT/SIGUSR1/SIGUSR2 stop at the next iteration with a checkpoint, exit 0 (the default)"},
        {"--no-exit-signal-handler", ARG_BOOL, &no_signal_handler, "let those signals end the run at once (no checkpoint)"},
        {"--exit-duration-in-mins", ARG_FLOAT, &a->exit_duration_mins, "stop (save, exit 0) once the run has lasted this long (0: off)"},
        {"--exit-interval", ARG_I64, &a->exit_interval, "stop (save, exit 0) at an iteration divisible by this (0: off)"},
        {"--overwrite-newer-checkpoints", ARG_BOOL, &a->overwrite_newer, "allow saving into a --save directory whose latest checkpoint is newer than this run (start over)"},
        {"--trace", ARG_STR, &a->trace, "write a Chrome trace (Perfetto) of the steps to FILE"},
        {"--pipeline-schedule", ARG_STR, &a->pipeline_schedule, "1f1b | gpipe (all-forward-all-backward)"},
        {"--sequence-parallel", ARG_BOOL, &a->sequence_parallel, "split LayerNorm regions along the sequence over TP"},
        {"--use-flash-attn", ARG_BOOL, &m->use_flash_attn, "fused causal attention: no (T, T) probabilities stored, memory linear in T (CUDA: head size <= 128)"},
        {"--ddp-bucket-size", ARG_I64, &a->ddp_bucket_size, "gradient elements per DP reduction bucket (0: one)"},
        {"--bf16", ARG_BOOL, &a->bf16, "CUDA: bf16 activations and weight copies, fp32 master weights, grads and optimizer"},
        {"--fp16", ARG_BOOL, &a->fp16, "CUDA: fp16 activations and weight copies with loss scaling, fp32 master weights"},
        {"--loss-scale", ARG_FLOAT, &a->loss_scale, "--fp16: static loss scale (default: dynamic)"},
        {"--initial-loss-scale", ARG_FLOAT, &a->initial_loss_scale, "--fp16: first dynamic loss scale (2^32)"},
        {"--min-loss-scale", ARG_FLOAT, &a->min_loss_scale, "--fp16: the dynamic scale never falls below this"},
        {"--loss-scale-window", ARG_INT, &a->loss_scale_window, "--fp16: clean steps before the scale doubles"},
        {"--hysteresis", ARG_INT, &a->hysteresis, "--fp16: overflows tolerated before the scale halves"},
        {"--recompute-granularity", ARG_STR, &rc_gran, "full | selective: re-run layers (or only the attention probabilities) in the backward instead of storing their activations"},
        {"--recompute-method", ARG_STR, &rc_method, "full: uniform (chunks of --recompute-num-layers) | block (the first --recompute-num-layers layers of each stage)"},
        {"--recompute-num-layers", ARG_INT, &m->recompute_num_layers, "full: layers per chunk (uniform) or recomputed layers per stage (block)"},
        {"--recompute-activations", ARG_BOOL, &recompute_activations, "the same as --recompute-granularity selective"},
        {"--grad-reduce-in-bf16", ARG_BOOL, &a->grad_reduce_in_bf16, "reduce gradients over DP in bf16 (default fp32; any device)"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (m->ffn_hidden_size == 0 && m->hidden_size > INT32_MAX / 4)
        core_usage_error("--hidden-size %d is too large: the default --ffn-hidden-size (4 x hidden "
                         "= %lld) does not fit a 32-bit size", m->hidden_size, 4LL * m->hidden_size);
    if (m->ffn_hidden_size == 0) m->ffn_hidden_size = 4 * m->hidden_size;
    check_tensor_sizes(m, a->micro_batch);
    if (m->max_position_embeddings == 0) m->max_position_embeddings = m->seq_length;
    if (optim_lr_style_parse(style, &a->lr.style) != 0)
        core_usage_error("--lr-decay-style must be constant, linear or cosine, got '%s'", style);
    if (hidden_dropout != 0 || attention_dropout != 0)
        core_usage_error("--hidden-dropout %g / --attention-dropout %g: megac has no dropout (like most "
                         "LLM pretraining today); give 0 or leave them out", hidden_dropout, attention_dropout);
    const char *unsupported = untie ? "--untie-embeddings-and-output-weights"
                            : rampup.n ? "--rampup-batch-size"
                            : (vpp_layers || vpp_size) ? "the interleaved schedule (--num-layers-per-virtual-pipeline-stage)"
                            : overlap_grad ? "--overlap-grad-reduce"
                            : overlap_param ? "--overlap-param-gather" : NULL;
    if (unsupported) core_usage_error("%s is not supported by megac yet", unsupported);
    if (train_samples < 0 || (train_samples && train_iters_given(argc, argv)))
        core_usage_error("give --train-iters or --train-samples (> 0), not both");
    if (train_samples) {  // Megatron's sample-based schedule, in whole iterations
        int64_t gb = a->global_batch > 0 ? a->global_batch : 1;
        a->train_iters = (train_samples + gb - 1) / gb;
        if (warmup_samples >= 0) warmup = warmup_samples / gb;
        if (decay_samples >= 0) decay = decay_samples / gb;
    } else if (warmup_samples >= 0 || decay_samples >= 0) {
        core_usage_error("--lr-warmup-samples / --lr-decay-samples need --train-samples");
    }
    if (warmup_fraction >= 0) {
        if (warmup > 0 || warmup_fraction > 1)
            core_usage_error("--lr-warmup-fraction %g must be in [0, 1] and excludes --lr-warmup-iters",
                             warmup_fraction);
        warmup = (int64_t)(warmup_fraction * (double)(decay < 0 ? a->train_iters : decay));
    }
    if (m->init_method_std < 0) core_usage_error("--init-method-std must be >= 0");
    a->lr = (LRSchedule){lr, min_lr, warmup, decay < 0 ? a->train_iters : decay, a->lr.style};
    a->adamw = (AdamWConfig){b1, b2, eps, wd, clip};
    a->seed = (uint64_t)seed;
    a->zero1 = !no_zero1;
    if (given(argc, argv, "--exit-signal-handler") && no_signal_handler)
        core_usage_error("--exit-signal-handler and --no-exit-signal-handler contradict each other");
    a->exit_signal_handler = !no_signal_handler;
    if (a->exit_duration_mins < 0 || a->exit_interval < 0)
        core_usage_error("--exit-duration-in-mins %g and --exit-interval %lld must be >= 0",
                         a->exit_duration_mins, (long long)a->exit_interval);
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
    double w_train = 0, w_valid = 0;  // Megatron: a validation weight of 0 means no evaluation
    if (!a->mock_data && sscanf(a->split, "%lf,%lf", &w_train, &w_valid) >= 1 && w_valid == 0)
        a->eval_iters = 0;
    if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
        core_usage_error("--device must be cpu or cuda, got '%s'", a->device);
    if (a->timeout_minutes < 0) core_usage_error("--distributed-timeout-minutes must be >= 0");
    if (a->max_nan_iters < 0 || a->mock_samples < 0 || a->num_threads < 0 || a->mock_vocab < 2)
        core_usage_error("--max-nan-iters %d, --mock-samples %d, --num-threads %d must be >= 0 and "
                         "--mock-vocab-size %d >= 2", a->max_nan_iters, a->mock_samples,
                         a->num_threads, a->mock_vocab);
    if (a->num_threads > 1024)  // OpenMP and BLAS set up per-thread state: 100000 threads crash
        core_usage_error("--num-threads %d: at most 1024 CPU threads per rank (0: the node's cores "
                         "shared by its ranks)", a->num_threads);
    if (given(argc, argv, "--use-distributed-optimizer") && no_zero1)
        core_usage_error("--use-distributed-optimizer and --no-distributed-optimizer contradict each other");
    if (strcmp(a->dist_backend, "nccl") && strcmp(a->dist_backend, "staged"))
        core_usage_error("--distributed-backend must be nccl or staged, got '%s'", a->dist_backend);
    if (strcmp(a->pipeline_schedule, "1f1b") && strcmp(a->pipeline_schedule, "gpipe"))
        core_usage_error("--pipeline-schedule must be 1f1b or gpipe, got '%s'", a->pipeline_schedule);
    if (a->ddp_bucket_size < 0) core_usage_error("--ddp-bucket-size must be >= 0");
    if (rc_gran && strcmp(rc_gran, "full") && strcmp(rc_gran, "selective"))
        core_usage_error("--recompute-granularity must be full or selective, got '%s'", rc_gran);
    if (strcmp(rc_method, "uniform") && strcmp(rc_method, "block"))
        core_usage_error("--recompute-method must be uniform or block, got '%s'", rc_method);
    if (recompute_activations && rc_gran && strcmp(rc_gran, "selective"))
        core_usage_error("--recompute-activations (selective) contradicts --recompute-granularity %s", rc_gran);
    m->recompute = rc_gran && !strcmp(rc_gran, "full") ? GPT_RECOMPUTE_FULL
                 : (rc_gran || recompute_activations) ? GPT_RECOMPUTE_SELECTIVE : GPT_RECOMPUTE_NONE;
    m->recompute_block = !strcmp(rc_method, "block");
    if (m->recompute == GPT_RECOMPUTE_FULL && m->recompute_num_layers < 1)
        core_usage_error("--recompute-num-layers must be >= 1, got %d", m->recompute_num_layers);
    if (a->bf16 && a->fp16) core_usage_error("--bf16 and --fp16 contradict each other: choose one");
    if ((a->bf16 || a->fp16) && strcmp(a->device, "cuda"))
        core_usage_error("--%s needs --device cuda: the CPU backend computes in fp32 only",
                         a->bf16 ? "bf16" : "fp16");
    if (a->loss_scale < 0 || a->initial_loss_scale <= 0 || a->min_loss_scale <= 0 ||
        a->min_loss_scale > a->initial_loss_scale || a->loss_scale_window <= 0 || a->hysteresis <= 0)
        core_usage_error("loss scaling: need --loss-scale %g >= 0, 0 < --min-loss-scale %g <= "
                         "--initial-loss-scale %g, --loss-scale-window %d and --hysteresis %d > 0",
                         a->loss_scale, a->min_loss_scale, a->initial_loss_scale,
                         a->loss_scale_window, a->hysteresis);
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
