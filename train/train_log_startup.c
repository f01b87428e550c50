// train/train_log_startup.c: the start-up summary rank 0 prints (layout, model, parameters,
// data, and every rank's memory: parameters, gradients, optimizer state, activations in
// flight, backward workspace) (see train_log.h).
#include "train_log.h"
#include "core/check.h"

#include "model/gpt_moe.h"     // defines: struct GPTMoE
#include "model/gpt_params.h"  // defines: gpt_params_build
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// What one rank holds, in bytes: gathered to rank 0 for the start-up table.
// The last two (CUDA only): the offloaded optimizer's pinned host memory and the device memory
// in use (cudaMemGetInfo), not in the sum.
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_OPTIM_UNSHARDED, MEM_ACTIVATIONS, MEM_WORKSPACE,
       MEM_HOST, MEM_DEVICE, MEM_N };

static void memory_of(const Trainer *t, double out[MEM_N]) {
    memset(out, 0, MEM_N * sizeof(double));
    for (int c = 0; c < t->n_chunks; c++) {  // interleaved: every model chunk of this rank
        const GPT *m = t->chunks[c];
        const Optimizer *o = t->opts[c];
        // fp32 master weights (ZeRO-3: this rank's shard + gather buffers), --bf16/--fp16 copies
        out[MEM_PARAMS] += (double)optim_param_memory_bytes(o);
        out[MEM_GRADS] += (double)optim_grad_memory_bytes(o);  // ZeRO-2/3: shard + transient
        out[MEM_OPTIM] += (double)optim_state_bytes(o);
        out[MEM_OPTIM_UNSHARDED] += 2.0 * o->n_padded * sizeof(float);
        out[MEM_ACTIVATIONS] += (double)m->slot_bytes * m->n_slots;
        out[MEM_WORKSPACE] += (double)m->scratch_bytes;
        if (m->moe) out[MEM_WORKSPACE] += (double)m->moe->workspace_bytes;  // each chunk's own
        out[MEM_HOST] += (double)optim_host_state_bytes(o);  // --optimizer-cpu-offload
    }
    out[MEM_DEVICE] = (double)t->be->ops->device_memory_used(t->be);
}

double train_log_memory_bytes(const Trainer *t) {
    double m[MEM_N], sum = 0;
    memory_of(t, m);
    for (int i = 0; i < MEM_N; i++)
        if (i < MEM_HOST && i != MEM_OPTIM_UNSHARDED) sum += m[i];  // (without ZeRO-1: not held)
    return sum;
}

// Per-rank memory: every rank up to 16 ranks, else the smallest and largest of each column.
// CUDA adds two columns: the optimizer's pinned host memory (--optimizer-cpu-offload) and the
// device memory in use.
static void print_memory(const Trainer *t, const double *all, int n) {
    double mb = 1.0 / (1 << 20);
    int cols = t->be->kind == BACKEND_CUDA ? MEM_N : MEM_HOST;
    printf("memory per rank (MiB): parameters | gradients | optimizer state (%s) | without ZeRO-1 | "
           "activations in flight | backward workspace%s\n", optim_sharding_label(t->opt->sharding),
           cols == MEM_N ? " | optimizer in host memory | device in use (cudaMemGetInfo)" : "");
    if (n <= 16) {
        for (int r = 0; r < n; r++) {
            const double *v = &all[r * MEM_N];
            printf("  rank %3d: %10.2f | %10.2f | %10.2f | %10.2f | %10.2f | %10.2f", r,
                   v[0] * mb, v[1] * mb, v[2] * mb, v[3] * mb, v[4] * mb, v[5] * mb);
            if (cols == MEM_N) printf(" | %10.2f | %10.2f", v[6] * mb, v[7] * mb);
            printf("\n");
        }
        return;
    }
    for (int k = 0; k < 2; k++) {
        printf("  %s:", k ? "max" : "min");
        for (int c = 0; c < cols; c++) {
            double x = all[c];
            for (int r = 1; r < n; r++) x = k ? fmax(x, all[r * MEM_N + c]) : fmin(x, all[r * MEM_N + c]);
            printf(" %10.2f%s", x * mb, c < cols - 1 ? " |" : "\n");
        }
    }
}

