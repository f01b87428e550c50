// train/trainer.c: set-up and the training step (its reductions: train/trainer_sync.c).
//
// A step: zero gradients -> the pipeline schedule runs m micro-batches forward and backward
// -> tied-embedding gradients summed over the embedding group (first + last stage) ->
// gradients averaged over data parallelism (reduce-scatter with ZeRO-1) -> global gradient
// norm (each rank's unique share, summed over all ranks) -> skip on NaN/Inf, else clip and
// AdamW -> parameters all-gathered (ZeRO-1). ZeRO-2/3 reduce-scatter each layer's gradients
// inside the backward instead, through the model's hook (distributed/dist_sync.h).
#include "trainer.h"
#include "train_outputs.h"
#include "trainer_sync.h"  // defines: trainer_reduce_grads, trainer_global_sums
#include "train_stop.h"
#include "tb_events.h"  // defines: tb_close
#include "core/check.h"
#include "core/crash.h"  // defines: core_crash_install
#include "core/host.h"   // defines: core_host_rank, core_host_threads, core_host_device
#include "core/stop.h"   // defines: core_stop_signal_name
#include "core/timer.h"  // defines: core_now
#include "distributed/dist_geometry.h"  // defines: dist_pad_multiple
#ifdef MEGAC_HAVE_CUDA
#include "core/check_cuda.h"  // defines: CUDA_CHECK
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The backend of --device: a CPU backend with this rank's share of its host's cores, or the
// CUDA backend on this rank's GPU of its host (core/host.h). Bad choices: exit 2 on all.
static Backend *make_backend(const TrainArgs *a) {
    CoreHostRank host = core_host_rank();
    BackendDType act = a->bf16 ? BACKEND_BF16 : a->fp16 ? BACKEND_F16 : BACKEND_F32;
    if (!strcmp(a->device, "cuda")) {
#ifdef MEGAC_HAVE_CUDA
        int n_dev = 0;
        if (backend_cuda_available()) CUDA_CHECK(cudaGetDeviceCount(&n_dev));
        int device = core_host_device(host, n_dev, !strcmp(a->dist_backend, "staged"));
        Backend *be = backend_cuda_create(device, a->no_tf32 ? BACKEND_MATH_FP32 : BACKEND_MATH_TF32, act);
        be->attn = a->model.attn_kernels;  // --attention-backend: cuDNN or megac's kernels
        return be;
#else
        core_usage_error("--device cuda: megac was built without CUDA");
#endif
    }
    // --attention-backend fused on the CPU: megac's fused kernels, said once
    if (a->model.attn_kernels == BACKEND_ATTN_CUDNN && core_world_rank() == 0)
        fprintf(stderr, "attention: --attention-backend fused: cuDNN needs --device cuda; megac's "
                "fused kernels run instead\n");
    return backend_cpu_create(core_host_threads(a->num_threads, host.local_size), act);
}

// Events a --trace run records: per step about 5 per micro-batch (forward, backward, their
// p2p waits) + step, gradient sync, optimizer; per evaluation 3 per micro-batch.
static size_t trace_capacity(const TrainArgs *a, int n_micro) {
    double evals = (double)a->train_iters / a->eval_interval + 1;
    double n = (double)a->train_iters * (5.0 * n_micro + 3) + evals * a->eval_iters * 3.0 * n_micro;
    return n < 1024 ? 1024 : n > (1 << 22) ? (size_t)1 << 22 : (size_t)n;
}

