// train/train_args.c: flag table and consistency checks for `megac train`.
#include "train_args.h"
#include "model/gpt_cp.h"  // defines: gpt_cp_check
#include "core/args.h"
#include "core/check.h"
#include "model/gpt_flags.h"  // defines: gpt_flags_specs (the model's flags, shared with plan)
#include "data/sampler.h"  // defines: data_parse_split
#include "pipeline/pp_interleaved.h"  // defines: pp_ilv_check, PP_ILV_MAX_CHUNKS

#include <stdint.h>  // defines: INT32_MAX
#include <stdio.h>   // defines: sscanf
#include <string.h>

static const char *USAGE =
    "usage: [mpiexec -n N] megac train [flags]\n"
    "  Pretrain a GPT-2 model. TP x PP x DP = N ranks; DP = N / (TP x PP).\n"
    "  Data: --data-path FILE.h5 (from `megac preprocess`) or a Megatron PREFIX (PREFIX.bin/.idx, with\n"
    "  --vocab-size), a blend --data-path 0.7 a.h5 0.3 b.h5,\n"
    "  --train-data-path/--valid-data-path (whole files per split), or --mock-data.";

// Size products are checked before any allocation: each tensor of one rank must have fewer
// than 2^31 elements (GPT-3 175B's largest, C x F, has 6e8). One line naming the flags, exit 2.
static void check_tensor_sizes(const GPTConfig *m, int micro_batch) {
    if (m->hidden_size <= 0 || m->ffn_hidden_size <= 0 || m->seq_length <= 0 || m->num_heads <= 0 ||
        micro_batch <= 0)
        return;  // reported by the range checks
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size, T = m->seq_length, B = micro_batch;
    const int64_t NH = m->num_heads, QKV = (NH + 2LL * gpt_kv_heads(m)) * gpt_head_size(m);
    const int64_t big = F > QKV ? F : QKV;
    const struct { const char *what; double n; } t[] = {
        {"--hidden-size x --ffn-hidden-size (MLP weight)", (double)C * F},
        {"(heads + 2 x groups) x head size x --hidden-size (attention QKV weight)", (double)QKV * C},
        {"--micro-batch-size x --seq-length x max(--ffn-hidden-size, QKV rows) (activations)",
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

// --rampup-batch-size START INCR SAMPLES (Megatron's; sample-based runs only). One line, exit 2.
static void parse_rampup(TrainArgs *a, const CoreStrList *l, int64_t train_samples) {
    a->rampup = (TrainRampup){.global_batch = a->global_batch};
    if (l->n == 0) return;
    int64_t v[3] = {0, 0, 0};
    int ok = l->n == 3;
    for (int i = 0; ok && i < 3; i++) v[i] = core_parse_i64(l->items[i], &ok);
    if (!ok)
        core_usage_error("--rampup-batch-size takes three whole numbers: START INCR SAMPLES "
                         "(e.g. --rampup-batch-size 16 8 300000)");
    if (!train_samples)
        core_usage_error("--rampup-batch-size needs --train-samples (as in Megatron: no batch-size "
                         "ramp-up for iteration-based training)");
    a->rampup = (TrainRampup){.start = v[0], .incr = v[1], .samples = v[2], .global_batch = a->global_batch};
    char err[512];
    if (train_rampup_check(&a->rampup, err, (int)sizeof err)) core_usage_error("%s", err);
}

// 1 if flag appears in argv (for on-by-default flags whose table entry shows the default).
static int given(int argc, char **argv, const char *flag) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

// --num-layers-per-virtual-pipeline-stage N / --virtual-pipeline-model-parallel-size V into
// a->vpp (V = num-layers / (PP x N)), and the combinations the interleaved schedule refuses.
// One line, exit 2. (m a multiple of PP is checked with the world size.)
static void parse_virtual_pipeline(TrainArgs *a, int per_stage, int size) {
    const GPTConfig *m = &a->model;
    a->vpp = 1;
    if (!per_stage && !size) return;
    if (per_stage < 0 || size < 0)
        core_usage_error("--num-layers-per-virtual-pipeline-stage %d / --virtual-pipeline-model-parallel-size "
                         "%d must be > 0", per_stage, size);
    int pp = a->pp > 0 ? a->pp : 1;
    if (per_stage && (m->num_layers % (pp * per_stage)))
        core_usage_error("--num-layers %d is not divisible by pipeline-model-parallel-size %d x "
                         "--num-layers-per-virtual-pipeline-stage %d", m->num_layers, pp, per_stage);
    int v = per_stage ? m->num_layers / (pp * per_stage) : size;
    if (per_stage && size && v != size)
        core_usage_error("--num-layers-per-virtual-pipeline-stage %d gives %d model chunks per pipeline "
                         "rank, but --virtual-pipeline-model-parallel-size is %d", per_stage, v, size);
    if (v > PP_ILV_MAX_CHUNKS)
        core_usage_error("--virtual-pipeline-model-parallel-size %d: at most %d model chunks per pipeline rank",
                         v, PP_ILV_MAX_CHUNKS);
    a->vpp = v;
    if (v == 1) return;
    if (pp < 2)
        core_usage_error("the interleaved schedule (--virtual-pipeline-model-parallel-size %d) needs "
                         "--pipeline-model-parallel-size >= 2, got %d", v, a->pp);
    if (m->num_layers % (pp * v))
        core_usage_error("--num-layers %d is not divisible by pipeline-model-parallel-size %d x "
                         "--virtual-pipeline-model-parallel-size %d", m->num_layers, pp, v);
    const char *other = a->sharding >= OPTIM_SHARD_GRADS ? "--data-parallel-sharding-strategy optim_grads(_params)"
                      : strcmp(a->pipeline_schedule, "1f1b") ? "--pipeline-schedule gpipe"
                      : (m->first_stage_layers || m->last_stage_layers) ? "--decoder-first/last-pipeline-num-layers"
                      : a->rampup.start ? "--rampup-batch-size" : NULL;
    if (other)
        core_usage_error("the interleaved schedule (--virtual-pipeline-model-parallel-size %d) does not "
                         "support %s yet", v, other);
}

// --data-parallel-sharding-strategy (Megatron-Core's names) against --no/--use-distributed-
// optimizer and against what ZeRO-2/3 do not support yet. One line naming both, exit 2.
static void parse_sharding(TrainArgs *a, const char *name, int argc, char **argv, int no_zero1) {
    a->sharding = no_zero1 ? OPTIM_NO_SHARD : OPTIM_SHARD_OPTIM;
    if (!name) return;
    int s = optim_sharding_parse(name);
    if (s < 0)
        core_usage_error("--data-parallel-sharding-strategy must be no_shard, optim, optim_grads or "
                         "optim_grads_params, got '%s'", name);
    if (no_zero1 && s != OPTIM_NO_SHARD)
        core_usage_error("--no-distributed-optimizer (no_shard) contradicts "
                         "--data-parallel-sharding-strategy %s", name);
    if (given(argc, argv, "--use-distributed-optimizer") && s == OPTIM_NO_SHARD)
        core_usage_error("--use-distributed-optimizer contradicts --data-parallel-sharding-strategy no_shard");
    a->sharding = s;
    a->zero1 = s != OPTIM_NO_SHARD;
    if (s < OPTIM_SHARD_GRADS) return;
    if (a->ddp_bucket_size != 0)
        core_usage_error("--data-parallel-sharding-strategy %s (%s) does not support --ddp-bucket-size "
                         "(its buckets are the layers)", name, optim_sharding_label((OptimSharding)s));
}

void train_args_parse(TrainArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
    GPTConfig *m = &a->model;
    GPTFlagText mt;
    gpt_flags_init(m, &mt);  // the model's flags are model/gpt_flags.c's table, shared with plan
    a->tp = a->pp = a->cp = 1;
    a->cp_comm_type = "p2p";
    a->micro_batch = 4;
    a->global_batch = 8;
    a->train_iters = 100;
    a->seed = 1234;
    a->split = "969,30,1";
    a->mock_vocab = TRAIN_MOCK_VOCAB_DEFAULT;
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
    double dec_lr = 0, dec_min_lr = -1;  // --decoupled-lr (0: off), --decoupled-min-lr (-1: --min-lr)
    double lr = 3e-4, min_lr = 0, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, clip = 1.0;  // Megatron's
    double warmup_fraction = -1, hidden_dropout = 0.1, attention_dropout = 0.1;  // Megatron's
    int64_t train_samples = 0, warmup_samples = -1, decay_samples = -1;
    int vpp_layers = 0, vpp_size = 0;
    CoreStrList rampup = {0}, steps = {0};
    int64_t warmup = 0, decay = -1, seed = 1234;
    const char *style = "cosine";
    int no_zero1 = 0, use_zero1 = 1, no_signal_handler = 0;  // use_zero1 1: --help shows the default
    const char *sharding = NULL;
    ArgSpec specs[] = {
        {"--tensor-model-parallel-size", ARG_INT, &a->tp, "TP"},
        {"--context-parallel-size", ARG_INT, &a->cp, "CP: ranks sharing each sequence (2 x CP chunks, ring attention; CP > 1 runs the fused attention of --use-flash-attn)"},
        {"--cp-comm-type", ARG_STR, &a->cp_comm_type, "CP's K/V exchange: " CP_COMM_TYPES_HELP},
        {"--pipeline-model-parallel-size", ARG_INT, &a->pp, "PP"},
        {"--micro-batch-size", ARG_INT, &a->micro_batch, "sequences per micro-batch (Megatron: required; megac: 4, for small runs)"},
        {"--global-batch-size", ARG_INT, &a->global_batch, "sequences per iteration (all DP ranks) (Megatron: --micro-batch-size x DP; megac: 8, for small runs)"},
        {"--train-iters", ARG_I64, &a->train_iters, "iterations (Megatron: required, or --train-samples; megac: 100, for small runs)"},
        {"--lr", ARG_FLOAT, &lr, "peak learning rate (Megatron: required; megac: 3e-4, GPT-3 small's)"},
        {"--min-lr", ARG_FLOAT, &min_lr, "final learning rate"},
        {"--decoupled-lr", ARG_FLOAT, &dec_lr, "peak learning rate of the embedding and output layer (Megatron's), same warm-up and decay (0: --lr)"},
        {"--decoupled-min-lr", ARG_FLOAT, &dec_min_lr, "with --decoupled-lr: their final learning rate (default: --min-lr)"},
        {"--lr-decay-style", ARG_STR, &style, "constant | linear | cosine (Megatron: linear; megac: cosine, as GPT-3 and llm.c)"},
        {"--lr-warmup-iters", ARG_I64, &warmup, "linear warm-up iterations"},
        {"--lr-warmup-fraction", ARG_FLOAT, &warmup_fraction, "warm-up as a fraction of --lr-decay-iters"},
        {"--train-samples", ARG_I64, &train_samples, "sequences to train on (instead of --train-iters; the learning-rate schedule then counts samples)"},
        {"--lr-warmup-samples", ARG_I64, &warmup_samples, "with --train-samples: warm-up in sequences"},
        {"--lr-decay-samples", ARG_I64, &decay_samples, "with --train-samples: decay in sequences"},
        {"--hidden-dropout", ARG_FLOAT, &hidden_dropout, "dropout probability of the embeddings and of the attention and MLP outputs before their residual adds (0: off; masks from seed, iteration and global indices: every layout trains the same model)"},
        {"--attention-dropout", ARG_FLOAT, &attention_dropout, "dropout probability of the attention probabilities (0: off; CUDA --bf16/--fp16 --use-flash-attn: only 0 runs the tensor-core kernels)"},
        {"--step-batch-size-schedule", ARG_LIST, &steps, "TOKENS:BATCH ...: the global batch is BATCH from TOKENS consumed tokens on (K/M/B/T suffixes; the first at 0; the last is --global-batch-size)"},
        {"--rampup-batch-size", ARG_LIST, &rampup, "START INCR SAMPLES: the global batch grows from START by INCR to --global-batch-size over SAMPLES samples (needs --train-samples)"},
        {"--num-layers-per-virtual-pipeline-stage", ARG_INT, &vpp_layers, "layers per model chunk: interleaved 1F1B with v = num-layers / (PP x this) chunks per pipeline rank (bubble (PP-1)/(v x m); m a multiple of PP)"},
        {"--virtual-pipeline-model-parallel-size", ARG_INT, &vpp_size, "v, model chunks per pipeline rank (interleaved 1F1B; instead of the flag above)"},
        {"--overlap-grad-reduce", ARG_BOOL, &a->overlap_grad_reduce, "DDP / ZeRO-1: reduce each --ddp-bucket-size bucket during the last micro-batch's backward, once its gradients are final (needs several buckets); ZeRO-2: each layer's reduce-scatter runs in the background, in every micro-batch (same results; ZeRO-3 refused)"},
        {"--lr-decay-iters", ARG_I64, &decay, "decay iterations (default: train-iters)"},
        {"--weight-decay", ARG_FLOAT, &wd, "AdamW weight decay (weights and embeddings)"},
        {"--adam-beta1", ARG_FLOAT, &b1, "AdamW beta1"},
        {"--adam-beta2", ARG_FLOAT, &b2, "AdamW beta2"},
        {"--adam-eps", ARG_FLOAT, &eps, "AdamW epsilon"},
        {"--clip-grad", ARG_FLOAT, &clip, "clip the global gradient norm to this (0: off)"},
        {"--seed", ARG_I64, &seed, "seed of initialisation and data order"},
        {"--data-path", ARG_LIST, &a->data_path, "HDF5 token file(s) from `megac preprocess` or Megatron .bin/.idx PREFIXes (with --vocab-size): FILE, or a blend W1 FILE1 W2 FILE2 ... (cut by --split)"},
        {"--train-data-path", ARG_LIST, &a->train_data_path, "training files (blend syntax), used whole; instead of --data-path"},
        {"--valid-data-path", ARG_LIST, &a->valid_data_path, "validation files (blend syntax), used whole; with --train-data-path"},
        {"--test-data-path", ARG_LIST, &a->test_data_path, "test files (blend syntax), used whole, evaluated at the end; with --train-data-path"},
        {"--split", ARG_STR, &a->split, "train,valid,test weights of the documents: commas or slashes, spaces allowed ('969, 30, 1', Megatron's legacy default)"},
        {"--vocab-size", ARG_I64, &a->data_vocab, "for Megatron .bin/.idx data, which holds no vocabulary: token ids 0..N-1 and the end-of-document id N, N + 1 ids (Megatron's NullTokenizer); HDF5 files carry theirs (N + 1 must equal it); with --mock-data: --mock-vocab-size N + 1"},
        {"--tokenizer-type", ARG_STR, &a->tok_type, "GPT2BPETokenizer, HuggingFaceTokenizer or NullTokenizer (with --vocab-size): train reads token ids; the tokenizer is loaded to check that the data's vocabulary and end-of-document id are its own (and gives them to Megatron .bin/.idx data and --mock-data)"},
        {"--vocab-file", ARG_STR, &a->vocab_file, "GPT2BPETokenizer: GPT-2's vocab.json"},
        {"--merge-file", ARG_STR, &a->merge_file, "GPT2BPETokenizer: GPT-2's merges.txt"},
        {"--tokenizer-model", ARG_STR, &a->tok_model, "HuggingFaceTokenizer: tokenizer.json or its directory"},
        {"--calculate-per-token-loss", ARG_BOOL, &a->per_token_loss, "the loss (and gradient) is the sum over the global batch's tokens over their count (Megatron's); differs from the default mean of micro-batch means only with --eod-mask-loss"},
        {"--eod-mask-loss", ARG_BOOL, &a->eod_mask_loss, "targets equal to the data's end-of-document id get loss weight 0; a micro-batch's loss is the mean over its other tokens (Megatron's)"},
        {"--reset-position-ids", ARG_BOOL, &a->reset_position_ids, "positions restart at 0 after each end-of-document token inside a sample (Megatron's)"},
        {"--reset-attention-mask", ARG_BOOL, &a->reset_attention_mask, "a token attends only to the earlier tokens of its own document; the EOD token ends its document (Megatron's)"},
        {"--mock-data", ARG_BOOL, &a->mock_data, "synthetic tokens instead of --data-path"},
        {"--mock-vocab-size", ARG_INT, &a->mock_vocab, "vocabulary of --mock-data"},
        {"--mock-samples", ARG_INT, &a->mock_samples, "distinct --mock-data samples (0: unlimited)"},
        {"--save", ARG_STR, &a->save, "checkpoint directory to write"},
        {"--load", ARG_STR, &a->load, "checkpoint directory to resume from"},
        {"--no-load-optim", ARG_BOOL, &a->no_load_optim, "--load reads the model only: fresh AdamW moments and step"},
        {"--no-load-rng", ARG_BOOL, &a->no_load_rng, "accepted for Megatron scripts: megac has no RNG state to load (dropout masks are a pure function of --seed, the iteration and global indices, and the data order follows --seed: a resume is exact)"},
        {"--finetune", ARG_BOOL, &a->finetune, "--load reads the model only and the run starts at iteration 0 (fresh optimizer, data from the first sample)"},
        {"--save-interval", ARG_I64, &a->save_interval, "iterations between checkpoints (0: at the end only)"},
        {"--eval-interval", ARG_I64, &a->eval_interval, "iterations between validation runs"},
        {"--eval-iters", ARG_I64, &a->eval_iters, "batches per validation run, and of the test evaluation at the end (Megatron: 100; megac: 10, for small runs)"},
        {"--log-interval", ARG_I64, &a->log_interval, "iterations between log lines (Megatron: 100; megac: 10, for small runs)"},
        {"--log-json", ARG_STR, &a->log_json, "write one JSON object per iteration to FILE"},
        {"--device", ARG_STR, &a->device, "cpu | cuda"},
        {"--no-tf32", ARG_BOOL, &a->no_tf32, "CUDA: strict fp32 GEMMs (default: TF32 tensor cores)"},
        {"--distributed-backend", ARG_STR, &a->dist_backend, "CUDA: nccl | staged (device->host->MPI; several ranks may share a GPU: for testing)"},
        {"--num-threads", ARG_INT, &a->num_threads, "CPU threads per rank (0: cores / ranks on the node)"},
        {"--use-distributed-optimizer", ARG_BOOL, &use_zero1, "ZeRO-1 optimizer sharding over DP (Megatron: off; megac: on, as it saves memory and gives the same results as DDP)"},
        {"--no-distributed-optimizer", ARG_BOOL, &no_zero1, "plain DDP: all-reduce, full optimizer per rank"},
        {"--data-parallel-sharding-strategy", ARG_STR, &sharding, "no_shard (DDP; Megatron's default) | optim (ZeRO-1, megac's default: see --use-distributed-optimizer) | optim_grads (ZeRO-2: + gradients) | optim_grads_params (ZeRO-3 / FSDP: + parameters)"},
        {"--distributed-timeout-minutes", ARG_FLOAT, &a->timeout_minutes, "end the job if a collective or p2p transfer of the training step waits longer"},
        {"--max-nan-iters", ARG_INT, &a->max_nan_iters, "stop after this many NaN/Inf steps in a row"},
        {"--exit-signal-handler", ARG_BOOL, &a->exit_signal_handler, "SIGTERM/SIGINT/SIGUSR1/SIGUSR2 stop at the next iteration with a checkpoint, exit 0 (Megatron: off; megac: on, so a time limit never costs work)"},
        {"--no-exit-signal-handler", ARG_BOOL, &no_signal_handler, "let those signals end the run at once (no checkpoint)"},
        {"--exit-duration-in-mins", ARG_FLOAT, &a->exit_duration_mins, "stop (save, exit 0) once the run has lasted this long (0: off)"},
        {"--exit-interval", ARG_I64, &a->exit_interval, "stop (save, exit 0) at an iteration divisible by this (0: off)"},
        {"--overwrite-newer-checkpoints", ARG_BOOL, &a->overwrite_newer, "allow saving into a --save directory whose latest checkpoint is newer than this run (start over)"},
        {"--trace", ARG_STR, &a->trace, "write a Chrome trace (Perfetto) of the steps to FILE"},
        {"--pipeline-schedule", ARG_STR, &a->pipeline_schedule, "1f1b | gpipe (all-forward-all-backward)"},
        {"--sequence-parallel", ARG_BOOL, &a->sequence_parallel, "split LayerNorm regions along the sequence over TP"},
        {"--overlap-param-gather", ARG_BOOL, &a->overlap_param_gather, "ZeRO-1: all-gather each updated --ddp-bucket-size bucket in the background, waited for by the next forward's first layer reading it; ZeRO-3: gather the next layer's weights while the current one computes (same results; DDP and ZeRO-2 refused)"},
        {"--ddp-bucket-size", ARG_I64, &a->ddp_bucket_size, "gradient elements per DP reduction bucket (0: one; Megatron with --overlap-grad-reduce: max(4e7, 1e6 x DP), megac: set it for overlap)"},
        {"--bf16", ARG_BOOL, &a->bf16, "bf16 activations and weight copies, fp32 master weights, grads and optimizer"},
        {"--fp16", ARG_BOOL, &a->fp16, "fp16 activations and weight copies with loss scaling, fp32 master weights"},
        {"--loss-scale", ARG_FLOAT, &a->loss_scale, "--fp16: static loss scale (default: dynamic)"},
        {"--initial-loss-scale", ARG_FLOAT, &a->initial_loss_scale, "--fp16: first dynamic loss scale (2^32)"},
        {"--min-loss-scale", ARG_FLOAT, &a->min_loss_scale, "--fp16: the dynamic scale never falls below this"},
        {"--loss-scale-window", ARG_INT, &a->loss_scale_window, "--fp16: clean steps before the scale doubles"},
        {"--hysteresis", ARG_INT, &a->hysteresis, "--fp16: overflows tolerated before the scale halves"},
        {"--grad-reduce-in-bf16", ARG_BOOL, &a->grad_reduce_in_bf16, "reduce gradients over DP in bf16 (default fp32; any device)"},
    };
    enum { N_OWN = sizeof specs / sizeof specs[0], N_MINE = GPT_FLAGS_N + N_OWN + TRAIN_LOG_FLAGS_N };
    ArgSpec all[N_MINE + CORE_COMPAT_MAX];  // the model's, train's own, logging, Megatron's
    memcpy(all + gpt_flags_specs(all, m, &mt), specs, sizeof specs);
    train_log_flags_specs(all + GPT_FLAGS_N + N_OWN, &a->logf);  // train/train_logline.c
    int n_all = N_MINE + core_compat_specs(all + N_MINE, &a->compat);
    core_args_parse(USAGE, all, n_all, argc, argv);
    train_log_flags_check(&a->logf);
    if (core_world_rank() <= 0) core_compat_notice(&a->compat, "megac train: ", stdout);
    gpt_flags_finish(m, &mt);  // F, max positions, recomputation (bad values: exit 2)
    a->ep = mt.ep;
    a->etp = mt.etp;
    check_tensor_sizes(m, a->micro_batch);
    if (optim_lr_style_parse(style, &a->lr.style) != 0)
        core_usage_error("--lr-decay-style must be constant, linear or cosine, got '%s'", style);
    if (!(hidden_dropout >= 0 && hidden_dropout < 1) || !(attention_dropout >= 0 && attention_dropout < 1))
        core_usage_error("--hidden-dropout %g / --attention-dropout %g: a dropout probability must be "
                         "in [0, 1)", hidden_dropout, attention_dropout);
    a->hidden_dropout = hidden_dropout;
    a->attention_dropout = attention_dropout;
    if (train_samples < 0 || (train_samples && train_iters_given(argc, argv)))
        core_usage_error("give --train-iters or --train-samples (> 0), not both");
    parse_rampup(a, &rampup, train_samples);
    if (steps.n) {  // Megatron's step schedule (rampup.h)
        char err[512];
        if (a->rampup.start) core_usage_error("--step-batch-size-schedule and --rampup-batch-size exclude each other");
        int gbs = a->global_batch;
        if (train_step_schedule_parse(&a->rampup, (const char *const *)steps.items, steps.n,
                                      m->seq_length, err, (int)sizeof err))
            core_usage_error("%s", err);
        a->global_batch = a->rampup.global_batch;
        if (given(argc, argv, "--global-batch-size") && gbs != a->global_batch)  // Megatron refuses both
            core_usage_error("--global-batch-size %d differs from the last batch of "
                             "--step-batch-size-schedule, %d: give one, or make them agree", gbs, a->global_batch);
    }
    if (train_samples) {  // Megatron's sample-based run: the schedule counts samples
        if (warmup > 0 || decay >= 0)
            core_usage_error("with --train-samples give --lr-warmup-samples / --lr-decay-samples "
                             "(not --lr-warmup-iters / --lr-decay-iters)");
        a->train_samples = train_samples;
        a->lr_in_samples = 1;
        a->train_iters = train_rampup_iters(&a->rampup, 0, train_samples, NULL);
        warmup = warmup_samples >= 0 ? warmup_samples : 0;
        decay = decay_samples >= 0 ? decay_samples : train_samples;
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
    if (dec_min_lr >= 0 && dec_lr <= 0)
        core_usage_error("--decoupled-min-lr %g needs --decoupled-lr", dec_min_lr);
    if (dec_lr < 0 || (dec_lr > 0 && (dec_min_lr >= 0 ? dec_min_lr : min_lr) > dec_lr))
        core_usage_error("need 0 <= --decoupled-min-lr (or --min-lr) %g <= --decoupled-lr %g",
                         dec_min_lr >= 0 ? dec_min_lr : min_lr, dec_lr);
    a->lr_decoupled = a->lr;
    a->lr_decoupled.lr = dec_lr;
    a->lr_decoupled.min_lr = dec_min_lr >= 0 ? dec_min_lr : min_lr;
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
    train_args_check_data(a);
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
    parse_sharding(a, sharding, argc, argv, no_zero1);
    char cp_err[256];
    int cp_comm = cp_comm_type_parse(a->cp_comm_type, cp_err, sizeof cp_err);
    if (cp_comm < 0) core_usage_error("%s", cp_err);
    if (a->cp > 1) m->use_flash_attn = 1;  // the ring's windows are the fused kernels' (Megatron: TE's)
    if (gpt_cp_check(m, a->tp, a->cp, (CPCommType)cp_comm, cp_err, sizeof cp_err)) core_usage_error("%s", cp_err);
    if (a->cp > 1 && a->eod_mask_loss)  // each CP rank would count its own chunks' EOD tokens
        core_usage_error("--eod-mask-loss with --context-parallel-size %d is not implemented yet "
                         "(the masked mean needs the CP group's count)", a->cp);
    if (a->cp > 1 && (a->reset_position_ids || a->reset_attention_mask))
        core_usage_error("--reset-position-ids/--reset-attention-mask with --context-parallel-size "
                         "%d are not implemented (a rank's chunks need the EODs before them)", a->cp);
    if (a->overlap_param_gather && a->sharding != OPTIM_SHARD_PARAMS && a->sharding != OPTIM_SHARD_OPTIM)
        core_usage_error("--overlap-param-gather needs the distributed optimizer (ZeRO-1, the default, or "
                         "--data-parallel-sharding-strategy optim_grads_params); got %s",
                         optim_sharding_label((OptimSharding)a->sharding));
    if (a->overlap_grad_reduce && a->sharding == OPTIM_SHARD_PARAMS)
        core_usage_error("--overlap-grad-reduce works with DDP, ZeRO-1 and ZeRO-2 (--data-parallel-sharding-strategy "
                         "no_shard / optim / optim_grads); ZeRO-3 (optim_grads_params) does not support it yet");
    parse_virtual_pipeline(a, vpp_layers, vpp_size);
    if (a->bf16 && a->fp16) core_usage_error("--bf16 and --fp16 contradict each other: choose one");
    if (a->loss_scale < 0 || a->initial_loss_scale <= 0 || a->min_loss_scale <= 0 ||
        a->min_loss_scale > a->initial_loss_scale || a->loss_scale_window <= 0 || a->hysteresis <= 0)
        core_usage_error("loss scaling: need --loss-scale %g >= 0, 0 < --min-loss-scale %g <= "
                         "--initial-loss-scale %g, --loss-scale-window %d and --hysteresis %d > 0",
                         a->loss_scale, a->min_loss_scale, a->initial_loss_scale,
                         a->loss_scale_window, a->hysteresis);
    if (m->use_flash_attn && !strcmp(a->device, "cuda") && m->num_heads > 0 && gpt_head_size(m) > 128)
        core_usage_error("--use-flash-attn on --device cuda needs a head size <= 128, got %d "
                         "(--kv-channels, or --hidden-size %d / --num-attention-heads %d)",
                         gpt_head_size(m), m->hidden_size, m->num_heads);
}
