// tests/plan/test_plan.c: the formulas of `megac plan` against known numbers: the seed's
// data-parallel all-reduce and ZeRO figures, megac's tensor-parallel counts
// (tests/parallel/tp_traffic.py's formula), GPT-2's parameter count, Megatron's FLOPs,
// the bubble, activation slots per schedule, which groups cross nodes, the enumeration and
// its ranking, activation recomputation, interleaved 1F1B, hardware profile files, and the
// memory-bound kernels' bytes.
#include "plan/plan_enum.h"
#include "plan/plan_kernels.h"  // defines: plan_kernels, plan_kernel_bytes
#include "pipeline/pp_interleaved.h"  // defines: pp_ilv_slots
#include "tests/plan/plan_test_spec.h"  // defines: tiny_spec
#include "tests/testing.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

// The seed's figures: 14 GB of fp16 gradients all-reduced moves 2 x 14 (N-1)/N GB per GPU;
// ZeRO (Rajbhandari et al.): 7.5B parameters, mixed-precision Adam (2 + 2 + 12 bytes),
// 64 data-parallel ranks: 120 GB per GPU, 31.4 GB with optimizer-state sharding.
static void test_seed_figures(void) {
    const int n[4] = {4, 8, 16, 64};
    const double want[4] = {21.0, 24.5, 26.25, 27.5625};
    for (int i = 0; i < 4; i++) EXPECT_NEAR(plan_all_reduce_bytes(14e9, n[i]) / 1e9, want[i], 1e-12);
    EXPECT_NEAR(plan_all_reduce_bytes(14e9, 1), 0.0, 0);
    double b[3];
    plan_zero_state_bytes(7.5e9, 2, 2, 12, 64, 0, b);
    EXPECT_NEAR((b[0] + b[1] + b[2]) / 1e9, 120.0, 1e-12);
    plan_zero_state_bytes(7.5e9, 2, 2, 12, 64, 1, b);
    EXPECT_NEAR((b[0] + b[1] + b[2]) / 1e9, 31.40625, 1e-12);
    printf("DP all-reduce of 14 GB at 4/8/16/64 GPUs: %.4g %.4g %.4g %.4g GB; ZeRO 7.5B/64: 120 -> %.1f GB\n",
           plan_all_reduce_bytes(14e9, 4) / 1e9, plan_all_reduce_bytes(14e9, 8) / 1e9,
           plan_all_reduce_bytes(14e9, 16) / 1e9, plan_all_reduce_bytes(14e9, 64) / 1e9,
           (b[0] + b[1] + b[2]) / 1e9);
}

