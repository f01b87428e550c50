// bench/bench_train.c: whole training steps of named GPT configs on one rank. Not a test:
// run by hand, e.g.
//     build/bench/bench_train                      (the CPU configs, all cores)
//     build/bench/bench_train --config medium --steps 5 --threads 2
//     build/bench/bench_train --config medium --steps 5 --threads 1 --dropout 0.1
//     build/bench/bench_train --device cuda --config gpt2-124m --seq-length 1024 --micro-batch 16
// Prints, per config: ms per step, tokens/s, achieved FLOP/s (Megatron's FLOPs formula,
// forward + backward, padded vocabulary) and
//   CPU:  that as a fraction of the sgemm ceiling (best of 2048^3 and the model's own largest
//         GEMM shape, measured here with the same threads). The ceiling is measured again
//         right after every timed step (outside its time) and each step is compared with its
//         own ceiling: on a shared host the clock and the neighbours' load drift by tens of
//         percent within seconds, which made a ceiling taken once swing the fraction 50-75 %.
//         An untimed step follows each ceiling, so that a timed step finds the caches as the
//         step before it left them (as in training), not flushed by the ceiling's 48 MiB;
//         ms/step, ceiling and fraction are medians over the steps; so is "cpu ms", the
//         process's CPU time per step (with --threads 1 the figure a loaded host disturbs least:
//         what paired runs with and without --dropout compare);
//         --profile: then a table per config of where a step's time goes, per op kind (the
//         GEMMs by layer role, attention, LayerNorm, activation, residual, cross-entropy,
//         embedding, AdamW, ...): ms and share of the step, GFLOP/s against the ceiling or
//         GB/s against a stream copy measured at start (bench_profile.h);
//   CUDA: model TFLOP/s and MFU against --peak-tflops (default 989: H100/H200 dense bf16),
//         timed between backend syncs; TF32 GEMMs unless --no-tf32; --bf16 / --fp16 mixed
//         precision; --use-flash-attn fused attention. Also the memory megac allocated.
// On CUDA each config also prints one "RESULT key=value ..." line (scripts/gpu/selfcheck.sh).
#include "bench_profile.h"  // defines: bench_profile_start (--profile)
#include "backend/cpu/cpu_blas.h"
#include "backend/cpu/cpu_gemm.h"  // defines: cpu_gemm, CPU_GEMM_SPLIT_*
#include "core/args.h"
#include "core/check.h"
#include "core/host.h"  // defines: core_check_threads
#include "core/timer.h"
#include "model/gpt.h"
#include "model/gpt_flags.h"  // defines: gpt_attention_backend
#include "distributed/dist_geometry.h"  // defines: dist_pad_multiple
#include "optim/optimizer.h"

#include <cblas.h>  // defines: cblas_sgemm
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>  // defines: clock_gettime, CLOCK_PROCESS_CPUTIME_ID

typedef struct {
    const char *name;
    int L, C, NH, T, B, V;
    int in_all;  // run when no --config is given (gpt2-350m only when named: slow on CPUs)
    int E, K, Fe;  // mixture of experts in every layer: E experts of hidden size Fe, top-K
                   // (0: dense MLPs of 4 C)
    int grouped;   // --moe-grouped-gemm: the experts' products as grouped GEMMs
} BenchConfig;

// medium-moe: medium's model with 8 experts of 2 C, top-2, in every layer: the same active
// MLP FLOPs per token as medium's 4 C (the router's (E, C) product besides), so its GFLOP/s
// against medium's is the MoE layers' cost beyond their FLOPs.
static const BenchConfig CONFIGS[] = {
    {"small", 4, 256, 4, 256, 4, 256, 1, 0, 0, 0, 0},
    {"medium", 6, 384, 6, 256, 4, 256, 1, 0, 0, 0, 0},
    {"medium-moe", 6, 384, 6, 256, 4, 256, 1, 8, 2, 768, 0},
    {"gpt2-vocab", 6, 384, 6, 256, 4, 50257, 1, 0, 0, 0, 0},
    {"gpt2-124m", 12, 768, 12, 256, 4, 50257, 1, 0, 0, 0, 0},
    {"gpt2-350m", 24, 1024, 16, 256, 4, 50257, 0, 0, 0, 0, 0},
};
#define N_CONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])

