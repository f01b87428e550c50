// train/train_loop.c: the run: steps, evaluation, checkpoints, NaN accounting, and the
// pipeline report at the end (the log lines are in train_log.c).
#include "trainer.h"
#include "ckpt/ckpt.h"       // defines: ckpt_save, ckpt_load, CkptModel, CkptRun
#include "ckpt/ckpt_fs.h"    // defines: ckpt_fs_nothing_saved
#include "ckpt/ckpt_lock.h"  // defines: ckpt_lock_acquire, ckpt_check_rollback, ckpt_lock_heartbeat
#include "train_log.h"
#include "train_outputs.h"
#include "train_stop.h"
#include "core/check.h"  // defines: MPI_CHECK
#include "core/stop.h"   // defines: core_stop_saving
#include "core/timer.h"
#include "core/watchdog.h"

#include <math.h>
#include <stdio.h>
#include <string.h>  // defines: strerror
#include <unistd.h>

enum { CKPT_LINE = 4400 };  // a --save path (up to 4096 bytes) and the words around it

// The measured pipeline bubble per stage (PP > 1 on the CPU, or --trace, whose spans wait
// for queued device work), and the --trace timeline. Collective: all ranks, end of the run.
static void report_pipeline(Trainer *t) {
    ProcessGrid *g = t->grid;
    if ((g->dims.pp > 1 && t->be->kind == BACKEND_CPU) || t->args.trace)
        pp_trace_report_bubble(t->trace, g->world, g->coord.pp_rank, g->dims.pp, t->n_micro, t->n_chunks);
    if (t->args.trace) {
        char label[96];
        snprintf(label, sizeof label, "stage %d (tp %d, dp %d)", g->coord.pp_rank, g->coord.tp_rank,
                 g->coord.dp_rank);
        pp_trace_write(t->trace, g->world, t->args.trace, label);
    }
}

// The trainer's tensors as a checkpoint sees them (ckpt/ckpt.h): borrowed pointers.
static CkptModel ckpt_model_of(const Trainer *t) {
    return (CkptModel){t->grid, t->be, &t->args.model, t->n_chunks, t->chunks, t->opts,
                       t->moe_bias};
}

// The trainer's counters a checkpoint keeps, by value (restored by load_checkpoint).
static CkptRun ckpt_run_of(const Trainer *t) {
    return (CkptRun){t->iteration, t->consumed_samples, t->nan_total, t->skipped_total,
                     t->skipped_samples, t->scaler, t->args.seed, t->args.global_batch,
                     t->args.lr_decoupled.lr, t->args.lr_decoupled.lr > 0 ? t->args.lr_decoupled.min_lr : 0.0,
                     t->args.per_token_loss};
}

// --load (--finetune, --no-load-optim: the model only) into the trainer. Collective; a
// missing or damaged checkpoint: one line, exit 2 on every rank.
static void load_checkpoint(Trainer *t) {
    const TrainArgs *a = &t->args;
    CkptModel m = ckpt_model_of(t);
    CkptRun r = ckpt_run_of(t);
    ckpt_load(&m, &r, a->load, a->finetune ? CKPT_LOAD_FINETUNE
                               : a->no_load_optim ? CKPT_LOAD_NO_OPTIM : CKPT_LOAD_ALL);
    t->iteration = r.iteration;
    t->consumed_samples = r.consumed_samples;
    t->nan_total = r.nan_total;
    t->skipped_total = r.skipped_total;
    t->skipped_samples = r.skipped_samples;
    t->scaler = r.scaler;
    train_moe_push_bias(t);  // the loaded expert bias, into the routers
}