// tp_traffic.py's formula: per micro-batch 4L + 4 all-reduces (B T C each but the two
// cross-entropy ones of B T and 2 B T), each 2 (tp-1)/tp of the buffer.
static void test_tp_counts(void) {
    PlanSpec s = tiny_spec(2, 8);
    PlanLayout l = {2, 1, 1, 2, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0};
    char err[400];
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    PlanStage st;
    plan_stage_counts(&s, &l, 0, 4, &st);
    long long m = 4, L = 2, C = 64, N = 2 * 32;
    long long floats = m * ((4 * L + 2) * N * C + N + 2 * N);
    EXPECT_EQ_INT(st.traffic[PLAN_G_TP].calls[COMM_ALL_REDUCE], m * (4 * L + 4));
    EXPECT_EQ_INT(st.traffic[PLAN_G_TP].bytes[COMM_ALL_REDUCE], floats * 4 * 2 * 1 / 2);
    // GPT-2 parameter count on one rank of one stage: Vp C + T C + L (12 C^2 + 13 C) + 2 C
    PlanLayout one = {1, 1, 1, 2, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0};
    s.world_size = 1;
    plan_stage_counts(&s, &one, 0, 4, &st);
    EXPECT_EQ_INT(st.n_floats, 384 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    EXPECT_EQ_INT(st.mem[PLAN_MEM_PARAMS], 4 * st.n_floats);
    EXPECT_EQ_INT(st.mem[PLAN_MEM_OPTIM], 8 * st.n_alloc);
}

// Megatron's FLOPs split over stages and TP add up to gpt_flops_per_iteration; the bubble;
// GPipe holds m activation slots, 1F1B at most PP - stage.
static void test_flops_bubble_slots(void) {
    PlanSpec s = tiny_spec(16, 32);
    s.model.num_layers = 4;
    PlanLayout l = {2, 4, 2, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0};
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    PlanResult r;
    plan_predict(&s, &l, &hw, &r);
    EXPECT_EQ_INT(r.n_micro, 16);
    double sum = 0.0;
    for (int st = 0; st < 4; st++) sum += r.stages[st].flops_mb * l.tp * r.n_micro * l.dp;
    EXPECT_NEAR(sum, r.model_flops, 1e-12);
    // stages of unequal time (the last has the output layer, the others one layer each):
    // more idle than (PP-1)/(m+PP-1), the slowest stage the least
    EXPECT(r.bubble > 3.0 / 19.0, "%g", r.bubble);
    for (int st = 0; st < 3; st++) EXPECT(r.stages[st].bubble > r.stages[3].bubble, "stage %d", st);
    for (int st = 0; st < 4; st++) EXPECT_EQ_INT(r.stages[st].n_slots, 4 - st);
    double act_1f1b = r.stages[1].mem[PLAN_MEM_ACTIVATIONS] / 3;
    plan_result_free(&r);
    l.gpipe = 1;
    plan_predict(&s, &l, &hw, &r);
    EXPECT_EQ_INT(r.stages[1].n_slots, 16);
    EXPECT_NEAR(r.stages[1].mem[PLAN_MEM_ACTIVATIONS], 16 * act_1f1b, 1e-15);
    // nodes of 8: TP [0,1] and DP [0,2] inside a node, PP [0,4,8,12] across two
    EXPECT(!r.crosses[PLAN_G_TP] && !r.crosses[PLAN_G_DP] && r.crosses[PLAN_G_PP], "crossing");
    plan_result_free(&r);
    // nearly equal stages (two wide layers each, long sequences, a small vocabulary):
    // (PP-1)/(m+PP-1)
    s.model.num_layers = 8;
    s.model.seq_length = s.model.max_position_embeddings = 2048;
    s.model.hidden_size = 1024;
    s.model.ffn_hidden_size = 4096;
    l.gpipe = 0;
    plan_predict(&s, &l, &hw, &r);
    EXPECT_NEAR(r.bubble, 3.0 / 19.0, 0.01);
    plan_result_free(&r);
}

// Activation recomputation: full (uniform) re-runs every layer's forward: the hardware
// FLOPs are the model FLOPs plus a third of the layers' share (4/3 of the layers), the MFU
// stays on model FLOPs, the slots shrink to one output per chunk; block with k layers
// re-runs k per stage; selective drops the probabilities from the slots.
static void test_recompute(void) {
    PlanSpec s = tiny_spec(4, 8);
    s.model.num_layers = 4;
    PlanLayout l = {2, 2, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0};
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    PlanResult base, full, block, sel;
    plan_predict(&s, &l, &hw, &base);
    GPTConfig layers = s.model;
    double layer_flops = gpt_flops_per_iteration(&layers, 0, s.global_batch);  // no output layer
    s.model.recompute = GPT_RECOMPUTE_FULL;
    s.model.recompute_num_layers = 2;
    plan_predict(&s, &l, &hw, &full);
    EXPECT_NEAR(full.model_flops, base.model_flops, 0);
    EXPECT_NEAR(full.hardware_flops, base.model_flops + layer_flops / 3, 1e-12 * base.model_flops);
    EXPECT_NEAR(full.mfu * full.t_step, base.mfu * base.t_step, 1e-12);  // same model FLOPs
    EXPECT(full.t_step > base.t_step, "%g vs %g", full.t_step, base.t_step);
    for (int st = 0; st < 2; st++) {
        EXPECT_EQ_INT(full.stages[st].n_recomputed, 2);
        EXPECT_EQ_INT(full.stages[st].n_chunk_outputs, 1);
        EXPECT(full.stages[st].mem[PLAN_MEM_ACTIVATIONS] < base.stages[st].mem[PLAN_MEM_ACTIVATIONS], "stage %d", st);
        EXPECT(full.stages[st].mem[PLAN_MEM_WORKSPACE] > base.stages[st].mem[PLAN_MEM_WORKSPACE], "stage %d", st);
        // the recomputed forward repeats its 2 all-reduces per layer and micro-batch (TP, no SP)
        uint64_t extra = full.stages[st].traffic[PLAN_G_TP].calls[COMM_ALL_REDUCE] -
                         base.stages[st].traffic[PLAN_G_TP].calls[COMM_ALL_REDUCE];
        EXPECT_EQ_INT((int)extra, 2 * 2 * full.n_micro);
    }
    s.model.recompute_block = 1;
    s.model.recompute_num_layers = 1;
    plan_predict(&s, &l, &hw, &block);
    EXPECT_NEAR(block.hardware_flops, base.model_flops + layer_flops / 6, 1e-12 * base.model_flops);
    EXPECT_EQ_INT(block.stages[0].n_recomputed, 1);
    s.model.recompute = GPT_RECOMPUTE_SELECTIVE;
    plan_predict(&s, &l, &hw, &sel);
    EXPECT(sel.stages[0].mem[PLAN_MEM_ACTIVATIONS] < base.stages[0].mem[PLAN_MEM_ACTIVATIONS], "selective");
    EXPECT(sel.hardware_flops > base.model_flops, "selective re-runs the attention forward");
    plan_result_free(&base);
    plan_result_free(&full);
    plan_result_free(&block);
    plan_result_free(&sel);
}

// World 4, micro-batch 1, global batch 4, L = 4, NH = 4: (TP, PP, DP) x variants =
// (1,1,4) x2 ZeRO + (1,2,2) x2 sched x2 ZeRO + (1,4,1) x2 sched + (2,1,2) x2 SP x2 ZeRO +
// (2,2,1) x2 sched x2 SP + (4,1,1) x2 SP = 18 layouts, ranked.
static void test_enumeration(void) {
    PlanSpec s = tiny_spec(4, 4);
    s.model.num_layers = 4;
    PlanFilter f = {0, 0, 1, -1, -1, -1, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    PlanHardware hw;
    plan_hw_builtin("h200", &hw);
    PlanSet set;
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT_EQ_INT(set.n, 18);
    for (int i = 1; i < set.n; i++) {
        const PlanResult *a = &set.results[i - 1], *b = &set.results[i];
        EXPECT(a->fits > b->fits || (a->fits == b->fits && a->t_step <= b->t_step), "rank %d", i);
    }
    plan_set_free(&set);
    f.tp = 4;
    f.zero1 = 1;  // DP = 1 with TP 4: no layout, with a reason
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT_EQ_INT(set.n, 0);
    EXPECT(strstr(set.reason, "DP > 1") != NULL, "%s", set.reason);
    plan_set_free(&set);
}

// Interleaved 1F1B, PP 2 x v 2, L 8, m 4 (world 4: DP 2, micro-batch 2, global batch 16),
// fp32, no recomputation. Hand-computed: one layer's activation slot share (N = 64, C = 64,
// F = 256, B 2 x NH 4 x T 32 probabilities) = 4 x NC + 4 x N + 3 NC + B NH T T + NC + 2 N F
// floats x 4 bytes = 295936; a slot of a 2-layer chunk that is not the model's last adds
// tokens, targets and x0: 2 x 256 + 16384 + 2 x 295936 = 608768 bytes. Rank 0 runs
// W = (p - 1) x 2 + (v - 1) p = 4 warm-up forwards (chunk 0 micro 0, 1, chunk 1 micro 0, 1,
// chunk 0 micro 2) and the fifth before its first backward: at least 3 + 2 chunk slots,
// 2.5 micro-batches of the whole stage, more than PP = 2 (Megatron's analysis).
static void test_interleaved(void) {
    PlanSpec s = tiny_spec(4, 16);
    s.model.num_layers = 8;
    PlanLayout l = {1, 2, 2, 2, 0, 0, 0, 0, 2, 1, 0, 1, 0, 0}, plain = l;
    plain.vpp = 1;
    char err[400];
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    PlanStage st, one;
    for (int r = 0; r < 2; r++) {
        plan_stage_counts(&s, &l, r, 4, &st);
        plan_stage_counts(&s, &plain, r, 4, &one);
        EXPECT_EQ_INT(st.n_layers, 4);
        EXPECT_EQ_INT(st.layer0, 2 * r);
        // every chunk sends forward but the model's last, backward but its first: 2v - 1 per
        // micro-batch (1F1B: 1) of (N, C) fp32
        EXPECT_EQ_INT(st.traffic[PLAN_G_PP].bytes[COMM_SEND], 3 * 4 * 64 * 64 * 4);
        EXPECT_EQ_INT(st.traffic[PLAN_G_PP].calls[COMM_RECV], 3 * 4);
        EXPECT_EQ_INT(one.traffic[PLAN_G_PP].bytes[COMM_SEND], 1 * 4 * 64 * 64 * 4);
        // the same weights and gradient traffic, the same (shared, one chunk's) workspace
        EXPECT_EQ_INT(st.traffic[PLAN_G_EMB].bytes[COMM_ALL_REDUCE],
                      one.traffic[PLAN_G_EMB].bytes[COMM_ALL_REDUCE]);
        EXPECT_NEAR(st.mem[PLAN_MEM_WORKSPACE], one.mem[PLAN_MEM_WORKSPACE], 0);
        EXPECT_NEAR(st.model_flops_mb, one.model_flops_mb, 1e-12 * one.model_flops_mb);
    }
    plan_stage_counts(&s, &l, 0, 4, &st);
    plan_stage_counts(&s, &plain, 0, 4, &one);
    int slots[2];
    pp_ilv_slots(2, 2, 4, 0, slots);
    EXPECT(slots[0] >= 3 && slots[1] >= 2, "slots %d %d", slots[0], slots[1]);
    EXPECT((slots[0] + slots[1]) / 2.0 > 2.0, "stage 0 holds more than PP micro-batches' worth");
    EXPECT_EQ_INT(st.n_slots, slots[0] + slots[1]);
    EXPECT_NEAR(st.mem[PLAN_MEM_ACTIVATIONS], 608768.0 * (slots[0] + slots[1]), 0);
    EXPECT_EQ_INT(one.n_slots, 2);  // 1F1B: PP - stage micro-batches of 4 layers
    EXPECT_NEAR(one.mem[PLAN_MEM_ACTIVATIONS], 2.0 * (2 * 256 + 16384 + 4 * 295936), 0);
    printf("interleaved PP 2 x v 2, m 4: stage 0 holds %d + %d chunk slots (%.2f micro-batches; "
           "1F1B: 2), %.0f vs %.0f activation bytes\n", slots[0], slots[1], (slots[0] + slots[1]) / 2.0,
           st.mem[PLAN_MEM_ACTIVATIONS], one.mem[PLAN_MEM_ACTIVATIONS]);
    // the step: sum_s t_s / v + (m - 1/v) max_s t_s; bubble = idle share of all stages
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    PlanResult r;
    plan_predict(&s, &l, &hw, &r);
    double t0 = r.stages[0].t_mb, t1 = r.stages[1].t_mb, mx = t0 > t1 ? t0 : t1;
    double pipe = (t0 + t1) / 2 + (4 - 0.5) * mx;
    EXPECT_NEAR(r.bubble, 1.0 - 4 * (t0 + t1) / (2 * pipe), 1e-12);
    plan_result_free(&r);
    // nearly equal stages (wide layers, long sequences): (PP - 1) / (v m + PP - 1)
    PlanSpec big = s;
    big.model.seq_length = big.model.max_position_embeddings = 2048;
    big.model.hidden_size = 1024;
    big.model.ffn_hidden_size = 4096;
    plan_predict(&big, &l, &hw, &r);
    EXPECT_NEAR(r.bubble, 1.0 / 9.0, 0.01);
    plan_result_free(&r);
    // megac train's refusals
    PlanLayout bad = l;
    bad.gpipe = 1;
    EXPECT(plan_layout_check(&s, &bad, err, sizeof err) != 0 && strstr(err, "gpipe"), "%s", err);
    PlanLayout z2 = l;  // ZeRO-2/3: each chunk's own units, as any layout's (train takes them)
    z2.zero1 = 1, z2.zero = 2;
    char lerr[512] = "";
    int lrc = plan_layout_check(&s, &l, lerr, sizeof lerr);
    err[0] = 0;
    EXPECT(plan_layout_check(&s, &z2, err, sizeof err) == lrc && !strcmp(err, lerr), "ZeRO-2, v 2: %s", err);
    bad = l, bad.vpp = 3;  // 8 layers in 2 x 3 chunks
    EXPECT(plan_layout_check(&s, &bad, err, sizeof err) != 0 && strstr(err, "--num-layers 8"), "%s", err);
    bad = l, bad.micro_batch = 8;  // m = 1, not a multiple of PP
    EXPECT(plan_layout_check(&s, &bad, err, sizeof err) != 0 && strstr(err, "multiple"), "%s", err);
    // uneven first rank: v must split each rank's layers (3 | 5 cannot, 2 | 6 can: then the
    // layout fares as the even one)
    PlanSpec uneven = s;
    uneven.model.first_stage_layers = 3;
    EXPECT(plan_layout_check(&uneven, &l, err, sizeof err) != 0 &&
           strstr(err, "does not divide the 3 layers of pipeline rank 0"), "%s", err);
    uneven.model.first_stage_layers = 2;
    char even_err[512] = "";
    int even_rc = plan_layout_check(&s, &l, even_err, sizeof even_err);
    err[0] = 0;
    EXPECT(plan_layout_check(&uneven, &l, err, sizeof err) == even_rc && !strcmp(err, even_err),
           "first 2 of 8: %s (even: %s)", err, even_err);
    // enumeration with v fixed: PP 2 and 4 layouts only, all interleaved
    PlanFilter f = {0, 0, 2, -1, -1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0};
    PlanSet set;
    plan_enumerate(&s, &f, &hw, 0, &set);
    EXPECT(set.n > 0, "%s", set.reason);
    for (int i = 0; i < set.n; i++)
        EXPECT(set.results[i].layout.vpp == 2 && set.results[i].layout.pp >= 2 && !set.results[i].layout.gpipe,
               "layout %d", i);
    plan_set_free(&set);
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void test_hardware_files(void) {
    PlanHardware h100, hw;
    char err[512], path[] = "/tmp/megac_plan_hwXXXXXX";
    EXPECT(plan_hw_builtin("h100", &h100) == 0 && plan_hw_builtin("a100", &hw) != 0, "built-ins");
    EXPECT_NEAR(plan_hw_peak_flops(&h100, PLAN_BF16), 989.5e12, 1e-12);
    EXPECT_NEAR(plan_hw_peak_flops(&h100, PLAN_FP16), 989.5e12, 1e-12);
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp");
    close(fd);
    write_file(path, "# a cluster\nname = my cluster\ngpus_per_node = 4\nmemory_gb = 40  # A100\n"
               "peak_tflops_bf16 = 312\n\ninter_node_gbps = 25\n");
    EXPECT(plan_hw_load(path, &h100, &hw, err, sizeof err) == 0, "%s", err);
    EXPECT(!strcmp(hw.name, "my cluster") && hw.gpus_per_node == 4, "%s %d", hw.name, hw.gpus_per_node);
    EXPECT_NEAR(hw.memory_gb, 40, 0);
    EXPECT_NEAR(hw.inter_gbps, 25, 0);
    EXPECT_NEAR(hw.intra_gbps, 450, 0);  // kept from the base
    FILE *f = fopen(path, "w");  // round trip through plan_hw_write
    plan_hw_write(f, &hw);
    fclose(f);
    PlanHardware back;
    EXPECT(plan_hw_load(path, &h100, &back, err, sizeof err) == 0, "%s", err);
    EXPECT(!memcmp(&back.peak_tflops, &hw.peak_tflops, sizeof hw.peak_tflops) && back.gpus_per_node == 4, "round trip");
    const char *bad[][2] = {{"gpus_per_node = 8\nnvlink = 900\n", "line 2: unknown key 'nvlink'"},
                            {"memory_gb = lots\n", "line 1: 'lots' is not a number"},
                            {"memory_gb 80\n", "line 1: expected key = value"},
                            {"gemm_efficiency = 1.5\n", "gemm_efficiency must be in (0, 1]"},
                            {"intra_node_gbps = 0\n", "intra_node_gbps must be > 0"}};
    for (int i = 0; i < 5; i++) {
        write_file(path, bad[i][0]);
        EXPECT(plan_hw_load(path, &h100, &hw, err, sizeof err) != 0 && strstr(err, bad[i][1]),
               "'%s' gave '%s'", bad[i][0], err);
    }
    unlink(path);
    EXPECT(plan_hw_load(path, &h100, &hw, err, sizeof err) != 0 && strstr(err, "not a readable file"), "%s", err);
}

// The memory-bound kernels (plan/plan_kernels.c) of the tiny model on one rank, fp32, B 2 x
// T 32 = 64 rows, C 64, F 256, Vp 384, materialised attention (4 heads x T = 128 scores per
// row), qkv 192 columns; bytes = rows x (columns x elements x 4 + statistics). Per layer
// forward: ln1 33280, softmax 65536, residual + ln2 66048, GELU aux 65536, residual 49152;
// backward: fcproj bias 16384, DGELU aux 65536, fc bias 65536, ln2 66048, residual 49152,
// proj bias 16384, softmax 98304, qkv bias 49152, ln1 66048, residual 49152. Embedding
// 32768 + 16384 + 49152 + 16384; final norm 33280 + 66048, cross-entropy at one vocabulary
// shard 196864 (the one-pass classifier: the logits read and d(logits) written, the loss);
// at TP 2 (Vp 512: 256 columns per rank) 66048 + 132096 (statistics, then loss and
// d(logits) with the loss from the row statistics). The step time adds them at hbm_gbps;
// flash attention drops the softmax rows.
static void test_kernel_bytes(void) {
    PlanSpec s = tiny_spec(1, 8);
    PlanLayout l = {1, 1, 1, 2, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0};
    double layer = 279552.0 + 541696.0, ends = 114688.0 + 99328.0 + 196864.0;
    EXPECT_NEAR(plan_kernel_bytes(&s, &l, 2, 0, 1, 1), 2 * layer + ends, 0);
    EXPECT_NEAR(plan_kernel_bytes(&s, &l, 2, 1, 0, 1), 2 * layer + 279552.0 + 99328.0 + 196864.0, 0);
    PlanKernel k[PLAN_KERNELS_MAX];
    int n = plan_kernels(&s, &l, k);
    EXPECT_EQ_INT(n, 22);  // no rope, SwiGLU, ReLU^2 or RMSNorm rows; one cross-entropy row
    EXPECT(!strcmp(k[20].name, "cross-entropy fused, one pass") && k[20].bytes == 196864.0,
           "%s %g", k[20].name, k[20].bytes);
    PlanLayout l2 = l;
    l2.tp = 2;
    PlanKernel k2[PLAN_KERNELS_MAX];
    EXPECT_EQ_INT(plan_kernels(&s, &l2, k2), 23);  // two cross-entropy passes at TP 2
    EXPECT(!strcmp(k2[20].name, "cross-entropy statistics") && k2[20].bytes == 66048.0 &&
           !strcmp(k2[21].name, "cross-entropy loss + dlogits") && k2[21].bytes == 132096.0,
           "%s %g, %s %g", k2[20].name, k2[20].bytes, k2[21].name, k2[21].bytes);
    EXPECT(!strcmp(k[2].name, "residual add + ln2 forward") && k[2].bytes == 66048.0, "%s %g",
           k[2].name, k[2].bytes);
    PlanHardware hw;
    plan_hw_builtin("h200", &hw);
    PlanResult r;
    plan_predict(&s, &l, &hw, &r);
    const PlanStage *st = &r.stages[0];
    EXPECT_NEAR(st->kernel_bytes_mb, 2 * layer + ends, 0);
    double want = st->flops_mb / (plan_hw_peak_flops(&hw, PLAN_FP32) * hw.gemm_efficiency) +
                  st->kernel_bytes_mb / (hw.hbm_gbps * 1e9);
    EXPECT_NEAR(st->t_mb, want, 1e-12 * want);
    plan_result_free(&r);
    s.model.use_flash_attn = 1;
    EXPECT_NEAR(plan_kernel_bytes(&s, &l, 2, 0, 1, 1), 2 * (layer - 65536.0 - 98304.0) + ends, 0);
    printf("memory-bound kernels of the tiny model, one micro-batch: %.0f bytes (%.0f flash)\n",
           2 * layer + ends, 2 * (layer - 65536.0 - 98304.0) + ends);
}

// Context parallelism (layers/cp_attention.c): the ring sends and receives the rank's packed
// K/V rows (N, 2 G_tp hs) ((2L) (P - 1) + L P) m times (G = NH: 2/3 of the qkv rows; G = NH/2:
// a third), the backward's dK/dV partials as two key halves (2 L P m messages); all_gather
// gathers the (N, 3C/tp) qkv rows 2 L m and reduce-scatters L m times; a2a sends each peer its
// rows of the peer's NH/P heads (q | k | v, out) 6 L m times; the activations of a slot halve
// at CP 2; gradients pad and shard over DP x CP; CP needs flash attention and 2P | T.
static void test_context_parallel(void) {
    PlanSpec s = tiny_spec(4, 8);
    s.model.use_flash_attn = 1;
    PlanLayout l = {1, 1, 2, 2, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0}, one = {1, 1, 2, 2, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0};
    char err[400];
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    PlanStage st, st1;
    long long m = 2, L = 2, P = 2, n = 2 * 32 / 2 * 3 * 64, e = 4;  // n: elements per exchange
    long long nkv = 2 * 32 / 2 * 2 * 64;                              // the ring's, G = NH
    plan_stage_counts(&s, &l, 0, (int)m, &st);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].calls[COMM_SEND], (2 * L * (P - 1) + 2 * L * P) * m);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].bytes[COMM_RECV], (2 * L * (P - 1) + L * P) * m * nkv * e);
    s.model.num_query_groups = 2;  // GQA: 2 of the 4 heads' K/V travel
    plan_stage_counts(&s, &l, 0, (int)m, &st1);
    EXPECT_EQ_INT(st1.traffic[PLAN_G_CP].bytes[COMM_SEND], (2 * L * (P - 1) + L * P) * m * nkv / 2 * e);
    s.model.num_query_groups = 0;
    EXPECT_EQ_INT(st.shard_len * 4, st.n_alloc);  // ZeRO-1 over DP 2 x CP 2
    s.world_size = 2;
    plan_stage_counts(&s, &one, 0, (int)m, &st1);
    EXPECT(fabs(st.mem[PLAN_MEM_ACTIVATIONS] / st1.mem[PLAN_MEM_ACTIVATIONS] - 0.5) < 0.02, "activations x %g",
           st.mem[PLAN_MEM_ACTIVATIONS] / st1.mem[PLAN_MEM_ACTIVATIONS]);
    EXPECT_EQ_INT(st1.traffic[PLAN_G_CP].bytes[COMM_SEND], 0);
    s.world_size = 4;
    l.cp_comm = CP_COMM_ALL_GATHER;
    plan_stage_counts(&s, &l, 0, (int)m, &st);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].calls[COMM_ALL_GATHER], 2 * L * m);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].bytes[COMM_REDUCE_SCATTER], L * m * P * n * e / 2);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].calls[COMM_SEND], 0);
    l.cp_comm = CP_COMM_A2A;  // Ulysses: all-to-alls of (N, NH/P hs) parts: 3 + 1 forward, 3 + 1 + 1 + 3 back
    plan_stage_counts(&s, &l, 0, (int)m, &st);
    long long u = n / 3 / P;
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].calls[COMM_ALL_TO_ALL], 6 * L * m);
    EXPECT_EQ_INT(st.traffic[PLAN_G_CP].bytes[COMM_ALL_TO_ALL], 12 * L * m * (P - 1) * u * e);
    l.cp_comm = CP_COMM_ALL_GATHER;
    s.model.use_flash_attn = 0;
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) != 0 && strstr(err, "flash"), "refused: %s", err);
}