// The best GFLOP/s of `reps` runs (after one untimed) of C (M, N) = A (M, K) @ B (N, K)^T,
// by the backend's own panels (cpu_gemm; how = 1) or by one OpenBLAS-threaded call (how = 0).
static double sgemm_gflops(Backend *be, int M, int N, int K, int reps, int how) {
    float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)N * K, 4), *c = calloc((size_t)M * N, 4);
    if (!a || !b || !c) core_fatal("out of memory");
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 7) * 0.01f;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = core_now();
        if (how)
            cpu_gemm(be, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f,
                        c, N);
        double t = core_now() - t0;
        if (r && t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * M * N * K / best * 1e-9;
}

static GPTConfig gpt_config_of(const BenchConfig *bc, int flash) {
    GPTConfig c = {.num_layers = bc->L, .hidden_size = bc->C, .num_heads = bc->NH,
                   .ffn_hidden_size = 4 * bc->C, .seq_length = bc->T,
                   .max_position_embeddings = bc->T, .vocab_size = bc->V,
                   .vocab_divisible_by = 128, .use_flash_attn = flash};
    if (bc->E) {  // Megatron's defaults otherwise (softmax router, aux loss)
        c.num_experts = bc->E, c.moe_topk = bc->K, c.moe_ffn_hidden_size = bc->Fe;
        c.moe_load_balancing = GPT_MOE_LB_AUX, c.moe_aux_coeff = 1e-2;
        snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "1");
        c.moe_grouped_gemm = bc->grouped;
    }
    return c;
}

// The ceiling the model's GEMMs are compared with, measured with the same threads: the best
// of the 2048^3 product and the model's own largest GEMM (the MLP's, or the output layer's, Vp
// columns), each by the backend's panels and by one OpenBLAS-threaded call, best of `reps`
// runs each. The panels go first and a 0.5 s pause follows the threaded calls: after one,
// OpenBLAS's idle workers yield-spin for ~0.1 s on the cores the panels (and the next step)
// need, which read the panels 15-20 % low (bench_gemm.c).
static double ceiling_gflops(Backend *be, const BenchConfig *bc, int Vp, int reps) {
    int M = bc->B * bc->T, N = Vp > 4 * bc->C ? Vp : 4 * bc->C, K = bc->C;
    double best = 0, g[4];
    g[0] = sgemm_gflops(be, M, N, K, reps, 1);
    g[1] = sgemm_gflops(be, 2048, 2048, 2048, reps, 1);
    g[2] = sgemm_gflops(be, M, N, K, reps, 0);
    g[3] = sgemm_gflops(be, 2048, 2048, 2048, reps, 0);
    struct timespec nap = {0, 500 * 1000 * 1000};
    nanosleep(&nap, NULL);
    for (int i = 0; i < 4; i++) best = g[i] > best ? g[i] : best;
    return best;
}

// CPU seconds of the whole process (all threads). Never fails.
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Median of v (n >= 1); sorts v.
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One training step s of m (forward, backward, AdamW; dropout p drop, 0: none) on the N
// tokens tok with targets tgt.
static void one_step(GPT *m, Optimizer *o, Comm *one, int s, double drop, const int *tok,
                     const int *tgt, int N) {
    AdamWConfig ac = {0.9, 0.95, 1e-8, 0.1, 1.0};
    gpt_dropout_step(m, s, drop > 0);  // a new mask every step, as train draws them
    gpt_zero_grads(m);
    gpt_forward(m, one, 0, tok, tgt, 1.0f / N);
    gpt_backward(m, one, 0, NULL, 1.0f / N);
    optim_update_model(o, &ac, 3e-4, 3e-4, 1.0, m);  // bf16/fp16: and the weight copies
}

