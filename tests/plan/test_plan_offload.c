// tests/plan/test_plan_offload.c: --optimizer-cpu-offload in megac plan (plan/plan_offload.c).
// The ZeRO paper's example (Rajbhandari et al. 2020): a 7.5B GPT (36 layers of 4096, T 1024)
// on 8 H100 80 GB, TP 1, DP 8, ZeRO-2, bf16, micro-batch 3: 80.5 GB per rank without offload
// (76 GB usable: does not fit), 73.0 GB with fraction 1 (fits), 76.75 GB with 0.5 (does not);
// the moments moved and the pinned bytes are the run's own count (dist_offload_bytes); the
// PCIe copies add to the step; the enumeration ranks offloaded layouts beside the others; the
// hardware profile's pcie_gbps and host_memory_gb (host memory too small: no fit).
#include "plan/plan_enum.h"
#include "distributed/dist_geometry.h"  // defines: dist_offload_host_len, dist_offload_bytes
#include "tests/testing.h"

#include <math.h>

// The 7.5B model (7.46e9 parameters with the vocabulary) at global batch 24 on 8 ranks, bf16.
static PlanSpec spec_7_5b(void) {
    PlanSpec s = {.world_size = 8, .global_batch = 24, .precision = PLAN_BF16, .attention_dropout = 0.1,
                  .offload = 1};
    s.model = (GPTConfig){.num_layers = 36, .hidden_size = 4096, .num_heads = 32, .ffn_hidden_size = 16384,
                          .seq_length = 1024, .max_position_embeddings = 1024, .vocab_size = 50257,
                          .vocab_divisible_by = 128};
    return s;
}

static void test_7_5b_fits_only_offloaded(void) {
    PlanSpec s = spec_7_5b();
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    EXPECT(hw.pcie_gbps == 55.0 && hw.host_memory_gb == 2048.0, "h100 profile: %g %g", hw.pcie_gbps,
           hw.host_memory_gb);
    PlanLayout l = {.tp = 1, .pp = 1, .dp = 8, .micro_batch = 3, .zero1 = 1, .zero = 2, .cp = 1, .ep = 1};
    char err[256];
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    PlanResult r[3];
    const double F[3] = {0.0, 0.5, 1.0};
    for (int i = 0; i < 3; i++) {
        l.offload = F[i];
        plan_predict(&s, &l, &hw, &r[i]);
    }
    EXPECT(!r[0].fits && !r[1].fits && r[2].fits, "fits: F 0 %d, 0.5 %d, 1 %d (%.2f %.2f %.2f GB)", r[0].fits,
           r[1].fits, r[2].fits, r[0].mem_peak / 1e9, r[1].mem_peak / 1e9, r[2].mem_peak / 1e9);
    size_t S = r[0].stages[0].shard_len;
    EXPECT(r[0].host_peak == 0.0 && r[0].t_pcie == 0.0, "no offload: host %g, PCIe %g", r[0].host_peak, r[0].t_pcie);
    for (int i = 1; i < 3; i++) {
        DistOffloadBytes b = dist_offload_bytes(dist_offload_host_len(S, F[i]), 0);  // ZeRO-2: no copies
        const PlanStage *st = &r[i].stages[0];
        EXPECT(r[0].mem_peak - r[i].mem_peak == (double)b.device_saved, "F %g: device %g less, want %zu", F[i],
               r[0].mem_peak - r[i].mem_peak, b.device_saved);
        EXPECT(st->host_mem == (double)b.host && st->pcie_down == (double)b.down && st->pcie_up == (double)b.up,
               "F %g: host %g down %g up %g", F[i], st->host_mem, st->pcie_down, st->pcie_up);
        double t = (double)(b.down + b.up) / 55e9;  // not overlapped: added to the step
        EXPECT(fabs(r[i].t_pcie - t) < 1e-12 && fabs(r[i].t_step - r[0].t_step - t) < 1e-9,
               "F %g: PCIe %g s, step %g vs %g", F[i], r[i].t_pcie, r[i].t_step, r[0].t_step);
    }
    EXPECT(fabs(r[2].host_peak - 16.0 * (double)S) < 16 * 16, "F 1: host %g for a slice of %zu floats",
           r[2].host_peak, S);
    hw.host_memory_gb = 100.0;  // 8 ranks x 14.9 GB pinned do not fit in 100 GB of host memory
    plan_predict(&s, &l, &hw, &r[1]);
    EXPECT(!r[1].fits, "F 1 with 100 GB of host memory per node: fits");
    for (int i = 0; i < 3; i++) plan_result_free(&r[i]);
}

// The enumeration at the fixed layout: each layout at fractions 0, 0.5, 1; the offloaded one
// that fits ranked first. With one fraction asked: two results, without offload: one.
static void test_enumeration(void) {
    PlanSpec s = spec_7_5b();
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    PlanFilter f = {.tp = 1, .pp = 1, .micro_batch = 3, .gpipe = -1, .sp = -1, .zero1 = 1, .zero = 2, .cp = 1,
                    .ep = 1, .offload = 1, .offload_fraction = -1.0};
    PlanSet set;
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT_EQ_INT(set.n, 3);
    EXPECT(set.n == 3 && set.results[0].fits && set.results[0].layout.offload == 1.0 && !set.results[1].fits,
           "ranking: first offload %g fits %d", set.n ? set.results[0].layout.offload : -1.0,
           set.n ? set.results[0].fits : -1);
    plan_set_free(&set);
    f.offload_fraction = 0.5;
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT(set.n == 1 && set.results[0].layout.offload == 0.5, "fraction 0.5: %d layouts", set.n);
    plan_set_free(&set);
    f.offload = 0;
    s.offload = 0;
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT(set.n == 1 && set.results[0].layout.offload == 0.0 && !set.results[0].fits, "no offload: %d", set.n);
    plan_set_free(&set);
}

int main(void) {
    test_7_5b_fits_only_offloaded();
    test_enumeration();
    if (test_failures_) {
        fprintf(stderr, "%d failure(s)\n", test_failures_);
        return 1;
    }
    printf("plan offload tests passed\n");
    return 0;
}