// plan_group_crosses (closed form, no walk over the ranks) against walking every group's
// members (pgrid_group_members), every layout (CP included) of worlds up to 48 on nodes of 1
// to W + 1.
static void test_crossing_closed_form(void) {
    const PGridKind kinds[6] = {PGRID_TP, PGRID_DP, PGRID_PP, PGRID_EMBEDDING, PGRID_CP, PGRID_DP_CP};
    int checked = 0, members[64];
    for (int w = 1; w <= 48; w++)
        for (int tp = 1; tp <= w; tp++)
            for (int pp = 1; tp * pp <= w; pp++)
              for (int cp = 1; tp * pp * cp <= w; cp++) {
                if (w % (tp * pp * cp)) continue;
                PGridDims d = {.world_size = w, .tp = tp, .pp = pp, .dp = w / (tp * pp * cp)};
                for (int g = 1; g <= w + 1; g++)
                    for (int k = 0; k < 6; k++) {
                        int size = pgrid_group_size(&d, kinds[k]), walked = 0;
                        for (int i = 0; i < pgrid_num_groups(&d, kinds[k]); i++) {
                            pgrid_group_members(&d, kinds[k], i, members);
                            for (int j = 1; j < size; j++) walked |= members[j] / g != members[0] / g;
                        }
                        EXPECT(plan_group_crosses(&d, kinds[k], g) == walked, "W %d TP %d CP %d PP %d G %d kind %d",
                               w, tp, cp, pp, g, (int)kinds[k]);
                        checked++;
                    }
            }
    printf("which groups cross nodes: the closed form agrees with the walk in %d cases\n", checked);
}

