// plan/plan_hw.c: the built-in hardware profiles and the profile file format.
//
// Datasheet figures (NVIDIA H100 and H200 Tensor Core GPU datasheets, SXM form factor; the
// tensor-core peaks there are quoted "with sparsity": the dense figures below are half):
//   H100 SXM: 80 GB HBM3 at 3.35 TB/s; FP32 67 TFLOP/s; TF32 494.5 and BF16 989.5 dense.
//   H200 SXM: 141 GB HBM3e at 4.8 TB/s; the same compute as the H100 SXM.
//   NVLink 4: 900 GB/s bidirectional per GPU = 450 GB/s per direction (HGX/DGX boards).
//   InfiniBand NDR: 400 Gb/s per GPU (one ConnectX-7 per GPU, as in DGX H100) = 50 GB/s.
//   PCIe 5.0 x16 host link per GPU: 32 GT/s x 16 lanes, 128b/130b = 63 GB/s per direction
//   raw; 55 GB/s taken as achievable (pinned cudaMemcpy reaches about 85-90 % of it: the
//   packets' headers and flow control); --optimizer-cpu-offload's copies. Assumed, to be
//   measured on the machine (plan --calibrate does not measure it yet).
//   Host memory: 2 TB per node (DGX H100 and DGX H200 system memory).
// Assumed (not datasheet): GEMM efficiency 0.7, link efficiency 0.8, ring-step latency
// 3 us inside a node and 8 us across nodes, 4 GB of each GPU kept by the CUDA context,
// cuBLAS/NCCL workspaces and fragmentation. Fused attention, on Megatron's count of its
// products (full T x T; a causal kernel does about half of them, plus the backward's
// recomputation): cuDNN's fused SDPA 0.6 (~600 TFLOP/s counted, ~3 ms per step for
// gpt2-124m at B 16, T 1024, bf16); megac's own WMMA kernels 0.1 (~100 TFLOP/s counted,
// ~75 TFLOP/s of products issued: issue 31's kernel audit; both to be measured on a GPU).
#include "plan_hw.h"

#include <stdlib.h>
#include <string.h>

static const char *PREC_NAMES[PLAN_NPREC] = {"fp32", "tf32", "bf16", "fp16"};

const char *plan_precision_name(PlanPrecision p) { return p < PLAN_NPREC ? PREC_NAMES[p] : "?"; }

double plan_hw_peak_flops(const PlanHardware *hw, PlanPrecision p) {
    return 1e12 * hw->peak_tflops[p == PLAN_FP16 ? PLAN_BF16 : p];
}

static PlanHardware hopper_node(const char *name, double memory_gb, double hbm_gbps) {
    PlanHardware hw = {.gpus_per_node = 8, .memory_gb = memory_gb, .reserve_gb = 4.0,
                       .hbm_gbps = hbm_gbps, .peak_tflops = {67.0, 494.5, 989.5},
                       .gemm_efficiency = 0.7, .attn_cudnn_efficiency = 0.6,
                       .attn_megac_efficiency = 0.1, .intra_gbps = 450.0, .inter_gbps = 50.0,
                       .link_efficiency = 0.8, .intra_latency_us = 3.0, .inter_latency_us = 8.0,
                       .pcie_gbps = 55.0, .host_memory_gb = 2048.0};
    snprintf(hw.name, sizeof hw.name, "%s", name);
    return hw;
}

int plan_hw_builtin(const char *name, PlanHardware *hw) {
    if (!strcmp(name, "h100")) *hw = hopper_node("h100: 8x H100 SXM 80GB, NVLink 4, NDR 400", 80.0, 3350.0);
    else if (!strcmp(name, "h200")) *hw = hopper_node("h200: 8x H200 SXM 141GB, NVLink 4, NDR 400", 141.0, 4800.0);
    else return -1;
    return 0;
}

const char *plan_hw_builtin_names(void) { return "h100, h200"; }

// The numeric keys of a profile, in file order.
typedef struct {
    const char *key;
    size_t offset;
    int is_int;
} HwKey;