// Times `steps` steps (after one warm-up): forward, backward, AdamW, between backend syncs
// (CUDA queues its work; the CPU sync is a no-op); drop: hidden and attention dropout
// probability (0: none). Returns ms per step (mean).
// step_ms / ceil / cpu_ms (NULL, or `steps` entries each; CPU): each step's ms, the ceiling
// measured right after it (ceiling_gflops, then one untimed, unprofiled step to warm the
// caches again; both outside the timed steps), and the step's CPU ms
// (all threads: with --threads 1 a figure that a busy shared host inflates little); ceil
// NULL: no ceilings (step_ms and cpu_ms still filled).
// profile: 1 times every op of the timed steps (bench_profile.h; the warm-up step not).
// *mem: bytes megac allocated for the model (weights, copies, grads, activations, workspace)
// and the optimizer (moments).
static double time_steps(const BenchConfig *bc, Backend *be, Comm *one, int steps, int flash,
                         double drop, int profile, int *Vp, double *mem, double *step_ms,
                         double *ceil, double *cpu_ms) {
    GPTConfig cfg = gpt_config_of(bc, flash);
    char err[512];
    if (gpt_config_check(&cfg, 1, 1, err, sizeof err) != 0) core_usage_error("%s: %s", bc->name, err);
    GPT *m = gpt_create(&cfg, be, NULL,
                        &(GPTStage){.n_stages = 1, .micro_batch = bc->B,
                                    .n_slots = 1, .seed = 1234, .pad_multiple = dist_pad_multiple(1)});
    gpt_set_dropout(m, (float)drop, (float)drop, 1234);  // drop 0: none
    if (profile) bench_profile_start(be, bc->C, bc->E ? bc->Fe : 4 * bc->C, m->Vp);
    Optimizer *o = optim_create(be, one, NULL, 1, m, 0, 0, NULL);
    optim_set_weight_copies(o, m);  // bf16/fp16: AdamW writes the copies (as train does)
    int N = bc->B * bc->T, *tok = calloc((size_t)N, sizeof(int)), *tgt = calloc((size_t)N, sizeof(int));
    if (!tok || !tgt) core_fatal("out of memory");
    for (int i = 0; i < N; i++) { tok[i] = (i * 7919) % bc->V; tgt[i] = (i * 104729 + 1) % bc->V; }
    double t0 = 0, paused = 0;  // paused: seconds spent measuring ceilings between steps
    for (int s = 0; s <= steps; s++) {
        if (s == 1) {
            be->ops->sync(be);
            if (profile) bench_profile_reset();  // the warm-up step not
            t0 = core_now();
        }
        double ts = core_now(), cs = cpu_seconds();
        one_step(m, o, one, s, drop, tok, tgt, N);
        if (s >= 1 && step_ms) {
            be->ops->sync(be);
            double tc = core_now();
            step_ms[s - 1] = (tc - ts) * 1e3;
            cpu_ms[s - 1] = (cpu_seconds() - cs) * 1e3;
            if (ceil) ceil[s - 1] = ceiling_gflops(be, bc, m->Vp, 4);
            if (ceil && s < steps) {  // an untimed step (not profiled) warms the caches again
                bench_profile_pause(1);
                one_step(m, o, one, s, drop, tok, tgt, N);
                bench_profile_pause(0);
            }
            paused += core_now() - tc;
        }
    }
    be->ops->sync(be);
    double ms = (core_now() - t0 - paused) * 1e3 / steps;
    *Vp = m->Vp;
    *mem = (double)m->n_alloc * (8 + (be->act == BACKEND_F32 ? 0 : backend_dtype_size(be->act))) +
           (double)m->slot_bytes * m->n_slots + (double)m->scratch_bytes + (double)optim_state_bytes(o);
    if (profile) bench_profile_stop(be);
    free(tok), free(tgt);
    optim_destroy(o);
    gpt_destroy(m);
    return ms;
}