// Parameters of the whole model from its one-stage, one-rank table (vocabulary unpadded, the
// tied embedding once); *active: those a token uses (an MoE layer's K of E experts).
static double model_params(const GPTConfig *c, double *active) {
    int n = 0;
    size_t total = 0;
    ParamInfo *t = gpt_params_build(c, 1, c->vocab_size, 0, c->num_layers, 1, 1, &n, &total);
    double all = 0, experts = 0;
    for (int i = 0; i < n; i++) {
        all += (double)t[i].numel;
        if (strstr(t[i].name, ".mlp.experts.")) experts += (double)t[i].numel;
    }
    free(t);
    *active = c->num_experts > 0 ? all - experts * (1.0 - (double)c->moe_topk / c->num_experts) : all;
    return all;
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
        char cp[64] = "";
        if (a->cp > 1) snprintf(cp, sizeof cp, " x CP %d (%s)", a->cp, a->cp_comm_type);
        printf("megac train: world %d = TP %d x PP %d x DP %d%s | backend %s | communication %s\n",
               g->dims.world_size, g->dims.tp, g->dims.pp, g->dims.dp, cp, t->be->name, comm);
        printf("model: L=%d C=%d NH=%d F=%d T=%d V=%d (padded %d) | micro-batch %d, global batch %d, "
               "%d micro-batches per step per DP rank%s%s%s\n", a->model.num_layers, a->model.hidden_size,
               a->model.num_heads, a->model.ffn_hidden_size, a->model.seq_length, a->model.vocab_size,
               m->Vp, a->micro_batch, a->global_batch, t->n_micro,
               m->sp ? " | sequence parallel" : "", m->cfg.use_flash_attn ? " | flash attention" : "",
               gpt_recompute_label(&m->cfg, " | recompute selective (attention probabilities)", rc,
                                   sizeof rc));
        if (a->hidden_dropout > 0 || a->attention_dropout > 0)
            printf("dropout: hidden %g, attention %g (training steps only; masks from --seed, the "
                   "iteration and global indices)\n", a->hidden_dropout, a->attention_dropout);
        size_t mine_floats = 0;
        for (int c = 0; c < t->n_chunks; c++) mine_floats += t->chunks[c]->n_floats;
        double active, params = model_params(&a->model, &active);
        char act_s[64] = "";
        if (a->model.num_experts > 0) snprintf(act_s, sizeof act_s, ", %.6g M active per token", active / 1e6);
        printf("parameters: %.6g M in the whole model%s (tied embedding counted once, vocabulary "
               "unpadded); %zu on rank 0's stage slice\n", params / 1e6, act_s, mine_floats);
        if (t->n_chunks > 1) {  // a chunk of rank r: as virtual stage r (chunk 0) holds
            char per[256] = "";
            for (int r = 0, len = 0, l0, n; r < g->dims.pp && len < (int)sizeof per - 16; r++) {
                gpt_stage_layers(&a->model, g->dims.pp, t->n_chunks, r, &l0, &n);
                len += snprintf(per + len, sizeof per - (size_t)len, "%s%d", r ? ", " : "", n);
            }
            printf("interleaved 1F1B: %d model chunks per pipeline rank, layers per chunk on ranks "
                   "0..%d: %s (chunk c of pipeline rank r: layers of virtual stage c*%d + r)\n",
                   t->n_chunks, g->dims.pp - 1, per, g->dims.pp);
        }
        if (a->rampup.start)
            printf("batch ramp-up: global batch %lld + %lld every %.6g samples up to %d (after %lld samples)\n",
                   (long long)a->rampup.start, (long long)a->rampup.incr,
                   (double)a->rampup.samples / (double)((a->global_batch - a->rampup.start) / a->rampup.incr),
                   a->global_batch, (long long)a->rampup.samples);
        if (a->mock_data)
            printf("data: --mock-data (synthetic tokens, vocab %d, %s samples, seed %llu)\n",
                   a->mock_vocab, a->mock_samples ? "repeating" : "distinct", (unsigned long long)a->seed);
        else if (a->data_path.n) {
            printf("data: --data-path, cut by --split %s, seed %llu\n", a->split, (unsigned long long)a->seed);
            batches_print_summary(t->data, stdout);
        } else {
            printf("data: --train-data-path%s%s, whole files, seed %llu\n",
                   a->valid_data_path.n ? ", --valid-data-path" : "", a->test_data_path.n ? ", --test-data-path" : "",
                   (unsigned long long)a->seed);
            batches_print_summary(t->data, stdout);
        }
        print_memory(t, all, g->dims.world_size);
        fflush(stdout);
    }
    free(all);
}
