// train/train_log.c: what a run prints: the start-up summary (layout, model, memory per
// rank), process ids, one Megatron-style line per log interval (loss, grad norm, tokens/s,
// TFLOP/s per rank with Megatron's FLOPs formula, bytes moved per group), the --log-json
// records and the progress bar.
#include "train_log.h"
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Every rank's process id, by host, so that a launcher message naming only a PID (hydra's
// "BAD TERMINATION ... PID 1234 RUNNING AT host" when a rank dies) identifies the rank.
// Collective.
void train_log_process_ids(const Trainer *t) {
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

// What one rank holds, in bytes: gathered to rank 0 for the start-up table.
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_OPTIM_UNSHARDED, MEM_ACTIVATIONS, MEM_WORKSPACE, MEM_N };

static void memory_of(const Trainer *t, double out[MEM_N]) {
    const GPT *m = t->model;
    out[MEM_PARAMS] = (double)m->n_floats * sizeof(float);  // fp32 master weights, and with
    if (m->be->act != BACKEND_F32)                              // --bf16/--fp16 their copies
        out[MEM_PARAMS] += (double)m->n_alloc * backend_dtype_size(m->be->act);
    out[MEM_GRADS] = (double)m->n_alloc * sizeof(float);
    out[MEM_OPTIM] = (double)optim_state_bytes(t->opt);
    out[MEM_OPTIM_UNSHARDED] = 2.0 * t->opt->n_padded * sizeof(float);
    out[MEM_ACTIVATIONS] = (double)m->slot_bytes * m->n_slots;
    out[MEM_WORKSPACE] = (double)m->scratch_bytes;
}

// Per-rank memory: every rank up to 16 ranks, else the smallest and largest of each column.
static void print_memory(const Trainer *t, const double *all, int n) {
    double mb = 1.0 / (1 << 20);
    printf("memory per rank (MiB): parameters | gradients | optimizer state (%s) | without ZeRO-1 | "
           "activations in flight | backward workspace\n", t->opt->zero1 ? "ZeRO-1" : "not sharded");
    if (n <= 16) {
        for (int r = 0; r < n; r++) {
            const double *v = &all[r * MEM_N];
            printf("  rank %3d: %10.2f | %10.2f | %10.2f | %10.2f | %10.2f | %10.2f\n", r,
                   v[0] * mb, v[1] * mb, v[2] * mb, v[3] * mb, v[4] * mb, v[5] * mb);
        }
        return;
    }
    for (int k = 0; k < 2; k++) {
        printf("  %s:", k ? "max" : "min");
        for (int c = 0; c < MEM_N; c++) {
            double x = all[c];
            for (int r = 1; r < n; r++) x = k ? fmax(x, all[r * MEM_N + c]) : fmin(x, all[r * MEM_N + c]);
            printf(" %10.2f%s", x * mb, c < MEM_N - 1 ? " |" : "\n");
        }
    }
}

// " | recompute full (uniform, 2 layers per chunk)" etc. in buf, or "" without recomputation.
static const char *recompute_label(const GPTConfig *c, char *buf, size_t n) {
    if (c->recompute == GPT_RECOMPUTE_SELECTIVE) return " | recompute selective (attention probabilities)";
    if (c->recompute != GPT_RECOMPUTE_FULL) return "";
    snprintf(buf, n, " | recompute full (%s, %d layer%s%s)", c->recompute_block ? "block" : "uniform",
             c->recompute_num_layers, c->recompute_num_layers == 1 ? "" : "s",
             c->recompute_block ? " per stage" : " per chunk");
    return buf;
}

void train_log_startup(const Trainer *t) {
    char rc[96];
    const ProcessGrid *g = t->grid;
    const GPT *m = t->model;
    const TrainArgs *a = &t->args;
    double mine[MEM_N], *all = core_calloc((size_t)g->dims.world_size * MEM_N, sizeof(double));
    memory_of(t, mine);
    comm_all_gather(g->world, mine, all, MEM_N, COMM_F64);
    if (g->coord.rank == 0) {
        const char *comm = t->be->kind == BACKEND_CPU ? "MPI"
                         : !strcmp(a->dist_backend, "staged") ? "staged (device-host-MPI, for testing)"
                         : "NCCL";
        printf("megac train: world %d = TP %d x PP %d x DP %d | backend %s | communication %s\n",
               g->dims.world_size, g->dims.tp, g->dims.pp, g->dims.dp, t->be->name, comm);
        printf("model: L=%d C=%d NH=%d F=%d T=%d V=%d (padded %d) | micro-batch %d, global batch %d, "
               "%d micro-batches per step per DP rank%s%s%s\n", a->model.num_layers, a->model.hidden_size,
               a->model.num_heads, a->model.ffn_hidden_size, a->model.seq_length, a->model.vocab_size,
               m->Vp, a->micro_batch, a->global_batch, t->n_micro,
               m->sp ? " | sequence parallel" : "", m->cfg.use_flash_attn ? " | flash attention" : "",
               recompute_label(&m->cfg, rc, sizeof rc));
        if (a->mock_data)
            printf("data: --mock-data (synthetic tokens, vocab %d, %s samples, seed %llu)\n",
                   a->mock_vocab, a->mock_samples ? "repeating" : "distinct", (unsigned long long)a->seed);
        else
            printf("data: %s (split %s, seed %llu)\n", a->data_path, a->split, (unsigned long long)a->seed);
        print_memory(t, all, g->dims.world_size);
        fflush(stdout);
    }
    free(all);
}