// This rank's model stage and its optimizer; with the interleaved schedule v chunks, chunk c
// being virtual stage c*PP + pp_rank of PP*v (so its layers, parameter names and
// initialisation follow the global layer index), each with its own optimizer.
static void create_model_chunks(Trainer *t, PPScheduleKind kind) {
    const TrainArgs *a = &t->args;
    ProcessGrid *g = t->grid;
    int v = a->vpp > 1 ? a->vpp : 1, r = g->coord.pp_rank, slots[PP_ILV_MAX_CHUNKS];
    if (v > 1) pp_ilv_slots(a->pp, v, t->n_micro, r, slots);
    else slots[0] = pp_schedule_slots(kind, a->pp, r, t->n_micro);
    t->n_chunks = v;
    t->chunks = core_calloc((size_t)v, sizeof *t->chunks);
    t->opts = core_calloc((size_t)v, sizeof *t->opts);
    t->wte_chunk = t->wte_param = -1;
    for (int c = 0; c < v; c++) {
        GPTStage st = {c * a->pp + r, a->pp * v, a->micro_batch, slots[c], a->seed,
                       dist_pad_multiple(dist_pad_ranks(t->dp * a->cp, g->edp->size)),  // (both
                       a->sequence_parallel,                              // regions' slices even)
                       (CPCommType)cp_comm_type_parse(a->cp_comm_type, NULL, 0), v};  // (checked)
        GPT *m = gpt_create(&a->model, t->be, g, &st);
        OptimSharding sh = a->sharding >= OPTIM_SHARD_GRADS ? (OptimSharding)a->sharding
                         : a->zero1 ? OPTIM_SHARD_OPTIM : OPTIM_NO_SHARD;
        // the ranks holding the same weights: dp x cp (each CP rank saw other tokens)
        Optimizer *o = optim_create(t->be, g->dp_cp, g->edp, sh, m, g->coord.tp_rank,  // (edp: the
                                    (size_t)a->ddp_bucket_size, g->tp);  // experts' copies)
        if (a->grad_reduce_in_bf16) optim_set_reduce_bf16(o);
        dist_sync_enable_overlap(o->sync, a->overlap_grad_reduce, a->overlap_param_gather,  // one hook
                                 t->n_micro);  // (train_args.c checks what each strategy supports)
        optim_set_weight_copies(o, m);  // bf16/fp16: AdamW writes the copies where it can
        if (a->offload_params) optim_offload_params(o);  // (ZeRO-3, fraction 1: checked)
        if (a->optimizer_cpu_offload)  // (CUDA, DDP / ZeRO-1: train_args.c checks)
            optim_set_offload(o, a->optimizer_offload_fraction,
                              core_host_threads(a->num_threads, core_host_rank().local_size));
        if (a->overlap_cpu_optimizer_d2h_h2d) optim_set_offload_overlap(o);
        if (o->n_padded != m->n_alloc)  // the optimizer reads/writes n_padded floats
            core_fatal("optimizer buffer %zu floats, model buffers %zu", o->n_padded, m->n_alloc);
        int wte = gpt_param_index(m, "wte");
        if (wte >= 0) t->wte_chunk = c, t->wte_param = wte;
        gpt_set_dropout(m, (float)a->hidden_dropout, (float)a->attention_dropout, a->seed);
        t->chunks[c] = m;
        t->opts[c] = o;
    }
    if (v > 1) gpt_share_workspace(t->chunks, v);  // one chunk computes at a time
    t->model = t->chunks[0];
    t->opt = t->opts[0];
    train_moe_bias(t);  // --moe-router-enable-expert-bias: zero, until a checkpoint or a step
}