#define HWF(k, field) {k, offsetof(PlanHardware, field), 0}
static const HwKey KEYS[] = {
    {"gpus_per_node", offsetof(PlanHardware, gpus_per_node), 1},
    HWF("memory_gb", memory_gb), HWF("reserve_gb", reserve_gb), HWF("hbm_gbps", hbm_gbps),
    HWF("peak_tflops_fp32", peak_tflops[PLAN_FP32]), HWF("peak_tflops_tf32", peak_tflops[PLAN_TF32]),
    HWF("peak_tflops_bf16", peak_tflops[PLAN_BF16]), HWF("gemm_efficiency", gemm_efficiency),
    HWF("attn_cudnn_efficiency", attn_cudnn_efficiency), HWF("attn_megac_efficiency", attn_megac_efficiency),
    HWF("intra_node_gbps", intra_gbps), HWF("inter_node_gbps", inter_gbps),
    HWF("link_efficiency", link_efficiency), HWF("intra_node_latency_us", intra_latency_us),
    HWF("inter_node_latency_us", inter_latency_us), HWF("pcie_gbps", pcie_gbps),
    HWF("host_memory_gb", host_memory_gb),
};
#define N_KEYS (int)(sizeof KEYS / sizeof KEYS[0])

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
    return s;
}

// Sets one key from its text. Returns 0, or -1 with the reason in err.
static int set_key(PlanHardware *hw, const char *key, const char *val, char *err, size_t n) {
    if (!strcmp(key, "name")) {
        snprintf(hw->name, sizeof hw->name, "%s", val);
        return 0;
    }
    for (int i = 0; i < N_KEYS; i++) {
        if (strcmp(key, KEYS[i].key)) continue;
        char *end = NULL;
        double x = strtod(val, &end);
        if (end == val || *trim(end)) {
            snprintf(err, n, "'%s' is not a number for %s", val, key);
            return -1;
        }
        if (KEYS[i].is_int) *(int *)((char *)hw + KEYS[i].offset) = (int)x;
        else *(double *)((char *)hw + KEYS[i].offset) = x;
        return 0;
    }
    snprintf(err, n, "unknown key '%s'", key);
    return -1;
}

int plan_hw_load(const char *path, const PlanHardware *base, PlanHardware *hw, char *err, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "--hardware %s: not a built-in profile (%s) and not a readable file",
                 path, plan_hw_builtin_names());
        return -1;
    }
    *hw = *base;
    char line[512], why[256];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(why, sizeof why, "expected key = value, got '%.60s'", s);
            rc = -1;
        } else {
            *eq = 0;
            rc = set_key(hw, trim(s), trim(eq + 1), why, sizeof why);
        }
        if (rc) snprintf(err, n, "--hardware %s line %d: %s", path, lineno, why);
    }
    fclose(f);
    if (rc == 0 && plan_hw_check(hw, why, sizeof why) != 0) {
        snprintf(err, n, "--hardware %s: %s", path, why);
        rc = -1;
    }
    return rc;
}

int plan_hw_check(const PlanHardware *hw, char *err, size_t n) {
    if (hw->gpus_per_node <= 0) {
        snprintf(err, n, "gpus_per_node must be > 0, got %d", hw->gpus_per_node);
        return -1;
    }
    for (int i = 1; i < N_KEYS; i++) {
        double x = *(const double *)((const char *)hw + KEYS[i].offset);
        int is_eff = strstr(KEYS[i].key, "efficiency") != NULL;
        int zero_ok = !strcmp(KEYS[i].key, "reserve_gb") || strstr(KEYS[i].key, "latency");
        if (!(x > 0 || (zero_ok && x == 0)) || (is_eff && x > 1)) {
            snprintf(err, n, "%s must be %s, got %g", KEYS[i].key,
                     is_eff ? "in (0, 1]" : zero_ok ? ">= 0" : "> 0", x);
            return -1;
        }
    }
    if (hw->reserve_gb >= hw->memory_gb) {
        snprintf(err, n, "reserve_gb %g must be below memory_gb %g", hw->reserve_gb, hw->memory_gb);
        return -1;
    }
    return 0;
}

void plan_hw_write(FILE *f, const PlanHardware *hw) {
    fprintf(f, "# megac plan hardware profile (key = value; megac plan --hardware FILE)\n");
    fprintf(f, "name = %s\n", hw->name);
    for (int i = 0; i < N_KEYS; i++) {
        if (KEYS[i].is_int) fprintf(f, "%s = %d\n", KEYS[i].key, *(const int *)((const char *)hw + KEYS[i].offset));
        else fprintf(f, "%s = %.6g\n", KEYS[i].key, *(const double *)((const char *)hw + KEYS[i].offset));
    }
}