// A double as JSON: all 17 digits (bitwise comparisons), null for NaN and Inf.
static void json_number(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.17g", x);
    else fprintf(f, "null");
}

// Bytes this rank moved during the last step in each group: tp, pp, dp, embedding.
enum { N_TRAFFIC = 4 };
static void group_traffic(const ProcessGrid *g, uint64_t bytes[N_TRAFFIC]) {
    const Comm *groups[N_TRAFFIC] = {g->tp, g->pp, g->dp, g->embedding};
    for (int i = 0; i < N_TRAFFIC; i++) {
        bytes[i] = 0;
        if (groups[i])
            for (int k = 0; k < COMM_NKINDS; k++) bytes[i] += groups[i]->stats.bytes[k];
    }
}

// The last step's traffic per group, as JSON members.
static void json_traffic(FILE *f, const ProcessGrid *g) {
    const char *names[N_TRAFFIC] = {"tp", "pp", "dp", "embedding"};
    uint64_t bytes[N_TRAFFIC];
    group_traffic(g, bytes);
    for (int i = 0; i < N_TRAFFIC; i++)
        fprintf(f, ",\"%s_bytes\":%llu", names[i], (unsigned long long)bytes[i]);
    if (g->tp)
        fprintf(f, ",\"tp_all_reduce_calls\":%llu,\"tp_all_reduce_bytes\":%llu",
                (unsigned long long)g->tp->stats.calls[COMM_ALL_REDUCE],
                (unsigned long long)g->tp->stats.bytes[COMM_ALL_REDUCE]);
}

void train_log_iteration(Trainer *t, const StepResult *r, double ms, int64_t it) {
    const TrainArgs *a = &t->args;
    double tokens = (double)a->global_batch * a->model.seq_length;
    double tok_s = tokens / (ms / 1e3);
    double gflops = gpt_flops_per_iteration(&a->model, t->model->Vp, a->global_batch) / (ms / 1e3) /
                    1e9 / t->grid->dims.world_size;
    if (t->log_json) {
        fprintf(t->log_json, "{\"iteration\":%lld,\"lm_loss\":", (long long)it);
        json_number(t->log_json, r->loss);
        fprintf(t->log_json, ",\"grad_norm\":");
        json_number(t->log_json, r->grad_norm);
        fprintf(t->log_json, ",\"lr\":%.9g,\"elapsed_ms\":%.3f,\"tokens_per_s\":%.1f,"
                "\"gflops_per_rank\":%.3f,\"skipped\":%d,\"loss_scale\":%.17g", r->lr, ms, tok_s,
                gflops, r->skipped, r->loss_scale);
        json_traffic(t->log_json, t->grid);
        fprintf(t->log_json, ",\"grad_buffer_bytes\":%zu,\"optimizer_state_bytes\":%zu",
                t->opt->n_padded * sizeof(float), optim_state_bytes(t->opt));
        fprintf(t->log_json, "}\n");
        fflush(t->log_json);  // a killed run keeps every record it logged
    }
    if (it % a->log_interval && it != a->train_iters) return;
    // One write per line, so other ranks' messages cannot land inside it.
    char line[896];
    int o = snprintf(line, sizeof line,
                     " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f"
                     " | learning rate: %.6E | global batch size: %5d | lm loss: %.6E | loss scale: %.1f"
                     " | grad norm: %.3f | number of skipped iterations: %3d | number of nan iterations: %3d"
                     " | tokens/s: %.0f | TFLOP/s per rank: %.4f | MB moved by rank 0:",
                     (long long)it, (long long)a->train_iters, (long long)(it * a->global_batch), ms,
                     r->lr, a->global_batch, r->loss, r->loss_scale, r->grad_norm, t->skipped_total,
                     t->nan_total, tok_s, gflops / 1e3);
    const char *names[N_TRAFFIC] = {"tp", "pp", "dp", "emb"};
    uint64_t bytes[N_TRAFFIC];
    group_traffic(t->grid, bytes);
    for (int i = 0; i < N_TRAFFIC && o > 0 && o < (int)sizeof line; i++)
        o += snprintf(line + o, sizeof line - (size_t)o, " %s %.2f", names[i], bytes[i] / 1e6);
    printf("%s |\n", line);
    fflush(stdout);
}

void train_log_progress(int64_t it, int64_t it_start, int64_t total, double elapsed) {
    double eta = it > it_start ? elapsed / (double)(it - it_start) * (double)(total - it) : 0.0;
    int width = 30, done = (int)(width * it / total);
    printf("\r[");
    for (int i = 0; i < width; i++) putchar(i < done ? '#' : '.');
    printf("] %lld/%lld  ETA %.0f s", (long long)it, (long long)total, eta);
    if (it == total) putchar('\n');
    fflush(stdout);
}

