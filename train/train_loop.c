// train/train_loop.c: the run: steps, Megatron-style log lines, JSON log, evaluation,
// progress bar, NaN accounting.
#include "trainer.h"
#include "checkpoint.h"
#include "core/check.h"
#include "core/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Every rank's process id, by host, so that a launcher message naming only a PID (hydra's
// "BAD TERMINATION ... PID 1234 RUNNING AT host" when a rank dies) identifies the rank.
// Collective.
static void log_process_ids(const Trainer *t) {
    enum { HOST_INTS = 8, PER_RANK = 1 + HOST_INTS };  // pid, host name (32 bytes)
    Comm *w = t->grid->world;
    int mine[PER_RANK] = {(int)getpid()};
    gethostname((char *)&mine[1], HOST_INTS * sizeof(int) - 1);
    int *all = core_calloc((size_t)w->size * PER_RANK, sizeof(int));
    comm_all_gather(w, mine, all, PER_RANK, COMM_I32);
    if (w->rank == 0) {
        printf("process ids (rank:pid):");
        for (int r = 0; r < w->size; r++) {
            const char *host = (const char *)&all[r * PER_RANK + 1];
            if (r == 0 || strcmp(host, (const char *)&all[(r - 1) * PER_RANK + 1]))
                printf("%s %s:", r ? ";" : "", host);
            printf(" %d:%d", r, all[r * PER_RANK]);
        }
        printf("\n");
        fflush(stdout);
    }
    free(all);
}

static void log_startup(const Trainer *t) {
    const ProcessGrid *g = t->grid;
    const GPT *m = t->model;
    if (g->coord.rank != 0) return;
    const TrainArgs *a = &t->args;
    printf("megac train: world %d = TP %d x PP %d x DP %d | backend %s\n", g->dims.world_size,
           g->dims.tp, g->dims.pp, g->dims.dp, t->be->name);
    printf("model: L=%d C=%d NH=%d F=%d T=%d V=%d (padded %d) | micro-batch %d, global batch %d, "
           "%d micro-batches per step per DP rank\n", a->model.num_layers, a->model.hidden_size,
           a->model.num_heads, a->model.ffn_hidden_size, a->model.seq_length, a->model.vocab_size,
           m->Vp, a->micro_batch, a->global_batch, t->n_micro);
    double mb = 1.0 / (1 << 20);
    size_t pbytes = m->n_floats * sizeof(float);
    printf("memory on rank 0: parameters %.2f MiB, gradients %.2f MiB, optimizer state %.2f MiB "
           "(%s; %.2f MiB without)\n", pbytes * mb, pbytes * mb, optim_state_bytes(t->opt) * mb,
           t->opt->zero1 ? "ZeRO-1" : "not sharded", 2.0 * t->opt->n_padded * sizeof(float) * mb);
    printf("activations on rank 0: %.2f MiB per micro-batch in flight x %d slots%s\n",
           m->slot_bytes * mb, m->n_slots, m->sp ? " (sequence parallel)" : "");
    fflush(stdout);
}

// Bytes this rank moved per group during the last step, as JSON members.
static void json_traffic(FILE *f, const ProcessGrid *g) {
    const Comm *groups[] = {g->tp, g->pp, g->dp, g->embedding};
    const char *names[] = {"tp", "pp", "dp", "embedding"};
    for (int i = 0; i < 4; i++) {
        uint64_t bytes = 0;
        if (groups[i])
            for (int k = 0; k < COMM_NKINDS; k++) bytes += groups[i]->stats.bytes[k];
        fprintf(f, ",\"%s_bytes\":%llu", names[i], (unsigned long long)bytes);
    }
    if (g->tp)
        fprintf(f, ",\"tp_all_reduce_calls\":%llu,\"tp_all_reduce_bytes\":%llu",
                (unsigned long long)g->tp->stats.calls[COMM_ALL_REDUCE],
                (unsigned long long)g->tp->stats.bytes[COMM_ALL_REDUCE]);
}

