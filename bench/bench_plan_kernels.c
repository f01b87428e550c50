// bench/bench_plan_kernels.c: the memory-bound kernel inventory `megac plan` times
// (plan/plan_kernels.h) for a named config on one GPU: per kernel its bytes, FLOPs and
// roofline time at the profile's HBM bandwidth, then the step-time model's GEMM and kernel
// parts and the predicted MFU, with and without the kernels (the old upper bound), with
// cuDNN's attention and with megac's own kernels, beside issue 31's paper model. Nothing
// runs: it prints the figures the first GPU run is checked against.
//     build/bench/bench_plan_kernels [gpt2-124m|gpt2-350m|all] [--micro-batch B]
//         [--seq-length T] [--hardware h100|h200] [--fp32|--tf32] [--no-flash]
// Defaults: all, B = 16, T = 1024, h200, bf16, flash attention.
#include "plan/plan_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int layers, C, NH;
    double paper_mfu;  // issue 31's paper model at B 16, T 1024, bf16, h200 (a kernel-by-kernel
                       // audit of megac's own kernels before cuDNN and the 16-byte kernels)
} NamedConfig;

static const NamedConfig CONFIGS[] = {{"gpt2-124m", 12, 768, 12, 0.29}, {"gpt2-350m", 24, 1024, 16, 0.30}};
#define N_CONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])

static void report(const NamedConfig *nc, int B, int T, PlanPrecision prec, int flash,
                   const char *hwname, const PlanHardware *hw) {
    PlanSpec s = {.world_size = 1, .global_batch = B, .precision = prec};
    GPTConfig *c = &s.model;
    c->num_layers = nc->layers, c->hidden_size = nc->C, c->num_heads = nc->NH;
    c->ffn_hidden_size = 4 * nc->C, c->seq_length = c->max_position_embeddings = T;
    c->vocab_size = 50257, c->vocab_divisible_by = 128, c->use_flash_attn = flash;
    c->attn_kernels = BACKEND_ATTN_AUTO;  // train's default: cuDNN where it runs the call
    PlanLayout l = {.tp = 1, .pp = 1, .dp = 1, .micro_batch = B};
    PlanKernel k[PLAN_KERNELS_MAX];
    int n = plan_kernels(&s, &l, k);
    double bw = hw->hbm_gbps * 1e9, peak = plan_hw_peak_flops(hw, prec);
    int cudnn = plan_attn_cudnn(&s, &l);
    printf("\n%s: L %d, C %d, NH %d, B %d, T %d, %s, %s attention, %s\n", nc->name, nc->layers,
           nc->C, nc->NH, B, T, plan_precision_name(prec),
           !flash ? "materialised" : cudnn ? "flash (cuDNN)" : "flash (megac's kernels)", hw->name);
    printf("  roofline: HBM %.0f GB/s; GEMMs at %.0f%% of %.1f TFLOP/s; fused attention at %.0f%% "
           "(cuDNN) or %.0f%% (megac's kernels) of it\n", hw->hbm_gbps, hw->gemm_efficiency * 100,
           peak / 1e12, hw->attn_cudnn_efficiency * 100, hw->attn_megac_efficiency * 100);
    printf("  %-34s %-9s %10s %10s %10s\n", "kernel", "where", "MB", "GFLOP", "us");
    for (int i = 0; i < n; i++)
        printf("  %-34s %-9s %10.1f %10.3f %10.1f\n", k[i].name, plan_kernel_where_name(k[i].where),
               k[i].bytes / 1e6, k[i].flops / 1e9, k[i].bytes / bw * 1e6);
    PlanResult r, mine;
    plan_predict(&s, &l, hw, &r);
    c->attn_kernels = BACKEND_ATTN_MEGAC;  // --attention-backend flash
    plan_predict(&s, &l, hw, &mine);
    const PlanStage *st = &r.stages[0];
    double t_gemm = (st->flops_mb - st->attn_flops_mb) / (peak * hw->gemm_efficiency);
    double t_attn = st->attn_flops_mb / (peak * (cudnn ? hw->attn_cudnn_efficiency : hw->attn_megac_efficiency));
    double t_kern = st->kernel_bytes_mb / bw;
    double mfu_gemm = r.model_flops / ((r.t_step - t_kern) * peak);
    printf("  step: GEMMs %.2f ms (%.1f TFLOP), attention %.2f ms (%.1f TFLOP counted), "
           "memory-bound kernels %.2f ms (%.2f GB), AdamW %.2f ms: %.2f ms\n", t_gemm * 1e3,
           (st->flops_mb - st->attn_flops_mb) / 1e12, t_attn * 1e3, st->attn_flops_mb / 1e12,
           t_kern * 1e3, st->kernel_bytes_mb / 1e9, st->t_after * 1e3, r.t_step * 1e3);
    printf("RESULT %s %s B%d T%d %s: predicted MFU %.1f%% (without the kernels %.1f%%), %.0f "
           "tokens/s; with megac's attention kernels %.1f%%", nc->name, plan_precision_name(prec), B, T,
           hwname, r.mfu * 100, mfu_gemm * 100, r.tokens_per_s, mine.mfu * 100);
    if (B == 16 && T == 1024 && prec == PLAN_BF16 && flash && !strcmp(hwname, "h200"))
        printf("; paper model %.0f%%", nc->paper_mfu * 100);
    printf("\n");
    plan_result_free(&r);
    plan_result_free(&mine);
}

int main(int argc, char **argv) {
    const char *which = "all", *hwname = "h200";
    int B = 16, T = 1024, flash = 1;
    PlanPrecision prec = PLAN_BF16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: bench_plan_kernels [gpt2-124m|gpt2-350m|all]\n"
                   "  --micro-batch B    sequences per micro-batch (16)\n"
                   "  --seq-length T     tokens per sequence (1024)\n"
                   "  --hardware NAME    h100 | h200 (h200)\n"
                   "  --fp32, --tf32     instead of bf16\n"
                   "  --no-flash         materialised attention instead of --use-flash-attn\n");
            return 0;
        }
        if (!strcmp(argv[i], "--micro-batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq-length") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hardware") && i + 1 < argc) hwname = argv[++i];
        else if (!strcmp(argv[i], "--fp32")) prec = PLAN_FP32;
        else if (!strcmp(argv[i], "--tf32")) prec = PLAN_TF32;
        else if (!strcmp(argv[i], "--no-flash")) flash = 0;
        else if (argv[i][0] != '-') which = argv[i];
        else {
            fprintf(stderr, "bench_plan_kernels: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    PlanHardware hw;
    if (plan_hw_builtin(hwname, &hw) != 0) {
        fprintf(stderr, "bench_plan_kernels: unknown hardware '%s' (%s)\n", hwname, plan_hw_builtin_names());
        return 2;
    }
    if (B <= 0 || T <= 0) {
        fprintf(stderr, "bench_plan_kernels: --micro-batch %d and --seq-length %d must be > 0\n", B, T);
        return 2;
    }
    int found = 0;
    for (int i = 0; i < N_CONFIGS; i++)
        if (!strcmp(which, "all") || !strcmp(which, CONFIGS[i].name)) {
            report(&CONFIGS[i], B, T, prec, flash, hwname, &hw);
            found = 1;
        }
    if (!found) {
        fprintf(stderr, "bench_plan_kernels: unknown config '%s' (gpt2-124m, gpt2-350m, all)\n", which);
        return 2;
    }
    return 0;
}