// CPU: the figures against the sgemm ceiling, as before the CUDA path existed.
// mem_gbs > 0: with the per-op profile, memory-bound ops against mem_gbs (stream copy).
static void run_cpu(const BenchConfig *bc, Backend *be, Comm *one, int steps, int flash,
                    double drop, int no_ceiling, double mem_gbs) {
    int Vp = 0;
    double mem = 0;
    double *step_ms = calloc((size_t)steps, sizeof(double)), *ceil = calloc((size_t)steps, sizeof(double));
    double *frac = calloc((size_t)steps, sizeof(double)), *cpu = calloc((size_t)steps, sizeof(double));
    if (!step_ms || !ceil || !frac || !cpu) core_fatal("out of memory");
    time_steps(bc, be, one, steps, flash, drop, mem_gbs > 0, &Vp, &mem, step_ms,
               no_ceiling ? NULL : ceil, cpu);
    double mean_ms = 0;
    for (int s = 0; s < steps; s++) mean_ms += step_ms[s] / steps;
    GPTConfig cfg = gpt_config_of(bc, flash);
    double flops = gpt_flops_per_iteration(&cfg, Vp, bc->B);
    for (int s = 0; s < steps; s++)
        frac[s] = no_ceiling ? 0.0 : flops / (step_ms[s] * 1e-3) * 1e-9 / ceil[s];
    double ms = median(step_ms, steps), gflops = flops / (ms * 1e-3) * 1e-9;
    printf("%-11s %9.1f %10.0f %10.1f %9.1f %8.0f%% %9.1f\n", bc->name, ms,
           bc->B * bc->T / (ms * 1e-3), gflops, median(ceil, steps), 100.0 * median(frac, steps),
           median(cpu, steps));
    if (mem_gbs > 0) bench_profile_print(bc->name, steps, mean_ms, median(ceil, steps), mem_gbs);
    free(step_ms), free(ceil), free(frac), free(cpu);
}

// CUDA: model TFLOP/s and MFU against the peak.
static void run_cuda(const BenchConfig *bc, Backend *be, Comm *one, int steps, double peak,
                     int flash, double drop) {
    int Vp = 0;
    double mem = 0;
    double ms = time_steps(bc, be, one, steps, flash, drop, 0, &Vp, &mem, NULL, NULL, NULL);
    GPTConfig cfg = gpt_config_of(bc, flash);
    double tflops = gpt_flops_per_iteration(&cfg, Vp, bc->B) / (ms * 1e-3) * 1e-12;
    double tok_s = bc->B * bc->T / (ms * 1e-3);
    printf("%-11s %5d %4d %9.2f %10.0f %9.1f %7.1f%% %9.0f\n", bc->name, bc->T, bc->B, ms, tok_s,
           tflops, 100.0 * tflops / peak, mem / 1048576.0);
    printf("RESULT config=%s device=cuda act=%s flash=%d T=%d B=%d ms=%.3f tokens_s=%.1f "
           "tflops=%.3f mfu=%.4f peak_tflops=%.1f mem_mib=%.0f attn=%s\n", bc->name,
           backend_dtype_name(be->act), flash, bc->T, bc->B, ms, tok_s, tflops, tflops / peak, peak,
           mem / 1048576.0, be->attn == BACKEND_ATTN_CUDNN ? "fused" : be->attn == BACKEND_ATTN_AUTO ? "auto" : "megac");
}

// bench_train's flags.
typedef struct {
    const char *only, *device, *split, *attn_name;
    int steps, threads, T, B, no_tf32, bf16, fp16, flash, panels, no_ceiling, cuda, grouped, profile;
    double peak, drop;
    BackendAttnKernels attn;
} BenchFlags;