static void log_iteration(Trainer *t, const StepResult *r, double ms, int64_t it) {
    const TrainArgs *a = &t->args;
    double tokens = (double)a->global_batch * a->model.seq_length;
    double tok_s = tokens / (ms / 1e3);
    double gflops = gpt_flops_per_iteration(&a->model, t->model->Vp, a->global_batch) / (ms / 1e3) /
                    1e9 / t->grid->dims.world_size;
    if (t->log_json) {
        fprintf(t->log_json, "{\"iteration\":%lld,\"lm_loss\":%.17g,\"grad_norm\":%.17g,\"lr\":%.9g,"
                "\"elapsed_ms\":%.3f,\"tokens_per_s\":%.1f,\"gflops_per_rank\":%.3f,\"skipped\":%d",
                (long long)it, r->loss, r->grad_norm, r->lr, ms, tok_s, gflops, r->skipped);
        json_traffic(t->log_json, t->grid);
        fprintf(t->log_json, ",\"grad_buffer_bytes\":%zu,\"optimizer_state_bytes\":%zu",
                t->opt->n_padded * sizeof(float), optim_state_bytes(t->opt));
        fprintf(t->log_json, "}\n");
    }
    if (it % a->log_interval && it != a->train_iters) return;
    printf(" iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f"
           " | learning rate: %.6E | global batch size: %5d | lm loss: %.6E | grad norm: %.3f"
           " | number of nan iterations: %3d | tokens/s: %.0f | GFLOP/s per rank: %.2f |\n",
           (long long)it, (long long)a->train_iters, (long long)(it * a->global_batch), ms, r->lr,
           a->global_batch, r->loss, r->grad_norm, t->nan_total, tok_s, gflops);
    fflush(stdout);
}

static void progress(int64_t it, int64_t total, double elapsed) {
    double eta = elapsed / (double)it * (double)(total - it);
    int width = 30, done = (int)(width * it / total);
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < done ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%lld  ETA %.0f s   ", (long long)it, (long long)total, eta);
    if (it == total) fputc('\n', stderr);
    fflush(stderr);
}

// The measured pipeline bubble per stage (PP > 1 on the CPU, or --trace, whose spans wait
// for queued device work), and the --trace timeline. Collective: all ranks, end of the run.
static void report_pipeline(Trainer *t) {
    ProcessGrid *g = t->grid;
    if ((g->dims.pp > 1 && t->be->kind == BACKEND_CPU) || t->args.trace)
        pp_trace_report_bubble(t->trace, g->world, g->coord.pp_rank, g->dims.pp, t->n_micro);
    if (t->args.trace) {
        char label[96];
        snprintf(label, sizeof label, "stage %d (tp %d, dp %d)", g->coord.pp_rank, g->coord.tp_rank,
                 g->coord.dp_rank);
        pp_trace_write(t->trace, g->world, t->args.trace, label);
    }
}

int trainer_run(Trainer *t) {
    const TrainArgs *a = &t->args;
    int rank0 = t->grid->coord.rank == 0, tty = rank0 && isatty(2);
    log_startup(t);
    log_process_ids(t);
    if (a->save) ckpt_prepare_save(t);  // an unwritable --save fails now, not after training
    if (a->load) ckpt_load(t);
    if (rank0 && t->iteration >= a->train_iters)
        printf("megac train: the loaded checkpoint is at iteration %lld >= --train-iters %lld: "
               "nothing to do\n", (long long)t->iteration, (long long)a->train_iters);
    double t_start = core_now();
    while (t->iteration < a->train_iters) {
        double t0 = core_now();
        StepResult r = trainer_step(t);
        double ms = (core_now() - t0) * 1e3;
        int64_t it = t->iteration;
        if (r.skipped) {
            t->nan_total++;
            t->nan_in_row++;
            if (rank0) printf(" iteration %lld: NaN or Inf (loss %g, grad norm %g): step skipped\n",
                              (long long)it, r.loss, r.grad_norm);
        } else {
            t->nan_in_row = 0;
        }
        if (rank0) log_iteration(t, &r, ms, it);
        if (t->nan_in_row > a->max_nan_iters) {
            if (rank0) fprintf(stderr, "megac: %d NaN/Inf iterations in a row (limit --max-nan-iters %d): "
                               "stopping; the last checkpoint is untouched\n", t->nan_in_row, a->max_nan_iters);
            return 3;
        }
        if (it % a->eval_interval == 0 || it == a->train_iters) {
            double vl = trainer_evaluate(t);
            if (rank0 && !isnan(vl))
                printf(" validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n",
                       (long long)it, vl, exp(vl));
        }
        if (a->save && ((a->save_interval > 0 && it % a->save_interval == 0) || it == a->train_iters))
            ckpt_save(t);
        if (tty) progress(it, a->train_iters, core_now() - t_start);
    }
    report_pipeline(t);
    return 0;
}