Trainer *trainer_create(const TrainArgs *args) {
    Trainer *t = core_calloc(1, sizeof *t);
    t->args = *args;
    TrainArgs *a = &t->args;
    t->last_saved = -1;
    train_stop_init(t);  // from here a stop signal waits for the first iteration boundary
    int world = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    train_args_check_layout(a, world);
    if (a->mock_data) {
        t->data = batches_mock_create(a->seed, a->mock_vocab, a->mock_samples, a->model.seq_length);
    } else {
        t->data = batches_from_args(a);
    }
    a->model.vocab_size = batches_vocab_size(t->data);
    char err[512];
    if (gpt_config_check(&a->model, a->tp, a->pp, err, sizeof err) != 0) core_usage_error("%s", err);

    int cuda = !strcmp(a->device, "cuda");
    t->be = make_backend(a);
    PGridCommKind ck = !cuda ? PGRID_COMM_MPI
                     : !strcmp(a->dist_backend, "staged") ? PGRID_COMM_STAGED : PGRID_COMM_NCCL;
    PGridDims sizes = train_args_dims(a);
    t->grid = pgrid_create(&sizes, ck, cuda ? t->be->u.cuda.stream : NULL, a->timeout_minutes * 60.0);
    ProcessGrid *g = t->grid;
    t->dp = g->dims.dp;
    t->n_micro = a->global_batch / (a->micro_batch * t->dp);
    PPScheduleKind kind = (PPScheduleKind)pp_schedule_parse(a->pipeline_schedule);
    create_model_chunks(t, kind);
    for (int c = 0; c < t->n_chunks && a->eod_mask_loss; c++)  // (not mock data: train_args.c)
        gpt_set_loss_mask(t->chunks[c], batches_eod_id(t->data));
    for (int c = 0; c < t->n_chunks; c++)  // --reset-*: no-op without them (cp 1: train_args.c)
        gpt_set_documents(t->chunks[c], batches_eod_id(t->data), a->reset_position_ids,
                          a->reset_attention_mask);
    size_t N = (size_t)a->micro_batch * a->model.seq_length;  // (the whole sequences)
    t->cursor = (BatchCursor){t->data, SPLIT_TRAIN, 0, a->global_batch, g->coord.dp_rank, t->dp,
                              a->micro_batch, a->model.seq_length, g->tp_host,
                              core_calloc(2 * N, sizeof(int)), a->cp, g->coord.cp_rank};
    size_t bucket_spans = 0;  // one trace span per DP bucket and step (+ its gather: ZeRO-1 overlap)
    int units = t->opt->sync->stage >= 2;  // ZeRO-2 --overlap-grad-reduce: one per unit and micro-batch
    for (int c = 0; c < t->n_chunks; c++)
        if (!units || a->overlap_grad_reduce)
            bucket_spans += (size_t)t->opts[c]->sync->n_buckets * (size_t)(units ? t->n_micro : 1) * (size_t)a->train_iters;
    if (a->overlap_param_gather) bucket_spans *= 2;
    if (bucket_spans > (size_t)1 << 22) bucket_spans = (size_t)1 << 22;
    t->trace = pp_trace_create(g->world, a->trace ? trace_capacity(a, t->n_micro * t->n_chunks) + bucket_spans : 0);
    t->dscale_base = 1.0 / ((double)N / a->cp * t->n_micro);
    t->scaler = a->fp16 ? loss_scale_init(a->loss_scale > 0 ? a->loss_scale : a->initial_loss_scale,
                                          a->min_loss_scale, a->loss_scale_window, a->hysteresis,
                                          a->loss_scale <= 0)
                        : loss_scale_init(1.0, 1.0, 1, 1, 0);
    pp_step_init(&t->step, t->model, g, kind, batches_get, &t->cursor, t->n_micro,
                 (float)t->dscale_base, t->trace);
    if (t->n_chunks > 1) pp_step_set_chunks(&t->step, t->chunks, t->n_chunks);
    t->faults = core_fault_from_env(g->coord.rank);  // test hooks
    core_crash_install(g->coord.rank);
    train_outputs_check(t);  // --log-json, --trace, --tensorboard-dir: writable, not an input of this run
    return t;
}

void trainer_destroy(Trainer *t) {
    if (!t) return;
    trainer_settle_params(t);  // --overlap-param-gather: nothing in flight past here
    if (t->log_json) fclose(t->log_json);
    tb_close(t->tb);  // every event was flushed when written (a failure already ended the run)
    pp_step_free(&t->step);
    pp_trace_destroy(t->trace);
    for (int c = 0; c < t->n_chunks; c++) {
        optim_destroy(t->opts[c]);
        gpt_destroy(t->chunks[c]);
    }
    free(t->opts);
    free(t->chunks);
    free(t->moe_sums);
    free(t->moe_bias);
    pgrid_destroy(t->grid);
    backend_destroy(t->be);
    batches_destroy(t->data);
    free(t->cursor.bcast);
    free(t);
}

