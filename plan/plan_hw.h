// plan/plan_hw.h: hardware profiles for `megac plan`: what one GPU computes and holds, and
// how fast the links inside a node and between nodes move bytes.
//
// Built-in profiles (h100, h200) carry public datasheet figures (see plan_hw.c and
// docs/plan.md); a profile file (key = value, one per line, '#' comments) gives any other
// machine.
// Efficiencies and latencies are assumptions, not datasheet figures, and are printed as such.
#pragma once
#include <stddef.h>
#include <stdio.h>

// megac's precisions: fp32 (--no-tf32 / CPU), tf32 (--device cuda default: fp32 tensors,
// TF32 GEMMs), bf16 / fp16 (--bf16 / --fp16: 16-bit activations and weight copies, fp32
// master weights, gradients and optimizer state).
typedef enum { PLAN_FP32, PLAN_TF32, PLAN_BF16, PLAN_FP16, PLAN_NPREC } PlanPrecision;
enum { PLAN_NPEAK = 3 };  // peak GEMM rates: fp32, tf32, bf16 (= fp16)

typedef struct {
    char name[64];
    int gpus_per_node;
    double memory_gb;                 // memory per GPU, 10^9 bytes
    double reserve_gb;                // of it not available to megac (context, library workspaces)
    double hbm_gbps;                  // memory bandwidth per GPU, GB/s (optimizer step)
    double peak_tflops[PLAN_NPEAK];   // dense GEMM peak per GPU: fp32, tf32, bf16/fp16
    double gemm_efficiency;           // fraction of the peak a transformer's GEMMs reach (assumed)
    double attn_cudnn_efficiency;     // fused attention (--use-flash-attn) on cuDNN's fused SDPA,
                                      // and on megac's own kernels: the fraction of the peak
    double attn_megac_efficiency;     // reached on Megatron's count of the attention's products
                                      // (full T x T: 12 B T^2 NH hs per layer; assumed)
    double intra_gbps;                // per GPU, per direction, inside a node (NVLink)
    double inter_gbps;                // per GPU, per direction, between nodes (InfiniBand)
    double link_efficiency;           // fraction of link bandwidth a collective reaches (assumed)
    double intra_latency_us;          // per ring step (assumed)
    double inter_latency_us;
    double pcie_gbps;                 // per GPU, per direction, host <-> device (achievable;
                                      // --optimizer-cpu-offload's copies)
    double host_memory_gb;            // host memory per node, 10^9 bytes (offload's pinned state)
} PlanHardware;

// Fills *hw with built-in profile `name` ("h100", "h200"). Returns 0, or -1 if unknown.
int plan_hw_builtin(const char *name, PlanHardware *hw);

// Names of the built-in profiles, comma-separated, for messages. Pure.
const char *plan_hw_builtin_names(void);

// Reads a key = value profile file over a copy of `base` (keys not in the file keep base's
// values). Returns 0, or -1 with one line naming the file, the line and the problem in err.
int plan_hw_load(const char *path, const PlanHardware *base, PlanHardware *hw, char *err,
                 size_t errlen);

// Checks that every figure is positive (efficiencies in (0, 1]). Returns 0, or -1 with the
// offending key in err.
int plan_hw_check(const PlanHardware *hw, char *err, size_t errlen);

// Writes hw as a profile file that plan_hw_load reads back. Never fails (stdio errors are
// the caller's to check).
void plan_hw_write(FILE *f, const PlanHardware *hw);

// Dense GEMM peak of precision p, FLOP/s. Pure.
double plan_hw_peak_flops(const PlanHardware *hw, PlanPrecision p);

// "fp32", "tf32", "bf16", "fp16". Pure.
const char *plan_precision_name(PlanPrecision p);