// The plan's interleaved slots (plan_ilv_slots: every rank from one simulation, m capped at
// 2 PP, with and without a memo) against pp_ilv_slots and pp_ilv_plan at the full m, rank by
// rank: PP 2 to 10, v 2 to 6, m up to 6 PP.
static void test_interleaved_slots_cap(void) {
    int checked = 0, act[PP_ILV_MAX_CHUNKS], grad[PP_ILV_MAX_CHUNKS], want[PP_ILV_MAX_CHUNKS];
    PlanMemo memo;
    plan_memo_init(&memo);
    for (int p = 2; p <= 10; p++)
        for (int v = 2; v <= 6; v++)
            for (int m = p; m <= 6 * p; m += p)
                for (int r = 0; r < p; r++) {
                    PPIlvPlan pl;
                    pp_ilv_slots(p, v, m, r, want);
                    pp_ilv_plan(&pl, p, v, m, r, 0);
                    for (int pass = 0; pass < 2; pass++) {
                        plan_ilv_slots(pass ? &memo : NULL, p, v, m, r, act, grad);
                        for (int c = 0; c < v; c++) {
                            EXPECT(act[c] == want[c] && grad[c] == pl.grad_slots[c],
                                   "p %d v %d m %d rank %d chunk %d: slots %d / %d, gradients %d / %d", p, v, m, r,
                                   c, act[c], want[c], grad[c], pl.grad_slots[c]);
                            checked++;
                        }
                    }
                    pp_ilv_plan_free(&pl);
                }
    plan_memo_free(&memo);
    printf("interleaved slots from one capped simulation: %d chunk counts agree\n", checked);
}

int main(void) {
    test_seed_figures();
    test_tp_counts();
    test_flops_bubble_slots();
    test_recompute();
    test_enumeration();
    test_interleaved();
    test_hardware_files();
    test_kernel_bytes();
    test_context_parallel();
    test_crossing_closed_form();
    test_interleaved_slots_cap();
    return test_result("test_plan");
}