// --calculate-per-token-loss with --eod-mask-loss: the unmasked targets of the whole global
// batch at the cursor, counted by every rank over its own micro-batches (read once more here;
// TP ranks read together, as the schedule does) and summed over the world (MPI, host
// memory), where each DP rank's count comes TP x PP times (its CP ranks count their own
// chunks); each unmasked token then weighs G T / that count. Collective over the world.
static void per_token_weight(Trainer *t, int G) {
    // a micro-batch's tokens and targets on this rank (under CP its two chunks of each sequence)
    size_t n = (size_t)t->args.micro_batch * t->args.model.seq_length / t->args.cp;
    int *tok = core_calloc(2 * n, sizeof(int)), *tgt = tok + n;
    int64_t eod = batches_eod_id(t->data);
    double kept = 0.0;
    for (int i = 0; i < t->step.n_micro; i++) {
        batches_get(&t->cursor, i, tok, tgt);
        for (size_t j = 0; j < n; j++) kept += tgt[j] != eod;
    }
    free(tok);
    comm_all_reduce(t->grid->world, &kept, 1, COMM_F64, COMM_SUM);
    kept /= (double)t->args.tp * t->args.pp;  // the CP ranks' chunks make each sequence once
    double w = kept > 0 ? (double)G * t->args.model.seq_length / kept : 0.0;
    for (int c = 0; c < t->n_chunks; c++) gpt_set_loss_mask_global(t->chunks[c], w);
}

// Points the batch cursor at `split` from sample `start` with global batch G and sets the
// step's micro-batches per DP rank, G / (micro-batch x DP). Never fails.
static void trainer_set_batch(Trainer *t, SplitKind split, int64_t start, int G) {
    t->cursor.split = split;
    t->cursor.batch_start = start;
    t->cursor.global_batch = G;
    t->step.n_micro = G / (t->args.micro_batch * t->dp);
    if (t->args.per_token_loss && t->args.eod_mask_loss) per_token_weight(t, G);
}

static void reset_stats(Comm *c, void *unused) {
    (void)unused;
    comm_stats_reset(c);
}