// Parses and checks the flags (a bad one: exit 2 with the reason).
static BenchFlags parse_flags(int argc, char **argv) {
    BenchFlags f = {.device = "cpu", .split = "rule", .steps = 3, .peak = 989.0,
                    .attn = BACKEND_ATTN_MEGAC};
    ArgSpec specs[] = {
        {"--config", ARG_STR, &f.only,
         "small | medium | medium-moe | gpt2-vocab | gpt2-124m | gpt2-350m (default: all but gpt2-350m)"},
        {"--steps", ARG_INT, &f.steps, "timed steps per config"},
        {"--threads", ARG_INT, &f.threads, "CPU threads (0: all cores)"},
        {"--device", ARG_STR, &f.device, "cpu | cuda"},
        {"--seq-length", ARG_INT, &f.T, "sequence length T (0: the config's)"},
        {"--micro-batch", ARG_INT, &f.B, "sequences per step B (0: the config's)"},
        {"--no-tf32", ARG_BOOL, &f.no_tf32, "CUDA: strict fp32 GEMMs (default: TF32 tensor cores)"},
        {"--bf16", ARG_BOOL, &f.bf16, "bf16 activations and weight copies (mixed precision)"},
        {"--fp16", ARG_BOOL, &f.fp16, "fp16 activations and weight copies (no loss scaling here)"},
        {"--use-flash-attn", ARG_BOOL, &f.flash, "fused attention: no (T, T) matrix stored"},
        {"--moe-grouped-gemm", ARG_BOOL, &f.grouped, "medium-moe: the experts' products as grouped GEMMs (megac train's flag), else one GEMM pair per expert"},
        {"--attention-backend", ARG_STR, &f.attn_name, "auto | fused | flash | unfused | local as megac train's (fused: cuDNN; default: megac's kernels)"},
        {"--no-ceiling", ARG_BOOL, &f.no_ceiling, "CPU: skip the sgemm ceilings (ceiling, fraction print 0)"},
        {"--profile", ARG_BOOL, &f.profile, "CPU: also a per-op table of each config's step (ms, share, GFLOP/s or GB/s)"},
        {"--dropout", ARG_FLOAT, &f.drop, "hidden and attention dropout p (Megatron's default: 0.1; here 0)"},
        {"--peak-tflops", ARG_FLOAT, &f.peak, "CUDA: the GPU's peak TFLOP/s for MFU (H100/H200 dense bf16)"},
        {"--gemm-split", ARG_STR, &f.split, "CPU: cut GEMMs into panels of rows (m), columns (n), or by the rule"},
        {"--gemm-panels", ARG_INT, &f.panels, "CPU: GEMM panels per thread (0: the rule)"},
    };
    core_args_parse("usage: bench_train [--config NAME] [--steps N] [--threads N] [--device cpu|cuda] "
                    "[--seq-length T] [--micro-batch B] [--no-tf32] [--bf16|--fp16] [--use-flash-attn] "
                    "[--peak-tflops X] [--dropout P] [--no-ceiling] [--moe-grouped-gemm] [--profile]",
                    specs, (int)(sizeof specs / sizeof specs[0]), argc - 1, argv + 1);
    f.cuda = !strcmp(f.device, "cuda");
    if (!f.cuda && strcmp(f.device, "cpu")) core_usage_error("--device must be cpu or cuda, got '%s'", f.device);
    if (strcmp(f.split, "rule") && strcmp(f.split, "m") && strcmp(f.split, "n"))
        core_usage_error("--gemm-split must be rule, m or n, got '%s'", f.split);
    if (f.panels < 0) core_usage_error("--gemm-panels must be >= 0");
    core_check_threads("--threads", f.threads);
    if (f.drop < 0 || f.drop >= 1) core_usage_error("--dropout must be in [0, 1), got %g", f.drop);
    if (f.steps < 1 || f.T < 0 || f.B < 0 || f.peak <= 0)
        core_usage_error("--steps must be >= 1, --seq-length/--micro-batch >= 0, --peak-tflops > 0");
    int found = !f.only;
    for (int i = 0; i < N_CONFIGS; i++) found |= f.only && !strcmp(f.only, CONFIGS[i].name);
    if (!found) core_usage_error("unknown --config '%s'", f.only);
    if (f.profile && f.cuda) core_usage_error("--profile: the CPU backend only (--device cpu)");
    if (f.bf16 && f.fp16) core_usage_error("--bf16 and --fp16 contradict each other");
    char err[160];
    if (f.attn_name && gpt_attention_backend(f.attn_name, &f.flash, &f.attn, err, sizeof err))
        core_usage_error("%s", err);
    return f;
}