// --load of a directory that does not exist or holds nothing yet (Megatron's first run of
// `--save X --load X`): rank 0 says so in one line and the run starts from scratch, as
// Megatron-LM does. A directory holding anything else goes to ckpt_load, which refuses a
// damaged one. Returns 1 if there is nothing to load. Collective.
static int nothing_to_load(Trainer *t) {
    int nothing = t->grid->coord.rank == 0 && ckpt_fs_nothing_saved(t->args.load);
    MPI_CHECK(MPI_Bcast(&nothing, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (nothing && t->grid->coord.rank == 0)
        printf(" --load %s: no checkpoint there yet: starting from scratch\n", t->args.load);
    return nothing;
}

// Saves a checkpoint of t->iteration, except inside a streak of NaN/Inf steps: that state
// never replaces the last good checkpoint (rank 0 says so in one line). Returns 1 if it
// saved. Collective.
static int save_checkpoint(Trainer *t) {
    if (t->nan_in_row == 0) {
        trainer_settle_params(t);  // --overlap-param-gather: the updated parameters, all of them
        CkptModel m = ckpt_model_of(t);
        CkptRun r = ckpt_run_of(t);
        ckpt_save(&m, &r, t->args.save);
        t->last_saved = t->iteration;
        return 1;
    }
    if (t->grid->coord.rank == 0) {
        if (isatty(1)) fputs("\r\033[K", stdout);
        printf(" iteration %lld: inside a NaN/Inf streak (%d in a row): checkpoint not saved; "
               "the last one stays\n", (long long)t->iteration, t->nan_in_row);
    }
    return 0;
}

// The agreed early stop (train_stop.h): a checkpoint of the last completed iteration unless
// one was just written (or it is inside a NaN streak), then one line saying why and how to
// go on. Collective. Returns the exit code: 0, or 1 for a stop on a failure (stopped == 2).
static int stop_run(Trainer *t, int64_t it_start, const char *why, int stopped) {
    const TrainArgs *a = &t->args;
    int rank0 = t->grid->coord.rank == 0, saved = 0;
    if (a->save && t->iteration > it_start && t->last_saved != t->iteration && t->nan_in_row == 0) {
        core_stop_saving(1);  // a second Ctrl-C now says "please wait" (core/stop.h)
        saved = save_checkpoint(t);  // inside a NaN streak the line below says why not
        core_stop_saving(0);
    }
    int code = stopped == 2 ? 1 : 0;
    if (!rank0) return code;
    if (isatty(1)) fputs("\r\033[K", stdout);
    char what[CKPT_LINE];
    if (!a->save)
        snprintf(what, sizeof what, "no --save: nothing saved");
    else if (t->nan_in_row > 0 && t->last_saved != t->iteration)
        snprintf(what, sizeof what, "inside a NaN/Inf streak: not saved, the last checkpoint stays");
    else if (t->last_saved == t->iteration)
        snprintf(what, sizeof what, "checkpoint %s iteration %lld in %s; resume with --load %s%s",
                 saved ? "saved at" : "already at", (long long)t->iteration, a->save, a->save,
                 stopped == 2 ? " (the log lacks this iteration's record)" : "");
    else
        snprintf(what, sizeof what, "no iteration completed since the start: nothing new to save");
    if (code) {  // a failure: on stderr, as errors are (stdout may be what failed)
        fprintf(stderr, "megac train: stopped at iteration %lld of %lld (%s); %s\n",
                (long long)t->iteration, (long long)a->train_iters, why, what);
        return code;
    }
    printf("megac train: stopped at iteration %lld of %lld (%s); %s\n", (long long)t->iteration,
           (long long)a->train_iters, why, what);
    fflush(stdout);
    return 0;
}

// After the last iteration: a --log-json or --tensorboard-dir write that failed during it
// (or the test evaluation) still fails the run: one line on stderr, exit code 1. Collective.
static int log_failed_at_end(Trainer *t) {
    int mine[2] = {t->log_errno, t->tb_errno}, e[2];
    MPI_CHECK(MPI_Allreduce(mine, e, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (!e[0] && !e[1]) return 0;
    if (t->grid->coord.rank == 0 && e[0])
        fprintf(stderr, "megac train: cannot write --log-json %s: %s: its records end before "
                "iteration %lld; the run itself completed\n", t->args.log_json, strerror(e[0]),
                (long long)t->iteration);
    if (t->grid->coord.rank == 0 && e[1])
        fprintf(stderr, "megac train: cannot write --tensorboard-dir %s: %s: its events end before "
                "iteration %lld; the run itself completed\n", t->args.logf.tensorboard_dir, strerror(e[1]),
                (long long)t->iteration);
    return 1;
}

// After a resume: a sample-based run (--train-samples) recounts its iterations from the
// consumed samples (the global batch may have changed since the save), and the training
// order is made long enough for the batches still to come. Collective (no communication).
static void resume_batches(Trainer *t) {
    TrainArgs *a = &t->args;
    if (a->train_samples && t->consumed_samples < a->train_samples)
        a->train_iters = t->iteration + train_rampup_iters(&a->rampup, t->consumed_samples,
                                                           a->train_samples, NULL);
    int64_t left = a->train_iters > t->iteration ? a->train_iters - t->iteration : 0;
    batches_reserve_train(t->data, train_rampup_after(&a->rampup, t->consumed_samples, left));
}

// The test split at the end of training, printed as Megatron prints it. Collective.
static void test_at_end(Trainer *t) {
    double tl = trainer_evaluate(t, SPLIT_TEST);
    if (t->grid->coord.rank != 0 || isnan(tl)) return;
    train_log_eval(t, t->iteration, tl, "test");
}

// Start-up after the model is built: the summary, the --save directory checked and locked,
// the checkpoint loaded and the data resumed, the run record.
static void begin_run(Trainer *t) {
    const TrainArgs *a = &t->args;
    int rank0 = t->grid->coord.rank == 0;
    train_log_startup(t);
    train_log_process_ids(t);
    int rank = t->grid->coord.rank;
    // an unwritable --save fails now, not after training; one run per --save directory
    if (a->save) ckpt_prepare_save(rank, a->save);
    if (a->save) ckpt_lock_acquire(rank, a->save, a->timeout_minutes);
    if (a->load && nothing_to_load(t)) t->args.load = NULL;  // a first run: from scratch
    if (a->load) load_checkpoint(t);
    if (a->load) resume_batches(t);
    // `latest` never moves back unless asked
    if (a->save) ckpt_check_rollback(rank, a->save, t->iteration, a->overwrite_newer);
    if (rank0) train_outputs_run_start(t);
    if (rank0 && t->iteration >= a->train_iters)
        printf("megac train: the loaded checkpoint is at iteration %lld >= --train-iters %lld: "
               "nothing to do\n", (long long)t->iteration, (long long)a->train_iters);
}

int trainer_run(Trainer *t) {
    const TrainArgs *a = &t->args;
    int rank0 = t->grid->coord.rank == 0, tty = rank0 && isatty(1);
    begin_run(t);
    core_watchdog_disarm();  // start-up is over (armed in cmd_train before MPI_Init)
    double t_start = core_now();
    int64_t it_start = t->iteration;  // after a resume, the ETA uses this run's pace
    t->log_first_iteration = it_start + 1;
    char why[160] = "";
    int stopped = 0;
    while (t->iteration < a->train_iters) {
        if ((stopped = train_stop_check(t, it_start, why, sizeof why))) break;
        ckpt_lock_heartbeat();  // rank 0: the --save lock's mtime says this run is alive
        double t0 = core_now();
        StepResult r = trainer_step(t);
        double ms = (core_now() - t0) * 1e3;
        int64_t it = t->iteration;
        if (tty) fputs("\r\033[K", stdout);  // clear the progress bar before any log line
        if (r.overflow) {  // --fp16: the loss scale absorbs it (the log line shows the new scale)
            t->skipped_total++;
            t->skipped_samples += r.global_batch;  // the schedule does not advance either
        } else if (r.skipped) {
            t->nan_total++;
            t->nan_in_row++;
            if (rank0) printf(" iteration %lld: NaN or Inf (loss %g, grad norm %g): step skipped\n",
                              (long long)it, r.loss, r.grad_norm);
        } else {
            t->nan_in_row = 0;
        }
        if (rank0) train_log_iteration(t, &r, ms, it);
        if (t->nan_in_row > 0 && t->nan_in_row >= a->max_nan_iters) {
            if (rank0) fprintf(stderr, "megac: %d NaN/Inf iterations in a row (limit --max-nan-iters %d): "
                               "stopping; the last checkpoint is untouched\n", t->nan_in_row, a->max_nan_iters);
            return 3;
        }
        if (it % a->eval_interval == 0 || it == a->train_iters) {
            double vl = trainer_evaluate(t, SPLIT_VALID);
            if (rank0 && !isnan(vl)) train_log_validation(t, it, vl);  // Megatron's block, TensorBoard
        }
        if (a->save && ((a->save_interval > 0 && it % a->save_interval == 0) || it == a->train_iters))
            save_checkpoint(t);
        if (tty) train_log_progress(it, it_start, a->train_iters, core_now() - t_start);
    }
    int code = 0;
    if (stopped) code = stop_run(t, it_start, why, stopped);
    else if (t->iteration == a->train_iters && a->eval_iters > 0)
        test_at_end(t);
    if (!stopped) code = log_failed_at_end(t);
    report_pipeline(t);
    return code;
}