StepResult trainer_step(Trainer *t) {
    StepResult r = {0};
    int64_t it = t->iteration + 1;
    // this iteration's global batch (--rampup-batch-size), placed after the consumed samples
    int G = train_rampup_batch(&t->args.rampup, t->consumed_samples);
    trainer_set_batch(t, SPLIT_TRAIN, t->consumed_samples, G);
    // per-token loss gradient: 1 / (tokens of this rank's micro-batches: the model's N
    // positions each, its share of the sequence under CP); the DP x CP reduction averages
    t->dscale_base = 1.0 / ((double)t->step.n_micro * t->model->N);
    pgrid_for_each_comm(t->grid, reset_stats, NULL);  // the log reports one step's traffic
    core_fault_die_at(&t->faults, it);  // test hook MEGAC_TEST_DIE_AT_ITER
    core_fault_slow(&t->faults);        // test hook MEGAC_TEST_SLOW_ITER_MS
    for (int c = 0; c < t->n_chunks; c++) gpt_zero_grads(t->chunks[c]);
    double S = t->scaler.scale;  // gradients come out S times too large (fp16), else S = 1
    t->step.loss_scale = (float)(t->dscale_base * S);
    for (int c = 0; c < t->n_chunks; c++) gpt_dropout_step(t->chunks[c], it, 1);
    for (int c = 0; c < t->n_chunks; c++) dist_sync_begin_step(t->opts[c]->sync, t->step.n_micro);
    train_moe_begin_step(t);
    double loss_sum = pp_forward_backward(&t->step);
    r.param_gather_exposed_ms = trainer_take_gathers(t);  // the last update's, waited in the forward
    for (int c = 0; c < t->n_chunks; c++) gpt_dropout_step(t->chunks[c], it, 0);  // eval: none
    t->be->ops->sync(t->be);  // CUDA: time the reductions, not the backward still queued
    double t0 = pp_trace_begin(t->trace), exposed0 = core_now();
    trainer_reduce_grads(t);  // SP LayerNorm, tied embedding, DP (ends with a sync)
    // ZeRO-2/3: + what the backward's hooks waited for the reduce-scatters
    r.grad_sync_exposed_ms = (core_now() - exposed0 + dist_sync_take_hook_wait(t->opt->sync)) * 1e3;
    double sq = 0.0;  // interleaved: the norm and the clipping cover all chunks together
    for (int c = 0; c < t->n_chunks; c++) sq += optim_local_grad_sq(t->opts[c]);
    if (core_fault_nan_at(&t->faults, it)) sq = NAN;  // test hook MEGAC_TEST_NAN_AT_ITER
    trainer_global_sums(t, &sq, &loss_sum);
    train_moe_step_stats(t, &r);  // (no-op without experts)
    pp_trace_end(t->trace, PP_EV_GRAD_SYNC, -1, t0);
    r.grad_norm = sqrt(sq) / S;
    r.loss = loss_sum / ((double)G * t->args.model.seq_length);
    r.global_batch = G;
    // Megatron steps its scheduler after each successful update: iteration `it` uses the
    // schedule after it - 1 steps, less the fp16 overflow steps skipped so far
    int64_t pos = t->args.lr_in_samples ? t->consumed_samples - t->skipped_samples : it - 1 - t->skipped_total;
    r.lr = optim_lr_at(&t->args.lr, pos);
    double lr_dec = t->args.lr_decoupled.lr > 0 ? optim_lr_at(&t->args.lr_decoupled, pos) : r.lr;
    int found_inf = !isfinite(r.grad_norm);
    // fp16: an overflow is what the loss scale is for (Megatron skips and counts it), unless
    // the dynamic scale is already at its floor: then it is a NaN iteration
    r.overflow = found_inf && t->args.fp16 && (!t->scaler.dynamic || S > t->scaler.min_scale);
    loss_scale_update(&t->scaler, found_inf);
    r.loss_scale = t->scaler.scale;
    if (found_inf || !isfinite(r.loss)) {
        r.skipped = 1;  // Megatron: count it, skip the update, go on
    } else {
        double clip = t->args.adamw.clip_grad, scale = 1.0;
        if (clip > 0 && r.grad_norm + 1e-6 > clip) scale = clip / (r.grad_norm + 1e-6);
        t0 = pp_trace_begin(t->trace);
        for (int c = 0; c < t->n_chunks; c++)  // bf16/fp16: and the copies the next forward reads
            optim_update_model(t->opts[c], &t->args.adamw, r.lr, lr_dec, scale / S, t->chunks[c]);
        pp_trace_end(t->trace, PP_EV_OPTIMIZER, -1, t0);
    }
    t->iteration = it;
    t->consumed_samples += G;
    return r;
}

double trainer_evaluate(Trainer *t, SplitKind split) {
    int64_t iters = t->args.eval_iters;
    if (iters <= 0 || !batches_has_split(t->data, split)) return NAN;
    trainer_settle_params(t);  // (the forward hooks would wait too; not counted as exposed)
    double total = 0.0;
    for (int64_t i = 0; i < iters; i++) {
        int sig = train_stop_signalled();  // a stop must not wait for a long evaluation
        if (sig) {
            if (t->grid->coord.rank == 0)
                printf("megac train: %s stopped after %lld of %lld batches (%s received): no loss "
                       "logged\n", split == SPLIT_TEST ? "test" : "validation", (long long)i,
                       (long long)iters, core_stop_signal_name(sig));
            t->cursor.split = SPLIT_TRAIN;
            return NAN;
        }
        trainer_set_batch(t, split, i * t->args.global_batch, t->args.global_batch);
        double loss = pp_forward_only(&t->step), zero = 0.0;
        trainer_global_sums(t, &zero, &loss);
        total += loss;
    }
    t->cursor.split = SPLIT_TRAIN;
    return total / ((double)iters * t->args.global_batch * t->args.model.seq_length);
}