// The backend of --device and its one-rank Comm (*one); prints the header of the table and,
// on the CPU, the sgemm ceiling at start (0 with --no-ceiling) and with --profile the
// stream-copy bandwidth (*mem_gbs; else 0).
static Backend *make_backend(const BenchFlags *f, Comm **one, double *mem_gbs) {
    Backend *be = NULL;
    BackendDType act = f->bf16 ? BACKEND_BF16 : f->fp16 ? BACKEND_F16 : BACKEND_F32;
    int self = 0;
    if (f->cuda) {
#ifdef MEGAC_HAVE_CUDA
        if (!backend_cuda_available()) core_usage_error("--device cuda: no usable CUDA device");
        be = backend_cuda_create(0, f->no_tf32 ? BACKEND_MATH_FP32 : BACKEND_MATH_TF32, act);
        be->attn = f->attn;
        *one = comm_nccl_create(MPI_COMM_SELF, "one", &self, be->u.cuda.stream, 0);  // size 1: no NCCL
        printf("backend: %s\npeak: %.1f TFLOP/s (MFU = model TFLOP/s / peak)\n\n", be->name, f->peak);
        printf("%-11s %5s %4s %9s %10s %9s %8s %9s\n", "config", "T", "B", "ms/step", "tokens/s",
               "TFLOP/s", "MFU", "MiB");
#else
        core_usage_error("--device cuda: bench_train was built without CUDA");
#endif
        return be;
    }
    be = backend_cpu_create(f->threads, act);
    *one = comm_mpi_create(MPI_COMM_SELF, "one", &self, 0);
    be->u.cpu.gemm_split = !strcmp(f->split, "m") ? CPU_GEMM_SPLIT_M : !strcmp(f->split, "n") ? CPU_GEMM_SPLIT_N : 0;
    be->u.cpu.gemm_panels = f->panels;
    double square = 0.0;  // panels first (see ceiling_gflops); the warm-up step follows
    for (int how = 1; !f->no_ceiling && how >= 0; how--) {
        double g = sgemm_gflops(be, 2048, 2048, 2048, 8, how);
        square = g > square ? g : square;
    }
    printf("backend: %s\nsgemm ceiling at start: %.1f GFLOP/s (2048^3, best of 8 runs x 2 ways); "
           "each step is compared with the ceiling measured right after it (medians over steps)\n\n",
           be->name, square);
    *mem_gbs = f->profile ? bench_stream_copy_gbs(be->u.cpu.nthreads, 5) : 0.0;
    if (f->profile)
        printf("memory bandwidth: %.1f GB/s (stream copy of 256 MiB, %d threads, best of 5)\n",
               *mem_gbs, be->u.cpu.nthreads);
    printf("dropout: %g (hidden and attention)\n", f->drop);
    printf("%-11s %9s %10s %10s %9s %9s %9s\n", "config", "ms/step", "tokens/s", "GFLOP/s", "ceiling",
           "fraction", "cpu ms");
    return be;
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    MPI_CHECK(MPI_Init(NULL, NULL));
    BenchFlags f = parse_flags(argc, argv);
    Comm *one = NULL;
    double mem_gbs = 0;
    Backend *be = make_backend(&f, &one, &mem_gbs);
    for (int i = 0; i < N_CONFIGS; i++) {
        BenchConfig bc = CONFIGS[i];
        if (f.only ? strcmp(f.only, bc.name) != 0 : !bc.in_all) continue;
        if (f.T) bc.T = f.T;
        if (f.B) bc.B = f.B;
        bc.grouped = f.grouped;
        if (f.cuda) run_cuda(&bc, be, one, f.steps, f.peak, f.flash, f.drop);
        else run_cpu(&bc, be, one, f.steps, f.flash, f.drop, f.no_ceiling, mem_gbs);
        fflush(stdout);
    }
    comm_destroy(one);
    backend_destroy(be);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
