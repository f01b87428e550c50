// tests/optim/test_decoupled_lr.c: --decoupled-lr (Megatron's: the embedding and output layer
// take their own learning rate). One AdamW step with every gradient 1, weight decay 0, the
// base learning rate 0 and the decoupled one 0.01: wte and output_layer (Megatron's
// is_embedding_or_output_parameter tensors) move by exactly AdamW's first step, -0.01 g /
// (|g| + eps), every other tensor (wpe, norms, blocks) not at all; DDP and ZeRO-1, tied and
// untied. And the schedule: the decoupled one has the base one's shape with its own peak and
// minimum.
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "distributed/dist_geometry.h"  // defines: dist_pad_multiple
#include "core/check.h"
#include "tests/testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void one_step(Backend *be, Comm *one, int sharding, int untie) {
    GPTConfig cfg = {.num_layers = 2, .hidden_size = 16, .num_heads = 2, .ffn_hidden_size = 64,
                     .seq_length = 8, .max_position_embeddings = 8, .vocab_size = 50,
                     .vocab_divisible_by = 16, .untie_embeddings = untie};
    GPT *m = gpt_create(&cfg, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = 2,
                                    .n_slots = 1, .seed = 42, .pad_multiple = dist_pad_multiple(1)});
    Optimizer *o = optim_create(be, one, NULL, (OptimSharding)sharding, m, 0, 0, NULL);
    float *before = malloc(m->n_alloc * sizeof(float));
    memcpy(before, m->param_mem, m->n_alloc * sizeof(float));
    float *g = dist_sync_shard_grads(o->sync);
    for (size_t i = 0; i < o->shard_len; i++) g[i] = 1.0f;
    AdamWConfig ac = {0.9, 0.95, 1e-8, 0.0, 0.0};
    optim_update_model(o, &ac, 0.0, 0.01, 1.0, m);
    const float want = (float)(-0.01 * 1.0 / (1.0 + 1e-8));
    int moved = 0, still = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++) {
            float d = m->param_mem[p->offset + j] - before[p->offset + j];
            if (p->embedding_or_output) {
                EXPECT(fabsf(d - want) <= 1e-6f * fabsf(want) + 1e-7f * fabsf(before[p->offset + j]),
                       "%s[%zu] moved by %g, want %g", p->name, j, d, want);
                moved++;
            } else {
                EXPECT(d == 0.0f, "%s[%zu] moved by %g with the base learning rate 0", p->name, j, d);
                still++;
            }
        }
    }
    printf("decoupled lr (%s, %s): %d embedding/output elements moved by %g, %d others unchanged\n",
           sharding ? "ZeRO-1" : "DDP", untie ? "untied" : "tied", moved, want, still);
    EXPECT(moved > 0 && still > 0, "moved %d, unchanged %d", moved, still);
    free(before);
    optim_destroy(o);
    gpt_destroy(m);
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int self = 0;
    Comm *one = comm_mpi_create(MPI_COMM_SELF, "dp", &self, 60);
    Backend *be = backend_cpu_create(1, BACKEND_F32);
    for (int sh = 0; sh < 2; sh++)
        for (int untie = 0; untie < 2; untie++) one_step(be, one, sh, untie);
    // the decoupled schedule: the base one's warm-up and decay, its own peak and minimum
    LRSchedule base = {1e-3, 1e-4, 10, 100, LR_COSINE, 0.0}, dec = base;
    dec.lr = 5e-3;
    dec.min_lr = 2e-4;
    const int64_t at[] = {0, 5, 10, 55, 100, 150};
    for (int i = 0; i < 6; i++) {
        double b = optim_lr_at(&base, at[i]), d = optim_lr_at(&dec, at[i]);
        double want = at[i] <= 10 ? b * 5.0 : 2e-4 + (b - 1e-4) / (1e-3 - 1e-4) * (5e-3 - 2e-4);
        EXPECT(fabs(d - want) <= 1e-12, "step %lld: decoupled lr %.12g, want %.12g", (long long)at[i], d, want);
    }
    // --lr-warmup-init: both schedules warm up from it (Megatron's one init_lr), decay as before
    base.init_lr = dec.init_lr = 1e-4;
    const double want_base[] = {1e-4, 5.5e-4, 1e-3}, want_dec[] = {1e-4, 2.55e-3, 5e-3};
    for (int i = 0; i < 3; i++) {
        EXPECT(fabs(optim_lr_at(&base, at[i]) - want_base[i]) <= 1e-15, "warm-up step %lld", (long long)at[i]);
        EXPECT(fabs(optim_lr_at(&dec, at[i]) - want_dec[i]) <= 1e-15, "decoupled warm-up step %lld", (long long)at[i]);
    }
    backend_destroy(be);
    comm_destroy(one);
    MPI_CHECK(MPI_Finalize());
    return test_result("test_decoupled_lr");
}
