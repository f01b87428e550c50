// bench/bench_train.c: whole training steps of named GPT configs on one rank, against the
// machine's measured sgemm ceiling. Not a test: run by hand, e.g.
//     build/bench/bench_train                      (all configs, all cores)
//     build/bench/bench_train --config medium --steps 5 --threads 2
// Prints, per config: ms per step, tokens/s, achieved GFLOP/s (Megatron's FLOPs formula,
// forward + backward, padded vocabulary) and that as a fraction of the sgemm ceiling
// (best of 2048^3 and the model's own largest GEMM shape, measured here with the same threads).
#include "backend/cpu/cpu_blas.h"
#include "core/args.h"
#include "core/check.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "optim/optimizer.h"

#include <cblas.h>  // defines: cblas_sgemm
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int L, C, NH, T, B, V;
} BenchConfig;

static const BenchConfig CONFIGS[] = {
    {"small", 4, 256, 4, 256, 4, 256},
    {"medium", 6, 384, 6, 256, 4, 256},
    {"gpt2-vocab", 6, 384, 6, 256, 4, 50257},
    {"gpt2-124m", 12, 768, 12, 256, 4, 50257},
};
#define N_CONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])

// Best GFLOP/s of a few row-major C (M, N) = A (M, K) @ B (N, K)^T products.
static double sgemm_gflops(int M, int N, int K) {
    float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)N * K, 4), *c = calloc((size_t)M * N, 4);
    if (!a || !b || !c) core_fatal("out of memory");
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 7) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = core_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double t = core_now() - t0;
        if (r && t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * M * N * K / best * 1e-9;
}

// Times `steps` steps (after one warm-up): forward, backward, AdamW. Returns ms per step.
static double time_steps(const BenchConfig *bc, Backend *be, Comm *one, int steps, int *Vp) {
    GPTConfig cfg = {bc->L, bc->C, bc->NH, 4 * bc->C, bc->T, bc->T, bc->V, 128, 0, 0};
    GPT *m = gpt_create(&cfg, be, 1, 0, 1, 0, bc->B, 1, 1234, optim_pad_multiple(1), 0);
    Optimizer *o = optim_create(be, one, 1, m->params, m->n_params, m->n_floats, 0, 0);
    AdamWConfig ac = {0.9, 0.95, 1e-8, 0.1, 1.0};
    int N = bc->B * bc->T, *tok = calloc((size_t)N, sizeof(int)), *tgt = calloc((size_t)N, sizeof(int));
    for (int i = 0; i < N; i++) { tok[i] = (i * 7919) % bc->V; tgt[i] = (i * 104729 + 1) % bc->V; }
    double t0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) t0 = core_now();
        gpt_zero_grads(m);
        gpt_forward(m, one, 0, tok, tgt);
        gpt_backward(m, one, 0, NULL, 1.0f / N);
        optim_update(o, &ac, 3e-4, 1.0, m->param_mem, m->grad_mem);
    }
    double ms = (core_now() - t0) * 1e3 / steps;
    *Vp = m->Vp;
    free(tok), free(tgt);
    optim_destroy(o);
    gpt_destroy(m);
    return ms;
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    MPI_CHECK(MPI_Init(NULL, NULL));
    const char *only = NULL;
    int steps = 3, threads = 0;
    ArgSpec specs[] = {
        {"--config", ARG_STR, &only, "small | medium | gpt2-vocab | gpt2-124m (default: all)"},
        {"--steps", ARG_INT, &steps, "timed steps per config"},
        {"--threads", ARG_INT, &threads, "threads (0: all cores)"},
    };
    core_args_parse("usage: bench_train [--config NAME] [--steps N] [--threads N]", specs, 3,
                    argc - 1, argv + 1);
    Backend *be = backend_cpu_create(threads);
    int self = 0;
    Comm *one = comm_mpi_create(MPI_COMM_SELF, "one", &self, 0);
    double square = sgemm_gflops(2048, 2048, 2048);
    printf("backend: %s\nsgemm ceiling: %.1f GFLOP/s (2048^3)\n\n", be->name, square);
    printf("%-11s %9s %10s %10s %9s %9s\n", "config", "ms/step", "tokens/s", "GFLOP/s", "ceiling",
           "fraction");
    for (int i = 0; i < N_CONFIGS; i++) {
        const BenchConfig *bc = &CONFIGS[i];
        if (only && strcmp(only, bc->name)) continue;
        int Vp = 0;
        double ms = time_steps(bc, be, one, steps, &Vp);
        GPTConfig cfg = {bc->L, bc->C, bc->NH, 4 * bc->C, bc->T, bc->T, bc->V, 128, 0, 0};
        double gflops = gpt_flops_per_iteration(&cfg, Vp, bc->B) / (ms * 1e-3) * 1e-9;
        // The model's own largest GEMM (the MLP's, or the output layer's) as a second ceiling.
        double own = sgemm_gflops(bc->B * bc->T, Vp > 4 * bc->C ? Vp : 4 * bc->C, bc->C);
        double ceiling = own > square ? own : square;
        printf("%-11s %9.1f %10.0f %10.1f %9.1f %8.0f%%\n", bc->name, ms,
               bc->B * bc->T / (ms * 1e-3), gflops, ceiling, 100.0 * gflops / ceiling);
        fflush(stdout);
    }
    comm_destroy(one);
    backend_destroy(be);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
